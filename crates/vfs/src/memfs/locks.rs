//! MemFs as a backend shared with other clients, for the server's lock tests (the parent
//! module's "Locks" notes): a refusal every pushed-down LOCK meets while one is set, and a log
//! of the pushed-down lock calls.

use super::{MemFs, State};
use crate::types::{LockConflict, LockError, LockType};
use bytes::Bytes;

/// Most lock calls [`MemFs::lock_calls`] keeps: the oldest go first. Tests make a handful.
pub const LOCK_CALLS_MAX: usize = 1024;

/// A pushed-down lock call MemFs saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LockCall {
    Lock {
        owner_key: u64,
        kind: LockType,
        offset: u64,
        len: u64,
    },
    Unlock {
        owner_key: u64,
        offset: u64,
        len: u64,
    },
    Release {
        file: Bytes,
        owner_key: u64,
    },
}

impl MemFs {
    /// From now on every pushed-down LOCK is refused with `conflict` (`None`: granted again).
    pub fn refuse_locks(&self, conflict: Option<LockConflict>) {
        self.lock().lock_refusal = conflict;
    }

    /// The pushed-down lock calls since the last call, oldest first.
    pub fn lock_calls(&self) -> Vec<LockCall> {
        std::mem::take(&mut self.lock().lock_calls)
    }

    /// `FileSystem::lock`: the refusal if one is set, else logged and granted.
    pub(super) fn pushed_lock(
        &self,
        owner_key: u64,
        kind: LockType,
        offset: u64,
        len: u64,
    ) -> Result<(), LockError> {
        let mut st = self.lock();
        if let Some(c) = st.lock_refusal {
            return Err(LockError::Conflict(c));
        }
        st.log_lock_call(LockCall::Lock {
            owner_key,
            kind,
            offset,
            len,
        });
        Ok(())
    }

    /// `FileSystem::unlock`: logged.
    pub(super) fn pushed_unlock(&self, owner_key: u64, offset: u64, len: u64) {
        self.lock().log_lock_call(LockCall::Unlock {
            owner_key,
            offset,
            len,
        });
    }

    /// `FileSystem::release_locks`: logged.
    pub(super) fn pushed_release(&self, file: &[u8], owner_key: u64) {
        self.lock().log_lock_call(LockCall::Release {
            file: Bytes::copy_from_slice(file),
            owner_key,
        });
    }
}

impl State {
    fn log_lock_call(&mut self, c: LockCall) {
        if self.lock_calls.len() >= LOCK_CALLS_MAX {
            self.lock_calls.remove(0);
        }
        self.lock_calls.push(c);
    }
}
