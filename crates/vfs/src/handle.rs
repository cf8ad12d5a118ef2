//! File handles: persistent, small, unforgeable, confined to their export.
//!
//! # What a handle is made of
//! The identity of a file is the kernel's own: `name_to_handle_at(2)` returns an opaque *kernel
//! handle* (for ext4 the inode number and generation, 8 bytes; tmpfs 12; xfs 8-16; btrfs 20)
//! that `open_by_handle_at(2)` turns back into the file, across reboots, and that fails with
//! ESTALE once the inode is freed, even if its number is reused (the generation differs). knfsd
//! builds its handles from the same `exportfs` encoding.
//!
//! ```text
//!  0       1               5       6       7       8            8+n   8+n+1        len-12   len
//!  +-------+---------------+-------+-------+-------+------------+-----+------------+--------+
//!  | ver=1 | export id (BE)| kind  | ktype | n     | kernel fh  |ptype| parent fh  |  MAC   |
//!  +-------+---------------+-------+-------+-------+------------+-----+------------+--------+
//!                                                                \__ kind 2 only __/  12 bytes
//! ```
//! * `ver`: layout version, 1. Any other value is `FsError::BadHandle`.
//! * `export id`: which export issued the handle (`fsid=` in exports, else derived from the
//!   export's path). Lets a server with several exports route a handle, and makes a handle of
//!   another (or a removed) export `FsError::Stale`.
//! * `kind`: 0 directory, 1 other object, 2 other object with a parent hint (below).
//! * `ktype`, `n`, `kernel fh`: the kernel handle's type (all Linux types fit a byte) and bytes.
//! * `ptype`, `parent fh`: for kind 2, the kernel handle of the directory the object was found in.
//! * `MAC`: the first 12 bytes of HMAC-SHA256 over everything before it, keyed per export.
//!
//! At most 64 bytes (RFC 1813 NFS3_FHSIZE): the envelope takes 20, leaving 44 for the kernel
//! handle and, when it fits, the parent hint.
//!
//! # Unforgeable
//! A kernel handle is guessable (inode numbers are small, generations often predictable), and
//! `open_by_handle_at` does no permission check on the path to the file. Without the MAC a client
//! could open any inode of the file system. The MAC key is derived from a 32-byte secret kept in
//! `<state_dir>/secret` (created 0600 on first start, never sent anywhere):
//! `key = HMAC-SHA256(secret, "sluice file handle v1" || export id)`, so each export has its own
//! key and a handle cannot be moved from one export to another by editing its export id. 96 bits
//! of MAC make an online forgery hopeless (2^-96 per attempt). A wrong MAC is `FsError::BadHandle`.
//! Deleting the secret file invalidates every handle ever issued (clients see `FsError::BadHandle`).
//!
//! # Confined to the export
//! A handle we issued names an object that was inside the export at the time; it may since have
//! been moved out by a local user. So every resolution checks where the object is now (see
//! `LocalFs::resolve`): directories by the path the kernel reports for the opened descriptor
//! (the kernel always reconnects a directory to the tree, so its path is exact), other objects
//! the same way when the kernel knows their path. A non-directory opened from a cold cache is
//! "disconnected" (its reported path is `/`), and one with several hard links may be reported
//! under a name outside the export; then the parent hint is opened, checked, and searched for the
//! object's inode, which also reconnects it for later lookups. An object that cannot be shown to
//! be inside the export is `FsError::Stale`. One consequence: a file moved to another directory of
//! the export is stale *while the kernel has no cached path for it* (after a reboot), until a
//! LOOKUP by name (which clients do after `FsError::Stale`) reconnects it; knfsd's
//! `subtree_check` has the same property. Exporting the root of a file system avoids all of it:
//! then every object of the mount is inside and no check is made.
//!
//! # One object, many handles
//! The parent hint makes a handle name a file *and where it was found*: a file with hard links
//! in two directories has two handles, both valid, and a client that reaches it by both names
//! holds both. State about the file (NFSv4 share reservations, byte-range locks, delegations)
//! must not split the same way, or two clients locking the file by two names would not
//! conflict. `state_key` is the file's identity for such state, as knfsd keys its state by
//! the inode: a tag byte, the export id, the kernel handle's type, length and bytes; no kind,
//! no parent hint, no MAC. The MAC is checked first, so a forged handle cannot name another
//! file's state; bytes that fail the check get their own key (another tag byte and the bytes
//! as sent), which no valid handle maps to.

