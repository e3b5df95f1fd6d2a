//! The oracle: drives the REAL `litany` binary (pinned to 0.0.15) offline so
//! conformance tests can compare litanyfs with what the real harness writes.
//!
//! * [`litany_bin`] finds the binary (`$LITANY_BIN`, else `litany` on `PATH`,
//!   else `~/.cargo/bin/litany`) and checks its version ([`litanyfs::testing::prereq`]).
//! * [`real_workspace`] runs `scripts/real-workspace` into a temporary
//!   directory once per test process and parses its `KEY=VALUE` summary.
//!   Without a usable binary the test fails, unless `LITANYFS_SKIP` names
//!   `litany`: then it is `None`, and the skip is counted. A script that
//!   fails always panics. The directory is removed at process exit unless
//!   `$LITANY_ORACLE_KEEP` is set.
//! * [`read_tool_output`] and [`litany_message`] call the oracle verbs.
//! * [`marker_addresses`] lists every `read_tool_output` address the harness
//!   printed into the committed transcripts.
//!
//! The shared workspace is quiescent when handed out (no driver running, no
//! inbox locked). Tests must not change it: anything that deposits,
//! advances or marks needs its own copy from [`RealWorkspace::build`].

use std::collections::BTreeMap;
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// `read_tool_output`'s page size (CONTRACT §5.3).
pub const PAGE_BYTES: usize = 4096;

/// The root of this crate (where `scripts/` and `tests/harness/` live).
pub fn crate_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `scripts/real-workspace`.
pub fn script_path() -> PathBuf {
    crate_root().join("scripts").join("real-workspace")
}

/// `tests/harness/fake-bz`, the fake provider adapter.
pub fn fake_bz_path() -> PathBuf {
    crate_root().join("tests").join("harness").join("fake-bz")
}

/// The pinned litany binary (see [`litanyfs::testing::prereq::litany`]): a test without one
/// fails, unless `LITANYFS_SKIP` names `litany`, where this is `None` and the skip is
/// counted.
pub fn litany_bin() -> Option<PathBuf> {
    litanyfs::testing::prereq::litany()
}

// ---------------------------------------------------------------------------
// The generated workspace
// ---------------------------------------------------------------------------

/// A workspace built by `scripts/real-workspace` (see the script's header for
/// what it holds), with the summary the script printed.
#[derive(Debug, Clone)]
pub struct RealWorkspace {
    /// The directory the script built into (holds `home/`, `ws/`, …).
    pub dir: PathBuf,
    /// `WS`: the workspace root.
    pub ws: PathBuf,
    /// `LITANY_HOME`.
    pub home: PathBuf,
    /// `LITANY_BIN`: the binary the script drove.
    pub litany: PathBuf,
    /// `ROOT_A` ("Alpha"): quiet config, `--cwd`, two pending deposits.
    pub root_a: String,
    /// `ROOT_B` ("Beta"): quiet config; messaged Alpha and got its reply.
    pub root_b: String,
    /// `ROOT_C` ("Gamma"): stock workflow, has a titler child and a title.
    pub root_c: String,
    /// `TITLER_C`: Gamma's titler child.
    pub titler_c: String,
    /// `CWD_A`: Alpha's `--cwd` directory (the value of its `cwd` mark).
    pub cwd_a: PathBuf,
    /// `PENDING`: the pending deposit from `user` in Alpha's inbox.
    pub pending: PathBuf,
    /// `PENDING_CONTENT`: its body.
    pub pending_content: String,
    /// `PENDING_AGENT`: the pending deposit from Beta in Alpha's inbox.
    pub pending_agent: PathBuf,
    /// `PENDING_AGENT_CONTENT`: its body.
    pub pending_agent_content: String,
    /// Every `KEY=VALUE` line of the summary.
    pub summary: BTreeMap<String, String>,
}

