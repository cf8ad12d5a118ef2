//! Command-line surface: `sluice link ...` flags, their parsers, and [`run`].

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use crate::model::{LinkConfig, Stall, StallTrigger};
use crate::proxy::{ProxyConfig, TcpProxy, UdpProxy};

/// `sluice link --listen ADDR:PORT --to ADDR:PORT --rtt 1ms --rate 300MB/s ...`
#[derive(clap::Args, Clone, Debug, PartialEq)]
pub struct LinkArgs {
    /// Address to accept clients on.
    #[arg(long)]
    pub listen: SocketAddr,
    /// Address of the server to forward to.
    #[arg(long)]
    pub to: SocketAddr,
    /// Round-trip delay added by the link (half each way), e.g. 1ms, 0.2ms, 40ms.
    #[arg(long, value_parser = parse_duration, default_value = "0ms")]
    pub rtt: Duration,
    /// Bottleneck rate, e.g. 300MB/s, 100Mbit, 1GB/s, 12.5MB/s, 64MiB/s; 0 = unlimited.
    #[arg(long, value_parser = parse_rate, default_value = "0")]
    pub rate: u64,
    /// Jitter of each one-way delay (uniform in +-jitter).
    #[arg(long, value_parser = parse_duration, default_value = "0ms")]
    pub jitter: Duration,
    /// Bottleneck queue bound, e.g. 1MiB, 65536 (default: max(BDP, 1 MiB)).
    #[arg(long, value_parser = parse_bytes)]
    pub queue: Option<u64>,
    /// Segment size the stream is cut into (default: 100 us of the rate, 1500..64KiB).
    #[arg(long, value_parser = parse_bytes)]
    pub segment: Option<u64>,
    /// Proxy UDP datagrams instead of a TCP stream.
    #[arg(long)]
    pub udp: bool,
    /// UDP: ratio of datagrams lost (0..1).
    #[arg(long, value_parser = parse_ratio, default_value = "0")]
    pub loss: f64,
    /// UDP: ratio of datagrams delivered twice (0..1).
    #[arg(long, value_parser = parse_ratio, default_value = "0")]
    pub dup: f64,
    /// UDP: ratio of datagrams held back 1 ms so later ones overtake them (0..1).
    #[arg(long, value_parser = parse_ratio, default_value = "0")]
    pub reorder: f64,
    /// Reset each connection (RST both ways) after this many bytes in either direction.
    #[arg(long, value_parser = parse_bytes)]
    pub reset_after: Option<u64>,
    /// Stall each direction once, after this many bytes...
    #[arg(long, value_parser = parse_bytes, requires = "stall_for")]
    pub stall_after: Option<u64>,
    /// ...for this long.
    #[arg(long, value_parser = parse_duration, requires = "stall_after")]
    pub stall_for: Option<Duration>,
    /// Seed of the link's random draws (jitter, loss, dup, reorder).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
}

impl LinkArgs {
    /// The proxy configuration these flags describe.
    pub fn proxy_config(&self) -> ProxyConfig {
        let stall = match (self.stall_after, self.stall_for) {
            (Some(n), Some(duration)) => Some(Stall {
                trigger: StallTrigger::AfterBytes(n),
                duration,
            }),
            _ => None,
        };
        ProxyConfig {
            listen: self.listen,
            to: self.to,
            link: LinkConfig {
                rtt: self.rtt,
                jitter: self.jitter,
                rate_bytes_per_sec: self.rate,
                queue_bytes_max: self.queue,
                segment_bytes: self
                    .segment
                    .map(|s| s.clamp(1, u64::from(crate::model::SEGMENT_BYTES_MAX)) as u32),
                loss_ratio: self.loss,
                dup_ratio: self.dup,
                reorder_ratio: self.reorder,
                reset_after_bytes: self.reset_after,
                stall,
                seed: self.seed,
                ..LinkConfig::default()
            },
        }
    }
}

