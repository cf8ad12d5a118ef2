//! [`Client`]: a mounted NFSv3 export with typed calls for every procedure and path helpers.
//!
//! # Connecting (what `Client::connect` does, in order)
//! 1. Resolve the URL's host; only the addresses it names are ever contacted.
//! 2. Ports: `nfsport`/`mountport` from the URL; a missing one is asked from PORTMAP (GETPORT,
//!    TCP) on the authority's port (`nfs://host:P/...`, where sluice serves it) or on 111. If
//!    no portmapper answers (refused, silent for 4 s, or it knows no NFS) and only one port is
//!    known, it is used for both (sluice serves NFS and MOUNT on one port); with no port at all
//!    and no authority port, 2049 is tried for both. If that fails too, the error lists each
//!    address tried and what happened.
//! 3. MOUNT: the URL path is split into the export and a path inside it. The server's EXPORT
//!    list picks the longest export that is a prefix of the path; without a list, MNT is tried
//!    on the whole path, then on ever shorter prefixes. MNT returns the root file handle.
//! 4. FSINFO on the root: `rsize = min(rtmax, ClientOptions::rsize_max)`, likewise `wsize`.
//!    Over UDP both are also capped at [`UDP_TRANSFER_BYTES_MAX`] (32 KiB) so that every READ
//!    reply and WRITE call fits in one datagram.
//!
//! The transport is TCP unless the URL says `proto=udp` or [`ClientOptions::udp`] is set; then
//! PORTMAP, MOUNT and NFS all go over UDP (GETPORT asks for the UDP ports).
//!
//! Over TCP the client may open several connections to the NFS service (`nconnect=N` in the URL
//! or [`ClientOptions::nconnect`], Linux's mount option of that name): NFS calls go to them in
//! turn, so that receiving and copying replies is spread over as many threads. By default the
//! client starts with one and adds more itself while its receive path is the limit
//! (automatic `nconnect`, [`ClientOptions::nconnect_auto`], `sluice_engine::trunk`).
//!
//! Every call is recorded in per-procedure [`ClientStats`]; file reads also in [`ReadStats`].
//! All files of a client share one readahead memory [`Budget`](sluice_engine::readahead::Budget)
//! ([`ClientOptions::readahead_budget_bytes`]).

use crate::error::NfsError;
use crate::file::File as FileOf;
use crate::identity::{credentials, resolve};
use crate::options::checked_nconnect;
pub use crate::options::{nconnect_auto_default, ClientOptions, NCONNECT_AUTO_MAX, NCONNECT_MAX};
use crate::proto::{FileContext, FileOptions};
use crate::stats::{ClientStats, ReadStats, Sample};
use crate::transport::{CallError, Connections, PendingCall, RpcClient, RpcConfig};
pub use crate::url::components;
use crate::url::{NfsUrl, XprtSec};
use bytes::Bytes;
use sluice_rpc::client::{CallTableConfig, ProcId, Transport};
use sluice_rpc::rtt::TimerClass;
use sluice_xdr::nfs3::{self, proc_, *};
use sluice_xdr::procs::ProcInfo;
use sluice_xdr::rpc::OpaqueAuth;
use sluice_xdr::{mount3, portmap, Pack, Payload, Reader, Unpack, Writer};
use std::marker::PhantomData;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Largest READ/WRITE over UDP: a 32 KiB payload plus headers fits the 64 KiB datagram limit
/// with room (Linux's UDP default is also 32 KiB).
pub const UDP_TRANSFER_BYTES_MAX: u32 = 32 * 1024;

/// Anything that names an NFS URL.
pub trait IntoNfsUrl {
    fn into_nfs_url(self) -> Result<NfsUrl, NfsError>;
}
impl IntoNfsUrl for NfsUrl {
    fn into_nfs_url(self) -> Result<NfsUrl, NfsError> {
        Ok(self)
    }
}
impl IntoNfsUrl for &NfsUrl {
    fn into_nfs_url(self) -> Result<NfsUrl, NfsError> {
        Ok(self.clone())
    }
}
impl IntoNfsUrl for &str {
    fn into_nfs_url(self) -> Result<NfsUrl, NfsError> {
        NfsUrl::parse(self).map_err(|e| NfsError::Other(e.to_string()))
    }
}
impl IntoNfsUrl for &String {
    fn into_nfs_url(self) -> Result<NfsUrl, NfsError> {
        self.as_str().into_nfs_url()
    }
}

/// A file of this client.
pub type File = FileOf<Client>;

/// A mounted export. Cheap to clone (shared connection and statistics).
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

struct Inner {
    url: NfsUrl,
    export: String,
    /// The URL's path inside the export ("/" for the export's root).
    target: String,
    /// The connections to the NFS service (at least one; more with `nconnect`).
    conns: Connections,
    cred: OpaqueAuth,
    root: NfsFh3,
    fsinfo: FsinfoResOk,
    rsize: u32,
    wsize: u32,
    dir_bytes: u32,
    options: ClientOptions,
    stats: Mutex<ClientStats>,
    /// Why v3 was chosen over v4, when `crate::connect` fell back (shown in `--stats`).
    version_note: std::sync::OnceLock<String>,
    /// What all files of this client share: the readahead budget, read statistics.
    files: FileContext,
    /// The server's lock manager (NLM), connected on the first lock (`client/nlm.rs`).
    nlm: tokio::sync::OnceCell<RpcClient>,
}

/// One export in the server's list (MOUNT EXPORT), as `showmount -e` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportInfo {
    /// The path to mount.
    pub dir: String,
    /// The clients allowed (hosts, networks, `*`); empty means everyone.
    pub groups: Vec<String>,
}

