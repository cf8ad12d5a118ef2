//! Issue #4, client side: autotuned readahead and UDP against the sluice server binary, and
//! through the `sluice link` emulator.
//!
//! Runs the `sluice` binary this crate builds (or $SLUICE_BIN). Rates are only ever compared
//! side by side (a ratio), never against an absolute number: this machine's speed varies.
mod servers;

use servers::*;
use sluice_client::{Client, ClientOptions, ReadaheadMode};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const KIB: u64 = 1024;
const MIB: u64 = 1024 * KIB;

#[test]
fn readahead_and_udp_against_the_sluice_binary() {
    let bin = SluiceServer::binary();
    let server = SluiceServer::start_with(&bin, &["--udp"], false);
    let rt = runtime();
    let t0 = Instant::now();
    let step = |name: &str, t: Instant| eprintln!("[readahead] {name}: ok in {:?}", t.elapsed());
    rt.block_on(async {
        let t = Instant::now();
        sequential_auto_uses_full_rsize_reads_several_in_flight(&server).await;
        step("sequential auto: full-rsize READs, several in flight", t);
        let t = Instant::now();
        random_4k_reads_fetch_what_is_asked(&server).await;
        step("random 4 KiB reads fetch <= 1.1x", t);
        let t = Instant::now();
        fixed_128k_never_has_more_than_128k_in_flight(&server).await;
        step("fixed:128k <= 128 KiB in flight", t);
        let t = Instant::now();
        off_reads_only_what_is_asked(&server).await;
        step("off reads only what is asked", t);
        let t = Instant::now();
        a_change_on_the_server_invalidates(&server).await;
        step("a change on the server invalidates cached data", t);
        let t = Instant::now();
        interleaved_readers_each_get_their_data(&server).await;
        step("interleaved readers of one file", t);
        let t = Instant::now();
        udp_copies_both_ways(&server).await;
        step("UDP cp both ways (sha256)", t);
    });
    let t = Instant::now();
    auto_beats_fixed_128k_through_a_10ms_link(&bin, &server, &rt);
    step("10 ms link: auto vs fixed:128k, no TCP retransmissions", t);
    let t = Instant::now();
    udp_through_a_lossy_link(&bin, &server, &rt);
    step("UDP through a 1% lossy link", t);
    eprintln!("[readahead] all passed in {:?}", t0.elapsed());
}

fn options(mode: ReadaheadMode) -> ClientOptions {
    ClientOptions {
        readahead: mode,
        ..ClientOptions::default()
    }
}

/// A file of `len` pseudo-random bytes in the export; returns its contents.
fn file(s: &SluiceServer, name: &str, len: u64, seed: u64) -> Vec<u8> {
    let p = s.export_dir().join(name);
    make_file(&p, len, seed);
    std::fs::read(p).unwrap()
}

async fn sequential_auto_uses_full_rsize_reads_several_in_flight(s: &SluiceServer) {
    let want = file(s, "seq", 24 * MIB + 5, 1);
    let c = Client::connect(&s.url(""), ClientOptions::default())
        .await
        .unwrap();
    let f = c.open("/seq").await.unwrap();
    let got = f.read_all().await.unwrap();
    assert!(got == want, "content differs");
    let r = c.read_stats();
    eprintln!("{r}");
    let rsize = u64::from(c.rsize());
    // Every READ but the one at EOF is a full rsize.
    assert!(
        r.read_bytes >= (r.reads - 1) * rsize,
        "READs smaller than rsize ({rsize}): {r:?}"
    );
    assert!(r.in_flight_max > 1, "one READ at a time: {r:?}");
    assert!(r.window_max_bytes >= 2 * rsize, "{r:?}");
    assert!(
        r.read_bytes_received <= want.len() as u64 + rsize,
        "fetched past EOF or twice: {r:?}"
    );
}

