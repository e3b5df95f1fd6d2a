//! A model-based test of the live mount, in the spirit of mountpoint-s3's reference-model
//! tests: a seeded random sequence of changes to the backing workspace (what the harness
//! writes, deposits and drains, ref updates) interleaved with reads through a real mount,
//! each read checked against a plain in-memory model of what the mount must show.
//!
//! The model mirrors the backing tree entry by entry (every file, directory and symlink
//! under `steps/` and `inbox/`, `.tmp` files and debris included) and the refs (agents with
//! their committed trees, marks under both mark roots). [`Model::view`] applies the rules
//! of the tree (README.md, doc/SEMANTICS.md) to it and yields every path the mount must
//! show, with what each must list, hold or point to. Reads poll until the mount agrees
//! (the mount promises changes within a second; the test allows [`LIVE`]) and fail with
//! the seed, the step, the recent ops and expected vs got.
//!
//! Operations: the harness's writes (new step directories with records, appends to
//! `response.json` and `driver.log`, `output.json` and `input.json` written through a
//! `.tmp` and a rename, `*.tmp` files that stay, symlinks, pruned steps), deposits placed
//! in the real inbox (litany's dotted temp + rename, bursts of them, debris that is no
//! deposit), deposits written through the mount (plain and by an editor-style private
//! temp + rename; refused with ENOENT for an inbox without an agent ref), drains, removed
//! inboxes, and ref updates (agents made, advanced, renamed into and out of name clashes,
//! given executables and symlinks, deleted and revived; commit, blob and tree marks added,
//! moved and deleted under `refs/litany/` and `refs/lernie/`; `git pack-refs`). Reads:
//! a listing, a stat and full read, a readlink, or a stat of something that must be gone,
//! favouring the paths the last change touched, plus a full sweep every 50 steps.
//!
//! Invariants checked on every observation, stale or not: no listing under `steps/` shows
//! a `.tmp`, no inbox listing shows a name the drain would not take, and a file that has
//! been left alone for a second keeps its inode number for as long as it stays unchanged
//! at its path. Modes are checked too (records 0444, executables and directories 0555,
//! inbox directories 0755 since the mount takes deposits).
//!
//! Every run checks seeds 1 to 50 at the default length, and one more seed: the clock's,
//! or `LITANYFS_MODEL_SEED=<u64>` (which scripts/test sets from the clock and prints);
//! `LITANYFS_MODEL_STEPS=<n>` lengthens that one. The seed is printed at the start of a
//! run and in every failure, with the command that replays it; `LITANYFS_MODEL_TRACE=1`
//! prints every operation as it runs (a failure shows only the last 25). Every operation runs in
//! every run, the cases of the regression tests at the end (bugs this model found, since
//! fixed) included.

mod common;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Write as _;
use std::io::Write as _;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::{Duration, Instant};

use common::drain::{accepts as drain_accepts, seq_of};
use common::mount::{Mounted, eventually};
use git2::Oid;
use litanyfs::fixture::Fixture;
use litanyfs::workspace::refs::Flavour;

/// Steps of a default run: bounded so the test belongs in the normal suite.
const DEFAULT_STEPS: usize = 300;
/// How long a read may take to show a change before the check fails. The mount promises
/// a second, but this is no speed target (the run prints the longest wait): a busy
/// machine delays the invalidation thread past two seconds (seed 24 did so once in five
/// loaded runs), while a change the mount misses stays wrong for an hour (`WATCHED_TTL`),
/// so a deadline of seconds still catches it.
const LIVE: Duration = Duration::from_secs(10);
/// How long a writer's name resolves after its message was sent (doc/SEMANTICS.md: "your name
/// still resolves for 5 seconds after the deposit").
const ALIAS_GRACE: Duration = Duration::from_secs(5);
/// A full comparison of every path in the model, every this many steps (and at the end).
const SWEEP_EVERY: usize = 50;
/// How long a file must have been left alone before its inode number is held to: the
/// mount applies inotify events asynchronously, and an event it applies after a read
/// re-numbers the file that read saw (see the regression tests at the end). Held from
/// the first read instead, seed 3 fails: a `stdout` derived from a rewritten
/// `output.json` is renumbered once more, though its content is the same. Five seconds,
/// not one: at a load of 9 on two CPUs the invalidation of a rewritten `output.json`
/// reached its derived `stderr` after more than a second (seen during this round's
/// work); a renumbering of a file left alone for longer is still a failure.
const SETTLE: Duration = Duration::from_secs(5);

// ---------------------------------------------------------------------------------------
// The generator
// ---------------------------------------------------------------------------------------

/// xorshift64*, seeded: the whole run follows from the seed.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `0..n` (`n > 0`).
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn one_in(&mut self, n: usize) -> bool {
        self.below(n) == 0
    }

    fn pick<'a, T>(&mut self, v: &'a [T]) -> &'a T {
        &v[self.below(v.len())]
    }

    fn hex(&mut self, n: usize) -> String {
        (0..n)
            .map(|_| char::from_digit(self.below(16) as u32, 16).unwrap())
            .collect()
    }

    /// A short text that is valid UTF-8 and exercises JSON escapes.
    fn text(&mut self) -> String {
        const PIECES: [&str; 10] = [
            "hello\n",
            "line two\n",
            "tab\there",
            "quote \" and backslash \\",
            "Zoë ✓ — ünïcödé\n",
            "\u{1}ctl\u{7f}",
            "",
            "done.\n",
            "{\"json\": [1, 2]}\n",
            "   spaces   ",
        ];
        let mut s = String::new();
        for _ in 0..self.below(4) {
            let piece = PIECES[self.below(PIECES.len())];
            s.push_str(piece);
        }
        if self.one_in(8) {
            // Long enough for several 4 KiB pages.
            s.push_str(&"x".repeat(1 + self.below(12_000)));
        }
        s
    }
}

fn env_u64(name: &str) -> Option<u64> {
    let v = std::env::var(name).ok()?;
    let v = v.trim();
    match v.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => v.parse().ok(),
    }
    .or_else(|| panic!("{name}={v:?} is not a number"))
}

// ---------------------------------------------------------------------------------------
// The model
// ---------------------------------------------------------------------------------------

/// One entry of the backing tree (`steps/...` and `inbox/...`), as it is on disk.
#[derive(Debug, Clone)]
enum Backing {
    Dir,
    File {
        bytes: Vec<u8>,
        /// Bumped on every write: a file with the same generation is unchanged.
        version: u64,
        /// For a valid `output.json`: its decoded stdout and stderr.
        streams: Option<(Vec<u8>, Vec<u8>)>,
    },
    Link(String),
}

/// Git file modes the agent trees use.
const BLOB: i32 = 0o100644;
const EXEC: i32 = 0o100755;
const LINK: i32 = 0o120000;

#[derive(Debug, Clone)]
struct Agent {
    /// The committed tree: `goal.md`, `soul.md`, `name` and whatever else, with each
    /// entry's bytes (a symlink's target) and git mode.
    files: BTreeMap<String, (Vec<u8>, i32)>,
    tip: Oid,
}

impl Agent {
    fn name_file(&self) -> &[u8] {
        self.files.get("name").map_or(&[], |(b, _)| b.as_slice())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum MarkRoot {
    Litany,
    Lernie,
}

impl MarkRoot {
    fn prefix(self) -> &'static str {
        match self {
            MarkRoot::Litany => "refs/litany/",
            MarkRoot::Lernie => "refs/lernie/",
        }
    }
}

#[derive(Default)]
struct Model {
    /// Workspace-relative path -> entry, for everything under `steps/` and `inbox/`.
    backing: BTreeMap<String, Backing>,
    /// Living agents, by id.
    agents: BTreeMap<String, Agent>,
    /// (root, kind, id) -> what the mark file must read as.
    marks: BTreeMap<(MarkRoot, String, String), Vec<u8>>,
    version: u64,
}

/// What the mount must show at one path.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Want {
    Dir(BTreeSet<String>),
    File {
        bytes: Vec<u8>,
        /// The backing generation (or that of the `output.json` a stream comes from);
        /// `None` for git content, which is unchanged while its bytes are.
        version: Option<u64>,
        /// Permission bits: 0444, or 0555 for an executable blob.
        perm: u32,
    },
    Link(String),
    /// A text view the mount renders from records (`response.md`, `transcript.md`): a
    /// file whose size is what it reads; its text is checked against the real harness
    /// in tests/records.rs, not here.
    Rendered,
    /// A view of the whole workspace at the root (`status`, `events`, ...): a read-only
    /// file that always reads; its content is checked in tests/views.rs, not here.
    Glance,
    /// An agent's `ctl`: the mount owner's (mode 600), and it reads; what it does is
    /// tests/control.rs's.
    Ctl,
}

type View = BTreeMap<String, Want>;

fn is_component(s: &str) -> bool {
    !s.is_empty() && s != "." && s != ".." && !s.contains(['/', '\\', '\0'])
}

fn parent_of(path: &str) -> (&str, &str) {
    path.rsplit_once('/').unwrap_or(("", path))
}

fn add_dir(view: &mut View, path: &str) {
    if !path.is_empty() {
        let (parent, name) = parent_of(path);
        add_dir(view, parent);
        if let Some(Want::Dir(names)) = view.get_mut(parent) {
            names.insert(name.to_string());
        }
    }
    view.entry(path.to_string())
        .or_insert_with(|| Want::Dir(BTreeSet::new()));
}

