//! The client against the sluice server binary (target/debug/sluice, or $SLUICE_BIN).
//!
//! The binary is built by `cargo build -p sluice`, which this crate cannot depend on. If it is
//! missing, this test says so on stderr and passes: the ganesha test is the one that must run.
mod common;
mod scenarios;

use common::{runtime, SluiceServer};

#[test]
fn client_against_sluice_server() {
    let Some(bin) = SluiceServer::binary() else {
        eprintln!(
            "SKIPPED (sluice server part only): target/debug/sluice not found; \
             run `cargo build -p sluice` first or set SLUICE_BIN"
        );
        return;
    };
    let server = SluiceServer::start(&bin);
    runtime().block_on(scenarios::all(&server));
}
