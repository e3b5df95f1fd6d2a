//! Starting a conversation from a goal written into `new/<file>`: the goal's grammar,
//! the agent's name from the file's, and `litany prompt` run detached until the new
//! agent's ref exists.
//!
//! The goal is the file's text. It may open with header lines, each `config: NAME` or
//! `role: NAME` (one word after the colon, each at most once); the first line that is
//! not one ends the header, and one blank line after a header is dropped. A line such
//! as `role: you review the plan` is text, not a header. The file's name is the agent's
//! `--name` when litany would take it as one (CONTRACT §2.3); otherwise litany mints one.
//!
//! `litany prompt` drives the agent in the foreground and prints its id only when it
//! ends; the mount runs it detached, like a driver, and learns the id as soon as litany
//! has it: from the executor lock the prompt process holds on `inbox/<id>` (read from
//! its own `/proc/<pid>/fd`, a child of ours that cannot be reaped meanwhile but by the
//! reaper we start after), else, if it ends first, from what it printed, else from the
//! root agent that appeared. The caller answers once that agent's ref exists.

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::io::Read;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::ActError;
use crate::workspace::INBOX_DIR;

/// The longest goal: one argument of an `exec` (the kernel's `MAX_ARG_STRLEN`, less its
/// NUL).
pub(crate) const MAX_GOAL_BYTES: usize = 128 * 1024 - 1;
/// How long a start may take to show its agent's ref.
pub(crate) const START_LIMIT: Duration = Duration::from_secs(30);
const POLL: Duration = Duration::from_millis(5);
/// The most of a prompt's stderr kept for its refusal.
const STDERR_KEPT: usize = 16 << 10;

/// A goal as written into `new/`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Goal {
    pub(crate) config: Option<String>,
    pub(crate) role: Option<String>,
    pub(crate) text: String,
}

impl Goal {
    /// Parses the goal's header and text (module docs); `EINVAL` for a goal with no
    /// text.
    pub(crate) fn parse(body: &str) -> Result<Goal, ActError> {
        let mut goal = Goal {
            config: None,
            role: None,
            text: String::new(),
        };
        let mut rest = body;
        let mut header = false;
        loop {
            let (line, after) = match rest.split_once('\n') {
                Some((l, a)) => (l, a),
                None => (rest, ""),
            };
            let Some((key, value)) = line.split_once(':') else {
                break;
            };
            let value = value.trim();
            let slot = match key {
                "config" => &mut goal.config,
                "role" => &mut goal.role,
                _ => break,
            };
            if slot.is_some() || !super::is_word(value) {
                break;
            }
            *slot = Some(value.to_string());
            header = true;
            rest = after;
        }
        if header {
            rest = rest.strip_prefix('\n').unwrap_or(rest);
        }
        if rest.trim().is_empty() {
            return Err(ActError::new(libc::EINVAL, "the goal has no text"));
        }
        goal.text = rest.to_string();
        Ok(goal)
    }

    /// `litany prompt`'s argv (after the binary) for this goal, in workspace `ws`, as
    /// agent `name`.
    pub(crate) fn argv(&self, ws: &Path, name: Option<&str>) -> Vec<OsString> {
        let mut argv: Vec<OsString> = vec!["prompt".into()];
        if let Some(n) = name {
            argv.push(format!("--name={n}").into());
        }
        if let Some(c) = &self.config {
            argv.push(format!("--config={c}").into());
        }
        if let Some(r) = &self.role {
            argv.push(format!("--role={r}").into());
        }
        argv.push("--".into());
        argv.push(ws.as_os_str().to_owned());
        argv.push(self.text.clone().into());
        argv
    }
}

/// Whether `s` is shaped like an id's compact timestamp, `YYYYMMDDTHHMMSSZ`.
fn is_stamp(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 16
        && b[..8].iter().all(u8::is_ascii_digit)
        && b[8] == b'T'
        && b[9..15].iter().all(u8::is_ascii_digit)
        && b[15] == b'Z'
}

