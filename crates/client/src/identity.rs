//! Who the client is to a server, and which server it is: the AUTH_SYS credentials every call
//! carries, the host name in them (and in an NFSv4 client owner), and the server's address.
//! Both versions use these; neither owns them.

use crate::error::NfsError;
use crate::options::ClientOptions;
use crate::url::NfsUrl;
use bytes::Bytes;
use sluice_xdr::portmap;
use sluice_xdr::rpc::{AuthSys, OpaqueAuth};

/// The AUTH_SYS credentials for `url`: its `uid`/`gid`, else the options', else the
/// process's effective ids.
pub(crate) fn credentials(url: &NfsUrl, options: &ClientOptions) -> OpaqueAuth {
    // SAFETY: geteuid/getegid have no preconditions and cannot fail.
    let (euid, egid) = unsafe { (libc::geteuid(), libc::getegid()) };
    let uid = url.uid.or(options.uid).unwrap_or(euid);
    let gid = url.gid.or(options.gid).unwrap_or(egid);
    AuthSys {
        stamp: rand::random(),
        machine_name: Bytes::from(hostname()),
        uid,
        gid,
        gids: vec![gid],
    }
    .to_opaque_auth()
}

/// This host's name (at most what AUTH_SYS carries), "localhost" if it has none.
pub(crate) fn hostname() -> Vec<u8> {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for its length; gethostname NUL-terminates within it or
    // truncates, and we stop at the first NUL or the end.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return b"localhost".to_vec();
    }
    let n = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    buf[..n.min(sluice_xdr::rpc::MAX_MACHINE_NAME)].to_vec()
}

/// The first address of the URL's host.
pub(crate) async fn resolve(url: &NfsUrl) -> Result<std::net::IpAddr, NfsError> {
    let port = url.port.unwrap_or(portmap::PORT);
    let mut addrs = tokio::net::lookup_host((url.host.as_str(), port))
        .await
        .map_err(|e| NfsError::Connect(format!("cannot resolve {}: {e}", url.host)))?;
    addrs
        .next()
        .map(|a| a.ip())
        .ok_or_else(|| NfsError::Connect(format!("{} has no address", url.host)))
}
