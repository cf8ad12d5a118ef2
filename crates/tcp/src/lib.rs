//! Socket settings that the client and the server drivers share: the congestion control of a
//! TCP connection within this host, and the buffers of a UDP socket.
//!
//! # The congestion control of a connection within this host
//! BBR is a common host default, and it paces: every segment leaves at a rate the algorithm
//! sets. With the `fq` queueing discipline that pacing costs nothing; without it (and loopback
//! has none, `noqueue`) the kernel paces inside TCP, with a high-resolution timer per burst. On
//! a path with no network in it there is nothing for BBR to model, and the timer work lands on
//! the hot path of both ends. Measured on this project's 2-core machine (2026-11-25, 512 MiB
//! warm file from `sluice serve` over 127.0.0.1, four runs of each side by side on a quiet
//! machine): `sluice cat` took 0.32–0.37 s with the connection under BBR and 0.11–0.12 s under
//! cubic, about 3x; `nfs-cat` (libnfs, one READ in flight) 0.26–0.42 s and 0.17–0.18 s. Under
//! BBR the client's socket saw reordered segments (`rcv_ooopack`) and the server
//! fast-retransmitted on a lossless path, about 100 segments per 512 MiB; the server's profile
//! showed its transmissions running from the pacing timer's interrupt. It is the *sending*
//! socket that counts: switching only the client's socket (the receiver of READ data) changed
//! nothing. With one READ in flight the effect is smaller, which is why a pipelining client
//! meets it and `nfs-cat` less so.
//!
//! # The rule
//! A connection whose peer is a loopback address and whose congestion control is a BBR variant
//! switches to cubic (reno if cubic is not available: reno is always built in). Every other
//! connection keeps the host's choice: on a real path BBR may be exactly what the administrator
//! wants. The switch is best effort; a failure leaves the host's default, which still works.
//! Both ends apply it, because the sender's congestion control is the one that paces: the
//! server's for READ replies, the client's for WRITE payloads.

//!
//! # UDP socket buffers
//! Over UDP the socket buffer is the only queue between the wire and the driver: the kernel
//! drops a datagram that finds it full (`RcvbufErrors`) and the peer retransmits on a healthy
//! network. The host default (about 208 KiB) holds six 32 KiB READ replies or WRITE calls.
//! [`set_udp_buffers`] asks for more, past `net.core.rmem_max` / `wmem_max` when the process
//! may (SO_RCVBUFFORCE / SO_SNDBUFFORCE need CAP_NET_ADMIN), else up to those limits. Best
//! effort: a smaller buffer only costs throughput. Each driver picks its size and says why
//! (the client's `transport::UDP_BUFFER_BYTES`, the server's `net::UDP_BUFFER_BYTES`).

pub mod ktls;
pub mod tls;
mod tls_record;
pub mod tls_session;

use std::io;
use std::net::IpAddr;
use std::os::fd::AsRawFd;

/// Congestion controls to try, in order, for a loopback connection that runs a paced one.
const LOOPBACK_PREFERRED: [&str; 2] = ["cubic", "reno"];

/// Whether a connection to `peer` running `current` should switch (see the module docs).
pub fn should_switch(peer: IpAddr, current: &str) -> bool {
    peer.is_loopback() && current.starts_with("bbr")
}

/// Applies the rule to a connected socket. Returns the congestion control it switched to, or
/// `None` if it kept the host's.
pub fn tune(sock: &impl AsRawFd, peer: IpAddr) -> io::Result<Option<&'static str>> {
    let current = get(sock)?;
    if !should_switch(peer, &current) {
        return Ok(None);
    }
    let mut last = None;
    for name in LOOPBACK_PREFERRED {
        match set(sock, name) {
            Ok(()) => return Ok(Some(name)),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| io::Error::other("no congestion control to switch to")))
}