fn add_leaf(view: &mut View, path: &str, want: Want) {
    let (parent, name) = parent_of(path);
    add_dir(view, parent);
    if let Some(Want::Dir(names)) = view.get_mut(parent) {
        names.insert(name.to_string());
    }
    view.insert(path.to_string(), want);
}

/// `steps/<agent>/<digits>/tools/<tool>/output.json`: a record whose streams are shown.
fn is_capture_record(path: &str) -> bool {
    let parts: Vec<&str> = path.split('/').collect();
    matches!(parts.as_slice(),
        ["steps", agent, step, "tools", tool, "output.json"]
            if !agent.is_empty() && !tool.is_empty()
                && !step.is_empty() && step.bytes().all(|b| b.is_ascii_digit()))
}

impl Model {
    fn next_version(&mut self) -> u64 {
        self.version += 1;
        self.version
    }

    /// Whether the mount shows backing entry `path` (its ancestors are checked apart).
    fn shows_backing(path: &str, entry: &Backing) -> bool {
        let parts: Vec<&str> = path.split('/').collect();
        match parts[0] {
            "steps" => parts[1..].iter().all(|p| !p.ends_with(".tmp")),
            "inbox" => match parts.len() {
                1 => true,
                2 => matches!(entry, Backing::Dir) && !parts[1].starts_with('.'),
                3 => {
                    !parts[1].starts_with('.')
                        && matches!(entry, Backing::File { .. })
                        && drain_accepts(parts[2])
                }
                _ => false,
            },
            _ => false,
        }
    }

    /// Everything the mount must show, by mount-relative path ("" is the root).
    fn view(&self) -> View {
        let mut v = View::new();
        for top in ["agents", "inbox", "marks", "names", "steps"] {
            add_dir(&mut v, top);
        }
        for glance in [
            "status",
            "status.json",
            "events",
            "events.ndjson",
            "attention",
            "attention.json",
        ] {
            add_leaf(&mut v, glance, Want::Glance);
        }
        add_dir(&mut v, "new");
        for (path, entry) in &self.backing {
            // Every ancestor must be shown too (a hidden directory hides its contents).
            let mut ancestors = path.match_indices('/').map(|(i, _)| &path[..i]);
            if !ancestors.all(|a| {
                self.backing
                    .get(a)
                    .is_some_and(|e| Self::shows_backing(a, e))
            }) || !Self::shows_backing(path, entry)
            {
                continue;
            }
            match entry {
                Backing::Dir => add_dir(&mut v, path),
                Backing::Link(target) => add_leaf(&mut v, path, Want::Link(target.clone())),
                Backing::File {
                    bytes,
                    version,
                    streams,
                } => {
                    add_leaf(
                        &mut v,
                        path,
                        Want::File {
                            bytes: bytes.clone(),
                            version: Some(*version),
                            perm: 0o444,
                        },
                    );
                    if let Some((out, err)) = streams
                        && is_capture_record(path)
                    {
                        let dir = parent_of(path).0;
                        for (name, bytes) in [("stdout", out), ("stderr", err)] {
                            let want = Want::File {
                                bytes: bytes.clone(),
                                version: Some(*version),
                                perm: 0o444,
                            };
                            add_leaf(&mut v, &format!("{dir}/{name}"), want);
                        }
                    }
                }
            }
        }
        // steps/<id>/latest: a link to the highest-numbered step directory.
        for dir in self.dirs_at("steps/", 2) {
            if self.backing.contains_key(&format!("{dir}/latest")) {
                continue;
            }
            let latest = self
                .names_in(&dir)
                .into_iter()
                .filter(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
                .filter(|n| matches!(self.backing.get(&format!("{dir}/{n}")), Some(Backing::Dir)))
                .max_by_key(|n| n.parse::<u64>().unwrap_or(0));
            if let Some(step) = latest {
                add_leaf(&mut v, &format!("{dir}/latest"), Want::Link(step));
            }
            // Each numbered step with a response.json shows its response.md.
            for step in self.names_in(&dir) {
                let step_dir = format!("{dir}/{step}");
                if !step.is_empty()
                    && step.bytes().all(|b| b.is_ascii_digit())
                    && matches!(self.backing.get(&step_dir), Some(Backing::Dir))
                    && matches!(
                        self.backing.get(&format!("{step_dir}/response.json")),
                        Some(Backing::File { .. })
                    )
                    && !self
                        .backing
                        .contains_key(&format!("{step_dir}/response.md"))
                {
                    add_leaf(&mut v, &format!("{step_dir}/response.md"), Want::Rendered);
                }
            }
            // An agent with a branch shows its conversation.
            let id = dir.trim_start_matches("steps/");
            if self.agents.contains_key(id)
                && !self.backing.contains_key(&format!("{dir}/transcript.md"))
            {
                add_leaf(&mut v, &format!("{dir}/transcript.md"), Want::Rendered);
            }
            if self.agents.contains_key(id) && !self.backing.contains_key(&format!("{dir}/ctl")) {
                add_leaf(&mut v, &format!("{dir}/ctl"), Want::Ctl);
            }
        }
        for (id, agent) in &self.agents {
            add_dir(&mut v, &format!("agents/{id}"));
            for (path, (bytes, mode)) in &agent.files {
                let want = match *mode {
                    LINK => Want::Link(String::from_utf8_lossy(bytes).into_owned()),
                    mode => Want::File {
                        bytes: bytes.clone(),
                        version: None,
                        perm: if mode == EXEC { 0o555 } else { 0o444 },
                    },
                };
                add_leaf(&mut v, &format!("agents/{id}/{path}"), want);
            }
        }
        let has = |root| self.marks.keys().any(|(r, _, _)| *r == root);
        let root = if !has(MarkRoot::Litany) && has(MarkRoot::Lernie) {
            MarkRoot::Lernie
        } else {
            MarkRoot::Litany
        };
        for ((r, kind, id), bytes) in &self.marks {
            if *r == root {
                let want = Want::File {
                    bytes: bytes.clone(),
                    version: None,
                    perm: 0o444,
                };
                add_leaf(&mut v, &format!("marks/{kind}/{id}"), want);
            }
        }
        let mut worn: BTreeMap<String, Vec<&str>> = BTreeMap::new();
        for (id, agent) in &self.agents {
            if let Ok(name) = std::str::from_utf8(agent.name_file()) {
                let name = name.trim();
                if is_component(name) {
                    worn.entry(name.to_string()).or_default().push(id);
                }
            }
        }
        for (name, ids) in worn {
            if let [id] = ids.as_slice() {
                add_leaf(
                    &mut v,
                    &format!("names/{name}"),
                    Want::Link(format!("../agents/{id}")),
                );
            }
        }
        v
    }

    /// Backing directories that exist, under `prefix/`, at `depth` components.
    fn dirs_at(&self, prefix: &str, depth: usize) -> Vec<String> {
        self.backing
            .iter()
            .filter(|(p, e)| {
                matches!(e, Backing::Dir) && p.starts_with(prefix) && p.split('/').count() == depth
            })
            .map(|(p, _)| p.clone())
            .collect()
    }

    fn names_in(&self, dir: &str) -> Vec<String> {
        let prefix = format!("{dir}/");
        self.backing
            .keys()
            .filter_map(|p| p.strip_prefix(&prefix))
            .filter(|rest| !rest.contains('/'))
            .map(str::to_string)
            .collect()
    }

    /// The number a deposit from `sender` into `dir` gets: one past the largest of the
    /// sender's numbers among all names there, or 1.
    fn next_seq(&self, dir: &str, sender: &str) -> u32 {
        self.names_in(dir)
            .iter()
            .filter_map(|n| seq_of(n, sender))
            .max()
            .map_or(1, |m| m + 1)
    }
}

// ---------------------------------------------------------------------------------------
// Observing the mount
// ---------------------------------------------------------------------------------------

/// What the mount shows at one path.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Seen {
    Missing(i32),
    Dir {
        perm: u32,
        names: Result<BTreeSet<String>, i32>,
    },
    File {
        perm: u32,
        size: u64,
        ino: u64,
        bytes: Result<Vec<u8>, i32>,
    },
    Link(Result<String, i32>),
    Other(String),
}

fn errno(e: &std::io::Error) -> i32 {
    e.raw_os_error().unwrap_or(-1)
}

fn observe(p: &Path) -> Seen {
    let md = match std::fs::symlink_metadata(p) {
        Ok(md) => md,
        Err(e) => return Seen::Missing(errno(&e)),
    };
    let ft = md.file_type();
    if ft.is_dir() {
        let names = std::fs::read_dir(p).and_then(|rd| {
            rd.map(|e| e.map(|e| e.file_name().to_string_lossy().into_owned()))
                .collect::<std::io::Result<BTreeSet<String>>>()
        });
        Seen::Dir {
            perm: md.mode() & 0o7777,
            names: names.map_err(|e| errno(&e)),
        }
    } else if ft.is_file() {
        Seen::File {
            perm: md.mode() & 0o7777,
            size: md.len(),
            ino: md.ino(),
            bytes: std::fs::read(p).map_err(|e| errno(&e)),
        }
    } else if ft.is_symlink() {
        Seen::Link(
            std::fs::read_link(p)
                .map(|t| t.to_string_lossy().into_owned())
                .map_err(|e| errno(&e)),
        )
    } else {
        Seen::Other(format!("{ft:?}"))
    }
}

