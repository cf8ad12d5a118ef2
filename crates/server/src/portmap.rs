//! PORTMAP v2 responder (RFC 1833 §3).
//!
//! sluice serves NFS and MOUNT on one port, so its portmapper has nothing to learn: it answers
//! GETPORT for the programs it serves with that port, DUMP with the same table, and refuses SET
//! and UNSET (nobody else may register here). Clients that ask a portmapper (libnfs without
//! `nfsport`/`mountport`, the kernel's mount helper) then find everything in one round trip.
//!
//! NLM v4 and NSM v1 (the lock manager and status monitor of v3 clients, `crate::nlm`) are
//! served on the same port too, over TCP and, with `--udp`, UDP: a client's lockd finds them here.
//!
//! NFS version 4 (minor versions 1 and 2 in its COMPOUND) is listed for TCP only: RFC 8881
//! §2.9.1 requires a transport with congestion control, and the UDP listener refuses it.

use sluice_xdr::portmap::{Mapping, PmapList, IPPROTO_TCP, IPPROTO_UDP};
use sluice_xdr::{mount3, nfs3, nfs4, nlm, nsm, portmap};

/// What this server offers, for PORTMAP answers.
#[derive(Debug, Clone)]
pub struct PortTable {
    pub port: u16,
    pub udp: bool,
}

impl PortTable {
    /// The port of (prog, vers, prot), or 0 when not served (RFC 1833: 0 means "not registered").
    pub fn getport(&self, m: &Mapping) -> u32 {
        if self
            .mappings()
            .iter()
            .any(|x| x.prog == m.prog && x.vers == m.vers && x.prot == m.prot)
        {
            self.port as u32
        } else {
            0
        }
    }

    pub fn mappings(&self) -> Vec<Mapping> {
        let mut protos = vec![IPPROTO_TCP];
        if self.udp {
            protos.push(IPPROTO_UDP);
        }
        let mut out = Vec::new();
        for &prot in &protos {
            for (prog, vers) in [
                (portmap::PROGRAM, portmap::VERSION),
                (nfs3::PROGRAM, nfs3::VERSION),
                (mount3::PROGRAM, mount3::VERSION),
                (nlm::PROGRAM, nlm::VERSION),
                (nsm::PROGRAM, nsm::VERSION),
            ] {
                out.push(Mapping {
                    prog,
                    vers,
                    prot,
                    port: self.port as u32,
                });
            }
        }
        out.push(Mapping {
            prog: nfs4::PROGRAM,
            vers: nfs4::VERSION,
            prot: IPPROTO_TCP,
            port: self.port as u32,
        });
        out
    }

    /// SET and UNSET: refused, whatever the mapping (nobody else may register here).
    pub fn set(&self, _m: &Mapping) -> bool {
        false
    }

    /// DUMP: the same table GETPORT answers from.
    pub fn dump(&self) -> PmapList {
        PmapList(self.mappings())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn getport_answers_only_served_programs() {
        let t = PortTable {
            port: 2049,
            udp: false,
        };
        let q = |prog, vers, prot| Mapping {
            prog,
            vers,
            prot,
            port: 0,
        };
        assert_eq!(t.getport(&q(100003, 3, IPPROTO_TCP)), 2049);
        assert_eq!(t.getport(&q(100005, 3, IPPROTO_TCP)), 2049);
        assert_eq!(t.getport(&q(100003, 4, IPPROTO_TCP)), 2049);
        assert_eq!(t.getport(&q(100003, 3, IPPROTO_UDP)), 0);
        // NLM v4 and NSM v1 (v3 clients' locks) on the same port; NLM v1-v3 not served.
        assert_eq!(t.getport(&q(100021, 4, IPPROTO_TCP)), 2049);
        assert_eq!(t.getport(&q(100024, 1, IPPROTO_TCP)), 2049);
        assert_eq!(t.getport(&q(100021, 1, IPPROTO_TCP)), 0);
        assert_eq!(t.getport(&q(100021, 4, IPPROTO_UDP)), 0);
        let t = PortTable {
            port: 2049,
            udp: true,
        };
        assert_eq!(t.getport(&q(100003, 3, IPPROTO_UDP)), 2049);
        assert_eq!(t.getport(&q(100021, 4, IPPROTO_UDP)), 2049);
        // Version 4 never over UDP (RFC 8881 §2.9.1).
        assert_eq!(t.getport(&q(100003, 4, IPPROTO_UDP)), 0);
        assert_eq!(t.getport(&q(100003, 4, IPPROTO_TCP)), 2049);
    }
}
