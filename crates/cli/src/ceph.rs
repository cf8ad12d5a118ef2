//! Ceph exports for `sluice serve`: `sluice serve ceph:PATH --ceph-conf FILE [--ceph-fs NAME]
//! [--ceph-id ID] [--ceph-uuid UUID]`, and `ceph:PATH` lines in an exports file with the same
//! settings as options (`ceph_conf=FILE`, `ceph_fs=NAME`, `ceph_id=ID`, `ceph_uuid=UUID`)
//! beside the usual ones:
//!
//! ```text
//! /srv/local      192.168.1.0/24(rw)
//! ceph:/vol/proj  *(rw,no_root_squash,ceph_conf=/etc/ceph/ceph.conf,ceph_fs=cephfs)
//! ```
//!
//! PATH is a directory inside the Ceph file system, and the NFS path clients mount is the same
//! PATH. The exports-file parser knows nothing of Ceph: a `ceph:` line is rewritten to a plain
//! line (its path without the prefix, the ceph options taken out) before it is parsed, and the
//! settings are kept here. A `ceph:` line must fit on one physical line.
//!
//! Each Ceph export is one libcephfs client session ([`sluice_ceph::CephFs`]); libcephfs is
//! loaded only when such an export is configured. The session is tagged with a uuid so that
//! the next start of this server reclaims it ([`sluice_ceph::default_session_uuid`]: the state
//! directory's node id, the file system and the path), unless `ceph_uuid` names another: the
//! uuid of a dead head whose clients this server takes over.

use sluice_ceph::{CephConfig, CephFs, CephFsConfig};
use sluice_server::backend::{Export, ExportId};
use sluice_server::nfs::ExportEntry;
use sluice_server::ServerConfig;
use std::path::PathBuf;
use std::sync::Arc;

/// The prefix that names a Ceph export.
pub const PREFIX: &str = "ceph:";

/// One Ceph export's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CephSpec {
    /// The directory inside the Ceph file system, also the NFS path.
    pub path: String,
    pub conf: PathBuf,
    pub fs_name: Option<String>,
    pub client_id: Option<String>,
    /// The session uuid; `None`: the default of this state directory and export.
    pub uuid: Option<String>,
}

/// The export path of `arg` when it names a Ceph export (`ceph:/x` → `/x`).
pub fn ceph_path(arg: &str) -> Option<&str> {
    arg.strip_prefix(PREFIX)
}

/// Rewrites an exports file's `ceph:` lines for the ordinary parser and collects their
/// settings. Errors name the line.
pub fn split_exports(text: &str) -> Result<(String, Vec<CephSpec>), String> {
    let mut out = String::with_capacity(text.len());
    let mut specs = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        let Some(rest) = trimmed.strip_prefix(PREFIX) else {
            out.push_str(line);
            out.push('\n');
            continue;
        };
        let err = |m: &str| format!("exports line {}: {m}", i + 1);
        let (path, rules) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
        if !path.starts_with('/') {
            return Err(err("a ceph: path must be absolute (ceph:/dir)"));
        }
        let mut spec = CephSpec {
            path: path.to_string(),
            conf: PathBuf::new(),
            fs_name: None,
            client_id: None,
            uuid: None,
        };
        // Take the ceph_* options out of every parenthesized option list.
        let mut kept = String::new();
        let mut rest = rules;
        while let Some(open) = rest.find('(') {
            let close = rest[open..]
                .find(')')
                .map(|c| open + c)
                .ok_or_else(|| err("unclosed '('"))?;
            kept.push_str(&rest[..=open]);
            let mut opts = Vec::new();
            for o in rest[open + 1..close].split(',') {
                match o.split_once('=') {
                    Some(("ceph_conf", v)) => spec.conf = PathBuf::from(v),
                    Some(("ceph_fs", v)) => spec.fs_name = Some(v.to_string()),
                    Some(("ceph_id", v)) => spec.client_id = Some(v.to_string()),
                    Some(("ceph_uuid", v)) => spec.uuid = Some(v.to_string()),
                    _ => opts.push(o),
                }
            }
            kept.push_str(&opts.join(","));
            kept.push(')');
            rest = &rest[close + 1..];
        }
        kept.push_str(rest);
        if spec.conf.as_os_str().is_empty() {
            return Err(err("a ceph: export needs ceph_conf=FILE"));
        }
        if specs.iter().any(|s: &CephSpec| s.path == spec.path) {
            // The parser merges lines of one path; the settings must be on the first.
        } else {
            specs.push(spec);
        }
        out.push_str(&format!("{path} {kept}\n"));
    }
    Ok((out, specs))
}

