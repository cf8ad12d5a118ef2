//! `sluice cp [-q] [-r] [-p] SRC DST`: local ↔ NFS, NFS → NFS (and local → local).
//!
//! Like cp(1): if DST is an existing directory the copy goes into it under SRC's name;
//! otherwise DST is the new name. `-r` copies trees (directories, regular files, symbolic
//! links as links); `-p` keeps mode and access/modification times. Files go through the
//! pipelined [`sluice_client::File`] reader and writer, so a copy keeps several full-size READs or
//! UNSTABLE WRITEs in flight and ends with a COMMIT that checks the write verifier.
//!
//! A progress bar (bytes, rate, ETA) is drawn on stderr when it is a terminal, unless `-q`.
//! For a tree the total is not known in advance: bytes and rate only.
//!
//! ## Trees: many files at once
//! A small file costs round trips, not bytes: CREATE, one FILE_SYNC WRITE (a file that fits in
//! one WRITE needs no COMMIT), SETATTR with `-p`. One file after another, a tree of 10,000 such
//! files over a 1 ms link spends 20 to 30 s waiting and moves 40 MB. So `-r` copies up to
//! `--jobs` files at once, each in its own task, and their calls share the connection's slots:
//!
//! ```text
//!   walker (one task)                          file tasks (at most --jobs, and a byte budget)
//!   list a directory, one READDIRPLUS ──┬──▶  CREATE ─▶ WRITE ─▶ (COMMIT) ─▶ (SETATTR)
//!   reply (or local readdir) at a time  ├──▶  CREATE ─▶ WRITE ─▶ ...
//!   subdirectory: MKDIR now, list later └──▶  READ ─▶ local write ...        (NFS source)
//! ```
//!
//! * A directory is created before any of its entries is queued, so a task never meets a
//!   missing parent; its subdirectories wait on a stack and are listed once its own listing ends
//!   (a depth-first walk that holds one open listing, not one per level).
//! * Listings stream: the entries of each reply are queued as it arrives, so the first files
//!   are on the wire while a large directory is still being listed.
//! * Bounds: `--jobs` tasks (default: the transport's slots, see [`jobs_default`]), and a budget
//!   of [`TREE_BYTES_IN_FLIGHT_MAX`] charged by file size up to [`FILE_CHARGE_BYTES_MAX`]: a file
//!   that large keeps the link busy with its own pipelined READs or WRITEs, so siblings would add
//!   memory, not speed. `--jobs 1` is the one-file-at-a-time copy, for comparison.
//! * `-p` on directories is applied after every file is done, deepest first (a directory's
//!   mtime changes whenever an entry is created in it).
//! * The first failure stops the walk; the files in flight finish, and every failure is reported
//!   with its path (like before: the copy stops at the first error, it does not skip and go on).

use super::{at, CommonArgs, Session};
use crate::sink::LocalFile;
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use sluice_client::namespace::{
    Attr, CreateMode, DirStream, Error, FileType, Handle, Namespace, OpenFile, SetAttr, SetTime,
    Status, Time,
};
use sluice_client::url::NfsUrl;
use std::future::Future;
use std::io::IsTerminal;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use tokio::io::AsyncReadExt;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

#[derive(Debug, Clone, Args)]
pub struct CpArgs {
    /// No progress bar.
    #[arg(short = 'q', long)]
    pub quiet: bool,
    /// Copy directories recursively.
    #[arg(short = 'r', short_alias = 'R')]
    pub recursive: bool,
    /// Keep mode and access/modification times.
    #[arg(short = 'p')]
    pub preserve: bool,
    /// Files of a tree copied at once (-r). Default: the transport's slots (64 per
    /// connection); 1 copies one file after another.
    #[arg(short = 'j', long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=JOBS_MAX as i64))]
    pub jobs: Option<u32>,
    /// Source: nfs:// URL or local path.
    pub src: String,
    /// Destination: nfs:// URL or local path.
    pub dst: String,
    #[command(flatten)]
    pub common: CommonArgs,
}

