//! Test support shared by the server's own tests and the simulator (`sluice-sim`): one NFSv4.1
//! session client, so that EXCHANGE_ID + CREATE_SESSION (+ RECLAIM_COMPLETE), the channel
//! attributes and the numbering of SEQUENCEs are written once.
//!
//! # RECLAIM_COMPLETE
//! A 4.1 client must send RECLAIM_COMPLETE before it opens or locks anything anew (RFC 8881
//! §18.51.3; the server answers NFS4ERR_GRACE until it does, `sluice_nfs4state::recovery`).
//! [`Session4::establish`] sends it, as a client with nothing to reclaim does, unless
//! [`SessionConfig::reclaim_complete`] is off (a test that reclaims first). It goes on the
//! session's highest slot ([`Session4::reclaim_complete`]): a test that numbers slot 0 itself
//! then finds it fresh (its first sequence id is 1), as it did before the server asked for
//! RECLAIM_COMPLETE; with one slot that is slot 0, whose next sequence id
//! [`Session4::seqid`] tells.
//!
//! It lives in the server crate, behind the `testkit` cargo feature (on in the server's own
//! unit tests; its integration tests and the simulator turn it on through their
//! dependencies), because all its users can reach it there: the simulator depends on the
//! server, so a client in the simulator could not serve the server's tests without a
//! dependency cycle. Production builds leave the feature off and compile none of it.
//!
//! The shape is quinn-proto's test `Pair`: set-up done once ([`Session4::establish`]), then
//! each COMPOUND is sent with the next sequence id of its slot, tracked here
//! ([`Session4::sequence`]). The client does not own a transport: it is handed a `send`
//! function (an encoded COMPOUND's ops in, its decoded result out), so the same client runs
//! in-process through the one driver loop ([`Direct`]) or over any wire a test has.

use crate::nfs4::compound::{drive_ready, Inline, Nfs4, Outcome, Sender};
use crate::nfs4::data::DataOps;
use bytes::Bytes;
use sluice_nfs4state::ConnId;
use sluice_rpc::server::Credentials;
use sluice_xdr::nfs4::compound::{Compound4Args, Compound4Res, CompoundLimits};
use sluice_xdr::nfs4::ops::{
    CallbackSecParmsList, ChannelAttrs4, ClientOwner4, CreateSessionArgs, CreateSessionResOk,
    ExchangeIdArgs, ExchangeIdResOk, ImplIdList, NfsArgop4, NfsResop4, Res4, SequenceArgs,
    StateProtect4A,
};
use sluice_xdr::nfs4::{Nfsstat4, Opaque4, SessionId4, Utf8Str};
use sluice_xdr::{Pack, Reader, Writer};
use std::sync::Arc;
use std::time::Instant;

/// The callback program number test sessions name (any value works: the server answers on the
/// back channel with whatever the client gave).
pub const CB_PROGRAM: u32 = 0x4000_0000;

pub use sluice_nfs4state::testkit::channel_attrs;

/// EXCHANGE_ID for owner `owner` with boot verifier `verifier` and no flags.
pub fn exchange_id(owner: &[u8], verifier: [u8; 8]) -> NfsArgop4 {
    NfsArgop4::ExchangeId(ExchangeIdArgs {
        clientowner: ClientOwner4 {
            verifier,
            ownerid: Opaque4(Bytes::copy_from_slice(owner)),
        },
        flags: 0,
        state_protect: StateProtect4A::None,
        client_impl_id: ImplIdList(Vec::new()),
    })
}

/// CREATE_SESSION as `cfg` says, for the client EXCHANGE_ID answered with `e`.
pub fn create_session(e: &ExchangeIdResOk, cfg: &SessionConfig) -> NfsArgop4 {
    create_session_for(e.clientid, e.sequenceid, cfg)
}

/// CREATE_SESSION as `cfg` says for client `clientid` with sequence id `sequence` (a test of
/// CREATE_SESSION's own replay and misordering picks them itself).
pub fn create_session_for(clientid: u64, sequence: u32, cfg: &SessionConfig) -> NfsArgop4 {
    NfsArgop4::CreateSession(CreateSessionArgs {
        clientid,
        sequence,
        flags: cfg.flags,
        fore_chan_attrs: cfg.fore.clone().unwrap_or_else(|| channel_attrs(cfg.slots)),
        back_chan_attrs: channel_attrs(cfg.slots),
        cb_program: CB_PROGRAM,
        sec_parms: cfg.cb_sec.clone(),
    })
}

