//! What the kernel granted at a mount's FUSE handshake: one log line written at `init`
//! ([`granted`]), and found again by `litanyfs --version` in the newest daemon log
//! ([`last_granted`]). The kernel tells only the daemon it is talking to, so the log is
//! the one place a later command can learn it from.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};

use fuser::{InitFlags, KernelConfig};

/// Where the line's own text starts, so that it can be found again in a log.
const MARK: &str = "kernel FUSE protocol";

/// Names of `flags`, without the `FUSE_` prefix, or `none`.
fn names(flags: InitFlags) -> String {
    let v: Vec<&str> = flags
        .iter_names()
        .map(|(n, _)| n.trim_start_matches("FUSE_"))
        .collect();
    if v.is_empty() {
        "none".into()
    } else {
        v.join(" ")
    }
}

/// The line for the log: the protocol version, and which of the features litanyfs
/// `asked` for the kernel offered (granted) and which it did not.
pub(crate) fn granted(config: &KernelConfig, asked: impl IntoIterator<Item = InitFlags>) -> String {
    let asked = asked.into_iter().fold(InitFlags::empty(), |all, f| all | f);
    let offered = config.capabilities();
    format!(
        "{MARK} {}: granted {}; not offered {}",
        config.kernel_abi(),
        names(asked & offered),
        names(asked - offered)
    )
}

/// The newest `.log` in `dir` that holds a [`granted`] line, and its last such line.
pub(crate) fn last_granted(dir: &Path) -> Option<(PathBuf, String)> {
    let mut logs: Vec<(std::time::SystemTime, PathBuf)> = std::fs::read_dir(dir)
        .ok()?
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "log"))
        .filter_map(|e| Some((e.metadata().ok()?.modified().ok()?, e.path())))
        .collect();
    logs.sort();
    logs.into_iter().rev().find_map(|(_, path)| {
        let file = std::fs::File::open(&path).ok()?;
        let line = BufReader::new(file)
            .lines()
            .map_while(Result::ok)
            .filter(|l| l.contains(MARK))
            .last()?;
        Some((path, line))
    })
}

/// What `--version` says about the kernel: the last [`granted`] line logged in `dir`,
/// or where such a line is to be found.
pub fn version_note(dir: Option<&Path>) -> String {
    let found = dir.and_then(last_granted);
    match (found, dir) {
        (Some((log, line)), _) => format!("last mount logged in {}:\n  {line}", log.display()),
        (None, Some(dir)) => format!(
            "no mount logged in {} yet; each mount logs the line `{MARK} ...` (a \
             --foreground mount to its stderr, under systemd the journal)",
            dir.display()
        ),
        (None, None) => format!(
            "each mount logs the line `{MARK} ...` to its log (a --foreground mount to its \
             stderr)"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_newest_log_with_the_line_is_found() {
        let t = tempfile::tempdir().unwrap();
        assert!(last_granted(t.path()).is_none());
        assert!(version_note(Some(t.path())).starts_with("no mount logged in"));
        let line = |v: &str| format!("[ts INFO  litanyfs::fs] {MARK} {v}: granted X\n");
        std::fs::write(t.path().join("a.log"), line("7.1") + &line("7.2")).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
        std::fs::write(t.path().join("b.log"), "nothing here\n").unwrap();
        std::fs::write(t.path().join("c.txt"), line("9.9")).unwrap();
        let (path, found) = last_granted(t.path()).unwrap();
        assert_eq!(path, t.path().join("a.log"));
        assert!(found.contains("7.2: granted X"), "{found}");
        assert!(version_note(Some(t.path())).contains("7.2"));
    }

    #[test]
    fn names_drop_the_prefix() {
        assert_eq!(names(InitFlags::empty()), "none");
        assert_eq!(
            names(InitFlags::FUSE_ATOMIC_O_TRUNC | InitFlags::FUSE_PASSTHROUGH),
            "ATOMIC_O_TRUNC PASSTHROUGH"
        );
    }
}