pub(crate) async fn run(a: CpArgs) -> Result<(), String> {
    let mut s = Session::new(&a.common);
    let r = copy(&a, &mut s).await;
    s.finish(r).await
}

/// What the copy reads: a file, directory or link on either side.
#[derive(Clone)]
#[allow(clippy::large_enum_variant)] // a handful live at once, one per tree level
enum Node {
    Local(PathBuf),
    Nfs {
        ns: Arc<dyn Namespace>,
        fh: Handle,
        attr: Attr,
        url: NfsUrl,
    },
}

/// Where the copy creates things: a directory on either side.
#[derive(Clone)]
enum Dir {
    Local(PathBuf),
    Nfs {
        ns: Arc<dyn Namespace>,
        fh: Handle,
        url: NfsUrl,
    },
}

/// The facts about a node the copy needs, from either side.
#[derive(Debug, Clone, Copy)]
struct Meta {
    kind: Kind,
    size: u64,
    mode: u32,
    atime: Time,
    mtime: Time,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    File,
    Dir,
    Symlink,
    Other,
}

struct Ctx {
    preserve: bool,
    bar: ProgressBar,
}

/// Most files of a tree in flight. Each holds an open local file (either side) and a task; 256
/// stays far below the usual 1,024 open-file limit and is 4 connections' worth of slots, past
/// which more files only queue in the call table.
pub const JOBS_MAX: usize = 256;
/// The byte budget of a tree copy's files in flight: 64 MiB, four large files at their full
/// charge, or every job at once when the files are small (the case the jobs are for).
pub const TREE_BYTES_IN_FLIGHT_MAX: u64 = 64 << 20;
/// The most one file is charged against [`TREE_BYTES_IN_FLIGHT_MAX`]: at 16 MiB a file is past
/// the write window and the first readahead windows, and keeps a link busy by itself.
pub const FILE_CHARGE_BYTES_MAX: u64 = 16 << 20;
/// The budget's unit (a semaphore counts permits in `u32`): 64 KiB, the server's chunk size.
const CHARGE_UNIT_BYTES: u64 = 64 << 10;

async fn copy(a: &CpArgs, s: &mut Session) -> Result<(), String> {
    let src = open_node(s, &a.src).await?;
    let src_meta = src.meta().await?;
    if src_meta.kind == Kind::Dir && !a.recursive {
        return Err(format!(
            "{}: is a directory (not copied; use -r)",
            src.show()
        ));
    }
    let (dir, name) = destination(s, &a.dst, &src).await?;
    let bar = progress_bar(
        a.quiet,
        (src_meta.kind == Kind::File).then_some(src_meta.size),
    );
    let ctx = Arc::new(Ctx {
        preserve: a.preserve,
        bar,
    });
    let r = if src_meta.kind == Kind::Dir {
        // The connections the files go over (the URL may set nconnect), else the command's.
        let jobs_by_slots = match (&src, &dir) {
            (_, Dir::Nfs { ns, .. }) | (Node::Nfs { ns, .. }, _) => ns.slots().clamp(1, JOBS_MAX),
            _ => jobs_default(s.options()),
        };
        let jobs = a.jobs.map_or(jobs_by_slots, |n| n as usize);
        copy_tree(&ctx, src, src_meta, &dir, &name, jobs).await
    } else {
        copy_node(&ctx, &src, src_meta, &dir, &name).await
    };
    ctx.bar.finish_and_clear();
    r
}

/// Files of a tree in flight by default: as many as the transport has slots (calls on the wire
/// per connection times connections), so a tree of small files fills the slots with one call
/// per file, up to [`JOBS_MAX`].
pub fn jobs_default(options: &sluice_client::ClientOptions) -> usize {
    options
        .rpc
        .table
        .max_in_flight
        .saturating_mul(options.nconnect.max(1))
        .clamp(1, JOBS_MAX)
}

