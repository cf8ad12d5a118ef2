//! Path-based operations of [`Client`] (LOOKUP walks, OPEN and CREATE by path, MKDIR, CLOSE,
//! READDIR, GETATTR) and the helpers the namespace shares (component names, reply parsing).
//! The handle-based [`crate::Namespace`] is in `namespace.rs`.

use super::*;
impl Client {
    /// The handle and attributes of `path` (absolute on the server's pseudo file system:
    /// PUTROOTFH, then one LOOKUP per component).
    pub async fn lookup(&self, path: &str) -> Result<(NfsFh4, Attr), Error> {
        let comps: Vec<&str> = crate::url::components(path).collect();
        // Besides the LOOKUPs: SEQUENCE, PUTROOTFH or PUTFH, GETFH, GETATTR.
        let per = (self.inner.ops_max - 4) as usize;
        let mut fh: Option<NfsFh4> = None;
        let mut chunks: Vec<&[&str]> = comps.chunks(per).collect();
        if chunks.is_empty() {
            chunks.push(&[]);
        }
        let n = chunks.len();
        for (i, chunk) in chunks.into_iter().enumerate() {
            let mut ops = vec![match &fh {
                None => NfsArgop4::Putrootfh(()),
                Some(f) => NfsArgop4::Putfh(f.clone()),
            }];
            for c in chunk {
                ops.push(NfsArgop4::Lookup(component(c)?));
            }
            ops.push(NfsArgop4::Getfh(()));
            if i + 1 == n {
                ops.push(NfsArgop4::Getattr(attr_request()));
            }
            let res = self.compound(ops).await?.ok()?;
            fh = Some(find_fh(&res)?);
            if i + 1 == n {
                return Ok((fh.expect("just set"), find_attr(&res)?));
            }
        }
        unreachable!("the last chunk returns")
    }

    /// Opens the regular file at `path` for reading (OPEN CLAIM_NULL in its directory).
    pub async fn open(&self, path: &str) -> Result<(Fh, Attr), Error> {
        self.open_in(path, OPEN4_SHARE_ACCESS_READ, Openflag4::NoCreate)
            .await
    }

    /// Creates (or with [`CreateMode::Truncate`] truncates) the file at `path` with `mode` and
    /// opens it for writing.
    pub async fn create(
        &self,
        path: &str,
        mode: u32,
        how: CreateMode,
    ) -> Result<(Fh, Attr), Error> {
        let mut a = AttrValues {
            mode: Some(mode & 0o7777),
            ..AttrValues::default()
        };
        let how = match how {
            CreateMode::Truncate => {
                a.size = Some(0);
                Createhow4::Unchecked(a.encode())
            }
            CreateMode::Exclusive => Createhow4::Exclusive41(CreatVerfAttr {
                verf: rand::random(),
                attrs: a.encode(),
            }),
        };
        self.open_in(path, OPEN4_SHARE_ACCESS_BOTH, Openflag4::Create(how))
            .await
    }

    pub(super) async fn open_in(
        &self,
        path: &str,
        access: u32,
        openhow: Openflag4,
    ) -> Result<(Fh, Attr), Error> {
        let (dir, name) = split_path(path)?;
        let (dirfh, _) = self.lookup(dir).await?;
        self.open_at(&dirfh, access, openhow, OpenClaim4::Null(component(name)?))
            .await
    }

    /// Makes the directory `path` with `mode` (CREATE NF4DIR in its parent).
    pub async fn mkdir(&self, path: &str, mode: u32) -> Result<NfsFh4, Error> {
        let (dir, name) = split_path(path)?;
        let (dirfh, _) = self.lookup(dir).await?;
        let attrs = AttrValues {
            mode: Some(mode & 0o7777),
            ..AttrValues::default()
        };
        let res = self
            .compound(vec![
                NfsArgop4::Putfh(dirfh),
                NfsArgop4::Create(CreateArgs {
                    objtype: Createtype4::Dir,
                    objname: component(name)?,
                    createattrs: attrs.encode(),
                }),
                NfsArgop4::Getfh(()),
            ])
            .await?
            .ok()?;
        find_fh(&res)
    }

    /// CLOSE (and DELEGRETURN of a delegation the open came with).
    pub async fn close(&self, fh: &Fh) -> Result<(), Error> {
        if fh.stateid == Stateid4::ANONYMOUS {
            return Ok(());
        }
        // Forgotten first, so that a reopen pass from now on leaves it closed.
        let current = self
            .inner
            .open_files
            .lock()
            .expect("opens lock")
            .remove(fh.stateid);
        let mut ops = vec![
            NfsArgop4::Putfh(fh.fh.clone()),
            NfsArgop4::Close(CloseArgs {
                seqid: 0,
                open_stateid: current,
            }),
        ];
        let delegation = self
            .inner
            .callbacks
            .lock()
            .expect("callbacks lock")
            .delegations
            .closing(&fh.fh);
        if let Some(d) = delegation {
            ops.push(NfsArgop4::Delegreturn(d));
        }
        let res = self.compound(ops).await;
        if let Some(d) = delegation {
            let returned =
                matches!(&res, Ok(r) if r.results.iter().any(|r| r.opnum() == Opnum4::DELEGRETURN));
            if !returned {
                // CLOSE failed before it: the delegation is returned on its own.
                let _ = self
                    .compound(vec![
                        NfsArgop4::Putfh(fh.fh.clone()),
                        NfsArgop4::Delegreturn(d),
                    ])
                    .await;
            }
            self.inner
                .callbacks
                .lock()
                .expect("callbacks lock")
                .delegations
                .returned(&fh.fh, d);
        }
        res?.ok().map(|_| ())
    }