impl RealWorkspace {
    /// Run `scripts/real-workspace dir` with `litany` and parse its summary.
    /// `dir` must be empty or not exist. Use this for a private workspace a
    /// test may change.
    pub fn build_with(litany: &Path, dir: &Path) -> Result<Self, String> {
        let out = Command::new("bash")
            .arg(script_path())
            .arg(dir)
            .env("LITANY_BIN", litany)
            .env_remove("FAKE_BZ_LOG")
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("run {}: {e}", script_path().display()))?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        if !out.status.success() {
            return Err(format!(
                "{} {} failed ({}):\n--- stderr ---\n{stderr}--- stdout ---\n{stdout}",
                script_path().display(),
                dir.display(),
                out.status
            ));
        }
        Self::parse_summary(&stdout).map_err(|e| format!("{e}\n--- stderr ---\n{stderr}"))
    }

    /// [`RealWorkspace::build_with`] using [`litany_bin`]; `Err` without a binary
    /// (only when skipped: see [`litany_bin`]).
    pub fn build(dir: &Path) -> Result<Self, String> {
        let bin = litany_bin().ok_or_else(|| "litany skipped".to_string())?;
        Self::build_with(&bin, dir)
    }

    /// Parse the script's stdout (`KEY=VALUE` lines).
    pub fn parse_summary(text: &str) -> Result<Self, String> {
        let mut summary = BTreeMap::new();
        for line in text.lines().filter(|l| !l.is_empty()) {
            let (k, v) = line
                .split_once('=')
                .ok_or_else(|| format!("summary line without '=': {line:?}"))?;
            summary.insert(k.to_string(), v.to_string());
        }
        let get = |k: &str| {
            summary
                .get(k)
                .cloned()
                .ok_or_else(|| format!("summary has no {k}: {text}"))
        };
        let ws = PathBuf::from(get("WS")?);
        Ok(Self {
            dir: ws.parent().map(Path::to_path_buf).unwrap_or_default(),
            home: get("LITANY_HOME")?.into(),
            litany: get("LITANY_BIN")?.into(),
            root_a: get("ROOT_A")?,
            root_b: get("ROOT_B")?,
            root_c: get("ROOT_C")?,
            titler_c: get("TITLER_C")?,
            cwd_a: get("CWD_A")?.into(),
            pending: get("PENDING")?.into(),
            pending_content: get("PENDING_CONTENT")?,
            pending_agent: get("PENDING_AGENT")?.into(),
            pending_agent_content: get("PENDING_AGENT_CONTENT")?,
            ws,
            summary,
        })
    }

    /// A summary value; panics if the key is missing.
    pub fn key(&self, k: &str) -> &str {
        self.summary
            .get(k)
            .unwrap_or_else(|| panic!("summary has no {k}"))
    }

    /// `git --git-dir <ws>/repo.git <args>`; panics on failure.
    pub fn git(&self, args: &[&str]) -> Vec<u8> {
        git(&self.ws, args)
    }

    /// `git show <spec>` (e.g. `agents/<id>:name`), `None` if it fails.
    pub fn show(&self, spec: &str) -> Option<Vec<u8>> {
        show(&self.ws, spec)
    }

    /// Agent ids, from `refs/heads/agents/`.
    pub fn agents(&self) -> Vec<String> {
        agents(&self.ws)
    }

    /// The `read_tool_output` addresses printed in the transcripts.
    pub fn marker_addresses(&self) -> Vec<MarkerAddress> {
        marker_addresses(&self.ws)
    }

    /// Every truncation marker printed in the transcripts.
    pub fn markers(&self) -> Vec<FoundMarker> {
        markers(&self.ws)
    }
}

static CLEANUP: Mutex<Option<PathBuf>> = Mutex::new(None);

