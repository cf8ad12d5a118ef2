//! [`MemFs`]: a file system in memory, with injected faults, for unit tests and the simulator.
//!
//! It implements [`FileSystem`] like [`LocalFs`](crate::LocalFs) but touches no file, no clock
//! and no thread: time is set by the caller ([`MemFs::set_time`]), and every fault is a value.
//! That makes it deterministic (a simulation replays from its seed) and lets tests ask questions
//! a real disk cannot answer on demand: "what if this WRITE hits ENOSPC", "what if the server
//! crashes now".
//!
//! # Durability, and the crash
//! Each regular file keeps two contents: `data`, what READ sees, and `durable`, what survives a
//! [`MemFs::crash`]. An UNSTABLE WRITE changes only `data`; a DATA_SYNC or FILE_SYNC WRITE
//! changes both; COMMIT copies `data` to `durable` (the whole file: committing more than asked is
//! allowed, RFC 1813 §3.3.21). Metadata operations (create, rename, remove, setattr) are durable
//! at once, as NFSv3 requires of a server. A crash puts every file back to `durable` and draws a
//! new write verifier, so a client holding uncommitted data learns to resend it — exactly the
//! contract the write verifier exists for.
//!
//! # Faults
//! A [`Fault`] matches calls by [`Op`], optionally by handle and by byte offset, for a number of
//! calls (or forever), and either fails them with an [`FsError`] (ENOSPC is
//! [`FsError::NoSpc`], EIO is [`FsError::Io`]) — the call changes nothing — or adds latency.
//! Latency is a value, not a sleep: [`MemFs::latency`] tells a driver how long to delay a call
//! before making it (the simulator advances virtual time by it; a tokio driver sleeps), so this
//! core stays pure.
//!
//! # Locks
//! MemFs holds no byte-range locks: the server's lock table is the whole truth, as on a local
//! directory. For the server's tests it can play a backend shared with other clients: told
//! to ([`MemFs::refuse_locks`]), every pushed-down LOCK finds a conflicting lock of "another
//! client", and the pushed-down lock calls can be logged ([`MemFs::lock_calls`]).
//!
//! # Extended attributes
//! User attributes live in each object's own map, at most [`XATTR_VALUE_BYTES_MAX`] a value
//! (or less: [`MemFs::set_xattr_value_bytes_max`] plays a backend with a smaller limit, whose
//! larger values are [`XattrError::TooBig`]). As on Linux, only regular files and directories
//! hold them (another type reads as having none and refuses to take one, EPERM); reading and
//! listing need read permission, changing needs write permission, and a change moves the
//! object's ctime and change counter.
//!
//! # What it simplifies
//! Permissions are the classic mode bits with root's overrides (no ACLs); the caller's
//! read-only flag is honoured; names are one component of at most 255 bytes. `change` is a true
//! counter (the value `LocalFs` cannot get from `statx`), and [`Wcc::atomic`] is true: every
//! operation runs under one lock, so nothing can fall between its before and after.

// As in `localfs`: failures carry the failure reply's attributes.
#![allow(clippy::result_large_err)]

use crate::fs::FileSystem;
use crate::handle::{export_id_of, ExportId, HANDLE_VERSION};
use crate::types::{
    access, Attr, Caller, ChangeKind, CopyOk, CreateHow, CreateOk, DeviceId, DirEntry, FileHandle,
    FileType, FsError, FsInfo, FsStat, LinkRes, LockConflict, LockError, LockType, LookupOk,
    MetadataSpeed, PathConf, ReadOk, ReaddirOk, RenameWcc, Res, SeekOk, SeekWhat, SetAttr, SetTime,
    StableHow, Time, Wcc, WccAttr, WriteOk, COPY_BYTES_MAX, NAME_MAX,
};
use crate::xattr::{self, XattrError, XattrSet, XATTR_VALUE_BYTES_MAX};
use bytes::Bytes;
use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::Duration;

mod locks;
pub use locks::{LockCall, LOCK_CALLS_MAX};

/// Kinds of calls a fault can match.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    Read,
    Write,
    Commit,
    /// Any call that creates, removes or renames a name, or changes attributes.
    Modify,
    /// Any other call (GETATTR, LOOKUP, ACCESS, READDIR, ...).
    Other,
}

/// What a matching call suffers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultEffect {
    /// The call fails with this error and changes nothing.
    Fail(FsError),
    /// The call should be delayed this long by its driver (see [`MemFs::latency`]).
    Latency(Duration),
}

/// One injected fault.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fault {
    pub op: Op,
    /// Only calls on this object (`None`: any).
    pub fh: Option<FileHandle>,
    /// Only READ/WRITE/COMMIT whose range includes this byte offset (`None`: any).
    pub offset: Option<u64>,
    pub effect: FaultEffect,
    /// Calls it still applies to (`None`: every call).
    pub remaining: Option<u32>,
}

impl Fault {
    /// A fault on every call of kind `op`.
    pub fn new(op: Op, effect: FaultEffect) -> Fault {
        Fault {
            op,
            fh: None,
            offset: None,
            effect,
            remaining: None,
        }
    }

    pub fn on(mut self, fh: &FileHandle) -> Fault {
        self.fh = Some(fh.clone());
        self
    }

    pub fn at_offset(mut self, offset: u64) -> Fault {
        self.offset = Some(offset);
        self
    }

    pub fn times(mut self, n: u32) -> Fault {
        self.remaining = Some(n);
        self
    }
}

/// Limits of a [`MemFs`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemFsConfig {
    /// The `fsid` of every object. Default 1.
    pub fsid: u64,
    /// Most bytes of file data held (current contents). Default 256 MiB; a WRITE past it is
    /// [`FsError::NoSpc`], as on a full disk.
    pub bytes_max: u64,
    /// Most objects. Default 1 << 20; a create past it is [`FsError::NoSpc`].
    pub objects_max: u64,
}

impl Default for MemFsConfig {
    fn default() -> Self {
        MemFsConfig {
            fsid: 1,
            bytes_max: 256 << 20,
            objects_max: 1 << 20,
        }
    }
}

/// A file system in memory. See the module essay.
pub struct MemFs {
    config: MemFsConfig,
    state: Mutex<State>,
}

struct State {
    nodes: HashMap<u64, Node>,
    next_id: u64,
    now: Time,
    verifier: u64,
    faults: Vec<Fault>,
    bytes_used: u64,
    /// Every pushed-down LOCK answers this conflict (module notes).
    lock_refusal: Option<LockConflict>,
    /// The pushed-down lock calls, oldest first, at most [`LOCK_CALLS_MAX`].
    lock_calls: Vec<LockCall>,
    /// Largest xattr value taken (module notes).
    xattr_value_bytes_max: usize,
}

struct Node {
    ftype: FileType,
    mode: u32,
    uid: u32,
    gid: u32,
    nlink: u32,
    rdev: DeviceId,
    atime: Time,
    mtime: Time,
    ctime: Time,
    change: u64,
    /// What READ sees.
    data: Vec<u8>,
    /// What survives a crash.
    durable: Vec<u8>,
    /// Directories: name → id.
    entries: BTreeMap<Vec<u8>, u64>,
    /// Directories: the parent (the root is its own).
    parent: u64,
    target: Vec<u8>,
    /// User extended attributes, name (without `user.`) → value.
    xattrs: BTreeMap<Vec<u8>, Vec<u8>>,
}

