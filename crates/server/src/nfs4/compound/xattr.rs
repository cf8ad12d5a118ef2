//! NFSv4.2 extended attributes (RFC 8276): GETXATTR (§8.4.2), SETXATTR (§8.4.3), LISTXATTRS
//! (§8.4.4) and REMOVEXATTR (§8.4.5) over the file system's xattr methods
//! ([`FileSystem::getxattr`] and the rest, `sluice_vfs::xattr`), the ACCESS bits of §8.4.1.1
//! and, in `map.rs`, the `xattr_support` attribute. Only minor version 2 reaches them: the op
//! table flags them `V42`, so a 4.1 COMPOUND gets NFS4ERR_OP_ILLEGAL.
//!
//! # One namespace
//! The protocol has only the user namespace and its names carry no prefix (§5); the file
//! system stores `user.NAME` (knfsd's mapping, which the Linux client expects: it strips
//! `user.` before sending and refuses other namespaces itself). So `trusted.*` or
//! `security.*` attributes of an exported file are never reached over NFS.
//!
//! # Checks, in order
//! ```text
//!  current handle ─▶ an export's object (the pseudo tree has no attributes: NOTSUPP)
//!  export gate    ─▶ ACCESS, PERM, WRONGSEC as for every op; squashing gives the caller
//!  file system    ─▶ xattr_support false: NOTSUPP (a tmpfs before Linux 6.6, for one)
//!  arguments      ─▶ name: empty or with a NUL INVAL, longer than 250 bytes NAMETOOLONG;
//!                    SETXATTR option other than EITHER/CREATE/REPLACE: INVAL;
//!                    LISTXATTRS cookie past the list: BAD_COOKIE
//!  delegations    ─▶ SETXATTR and REMOVEXATTR recall other clients' delegations of the file
//!                    (the change attribute moves; a read delegation's holder caches it)
//!  the call       ─▶ as the caller: ACCESS without read (get, list) or write (set, remove)
//!                    permission, ROFS on a read-only export, and the answers only
//!                    attributes have:
//!                      no such name (get, remove, SETXATTR4_REPLACE)  NFS4ERR_NOXATTR
//!                      SETXATTR4_CREATE of an existing name           NFS4ERR_EXIST
//!                      value larger than the file system takes        NFS4ERR_XATTR2BIG
//! ```
//!
//! # Replies
//! SETXATTR and REMOVEXATTR answer a `change_info4` of the *file* (§8.4.3.4: the client keeps
//! its attribute cache with it): the change attribute before and after, atomic only where the
//! file system says both sides were taken under one lock (MemFs; LocalFs and CephFs are not).
//! A GETXATTR value is at most 64 KiB (Linux's XATTR_SIZE_MAX); a reply that would not fit the
//! session's `ca_maxresponsesize` is NFS4ERR_REP_TOO_BIG, as for any op (`eval.rs`).
//!
//! # LISTXATTRS: cookies and maxcount
//! The file system lists names sorted, so a cookie is a position in that list: 0 starts it,
//! and each reply's cookie is where the next one starts (the count of names sent so far).
//! Names added or removed between two calls shift later positions, so a listing across
//! changes may repeat or miss a name, as a directory listing with positional cookies may;
//! nothing is kept between calls. `lxa_maxcount` bounds the encoded `LISTXATTRS4resok`
//! (cookie, array length, names, `eof`), as knfsd reads it: the names that fit are sent, with
//! `eof` once the last one is; a maxcount too small for the next name is NFS4ERR_TOOSMALL.

use super::{change_info, Call, Ctx, Fh, Nfs4};
use crate::backend::{Caller, FileHandle, FileSystem};
use crate::nfs4::map;
use bytes::Bytes;
use sluice_vfs::xattr::{XattrError, XattrSet, XATTR_VALUE_BYTES_MAX};
use sluice_xdr::nfs4::ops::{
    ListxattrsArgs, ListxattrsResOk, SetxattrArgs, XattrKeyList, XattrValue4, ACCESS4_MODIFY,
    ACCESS4_READ, ACCESS4_XALIST, ACCESS4_XAREAD, ACCESS4_XAWRITE, SETXATTR4_CREATE,
    SETXATTR4_EITHER, SETXATTR4_REPLACE,
};
use sluice_xdr::nfs4::{ChangeInfo4, Component4, Nfsstat4};

/// The ACCESS4 bits of RFC 8276 §8.4.1.1.
pub(super) const ACCESS4_XATTR_BITS: u32 = ACCESS4_XAREAD | ACCESS4_XAWRITE | ACCESS4_XALIST;

