//! The client library and commands against nfs-ganesha, a server nobody here wrote.
mod scenarios;
mod servers;

use servers::{runtime, Ganesha};

#[test]
fn client_against_ganesha() {
    let server = Ganesha::start();
    runtime().block_on(scenarios::all(&server));
}