async fn random_4k_reads_fetch_what_is_asked(s: &SluiceServer) {
    let want = file(s, "rand", 64 * MIB, 2);
    let c = Client::connect(&s.url(""), ClientOptions::default())
        .await
        .unwrap();
    let f = c.open("/rand").await.unwrap();
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let pages = want.len() as u64 / (4 * KIB);
    for _ in 0..400 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        // Page 0 is left out: a read at offset 0 is taken as the start of a sequential read.
        let off = (1 + x % (pages - 1)) * 4 * KIB;
        let got: Vec<u8> = f.read_at(off, 4 * KIB).await.unwrap().concat();
        assert_eq!(got, want[off as usize..(off + 4 * KIB) as usize]);
    }
    let r = c.read_stats();
    eprintln!("{r}");
    assert_eq!(r.app_read_bytes, 400 * 4 * KIB);
    assert!(
        r.read_bytes as f64 <= 1.1 * r.app_read_bytes as f64,
        "random reads fetched {:.2}x what they asked: {r:?}",
        r.fetch_amplification()
    );
}

async fn fixed_128k_never_has_more_than_128k_in_flight(s: &SluiceServer) {
    let want = file(s, "fixed", 8 * MIB + 300, 3);
    let c = Client::connect(&s.url(""), options(ReadaheadMode::Fixed(128 * KIB)))
        .await
        .unwrap();
    let f = c.open("/fixed").await.unwrap();
    assert!(f.read_all().await.unwrap() == want);
    let r = c.read_stats();
    eprintln!("{r}");
    assert!(r.in_flight_bytes_max <= 128 * KIB, "{r:?}");
    assert!(r.read_bytes_avg() >= 120 * KIB, "128 KiB READs: {r:?}");
}

async fn off_reads_only_what_is_asked(s: &SluiceServer) {
    let want = file(s, "off", 4 * MIB, 4);
    let c = Client::connect(&s.url(""), options(ReadaheadMode::Off))
        .await
        .unwrap();
    let f = c.open("/off").await.unwrap();
    assert!(f.read_all().await.unwrap() == want);
    for (off, len) in [(12_288u64, 8_192u64), (1_000_000 / 4096 * 4096, 4096)] {
        let got: Vec<u8> = f.read_at(off, len).await.unwrap().concat();
        assert_eq!(got, want[off as usize..(off + len) as usize]);
    }
    let r = c.read_stats();
    eprintln!("{r}");
    assert_eq!(r.readahead_bytes, 0, "{r:?}");
    assert_eq!(r.read_bytes, r.app_read_bytes, "{r:?}");
}

async fn a_change_on_the_server_invalidates(s: &SluiceServer) {
    let old = file(s, "change", 4 * MIB, 5);
    let c = Client::connect(&s.url(""), ClientOptions::default())
        .await
        .unwrap();
    let mut f = c.open("/change").await.unwrap();
    // A sequential start: the readahead fetches well past the first 64 KiB.
    let head: Vec<u8> = f.read_at(0, 64 * KIB).await.unwrap().concat();
    assert_eq!(head, old[..64 * KIB as usize]);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(c.read_stats().readahead_bytes > 0);
    // Rewrite in place: same size, new mtime and ctime.
    tokio::time::sleep(Duration::from_millis(20)).await;
    let new = file(s, "change", 4 * MIB, 55);
    // A READ of a range never fetched brings the new attributes: the cached readahead goes.
    let far = 3 * MIB;
    let got: Vec<u8> = f.read_at(far, 4 * KIB).await.unwrap().concat();
    assert_eq!(got, new[far as usize..(far + 4 * KIB) as usize]);
    let got: Vec<u8> = f.read_at(64 * KIB, 64 * KIB).await.unwrap().concat();
    assert!(
        got == new[64 * KIB as usize..128 * KIB as usize],
        "stale readahead data served after the file changed"
    );
    assert!(c.read_stats().invalidations >= 1);
    // And through an explicit refresh (close-to-open), for data fetched after the first change.
    let _ = f.read_at(128 * KIB, 64 * KIB).await.unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
    let newer = file(s, "change", 4 * MIB, 555);
    f.refresh().await.unwrap();
    let got: Vec<u8> = f.read_at(192 * KIB, 64 * KIB).await.unwrap().concat();
    assert!(got == newer[192 * KIB as usize..256 * KIB as usize]);
}