    /// Every entry of the directory `dir` with its attributes (READDIR pages, at most
    /// [`DIR_ENTRIES_MAX`] entries), in the server's order.
    pub async fn readdir(&self, dir: &NfsFh4) -> Result<Vec<(String, Attr)>, Error> {
        let mut out = Vec::new();
        let (mut cookie, mut cookieverf) = (0u64, [0u8; 8]);
        loop {
            let res = self
                .compound(vec![
                    NfsArgop4::Putfh(dir.clone()),
                    NfsArgop4::Readdir(ReaddirArgs {
                        cookie,
                        cookieverf,
                        dircount: READDIR_DIRCOUNT_BYTES,
                        maxcount: self.inner.rsize.min(READDIR_MAXCOUNT_BYTES),
                        attr_request: attr_request(),
                    }),
                ])
                .await?
                .ok()?;
            let Some(NfsResop4::Readdir(Res4::Ok(page))) = res.into_iter().last() else {
                return Err(Error::Other("READDIR returned nothing".into()));
            };
            if page.entries.is_empty() && !page.eof {
                return Err(Error::Other(
                    "the server returned an empty READDIR page before the end".into(),
                ));
            }
            for e in &page.entries {
                let name = String::from_utf8_lossy(&e.name).into_owned();
                out.push((name, Attr::from_fattr(&e.attrs)?));
            }
            if out.len() > DIR_ENTRIES_MAX {
                return Err(Error::Other(format!(
                    "more than {DIR_ENTRIES_MAX} directory entries"
                )));
            }
            if page.eof {
                return Ok(out);
            }
            cookie = page.entries.last().map_or(cookie, |e| e.cookie);
            cookieverf = page.cookieverf;
        }
    }

    /// GETATTR of any handle.
    pub async fn getattr_fh(&self, fh: &NfsFh4) -> Result<Attr, Error> {
        let res = self
            .compound(vec![
                NfsArgop4::Putfh(fh.clone()),
                NfsArgop4::Getattr(attr_request()),
            ])
            .await?
            .ok()?;
        find_attr(&res)
    }
}

/// READDIR's `dircount`: 64 KiB of names and cookies per page (about 2,000 entries), Linux's
/// choice for READDIRPLUS-like listings.
pub(super) const READDIR_DIRCOUNT_BYTES: u32 = 64 * 1024;

/// READDIR's `maxcount`: a page with attributes, 256 KiB (lowered to rsize).
pub(super) const READDIR_MAXCOUNT_BYTES: u32 = 256 * 1024;

/// Most entries one listing collects: a million names with attributes is ~200 MiB, a bound
/// on what a hostile or broken server can make us hold.
pub const DIR_ENTRIES_MAX: usize = 1_000_000;

/// OPEN CLAIM_PREVIOUS's delegation type: none (RFC 8881 §18.16.1, `open_delegation_type4`).
pub(super) const OPEN_DELEGATE_NONE: u32 = 0;

/// OPEN share access (RFC 8881 §18.16.3).
pub(super) const OPEN4_SHARE_ACCESS_READ: u32 = 1;

pub(super) const OPEN4_SHARE_ACCESS_BOTH: u32 = 3;

pub(super) fn attr_request() -> Bitmap4 {
    Bitmap4::from_bits(ATTR_BITS)
}

pub(super) fn component(name: &str) -> Result<Component4, Error> {
    if name.is_empty() || name.len() > 255 || name.contains('/') || name.contains('\0') {
        return Err(Error::Other(format!("bad file name {name:?}")));
    }
    Ok(Component4(Bytes::copy_from_slice(name.as_bytes())))
}

/// `/a/b/c` → (`/a/b`, `c`).
pub(super) fn split_path(path: &str) -> Result<(&str, &str), Error> {
    let p = path.trim_end_matches('/');
    match p.rsplit_once('/') {
        Some((dir, name)) if !name.is_empty() => Ok((if dir.is_empty() { "/" } else { dir }, name)),
        _ => Err(Error::Other(format!("{path}: not a file path"))),
    }
}

/// The last GETFH result.
pub(super) fn find_fh(res: &[NfsResop4]) -> Result<NfsFh4, Error> {
    res.iter()
        .rev()
        .find_map(|r| match r {
            NfsResop4::Getfh(Res4::Ok(fh)) => Some(fh.clone()),
            _ => None,
        })
        .ok_or_else(|| Error::Other("the reply has no file handle".into()))
}

/// The last GETATTR result.
pub(super) fn find_attr(res: &[NfsResop4]) -> Result<Attr, Error> {
    res.iter()
        .rev()
        .find_map(|r| match r {
            NfsResop4::Getattr(Res4::Ok(f)) => Some(Attr::from_fattr(f)),
            _ => None,
        })
        .unwrap_or_else(|| Err(Error::Other("the reply has no attributes".into())))
}
