//! Running one litany verb to its end, on a worker thread (never a FUSE request thread):
//! the hardened launch of [`crate::deposit::wake::harness_command`] (a process group of
//! its own, spawned without forking the daemon), its output
//! collected, a bound on how long it may take, and its failure read as one errno.
//!
//! litany's verbs exit 1 with a sentence on stderr for every refusal; which refusal it
//! was is read from that sentence ([`classify`]), the one place that knows litany
//! 0.0.15's wording. A sentence it does not know is `EIO`, with the sentence in the log
//! and the event, so nothing is ever answered as success that was not.

use std::ffi::OsString;
use std::io::Read;
use std::path::Path;
use std::process::{ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use super::ActError;

/// The longest a verb may run before it is killed and the act answers `ETIMEDOUT`:
/// `litany stop` waits up to 5 s for a SIGTERM to work before its SIGKILL, and scans
/// `/proc` besides; nothing else it runs takes more than a moment.
pub(crate) const RUN_LIMIT: Duration = Duration::from_secs(30);
/// How often a running verb is looked at: often at first (most verbs end within tens
/// of milliseconds, and the writer waits for that), then less.
fn poll(elapsed: Duration) -> Duration {
    if elapsed < Duration::from_millis(200) {
        Duration::from_micros(500)
    } else {
        Duration::from_millis(5)
    }
}
/// The most of a verb's output kept (its refusals are one sentence).
const OUTPUT_KEPT: usize = 16 << 10;

/// How a verb ended.
#[derive(Debug)]
pub(crate) struct Ran {
    pub(crate) status: ExitStatus,
    pub(crate) stdout: String,
    pub(crate) stderr: String,
}

/// Reads `r` to its end on a thread of its own, keeping the first [`OUTPUT_KEPT`] bytes.
fn drain(mut r: impl Read + Send + 'static) -> mpsc::Receiver<Vec<u8>> {
    let (tx, rx) = mpsc::channel();
    let spawned = std::thread::Builder::new()
        .name("litanyfs-act-out".into())
        .stack_size(64 * 1024)
        .spawn(move || {
            let mut kept = Vec::new();
            let mut buf = [0u8; 4096];
            loop {
                match r.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => {
                        let room = OUTPUT_KEPT.saturating_sub(kept.len());
                        kept.extend_from_slice(&buf[..n.min(room)]);
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(_) => break,
                }
            }
            let _ = tx.send(kept);
        });
    if let Err(e) = spawned {
        log::warn!("no thread to read a litany verb's output ({e})");
    }
    rx
}

/// `<harness> <argv...>` started with its output piped back (`own_session`: in a
/// session of its own, as a detached driver must be).
pub(super) fn spawn(
    harness: &Path,
    argv: &[OsString],
    own_session: bool,
) -> Result<std::process::Child, ActError> {
    let mut cmd = crate::deposit::wake::harness_command(harness, own_session);
    cmd.args(argv).stdout(Stdio::piped()).stderr(Stdio::piped());
    cmd.spawn().map_err(|e| {
        ActError::new(
            e.raw_os_error().unwrap_or(libc::EIO),
            format!("cannot run {}: {e}", harness.display()),
        )
    })
}

/// Runs `<harness> <argv...>` to its end (at most `limit`), collecting its output.
pub(crate) fn run(harness: &Path, argv: &[OsString], limit: Duration) -> Result<Ran, ActError> {
    let mut child = spawn(harness, argv, false)?;
    let out = child.stdout.take().map(drain);
    let err = child.stderr.take().map(drain);
    let started = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if started.elapsed() < limit => std::thread::sleep(poll(started.elapsed())),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(ActError::new(
                    libc::ETIMEDOUT,
                    format!("{} did not end within {limit:?}; killed", verb(argv)),
                ));
            }
            Err(e) => {
                return Err(ActError::new(
                    libc::EIO,
                    format!("waiting for {}: {e}", verb(argv)),
                ));
            }
        }
    };
    // Whatever it left running holds no pipe of ours for long: a second at most.
    let text = |rx: Option<mpsc::Receiver<Vec<u8>>>| {
        rx.and_then(|rx| rx.recv_timeout(Duration::from_secs(1)).ok())
            .map(|b| String::from_utf8_lossy(&b).trim_end().to_string())
            .unwrap_or_default()
    };
    Ok(Ran {
        status,
        stdout: text(out),
        stderr: text(err),
    })
}

