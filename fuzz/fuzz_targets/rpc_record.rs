//! Fuzzes TCP record marking and call parsing: the input is pushed into a `RecordDecoder` in
//! pieces whose sizes come from the input, and every record it yields goes through `parse_call`
//! and the reply chosen for it. Any input must end in records, an error, or a wait for more
//! bytes; never a panic, and never a record larger than the configured limit.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use sluice_rpc::record::{RecordDecoder, RecordDecoderConfig};
use sluice_rpc::server::{parse_call, reply_for};

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
    for piece in rest.chunks(step) {
        dec.push(Bytes::copy_from_slice(piece));
        loop {
            match dec.next_record() {
                Ok(Some(rec)) => {
                    let len: usize = rec.iter().map(|s| s.len()).sum();
                    assert!(len <= MAX_RECORD, "record of {len} bytes passed a {MAX_RECORD} limit");
                    let parsed = parse_call(&rec);
                    let _ = reply_for(&parsed);
                }
                Ok(None) => break,
                Err(_) => return,
            }
        }
    }
});
