//! Fuzzes the NLM v4 decoders (nlm): they must return a value or a DecodeError, never panic,
//! on any input. The first byte picks the procedure.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_xdr::{nlm, Reader};

#[path = "common.rs"]
mod common;

fuzz_target!(|data: &[u8]| {
    let Some((selector, segs)) = common::split_input(data) else {
        return;
    };
    let proc_ = u32::from(selector % (24 + 1)); // one past the last: the unknown-procedure path
    let _ = nlm::decode_args(proc_, &mut Reader::new(&segs));
    let _ = nlm::decode_res(proc_, &mut Reader::new(&segs));
});
