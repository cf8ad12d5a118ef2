//! CLONE (RFC 7862 §15.13): NOTSUPP without reflinks, and on an XFS with reflinks on a loop
//! device.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clone_shares_or_is_not_supported() {
    let s = TestServer::start(rw()).await;
    let data = vec![5u8; 2 * BLOCK as usize];
    std::fs::write(s.export.join("src"), &data).unwrap();
    let mut v = V4::mount(&s, "clone client").await;
    let (so, sfh) = v
        .open(&s.export, "o", "src", false, OPEN4_SHARE_ACCESS_READ, 0)
        .await
        .unwrap();
    let (d, dfh) = v
        .open(&s.export, "o", "dst", true, OPEN4_SHARE_ACCESS_BOTH, 0)
        .await
        .unwrap();
    let res = send42(
        &mut v,
        vec![
            NfsArgop4::Putfh(sfh),
            NfsArgop4::Savefh(()),
            NfsArgop4::Putfh(dfh),
            NfsArgop4::Clone(CloneArgs {
                src_stateid: so.stateid,
                dst_stateid: d.stateid,
                src_offset: 0,
                dst_offset: 0,
                count: 0,
            }),
        ],
    )
    .await;
    match res.status {
        // ext4 and tmpfs: no reflinks.
        Nfsstat4::NOTSUPP => {
            assert_eq!(std::fs::metadata(s.export.join("dst")).unwrap().len(), 0)
        }
        Nfsstat4::OK => assert_eq!(std::fs::read(s.export.join("dst")).unwrap(), data),
        other => panic!("{other:?}: {res:?}"),
    }
}

/// An XFS file system with reflinks on a loop device (`tests/peers/reflink-fs.sh`), unmounted
/// and detached when dropped.
struct ReflinkFs {
    dir: std::path::PathBuf,
}

/// What an XFS with reflinks on a loop device takes.
const NEEDS_REFLINK: &str = "Run the test as root on a machine with loop devices \
                             (/dev/loop-control), mkfs.xfs (apt-get install xfsprogs) and a \
                             kernel with XFS";

impl ReflinkFs {
    /// Mounts one on `dir`, or says why this machine cannot (the script's exit 77).
    fn mount(dir: std::path::PathBuf) -> Result<ReflinkFs, String> {
        let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../tests/peers/reflink-fs.sh");
        let out = std::process::Command::new("bash")
            .arg(&script)
            .arg("mount")
            .arg(&dir)
            .output()
            .expect("run reflink-fs.sh");
        match out.status.code() {
            Some(0) => Ok(ReflinkFs { dir }),
            Some(77) => Err(String::from_utf8_lossy(&out.stderr).trim().to_string()),
            _ => panic!("reflink-fs.sh mount: {out:?}"),
        }
    }
}

impl Drop for ReflinkFs {
    fn drop(&mut self) {
        let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../tests/peers/reflink-fs.sh");
        let _ = std::process::Command::new("bash")
            .arg(&script)
            .arg("umount")
            .arg(&self.dir)
            .status();
    }
}

/// The status of CLONE of `count` bytes of `src` at `src_offset` into `dst` at `dst_offset`.
async fn clone_status(
    v: &mut V4,
    src: (&NfsFh4, Stateid4),
    dst: (&NfsFh4, Stateid4),
    src_offset: u64,
    dst_offset: u64,
    count: u64,
) -> Nfsstat4 {
    let ops = vec![
        NfsArgop4::Putfh(src.0.clone()),
        NfsArgop4::Savefh(()),
        NfsArgop4::Putfh(dst.0.clone()),
        NfsArgop4::Clone(CloneArgs {
            src_stateid: src.1,
            dst_stateid: dst.1,
            src_offset,
            dst_offset,
            count,
        }),
    ];
    send42(v, ops).await.status
}