/// `-r` of a directory: see "Trees" in the module docs.
async fn copy_tree(
    ctx: &Arc<Ctx>,
    src: Node,
    meta: Meta,
    dir: &Dir,
    name: &str,
    jobs: usize,
) -> Result<(), String> {
    let root = dir.mkdir(name).await?;
    let mut pool = FilePool::new(jobs);
    // Every directory created, in order, for `-p` at the end.
    let mut made = vec![(root.clone(), meta)];
    let walked = walk(ctx, src, root, &mut pool, &mut made).await;
    // Whatever stopped the walk, the files in flight finish and report their own failures.
    match (walked, pool.finish().await) {
        (Ok(()), Ok(())) => {}
        (Err(e), Ok(())) | (Ok(()), Err(e)) => return Err(e),
        (Err(a), Err(b)) => return Err(format!("{a}\n{b}")),
    }
    if ctx.preserve {
        for (d, m) in made.iter().rev() {
            d.set_attrs(*m).await?;
        }
    }
    Ok(())
}

/// Lists the tree under `src` (already created as `root`), creating its directories and
/// handing its files and links to `pool`.
async fn walk(
    ctx: &Arc<Ctx>,
    src: Node,
    root: Dir,
    pool: &mut FilePool,
    made: &mut Vec<(Dir, Meta)>,
) -> Result<(), String> {
    // Directories created and still to be listed: a stack, depth first.
    let mut to_list = vec![(src, root)];
    while let Some((node, to)) = to_list.pop() {
        let mut listing = node.list()?;
        while let Some(page) = listing.next_page().await? {
            for (child_name, child) in page {
                let child_meta = child.meta().await?;
                match child_meta.kind {
                    Kind::Dir => {
                        let sub = to.mkdir(&child_name).await?;
                        made.push((sub.clone(), child_meta));
                        to_list.push((child, sub));
                    }
                    Kind::Other => skip_other(&child),
                    Kind::File | Kind::Symlink => {
                        let (ctx, to) = (ctx.clone(), to.clone());
                        let charge = charge_units(child_meta);
                        pool.spawn(charge, async move {
                            copy_node(&ctx, &child, child_meta, &to, &child_name).await
                        })
                        .await?;
                    }
                }
            }
        }
    }
    Ok(())
}

/// What a file is charged against the tree's byte budget, in [`CHARGE_UNIT_BYTES`].
fn charge_units(meta: Meta) -> u32 {
    let bytes = meta.size.min(FILE_CHARGE_BYTES_MAX);
    bytes.div_ceil(CHARGE_UNIT_BYTES).max(1) as u32
}

/// The file copies of a tree in flight: at most `jobs` tasks and [`TREE_BYTES_IN_FLIGHT_MAX`]
/// of charge. The first failure stops new work; the rest in flight finish and their failures
/// are reported too.
struct FilePool {
    tasks: JoinSet<Result<(), String>>,
    jobs: usize,
    budget: Arc<Semaphore>,
}

impl FilePool {
    fn new(jobs: usize) -> FilePool {
        assert!((1..=JOBS_MAX).contains(&jobs), "jobs {jobs} out of range");
        FilePool {
            tasks: JoinSet::new(),
            jobs,
            budget: Arc::new(Semaphore::new(
                (TREE_BYTES_IN_FLIGHT_MAX / CHARGE_UNIT_BYTES) as usize,
            )),
        }
    }

    /// Starts `copy` once there is room; `Err` if a copy finished so far failed.
    async fn spawn(
        &mut self,
        charge: u32,
        copy: impl Future<Output = Result<(), String>> + Send + 'static,
    ) -> Result<(), String> {
        while self.tasks.len() >= self.jobs {
            self.join_one().await?;
        }
        // Tasks in flight hold the rest of the budget and return it as they end; one that
        // fails is noticed at the next join.
        let permit = self
            .budget
            .clone()
            .acquire_many_owned(charge)
            .await
            .expect("the budget is never closed");
        self.tasks.spawn(async move {
            let r = copy.await;
            drop(permit);
            r
        });
        Ok(())
    }