/// Runs `sluice link` until Ctrl-C.
pub async fn run(args: LinkArgs) -> io::Result<()> {
    let cfg = args.proxy_config();
    let shutdown = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    let link = &cfg.link;
    let rate = if link.rate_bytes_per_sec == 0 {
        "unlimited".to_string()
    } else {
        format!("{} B/s", link.rate_bytes_per_sec)
    };
    let proto = if args.udp { "udp" } else { "tcp" };
    tracing::info!(
        "link: {proto} {} -> {}: rtt {:?} (+-{:?} jitter), rate {rate}, BDP {} B, queue {} B, segment {} B, loss {} dup {} reorder {}, reset after {:?} B, stall {:?}, seed {}",
        cfg.listen,
        cfg.to,
        link.rtt,
        link.jitter,
        link.bdp_bytes(),
        link.queue_bytes(),
        link.segment_bytes(),
        link.loss_ratio,
        link.dup_ratio,
        link.reorder_ratio,
        link.reset_after_bytes,
        link.stall,
        link.seed,
    );
    if args.udp {
        UdpProxy::bind(cfg).await?.run(shutdown).await
    } else {
        TcpProxy::bind(cfg).await?.run(shutdown).await
    }
}

/// Parses a rate into bytes per second.
///
/// Byte units are decimal (`KB`, `MB`, `GB` = 10^3, 10^6, 10^9 bytes) or
/// binary (`KiB`, `MiB`, `GiB`); bit units are decimal (`Kbit`, `Mbit`,
/// `Gbit`, also `Kbps`, `Mbps`, `Gbps`). A trailing `/s` is optional; a bare
/// number is bytes per second; `0` or `unlimited` means no limit.
pub fn parse_rate(s: &str) -> Result<u64, String> {
    let t = s.trim();
    if t.eq_ignore_ascii_case("unlimited") {
        return Ok(0);
    }
    let t = t.strip_suffix("/s").unwrap_or(t);
    let (num, unit) =
        split_number(t).ok_or_else(|| format!("rate {s:?}: expected e.g. 300MB/s"))?;
    let factor: f64 = match unit {
        "" | "B" => 1.0,
        "KB" | "kB" => 1e3,
        "MB" => 1e6,
        "GB" => 1e9,
        "KiB" => 1024.0,
        "MiB" => 1024.0 * 1024.0,
        "GiB" => 1024.0 * 1024.0 * 1024.0,
        "bit" | "bps" => 1.0 / 8.0,
        "Kbit" | "kbit" | "Kbps" | "kbps" => 1e3 / 8.0,
        "Mbit" | "mbit" | "Mbps" | "mbps" => 1e6 / 8.0,
        "Gbit" | "gbit" | "Gbps" | "gbps" => 1e9 / 8.0,
        _ => return Err(format!("rate {s:?}: unknown unit {unit:?}")),
    };
    to_integer(num * factor).ok_or_else(|| format!("rate {s:?}: out of range"))
}

/// Parses a duration: a number followed by `ns`, `us` (or `µs`), `ms`, `s`.
/// A bare `0` is accepted; other bare numbers are ambiguous and refused.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    let (num, unit) =
        split_number(t).ok_or_else(|| format!("duration {s:?}: expected e.g. 1ms"))?;
    let nanos_per_unit = match unit {
        "ns" => 1.0,
        "us" | "µs" => 1e3,
        "ms" => 1e6,
        "s" => 1e9,
        "" if num == 0.0 => 0.0,
        _ => return Err(format!("duration {s:?}: unit must be ns, us, ms or s")),
    };
    to_integer(num * nanos_per_unit)
        .map(Duration::from_nanos)
        .ok_or_else(|| format!("duration {s:?}: out of range"))
}

/// Parses a byte count: a number with an optional `KB`/`MB`/`GB` (10^n) or
/// `KiB`/`MiB`/`GiB` (2^n) suffix.
pub fn parse_bytes(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let (num, unit) = split_number(t).ok_or_else(|| format!("size {s:?}: expected e.g. 1MiB"))?;
    let factor: f64 = match unit {
        "" | "B" => 1.0,
        "KB" | "kB" => 1e3,
        "MB" => 1e6,
        "GB" => 1e9,
        "KiB" => 1024.0,
        "MiB" => 1024.0 * 1024.0,
        "GiB" => 1024.0 * 1024.0 * 1024.0,
        _ => return Err(format!("size {s:?}: unknown unit {unit:?}")),
    };
    to_integer(num * factor).ok_or_else(|| format!("size {s:?}: out of range"))
}