async fn interleaved_readers_each_get_their_data(s: &SluiceServer) {
    let want = file(s, "two", 16 * MIB, 6);
    let c = Client::connect(&s.url(""), ClientOptions::default())
        .await
        .unwrap();
    let f = c.open("/two").await.unwrap();
    let half = want.len() as u64 / 2;
    let read_range = |f: sluice_client::File, from: u64, to: u64| async move {
        let mut out = Vec::new();
        let mut at = from;
        while at < to {
            let chunks = f.read_at(at, (128 * KIB).min(to - at)).await.unwrap();
            for c in chunks {
                at += c.len() as u64;
                out.extend_from_slice(&c);
            }
        }
        out
    };
    let (a, b) = tokio::join!(
        read_range(f.clone(), 0, half),
        read_range(f.clone(), half, 2 * half)
    );
    assert!(a == want[..half as usize] && b == want[half as usize..]);
    let r = c.read_stats();
    eprintln!("{r}");
    // The first reader does not know it stops at the half: its window runs on past it into
    // what the second has consumed already (on loopback that window reaches several MiB).
    // What must not happen is both readers fetching everything.
    assert!(
        (r.read_bytes as f64) < 1.75 * want.len() as f64,
        "interleaved readers fetched {:.2}x: {r:?}",
        r.fetch_amplification()
    );
    assert!(
        r.read_bytes_avg() >= 256 * KIB,
        "each stream should use large READs: {r:?}"
    );
}

async fn udp_copies_both_ways(s: &SluiceServer) {
    let tmp = TempDir::new("udp");
    let src = tmp.path().join("src");
    make_file(&src, 6 * MIB + 123, 7);
    let url = format!("{}?proto=udp", s.url("/udp-copy"));
    cp(&["-q", src.to_str().unwrap(), &url]).await;
    assert_eq!(
        sha256_file(&s.export_dir().join("udp-copy")),
        sha256_file(&src)
    );
    let back = tmp.path().join("back");
    cp(&["-q", "--udp", &s.url("/udp-copy"), back.to_str().unwrap()]).await;
    assert_eq!(sha256_file(&back), sha256_file(&src));
    // Transfer sizes fit a datagram.
    let c = Client::connect(&url, ClientOptions::default())
        .await
        .unwrap();
    assert!(c.is_udp());
    assert!(c.rsize() <= 32 * 1024 && c.wsize() <= 32 * 1024);
    // A healthy link (plain loopback) must not cost a retransmission: a full slot table of
    // 32 KiB replies used to overflow the default 208 KiB socket buffer (RcvbufErrors).
    let f = c.open(c.target_path()).await.unwrap();
    let data = f.read_all().await.unwrap();
    assert_eq!(data.len() as u64, 6 * MIB + 123);
    let retrans = c.transport_stats().table.retransmissions;
    assert_eq!(retrans, 0, "UDP retransmissions on plain loopback");
}

async fn cp(args: &[&str]) {
    use clap::Parser;
    #[derive(Parser)]
    struct Cli {
        #[command(subcommand)]
        cmd: sluice_cli::cmd::ClientCmd,
    }
    let mut argv = vec!["sluice", "cp"];
    argv.extend_from_slice(args);
    let cli = Cli::try_parse_from(&argv).unwrap();
    let mut out = Vec::new();
    if let Err(e) = sluice_cli::cmd::run_with_output(cli.cmd, &mut out).await {
        panic!("sluice {argv:?}: {e}");
    }
}

/// `sluice link` between the client and the server; killed on drop.
struct Link {
    child: Child,
    port: u16,
}