/// The permission bits of a directory: an agent's inbox takes deposits (the mount is
/// not read-only), everything else is read-only.
fn dir_perm(path: &str) -> u32 {
    if path == "new" {
        0o700
    } else if path.starts_with("inbox/") && path.matches('/').count() == 1 {
        0o755
    } else {
        0o555
    }
}

fn matches(path: &str, want: Option<&Want>, seen: &Seen) -> bool {
    match (want, seen) {
        (None, Seen::Missing(e)) => *e == libc::ENOENT,
        (
            Some(Want::Dir(names)),
            Seen::Dir {
                perm,
                names: Ok(got),
            },
        ) => names == got && *perm == dir_perm(path),
        (
            Some(Want::File { bytes, perm, .. }),
            Seen::File {
                perm: got_perm,
                size,
                bytes: got,
                ..
            },
        ) => *size == bytes.len() as u64 && got.as_ref() == Ok(bytes) && perm == got_perm,
        (Some(Want::Link(t)), Seen::Link(Ok(got))) => t == got,
        (
            Some(Want::Rendered),
            Seen::File {
                perm,
                size,
                bytes: Ok(got),
                ..
            },
        ) => *size == got.len() as u64 && *perm == 0o444,
        (
            Some(Want::Glance),
            Seen::File {
                perm, bytes: Ok(_), ..
            },
        ) => *perm == 0o444,
        (
            Some(Want::Ctl),
            Seen::File {
                perm, bytes: Ok(_), ..
            },
        ) => *perm == 0o600,
        _ => false,
    }
}

/// What must never be seen, stale or not.
fn invariant_violation(path: &str, seen: &Seen) -> Option<String> {
    let Seen::Dir {
        names: Ok(names), ..
    } = seen
    else {
        return None;
    };
    let parts: Vec<&str> = if path.is_empty() {
        Vec::new()
    } else {
        path.split('/').collect()
    };
    let bad: Vec<&String> = match parts.as_slice() {
        ["steps", ..] => names.iter().filter(|n| n.ends_with(".tmp")).collect(),
        ["inbox"] => names.iter().filter(|n| n.starts_with('.')).collect(),
        ["inbox", _] => names.iter().filter(|n| !drain_accepts(n)).collect(),
        _ => Vec::new(),
    };
    (!bad.is_empty()).then(|| format!("{path}/ lists {bad:?}, which the view must hide"))
}

fn show_bytes(b: &[u8]) -> String {
    const MAX: usize = 160;
    let text = String::from_utf8_lossy(&b[..b.len().min(MAX)]);
    let more = if b.len() > MAX { "..." } else { "" };
    format!("{} bytes {:?}{more}", b.len(), text)
}

fn show_want(path: &str, w: Option<&Want>) -> String {
    match w {
        None => "absent (ENOENT)".into(),
        Some(Want::Dir(names)) => format!("dir mode {:o} {names:?}", dir_perm(path)),
        Some(Want::File {
            bytes,
            version,
            perm,
        }) => format!(
            "file mode {perm:o} (version {version:?}) {}",
            show_bytes(bytes)
        ),
        Some(Want::Link(t)) => format!("symlink -> {t}"),
        Some(Want::Rendered) => "a rendered file, mode 444, its size what it reads".into(),
        Some(Want::Glance) => "a view of the workspace, mode 444, that reads".into(),
        Some(Want::Ctl) => "an agent's ctl, mode 600, that reads".into(),
    }
}

fn show_seen(s: Option<&Seen>, want: Option<&Want>) -> String {
    match s {
        None => "nothing observed".into(),
        Some(Seen::Missing(e)) => format!("missing, errno {e} ({})", errno_name(*e)),
        Some(Seen::Dir {
            perm,
            names: Ok(names),
        }) => {
            let mut out = format!("dir mode {perm:o} {names:?}");
            if let Some(Want::Dir(want)) = want {
                let extra: Vec<_> = names.difference(want).collect();
                let lacking: Vec<_> = want.difference(names).collect();
                let _ = write!(out, " (extra {extra:?}, lacking {lacking:?})");
            }
            out
        }
        Some(Seen::Dir {
            perm,
            names: Err(e),
        }) => format!("dir mode {perm:o}, listing failed with errno {e}"),
        Some(Seen::File {
            perm,
            size,
            ino,
            bytes,
        }) => {
            let body = match bytes {
                Ok(b) => {
                    let mut s = show_bytes(b);
                    if let Some(Want::File { bytes: w, .. }) = want {
                        let at = w.iter().zip(b.iter()).position(|(x, y)| x != y);
                        let _ = write!(s, " (first difference at {at:?})");
                    }
                    s
                }
                Err(e) => format!("read failed with errno {e}"),
            };
            format!("file mode {perm:o} ino {ino} st_size {size}, read {body}")
        }
        Some(Seen::Link(t)) => format!("symlink -> {t:?}"),
        Some(Seen::Other(t)) => format!("a {t}"),
    }
}

fn errno_name(e: i32) -> &'static str {
    match e {
        libc::ENOENT => "ENOENT",
        libc::EIO => "EIO",
        libc::ENOTDIR => "ENOTDIR",
        libc::EACCES => "EACCES",
        libc::ELOOP => "ELOOP",
        libc::EINVAL => "EINVAL",
        _ => "?",
    }
}

// ---------------------------------------------------------------------------------------
// The run
// ---------------------------------------------------------------------------------------

const NAMES: [&str; 5] = ["Alpha", "Beta", "Gamma", "Zoë", "Delta"];
const COMMIT_KINDS: [&str; 3] = ["returned", "abandoned", "stopped"];
const BLOB_KINDS: [&str; 3] = ["cwd", "held", "role"];

struct Run {
    // Dropped in this order: the mount goes before the workspace it serves.
    m: Mounted,
    f: Fixture,
    _t: tempfile::TempDir,
    rng: Rng,
    model: Model,
    view: View,
    seed: u64,
    steps: usize,
    step: usize,
    history: Vec<String>,
    /// Paths whose wanted state changed with the last change: reads favour them.
    touched: Vec<String>,
    /// Paths that were shown once and are not now, and hidden backing paths.
    absent: Vec<String>,
    /// path -> inode number last seen there, while the path's Want is unchanged.
    inos: HashMap<String, u64>,
    /// path -> when its Want last changed.
    changed_at: HashMap<String, Instant>,
    settle: Duration,
    /// Names written through the mount: when each was sent, and what was written. The
    /// name resolves to that content (the writer's alias) for [`ALIAS_GRACE`] after.
    recent_drafts: HashMap<String, (Instant, Vec<u8>)>,
    serial: u64,
    dead_ids: Vec<String>,
    counts: BTreeMap<&'static str, usize>,
    waited: Duration,
    checks: usize,
    /// Checks whose first look was stale, and the longest any check waited.
    stale: usize,
    longest: Duration,
}

impl Run {
    fn new(seed: u64, steps: usize) -> Self {
        let t = tempfile::tempdir().unwrap();
        let f = Fixture::create(&t.path().join("ws"), Flavour::Litany).unwrap();
        std::fs::create_dir_all(f.root().join("steps")).unwrap();
        std::fs::create_dir_all(f.root().join("inbox")).unwrap();
        std::fs::create_dir_all(f.root().join("delivered")).unwrap();
        let m = Mounted::with_args(f.root(), &["--no-wake"]);
        let mut model = Model::default();
        model.backing.insert("steps".into(), Backing::Dir);
        model.backing.insert("inbox".into(), Backing::Dir);
        let view = model.view();
        Run {
            m,
            f,
            _t: t,
            rng: Rng::new(seed),
            model,
            view,
            seed,
            steps,
            step: 0,
            history: Vec::new(),
            touched: Vec::new(),
            absent: Vec::new(),
            inos: HashMap::new(),
            changed_at: HashMap::new(),
            settle: SETTLE,
            recent_drafts: HashMap::new(),
            serial: 0,
            dead_ids: Vec::new(),
            counts: BTreeMap::new(),
            waited: Duration::ZERO,
            checks: 0,
            stale: 0,
            longest: Duration::ZERO,
        }
    }

    fn fail(&self, what: &str) -> ! {
        let tail: Vec<&String> = self.history.iter().rev().take(25).rev().collect();
        let log = self.m.log_text();
        let log_tail: Vec<&str> = log.lines().rev().take(30).collect::<Vec<_>>();
        let log_tail: Vec<&str> = log_tail.into_iter().rev().collect();
        panic!(
            "model test failed: seed {seed}, step {step} of {steps}\n{what}\n\n\
             last ops (oldest first):\n  {ops}\n\n\
             reproduce: LITANYFS_MODEL_SEED={seed} LITANYFS_MODEL_STEPS={steps} \
             cargo test --test model seed_from_the_clock\n\ndaemon log tail:\n{log}",
            seed = self.seed,
            step = self.step,
            steps = self.steps,
            ops = tail
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join("\n  "),
            log = log_tail.join("\n"),
        );
    }

    fn note(&mut self, op: &'static str, what: String) {
        *self.counts.entry(op).or_default() += 1;
        self.history.push(format!("#{} {op}: {what}", self.step));
        if std::env::var_os("LITANYFS_MODEL_TRACE").is_some() {
            eprintln!("{}", self.history.last().map_or("", |s| s.as_str()));
        }
    }