/// The agent name a file called `file` in `new/` gives, if litany takes it as one
/// (CONTRACT §2.3: one path component, no whitespace, its first hyphen token not an
/// id's timestamp); a name that could read as an option is not taken either.
pub(crate) fn name_of(file: &str) -> Option<&str> {
    let ok = crate::workspace::ids::is_component(file)
        && !file.starts_with(['-', '.'])
        && file.chars().all(|c| !c.is_whitespace() && !c.is_control())
        && !is_stamp(file.split('-').next().unwrap_or(file));
    ok.then_some(file)
}

/// A conversation started: its agent's id and the pid of the `litany prompt` driving it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Started {
    pub(crate) id: String,
    pub(crate) pid: u32,
}

/// The agent whose inbox directory under `inbox` process `pid` holds open (its
/// executor lock), if any.
fn locked_inbox(pid: u32, inbox: &Path) -> Option<String> {
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?;
    fds.flatten().find_map(|fd| {
        let target = std::fs::read_link(fd.path()).ok()?;
        let id = target.strip_prefix(inbox).ok()?;
        let mut parts = id.components();
        let (Some(one), None) = (parts.next(), parts.next()) else {
            return None;
        };
        Some(one.as_os_str().to_str()?.to_string())
    })
}

/// Runs `litany <argv>` detached in workspace `ws` and waits (at most `limit`) until the
/// agent it starts has a ref, asking `agents` for the living agents' ids. `before` is
/// what `agents` answered before the start.
pub(crate) fn start(
    harness: &Path,
    ws: &Path,
    argv: &[OsString],
    agents: &dyn Fn() -> BTreeSet<String>,
    limit: Duration,
) -> Result<Started, ActError> {
    let before = agents();
    let mut child = super::run::spawn(harness, argv, true)?;
    let pid = child.id();
    // Its output is read to the end whenever it comes, so the prompt never blocks on a
    // full pipe however long it drives.
    let stdout: Arc<Mutex<Vec<u8>>> = Arc::default();
    let stderr: Arc<Mutex<Vec<u8>>> = Arc::default();
    for (pipe, kept) in [
        (
            child
                .stdout
                .take()
                .map(|p| Box::new(p) as Box<dyn Read + Send>),
            stdout.clone(),
        ),
        (
            child
                .stderr
                .take()
                .map(|p| Box::new(p) as Box<dyn Read + Send>),
            stderr.clone(),
        ),
    ] {
        if let Some(mut pipe) = pipe {
            let _ = std::thread::Builder::new()
                .name("litanyfs-act-out".into())
                .stack_size(64 * 1024)
                .spawn(move || {
                    let mut buf = [0u8; 4096];
                    while let Ok(n) = pipe.read(&mut buf) {
                        if n == 0 {
                            break;
                        }
                        let mut k = kept.lock();
                        let room = STDERR_KEPT.saturating_sub(k.len());
                        k.extend_from_slice(&buf[..n.min(room)]);
                    }
                });
        }
    }
    let inbox = ws.join(INBOX_DIR);
    let started = Instant::now();
    let mut id = None;
    let mut ended = None;
    while started.elapsed() < limit {
        if let Some(found) = locked_inbox(pid, &inbox) {
            id = Some(found);
            break;
        }
        match child.try_wait() {
            Ok(Some(status)) => {
                ended = Some(status);
                break;
            }
            Ok(None) => std::thread::sleep(POLL),
            Err(_) => break,
        }
    }
    if ended.is_none() {
        // Driving on: a reaper collects it whenever it ends.
        crate::deposit::wake::reap(child);
    }
    let printed = || {
        // What it printed reaches us a moment after it exits.
        std::thread::sleep(Duration::from_millis(20));
        String::from_utf8_lossy(&stdout.lock()).trim().to_string()
    };
    let id = match (id, ended) {
        (Some(id), _) => id,
        (None, Some(status)) => {
            let out = printed();
            let appeared: Vec<String> = agents()
                .difference(&before)
                .filter(|a| crate::workspace::ids::parent_of(a).is_none())
                .cloned()
                .collect();
            if status.success() && !out.is_empty() {
                out.lines().last().unwrap_or_default().to_string()
            } else if appeared.len() == 1 {
                // A first step that failed fails the prompt; the agent is there.
                appeared[0].clone()
            } else {
                let said = String::from_utf8_lossy(&stderr.lock())
                    .trim_end()
                    .to_string();
                let line = said.lines().last().unwrap_or("").to_string();
                return Err(ActError::new(
                    super::run::errno_of(&said),
                    format!("litany prompt refused ({status}): {line}"),
                ));
            }
        }
        (None, None) => {
            return Err(ActError::new(
                libc::ETIMEDOUT,
                format!("litany prompt (pid {pid}) showed no agent within {limit:?}"),
            ));
        }
    };
    while !agents().contains(&id) {
        if started.elapsed() >= limit {
            return Err(ActError::new(
                libc::ETIMEDOUT,
                format!("agent {id} has no ref after {limit:?}"),
            ));
        }
        std::thread::sleep(POLL);
    }
    Ok(Started { id, pid })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_goal_may_open_with_a_header() {
        let g = Goal::parse("config: alt\nrole: planner\n\nPlan the release.\n").unwrap();
        assert_eq!(g.config.as_deref(), Some("alt"));
        assert_eq!(g.role.as_deref(), Some("planner"));
        assert_eq!(g.text, "Plan the release.\n");
        let g = Goal::parse("Find the bug.\nconfig: alt\n").unwrap();
        assert_eq!(g.config, None);
        assert_eq!(g.text, "Find the bug.\nconfig: alt\n");
        // A sentence is text, and so is a second config line.
        let g = Goal::parse("role: you review the plan\n").unwrap();
        assert_eq!(g.role, None);
        assert_eq!(g.text, "role: you review the plan\n");
        let g = Goal::parse("config: a\nconfig: b\nx").unwrap();
        assert_eq!(g.config.as_deref(), Some("a"));
        assert_eq!(g.text, "config: b\nx");
        assert_eq!(
            Goal::parse("config: alt\n\n  \n").unwrap_err().errno,
            libc::EINVAL
        );
        assert_eq!(Goal::parse("").unwrap_err().errno, libc::EINVAL);
    }

    #[test]
    fn the_goal_goes_after_the_options_and_a_double_dash() {
        let g = Goal::parse("config: alt\n--help").unwrap();
        let argv = g.argv(Path::new("/w"), Some("Scout"));
        let argv: Vec<&str> = argv.iter().map(|a| a.to_str().unwrap()).collect();
        assert_eq!(
            argv,
            [
                "prompt",
                "--name=Scout",
                "--config=alt",
                "--",
                "/w",
                "--help"
            ]
        );
    }

    #[test]
    fn a_file_name_is_the_agent_name_when_litany_takes_it() {
        assert_eq!(name_of("Scout"), Some("Scout"));
        assert_eq!(name_of("pale-otter"), Some("pale-otter"));
        assert_eq!(name_of("goal.txt"), Some("goal.txt"));
        for bad in ["a b", "20261206T231742Z-x", "-x", ".hidden", "", "tab\tx"] {
            assert_eq!(name_of(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn a_start_is_known_by_the_lock_its_prompt_holds() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path();
        let inbox = ws.join(INBOX_DIR).join("20260101T000000Z-abcd");
        std::fs::create_dir_all(&inbox).unwrap();
        // A stand-in for `litany prompt`: holds the inbox open, as its executor does.
        let argv: Vec<OsString> = vec![
            "-c".into(),
            format!("exec 3<{}; sleep 2", inbox.display()).into(),
        ];
        let known = || BTreeSet::from(["20260101T000000Z-abcd".to_string()]);
        let s = start(Path::new("/bin/sh"), ws, &argv, &known, START_LIMIT).unwrap();
        assert_eq!(s.id, "20260101T000000Z-abcd");
        // One that ends first is known by what it printed.
        let argv: Vec<OsString> = vec!["-c".into(), "echo 20260101T000000Z-abcd".into()];
        let s = start(Path::new("/bin/sh"), ws, &argv, &known, START_LIMIT).unwrap();
        assert_eq!(s.id, "20260101T000000Z-abcd");
        // A refusal is its errno.
        let argv: Vec<OsString> = vec![
            "-c".into(),
            "echo 'litany prompt: agent name \"S\" is already worn by x' >&2; exit 1".into(),
        ];
        let e = start(Path::new("/bin/sh"), ws, &argv, &known, START_LIMIT).unwrap_err();
        assert_eq!(e.errno, libc::EEXIST, "{e}");
    }
}
