//! Export options and the `/etc/exports` syntax. Pure: text in, values out.
//!
//! # Syntax (a subset of exports(5))
//! ```text
//! # comment                                   (also after an entry)
//! /srv/data   127.0.0.1/8(rw,no_root_squash) 10.0.0.0/255.0.0.0(rw) *(ro)
//! "/srv/with space"  -rw,all_squash  192.168.1.7  ::1/128(ro)
//! /srv/long \
//!     *(rw,io=direct)                         (a trailing backslash continues the line)
//! ```
//! Each line names a path, optionally quoted (and `\040`-style octal escapes as exportfs writes
//! them), then an optional `-opts` token with defaults for the rest of the line, then client
//! specifications, each optionally followed by `(options)` with no space in between. A client is
//! `*` (anyone), an IPv4 or IPv6 address, or a network as `addr/prefix_len` or `addr/netmask`.
//! Host names, wildcards and `@netgroups` need name resolution and are refused. A line with no
//! client exports to `*`. A bare `(opts)` is read as `*(opts)`, as exportfs does (with a
//! warning).
//!
//! # Which client rule applies
//! As in exports(5): a single host beats a network, which beats `*`; among rules of one kind the
//! first on the line wins. IPv4-mapped IPv6 addresses (`::ffff:a.b.c.d`, as seen on dual-stack
//! sockets) match IPv4 rules.
//!
//! # Options
//! | option | meaning | default |
//! |---|---|---|
//! | `rw` / `ro` | writable or read-only (`FsError::RoFs` for modifying procedures) | `ro` |
//! | `root_squash` / `no_root_squash` | map uid 0 and gid 0 to the anonymous ids | `root_squash` |
//! | `all_squash` / `no_all_squash` | map every caller to the anonymous ids | `no_all_squash` |
//! | `anonuid=N` / `anongid=N` | the anonymous ids | 65534 |
//! | `sync` / `async` | whether unstable writes may be acknowledged as stable (stored) | `sync` |
//! | `secure` / `insecure` | require a source port below 1024 (stored for the RPC layer) | `secure` |
//! | `fsid=N` | the export id in file handles and `fsid` in attributes | derived from path |
//! | `io=buffered\|dontcache\|direct` | the data path for READ and WRITE | `buffered` |
//! | `io_read=MODE`, `io_write=MODE` | the same for one direction (knfsd's `io_cache_read` / `io_cache_write`); after `io=` on the line, they override it | `io`'s |
//! | `sec=sys` | only AUTH_SYS is supported | `sys` |
//! | `xprtsec=LIST` | the transport security a client may use: a `:`-separated list of `none`, `tls`, `mtls` ([`XprtsecPolicy`], enforced by [`crate::gate`]) | `none:tls:mtls` |
//!
//! `subtree_check`, `no_subtree_check`, `wdelay`, `no_wdelay`, `hide`, `nohide`, `crossmnt`,
//! `acl`, `no_acl`, `secure_locks`, `insecure_locks`, `auth_nlm`, `no_auth_nlm` are accepted and
//! have no effect (sluice always confines handles to the export; nested mounts are not exported).
//! Any other option is an error, so a typo never silently weakens an export.

use super::creds::Cred;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::PathBuf;

/// The uid/gid squashed callers get by default (`nobody`/`nogroup` on Debian).
pub const ANON_ID_DEFAULT: u32 = 65534;

/// How caller ids are mapped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Squash {
    /// Ids are used as sent (`no_root_squash`).
    None,
    /// uid 0 and gid 0 become the anonymous ids (`root_squash`).
    #[default]
    Root,
    /// Every caller becomes the anonymous ids (`all_squash`).
    All,
}

/// How READ and WRITE reach the disk (`io=` in exports, `--io`); see `backend/iomode.rs`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum IoMode {
    /// Through the page cache.
    #[default]
    Buffered,
    /// Through the page cache, dropping pages once written back (RWF_DONTCACHE).
    DontCache,
    /// O_DIRECT where the request is aligned.
    Direct,
}

