//! The export gate: whether a call may use an export, and as whom. One function, [`admit`], for
//! every protocol that reaches an export (NFSv3, MOUNT, NFSv4's COMPOUND), so the rules are
//! written once; it answers a neutral [`Refusal`] that each protocol maps to its own status.
//! Pure: the export's rules, the client's address and the call's identity in, a [`Caller`] out.
//!
//! ```text
//!   client address ─► its rule in the export (exports(5): a host, then a network, then `*`)
//!                       no rule: Refusal::NotListed    v3 ACCES, MOUNT MNT3ERR_ACCES, v4 ACCESS
//!                  ─► `secure`: a source port below 1024 (NFS programs, see below)
//!                       otherwise: Refusal::InsecurePort            v3 PERM, v4 PERM
//!                  ─► the identity (AUTH_SYS ids; none for AUTH_NONE: the anonymous ids),
//!                     squashed (`root_squash`, `all_squash`) ─► Caller { cred, read_only }
//! ```
//!
//! A read-only export is not refused here: the [`Caller`] carries the rule's `ro`, and every
//! backend answers a modifying operation with [`FsError::RoFs`](crate::FsError::RoFs) once the
//! handle is found valid (so a stale handle is still stale), which v3 sends as NFS3ERR_ROFS and
//! v4 as NFS4ERR_ROFS.
//!
//! Unprivileged ports: knfsd answers a request from one on a `secure` export with NFSERR_PERM,
//! and so do the NFS programs here. MOUNT is not held to `secure` ([`Program::Mount`]): a client
//! may learn a handle from any port, and every NFS call with it is then checked (knfsd's mountd
//! does refuse such a MNT, with MNT3ERR_ACCES).
//!
//! NFS4ERR_WRONGSEC does not arise from the gate: only AUTH_SYS and AUTH_NONE reach it and every
//! export accepts both. Once exports take `sec=`, a flavor an export does not accept becomes a
//! third refusal here (knfsd: NFS4ERR_WRONGSEC in v4, ACCES in v3).

use crate::creds::Cred;
use crate::exports::{Export, ExportOptions};
use crate::types::Caller;
use std::net::SocketAddr;

/// Source ports below this are privileged (`IPPORT_RESERVED`): only root may bind them, which
/// is what a `secure` export asks of its clients.
pub const PRIVILEGED_PORT_END: u16 = 1024;

/// Why the gate refused a call. Each protocol maps it to its own status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// No rule of the export matches the client's address.
    NotListed,
    /// The export is `secure` and the call came from an unprivileged source port.
    InsecurePort,
}

/// Which program is asking, for the one rule they differ in (`secure`, see the module notes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Program {
    /// NFS (v3 procedures, v4 COMPOUND ops): held to `secure`.
    Nfs,
    /// MOUNT: not held to `secure`.
    Mount,
}

/// Admits a call from `client` to `export`: the caller it runs as, or why not. `identity` is the
/// call's AUTH_SYS ids, `None` for AUTH_NONE (the rule's anonymous ids).
pub fn admit(
    export: &Export,
    client: SocketAddr,
    identity: Option<&Cred>,
    program: Program,
) -> Result<Caller, Refusal> {
    let opts = export.options_for(client.ip()).ok_or(Refusal::NotListed)?;
    if program == Program::Nfs && opts.secure && client.port() >= PRIVILEGED_PORT_END {
        return Err(Refusal::InsecurePort);
    }
    Ok(caller(opts, identity))
}

/// The caller a rule makes of an identity: AUTH_SYS ids or, for `None` (AUTH_NONE), the rule's
/// anonymous ids, then squashed, with the rule's `ro`.
pub fn caller(opts: &ExportOptions, identity: Option<&Cred>) -> Caller {
    match identity {
        Some(cred) => Caller::new(cred, opts),
        None => Caller::new(&Cred::new(opts.anonuid, opts.anongid), opts),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exports::parse_exports;

    fn export(line: &str) -> Export {
        parse_exports(line).unwrap().remove(0)
    }

    fn at(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn a_client_without_a_rule_is_not_listed_for_every_program() {
        let e = export("/a 10.0.0.0/8(rw,insecure)");
        for p in [Program::Nfs, Program::Mount] {
            assert_eq!(
                admit(&e, at("192.168.0.1:700"), None, p),
                Err(Refusal::NotListed)
            );
        }
        assert!(admit(&e, at("10.1.2.3:40000"), None, Program::Nfs).is_ok());
    }

    #[test]
    fn secure_refuses_unprivileged_ports_for_nfs_only() {
        let e = export("/a *(rw)");
        assert_eq!(
            admit(&e, at("10.0.0.1:1024"), None, Program::Nfs),
            Err(Refusal::InsecurePort)
        );
        assert!(admit(&e, at("10.0.0.1:1023"), None, Program::Nfs).is_ok());
        assert!(admit(&e, at("10.0.0.1:1024"), None, Program::Mount).is_ok());
        let e = export("/a *(rw,insecure)");
        assert!(admit(&e, at("10.0.0.1:40000"), None, Program::Nfs).is_ok());
    }

    #[test]
    fn the_caller_is_squashed_and_carries_read_only() {
        let root = Cred::new(0, 0);
        let e = export("/a 10.0.0.1(rw,insecure) *(ro,insecure,all_squash,anonuid=7,anongid=8)");
        let c = admit(&e, at("10.0.0.1:900"), Some(&root), Program::Nfs).unwrap();
        assert_eq!((c.cred.uid, c.cred.gid, c.read_only), (65534, 65534, false));
        let c = admit(&e, at("10.0.0.2:900"), Some(&root), Program::Nfs).unwrap();
        assert_eq!((c.cred, c.read_only), (Cred::new(7, 8), true));
        // AUTH_NONE: the rule's anonymous ids.
        let c = admit(&e, at("10.0.0.2:900"), None, Program::Mount).unwrap();
        assert_eq!(c.cred, Cred::new(7, 8));
    }

    #[test]
    fn ipv4_mapped_clients_match_ipv4_rules() {
        let e = export("/a 127.0.0.1(rw)");
        assert!(admit(&e, at("[::ffff:127.0.0.1]:800"), None, Program::Nfs).is_ok());
        assert_eq!(
            admit(&e, at("[::1]:800"), None, Program::Nfs),
            Err(Refusal::NotListed)
        );
    }
}
