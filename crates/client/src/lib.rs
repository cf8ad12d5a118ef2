//! The sluice NFS client library: NFSv3 ([`Client`]) and NFSv4.1/4.2 ([`v4::Client`]) under
//! one file layer (the `sluice` binary's client commands, in the cli crate, are built on it).
//!
//! ```text
//!   (cli crate: cp, cat, ls, stat, mkdir, rm, mv)   the `sluice` binary's commands
//!     │
//!   Namespace (namespace.rs)   the version-neutral file system the commands are written
//!     │                  over: lookup, readdir pages, create, open, rename, setattr...;
//!     │                  connect() picks 3, 4.1 or 4.2 (none asked: 4.2, 4.1, then 3)
//!   Client (client.rs)   mount, FSINFO, typed calls for all 22 procedures, path helpers,
//!     │                  per-procedure statistics (v4::Client beside it, over a session)
//!   File (file.rs)       read_at / sequential reader, UNSTABLE write-behind + COMMIT
//!     │   ├─ read.rs     tokio driver of sluice_engine::readcore (cache, READs in flight,
//!     │   │              waiting readers, change detection: pure) and its readahead engine
//!     │   │              (autotuned window, streams, global budget)
//!     │   └─ sluice_engine::plan   pure policy: UnstableLog (what a COMMIT must still
//!     │                  cover, what to resend after a verifier change)
//!     │
//!   FileProtocol (proto.rs)   the only way File reaches the server: start_read/start_write
//!     │                  (pipelined), commit, getattr, with neutral handle/attr/error types;
//!     │                  implemented by Client (v3) and by v4::Client (a SEQUENCE-led
//!     │                  COMPOUND per call; v4/session.rs is its pure slot table and lease)
//!   RpcClient (transport.rs)   tokio driver around sluice_rpc::client::CallTable: one TCP
//!                              connection (or UDP socket), many calls by XID, reconnect and
//!                              resend (TCP) or RTO retransmission (UDP, the table's)
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

pub mod client;
pub mod dir;
pub mod error;
pub mod file;
pub mod namespace;
pub mod proto;
pub mod read;
pub mod stats;
pub mod transport;
pub mod url;
pub mod v4;

pub use client::{list_exports, Client, ClientOptions, DirEntry, ExportInfo, IntoNfsUrl, Pending};
pub use dir::DirPages;
pub use error::NfsError;
pub use file::{File, FileReader, FileWriter};
pub use namespace::{connect, Handle, Namespace, OpenFile, ProtoVersion};
pub use proto::{FileProtocol, Stability, Version};
pub use read::parse_readahead;
pub use sluice_engine::readahead::ReadaheadMode;
pub use sluice_engine::trunk::TrunkConfig;
pub use sluice_xdr::nfs3;
pub use stats::{ClientStats, ProcStats, ReadStats};
pub use transport::{RpcClient, RpcConfig};
pub use url::NfsUrl;