/// Asks the server named by `url` for its export list (MOUNT EXPORT), finding the MOUNT service
/// as [`Client::connect`] does; the URL's path is ignored.
pub async fn list_exports(
    url: impl IntoNfsUrl,
    mut options: ClientOptions,
) -> Result<Vec<ExportInfo>, NfsError> {
    let url = url.into_nfs_url()?;
    if let Some(p) = url.proto {
        options.udp = p == crate::url::Proto::Udp;
    }
    if options.udp {
        options.rpc.table = udp_table(&options.rpc.table);
    }
    let stats = Mutex::new(ClientStats::default());
    let cred = credentials(&url, &options);
    let ip = resolve(&url).await?;
    let ports = ports(&url, ip, &options, &cred, &stats).await?;
    let addr = SocketAddr::new(ip, ports.mount);
    let rpc = RpcClient::connect(addr, setup_config(&options.rpc))
        .await
        .map_err(|e| {
            unreachable(
                &ports.tried,
                format!("cannot connect to MOUNT at {addr}: {e}"),
            )
        })?;
    let res = raw_call(
        &rpc,
        &cred,
        ("MOUNT3", mount3::PROGRAM, mount3::VERSION),
        mount3::proc_::EXPORT,
        &(),
        &stats,
        |r| mount3::decode_res(mount3::proc_::EXPORT, r),
    )
    .await?;
    let mount3::Res::Export(list) = res else {
        return Err(NfsError::Other("EXPORT: unexpected reply".into()));
    };
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    Ok(list
        .0
        .iter()
        .map(|n| ExportInfo {
            dir: text(&n.dir.0),
            groups: n.groups.iter().map(|g| text(&g.0)).collect(),
        })
        .collect())
}

/// One directory entry from [`Client::read_dir`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirEntry {
    pub name: String,
    pub fileid: u64,
    /// From READDIRPLUS when the server sent them.
    pub fh: Option<NfsFh3>,
    pub attr: Option<Fattr3>,
}

impl Client {
    /// Connects to the server named by `url`, mounts its export and reads FSINFO.
    pub async fn connect(
        url: impl IntoNfsUrl,
        mut options: ClientOptions,
    ) -> Result<Client, NfsError> {
        let url = url.into_nfs_url()?;
        if url.version.is_some_and(|v| v.is_v4()) {
            return Err(NfsError::Other(format!(
                "{url}: asks for NFSv4, which this NFSv3 client does not speak (see crate::v4)"
            )));
        }
        if let Some(p) = url.proto {
            options.udp = p == crate::url::Proto::Udp;
        }
        if options.udp {
            options.rpc.table = udp_table(&options.rpc.table);
            options.rsize_max = options.rsize_max.min(UDP_TRANSFER_BYTES_MAX);
            options.wsize_max = options.wsize_max.min(UDP_TRANSFER_BYTES_MAX);
        }
        let (nconnect, trunk) = checked_nconnect(&url, &options).map_err(NfsError::Other)?;
        options.nconnect = nconnect;
        let stats = Mutex::new(ClientStats::default());
        let cred = credentials(&url, &options);
        let ip = resolve(&url).await?;
        let ports = ports(&url, ip, &options, &cred, &stats).await?;
        let (nfs_port, mount_port) = (ports.nfs, ports.mount);
        let mut rpc_config = options.rpc.clone();
        if rpc_config.server_name.is_empty() {
            rpc_config.server_name = url.host.clone();
        }
        rpc_config.tls = crate::options::rpc_tls(&url, &options, (nfs3::PROGRAM, nfs3::VERSION))
            .map_err(NfsError::Other)?;
        let nfs_addr = SocketAddr::new(ip, nfs_port);
        let nfs = RpcClient::connect(nfs_addr, rpc_config.clone())
            .await
            .map_err(|e| unreachable(&ports.tried, format!("cannot connect to {nfs_addr}: {e}")))?;
        let mount_rpc = if mount_port == nfs_port {
            nfs.clone()
        } else {
            let addr = SocketAddr::new(ip, mount_port);
            RpcClient::connect(addr, setup_config(&rpc_config))
                .await
                .map_err(|e| {
                    unreachable(
                        &ports.tried,
                        format!("cannot connect to MOUNT at {addr}: {e}"),
                    )
                })?
        };
        let (export, root) = mount(&mount_rpc, &cred, &url.path, &stats)
            .await
            .map_err(|e| transport_hint(e, url.xprtsec, false))?;
        drop(mount_rpc);
        let mut conns = Connections::new(nfs);
        conns
            .open(options.nconnect, &rpc_config)
            .await
            .map_err(NfsError::Connect)?;
        conns.grow_up_to(trunk, &rpc_config);
        let target = strip_export(&url.path, &export);
        let inner = Inner {
            nlm: tokio::sync::OnceCell::new(),
            url,
            export,
            target,
            conns,
            cred,
            root: root.clone(),
            fsinfo: FsinfoResOk::default(),
            rsize: 0,
            wsize: 0,
            dir_bytes: 0,
            files: FileContext::new(
                FileOptions {
                    readahead: options.readahead,
                    trace_readahead: options.trace_readahead,
                    attr_timeout: options.attr_timeout,
                    write_depth: options.write_depth,
                    write_depth_max: options.rpc.table.max_in_flight,
                    commit_bytes_max: options.commit_bytes_max,
                },
                options.readahead_budget_bytes,
            ),
            options,
            stats,
            version_note: std::sync::OnceLock::new(),
        };
        let mut client = Client {
            inner: Arc::new(inner),
        };
        let fsinfo = client
            .fsinfo(&root)
            .await
            .map_err(|e| transport_hint(e, client.inner.url.xprtsec, true))?;
        let inner = Arc::get_mut(&mut client.inner).expect("no other handle exists yet");
        inner.rsize = transfer_size(fsinfo.rtmax, inner.options.rsize_max);
        inner.wsize = transfer_size(fsinfo.wtmax, inner.options.wsize_max);
        inner.dir_bytes = match fsinfo.dtpref {
            0 => inner.options.readdir_bytes,
            d => d.clamp(4096, inner.options.readdir_bytes.max(4096)),
        };
        inner.fsinfo = fsinfo;
        Ok(client)
    }

    // --- getters ---------------------------------------------------------------------------

    /// Why this v3 client was chosen over NFSv4, if a URL without a version fell back to it.
    pub fn version_note(&self) -> Option<&str> {
        self.inner.version_note.get().map(String::as_str)
    }

    /// Records why v3 was chosen (once; see [`Client::version_note`]).
    pub(crate) fn set_version_note(&self, note: String) {
        let _ = self.inner.version_note.set(note);
    }

