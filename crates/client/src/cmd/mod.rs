//! The client commands.
use clap::Subcommand;

#[derive(Debug, Subcommand)]
pub enum ClientCmd {}

pub async fn run(cmd: ClientCmd) -> Result<(), String> {
    match cmd {}
}
