//! Sets `LITANYFS_VERSION`, what `litanyfs --version` names: the crate's version, and,
//! when built from a git checkout, the commit it was built from (`0.1.0 (1a2b3c4)`).
//! A build from the crate's tarball (no `.git` beside Cargo.toml) names the version
//! alone: a checkout that merely contains the unpacked tarball (as `cargo package`
//! verifies it, under target/package/) is not where it was built from. Without git, or
//! when git fails, the version alone too: the build never fails for want of a commit.

use std::path::Path;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let version = env("CARGO_PKG_VERSION");
    let dir = env("CARGO_MANIFEST_DIR");
    let dir = Path::new(&dir);
    let commit = if dir.join(".git").exists() {
        watch_head(dir);
        git(dir, &["rev-parse", "--short", "HEAD"])
    } else {
        None
    };
    let full = match commit {
        Some(commit) => format!("{version} ({commit})"),
        None => version,
    };
    println!("cargo:rustc-env=LITANYFS_VERSION={full}");
}

fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("cargo sets {name} for build scripts"))
}

/// `git -C dir args...`'s output, trimmed, when it succeeds and says something.
fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .output()
        .ok()?;
    let text = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (out.status.success() && !text.is_empty()).then_some(text)
}

/// Reruns this script when HEAD moves: a commit, a checkout, a rebase. HEAD names a
/// branch whose ref is a loose file or a line of packed-refs; in a worktree these live
/// in different directories, which `git rev-parse --git-path` resolves. Only files that
/// exist are named (cargo reruns a script on every build for a missing one).
fn watch_head(dir: &Path) {
    let mut files = vec!["HEAD".to_string(), "packed-refs".to_string()];
    files.extend(git(dir, &["symbolic-ref", "-q", "HEAD"]));
    for file in files {
        if let Some(path) = git(
            dir,
            &["rev-parse", "--path-format=absolute", "--git-path", &file],
        ) && Path::new(&path).exists()
        {
            println!("cargo:rerun-if-changed={path}");
        }
    }
}
