//! What a test needs from the machine (the real litany 0.0.15, root, a program), found
//! or refused in one place, for the unit tests and the integration tests alike.
//!
//! A missing prerequisite fails the test that asked for it, with the reason. A developer
//! who cannot provide it names it in [`SKIP_VAR`] (`LITANYFS_SKIP=litany,root,vim`); a
//! test that needs it then passes without running and is counted: each such skip is one
//! line appended to the file [`SKIP_LOG_VAR`] names, which `scripts/test` sets, counts
//! and reports at the end ("N skipped"), and which fails a CI run when it is not 0. No
//! other switch (`$CI` included) changes what a test does.
//!
//! Every lookup of litany checks that `litany --version` says [`LITANY_VERSION`]: the
//! tests compare litanyfs with that version's behaviour, and another one is no oracle.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

/// The litany version the oracle tests are written against (CONTRACT header).
pub(crate) const LITANY_VERSION: &str = "0.0.15";

/// The variable naming, comma-separated, the prerequisites a developer chose to go
/// without: `litany`, `root`, or a program's name.
pub(crate) const SKIP_VAR: &str = "LITANYFS_SKIP";

/// The variable naming the file each skip is recorded in (one tab-separated line: the
/// test binary, the test, the prerequisite, the reason).
pub(crate) const SKIP_LOG_VAR: &str = "LITANYFS_SKIP_LOG";

/// The name of the litany prerequisite in [`SKIP_VAR`].
pub(crate) const LITANY: &str = "litany";

/// The name of the root prerequisite in [`SKIP_VAR`].
pub(crate) const ROOT: &str = "root";

/// `found`, or the test's end: when `what` is missing (`found` is `Err(reason)`) the
/// calling test fails with the reason, unless [`SKIP_VAR`] names `what`, in which case
/// the skip is recorded and the caller gets `None` and returns.
pub(crate) fn need<T>(what: &str, found: Result<T, String>) -> Option<T> {
    match found {
        Ok(v) => Some(v),
        Err(reason) if skipping(what) => {
            record_skip(what, &reason);
            None
        }
        Err(reason) => panic!(
            "this test needs {what}, which is missing: {reason}\n\
             (to skip the tests that need it, and have them counted as skipped: \
             {SKIP_VAR}={what})"
        ),
    }
}

/// Whether [`SKIP_VAR`] names `what`.
pub(crate) fn skipping(what: &str) -> bool {
    std::env::var(SKIP_VAR).is_ok_and(|list| names(&list, what))
}

/// Whether the comma-separated `list` names `what` (case and spaces aside).
fn names(list: &str, what: &str) -> bool {
    list.split(',')
        .map(str::trim)
        .any(|s| s.eq_ignore_ascii_case(what))
}

fn record_skip(what: &str, reason: &str) {
    let binary = std::env::current_exe()
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_default();
    let thread = std::thread::current();
    let test = thread.name().unwrap_or("?");
    eprintln!("skipped ({SKIP_VAR} names {what}): {test}: {reason}");
    if let Some(log) = std::env::var_os(SKIP_LOG_VAR).filter(|v| !v.is_empty())
        && let Err(e) = append_skip(Path::new(&log), &binary, test, what, reason)
    {
        panic!(
            "cannot record the skip in {}: {e}",
            Path::new(&log).display()
        );
    }
}

/// One line for one skip, appended to `log`.
fn append_skip(
    log: &Path,
    binary: &str,
    test: &str,
    what: &str,
    reason: &str,
) -> std::io::Result<()> {
    let clean = |s: &str| s.replace(['\t', '\n'], " ");
    let line = format!(
        "{}\t{}\t{}\t{}\n",
        clean(binary),
        clean(test),
        clean(what),
        clean(reason)
    );
    // One write of one short line in append mode: lines from tests running at once, in
    // several processes, do not interleave.
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .and_then(|mut f| f.write_all(line.as_bytes()))
}

/// The real litany, at [`LITANY_VERSION`]: `$LITANY_BIN` if set (honoured or refused,
/// never replaced), else the first `litany` on `PATH` that has the version, else
/// `~/.cargo/bin/litany`. See [`need`] for what happens without one.
pub fn litany() -> Option<PathBuf> {
    need(LITANY, litany_lookup())
}

/// The lookup behind [`litany`], once per process: the binary or why there is none.
pub fn litany_lookup() -> Result<PathBuf, String> {
    static FOUND: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    FOUND.get_or_init(find_litany).clone()
}

fn find_litany() -> Result<PathBuf, String> {
    let install = format!(
        "bash scripts/setup --harness, or cargo install litany --version {LITANY_VERSION} --locked"
    );
    if let Some(explicit) = std::env::var_os("LITANY_BIN").filter(|v| !v.is_empty()) {
        return litany_version(Path::new(&explicit)).map_err(|e| format!("$LITANY_BIN: {e}"));
    }
    let mut candidates = Vec::new();
    if let Some(path) = std::env::var_os("PATH") {
        candidates.extend(std::env::split_paths(&path).map(|d| d.join("litany")));
    }
    if let Some(home) = std::env::var_os("HOME") {
        candidates.push(Path::new(&home).join(".cargo/bin/litany"));
    }
    let mut refused = Vec::new();
    for c in candidates.into_iter().filter(|c| c.is_file()) {
        match litany_version(&c) {
            Ok(p) => return Ok(p),
            Err(e) => refused.push(e),
        }
    }
    if refused.is_empty() {
        Err(format!(
            "no litany on $LITANY_BIN, PATH or ~/.cargo/bin (install: {install})"
        ))
    } else {
        Err(format!("{} (install: {install})", refused.join("; ")))
    }
}

