//! A directory listing read one reply at a time, so that a tree walk (`sluice cp -r`) starts
//! copying the first entries while the rest of a large directory is still on its way, and holds
//! one reply's entries rather than the whole directory.
//!
//! [`Client::read_dir`] is the same loop collected into one `Vec`. READDIRPLUS first (a handle
//! and attributes with each name, so a walker needs no LOOKUP or GETATTR per entry); a server
//! that answers NOTSUPP gets plain READDIR from then on (entries without handle or attributes).

use super::client::{Client, DirEntry};
use crate::error::NfsError;
use sluice_xdr::nfs3::{NfsFh3, Nfsstat3, Verifier};

/// Pages of one directory's entries ("." and ".." left out); see the module docs.
pub struct DirPages {
    client: Client,
    dir: NfsFh3,
    cookie: u64,
    verf: Verifier,
    /// False once the server said NOTSUPP to READDIRPLUS.
    plus: bool,
    eof: bool,
}

impl DirPages {
    pub fn new(client: Client, dir: NfsFh3) -> DirPages {
        DirPages {
            client,
            dir,
            cookie: 0,
            verf: [0; 8],
            plus: true,
            eof: false,
        }
    }

    /// The entries of the next reply (possibly none, when a reply held only "." and ".."), or
    /// `None` after the reply that carried EOF.
    pub async fn next_page(&mut self) -> Result<Option<Vec<DirEntry>>, NfsError> {
        if self.eof {
            return Ok(None);
        }
        if self.plus {
            match self.next_plus().await {
                Err(e) if e.status() == Some(Nfsstat3::NOTSUPP) && self.cookie == 0 => {
                    self.plus = false;
                }
                other => return other.map(Some),
            }
        }
        self.next_plain().await.map(Some)
    }

    async fn next_plus(&mut self) -> Result<Vec<DirEntry>, NfsError> {
        // dircount bounds the names, maxcount the whole reply with attributes and handles;
        // a 4:1 ratio like Linux's leaves room for the ~200 bytes of attributes per entry.
        let dircount = self.client.readdir_bytes();
        let maxcount = dircount.saturating_mul(4).min(1 << 20);
        let res = self
            .client
            .readdirplus(&self.dir, self.cookie, self.verf, dircount, maxcount)
            .await?;
        self.verf = res.cookieverf;
        self.check_progress(res.entries.is_empty(), res.eof, "READDIRPLUS")?;
        let mut out = Vec::with_capacity(res.entries.len());
        for e in res.entries {
            self.cookie = e.cookie;
            if is_dot(&e.name) {
                continue;
            }
            out.push(DirEntry {
                name: String::from_utf8_lossy(&e.name).into_owned(),
                fileid: e.fileid,
                fh: e.name_handle,
                attr: e.name_attributes,
            });
        }
        Ok(out)
    }

    async fn next_plain(&mut self) -> Result<Vec<DirEntry>, NfsError> {
        let res = self
            .client
            .readdir(
                &self.dir,
                self.cookie,
                self.verf,
                self.client.readdir_bytes(),
            )
            .await?;
        self.verf = res.cookieverf;
        self.check_progress(res.entries.is_empty(), res.eof, "READDIR")?;
        let mut out = Vec::with_capacity(res.entries.len());
        for e in res.entries {
            self.cookie = e.cookie;
            if is_dot(&e.name) {
                continue;
            }
            out.push(DirEntry {
                name: String::from_utf8_lossy(&e.name).into_owned(),
                fileid: e.fileid,
                fh: None,
                attr: None,
            });
        }
        Ok(out)
    }

    /// Records EOF; an empty reply without EOF would make the walk loop forever.
    fn check_progress(&mut self, empty: bool, eof: bool, proc_name: &str) -> Result<(), NfsError> {
        self.eof = eof;
        if empty && !eof {
            return Err(NfsError::Other(format!(
                "server returned an empty {proc_name} reply without EOF"
            )));
        }
        Ok(())
    }
}

fn is_dot(name: &[u8]) -> bool {
    name == b"." || name == b".."
}