/// The neutral access bits that decide the xattr bits in `bits` (knfsd's table): reading and
/// listing need read permission, changing needs write permission.
pub(super) fn access_needs(bits: u32) -> u32 {
    let mut need = 0;
    if bits & (ACCESS4_XAREAD | ACCESS4_XALIST) != 0 {
        need |= ACCESS4_READ;
    }
    if bits & ACCESS4_XAWRITE != 0 {
        need |= ACCESS4_MODIFY;
    }
    need
}

/// The xattr bits `granted` (neutral bits) allows: the other half of [`access_needs`].
pub(super) fn access_grants(granted: u32) -> u32 {
    let mut bits = 0;
    if granted & ACCESS4_READ != 0 {
        bits |= ACCESS4_XAREAD | ACCESS4_XALIST;
    }
    if granted & ACCESS4_MODIFY != 0 {
        bits |= ACCESS4_XAWRITE;
    }
    bits
}

/// Fixed bytes of an encoded LISTXATTRS4resok: the cookie, the array's length, `eof`.
const LIST_FIXED_BYTES: usize = 8 + 4 + 4;

impl Nfs4 {
    /// GETXATTR (§8.4.2).
    pub(super) fn getxattr(
        &self,
        call: &Call<'_>,
        ctx: &Ctx,
        name: &Component4,
    ) -> Result<XattrValue4, Nfsstat4> {
        let (fs, caller, fh) = self.xattr_target(call, ctx)?;
        let v = fs
            .getxattr(&caller, fh, &name.0, XATTR_VALUE_BYTES_MAX)
            .map_err(status)?;
        Ok(XattrValue4(Bytes::from(v)))
    }

    /// SETXATTR (§8.4.3): the file's change info.
    pub(super) fn setxattr(
        &self,
        call: &Call<'_>,
        ctx: &Ctx,
        a: &SetxattrArgs,
    ) -> Result<ChangeInfo4, Nfsstat4> {
        let how = match a.option {
            SETXATTR4_EITHER => XattrSet::Either,
            SETXATTR4_CREATE => XattrSet::Create,
            SETXATTR4_REPLACE => XattrSet::Replace,
            _ => return Err(Nfsstat4::INVAL),
        };
        let (fs, caller, fh) = self.xattr_target(call, ctx)?;
        sluice_vfs::xattr::check_name(&a.key.0).map_err(status)?;
        self.break_delegations(call, ctx, fs, fh)?;
        let wcc = fs
            .setxattr(&caller, fh, &a.key.0, &a.value.0, how)
            .map_err(status)?;
        Ok(change_info(&wcc))
    }

    /// LISTXATTRS (§8.4.4): the names from position `cookie` on that fit `maxcount` (see the
    /// module notes).
    pub(super) fn listxattrs(
        &self,
        call: &Call<'_>,
        ctx: &Ctx,
        a: &ListxattrsArgs,
    ) -> Result<ListxattrsResOk, Nfsstat4> {
        let (fs, caller, fh) = self.xattr_target(call, ctx)?;
        let names = fs.listxattrs(&caller, fh).map_err(status)?;
        page(names, a.cookie, a.maxcount)
    }

    /// REMOVEXATTR (§8.4.5): the file's change info.
    pub(super) fn removexattr(
        &self,
        call: &Call<'_>,
        ctx: &Ctx,
        name: &Component4,
    ) -> Result<ChangeInfo4, Nfsstat4> {
        let (fs, caller, fh) = self.xattr_target(call, ctx)?;
        sluice_vfs::xattr::check_name(&name.0).map_err(status)?;
        self.break_delegations(call, ctx, fs, fh)?;
        let wcc = fs.removexattr(&caller, fh, &name.0).map_err(status)?;
        Ok(change_info(&wcc))
    }

    /// The object of an xattr op: an export's, through its gate, on a file system that has
    /// user attributes.
    fn xattr_target<'a>(
        &'a self,
        call: &Call<'_>,
        ctx: &'a Ctx,
    ) -> Result<(&'a dyn FileSystem, Caller, &'a FileHandle), Nfsstat4> {
        let (idx, fh) = match ctx.current.as_ref().ok_or(Nfsstat4::NOFILEHANDLE)? {
            Fh::Pseudo(_) => return Err(Nfsstat4::NOTSUPP),
            Fh::Export { idx, fh } => (*idx, fh),
        };
        let (fs, caller) = self.gate(call, idx)?;
        if !fs.xattr_support() {
            return Err(Nfsstat4::NOTSUPP);
        }
        Ok((fs, caller, fh))
    }
}