/// Opens the local exports of `config` and the Ceph ones of `specs`, in `config.exports` order.
/// Also returns a banner line per Ceph export.
pub fn open_all(
    config: &mut ServerConfig,
    specs: &[CephSpec],
) -> Result<(Vec<ExportEntry>, Vec<String>), String> {
    let all = std::mem::take(&mut config.exports);
    let is_ceph = |e: &Export| {
        specs
            .iter()
            .any(|s| std::path::Path::new(&s.path) == e.path)
    };
    config.exports = all.iter().filter(|e| !is_ceph(e)).cloned().collect();
    let mut locals = sluice_server::open_exports(config)?.into_iter();
    let local_paths = std::mem::take(&mut config.exports);
    let mut local_paths = local_paths.into_iter();
    let mut entries = Vec::new();
    let mut banner = Vec::new();
    let mut exports = Vec::new();
    for e in all {
        if !is_ceph(&e) {
            entries.push(locals.next().ok_or("local export missing")?);
            exports.push(local_paths.next().ok_or("local export missing")?);
            continue;
        }
        let spec = specs
            .iter()
            .find(|s| std::path::Path::new(&s.path) == e.path)
            .ok_or("ceph export missing")?;
        let mut ceph = CephConfig::new(&spec.conf, spec.path.clone());
        ceph.fs_name = spec.fs_name.clone();
        ceph.client_id = spec.client_id.clone();
        let mut cfg = CephFsConfig::new(ceph, &config.state_dir);
        cfg.io_bytes_max = config.read_bytes_max.min(config.write_bytes_max);
        if let Some(id) = e.clients.iter().find_map(|c| c.options.fsid) {
            cfg.export_id = Some(ExportId(id));
        }
        cfg.ceph.uuid = Some(match &spec.uuid {
            Some(u) => u.clone(),
            None => sluice_ceph::default_session_uuid(
                &config.state_dir,
                spec.fs_name.as_deref(),
                &spec.path,
            )
            .map_err(|err| {
                format!(
                    "cannot export ceph:{}: the Ceph node id in {}: {err}",
                    spec.path,
                    config.state_dir.display()
                )
            })?,
        });
        let fs =
            CephFs::new(cfg).map_err(|err| format!("cannot export ceph:{}: {err}", spec.path))?;
        banner.push(banner_line(&spec.path, fs.mount()));
        banner.push(format!(
            "  ceph:{} session {}: {}",
            spec.path,
            fs.mount().uuid().unwrap_or("(none)"),
            fs.mount().reclaim()
        ));
        entries.push(ExportEntry {
            fs: Arc::new(fs),
            export: e.clone(),
        });
        exports.push(e);
    }
    config.exports = exports;
    Ok((entries, banner))
}

/// The start-up banner's line for one Ceph export: where it is in which file system, and the
/// cluster reached (its monitors as configured), as whom, through which libcephfs.
fn banner_line(path: &str, mount: &sluice_ceph::CephMount) -> String {
    let fs = match mount.fs_name() {
        Some(name) => format!("file system {name}"),
        None => "the cluster's default file system".to_string(),
    };
    format!(
        "  ceph:{path} is {path} of {fs} (monitors {}, as {}, libcephfs {})",
        mount.monitors(),
        mount.client_name(),
        mount.library_version()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ceph_lines_become_plain_lines_and_keep_their_settings() {
        let text = "/srv/a 10.0.0.0/8(rw)\n\
                    ceph:/vol/p  *(rw,ceph_conf=/etc/ceph/c.conf,no_root_squash,ceph_fs=fs1,ceph_id=nfs,ceph_uuid=head-a)\n";
        let (plain, specs) = split_exports(text).unwrap();
        assert_eq!(
            plain,
            "/srv/a 10.0.0.0/8(rw)\n/vol/p  *(rw,no_root_squash)\n"
        );
        assert_eq!(
            specs,
            vec![CephSpec {
                path: "/vol/p".into(),
                conf: "/etc/ceph/c.conf".into(),
                fs_name: Some("fs1".into()),
                client_id: Some("nfs".into()),
                uuid: Some("head-a".into()),
            }]
        );
        let parsed = sluice_server::backend::exports::parse_exports(&plain).unwrap();
        assert_eq!(parsed[1].path, PathBuf::from("/vol/p"));
    }

    #[test]
    fn a_ceph_line_needs_its_conf_and_an_absolute_path() {
        assert!(split_exports("ceph:/x *(rw)\n")
            .unwrap_err()
            .contains("ceph_conf"));
        assert!(split_exports("ceph:x *(ceph_conf=/c)\n")
            .unwrap_err()
            .contains("absolute"));
        assert_eq!(ceph_path("ceph:/a"), Some("/a"));
        assert_eq!(ceph_path("/a"), None);
    }
}
