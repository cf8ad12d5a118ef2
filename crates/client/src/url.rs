//! `nfs://` URLs in the libnfs form.
//!
//! ```text
//!   nfs://host[:port]/export/path/in/it?version=3&nfsport=N&mountport=M&uid=U&gid=G
//! ```
//! - `host` is a name, an IPv4 address or a bracketed IPv6 address (`[::1]`).
//! - `:port` (an extension; libnfs rejects it) is where the PORTMAP service is asked when
//!   `nfsport`/`mountport` are missing. sluice's server answers PORTMAP on its NFS port, so
//!   `nfs://host:2049/export` is enough to reach it. Without it, port 111 is asked.
//! - The path is absolute and percent-decoded. Which prefix of it is the export is decided at
//!   mount time (see `Client::connect`).
//! - `proto=udp` (or `proto=tcp`, the default) picks the transport, like mount(8)'s `proto=`
//!   option. libnfs has no such parameter (it only speaks TCP to NFS) and ignores unknown
//!   ones, so such a URL given to nfs-cat still works there, over TCP.
//! - `nconnect=N` (1 to 16) opens N TCP connections to the NFS service and spreads calls over
//!   them, like the Linux mount option of that name (an extension; libnfs ignores it).
//! - `version=3`, `4.1`, `4.2`, or `4` (the highest 4.x minor version the server offers). A v4
//!   URL's path is on the server's pseudo file system and the port is `nfsport`, else the
//!   authority's port, else 2049: no MOUNT and no portmapper. Without `version` the client
//!   speaks v3. Other parameters libnfs knows (`readahead`, `auto-traverse-mounts`...) are
//!   accepted and ignored, so URLs written for nfs-cp work here.
//! - `xprtsec=tls` or `xprtsec=mtls` (libnfs's spelling, after the Linux mount option):
//!   RPC-with-TLS (RFC 9289) on every connection to the server, the server's certificate
//!   checked against the client's CA and the URL's host; `mtls` also presents the client's
//!   certificate. `xprtsec=none` (the default) is plaintext.

use std::fmt;

/// A parsed `nfs://` URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NfsUrl {
    /// Host as written (IPv6 without brackets).
    pub host: String,
    /// The authority's port: where PORTMAP is asked (default 111).
    pub port: Option<u16>,
    /// Absolute path, percent-decoded, without a trailing slash (except the root "/").
    pub path: String,
    pub nfsport: Option<u16>,
    pub mountport: Option<u16>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    /// `proto=tcp|udp`; `None` when absent (the client's option decides).
    pub proto: Option<Proto>,
    /// `nconnect=N`; `None` when absent (the client's option decides). Checked at connect time.
    pub nconnect: Option<u32>,
    /// `version=...`; `None` when absent.
    pub version: Option<NfsVersion>,
    /// `xprtsec=none|tls|mtls`; `None` when absent (plaintext).
    pub xprtsec: Option<XprtSec>,
    /// The query string as written (without '?'), kept to build URLs of other paths.
    query: String,
}

/// The NFS version a URL asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NfsVersion {
    V3,
    /// `version=4`: the highest 4.x minor version the server offers.
    V4,
    V4_1,
    V4_2,
}

impl NfsVersion {
    /// True for every 4.x choice.
    pub fn is_v4(self) -> bool {
        self != NfsVersion::V3
    }
}

/// The transport security a URL asks for (`xprtsec=`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum XprtSec {
    /// Plaintext.
    None,
    /// RPC-with-TLS, the server authenticated by its certificate.
    Tls,
    /// RPC-with-TLS, and the client presents a certificate too.
    Mtls,
}

/// The transport a URL asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Proto {
    Tcp,
    Udp,
}

/// Why a string is not a usable `nfs://` URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UrlError(pub String);

impl fmt::Display for UrlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UrlError {}

impl NfsUrl {
    /// True if `s` looks like an NFS URL (as opposed to a local path).
    pub fn is_nfs_url(s: &str) -> bool {
        s.get(..6).is_some_and(|p| p.eq_ignore_ascii_case("nfs://"))
    }

