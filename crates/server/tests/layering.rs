//! The layering the NFSv4 work relies on: the file-system layer and the data path name no
//! NFSv3 type, so a second protocol version calls them as they are. The file-system layer is a
//! crate without the XDR crate (the compiler enforces it as long as the dependency stays out,
//! which this test checks); the server's shared modules are checked by name.

use std::path::Path;

/// NFSv3 wire types and the module that holds them.
const V3_NAMES: &[&str] = &[
    "nfs3::",
    "Nfsstat3",
    "NfsFh3",
    "Fattr3",
    "WccData",
    "PostOpAttr",
    "Sattr3",
    "Nfstime3",
    "Ftype3",
    "Specdata3",
    "Args3",
    "Res3",
];

fn manifest(rel: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)
}

#[test]
fn the_file_system_layer_does_not_depend_on_the_wire_types() {
    let toml = std::fs::read_to_string(manifest("../vfs/Cargo.toml")).unwrap();
    let deps = toml
        .split("[dependencies]")
        .nth(1)
        .expect("a dependencies table");
    assert!(
        !deps.contains("sluice-xdr"),
        "sluice-vfs must not depend on sluice-xdr: no file of the layer may name a wire type"
    );
}

#[test]
fn the_data_path_and_io_drivers_name_no_nfs3_type() {
    let mut files = vec![manifest("src/datapath.rs")];
    for e in std::fs::read_dir(manifest("src/io")).unwrap() {
        files.push(e.unwrap().path());
    }
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        for name in V3_NAMES {
            assert!(
                !text.contains(name),
                "{} names the NFSv3 type {name}: map it in the v3 handlers (nfs/map.rs)",
                f.display()
            );
        }
    }
}