extern "C" fn cleanup_at_exit() {
    let dir = CLEANUP.lock().ok().and_then(|mut g| g.take());
    if let Some(dir) = dir {
        let _ = wait_quiescent(&dir.join("ws"), Duration::from_secs(5));
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// The shared, read-only workspace for this test process (built on first use).
///
/// Without a pinned litany the test fails, or is skipped and counted when
/// `LITANYFS_SKIP` names `litany` (`None`). A failing build always panics.
pub fn real_workspace() -> Option<&'static RealWorkspace> {
    static WS: OnceLock<RealWorkspace> = OnceLock::new();
    let bin = litany_bin()?;
    Some(WS.get_or_init(|| {
        let dir = tempfile::Builder::new()
            .prefix("litanyfs-oracle-")
            .tempdir()
            .expect("create a temp dir for the oracle workspace")
            .keep();
        if std::env::var_os("LITANY_ORACLE_KEEP").is_some() {
            eprintln!("oracle: keeping {}", dir.display());
        } else {
            *CLEANUP.lock().unwrap() = Some(dir.clone());
            // SAFETY: registers a plain extern "C" fn with no captured state.
            unsafe { libc::atexit(cleanup_at_exit) };
        }
        let started = Instant::now();
        let built = RealWorkspace::build_with(&bin, &dir).unwrap_or_else(|e| panic!("{e}"));
        eprintln!(
            "oracle: real workspace {} built in {:.1?}",
            built.ws.display(),
            started.elapsed()
        );
        built
    }))
}

// ---------------------------------------------------------------------------
// Git reads
// ---------------------------------------------------------------------------

fn git_cmd(ws: &Path) -> Command {
    let mut c = Command::new("git");
    c.arg("--git-dir").arg(ws.join("repo.git"));
    for v in ["GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE"] {
        c.env_remove(v);
    }
    c.stdin(Stdio::null());
    c
}

/// `git --git-dir <ws>/repo.git <args>`; panics on failure.
pub fn git(ws: &Path, args: &[&str]) -> Vec<u8> {
    let out = git_cmd(ws).args(args).output().expect("run git");
    assert!(
        out.status.success(),
        "git {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// `git show <spec>`, `None` if git refuses.
pub fn show(ws: &Path, spec: &str) -> Option<Vec<u8>> {
    let out = git_cmd(ws).args(["show", spec]).output().ok()?;
    out.status.success().then_some(out.stdout)
}

/// Agent ids, from `refs/heads/agents/` (the only registry, CONTRACT §2.1).
pub fn agents(ws: &Path) -> Vec<String> {
    let out = git(
        ws,
        &[
            "for-each-ref",
            "--format=%(refname:strip=3)",
            "refs/heads/agents/",
        ],
    );
    String::from_utf8_lossy(&out)
        .lines()
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect()
}

// ---------------------------------------------------------------------------
// Truncation markers and their addresses (CONTRACT §5.1)
// ---------------------------------------------------------------------------

/// One parsed marker line:
/// `[... <label> truncated: <total> bytes / <lines> lines total; showing the
/// first <head> and last <tail> bytes; full record: <record>[; read the cut
/// middle with read_tool_output, address <address>] ...]`
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Marker {
    /// `stdout`, `stderr`, or `context file`.
    pub label: String,
    pub total: usize,
    pub lines: usize,
    pub head: usize,
    pub tail: usize,
    /// The `full record:` path (workspace-relative for captures).
    pub record: String,
    /// The continuation address, when the marker carries one.
    pub address: Option<String>,
}

const ADDRESS_CLAUSE: &str = "; read the cut middle with read_tool_output, address ";

/// Parse one marker line (without its trailing newline).
pub fn parse_marker(line: &str) -> Option<Marker> {
    let body = line.strip_prefix("[... ")?.strip_suffix(" ...]")?;
    let (label, rest) = body.split_once(" truncated: ")?;
    let (total, rest) = rest.split_once(" bytes / ")?;
    let (lines, rest) = rest.split_once(" lines total; showing the first ")?;
    let (head, rest) = rest.split_once(" and last ")?;
    let (tail, rest) = rest.split_once(" bytes; full record: ")?;
    let (record, address) = match rest.split_once(ADDRESS_CLAUSE) {
        Some((r, a)) => (r, Some(a.to_string())),
        None => (rest, None),
    };
    Some(Marker {
        label: label.to_string(),
        total: total.parse().ok()?,
        lines: lines.parse().ok()?,
        head: head.parse().ok()?,
        tail: tail.parse().ok()?,
        record: record.to_string(),
        address,
    })
}

/// A marker together with where it was committed.
#[derive(Debug, Clone)]
pub struct FoundMarker {
    /// The branch's agent id the entry was read from.
    pub branch: String,
    /// The transcript entry, e.g. `messages/003-tool.json`.
    pub entry: String,
    pub marker: Marker,
}

/// A `read_tool_output` address printed by the harness, split per the
/// grammar `steps/<agent-id>/<NNN>/tools/<tool-id>/output.json#<stream>@<offset>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MarkerAddress {
    pub address: String,
    /// The address's agent-id segment: the only caller allowed to page it.
    pub agent_id: String,
    /// The `<NNN>` segment as printed.
    pub step: String,
    pub tool_id: String,
    /// `steps/…/output.json`, relative to the workspace.
    pub record: String,
    pub stream: String,
    pub offset: usize,
    /// The marker's byte and line counts for the stream.
    pub total: usize,
    pub lines: usize,
    /// Where it was first seen: `agents/<branch>:<entry>`.
    pub found_in: String,
}

/// An address split per the grammar (CONTRACT §5.2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Address {
    /// `steps/<agent-id>/<NNN>/tools/<tool-id>/output.json`.
    pub record: String,
    pub agent_id: String,
    /// `<NNN>` as written.
    pub step: String,
    pub tool_id: String,
    pub stream: String,
    pub offset: usize,
}

impl Address {
    /// The same record and stream at another offset.
    pub fn at(&self, offset: usize) -> String {
        format!("{}#{}@{offset}", self.record, self.stream)
    }
}

/// Split an address the way litany does (last `#`, then last `@`; six
/// segments with three literals), without its stream/offset/segment
/// validation. `None` if the shape is not there at all.
pub fn split_address(address: &str) -> Option<Address> {
    let (record, frag) = address.rsplit_once('#')?;
    let (stream, offset) = frag.rsplit_once('@')?;
    let segs: Vec<&str> = record.split('/').collect();
    let [steps, agent, step, tools, tool, output] = segs.as_slice() else {
        return None;
    };
    (*steps == "steps" && *tools == "tools" && *output == "output.json").then_some(())?;
    Some(Address {
        record: record.to_string(),
        agent_id: agent.to_string(),
        step: step.to_string(),
        tool_id: tool.to_string(),
        stream: stream.to_string(),
        offset: offset.parse().ok()?,
    })
}

fn collect_strings(v: &serde_json::Value, out: &mut Vec<String>) {
    match v {
        serde_json::Value::String(s) => out.push(s.clone()),
        serde_json::Value::Array(a) => a.iter().for_each(|x| collect_strings(x, out)),
        serde_json::Value::Object(o) => o.values().for_each(|x| collect_strings(x, out)),
        _ => {}
    }
}

/// Every marker line in every committed `messages/*-tool.json` of every
/// agent branch (read from git, not from the worktrees).
pub fn markers(ws: &Path) -> Vec<FoundMarker> {
    let mut found = Vec::new();
    for agent in agents(ws) {
        let rev = format!("agents/{agent}");
        let names = git(ws, &["ls-tree", "--name-only", &rev, "messages/"]);
        for entry in String::from_utf8_lossy(&names).lines() {
            if !entry.ends_with("-tool.json") {
                continue;
            }
            let Some(bytes) = show(ws, &format!("{rev}:{entry}")) else {
                continue;
            };
            let Ok(json) = serde_json::from_slice::<serde_json::Value>(&bytes) else {
                panic!("agents/{agent}:{entry} is not JSON");
            };
            let mut texts = Vec::new();
            collect_strings(&json, &mut texts);
            for text in texts {
                for line in text.lines() {
                    if let Some(marker) = parse_marker(line) {
                        found.push(FoundMarker {
                            branch: agent.clone(),
                            entry: entry.to_string(),
                            marker,
                        });
                    }
                }
            }
        }
    }
    found
}

/// Every distinct `read_tool_output` address the harness printed in the
/// workspace's transcripts, sorted by address. A child branch that inherits
/// its parent's transcript repeats the parent's addresses; each address is
/// listed once, with the branch it was first seen on.
pub fn marker_addresses(ws: &Path) -> Vec<MarkerAddress> {
    let mut by_address = BTreeMap::new();
    for found in markers(ws) {
        let Some(address) = found.marker.address.clone() else {
            continue;
        };
        let a = split_address(&address)
            .unwrap_or_else(|| panic!("harness printed an address outside the grammar: {address}"));
        by_address.entry(address.clone()).or_insert(MarkerAddress {
            address,
            agent_id: a.agent_id,
            step: a.step,
            tool_id: a.tool_id,
            record: a.record,
            stream: a.stream,
            offset: a.offset,
            total: found.marker.total,
            lines: found.marker.lines,
            found_in: format!("agents/{}:{}", found.branch, found.entry),
        });
    }
    by_address.into_values().collect()
}

// ---------------------------------------------------------------------------
// Oracle verbs
// ---------------------------------------------------------------------------

fn litany_cmd() -> Command {
    let bin = litany_bin().expect("litany is named in LITANYFS_SKIP, yet a test called it");
    let mut c = Command::new(bin);
    for v in [
        "LITANY_CONV_REPO",
        "LITANY_CONV_BRANCH",
        "LITANY_TOOL_ID",
        "LITANY_LOCK_FD",
    ] {
        c.env_remove(v);
    }
    c
}

fn run_with_stdin(mut cmd: Command, stdin: &[u8]) -> Output {
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("spawn litany");
    {
        let mut pipe = child.stdin.take().unwrap();
        // The tool may exit before reading everything; that is its answer.
        let _ = pipe.write_all(stdin);
    }
    child.wait_with_output().expect("wait for litany")
}

fn code(out: &Output) -> i32 {
    out.status
        .code()
        .unwrap_or_else(|| panic!("litany died by a signal: {:?}", out.status))
}

/// `litany tool read_tool_output` as agent `agent_id` of workspace `ws`
/// (`LITANY_CONV_REPO=ws`, `LITANY_CONV_BRANCH=agent_id`), stdin
/// `{"address": address}`. Returns (exit code, stdout bytes, stderr text).
pub fn read_tool_output(ws: &Path, agent_id: &str, address: &str) -> (i32, Vec<u8>, String) {
    let input = serde_json::json!({ "address": address }).to_string();
    read_tool_output_stdin(ws, agent_id, input.as_bytes())
}

/// [`read_tool_output`] with raw stdin bytes (for malformed inputs).
pub fn read_tool_output_stdin(ws: &Path, agent_id: &str, stdin: &[u8]) -> (i32, Vec<u8>, String) {
    let mut cmd = litany_cmd();
    cmd.args(["tool", "read_tool_output"])
        .env("LITANY_CONV_REPO", ws)
        .env("LITANY_CONV_BRANCH", agent_id);
    let out = run_with_stdin(cmd, stdin);
    (
        code(&out),
        out.stdout,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The banner `read_tool_output` prints on stderr for a page
/// `[offset, end)` of a `len`-byte stream (CONTRACT §5.3), newline included.
pub fn expected_banner(
    record: &str,
    stream: &str,
    offset: usize,
    end: usize,
    len: usize,
) -> String {
    let tail = if end >= len {
        "end of stream".to_string()
    } else {
        format!("continue with address {record}#{stream}@{end}")
    };
    format!("read_tool_output: bytes {offset}-{end} of {len} from {record} {stream}; {tail}\n")
}

/// `litany message -- <ws> <agent_or_name> <content>` with `LITANY_HOME=home`
/// and `LITANY_CONV_BRANCH=sender` (removed for `None`, i.e. sender `user`).
/// Returns (exit code, stderr text). If the recipient's lock is free this
/// launches a detached driver: see [`wait_quiescent`] and [`InboxLock`].
pub fn litany_message(
    ws: &Path,
    home: &Path,
    agent_or_name: &str,
    content: &str,
    sender: Option<&str>,
) -> (i32, String) {
    let (code, _stdout, stderr) = litany_message_full(ws, home, agent_or_name, content, sender);
    (code, stderr)
}

/// [`litany_message`], also returning stdout (documented to be empty).
pub fn litany_message_full(
    ws: &Path,
    home: &Path,
    agent_or_name: &str,
    content: &str,
    sender: Option<&str>,
) -> (i32, Vec<u8>, String) {
    let mut cmd = litany_cmd();
    // `--`: without it clap reads content such as `-x` or `--help` as a flag
    // (exit 2, or help printed and nothing deposited).
    cmd.arg("message")
        .arg("--")
        .arg(ws)
        .arg(agent_or_name)
        .arg(content)
        .env("LITANY_HOME", home)
        .stdin(Stdio::null());
    if let Some(sender) = sender {
        cmd.env("LITANY_CONV_BRANCH", sender);
    }
    let out = cmd.output().expect("run litany message");
    (
        code(&out),
        out.stdout,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Run any litany verb with `LITANY_HOME=home`; returns the raw output.
pub fn litany(home: &Path, args: &[&std::ffi::OsStr]) -> Output {
    let mut cmd = litany_cmd();
    cmd.args(args).env("LITANY_HOME", home).stdin(Stdio::null());
    cmd.output().expect("run litany")
}

// ---------------------------------------------------------------------------
// Locks and quiescence (CONTRACT §3.7)
// ---------------------------------------------------------------------------

/// Holds `flock(LOCK_EX)` on `<ws>/inbox/<agent>` like an executor would, so
/// `litany message` answers Busy and launches nothing; released on drop.
/// The fd is close-on-exec, so children never inherit it.
pub struct InboxLock {
    file: std::fs::File,
}

impl InboxLock {
    /// Take the lock without blocking; `Err` if someone holds it.
    pub fn try_hold(ws: &Path, agent: &str) -> std::io::Result<Self> {
        let dir = ws.join("inbox").join(agent);
        std::fs::create_dir_all(&dir)?;
        let file = std::fs::File::open(&dir)?;
        // SAFETY: flock on an fd we own.
        let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        if rc != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Self { file })
    }
}

impl Drop for InboxLock {
    fn drop(&mut self) {
        // SAFETY: unlock our own fd; closing it would release it anyway.
        unsafe { libc::flock(self.file.as_raw_fd(), libc::LOCK_UN) };
    }
}

/// Pids (other than this process) with `ws` as one of their arguments:
/// detached `litany advance <ws> <id>` drivers (and a driver between fork
/// and exec, still carrying its parent's `litany <verb> <ws> …` argv).
pub fn workspace_processes(ws: &Path) -> Vec<u32> {
    let me = std::process::id();
    let needle = ws.as_os_str().as_bytes();
    let mut pids = Vec::new();
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return pids;
    };
    for e in rd.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        if pid == me {
            continue;
        }
        // A litanyfs daemon serving the workspace is not the harness at work.
        if let Ok(cmdline) = std::fs::read(e.path().join("cmdline"))
            && cmdline.split(|b| *b == 0).any(|arg| arg == needle)
            && !cmdline
                .split(|b| *b == 0)
                .next()
                .is_some_and(|a| a.ends_with(b"litanyfs"))
        {
            pids.push(pid);
        }
    }
    pids
}

/// Inbox directories of `ws` that some process holds a flock on, read from
/// `/proc/locks` (never probed).
pub fn locked_inboxes(ws: &Path) -> Vec<PathBuf> {
    let mut want = BTreeMap::new();
    if let Ok(rd) = std::fs::read_dir(ws.join("inbox")) {
        for e in rd.flatten() {
            if let Ok(m) = std::fs::metadata(e.path())
                && m.is_dir()
            {
                let dev = m.dev();
                let major = (dev >> 8) & 0xfff;
                let minor = (dev & 0xff) | ((dev >> 12) & 0xfff00);
                want.insert(format!("{major:02x}:{minor:02x}:{}", m.ino()), e.path());
            }
        }
    }
    let locks = std::fs::read_to_string("/proc/locks").unwrap_or_default();
    let mut held = Vec::new();
    for line in locks.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        // `1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF`
        if f.get(1) == Some(&"FLOCK")
            && let Some(path) = f.get(5).and_then(|k| want.get(*k))
        {
            held.push(path.clone());
        }
    }
    held
}

/// Wait until no process names `ws` and no inbox of `ws` is locked, three
/// polls in a row; `Err` with what was still busy after `timeout`.
pub fn wait_quiescent(ws: &Path, timeout: Duration) -> Result<(), String> {
    let deadline = Instant::now() + timeout;
    let mut calm = 0;
    loop {
        let procs = workspace_processes(ws);
        let locks = locked_inboxes(ws);
        if procs.is_empty() && locks.is_empty() {
            calm += 1;
            if calm >= 3 {
                return Ok(());
            }
        } else {
            calm = 0;
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "{} not quiescent after {timeout:?}: processes {procs:?}, locked inboxes {locks:?}",
                ws.display()
            ));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}
