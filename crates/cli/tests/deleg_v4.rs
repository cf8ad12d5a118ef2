//! Delegations end to end (issue #14): `sluice serve` as a process; a holder, the sluice v4
//! client library in this process with its back channel, that opens a file for reading and
//! keeps it open under a read delegation; and a writer, a second client in its own `sluice cp`
//! process, that overwrites the file over NFSv4.1. The server recalls the holder's delegation
//! (CB_RECALL), the holder returns it, the writer's OPEN gets through after NFS4ERR_DELAY, and
//! both see the new content. `sluice stats` (its own process too) shows the delegation held,
//! then the recall sent and answered.
//!
//! The same with the writer over NFSv3 (`?version=3`): its change is answered NFS3ERR_JUKEBOX
//! while the server recalls the delegation, and the sluice v3 client sends it again after a
//! pause until it goes through.
mod servers;

use servers::*;
use sluice_client::url::NfsUrl;
use sluice_client::v4::{Client, Minor, V4Options};
use sluice_client::ClientOptions;
use sluice_xdr::nfs4::ops::{NfsArgop4, NfsResop4, ReadArgs, Res4};
use std::process::Command;
use std::time::{Duration, Instant};

const LIMIT: Duration = Duration::from_secs(30);

fn stats(metrics: &str) -> String {
    let out = Command::new(SluiceServer::binary())
        .args(["stats", metrics])
        .output()
        .expect("run sluice stats");
    assert!(out.status.success(), "sluice stats: {out:?}");
    String::from_utf8(out.stdout).expect("utf-8")
}

#[test]
fn a_read_delegation_is_recalled_by_another_clients_write_and_both_see_the_new_data() {
    recalled_by_a_writer_over("4.1");
}

#[test]
fn a_read_delegation_is_recalled_by_an_nfsv3_writer_which_retries_after_jukebox() {
    recalled_by_a_writer_over("3");
}

/// The scenario of the module notes, with the writer's `sluice cp` over NFS `version`.
fn recalled_by_a_writer_over(version: &str) {
    let metrics = format!("127.0.0.1:{}", free_port());
    let server = SluiceServer::start_with(&SluiceServer::binary(), &["--metrics", &metrics], true);
    let path = server.export_dir().join("shared");
    std::fs::write(&path, b"old content\n").unwrap();
    let rt = runtime();
    rt.block_on(async {
        let url = NfsUrl::parse(&format!("{}?version=4.1", server.url(""))).unwrap();
        let holder = Client::connect(
            &url,
            &ClientOptions::default(),
            Minor::V1,
            V4Options::default(),
        )
        .await
        .unwrap();
        let t0 = Instant::now();
        while !holder.back_channel_up() {
            assert!(t0.elapsed() < LIMIT, "the holder's back channel comes up");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let file = format!("{}/shared", url.path.trim_end_matches('/'));
        let (fh, _) = holder.open(&file).await.unwrap();
        assert!(
            fh.delegation.is_some(),
            "a sole reader gets a read delegation"
        );
        assert_eq!(holder.delegations_held(), 1);
        let text = tokio::task::spawn_blocking({
            let m = metrics.clone();
            move || stats(&m)
        })
        .await
        .unwrap();
        assert!(
            text.contains("nfs v4 delegations: 1 read, 0 write"),
            "{text}"
        );

        // The writer, in its own process, overwrites the file while the holder keeps it open.
        let local = TempDir::new("deleg-writer");
        let src = local.path().join("new");
        std::fs::write(&src, b"new content, longer than the old\n").unwrap();
        let dest = server.url(&format!("/shared?version={version}"));
        let out = tokio::task::spawn_blocking(move || {
            Command::new(SluiceServer::binary())
                .args(["cp", src.to_str().unwrap(), &dest])
                .output()
                .expect("run sluice cp")
        })
        .await
        .unwrap();
        assert!(out.status.success(), "sluice cp over {version}: {out:?}");

        // The holder was called back and returned the delegation; its open still reads, and
        // sees the writer's data.
        assert_eq!(holder.delegations_held(), 0, "recalled and returned");
        let res = holder
            .compound(vec![
                NfsArgop4::Putfh(fh.fh.clone()),
                NfsArgop4::Read(ReadArgs {
                    stateid: fh.stateid,
                    offset: 0,
                    count: 1024,
                }),
            ])
            .await
            .unwrap()
            .ok()
            .unwrap();
        let Some(NfsResop4::Read(Res4::Ok(r))) = res.get(1) else {
            panic!("{res:?}")
        };
        let data: Vec<u8> = r
            .data
            .chunks()
            .iter()
            .flat_map(|c| c.iter().copied())
            .collect();
        assert_eq!(data, b"new content, longer than the old\n");
        holder.close(&fh).await.unwrap();
        holder.shutdown().await;
    });
    assert_eq!(
        std::fs::read(&path).unwrap(),
        b"new content, longer than the old\n"
    );
    let text = stats(&metrics);
    assert!(text.contains("nfs v4 delegations: 0 read, 0 write; recalls: 1 sent, 1 answered, 0 timed out; 0 revoked"), "{text}");
}