    /// Waits for every copy in flight.
    async fn finish(mut self) -> Result<(), String> {
        while !self.tasks.is_empty() {
            self.join_one().await?;
        }
        Ok(())
    }

    async fn join_one(&mut self) -> Result<(), String> {
        match self.tasks.join_next().await {
            None | Some(Ok(Ok(()))) => Ok(()),
            Some(first) => {
                let mut errors = vec![task_error(first)];
                while let Some(r) = self.tasks.join_next().await {
                    if !matches!(r, Ok(Ok(()))) {
                        errors.push(task_error(r));
                    }
                }
                Err(errors.join("\n"))
            }
        }
    }
}

fn task_error(r: Result<Result<(), String>, tokio::task::JoinError>) -> String {
    match r {
        Ok(Err(e)) => e,
        Ok(Ok(())) => unreachable!("only failures are reported"),
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(e) => format!("a file copy was cancelled: {e}"),
    }
}

fn skip_other(src: &Node) {
    tracing::warn!(
        "{}: not a regular file, directory or link; skipped",
        src.show()
    );
}

fn progress_bar(quiet: bool, total: Option<u64>) -> ProgressBar {
    if quiet || !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    match total {
        Some(n) => {
            let b = ProgressBar::new(n);
            b.set_style(
                ProgressStyle::with_template(
                    "{bar:30} {bytes}/{total_bytes} {binary_bytes_per_sec} ETA {eta}",
                )
                .expect("valid template"),
            );
            b
        }
        None => {
            let b = ProgressBar::no_length();
            b.set_style(
                ProgressStyle::with_template("{spinner} {bytes} {binary_bytes_per_sec} {msg}")
                    .expect("valid template"),
            );
            b
        }
    }
}

/// Resolves SRC.
async fn open_node(s: &mut Session, arg: &str) -> Result<Node, String> {
    if NfsUrl::is_nfs_url(arg) {
        let url = super::parse_url(arg)?;
        let (ns, rel) = s.resolve(&url).await?;
        let (fh, attr) = ns.lookup_path(&rel).await.map_err(|e| at(&url, e))?;
        Ok(Node::Nfs { ns, fh, attr, url })
    } else {
        let p = PathBuf::from(arg);
        std::fs::symlink_metadata(&p).map_err(|e| format!("{arg}: {e}"))?;
        Ok(Node::Local(p))
    }
}

/// Resolves DST into the directory to create in and the name to create.
async fn destination(s: &mut Session, arg: &str, src: &Node) -> Result<(Dir, String), String> {
    let src_name = src.name();
    if NfsUrl::is_nfs_url(arg) {
        let url = super::parse_url(arg)?;
        let (ns, rel) = s.resolve(&url).await?;
        match ns.lookup_path(&rel).await {
            Ok((fh, attr)) if attr.ftype == FileType::DIR => {
                return Ok((Dir::Nfs { ns, fh, url }, src_name));
            }
            Ok(_) => {}
            Err(e) if e.status() == Some(Status::NOENT) => {}
            Err(e) => return Err(at(&url, e)),
        }
        let (fh, name) = ns.lookup_parent(&rel).await.map_err(|e| at(&url, e))?;
        let parent = url.with_path(url.path.rsplit_once('/').map_or("/", |(p, _)| p));
        Ok((
            Dir::Nfs {
                ns,
                fh,
                url: parent,
            },
            name,
        ))
    } else {
        let p = PathBuf::from(arg);
        if p.is_dir() {
            return Ok((Dir::Local(p), src_name));
        }
        let name = p
            .file_name()
            .ok_or_else(|| format!("{arg}: not a file name"))?
            .to_string_lossy()
            .into_owned();
        let parent = match p.parent() {
            Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
            _ => PathBuf::from("."),
        };
        Ok((Dir::Local(parent), name))
    }
}

