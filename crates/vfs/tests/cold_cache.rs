//! Handles after a cold start: a loop-mounted ext4 is unmounted and mounted again, so the
//! kernel's dentry cache knows nothing and `open_by_handle_at` returns *disconnected* dentries
//! for non-directories. Confinement must then find the file through its parent hint. Needs root,
//! loop devices and mkfs.ext4; without them it fails saying so, unless `SLUICE_TEST_SKIP` names
//! `loop` (docs/testing.md).

use sluice_vfs::FileSystem;
use sluice_vfs::{Caller, Cred, FileHandle, FsError, LocalFs, LocalFsConfig};
use std::path::{Path, PathBuf};
use std::process::Command;

#[path = "../../../tests/support/needs.rs"]
mod needs;

struct LoopFs {
    base: PathBuf,
    image: PathBuf,
    mnt: PathBuf,
    mounted: bool,
}

impl LoopFs {
    /// A fresh loop-mounted ext4, or why it could not be made.
    fn new() -> Result<LoopFs, String> {
        let base = PathBuf::from(format!("/tmp/sluice-cold-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir_all(&base).unwrap();
        let image = base.join("fs.img");
        let mnt = base.join("mnt");
        std::fs::create_dir(&mnt).unwrap();
        std::fs::File::create(&image)
            .unwrap()
            .set_len(32 << 20)
            .unwrap();
        let ok = run("mkfs.ext4", &["-q", "-F", image.to_str().unwrap()]);
        let mut fs = LoopFs {
            base,
            image,
            mnt,
            mounted: false,
        };
        if !ok {
            return Err("mkfs.ext4 failed or is missing".into());
        }
        if !fs.mount() {
            return Err("cannot loop-mount the ext4 image".into());
        }
        Ok(fs)
    }

    fn mount(&mut self) -> bool {
        self.mounted = run(
            "mount",
            &[
                "-o",
                "loop",
                self.image.to_str().unwrap(),
                self.mnt.to_str().unwrap(),
            ],
        );
        self.mounted
    }

    fn umount(&mut self) {
        assert!(run("umount", &[self.mnt.to_str().unwrap()]));
        self.mounted = false;
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.mnt.join(rel)
    }
}

impl Drop for LoopFs {
    fn drop(&mut self) {
        if self.mounted {
            let _ = run("umount", &[self.mnt.to_str().unwrap()]);
        }
        let _ = std::fs::remove_dir_all(&self.base);
    }
}

fn run(cmd: &str, args: &[&str]) -> bool {
    Command::new(cmd)
        .args(args)
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

fn open(export: &Path, state: &Path) -> LocalFs {
    LocalFs::new(LocalFsConfig::new(export).state_dir(state)).unwrap()
}

fn walk(fs: &LocalFs, path: &str) -> FileHandle {
    let me = Caller::with_cred(Cred::root());
    let mut fh = fs.root_handle();
    for part in path.split('/') {
        fh = fs.lookup(&me, &fh, part.as_bytes()).unwrap().fh;
    }
    fh
}

#[test]
fn file_handles_resolve_from_a_cold_cache_and_stay_confined() {
    let mut lfs = match LoopFs::new() {
        Ok(fs) => fs,
        Err(why) => {
            return needs::missing(
                "loop",
                &why,
                "Run the test as root on a machine with loop devices (/dev/loop-control) and \
                 mkfs.ext4 (apt-get install e2fsprogs)",
            )
        }
    };
    let state = lfs.base.join("state");
    for d in ["export/sub", "export/other", "outside"] {
        std::fs::create_dir_all(lfs.path(d)).unwrap();
    }
    std::fs::write(lfs.path("export/sub/f"), b"inside").unwrap();
    std::fs::write(lfs.path("export/top"), b"top").unwrap();
    std::fs::write(lfs.path("export/sub/leaves"), b"out").unwrap();
    std::fs::write(lfs.path("export/sub/moves"), b"moved").unwrap();
    let export = lfs.path("export");

    let (f, top, sub, leaves, moves) = {
        let fs = open(&export, &state);
        (
            walk(&fs, "sub/f"),
            walk(&fs, "top"),
            walk(&fs, "sub"),
            walk(&fs, "sub/leaves"),
            walk(&fs, "sub/moves"),
        )
    };
    std::fs::rename(lfs.path("export/sub/leaves"), lfs.path("outside/leaves")).unwrap();
    std::fs::rename(lfs.path("export/sub/moves"), lfs.path("export/other/moves")).unwrap();

    // A restart with nothing cached.
    lfs.umount();
    assert!(lfs.mount());
    let fs = open(&export, &state);
    let me = Caller::with_cred(Cred::root());
    assert!(fs.getattr(&sub).is_ok());
    let mut buf = [vec![0u8; 16]];
    let r = fs.read(&me, &f, 0, &mut [&mut buf[0][..]]).unwrap();
    assert_eq!(&buf[0][..r.count], b"inside");
    assert!(fs.getattr(&top).is_ok());
    // Moved out of the export: never served again.
    assert_eq!(fs.getattr(&leaves), Err(FsError::Stale));
    // Moved to another directory inside the export: with a cold cache the server cannot prove
    // where it is, so it is stale (knfsd's subtree_check behaves the same way) ...
    assert_eq!(fs.getattr(&moves), Err(FsError::Stale));
    // ... until a lookup by name (what a client does after ESTALE) reconnects it.
    let again = walk(&fs, "other/moves");
    assert!(fs.getattr(&again).is_ok());
    assert!(fs.getattr(&moves).is_ok());
    drop(fs);
}
