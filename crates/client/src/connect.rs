//! [`connect`]: the one module that names both versions. It reads the URL, picks NFSv3 or
//! NFSv4.x ([`choose`]) and hands back a [`Namespace`], falling back from v4 to v3 when the
//! server says it has no v4 ([`falls_back`]).
//!
//! ```text
//!   connect(url, options)
//!     ├─ version=3 ───────────▶ v3::Client::connect       (MOUNT, FSINFO)
//!     ├─ version=4, 4.1, 4.2 ─▶ v4::Client::connect       (EXCHANGE_ID, CREATE_SESSION)
//!     └─ none: 4.2, then 4.1 ─▶ v4::Client::connect, at most V4_PROBE_TIMEOUT of silence
//!                  └─ no v4 ──▶ v3::Client::connect       (the reason kept: version_note)
//! ```

use crate::namespace::{Error, Namespace};
use crate::options::ClientOptions;
use crate::url::{NfsUrl, NfsVersion, Proto};
use crate::v3::Client;
use crate::v4;
use sluice_xdr::nfs4::Nfsstat4;
use std::sync::Arc;

/// Connects to the server of `url` with the version it asks for; with none, NFSv4.2, then 4.1,
/// then 3, as the Linux mount does (see [`choose`]). The v4 attempt of a URL without a version
/// gives up after [`ClientOptions::v4_probe_timeout`]; why v3 was taken then is logged at
/// debug level and shown by [`Namespace::version_note`] (the commands' `--stats`).
pub async fn connect(url: &NfsUrl, options: &ClientOptions) -> Result<Arc<dyn Namespace>, Error> {
    match choose(url, options) {
        Choice::V3 => Ok(Arc::new(Client::connect(url, options.clone()).await?)),
        Choice::V4(minor) => Ok(Arc::new(connect_v4(url, options, minor, None).await?)),
        Choice::Any => {
            let probe = Some(options.v4_probe_timeout);
            match connect_v4(url, options, v4::Minor::Highest, probe).await {
                Ok(c) => Ok(Arc::new(c)),
                Err(e) if falls_back(&e) => {
                    tracing::debug!("{url}: no NFSv4 ({e}); trying NFSv3");
                    let c = Client::connect(url, options.clone()).await?;
                    c.set_version_note(format!("NFSv4 not used: {e}"));
                    Ok(Arc::new(c))
                }
                Err(e) => Err(e.into()),
            }
        }
    }
}

async fn connect_v4(
    url: &NfsUrl,
    options: &ClientOptions,
    minor: v4::Minor,
    probe_timeout: Option<std::time::Duration>,
) -> Result<v4::Client, v4::Error> {
    let v4 = v4::V4Options {
        probe_timeout,
        owner: options.v4_owner.clone(),
    };
    v4::Client::connect(url, options, minor, v4).await
}

/// What [`connect`] tries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Choice {
    V3,
    V4(v4::Minor),
    /// 4.2, 4.1, then 3.
    Any,
}

/// The versions a URL allows. Without `version=`, UDP (`proto=udp`, or the option when the URL
/// names no transport) picks v3 at once: NFSv4 needs a transport with congestion control (RFC
/// 8881 §2.9.1). A `mountport` does not: like the Linux mount, v4 is tried first and the MOUNT
/// port serves the v3 fallback; `version=3` asks for v3 alone.
pub fn choose(url: &NfsUrl, options: &ClientOptions) -> Choice {
    match url.version {
        Some(NfsVersion::V3) => Choice::V3,
        Some(NfsVersion::V4) => Choice::V4(v4::Minor::Highest),
        Some(NfsVersion::V4_1) => Choice::V4(v4::Minor::V1),
        Some(NfsVersion::V4_2) => Choice::V4(v4::Minor::V2),
        None => {
            let udp = match url.proto {
                Some(p) => p == Proto::Udp,
                None => options.udp,
            };
            if udp {
                Choice::V3
            } else {
                Choice::Any
            }
        }
    }
}

/// True when a v4 attempt says the server has no NFSv4 there, so v3 is worth trying: the
/// connection was refused, NULL got PROG_MISMATCH or PROG_UNAVAIL (both
/// [`v4::Error::Connect`]), or no minor version was taken (NFS4ERR_MINOR_VERS_MISMATCH). Each
/// is an answer, not a silence, so falling back costs a round trip or two, not a timeout. A
/// probe that got no answer in time is also [`v4::Error::Connect`] (see [`crate::options::V4_PROBE_TIMEOUT`]).
pub fn falls_back(e: &v4::Error) -> bool {
    match e {
        v4::Error::Connect(_) => true,
        v4::Error::Status { status, .. } => *status == Nfsstat4::MINOR_VERS_MISMATCH,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url(s: &str) -> NfsUrl {
        NfsUrl::parse(s).unwrap()
    }

    #[test]
    fn a_url_without_a_version_tries_v4_unless_it_asks_for_udp() {
        let o = ClientOptions::default();
        assert_eq!(choose(&url("nfs://h/x"), &o), Choice::Any);
        assert_eq!(choose(&url("nfs://h/x?nfsport=2049"), &o), Choice::Any);
        assert_eq!(
            choose(&url("nfs://h/x?nfsport=2049&mountport=2050"), &o),
            Choice::Any
        );
        assert_eq!(choose(&url("nfs://h/x?proto=udp"), &o), Choice::V3);
        let udp = ClientOptions {
            udp: true,
            ..ClientOptions::default()
        };
        assert_eq!(choose(&url("nfs://h/x"), &udp), Choice::V3);
        assert_eq!(choose(&url("nfs://h/x?proto=tcp"), &udp), Choice::Any);
    }

    #[test]
    fn an_explicit_version_is_the_only_one_tried() {
        let o = ClientOptions::default();
        assert_eq!(choose(&url("nfs://h/x?version=3"), &o), Choice::V3);
        assert_eq!(
            choose(&url("nfs://h/x?version=4.1&mountport=9"), &o),
            Choice::V4(v4::Minor::V1)
        );
        assert_eq!(
            choose(&url("nfs://h/x?version=4.2"), &o),
            Choice::V4(v4::Minor::V2)
        );
        assert_eq!(
            choose(&url("nfs://h/x?version=4"), &o),
            Choice::V4(v4::Minor::Highest)
        );
    }

    #[test]
    fn only_answers_that_say_no_nfsv4_fall_back() {
        use sluice_xdr::nfs4::ops::Opnum4;
        assert!(falls_back(&v4::Error::Connect("refused".into())));
        assert!(falls_back(&v4::Error::Status {
            op: Opnum4::EXCHANGE_ID,
            status: Nfsstat4::MINOR_VERS_MISMATCH,
        }));
        assert!(!falls_back(&v4::Error::Status {
            op: Opnum4::CREATE_SESSION,
            status: Nfsstat4::ACCESS,
        }));
        assert!(!falls_back(&v4::Error::Other("bad".into())));
    }
}
