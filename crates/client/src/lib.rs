//! The sluice NFS client library: NFSv3 ([`Client`]) and NFSv4.1/4.2 ([`v4::Client`]) under
//! one version-neutral namespace and one file layer (the `sluice` binary's client commands,
//! in the cli crate, and the FUSE mount, in the fuse crate, are built on it).
//!
//! ```text
//!   cli: cat ls stat cp ...     fuse: lookup getattr read write ...
//!     │ Arc<dyn Namespace>
//!   connect.rs          connect(url): picks 3, 4.1 or 4.2 (none asked: 4.2, 4.1, then 3);
//!     │                 the only module that names both versions
//!   namespace.rs        Namespace: lookup, readdir pages, create, open, rename, setattr ...
//!     │  open.rs        OpenFile: one File over an OpenCalls object the version made
//!     │  neutral.rs     Handle, Attr (change attribute, 64-bit times), SetAttr, Status, Error
//!     ├──────────────────────────────┐
//!   v3/                              v4/
//!     client.rs  MOUNT, FSINFO,        mod.rs      Client, its error and attribute types
//!                typed calls for all   setup.rs    EXCHANGE_ID, CREATE_SESSION, trunking
//!                22 procedures         send.rs     SEQUENCE-led COMPOUNDs over the slot table
//!     dir.rs     READDIR(PLUS) pages   recover.rs  session and state recovery after a restart
//!     namespace.rs  Namespace + Open3  ops.rs, namespace.rs (+ Open4), callback.rs, deleg.rs,
//!                                      lock.rs, and the sans-IO session.rs, reopen.rs
//!     │                                │
//!   file.rs        File: read_at / sequential reader, UNSTABLE write-behind + COMMIT
//!     │  read.rs   tokio driver of sluice_engine::readcore and its readahead engine
//!   proto.rs       FileProtocol: what File needs (start_read/start_write, commit, getattr),
//!     │            with the protocol's own handle/attr/error types; both Clients implement it
//!   transport.rs   RpcClient: tokio driver around sluice_rpc::client::CallTable (TCP
//!                  connections or a UDP socket, many calls by XID, reconnect and resend)
//!
//!   beside: options.rs (ClientOptions), identity.rs (credentials, host name, server address),
//!           url.rs (nfs:// URLs), error.rs (the v3 client's NfsError), stats.rs
//! ```
//!
//! Everything that decides (XIDs, retransmission, readahead, what to resend) is sans-IO code in
//! `sluice-rpc` and `sluice-engine`; the modules here that touch sockets and files are thin
//! drivers.
//!
//! ```no_run
//! # async fn demo() -> Result<(), sluice_client::NfsError> {
//! use sluice_client::{Client, ClientOptions};
//! let c = Client::connect("nfs://127.0.0.1/export/f?nfsport=2049&mountport=2049",
//!                         ClientOptions::default()).await?;
//! let f = c.open(c.target_path()).await?;
//! let bytes = f.read_all().await?;
//! # Ok(()) }
//! ```

pub mod connect;
pub mod error;
pub mod file;
pub mod identity;
pub mod namespace;
pub mod neutral;
pub mod open;
pub mod options;
pub mod proto;
pub mod read;
pub mod stats;
pub mod transport;
pub mod url;
pub mod v3;
pub mod v4;

/// The v3 client's modules under their old paths.
pub use v3::{client, dir};

pub use connect::connect;
pub use error::NfsError;
pub use namespace::{Handle, Namespace, OpenFile, ProtoVersion};
pub use options::{ClientOptions, TlsFiles};
pub use proto::{FileProtocol, Stability, Version};
pub use read::parse_readahead;
pub use sluice_engine::readahead::ReadaheadMode;
pub use sluice_engine::trunk::TrunkConfig;
pub use sluice_xdr::nfs3;
pub use stats::{ClientStats, ProcStats, ReadStats};
pub use transport::{RpcClient, RpcConfig, RpcTls};
pub use url::{NfsUrl, XprtSec};
pub use v3::{list_exports, Client, DirEntry, DirPages, ExportInfo, IntoNfsUrl, Pending};

/// A file of a client ([`file::File`]); without a parameter, the v3 [`Client`]'s.
pub type File<P = Client> = file::File<P>;
/// [`file::FileReader`]; without a parameter, the v3 [`Client`]'s.
pub type FileReader<P = Client> = file::FileReader<P>;
/// [`file::FileWriter`]; without a parameter, the v3 [`Client`]'s.
pub type FileWriter<P = Client> = file::FileWriter<P>;