    fn serial(&mut self) -> u64 {
        self.serial += 1;
        self.serial
    }

    fn ws(&self, rel: &str) -> std::path::PathBuf {
        self.f.root().join(rel)
    }

    // --- the backing tree, on disk and in the model at once -----------------------------

    fn mkdir_p(&mut self, rel: &str) {
        std::fs::create_dir_all(self.ws(rel)).unwrap();
        let mut at = String::new();
        for part in rel.split('/') {
            if !at.is_empty() {
                at.push('/');
            }
            at.push_str(part);
            self.model.backing.entry(at.clone()).or_insert(Backing::Dir);
        }
    }

    fn write(&mut self, rel: &str, bytes: &[u8], streams: Option<(Vec<u8>, Vec<u8>)>) {
        self.mkdir_p(parent_of(rel).0);
        std::fs::write(self.ws(rel), bytes).unwrap();
        let version = self.model.next_version();
        self.model.backing.insert(
            rel.to_string(),
            Backing::File {
                bytes: bytes.to_vec(),
                version,
                streams,
            },
        );
    }

    fn append(&mut self, rel: &str, bytes: &[u8]) {
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(self.ws(rel))
            .unwrap();
        f.write_all(bytes).unwrap();
        drop(f);
        let version = self.model.next_version();
        if let Some(Backing::File {
            bytes: b,
            version: g,
            ..
        }) = self.model.backing.get_mut(rel)
        {
            b.extend_from_slice(bytes);
            *g = version;
        }
    }

    fn rename(&mut self, from: &str, to: &str) {
        std::fs::rename(self.ws(from), self.ws(to)).unwrap();
        let mut e = self.model.backing.remove(from).unwrap();
        if let Backing::File { version, .. } = &mut e {
            // The same file, but the model treats a new path as new.
            *version = self.model.next_version();
        }
        if to.starts_with("steps/") || to.starts_with("inbox/") {
            self.model.backing.insert(to.to_string(), e);
        }
    }

    fn files_where(&self, cond: impl Fn(&str, &Backing) -> bool) -> Vec<String> {
        self.model
            .backing
            .iter()
            .filter(|(p, e)| matches!(e, Backing::File { .. }) && cond(p, e))
            .map(|(p, _)| p.clone())
            .collect()
    }

    // --- the refs --------------------------------------------------------------------------

    /// A tree of `files` with their modes (the fixture's trees are all plain blobs).
    fn tree(&self, files: &BTreeMap<String, (Vec<u8>, i32)>) -> Oid {
        let repo = self.f.repo();
        let mut idx = git2::Index::new().unwrap();
        for (path, (bytes, mode)) in files {
            let entry = git2::IndexEntry {
                ctime: git2::IndexTime::new(0, 0),
                mtime: git2::IndexTime::new(0, 0),
                dev: 0,
                ino: 0,
                mode: *mode as u32,
                uid: 0,
                gid: 0,
                file_size: bytes.len() as u32,
                id: repo.blob(bytes).unwrap(),
                flags: path.len().min(0xfff) as u16,
                flags_extended: 0,
                path: path.as_bytes().to_vec(),
            };
            idx.add(&entry).unwrap();
        }
        idx.write_tree_to(repo).unwrap()
    }

    fn commit_agent(&mut self, id: &str, files: BTreeMap<String, (Vec<u8>, i32)>) {
        let tree = self.tree(&files);
        let tip = self
            .f
            .commit(
                &format!("refs/heads/agents/{id}"),
                tree,
                &format!("dispatch: worker [{id}]"),
            )
            .unwrap();
        self.model
            .agents
            .insert(id.to_string(), Agent { files, tip });
    }

    fn name_bytes(&mut self) -> Vec<u8> {
        match self.rng.below(10) {
            0 => Vec::new(),
            1 => format!("  {}  \n", self.rng.pick(&NAMES)).into_bytes(),
            2 if self.rng.one_in(3) => b"not/a component\n".to_vec(),
            _ => format!("{}\n", self.rng.pick(&NAMES)).into_bytes(),
        }
    }

    fn set_mark(&mut self, root: MarkRoot, kind: &str, id: &str, oid: Oid, reads_as: Vec<u8>) {
        let name = format!("{}{kind}/{id}", root.prefix());
        self.f.repo().reference(&name, oid, true, "mark").unwrap();
        self.model
            .marks
            .insert((root, kind.to_string(), id.to_string()), reads_as);
    }

    fn mark_root(&mut self) -> MarkRoot {
        if self.rng.one_in(6) {
            MarkRoot::Lernie
        } else {
            MarkRoot::Litany
        }
    }

    fn some_agent_id(&mut self) -> Option<String> {
        let ids: Vec<String> = self.model.agents.keys().cloned().collect();
        (!ids.is_empty()).then(|| self.rng.pick(&ids).clone())
    }

    // --- changes ---------------------------------------------------------------------------

    fn op_new_agent(&mut self) {
        let id = if !self.dead_ids.is_empty() && self.rng.one_in(5) {
            let i = self.rng.below(self.dead_ids.len());
            self.dead_ids.remove(i)
        } else {
            match self.rng.below(12) {
                // Ids are opaque components (a ref name, so no spaces): non-ASCII is allowed.
                0 => format!("agent-ü-{}", self.rng.hex(4)),
                _ => format!("20261202T{:06}Z-{}", self.serial(), self.rng.hex(8)),
            }
        };
        let name = self.name_bytes();
        let mut files = BTreeMap::from([
            ("goal.md".to_string(), (b"Do the thing.\n".to_vec(), BLOB)),
            (
                "soul.md".to_string(),
                (b"You are careful.\n".to_vec(), BLOB),
            ),
            ("name".to_string(), (name.clone(), BLOB)),
        ]);
        if self.rng.one_in(2) {
            let text = self.rng.text().into_bytes();
            files.insert("messages/001-user.md".into(), (text, BLOB));
        }
        self.commit_agent(&id, files);
        let inbox = !self.rng.one_in(4);
        if inbox {
            self.mkdir_p(&format!("inbox/{id}"));
        }
        self.note(
            "new-agent",
            format!(
                "{id} name {:?} inbox dir {inbox}",
                String::from_utf8_lossy(&name)
            ),
        );
    }

    fn op_delete_agent(&mut self) {
        let Some(id) = self.some_agent_id() else {
            return self.op_new_agent();
        };
        self.f.delete_agent(&id).unwrap();
        self.model.agents.remove(&id);
        self.dead_ids.push(id.clone());
        self.note("delete-agent", id);
    }

    fn op_advance_agent(&mut self) {
        let Some(id) = self.some_agent_id() else {
            return self.op_new_agent();
        };
        let mut files = self.model.agents[&id].files.clone();
        let what = match self.rng.below(6) {
            0 | 1 => {
                let name = self.name_bytes();
                let what = format!("name {:?}", String::from_utf8_lossy(&name));
                files.insert("name".into(), (name, BLOB));
                what
            }
            2 => {
                let n = files.keys().filter(|k| k.starts_with("messages/")).count() + 1;
                let path = format!("messages/{n:03}-user.md");
                files.insert(path.clone(), (self.rng.text().into_bytes(), BLOB));
                format!("adds {path}")
            }
            3 => {
                let (path, entry) = match self.rng.below(3) {
                    0 => ("bin/run.sh", (b"#!/bin/sh\necho hi\n".to_vec(), EXEC)),
                    1 => ("link-to-goal", (b"goal.md".to_vec(), LINK)),
                    _ => ("work/latest", (b"../goal.md".to_vec(), LINK)),
                };
                files.insert(path.to_string(), entry);
                format!("adds {path} (mode {:o})", files[path].1)
            }
            4 => {
                let extra: Vec<String> = files
                    .keys()
                    .filter(|k| !["goal.md", "soul.md", "name"].contains(&k.as_str()))
                    .cloned()
                    .collect();
                if extra.is_empty() {
                    "changes nothing (a new commit, same tree)".to_string()
                } else {
                    let path = self.rng.pick(&extra).clone();
                    files.remove(&path);
                    format!("removes {path}")
                }
            }
            _ => {
                let path = self
                    .rng
                    .pick(&["work/notes.md", "work/deep/er/file.txt", "goal.md"])
                    .to_string();
                files.insert(path.clone(), (self.rng.text().into_bytes(), BLOB));
                format!("writes {path}")
            }
        };
        self.commit_agent(&id, files);
        self.note("advance-agent", format!("{id} {what}"));
    }

