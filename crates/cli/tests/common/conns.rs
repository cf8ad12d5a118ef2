//! Which TCP connections reached a server's port, and what each one said first: a `dumpcap`
//! capture of the client-to-server half of the port's traffic, cut to the first 160 bytes of
//! every packet (headers and the first RPC words; the data itself is not kept, so a run that
//! moves hundreds of MiB makes a capture of a few MiB).
//!
//! For RPC-with-TLS (RFC 9289) this is the outside view the server's own counters cannot give:
//! the server counts the connections it upgraded, not the ones it served in plaintext. A
//! connection whose first record is the AUTH_TLS probe asked for TLS; any other first record is
//! a plaintext call, and its program number says which protocol went unencrypted.

use std::io;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// Bytes kept of every packet: Ethernet (14) + IPv4 (20..60) + TCP (20..60) + the first 32 bytes
/// of an RPC call (record mark, xid, direction, RPC version, program, version, procedure,
/// credential flavor) fit.
const SNAP_BYTES: u32 = 160;

/// How long dumpcap gets to open the interface and write its file header.
const START_TIMEOUT: Duration = Duration::from_secs(20);

/// What a connection sent first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FirstRecord {
    /// The RPC-with-TLS probe: a NULL call with an AUTH_TLS (7) credential.
    TlsProbe,
    /// A plaintext RPC call to this program (100003 NFS, 100005 MOUNT, ...).
    PlainCall { program: u32, version: u32 },
    /// Bytes that are no RPC call header.
    Other(Vec<u8>),
    /// The connection sent nothing the capture saw.
    Nothing,
}

/// One TCP connection to the port: the client's port and its first record.
#[derive(Debug, Clone)]
pub struct Conn {
    pub client_port: u16,
    pub first: FirstRecord,
}

/// A running capture of the packets sent to one loopback TCP port; stopped on drop.
pub struct ConnCapture {
    child: Option<Child>,
    pub pcap: PathBuf,
    port: u16,
}

impl ConnCapture {
    /// Starts `dumpcap` on `lo` for packets to `port`, writing the classic pcap format to
    /// `pcap`; returns once the capture file has its header (dumpcap writes it once the
    /// interface is open and the filter set).
    pub fn start(port: u16, pcap: &Path) -> ConnCapture {
        let _ = std::fs::remove_file(pcap);
        let log = pcap.with_extension("log");
        let child = Command::new("dumpcap")
            .args(["-i", "lo", "-P", "-q", "-B", "64", "-s"])
            .arg(SNAP_BYTES.to_string())
            .arg("-f")
            .arg(format!("tcp dst port {port}"))
            .arg("-w")
            .arg(pcap)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("dumpcap log"))
            .spawn()
            .expect("spawn dumpcap");
        let mut c = ConnCapture {
            child: Some(child),
            pcap: pcap.to_path_buf(),
            port,
        };
        let up = super::wait_until(START_TIMEOUT, Duration::from_millis(50), || {
            super::file_len(pcap) >= 24
                || c.child
                    .as_mut()
                    .is_some_and(|ch| ch.try_wait().ok().flatten().is_some())
        });
        assert!(
            up && super::file_len(pcap) >= 24,
            "dumpcap did not start capturing port {port}: {}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        c
    }

    /// Stops the capture (SIGINT: dumpcap flushes its buffer and closes the file) and returns
    /// the connections it saw, in the order they were opened.
    pub fn stop(&mut self) -> Vec<Conn> {
        self.finish();
        let data = std::fs::read(&self.pcap)
            .unwrap_or_else(|e| panic!("read {}: {e}", self.pcap.display()));
        parse(&data, self.port)
            .unwrap_or_else(|e| panic!("cannot read the capture {}: {e}", self.pcap.display()))
    }

    fn finish(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = Command::new("kill")
                .args(["-INT", &child.id().to_string()])
                .status();
            let gone =
                super::wait_until(Duration::from_secs(20), Duration::from_millis(50), || {
                    child.try_wait().ok().flatten().is_some()
                });
            if !gone {
                let _ = child.kill();
            }
            let _ = child.wait();
        }
    }
}