    pub fn parse(s: &str) -> Result<NfsUrl, UrlError> {
        let bad = |why: &str| UrlError(format!("{s}: {why}"));
        if !Self::is_nfs_url(s) {
            return Err(bad("not an nfs:// URL"));
        }
        let rest = &s[6..];
        let (rest, query) = match rest.split_once('?') {
            Some((r, q)) => (r, q),
            None => (rest, ""),
        };
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        let (host, port) = split_authority(authority).ok_or_else(|| bad("bad host or port"))?;
        if host.is_empty() {
            return Err(bad("no host"));
        }
        let path = normalize_path(&percent_decode(path).ok_or_else(|| bad("bad %-escape"))?);
        let mut url = NfsUrl {
            host,
            port,
            path,
            nfsport: None,
            mountport: None,
            uid: None,
            gid: None,
            proto: None,
            nconnect: None,
            version: None,
            xprtsec: None,
            query: query.to_string(),
        };
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            let num = |what: &str| -> Result<u32, UrlError> {
                v.parse::<u32>()
                    .map_err(|_| bad(&format!("bad {what} value {v:?}")))
            };
            match k {
                "version" => {
                    url.version = Some(match v {
                        "3" => NfsVersion::V3,
                        "4" => NfsVersion::V4,
                        "4.1" => NfsVersion::V4_1,
                        "4.2" => NfsVersion::V4_2,
                        _ => return Err(bad("bad version (3, 4, 4.1 or 4.2)")),
                    })
                }
                "nfsport" => {
                    url.nfsport =
                        Some(port_value(num("nfsport")?).ok_or_else(|| bad("bad nfsport"))?)
                }
                "mountport" => {
                    url.mountport =
                        Some(port_value(num("mountport")?).ok_or_else(|| bad("bad mountport"))?)
                }
                "uid" => url.uid = Some(num("uid")?),
                "gid" => url.gid = Some(num("gid")?),
                "nconnect" => url.nconnect = Some(num("nconnect")?),
                "proto" => {
                    url.proto = Some(match v.to_ascii_lowercase().as_str() {
                        "tcp" => Proto::Tcp,
                        "udp" => Proto::Udp,
                        _ => return Err(bad(&format!("bad proto value {v:?} (tcp or udp)"))),
                    })
                }
                "xprtsec" => {
                    url.xprtsec = Some(match v.to_ascii_lowercase().as_str() {
                        "none" => XprtSec::None,
                        "tls" => XprtSec::Tls,
                        "mtls" => XprtSec::Mtls,
                        _ => {
                            return Err(bad(&format!(
                                "bad xprtsec value {v:?} (none, tls or mtls)"
                            )))
                        }
                    })
                }
                _ => tracing::debug!("ignoring URL parameter {k}"),
            }
        }
        Ok(url)
    }

    /// The same server and parameters with another absolute path.
    pub fn with_path(&self, path: &str) -> NfsUrl {
        NfsUrl {
            path: normalize_path(path),
            ..self.clone()
        }
    }

    /// This URL with `name` appended to the path.
    pub fn join(&self, name: &str) -> NfsUrl {
        if self.path == "/" {
            self.with_path(&format!("/{name}"))
        } else {
            self.with_path(&format!("{}/{name}", self.path))
        }
    }

    /// The URL with its query, as it can be passed back to `parse`.
    pub fn to_full_string(&self) -> String {
        if self.query.is_empty() {
            self.to_string()
        } else {
            format!("{self}?{}", self.query)
        }
    }

    /// The last path component ("" for the root).
    pub fn file_name(&self) -> &str {
        self.path.rsplit('/').next().unwrap_or("")
    }
}

/// Shown in messages: `nfs://host[:port]/path`, without the query.
impl fmt::Display for NfsUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let host = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        match self.port {
            Some(p) => write!(f, "nfs://{host}:{p}{}", self.path),
            None => write!(f, "nfs://{host}{}", self.path),
        }
    }
}

impl std::str::FromStr for NfsUrl {
    type Err = UrlError;
    fn from_str(s: &str) -> Result<Self, UrlError> {
        NfsUrl::parse(s)
    }
}

fn port_value(v: u32) -> Option<u16> {
    u16::try_from(v).ok().filter(|&p| p != 0)
}