fn verb(argv: &[OsString]) -> String {
    format!(
        "litany {}",
        argv.first()
            .map(|v| v.to_string_lossy())
            .unwrap_or_default()
    )
}

/// What a verb's end means: `Ok` with its stdout when it succeeded, else the errno its
/// refusal stands for (module docs) and its words.
pub(crate) fn classify(argv: &[OsString], ran: &Ran) -> Result<String, ActError> {
    if ran.status.success() {
        return Ok(ran.stdout.clone());
    }
    let said = ran.stderr.lines().last().unwrap_or("").trim();
    let said = said
        .split_once(": ")
        .filter(|(head, _)| head.starts_with("litany"))
        .map_or(said, |(_, rest)| rest);
    let errno = errno_of(&ran.stderr);
    let how = match ran.status.code() {
        Some(code) => format!("exit {code}"),
        None => "killed".to_string(),
    };
    Err(ActError::new(
        errno,
        format!("{} refused ({how}): {said}", verb(argv)),
    ))
}

/// The errno litany's refusal `stderr` stands for.
pub(crate) fn errno_of(stderr: &str) -> i32 {
    let s = stderr.to_ascii_lowercase();
    if s.contains("being driven") || s.contains("holds its lock") {
        libc::EBUSY
    } else if s.contains("descendant(s)") || s.contains("pass --children") {
        libc::ENOTEMPTY
    } else if s.contains("already worn") {
        libc::EEXIST
    } else if s.contains("no config lineage")
        || s.contains("is not defined")
        || s.contains("not a single unbroken word")
        || s.contains("starts with an agent-id timestamp")
    {
        libc::EINVAL
    } else if s.contains("does not exist") || s.contains("no agent") {
        libc::ENOENT
    } else {
        libc::EIO
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn litany_refusals_read_as_one_errno_each() {
        let cases = [
            (
                "litany delete: agent \"x\" is being driven — an executor holds its lock at /w",
                libc::EBUSY,
            ),
            (
                "litany delete: agent \"x\" has 1 descendant(s) — x-y; deleting them is not \
                 implied, pass --children",
                libc::ENOTEMPTY,
            ),
            (
                "litany retarget: no config lineage \"nosuch\" in this workspace",
                libc::EINVAL,
            ),
            (
                "litany retarget: role \"bogus\" is not defined in the providers.yaml",
                libc::EINVAL,
            ),
            (
                "litany prompt: agent name \"Scout\" is already worn by agent x",
                libc::EEXIST,
            ),
            (
                "litany stop: branch \"nosuch\" does not exist in repo",
                libc::ENOENT,
            ),
            ("something new went wrong", libc::EIO),
        ];
        for (stderr, errno) in cases {
            assert_eq!(errno_of(stderr), errno, "{stderr}");
        }
    }

    #[test]
    fn a_verb_is_run_collected_and_bounded() {
        let sh = Path::new("/bin/sh");
        let argv: Vec<OsString> = vec![
            "-c".into(),
            "echo out; echo 'litany x: no agent y' >&2; exit 1".into(),
        ];
        let ran = run(sh, &argv, RUN_LIMIT).unwrap();
        assert_eq!(ran.stdout, "out");
        let e = classify(&argv, &ran).unwrap_err();
        assert_eq!(e.errno, libc::ENOENT);
        assert!(
            e.why.contains("exit 1") && e.why.ends_with("no agent y"),
            "{e}"
        );
        let slow: Vec<OsString> = vec!["-c".into(), "sleep 5".into()];
        let e = run(sh, &slow, Duration::from_millis(50)).unwrap_err();
        assert_eq!(e.errno, libc::ETIMEDOUT);
        let ok: Vec<OsString> = vec!["-c".into(), "echo deleted x".into()];
        let ran = run(sh, &ok, RUN_LIMIT).unwrap();
        assert_eq!(classify(&ok, &ran).unwrap(), "deleted x");
    }
}
