//! The client commands of the `sluice` binary (`cp`, `cat`, `ls`, `stat`, `mkdir`, `rm`, `mv`):
//! clap argument types, progress display and output formatting over the `sluice-client`
//! library. A library target so that tests run the commands in-process ([`cmd::run_with_output`]);
//! the binary (`main.rs`) embeds [`cmd::ClientCmd`] in its subcommands.

pub mod cmd;
pub mod sink;