    fn op_mark(&mut self) {
        let root = self.mark_root();
        let id = match self.some_agent_id() {
            Some(id) if !self.rng.one_in(4) => id,
            _ => format!("ghost-{}", self.rng.hex(4)),
        };
        match self.rng.below(5) {
            0..=2 => {
                let kind = self.rng.pick(&BLOB_KINDS).to_string();
                let value = self.rng.text().into_bytes();
                let oid = self.f.repo().blob(&value).unwrap();
                self.set_mark(root, &kind, &id, oid, value.clone());
                self.note(
                    "blob-mark",
                    format!("{}{kind}/{id} = {}", root.prefix(), show_bytes(&value)),
                );
            }
            3 => {
                let Some(target) = self.some_agent_id() else {
                    return;
                };
                let oid = self.model.agents[&target].tip;
                let kind = self.rng.pick(&COMMIT_KINDS).to_string();
                self.set_mark(root, &kind, &id, oid, format!("{oid}\n").into_bytes());
                self.note(
                    "commit-mark",
                    format!("{}{kind}/{id} -> {oid}", root.prefix()),
                );
            }
            _ => {
                let oid = self.f.tree(&[("x", b"tree mark\n")]).unwrap();
                let kind = "snapshot".to_string();
                self.set_mark(root, &kind, &id, oid, format!("{oid}\n").into_bytes());
                self.note(
                    "tree-mark",
                    format!("{}{kind}/{id} -> {oid}", root.prefix()),
                );
            }
        }
    }

    fn op_delete_mark(&mut self) {
        let keys: Vec<_> = self.model.marks.keys().cloned().collect();
        if keys.is_empty() {
            return self.op_mark();
        }
        let (root, kind, id) = self.rng.pick(&keys).clone();
        let name = format!("{}{kind}/{id}", root.prefix());
        self.f
            .repo()
            .find_reference(&name)
            .unwrap()
            .delete()
            .unwrap();
        self.model.marks.remove(&(root, kind, id));
        self.note("delete-mark", name);
    }

    fn op_pack_refs(&mut self) {
        let out = std::process::Command::new("git")
            .arg("--git-dir")
            .arg(self.ws("repo.git"))
            .args(["pack-refs", "--all"])
            .output();
        let ok = out.is_ok_and(|o| o.status.success());
        self.note("pack-refs", format!("git pack-refs --all (ran: {ok})"));
    }

    fn step_agent(&mut self) -> String {
        match self.some_agent_id() {
            Some(id) if !self.rng.one_in(5) => id,
            _ => "20261130T000000Z-0rphan00".into(),
        }
    }

    fn op_new_step(&mut self) {
        let agent = self.step_agent();
        let n = self
            .model
            .dirs_at(&format!("steps/{agent}/"), 3)
            .iter()
            .filter_map(|d| parent_of(d).1.parse::<u32>().ok())
            .max()
            .unwrap_or(0)
            + 1;
        let dir = format!("steps/{agent}/{n:03}");
        let req = format!("{{\n  \"model\": \"m\",\n  \"step\": {n}\n}}");
        self.write(&format!("{dir}/request.json"), req.as_bytes(), None);
        let first = if self.rng.one_in(3) {
            String::new()
        } else {
            "{\"type\":\"message_start\"}\n".into()
        };
        self.write(&format!("{dir}/response.json"), first.as_bytes(), None);
        self.write(&format!("{dir}/meta.json"), b"{}", None);
        let err = self.rng.text();
        self.write(&format!("{dir}/stderr.log"), err.as_bytes(), None);
        let mut what = dir.clone();
        if self.rng.one_in(2) {
            let tool = format!("toolu_{}", self.rng.hex(6));
            let (out, err) = (self.rng.text(), self.rng.text());
            let bytes = Fixture::tool_output(&out, &err, 0);
            let tdir = format!("{dir}/tools/{tool}");
            self.write(&format!("{tdir}/input.json"), b"{\"command\":\"ls\"}", None);
            self.write(
                &format!("{tdir}/output.json"),
                &bytes,
                Some((out.into_bytes(), err.into_bytes())),
            );
            let _ = write!(what, " with {tool}");
        }
        if self.rng.one_in(3) {
            let log = format!("steps/{agent}/driver.log");
            let line = format!("step {n} started\n");
            if self.model.backing.contains_key(&log) {
                self.append(&log, line.as_bytes());
            } else {
                self.write(&log, line.as_bytes(), None);
            }
            what.push_str(" + driver.log");
        }
        self.note("new-step", what);
    }

    fn op_append(&mut self) {
        let files = self.files_where(|p, _| {
            p.starts_with("steps/") && (p.ends_with("/response.json") || p.ends_with("/driver.log"))
        });
        if files.is_empty() {
            return self.op_new_step();
        }
        let path = self.rng.pick(&files).clone();
        let line = format!(
            "{{\"type\":\"content_block_delta\",\"n\":{},\"text\":{:?}}}\n",
            self.serial(),
            self.rng.text()
        );
        self.append(&path, line.as_bytes());
        self.note("append", format!("{path} += {} bytes", line.len()));
    }

    fn op_write_output(&mut self) {
        let steps: Vec<String> = self
            .model
            .backing
            .iter()
            .filter(|(p, e)| {
                matches!(e, Backing::Dir)
                    && p.starts_with("steps/")
                    && p.split('/').count() == 3
                    && parent_of(p).1.bytes().all(|b| b.is_ascii_digit())
            })
            .map(|(p, _)| p.clone())
            .collect();
        if steps.is_empty() {
            return self.op_new_step();
        }
        let step = self.rng.pick(&steps).clone();
        let tools = self.model.dirs_at(&format!("{step}/tools/"), 5);
        let tdir = if !tools.is_empty() && self.rng.one_in(2) {
            self.rng.pick(&tools).clone()
        } else {
            format!("{step}/tools/toolu_{}", self.rng.hex(6))
        };
        let (out, err, code) = (self.rng.text(), self.rng.text(), self.rng.below(3) as i32);
        let valid = !self.rng.one_in(8);
        let (bytes, streams) = if valid {
            (
                Fixture::tool_output(&out, &err, code),
                Some((out.clone().into_bytes(), err.clone().into_bytes())),
            )
        } else {
            (b"{\"stdout\": \"cut off mid-str".to_vec(), None)
        };
        if !self
            .model
            .backing
            .contains_key(&format!("{tdir}/input.json"))
        {
            // The harness writes input.json first, through its own temp.
            self.write(&format!("{tdir}/input.json.tmp"), b"{\"cmd\":", None);
            self.rename(
                &format!("{tdir}/input.json.tmp"),
                &format!("{tdir}/input.json"),
            );
        }
        self.note(
            "write-output",
            format!(
                "{tdir}/output.json via .tmp + rename, valid {valid}, stdout {} bytes",
                out.len()
            ),
        );
        let tmp = format!("{tdir}/output.json.tmp");
        self.write(&tmp, &bytes, None);
        // The temp is on disk now: the mount must not show it, in the listing or by name.
        self.view = self.model.view();
        self.check(&tdir, "tool dir while output.json.tmp exists");
        self.check(&tmp, "output.json.tmp before its rename");
        self.rename(&tmp, &format!("{tdir}/output.json"));
        if let Some(Backing::File { streams: s, .. }) =
            self.model.backing.get_mut(&format!("{tdir}/output.json"))
        {
            *s = streams;
        }
    }

    /// Every directory under `steps/` the model holds.
    fn step_dirs(&self) -> Vec<String> {
        self.model
            .backing
            .iter()
            .filter(|(p, e)| matches!(e, Backing::Dir) && p.starts_with("steps/"))
            .map(|(p, _)| p.clone())
            .collect()
    }

    fn op_stray_tmp(&mut self) {
        let dirs = self.step_dirs();
        if dirs.is_empty() {
            return self.op_new_step();
        }
        let dir = self.rng.pick(&dirs).clone();
        let name = match self.rng.below(4) {
            0 => "output.json.tmp".to_string(),
            1 => format!("returned-mark.{}.tmp", 1000 + self.rng.below(9000)),
            2 => ".tmp".to_string(),
            _ => "response.json.tmp".to_string(),
        };
        let path = format!("{dir}/{name}");
        let text = self.rng.text();
        self.write(&path, text.as_bytes(), None);
        self.absent.push(path.clone());
        self.note("stray-tmp", path);
    }

    /// An inbox directory: an existing one, or a new one for a living or unknown agent.
    fn inbox_dir(&mut self) -> String {
        let dirs = self.model.dirs_at("inbox/", 2);
        if !dirs.is_empty() && !self.rng.one_in(6) {
            return self.rng.pick(&dirs).clone();
        }
        let id = match self.some_agent_id() {
            Some(id) if !self.rng.one_in(3) => id,
            _ => format!("ghost-{}", self.rng.hex(4)),
        };
        let dir = format!("inbox/{id}");
        self.mkdir_p(&dir);
        dir
    }

    fn op_direct_deposit(&mut self) {
        let dir = self.inbox_dir();
        let sender = match self.rng.below(4) {
            0 => self.some_agent_id().unwrap_or_else(|| "user".to_string()),
            1 => "p1-abc".to_string(),
            _ => "user".to_string(),
        };
        let existing = self.model.names_in(&dir);
        let name = loop {
            let seq = if self.rng.one_in(3) {
                1 + self.rng.below(1500) as u32
            } else {
                self.model.next_seq(&dir, &sender)
            };
            let name = match self.rng.below(10) {
                0 => format!("{sender}-{seq}.md"),
                1 => format!("{sender}-+{seq}.md"),
                _ => format!("{sender}-{seq:03}.md"),
            };
            if !existing.contains(&name) {
                break name;
            }
        };
        let body = format!(
            "---\nfrom: {sender}\ndeposited_at: 2026-12-02T09:42:51Z\n---\n{}",
            self.rng.text()
        );
        // litany's own write: a dotted temp, then a rename onto the final name.
        self.note("direct-deposit", format!("{dir}/{name} (via .{name}.tmp)"));
        let tmp = self.litany_tmp(&dir, &name);
        self.write(&tmp, body.as_bytes(), None);
        self.view = self.model.view();
        self.check(&dir, "inbox while a deposit's .tmp exists");
        self.rename(&tmp, &format!("{dir}/{name}"));
    }

