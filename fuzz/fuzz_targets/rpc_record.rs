//! Fuzzes TCP record marking and call parsing: the input is pushed into a `RecordDecoder` in
//! pieces whose sizes come from the input, and every record it yields goes through `classify`
//! (CALL or REPLY), `parse_call` and the reply chosen for it, and the reply matching of a table
//! of outgoing calls (the callbacks) whose XIDs the input may hit. Any input must end in records, an error, or a wait for more
//! bytes; never a panic, and never a record larger than the configured limit.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use sluice_rpc::record::{RecordDecoder, RecordDecoderConfig};
use sluice_rpc::client::ProcId;
use sluice_rpc::duplex::{classify, OutgoingCalls, OutgoingConfig};
use sluice_rpc::server::{parse_call, reply_for};
use sluice_xdr::rpc::OpaqueAuth;
use std::time::{Duration, Instant};

const MAX_RECORD: usize = 64 * 1024;

fuzz_target!(|data: &[u8]| {
    let Some((&step, rest)) = data.split_first() else {
        return;
    };
    let step = (step as usize % 61) + 1;
    let mut dec = RecordDecoder::new(RecordDecoderConfig {
        max_record_bytes: MAX_RECORD,
        max_fragments_per_record: 64,
    });
    // Outgoing calls with small XIDs (0, 1, ...), sent, so fuzzed replies can match them.
    let now = Instant::now();
    let mut out = OutgoingCalls::new(OutgoingConfig::default(), 0);
    let cb = ProcId {
        prog: 0x4000_0000,
        vers: 1,
        proc_: 1,
    };
    for _ in 0..4 {
        let _ = out.start_call(now, cb, &OpaqueAuth::none(), vec![], Duration::from_secs(1));
    }
    while out.poll_transmit(now).is_some() {}
    for piece in rest.chunks(step) {
        dec.push(Bytes::copy_from_slice(piece));
        loop {
            match dec.next_record() {
                Ok(Some(rec)) => {
                    let len: usize = rec.iter().map(|s| s.len()).sum();
                    assert!(len <= MAX_RECORD, "record of {len} bytes passed a {MAX_RECORD} limit");
                    let _ = classify(&rec);
                    let parsed = parse_call(&rec);
                    let _ = reply_for(&parsed);
                    if let Some(done) = out.handle_reply(now, rec) {
                        if let Ok(reply) = done.result {
                            let _ = reply.results().remaining();
                        }
                    }
                }
                Ok(None) => break,
                Err(_) => return,
            }
        }
    }
});
