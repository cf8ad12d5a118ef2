//! The sluice NFSv3 server.

pub mod backend;