/// CLONE (RFC 7862 §15.13) where the file system has reflinks (XFS with reflink=1 on a loop
/// device): `clone_blksize` is its block size there and 0 on ext4; a whole-file clone and an
/// aligned range share extents (FIEMAP says so) and read back as the source; a misaligned
/// offset, a length that is neither whole blocks nor to the end, and a source offset past the
/// end are INVAL; overlapping ranges of one file INVAL; a source on another export (ext4) XDEV.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clone_on_a_reflink_file_system_shares_extents_and_checks_ranges() {
    let dirs = support::TestDirs::new("nfs42-clone");
    let fs = match ReflinkFs::mount(dirs.base.join("xfs")) {
        Ok(fs) => fs,
        Err(why) => return needs::missing("reflink", &why, NEEDS_REFLINK),
    };
    let xfs = fs.dir.join("export");
    std::fs::create_dir(&xfs).unwrap();
    let mut config = rw();
    config.exports = vec![
        support::export_to_all(xfs.clone(), support::rw_options()),
        support::export_to_all(std::path::PathBuf::new(), support::rw_options()),
    ];
    let s = TestServer::start_in(config, dirs).await;
    let ext4 = s.export.clone();
    let src: Vec<u8> = (0..3 * BLOCK + 100).map(|i| (i * 7 % 253) as u8).collect();
    std::fs::write(xfs.join("src"), &src).unwrap();
    std::fs::write(ext4.join("other"), &src).unwrap();
    let mut v = V4::mount(&s, "reflink client").await;
    let (so, sfh) = v
        .open(&xfs, "o", "src", false, OPEN4_SHARE_ACCESS_BOTH, 0)
        .await
        .unwrap();
    let (d, dfh) = v
        .open(&xfs, "o", "dst", true, OPEN4_SHARE_ACCESS_BOTH, 0)
        .await
        .unwrap();
    let (e, efh) = v
        .open(&ext4, "o", "other", false, OPEN4_SHARE_ACCESS_READ, 0)
        .await
        .unwrap();
    // clone_blksize: the block size on XFS, none stated on ext4 (no reflinks).
    for (fh, want) in [(&sfh, BLOCK), (&efh, 0)] {
        let res = send42(
            &mut v,
            vec![
                NfsArgop4::Putfh(fh.clone()),
                NfsArgop4::Getattr(Bitmap4::from_bits(&[num::CLONE_BLKSIZE])),
            ],
        )
        .await;
        assert_eq!(
            attrs(res.results.last().unwrap()).clone_blksize,
            Some(want as u32),
            "{res:?}"
        );
    }
    // The whole file (count 0: to the source's end).
    let st = clone_status(&mut v, (&sfh, so.stateid), (&dfh, d.stateid), 0, 0, 0).await;
    assert_eq!(st, Nfsstat4::OK);
    assert!(std::fs::read(xfs.join("dst")).unwrap() == src);
    let frag = std::process::Command::new("filefrag")
        .arg("-v")
        .arg(xfs.join("dst"))
        .output()
        .expect("filefrag");
    assert!(
        String::from_utf8_lossy(&frag.stdout).contains("shared"),
        "the clone shares no extent: {}",
        String::from_utf8_lossy(&frag.stdout)
    );
    // An aligned range into the middle of the destination.
    let st = clone_status(
        &mut v,
        (&sfh, so.stateid),
        (&dfh, d.stateid),
        0,
        2 * BLOCK,
        BLOCK,
    )
    .await;
    assert_eq!(st, Nfsstat4::OK);
    let got = std::fs::read(xfs.join("dst")).unwrap();
    assert!(got[2 * BLOCK as usize..3 * BLOCK as usize] == src[..BLOCK as usize]);
    // Bad ranges.
    for (so_, doff, n, why) in [
        (100, 0, BLOCK, "a misaligned source offset"),
        (0, 100, BLOCK, "a misaligned destination offset"),
        (0, 0, 1000, "a length neither whole blocks nor to the end"),
        (8 * BLOCK, 0, BLOCK, "a source offset past the end"),
    ] {
        let st = clone_status(&mut v, (&sfh, so.stateid), (&dfh, d.stateid), so_, doff, n).await;
        assert_eq!(st, Nfsstat4::INVAL, "{why}");
    }
    // One file onto itself, overlapping.
    let st = clone_status(
        &mut v,
        (&sfh, so.stateid),
        (&sfh, so.stateid),
        0,
        BLOCK,
        2 * BLOCK,
    )
    .await;
    assert_eq!(st, Nfsstat4::INVAL, "overlapping ranges of one file");
    // Across exports (file systems).
    let st = clone_status(&mut v, (&efh, e.stateid), (&dfh, d.stateid), 0, 0, 0).await;
    assert_eq!(st, Nfsstat4::XDEV);
    drop(v);
    drop(s);
}
