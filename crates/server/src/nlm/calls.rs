//! Calls from the server to NFSv3 clients' lock managers and status monitors (the module
//! notes of [`crate::nlm`]): GRANTED_MSG, the `_RES` answers, SM_NOTIFY. Each over UDP, to
//! the port the client's portmapper gives, tried [`CALL_TRIES`] times.

use bytes::Bytes;
use sluice_xdr::{nlm, nsm, portmap, Pack, Reader, Unpack, Writer};
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::UdpSocket;
use tracing::debug;

/// Calls queued for clients at most; past it a call is dropped (module notes of
/// [`crate::nlm`]: every one of them is re-sent or re-asked by the client).
pub const CALLS_QUEUED_MAX: usize = 1024;
/// Tries of one call (and of its GETPORT).
pub const CALL_TRIES: u32 = 3;
/// How long one try waits for the reply. 2 s: a client's lockd on a LAN answers in
/// microseconds; a client that is down should not hold a sender for long.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(2);
/// Calls in flight at once.
const CALLS_IN_FLIGHT_MAX: usize = 16;
/// The largest reply read (a GETPORT or NLM reply is under 100 bytes).
const REPLY_BYTES_MAX: usize = 8192;

/// One call to a client.
#[derive(Debug, Clone)]
pub enum Outgoing {
    /// An NLM v4 procedure (GRANTED_MSG or a `_RES`) with its encoded arguments.
    Nlm { ip: IpAddr, proc_: u32, args: Bytes },
    /// SM_NOTIFY to the client's status monitor: this server (named by the address the
    /// client reaches it at) is in NSM state `state`.
    Notify { ip: IpAddr, state: u32 },
}

impl Outgoing {
    /// NLM_GRANTED_MSG for a granted waiter.
    pub fn granted(ip: IpAddr, args: &nlm::Nlm4TestArgs) -> Self {
        Self::nlm(ip, nlm::proc_::GRANTED_MSG, args)
    }

    /// An NLM procedure `proc_` with arguments `args`.
    pub fn nlm(ip: IpAddr, proc_: u32, args: &impl Pack) -> Self {
        Self::Nlm {
            ip,
            proc_,
            args: sluice_xdr::to_bytes(args),
        }
    }
}

/// Sends the queued calls until the queue's senders are gone.
pub async fn run(mut rx: tokio::sync::mpsc::Receiver<Outgoing>, portmap_port: u16) {
    let slots = Arc::new(tokio::sync::Semaphore::new(CALLS_IN_FLIGHT_MAX));
    while let Some(call) = rx.recv().await {
        let Ok(permit) = slots.clone().acquire_owned().await else {
            return;
        };
        tokio::spawn(async move {
            if let Err(e) = send(&call, portmap_port).await {
                debug!("NLM/NSM call to a client failed: {call:?}: {e}");
            }
            drop(permit);
        });
    }
}

/// Sends one call: GETPORT of the client's program, then the call itself.
pub async fn send(call: &Outgoing, portmap_port: u16) -> io::Result<()> {
    let (ip, prog, vers, proc_) = match call {
        Outgoing::Nlm { ip, proc_, .. } => (*ip, nlm::PROGRAM, nlm::VERSION, *proc_),
        Outgoing::Notify { ip, .. } => (*ip, nsm::PROGRAM, nsm::VERSION, nsm::proc_::NOTIFY),
    };
    let port = getport(SocketAddr::new(ip, portmap_port), prog, vers).await?;
    let to = SocketAddr::new(ip, port);
    let args = match call {
        Outgoing::Nlm { args, .. } => args.clone(),
        Outgoing::Notify { state, .. } => {
            // The client's statd matches the notice to the server it monitors by this name:
            // the address it reaches the server at, which is the one this socket uses.
            let local = local_addr_towards(to).await?;
            sluice_xdr::to_bytes(&nsm::StatChge {
                mon_name: nsm::SmString(Bytes::from(local.ip().to_string())),
                state: *state,
            })
        }
    };
    rpc_udp(to, prog, vers, proc_, &args).await?;
    if let Outgoing::Notify { state, .. } = call {
        // Once per monitored host and restart: the line that shows the notice arrived.
        tracing::info!(to = %to, state, "NSM: SM_NOTIFY answered by the client's status monitor");
    }
    Ok(())
}

