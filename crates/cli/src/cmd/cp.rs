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

use super::{at, CommonArgs, Session};
use crate::sink::LocalFile;
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use sluice_client::client::Client;
use sluice_client::error::NfsError;
use sluice_client::file::File;
use sluice_client::url::NfsUrl;
use sluice_xdr::nfs3::{Fattr3, Ftype3, NfsFh3, Nfsstat3, Nfstime3, Sattr3, SetTime};
use std::future::Future;
use std::io::IsTerminal;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::pin::Pin;
use tokio::io::AsyncReadExt;

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
    /// Source: nfs:// URL or local path.
    pub src: String,
    /// Destination: nfs:// URL or local path.
    pub dst: String,
    #[command(flatten)]
    pub common: CommonArgs,
}

pub(crate) async fn run(a: CpArgs) -> Result<(), String> {
    if super::v4::wants_v4(&a.src) || super::v4::wants_v4(&a.dst) {
        return super::v4::cp(a).await;
    }
    let mut s = Session::new(&a.common);
    let r = copy(&a, &mut s).await;
    s.finish(r)
}

/// What the copy reads: a file, directory or link on either side.
#[derive(Clone)]
#[allow(clippy::large_enum_variant)] // a handful live at once, one per tree level
enum Node {
    Local(PathBuf),
    Nfs {
        client: Client,
        fh: NfsFh3,
        attr: Fattr3,
        url: NfsUrl,
    },
}

/// Where the copy creates things: a directory on either side.
#[derive(Clone)]
enum Dir {
    Local(PathBuf),
    Nfs {
        client: Client,
        fh: NfsFh3,
        url: NfsUrl,
    },
}

/// The facts about a node the copy needs, from either side.
#[derive(Debug, Clone, Copy)]
struct Meta {
    kind: Kind,
    size: u64,
    mode: u32,
    atime: Nfstime3,
    mtime: Nfstime3,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    File,
    Dir,
    Symlink,
    Other,
}