use super::sys::{KernelHandle, KERNEL_HANDLE_MAX};
use crate::types::{FileHandle, FsError, FILE_HANDLE_BYTES_MAX as FHSIZE};
use bytes::Bytes;
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};
use std::io::{self, Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

/// The layout version written in byte 0.
pub const HANDLE_VERSION: u8 = 1;
/// Bytes of HMAC-SHA256 kept in a handle.
pub const MAC_BYTES: usize = 12;
/// Bytes before the kernel handle.
const HEADER_BYTES: usize = 8;
/// Size of the secret in `<state_dir>/secret`.
pub const SECRET_BYTES: usize = 32;
/// The name of the secret file inside the state directory.
pub const SECRET_FILE: &str = "secret";

const _: () = assert!(HEADER_BYTES + KERNEL_HANDLE_MAX + MAC_BYTES == FHSIZE);

/// Which export a handle belongs to (also the `fsid` of its attributes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ExportId(pub u32);

impl ExportId {
    /// The default id of an export: the first 4 bytes of SHA-256 of its canonical path. Stable
    /// across restarts as long as the path is; set `fsid=` to keep handles valid when moving an
    /// export.
    pub fn from_path(path: &Path) -> ExportId {
        use std::os::unix::ffi::OsStrExt;
        let digest = Sha256::digest(path.as_os_str().as_bytes());
        ExportId(u32::from_be_bytes(digest[..4].try_into().expect("4 bytes")))
    }
}

/// The export id of a handle, for routing a request to the export that issued it. `None` for a
/// handle too short or of an unknown version (answer `FsError::BadHandle`).
pub fn export_id_of(fh: &[u8]) -> Option<ExportId> {
    let b = fh;
    if b.len() < HEADER_BYTES + MAC_BYTES || b[0] != HANDLE_VERSION {
        return None;
    }
    Some(ExportId(u32::from_be_bytes(b[1..5].try_into().ok()?)))
}

/// What the handle says about its object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Dir = 0,
    Other = 1,
    OtherWithParent = 2,
}

/// A handle whose envelope and MAC have been verified.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Decoded {
    pub kind: Kind,
    pub object: KernelHandle,
    pub parent: Option<KernelHandle>,
}

/// The per-export MAC key.
#[derive(Clone)]
pub(crate) struct HandleKey {
    export: ExportId,
    mac: Hmac<Sha256>,
}

impl HandleKey {
    pub fn new(secret: &[u8; SECRET_BYTES], export: ExportId) -> HandleKey {
        let mut kdf = Hmac::<Sha256>::new_from_slice(secret).expect("HMAC takes any key size");
        kdf.update(b"sluice file handle v1");
        kdf.update(&export.0.to_be_bytes());
        let key = kdf.finalize().into_bytes();
        HandleKey {
            export,
            mac: Hmac::<Sha256>::new_from_slice(&key).expect("HMAC takes any key size"),
        }
    }

    pub fn export(&self) -> ExportId {
        self.export
    }

