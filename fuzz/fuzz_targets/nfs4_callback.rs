//! Fuzzes the NFSv4.1 callback program's decoders (nfs4_callback): CB_COMPOUND calls (client
//! side) and replies (server side) decode to a value or an error, never panic, and what decodes
//! re-encodes to the same value. Byte 0 picks the direction and the op-count cap.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_xdr::nfs4::callback::{CbArgop4, CbCompound4Args, CbCompound4Res};
use sluice_xdr::nfs4::compound::CompoundLimits;
use sluice_xdr::{to_bytes, Reader};

#[path = "common.rs"]
mod common;

fuzz_target!(|data: &[u8]| {
    let Some((selector, segs)) = common::split_input(data) else {
        return;
    };
    let limits = CompoundLimits {
        ops_max: if selector & 2 == 0 { 128 } else { 3 },
        ..CompoundLimits::default()
    };
    if selector & 1 == 0 {
        let Ok(args) = CbCompound4Args::decode(&mut Reader::new(&segs), &limits) else {
            return;
        };
        let clean = args
            .ops
            .iter()
            .all(|op| !matches!(op, CbArgop4::Illegal(_) | CbArgop4::BadXdr(..)));
        if clean {
            let b = to_bytes(&args);
            let again = CbCompound4Args::decode(&mut Reader::from_bytes(&b), &limits)
                .expect("a decoded CB_COMPOUND re-encodes to a decodable one");
            assert_eq!(again, args);
        }
    } else {
        let Ok(res) = CbCompound4Res::decode(&mut Reader::new(&segs), &limits) else {
            return;
        };
        let b = to_bytes(&res);
        let again = CbCompound4Res::decode(&mut Reader::from_bytes(&b), &limits)
            .expect("a decoded CB_COMPOUND reply re-encodes to a decodable one");
        assert_eq!(again, res);
    }
});