    /// litany's temp name for deposit `name` in `dir` (`.<name>.tmp`), or a fresh one
    /// when debris (a directory, say) already holds it.
    fn litany_tmp(&mut self, dir: &str, name: &str) -> String {
        let tmp = format!("{dir}/.{name}.tmp");
        if self.model.backing.contains_key(&tmp) {
            format!("{dir}/.{name}.{}.tmp", self.serial())
        } else {
            tmp
        }
    }

    fn op_debris(&mut self) {
        let dir = self.inbox_dir();
        let existing = self.model.names_in(&dir);
        let n = self.serial();
        let name = match self.rng.below(10) {
            0 => format!("stray-{n}.txt"),
            1 => format!(".user-{n:03}.md"),
            2 => format!("user-abc{n}.md"),
            3 => format!("user-{n:03}.md.tmp"),
            4 => format!("-{n:03}.md"),
            5 => format!("user{n:03}.md"),
            6 => format!("user-{}.md", 4_294_967_296u64 + n),
            7 => format!("user-{:03}.md", 500 + n),
            8 => format!("user-{:03}.md", 700 + n),
            _ => format!(".user-{n:03}.md.tmp"),
        };
        if existing.contains(&name) {
            return;
        }
        let path = format!("{dir}/{name}");
        let what = match self.rng.below(10) {
            // A directory or a symlink under a deposit's name: not a file, so hidden.
            7 => {
                self.mkdir_p(&path);
                "dir"
            }
            8 => {
                std::os::unix::fs::symlink("../../steps", self.ws(&path)).unwrap();
                self.model
                    .backing
                    .insert(path.clone(), Backing::Link("../../steps".into()));
                "symlink"
            }
            _ => {
                self.write(&path, b"not a deposit", None);
                "file"
            }
        };
        self.absent.push(path.clone());
        self.note("debris", format!("{what} {path}"));
    }

    fn op_mount_deposit(&mut self) {
        let dirs: Vec<String> = self
            .model
            .dirs_at("inbox/", 2)
            .into_iter()
            .filter(|d| self.model.agents.contains_key(parent_of(d).1))
            .collect();
        let dir = if dirs.is_empty() {
            let Some(id) = self.some_agent_id() else {
                return self.op_new_agent();
            };
            let dir = format!("inbox/{id}");
            self.mkdir_p(&dir);
            dir
        } else {
            self.rng.pick(&dirs).clone()
        };
        let seq = self.model.next_seq(&dir, "user");
        let expect = format!("user-{seq:03}.md");
        // A writer's name that is itself a deposit name: its own, or one a deposit may
        // take soon (see `a_draft_named_like_its_deposit_does_not_shadow_it`). Not one
        // used within the alias grace, which would be refused as immutable (EPERM).
        let alike = format!("user-{:03}.md", seq + self.rng.below(3) as u32);
        let fresh = self
            .recent_drafts
            .get(&format!("{dir}/{alike}"))
            .is_none_or(|(t, _)| t.elapsed() > ALIAS_GRACE + Duration::from_secs(1));
        let draft = if fresh && self.rng.one_in(2) {
            alike
        } else {
            format!("note-{}", self.serial())
        };
        let content = format!("{}{}", self.rng.text(), self.serial());
        // An editor's atomic save: a private scratch file renamed onto the public name.
        let atomic = self.rng.one_in(4);
        self.note(
            "mount-deposit",
            format!(
                "write {dir}/{draft} through the mount{}, expecting {expect}",
                if atomic {
                    " (private temp + rename)"
                } else {
                    ""
                }
            ),
        );
        // The inbox itself is a backing directory: the mount sees it at once.
        self.view = self.model.view();
        self.check(&dir, "inbox before a deposit through the mount");
        let target = self.m.path(&format!("{dir}/{draft}"));
        let written = if atomic {
            let scratch = self.m.path(&format!("{dir}/.{draft}.swp"));
            std::fs::write(&scratch, &content).and_then(|()| std::fs::rename(&scratch, &target))
        } else {
            std::fs::write(&target, &content)
        };
        if let Err(e) = written {
            self.fail(&format!(
                "deposit through the mount into {dir}/{draft} failed: {e}"
            ));
        }
        self.recent_drafts.insert(
            format!("{dir}/{draft}"),
            (Instant::now(), content.clone().into_bytes()),
        );
        let real = self.ws(&format!("{dir}/{expect}"));
        let bytes = match std::fs::read(&real) {
            Ok(b) => b,
            Err(e) => {
                let now: Vec<String> = std::fs::read_dir(self.ws(&dir))
                    .unwrap()
                    .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                    .collect();
                self.fail(&format!(
                    "deposit through the mount: expected {dir}/{expect} ({e}); the real \
                     inbox holds {now:?}"
                ))
            }
        };
        let text = String::from_utf8_lossy(&bytes);
        let shaped = text.starts_with("---\nfrom: user\ndeposited_at: ")
            && text.ends_with(&format!("Z\n---\n{content}"));
        if !shaped {
            self.fail(&format!(
                "deposit {dir}/{expect} reads {}",
                show_bytes(&bytes)
            ));
        }
        let version = self.model.next_version();
        self.model.backing.insert(
            format!("{dir}/{expect}"),
            Backing::File {
                bytes,
                version,
                streams: None,
            },
        );
    }

    fn op_deposit_to_dead(&mut self) {
        let dirs: Vec<String> = self
            .model
            .dirs_at("inbox/", 2)
            .into_iter()
            .filter(|d| !self.model.agents.contains_key(parent_of(d).1))
            .collect();
        let dir = if dirs.is_empty() {
            let dir = format!("inbox/ghost-{}", self.rng.hex(4));
            self.mkdir_p(&dir);
            dir
        } else {
            self.rng.pick(&dirs).clone()
        };
        let draft = format!("note-{}", self.serial());
        self.note(
            "deposit-to-dead",
            format!("{dir}/{draft}: expecting ENOENT"),
        );
        self.view = self.model.view();
        self.check(&dir, "inbox of an agent that does not exist");
        let before = self.model.names_in(&dir).len();
        let r = std::fs::write(self.m.path(&format!("{dir}/{draft}")), b"to nobody");
        let after = std::fs::read_dir(self.ws(&dir)).unwrap().count();
        if r.as_ref().map_err(errno) != Err(libc::ENOENT) || after != before {
            self.fail(&format!(
                "deposit to {dir} (no agent ref): want ENOENT and nothing on disk, got \
                 {r:?} and {after} entries (was {before})"
            ));
        }
    }

    /// Removes everything under `rel` (a directory), on disk and in the model.
    fn remove_tree(&mut self, rel: &str) {
        std::fs::remove_dir_all(self.ws(rel)).unwrap();
        let prefix = format!("{rel}/");
        self.model
            .backing
            .retain(|p, _| p != rel && !p.starts_with(&prefix));
    }

    fn op_prune_step(&mut self) {
        let steps = self.model.dirs_at("steps/", 3);
        if steps.is_empty() {
            return self.op_new_step();
        }
        let dir = self.rng.pick(&steps).clone();
        self.remove_tree(&dir);
        self.note("prune-step", format!("rm -r {dir}"));
    }

    fn op_remove_inbox(&mut self) {
        let dirs: Vec<String> = self
            .model
            .dirs_at("inbox/", 2)
            .into_iter()
            .filter(|d| !self.model.agents.contains_key(parent_of(d).1))
            .collect();
        if dirs.is_empty() {
            return self.op_debris();
        }
        let dir = self.rng.pick(&dirs).clone();
        self.remove_tree(&dir);
        self.note("remove-inbox", format!("rm -r {dir}"));
    }

    fn op_step_symlink(&mut self) {
        let dirs = self.step_dirs();
        if dirs.is_empty() {
            return self.op_new_step();
        }
        let dir = self.rng.pick(&dirs).clone();
        let (name, target) = if dir.contains("/tools/") && self.rng.one_in(2) {
            // A record that is a symlink is never served, nor are its streams.
            ("output.json".to_string(), "/etc/hostname".to_string())
        } else {
            (format!("link-{}", self.serial()), "../001".to_string())
        };
        let path = format!("{dir}/{name}");
        if self.model.backing.contains_key(&path) {
            return;
        }
        std::os::unix::fs::symlink(&target, self.ws(&path)).unwrap();
        self.model
            .backing
            .insert(path.clone(), Backing::Link(target.clone()));
        self.note("step-symlink", format!("{path} -> {target}"));
    }

    fn op_burst(&mut self) {
        let dir = self.inbox_dir();
        let n = 30 + self.rng.below(120);
        for _ in 0..n {
            let sender = if self.rng.one_in(3) { "p1-abc" } else { "user" };
            let seq = self.model.next_seq(&dir, sender);
            let name = format!("{sender}-{seq:03}.md");
            let tmp = self.litany_tmp(&dir, &name);
            self.write(
                &tmp,
                format!("---\nfrom: {sender}\n---\nburst").as_bytes(),
                None,
            );
            self.rename(&tmp, &format!("{dir}/{name}"));
        }
        self.note("burst", format!("{n} deposits into {dir}"));
    }

