//! [`LocalFs`]: one exported directory of the local file system.
//!
//! # Rules every procedure follows
//! * **Handles are resolved as root, operations run as the client.** `open_by_handle_at` needs
//!   CAP_DAC_READ_SEARCH, so the handle becomes an `O_PATH` descriptor first; then a
//!   [`CredGuard`](crate::creds::CredGuard) switches the thread to the caller's fsuid/fsgid/groups
//!   and the operation is a `*at()` call relative to that descriptor, checked by the kernel. Where
//!   the kernel cannot check (I/O on a descriptor the server opened), the check is explicit:
//!   `faccessat2` with `AT_EACCESS` under the caller's credentials, plus knfsd's *owner override*
//!   (the owner may read and write their file whatever its mode, so that "create 0444, then write"
//!   works, as it does locally with an open descriptor).
//! * **Names are one component.** Empty names, `/` and NUL are `FsError::Acces`, names over 255 bytes
//!   `FsError::NameTooLong`. Final symlinks are never followed (`O_NOFOLLOW`, `AT_SYMLINK_NOFOLLOW`).
//!   `..` of the export root is the root (as knfsd), so no name leads out of the export.
//! * **Weak cache consistency** (RFC 1813 §2.6): `before` is taken before the change, `after` once
//!   it is done, with nothing cached in between. Concurrent changes by others may fall between
//!   them, as with any server.
//! * **Read-only exports** answer `FsError::RoFs` to every modifying procedure (after the handle is
//!   found valid, so a stale handle is still `FsError::Stale`).
//! * **Nested mounts are not exported**: objects on another mount than the export root are not
//!   given handles; LOOKUP of a mount point answers `FsError::Acces` and READDIRPLUS omits its
//!   attributes and handle (as knfsd without `crossmnt`, except that knfsd shows the covered
//!   directory, which user space cannot reach).
//! * **Mode when the client sends none** is 0 (as knfsd); objects are created with exactly the
//!   mode the client sent (the thread's umask is 0, see `creds`).
//!
//! # READ and WRITE
//! Both go through the open-file cache and then the export's cache mode (`iomode`: buffered,
//! `RWF_DONTCACHE`, or `O_DIRECT` on an aligned middle with buffered head and tail, each falling
//! back to buffered with one warning when the file system refuses). The mode changes what stays
//! in the page cache, never the bytes, the `eof` flag or the stability a WRITE or COMMIT promises.
//!
//! # READDIR cookies
//! A cookie is the file system's own directory offset (`d_off` from `getdents64`, resumed with
//! `lseek`), which is what knfsd sends: ext4 hashes and tmpfs offsets stay valid when other
//! entries are added or removed, so a long listing is neither restarted nor duplicated by
//! concurrent changes. The cookie verifier is a keyed digest of the directory's kernel handle:
//! constant for the life of the directory, so a client is never told `FsError::BadCookie` merely
//! because the directory changed (a verifier built from the mtime would do that on every change,
//! and Linux clients then restart or truncate their listing). A verifier of zero is accepted, as
//! RFC 1813 §3.3.16 allows for the first request.
//!
//! # Files, by role
//! * `base`: the [`LocalFs`] value, its configuration and how an export is opened; what every
//!   other file shares (a resolved object, attributes for replies, errno mapping).
//! * `resolve`: resolution and confinement of handles.
//! * `perms`: acting as the caller, and the explicit permission checks.
//! * `dir`: directory machinery: names, making and unlinking, attributes, READDIR entries.
//! * `data`: the open-file cache, the cache modes, and the READ fast paths of the data path.
//! * `procs`: [`FileSystem`](crate::FileSystem) for [`LocalFs`], every procedure's body.
//! * `xattr`: user extended attributes (the bodies `procs` forwards the xattr methods to).
//!
//! A trait's implementation is one block, so the procedures stay together in `procs` (in the
//! trait's order, no forwarding layer); the other files hold what they share, one role each.

// The failure side of every procedure carries the failure reply's body (attributes, wcc data),
// which is as large as the success side; boxing it would add an allocation to every error reply.
#![allow(clippy::result_large_err)]

mod base;
mod confined;
mod data;
mod dir;
mod perms;
mod procs;
mod resolve;
mod xattr;

pub use base::{reflink_block_bytes, LocalFs, LocalFsConfig, SetupError, DEFAULT_STATE_DIR};
pub use data::{CheckedRead, NowaitRead};
