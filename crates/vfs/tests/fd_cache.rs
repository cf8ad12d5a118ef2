//! The open-file cache stays within its bound and leaks no descriptor. A test binary of its own:
//! it counts the process's descriptors, which other tests running in parallel would disturb.

use bytes::Bytes;
use sluice_vfs::FileSystem;
use sluice_vfs::{Caller, CreateHow, Cred, LocalFs, LocalFsConfig, SetAttr, StableHow};
use std::path::PathBuf;

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

#[test]
fn bounded_and_leak_free_under_heavy_use() {
    let base = PathBuf::from(format!("/tmp/sluice-fdcache-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    std::fs::create_dir_all(base.join("export")).unwrap();
    let baseline = open_fds();
    {
        let limit = 16;
        let fs = LocalFs::new(
            LocalFsConfig::new(base.join("export"))
                .state_dir(base.join("state"))
                .open_files_max(limit),
        )
        .unwrap();
        let root = fs.root_handle();
        let me = Caller::with_cred(Cred::root());
        let attrs = SetAttr {
            mode: Some(0o644),
            ..SetAttr::default()
        };
        let mut handles = Vec::new();
        for i in 0..300 {
            let name = format!("f{i}");
            let c = fs
                .create(&me, &root, name.as_bytes(), CreateHow::Unchecked(attrs))
                .unwrap();
            handles.push(c.fh);
        }
        for round in 0..3u8 {
            for (i, fh) in handles.iter().enumerate() {
                let data = Bytes::from(vec![round; 100 + i]);
                fs.write(&me, fh, 0, &[data], StableHow::Unstable).unwrap();
                let mut buf = [vec![0u8; 4096]];
                let r = fs.read(&me, fh, 0, &mut [&mut buf[0][..]]).unwrap();
                assert_eq!(r.count, 100 + i);
                if i % 50 == 0 {
                    fs.commit(&me, fh, 0, 0).unwrap();
                }
                assert!(fs.open_files().len() <= limit);
                // Cache + root + transient descriptors of the operation itself.
                assert!(open_fds() <= baseline + limit + 4, "{} open", open_fds());
            }
            // Heavy use in every other procedure too.
            for i in (0..300).step_by(7) {
                fs.getattr(&handles[i]).unwrap();
                fs.lookup(&me, &root, format!("f{i}").as_bytes()).unwrap();
            }
            fs.readdir(&me, &root, 0, [0; 8], true, &mut |_| true)
                .unwrap();
        }
        for i in 0..300 {
            fs.remove(&me, &root, format!("f{i}").as_bytes()).unwrap();
        }
        assert_eq!(fs.open_files().len(), 0, "REMOVE closes cached descriptors");
        assert!(open_fds() <= baseline + 1);
    }
    assert_eq!(
        open_fds(),
        baseline,
        "every descriptor closed with the LocalFs"
    );
    std::fs::remove_dir_all(&base).unwrap();
}
