//! The hand-made `nfs4_compound` fuzz seeds (`fuzz/regressions/nfs4_compound/v42-*`) are seeds
//! only if they decode: each must come out as a COMPOUND (request or reply, by its first byte,
//! as `fuzz/fuzz_targets/common.rs` lays inputs out) with no undecodable op, and every
//! attribute list in it must decode whole. A seed that stopped decoding (an op's arguments
//! changed shape) would silently start every fuzz run outside the decoders it was made for.

use bytes::Bytes;
use sluice_xdr::nfs4::attrs::AttrValues;
use sluice_xdr::nfs4::compound::{Compound4Args, Compound4Res, CompoundLimits};
use sluice_xdr::nfs4::ops::{NfsArgop4, NfsResop4, Res4};
use sluice_xdr::nfs4::Fattr4;
use sluice_xdr::Reader;
use std::path::Path;

fn attrs_decode_whole(f: &Fattr4, seed: &str) {
    let d = AttrValues::decode(f).unwrap_or_else(|e| panic!("{seed}: fattr4 {e:?}"));
    assert!(
        d.undecoded.is_empty(),
        "{seed}: undecoded {:?}",
        d.undecoded
    );
}

#[test]
fn the_hand_made_nfs4_compound_seeds_decode() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/regressions/nfs4_compound");
    let mut seen = 0;
    for e in std::fs::read_dir(&dir).unwrap() {
        let path = e.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        if !name.starts_with("v42-") {
            continue;
        }
        let data = std::fs::read(&path).unwrap();
        let (selector, rest) = (data[0], Bytes::copy_from_slice(&data[2..]));
        let segs = [rest];
        let limits = CompoundLimits::default();
        if selector & 1 == 0 {
            let args = Compound4Args::decode(&mut Reader::new(&segs), &limits)
                .unwrap_or_else(|e| panic!("{name}: {e:?}"));
            for op in &args.ops {
                match op {
                    NfsArgop4::Illegal(_) | NfsArgop4::BadXdr(..) => panic!("{name}: {op:?}"),
                    NfsArgop4::Verify(f) | NfsArgop4::Nverify(f) => attrs_decode_whole(f, &name),
                    NfsArgop4::Setattr(a) => attrs_decode_whole(&a.obj_attributes, &name),
                    _ => {}
                }
            }
            assert!(!args.ops.is_empty(), "{name}");
        } else {
            let res = Compound4Res::decode(&mut Reader::new(&segs), &limits)
                .unwrap_or_else(|e| panic!("{name}: {e:?}"));
            for r in &res.results {
                if let NfsResop4::Getattr(Res4::Ok(f)) = r {
                    attrs_decode_whole(f, &name);
                }
            }
            assert!(!res.results.is_empty(), "{name}");
        }
        seen += 1;
    }
    assert!(seen >= 4, "only {seen} v42 seeds in {}", dir.display());
}