    /// Builds a handle. The parent hint is dropped when it does not fit. `None` when the kernel
    /// handle type does not fit a byte (no Linux file system uses such types for the plain,
    /// non-connectable handles requested here).
    pub fn encode(
        &self,
        dir: bool,
        object: &KernelHandle,
        parent: Option<&KernelHandle>,
    ) -> Option<FileHandle> {
        let ktype = u8::try_from(object.ty).ok()?;
        let obj = object.as_bytes();
        let parent = parent.filter(|p| {
            !dir && u8::try_from(p.ty).is_ok()
                && HEADER_BYTES + obj.len() + 1 + p.as_bytes().len() + MAC_BYTES <= FHSIZE
        });
        let kind = match (dir, parent) {
            (true, _) => Kind::Dir,
            (false, None) => Kind::Other,
            (false, Some(_)) => Kind::OtherWithParent,
        };
        let mut b = Vec::with_capacity(FHSIZE);
        b.push(HANDLE_VERSION);
        b.extend_from_slice(&self.export.0.to_be_bytes());
        b.push(kind as u8);
        b.push(ktype);
        b.push(obj.len() as u8);
        b.extend_from_slice(obj);
        if let Some(p) = parent {
            b.push(p.ty as u8);
            b.extend_from_slice(p.as_bytes());
        }
        let tag = self.tag(&b);
        b.extend_from_slice(&tag[..MAC_BYTES]);
        debug_assert!(b.len() <= FHSIZE);
        FileHandle::new(Bytes::from(b)).ok()
    }

    /// Checks a handle's envelope and MAC. Malformed or forged: BADHANDLE; issued by another
    /// export: STALE.
    pub fn decode(&self, fh: &[u8]) -> Result<Decoded, FsError> {
        if fh.len() < HEADER_BYTES + MAC_BYTES || fh.len() > FHSIZE || fh[0] != HANDLE_VERSION {
            return Err(FsError::BadHandle);
        }
        let export = ExportId(u32::from_be_bytes(fh[1..5].try_into().expect("4 bytes")));
        if export != self.export {
            return Err(FsError::Stale);
        }
        let (body, mac) = fh.split_at(fh.len() - MAC_BYTES);
        let mut m = self.mac.clone();
        m.update(body);
        // Constant-time comparison of the truncated tag.
        m.verify_truncated_left(mac)
            .map_err(|_| FsError::BadHandle)?;
        let kind = match body[5] {
            0 => Kind::Dir,
            1 => Kind::Other,
            2 => Kind::OtherWithParent,
            _ => return Err(FsError::BadHandle),
        };
        let ktype = i32::from(body[6]);
        let n = body[7] as usize;
        let rest = &body[HEADER_BYTES..];
        if n == 0 || n > rest.len() {
            return Err(FsError::BadHandle);
        }
        let object = KernelHandle::new(ktype, &rest[..n]).ok_or(FsError::BadHandle)?;
        let tail = &rest[n..];
        let parent = match kind {
            Kind::OtherWithParent if tail.len() >= 2 => {
                Some(KernelHandle::new(i32::from(tail[0]), &tail[1..]).ok_or(FsError::BadHandle)?)
            }
            Kind::Dir | Kind::Other if tail.is_empty() => None,
            _ => return Err(FsError::BadHandle),
        };
        Ok(Decoded {
            kind,
            object,
            parent,
        })
    }

    /// An 8-byte digest of a kernel handle, keyed (so it reveals nothing about the inode).
    pub fn digest8(&self, h: &KernelHandle) -> [u8; 8] {
        let mut m = self.mac.clone();
        m.update(b"cookie verifier");
        m.update(h.as_bytes());
        m.finalize().into_bytes()[..8].try_into().expect("8 bytes")
    }

    fn tag(&self, body: &[u8]) -> [u8; 32] {
        let mut m = self.mac.clone();
        m.update(body);
        m.finalize().into_bytes().into()
    }
}

/// The first byte of a [`state_key`] of a valid handle.
const STATE_KEY_VALID: u8 = 1;
/// The first byte of a [`state_key`] of bytes that are not a valid handle of the export.
const STATE_KEY_INVALID: u8 = 0;

/// The identity of the object a handle names (module notes, "One object, many handles"):
/// equal for every handle of one object, different for different objects and for bytes that
/// are not a valid handle of `key`'s export. Never fails, no I/O.
pub(crate) fn state_key(key: &HandleKey, fh: &[u8]) -> Bytes {
    let mut b = Vec::with_capacity(FHSIZE + 1);
    match key.decode(fh) {
        Ok(d) => {
            b.push(STATE_KEY_VALID);
            b.extend_from_slice(&key.export().0.to_be_bytes());
            // `decode` made the type from one byte of the handle.
            b.push(d.object.ty as u8);
            b.push(d.object.as_bytes().len() as u8);
            b.extend_from_slice(d.object.as_bytes());
        }
        Err(_) => {
            b.push(STATE_KEY_INVALID);
            b.extend_from_slice(fh);
        }
    }
    Bytes::from(b)
}