/// One file, link or other non-directory.
fn copy_node<'a>(
    ctx: &'a Ctx,
    src: &'a Node,
    meta: Meta,
    dir: &'a Dir,
    name: &'a str,
) -> Pin<Box<dyn Future<Output = Result<(), String>> + Send + 'a>> {
    Box::pin(async move {
        match meta.kind {
            Kind::File => copy_file(ctx, src, meta, dir, name).await?,
            Kind::Dir => unreachable!("directories go through copy_tree"),
            Kind::Symlink => {
                let target = src.read_link().await?;
                dir.symlink(name, &target).await?;
            }
            Kind::Other => skip_other(src),
        }
        Ok(())
    })
}

async fn copy_file(ctx: &Ctx, src: &Node, meta: Meta, dir: &Dir, name: &str) -> Result<(), String> {
    let dst_show = dir.show(name);
    let create_mode = if ctx.preserve {
        meta.mode & 0o7777
    } else {
        0o644
    };
    match (src, dir) {
        (Node::Local(p), Dir::Local(d)) => {
            let to = d.join(name);
            tokio::fs::copy(p, &to)
                .await
                .map_err(|e| format!("{} -> {}: {e}", p.display(), to.display()))?;
            ctx.bar.inc(meta.size);
        }
        (Node::Local(p), Dir::Nfs { ns, fh, url }) => {
            let f = ns
                .create(fh, name, create_mode, CreateMode::Truncate)
                .await
                .map_err(|e| at(&url.join(name), e))?;
            let written = async {
                let mut local = tokio::fs::File::open(p)
                    .await
                    .map_err(|e| format!("{}: {e}", p.display()))?;
                let mut w = f.writer();
                // No more than the file needs (a tree of small files has many in flight); a
                // file that grew since its stat is still read to its end, in more reads.
                let buf_len = meta.size.clamp(4096, u64::from(ns.wsize()));
                let mut buf = vec![0u8; buf_len as usize];
                loop {
                    let n = local
                        .read(&mut buf)
                        .await
                        .map_err(|e| format!("{}: {e}", p.display()))?;
                    if n == 0 {
                        break;
                    }
                    w.write(&buf[..n])
                        .await
                        .map_err(|e| format!("{dst_show}: {e}"))?;
                    ctx.bar.inc(n as u64);
                }
                w.finish().await.map_err(|e| format!("{dst_show}: {e}"))?;
                if ctx.preserve {
                    dir.set_file_attrs(&f, meta).await?;
                }
                Ok(())
            }
            .await;
            closed(written, f.close().await, &dst_show)?;
        }
        (Node::Nfs { ns, fh, attr, url }, Dir::Local(d)) => {
            let to = d.join(name);
            let f = ns.open(fh, *attr, false).await.map_err(|e| at(url, e))?;
            let copied = async {
                // A vectored sink on the runtime's thread, not tokio::fs (see `crate::sink`).
                let file = std::fs::OpenOptions::new()
                    .write(true)
                    .create(true)
                    .truncate(true)
                    .mode(create_mode)
                    .open(&to)
                    .map_err(|e| format!("{}: {e}", to.display()))?;
                let mut out = LocalFile::new(file);
                f.read_to(&mut out, |n| ctx.bar.inc(n))
                    .await
                    .map_err(|e| format!("{url} -> {}: {e}", to.display()))?;
                drop(out);
                if ctx.preserve {
                    set_local_attrs(&to, meta)?;
                }
                Ok(())
            }
            .await;
            closed(copied, f.close().await, &url.to_string())?;
        }
        (
            Node::Nfs { ns, fh, attr, url },
            Dir::Nfs {
                ns: dns,
                fh: dfh,
                url: durl,
            },
        ) => {
            let from = ns.open(fh, *attr, false).await.map_err(|e| at(url, e))?;
            let to = match dns
                .create(dfh, name, create_mode, CreateMode::Truncate)
                .await
            {
                Ok(to) => to,
                Err(e) => {
                    let _ = from.close().await;
                    return Err(at(&durl.join(name), e));
                }
            };
            let copied = async {
                let mut r = from.reader();
                let mut w = to.writer();
                while let Some(chunks) = r.next_chunk().await.map_err(|e| at(url, e))? {
                    for c in chunks {
                        w.write(&c).await.map_err(|e| format!("{dst_show}: {e}"))?;
                        ctx.bar.inc(c.len() as u64);
                    }
                }
                w.finish().await.map_err(|e| format!("{dst_show}: {e}"))?;
                if ctx.preserve {
                    dir.set_file_attrs(&to, meta).await?;
                }
                Ok(())
            }
            .await;
            let from_closed = from.close().await;
            closed(copied, to.close().await, &dst_show)?;
            from_closed.map_err(|e| at(url, e))?;
        }
    }
    Ok(())
}

