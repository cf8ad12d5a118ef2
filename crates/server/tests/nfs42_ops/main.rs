//! The NFSv4.2 operations over a real socket (RFC 7862): SEEK, ALLOCATE, DEALLOCATE, COPY and
//! CLONE, each with its error paths, through record marking, the RPC layer and the service, on
//! a LocalFs export (ext4 or tmpfs here: holes and `copy_file_range`, but no reflinks; CLONE
//! that works runs on an XFS image on a loop device).
//!
//! | RFC 7862 | error / behaviour | test |
//! |---|---|---|
//! | §15 (RFC 8881 §16.2.3) | the 4.2 ops in a 4.1 COMPOUND: NFS4ERR_OP_ILLEGAL | `v42_ops_are_illegal_in_minor_version_1` |
//! | §15.11 | SEEK_DATA / SEEK_HOLE; NXIO at or past the end; `sr_eof`; UNION_NOTSUPP | `seek_finds_data_and_holes` |
//! | §15.11 | SEEK on a directory: ISDIR; a bad stateid: BAD_STATEID | `seek_finds_data_and_holes` |
//! | §15.1, §15.4 | ALLOCATE extends, DEALLOCATE punches and keeps the size | `allocate_and_deallocate_change_space_not_contents` |
//! | §15.1, §15.4 | a read-only open: OPENMODE; a read-only export: ROFS; a directory: WRONG_TYPE | `allocate_and_deallocate_change_space_not_contents`, `allocate_on_a_read_only_export_is_rofs` |
//! | §15.2 | synchronous COPY, UNSTABLE with the write verifier, COMMIT after | `copy_copies_within_the_export` |
//! | §15.2 | COPY: source past its end INVAL, a directory WRONG_TYPE, no saved handle NOFILEHANDLE, bad stateid, inter-server NOTSUPP | `copy_error_paths` |
//! | §15.2 | COPY between two exports: XDEV | `copy_between_exports_is_xdev` |
//! | §15.13 | CLONE: NOTSUPP without reflinks (or the range shared where there are) | `clone_shares_or_is_not_supported` |
//! | §15.13, §12.2.1 | CLONE on XFS with reflinks (a loop device, `tests/peers/reflink-fs.sh`; fails saying why where there are none, unless `SLUICE_TEST_SKIP` names `reflink`): `clone_blksize` the block size there and 0 on ext4; whole file and aligned range share extents (FIEMAP) with the right bytes; misaligned offsets, a length neither whole blocks nor to the end, a source offset past the end, overlapping ranges of one file INVAL; across exports XDEV | `clone_on_a_reflink_file_system_shares_extents_and_checks_ranges` |
//! | §15.11, §15.2 | SEEK and COPY right after UNSTABLE WRITEs see the written data (held writes land first) | `seek_and_copy_right_after_unstable_writes_see_the_data` |
//! | | each op counted by name in the per-op statistics, errors apart | `the_v42_ops_are_counted_in_the_per_op_stats` |
//! | §15.3, §15.10 | COPY_NOTIFY: NOTSUPP; READ_PLUS too with `--no-read-plus` | `copy_notify_is_not_supported_nor_read_plus_when_turned_off` |
//! | §15.10 | READ_PLUS: holes of 64 KiB or more as ranges, data as bytes, ranges starting and ending in holes, eof, past the end | `read_plus_sends_holes_as_ranges` |
//! | §15.10 | READ_PLUS of dense ranges (and small holes) as one data segment, spliced or not; a file of one hole; held writes land first | `read_plus_of_dense_files_all_holes_and_held_writes` |
//! | §15.10 | READ_PLUS: NOFILEHANDLE, ISDIR, BAD_STATEID, OP_ILLEGAL in 4.1, the anonymous stateid | `read_plus_error_paths` |
//! | §15.8, §15.9 | OFFLOAD_CANCEL, OFFLOAD_STATUS of a stateid that is no copy's (an open stateid): BAD_STATEID | `offload_ops_know_no_copy` |
//! | §15.2, §15.9, §16.1, §4.8 | a large COPY with `ca_synchronous` false over a session with a back channel: a copy stateid at once, OFFLOAD_STATUS, CB_OFFLOAD with the count, UNSTABLE and the verifier, the copy equal to the source, the stateid gone once CB_OFFLOAD is answered (OFFLOAD_STATUS / OFFLOAD_CANCEL BAD_STATEID, also for an unknown one); asked synchronously or without a back channel: synchronous | `offload::a_large_copy_is_asynchronous_and_ends_in_cb_offload` |
//! | §15.8 | OFFLOAD_CANCEL between chunks, no CB_OFFLOAD; TEST_STATEID / FREE_STATEID of a copy stateid (in process, the driver's jobs held by the test) | `nfs4::compound::v42::tests::an_async_copy_is_cancelled_between_chunks_or_ends_in_cb_offload` (lib) |
//! | §12.2 | `clone_blksize`, `space_freed`, `change_attr_type` advertised and answered in 4.2 only; VERIFY of one in 4.1 ATTRNOTSUPP | `v42_attributes_exist_in_minor_version_2_only` |
//!
//! The tests live by role in the files beside this one (the names in the table are under
//! their file's module): `protocol.rs` (the 4.2 ops as a whole: minor versions, the
//! unsupported ones, statistics, attributes), `seek_and_space.rs`, `copy.rs`, `offload.rs`,
//! `read_plus.rs` and `clone.rs`; the helpers more than one of them uses are at the end of
//! this file.

