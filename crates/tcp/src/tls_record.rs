//! The TLS 1.3 record layer (RFC 8446 §5) of a connection whose handshake rustls made: records
//! sealed into and opened inside buffers the caller owns, and the few messages that may follow
//! a handshake (KeyUpdate, NewSessionTicket, alerts). No I/O: [`crate::tls`] drives it with
//! the socket.
//!
//! ```text
//!  send:    plaintext iovec ──copy──► out: [hdr | plaintext ‖ type | tag] [hdr | … ] …  (sealed in place)
//!  receive: socket ──► ciphertext buffer [hdr | body] [hdr | body] … ──open in place──►
//!           ranges of application data inside that same buffer (no copy)
//! ```
//!
//! # Why not rustls's own record layer
//! rustls (0.23) copies every record it receives twice on its way out (into its plaintext
//! queue, then into the reader's buffer), its unbuffered API included, and encrypts each record
//! it sends into a fresh allocation. Its kernel connection API
//! (`dangerous_into_kernel_connection`, made for kernel TLS) hands over the traffic secrets
//! after the handshake and keeps what only rustls can do: derive the next secrets at a
//! KeyUpdate, and take a client's session tickets ([`Kernel`]). The rest is this module: the
//! AEAD is ring's, the same code rustls itself calls.
//!
//! # Records (§5.2)
//! Every record after the handshake is `application_data` (23), legacy version 0x0303, a
//! body of the sealed `plaintext ‖ content type ‖ zero padding` and a 16-byte tag; the header
//! is the additional data, the nonce the traffic IV XOR the record's sequence number. Records
//! sent carry at most 16 KiB of plaintext and no padding. A record received that is longer than
//! 2^14 + 256 bytes, does not open, or has no content type closes the connection.
//!
//! # Messages after the handshake
//! - **KeyUpdate** (§4.6.3): received, the receiving key moves on at once (a KeyUpdate must end
//!   its record); if the peer asked for ours, ours goes out before the next data record (the
//!   RFC's own deadline), which is why the reader only marks it owed ([`Shared`]) and the
//!   writer sends it. We send one ourselves before a key reaches its cipher suite's
//!   confidentiality limit (2^23 records for AES-128-GCM, 128 GiB of data).
//! - **NewSessionTicket** (§4.6.1): a client stores it through rustls (resumption); a server
//!   receiving one closes the connection.
//! - **Alerts** (§6): `close_notify` ends the stream, `user_canceled` is ignored, every other
//!   alert closes the connection with its number in the error.
//!
//! Handshake messages may span records and several may share one; they must not interleave
//! with other record types (§5.1). Anything else (another handshake message, a record type
//! other than the three) closes the connection.

use ring::aead::{self, Aad, LessSafeKey, Nonce, UnboundKey};
use rustls::client::ClientConnectionData;
use rustls::kernel::KernelConnection;
use rustls::server::ServerConnectionData;
use rustls::{ConnectionTrafficSecrets, SupportedCipherSuite};
use std::io::{self, IoSlice};
use std::ops::Range;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

/// Type, legacy version (2), length (2).
pub(crate) const RECORD_HEADER_BYTES: usize = 5;
/// The most plaintext one record carries (§5.1: 2^14).
pub(crate) const RECORD_PLAINTEXT_BYTES_MAX: usize = 16 * 1024;
/// The longest body a record may have: plaintext, content type, padding and tag (§5.2).
const RECORD_BODY_BYTES_MAX: usize = RECORD_PLAINTEXT_BYTES_MAX + 256;
/// A whole record of the longest kind, header included: room a reader keeps free.
pub(crate) const RECORD_BYTES_MAX: usize = RECORD_HEADER_BYTES + RECORD_BODY_BYTES_MAX;
/// The tag of each of TLS 1.3's AEADs (AES-GCM, ChaCha20-Poly1305).
const TAG_BYTES: usize = 16;
/// What a sent record adds to its plaintext: header, content type, tag.
pub(crate) const RECORD_OVERHEAD_BYTES: usize = RECORD_HEADER_BYTES + 1 + TAG_BYTES;

