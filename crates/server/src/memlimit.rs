//! How much memory the server may use: its cgroup's limit (v2 `memory.max`, v1
//! `memory.limit_in_bytes`), else the machine's RAM. The write-behind window and the READ chunk
//! pool are sized from it, so that a server confined to a small cgroup keeps its acknowledged
//! data without being killed for it (measured before this: a 256 MiB cgroup, a 256 MiB default
//! dirty limit, the server OOM-killed mid-write in direct mode).

use std::path::Path;

/// The memory limit that applies to this process, in bytes, if one can be found.
pub fn memory_limit_bytes() -> Option<u64> {
    let cgroup = cgroup_limit();
    let ram = mem_total();
    match (cgroup, ram) {
        (Some(c), Some(r)) => Some(c.min(r)),
        (c, r) => c.or(r),
    }
}

fn cgroup_limit() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let mut best: Option<u64> = None;
    for line in text.lines() {
        // "hierarchy-ID:controllers:path": "0::/path" for v2, "N:memory:/path" for v1.
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        let path = path.trim_start_matches('/');
        let candidates: Vec<std::path::PathBuf> = if controllers.is_empty() {
            vec![
                Path::new("/sys/fs/cgroup").join(path).join("memory.max"),
                Path::new("/sys/fs/cgroup/unified")
                    .join(path)
                    .join("memory.max"),
            ]
        } else if controllers.split(',').any(|c| c == "memory") {
            vec![Path::new("/sys/fs/cgroup/memory")
                .join(path)
                .join("memory.limit_in_bytes")]
        } else {
            continue;
        };
        for f in candidates {
            if let Some(v) = std::fs::read_to_string(&f)
                .ok()
                .and_then(|t| t.trim().parse::<u64>().ok())
            {
                // v1 reports "no limit" as a huge number near i64::MAX; v2 as "max" (no parse).
                if v < (1u64 << 60) {
                    best = Some(best.map_or(v, |b| b.min(v)));
                }
            }
        }
    }
    best
}

fn mem_total() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

#[cfg(test)]
mod tests {
    #[test]
    fn finds_some_limit_on_linux() {
        let l = super::memory_limit_bytes().expect("MemTotal is always there on Linux");
        assert!(l >= 64 << 20, "implausible memory limit {l}");
    }
}