/// The id of the root directory.
const ROOT_ID: u64 = 1;
/// Handle layout: the envelope every handle of this layer starts with (a version byte and the
/// export id, see [`handle`](crate::handle)), three zero bytes, the object id (big-endian), and
/// zeros up to the shortest length [`export_id_of`](crate::handle::export_id_of) accepts.
/// MemFs handles carry no MAC: it serves tests, not untrusted clients.
const HANDLE_BYTES: usize = 20;
const HANDLE_ID_AT: usize = 8;

impl MemFs {
    /// An empty file system: a root directory owned by root, mode 0777, at time zero.
    pub fn new(config: MemFsConfig) -> MemFs {
        let mut nodes = HashMap::new();
        nodes.insert(
            ROOT_ID,
            Node::new(FileType::Directory, 0o777, 0, 0, Time::default(), ROOT_ID),
        );
        MemFs {
            config,
            state: Mutex::new(State {
                nodes,
                next_id: ROOT_ID + 1,
                now: Time::default(),
                verifier: 1,
                faults: Vec::new(),
                bytes_used: 0,
                lock_refusal: None,
                lock_calls: Vec::new(),
                xattr_value_bytes_max: XATTR_VALUE_BYTES_MAX,
            }),
        }
    }

    /// Refuses xattr values larger than `bytes` from now on ([`XattrError::TooBig`]), as a
    /// backend with a smaller limit than Linux's does (at most [`XATTR_VALUE_BYTES_MAX`]).
    pub fn set_xattr_value_bytes_max(&self, bytes: usize) {
        self.lock().xattr_value_bytes_max = bytes.min(XATTR_VALUE_BYTES_MAX);
    }

    /// The node of `fh` for an xattr call: its id, after the caller's permission (`want`, mode
    /// bits) and, for a change, the export's read-only flag.
    fn xattr_node(
        &self,
        st: &State,
        caller: &Caller,
        fh: &FileHandle,
        want: u32,
    ) -> Result<u64, XattrError> {
        let id = self.id_of(st, fh)?;
        if want & 0o2 != 0 && caller.read_only {
            return Err(FsError::RoFs.into());
        }
        if !may(&st.nodes[&id], caller, want) {
            return Err(FsError::Acces.into());
        }
        Ok(id)
    }

    /// Sets the time stamped on changes from now on.
    pub fn set_time(&self, now: Time) {
        self.lock().now = now;
    }

    /// Adds a fault (matched in the order added; the first match applies).
    pub fn inject(&self, fault: Fault) {
        self.lock().faults.push(fault);
    }

    /// Removes every fault.
    pub fn clear_faults(&self) {
        self.lock().faults.clear();
    }

    /// The delay a driver should add before making this call (zero when no latency fault
    /// matches). Counts against the fault's `remaining`.
    pub fn latency(&self, op: Op, fh: &FileHandle, offset: u64, len: u64) -> Duration {
        let mut st = self.lock();
        match st.take_fault(op, fh, offset, len, true) {
            Some(FaultEffect::Latency(d)) => d,
            _ => Duration::ZERO,
        }
    }

    /// A crash and restart: every file loses what was not committed (see the module essay), and
    /// the write verifier changes.
    pub fn crash(&self) {
        let mut st = self.lock();
        let mut used = 0;
        for node in st.nodes.values_mut() {
            node.data = node.durable.clone();
            used += node.data.len() as u64;
        }
        st.bytes_used = used;
        st.verifier = st.verifier.wrapping_add(1);
    }