/// `bin` (canonical) if `bin --version` says `litany <LITANY_VERSION> …`.
pub(crate) fn litany_version(bin: &Path) -> Result<PathBuf, String> {
    let out = Command::new(bin)
        .arg("--version")
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{}: {e}", bin.display()))?;
    let text = String::from_utf8_lossy(&out.stdout);
    // `litany 0.0.15 (brazen 0.0.19)`
    let mut words = text.split_whitespace();
    let (name, version) = (words.next(), words.next());
    if out.status.success() && name == Some("litany") && version == Some(LITANY_VERSION) {
        Ok(std::fs::canonicalize(bin).unwrap_or_else(|_| bin.to_path_buf()))
    } else {
        Err(format!(
            "{} reports {:?}, need litany {LITANY_VERSION}",
            bin.display(),
            text.lines().next().unwrap_or("").trim()
        ))
    }
}

/// Whether this process runs as root (mount(8), sysctls, other users' ids); `false`
/// only when skipped (see [`need`]).
pub fn root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let euid = unsafe { libc::geteuid() };
    need(
        ROOT,
        if euid == 0 {
            Ok(())
        } else {
            Err(format!("running as uid {euid}, not root"))
        },
    )
    .is_some()
}

/// Every program of `names` on `PATH`; `false` only when one is missing and skipped
/// (see [`need`], each program under its own name).
pub fn programs(names: &[&str]) -> bool {
    names.iter().all(|name| {
        need(
            name,
            program(name).ok_or_else(|| {
                format!("no {name} on PATH (bash scripts/setup --harness installs it)")
            }),
        )
        .is_some()
    })
}

/// `name` on `PATH`, if it is an executable file there.
pub(crate) fn program(name: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .chain([PathBuf::from("/sbin"), PathBuf::from("/usr/sbin")])
        .map(|dir| dir.join(name))
        .find(|p| {
            std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A script that prints `version` for `--version`.
    fn fake(dir: &Path, name: &str, version: &str) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let p = dir.join(name);
        std::fs::write(&p, format!("#!/bin/sh\necho '{version}'\n")).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        p
    }

    #[test]
    fn only_the_pinned_version_is_litany() {
        let t = tempfile::tempdir().unwrap();
        let good = fake(t.path(), "good", "litany 0.0.15 (brazen 0.0.19)");
        assert_eq!(
            litany_version(&good),
            Ok(std::fs::canonicalize(&good).unwrap())
        );
        for (name, says) in [
            ("newer", "litany 0.0.16 (brazen 0.0.20)"),
            ("prefix", "litany 0.0.150"),
            ("other", "lernie 0.0.15"),
            ("silent", ""),
        ] {
            let bin = fake(t.path(), name, says);
            let e = litany_version(&bin).unwrap_err();
            assert!(e.contains("need litany 0.0.15"), "{name}: {e}");
        }
        assert!(litany_version(&t.path().join("absent")).is_err());
    }

    #[test]
    fn a_missing_prerequisite_fails_the_test_unless_named() {
        // Not named in LITANYFS_SKIP (the variable names none of these): a panic naming
        // what is missing, the reason and the way to skip.
        let name = "no-such-prerequisite-3f9a";
        assert!(!skipping(name));
        let e = std::panic::catch_unwind(|| need::<()>(name, Err("gone".into()))).unwrap_err();
        let msg = e.downcast_ref::<String>().unwrap();
        assert!(msg.contains(name) && msg.contains("gone"), "{msg}");
        assert!(msg.contains(&format!("{SKIP_VAR}={name}")), "{msg}");
        assert_eq!(need(name, Ok(7)), Some(7));
    }

    #[test]
    fn the_skip_list_names_prerequisites_exactly() {
        assert!(names("litany,root", "litany"));
        assert!(names(" litany , Root", "root"));
        assert!(!names("litany", "lit"));
        assert!(!names("litanyx", "litany"));
        assert!(!names("", "litany"));
    }

    #[test]
    fn each_skip_is_one_line_of_the_log() {
        let t = tempfile::tempdir().unwrap();
        let log = t.path().join("skipped.log");
        append_skip(&log, "pages-1a2b", "a_test", "litany", "no litany\there").unwrap();
        append_skip(&log, "oracle-3c4d", "b_test", "root", "uid 1000").unwrap();
        assert_eq!(
            std::fs::read_to_string(&log).unwrap(),
            "pages-1a2b\ta_test\tlitany\tno litany here\n\
             oracle-3c4d\tb_test\troot\tuid 1000\n"
        );
    }

    #[test]
    fn a_program_is_found_on_path_or_not_at_all() {
        assert!(program("sh").is_some());
        assert!(program("no-such-program-3f9a").is_none());
    }
}