impl IoMode {
    /// Parses `buffered`, `dontcache` or `direct`.
    pub fn parse(s: &str) -> Option<IoMode> {
        match s {
            "buffered" => Some(IoMode::Buffered),
            "dontcache" => Some(IoMode::DontCache),
            "direct" => Some(IoMode::Direct),
            _ => None,
        }
    }
}

/// The cache mode of each direction (`io=`, `io_read=`, `io_write=`). Reads and writes may differ,
/// as knfsd's `io_cache_read` and `io_cache_write` may: `io_write=direct` with buffered reads
/// keeps the kernel's copy into the page cache off the WRITE path while READs still hit the cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct IoModes {
    pub read: IoMode,
    pub write: IoMode,
}

impl IoModes {
    /// The same mode both ways (`io=MODE`).
    pub fn both(mode: IoMode) -> IoModes {
        IoModes {
            read: mode,
            write: mode,
        }
    }

    /// Whether either direction uses O_DIRECT (files then hold a second descriptor).
    pub fn uses_direct(&self) -> bool {
        self.read == IoMode::Direct || self.write == IoMode::Direct
    }
}

/// The options one client gets for one export.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportOptions {
    pub read_only: bool,
    pub squash: Squash,
    pub anonuid: u32,
    pub anongid: u32,
    /// `sync` (true): WRITE may only be answered as stable once it is. `async` is stored.
    pub sync: bool,
    /// `secure` (true): requests must come from a privileged source port.
    pub secure: bool,
    /// `fsid=N`: overrides the export id derived from the path.
    pub fsid: Option<u32>,
    pub io: IoModes,
    /// `xprtsec=`: the transport security modes a client may reach this export with.
    pub xprtsec: XprtsecPolicy,
}

impl Default for ExportOptions {
    /// exportfs's defaults: `ro,root_squash,sync,secure`.
    fn default() -> Self {
        ExportOptions {
            read_only: true,
            squash: Squash::Root,
            anonuid: ANON_ID_DEFAULT,
            anongid: ANON_ID_DEFAULT,
            sync: true,
            secure: true,
            fsid: None,
            io: IoModes::both(IoMode::Buffered),
            xprtsec: XprtsecPolicy::ANY,
        }
    }
}

/// The transport security of one connection (RFC 9289), in the words of exports(5)'s
/// `xprtsec=`. Each connection is exactly one of them: the modes do not nest (knfsd's
/// `check_xprtsec_policy` tests them as disjoint: `tls` is a TLS session *without* a verified
/// client certificate), so an export for both kinds of TLS client lists both, `tls:mtls`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Xprtsec {
    /// Plain TCP or UDP.
    None,
    /// RPC-with-TLS, the client presented no certificate (RFC 9289 §4.2, "server-only host
    /// authentication").
    Tls,
    /// RPC-with-TLS with a client certificate verified against the server's client CA
    /// (§4.2, "mutual host authentication"). A certificate that does not verify never gets
    /// this far: the handshake fails (§4.2: the peers MUST reject the association).
    Mtls,
}

impl Xprtsec {
    /// Every mode, in the order exports(5) lists them.
    pub const ALL: [Xprtsec; 3] = [Xprtsec::None, Xprtsec::Tls, Xprtsec::Mtls];

    /// `none`, `tls` or `mtls`.
    pub fn parse(s: &str) -> Option<Xprtsec> {
        match s {
            "none" => Some(Xprtsec::None),
            "tls" => Some(Xprtsec::Tls),
            "mtls" => Some(Xprtsec::Mtls),
            _ => None,
        }
    }

    /// The option's word for the mode.
    pub fn name(self) -> &'static str {
        match self {
            Xprtsec::None => "none",
            Xprtsec::Tls => "tls",
            Xprtsec::Mtls => "mtls",
        }
    }

    fn bit(self) -> u8 {
        match self {
            Xprtsec::None => 1,
            Xprtsec::Tls => 2,
            Xprtsec::Mtls => 4,
        }
    }
}

/// The transport security modes an export admits (`xprtsec=none:tls:mtls`, knfsd's spelling):
/// a set of [`Xprtsec`], never empty. Parsed by [`XprtsecPolicy::parse`], shown by `Display`
/// in the same spelling.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct XprtsecPolicy {
    bits: u8,
}

