//! `cat`, `ls` and `cp` over NFSv4.1 / 4.2, for URLs with `version=4`, `4.1` or `4.2`.
//!
//! The commands dispatch here before touching their v3 code, which stays as it is. Files
//! travel through the same [`sluice_client::File`] reader and writer as over v3 (readahead,
//! write-behind, COMMIT with verifier resend); only opening, creating and closing differ.
//! `cp` copies NFS → local or local → NFS, with `-r` trees of regular files and directories
//! one file at a time; `-p`, links, NFS → NFS and the other commands over v4 come later.

use super::cp::CpArgs;
use super::ops::{format_time, mode_string, CatArgs, LsArgs};
use super::{parse_url, CommonArgs, Out, Session};
use crate::sink::LocalFile;
use sluice_client::file::File;
use sluice_client::url::{NfsUrl, NfsVersion};
use sluice_client::v4::{self, Client, CreateMode, Minor, V4Options};
use sluice_client::ClientStats;
use sluice_client::ReadStats;
use sluice_xdr::nfs3::{Ftype3, Nfstime3};
use sluice_xdr::nfs4::NfsFh4;
use sluice_xdr::nfs4::{Ftype4, Nfsstat4};
use std::future::Future;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::pin::Pin;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// True if `arg` is an NFS URL asking for a 4.x version.
pub(crate) fn wants_v4(arg: &str) -> bool {
    NfsUrl::is_nfs_url(arg)
        && NfsUrl::parse(arg)
            .ok()
            .and_then(|u| u.version)
            .is_some_and(|v| v.is_v4())
}

/// `sluice cat` with at least one v4 URL (all must be v4).
pub(crate) async fn cat(a: CatArgs, out: &mut Out) -> Result<(), String> {
    let mut s = V4Session::new(&a.common);
    let r = async {
        for u in &a.urls {
            let url = parse_url(u)?;
            let c = s.client(&url).await?;
            let (fh, attr) = c.open(&url.path).await.map_err(|e| at(&url, e))?;
            let f = File::new(c.clone(), fh.clone(), attr);
            let read = f
                .read_to(out, |_| {})
                .await
                .map_err(|e| format!("{url}: {e}"));
            let closed = c.close(&fh).await.map_err(|e| at(&url, e));
            read?;
            closed?;
        }
        out.flush().await.map_err(|e| format!("stdout: {e}"))
    }
    .await;
    s.finish(r).await
}

/// `sluice ls [-l] URL` with a v4 URL: the entries sorted by name, or the one line of a
/// non-directory. `-R` over v4 comes later.
pub(crate) async fn ls(a: LsArgs, out: &mut Out) -> Result<(), String> {
    if a.recursive {
        return Err("ls -R over NFSv4 is not supported yet (use version=3)".into());
    }
    let mut s = V4Session::new(&a.common);
    let r = async {
        let url = parse_url(&a.url)?;
        let c = s.client(&url).await?;
        let (fh, attr) = c.lookup(&url.path).await.map_err(|e| at(&url, e))?;
        let text = if attr.ftype != Ftype4::DIR {
            entry_line(a.long, url.file_name(), &attr)
        } else {
            let mut entries = c.readdir(&fh).await.map_err(|e| at(&url, e))?;
            entries.sort_by(|x, y| x.0.cmp(&y.0));
            entries
                .iter()
                .map(|(name, attr)| entry_line(a.long, name, attr))
                .collect()
        };
        out.write_all(text.as_bytes())
            .await
            .map_err(|e| format!("stdout: {e}"))?;
        out.flush().await.map_err(|e| format!("stdout: {e}"))
    }
    .await;
    s.finish(r).await
}

/// One line of `ls`: the name, or with `-l` the v3 listing's columns with the owner and group
/// as the server names them (NFSv4 sends strings, not numbers).
fn entry_line(long: bool, name: &str, a: &v4::Attr) -> String {
    if !long {
        return format!("{name}\n");
    }
    // nfs_ftype4 numbers the common types as ftype3 does (RFC 8881 §3.3.13, RFC 1813 §2.5).
    let kind = Ftype3(a.ftype.0);
    let mtime = Nfstime3 {
        seconds: a.mtime.seconds.clamp(0, i64::from(u32::MAX)) as u32,
        nseconds: a.mtime.nseconds,
    };
    format!(
        "{} {:>3} {:>5} {:>5} {:>12} {} {name}\n",
        mode_string(kind, a.mode),
        a.numlinks,
        a.owner,
        a.owner_group,
        a.size,
        format_time(mtime)
    )
}

