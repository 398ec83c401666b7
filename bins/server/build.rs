//! Records the git commit the binary is built from, as `DATANODE_COMMIT` ("unknown" outside a
//! checkout or without git), for `--version`, `/api/v2/info` and `datanode_build_info`.
//!
//! Never fails the build: a source tarball has no `.git`, and a machine may have no git.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let commit = git(&["rev-parse", "--short=12", "HEAD"]).unwrap_or_else(|| "unknown".to_owned());
    println!("cargo:rustc-env=DATANODE_COMMIT={commit}");
    // Rebuild when HEAD moves: HEAD itself (a checkout of another branch or commit), the ref it
    // names (a commit on the branch), and packed-refs (where `git gc` moves refs). `--git-path`
    // finds them in a worktree too, where they live in the main checkout's directory.
    let mut watched = vec!["HEAD".to_owned(), "packed-refs".to_owned()];
    if let Some(reference) = git(&["symbolic-ref", "-q", "HEAD"]) {
        watched.push(reference);
    }
    for name in watched {
        if let Some(path) = git(&["rev-parse", "--git-path", &name]) {
            let path = PathBuf::from(path);
            // A path cargo cannot find would rebuild every time; a ref not written yet is
            // covered by HEAD and packed-refs.
            if path.exists() {
                println!("cargo:rerun-if-changed={}", path.display());
            }
        }
    }
}

/// The trimmed output of `git ARGS` run in the package's directory, if it succeeds.
fn git(args: &[&str]) -> Option<String> {
    let output = Command::new("git").args(args).output().ok()?;
    let text = String::from_utf8(output.stdout).ok()?;
    let text = text.trim();
    (output.status.success() && !text.is_empty()).then(|| text.to_owned())
}
