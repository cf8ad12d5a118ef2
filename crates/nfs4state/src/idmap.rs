//! Owners and groups as NFSv4 strings (RFC 8881 §5.9): numeric by default, `name@domain` when
//! a domain is configured (`serve --idmap-domain`).
//!
//! # The two forms
//! ```text
//!                      no domain (default)          --idmap-domain example.org
//!  uid 1000 ─▶ wire    "1000"                       "alice@example.org"   (user database)
//!  uid 4242 ─▶ wire    "4242"                       "4242"                (no such user)
//!  wire ─▶ uid         "1000" ─▶ 1000               "1000" ─▶ 1000        (numeric always accepted)
//!                      "alice@example.org" ─▶       "alice@example.org" ─▶ 1000
//!                        NFS4ERR_BADOWNER           "alice@other.org"  ─▶ NFS4ERR_BADOWNER
//!                                                   "nobody1@example.org" (unknown) ─▶ BADOWNER
//! ```
//! Numeric strings are what knfsd sends with idmapping off, and what the Linux client expects
//! from a server without a domain: it maps them straight back to ids, so nothing shows as
//! "nobody" (the most common complaint about v4 after the grace period). With a domain, names
//! are looked up in the system's user and group databases; an id with no name still goes out
//! as its number (a client maps that back too), never as a made-up "nobody". Incoming, a name
//! that cannot be mapped is refused with NFS4ERR_BADOWNER (§5.9: the server must not silently
//! substitute an id), on SETATTR, OPEN's create attributes and CREATE alike, since all three
//! go through the server's attribute mapping (`sluice_server::nfs4::map::set_attr`).
//!
//! Domains compare without regard to ASCII case (they are DNS names); user and group names
//! compare exactly, as the databases do.
//!
//! The databases are behind [`IdDatabase`] so this module stays pure: tests pass a fake, the
//! server passes the system's (`sluice_server::nfs4::idmap::SystemIds`, NSS through libc).

use sluice_xdr::nfs4::Nfsstat4;
use sluice_xdr::nfs4::Utf8Str;
use std::sync::Arc;

/// The user and group databases, looked up by id and by name.
pub trait IdDatabase: Send + Sync {
    fn user_name(&self, uid: u32) -> Option<String>;
    fn user_id(&self, name: &str) -> Option<u32>;
    fn group_name(&self, gid: u32) -> Option<String>;
    fn group_id(&self, name: &str) -> Option<u32>;
}

/// How owners map between ids and wire strings (module notes).
#[derive(Clone, Default)]
pub struct IdMap {
    /// `None`: numeric strings only.
    named: Option<Named>,
}

#[derive(Clone)]
struct Named {
    domain: String,
    db: Arc<dyn IdDatabase>,
}

impl IdMap {
    /// Numeric strings only (the default).
    pub fn numeric() -> Self {
        Self { named: None }
    }

    /// `name@domain` from `db` for ids it knows; numeric otherwise.
    pub fn with_domain(domain: impl Into<String>, db: Arc<dyn IdDatabase>) -> Self {
        Self {
            named: Some(Named {
                domain: domain.into(),
                db,
            }),
        }
    }

    /// The configured domain, if any.
    pub fn domain(&self) -> Option<&str> {
        self.named.as_ref().map(|n| n.domain.as_str())
    }

    /// The `owner` attribute of `uid`.
    pub fn owner(&self, uid: u32) -> Utf8Str {
        self.outgoing(uid, |db, id| db.user_name(id))
    }

    /// The `owner_group` attribute of `gid`.
    pub fn owner_group(&self, gid: u32) -> Utf8Str {
        self.outgoing(gid, |db, id| db.group_name(id))
    }

    /// The uid an incoming `owner` names, or NFS4ERR_BADOWNER.
    pub fn uid(&self, s: &Utf8Str) -> Result<u32, Nfsstat4> {
        self.incoming(s, |db, name| db.user_id(name))
    }

    /// The gid an incoming `owner_group` names, or NFS4ERR_BADOWNER.
    pub fn gid(&self, s: &Utf8Str) -> Result<u32, Nfsstat4> {
        self.incoming(s, |db, name| db.group_id(name))
    }

    fn outgoing(&self, id: u32, name: impl Fn(&dyn IdDatabase, u32) -> Option<String>) -> Utf8Str {
        let text = match &self.named {
            Some(n) => match name(n.db.as_ref(), id) {
                Some(user) => format!("{user}@{}", n.domain),
                None => id.to_string(),
            },
            None => id.to_string(),
        };
        Utf8Str(text.into())
    }