/// `sluice cp [-r] SRC DST` with a v4 URL on one side and a local path on the other.
pub(crate) async fn cp(a: CpArgs) -> Result<(), String> {
    if a.preserve {
        return Err("cp -p over NFSv4 is not supported yet (use version=3)".into());
    }
    let mut s = V4Session::new(&a.common);
    let r = async {
        match (NfsUrl::is_nfs_url(&a.src), NfsUrl::is_nfs_url(&a.dst)) {
            (true, false) => {
                download(&mut s, &parse_url(&a.src)?, Path::new(&a.dst), a.recursive).await
            }
            (false, true) => {
                upload(&mut s, Path::new(&a.src), &parse_url(&a.dst)?, a.recursive).await
            }
            _ => Err("cp over NFSv4 copies between an nfs:// URL and a local path".into()),
        }
    }
    .await;
    s.finish(r).await
}

async fn download(
    s: &mut V4Session,
    url: &NfsUrl,
    dst: &Path,
    recursive: bool,
) -> Result<(), String> {
    let c = s.client(url).await?;
    let (fh, attr) = c.lookup(&url.path).await.map_err(|e| at(url, e))?;
    let to: PathBuf = if dst.is_dir() {
        dst.join(url.file_name())
    } else {
        dst.to_path_buf()
    };
    if attr.ftype == Ftype4::DIR {
        if !recursive {
            return Err(format!("{url}: is a directory (not copied; use -r)"));
        }
        return download_tree(&c, url, fh, to).await;
    }
    download_file(&c, url, &to).await
}

/// The directory `url` (handle `fh`) into the new local directory `to`, depth first; regular
/// files and directories only (others are named on stderr and skipped).
fn download_tree<'a>(
    c: &'a Client,
    url: &'a NfsUrl,
    fh: NfsFh4,
    to: PathBuf,
) -> Pin<Box<dyn Future<Output = Result<(), String>> + Send + 'a>> {
    Box::pin(async move {
        match std::fs::create_dir(&to) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && to.is_dir() => {}
            Err(e) => return Err(format!("{}: {e}", to.display())),
        }
        let mut entries = c.readdir(&fh).await.map_err(|e| at(url, e))?;
        entries.sort_by(|x, y| x.0.cmp(&y.0));
        for (name, attr) in entries {
            let child = url.join(&name);
            match attr.ftype {
                Ftype4::DIR => {
                    let (cfh, _) = c.lookup(&child.path).await.map_err(|e| at(&child, e))?;
                    download_tree(c, &child, cfh, to.join(&name)).await?;
                }
                Ftype4::REG => download_file(c, &child, &to.join(&name)).await?,
                _ => eprintln!(
                    "{child}: not a regular file or directory (not copied over NFSv4 yet)"
                ),
            }
        }
        Ok(())
    })
}

async fn download_file(c: &Client, url: &NfsUrl, to: &Path) -> Result<(), String> {
    let (fh, attr) = c.open(&url.path).await.map_err(|e| at(url, e))?;
    let mode = if attr.mode == 0 { 0o644 } else { attr.mode } & 0o777;
    let copied = async {
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(mode)
            .open(to)
            .map_err(|e| format!("{}: {e}", to.display()))?;
        let mut out = LocalFile::new(file);
        File::new(c.clone(), fh.clone(), attr)
            .read_to(&mut out, |_| {})
            .await
            .map_err(|e| format!("{url} -> {}: {e}", to.display()))
    }
    .await;
    let closed = c.close(&fh).await.map_err(|e| at(url, e));
    copied?;
    closed
}

async fn upload(
    s: &mut V4Session,
    src: &Path,
    url: &NfsUrl,
    recursive: bool,
) -> Result<(), String> {
    let c = s.client(url).await?;
    // Into an existing directory under the source's name, as cp(1) does.
    let path = match c.lookup(&url.path).await {
        Ok((_, a)) if a.ftype == Ftype4::DIR => {
            let name = src
                .file_name()
                .ok_or_else(|| format!("{}: no file name", src.display()))?;
            format!(
                "{}/{}",
                url.path.trim_end_matches('/'),
                name.to_string_lossy()
            )
        }
        Ok(_) => url.path.clone(),
        Err(e) if e.status() == Some(Nfsstat4::NOENT) => url.path.clone(),
        Err(e) => return Err(at(url, e)),
    };
    let to = url.with_path(&path);
    if src.is_dir() {
        if !recursive {
            return Err(format!(
                "{}: is a directory (not copied; use -r)",
                src.display()
            ));
        }
        return upload_tree(&c, src, &to).await;
    }
    upload_file(&c, src, &to).await
}

