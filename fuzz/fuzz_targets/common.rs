//! Shared by the fuzz targets: turns the fuzzer's input into a procedure number and a record
//! split into segments, so the decoders' segment-crossing paths are exercised too.

use bytes::Bytes;

/// Input layout: `[selector, cut, rest...]`. `selector` picks the procedure; `rest` is the
/// record, cut into two segments at `cut` (modulo its length + 1).
pub fn split_input(data: &[u8]) -> Option<(u8, Vec<Bytes>)> {
    let (&selector, data) = data.split_first()?;
    let (&cut, rest) = data.split_first()?;
    let rest = Bytes::copy_from_slice(rest);
    let at = cut as usize % (rest.len() + 1);
    Some((selector, vec![rest.slice(..at), rest.slice(at..)]))
}