    fn incoming(
        &self,
        s: &Utf8Str,
        id: impl Fn(&dyn IdDatabase, &str) -> Option<u32>,
    ) -> Result<u32, Nfsstat4> {
        let text = std::str::from_utf8(&s.0).map_err(|_| Nfsstat4::BADOWNER)?;
        if let Some(n) = numeric(text) {
            return Ok(n);
        }
        let named = self.named.as_ref().ok_or(Nfsstat4::BADOWNER)?;
        let (name, domain) = text.rsplit_once('@').ok_or(Nfsstat4::BADOWNER)?;
        if name.is_empty() || !domain.eq_ignore_ascii_case(&named.domain) {
            return Err(Nfsstat4::BADOWNER);
        }
        id(named.db.as_ref(), name).ok_or(Nfsstat4::BADOWNER)
    }
}

impl std::fmt::Debug for IdMap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IdMap")
            .field("domain", &self.domain())
            .finish()
    }
}

/// A numeric owner string (ASCII digits, fits a u32), knfsd's form without idmapping.
fn numeric(text: &str) -> Option<u32> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    /// alice = 1000, root = 0; groups staff = 50, wheel = 0.
    struct Fake;
    impl IdDatabase for Fake {
        fn user_name(&self, uid: u32) -> Option<String> {
            match uid {
                0 => Some("root".into()),
                1000 => Some("alice".into()),
                _ => None,
            }
        }
        fn user_id(&self, name: &str) -> Option<u32> {
            match name {
                "root" => Some(0),
                "alice" => Some(1000),
                _ => None,
            }
        }
        fn group_name(&self, gid: u32) -> Option<String> {
            match gid {
                0 => Some("wheel".into()),
                50 => Some("staff".into()),
                _ => None,
            }
        }
        fn group_id(&self, name: &str) -> Option<u32> {
            match name {
                "wheel" => Some(0),
                "staff" => Some(50),
                _ => None,
            }
        }
    }

    fn s(text: &'static str) -> Utf8Str {
        Utf8Str(Bytes::from_static(text.as_bytes()))
    }

    fn named() -> IdMap {
        IdMap::with_domain("example.org", Arc::new(Fake))
    }

    #[test]
    fn without_a_domain_owners_are_numbers_both_ways() {
        let m = IdMap::numeric();
        assert_eq!(m.owner(1000), s("1000"));
        assert_eq!(m.owner_group(50), s("50"));
        assert_eq!(m.uid(&s("1000")), Ok(1000));
        assert_eq!(m.gid(&s("0")), Ok(0));
        // A name cannot be mapped without a domain: refused, not "nobody".
        assert_eq!(m.uid(&s("alice@example.org")), Err(Nfsstat4::BADOWNER));
        assert_eq!(m.uid(&s("")), Err(Nfsstat4::BADOWNER));
        assert_eq!(m.uid(&s("4294967296")), Err(Nfsstat4::BADOWNER), "past u32");
        assert_eq!(
            m.uid(&Utf8Str(Bytes::from_static(b"\xff"))),
            Err(Nfsstat4::BADOWNER)
        );
    }

    #[test]
    fn with_a_domain_known_ids_go_out_as_names_and_unknown_ones_as_numbers() {
        let m = named();
        assert_eq!(m.owner(1000), s("alice@example.org"));
        assert_eq!(m.owner(0), s("root@example.org"));
        assert_eq!(
            m.owner(4242),
            s("4242"),
            "no such user: its number, never nobody"
        );
        assert_eq!(m.owner_group(50), s("staff@example.org"));
        assert_eq!(m.owner_group(77), s("77"));
    }

    #[test]
    fn with_a_domain_names_in_it_map_back_and_anything_else_is_badowner() {
        let m = named();
        assert_eq!(m.uid(&s("alice@example.org")), Ok(1000));
        assert_eq!(m.uid(&s("root@EXAMPLE.org")), Ok(0), "domains ignore case");
        assert_eq!(m.gid(&s("staff@example.org")), Ok(50));
        assert_eq!(
            m.uid(&s("1000")),
            Ok(1000),
            "numeric strings are always accepted"
        );
        assert_eq!(m.gid(&s("50")), Ok(50));
        for bad in [
            "alice@other.org",
            "bob@example.org",
            "alice",
            "@example.org",
            "alice@",
            "Alice@example.org",
        ] {
            assert_eq!(m.uid(&s(bad)), Err(Nfsstat4::BADOWNER), "{bad}");
        }
        // A user name is not a group name.
        assert_eq!(m.gid(&s("alice@example.org")), Err(Nfsstat4::BADOWNER));
    }

    #[test]
    fn names_survive_the_round_trip() {
        let m = named();
        for uid in [0, 1000, 4242] {
            assert_eq!(m.uid(&m.owner(uid)), Ok(uid));
        }
        for gid in [0, 50, 77] {
            assert_eq!(m.gid(&m.owner_group(gid)), Ok(gid));
        }
    }
}
