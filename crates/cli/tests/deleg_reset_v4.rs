//! A recall after a connection reset, end to end: `sluice serve` (a 300 s lease), a
//! `sluice link` in front of it that resets each connection after 16 KiB in one direction, and
//! a holder, the sluice v4 client library in this process, that opens a file through the link
//! under a read delegation, then sends COMMITs (a COMPOUND each) until the link has reset its
//! connection once. The COMMIT cut by the reset is sent again by the transport on the new
//! connection (answered from the session's reply cache if it had run, else run then), and then
//! the holder sends nothing: no COMPOUND of the application binds the new connection. A
//! writer (`sluice cp` in its own process, straight to the server) overwrites the file: the
//! server recalls the holder's delegation on the holder's back channel, which must be the new
//! connection.
//!
//! The library binds a re-established first connection to its session for both directions as
//! soon as it is up, and again when a SEQUENCE reply says the callback path is down (sluice
//! sets SEQ4_STATUS_CB_PATH_DOWN_SESSION while a session has no back channel connection).
//! Before, it bound it only with its next COMPOUND, and an idle holder sent none until its
//! lease renewal (a third of the lease, 100 s here), so the writer's OPEN got NFS4ERR_DELAY
//! all that time. The test checks the order, not the time: the holder sent no renewal (no
//! SEQUENCE-only COMPOUND) before its delegation was recalled and returned.
mod common;

use common::*;
use sluice_client::url::NfsUrl;
use sluice_client::v4::{Client, Minor, V4Options};
use sluice_client::ClientOptions;
use sluice_xdr::nfs4::ops::{CommitArgs, NfsArgop4};
use std::time::Duration;

/// Backstop for the writer: it normally ends within a second; without the holder's back
/// channel it would wait for the holder's renewal, 100 s away, and fail here.
const WRITER_TIMEOUT: Duration = Duration::from_secs(60);
/// Bytes the link lets through on one connection in one direction before it resets it: more
/// than connecting and the OPEN take, little enough that a hundred COMMITs cross it.
const RESET_AFTER: &str = "16KiB";
/// COMMITs after which the link must have reset the connection (each moves some 150 bytes
/// each way).
const COMMITS_MAX: usize = 1000;

#[test]
fn an_idle_holder_whose_connection_was_reset_answers_a_recall_before_any_renewal() {
    let dirs = TempDir::new("deleg-reset-v4");
    let export = dirs.path().join("export");
    let state = dirs.path().join("state");
    std::fs::create_dir_all(&export).unwrap();
    std::fs::create_dir_all(&state).unwrap();
    let server = Sluice::start(
        &export,
        &state,
        &["--no-root-squash", "--lease-secs", "300"],
        &dirs.path().join("server.log"),
    );
    let link = Link::start(server.port, &["--reset-after", RESET_AFTER]);
    let path = server.export.join("shared");
    std::fs::write(&path, b"old content\n").unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let url = NfsUrl::parse(&nfs_url_version(link.port, &server.export, "4.1")).unwrap();
        let mut options = ClientOptions::default();
        options.rpc.privileged_port = false;
        let holder = Client::connect(&url, &options, Minor::V1, V4Options::default())
            .await
            .unwrap();
        assert!(holder.back_channel_up());
        let file = format!("{}/shared", url.path.trim_end_matches('/'));
        let (fh, _) = holder.open(&file).await.unwrap();
        assert!(fh.delegation.is_some(), "a sole reader gets a delegation");
        // COMMITs, one COMPOUND each, so that the one cut by the reset is the holder's last.
        let mut commits = 0;
        while holder.transport_stats().reconnects == 0 {
            assert!(
                commits < COMMITS_MAX,
                "no reset after {COMMITS_MAX} COMMITs"
            );
            holder
                .compound(vec![
                    NfsArgop4::Putfh(fh.fh.clone()),
                    NfsArgop4::Commit(CommitArgs {
                        offset: 0,
                        count: 0,
                    }),
                ])
                .await
                .unwrap()
                .ok()
                .unwrap();
            commits += 1;
        }
        assert_eq!(holder.delegations_held(), 1);

        // The holder is idle from here on; the writer goes straight to the server.
        let src = dirs.path().join("new");
        std::fs::write(&src, b"new content\n").unwrap();
        let dest = nfs_url_version(server.port, &path, "4.1");
        let src = src.to_str().unwrap().to_string();
        let status = tokio::task::spawn_blocking(move || {
            let mut cp = SluiceProc::spawn(&["cp", &src, &dest], &[]);
            let status = cp.wait_timeout(WRITER_TIMEOUT);
            (status, cp.stderr_text())
        })
        .await
        .unwrap();
        assert!(status.0.success(), "sluice cp: {}", status.1);
        assert_eq!(holder.delegations_held(), 0, "recalled and returned");
        let renewals = holder
            .stats()
            .get("NFS4", "SEQUENCE")
            .map_or(0, |s| s.calls);
        assert_eq!(
            renewals, 0,
            "the recall reached the holder before any renewal could bind its connection"
        );
        holder.close(&fh).await.unwrap();
        holder.shutdown().await;
    });
    assert_eq!(std::fs::read(&path).unwrap(), b"new content\n");
}
