//! An export's `xprtsec=` (transport security policy) at the RPC service: NFSv3 and MOUNT
//! calls handed to the server as if from a plaintext connection and from TLS connections with
//! and without a verified client certificate (the driver's `Transport`), so the modes are
//! exact without certificates.
//!
//! - MNT in plaintext is answered (Linux clients send it so for TLS mounts), MNT over TLS is
//!   held to the list (MNT3ERR_ACCES for a mode it does not name);
//! - every NFSv3 call on a handle of the export is judged by its own connection: the root
//!   handle learnt over TLS gets NFS3ERR_ACCES when it comes back in plaintext.

use bytes::Bytes;
use sluice_server::service::{Peer, Service, Transport};
use sluice_tcp::tls::TlsPeer;
use sluice_xdr::rpc::{AuthSys, CallHeader, MsgHeader, OpaqueAuth};
use sluice_xdr::{mount3, nfs3, Pack, Writer};
use std::path::PathBuf;
use std::sync::Arc;

const PLAIN: Transport = Transport::Tcp;
const TLS: Transport = Transport::Tls(TlsPeer {
    verified: false,
    kernel: false,
});
const MTLS: Transport = Transport::Tls(TlsPeer {
    verified: true,
    kernel: false,
});

fn peer(transport: Transport, conn_id: u64) -> Peer {
    Peer {
        addr: "127.0.0.1:900".parse().unwrap(),
        conn_id,
        transport,
        back_channel: None,
    }
}

fn call(xid: u32, (prog, proc_): (u32, u32), args: impl FnOnce(&mut Writer)) -> Vec<Bytes> {
    let cred = AuthSys {
        stamp: 0,
        machine_name: Bytes::new(),
        uid: 0,
        gid: 0,
        gids: vec![],
    };
    let header = CallHeader {
        rpcvers: 2,
        prog,
        vers: 3,
        proc_,
        cred: cred.to_opaque_auth(),
        verf: OpaqueAuth::none(),
    };
    let mut w = Writer::new();
    MsgHeader::Call { xid, call: header }.pack(&mut w);
    args(&mut w);
    w.into_segments()
}

/// The reply's words after the accepted-reply header (xid, REPLY, MSG_ACCEPTED, AUTH_NONE
/// verifier, SUCCESS): the procedure's results.
fn results(segs: &[Bytes]) -> Vec<u8> {
    let all: Vec<u8> = segs.iter().flat_map(|s| s.iter().copied()).collect();
    assert_eq!(
        &all[4..24],
        &[0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]
    );
    all[24..].to_vec()
}

fn word(b: &[u8], i: usize) -> u32 {
    u32::from_be_bytes(b[i * 4..i * 4 + 4].try_into().unwrap())
}

struct Fixture {
    server: Arc<sluice_server::service::Server>,
    export: PathBuf,
    dir: PathBuf,
}

impl Drop for Fixture {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

async fn server(options: &str) -> Fixture {
    let dir = std::env::temp_dir().join(format!("sluice-xprtsec-{}-{options}", std::process::id()));
    let export = dir.join("export");
    std::fs::create_dir_all(&export).unwrap();
    let export = export.canonicalize().unwrap();
    let cfg = sluice_server::ServerConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        exports: sluice_server::backend::exports::parse_exports(&format!(
            "{} *({options})",
            export.display()
        ))
        .unwrap(),
        state_dir: dir.join("state"),
        ..Default::default()
    };
    let server = sluice_server::bind(cfg).await.unwrap().server;
    Fixture {
        server,
        export,
        dir,
    }
}

impl Fixture {
    async fn send(&self, transport: Transport, record: Vec<Bytes>) -> Vec<u8> {
        let reply = self
            .server
            .clone()
            .handle(peer(transport, 7), record)
            .await
            .expect("a reply");
        results(&reply.segs)
    }

    /// MNT of the export: its status and, when OK, the root handle.
    async fn mnt(&self, transport: Transport, xid: u32) -> (u32, Vec<u8>) {
        let path = self.export.display().to_string();
        let r = self
            .send(
                transport,
                call(xid, (mount3::PROGRAM, mount3::proc_::MNT), |w| {
                    w.put_string(path.as_bytes())
                }),
            )
            .await;
        let status = word(&r, 0);
        if status != 0 {
            return (status, Vec::new());
        }
        let len = word(&r, 1) as usize;
        (status, r[8..8 + len].to_vec())
    }

    /// GETATTR of `fh`: its NFS status.
    async fn getattr(&self, transport: Transport, xid: u32, fh: &[u8]) -> u32 {
        let r = self
            .send(
                transport,
                call(xid, (nfs3::PROGRAM, nfs3::proc_::GETATTR), |w| {
                    w.put_opaque(fh)
                }),
            )
            .await;
        word(&r, 0)
    }
}

const NFS3ERR_ACCES: u32 = 13;
const MNT3ERR_ACCES: u32 = 13;

#[tokio::test]
async fn a_tls_only_export_is_refused_to_plaintext_nfs3_calls_and_a_plaintext_mnt_is_answered() {
    let f = server("rw,insecure,no_root_squash,xprtsec=tls:mtls").await;
    // MNT in plaintext: answered (as mountd does), the handle is no use in plaintext.
    let (status, plain_fh) = f.mnt(PLAIN, 1).await;
    assert_eq!(status, 0);
    assert_eq!(f.getattr(PLAIN, 2, &plain_fh).await, NFS3ERR_ACCES);
    // Over TLS: mounted and served, with or without a verified certificate.
    let (status, fh) = f.mnt(TLS, 3).await;
    assert_eq!(status, 0);
    assert_eq!(fh, plain_fh, "the same export root");
    assert_eq!(f.getattr(TLS, 4, &fh).await, 0);
    assert_eq!(f.getattr(MTLS, 5, &fh).await, 0);
    // The handle learnt over TLS, back in plaintext: refused.
    assert_eq!(f.getattr(PLAIN, 6, &fh).await, NFS3ERR_ACCES);
}

#[tokio::test]
async fn an_mtls_export_refuses_a_mnt_over_tls_without_a_certificate() {
    let f = server("rw,insecure,no_root_squash,xprtsec=mtls").await;
    assert_eq!(f.mnt(TLS, 1).await.0, MNT3ERR_ACCES);
    let (status, fh) = f.mnt(MTLS, 2).await;
    assert_eq!(status, 0);
    assert_eq!(f.getattr(MTLS, 3, &fh).await, 0);
    assert_eq!(f.getattr(TLS, 4, &fh).await, NFS3ERR_ACCES);
    // The default export admits all three.
    let f = server("rw,insecure,no_root_squash").await;
    for (i, t) in [PLAIN, TLS, MTLS].into_iter().enumerate() {
        let (status, fh) = f.mnt(t, 10 + i as u32).await;
        assert_eq!(status, 0);
        assert_eq!(f.getattr(t, 20 + i as u32, &fh).await, 0);
    }
}
