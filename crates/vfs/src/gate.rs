//! The export gate: whether a call may use an export, and as whom. One function, [`admit`], for
//! every protocol that reaches an export (NFSv3, MOUNT, NFSv4's COMPOUND), so the rules are
//! written once; it answers a neutral [`Refusal`] that each protocol maps to its own status.
//! Pure: the export's rules, the client's address, the connection's transport security and the
//! call's identity in, a [`Caller`] out.
//!
//! ```text
//!   client address ─► its rule in the export (exports(5): a host, then a network, then `*`)
//!                       no rule: Refusal::NotListed    v3 ACCES, MOUNT MNT3ERR_ACCES, v4 ACCESS
//!                  ─► `secure`: a source port below 1024 (NFS programs, see below)
//!                       otherwise: Refusal::InsecurePort            v3 PERM, v4 PERM
//!                  ─► `xprtsec=`: the connection's mode (none, tls, mtls) in the rule's list
//!                       otherwise: Refusal::Xprtsec    v3 ACCES, MOUNT MNT3ERR_ACCES (over
//!                                                      TLS only, see below), v4 WRONGSEC
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
//! # Transport security (`xprtsec=`, RFC 9289)
//! RFC 9289 leaves it to the server's policy whether a client without TLS may go on (§4.1:
//! "policy settings on the RPC-with-TLS-enabled peer determine whether RPC operation continues
//! without the use of TLS, or RPC operation is not permitted") and defines no NFS status for
//! the refusal; it also says the TLS identity cannot stand for an RPC user (§4.2), so the mode
//! decides only *whether* a call reaches the export, never *as whom* (squashing is unchanged).
//! What the refusal looks like is knfsd's, whose `xprtsec=` option this is (exports(5)):
//!
//! * A connection has exactly one mode ([`Xprtsec`]): `none` (plain TCP or UDP), `tls` (TLS,
//!   no verified client certificate), `mtls` (TLS with a certificate verified against the
//!   client CA; one that does not verify fails the handshake, §4.2). knfsd's
//!   `check_xprtsec_policy` admits a connection iff its mode is in the export's list and
//!   answers `nfserr_wrongsec` otherwise; it runs in `fh_verify`, so every NFS call on a handle
//!   of the export is checked, not only the first: a handle learnt over TLS is refused when it
//!   comes back in plaintext.
//! * NFSv4: NFS4ERR_WRONGSEC, the status RFC 8881 §2.6 gives for "the security the request
//!   came with is not what this file system accepts", with §2.6.3.1's rules for *which* op
//!   answers it (the put-filehandle ops, LOOKUP, LOOKUPP, OPEN by name; never SECINFO or
//!   SECINFO_NO_NAME, §2.6.3.1.1.5). Those rules live in the COMPOUND processor
//!   (`server/src/nfs4/compound/fh.rs`); this gate only says "refused for transport security".
//! * NFSv3 has no WRONGSEC: what a v3 client of knfsd gets is NFS3ERR_ACCES (the knfsd fix
//!   "decouple the xprtsec policy check from check_nfsd_access()", 2025, describes a plaintext
//!   v3 mount of a `tls:mtls` export whose every further call "would be met with
//!   NFS3ERR_ACCES"; that fix also ends the bypass that let FSINFO and GETATTR of the export
//!   root through, so the mount itself now fails).
//! * MOUNT: nfs-utils' mountd never checks `xprtsec=`: it passes the list to the kernel's export
//!   cache, and MOUNT itself is never over TLS on Linux (the kernel's MOUNT client has no TLS,
//!   so a `mount -o xprtsec=tls` sends MNT in plaintext and only NFS goes over TLS). A MNT in
//!   plaintext is therefore not held to the policy here either ([`Program::Mount`] with mode
//!   `none`): refusing it would lock out every Linux client of a TLS-only export, and the root
//!   handle it answers is refused by the first NFS call in plaintext (the client's FSINFO or
//!   GETATTR at mount time: the mount fails with ACCES). A MNT that *did* come over TLS shows
//!   which mode the client will use, so it is held to the policy (MNT3ERR_ACCES, mountd's
//!   refusal for "this client may not mount this"): a TLS client without a certificate is
//!   refused a `mtls` export at MNT.
//!
//! knfsd exempts NLM from the transport check (lockd has no TLS); sluice serves no NLM, so
//! every call that names a file of an export passes here.
//!
//! NFSv4.1 sessions are not tied to a mode: knfsd's CREATE_SESSION and BIND_CONN_TO_SESSION
//! check the session, the SP4_MACH_CRED principal and the connection's direction, never its
//! transport security, and sluice does the same. A client may so bind a plaintext connection
//! to a session it made over TLS; each call on it is judged by that connection's own mode
//! here, so it reaches no export that refuses plaintext, and what the server sends on it as
//! a back channel (RFC 9289 §5.1.1: reverse-direction calls ride the connection's own TLS,
//! or none) carries file handles and stateids, not file data or names.