    /// The URL this client was connected with.
    pub fn url(&self) -> &NfsUrl {
        &self.inner.url
    }
    /// The mounted export's path on the server.
    pub fn export(&self) -> &str {
        &self.inner.export
    }
    /// The URL's path relative to the export ("/" when the URL names the export itself).
    pub fn target_path(&self) -> &str {
        &self.inner.target
    }
    /// The export's root handle.
    pub fn root(&self) -> &NfsFh3 {
        &self.inner.root
    }
    pub fn rsize(&self) -> u32 {
        self.inner.rsize
    }
    pub fn wsize(&self) -> u32 {
        self.inner.wsize
    }
    /// READDIR(PLUS) reply size asked for: the option, lowered to the server's `dtpref`.
    pub fn readdir_bytes(&self) -> u32 {
        self.inner.dir_bytes
    }
    pub fn fsinfo_cached(&self) -> &FsinfoResOk {
        &self.inner.fsinfo
    }
    pub fn options(&self) -> &ClientOptions {
        &self.inner.options
    }
    /// The URL of `path` (relative to the export) on this server, for messages.
    pub fn url_of(&self, path: &str) -> NfsUrl {
        let p = crate::url::normalize_path(path);
        if self.inner.export == "/" {
            self.inner.url.with_path(&p)
        } else if p == "/" {
            self.inner.url.with_path(&self.inner.export)
        } else {
            self.inner
                .url
                .with_path(&format!("{}{p}", self.inner.export))
        }
    }
    /// Per-procedure statistics so far.
    pub fn stats(&self) -> ClientStats {
        self.inner.stats.lock().expect("stats lock").clone()
    }
    /// Transport counters (reconnects, bytes on the wire), summed over the connections.
    pub fn transport_stats(&self) -> crate::transport::TransportStats {
        self.inner.conns.stats()
    }
    /// Transport counters of each connection to the NFS service, in order.
    pub fn connection_stats(&self) -> Vec<crate::transport::TransportStats> {
        self.inner.conns.stats_each()
    }

    /// Connections to the NFS service now, and how the automatic `nconnect` came to that
    /// number (`None` when the count was fixed).
    pub fn connections(&self) -> (usize, Option<String>) {
        (self.inner.conns.len(), self.inner.conns.growth_note())
    }
    /// File read statistics: READ sizes, depth in flight, readahead windows and waste.
    pub fn read_stats(&self) -> ReadStats {
        self.inner.files.read_stats()
    }
    /// True when the NFS traffic goes over UDP.
    pub fn is_udp(&self) -> bool {
        self.inner.conns.first().is_udp()
    }

    // --- the NFSv3 procedures (RFC 1813 §3.3) --------------------------------------------

    pub async fn null(&self) -> Result<(), NfsError> {
        self.start_with(proc_::NULL, &(), decode_void)
            .await
            .wait()
            .await
    }

    pub async fn getattr(&self, object: &NfsFh3) -> Result<GetattrResOk, NfsError> {
        let args = GetattrArgs {
            object: object.clone(),
        };
        self.start::<GetattrResOk, ()>(proc_::GETATTR, &args)
            .await
            .wait()
            .await
    }

    pub async fn setattr(
        &self,
        object: &NfsFh3,
        new_attributes: Sattr3,
        guard: Option<Nfstime3>,
    ) -> Result<SetattrResOk, NfsError> {
        let args = SetattrArgs {
            object: object.clone(),
            new_attributes,
            guard,
        };
        self.start::<SetattrResOk, SetattrResFail>(proc_::SETATTR, &args)
            .await
            .wait()
            .await
    }

    pub async fn lookup(&self, dir: &NfsFh3, name: &str) -> Result<LookupResOk, NfsError> {
        let args = LookupArgs {
            what: diropargs(dir, name),
        };
        self.start::<LookupResOk, LookupResFail>(proc_::LOOKUP, &args)
            .await
            .wait()
            .await
    }

    pub async fn access(&self, object: &NfsFh3, access: u32) -> Result<AccessResOk, NfsError> {
        let args = AccessArgs {
            object: object.clone(),
            access,
        };
        self.start::<AccessResOk, AccessResFail>(proc_::ACCESS, &args)
            .await
            .wait()
            .await
    }

    pub async fn readlink(&self, symlink: &NfsFh3) -> Result<ReadlinkResOk, NfsError> {
        let args = ReadlinkArgs {
            symlink: symlink.clone(),
        };
        self.start::<ReadlinkResOk, ReadlinkResFail>(proc_::READLINK, &args)
            .await
            .wait()
            .await
    }

    pub async fn read(
        &self,
        file: &NfsFh3,
        offset: u64,
        count: u32,
    ) -> Result<ReadResOk, NfsError> {
        self.start_read(file, offset, count).await.wait().await
    }

    /// Starts a READ without waiting for it (for pipelining).
    pub async fn start_read(&self, file: &NfsFh3, offset: u64, count: u32) -> Pending<ReadResOk> {
        let args = ReadArgs {
            file: file.clone(),
            offset,
            count,
        };
        self.start::<ReadResOk, ReadResFail>(proc_::READ, &args)
            .await
    }

    pub async fn write(
        &self,
        file: &NfsFh3,
        offset: u64,
        data: Bytes,
        stable: StableHow,
    ) -> Result<WriteResOk, NfsError> {
        self.start_write(file, offset, data, stable)
            .await
            .wait()
            .await
    }

    /// Starts a WRITE without waiting for it (for pipelining). `data` is sent without copying.
    pub async fn start_write(
        &self,
        file: &NfsFh3,
        offset: u64,
        data: Bytes,
        stable: StableHow,
    ) -> Pending<WriteResOk> {
        let args = WriteArgs {
            file: file.clone(),
            offset,
            count: data.len() as u32,
            stable,
            data: Payload::from(data),
        };
        self.start::<WriteResOk, WriteResFail>(proc_::WRITE, &args)
            .await
    }

    pub async fn create(
        &self,
        dir: &NfsFh3,
        name: &str,
        how: CreateHow,
    ) -> Result<CreateResOk, NfsError> {
        let args = CreateArgs {
            where_: diropargs(dir, name),
            how,
        };
        self.start::<CreateResOk, CreateResFail>(proc_::CREATE, &args)
            .await
            .wait()
            .await
    }

    pub async fn mkdir(
        &self,
        dir: &NfsFh3,
        name: &str,
        attributes: Sattr3,
    ) -> Result<MkdirResOk, NfsError> {
        let args = MkdirArgs {
            where_: diropargs(dir, name),
            attributes,
        };
        self.start::<MkdirResOk, MkdirResFail>(proc_::MKDIR, &args)
            .await
            .wait()
            .await
    }

