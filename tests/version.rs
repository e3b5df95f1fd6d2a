//! `--version` names the crate's version and, built from a git checkout, the commit it
//! was built from (build.rs), and it follows HEAD.

use std::path::Path;
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_litanyfs");

fn stdout(args: &[&str]) -> String {
    let out = Command::new(BIN).args(args).output().unwrap();
    assert!(out.status.success(), "{args:?}");
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn version_names_the_commit_a_checkout_was_built_from() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let version = env!("CARGO_PKG_VERSION");
    let want = if dir.join(".git").exists() {
        let out = Command::new("git")
            .arg("-C")
            .arg(dir)
            .args(["rev-parse", "--short", "HEAD"])
            .output()
            .unwrap();
        assert!(out.status.success(), "git rev-parse in {}", dir.display());
        let head = String::from_utf8(out.stdout).unwrap();
        format!("litanyfs {version} ({})\n", head.trim())
    } else {
        format!("litanyfs {version}\n")
    };
    assert_eq!(stdout(&["-V"]), want);
    let long = stdout(&["--version"]);
    assert!(long.starts_with(&want), "{long}");
    // What --version printed before the commit was added still follows.
    assert!(long.lines().count() > 1, "{long}");
}