impl XprtsecPolicy {
    /// Any mode (`none:tls:mtls`): the default, as in exports(5).
    pub const ANY: XprtsecPolicy = XprtsecPolicy { bits: 7 };

    /// Exactly the modes listed (an empty list is `None`).
    pub fn of(modes: &[Xprtsec]) -> Option<XprtsecPolicy> {
        let bits = modes.iter().fold(0, |b, m| b | m.bit());
        (bits != 0).then_some(XprtsecPolicy { bits })
    }

    /// A `:`-separated list of `none`, `tls`, `mtls` (repeats are harmless, order is not
    /// kept); an empty list or an unknown word is an error naming it.
    pub fn parse(list: &str) -> Result<XprtsecPolicy, String> {
        let mut modes = Vec::new();
        for word in list.split(':') {
            let mode = Xprtsec::parse(word).ok_or_else(|| {
                format!(
                    "xprtsec={list}: {word:?} is not a mode (none, tls or mtls, separated by ':')"
                )
            })?;
            modes.push(mode);
        }
        XprtsecPolicy::of(&modes).ok_or_else(|| format!("xprtsec={list}: no mode"))
    }

    /// Whether a connection of `mode` may use the export.
    pub fn allows(self, mode: Xprtsec) -> bool {
        self.bits & mode.bit() != 0
    }

    /// Why no client could ever use an export with this policy on a server with (`tls`) or
    /// without TLS, and with (`client_ca`) or without a client CA to verify certificates:
    /// `None` when some connection can reach it. `sluice serve` refuses to start on `Some`.
    pub fn unreachable(self, tls: bool, client_ca: bool) -> Option<&'static str> {
        if self.allows(Xprtsec::None) {
            return None;
        }
        if !tls {
            return Some("it admits only RPC-with-TLS clients and the server has no --tls-cert");
        }
        if !self.allows(Xprtsec::Tls) && !client_ca {
            return Some(
                "it admits only clients with a verified certificate (mtls) and the server has \
                 no --tls-client-ca to verify one",
            );
        }
        None
    }
}

impl Default for XprtsecPolicy {
    fn default() -> Self {
        XprtsecPolicy::ANY
    }
}

impl std::fmt::Display for XprtsecPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let words: Vec<&str> = Xprtsec::ALL
            .iter()
            .filter(|m| self.allows(**m))
            .map(|m| m.name())
            .collect();
        f.write_str(&words.join(":"))
    }
}

/// Who a rule is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientMatch {
    /// `*`.
    Any,
    /// One address (also `a.b.c.d/32`).
    Host(IpAddr),
    /// A network: the address with host bits cleared and the prefix length.
    Network { addr: IpAddr, prefix_len: u8 },
}

impl ClientMatch {
    pub fn matches(&self, ip: IpAddr) -> bool {
        let ip = canonical(ip);
        match *self {
            ClientMatch::Any => true,
            ClientMatch::Host(h) => canonical(h) == ip,
            ClientMatch::Network { addr, prefix_len } => match (canonical(addr), ip) {
                (IpAddr::V4(n), IpAddr::V4(a)) => {
                    let mask = prefix_mask_u32(prefix_len);
                    u32::from(n) & mask == u32::from(a) & mask
                }
                (IpAddr::V6(n), IpAddr::V6(a)) => {
                    let mask = prefix_mask_u128(prefix_len);
                    u128::from(n) & mask == u128::from(a) & mask
                }
                _ => false,
            },
        }
    }

    /// Precedence class: lower wins (host, network, anyone).
    fn rank(&self) -> u8 {
        match self {
            ClientMatch::Host(_) => 0,
            ClientMatch::Network { .. } => 1,
            ClientMatch::Any => 2,
        }
    }
}

/// One `client(options)` item of an export line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientRule {
    pub client: ClientMatch,
    pub options: ExportOptions,
}

/// One exported directory and its client rules, in the order written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Export {
    pub path: PathBuf,
    pub clients: Vec<ClientRule>,
}