/// The copy's result, then the CLOSE's: a copy that worked can still fail at its CLOSE.
fn closed(copied: Result<(), String>, close: Result<(), Error>, show: &str) -> Result<(), String> {
    copied?;
    close.map_err(|e| format!("{show}: {e}"))
}

impl Node {
    fn show(&self) -> String {
        match self {
            Node::Local(p) => p.display().to_string(),
            Node::Nfs { url, .. } => url.to_string(),
        }
    }

    fn name(&self) -> String {
        match self {
            Node::Local(p) => p
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_else(|| ".".into()),
            Node::Nfs { url, .. } => match url.file_name() {
                "" => "root".into(),
                n => n.to_string(),
            },
        }
    }

    async fn meta(&self) -> Result<Meta, String> {
        match self {
            Node::Local(p) => {
                let m =
                    std::fs::symlink_metadata(p).map_err(|e| format!("{}: {e}", p.display()))?;
                let ft = m.file_type();
                let kind = if ft.is_file() {
                    Kind::File
                } else if ft.is_dir() {
                    Kind::Dir
                } else if ft.is_symlink() {
                    Kind::Symlink
                } else {
                    Kind::Other
                };
                Ok(Meta {
                    kind,
                    size: m.len(),
                    mode: m.mode() & 0o7777,
                    atime: nfstime(m.atime(), m.atime_nsec()),
                    mtime: nfstime(m.mtime(), m.mtime_nsec()),
                })
            }
            Node::Nfs { attr, .. } => Ok(Meta {
                kind: match attr.ftype {
                    FileType::REG => Kind::File,
                    FileType::DIR => Kind::Dir,
                    FileType::LNK => Kind::Symlink,
                    _ => Kind::Other,
                },
                size: attr.size,
                mode: attr.mode & 0o7777,
                atime: attr.atime,
                mtime: attr.mtime,
            }),
        }
    }

    /// The entries of a directory, one page at a time (see [`Listing`]).
    fn list(&self) -> Result<Listing, String> {
        match self {
            Node::Local(p) => std::fs::read_dir(p)
                .map(|rd| Listing::Local {
                    dir: p.clone(),
                    entries: rd,
                })
                .map_err(|e| format!("{}: {e}", p.display())),
            Node::Nfs { ns, fh, url, .. } => Ok(Listing::Nfs {
                ns: ns.clone(),
                dir: fh.clone(),
                url: url.clone(),
                pages: DirStream::new(fh.clone()),
            }),
        }
    }

    async fn read_link(&self) -> Result<String, String> {
        match self {
            Node::Local(p) => std::fs::read_link(p)
                .map(|t| t.to_string_lossy().into_owned())
                .map_err(|e| format!("{}: {e}", p.display())),
            Node::Nfs { ns, fh, url, .. } => ns.readlink(fh).await.map_err(|e| at(url, e)),
        }
    }
}

/// A directory being listed: one READDIRPLUS (v4: READDIR) reply, or up to [`LOCAL_PAGE_ENTRIES`] local
/// entries, per page, in the order the file system returns them.
#[allow(clippy::large_enum_variant)] // one lives at a time
enum Listing {
    Local {
        dir: PathBuf,
        entries: std::fs::ReadDir,
    },
    Nfs {
        ns: Arc<dyn Namespace>,
        dir: Handle,
        url: NfsUrl,
        pages: DirStream,
    },
}