/// Reads `<state_dir>/secret`, creating the directory (0700) and the secret (0600, random) on
/// first start. Concurrent first starts agree on one secret: it is written to a private temporary
/// file and published with `link(2)`, which fails if another process published first.
pub fn load_or_create_secret(state_dir: &Path) -> io::Result<[u8; SECRET_BYTES]> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(state_dir)?;
    let path = state_dir.join(SECRET_FILE);
    match read_secret(&path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        r => return r,
    }
    let mut secret = [0u8; SECRET_BYTES];
    super::sys::getrandom(&mut secret)?;
    let tmp = state_dir.join(format!(".{SECRET_FILE}.{}", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)?;
        f.write_all(&secret)?;
        f.sync_all()?;
    }
    let published = std::fs::hard_link(&tmp, &path);
    let _ = std::fs::remove_file(&tmp);
    match published {
        Ok(()) => {
            std::fs::File::open(state_dir)?.sync_all()?;
            tracing::info!(path = %path.display(), "created a new file handle secret");
            Ok(secret)
        }
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => read_secret(&path),
        Err(e) => Err(e),
    }
}

fn read_secret(path: &Path) -> io::Result<[u8; SECRET_BYTES]> {
    let mut f = std::fs::File::open(path)?;
    let meta = f.metadata()?;
    if meta.permissions().mode() & 0o077 != 0 {
        tracing::warn!(path = %path.display(), "file handle secret is readable by others");
    }
    let mut secret = [0u8; SECRET_BYTES];
    f.read_exact(&mut secret).map_err(|e| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{}: shorter than {SECRET_BYTES} bytes: {e}", path.display()),
        )
    })?;
    let mut extra = [0u8; 1];
    if f.read(&mut extra)? != 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{}: longer than {SECRET_BYTES} bytes", path.display()),
        ));
    }
    Ok(secret)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(export: u32) -> HandleKey {
        HandleKey::new(&[7; SECRET_BYTES], ExportId(export))
    }

    #[test]
    fn round_trip_with_and_without_parent() {
        let k = key(5);
        let obj = KernelHandle::new(1, &[1, 2, 3, 4, 5, 6, 7, 8]).unwrap();
        let par = KernelHandle::new(1, &[9; 8]).unwrap();
        let fh = k.encode(false, &obj, Some(&par)).unwrap();
        assert!(fh.len() <= FHSIZE);
        assert_eq!(export_id_of(fh.as_bytes()), Some(ExportId(5)));
        let d = k.decode(fh.as_bytes()).unwrap();
        assert_eq!(d.kind, Kind::OtherWithParent);
        assert_eq!(d.object, obj);
        assert_eq!(d.parent, Some(par));
        let d = k
            .decode(k.encode(true, &obj, Some(&par)).unwrap().as_bytes())
            .unwrap();
        assert_eq!((d.kind, d.parent), (Kind::Dir, None));
    }

    #[test]
    fn parent_hint_dropped_when_too_big() {
        let k = key(5);
        let obj = KernelHandle::new(0x81, &[1; 30]).unwrap();
        let par = KernelHandle::new(0x81, &[2; 30]).unwrap();
        let fh = k.encode(false, &obj, Some(&par)).unwrap();
        assert_eq!(k.decode(fh.as_bytes()).unwrap().kind, Kind::Other);
        let big = KernelHandle::new(0x4d, &[3; KERNEL_HANDLE_MAX]).unwrap();
        assert_eq!(k.encode(false, &big, None).unwrap().len(), FHSIZE);
    }

    #[test]
    fn tampering_is_badhandle_and_other_exports_are_stale() {
        let k = key(5);
        let obj = KernelHandle::new(1, &[1, 2, 3, 4, 5, 6, 7, 8]).unwrap();
        let fh = k.encode(false, &obj, None).unwrap().as_bytes().to_vec();
        for i in 0..fh.len() {
            let mut bad = fh.clone();
            bad[i] ^= 0x40;
            let want = if (1..5).contains(&i) {
                FsError::Stale
            } else {
                FsError::BadHandle
            };
            assert_eq!(k.decode(&bad).unwrap_err(), want, "byte {i}");
        }
        assert_eq!(k.decode(&fh[..10]).unwrap_err(), FsError::BadHandle);
        assert_eq!(k.decode(&[]).unwrap_err(), FsError::BadHandle);
        // Same export id, different secret: forged.
        let other = HandleKey::new(&[8; SECRET_BYTES], ExportId(5));
        assert_eq!(other.decode(&fh).unwrap_err(), FsError::BadHandle);
        assert_eq!(key(6).decode(&fh).unwrap_err(), FsError::Stale);
    }

    #[test]
    fn state_key_is_the_object_whatever_the_parent_hint() {
        let k = key(5);
        let obj = KernelHandle::new(1, &[1, 2, 3, 4, 5, 6, 7, 8]).unwrap();
        let other = KernelHandle::new(1, &[1, 2, 3, 4, 5, 6, 7, 9]).unwrap();
        let dir_a = KernelHandle::new(1, &[9; 8]).unwrap();
        let dir_b = KernelHandle::new(1, &[10; 8]).unwrap();
        let via_a = k.encode(false, &obj, Some(&dir_a)).unwrap();
        let via_b = k.encode(false, &obj, Some(&dir_b)).unwrap();
        let bare = k.encode(false, &obj, None).unwrap();
        assert_ne!(via_a, via_b);
        let id = state_key(&k, via_a.as_bytes());
        assert_eq!(state_key(&k, via_b.as_bytes()), id);
        assert_eq!(state_key(&k, bare.as_bytes()), id);
        let not = k.encode(false, &other, Some(&dir_a)).unwrap();
        assert_ne!(state_key(&k, not.as_bytes()), id);
        // Another export's handle of an equal kernel handle is another object.
        let k6 = key(6);
        let elsewhere = k6.encode(false, &obj, None).unwrap();
        assert_ne!(state_key(&k6, elsewhere.as_bytes()), id);
        // Forged or foreign bytes never take a valid handle's key, and never panic.
        let mut forged = via_a.as_bytes().to_vec();
        *forged.last_mut().unwrap() ^= 1;
        assert_ne!(state_key(&k, &forged), id);
        assert_ne!(state_key(&k, &forged), state_key(&k, via_a.as_bytes()));
        assert_ne!(state_key(&k, &id), id);
        assert_ne!(state_key(&k, elsewhere.as_bytes()), id);
        for n in 0..=FHSIZE + 1 {
            let _ = state_key(&k, &vec![1u8; n]);
        }
        let valid = via_a.as_bytes();
        for n in 0..valid.len() {
            assert_ne!(state_key(&k, &valid[..n]), id, "prefix of {n} bytes");
        }
        for i in 0..valid.len() {
            for bit in 0..8 {
                let mut bad = valid.to_vec();
                bad[i] ^= 1 << bit;
                assert_ne!(state_key(&k, &bad), id, "byte {i} bit {bit}");
            }
        }
    }

    #[test]
    fn secret_is_created_once_with_mode_0600() {
        let dir = std::env::temp_dir().join(format!("sluice-secret-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let state = dir.join("state");
        let a = load_or_create_secret(&state).unwrap();
        let b = load_or_create_secret(&state).unwrap();
        assert_eq!(a, b);
        let mode = std::fs::metadata(state.join(SECRET_FILE))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        let dmode = std::fs::metadata(&state).unwrap().permissions().mode();
        assert_eq!(dmode & 0o777, 0o700);
        std::fs::write(state.join(SECRET_FILE), b"short").unwrap();
        assert!(load_or_create_secret(&state).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