    fn op_drain(&mut self) {
        let pending = self.files_where(|p, _| {
            let parts: Vec<&str> = p.split('/').collect();
            parts.len() == 3 && parts[0] == "inbox" && (drain_accepts(parts[2]))
        });
        let debris = self.files_where(|p, _| p.starts_with("inbox/"));
        let pool = if !pending.is_empty() && !self.rng.one_in(8) {
            pending
        } else {
            debris
        };
        if pool.is_empty() {
            return self.op_direct_deposit();
        }
        let path = self.rng.pick(&pool).clone();
        let to = format!("delivered/{}-{}", self.serial(), parent_of(&path).1);
        self.rename(&path, &to);
        self.note("drain", format!("{path} -> {to}"));
    }

    // --- reads -----------------------------------------------------------------------------

    /// Polls `path` until the mount shows what the model wants there.
    fn check(&mut self, path: &str, why: &str) {
        self.checks += 1;
        let want = self.view.get(path).cloned();
        // Where nothing is, a writer's name may still resolve to what was written under
        // it, for the alias grace after it was sent (doc/SEMANTICS.md, "What a writer sees"); the
        // kernel may keep it in view a little longer. Never where something is.
        let alias = want
            .is_none()
            .then(|| self.recent_drafts.get(path))
            .flatten()
            .filter(|(sent, _)| sent.elapsed() < ALIAS_GRACE + LIVE)
            .map(|(_, bytes)| bytes.clone());
        let full = self.m.mnt.join(path);
        let mut last: Option<Seen> = None;
        let mut violation = None;
        let started = Instant::now();
        let mut looks = 0;
        let ok = eventually(LIVE, || {
            looks += 1;
            let seen = observe(&full);
            if let Some(v) = invariant_violation(path, &seen) {
                violation = Some(v);
                return true;
            }
            let good = matches(path, want.as_ref(), &seen)
                || alias.as_ref().is_some_and(|a| {
                    matches!(&seen, Seen::File { bytes: Ok(got), size, .. }
                        if got == a && *size == a.len() as u64)
                });
            last = Some(seen);
            good
        });
        self.waited += started.elapsed();
        self.longest = self.longest.max(started.elapsed());
        if looks > 1 {
            self.stale += 1;
        }
        if let Some(v) = violation {
            self.fail(&format!("invariant broken ({why}): {v}"));
        }
        if !ok {
            self.fail(&format!(
                "{why}: mnt/{path} never matched the model within {LIVE:?}\n  \
                 expected: {}\n       got: {}",
                show_want(path, want.as_ref()),
                show_seen(last.as_ref(), want.as_ref()),
            ));
        }
        let settled = self
            .changed_at
            .get(path)
            .is_none_or(|t| t.elapsed() >= self.settle);
        if let (Some(Want::File { .. }), Some(Seen::File { ino, .. }), true) =
            (&want, &last, settled)
        {
            match self.inos.get(path) {
                Some(&before) if before != *ino => self.fail(&format!(
                    "{why}: mnt/{path} changed inode number {before} -> {ino} while it \
                     existed unchanged ({})",
                    show_want(path, want.as_ref())
                )),
                Some(_) => {}
                None => {
                    self.inos.insert(path.to_string(), *ino);
                }
            }
        }
    }

    fn pick_path(&mut self, cond: impl Fn(&Want) -> bool) -> Option<String> {
        let touched: Vec<String> = self
            .touched
            .iter()
            .filter(|p| self.view.get(*p).is_some_and(&cond))
            .cloned()
            .collect();
        if !touched.is_empty() && self.rng.one_in(2) {
            return Some(self.rng.pick(&touched).clone());
        }
        let all: Vec<&String> = self
            .view
            .iter()
            .filter(|(_, w)| cond(w))
            .map(|(p, _)| p)
            .collect();
        (!all.is_empty()).then(|| (*self.rng.pick(&all)).clone())
    }

    fn op_read_dir(&mut self) {
        if let Some(p) = self.pick_path(|w| matches!(w, Want::Dir(_))) {
            self.note("read-dir", format!("ls mnt/{p}"));
            self.check(&p, "listing");
        }
    }

    fn op_read_file(&mut self) {
        if let Some(p) = self.pick_path(|w| matches!(w, Want::File { .. })) {
            self.note("read-file", format!("stat + cat mnt/{p}"));
            self.check(&p, "stat and read");
        }
    }

    fn op_readlink(&mut self) {
        match self.pick_path(|w| matches!(w, Want::Link(_))) {
            Some(p) if p.starts_with("names/") => {
                self.note("readlink", format!("readlink mnt/{p}"));
                self.check(&p, "readlink");
            }
            _ => {
                self.note("readlink", "ls mnt/names".into());
                self.check("names", "listing of names/");
            }
        }
    }

    fn op_read_absent(&mut self) {
        let gone: Vec<String> = self
            .absent
            .iter()
            .filter(|p| !self.view.contains_key(*p))
            .cloned()
            .collect();
        if gone.is_empty() {
            return self.op_read_file();
        }
        let p = self.rng.pick(&gone).clone();
        self.note("read-absent", format!("stat mnt/{p}"));
        self.check(&p, "a path the mount must not show");
    }

    fn sweep(&mut self) {
        let paths: Vec<String> = self.view.keys().cloned().collect();
        self.note("sweep", format!("{} paths", paths.len()));
        for p in paths {
            self.check(&p, "full sweep");
        }
    }

    /// Recomputes the view after a change: what changed is favoured by the next reads,
    /// what went is remembered as absent, and inode numbers of changed paths are forgotten.
    fn changed(&mut self) {
        let new = self.model.view();
        let mut touched = Vec::new();
        for (p, w) in &self.view {
            if new.get(p) != Some(w) {
                touched.push(p.clone());
                if !new.contains_key(p) {
                    self.absent.push(p.clone());
                }
            }
        }
        touched.extend(new.keys().filter(|p| !self.view.contains_key(*p)).cloned());
        let now = Instant::now();
        for p in &touched {
            self.inos.remove(p);
            self.changed_at.insert(p.clone(), now);
        }
        if self.absent.len() > 200 {
            self.absent.drain(..100);
        }
        self.view = new;
        self.touched = touched;
    }

    fn run(&mut self) {
        // A starting population, so that early reads have something to read.
        for _ in 0..2 {
            self.op_new_agent();
        }
        self.op_new_step();
        self.op_direct_deposit();
        self.changed();
        self.sweep();
        for step in 1..=self.steps {
            self.step = step;
            let total: usize = OPS.iter().map(|(w, _, _)| w).sum();
            let mut r = self.rng.below(total);
            let mut change = false;
            for (weight, op, is_change) in OPS {
                if r < weight {
                    op(self);
                    change = is_change;
                    break;
                }
                r -= weight;
            }
            if change {
                self.changed();
                // Half the time, look at once at something the change touched.
                if !self.touched.is_empty() && self.rng.one_in(2) {
                    let p = self.rng.pick(&self.touched).clone();
                    self.check(&p, "right after the change");
                }
            }
            if step % SWEEP_EVERY == 0 {
                self.sweep();
            }
        }
        self.sweep();
    }
}

type Op = fn(&mut Run);

/// Every operation with its weight, and whether it changes the workspace.
const OPS: [(usize, Op, bool); 23] = [
    // What the harness writes under steps/.
    (50, Run::op_new_step, true),
    (80, Run::op_append, true),
    (60, Run::op_write_output, true),
    (25, Run::op_stray_tmp, true),
    (10, Run::op_step_symlink, true),
    (8, Run::op_prune_step, true),
    // Deposits, debris and drains in inbox/.
    (55, Run::op_direct_deposit, true),
    (5, Run::op_burst, true),
    (20, Run::op_debris, true),
    (50, Run::op_mount_deposit, true),
    (10, Run::op_deposit_to_dead, true),
    (50, Run::op_drain, true),
    (7, Run::op_remove_inbox, true),
    // Refs.
    (30, Run::op_new_agent, true),
    (20, Run::op_delete_agent, true),
    (35, Run::op_advance_agent, true),
    (30, Run::op_mark, true),
    (12, Run::op_delete_mark, true),
    (5, Run::op_pack_refs, true),
    // Reads through the mount.
    (150, Run::op_read_dir, false),
    (200, Run::op_read_file, false),
    (50, Run::op_readlink, false),
    (50, Run::op_read_absent, false),
];

/// One run of `steps` steps from `seed`, with its figures on stderr.
fn run_seed(seed: u64, steps: usize) {
    eprintln!("model: seed {seed}, {steps} steps (LITANYFS_MODEL_SEED={seed})");
    let started = Instant::now();
    let mut run = Run::new(seed, steps);
    run.run();
    eprintln!(
        "model: seed {seed}: {steps} steps, {} checks in {:.1?} ({:.1?} of it in checks; \
         {} first looked stale, the longest took {:.0?}); ops {:?}",
        run.checks,
        started.elapsed(),
        run.waited,
        run.stale,
        run.longest,
        run.counts
    );
}

/// The fixed seeds every run checks, at the default length, in two halves so that the
/// test threads share them.
const FIXED_SEEDS: std::ops::RangeInclusive<u64> = 1..=50;