use crate::creds::Cred;
pub use crate::exports::Xprtsec;
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
    /// The export's `xprtsec=` does not list the connection's transport security (`mode`).
    Xprtsec(Xprtsec),
}

/// Which program is asking, for the one rule they differ in (`secure`, see the module notes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Program {
    /// NFS (v3 procedures, v4 COMPOUND ops): held to `secure`.
    Nfs,
    /// MOUNT: not held to `secure`.
    Mount,
}

/// Admits a call from `client`, over a connection of transport security `mode`, to `export`:
/// the caller it runs as, or why not. `identity` is the call's AUTH_SYS ids, `None` for
/// AUTH_NONE (the rule's anonymous ids).
pub fn admit(
    export: &Export,
    client: SocketAddr,
    mode: Xprtsec,
    identity: Option<&Cred>,
    program: Program,
) -> Result<Caller, Refusal> {
    let opts = export.options_for(client.ip()).ok_or(Refusal::NotListed)?;
    // knfsd's order (`__fh_verify`): the port, then the transport security.
    if program == Program::Nfs && opts.secure && client.port() >= PRIVILEGED_PORT_END {
        return Err(Refusal::InsecurePort);
    }
    if !transport_admitted(opts, mode, program) {
        return Err(Refusal::Xprtsec(mode));
    }
    Ok(caller(opts, identity))
}