/// How a [`Session4`] is set up.
#[derive(Debug, Clone)]
pub struct SessionConfig {
    /// The client owner (`co_ownerid`).
    pub owner: Bytes,
    pub verifier: [u8; 8],
    /// Slots asked for, each way.
    pub slots: u32,
    /// The fore channel asked for, when not [`channel_attrs`]`(slots)` (a test of the
    /// server's limits).
    pub fore: Option<ChannelAttrs4>,
    /// CREATE_SESSION's flags (`CREATE_SESSION4_FLAG_CONN_BACK_CHAN` for a back channel on
    /// this connection).
    pub flags: u32,
    /// How the server is to authenticate its callbacks.
    pub cb_sec: CallbackSecParmsList,
    /// [`Session4::establish`] sends RECLAIM_COMPLETE (on by default; off for a client that
    /// reclaims first).
    pub reclaim_complete: bool,
}

impl SessionConfig {
    /// Owner `owner`, verifier all ones, `slots` slots, no back channel.
    pub fn new(owner: &[u8], slots: u32) -> Self {
        SessionConfig {
            owner: Bytes::copy_from_slice(owner),
            verifier: [1; 8],
            slots,
            fore: None,
            flags: 0,
            cb_sec: CallbackSecParmsList(Vec::new()),
            reclaim_complete: true,
        }
    }
}

/// One client with one session, numbering its SEQUENCEs itself.
#[derive(Debug, Clone)]
pub struct Session4 {
    pub clientid: u64,
    pub sessionid: SessionId4,
    /// What CREATE_SESSION granted.
    pub granted: CreateSessionResOk,
    /// The last sequence id sent on each slot (0: none yet).
    seqids: Vec<u32>,
}

impl Session4 {
    /// EXCHANGE_ID, then CREATE_SESSION, each as a COMPOUND of its own through `send`, then
    /// (unless `cfg` says not to) RECLAIM_COMPLETE ([`Session4::reclaim_complete`]).
    ///
    /// # Panics
    /// When any fails (RECLAIM_COMPLETE may answer COMPLETE_ALREADY: a client of the same owner
    /// and verifier set up before sent it): a test that expects a failure sends the ops itself.
    pub fn establish(
        cfg: &SessionConfig,
        mut send: impl FnMut(Vec<NfsArgop4>) -> Compound4Res,
    ) -> Self {
        let res = send(vec![exchange_id(&cfg.owner, cfg.verifier)]);
        let Some(NfsResop4::ExchangeId(Res4::Ok(e))) = res.results.first() else {
            panic!("EXCHANGE_ID failed: {res:?}")
        };
        let res = send(vec![create_session(e, cfg)]);
        let Some(NfsResop4::CreateSession(Res4::Ok(s))) = res.results.first() else {
            panic!("CREATE_SESSION failed: {res:?}")
        };
        let mut session = Session4::new(e.clientid, s.clone());
        if cfg.reclaim_complete {
            let res = send(session.reclaim_complete());
            // COMPLETE_ALREADY: a further session of a client that completed already.
            assert!(
                matches!(res.status, Nfsstat4::OK | Nfsstat4::COMPLETE_ALREADY),
                "RECLAIM_COMPLETE: {res:?}"
            );
        }
        session
    }

    /// SEQUENCE on the session's highest slot and RECLAIM_COMPLETE (rca_one_fs false): what a
    /// client with nothing to reclaim sends before it opens (module notes).
    pub fn reclaim_complete(&mut self) -> Vec<NfsArgop4> {
        let last = self.granted.fore_chan_attrs.maxrequests.saturating_sub(1);
        vec![
            self.sequence(last, false),
            NfsArgop4::ReclaimComplete(false),
        ]
    }

    /// The session CREATE_SESSION answered with `granted`, for client `clientid`, no SEQUENCE
    /// sent yet.
    pub fn new(clientid: u64, granted: CreateSessionResOk) -> Self {
        Session4 {
            clientid,
            sessionid: granted.sessionid,
            seqids: vec![0; granted.fore_chan_attrs.maxrequests.max(1) as usize],
            granted,
        }
    }