/// Parses a probability in `[0, 1]`.
pub fn parse_ratio(s: &str) -> Result<f64, String> {
    let r: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("ratio {s:?}: expected a number in 0..1"))?;
    if (0.0..=1.0).contains(&r) {
        Ok(r)
    } else {
        Err(format!("ratio {s:?}: must be within 0..1"))
    }
}

/// Splits `"12.5MB"` into `(12.5, "MB")`.
fn split_number(t: &str) -> Option<(f64, &str)> {
    let end = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let num: f64 = t[..end].parse().ok()?;
    Some((num, t[end..].trim()))
}

fn to_integer(v: f64) -> Option<u64> {
    let r = v.round();
    (r.is_finite() && r >= 0.0 && r <= u64::MAX as f64).then_some(r as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[test]
    fn rates() {
        assert_eq!(parse_rate("300MB/s"), Ok(300_000_000));
        assert_eq!(parse_rate("100Mbit"), Ok(12_500_000));
        assert_eq!(parse_rate("100Mbit/s"), Ok(12_500_000));
        assert_eq!(parse_rate("1GB/s"), Ok(1_000_000_000));
        assert_eq!(parse_rate("12.5MB/s"), Ok(12_500_000));
        assert_eq!(parse_rate("64MiB/s"), Ok(64 << 20));
        assert_eq!(parse_rate("512KiB"), Ok(512 << 10));
        assert_eq!(parse_rate("10Gbps"), Ok(1_250_000_000));
        assert_eq!(parse_rate("1000"), Ok(1000));
        assert_eq!(parse_rate("0"), Ok(0));
        assert_eq!(parse_rate("unlimited"), Ok(0));
        assert!(parse_rate("fast").is_err());
        assert!(parse_rate("10 parsecs").is_err());
        assert!(parse_rate("").is_err());
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("1ms"), Ok(Duration::from_millis(1)));
        assert_eq!(parse_duration("0.2ms"), Ok(Duration::from_micros(200)));
        assert_eq!(parse_duration("40ms"), Ok(Duration::from_millis(40)));
        assert_eq!(parse_duration("2s"), Ok(Duration::from_secs(2)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("250us"), Ok(Duration::from_micros(250)));
        assert_eq!(parse_duration("250µs"), Ok(Duration::from_micros(250)));
        assert_eq!(parse_duration("7ns"), Ok(Duration::from_nanos(7)));
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
        assert!(parse_duration("5").is_err());
        assert!(parse_duration("1h").is_err());
        assert!(parse_duration("-1ms").is_err());
    }

    #[test]
    fn sizes_and_ratios() {
        assert_eq!(parse_bytes("1MiB"), Ok(1 << 20));
        assert_eq!(parse_bytes("64KiB"), Ok(65_536));
        assert_eq!(parse_bytes("1MB"), Ok(1_000_000));
        assert_eq!(parse_bytes("65536"), Ok(65_536));
        assert!(parse_bytes("1MiBs").is_err());
        assert_eq!(parse_ratio("0.25"), Ok(0.25));
        assert!(parse_ratio("1.5").is_err());
    }

    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        link: LinkArgs,
    }

    #[test]
    fn flags_build_the_config() {
        let cli = Cli::try_parse_from([
            "sluice-link",
            "--listen",
            "127.0.0.1:7000",
            "--to",
            "127.0.0.1:2049",
            "--rtt",
            "1ms",
            "--rate",
            "300MB/s",
            "--jitter",
            "0.1ms",
            "--reset-after",
            "1MiB",
            "--stall-after",
            "10KB",
            "--stall-for",
            "2s",
        ])
        .unwrap();
        let cfg = cli.link.proxy_config();
        assert_eq!(cfg.link.rtt, Duration::from_millis(1));
        assert_eq!(cfg.link.rate_bytes_per_sec, 300_000_000);
        assert_eq!(cfg.link.jitter, Duration::from_micros(100));
        assert_eq!(cfg.link.reset_after_bytes, Some(1 << 20));
        assert_eq!(
            cfg.link.stall,
            Some(Stall {
                trigger: StallTrigger::AfterBytes(10_000),
                duration: Duration::from_secs(2)
            })
        );
        let missing = Cli::try_parse_from([
            "x",
            "--listen",
            "127.0.0.1:1",
            "--to",
            "127.0.0.1:2",
            "--stall-after",
            "1",
        ]);
        assert!(missing.is_err(), "--stall-after requires --stall-for");
    }
}
