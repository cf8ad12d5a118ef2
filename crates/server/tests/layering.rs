//! The layering the NFSv4 work relies on: the file-system layer and the data path name no
//! NFSv3 type, so a second protocol version calls them as they are. The file-system layer is a
//! crate without the XDR crate (the compiler enforces it as long as the dependency stays out,
//! which this test checks); the server's shared modules are checked by name. And the protocol
//! handlers take their request types from the RPC service layer, not from the socket driver.

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

/// The protocol handlers take the request types (`Peer`, `Transport`, `Reply`) from the RPC
/// service layer (`crate::service`), never from the socket driver: a handler that reaches into
/// `net` could not run under another driver (the simulator's, a test's).
#[test]
fn no_protocol_handler_imports_from_the_socket_driver() {
    let mut files = vec![
        manifest("src/nfs.rs"),
        manifest("src/mountd.rs"),
        manifest("src/portmap.rs"),
        manifest("src/datapath.rs"),
    ];
    // Every file of the handler module trees (nfs/ today; nfs4/ once it exists).
    let mut dirs = vec![manifest("src/nfs"), manifest("src/nfs4")];
    while let Some(dir) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries {
            let path = e.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|x| x == "rs") {
                files.push(path);
            }
        }
    }
    assert!(files.len() > 4, "the nfs/ tree was not found");
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        // The callback driver's connection handles (`nfs4/callback/conn.rs`) are a driver
        // beside the socket driver, not a handler: its tests start a real socket driver to
        // call back over. Its library code is held to the rule all the same.
        let text = if f.ends_with("nfs4/callback/conn.rs") {
            text.split("#[cfg(test)]").next().unwrap_or("").to_string()
        } else {
            text
        };
        for (n, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            for driver in ["crate::net", "super::net", "sluice_server::net"] {
                assert!(
                    !code.contains(driver) && !names_the_driver_module(code),
                    "{}:{}: `{}` names the socket driver; take Peer/Transport/Reply from \
                     crate::service",
                    f.display(),
                    n + 1,
                    line.trim()
                );
            }
        }
    }
}

/// A path through a module called `net` (`net::Peer` after `use crate::{net, ..}`) that is not
/// tokio's or the standard library's (`std::net`, or `core::net` where it lives).
fn names_the_driver_module(code: &str) -> bool {
    code.match_indices("net::").any(|(i, _)| {
        let before = &code[..i];
        let part_of_a_name = before
            .chars()
            .next_back()
            .is_some_and(|c| c.is_alphanumeric() || c == '_');
        let std_or_tokio = ["tokio::", "std::", "core::", "unix::"]
            .iter()
            .any(|p| before.ends_with(p));
        !part_of_a_name && !std_or_tokio
    })
}

#[test]
fn the_driver_check_tells_the_socket_driver_from_tokios_and_std() {
    assert!(names_the_driver_module("fn f(p: net::Peer) {}"));
    assert!(!names_the_driver_module("use tokio::net::TcpStream;"));
    assert!(!names_the_driver_module("let a: std::net::SocketAddr;"));
    assert!(!names_the_driver_module("use core::net::SocketAddr;"));
    assert!(!names_the_driver_module(
        "use std::os::unix::net::UnixStream;"
    ));
    assert!(!names_the_driver_module("let subnet::x;"));
}

/// The NFSv3 handlers reach NFSv4 delegations only through `crate::recall`'s trait: they name
/// none of the v4 state, its lock or its recall machinery (so the v4 side can change them
/// freely, and no import cycle runs from v3 into v4's state).
#[test]
fn the_nfsv3_handlers_reach_delegations_only_through_the_recall_trait() {
    let mut files = vec![manifest("src/nfs.rs"), manifest("src/recall.rs")];
    for e in std::fs::read_dir(manifest("src/nfs")).unwrap() {
        files.push(e.unwrap().path());
    }
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        for (n, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            for name in [
                "State4",
                "Nfs4",
                "DelegTable",
                "break_delegations",
                "sluice_nfs4state::state",
                "sluice_nfs4state::delegations",
                "nfs4::compound",
            ] {
                assert!(
                    !code.contains(name),
                    "{}:{}: `{}` names the NFSv4 state; go through crate::recall::RecallGate",
                    f.display(),
                    n + 1,
                    line.trim()
                );
            }
        }
    }
    let recall = std::fs::read_to_string(manifest("src/recall.rs")).unwrap();
    assert!(
        !recall.contains("use crate::") && !recall.contains("use super::"),
        "recall.rs depends on nothing of the crate: both protocol sides import it"
    );
}

/// The COMPOUND processor (`src/nfs4/compound*`) hands asynchronous COPYs to a `CopySpawner`
/// it owns (`sluice_nfs4state::offload`, re-exported as `nfs4::offload`); the tokio driver
/// (`src/nfs4/offload/driver.rs`, `crate::nfs4::offload::driver`) implements it and
/// imports the processor, so nothing in nfs4 outside its tests may import the driver back (an
/// import cycle).
#[test]
fn nfs4_does_not_import_the_copy_driver() {
    let mut dirs = vec![manifest("src/nfs4")];
    while let Some(dir) = dirs.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let path = e.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
                continue;
            }
            if path.ends_with("nfs4/offload/driver.rs") {
                continue; // the driver itself
            }
            let text = std::fs::read_to_string(&path).unwrap();
            let code = text.split("#[cfg(test)]").next().unwrap_or("");
            let imports = code
                .lines()
                .filter(|l| !l.trim_start().starts_with("//"))
                .any(|l| {
                    l.contains("offload::driver")
                        || l.contains("offload::run")
                        || l.contains("offload::drive")
                });
            assert!(
                !imports,
                "{} imports offload::driver: depend on nfs4::offload::CopySpawner instead",
                path.display()
            );
        }
    }
}