/// Record content types (§5.1).
const ALERT: u8 = 21;
const HANDSHAKE: u8 = 22;
const APPLICATION_DATA: u8 = 23;
/// Handshake message types (§4).
const NEW_SESSION_TICKET: u8 = 4;
const KEY_UPDATE: u8 = 24;
/// Alert descriptions (§6).
const CLOSE_NOTIFY: u8 = 0;
const USER_CANCELED: u8 = 90;
/// A KeyUpdate's `request_update` (§4.6.3).
const UPDATE_NOT_REQUESTED: u8 = 0;
const UPDATE_REQUESTED: u8 = 1;

/// The most handshake bytes held while a message is incomplete. The only messages allowed
/// here are a KeyUpdate (5 bytes) and a NewSessionTicket (a few hundred); 64 KiB is far past
/// both and bounds what a peer can make us hold.
const HANDSHAKE_PENDING_BYTES_MAX: usize = 64 * 1024;
/// Records sent with one key short of its confidentiality limit at which we move on to the
/// next: far more than any one write seals, so the limit is never reached.
const KEY_UPDATE_MARGIN_RECORDS: u64 = 1 << 16;

fn bad(what: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("TLS: {}", what.into()))
}

fn rustls_error(e: rustls::Error) -> io::Error {
    bad(e.to_string())
}

/// One direction's key and IV.
struct Key {
    key: LessSafeKey,
    iv: [u8; 12],
}

impl Key {
    fn new(secrets: &ConnectionTrafficSecrets) -> io::Result<Key> {
        let (alg, key, iv) = match secrets {
            ConnectionTrafficSecrets::Aes128Gcm { key, iv } => (&aead::AES_128_GCM, key, iv),
            ConnectionTrafficSecrets::Aes256Gcm { key, iv } => (&aead::AES_256_GCM, key, iv),
            ConnectionTrafficSecrets::Chacha20Poly1305 { key, iv } => {
                (&aead::CHACHA20_POLY1305, key, iv)
            }
            _ => return Err(bad("a cipher suite this record layer does not have")),
        };
        let iv: [u8; 12] = iv
            .as_ref()
            .try_into()
            .map_err(|_| bad("an IV that is not 12 bytes"))?;
        let key = UnboundKey::new(alg, key.as_ref()).map_err(|_| bad("a key of the wrong size"))?;
        Ok(Key {
            key: LessSafeKey::new(key),
            iv,
        })
    }

    /// §5.3: the sequence number, big-endian and left-padded, XOR the IV.
    fn nonce(&self, seq: u64) -> Nonce {
        let mut n = self.iv;
        for (b, s) in n[4..].iter_mut().zip(seq.to_be_bytes()) {
            *b ^= s;
        }
        Nonce::assume_unique_for_key(n)
    }
}

fn header(body_bytes: usize) -> [u8; RECORD_HEADER_BYTES] {
    let len = (body_bytes as u16).to_be_bytes();
    [APPLICATION_DATA, 3, 3, len[0], len[1]]
}

/// Seals records with one key, numbering them.
struct Sealer {
    key: Key,
    seq: u64,
}

impl Sealer {
    /// Appends one record carrying `plain` (at most [`RECORD_PLAINTEXT_BYTES_MAX`]) as
    /// content type `typ`, copied in from `parts`.
    fn seal<'a>(
        &mut self,
        typ: u8,
        plain_bytes: usize,
        parts: impl Iterator<Item = &'a [u8]>,
        out: &mut Vec<u8>,
    ) -> io::Result<()> {
        debug_assert!(plain_bytes <= RECORD_PLAINTEXT_BYTES_MAX);
        let head = header(plain_bytes + 1 + TAG_BYTES);
        out.extend_from_slice(&head);
        let body_at = out.len();
        for p in parts {
            out.extend_from_slice(p);
        }
        debug_assert_eq!(out.len() - body_at, plain_bytes);
        out.push(typ);
        let seq = self.seq;
        self.seq = seq
            .checked_add(1)
            .ok_or_else(|| bad("record sequence numbers exhausted"))?;
        let tag = self
            .key
            .key
            .seal_in_place_separate_tag(self.key.nonce(seq), Aad::from(head), &mut out[body_at..])
            .map_err(|_| bad("sealing a record failed"))?;
        out.extend_from_slice(tag.as_ref());
        Ok(())
    }
}

/// Opens records with one key, numbering them.
struct Opener {
    key: Key,
    seq: u64,
}

/// A record opened in place.
#[derive(Debug, PartialEq, Eq)]
struct Opened {
    typ: u8,
    /// Where its plaintext is, in the buffer given to [`Opener::open`].
    plaintext: Range<usize>,
    /// The record's length on the wire, header included.
    record_bytes: usize,
}

