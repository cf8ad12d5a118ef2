//! The client library and commands against the sluice server binary this crate builds (or
//! $SLUICE_BIN).
mod scenarios;
mod servers;

use servers::{runtime, SluiceServer};

#[test]
fn client_against_sluice_server() {
    let bin = SluiceServer::binary();
    let server = SluiceServer::start(&bin);
    runtime().block_on(scenarios::all(&server));
}

/// The client commands run on a current-thread runtime. A connection added to one of them
/// (`--nconnect`, or by the automatic `nconnect`) gets a thread of its own for its reader,
/// writer and driver, or all the connections' receiving would take turns on one core; the
/// thread ends with the client. Both ways of adding one, with the data intact.
#[test]
fn extra_connections_of_a_current_thread_client_run_on_their_own_threads() {
    use servers::Server;
    use sluice_client::{Client, ClientOptions, TrunkConfig};
    fn conn_threads() -> usize {
        std::fs::read_dir("/proc/self/task")
            .unwrap()
            .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
            .filter(|c| c.trim() == "sluice-conn")
            .count()
    }
    let bin = SluiceServer::binary();
    let server = SluiceServer::start(&bin);
    let data: Vec<u8> = (0..(8u32 << 20) + 3).map(|i| (i % 241) as u8).collect();
    std::fs::write(server.export_dir().join("threads.bin"), &data).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        assert_eq!(conn_threads(), 0);
        let fixed = ClientOptions {
            nconnect: 3,
            ..ClientOptions::default()
        };
        let c = Client::connect(&server.url(""), fixed).await.unwrap();
        assert_eq!(
            conn_threads(),
            2,
            "one thread per connection after the first"
        );
        let f = c.open("/threads.bin").await.unwrap();
        assert_eq!(f.read_all().await.unwrap(), data);
        drop(f);
        drop(c);
        let eager = ClientOptions {
            nconnect_auto: TrunkConfig {
                max: 2,
                window_bytes: 1 << 20,
                busy_fraction: 0.0,
                gain_min: 0.0,
            },
            ..ClientOptions::default()
        };
        let c = Client::connect(&server.url(""), eager).await.unwrap();
        for _ in 0..20 {
            let f = c.open("/threads.bin").await.unwrap();
            assert_eq!(f.read_all().await.unwrap(), data);
            if c.connections().0 == 2 {
                break;
            }
        }
        assert_eq!(c.connections().0, 2, "the automatic nconnect added one");
        let f = c.open("/threads.bin").await.unwrap();
        assert_eq!(f.read_all().await.unwrap(), data);
        let per = c.connection_stats();
        assert!(per[1].bytes_received > 1 << 20, "{per:?}");
        drop(f);
        drop(c);
        // The threads of the first client, and the one the second added, end with them.
        for _ in 0..100 {
            if conn_threads() == 0 {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        assert_eq!(
            conn_threads(),
            0,
            "connection threads outlived their client"
        );
    });
}
