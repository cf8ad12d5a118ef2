//! Fuzzes the nfs3 decoders (nfs3_args): they must return a value or a DecodeError, never panic,
//! on any input. The first byte picks the procedure.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_xdr::{nfs3, Reader};

#[path = "common.rs"]
mod common;

fuzz_target!(|data: &[u8]| {
    let Some((selector, segs)) = common::split_input(data) else {
        return;
    };
    let proc_ = u32::from(selector % (22 + 1)); // one past the last: the unknown-procedure path
    let _ = nfs3::decode_args(proc_, &mut Reader::new(&segs));
});