    /// The next SEQUENCE on `slot` (its sequence id counted as sent).
    pub fn sequence(&mut self, slot: u32, cachethis: bool) -> NfsArgop4 {
        let i = slot as usize;
        if i >= self.seqids.len() {
            self.seqids.resize(i + 1, 0);
        }
        self.seqids[i] = self.seqids[i].wrapping_add(1);
        self.sequence_again(slot, cachethis)
    }

    /// The SEQUENCE last sent on `slot` once more (a retry).
    pub fn sequence_again(&self, slot: u32, cachethis: bool) -> NfsArgop4 {
        NfsArgop4::Sequence(SequenceArgs {
            sessionid: self.sessionid,
            sequenceid: self.seqids.get(slot as usize).copied().unwrap_or(0),
            slotid: slot,
            highest_slotid: slot,
            cachethis,
        })
    }

    /// The last sequence id sent on `slot` (0: none yet).
    pub fn seqid(&self, slot: u32) -> u32 {
        self.seqids.get(slot as usize).copied().unwrap_or(0)
    }

    /// `ops` after the next SEQUENCE on slot 0, with `sa_cachethis` set.
    pub fn in_session(&mut self, ops: Vec<NfsArgop4>) -> Vec<NfsArgop4> {
        let mut all = vec![self.sequence(0, true)];
        all.extend(ops);
        all
    }
}

/// The encoded arguments of a COMPOUND of minor version `minorversion` tagged `tag`.
pub fn encode(tag: &'static [u8], minorversion: u32, ops: Vec<NfsArgop4>) -> Bytes {
    let mut w = Writer::new();
    Compound4Args {
        tag: Utf8Str(Bytes::from_static(tag)),
        minorversion,
        ops,
    }
    .pack(&mut w);
    w.into_bytes()
}

/// Decodes an encoded `COMPOUND4res`.
///
/// # Panics
/// When it does not decode: the server's replies must.
pub fn decode(reply: &Bytes) -> Compound4Res {
    let segs = [reply.clone()];
    Compound4Res::decode(&mut Reader::new(&segs), &CompoundLimits::default())
        .expect("the server's reply decodes")
}

/// Sends COMPOUNDs straight to a processor, through the one driver loop ([`drive_ready`]) with
/// the [`Inline`] executor: the transport of the simulator's v4 worlds and the unit tests.
pub struct Direct<'a> {
    pub nfs: &'a Arc<Nfs4>,
    pub from: Sender,
    pub now: Instant,
    /// Where READ, WRITE and COMMIT go (none: NFS4ERR_NOTSUPP).
    pub data: Option<&'a dyn DataOps>,
    pub minorversion: u32,
}

impl Direct<'_> {
    /// `ops` as one COMPOUND (tag `sim`) from connection `self.from.conn`.
    ///
    /// # Panics
    /// When the processor answers GARBAGE_ARGS: what this sends always decodes.
    pub fn send(&self, ops: Vec<NfsArgop4>) -> Compound4Res {
        match self.send_raw(&encode(b"sim", self.minorversion, ops)) {
            Outcome::Reply(b) => decode(&b),
            Outcome::GarbageArgs => panic!("a malformed COMPOUND"),
        }
    }

    /// An encoded COMPOUND as it is.
    pub fn send_raw(&self, record: &[u8]) -> Outcome {
        let exec = Inline {
            now: self.now,
            data: self.data,
        };
        drive_ready(self.nfs, &exec, &self.from, record)
    }

    /// The same, from connection `conn`.
    pub fn on(&self, conn: ConnId) -> Direct<'_> {
        Direct {
            nfs: self.nfs,
            from: Sender {
                conn,
                ..self.from.clone()
            },
            now: self.now,
            data: self.data,
            minorversion: self.minorversion,
        }
    }
}

/// AUTH_SYS credentials of `uid`/`gid` from machine `machine`.
pub fn auth_sys(machine: &'static [u8], uid: u32, gid: u32) -> Credentials {
    Credentials::Sys(sluice_xdr::rpc::AuthSys {
        stamp: 1,
        machine_name: Bytes::from_static(machine),
        uid,
        gid,
        gids: Vec::new(),
    })
}
