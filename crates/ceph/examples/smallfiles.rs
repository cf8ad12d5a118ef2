//! `smallfiles`: the small-file limit of a Ceph file system, libcephfs driven directly, for
//! `bench/ceph-vs-ganesha.sh` (issue 26: a gateway's small-file rate against what libcephfs does
//! without any NFS in between).
//!
//! ```text
//! cargo run --release -p sluice-ceph --example smallfiles -- --conf CEPH.CONF [--fs NAME]
//!     [--id ID] --dir PATH [--count 10000] [--bytes 4096] [--jobs 1] [--remove-jobs 1]
//!     [--no-fsync] [--setup]
//! ```
//!
//! One libcephfs mount of the file system's root, through the same FFI table the `CephFs`
//! backend uses (`sluice_ceph::ffi`), and three timed phases on the new directory PATH (created
//! with its missing parents, mode 0777; it must not hold files of an earlier run):
//!
//! 1. **create**: `--count` files `f0000000`, ...: `ceph_ll_create` (O_CREAT|O_EXCL), one
//!    `ceph_ll_write` of `--bytes`, `ceph_ll_fsync`, `ceph_ll_close`, from `--jobs` threads
//!    sharing the one mount (a thread takes the next file number when it is done with one).
//!    The fsync is there because an NFS client's copy of a small file ends with a stable write
//!    (FILE_SYNC, or COMMIT at close), which a gateway answers only after `ceph_ll_fsync`: the
//!    limit does the same work for the same guarantee. `--no-fsync` leaves it out.
//! 2. **list**: the `ls -l` analogue: `ceph_ll_opendir` and `ceph_readdirplus_r` to the end,
//!    every entry with its attributes (names and sizes are checked: a count or size that is
//!    not what was written fails the run).
//! 3. **remove**: `ceph_ll_unlink` of every file from `--remove-jobs` threads, then
//!    `ceph_ll_rmdir` of PATH.
//!
//! It prints one `key=value` line, like `sluice bench`: per phase the seconds, the rate in
//! files per second and the process's own CPU seconds (utime+stime from `getrusage`, all
//! threads, libcephfs's included). `--setup` only creates PATH (and its parents) and exits:
//! the benchmark uses it to make each gateway's directory before the gateways start.
//!
//! Everything is synchronous (libcephfs's `ceph_ll_*` calls block until the MDS answers), so
//! the work in flight at once is the number of threads: run it with the concurrency the NFS
//! client of the comparison uses.

use sluice_ceph::ffi::{self, Fh, Inode, Lib, MountInfo, Statx, UserPerm};
use std::ffi::{CStr, CString};
use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

/// How long `ceph_mount` may wait for the monitors and the MDS map: a healthy one-node test
/// cluster mounts in well under a second; a wrong address fails the run quickly instead of
/// after libcephfs's default of 300 s.
const MOUNT_TIMEOUT_SECS: &str = "20";
/// Threads at most: more than any NFS client's slot table (the comparison's concurrency).
const JOBS_MAX: usize = 1024;

struct Args {
    conf: String,
    fs: Option<String>,
    id: Option<String>,
    dir: String,
    count: usize,
    bytes: usize,
    jobs: usize,
    remove_jobs: usize,
    fsync: bool,
    setup: bool,
}

fn main() -> ExitCode {
    let args = match parse_args(std::env::args().skip(1)) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("smallfiles: {e}");
            eprintln!(
                "usage: smallfiles --conf CEPH.CONF [--fs NAME] [--id ID] --dir PATH \
                 [--count N] [--bytes B] [--jobs J] [--remove-jobs J] [--no-fsync] [--setup]"
            );
            return ExitCode::from(2);
        }
    };
    match run(&args) {
        Ok(line) => {
            println!("{line}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("smallfiles: {e}");
            ExitCode::from(1)
        }
    }
}