impl Export {
    /// The options for a client at `ip`, or `None` if it may not use this export.
    pub fn options_for(&self, ip: IpAddr) -> Option<&ExportOptions> {
        self.clients
            .iter()
            .filter(|r| r.client.matches(ip))
            .min_by_key(|r| r.client.rank())
            .map(|r| &r.options)
    }
}

/// A line of an exports file that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("exports line {line}: {message}")]
pub struct ExportsError {
    /// 1-based number of the (first physical) line.
    pub line: usize,
    pub message: String,
}

/// Parses an exports file. Lines naming the same path are merged, rules kept in order.
pub fn parse_exports(text: &str) -> Result<Vec<Export>, ExportsError> {
    let mut exports: Vec<Export> = Vec::new();
    for (line_no, line) in logical_lines(text) {
        let err = |message: String| ExportsError {
            line: line_no,
            message,
        };
        let tokens = tokenize(&line).map_err(err)?;
        let Some((path_tok, rest)) = tokens.split_first() else {
            continue;
        };
        let export = parse_entry(path_tok, rest).map_err(err)?;
        match exports.iter_mut().find(|e| e.path == export.path) {
            Some(e) => e.clients.extend(export.clients),
            None => exports.push(export),
        }
    }
    Ok(exports)
}

/// Applies an export's squashing to a caller's credentials (exports(5) "User ID Mapping").
///
/// With `root_squash`, uid 0 becomes `anonuid`, gid 0 becomes `anongid`, and a supplementary gid 0
/// also becomes `anongid` (as knfsd does: group 0 often grants what root would have). With
/// `all_squash` everyone is `anonuid`/`anongid` with no supplementary groups.
pub fn squash(cred: &Cred, opts: &ExportOptions) -> Cred {
    match opts.squash {
        Squash::None => cred.clone(),
        Squash::All => Cred::new(opts.anonuid, opts.anongid),
        Squash::Root => Cred {
            uid: if cred.uid == 0 {
                opts.anonuid
            } else {
                cred.uid
            },
            gid: if cred.gid == 0 {
                opts.anongid
            } else {
                cred.gid
            },
            gids: cred
                .gids
                .iter()
                .map(|&g| if g == 0 { opts.anongid } else { g })
                .collect(),
        },
    }
}

// --- Parsing helpers ---

/// Joins `\`-continued lines and strips comments; yields (first line number, text).
fn logical_lines(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut start = 0;
    for (i, raw) in text.lines().enumerate() {
        if cur.is_empty() {
            start = i + 1;
        }
        let line = strip_comment(raw);
        match line.strip_suffix('\\') {
            Some(head) => {
                cur.push_str(head);
                cur.push(' ');
            }
            None => {
                cur.push_str(line);
                if !cur.trim().is_empty() {
                    out.push((start, std::mem::take(&mut cur)));
                }
                cur.clear();
            }
        }
    }
    if !cur.trim().is_empty() {
        out.push((start, cur));
    }
    out
}

/// Cuts a line at the first `#` outside double quotes; trailing blanks are removed so that a
/// continuation backslash is recognised even when followed by spaces.
fn strip_comment(line: &str) -> &str {
    let mut quoted = false;
    for (i, c) in line.char_indices() {
        match c {
            '"' => quoted = !quoted,
            '#' if !quoted => return line[..i].trim_end(),
            _ => {}
        }
    }
    line.trim_end()
}

/// Splits on whitespace; double quotes group (and are removed).
fn tokenize(line: &str) -> Result<Vec<String>, String> {
    let mut tokens = Vec::new();
    let mut cur = String::new();
    let mut quoted = false;
    let mut in_token = false;
    for c in line.chars() {
        match c {
            '"' => {
                quoted = !quoted;
                in_token = true;
            }
            c if c.is_whitespace() && !quoted => {
                if in_token {
                    tokens.push(std::mem::take(&mut cur));
                    in_token = false;
                }
            }
            c => {
                cur.push(c);
                in_token = true;
            }
        }
    }
    if quoted {
        return Err("unterminated quote".into());
    }
    if in_token {
        tokens.push(cur);
    }
    Ok(tokens)
}