    pub async fn symlink(
        &self,
        dir: &NfsFh3,
        name: &str,
        target: &str,
        attributes: Sattr3,
    ) -> Result<SymlinkResOk, NfsError> {
        let args = SymlinkArgs {
            where_: diropargs(dir, name),
            symlink_attributes: attributes,
            symlink_data: Bytes::copy_from_slice(target.as_bytes()),
        };
        self.start::<SymlinkResOk, SymlinkResFail>(proc_::SYMLINK, &args)
            .await
            .wait()
            .await
    }

    pub async fn mknod(
        &self,
        dir: &NfsFh3,
        name: &str,
        what: MknodData,
    ) -> Result<MknodResOk, NfsError> {
        let args = MknodArgs {
            where_: diropargs(dir, name),
            what,
        };
        self.start::<MknodResOk, MknodResFail>(proc_::MKNOD, &args)
            .await
            .wait()
            .await
    }

    pub async fn remove(&self, dir: &NfsFh3, name: &str) -> Result<RemoveResOk, NfsError> {
        let args = RemoveArgs {
            object: diropargs(dir, name),
        };
        self.start::<RemoveResOk, RemoveResFail>(proc_::REMOVE, &args)
            .await
            .wait()
            .await
    }

    pub async fn rmdir(&self, dir: &NfsFh3, name: &str) -> Result<RmdirResOk, NfsError> {
        let args = RmdirArgs {
            object: diropargs(dir, name),
        };
        self.start::<RmdirResOk, RmdirResFail>(proc_::RMDIR, &args)
            .await
            .wait()
            .await
    }

    pub async fn rename(
        &self,
        from_dir: &NfsFh3,
        from_name: &str,
        to_dir: &NfsFh3,
        to_name: &str,
    ) -> Result<RenameResOk, NfsError> {
        let args = RenameArgs {
            from: diropargs(from_dir, from_name),
            to: diropargs(to_dir, to_name),
        };
        self.start::<RenameResOk, RenameResFail>(proc_::RENAME, &args)
            .await
            .wait()
            .await
    }

    pub async fn link(
        &self,
        file: &NfsFh3,
        dir: &NfsFh3,
        name: &str,
    ) -> Result<LinkResOk, NfsError> {
        let args = LinkArgs {
            file: file.clone(),
            link: diropargs(dir, name),
        };
        self.start::<LinkResOk, LinkResFail>(proc_::LINK, &args)
            .await
            .wait()
            .await
    }

    pub async fn readdir(
        &self,
        dir: &NfsFh3,
        cookie: u64,
        cookieverf: Verifier,
        count: u32,
    ) -> Result<ReaddirResOk, NfsError> {
        let args = ReaddirArgs {
            dir: dir.clone(),
            cookie,
            cookieverf,
            count,
        };
        self.start::<ReaddirResOk, ReaddirResFail>(proc_::READDIR, &args)
            .await
            .wait()
            .await
    }

    pub async fn readdirplus(
        &self,
        dir: &NfsFh3,
        cookie: u64,
        cookieverf: Verifier,
        dircount: u32,
        maxcount: u32,
    ) -> Result<ReaddirplusResOk, NfsError> {
        let args = ReaddirplusArgs {
            dir: dir.clone(),
            cookie,
            cookieverf,
            dircount,
            maxcount,
        };
        self.start::<ReaddirplusResOk, ReaddirplusResFail>(proc_::READDIRPLUS, &args)
            .await
            .wait()
            .await
    }

    pub async fn fsstat(&self, fsroot: &NfsFh3) -> Result<FsstatResOk, NfsError> {
        let args = FsstatArgs {
            fsroot: fsroot.clone(),
        };
        self.start::<FsstatResOk, FsstatResFail>(proc_::FSSTAT, &args)
            .await
            .wait()
            .await
    }

    pub async fn fsinfo(&self, fsroot: &NfsFh3) -> Result<FsinfoResOk, NfsError> {
        let args = FsinfoArgs {
            fsroot: fsroot.clone(),
        };
        self.start::<FsinfoResOk, FsinfoResFail>(proc_::FSINFO, &args)
            .await
            .wait()
            .await
    }

    pub async fn pathconf(&self, object: &NfsFh3) -> Result<PathconfResOk, NfsError> {
        let args = PathconfArgs {
            object: object.clone(),
        };
        self.start::<PathconfResOk, PathconfResFail>(proc_::PATHCONF, &args)
            .await
            .wait()
            .await
    }

    pub async fn commit(
        &self,
        file: &NfsFh3,
        offset: u64,
        count: u32,
    ) -> Result<CommitResOk, NfsError> {
        self.start_commit(file, offset, count).await.wait().await
    }

    /// Starts a COMMIT without waiting for it (a writer keeps sending meanwhile).
    pub async fn start_commit(
        &self,
        file: &NfsFh3,
        offset: u64,
        count: u32,
    ) -> Pending<CommitResOk> {
        let args = CommitArgs {
            file: file.clone(),
            offset,
            count,
        };
        self.start::<CommitResOk, CommitResFail>(proc_::COMMIT, &args)
            .await
    }

    // --- path helpers ----------------------------------------------------------------------

    /// Looks up `path` (relative to the export root; "/" or "" is the root) component by
    /// component. Symbolic links are not followed.
    pub async fn lookup_path(&self, path: &str) -> Result<(NfsFh3, Fattr3), NfsError> {
        let mut fh = self.inner.root.clone();
        let mut attr = None;
        for name in components(path) {
            let res = self.lookup(&fh, name).await?;
            fh = res.object;
            attr = res.obj_attributes;
        }
        let attr = match attr {
            Some(a) => a,
            None => self.getattr(&fh).await?.obj_attributes,
        };
        Ok((fh, attr))
    }

    /// The directory holding `path` and the last component's name.
    pub async fn lookup_parent(&self, path: &str) -> Result<(NfsFh3, String), NfsError> {
        let parts: Vec<&str> = components(path).collect();
        let Some((name, dirs)) = parts.split_last() else {
            return Err(NfsError::Other("the export root has no parent".into()));
        };
        let (dir, attr) = self.lookup_path(&dirs.join("/")).await?;
        if attr.ftype != Ftype3::DIR {
            return Err(NfsError::local(Nfsstat3::NOTDIR));
        }
        Ok((dir, name.to_string()))
    }

    /// Opens an existing regular file (or anything not a directory) for reading or writing.
    pub async fn open(&self, path: &str) -> Result<File, NfsError> {
        let (fh, attr) = self.lookup_path(path).await?;
        if attr.ftype == Ftype3::DIR {
            return Err(NfsError::local(Nfsstat3::ISDIR));
        }
        Ok(File::new(self.clone(), fh, attr))
    }

