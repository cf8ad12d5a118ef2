//! The reply record every service answers with, in a module of its own: the back channel's
//! connection (`nfs4::callback::conn`) carries these records, and a [`Peer`](super::Peer)
//! carries that connection, so a shared home keeps the two free of a cycle.

use crate::splice::SplicedData;
use bytes::Bytes;

/// One reply record: bytes in memory and, for a spliced READ, data waiting in a pipe and the
/// bytes that follow it (see [`crate::splice`]). Only TCP replies are ever spliced.
#[derive(Debug)]
pub struct Reply {
    pub segs: Vec<Bytes>,
    pub spliced: Option<SplicedData>,
}

impl From<Vec<Bytes>> for Reply {
    fn from(segs: Vec<Bytes>) -> Reply {
        Reply {
            segs,
            spliced: None,
        }
    }
}

impl Reply {
    /// Bytes in the record.
    pub fn len(&self) -> usize {
        self.segs.iter().map(|s| s.len()).sum::<usize>()
            + self
                .spliced
                .as_ref()
                .map_or(0, |s| s.pipe.len() + s.tail.len())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
