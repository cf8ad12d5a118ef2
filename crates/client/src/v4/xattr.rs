//! Extended attributes over NFSv4.2 (RFC 8276): GETXATTR, SETXATTR, LISTXATTRS and
//! REMOVEXATTR on a handle, in the user namespace (names without `user.`, as the protocol
//! has them). A 4.1 session has none of them: the calls answer NFS4ERR_NOTSUPP without
//! sending anything, as Linux answers ENOTSUP for `user.*` on a 4.1 mount. The empty handle
//! stands for the pseudo root ([`crate::Namespace::root`]), reached with PUTROOTFH.
//!
//! A listing is read page by page (`maxcount` [`LIST_PAGE_BYTES`], the cookie of each reply
//! starting the next) until the server says `eof`, within [`LIST_PAGES_MAX`] pages: a
//! server that never ends a listing, or whose cookie does not move, is an I/O error rather
//! than a loop.

use super::{Client, Error};
use crate::namespace::XattrSet;
use bytes::Bytes;
use sluice_xdr::nfs4::ops::{
    ListxattrsArgs, NfsArgop4, NfsResop4, Opnum4, Res4, SetxattrArgs, XattrValue4,
    SETXATTR4_CREATE, SETXATTR4_EITHER, SETXATTR4_REPLACE,
};
use sluice_xdr::nfs4::{Component4, NfsFh4, Nfsstat4};

/// `maxcount` of each LISTXATTRS: 64 KiB holds Linux's largest list (XATTR_LIST_MAX) in one
/// reply, and is well within any session's reply size this client negotiates (1 MiB).
pub const LIST_PAGE_BYTES: u32 = 64 * 1024;
/// Most LISTXATTRS calls one listing makes (see the module notes).
pub const LIST_PAGES_MAX: usize = 1024;

impl Client {
    /// The value of attribute `name` of `fh`.
    pub async fn getxattr(&self, fh: &NfsFh4, name: &[u8]) -> Result<Vec<u8>, Error> {
        let op = NfsArgop4::Getxattr(key(name));
        match self.xattr_op(fh, op).await? {
            NfsResop4::Getxattr(Res4::Ok(v)) => Ok(v.0.to_vec()),
            other => Err(unexpected(other)),
        }
    }

    /// Sets attribute `name` of `fh` to `value`, as `how` says.
    pub async fn setxattr(
        &self,
        fh: &NfsFh4,
        name: &[u8],
        value: &[u8],
        how: XattrSet,
    ) -> Result<(), Error> {
        let option = match how {
            XattrSet::Either => SETXATTR4_EITHER,
            XattrSet::Create => SETXATTR4_CREATE,
            XattrSet::Replace => SETXATTR4_REPLACE,
        };
        let op = NfsArgop4::Setxattr(SetxattrArgs {
            option,
            key: key(name),
            value: XattrValue4(Bytes::copy_from_slice(value)),
        });
        self.xattr_op(fh, op).await.map(|_| ())
    }

    /// The names of `fh`'s attributes, in the server's order.
    pub async fn listxattrs(&self, fh: &NfsFh4) -> Result<Vec<Vec<u8>>, Error> {
        let mut names = Vec::new();
        let mut cookie = 0;
        for _ in 0..LIST_PAGES_MAX {
            let op = NfsArgop4::Listxattrs(ListxattrsArgs {
                cookie,
                maxcount: LIST_PAGE_BYTES,
            });
            let page = match self.xattr_op(fh, op).await? {
                NfsResop4::Listxattrs(Res4::Ok(p)) => p,
                other => return Err(unexpected(other)),
            };
            names.extend(page.names.0.iter().map(|c| c.0.to_vec()));
            if page.eof {
                return Ok(names);
            }
            if page.cookie == cookie {
                break;
            }
            cookie = page.cookie;
        }
        Err(Error::Status {
            op: Opnum4::LISTXATTRS,
            status: Nfsstat4::IO,
        })
    }

    /// Removes attribute `name` of `fh`.
    pub async fn removexattr(&self, fh: &NfsFh4, name: &[u8]) -> Result<(), Error> {
        let op = NfsArgop4::Removexattr(key(name));
        self.xattr_op(fh, op).await.map(|_| ())
    }

    /// PUTFH (PUTROOTFH for the empty handle) and `op`: its result, which succeeded.
    async fn xattr_op(&self, fh: &NfsFh4, op: NfsArgop4) -> Result<NfsResop4, Error> {
        if self.minor_version() < 2 {
            return Err(Error::Status {
                op: op.opnum(),
                status: Nfsstat4::NOTSUPP,
            });
        }
        let put = if fh.0.is_empty() {
            NfsArgop4::Putrootfh(())
        } else {
            NfsArgop4::Putfh(fh.clone())
        };
        let mut res = self.compound(vec![put, op]).await?.ok()?;
        res.pop().ok_or(Error::Status {
            op: Opnum4::ILLEGAL,
            status: Nfsstat4::SERVERFAULT,
        })
    }
}

fn key(name: &[u8]) -> Component4 {
    Component4(Bytes::copy_from_slice(name))
}

/// A successful COMPOUND whose last result is not the op sent: the server's bug.
fn unexpected(r: NfsResop4) -> Error {
    Error::Status {
        op: r.opnum(),
        status: Nfsstat4::SERVERFAULT,
    }
}