    /// Creates `path` (or truncates it if it exists: UNCHECKED with size 0) with `mode`.
    pub async fn create_file(&self, path: &str, mode: u32) -> Result<File, NfsError> {
        let (dir, name) = self.lookup_parent(path).await?;
        self.create_in(&dir, &name, mode).await
    }

    /// Creates (or truncates) `name` in `dir` with `mode`.
    pub async fn create_in(&self, dir: &NfsFh3, name: &str, mode: u32) -> Result<File, NfsError> {
        let how = CreateHow::Unchecked(Sattr3 {
            mode: Some(mode),
            size: Some(0),
            ..Sattr3::default()
        });
        let res = self.create(dir, name, how).await?;
        let fh = match res.obj {
            Some(fh) => fh,
            None => self.lookup(dir, name).await?.object,
        };
        let attr = match res.obj_attributes {
            Some(a) => a,
            None => self.getattr(&fh).await?.obj_attributes,
        };
        Ok(File::new(self.clone(), fh, attr))
    }

    /// All entries of a directory except "." and "..", with attributes when the server sends
    /// them (READDIRPLUS; READDIR if the server does not support it).
    pub async fn read_dir(&self, dir: &NfsFh3) -> Result<Vec<DirEntry>, NfsError> {
        match self.read_dir_plus(dir).await {
            Err(e) if e.status() == Some(Nfsstat3::NOTSUPP) => self.read_dir_plain(dir).await,
            other => other,
        }
    }

    async fn read_dir_plus(&self, dir: &NfsFh3) -> Result<Vec<DirEntry>, NfsError> {
        let (mut cookie, mut verf, mut out) = (0u64, [0u8; 8], Vec::new());
        // dircount bounds the names, maxcount the whole reply with attributes and handles;
        // a 4:1 ratio like Linux's leaves room for the ~200 bytes of attributes per entry.
        let dircount = self.inner.dir_bytes;
        let maxcount = dircount.saturating_mul(4).min(1 << 20);
        loop {
            let res = self
                .readdirplus(dir, cookie, verf, dircount, maxcount)
                .await?;
            verf = res.cookieverf;
            let progressed = !res.entries.is_empty();
            for e in res.entries {
                cookie = e.cookie;
                if e.name.as_ref() == b"." || e.name.as_ref() == b".." {
                    continue;
                }
                out.push(DirEntry {
                    name: String::from_utf8_lossy(&e.name).into_owned(),
                    fileid: e.fileid,
                    fh: e.name_handle,
                    attr: e.name_attributes,
                });
            }
            if res.eof {
                return Ok(out);
            }
            if !progressed {
                return Err(NfsError::Other(
                    "server returned an empty READDIRPLUS reply without EOF".into(),
                ));
            }
        }
    }

    async fn read_dir_plain(&self, dir: &NfsFh3) -> Result<Vec<DirEntry>, NfsError> {
        let (mut cookie, mut verf, mut out) = (0u64, [0u8; 8], Vec::new());
        loop {
            let res = self
                .readdir(dir, cookie, verf, self.inner.dir_bytes)
                .await?;
            verf = res.cookieverf;
            let progressed = !res.entries.is_empty();
            for e in res.entries {
                cookie = e.cookie;
                if e.name.as_ref() == b"." || e.name.as_ref() == b".." {
                    continue;
                }
                out.push(DirEntry {
                    name: String::from_utf8_lossy(&e.name).into_owned(),
                    fileid: e.fileid,
                    fh: None,
                    attr: None,
                });
            }
            if res.eof {
                return Ok(out);
            }
            if !progressed {
                return Err(NfsError::Other(
                    "server returned an empty READDIR reply without EOF".into(),
                ));
            }
        }
    }

    // --- the call machinery ----------------------------------------------------------------

    /// Opens connection `i` in the background (automatic `nconnect`): NFSv3 needs nothing more
    /// than the TCP connection to the NFS port.
    fn grow(&self, i: usize) {
        let c = self.clone();
        tokio::spawn(async move {
            let conns = &c.inner.conns;
            match conns.connect_more().await {
                Ok(rpc) => {
                    conns.place(i, rpc);
                    conns.activate(i);
                }
                Err(e) => conns.growth_failed(&e.to_string()),
            }
        });
    }

    async fn start<O: Unpack, F: Unpack>(&self, proc_: u32, args: &impl Pack) -> Pending<O> {
        self.start_with(proc_, args, decode_nfs::<O, F>).await
    }

    async fn start_with<O>(
        &self,
        proc_: u32,
        args: &impl Pack,
        decode: fn(&mut Reader<'_>) -> sluice_xdr::Result<Result<O, Nfsstat3>>,
    ) -> Pending<O> {
        let mut w = Writer::new();
        args.pack(&mut w);
        let segments = w.into_segments();
        let bytes_sent = segments.iter().map(|s| s.len()).sum();
        let id = ProcId {
            prog: nfs3::PROGRAM,
            vers: nfs3::VERSION,
            proc_,
        };
        if let Some(i) = self.inner.conns.growth_due() {
            self.grow(i);
        }
        let (_, conn) = self.inner.conns.next();
        let call = conn
            .start(id, &self.inner.cred, segments.clone(), timer_class(proc_))
            .await;
        Pending {
            call: Some(call),
            client: self.clone(),
            proc_,
            args: segments,
            bytes_sent,
            decode,
            _out: PhantomData,
        }
    }
}

/// NFS3ERR_JUKEBOX (RFC 1813 §2.6): the server could not do the call now and asks for it
/// again later, e.g. while it recalls an NFSv4 delegation of the file (knfsd and sluice both
/// answer it then). The call is sent again (a new XID: the server did nothing) after a pause
/// that starts at [`JUKEBOX_RETRY_FIRST`] and doubles up to [`JUKEBOX_RETRY_MAX`], for at most
/// [`JUKEBOX_WAIT_MAX`] in all; then the caller gets the error. Linux pauses a fixed 5 s; a
/// recall answered at once ends in milliseconds, so the first pauses are short, and the
/// longest is short enough to notice a recall that ends in revocation (a lease, 90 s) soon.
pub const JUKEBOX_RETRY_FIRST: Duration = Duration::from_millis(100);
/// The longest pause between two tries after NFS3ERR_JUKEBOX.
pub const JUKEBOX_RETRY_MAX: Duration = Duration::from_secs(2);
/// How long a call keeps being sent again after NFS3ERR_JUKEBOX: past a lease of the server
/// (90 s by default), after which a recall ends in revocation and the call goes through.
pub const JUKEBOX_WAIT_MAX: Duration = Duration::from_secs(300);

/// The pause before try `n + 1` after `waited` in all (`n` from 1): `None` once the wait is
/// over (module constants above).
pub fn jukebox_pause(n: u32, waited: Duration) -> Option<Duration> {
    if waited >= JUKEBOX_WAIT_MAX {
        return None;
    }
    let doubled = JUKEBOX_RETRY_FIRST.saturating_mul(1 << n.saturating_sub(1).min(16));
    Some(doubled.min(JUKEBOX_RETRY_MAX))
}

/// An NFS call in flight; [`Pending::wait`] gives its result.
pub struct Pending<O> {
    /// The try in flight (taken while it is waited for).
    call: Option<PendingCall>,
    client: Client,
    proc_: u32,
    /// The encoded arguments, to send again after NFS3ERR_JUKEBOX (slices of the caller's
    /// buffers: no copy).
    args: Vec<Bytes>,
    bytes_sent: usize,
    decode: fn(&mut Reader<'_>) -> sluice_xdr::Result<Result<O, Nfsstat3>>,
    _out: PhantomData<fn() -> O>,
}

impl<O> Pending<O> {
    pub async fn wait(self) -> Result<O, NfsError> {
        self.wait_timed().await.0
    }

