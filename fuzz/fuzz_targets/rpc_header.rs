//! Fuzzes the RPC message header decoder and the AUTH_SYS credential decoder: any input must
//! give a value or a DecodeError, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_xdr::rpc::{AuthSys, MsgHeader, OpaqueAuth};
use sluice_xdr::{Reader, Unpack};

#[path = "common.rs"]
mod common;

fuzz_target!(|data: &[u8]| {
    let Some((_, segs)) = common::split_input(data) else {
        return;
    };
    let mut r = Reader::new(&segs);
    if let Ok(MsgHeader::Call { call, .. }) = MsgHeader::unpack(&mut r) {
        // A decoded call header's credential body is itself untrusted input.
        let _ = AuthSys::from_opaque_auth(&call.cred);
    }
    let _ = AuthSys::unpack(&mut Reader::new(&segs));
    let _ = OpaqueAuth::unpack(&mut Reader::new(&segs));
});