/// Local entries per page: about what one 64 KiB READDIRPLUS reply holds, so both sides queue
/// work at the same grain.
const LOCAL_PAGE_ENTRIES: usize = 256;

impl Listing {
    /// The next entries with what the copy needs of each, or `None` at the end.
    async fn next_page(&mut self) -> Result<Option<Vec<(String, Node)>>, String> {
        match self {
            Listing::Local { dir, entries } => {
                let mut out = Vec::new();
                for e in entries.by_ref() {
                    let e = e.map_err(|e| format!("{}: {e}", dir.display()))?;
                    out.push((
                        e.file_name().to_string_lossy().into_owned(),
                        Node::Local(e.path()),
                    ));
                    if out.len() == LOCAL_PAGE_ENTRIES {
                        break;
                    }
                }
                Ok((!out.is_empty()).then_some(out))
            }
            Listing::Nfs {
                ns,
                dir,
                url,
                pages,
            } => {
                let Some(entries) = pages.next_page(&**ns).await.map_err(|e| at(url, e))? else {
                    return Ok(None);
                };
                let mut out = Vec::with_capacity(entries.len());
                for e in entries {
                    let child_url = url.join(&e.name);
                    // READDIR, or a server that left them out: one LOOKUP.
                    let (cfh, cattr) = ns
                        .resolve_entry(dir, &e)
                        .await
                        .map_err(|err| at(&child_url, err))?;
                    out.push((
                        e.name,
                        Node::Nfs {
                            ns: ns.clone(),
                            fh: cfh,
                            attr: cattr,
                            url: child_url,
                        },
                    ));
                }
                Ok(Some(out))
            }
        }
    }
}

impl Dir {
    fn show(&self, name: &str) -> String {
        match self {
            Dir::Local(p) => p.join(name).display().to_string(),
            Dir::Nfs { url, .. } => url.join(name).to_string(),
        }
    }

    /// Creates (or reuses an existing) subdirectory.
    async fn mkdir(&self, name: &str) -> Result<Dir, String> {
        match self {
            Dir::Local(p) => {
                let d = p.join(name);
                match std::fs::create_dir(&d) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && d.is_dir() => {}
                    Err(e) => return Err(format!("{}: {e}", d.display())),
                }
                Ok(Dir::Local(d))
            }
            Dir::Nfs { ns, fh, url } => {
                let sub_url = url.join(name);
                let sub = match ns.mkdir(fh, name, 0o755).await {
                    Ok((h, _)) => h,
                    Err(e) if e.status() == Some(Status::EXIST) => {
                        let (h, a) = ns.lookup(fh, name).await.map_err(|e| at(&sub_url, e))?;
                        if a.ftype != FileType::DIR {
                            return Err(at(&sub_url, Error::local(Status::NOTDIR)));
                        }
                        h
                    }
                    Err(e) => return Err(at(&sub_url, e)),
                };
                Ok(Dir::Nfs {
                    ns: ns.clone(),
                    fh: sub,
                    url: sub_url,
                })
            }
        }
    }

    async fn symlink(&self, name: &str, target: &str) -> Result<(), String> {
        match self {
            Dir::Local(p) => {
                let l = p.join(name);
                std::os::unix::fs::symlink(target, &l).map_err(|e| format!("{}: {e}", l.display()))
            }
            Dir::Nfs { ns, fh, url } => ns
                .symlink(fh, name, target)
                .await
                .map_err(|e| at(&url.join(name), e)),
        }
    }

    /// `-p` on a directory this copy created (this `Dir` itself), after its contents.
    async fn set_attrs(&self, meta: Meta) -> Result<(), String> {
        match self {
            Dir::Local(p) => set_local_attrs(p, meta),
            Dir::Nfs { ns, fh, url } => ns
                .setattr(fh, &preserve_attrs(meta))
                .await
                .map_err(|e| at(url, e)),
        }
    }

    /// `-p` on a file copied to NFS.
    async fn set_file_attrs(&self, f: &OpenFile, meta: Meta) -> Result<(), String> {
        f.set_attr(&preserve_attrs(meta))
            .await
            .map_err(|e| format!("{}: {e}", self.show("")))
    }
}

