//! What the binary's test files share.

use std::process::Command;

/// The `server` binary, with none of the environment's settings that would change what a test
/// runs against, and its log at `info`.
pub fn server() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_server"));
    command
        .env_remove("DATANODE_DB")
        .env_remove("DATANODE_LISTEN")
        .env("RUST_LOG", "info");
    command
}