    /// What the regular file `fh` would hold after a [`MemFs::crash`] now: its committed
    /// contents (`None` if `fh` is not a regular file here). For checking durability
    /// invariants from outside, as the simulator does after every COMMIT.
    pub fn durable_data(&self, fh: &FileHandle) -> Option<Vec<u8>> {
        let st = self.lock();
        let id = self.id_of(&st, fh).ok()?;
        let node = st.nodes.get(&id)?;
        (node.ftype == FileType::Regular).then(|| node.durable.clone())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic while holding the lock is a bug in this file; the state is still consistent
        // enough for the tests that observe it.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The export id in this file system's handles: the low 32 bits of its fsid.
    fn export(&self) -> ExportId {
        ExportId(self.config.fsid as u32)
    }

    fn handle(&self, id: u64) -> FileHandle {
        let mut b = [0u8; HANDLE_BYTES];
        b[0] = HANDLE_VERSION;
        b[1..5].copy_from_slice(&self.export().0.to_be_bytes());
        b[HANDLE_ID_AT..HANDLE_ID_AT + 8].copy_from_slice(&id.to_be_bytes());
        FileHandle::from_slice(&b).expect("shorter than the limit")
    }

    /// The object id of a handle: [`FsError::BadHandle`] if it is not ours, [`FsError::Stale`]
    /// if its object is gone.
    fn id_of(&self, st: &State, fh: &FileHandle) -> Result<u64, FsError> {
        let b = fh.as_bytes();
        if b.len() != HANDLE_BYTES || export_id_of(b) != Some(self.export()) {
            return Err(FsError::BadHandle);
        }
        let id = u64::from_be_bytes(
            b[HANDLE_ID_AT..HANDLE_ID_AT + 8]
                .try_into()
                .expect("8 bytes"),
        );
        if st.nodes.contains_key(&id) {
            Ok(id)
        } else {
            Err(FsError::Stale)
        }
    }

    fn attr(&self, st: &State, id: u64) -> Attr {
        let n = &st.nodes[&id];
        let size = match n.ftype {
            FileType::Regular => n.data.len() as u64,
            FileType::Symlink => n.target.len() as u64,
            // A directory's size: 4096 per 128 entries, like a small ext4 directory.
            FileType::Directory => 4096 * (1 + n.entries.len() as u64 / 128),
            _ => 0,
        };
        Attr {
            ftype: n.ftype,
            mode: n.mode,
            nlink: n.nlink,
            uid: n.uid,
            gid: n.gid,
            size,
            used: size.div_ceil(4096) * 4096,
            rdev: n.rdev,
            fsid: self.config.fsid,
            fileid: id,
            atime: n.atime,
            mtime: n.mtime,
            ctime: n.ctime,
            change: n.change,
        }
    }

    fn wcc_attr(&self, st: &State, id: u64) -> WccAttr {
        WccAttr::of(&self.attr(st, id))
    }

    fn wcc(&self, st: &State, before: WccAttr, id: u64) -> Wcc {
        Wcc {
            before: Some(before),
            after: Some(self.attr(st, id)),
            atomic: true,
        }
    }

    fn post(&self, st: &State, fh: &FileHandle) -> Option<Attr> {
        self.id_of(st, fh).ok().map(|id| self.attr(st, id))
    }

    /// A wcc for a failure: only the after side, if the object still exists.
    fn wcc_of(&self, st: &State, fh: &FileHandle) -> Wcc {
        Wcc::after(self.post(st, fh))
    }

    /// ALLOCATE (`punch` false) and DEALLOCATE (`punch` true) of `len` bytes from `offset`.
    fn space(
        &self,
        caller: &Caller,
        fh: &FileHandle,
        offset: u64,
        len: u64,
        punch: bool,
    ) -> Res<Wcc, Wcc> {
        let mut st = self.lock();
        let id = self.id_of(&st, fh).map_err(|e| (e, Wcc::default()))?;
        let before = self.wcc_attr(&st, id);
        let fail = |st: &State, e| (e, self.wcc(st, before, id));
        if let Some(FaultEffect::Fail(e)) = st.take_fault(Op::Write, fh, offset, len, false) {
            return Err(fail(&st, e));
        }
        self.may_write_file(&st, caller, id)
            .map_err(|e| fail(&st, e))?;
        if len == 0 {
            // As fallocate(2).
            return Err(fail(&st, FsError::Inval));
        }
        let Some(end) = offset.checked_add(len).filter(|&e| e <= i64::MAX as u64) else {
            return Err(fail(&st, FsError::FBig));
        };
        let size = st.nodes[&id].data.len() as u64;
        let grow = if punch { 0 } else { end.saturating_sub(size) };
        if st.bytes_used + grow > self.config.bytes_max {
            return Err(fail(&st, FsError::NoSpc));
        }
        let now = st.now;
        let node = st.nodes.get_mut(&id).expect("resolved");
        if punch {
            let range = offset.min(size) as usize..end.min(size) as usize;
            if !range.is_empty() {
                node.data[range].fill(0);
                node.touch(now);
            }
        } else if grow > 0 {
            node.data.resize(end as usize, 0);
            node.touch(now);
        }
        st.bytes_used += grow;
        Ok(self.wcc(&st, before, id))
    }

    /// COPY and CLONE: up to `count` bytes (0: to the source's end; at most `bytes_max`, never
    /// past the source's end) from `src` to `dst`; the bytes copied and the destination's
    /// attributes.
    #[allow(clippy::too_many_arguments)]
    fn copy_bytes(
        &self,
        caller: &Caller,
        src: &FileHandle,
        src_offset: u64,
        dst: &FileHandle,
        dst_offset: u64,
        count: u64,
        bytes_max: u64,
    ) -> Res<(u64, Wcc), Wcc> {
        let mut st = self.lock();
        let did = self.id_of(&st, dst).map_err(|e| (e, Wcc::default()))?;
        let before = self.wcc_attr(&st, did);
        let fail = |st: &State, e| (e, self.wcc(st, before, did));
        let sid = self.id_of(&st, src).map_err(|e| fail(&st, e))?;
        if let Some(FaultEffect::Fail(e)) = st.take_fault(Op::Write, dst, dst_offset, count, false)
        {
            return Err(fail(&st, e));
        }
        self.may_write_file(&st, caller, did)
            .map_err(|e| fail(&st, e))?;
        let s = &st.nodes[&sid];
        regular(s).map_err(|e| fail(&st, e))?;
        if caller.cred.uid != s.uid && !may(s, caller, 0o4) && !may(s, caller, 0o1) {
            return Err(fail(&st, FsError::Acces));
        }
        let Some(left) = (s.data.len() as u64).checked_sub(src_offset) else {
            return Err(fail(&st, FsError::Inval));
        };
        let want = match count {
            0 => left,
            n => n.min(left),
        }
        .min(bytes_max);
        if sid == did && src_offset < dst_offset + want && dst_offset < src_offset + want {
            // Overlapping ranges of one file, refused as copy_file_range(2) refuses them.
            return Err(fail(&st, FsError::Inval));
        }
        let Some(end) = dst_offset
            .checked_add(want)
            .filter(|&e| e <= i64::MAX as u64)
        else {
            return Err(fail(&st, FsError::FBig));
        };
        let grow = end.saturating_sub(st.nodes[&did].data.len() as u64);
        if st.bytes_used + grow > self.config.bytes_max {
            return Err(fail(&st, FsError::NoSpc));
        }
        let from = src_offset as usize..(src_offset + want) as usize;
        let bytes = st.nodes[&sid].data[from].to_vec();
        let now = st.now;
        let node = st.nodes.get_mut(&did).expect("resolved");
        if end as usize > node.data.len() {
            node.data.resize(end as usize, 0);
        }
        node.data[dst_offset as usize..end as usize].copy_from_slice(&bytes);
        if want > 0 {
            node.touch(now);
        }
        st.bytes_used += grow;
        Ok((want, self.wcc(&st, before, did)))
    }

    /// The checks of a change to a regular file's data: a writable export, a regular file,
    /// write permission (or ownership).
    fn may_write_file(&self, st: &State, caller: &Caller, id: u64) -> Result<(), FsError> {
        if caller.read_only {
            return Err(FsError::RoFs);
        }
        let n = &st.nodes[&id];
        regular(n)?;
        if caller.cred.uid != n.uid && !may(n, caller, 0o2) {
            return Err(FsError::Acces);
        }
        Ok(())
    }

    /// Resolves a directory about to change: its id and before attributes.
    fn modify_dir(
        &self,
        st: &mut State,
        caller: &Caller,
        dir: &FileHandle,
        name: &[u8],
    ) -> Res<(u64, WccAttr), Wcc> {
        let id = self.id_of(st, dir).map_err(|e| (e, Wcc::default()))?;
        let before = self.wcc_attr(st, id);
        let fail = |st: &State, e| (e, self.wcc(st, before, id));
        if let Some(FaultEffect::Fail(e)) = st.take_fault(Op::Modify, dir, 0, 0, false) {
            return Err(fail(st, e));
        }
        if st.nodes[&id].ftype != FileType::Directory {
            return Err(fail(st, FsError::NotDir));
        }
        if caller.read_only {
            return Err(fail(st, FsError::RoFs));
        }
        check_name(name).map_err(|e| fail(st, e))?;
        if !may(&st.nodes[&id], caller, 0o3) {
            return Err(fail(st, FsError::Acces));
        }
        Ok((id, before))
    }

    fn make(
        &self,
        caller: &Caller,
        dir: &FileHandle,
        name: &[u8],
        ftype: FileType,
        sattr: &SetAttr,
        fill: impl FnOnce(&mut Node),
    ) -> Res<CreateOk, Wcc> {
        let mut st = self.lock();
        let (did, before) = self.modify_dir(&mut st, caller, dir, name)?;
        if st.nodes[&did].entries.contains_key(name) {
            return Err((FsError::Exist, self.wcc(&st, before, did)));
        }
        if st.nodes.len() as u64 >= self.config.objects_max {
            return Err((FsError::NoSpc, self.wcc(&st, before, did)));
        }
        let id = st.next_id;
        st.next_id += 1;
        let now = st.now;
        let mut node = Node::new(
            ftype,
            sattr.mode.unwrap_or(0) & 0o7777,
            caller.cred.uid,
            caller.cred.gid,
            now,
            did,
        );
        fill(&mut node);
        st.nodes.insert(id, node);
        let d = st.nodes.get_mut(&did).expect("resolved");
        d.entries.insert(name.to_vec(), id);
        if ftype == FileType::Directory {
            d.nlink += 1;
        }
        d.touch(now);
        Ok(CreateOk {
            fh: self.handle(id),
            attr: self.attr(&st, id),
            dir_wcc: self.wcc(&st, before, did),
        })
    }

    fn unlink(&self, caller: &Caller, dir: &FileHandle, name: &[u8], rmdir: bool) -> Res<Wcc, Wcc> {
        let mut st = self.lock();
        let (did, before) = self.modify_dir(&mut st, caller, dir, name)?;
        let fail = |st: &State, e| (e, self.wcc(st, before, did));
        let Some(&id) = st.nodes[&did].entries.get(name) else {
            return Err(fail(&st, FsError::NoEnt));
        };
        let is_dir = st.nodes[&id].ftype == FileType::Directory;
        match (rmdir, is_dir) {
            (true, false) => return Err(fail(&st, FsError::NotDir)),
            (false, true) => return Err(fail(&st, FsError::IsDir)),
            (true, true) if !st.nodes[&id].entries.is_empty() => {
                return Err(fail(&st, FsError::NotEmpty))
            }
            _ => {}
        }
        let now = st.now;
        st.nodes
            .get_mut(&did)
            .expect("resolved")
            .entries
            .remove(name);
        st.nodes.get_mut(&did).expect("resolved").touch(now);
        if is_dir {
            st.nodes.get_mut(&did).expect("resolved").nlink -= 1;
        }
        st.drop_link(id, now);
        Ok(self.wcc(&st, before, did))
    }
}

impl State {
    /// The effect of the first fault matching this call, counting it down. `latency` selects
    /// latency faults (asked by drivers) or failure faults (checked by the call itself).
    fn take_fault(
        &mut self,
        op: Op,
        fh: &FileHandle,
        offset: u64,
        len: u64,
        latency: bool,
    ) -> Option<FaultEffect> {
        let i = self.faults.iter().position(|f| {
            f.op == op
                && matches!(f.effect, FaultEffect::Latency(_)) == latency
                && f.fh.as_ref().is_none_or(|h| h == fh)
                && f.offset
                    .is_none_or(|o| o >= offset && o < offset.saturating_add(len.max(1)))
                && f.remaining != Some(0)
        })?;
        let f = &mut self.faults[i];
        if let Some(n) = f.remaining.as_mut() {
            *n -= 1;
        }
        Some(f.effect)
    }

