//! Fuzzes the NFSv4.1/4.2 COMPOUND decoders (nfs4_compound): requests (server side) and replies
//! (client side) must decode to a value or an error, never panic, and whatever decodes must
//! encode back to something that decodes to the same value. Attribute lists inside the ops go
//! through the typed attribute codec too. Byte 0 picks the direction and the op-count cap.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_xdr::nfs4::attrs::AttrValues;
use sluice_xdr::nfs4::compound::{Compound4Args, Compound4Res, CompoundLimits};
use sluice_xdr::nfs4::ops::{NfsArgop4, NfsResop4, Res4};
use sluice_xdr::{to_bytes, Reader};

#[path = "common.rs"]
mod common;

fuzz_target!(|data: &[u8]| {
    let Some((selector, segs)) = common::split_input(data) else {
        return;
    };
    // A small cap now and then, so the too-many-ops path is reached with short inputs.
    let limits = CompoundLimits {
        ops_max: if selector & 2 == 0 { 128 } else { 3 },
        ..CompoundLimits::default()
    };
    if selector & 1 == 0 {
        let Ok(args) = Compound4Args::decode(&mut Reader::new(&segs), &limits) else {
            return;
        };
        let clean = args
            .ops
            .iter()
            .all(|op| !matches!(op, NfsArgop4::Illegal(_) | NfsArgop4::BadXdr(..)));
        for op in &args.ops {
            match op {
                NfsArgop4::Setattr(a) => {
                    let _ = AttrValues::decode(&a.obj_attributes);
                }
                NfsArgop4::Verify(f) | NfsArgop4::Nverify(f) => {
                    let _ = AttrValues::decode(f);
                }
                _ => {}
            }
        }
        if clean {
            let b = to_bytes(&args);
            let again = Compound4Args::decode(&mut Reader::from_bytes(&b), &limits)
                .expect("a decoded COMPOUND re-encodes to a decodable one");
            assert_eq!(again, args);
        }
    } else {
        let Ok(res) = Compound4Res::decode(&mut Reader::new(&segs), &limits) else {
            return;
        };
        for r in &res.results {
            if let NfsResop4::Getattr(Res4::Ok(f)) = r {
                let _ = AttrValues::decode(f);
            }
        }
        let b = to_bytes(&res);
        let again = Compound4Res::decode(&mut Reader::from_bytes(&b), &limits)
            .expect("a decoded reply re-encodes to a decodable one");
        assert_eq!(again, res);
    }
});