impl Link {
    fn start(bin: &Path, server_port: u16, args: &[&str], udp: bool) -> Link {
        let port = free_port();
        let child = Command::new(bin)
            .arg("link")
            .arg("--listen")
            .arg(format!("127.0.0.1:{port}"))
            .arg("--to")
            .arg(format!("127.0.0.1:{server_port}"))
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn sluice link");
        if udp {
            std::thread::sleep(Duration::from_millis(300));
        } else {
            let deadline = Instant::now() + Duration::from_secs(10);
            while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
                assert!(Instant::now() < deadline, "sluice link did not listen");
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        Link { child, port }
    }

    /// URL of `rel` in the server's export, through the link (no PORTMAP: its answer would
    /// name the server's own port).
    fn url(&self, s: &SluiceServer, rel: &str, query: &str) -> String {
        format!(
            "nfs://127.0.0.1{}{rel}?version=3&nfsport={p}&mountport={p}{query}",
            s.export_dir().display(),
            p = self.port
        )
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn auto_beats_fixed_128k_through_a_10ms_link(
    bin: &Path,
    s: &SluiceServer,
    rt: &tokio::runtime::Runtime,
) {
    let want = file(s, "linked", 16 * MIB, 8);
    let link = Link::start(
        bin,
        s.port(),
        &["--rtt", "10ms", "--rate", "100MB/s"],
        false,
    );
    let url = link.url(s, "/linked", "");
    let timed = |mode: ReadaheadMode| {
        let url = url.clone();
        let want = &want;
        rt.block_on(async move {
            let c = Client::connect(&url, options(mode)).await.unwrap();
            let f = c.open("/linked").await.unwrap();
            let t = Instant::now();
            let got = f.read_all().await.unwrap();
            let secs = t.elapsed().as_secs_f64();
            assert!(&got == want, "content differs in {mode:?}");
            let rate = want.len() as f64 / secs;
            let retrans = c.transport_stats().table.retransmissions + c.stats().total_retransmits();
            eprintln!(
                "[readahead] {mode:?}: {:.1} MB/s, {retrans} retransmissions\n{}",
                rate / 1e6,
                c.read_stats()
            );
            assert_eq!(
                retrans, 0,
                "{mode:?}: retransmission over TCP on a healthy link"
            );
            rate
        })
    };
    let fixed = timed(ReadaheadMode::Fixed(128 * KIB));
    let auto = timed(ReadaheadMode::Auto);
    eprintln!(
        "[readahead] 10 ms / 100 MB/s: auto {:.1} MB/s = {:.1}x fixed:128k {:.1} MB/s",
        auto / 1e6,
        auto / fixed,
        fixed / 1e6
    );
    assert!(
        auto >= 2.0 * fixed,
        "auto {auto:.0} B/s is not 2x fixed:128k {fixed:.0} B/s"
    );
}

fn udp_through_a_lossy_link(bin: &Path, s: &SluiceServer, rt: &tokio::runtime::Runtime) {
    // The link's UDP proxy serves the first client address it hears from, so each client
    // (each transfer: a new socket) gets a link of its own.
    let lossy = |seed: &str| {
        Link::start(
            bin,
            s.port(),
            &["--udp", "--loss", "0.01", "--seed", seed],
            true,
        )
    };
    let tmp = TempDir::new("lossy");
    let src = tmp.path().join("src");
    make_file(&src, 4 * MIB, 9);
    let limit = Duration::from_secs(60);
    rt.block_on(async {
        let link = lossy("4");
        let url = link.url(s, "/lossy", "&proto=udp");
        tokio::time::timeout(limit, cp(&["-q", src.to_str().unwrap(), &url]))
            .await
            .expect("UDP write through a lossy link did not finish");
        assert_eq!(
            sha256_file(&s.export_dir().join("lossy")),
            sha256_file(&src)
        );
        let link = lossy("5");
        let url = link.url(s, "/lossy", "&proto=udp");
        let back = tmp.path().join("back");
        tokio::time::timeout(limit, cp(&["-q", &url, back.to_str().unwrap()]))
            .await
            .expect("UDP read through a lossy link did not finish");
        assert_eq!(sha256_file(&back), sha256_file(&src));
        // Once more with the statistics in hand.
        let link = lossy("6");
        let url = link.url(s, "/lossy", "&proto=udp");
        let c = Client::connect(&url, ClientOptions::default())
            .await
            .unwrap();
        let f = c.open("/lossy").await.unwrap();
        let t0 = Instant::now();
        let got = tokio::time::timeout(limit, f.read_all())
            .await
            .expect("UDP read did not finish")
            .unwrap();
        assert!(got == std::fs::read(&src).unwrap());
        let t = c.transport_stats().table;
        eprintln!(
            "[readahead] UDP read of 4 MiB, link loss 1% each way, in {:?}: {} calls, {} \
             retransmissions = {:.2}% of calls (a call is lost when its request or its reply \
             is: ~2%)\n{}",
            t0.elapsed(),
            t.calls_completed,
            t.retransmissions,
            100.0 * t.retransmissions as f64 / t.calls_completed.max(1) as f64,
            c.read_stats()
        );
    });
}