    /// One fewer name for `id`; an object with no names left is gone (its handle is stale).
    fn drop_link(&mut self, id: u64, now: Time) {
        let node = self.nodes.get_mut(&id).expect("linked");
        if node.ftype == FileType::Directory {
            node.nlink = 0;
        } else {
            node.nlink -= 1;
        }
        node.touch_meta(now);
        if node.nlink == 0 {
            let gone = self.nodes.remove(&id).expect("linked");
            self.bytes_used -= gone.data.len() as u64;
        }
    }
}

impl Node {
    fn new(ftype: FileType, mode: u32, uid: u32, gid: u32, now: Time, parent: u64) -> Node {
        Node {
            ftype,
            mode,
            uid,
            gid,
            nlink: if ftype == FileType::Directory { 2 } else { 1 },
            rdev: DeviceId::default(),
            atime: now,
            mtime: now,
            ctime: now,
            change: 1,
            data: Vec::new(),
            durable: Vec::new(),
            entries: BTreeMap::new(),
            parent,
            target: Vec::new(),
            xattrs: BTreeMap::new(),
        }
    }

    /// Contents changed.
    fn touch(&mut self, now: Time) {
        self.mtime = now;
        self.touch_meta(now);
    }

    /// Attributes changed.
    fn touch_meta(&mut self, now: Time) {
        self.ctime = now;
        self.change += 1;
    }
}

/// Whether `caller` has all of `want` (bits of r=4, w=2, x=1) on `node`.
/// A regular file, or the error an operation on file data answers for anything else.
fn regular(node: &Node) -> Result<(), FsError> {
    match node.ftype {
        FileType::Regular => Ok(()),
        FileType::Directory => Err(FsError::IsDir),
        _ => Err(FsError::Inval),
    }
}

fn may(node: &Node, caller: &Caller, want: u32) -> bool {
    let c = &caller.cred;
    if c.uid == 0 {
        return want & 1 == 0 || node.ftype == FileType::Directory || node.mode & 0o111 != 0;
    }
    let bits = if node.uid == c.uid {
        node.mode >> 6
    } else if c.in_group(node.gid) {
        node.mode >> 3
    } else {
        node.mode
    } & 7;
    bits & want == want
}

fn check_name(name: &[u8]) -> Result<(), FsError> {
    if name.is_empty() || name.contains(&b'/') || name.contains(&0) {
        return Err(FsError::Acces);
    }
    if name.len() > NAME_MAX {
        return Err(FsError::NameTooLong);
    }
    if name == b"." || name == b".." {
        return Err(FsError::Exist);
    }
    Ok(())
}

fn set_time(t: SetTime, now: Time, field: &mut Time) {
    match t {
        SetTime::DontChange => {}
        SetTime::ServerTime => *field = now,
        SetTime::ClientTime(t) => *field = t,
    }
}

impl FileSystem for MemFs {
    fn root_handle(&self) -> FileHandle {
        self.handle(ROOT_ID)
    }

    fn change_kind(&self) -> ChangeKind {
        ChangeKind::Counter
    }

    /// Every call is memory only (latency faults are a driver's to add, see [`MemFs::latency`]).
    fn metadata_speed(&self) -> MetadataSpeed {
        MetadataSpeed::Memory
    }

    fn export_id(&self) -> ExportId {
        self.export()
    }

    fn write_verifier(&self) -> [u8; 8] {
        self.lock().verifier.to_be_bytes()
    }

    fn reset_write_verifier(&self) {
        let mut st = self.lock();
        st.verifier = st.verifier.wrapping_add(1);
    }

    fn lock(
        &self,
        _fh: &FileHandle,
        owner_key: u64,
        kind: LockType,
        offset: u64,
        len: u64,
    ) -> Result<(), LockError> {
        self.pushed_lock(owner_key, kind, offset, len)
    }

    fn unlock(
        &self,
        _fh: &FileHandle,
        owner_key: u64,
        offset: u64,
        len: u64,
    ) -> Result<(), FsError> {
        self.pushed_unlock(owner_key, offset, len);
        Ok(())
    }

    fn release_locks(&self, file: &[u8], owner_key: u64) {
        self.pushed_release(file, owner_key);
    }

    fn getattr(&self, fh: &FileHandle) -> Result<Attr, FsError> {
        let mut st = self.lock();
        let id = self.id_of(&st, fh)?;
        if let Some(FaultEffect::Fail(e)) = st.take_fault(Op::Other, fh, 0, 0, false) {
            return Err(e);
        }
        Ok(self.attr(&st, id))
    }

