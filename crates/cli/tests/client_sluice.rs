//! The client library and commands against the sluice server binary this crate builds (or
//! $SLUICE_BIN).
mod scenarios;
mod servers;

use servers::{runtime, SluiceServer};

#[test]
fn client_against_sluice_server() {
    let bin = SluiceServer::binary();
    let server = SluiceServer::start(&bin);
    runtime().block_on(scenarios::all(&server));
}