/// The status of an xattr failure.
fn status(e: XattrError) -> Nfsstat4 {
    match e {
        XattrError::NoXattr => Nfsstat4::NOXATTR,
        XattrError::TooBig => Nfsstat4::XATTR2BIG,
        XattrError::Fs(e) => map::status(e),
    }
}

/// One LISTXATTRS reply from the sorted `names`: from position `cookie`, as many as fit
/// `maxcount` bytes of LISTXATTRS4resok.
fn page(names: Vec<Vec<u8>>, cookie: u64, maxcount: u32) -> Result<ListxattrsResOk, Nfsstat4> {
    let start = usize::try_from(cookie).map_err(|_| Nfsstat4::BAD_COOKIE)?;
    if start > names.len() {
        return Err(Nfsstat4::BAD_COOKIE);
    }
    let room = maxcount as usize;
    let mut used = LIST_FIXED_BYTES;
    if used > room {
        return Err(Nfsstat4::TOOSMALL);
    }
    let total = names.len();
    let mut out = Vec::new();
    for name in names.into_iter().skip(start) {
        let len = 4 + name.len().div_ceil(4) * 4;
        if used + len > room {
            break;
        }
        used += len;
        out.push(Component4(Bytes::from(name)));
    }
    let next = start + out.len();
    if out.is_empty() && next < total {
        return Err(Nfsstat4::TOOSMALL);
    }
    Ok(ListxattrsResOk {
        cookie: next as u64,
        names: XattrKeyList(out),
        eof: next == total,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_xdr::to_bytes;

    fn names(n: &[&str]) -> Vec<Vec<u8>> {
        n.iter().map(|s| s.as_bytes().to_vec()).collect()
    }

    #[test]
    fn a_page_is_bounded_by_maxcount_and_its_cookie_resumes_it() {
        let all = names(&["a", "bb", "ccccc"]);
        // "a" and "bb" take 8 bytes each, "ccccc" 12.
        let p = page(all.clone(), 0, (LIST_FIXED_BYTES + 16) as u32).unwrap();
        assert_eq!(p.names.0.len(), 2);
        assert_eq!((p.cookie, p.eof), (2, false));
        assert_eq!(
            to_bytes(&p).len(),
            LIST_FIXED_BYTES + 16,
            "maxcount is the encoded size"
        );
        let p = page(all.clone(), p.cookie, (LIST_FIXED_BYTES + 12) as u32).unwrap();
        assert_eq!(p.names.0, vec![Component4(Bytes::from_static(b"ccccc"))]);
        assert_eq!((p.cookie, p.eof), (3, true));
        // At the end: nothing more, eof.
        let p = page(all.clone(), 3, 100).unwrap();
        assert!(p.names.0.is_empty() && p.eof);
    }

    #[test]
    fn a_page_without_room_for_a_name_is_toosmall_and_a_cookie_past_the_end_is_bad() {
        let all = names(&["abcdefgh"]);
        assert_eq!(
            page(all.clone(), 0, (LIST_FIXED_BYTES + 11) as u32),
            Err(Nfsstat4::TOOSMALL)
        );
        assert_eq!(page(all.clone(), 0, 4), Err(Nfsstat4::TOOSMALL));
        assert_eq!(page(all.clone(), 2, 100), Err(Nfsstat4::BAD_COOKIE));
        assert_eq!(page(all, u64::MAX, 100), Err(Nfsstat4::BAD_COOKIE));
        // No names at all fit any maxcount that holds the fixed part.
        let p = page(Vec::new(), 0, LIST_FIXED_BYTES as u32).unwrap();
        assert!(p.names.0.is_empty() && p.eof && p.cookie == 0);
    }

    #[test]
    fn the_xattr_access_bits_follow_read_and_modify() {
        assert_eq!(access_needs(ACCESS4_XAREAD), ACCESS4_READ);
        assert_eq!(access_needs(ACCESS4_XALIST), ACCESS4_READ);
        assert_eq!(access_needs(ACCESS4_XAWRITE), ACCESS4_MODIFY);
        assert_eq!(access_needs(0), 0);
        assert_eq!(access_grants(ACCESS4_READ), ACCESS4_XAREAD | ACCESS4_XALIST);
        assert_eq!(access_grants(ACCESS4_MODIFY), ACCESS4_XAWRITE);
    }
}