    fn setattr(
        &self,
        caller: &Caller,
        fh: &FileHandle,
        sattr: &SetAttr,
        guard: Option<Time>,
    ) -> Res<Wcc, Wcc> {
        let mut st = self.lock();
        let id = self.id_of(&st, fh).map_err(|e| (e, Wcc::default()))?;
        let before = self.wcc_attr(&st, id);
        let fail = |st: &State, e| (e, self.wcc(st, before, id));
        if let Some(FaultEffect::Fail(e)) = st.take_fault(Op::Modify, fh, 0, 0, false) {
            return Err(fail(&st, e));
        }
        if guard.is_some_and(|ctime| ctime != before.ctime) {
            return Err(fail(&st, FsError::NotSync));
        }
        if caller.read_only {
            return Err(fail(&st, FsError::RoFs));
        }
        let node = &st.nodes[&id];
        let owner = caller.cred.uid == 0 || caller.cred.uid == node.uid;
        if sattr.size.is_some() {
            match node.ftype {
                FileType::Directory => return Err(fail(&st, FsError::IsDir)),
                FileType::Regular => {}
                _ => return Err(fail(&st, FsError::Inval)),
            }
            if !owner && !may(node, caller, 0o2) {
                return Err(fail(&st, FsError::Acces));
            }
        }
        let chown =
            sattr.uid.is_some_and(|u| u != node.uid) || sattr.gid.is_some_and(|g| g != node.gid);
        if (chown && caller.cred.uid != 0)
            || ((sattr.mode.is_some()
                || sattr.atime != SetTime::DontChange
                || sattr.mtime != SetTime::DontChange)
                && !owner)
        {
            return Err(fail(&st, FsError::Perm));
        }
        let grow = sattr
            .size
            .map_or(0, |s| s.saturating_sub(node.data.len() as u64));
        if st.bytes_used + grow > self.config.bytes_max {
            return Err(fail(&st, FsError::NoSpc));
        }
        let now = st.now;
        let node = st.nodes.get_mut(&id).expect("resolved");
        let mut delta: i64 = 0;
        if let Some(size) = sattr.size {
            delta = size as i64 - node.data.len() as i64;
            node.data.resize(size as usize, 0);
            node.durable.resize(size as usize, 0);
            node.mtime = now;
        }
        if let Some(m) = sattr.mode {
            node.mode = m & 0o7777;
        }
        if let Some(u) = sattr.uid {
            node.uid = u;
        }
        if let Some(g) = sattr.gid {
            node.gid = g;
        }
        set_time(sattr.atime, now, &mut node.atime);
        set_time(sattr.mtime, now, &mut node.mtime);
        node.touch_meta(now);
        st.bytes_used = (st.bytes_used as i64 + delta) as u64;
        Ok(self.wcc(&st, before, id))
    }

    fn lookup(
        &self,
        caller: &Caller,
        dir: &FileHandle,
        name: &[u8],
    ) -> Res<LookupOk, Option<Attr>> {
        let mut st = self.lock();
        let did = self.id_of(&st, dir).map_err(|e| (e, None))?;
        let fail = |st: &State, e| (e, Some(self.attr(st, did)));
        if let Some(FaultEffect::Fail(e)) = st.take_fault(Op::Other, dir, 0, 0, false) {
            return Err(fail(&st, e));
        }
        let d = &st.nodes[&did];
        if d.ftype != FileType::Directory {
            return Err(fail(&st, FsError::NotDir));
        }
        if !may(d, caller, 0o1) {
            return Err(fail(&st, FsError::Acces));
        }
        let id = match name {
            b"." => did,
            b".." => d.parent,
            _ => {
                if name.len() > NAME_MAX {
                    return Err(fail(&st, FsError::NameTooLong));
                }
                *d.entries
                    .get(name)
                    .ok_or_else(|| fail(&st, FsError::NoEnt))?
            }
        };
        Ok(LookupOk {
            fh: self.handle(id),
            attr: self.attr(&st, id),
            dir_attr: Some(self.attr(&st, did)),
        })
    }

    fn access(
        &self,
        caller: &Caller,
        fh: &FileHandle,
        requested: u32,
    ) -> Res<(u32, Option<Attr>), Option<Attr>> {
        let st = self.lock();
        let id = self.id_of(&st, fh).map_err(|e| (e, None))?;
        let n = &st.nodes[&id];
        let dir = n.ftype == FileType::Directory;
        let mut granted = 0;
        if may(n, caller, 0o4) {
            granted |= access::READ;
        }
        if may(n, caller, 0o1) {
            granted |= if dir { access::LOOKUP } else { access::EXECUTE };
        }
        if !caller.read_only && may(n, caller, 0o2) {
            granted |= access::MODIFY | access::EXTEND;
            if dir && may(n, caller, 0o1) {
                granted |= access::DELETE;
            }
        }
        Ok((granted & requested, Some(self.attr(&st, id))))
    }

    fn readlink(&self, fh: &FileHandle) -> Res<(Vec<u8>, Option<Attr>), Option<Attr>> {
        let st = self.lock();
        let id = self.id_of(&st, fh).map_err(|e| (e, None))?;
        let attr = Some(self.attr(&st, id));
        let n = &st.nodes[&id];
        if n.ftype != FileType::Symlink {
            return Err((FsError::Inval, attr));
        }
        Ok((n.target.clone(), attr))
    }

    fn read(
        &self,
        caller: &Caller,
        fh: &FileHandle,
        offset: u64,
        bufs: &mut [&mut [u8]],
    ) -> Res<ReadOk, Option<Attr>> {
        let mut st = self.lock();
        let id = self.id_of(&st, fh).map_err(|e| (e, None))?;
        let want: usize = bufs.iter().map(|b| b.len()).sum();
        let attr = self.attr(&st, id);
        if let Some(FaultEffect::Fail(e)) = st.take_fault(Op::Read, fh, offset, want as u64, false)
        {
            return Err((e, Some(attr)));
        }
        let n = &st.nodes[&id];
        match n.ftype {
            FileType::Regular => {}
            FileType::Directory => return Err((FsError::IsDir, Some(attr))),
            _ => return Err((FsError::Inval, Some(attr))),
        }
        if caller.cred.uid != n.uid && !may(n, caller, 0o4) && !may(n, caller, 0o1) {
            return Err((FsError::Acces, Some(attr)));
        }
        let len = n.data.len() as u64;
        let mut pos = offset.min(len) as usize;
        let mut count = 0;
        for b in bufs.iter_mut() {
            let n_ = b.len().min(n.data.len() - pos);
            b[..n_].copy_from_slice(&n.data[pos..pos + n_]);
            pos += n_;
            count += n_;
        }
        let eof = offset.saturating_add(count as u64) >= len;
        Ok(ReadOk { count, eof, attr })
    }