impl Opener {
    /// Decrypts the record at the front of `buf` in place; `None` while it is not whole.
    fn open(&mut self, buf: &mut [u8]) -> io::Result<Option<Opened>> {
        let Some(head) = buf.first_chunk::<RECORD_HEADER_BYTES>().copied() else {
            return Ok(None);
        };
        if head[0] != APPLICATION_DATA {
            return Err(bad(format!(
                "an unprotected record (type {}) after the handshake",
                head[0]
            )));
        }
        let body_bytes = u16::from_be_bytes([head[3], head[4]]) as usize;
        if body_bytes > RECORD_BODY_BYTES_MAX {
            return Err(bad(format!(
                "a record of {body_bytes} bytes (record_overflow)"
            )));
        }
        if body_bytes < 1 + TAG_BYTES {
            return Err(bad(format!("a record of {body_bytes} bytes, too short")));
        }
        let record_bytes = RECORD_HEADER_BYTES + body_bytes;
        let Some(body) = buf.get_mut(RECORD_HEADER_BYTES..record_bytes) else {
            return Ok(None);
        };
        let seq = self.seq;
        self.seq = seq
            .checked_add(1)
            .ok_or_else(|| bad("record sequence numbers exhausted"))?;
        let plain = self
            .key
            .key
            .open_in_place(self.key.nonce(seq), Aad::from(head), body)
            .map_err(|_| bad("a record that does not decrypt (bad_record_mac)"))?;
        // §5.4: zero padding after the content type, which is the last byte not zero.
        let Some(typ_at) = plain.iter().rposition(|&b| b != 0) else {
            return Err(bad("a record without a content type"));
        };
        if typ_at > RECORD_PLAINTEXT_BYTES_MAX {
            return Err(bad("a record with more than 16 KiB of plaintext"));
        }
        Ok(Some(Opened {
            typ: plain[typ_at],
            plaintext: RECORD_HEADER_BYTES..RECORD_HEADER_BYTES + typ_at,
            record_bytes,
        }))
    }
}

/// What rustls keeps of a connection after the handshake: the key schedule.
pub(crate) enum Kernel {
    Server(KernelConnection<ServerConnectionData>),
    Client(KernelConnection<ClientConnectionData>),
}

impl Kernel {
    fn next_tx(&mut self) -> Result<(u64, ConnectionTrafficSecrets), rustls::Error> {
        match self {
            Kernel::Server(k) => k.update_tx_secret(),
            Kernel::Client(k) => k.update_tx_secret(),
        }
    }

    fn next_rx(&mut self) -> Result<(u64, ConnectionTrafficSecrets), rustls::Error> {
        match self {
            Kernel::Server(k) => k.update_rx_secret(),
            Kernel::Client(k) => k.update_rx_secret(),
        }
    }

    fn suite(&self) -> SupportedCipherSuite {
        match self {
            Kernel::Server(k) => k.negotiated_cipher_suite(),
            Kernel::Client(k) => k.negotiated_cipher_suite(),
        }
    }

    fn new_session_ticket(&mut self, body: &[u8]) -> io::Result<()> {
        match self {
            Kernel::Client(k) => k.handle_new_session_ticket(body).map_err(rustls_error),
            Kernel::Server(_) => Err(bad("the client sent a NewSessionTicket")),
        }
    }
}

/// What the two directions of one connection share.
pub(crate) struct Shared {
    kernel: Mutex<Kernel>,
    /// The peer asked for our KeyUpdate: it goes out before our next data record.
    key_update_owed: AtomicBool,
}