fn parse_entry(path_tok: &str, rest: &[String]) -> Result<Export, String> {
    let path = unescape_octal(path_tok)?;
    if !path.starts_with('/') {
        return Err(format!("export path {path:?} is not absolute"));
    }
    let mut defaults = ExportOptions::default();
    let mut clients = Vec::new();
    for (i, tok) in rest.iter().enumerate() {
        if let Some(opts) = tok.strip_prefix('-') {
            if i != 0 {
                return Err(format!(
                    "default options {tok:?} must come before the clients"
                ));
            }
            apply_options(&mut defaults, opts)?;
            continue;
        }
        let (spec, opts) = match tok.find('(') {
            Some(open) => {
                let Some(inner) = tok[open + 1..].strip_suffix(')') else {
                    return Err(format!("{tok:?}: options must end with ')'"));
                };
                (&tok[..open], Some(inner))
            }
            None => (tok.as_str(), None),
        };
        let client = if spec.is_empty() {
            ClientMatch::Any
        } else {
            parse_client(spec)?
        };
        let mut options = defaults.clone();
        if let Some(opts) = opts {
            apply_options(&mut options, opts)?;
        }
        clients.push(ClientRule { client, options });
    }
    if clients.is_empty() {
        clients.push(ClientRule {
            client: ClientMatch::Any,
            options: defaults,
        });
    }
    Ok(Export {
        path: PathBuf::from(path),
        clients,
    })
}

/// `\ooo` octal escapes (exportfs writes a space in a path as `\040`).
fn unescape_octal(s: &str) -> Result<String, String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 4 <= b.len() {
            let d = &b[i + 1..i + 4];
            if d.iter().all(|c| (b'0'..=b'7').contains(c)) {
                let v = d.iter().fold(0u16, |acc, c| acc * 8 + u16::from(c - b'0'));
                let v = u8::try_from(v).map_err(|_| format!("bad escape in {s:?}"))?;
                out.push(v);
                i += 4;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8(out).map_err(|_| format!("path {s:?} is not UTF-8 after unescaping"))
}

fn parse_client(spec: &str) -> Result<ClientMatch, String> {
    if spec == "*" {
        return Ok(ClientMatch::Any);
    }
    let (addr_s, mask_s) = match spec.split_once('/') {
        Some((a, m)) => (a, Some(m)),
        None => (spec, None),
    };
    let addr_s = addr_s
        .strip_prefix('[')
        .and_then(|a| a.strip_suffix(']'))
        .unwrap_or(addr_s);
    let addr: IpAddr = addr_s.parse().map_err(|_| {
        format!("client {spec:?}: only '*', IP addresses and networks are supported")
    })?;
    let max = if addr.is_ipv4() { 32 } else { 128 };
    let prefix_len = match mask_s {
        None => return Ok(ClientMatch::Host(addr)),
        Some(m) => match m.parse::<u8>() {
            Ok(len) if len <= max => len,
            Ok(_) => return Err(format!("client {spec:?}: prefix length over {max}")),
            Err(_) => {
                netmask_len(addr, m).ok_or_else(|| format!("client {spec:?}: bad netmask"))?
            }
        },
    };
    if prefix_len == max {
        return Ok(ClientMatch::Host(addr));
    }
    Ok(ClientMatch::Network {
        addr: network_of(addr, prefix_len),
        prefix_len,
    })
}

/// The prefix length of a dotted netmask such as `255.255.0.0` (must be contiguous ones).
fn netmask_len(addr: IpAddr, mask: &str) -> Option<u8> {
    let mask: IpAddr = mask.parse().ok()?;
    let (bits, width) = match (addr, mask) {
        (IpAddr::V4(_), IpAddr::V4(m)) => (u32::from(m) as u128, 32u32),
        (IpAddr::V6(_), IpAddr::V6(m)) => (u128::from(m), 128u32),
        _ => return None,
    };
    let ones = if width == 32 {
        (bits as u32).leading_ones()
    } else {
        bits.leading_ones()
    };
    let expect = if width == 32 {
        prefix_mask_u32(ones as u8) as u128
    } else {
        prefix_mask_u128(ones as u8)
    };
    (bits == expect).then_some(ones as u8)
}

fn network_of(addr: IpAddr, prefix_len: u8) -> IpAddr {
    match addr {
        IpAddr::V4(a) => IpAddr::V4(Ipv4Addr::from(u32::from(a) & prefix_mask_u32(prefix_len))),
        IpAddr::V6(a) => IpAddr::V6(Ipv6Addr::from(u128::from(a) & prefix_mask_u128(prefix_len))),
    }
}

fn prefix_mask_u32(len: u8) -> u32 {
    if len == 0 {
        0
    } else {
        u32::MAX << (32 - u32::from(len.min(32)))
    }
}

fn prefix_mask_u128(len: u8) -> u128 {
    if len == 0 {
        0
    } else {
        u128::MAX << (128 - u32::from(len.min(128)))
    }
}

fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(ip),
        v4 => v4,
    }
}