    fn write(
        &self,
        caller: &Caller,
        fh: &FileHandle,
        offset: u64,
        data: &[Bytes],
        stable: StableHow,
    ) -> Res<WriteOk, Wcc> {
        let mut st = self.lock();
        let id = self.id_of(&st, fh).map_err(|e| (e, Wcc::default()))?;
        let before = self.wcc_attr(&st, id);
        let fail = |st: &State, e| (e, self.wcc(st, before, id));
        let total: u64 = data.iter().map(|b| b.len() as u64).sum();
        if let Some(FaultEffect::Fail(e)) = st.take_fault(Op::Write, fh, offset, total, false) {
            return Err(fail(&st, e));
        }
        if caller.read_only {
            return Err(fail(&st, FsError::RoFs));
        }
        let n = &st.nodes[&id];
        match n.ftype {
            FileType::Regular => {}
            FileType::Directory => return Err(fail(&st, FsError::IsDir)),
            _ => return Err(fail(&st, FsError::Inval)),
        }
        if caller.cred.uid != n.uid && !may(n, caller, 0o2) {
            return Err(fail(&st, FsError::Acces));
        }
        let Some(end) = offset.checked_add(total).filter(|&e| e <= i64::MAX as u64) else {
            return Err(fail(&st, FsError::FBig));
        };
        let grow = end.saturating_sub(n.data.len() as u64);
        if st.bytes_used + grow > self.config.bytes_max {
            return Err(fail(&st, FsError::NoSpc));
        }
        let now = st.now;
        let node = st.nodes.get_mut(&id).expect("resolved");
        if end as usize > node.data.len() {
            node.data.resize(end as usize, 0);
        }
        let mut pos = offset as usize;
        for b in data {
            node.data[pos..pos + b.len()].copy_from_slice(b);
            pos += b.len();
        }
        if stable != StableHow::Unstable {
            if node.durable.len() < end as usize {
                node.durable.resize(end as usize, 0);
            }
            let range = offset as usize..end as usize;
            let (d, s) = (&mut node.durable, &node.data);
            d[range.clone()].copy_from_slice(&s[range]);
        }
        if total > 0 {
            node.touch(now);
        }
        st.bytes_used += grow;
        Ok(WriteOk {
            count: total as usize,
            committed: stable,
            wcc: self.wcc(&st, before, id),
        })
    }

    fn commit(&self, caller: &Caller, fh: &FileHandle, offset: u64, count: u32) -> Res<Wcc, Wcc> {
        let mut st = self.lock();
        let id = self.id_of(&st, fh).map_err(|e| (e, Wcc::default()))?;
        let before = self.wcc_attr(&st, id);
        let fail = |st: &State, e| (e, self.wcc(st, before, id));
        let len = if count == 0 {
            u64::MAX - offset
        } else {
            u64::from(count)
        };
        if let Some(FaultEffect::Fail(e)) = st.take_fault(Op::Commit, fh, offset, len, false) {
            return Err(fail(&st, e));
        }
        if caller.read_only {
            return Err(fail(&st, FsError::RoFs));
        }
        match st.nodes[&id].ftype {
            FileType::Regular => {}
            FileType::Directory => return Err(fail(&st, FsError::IsDir)),
            _ => return Err(fail(&st, FsError::Inval)),
        }
        let node = st.nodes.get_mut(&id).expect("resolved");
        node.durable = node.data.clone();
        Ok(self.wcc(&st, before, id))
    }

    fn create(
        &self,
        caller: &Caller,
        dir: &FileHandle,
        name: &[u8],
        how: CreateHow,
    ) -> Res<CreateOk, Wcc> {
        let (sattr, exclusive) = match how {
            CreateHow::Unchecked(s) | CreateHow::Guarded(s) => (s, None),
            CreateHow::Exclusive(v) => (SetAttr::default(), Some(v)),
            CreateHow::Exclusive41(v, s) => (s, Some(v)),
        };
        if let CreateHow::Unchecked(_) = how {
            // UNCHECKED over an existing regular file: only the size applies.
            let existing = {
                let st = self.lock();
                self.id_of(&st, dir)
                    .ok()
                    .and_then(|d| st.nodes[&d].entries.get(name).copied())
            };
            if let Some(id) = existing {
                let regular =
                    self.lock().nodes.get(&id).map(|n| n.ftype) == Some(FileType::Regular);
                if !regular {
                    let st = self.lock();
                    return Err((FsError::Exist, self.wcc_of(&st, dir)));
                }
                let fh = self.handle(id);
                let dir_before = {
                    let st = self.lock();
                    self.id_of(&st, dir).map(|d| self.wcc_attr(&st, d)).ok()
                };
                let size_only = SetAttr {
                    size: sattr.size,
                    ..SetAttr::default()
                };
                self.setattr(caller, &fh, &size_only, None)
                    .map_err(|(e, _)| (e, Wcc::default()))?;
                let st = self.lock();
                return Ok(CreateOk {
                    fh,
                    attr: self.attr(&st, id),
                    dir_wcc: Wcc {
                        before: dir_before,
                        after: self.post(&st, dir),
                        atomic: false,
                    },
                });
            }
        }
        let r = self.make(caller, dir, name, FileType::Regular, &sattr, |n| {
            // EXCLUSIVE4_1's owner and group, in the same step as the creation.
            if exclusive.is_some() {
                n.uid = sattr.uid.unwrap_or(n.uid);
                n.gid = sattr.gid.unwrap_or(n.gid);
            }
            if let Some(v) = exclusive {
                // The verifier in the times, as LocalFs (and knfsd) store it.
                n.mtime.seconds = i64::from(u32::from_be_bytes(v[..4].try_into().expect("4")));
                n.atime.seconds = i64::from(u32::from_be_bytes(v[4..].try_into().expect("4")));
            }
        });
        match (r, exclusive) {
            (Err((FsError::Exist, w)), Some(v)) => {
                // A retransmitted exclusive create finds its own file.
                let st = self.lock();
                let found = self
                    .id_of(&st, dir)
                    .ok()
                    .and_then(|d| st.nodes[&d].entries.get(name).copied())
                    .filter(|id| {
                        let n = &st.nodes[id];
                        n.ftype == FileType::Regular
                            && n.data.is_empty()
                            && n.mtime.seconds
                                == i64::from(u32::from_be_bytes(v[..4].try_into().expect("4")))
                            && n.atime.seconds
                                == i64::from(u32::from_be_bytes(v[4..].try_into().expect("4")))
                    });
                match found {
                    Some(id) => Ok(CreateOk {
                        fh: self.handle(id),
                        attr: self.attr(&st, id),
                        dir_wcc: w,
                    }),
                    None => Err((FsError::Exist, w)),
                }
            }
            (r, _) => r,
        }
    }

    fn mkdir(
        &self,
        caller: &Caller,
        dir: &FileHandle,
        name: &[u8],
        sattr: &SetAttr,
    ) -> Res<CreateOk, Wcc> {
        self.make(caller, dir, name, FileType::Directory, sattr, |_| {})
    }

    fn symlink(
        &self,
        caller: &Caller,
        dir: &FileHandle,
        name: &[u8],
        target: &[u8],
        sattr: &SetAttr,
    ) -> Res<CreateOk, Wcc> {
        if let Err(e) = crate::types::symlink_target(target) {
            let st = self.lock();
            return Err((e, self.wcc_of(&st, dir)));
        }
        let sattr = SetAttr {
            mode: Some(0o777),
            ..*sattr
        };
        self.make(caller, dir, name, FileType::Symlink, &sattr, |n| {
            n.target = target.to_vec()
        })
    }

    fn mknod(
        &self,
        caller: &Caller,
        dir: &FileHandle,
        name: &[u8],
        ftype: FileType,
        sattr: &SetAttr,
        rdev: DeviceId,
    ) -> Res<CreateOk, Wcc> {
        match ftype {
            FileType::CharDevice | FileType::BlockDevice if caller.cred.uid != 0 => {
                let st = self.lock();
                Err((FsError::Perm, self.wcc_of(&st, dir)))
            }
            FileType::CharDevice | FileType::BlockDevice | FileType::Socket | FileType::Fifo => {
                self.make(caller, dir, name, ftype, sattr, |n| n.rdev = rdev)
            }
            _ => {
                let st = self.lock();
                Err((FsError::BadType, self.wcc_of(&st, dir)))
            }
        }
    }