fn parse_args(mut it: impl Iterator<Item = String>) -> Result<Args, String> {
    let mut a = Args {
        conf: String::new(),
        fs: None,
        id: None,
        dir: String::new(),
        count: 10_000,
        bytes: 4096,
        jobs: 1,
        remove_jobs: 1,
        fsync: true,
        setup: false,
    };
    while let Some(k) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{k} needs a value"));
        let number = |v: String| {
            v.parse::<usize>()
                .map_err(|_| format!("{k}: not a number: {v}"))
        };
        match k.as_str() {
            "--conf" => a.conf = value()?,
            "--fs" => a.fs = Some(value()?),
            "--id" => a.id = Some(value()?),
            "--dir" => a.dir = value()?,
            "--count" => a.count = number(value()?)?,
            "--bytes" => a.bytes = number(value()?)?,
            "--jobs" => a.jobs = number(value()?)?,
            "--remove-jobs" => a.remove_jobs = number(value()?)?,
            "--no-fsync" => a.fsync = false,
            "--setup" => a.setup = true,
            _ => return Err(format!("unknown argument {k}")),
        }
    }
    if a.conf.is_empty() || !a.dir.starts_with('/') || a.dir == "/" {
        return Err("--conf and --dir (an absolute path below /) are required".into());
    }
    if !(1..=JOBS_MAX).contains(&a.jobs) || !(1..=JOBS_MAX).contains(&a.remove_jobs) {
        return Err(format!("--jobs and --remove-jobs must be 1..={JOBS_MAX}"));
    }
    if a.bytes > 1 << 24 {
        return Err("--bytes must be at most 16M".into());
    }
    Ok(a)
}

fn run(a: &Args) -> Result<String, String> {
    let m = Mount::new(a)?;
    let (parent, leaf) = m.make_dirs(&a.dir)?;
    if a.setup {
        m.put(parent);
        m.put(leaf.0);
        return Ok(format!("dir={} created=1", a.dir));
    }
    let dir = Shared(leaf.0);
    let names: Vec<CString> = (0..a.count)
        .map(|i| CString::new(format!("f{i:07}")).expect("no NUL"))
        .collect();
    let data = vec![0x5a_u8; a.bytes];

    let (create_secs, create_cpu) = timed(|| {
        on_threads(a.jobs, names.len(), |i| {
            m.create_file(dir.get(), &names[i], &data, a.fsync)
        })
    })?;
    let (list_secs, list_cpu) = timed(|| m.list(dir.get(), a.count, a.bytes as u64))?;
    let (remove_secs, remove_cpu) = timed(|| {
        on_threads(a.remove_jobs, names.len(), |i| {
            m.unlink(dir.get(), &names[i])
        })?;
        m.put(dir.get());
        m.rmdir(parent, &leaf.1)
    })?;
    m.put(parent);

    let rate = |secs: f64| a.count as f64 / secs.max(1e-9);
    Ok(format!(
        "count={} bytes={} jobs={} remove_jobs={} fsync={} create_secs={create_secs:.3} \
         create_files_s={:.1} create_cpu_s={create_cpu:.3} list_secs={list_secs:.3} \
         list_files_s={:.1} list_cpu_s={list_cpu:.3} remove_secs={remove_secs:.3} \
         remove_files_s={:.1} remove_cpu_s={remove_cpu:.3}",
        a.count,
        a.bytes,
        a.jobs,
        a.remove_jobs,
        u8::from(a.fsync),
        rate(create_secs),
        rate(list_secs),
        rate(remove_secs),
    ))
}

/// Runs `f`: (wall seconds, own CPU seconds), or its error.
fn timed(f: impl FnOnce() -> Result<(), String>) -> Result<(f64, f64), String> {
    let cpu0 = own_cpu_secs();
    let t0 = Instant::now();
    f()?;
    Ok((t0.elapsed().as_secs_f64(), own_cpu_secs() - cpu0))
}