fn apply_options(o: &mut ExportOptions, list: &str) -> Result<(), String> {
    for opt in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (key, value) = match opt.split_once('=') {
            Some((k, v)) => (k, Some(v)),
            None => (opt, None),
        };
        let id = |v: Option<&str>| -> Result<u32, String> {
            let v = v.ok_or_else(|| format!("{key} needs a value"))?;
            // exportfs also takes -1 (meaning 65535 on 16-bit-id systems); ids are numbers here.
            v.parse::<u32>()
                .map_err(|_| format!("{key}={v}: not a number"))
        };
        match (key, value) {
            ("rw", None) => o.read_only = false,
            ("ro", None) => o.read_only = true,
            ("root_squash", None) => o.squash = Squash::Root,
            ("no_root_squash", None) => o.squash = Squash::None,
            ("all_squash", None) => o.squash = Squash::All,
            ("no_all_squash", None) => {
                if o.squash == Squash::All {
                    o.squash = Squash::Root
                }
            }
            ("anonuid", v) => o.anonuid = id(v)?,
            ("anongid", v) => o.anongid = id(v)?,
            ("sync", None) => o.sync = true,
            ("async", None) => o.sync = false,
            ("secure", None) => o.secure = true,
            ("insecure", None) => o.secure = false,
            ("fsid", v) => o.fsid = Some(id(v)?),
            ("io" | "io_read" | "io_write", Some(v)) => {
                let m = IoMode::parse(v)
                    .ok_or_else(|| format!("{key}={v}: expected buffered, dontcache or direct"))?;
                match key {
                    "io" => o.io = IoModes::both(m),
                    "io_read" => o.io.read = m,
                    _ => o.io.write = m,
                }
            }
            ("sec", Some("sys")) => {}
            ("xprtsec", Some(v)) => o.xprtsec = XprtsecPolicy::parse(v)?,
            (
                "subtree_check" | "no_subtree_check" | "wdelay" | "no_wdelay" | "hide" | "nohide"
                | "crossmnt" | "acl" | "no_acl" | "secure_locks" | "insecure_locks" | "auth_nlm"
                | "no_auth_nlm",
                None,
            ) => {}
            _ => return Err(format!("unsupported option {opt:?}")),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn parses_the_example_line() {
        let e = parse_exports("/path  127.0.0.1/8(rw,no_root_squash) *(ro)\n").unwrap();
        assert_eq!(e.len(), 1);
        assert_eq!(e[0].path, PathBuf::from("/path"));
        let local = e[0].options_for(ip("127.0.0.5")).unwrap();
        assert!(!local.read_only);
        assert_eq!(local.squash, Squash::None);
        let other = e[0].options_for(ip("10.1.2.3")).unwrap();
        assert!(other.read_only);
        assert_eq!(other.squash, Squash::Root);
        assert_eq!(
            e[0].clients[0].client,
            ClientMatch::Network {
                addr: ip("127.0.0.0"),
                prefix_len: 8
            }
        );
    }

    #[test]
    fn comments_blank_lines_continuations_and_quotes() {
        let text = "# the exports\n\n\
                    /a *(rw) # trailing comment\n\
                    \"/b c\" \\\n   10.0.0.0/255.0.0.0(rw,anonuid=1000,anongid=1001) \\\n  ::1(ro)\n\
                    /d\\040e 192.168.1.7\n";
        let e = parse_exports(text).unwrap();
        assert_eq!(e.len(), 3);
        assert_eq!(e[0].path, PathBuf::from("/a"));
        assert_eq!(e[1].path, PathBuf::from("/b c"));
        assert_eq!(e[1].clients.len(), 2);
        let o = e[1].options_for(ip("10.200.0.1")).unwrap();
        assert_eq!((o.anonuid, o.anongid, o.read_only), (1000, 1001, false));
        assert!(e[1].options_for(ip("::1")).unwrap().read_only);
        assert!(e[1].options_for(ip("11.0.0.1")).is_none());
        assert_eq!(e[2].path, PathBuf::from("/d e"));
        assert_eq!(e[2].clients[0].client, ClientMatch::Host(ip("192.168.1.7")));
        // Defaults: ro, root_squash.
        assert_eq!(e[2].clients[0].options, ExportOptions::default());
    }

    #[test]
    fn error_reports_the_first_physical_line() {
        let err = parse_exports("/a *(rw)\n\n/b \\\n  *(rw,bogus)\n").unwrap_err();
        assert_eq!(err.line, 3);
        assert!(err.message.contains("bogus"), "{err}");
        assert!(parse_exports("relative *(rw)").is_err());
        assert!(parse_exports("/a host.example.com(rw)").is_err());
        assert!(parse_exports("/a @netgroup(rw)").is_err());
        assert!(parse_exports("/a 10.0.0.0/33(rw)").is_err());
        assert!(parse_exports("/a 10.0.0.0/255.0.255.0(rw)").is_err());
        assert!(parse_exports("/a *(rw").is_err());
        assert!(parse_exports("/a \"*(rw)").is_err());
        assert!(parse_exports("/a *(io=fast)").is_err());
        assert!(parse_exports("/a *(anonuid=x)").is_err());
    }

    #[test]
    fn line_defaults_bare_options_and_empty_client_list() {
        let e = parse_exports("/a -rw,all_squash 10.0.0.1 10.0.0.2(ro)\n/b (rw)\n/c\n").unwrap();
        let o1 = e[0].options_for(ip("10.0.0.1")).unwrap();
        assert!(!o1.read_only);
        assert_eq!(o1.squash, Squash::All);
        let o2 = e[0].options_for(ip("10.0.0.2")).unwrap();
        assert!(o2.read_only);
        assert_eq!(o2.squash, Squash::All);
        assert_eq!(e[1].clients[0].client, ClientMatch::Any);
        assert!(!e[1].clients[0].options.read_only);
        assert_eq!(e[2].clients[0].client, ClientMatch::Any);
        assert!(parse_exports("/a 10.0.0.1 -rw").is_err());
    }

    #[test]
    fn host_beats_network_beats_anyone_regardless_of_order() {
        let e = parse_exports("/a *(ro) 10.0.0.0/8(rw,fsid=1) 10.1.2.3(rw,fsid=2)").unwrap();
        assert_eq!(e[0].options_for(ip("10.1.2.3")).unwrap().fsid, Some(2));
        assert_eq!(e[0].options_for(ip("10.9.9.9")).unwrap().fsid, Some(1));
        assert_eq!(e[0].options_for(ip("192.168.0.1")).unwrap().fsid, None);
    }

    #[test]
    fn ipv4_mapped_addresses_match_ipv4_rules() {
        let e = parse_exports("/a 127.0.0.1/8(rw) 2001:db8::/32(rw,fsid=6)").unwrap();
        assert!(e[0].options_for(ip("::ffff:127.0.0.1")).is_some());
        assert!(e[0].options_for(ip("::1")).is_none());
        assert_eq!(e[0].options_for(ip("2001:db8:1::5")).unwrap().fsid, Some(6));
    }

    #[test]
    fn merges_lines_for_the_same_path_and_reads_io_modes() {
        let e =
            parse_exports("/a 10.0.0.1(rw,io=direct)\n/a *(io=dontcache,async,insecure)").unwrap();
        assert_eq!(e.len(), 1);
        assert_eq!(e[0].clients.len(), 2);
        assert_eq!(e[0].clients[0].options.io, IoModes::both(IoMode::Direct));
        let o = &e[0].clients[1].options;
        assert_eq!(o.io, IoModes::both(IoMode::DontCache));
        assert!(!o.sync && !o.secure);
        let e =
            parse_exports("/a *(io=dontcache,io_write=direct) 10.0.0.1(io_read=direct)").unwrap();
        let io = |i: usize| e[0].clients[i].options.io;
        assert_eq!(io(0).read, IoMode::DontCache);
        assert_eq!(io(0).write, IoMode::Direct);
        assert_eq!(io(1).read, IoMode::Direct);
        assert_eq!(io(1).write, IoMode::Buffered);
        assert!(parse_exports("/a *(io_write=fast)").is_err());
    }

    #[test]
    fn xprtsec_lists_parse_as_sets_and_show_in_knfsd_spelling() {
        let e = parse_exports(
            "/a *(xprtsec=tls:mtls) 10.0.0.1(xprtsec=mtls) 10.0.0.2(xprtsec=mtls:none:mtls)\n/b",
        )
        .unwrap();
        let p = |i: usize| e[0].clients[i].options.xprtsec;
        assert!(!p(0).allows(Xprtsec::None));
        assert!(p(0).allows(Xprtsec::Tls) && p(0).allows(Xprtsec::Mtls));
        assert_eq!(p(0).to_string(), "tls:mtls");
        assert_eq!(p(1), XprtsecPolicy::of(&[Xprtsec::Mtls]).unwrap());
        assert!(
            !p(1).allows(Xprtsec::Tls),
            "tls is TLS without a verified certificate"
        );
        assert_eq!(p(2).to_string(), "none:mtls");
        // The default admits every mode.
        assert_eq!(e[1].clients[0].options.xprtsec, XprtsecPolicy::ANY);
        assert_eq!(XprtsecPolicy::ANY.to_string(), "none:tls:mtls");
        for bad in [
            "/a *(xprtsec=)",
            "/a *(xprtsec=ssl)",
            "/a *(xprtsec=tls:)",
            "/a *(xprtsec)",
        ] {
            assert!(parse_exports(bad).is_err(), "{bad}");
        }
        let err = parse_exports("/a *(xprtsec=tls:krb5)").unwrap_err();
        assert!(err.message.contains("\"krb5\""), "{err}");
    }

    #[test]
    fn xprtsec_policies_no_server_could_serve_are_named() {
        let p = |s: &str| XprtsecPolicy::parse(s).unwrap();
        // Without TLS only `none` can be reached.
        assert!(p("none:tls").unreachable(false, false).is_none());
        assert!(p("tls:mtls").unreachable(false, true).is_some());
        // With TLS but no client CA, nobody is ever `mtls`.
        assert!(p("tls").unreachable(true, false).is_none());
        assert!(p("mtls").unreachable(true, false).is_some());
        assert!(p("mtls").unreachable(true, true).is_none());
        assert!(XprtsecPolicy::ANY.unreachable(false, false).is_none());
        assert!(XprtsecPolicy::of(&[]).is_none());
    }

    #[test]
    fn squashing() {
        let root = Cred::new(0, 0).with_groups(&[0, 10]);
        let user = Cred::new(1000, 100).with_groups(&[0, 27]);
        let mut o = ExportOptions::default();

        let r = squash(&root, &o);
        assert_eq!(
            (r.uid, r.gid, r.gids.clone()),
            (65534, 65534, vec![65534, 10])
        );
        let u = squash(&user, &o);
        assert_eq!((u.uid, u.gid, u.gids.clone()), (1000, 100, vec![65534, 27]));

        o.squash = Squash::None;
        assert_eq!(squash(&root, &o), root);

        o.squash = Squash::All;
        o.anonuid = 7;
        o.anongid = 8;
        assert_eq!(squash(&user, &o), Cred::new(7, 8));
        assert_eq!(squash(&root, &o), Cred::new(7, 8));

        let o = parse_exports("/a *(rw,anonuid=42,anongid=43)").unwrap()[0].clients[0]
            .options
            .clone();
        assert_eq!(squash(&Cred::new(0, 5), &o), Cred::new(42, 5));
    }
}