fn fixed_seeds(half: u64) {
    let mid = (FIXED_SEEDS.start() + FIXED_SEEDS.end()) / 2;
    let seeds = if half == 0 {
        *FIXED_SEEDS.start()..=mid
    } else {
        mid + 1..=*FIXED_SEEDS.end()
    };
    for seed in seeds {
        run_seed(seed, DEFAULT_STEPS);
    }
}

#[test]
fn the_mount_agrees_with_the_model_on_the_first_fixed_seeds() {
    fixed_seeds(0);
}

#[test]
fn the_mount_agrees_with_the_model_on_the_other_fixed_seeds() {
    fixed_seeds(1);
}

/// One more seed each run: `LITANYFS_MODEL_SEED` (scripts/test sets it from the clock
/// and prints it), else the clock's; `LITANYFS_MODEL_STEPS` lengthens it.
#[test]
fn the_mount_agrees_with_the_model_on_a_seed_from_the_clock() {
    let seed = env_u64("LITANYFS_MODEL_SEED").unwrap_or_else(|| {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap();
        t.as_nanos() as u64 ^ (u64::from(std::process::id()) << 32)
    });
    let steps = env_u64("LITANYFS_MODEL_STEPS").map_or(DEFAULT_STEPS, |n| n as usize);
    run_seed(seed, steps);
}

// ---------------------------------------------------------------------------------------
// Bugs the model found, each pinned down on its own; all are fixed and run with the
// suite, and the model run generates their cases too.
// ---------------------------------------------------------------------------------------

const AGENT: &str = "20261202T094226Z-0122ccc2";

fn small_workspace() -> (tempfile::TempDir, Fixture) {
    let t = tempfile::tempdir().unwrap();
    let f = Fixture::create(&t.path().join("ws"), Flavour::Litany).unwrap();
    f.agent(AGENT, Some("Alpha"), &[]).unwrap();
    std::fs::create_dir_all(f.inbox(AGENT)).unwrap();
    (t, f)
}

/// doc/SEMANTICS.md, Identity: "A backing file keeps its inode number for as long as it exists".
/// It did not when the harness appended to it (found by the model: seed 4, step 91, when
/// it held every inode number from the first read). Every inotify event on a file (here `IN_MODIFY` and
/// `IN_CLOSE_WRITE`) makes `Invalidator::apply` (src/fs/mod.rs) call `inval_entry` on its
/// name, even though the name still names the same file; the kernel drops the dentry,
/// evicts the inode nobody holds open and sends `FORGET`, and `InodeTable::forget`
/// (src/fs/inodes.rs) discards the identity's number, so the next lookup gets a new one.
#[test]
fn appending_to_a_record_keeps_its_inode_number() {
    let (_t, f) = small_workspace();
    f.step(AGENT, 1, &[("response.json", b"{\"n\":1}\n")])
        .unwrap();
    let m = Mounted::with_args(f.root(), &["--no-wake"]);
    let seen = m.path(&format!("steps/{AGENT}/001/response.json"));
    let before = std::fs::metadata(&seen).unwrap().ino();
    let mut numbers = vec![before];
    for n in 2..5 {
        let real = f.step_dir(AGENT, 1).join("response.json");
        let mut fh = std::fs::OpenOptions::new()
            .append(true)
            .open(&real)
            .unwrap();
        writeln!(fh, "{{\"n\":{n}}}").unwrap();
        drop(fh);
        let len = std::fs::metadata(&real).unwrap().len();
        assert!(eventually(LIVE, || std::fs::metadata(&seen)
            .is_ok_and(|m| m.len() == len)));
        numbers.push(std::fs::metadata(&seen).unwrap().ino());
    }
    assert!(
        numbers.iter().all(|n| *n == before),
        "the same backing file, appended to, had inode numbers {numbers:?}"
    );
}

/// The same cause, racing: a file renamed into place (`output.json.tmp` ->
/// `output.json`) and looked up before the mount has applied the rename's event gets a
/// number that the late `inval_entry` then throws away, though the file never changes
/// again (found by the model: seed 2, step 50, and most seeds within 150 steps, before
/// the model learnt to wait a second before holding a number). Racy: it shows in some of
/// the rounds.
#[test]
fn a_record_read_right_after_its_rename_keeps_its_inode_number() {
    let (_t, f) = small_workspace();
    let dir = f
        .step(AGENT, 1, &[("tools/toolu_1/input.json", b"{}")])
        .unwrap()
        .join("tools/toolu_1");
    let m = Mounted::with_args(f.root(), &["--no-wake"]);
    let seen = m.path(&format!("steps/{AGENT}/001/tools/toolu_1/output.json"));
    let mut renumbered = Vec::new();
    for round in 0..100 {
        let tmp = dir.join("output.json.tmp");
        std::fs::write(&tmp, Fixture::tool_output(&format!("round {round}"), "", 0)).unwrap();
        std::fs::rename(&tmp, dir.join("output.json")).unwrap();
        let real = std::fs::metadata(dir.join("output.json")).unwrap().ino();
        // Right after the rename the mount may still show the replaced file for a moment
        // (the invalidation is asynchronous); once it shows the new one, the number
        // must be the new file's and stay so.
        let shown = |m: &std::fs::Metadata| m.ino();
        let settled = common::mount::eventually(Duration::from_secs(2), || {
            std::fs::metadata(&seen).is_ok_and(|m| shown(&m) == real)
        });
        std::thread::sleep(Duration::from_millis(150));
        let then = std::fs::metadata(&seen).map(|m| m.ino());
        if !settled || then.as_ref().ok() != Some(&real) {
            renumbered.push((round, real, then.unwrap_or(0)));
        }
    }
    assert!(
        renumbered.is_empty(),
        "an unchanged output.json changed inode number (round, backing ino, then): {renumbered:?}"
    );
}

/// A message written through the mount under a name that is itself a deposit name
/// (`cp note.md MNT/inbox/<id>/user-001.md`) is deposited as `user-001.md`, and the
/// listing shows that file; but a lookup of the name resolves to the writer's draft (its
/// alias, kept for `cp -p`), so `stat` and `cat` show the raw content without the
/// frontmatter the real deposit has (found by the model with
/// drafts named like deposits, then behind a switch: seed 1, step 13). `Tree::child` (src/tree/mod.rs)
/// looks in the drafts before the backing directory, and `Drafts::get` returns deposited
/// aliases; `Tree::release` renews the alias's grace at every close, so a reader that
/// looks every few seconds keeps the wrong content in view for good.
#[test]
fn a_draft_named_like_its_deposit_does_not_shadow_it() {
    let (_t, f) = small_workspace();
    let m = Mounted::with_args(f.root(), &["--no-wake"]);
    let seen = m.path(&format!("inbox/{AGENT}/user-001.md"));
    std::fs::write(&seen, b"hello").unwrap();
    let real = std::fs::read(f.inbox(AGENT).join("user-001.md")).unwrap();
    assert!(real.starts_with(b"---\nfrom: user\n") && real.ends_with(b"---\nhello"));
    let mut got = None;
    let ok = eventually(LIVE, || {
        let len = std::fs::metadata(&seen).map(|m| m.len()).ok();
        let bytes = std::fs::read(&seen).ok();
        let good = len == Some(real.len() as u64) && bytes.as_ref() == Some(&real);
        got = Some((len, bytes.map(|b| String::from_utf8_lossy(&b).into_owned())));
        good
    });
    assert!(
        ok,
        "mnt/inbox/{AGENT}/user-001.md is listed as the deposit ({} bytes) but reads as \
         (st_size, content) {got:?}",
        real.len()
    );
}

/// The same shadowing across messages: a draft named `user-002.md` is deposited as
/// `user-001.md`; when litany then deposits a real `user-002.md` within the alias grace,
/// the listing shows it but reading it gives the earlier draft's content (found by the
/// model with drafts named like deposits, then behind a switch: seed 2, step 125).
#[test]
fn a_draft_alias_does_not_shadow_a_later_deposit_of_that_name() {
    let (_t, f) = small_workspace();
    let m = Mounted::with_args(f.root(), &["--no-wake"]);
    std::fs::write(
        m.path(&format!("inbox/{AGENT}/user-002.md")),
        b"through the mount",
    )
    .unwrap();
    assert!(f.inbox(AGENT).join("user-001.md").is_file());
    // litany's own deposit: a dotted temp renamed onto the next name.
    let real = b"---\nfrom: user\ndeposited_at: 2026-12-02T09:42:51Z\n---\nfrom litany".to_vec();
    let tmp = f.inbox(AGENT).join(".user-002.md.tmp");
    std::fs::write(&tmp, &real).unwrap();
    std::fs::rename(&tmp, f.inbox(AGENT).join("user-002.md")).unwrap();
    // (No listing first: readdirplus would hand the kernel the real file's entry. A
    // plain lookup, as `cat` does, is what finds the alias.)
    let dir = m.path(&format!("inbox/{AGENT}"));
    let seen = dir.join("user-002.md");
    let mut got = None;
    let ok = eventually(LIVE, || {
        let now = std::fs::read(&seen).ok();
        let good = now.as_ref() == Some(&real);
        got = now.map(|b| String::from_utf8_lossy(&b).into_owned());
        good
    });
    assert!(
        ok,
        "mnt/inbox/{AGENT}/user-002.md should read as litany's deposit, reads {got:?}"
    );
}