/// Calls `f(i)` for every i in 0..n from `threads` threads; the first error stops the others
/// from taking new work and is returned.
fn on_threads(
    threads: usize,
    n: usize,
    f: impl Fn(usize) -> Result<(), String> + Sync,
) -> Result<(), String> {
    let next = AtomicUsize::new(0);
    let failed = std::sync::Mutex::new(None::<String>);
    std::thread::scope(|s| {
        for _ in 0..threads.min(n.max(1)) {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= n {
                    return;
                }
                if let Err(e) = f(i) {
                    next.store(n, Ordering::Relaxed);
                    failed
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .get_or_insert(e);
                    return;
                }
            });
        }
    });
    match failed.into_inner().unwrap_or_else(|p| p.into_inner()) {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

fn own_cpu_secs() -> f64 {
    // SAFETY: getrusage fills a zeroed struct we own.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: RUSAGE_SELF with a valid out-pointer.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(u.ru_utime) + tv(u.ru_stime)
}

/// One libcephfs mount of the file system's root, as root (uid 0, gid 0).
struct Mount {
    lib: &'static Lib,
    cmount: *mut MountInfo,
    perms: *mut UserPerm,
}

// SAFETY: libcephfs calls on one mount are thread-safe (the client serializes internally);
// the UserPerm is only read after it is made. Both are freed once, in Drop.
unsafe impl Sync for Mount {}

/// An inode pointer the worker threads share (libcephfs inodes may be used from any thread).
/// `get` (not the field) in closures, so they capture the wrapper and not the raw pointer.
#[derive(Clone, Copy)]
struct Shared(*mut Inode);
// SAFETY: see above; the reference is put once, after the threads have joined.
unsafe impl Sync for Shared {}
unsafe impl Send for Shared {}
impl Shared {
    fn get(self) -> *mut Inode {
        self.0
    }
}

/// An inode reference the caller must put back, and its name in its parent.
type Named = (*mut Inode, CString);

impl Mount {
    fn new(a: &Args) -> Result<Mount, String> {
        let lib = Lib::load()?;
        let id = a.id.as_deref().map(cstr).transpose()?;
        let mut cmount: *mut MountInfo = std::ptr::null_mut();
        // SAFETY: out-pointer to a local; the id is NUL-terminated or NULL.
        let r = unsafe {
            (lib.ceph_create)(
                &mut cmount,
                id.as_ref().map_or(std::ptr::null(), |c| c.as_ptr()),
            )
        };
        check("ceph_create", r)?;
        // From here on Drop unmounts (harmless when not mounted) and releases.
        let m = Mount {
            lib,
            cmount,
            // SAFETY: no supplementary groups.
            perms: unsafe { (lib.ceph_userperm_new)(0, 0, 0, std::ptr::null_mut()) },
        };
        let conf = cstr(&a.conf)?;
        // SAFETY (this block): a live handle and NUL-terminated strings that outlive the calls.
        unsafe {
            check(
                &format!("reading {}", a.conf),
                (lib.ceph_conf_read_file)(cmount, conf.as_ptr()),
            )?;
            let (k, v) = (cstr("client_mount_timeout")?, cstr(MOUNT_TIMEOUT_SECS)?);
            (lib.ceph_conf_set)(cmount, k.as_ptr(), v.as_ptr());
            check(
                "ceph_init (connecting to the monitors)",
                (lib.ceph_init)(cmount),
            )?;
            if let Some(fs) = &a.fs {
                let c = cstr(fs)?;
                check(
                    &format!("selecting file system {fs}"),
                    (lib.ceph_select_filesystem)(cmount, c.as_ptr()),
                )?;
            }
            let root = cstr("/")?;
            check("ceph_mount", (lib.ceph_mount)(cmount, root.as_ptr()))?;
        }
        if m.perms.is_null() {
            return Err("ceph_userperm_new failed".into());
        }
        Ok(m)
    }

    /// `mkdir -p PATH` (new directories mode 0777): (parent's inode, (PATH's inode, its name)).
    fn make_dirs(&self, path: &str) -> Result<(*mut Inode, Named), String> {
        let mut cur: *mut Inode = std::ptr::null_mut();
        // SAFETY: live mount, out-pointer to a local.
        check("ceph_ll_lookup_root", unsafe {
            (self.lib.ceph_ll_lookup_root)(self.cmount, &mut cur)
        })?;
        let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
        let mut parent = std::ptr::null_mut();
        for part in &parts {
            let name = cstr(part)?;
            let mut next: *mut Inode = std::ptr::null_mut();
            let mut stx = Statx::default();
            // SAFETY: live mount and inode, NUL-terminated name, out-pointers to locals.
            let r = unsafe {
                (self.lib.ceph_ll_mkdir)(
                    self.cmount,
                    cur,
                    name.as_ptr(),
                    0o777,
                    &mut next,
                    &mut stx,
                    0,
                    0,
                    self.perms,
                )
            };
            if r == -libc::EEXIST {
                // SAFETY: as above.
                let r = unsafe {
                    (self.lib.ceph_ll_lookup)(
                        self.cmount,
                        cur,
                        name.as_ptr(),
                        &mut next,
                        &mut stx,
                        0,
                        0,
                        self.perms,
                    )
                };
                check(&format!("lookup {part} in {path}"), r)?;
            } else {
                check(&format!("mkdir {part} in {path}"), r)?;
            }
            self.put(parent);
            parent = cur;
            cur = next;
        }
        let leaf = cstr(parts.last().copied().unwrap_or("/"))?;
        Ok((parent, (cur, leaf)))
    }

    fn create_file(
        &self,
        dir: *mut Inode,
        name: &CStr,
        data: &[u8],
        fsync: bool,
    ) -> Result<(), String> {
        let mut inode: *mut Inode = std::ptr::null_mut();
        let mut fh: *mut Fh = std::ptr::null_mut();
        let mut stx = Statx::default();
        let flags = libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL;
        let what = |op: &str| format!("{op} {}", name.to_string_lossy());
        // SAFETY: live mount and directory inode, NUL-terminated name, out-pointers to locals.
        let r = unsafe {
            (self.lib.ceph_ll_create)(
                self.cmount,
                dir,
                name.as_ptr(),
                0o644,
                flags,
                &mut inode,
                &mut fh,
                &mut stx,
                0,
                0,
                self.perms,
            )
        };
        check(&what("create"), r)?;
        // SAFETY (below): the open file and inode created above, each released once.
        let w = unsafe {
            (self.lib.ceph_ll_write)(self.cmount, fh, 0, data.len() as u64, data.as_ptr().cast())
        };
        let s = if fsync && w >= 0 {
            unsafe { (self.lib.ceph_ll_fsync)(self.cmount, fh, 0) }
        } else {
            0
        };
        let c = unsafe { (self.lib.ceph_ll_close)(self.cmount, fh) };
        self.put(inode);
        check(&what("write"), w)?;
        if w as usize != data.len() {
            return Err(format!(
                "{}: short write ({w} of {})",
                what("write"),
                data.len()
            ));
        }
        check(&what("fsync"), s)?;
        check(&what("close"), c)
    }

    /// Reads the directory to the end with attributes; fails unless it holds exactly `count`
    /// files of `bytes` bytes.
    fn list(&self, dir: *mut Inode, count: usize, bytes: u64) -> Result<(), String> {
        let mut dirp = std::ptr::null_mut();
        // SAFETY: live mount and directory inode, out-pointer to a local.
        check("opendir", unsafe {
            (self.lib.ceph_ll_opendir)(self.cmount, dir, &mut dirp, self.perms)
        })?;
        let (mut files, mut wrong) = (0usize, 0usize);
        let r = loop {
            // SAFETY: zeroed plain C structs we own.
            let mut de: libc::dirent = unsafe { std::mem::zeroed() };
            let mut stx = Statx::default();
            // SAFETY: the open directory, out-pointers to locals, no inode reference wanted.
            let r = unsafe {
                (self.lib.ceph_readdirplus_r)(
                    self.cmount,
                    dirp,
                    &mut de,
                    &mut stx,
                    ffi::STATX_BASIC_STATS,
                    0,
                    std::ptr::null_mut(),
                )
            };
            if r <= 0 {
                break r;
            }
            // SAFETY: d_name is NUL-terminated by libcephfs.
            let name = unsafe { CStr::from_ptr(de.d_name.as_ptr()) }.to_bytes();
            if name == b"." || name == b".." {
                continue;
            }
            files += 1;
            if stx.stx_size != bytes {
                wrong += 1;
            }
        };
        // SAFETY: opened above, released once.
        unsafe { (self.lib.ceph_ll_releasedir)(self.cmount, dirp) };
        check("readdirplus", r)?;
        if files != count || wrong != 0 {
            return Err(format!(
                "listed {files} files ({wrong} not {bytes} bytes), wrote {count}"
            ));
        }
        Ok(())
    }

    fn unlink(&self, dir: *mut Inode, name: &CStr) -> Result<(), String> {
        // SAFETY: live mount and directory inode, NUL-terminated name.
        let r = unsafe { (self.lib.ceph_ll_unlink)(self.cmount, dir, name.as_ptr(), self.perms) };
        check(&format!("unlink {}", name.to_string_lossy()), r)
    }

    fn rmdir(&self, parent: *mut Inode, name: &CStr) -> Result<(), String> {
        // SAFETY: live mount and directory inode, NUL-terminated name.
        let r = unsafe { (self.lib.ceph_ll_rmdir)(self.cmount, parent, name.as_ptr(), self.perms) };
        check(&format!("rmdir {}", name.to_string_lossy()), r)
    }

    fn put(&self, inode: *mut Inode) {
        if !inode.is_null() {
            // SAFETY: a reference we own, put once.
            unsafe { (self.lib.ceph_ll_put)(self.cmount, inode) };
        }
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        // SAFETY: made in `new`, freed once; unmount of a handle that never mounted only
        // returns an error.
        unsafe {
            if !self.perms.is_null() {
                (self.lib.ceph_userperm_destroy)(self.perms);
            }
            (self.lib.ceph_unmount)(self.cmount);
            (self.lib.ceph_release)(self.cmount);
        }
    }
}

fn cstr(s: &str) -> Result<CString, String> {
    CString::new(s).map_err(|_| format!("{s:?} contains a NUL byte"))
}

fn check(what: &str, r: i32) -> Result<(), String> {
    if r < 0 {
        Err(format!("{what}: {}", std::io::Error::from_raw_os_error(-r)))
    } else {
        Ok(())
    }
}