    /// The result and the call's RTT sample (`None` if it was transmitted more than once).
    /// NFS3ERR_JUKEBOX is not a result: the call is sent again after a pause
    /// ([`jukebox_pause`]) until it gets another answer or the wait is over.
    pub async fn wait_timed(mut self) -> (Result<O, NfsError>, Option<Duration>) {
        let (mut tries, mut waited) = (0u32, Duration::ZERO);
        loop {
            let call = self.call.take().expect("a try in flight");
            let (result, rtt) = self.wait_once(call).await;
            let jukebox = matches!(
                result,
                Err(NfsError::Status {
                    status: Nfsstat3::JUKEBOX,
                    ..
                })
            );
            tries += 1;
            let pause = match jukebox {
                true => jukebox_pause(tries, waited),
                false => None,
            };
            let Some(pause) = pause else {
                return (result, rtt);
            };
            tracing::debug!(
                proc_ = self.proc_,
                tries,
                pause_ms = pause.as_millis() as u64,
                "NFS3ERR_JUKEBOX: the call is sent again after a pause"
            );
            tokio::time::sleep(pause).await;
            waited += pause;
            let id = ProcId {
                prog: nfs3::PROGRAM,
                vers: nfs3::VERSION,
                proc_: self.proc_,
            };
            let (_, conn) = self.client.inner.conns.next();
            let call = conn
                .start(
                    id,
                    &self.client.inner.cred,
                    self.args.clone(),
                    timer_class(self.proc_),
                )
                .await;
            self.call = Some(call);
        }
    }