impl Shared {
    fn kernel(&self) -> std::sync::MutexGuard<'_, Kernel> {
        self.kernel.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Both directions of a connection, from the secrets rustls extracted after the handshake.
pub(crate) fn record_layer(
    secrets: rustls::ExtractedSecrets,
    kernel: Kernel,
) -> io::Result<(Receiver, Sender)> {
    let records_per_key_max = match kernel.suite() {
        SupportedCipherSuite::Tls13(s) => s.common.confidentiality_limit,
        #[allow(unreachable_patterns)] // with TLS 1.2 compiled in
        _ => return Err(bad("not TLS 1.3")),
    };
    let shared = Arc::new(Shared {
        kernel: Mutex::new(kernel),
        key_update_owed: AtomicBool::new(false),
    });
    let (tx_seq, tx) = secrets.tx;
    let (rx_seq, rx) = secrets.rx;
    let receiver = Receiver {
        opener: Opener {
            key: Key::new(&rx)?,
            seq: rx_seq,
        },
        handshake: Vec::new(),
        shared: shared.clone(),
    };
    let sender = Sender {
        sealer: Sealer {
            key: Key::new(&tx)?,
            seq: tx_seq,
        },
        shared,
        key_update_at: records_per_key_max.saturating_sub(KEY_UPDATE_MARGIN_RECORDS),
    };
    Ok((receiver, sender))
}

/// The receiving direction.
pub(crate) struct Receiver {
    opener: Opener,
    /// Handshake bytes of a message not yet whole.
    handshake: Vec<u8>,
    shared: Arc<Shared>,
}

/// What [`Receiver::open_records`] did.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Received {
    /// Bytes of whole records at the front of the buffer, now opened: the caller drops them
    /// once it has taken the data out.
    pub consumed: usize,
    /// The peer sent `close_notify`: nothing follows.
    pub end: bool,
}

impl Receiver {
    /// Opens the whole records at the front of `buf` in place and appends where their
    /// application data is to `data` (ranges in `buf`, in order, empty ones left out). Stops
    /// before a record that is not whole, and after `close_notify`.
    pub fn open_records(
        &mut self,
        buf: &mut [u8],
        data: &mut Vec<Range<usize>>,
    ) -> io::Result<Received> {
        let mut at = 0;
        loop {
            let Some(o) = self.opener.open(&mut buf[at..])? else {
                return Ok(Received {
                    consumed: at,
                    end: false,
                });
            };
            let plain = at + o.plaintext.start..at + o.plaintext.end;
            at += o.record_bytes;
            if o.typ != HANDSHAKE && !self.handshake.is_empty() {
                return Err(bad("a handshake message interleaved with other records"));
            }
            match o.typ {
                APPLICATION_DATA => {
                    if !plain.is_empty() {
                        data.push(plain);
                    }
                }
                ALERT => {
                    if alert(&buf[plain])? {
                        return Ok(Received {
                            consumed: at,
                            end: true,
                        });
                    }
                }
                HANDSHAKE => {
                    if plain.is_empty() {
                        return Err(bad("an empty handshake record"));
                    }
                    if self.handshake.len() + plain.len() > HANDSHAKE_PENDING_BYTES_MAX {
                        return Err(bad("a handshake message too long after the handshake"));
                    }
                    self.handshake.extend_from_slice(&buf[plain]);
                    self.handshake_messages()?;
                }
                t => return Err(bad(format!("a record of content type {t}"))),
            }
        }
    }

    /// Acts on the whole messages in `self.handshake` (all of one record's just appended).
    fn handshake_messages(&mut self) -> io::Result<()> {
        let mut at = 0;
        while let Some(&[typ, a, b, c]) = self.handshake[at..].first_chunk::<4>() {
            let len = u32::from_be_bytes([0, a, b, c]) as usize;
            let Some(body) = self.handshake.get(at + 4..at + 4 + len) else {
                break;
            };
            at += 4 + len;
            match typ {
                KEY_UPDATE => {
                    let request = match body {
                        [r @ (UPDATE_NOT_REQUESTED | UPDATE_REQUESTED)] => *r,
                        _ => return Err(bad("a malformed KeyUpdate")),
                    };
                    if at != self.handshake.len() {
                        return Err(bad("a KeyUpdate not at the end of its record"));
                    }
                    let (seq, secrets) = self.shared.kernel().next_rx().map_err(rustls_error)?;
                    self.opener = Opener {
                        key: Key::new(&secrets)?,
                        seq,
                    };
                    if request == UPDATE_REQUESTED {
                        self.shared.key_update_owed.store(true, Relaxed);
                    }
                }
                NEW_SESSION_TICKET => self.shared.kernel().new_session_ticket(body)?,
                t => return Err(bad(format!("handshake message {t} after the handshake"))),
            }
        }
        self.handshake.drain(..at);
        Ok(())
    }
}

