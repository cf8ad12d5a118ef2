//! The client against nfs-ganesha, a server nobody here wrote.
mod common;
mod scenarios;

use common::{runtime, Ganesha};

#[test]
fn client_against_ganesha() {
    let server = Ganesha::start();
    runtime().block_on(scenarios::all(&server));
}