impl Drop for ConnCapture {
    fn drop(&mut self) {
        self.finish();
    }
}

/// The connections to `port` in a classic pcap file (Ethernet or Linux cooked framing, IPv4).
fn parse(data: &[u8], port: u16) -> io::Result<Vec<Conn>> {
    let bad = |what: &str| io::Error::new(io::ErrorKind::InvalidData, what.to_string());
    if data.len() < 24 {
        return Err(bad("no pcap header"));
    }
    let le = match &data[..4] {
        [0xd4, 0xc3, 0xb2, 0xa1] | [0x4d, 0x3c, 0xb2, 0xa1] => true,
        [0xa1, 0xb2, 0xc3, 0xd4] | [0xa1, 0xb2, 0x3c, 0x4d] => false,
        _ => return Err(bad("not a classic pcap file")),
    };
    let u32_at = |b: &[u8], at: usize| {
        let w: [u8; 4] = b[at..at + 4].try_into().unwrap();
        if le {
            u32::from_le_bytes(w)
        } else {
            u32::from_be_bytes(w)
        }
    };
    let link_header = match u32_at(data, 20) {
        1 => 14,   // Ethernet (what Linux's lo gives)
        113 => 16, // Linux cooked v1
        276 => 20, // Linux cooked v2
        other => return Err(bad(&format!("link type {other}"))),
    };
    let be16 = |b: &[u8], at: usize| u16::from_be_bytes([b[at], b[at + 1]]);
    let mut conns: Vec<Conn> = Vec::new();
    // client port -> index in `conns` of its latest connection
    let mut open: std::collections::HashMap<u16, usize> = Default::default();
    let mut at = 24;
    while at + 16 <= data.len() {
        let caplen = u32_at(data, at + 8) as usize;
        let pkt = &data[(at + 16).min(data.len())..(at + 16 + caplen).min(data.len())];
        at += 16 + caplen;
        let Some(ip) = pkt.get(link_header..) else {
            continue;
        };
        if ip.len() < 20 || ip[0] >> 4 != 4 || ip[9] != 6 {
            continue;
        }
        let ihl = usize::from(ip[0] & 0x0f) * 4;
        let ip_total = usize::from(be16(ip, 2));
        let Some(tcp) = ip.get(ihl..) else { continue };
        if tcp.len() < 20 || be16(tcp, 2) != port {
            continue;
        }
        let sport = be16(tcp, 0);
        let thl = usize::from(tcp[12] >> 4) * 4;
        let (syn, ack) = (tcp[13] & 0x02 != 0, tcp[13] & 0x10 != 0);
        if syn && !ack {
            if open
                .get(&sport)
                .is_some_and(|&i| conns[i].first == FirstRecord::Nothing)
            {
                continue; // a retransmitted SYN of the same connection
            }
            open.insert(sport, conns.len());
            conns.push(Conn {
                client_port: sport,
                first: FirstRecord::Nothing,
            });
            continue;
        }
        let payload_len = ip_total.saturating_sub(ihl + thl);
        let Some(&i) = open.get(&sport) else { continue };
        if payload_len == 0 || conns[i].first != FirstRecord::Nothing {
            continue;
        }
        conns[i].first = classify(tcp.get(thl..).unwrap_or_default());
    }
    Ok(conns)
}

/// What the first bytes of a connection are: the AUTH_TLS probe, a plaintext call, or neither.
pub fn classify(b: &[u8]) -> FirstRecord {
    let word = |i: usize| {
        b.get(i * 4..i * 4 + 4)
            .map(|w| u32::from_be_bytes(w.try_into().unwrap()))
    };
    // record mark, xid, msg_type CALL (0), rpcvers 2, prog, vers, proc, cred flavor
    match (word(2), word(3), word(4), word(5), word(7)) {
        (Some(0), Some(2), Some(program), Some(version), Some(flavor)) => {
            if flavor == 7 && word(0) == Some(0x8000_0028) && word(6) == Some(0) {
                FirstRecord::TlsProbe
            } else {
                FirstRecord::PlainCall { program, version }
            }
        }
        _ => FirstRecord::Other(b.iter().take(32).copied().collect()),
    }
}