/// The port `prog`/`vers` has over UDP at the portmapper `pmap`; an error when unregistered.
pub async fn getport(pmap: SocketAddr, prog: u32, vers: u32) -> io::Result<u16> {
    let m = portmap::Mapping {
        prog,
        vers,
        prot: portmap::IPPROTO_UDP,
        port: 0,
    };
    let reply = rpc_udp(
        pmap,
        portmap::PROGRAM,
        portmap::VERSION,
        portmap::proc_::GETPORT,
        &sluice_xdr::to_bytes(&m),
    )
    .await?;
    let port = u32::unpack(&mut Reader::new(&[reply]))
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
    match u16::try_from(port) {
        Ok(p) if p != 0 => Ok(p),
        _ => Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!("program {prog} v{vers} not registered at {pmap}"),
        )),
    }
}

/// One RPC over UDP with AUTH_NONE: the results of an accepted, successful reply.
pub async fn rpc_udp(
    to: SocketAddr,
    prog: u32,
    vers: u32,
    proc_: u32,
    args: &[u8],
) -> io::Result<Bytes> {
    static XID: AtomicU32 = AtomicU32::new(0x4e4c_0000);
    let xid = XID.fetch_add(1, Ordering::Relaxed);
    let mut w = Writer::new();
    for v in [xid, 0, 2, prog, vers, proc_, 0, 0, 0, 0] {
        w.put_u32(v);
    }
    w.put_raw(args);
    let msg = w.into_bytes();
    let bind: SocketAddr = match to {
        SocketAddr::V4(_) => (std::net::Ipv4Addr::UNSPECIFIED, 0).into(),
        SocketAddr::V6(_) => (std::net::Ipv6Addr::UNSPECIFIED, 0).into(),
    };
    let sock = UdpSocket::bind(bind).await?;
    sock.connect(to).await?;
    let mut buf = vec![0u8; REPLY_BYTES_MAX];
    for _ in 0..CALL_TRIES {
        sock.send(&msg).await?;
        let deadline = tokio::time::Instant::now() + CALL_TIMEOUT;
        loop {
            let n = match tokio::time::timeout_at(deadline, sock.recv(&mut buf)).await {
                Err(_) => break,
                Ok(r) => r?,
            };
            if let Some(res) = accepted_results(&buf[..n], xid) {
                return res;
            }
        }
    }
    Err(io::Error::new(
        io::ErrorKind::TimedOut,
        format!("no reply from {to} (program {prog})"),
    ))
}

/// The results of a reply to `xid`; `None` for a datagram that is not that reply.
fn accepted_results(b: &[u8], xid: u32) -> Option<io::Result<Bytes>> {
    let segs = [Bytes::copy_from_slice(b)];
    let mut r = Reader::new(&segs);
    if r.get_u32().ok()? != xid || r.get_u32().ok()? != 1 {
        return None;
    }
    let refused = |what: &str| Some(Err(io::Error::other(what.to_string())));
    if r.get_u32().ok()? != 0 {
        return refused("call denied");
    }
    let _flavor = r.get_u32().ok()?;
    let _verf = r.get_opaque("verf", 400).ok()?;
    if r.get_u32().ok()? != 0 {
        return refused("call not accepted");
    }
    let used = b.len() - r.remaining();
    Some(Ok(Bytes::copy_from_slice(&b[used..])))
}

/// The local address a datagram to `to` leaves from.
async fn local_addr_towards(to: SocketAddr) -> io::Result<SocketAddr> {
    let bind: SocketAddr = match to {
        SocketAddr::V4(_) => (std::net::Ipv4Addr::UNSPECIFIED, 0).into(),
        SocketAddr::V6(_) => (std::net::Ipv6Addr::UNSPECIFIED, 0).into(),
    };
    let s = UdpSocket::bind(bind).await?;
    s.connect(to).await?;
    s.local_addr()
}