/// The local directory `src` as the new directory `to`, depth first; regular files and
/// directories only (others are named on stderr and skipped).
fn upload_tree<'a>(
    c: &'a Client,
    src: &'a Path,
    to: &'a NfsUrl,
) -> Pin<Box<dyn Future<Output = Result<(), String>> + Send + 'a>> {
    Box::pin(async move {
        let mode = std::fs::metadata(src)
            .map_err(|e| format!("{}: {e}", src.display()))?
            .permissions()
            .mode();
        match c.mkdir(&to.path, mode).await {
            Ok(_) => {}
            Err(e) if e.status() == Some(Nfsstat4::EXIST) => {}
            Err(e) => return Err(at(to, e)),
        }
        let mut names = Vec::new();
        for e in std::fs::read_dir(src).map_err(|e| format!("{}: {e}", src.display()))? {
            let e = e.map_err(|e| format!("{}: {e}", src.display()))?;
            names.push(e.file_name().to_string_lossy().into_owned());
        }
        names.sort();
        for name in names {
            let from = src.join(&name);
            let child = to.join(&name);
            let kind = std::fs::symlink_metadata(&from)
                .map_err(|e| format!("{}: {e}", from.display()))?
                .file_type();
            if kind.is_dir() {
                upload_tree(c, &from, &child).await?;
            } else if kind.is_file() {
                upload_file(c, &from, &child).await?;
            } else {
                eprintln!(
                    "{}: not a regular file or directory (not copied over NFSv4 yet)",
                    from.display()
                );
            }
        }
        Ok(())
    })
}

async fn upload_file(c: &Client, src: &Path, to: &NfsUrl) -> Result<(), String> {
    let mut local = tokio::fs::File::open(src)
        .await
        .map_err(|e| format!("{}: {e}", src.display()))?;
    let (fh, attr) = c
        .create(&to.path, 0o644, CreateMode::Truncate)
        .await
        .map_err(|e| at(to, e))?;
    let written = async {
        let f = File::new(c.clone(), fh.clone(), attr);
        let mut w = f.writer();
        let mut buf = vec![0u8; sluice_client::FileProtocol::wsize(c) as usize];
        loop {
            let n = local
                .read(&mut buf)
                .await
                .map_err(|e| format!("{}: {e}", src.display()))?;
            if n == 0 {
                break;
            }
            w.write(&buf[..n]).await.map_err(|e| at(to, e))?;
        }
        w.finish().await.map(|_| ()).map_err(|e| at(to, e))
    }
    .await;
    let closed = c.close(&fh).await.map_err(|e| at(to, e));
    written?;
    closed
}

fn at(url: &NfsUrl, e: v4::Error) -> String {
    format!("{url}: {e}")
}

/// The v4 clients of one command (one per server and version), and its `--stats`.
struct V4Session {
    common: Session,
    clients: Vec<Client>,
}

impl V4Session {
    fn new(common: &CommonArgs) -> V4Session {
        V4Session {
            common: Session::new(common),
            clients: Vec::new(),
        }
    }

    async fn client(&mut self, url: &NfsUrl) -> Result<Client, String> {
        let minor = match url.version {
            Some(NfsVersion::V4_1) => Minor::V1,
            Some(NfsVersion::V4_2) => Minor::V2,
            Some(NfsVersion::V4) => Minor::Highest,
            _ => return Err(format!("{url}: not an NFSv4 URL (add version=4.1)")),
        };
        for c in &self.clients {
            let u = c.url();
            if u.host == url.host
                && u.port == url.port
                && u.nfsport == url.nfsport
                && u.version == url.version
                && u.uid == url.uid
                && u.gid == url.gid
            {
                return Ok(c.clone());
            }
        }
        let c = Client::connect(url, self.common.options(), minor, V4Options::default())
            .await
            .map_err(|e| format!("{url}: {e}"))?;
        self.clients.push(c.clone());
        Ok(c)
    }

    /// The RPC table, file read statistics, the transport and the version chosen.
    fn report(&self) -> String {
        let mut stats = ClientStats::default();
        let mut reads = ReadStats::default();
        let (mut retrans, mut reconnects) = (0, 0);
        let mut versions = Vec::new();
        for c in &self.clients {
            stats.merge(&c.stats());
            reads.merge(&c.read_stats());
            let t = c.transport_stats();
            retrans += t.table.retransmissions;
            reconnects += t.reconnects;
            let v = format!("4.{}", c.minor_version());
            if !versions.contains(&v) {
                versions.push(v);
            }
        }
        let mut out = stats.to_string();
        if reads.app_reads > 0 {
            out.push('\n');
            out.push_str(&reads.to_string());
        }
        out.push_str(&format!(
            "\ntransport: tcp, {retrans} retransmissions, {reconnects} reconnects\nNFS version: {}",
            versions.join(", ")
        ));
        out
    }

    /// Ends every session, prints the statistics if asked to, and passes `result` through.
    async fn finish(&self, result: Result<(), String>) -> Result<(), String> {
        for c in &self.clients {
            c.shutdown().await;
        }
        if self.common.show_stats {
            eprintln!("{}", self.report());
        }
        result
    }
}