struct Ctx {
    recursive: bool,
    preserve: bool,
    bar: ProgressBar,
}

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
    let ctx = Ctx {
        recursive: a.recursive,
        preserve: a.preserve,
        bar,
    };
    let r = copy_node(&ctx, &src, src_meta, &dir, &name).await;
    ctx.bar.finish_and_clear();
    r
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
        let (client, rel) = s.resolve(&url).await?;
        let (fh, attr) = client.lookup_path(&rel).await.map_err(|e| at(&url, e))?;
        Ok(Node::Nfs {
            client,
            fh,
            attr,
            url,
        })
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
        let (client, rel) = s.resolve(&url).await?;
        match client.lookup_path(&rel).await {
            Ok((fh, attr)) if attr.ftype == Ftype3::DIR => {
                return Ok((Dir::Nfs { client, fh, url }, src_name));
            }
            Ok(_) => {}
            Err(e) if e.status() == Some(Nfsstat3::NOENT) => {}
            Err(e) => return Err(at(&url, e)),
        }
        let (fh, name) = client.lookup_parent(&rel).await.map_err(|e| at(&url, e))?;
        let parent = url.with_path(url.path.rsplit_once('/').map_or("/", |(p, _)| p));
        Ok((
            Dir::Nfs {
                client,
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
            Kind::Dir => {
                let sub = dir.mkdir(name).await?;
                for (child_name, child) in src.children().await? {
                    let child_meta = child.meta().await?;
                    copy_node(ctx, &child, child_meta, &sub, &child_name).await?;
                }
                if ctx.preserve {
                    sub.set_attrs(meta).await?;
                }
                debug_assert!(ctx.recursive);
            }
            Kind::Symlink => {
                let target = src.read_link().await?;
                dir.symlink(name, &target).await?;
            }
            Kind::Other => {
                tracing::warn!(
                    "{}: not a regular file, directory or link; skipped",
                    src.show()
                );
            }
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
        (Node::Local(p), Dir::Nfs { client, fh, url }) => {
            let f = client
                .create_in(fh, name, create_mode)
                .await
                .map_err(|e| at(&url.join(name), e))?;
            let mut local = tokio::fs::File::open(p)
                .await
                .map_err(|e| format!("{}: {e}", p.display()))?;
            let mut w = f.writer();
            let mut buf = vec![0u8; client.wsize() as usize];
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
        }
        (
            Node::Nfs {
                client,
                fh,
                attr,
                url,
            },
            Dir::Local(d),
        ) => {
            let to = d.join(name);
            let f = File::new(client.clone(), fh.clone(), *attr);
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
        }
        (
            Node::Nfs {
                client,
                fh,
                attr,
                url,
            },
            Dir::Nfs {
                client: dc,
                fh: dfh,
                url: durl,
            },
        ) => {
            let from = File::new(client.clone(), fh.clone(), *attr);
            let to = dc
                .create_in(dfh, name, create_mode)
                .await
                .map_err(|e| at(&durl.join(name), e))?;
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
        }
    }
    Ok(())
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
                    Ftype3::REG => Kind::File,
                    Ftype3::DIR => Kind::Dir,
                    Ftype3::LNK => Kind::Symlink,
                    _ => Kind::Other,
                },
                size: attr.size,
                mode: attr.mode & 0o7777,
                atime: attr.atime,
                mtime: attr.mtime,
            }),
        }
    }

    /// The entries of a directory, sorted by name.
    async fn children(&self) -> Result<Vec<(String, Node)>, String> {
        let mut out = Vec::new();
        match self {
            Node::Local(p) => {
                let rd = std::fs::read_dir(p).map_err(|e| format!("{}: {e}", p.display()))?;
                for e in rd {
                    let e = e.map_err(|e| format!("{}: {e}", p.display()))?;
                    out.push((
                        e.file_name().to_string_lossy().into_owned(),
                        Node::Local(e.path()),
                    ));
                }
            }
            Node::Nfs {
                client, fh, url, ..
            } => {
                let entries = client.read_dir(fh).await.map_err(|e| at(url, e))?;
                for e in entries {
                    let child_url = url.join(&e.name);
                    let (cfh, cattr) = match (e.fh, e.attr) {
                        (Some(h), Some(a)) => (h, a),
                        _ => {
                            let r = client
                                .lookup(fh, &e.name)
                                .await
                                .map_err(|err| at(&child_url, err))?;
                            let a = match r.obj_attributes {
                                Some(a) => a,
                                None => {
                                    client
                                        .getattr(&r.object)
                                        .await
                                        .map_err(|err| at(&child_url, err))?
                                        .obj_attributes
                                }
                            };
                            (r.object, a)
                        }
                    };
                    out.push((
                        e.name,
                        Node::Nfs {
                            client: client.clone(),
                            fh: cfh,
                            attr: cattr,
                            url: child_url,
                        },
                    ));
                }
            }
        }
        out.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(out)
    }

    async fn read_link(&self) -> Result<String, String> {
        match self {
            Node::Local(p) => std::fs::read_link(p)
                .map(|t| t.to_string_lossy().into_owned())
                .map_err(|e| format!("{}: {e}", p.display())),
            Node::Nfs {
                client, fh, url, ..
            } => client
                .readlink(fh)
                .await
                .map(|r| String::from_utf8_lossy(&r.data).into_owned())
                .map_err(|e| at(url, e)),
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
            Dir::Nfs { client, fh, url } => {
                let sub_url = url.join(name);
                let attrs = Sattr3 {
                    mode: Some(0o755),
                    ..Sattr3::default()
                };
                let sub = match client.mkdir(fh, name, attrs).await {
                    Ok(r) => match r.obj {
                        Some(h) => h,
                        None => {
                            client
                                .lookup(fh, name)
                                .await
                                .map_err(|e| at(&sub_url, e))?
                                .object
                        }
                    },
                    Err(e) if e.status() == Some(Nfsstat3::EXIST) => {
                        let r = client.lookup(fh, name).await.map_err(|e| at(&sub_url, e))?;
                        let is_dir = match r.obj_attributes {
                            Some(a) => a.ftype == Ftype3::DIR,
                            None => true,
                        };
                        if !is_dir {
                            return Err(at(&sub_url, NfsError::local(Nfsstat3::NOTDIR)));
                        }
                        r.object
                    }
                    Err(e) => return Err(at(&sub_url, e)),
                };
                Ok(Dir::Nfs {
                    client: client.clone(),
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
            Dir::Nfs { client, fh, url } => client
                .symlink(fh, name, target, Sattr3::default())
                .await
                .map(|_| ())
                .map_err(|e| at(&url.join(name), e)),
        }
    }

    /// `-p` on a directory this copy created (this `Dir` itself), after its contents.
    async fn set_attrs(&self, meta: Meta) -> Result<(), String> {
        match self {
            Dir::Local(p) => set_local_attrs(p, meta),
            Dir::Nfs { client, fh, url } => client
                .setattr(fh, preserve_attrs(meta), None)
                .await
                .map(|_| ())
                .map_err(|e| at(url, e)),
        }
    }

    /// `-p` on a file copied to NFS.
    async fn set_file_attrs(&self, f: &File, meta: Meta) -> Result<(), String> {
        f.set_attr(preserve_attrs(meta))
            .await
            .map_err(|e| format!("{}: {e}", self.show("")))
    }
}

fn preserve_attrs(meta: Meta) -> Sattr3 {
    Sattr3 {
        mode: Some(meta.mode & 0o7777),
        atime: SetTime::ClientTime(meta.atime),
        mtime: SetTime::ClientTime(meta.mtime),
        ..Sattr3::default()
    }
}

fn set_local_attrs(p: &Path, meta: Meta) -> Result<(), String> {
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(meta.mode & 0o7777))
        .map_err(|e| format!("{}: {e}", p.display()))?;
    let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes())
        .map_err(|_| format!("{}: NUL in path", p.display()))?;
    let ts = |t: Nfstime3| libc::timespec {
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

fn nfstime(secs: i64, nsecs: i64) -> Nfstime3 {
    Nfstime3 {
        seconds: secs.clamp(0, i64::from(u32::MAX)) as u32,
        nseconds: nsecs.clamp(0, 999_999_999) as u32,
    }
}