    fn remove(&self, caller: &Caller, dir: &FileHandle, name: &[u8]) -> Res<Wcc, Wcc> {
        self.unlink(caller, dir, name, false)
    }

    fn rmdir(&self, caller: &Caller, dir: &FileHandle, name: &[u8]) -> Res<Wcc, Wcc> {
        self.unlink(caller, dir, name, true)
    }

    fn rename(
        &self,
        caller: &Caller,
        from_dir: &FileHandle,
        from_name: &[u8],
        to_dir: &FileHandle,
        to_name: &[u8],
    ) -> Res<RenameWcc, RenameWcc> {
        let mut st = self.lock();
        let wrap = |from_dir: Wcc, to_dir: Wcc| RenameWcc { from_dir, to_dir };
        let (fid, fbefore) = self
            .modify_dir(&mut st, caller, from_dir, from_name)
            .map_err(|(e, w)| (e, wrap(w, Wcc::default())))?;
        let (tid, tbefore) = match self.modify_dir(&mut st, caller, to_dir, to_name) {
            Ok(t) => t,
            Err((e, w)) => return Err((e, wrap(self.wcc(&st, fbefore, fid), w))),
        };
        let wccs = |st: &State| wrap(self.wcc(st, fbefore, fid), self.wcc(st, tbefore, tid));
        let Some(&id) = st.nodes[&fid].entries.get(from_name) else {
            return Err((FsError::NoEnt, wccs(&st)));
        };
        let moving_dir = st.nodes[&id].ftype == FileType::Directory;
        // A directory cannot move under itself.
        let mut up = tid;
        while moving_dir && up != ROOT_ID {
            if up == id {
                return Err((FsError::Inval, wccs(&st)));
            }
            up = st.nodes[&up].parent;
        }
        let now = st.now;
        if let Some(&victim) = st.nodes[&tid].entries.get(to_name) {
            if victim == id {
                return Ok(wccs(&st));
            }
            let v = &st.nodes[&victim];
            match (moving_dir, v.ftype == FileType::Directory) {
                (true, false) => return Err((FsError::NotDir, wccs(&st))),
                (false, true) => return Err((FsError::IsDir, wccs(&st))),
                (true, true) if !v.entries.is_empty() => {
                    return Err((FsError::NotEmpty, wccs(&st)))
                }
                _ => {}
            }
            if moving_dir {
                st.nodes.get_mut(&tid).expect("resolved").nlink -= 1;
            }
            st.drop_link(victim, now);
        }
        st.nodes
            .get_mut(&fid)
            .expect("resolved")
            .entries
            .remove(from_name);
        st.nodes
            .get_mut(&tid)
            .expect("resolved")
            .entries
            .insert(to_name.to_vec(), id);
        if moving_dir && fid != tid {
            st.nodes.get_mut(&fid).expect("resolved").nlink -= 1;
            st.nodes.get_mut(&tid).expect("resolved").nlink += 1;
            st.nodes.get_mut(&id).expect("resolved").parent = tid;
        }
        st.nodes.get_mut(&fid).expect("resolved").touch(now);
        st.nodes.get_mut(&tid).expect("resolved").touch(now);
        st.nodes.get_mut(&id).expect("resolved").touch_meta(now);
        Ok(wccs(&st))
    }

    fn link(
        &self,
        caller: &Caller,
        fh: &FileHandle,
        dir: &FileHandle,
        name: &[u8],
    ) -> Res<LinkRes, LinkRes> {
        let mut st = self.lock();
        let id = self.id_of(&st, fh).map_err(|e| (e, LinkRes::default()))?;
        let (did, before) = self
            .modify_dir(&mut st, caller, dir, name)
            .map_err(|(e, w)| {
                (
                    e,
                    LinkRes {
                        attr: None,
                        dir_wcc: w,
                    },
                )
            })?;
        let res = |st: &State| LinkRes {
            attr: Some(self.attr(st, id)),
            dir_wcc: self.wcc(st, before, did),
        };
        if st.nodes[&id].ftype == FileType::Directory {
            return Err((FsError::IsDir, res(&st)));
        }
        if st.nodes[&did].entries.contains_key(name) {
            return Err((FsError::Exist, res(&st)));
        }
        let now = st.now;
        st.nodes
            .get_mut(&did)
            .expect("resolved")
            .entries
            .insert(name.to_vec(), id);
        st.nodes.get_mut(&did).expect("resolved").touch(now);
        let n = st.nodes.get_mut(&id).expect("resolved");
        n.nlink += 1;
        n.touch_meta(now);
        Ok(res(&st))
    }