#[macro_use]
#[path = "../support/mod.rs"]
mod support;
#[path = "../../../../tests/support/needs.rs"]
mod needs;

use bytes::Bytes;
use sluice_xdr::nfs4::attrs::num;
use sluice_xdr::nfs4::ops::{
    AllocateArgs, CloneArgs, CommitArgs, CopyArgs, CopyNotifyArgs, CopyRes, Netloc4, NetlocList,
    NfsArgop4, NfsResop4, ReadPlusArgs, ReadPlusContent, Res4, SeekArgs, SeekResOk, WriteArgs,
    OPEN4_SHARE_ACCESS_BOTH, OPEN4_SHARE_ACCESS_READ,
};
use sluice_xdr::nfs4::{Bitmap4, NfsFh4, Nfsstat4, StableHow4, Stateid4, Utf8Str};
use std::os::unix::fs::FileExt;
use support::nfs4::*;
use support::{rw, with_options, TestServer};

mod clone;
mod copy;
mod offload;
mod protocol;
mod read_plus;
mod seek_and_space;

/// The block size of the file systems the tests run on: holes are whole blocks.
const BLOCK: u64 = 4096;
const DATA: u32 = 0;
const HOLE: u32 = 1;

async fn send42(v: &mut V4, ops: Vec<NfsArgop4>) -> sluice_xdr::nfs4::compound::Compound4Res {
    v.send_minor(2, ops).await
}

fn seek_op(stateid: Stateid4, offset: u64, what: u32) -> NfsArgop4 {
    NfsArgop4::Seek(SeekArgs {
        stateid,
        offset,
        what,
    })
}

async fn seek(v: &mut V4, fh: &NfsFh4, sid: Stateid4, offset: u64, what: u32) -> Res4<SeekResOk> {
    let res = send42(
        v,
        vec![NfsArgop4::Putfh(fh.clone()), seek_op(sid, offset, what)],
    )
    .await;
    match res.results.last() {
        Some(NfsResop4::Seek(r)) => r.clone(),
        other => panic!("{other:?} in {res:?}"),
    }
}

fn alloc(stateid: Stateid4, offset: u64, length: u64) -> AllocateArgs {
    AllocateArgs {
        stateid,
        offset,
        length,
    }
}

fn size_of(res: &sluice_xdr::nfs4::compound::Compound4Res) -> u64 {
    attrs(res.results.last().unwrap()).size.unwrap()
}

fn getattr_size() -> NfsArgop4 {
    NfsArgop4::Getattr(Bitmap4::from_bits(&[num::SIZE]))
}

fn copy_op(src: Stateid4, dst: Stateid4, src_offset: u64, dst_offset: u64, count: u64) -> CopyArgs {
    CopyArgs {
        src_stateid: src,
        dst_stateid: dst,
        src_offset,
        dst_offset,
        count,
        consecutive: false,
        synchronous: false,
        source_server: NetlocList(Vec::new()),
    }
}
