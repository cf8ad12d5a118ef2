//! The pure policy of writing: which unstable WRITEs are still owed.
//!
//! It does no I/O: the client's `File` writer (sluice-client's `file.rs`) drives it, and so does
//! the simulator's fault model, which needs no tokio client for it. (What to READ is decided by
//! [`crate::readahead`].)
//!
//! # Writing (RFC 1813 §3.3.7, §3.3.21: "nothing lost")
//! An UNSTABLE WRITE reply only promises that the data reached the server's memory. The
//! server's write verifier identifies that memory: if it changes (the server restarted), every
//! WRITE answered under the old verifier may be lost. So the client keeps each chunk, with the
//! verifier of its reply, in an [`UnstableLog`] until a COMMIT answers with the same verifier.
//! [`UnstableLog::on_commit`] returns the chunks written under any other verifier: the driver
//! resends them and commits again.

use bytes::Bytes;

/// A write verifier: eight opaque bytes the server changes when it may have lost unstable data
/// (NFSv3's `writeverf3`, NFSv4's `verifier4`; both are 8 bytes).
pub type Verifier = [u8; 8];

/// One chunk written UNSTABLE and not yet known to be on stable storage.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnstableChunk {
    pub offset: u64,
    pub data: Bytes,
    pub verf: Verifier,
}

/// The data a COMMIT must still cover. See the module docs.
#[derive(Debug, Default, Clone)]
pub struct UnstableLog {
    chunks: Vec<UnstableChunk>,
    bytes: u64,
}

impl UnstableLog {
    pub fn new() -> Self {
        Self::default()
    }

    /// A WRITE of `data` at `offset` was answered UNSTABLE (or DATA_SYNC) with `verf`.
    pub fn record(&mut self, offset: u64, data: Bytes, verf: Verifier) {
        self.bytes += data.len() as u64;
        self.chunks.push(UnstableChunk { offset, data, verf });
    }

    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    pub fn is_empty(&self) -> bool {
        self.chunks.is_empty()
    }

    /// A COMMIT succeeded with `verf`. Chunks written under `verf` are now stable and are
    /// forgotten; the others (written before a server restart) are returned, in write order,
    /// to be resent, and are forgotten too: the resends are recorded anew.
    pub fn on_commit(&mut self, verf: Verifier) -> Vec<UnstableChunk> {
        let (_stable, lost): (Vec<_>, Vec<_>) = self.chunks.drain(..).partition(|c| c.verf == verf);
        self.bytes = 0;
        lost
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_verifier_change_makes_the_log_return_what_must_be_resent() {
        let mut log = UnstableLog::new();
        let (a, b) = ([1u8; 8], [2u8; 8]);
        log.record(0, Bytes::from_static(b"xx"), a);
        log.record(2, Bytes::from_static(b"yy"), b);
        log.record(4, Bytes::from_static(b"zz"), a);
        assert_eq!(log.bytes(), 6);
        let lost = log.on_commit(b);
        assert_eq!(
            lost.iter().map(|c| c.offset).collect::<Vec<_>>(),
            vec![0, 4]
        );
        assert!(log.is_empty());
        assert_eq!(log.bytes(), 0);
        log.record(0, Bytes::from_static(b"xx"), b);
        assert!(log.on_commit(b).is_empty());
    }
}