fn split_authority(a: &str) -> Option<(String, Option<u16>)> {
    let (host, port) = if let Some(rest) = a.strip_prefix('[') {
        let (h, after) = rest.split_once(']')?;
        match after {
            "" => (h, None),
            p => (h, Some(p.strip_prefix(':')?)),
        }
    } else {
        match a.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (a, None),
        }
    };
    let port = match port {
        Some(p) => Some(p.parse::<u16>().ok().filter(|&p| p != 0)?),
        None => None,
    };
    Some((host.to_string(), port))
}

fn percent_decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = s.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// Collapses repeated slashes and "." components, drops a trailing slash. ".." is kept: the
/// server resolves it (the export may not be the server's root).
pub(crate) fn normalize_path(p: &str) -> String {
    let parts: Vec<&str> = p
        .split('/')
        .filter(|c| !c.is_empty() && *c != ".")
        .collect();
    format!("/{}", parts.join("/"))
}

/// Path components, without empty ones and ".".
pub fn components(path: &str) -> impl Iterator<Item = &str> {
    path.split('/').filter(|c| !c.is_empty() && *c != ".")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn libnfs_form_with_ports() {
        let u =
            NfsUrl::parse("nfs://127.0.0.1/tmp/exp/a%20b?version=3&nfsport=20490&mountport=20491")
                .unwrap();
        assert_eq!(u.host, "127.0.0.1");
        assert_eq!(u.port, None);
        assert_eq!(u.path, "/tmp/exp/a b");
        assert_eq!((u.nfsport, u.mountport), (Some(20490), Some(20491)));
        assert_eq!(u.to_string(), "nfs://127.0.0.1/tmp/exp/a b");
        assert_eq!(u.file_name(), "a b");
        let j = u.join("c");
        assert_eq!(j.path, "/tmp/exp/a b/c");
        assert_eq!(NfsUrl::parse(&j.to_full_string()).unwrap(), j);
    }

    #[test]
    fn authority_port_ipv6_uid_gid_and_normalisation() {
        let u = NfsUrl::parse("nfs://[::1]:2049//x/./y/?uid=1000&gid=100").unwrap();
        assert_eq!((u.host.as_str(), u.port), ("::1", Some(2049)));
        assert_eq!(u.path, "/x/y");
        assert_eq!((u.uid, u.gid), (Some(1000), Some(100)));
        assert_eq!(u.to_string(), "nfs://[::1]:2049/x/y");
        let r = NfsUrl::parse("nfs://h").unwrap();
        assert_eq!(r.path, "/");
        assert_eq!(r.join("z").path, "/z");
    }

    #[test]
    fn rejects_what_it_cannot_use() {
        for bad in [
            "http://h/x",
            "nfs:///x",
            "nfs://h:0/x",
            "nfs://h:99999/x",
            "nfs://h/x?version=5",
            "nfs://h/x?version=4.0",
            "nfs://h/x?nfsport=abc",
            "nfs://h/%zz",
        ] {
            assert!(NfsUrl::parse(bad).is_err(), "{bad}");
        }
        assert!(NfsUrl::parse("nfs://h/x?readahead=1").is_ok());
        assert!(NfsUrl::parse("nfs://h/x?proto=sctp").is_err());
        assert_eq!(
            NfsUrl::parse("nfs://h/x?version=3&proto=udp")
                .unwrap()
                .proto,
            Some(Proto::Udp)
        );
        assert_eq!(
            NfsUrl::parse("nfs://h/x?nconnect=4").unwrap().nconnect,
            Some(4)
        );
        assert!(NfsUrl::parse("nfs://h/x?nconnect=many").is_err());
        assert!(NfsUrl::is_nfs_url("NFS://h/x"));
        assert!(!NfsUrl::is_nfs_url("/tmp/nfs://x"));
    }

    #[test]
    fn versions_3_4_4_1_and_4_2() {
        let v = |q: &str| NfsUrl::parse(&format!("nfs://h/x{q}")).unwrap().version;
        assert_eq!(v(""), None);
        assert_eq!(v("?version=3"), Some(NfsVersion::V3));
        assert_eq!(v("?version=4"), Some(NfsVersion::V4));
        assert_eq!(v("?version=4.1"), Some(NfsVersion::V4_1));
        assert_eq!(v("?version=4.2&nfsport=2049"), Some(NfsVersion::V4_2));
        assert!(NfsVersion::V4_1.is_v4() && !NfsVersion::V3.is_v4());
    }
}