/// The socket's congestion control (`TCP_CONGESTION`).
pub fn get(sock: &impl AsRawFd) -> io::Result<String> {
    // TCP_CA_NAME_MAX is 16 in the kernel.
    let mut buf = [0u8; 16];
    let mut len = buf.len() as libc::socklen_t;
    // SAFETY: `buf` is writable for `len` bytes and the kernel writes at most that many; the
    // descriptor is valid for the life of `sock`.
    let rc = unsafe {
        libc::getsockopt(
            sock.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_CONGESTION,
            buf.as_mut_ptr().cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    let bytes = &buf[..(len as usize).min(buf.len())];
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    Ok(String::from_utf8_lossy(&bytes[..end]).into_owned())
}

/// Sets the socket's congestion control (`TCP_CONGESTION`).
pub fn set(sock: &impl AsRawFd, name: &str) -> io::Result<()> {
    // SAFETY: the name is passed with its length (no terminator needed); the descriptor is
    // valid for the life of `sock`.
    let rc = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_CONGESTION,
            name.as_ptr().cast(),
            name.len() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Sets SO_RCVBUF and SO_SNDBUF of a UDP socket to `bytes`, forcing past the host limits when
/// permitted (see the module docs). Best effort: failures are ignored.
pub fn set_udp_buffers(sock: &impl AsRawFd, bytes: usize) {
    let fd = sock.as_raw_fd();
    let val = bytes.min(i32::MAX as usize) as libc::c_int;
    for (force, plain) in [
        (libc::SO_RCVBUFFORCE, libc::SO_RCVBUF),
        (libc::SO_SNDBUFFORCE, libc::SO_SNDBUF),
    ] {
        for opt in [force, plain] {
            // SAFETY: fd is a valid socket for the life of `sock`; the option value is a c_int
            // whose size we pass.
            let rc = unsafe {
                libc::setsockopt(
                    fd,
                    libc::SOL_SOCKET,
                    opt,
                    &val as *const libc::c_int as *const libc::c_void,
                    std::mem::size_of::<libc::c_int>() as libc::socklen_t,
                )
            };
            if rc == 0 {
                break;
            }
        }
    }
}

/// The suite's skip policy (docs/testing.md), for the BBR test below.
#[cfg(test)]
#[path = "../../../tests/support/needs.rs"]
mod needs;

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, Ipv6Addr, TcpListener, TcpStream, UdpSocket};

    fn sockopt_int(sock: &impl AsRawFd, opt: libc::c_int) -> libc::c_int {
        let mut val: libc::c_int = 0;
        let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: `val` is a writable c_int and `len` its size; the descriptor is valid.
        let rc = unsafe {
            libc::getsockopt(
                sock.as_raw_fd(),
                libc::SOL_SOCKET,
                opt,
                (&mut val as *mut libc::c_int).cast(),
                &mut len,
            )
        };
        assert_eq!(rc, 0, "getsockopt: {}", io::Error::last_os_error());
        val
    }

    /// 64 KiB is below every sane `rmem_max`/`wmem_max`, so even without privilege both
    /// buffers reach it (Linux reports twice the value asked for, its bookkeeping share).
    #[test]
    fn udp_buffers_are_set_on_both_directions() {
        let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
        let bytes = 64 << 10;
        set_udp_buffers(&sock, bytes);
        assert!(sockopt_int(&sock, libc::SO_RCVBUF) as usize >= bytes);
        assert!(sockopt_int(&sock, libc::SO_SNDBUF) as usize >= bytes);
    }

    #[test]
    fn only_paced_loopback_connections_switch() {
        let lo4 = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2));
        let lo6 = IpAddr::V6(Ipv6Addr::LOCALHOST);
        let remote = IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1));
        assert!(should_switch(lo4, "bbr"));
        assert!(should_switch(lo6, "bbr"));
        assert!(should_switch(lo4, "bbr3"));
        assert!(!should_switch(lo4, "cubic"));
        assert!(!should_switch(lo4, "reno"));
        assert!(
            !should_switch(remote, "bbr"),
            "a real path keeps the host's choice"
        );
    }

    /// On a real socket: a loopback connection forced to BBR comes out of `tune` on cubic or
    /// reno, and one already on reno is left alone. A kernel with no BBR to force fails it,
    /// unless `SLUICE_TEST_SKIP=bbr` says so on purpose (docs/testing.md).
    #[test]
    fn a_loopback_socket_on_bbr_is_switched_and_others_are_left_alone() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let sock = TcpStream::connect(addr).unwrap();
        set(&sock, "reno").unwrap();
        assert_eq!(tune(&sock, addr.ip()).unwrap(), None);
        assert_eq!(get(&sock).unwrap(), "reno");
        if let Err(e) = set(&sock, "bbr") {
            crate::needs::missing(
                "bbr",
                &format!("this kernel cannot put a socket on bbr ({e})"),
                "load the tcp_bbr module (modprobe tcp_bbr)",
            );
            return;
        }
        assert_eq!(get(&sock).unwrap(), "bbr");
        let chosen = tune(&sock, addr.ip()).unwrap().expect("switched");
        assert_eq!(get(&sock).unwrap(), chosen);
    }
}
