//! A Ceph export that cannot be served fails with an error that says why, in bounded time,
//! without a cluster: an unreachable monitor is named in the error.

use sluice_ceph::{CephConfig, CephFs, CephFsConfig};
use std::time::{Duration, Instant};

#[test]
fn an_unreachable_monitor_is_a_clear_error_within_the_mount_timeout() {
    let dir = std::env::temp_dir().join(format!("sluice-ceph-errors-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // A loopback port nobody listens on: bound, then released.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let conf = dir.join("ceph.conf");
    std::fs::write(
        &conf,
        format!(
            "[global]\nmon_host = v1:127.0.0.1:{port}\nauth_client_required = none\n\
             ms_bind_msgr2 = false\nlog_file = {}/client.log\n",
            dir.display()
        ),
    )
    .unwrap();
    let mut ceph = CephConfig::new(&conf, "/");
    ceph.mount_timeout = Duration::from_secs(3);
    let t0 = Instant::now();
    let err = match CephFs::new(CephFsConfig::new(ceph, dir.join("state"))) {
        Ok(_) => panic!("mounted a cluster that does not exist"),
        Err(e) => e.to_string(),
    };
    let took = t0.elapsed();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        err.contains(&format!("127.0.0.1:{port}")),
        "names the monitor: {err}"
    );
    assert!(
        err.contains(&conf.display().to_string()),
        "names the conf: {err}"
    );
    // The mount timeout plus the margin CephMount allows, plus slack for a busy machine.
    assert!(took < Duration::from_secs(15), "took {took:?}");
}