fn preserve_attrs(meta: Meta) -> SetAttr {
    SetAttr {
        mode: Some(meta.mode & 0o7777),
        atime: SetTime::ClientTime(meta.atime),
        mtime: SetTime::ClientTime(meta.mtime),
        ..SetAttr::default()
    }
}

fn set_local_attrs(p: &Path, meta: Meta) -> Result<(), String> {
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(meta.mode & 0o7777))
        .map_err(|e| format!("{}: {e}", p.display()))?;
    let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes())
        .map_err(|_| format!("{}: NUL in path", p.display()))?;
    let ts = |t: Time| libc::timespec {
        tv_sec: t.seconds as libc::time_t,
        tv_nsec: t.nseconds as libc::c_long,
    };
    let times = [ts(meta.atime), ts(meta.mtime)];
    // SAFETY: `c` is a valid NUL-terminated path and `times` two valid timespecs.
    let rc = unsafe { libc::utimensat(libc::AT_FDCWD, c.as_ptr(), times.as_ptr(), 0) };
    if rc != 0 {
        return Err(format!(
            "{}: {}",
            p.display(),
            std::io::Error::last_os_error()
        ));
    }
    Ok(())
}

fn nfstime(secs: i64, nsecs: i64) -> Time {
    Time {
        seconds: secs,
        nseconds: nsecs.clamp(0, 999_999_999) as u32,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Runs 40 copies that each hold their place for a moment; returns the most at once.
    fn most_at_once(jobs: usize, charge: u32) -> usize {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let now = Arc::new(AtomicUsize::new(0));
            let most = Arc::new(AtomicUsize::new(0));
            let mut pool = FilePool::new(jobs);
            for _ in 0..40 {
                let (now, most) = (now.clone(), most.clone());
                pool.spawn(charge, async move {
                    let n = now.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(n, Ordering::SeqCst);
                    tokio::time::sleep(std::time::Duration::from_millis(2)).await;
                    now.fetch_sub(1, Ordering::SeqCst);
                    Ok(())
                })
                .await
                .unwrap();
            }
            pool.finish().await.unwrap();
            most.load(Ordering::SeqCst)
        })
    }

    #[test]
    fn jobs_bound_the_files_in_flight() {
        assert_eq!(most_at_once(1, 1), 1);
        assert_eq!(most_at_once(8, 1), 8);
    }

    #[test]
    fn the_byte_budget_bounds_large_files() {
        let full = charge_units(Meta {
            kind: Kind::File,
            size: 1 << 40,
            mode: 0,
            atime: Time::default(),
            mtime: Time::default(),
        });
        assert_eq!(u64::from(full) * CHARGE_UNIT_BYTES, FILE_CHARGE_BYTES_MAX);
        let at_once = (TREE_BYTES_IN_FLIGHT_MAX / FILE_CHARGE_BYTES_MAX) as usize;
        assert_eq!(most_at_once(64, full), at_once);
    }

    #[test]
    fn every_failure_in_flight_is_reported() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let err = rt.block_on(async {
            let mut pool = FilePool::new(4);
            for i in 0..4 {
                pool.spawn(1, async move {
                    tokio::time::sleep(std::time::Duration::from_millis(i)).await;
                    if i % 2 == 1 {
                        Err(format!("f{i}: failed"))
                    } else {
                        Ok(())
                    }
                })
                .await
                .unwrap();
            }
            pool.finish().await.unwrap_err()
        });
        assert_eq!(err, "f1: failed\nf3: failed");
    }

    #[test]
    fn the_default_is_the_slot_count() {
        let mut o = sluice_client::ClientOptions::default();
        assert_eq!(jobs_default(&o), 64);
        o.nconnect = 16;
        assert_eq!(jobs_default(&o), JOBS_MAX);
    }
}
