//! Scenarios run against every server (ganesha, sluice).
use crate::common::*;
use sluice_client::{Client, ClientOptions};
use std::time::Instant;

pub async fn all(s: &dyn Server) {
    let t = Instant::now();
    library_round_trip(s).await;
    eprintln!("[{}] all scenarios passed in {:?}", s.name(), t.elapsed());
}

async fn library_round_trip(s: &dyn Server) {
    let c = Client::connect(&s.url(""), ClientOptions::default())
        .await
        .unwrap();
    let data: Vec<u8> = (0..(1u32 << 20) + 1).map(|i| (i * 7 % 251) as u8).collect();
    let f = c.create_file("/lib.bin", 0o644).await.unwrap();
    let mut w = f.writer();
    w.write(&data).await.unwrap();
    assert_eq!(w.finish().await.unwrap(), data.len() as u64);
    assert_eq!(std::fs::read(s.export_dir().join("lib.bin")).unwrap(), data);
    let f = c.open("/lib.bin").await.unwrap();
    assert_eq!(f.size(), data.len() as u64);
    assert_eq!(f.read_all().await.unwrap(), data);
    eprintln!(
        "[{}] library round trip ok; stats:\n{}",
        s.name(),
        c.stats()
    );
}