    /// One try's result and RTT sample, recorded in the statistics.
    async fn wait_once(&self, call: PendingCall) -> (Result<O, NfsError>, Option<Duration>) {
        let outcome = call.wait().await;
        let rtt = outcome.as_ref().ok().and_then(|o| o.rtt_sample);
        let mut sample = Sample {
            bytes_sent: self.bytes_sent,
            ..Sample::default()
        };
        let result = match outcome {
            Ok(o) => {
                sample.transmissions = o.transmissions;
                sample.bytes_received = o.reply_bytes;
                sample.elapsed = o.elapsed;
                let mut r = o.reply.results();
                match (self.decode)(&mut r) {
                    Ok(Ok(v)) => Ok(v),
                    Ok(Err(status)) => Err(NfsError::Status {
                        proc_: self.proc_,
                        status,
                    }),
                    Err(e) => Err(NfsError::Decode(e)),
                }
            }
            Err(e) => Err(NfsError::Rpc(e)),
        };
        sample.error = result.is_err();
        let name = sluice_xdr::procs::lookup(&nfs3::PROCS, self.proc_).map_or("?", |f| f.name);
        self.client
            .inner
            .stats
            .lock()
            .expect("stats lock")
            .record("NFS3", self.proc_, name, sample);
        (result, rtt)
    }
}

fn decode_nfs<O: Unpack, F: Unpack>(r: &mut Reader<'_>) -> sluice_xdr::Result<Result<O, Nfsstat3>> {
    Ok(match NfsResult::<O, F>::unpack(r)? {
        NfsResult::Ok(v) => Ok(v),
        NfsResult::Err(s, _) => Err(s),
    })
}

/// NULL has no results at all (not even a status).
fn decode_void(_: &mut Reader<'_>) -> sluice_xdr::Result<Result<(), Nfsstat3>> {
    Ok(Ok(()))
}

/// The RTT class of each procedure (see `sluice_rpc::rtt`): the `timer` of its row in the
/// NFSv3 procedure table.
fn timer_class(p: u32) -> TimerClass {
    sluice_xdr::procs::lookup(&nfs3::PROCS, p).map_or(TimerClass::Other, |r| r.timer)
}

fn diropargs(dir: &NfsFh3, name: &str) -> DirOpArgs3 {
    DirOpArgs3 {
        dir: dir.clone(),
        name: Bytes::copy_from_slice(name.as_bytes()),
    }
}

/// `min(server max, cap)`, in whole 4 KiB pages when that large; the server's max when it
/// gives none (0) is taken as no limit.
fn transfer_size(server_max: u32, cap: u32) -> u32 {
    let s = if server_max == 0 {
        cap
    } else {
        server_max.min(cap)
    };
    let s = s.min(RecordLimit::PAYLOAD_MAX);
    if s >= 4096 {
        s & !4095
    } else {
        s.max(512)
    }
}

/// Transfer sizes must leave room for headers in a reply record the transport accepts.
struct RecordLimit;
impl RecordLimit {
    const PAYLOAD_MAX: u32 =
        (sluice_rpc::record::RecordDecoderConfig::DEFAULT_MAX_RECORD_BYTES - 64 * 1024) as u32;
}

/// The UDP call table, keeping what the caller changed from the TCP defaults (slots, queue,
/// hard/soft, an explicit major timeout).
fn udp_table(base: &CallTableConfig) -> CallTableConfig {
    if base.transport == Transport::Udp {
        return *base;
    }
    let tcp = CallTableConfig::tcp();
    let mut t = CallTableConfig::udp();
    t.max_in_flight = base.max_in_flight;
    t.max_queued = base.max_queued;
    t.retrans = base.retrans;
    if base.major_timeout != tcp.major_timeout {
        t.major_timeout = base.major_timeout;
    }
    t
}

/// Settings for the short set-up conversations (PORTMAP, MOUNT): soft, so that a missing
/// service is an error within seconds instead of a hang.
fn setup_config(base: &RpcConfig) -> RpcConfig {
    RpcConfig {
        table: CallTableConfig {
            major_timeout: Duration::from_secs(15),
            retrans: Some(1),
            ..base.table
        },
        ..base.clone()
    }
}

/// Where NFS and MOUNT are, and how that was decided (for the error if they do not answer).
struct Ports {
    nfs: u16,
    mount: u16,
    /// What was tried before these ports were picked, e.g. "the portmapper at 127.0.0.1:111:
    /// connection refused"; empty when the URL or a portmapper gave them.
    tried: Vec<String>,
}

/// The ports used when the portmapper could not be asked (nothing answered at `pm_addr`, it
/// timed out, or it knew no NFS/MOUNT): a port named in the URL serves both programs (sluice
/// serves NFS and MOUNT on one port); with no port at all the standard NFS port
/// [`NFS_PORT_DEFAULT`] is tried for both, as sluice's server listens there by default (and
/// NFSv4 clients never need a portmapper for it). A portmapper named in the URL's authority that
/// does not answer gets no fallback: the user pointed at it.
fn fallback_ports(
    nfsport: Option<u16>,
    mountport: Option<u16>,
    authority: Option<u16>,
) -> Option<(u16, u16)> {
    match (nfsport, mountport, authority) {
        (Some(p), None, _) | (None, Some(p), _) => Some((p, p)),
        (None, None, None) => Some((NFS_PORT_DEFAULT, NFS_PORT_DEFAULT)),
        _ => None,
    }
}

/// The NFS port of RFC 1813 §1 (2049), where a server without a portmapper is looked for.
pub const NFS_PORT_DEFAULT: u16 = 2049;

/// How long the portmapper conversation may take before the fallback is tried: long enough for
/// a busy server on a slow link, short enough that a firewall that drops port 111 costs a user
/// seconds, not the 15 s set-up timeout.
const PORTMAP_WAIT: Duration = Duration::from_secs(4);

async fn ports(
    url: &NfsUrl,
    ip: std::net::IpAddr,
    options: &ClientOptions,
    cred: &OpaqueAuth,
    stats: &Mutex<ClientStats>,
) -> Result<Ports, NfsError> {
    if let (Some(nfs), Some(mount)) = (url.nfsport, url.mountport) {
        return Ok(Ports {
            nfs,
            mount,
            tried: Vec::new(),
        });
    }
    let pm_addr = SocketAddr::new(ip, url.port.unwrap_or(portmap::PORT));
    let asked = async {
        let pm = RpcClient::connect(pm_addr, setup_config(&options.rpc))
            .await
            .map_err(|e| {
                NfsError::Connect(format!("cannot reach the portmapper at {pm_addr}: {e}"))
            })?;
        let nfs = match url.nfsport {
            Some(p) => p,
            None => getport(&pm, cred, nfs3::PROGRAM, nfs3::VERSION, stats).await?,
        };
        let mount = match url.mountport {
            Some(p) => p,
            None => getport(&pm, cred, mount3::PROGRAM, mount3::VERSION, stats).await?,
        };
        Ok::<_, NfsError>((nfs, mount))
    };
    let asked = match tokio::time::timeout(PORTMAP_WAIT, asked).await {
        Ok(r) => r,
        Err(_) => Err(NfsError::Connect(format!(
            "the portmapper at {pm_addr} did not answer within {} s",
            PORTMAP_WAIT.as_secs()
        ))),
    };
    match asked {
        Ok((nfs, mount)) => Ok(Ports {
            nfs,
            mount,
            tried: Vec::new(),
        }),
        Err(e) => match fallback_ports(url.nfsport, url.mountport, url.port) {
            Some((nfs, mount)) => {
                tracing::debug!("{e}; trying port {nfs} for NFS and {mount} for MOUNT");
                Ok(Ports {
                    nfs,
                    mount,
                    tried: vec![e.to_string()],
                })
            }
            None => Err(e),
        },
    }
}

/// The error when NFS or MOUNT did not answer at the chosen port: every address tried, and
/// what to do about it.
fn unreachable(tried: &[String], what: String) -> NfsError {
    if tried.is_empty() {
        return NfsError::Connect(what);
    }
    NfsError::Connect(format!(
        "{}; then {what}. Is the server running? Give its ports in the URL: \
         ?nfsport=N&mountport=M (sluice serves both on its --listen port)",
        tried.join("; ")
    ))
}

async fn getport(
    pm: &RpcClient,
    cred: &OpaqueAuth,
    prog: u32,
    vers: u32,
    stats: &Mutex<ClientStats>,
) -> Result<u16, NfsError> {
    let udp = pm.is_udp();
    let args = portmap::Mapping {
        prog,
        vers,
        prot: if udp {
            portmap::IPPROTO_UDP
        } else {
            portmap::IPPROTO_TCP
        },
        port: 0,
    };
    let res = raw_call(
        pm,
        cred,
        ("PORTMAP2", portmap::PROGRAM, portmap::VERSION),
        portmap::proc_::GETPORT,
        &args,
        stats,
        |r| portmap::decode_res(portmap::proc_::GETPORT, r),
    )
    .await?;
    let port = match res {
        portmap::Res::Getport(p) => p,
        _ => 0,
    };
    u16::try_from(port).ok().filter(|&p| p != 0).ok_or_else(|| {
        NfsError::Connect(format!(
            "the portmapper at {} knows no program {prog} version {vers} over {}",
            pm.peer_addr(),
            if udp { "UDP" } else { "TCP" }
        ))
    })
}

/// What to change when the server refused the export for the connection's transport security
/// (an export's `xprtsec=`), as far as the client can tell: a MNT refused with ACCES over TLS
/// without a certificate, or NFS3ERR_ACCES on the root handle MNT just gave (`after_mnt`). A
/// server answers a plaintext MNT of a TLS-only export (Linux clients send MNT in plaintext)
/// and refuses the first NFS call, so that ACCES is the plaintext client's sign. Any other
/// error is returned as it is.
fn transport_hint(e: NfsError, mode: Option<XprtSec>, after_mnt: bool) -> NfsError {
    let acces = match &e {
        NfsError::Mount(s) => *s == mount3::Mountstat3::ACCES,
        NfsError::Status { status, .. } => *status == Nfsstat3::ACCES,
        _ => false,
    };
    let plain = matches!(mode, None | Some(XprtSec::None));
    let hint = match (acces, mode) {
        (false, _) => return e,
        (true, _) if plain && after_mnt => {
            "the export may require RPC-with-TLS: add ?xprtsec=tls to the URL (with --tls-ca), \
             or ?xprtsec=mtls with --tls-cert and --tls-key if it requires a client certificate"
        }
        (true, Some(XprtSec::Tls)) => {
            "the export may require a client certificate: use ?xprtsec=mtls with --tls-cert \
             and --tls-key (or the client's address is not allowed)"
        }
        (true, Some(XprtSec::Mtls)) if after_mnt => {
            "the export may not admit clients with a certificate (xprtsec=tls only): \
             try ?xprtsec=tls without --tls-cert"
        }
        _ => return e,
    };
    NfsError::Other(format!("{e}: {hint}"))
}

/// MOUNT: picks the export for `path` and returns it with its root handle.
async fn mount(
    rpc: &RpcClient,
    cred: &OpaqueAuth,
    path: &str,
    stats: &Mutex<ClientStats>,
) -> Result<(String, NfsFh3), NfsError> {
    let prog = ("MOUNT3", mount3::PROGRAM, mount3::VERSION);
    let mut candidates: Vec<String> = Vec::new();
    if let Ok(mount3::Res::Export(list)) =
        raw_call(rpc, cred, prog, mount3::proc_::EXPORT, &(), stats, |r| {
            mount3::decode_res(mount3::proc_::EXPORT, r)
        })
        .await
    {
        let mut dirs: Vec<String> = list
            .0
            .iter()
            .map(|n| String::from_utf8_lossy(&n.dir.0).into_owned())
            .filter(|d| is_path_prefix(d, path))
            .collect();
        dirs.sort_by_key(|d| std::cmp::Reverse(d.len()));
        candidates.extend(dirs);
    }
    let parts: Vec<&str> = components(path).collect();
    for n in (0..=parts.len()).rev() {
        let p = format!("/{}", parts[..n].join("/"));
        if !candidates.contains(&p) {
            candidates.push(p);
        }
    }
    let mut first_error = None;
    for dir in candidates {
        let args = mount3::DirPath(Bytes::from(dir.clone().into_bytes()));
        let res = raw_call(rpc, cred, prog, mount3::proc_::MNT, &args, stats, |r| {
            mount3::decode_res(mount3::proc_::MNT, r)
        })
        .await;
        match res {
            Ok(mount3::Res::Mnt(mount3::MntRes::Ok(ok))) => return Ok((dir, ok.fhandle)),
            Ok(mount3::Res::Mnt(mount3::MntRes::Err(s))) => {
                first_error.get_or_insert(NfsError::Mount(s));
            }
            Ok(_) => {
                first_error.get_or_insert(NfsError::Other("MNT: unexpected reply".into()));
            }
            Err(e @ NfsError::Rpc(_)) => return Err(e),
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    Err(first_error.unwrap_or_else(|| NfsError::Other("nothing to mount".into())))
}

/// A call to a set-up program (PORTMAP, MOUNT), recorded in the statistics.
async fn raw_call<T>(
    rpc: &RpcClient,
    cred: &OpaqueAuth,
    (prog_name, prog, vers): (&'static str, u32, u32),
    proc_: u32,
    args: &impl Pack,
    stats: &Mutex<ClientStats>,
    decode: impl FnOnce(&mut Reader<'_>) -> sluice_xdr::Result<T>,
) -> Result<T, NfsError> {
    let mut w = Writer::new();
    args.pack(&mut w);
    let segments = w.into_segments();
    let bytes_sent = segments.iter().map(|s| s.len()).sum();
    let id = ProcId { prog, vers, proc_ };
    let table: &'static [ProcInfo] = if prog == mount3::PROGRAM {
        &mount3::PROCS
    } else {
        &portmap::PROCS
    };
    let facts = sluice_xdr::procs::lookup(table, proc_);
    let class = facts.map_or(TimerClass::Other, |f| f.timer);
    let outcome = rpc.call(id, cred, segments, class).await;
    let mut sample = Sample {
        bytes_sent,
        ..Sample::default()
    };
    let result = match outcome {
        Ok(o) => {
            sample.transmissions = o.transmissions;
            sample.bytes_received = o.reply_bytes;
            sample.elapsed = o.elapsed;
            decode(&mut o.reply.results()).map_err(NfsError::Decode)
        }
        Err(CallError::Rpc(e)) => Err(NfsError::Rpc(CallError::Rpc(e))),
        Err(e) => Err(NfsError::Rpc(e)),
    };
    sample.error = result.is_err();
    let name = facts.map_or("?", |f| f.name);
    stats
        .lock()
        .expect("stats lock")
        .record(prog_name, proc_, name, sample);
    result
}

/// True if `prefix` is `path` or a directory above it, component-wise.
pub fn is_path_prefix(prefix: &str, path: &str) -> bool {
    let pre: Vec<&str> = components(prefix).collect();
    let p: Vec<&str> = components(path).collect();
    p.len() >= pre.len() && p[..pre.len()] == pre[..]
}

/// `path` relative to `export` (which must be a prefix of it, see [`is_path_prefix`]), with a
/// leading '/'.
pub fn strip_export(path: &str, export: &str) -> String {
    let skip = components(export).count();
    let rest: Vec<&str> = components(path).skip(skip).collect();
    format!("/{}", rest.join("/"))
}

impl FileOf<Client> {
    /// Sets attributes (mode, owner, size, times).
    pub async fn set_attr(&self, attrs: Sattr3) -> Result<(), NfsError> {
        self.client()
            .setattr(self.fh(), attrs, None)
            .await
            .map(|_| ())
    }
}

mod file_protocol;
mod nlm;

#[cfg(test)]
mod tests;