    fn readdir(
        &self,
        caller: &Caller,
        dir: &FileHandle,
        cookie: u64,
        cookieverf: [u8; 8],
        plus: bool,
        visit: &mut dyn FnMut(DirEntry<'_>) -> bool,
    ) -> Res<ReaddirOk, Option<Attr>> {
        let mut st = self.lock();
        let did = self.id_of(&st, dir).map_err(|e| (e, None))?;
        let dattr = self.attr(&st, did);
        if let Some(FaultEffect::Fail(e)) = st.take_fault(Op::Other, dir, 0, 0, false) {
            return Err((e, Some(dattr)));
        }
        let d = &st.nodes[&did];
        if d.ftype != FileType::Directory {
            return Err((FsError::NotDir, Some(dattr)));
        }
        if !may(d, caller, 0o4) {
            return Err((FsError::Acces, Some(dattr)));
        }
        // Cookies are positions: 1 after ".", 2 after "..", 2 + n after the n-th name. The
        // verifier never changes, so a listing is never refused because the directory changed.
        let verf = [0u8; 8];
        if cookie != 0 && cookieverf != [0; 8] && cookieverf != verf {
            return Err((FsError::BadCookie, Some(dattr)));
        }
        let mut all: Vec<(&[u8], u64)> = vec![(b".", did), (b"..", d.parent)];
        all.extend(d.entries.iter().map(|(k, &v)| (k.as_slice(), v)));
        let mut eof = true;
        for (i, (name, id)) in all.iter().enumerate().skip(cookie as usize) {
            let e = DirEntry {
                fileid: *id,
                name,
                cookie: i as u64 + 1,
                attr: plus.then(|| self.attr(&st, *id)),
                fh: plus.then(|| self.handle(*id)),
            };
            if !visit(e) {
                eof = false;
                break;
            }
        }
        Ok(ReaddirOk {
            dir_attr: Some(dattr),
            cookieverf: verf,
            eof,
        })
    }

    fn fsstat(&self, fh: &FileHandle) -> Res<FsStat, Option<Attr>> {
        let st = self.lock();
        let id = self.id_of(&st, fh).map_err(|e| (e, None))?;
        let free = self.config.bytes_max.saturating_sub(st.bytes_used);
        let ffree = self
            .config
            .objects_max
            .saturating_sub(st.nodes.len() as u64);
        Ok(FsStat {
            tbytes: self.config.bytes_max,
            fbytes: free,
            abytes: free,
            tfiles: self.config.objects_max,
            ffiles: ffree,
            afiles: ffree,
            invarsec: 0,
            attr: Some(self.attr(&st, id)),
        })
    }

    fn fsinfo(&self, fh: &FileHandle) -> Res<FsInfo, Option<Attr>> {
        let st = self.lock();
        let id = self.id_of(&st, fh).map_err(|e| (e, None))?;
        use crate::types::{fsprops, IO_BYTES_MAX_DEFAULT, READDIR_BYTES_PREF_DEFAULT};
        Ok(FsInfo {
            rtmax: IO_BYTES_MAX_DEFAULT,
            rtpref: IO_BYTES_MAX_DEFAULT,
            rtmult: 4096,
            wtmax: IO_BYTES_MAX_DEFAULT,
            wtpref: IO_BYTES_MAX_DEFAULT,
            wtmult: 4096,
            dtpref: READDIR_BYTES_PREF_DEFAULT,
            maxfilesize: i64::MAX as u64,
            time_delta: Time {
                seconds: 0,
                nseconds: 1,
            },
            properties: fsprops::LINK
                | fsprops::SYMLINK
                | fsprops::HOMOGENEOUS
                | fsprops::CANSETTIME,
            attr: Some(self.attr(&st, id)),
        })
    }

    fn pathconf(&self, fh: &FileHandle) -> Res<PathConf, Option<Attr>> {
        let st = self.lock();
        let id = self.id_of(&st, fh).map_err(|e| (e, None))?;
        Ok(PathConf {
            linkmax: u32::MAX,
            name_max: NAME_MAX as u32,
            no_trunc: true,
            chown_restricted: true,
            case_insensitive: false,
            case_preserving: true,
            attr: Some(self.attr(&st, id)),
        })
    }

    /// Every byte below the size is data here (no holes but the implicit one at the end), as
    /// `lseek` answers on a file system without sparse files.
    fn seek(
        &self,
        caller: &Caller,
        fh: &FileHandle,
        offset: u64,
        what: SeekWhat,
    ) -> Res<SeekOk, Option<Attr>> {
        let mut st = self.lock();
        let id = self.id_of(&st, fh).map_err(|e| (e, None))?;
        let attr = self.attr(&st, id);
        if let Some(FaultEffect::Fail(e)) = st.take_fault(Op::Read, fh, offset, 1, false) {
            return Err((e, Some(attr)));
        }
        let n = &st.nodes[&id];
        regular(n).map_err(|e| (e, Some(attr)))?;
        if caller.cred.uid != n.uid && !may(n, caller, 0o4) && !may(n, caller, 0o1) {
            return Err((FsError::Acces, Some(attr)));
        }
        let size = n.data.len() as u64;
        if offset >= size {
            return Err((FsError::Nxio, Some(attr)));
        }
        Ok(match what {
            SeekWhat::Data => SeekOk { offset, eof: false },
            SeekWhat::Hole => SeekOk {
                offset: size,
                eof: true,
            },
        })
    }

    /// Extends the size with zeros when the range ends past it (there is no space to reserve
    /// otherwise: every byte below the size is stored).
    fn allocate(&self, caller: &Caller, fh: &FileHandle, offset: u64, len: u64) -> Res<Wcc, Wcc> {
        self.space(caller, fh, offset, len, false)
    }

    /// Zeroes the range below the size (what a punched hole reads as); the size never changes.
    fn deallocate(&self, caller: &Caller, fh: &FileHandle, offset: u64, len: u64) -> Res<Wcc, Wcc> {
        self.space(caller, fh, offset, len, true)
    }

    fn copy_range(
        &self,
        caller: &Caller,
        src: &FileHandle,
        src_offset: u64,
        dst: &FileHandle,
        dst_offset: u64,
        count: u64,
    ) -> Res<CopyOk, Wcc> {
        let (count, wcc) = self.copy_bytes(
            caller,
            src,
            src_offset,
            dst,
            dst_offset,
            count,
            COPY_BYTES_MAX,
        )?;
        Ok(CopyOk { count, wcc })
    }

    /// A clone is a copy here (the contents read the same; nothing is shared to save), with no
    /// alignment to respect, and no bound: it must clone all or nothing.
    fn clone_range(
        &self,
        caller: &Caller,
        src: &FileHandle,
        src_offset: u64,
        dst: &FileHandle,
        dst_offset: u64,
        count: u64,
    ) -> Res<Wcc, Wcc> {
        let (_, wcc) =
            self.copy_bytes(caller, src, src_offset, dst, dst_offset, count, u64::MAX)?;
        Ok(wcc)
    }

    fn xattr_support(&self) -> bool {
        true
    }

    fn getxattr(
        &self,
        caller: &Caller,
        fh: &FileHandle,
        name: &[u8],
        size_max: usize,
    ) -> Result<Vec<u8>, XattrError> {
        xattr::check_name(name)?;
        let st = self.lock();
        let id = self.xattr_node(&st, caller, fh, 0o4)?;
        let v = st.nodes[&id].xattrs.get(name).ok_or(XattrError::NoXattr)?;
        if v.len() > size_max {
            return Err(XattrError::TooBig);
        }
        Ok(v.clone())
    }

    fn setxattr(
        &self,
        caller: &Caller,
        fh: &FileHandle,
        name: &[u8],
        value: &[u8],
        how: XattrSet,
    ) -> Result<Wcc, XattrError> {
        xattr::check_name(name)?;
        let mut st = self.lock();
        let id = self.xattr_node(&st, caller, fh, 0o2)?;
        if value.len() > st.xattr_value_bytes_max {
            return Err(XattrError::TooBig);
        }
        let before = self.wcc_attr(&st, id);
        let now = st.now;
        let node = st.nodes.get_mut(&id).expect("found above");
        if !matches!(node.ftype, FileType::Regular | FileType::Directory) {
            return Err(FsError::Perm.into());
        }
        match (how, node.xattrs.contains_key(name)) {
            (XattrSet::Create, true) => return Err(FsError::Exist.into()),
            (XattrSet::Replace, false) => return Err(XattrError::NoXattr),
            _ => {}
        }
        node.xattrs.insert(name.to_vec(), value.to_vec());
        node.touch_meta(now);
        Ok(self.wcc(&st, before, id))
    }

    fn listxattrs(&self, caller: &Caller, fh: &FileHandle) -> Result<Vec<Vec<u8>>, XattrError> {
        let st = self.lock();
        let id = self.xattr_node(&st, caller, fh, 0o4)?;
        // A BTreeMap's keys are sorted bytewise, as the trait asks.
        Ok(st.nodes[&id].xattrs.keys().cloned().collect())
    }

    fn removexattr(
        &self,
        caller: &Caller,
        fh: &FileHandle,
        name: &[u8],
    ) -> Result<Wcc, XattrError> {
        xattr::check_name(name)?;
        let mut st = self.lock();
        let id = self.xattr_node(&st, caller, fh, 0o2)?;
        let before = self.wcc_attr(&st, id);
        let now = st.now;
        let node = st.nodes.get_mut(&id).expect("found above");
        node.xattrs.remove(name).ok_or(XattrError::NoXattr)?;
        node.touch_meta(now);
        Ok(self.wcc(&st, before, id))
    }
}