/// An alert's meaning: `Ok(true)` for `close_notify`, `Ok(false)` for one to ignore.
fn alert(body: &[u8]) -> io::Result<bool> {
    match body {
        [_, CLOSE_NOTIFY] => Ok(true),
        [_, USER_CANCELED] => Ok(false),
        [level, what] => Err(io::Error::new(
            io::ErrorKind::ConnectionAborted,
            format!("TLS: the peer sent alert {what} (level {level})"),
        )),
        _ => Err(bad("a malformed alert")),
    }
}

/// The bytes of `bufs` from `skip` bytes into them, as non-empty slices.
fn skipped<'a>(bufs: &'a [IoSlice<'a>], skip: usize) -> impl Iterator<Item = &'a [u8]> {
    let mut to_skip = skip;
    bufs.iter()
        .map(move |b| {
            let b: &[u8] = b;
            let s = to_skip.min(b.len());
            to_skip -= s;
            &b[s..]
        })
        .filter(|b| !b.is_empty())
}

/// The sending direction.
pub(crate) struct Sender {
    sealer: Sealer,
    shared: Arc<Shared>,
    /// The sequence number at which our key moves on (see the module docs).
    key_update_at: u64,
}

impl Sender {
    /// Seals up to `bytes_max` bytes of `bufs`, from `skip` bytes into them, as application
    /// data, appending the records to `out`; returns how many bytes it took. A KeyUpdate that
    /// is due goes first.
    pub fn seal(
        &mut self,
        bufs: &[IoSlice<'_>],
        skip: usize,
        bytes_max: usize,
        out: &mut Vec<u8>,
    ) -> io::Result<usize> {
        let total = bufs
            .iter()
            .map(|b| b.len())
            .sum::<usize>()
            .saturating_sub(skip)
            .min(bytes_max);
        if total == 0 {
            return Ok(0);
        }
        if self.shared.key_update_owed.swap(false, Relaxed) {
            self.key_update(out)?;
        }
        let records = total.div_ceil(RECORD_PLAINTEXT_BYTES_MAX);
        out.reserve(total + records * RECORD_OVERHEAD_BYTES);
        let mut slices = skipped(bufs, skip);
        let mut current: &[u8] = &[];
        let mut taken = 0;
        while taken < total {
            if self.sealer.seq >= self.key_update_at {
                self.key_update(out)?;
            }
            let n = (total - taken).min(RECORD_PLAINTEXT_BYTES_MAX);
            // The record's plaintext: the rest of the current slice, then the next ones.
            let mut parts: [&[u8]; 8] = [&[]; 8];
            let mut parts_used = 0;
            let mut need = n;
            while need > 0 {
                if current.is_empty() {
                    current = slices
                        .next()
                        .expect("total counts only bytes that are there");
                }
                if parts_used == parts.len() {
                    // Many tiny slices in one record: seal what is gathered so far.
                    break;
                }
                let take = need.min(current.len());
                parts[parts_used] = &current[..take];
                parts_used += 1;
                current = &current[take..];
                need -= take;
            }
            let sealed = n - need;
            self.sealer.seal(
                APPLICATION_DATA,
                sealed,
                parts[..parts_used].iter().copied(),
                out,
            )?;
            taken += sealed;
        }
        Ok(taken)
    }

    /// Moves our key on after every `records` records from now on (tests of KeyUpdate).
    #[cfg(test)]
    pub fn key_update_every(&mut self, records: u64) {
        self.key_update_at = records;
    }

    /// Appends a `close_notify` alert (§6.1).
    pub fn close_notify(&mut self, out: &mut Vec<u8>) -> io::Result<()> {
        const WARNING: u8 = 1;
        self.sealer
            .seal(ALERT, 2, [&[WARNING, CLOSE_NOTIFY][..]].into_iter(), out)
    }

    /// Our KeyUpdate under the old key, then the new key (§4.6.3).
    fn key_update(&mut self, out: &mut Vec<u8>) -> io::Result<()> {
        let msg = [KEY_UPDATE, 0, 0, 1, UPDATE_NOT_REQUESTED];
        self.sealer
            .seal(HANDSHAKE, msg.len(), [&msg[..]].into_iter(), out)?;
        let (seq, secrets) = self.shared.kernel().next_tx().map_err(rustls_error)?;
        self.sealer = Sealer {
            key: Key::new(&secrets)?,
            seq,
        };
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::crypto::cipher::{AeadKey, Iv};

    fn secrets(k: u8) -> ConnectionTrafficSecrets {
        ConnectionTrafficSecrets::Aes256Gcm {
            key: AeadKey::from([k; 32]),
            iv: Iv::from([k; 12]),
        }
    }

    fn pair(k: u8) -> (Sealer, Opener) {
        let s = Sealer {
            key: Key::new(&secrets(k)).unwrap(),
            seq: 7,
        };
        let o = Opener {
            key: Key::new(&secrets(k)).unwrap(),
            seq: 7,
        };
        (s, o)
    }

    #[test]
    fn a_sealed_record_opens_in_place() {
        let (mut s, mut o) = pair(1);
        let mut out = Vec::new();
        s.seal(
            APPLICATION_DATA,
            11,
            [&b"hello "[..], b"world"].into_iter(),
            &mut out,
        )
        .unwrap();
        assert_eq!(out.len(), 11 + RECORD_OVERHEAD_BYTES);
        assert_eq!(&out[..3], &[23, 3, 3]);
        // Not whole: nothing yet, nothing consumed.
        assert_eq!(o.open(&mut out[..20].to_vec()).unwrap(), None);
        let got = o.open(&mut out).unwrap().unwrap();
        assert_eq!(got.typ, APPLICATION_DATA);
        assert_eq!(&out[got.plaintext], b"hello world");
        assert_eq!(got.record_bytes, 11 + RECORD_OVERHEAD_BYTES);
        assert_eq!((s.seq, o.seq), (8, 8));
    }

    #[test]
    fn a_tampered_record_or_a_wrong_sequence_number_does_not_open() {
        let (mut s, mut o) = pair(2);
        let mut out = Vec::new();
        s.seal(APPLICATION_DATA, 3, [&b"abc"[..]].into_iter(), &mut out)
            .unwrap();
        let mut bad_byte = out.clone();
        bad_byte[7] ^= 1;
        assert!(o.open(&mut bad_byte).is_err());
        let (_, mut later) = pair(2);
        later.seq = 8;
        assert!(later.open(&mut out.clone()).is_err());
        let (_, mut right) = pair(2);
        assert!(right.open(&mut out).unwrap().is_some());
    }

    #[test]
    fn oversized_short_and_unprotected_records_are_refused() {
        let (_, mut o) = pair(3);
        let too_long = (RECORD_BODY_BYTES_MAX + 1) as u16;
        let mut r = vec![23, 3, 3, (too_long >> 8) as u8, too_long as u8];
        assert!(o
            .open(&mut r)
            .unwrap_err()
            .to_string()
            .contains("record_overflow"));
        assert!(o.open(&mut [23, 3, 3, 0, 5, 0, 0, 0, 0, 0]).is_err());
        assert!(o.open(&mut [22, 3, 3, 0, 1, 0]).is_err());
    }

    #[test]
    fn padding_is_stripped_and_the_content_type_found() {
        let (mut s, mut o) = pair(4);
        let mut out = Vec::new();
        // "abc", type 23, three bytes of zero padding: sealed as one plaintext of 7 bytes.
        s.seal(0, 6, [&b"abc\x17\0\0"[..]].into_iter(), &mut out)
            .unwrap();
        let got = o.open(&mut out).unwrap().unwrap();
        assert_eq!(got.typ, 23);
        assert_eq!(&out[got.plaintext], b"abc");
    }

    #[test]
    fn skipping_into_an_iovec() {
        let (a, b, c) = (&b"abc"[..], &b""[..], &b"defg"[..]);
        let bufs = [IoSlice::new(a), IoSlice::new(b), IoSlice::new(c)];
        let got = |skip| skipped(&bufs, skip).collect::<Vec<&[u8]>>();
        assert_eq!(got(0), [&b"abc"[..], b"defg"]);
        assert_eq!(got(2), [&b"c"[..], b"defg"]);
        assert_eq!(got(3), [&b"defg"[..]]);
        assert_eq!(got(5), [&b"fg"[..]]);
        assert!(got(7).is_empty());
        assert!(got(9).is_empty());
    }

    #[test]
    fn alerts() {
        assert!(alert(&[1, CLOSE_NOTIFY]).unwrap());
        assert!(!alert(&[1, USER_CANCELED]).unwrap());
        assert!(alert(&[2, 20])
            .unwrap_err()
            .to_string()
            .contains("alert 20"));
        assert!(alert(&[1]).is_err());
    }
}
