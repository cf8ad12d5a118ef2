//! The NFSv4 side of [`crate::recall`]: callers without an NFSv4 client (the NFSv3
//! procedures) pass the same recall gate as a v4 op, with no client id.

use super::Nfs4;
use crate::recall::{RecallGate, Recalling};
use std::time::Instant;

impl RecallGate for Nfs4 {
    fn held(&self) -> bool {
        self.any_delegation()
    }

    fn break_for(&self, now: Instant, file: &[u8], write: bool) -> Result<(), Recalling> {
        if !self.held() {
            return Ok(());
        }
        self.state()
            .break_delegations(now, None, file, write)
            .map_err(|_| Recalling)
    }
}
