//! The client's error type: an NFS status in words, or what went wrong below it.

use crate::transport::CallError;
use sluice_rpc::client::RpcError;
use sluice_xdr::mount3::Mountstat3;
use sluice_xdr::nfs3::{proc_, Nfsstat3};
use sluice_xdr::DecodeError;
use std::fmt;

/// Why an operation failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NfsError {
    /// The server answered the procedure with an error status.
    Status { proc_: u32, status: Nfsstat3 },
    /// MOUNT MNT refused the export.
    Mount(Mountstat3),
    /// The call got no NFS answer: an RPC-level error, a soft timeout, a closed transport.
    Rpc(CallError),
    /// The reply did not decode.
    Decode(DecodeError),
    /// No connection could be made (or the portmapper had no answer).
    Connect(String),
    /// Anything else, in words (for example "not a directory" found from attributes).
    Other(String),
}

impl NfsError {
    /// The NFS status, when the server sent one.
    pub fn status(&self) -> Option<Nfsstat3> {
        match self {
            NfsError::Status { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// An error carrying an NFS status for a condition the client found itself (for example a
    /// path component that is not a directory).
    pub fn local(status: Nfsstat3) -> NfsError {
        NfsError::Status {
            proc_: proc_::NULL,
            status,
        }
    }

    /// True for a soft-mount timeout.
    pub fn is_timeout(&self) -> bool {
        matches!(self, NfsError::Rpc(CallError::Rpc(RpcError::TimedOut)))
    }
}

/// "permission denied (NFS3ERR_ACCES)": the words first, then the RFC name.
impl fmt::Display for NfsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NfsError::Status { status, .. } => {
                write!(f, "{} ({})", status.describe(), status.name())
            }
            NfsError::Mount(s) => write!(f, "mount refused ({})", s.name()),
            NfsError::Rpc(e) => write!(f, "{e}"),
            NfsError::Decode(e) => write!(f, "bad reply from the server: {e}"),
            NfsError::Connect(e) => write!(f, "{e}"),
            NfsError::Other(e) => f.write_str(e),
        }
    }
}

impl std::error::Error for NfsError {}

impl From<CallError> for NfsError {
    fn from(e: CallError) -> Self {
        NfsError::Rpc(e)
    }
}

impl From<DecodeError> for NfsError {
    fn from(e: DecodeError) -> Self {
        NfsError::Decode(e)
    }
}

impl From<crate::proto::FileError> for NfsError {
    fn from(e: crate::proto::FileError) -> Self {
        NfsError::Other(e.0)
    }
}
