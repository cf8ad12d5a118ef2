//! NFSv4.1 over a real socket: program 100003 version 4 on the port that serves v3, COMPOUNDs
//! built by hand with `sluice_xdr::nfs4`'s encoders ([`support::nfs4`]) and sent through the
//! test's small RPC client, so what the server answers is exactly what the test sees.
//!
//! # The error paths of RFC 8881 and the test that provokes each
//! The COMPOUND processor's unit tests (`src/nfs4/compound/tests.rs`) run the same paths in
//! process; these run them over TCP, through record marking, the RPC layer and the service.
//!
//! | RFC 8881 | error / behaviour | test |
//! |---|---|---|
//! | §2.10.6.1, §18.46.3 | a retry gets the cached reply byte for byte; nothing runs twice | `a_retried_request_gets_the_cached_reply_byte_for_byte` |
//! | §2.10.6.1.3 | NFS4ERR_SEQ_FALSE_RETRY (same slot and sequence id, other ops) | same |
//! | §2.10.6.1.3 | NFS4ERR_RETRY_UNCACHED_REP on the op after a good SEQUENCE (retry of a reply not cached) | same |
//! | §18.46.3 | NFS4ERR_SEQ_MISORDERED | `slot_and_position_errors`, `a_session_walks_the_pseudo_tree_into_the_export` |
//! | §18.46.3 | NFS4ERR_BADSLOT (slot id past the negotiated `ca_maxrequests`) | `slot_and_position_errors` |
//! | §18.46.3 | NFS4ERR_BADSESSION (unknown session id) | `slot_and_position_errors` |
//! | §2.6.3.1.1.1 | NFS4ERR_SEQUENCE_POS (SEQUENCE not first) | `slot_and_position_errors` |
//! | §2.6.3.1.1.1 | NFS4ERR_OP_NOT_IN_SESSION (no SEQUENCE first) | `slot_and_position_errors` |
//! | §15.1.3.6 | NFS4ERR_OP_ILLEGAL (an undefined op number) | `slot_and_position_errors` |
//! | §2.10.6.4, §15.1.3.9 | NFS4ERR_TOO_MANY_OPS (session's `ca_maxoperations`; the decoder's bound) | `slot_and_position_errors` |
//! | §2.10.6.4 | NFS4ERR_REQ_TOO_BIG (request over `ca_maxrequestsize`) | `request_and_reply_size_limits` |
//! | §2.10.6.4 | NFS4ERR_REP_TOO_BIG, NFS4ERR_REP_TOO_BIG_TO_CACHE | `request_and_reply_size_limits` |
//! | §2.7 | NFS4ERR_MINOR_VERS_MISMATCH (minor version 0) | `minor_version_0_is_mismatched_and_v2_is_prog_mismatch_3_4` |
//! | §8.2.2, §8.2.4 | NFS4ERR_BAD_STATEID, NFS4ERR_OLD_STATEID, NFS4ERR_STALE_STATEID | `stateid_errors` |
//! | §9.7, §18.16.3 | NFS4ERR_SHARE_DENIED between two clients | `share_reservations_between_two_clients` |
//! | §8.3 | an expired client's state kept (courtesy) until another client conflicts | `an_expired_client_keeps_its_open_until_another_client_conflicts` |
//! | §12, §17 | pNFS ops: NFS4ERR_NOTSUPP (no layouts: EXCHANGE_ID says USE_NON_PNFS) | `pnfs_ops_are_not_supported` |
//! | §18 | every op of part 1 at least once | `every_implemented_op_over_tcp` (plus the tests above) |
//! | §18.25 | a removed open file stays readable and writable until its last CLOSE | `an_open_file_stays_usable_after_remove` |
//! | §18.26 | a file renamed over while open keeps its data until its last CLOSE | `a_file_renamed_over_while_open_stays_usable_until_close` |
//! | §18.25 | the last name of an open file removed through another hard link than it was opened by: kept until its last CLOSE | `the_last_link_of_an_open_file_removed_by_another_name_is_kept_until_close` |
//! | §18.35, §18.36, §18.16 | state limits: EXCHANGE_ID / OPEN get NFS4ERR_DELAY, CREATE_SESSION over a client's quota NFS4ERR_NOSPC; room after DESTROY_CLIENTID, DESTROY_SESSION, CLOSE | `state_limits_answer_their_errors_and_recover` |
//! | §18.16.3 | EXCLUSIVE4_1: attributes with the creation; same verifier OK, another EXIST, across a restart | `exclusive4_1_creates_once_and_knows_its_retransmission_after_a_restart` |
//! | §7.3, §4.2.3 | pseudo handles persist across a restart with the same exports, STALE with others | `pseudo_handles_survive_a_restart_and_go_stale_when_the_exports_change` |
//! | §18.25 | parked files are not listed (v4 and v3) and are unlinked at the next start | `parked_files_are_not_listed_and_a_restart_unlinks_them` |
//! | §18.30, §18.25 | SETATTR of the size and REMOVE right after held UNSTABLE writes: OK, not NFS4ERR_DELAY | `truncate_and_remove_right_after_unstable_writes_are_not_delayed` |
//!
//! | §18.29, §18.45 | SECINFO on names (pseudo tree and export; NOENT, NOTDIR, NOFILEHANDLE; the handle consumed), SECINFO_NO_NAME's PARENT style | `secinfo_state_protection_and_set_ssv_answer_as_knfsd` |
//! | §18.35.4 | SP4_NONE granted; SP4_MACH_CRED over AUTH_SYS NFS4ERR_INVAL, SP4_SSV NFS4ERR_ENCR_ALG_UNSUPP (knfsd's answers) | same |
//! | §18.47 | SET_SSV: NFS4ERR_NOTSUPP (no client id has an SSV; knfsd's op table answers the same) | same |
//!
//! | §18.33 | BACKCHANNEL_CTL in a session: OK | same (the program it sets: `compound/tests.rs`) |
//!
//! The back channel's probe and its SEQUENCE flags are tested in `nfs4_callback.rs`; LOCK,
//! LOCKT and LOCKU in `nfs4_locks.rs`; the 4.2 ops in `nfs42_ops/`.
//!
//! `tshark_dissects_a_v41_session` captures one whole session on loopback (with one 4.2
//! COMPOUND: READ_PLUS of a sparse file, holes and data, chunked and spliced) and has Wireshark's
//! dissector judge it (`tests/peers/tshark-check.sh`): no malformed packet, every call
//! answered, the ops seen.
//!
//! The tests live by role in the files beside this one (the names in the table are under
//! their file's module): `basics.rs` (the v4 program on the v3 port, the walk a mount makes,
//! versions, the lease driver, the data path), `sessions.rs`, `open_state.rs`,
//! `removed_while_open.rs`, `ops.rs` (every op of part 1, SECINFO, pNFS), `splice.rs` (a READ
//! spliced from a local file) and `tshark.rs`; the imports and helpers they share are in
//! `common.rs`.

#[macro_use]
#[path = "../support/mod.rs"]
mod support;

mod common;
use common::*;

mod basics;
mod open_state;
mod ops;
mod removed_while_open;
mod sessions;
mod splice;
mod tshark;
