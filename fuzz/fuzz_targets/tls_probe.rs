//! Fuzzes the pre-TLS path of RPC-with-TLS (tls_probe): what the server looks at before any
//! handshake (`tls::is_probe` on a connection's first record, after record marking) and what
//! the client checks of the answer (`tls::check_probe_reply`). Any bytes give a verdict,
//! never a panic; a record that is a probe answers it with a reply the client accepts.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_rpc::record::{RecordDecoder, RecordDecoderConfig};
use sluice_rpc::tls::{check_probe_reply, is_probe, starttls_reply};

#[path = "common.rs"]
mod common;

fuzz_target!(|data: &[u8]| {
    let Some((selector, segs)) = common::split_input(data) else {
        return;
    };
    // Byte 0 also picks the xid the client expects, so matching and mismatching replies both
    // come up.
    let xid = u32::from(selector & 3);
    let _ = check_probe_reply(&segs, xid);
    if let Some(x) = is_probe(&segs) {
        check_probe_reply(&starttls_reply(x), x).expect("a probe's STARTTLS reply is accepted");
    }
    // The same bytes as they arrive on a socket: record-marked, maybe in two pieces. The
    // probe reply's bound (512 bytes) is what the client's decoder is built with.
    let mut dec = RecordDecoder::new(RecordDecoderConfig {
        max_record_bytes: 512,
        ..RecordDecoderConfig::default()
    });
    for s in segs {
        dec.push(s);
        while let Ok(Some(rec)) = dec.next_record() {
            let _ = is_probe(&rec);
            let _ = check_probe_reply(&rec, xid);
        }
    }
});