/// Whether a call over a connection of `mode` passes the rule's `xprtsec=` list: always for
/// MOUNT in plaintext (see the module notes), otherwise when the list has the mode.
pub fn transport_admitted(opts: &ExportOptions, mode: Xprtsec, program: Program) -> bool {
    (program == Program::Mount && mode == Xprtsec::None) || opts.xprtsec.allows(mode)
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

    const PLAIN: Xprtsec = Xprtsec::None;

    #[test]
    fn a_client_without_a_rule_is_not_listed_for_every_program() {
        let e = export("/a 10.0.0.0/8(rw,insecure)");
        for p in [Program::Nfs, Program::Mount] {
            assert_eq!(
                admit(&e, at("192.168.0.1:700"), PLAIN, None, p),
                Err(Refusal::NotListed)
            );
        }
        assert!(admit(&e, at("10.1.2.3:40000"), PLAIN, None, Program::Nfs).is_ok());
    }

    #[test]
    fn secure_refuses_unprivileged_ports_for_nfs_only() {
        let e = export("/a *(rw)");
        assert_eq!(
            admit(&e, at("10.0.0.1:1024"), PLAIN, None, Program::Nfs),
            Err(Refusal::InsecurePort)
        );
        assert!(admit(&e, at("10.0.0.1:1023"), PLAIN, None, Program::Nfs).is_ok());
        assert!(admit(&e, at("10.0.0.1:1024"), PLAIN, None, Program::Mount).is_ok());
        let e = export("/a *(rw,insecure)");
        assert!(admit(&e, at("10.0.0.1:40000"), PLAIN, None, Program::Nfs).is_ok());
    }

    #[test]
    fn the_caller_is_squashed_and_carries_read_only() {
        let root = Cred::new(0, 0);
        let e = export("/a 10.0.0.1(rw,insecure) *(ro,insecure,all_squash,anonuid=7,anongid=8)");
        let c = admit(&e, at("10.0.0.1:900"), PLAIN, Some(&root), Program::Nfs).unwrap();
        assert_eq!((c.cred.uid, c.cred.gid, c.read_only), (65534, 65534, false));
        let c = admit(&e, at("10.0.0.2:900"), PLAIN, Some(&root), Program::Nfs).unwrap();
        assert_eq!((c.cred, c.read_only), (Cred::new(7, 8), true));
        // AUTH_NONE: the rule's anonymous ids.
        let c = admit(&e, at("10.0.0.2:900"), PLAIN, None, Program::Mount).unwrap();
        assert_eq!(c.cred, Cred::new(7, 8));
    }

    #[test]
    fn ipv4_mapped_clients_match_ipv4_rules() {
        let e = export("/a 127.0.0.1(rw)");
        assert!(admit(&e, at("[::ffff:127.0.0.1]:800"), PLAIN, None, Program::Nfs).is_ok());
        assert_eq!(
            admit(&e, at("[::1]:800"), PLAIN, None, Program::Nfs),
            Err(Refusal::NotListed)
        );
    }

    #[test]
    fn a_mode_the_export_does_not_list_is_refused_for_nfs() {
        let e = export("/a 10.0.0.0/8(rw,insecure,xprtsec=tls:mtls) *(rw,insecure,xprtsec=mtls)");
        let near = at("10.1.2.3:40000");
        let far = at("192.168.0.1:40000");
        let nfs = |addr, mode| admit(&e, addr, mode, None, Program::Nfs);
        assert_eq!(
            nfs(near, Xprtsec::None),
            Err(Refusal::Xprtsec(Xprtsec::None))
        );
        assert!(nfs(near, Xprtsec::Tls).is_ok());
        assert!(nfs(near, Xprtsec::Mtls).is_ok());
        // The rule the address picks decides: `*` here wants a verified certificate.
        assert_eq!(nfs(far, Xprtsec::Tls), Err(Refusal::Xprtsec(Xprtsec::Tls)));
        assert!(nfs(far, Xprtsec::Mtls).is_ok());
        // `tls` alone is TLS without a verified certificate (knfsd's reading of exports(5)).
        let e = export("/a *(insecure,xprtsec=tls)");
        assert_eq!(
            admit(&e, near, Xprtsec::Mtls, None, Program::Nfs),
            Err(Refusal::Xprtsec(Xprtsec::Mtls))
        );
        // The default admits every mode.
        let e = export("/a *(insecure)");
        for mode in Xprtsec::ALL {
            assert!(admit(&e, near, mode, None, Program::Nfs).is_ok());
        }
    }

    #[test]
    fn mount_is_held_to_xprtsec_only_over_tls() {
        let e = export("/a *(rw,xprtsec=mtls)");
        let c = at("10.0.0.1:40000");
        let mnt = |mode| admit(&e, c, mode, None, Program::Mount);
        // Linux sends MNT in plaintext even for a TLS mount: answered, NFS then refuses.
        assert!(mnt(Xprtsec::None).is_ok());
        assert_eq!(mnt(Xprtsec::Tls), Err(Refusal::Xprtsec(Xprtsec::Tls)));
        assert!(mnt(Xprtsec::Mtls).is_ok());
        // An address without a rule is refused before the transport is looked at.
        let e = export("/a 10.0.0.2(xprtsec=tls)");
        assert_eq!(
            admit(&e, c, Xprtsec::None, None, Program::Mount),
            Err(Refusal::NotListed)
        );
    }

    #[test]
    fn the_port_is_checked_before_the_transport_security() {
        // knfsd's order: a plaintext call from an unprivileged port to a TLS-only `secure`
        // export is refused for its port first.
        let e = export("/a *(rw,xprtsec=tls)");
        assert_eq!(
            admit(&e, at("10.0.0.1:40000"), Xprtsec::None, None, Program::Nfs),
            Err(Refusal::InsecurePort)
        );
        assert_eq!(
            admit(&e, at("10.0.0.1:1000"), Xprtsec::None, None, Program::Nfs),
            Err(Refusal::Xprtsec(Xprtsec::None))
        );
        assert!(admit(&e, at("10.0.0.1:1000"), Xprtsec::Tls, None, Program::Nfs).is_ok());
    }
}
