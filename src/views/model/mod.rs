//! The facts `status` and the events are made from: one [`Model`] of the workspace at a
//! moment, gathered by a [`Scanner`] that remembers what it parsed.
//!
//! Guarantees:
//! - **Never in the way.** The executor lock is read from `/proc/locks` (a `FLOCK` on the
//!   device and inode of `inbox/<id>`, which is `stat`ed by path): no lock is taken or
//!   probed, and no descriptor on an `inbox/<id>` directory outlives one listing
//!   (CONTRACT §3.7).
//! - **Cheap to repeat.** Only each agent's highest step directory is read; a directory
//!   is listed again only when its mtime or ctime moved, and a record is parsed again only
//!   when its own stat did, so a rescan of an idle workspace is a few `stat`s per agent.
//! - **Bad records are facts, not errors.** A `meta.json` that does not parse, a tool
//!   directory with no `input.json`, a name that is not UTF-8: each is kept as a reason on
//!   the step or tool it belongs to; the scan always completes.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use git2::{ObjectType, Oid};
use serde_json::Value;

use crate::FastMap;
use crate::workspace::backing::{Backing, Stat};
use crate::workspace::inbox::pending_sender;
use crate::workspace::refs::{GitEntry, Refs};
use crate::workspace::steps::{META_FILE, RESPONSE_FILE, step_dir_name, step_number};
use crate::workspace::{INBOX_DIR, STEPS_DIR};

/// A step's tool records directory, and the files of one tool record (CONTRACT §4.2).
pub const TOOLS_DIR: &str = "tools";
pub const INPUT_FILE: &str = "input.json";
pub const OUTPUT_FILE: &str = "output.json";
/// The file at an agent's tree root where the titler lands a title (CONTRACT §1.2).
pub const TITLE_FILE: &str = "title";
/// How much of the end of a `response.json` is read for its finish reason and usage: a
/// short tail first (the last lines hold them), then a longer one if that had none.
pub const RESPONSE_TAIL_BYTES: [u64; 2] = [4 << 10, 64 << 10];
/// How much of the end of a large `output.json` is read for its exit code and times.
const OUTPUT_TAIL_BYTES: u64 = 512;
/// Captures up to this size are parsed whole; larger ones are measured by the paging
/// scanner (never held in memory) and their trailing fields read from the tail.
const OUTPUT_PARSE_BYTES: u64 = 4 << 20;
/// How much of a deposit is read for its frontmatter.
const DEPOSIT_HEAD_BYTES: usize = 1024;

/// The workspace at one moment.
#[derive(Debug, Clone, Default)]
pub struct Model {
    /// Seconds since the epoch when it was gathered.
    pub at: i64,
    pub agents: BTreeMap<String, Agent>,
    /// (kind, id) → mark.
    pub marks: BTreeMap<(String, String), Mark>,
}

impl Model {
    /// The name agent `id` wears, if it has one.
    pub fn name(&self, id: &str) -> Option<&str> {
        self.agents.get(id).and_then(|a| a.name.as_deref())
    }

    /// The marks of agent `id`, by kind.
    pub fn marks_of<'a>(&'a self, id: &'a str) -> impl Iterator<Item = (&'a str, &'a Mark)> {
        self.marks
            .iter()
            .filter(move |((_, who), _)| who == id)
            .map(|((kind, _), m)| (kind.as_str(), m))
    }
}

/// One living agent (an `refs/heads/agents/<id>` ref).
#[derive(Debug, Clone, PartialEq)]
pub struct Agent {
    pub tip: Oid,
    pub name: Option<String>,
    pub title: Option<String>,
    /// An executor holds its lock.
    pub running: bool,
    /// Deposits the drain would accept, by (file name, mtime in ns): names are reused.
    pub pending: Inbox,
    /// Every numbered step directory, by number.
    pub steps: StepList,
    /// The highest-numbered step, read. Shared with the scanner's record of it and with
    /// the next model while it stands, like `steps`.
    pub latest: Option<Arc<Step>>,
    /// Seconds: the newest of the tip's commit time, the latest step's files and the
    /// inbox's entries.
    pub last_activity: Option<i64>,
}

/// An agent's numbered step directories: number → name on disk. Shared between the
/// scanner's cache and every model made from it while `steps/<id>` is unchanged (a large
/// workspace has tens of thousands of steps, and a model is copied at each look).
pub type StepList = Arc<BTreeMap<u64, StepName>>;

/// A step directory's name, kept only when it is not the one litany gives its number
/// ([`step_dir_name`]; `7` for `007` is one such): nearly every step's name is the
/// number, and a large workspace's lists hold tens of thousands of them.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StepName(Option<Box<str>>);

impl StepName {
    /// Step `n`'s directory, named `name` on disk.
    pub fn of(n: u64, name: String) -> Self {
        if name == step_dir_name(n) {
            StepName(None)
        } else {
            StepName(Some(name.into_boxed_str()))
        }
    }

    /// The name on disk of step `n`'s directory.
    pub fn get(&self, n: u64) -> std::borrow::Cow<'_, str> {
        match &self.0 {
            Some(name) => std::borrow::Cow::Borrowed(name),
            None => std::borrow::Cow::Owned(step_dir_name(n)),
        }
    }
}

/// An inbox's pending deposits, by (file name, mtime in ns).
pub type Inbox = BTreeMap<(String, i128), Pending>;

/// A pending deposit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pending {
    pub sender: String,
    /// Seconds since the epoch.
    pub mtime: i64,
    /// Its inode: with its name, what a deposit through the mount is known by.
    pub ino: u64,
    /// Its `deposited_at:`, in seconds, when the frontmatter has one.
    pub deposited_at: Option<i64>,
}

/// A mark; `value` for a blob mark (`cwd`, `held`, `role`), as text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mark {
    pub oid: Oid,
    pub value: Option<String>,
}

/// The `held` mark's value (CONTRACT §6): the tool waiting for approval and why.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
pub struct Held {
    pub tool_use_id: String,
    pub tool: String,
    pub reason: String,
}

impl Held {
    pub fn parse(value: &str) -> Option<Held> {
        serde_json::from_str(value).ok()
    }
}

/// One step directory.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    pub number: u64,
    /// Its name on disk (`007`).
    pub dir: String,
    pub meta: Meta,
    /// The finish reason and output tokens, read once the step is done.
    pub finish: Option<Finish>,
    pub has_response: bool,
    /// Seconds: the mtime of the directory or of its `response.json`, the newer.
    pub mtime: i64,
    pub tools: BTreeMap<String, Tool>,
    /// Tool directory names that are not UTF-8, lossily.
    pub odd_tools: Vec<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Meta {
    Missing,
    Done {
        started: Option<i64>,
        ended: Option<i64>,
    },
    /// It exists and does not parse: why.
    Bad(String),
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Finish {
    pub reason: Option<String>,
    pub output_tokens: Option<u64>,
}

/// A step's state as `status` and the events name it (issue 11).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepState {
    /// No `meta.json` yet and an executor holds the lock.
    InFlight,
    /// `meta.json` written.
    Done,
    /// No `meta.json` and nobody holds the lock (or a later step exists).
    Failed,
}

impl StepState {
    pub fn as_str(self) -> &'static str {
        match self {
            StepState::InFlight => "in-flight",
            StepState::Done => "done",
            StepState::Failed => "failed",
        }
    }
}

impl Step {
    /// Its state, given whether it is its agent's highest step and whether the agent's
    /// lock is held.
    pub fn state(&self, latest: bool, running: bool) -> StepState {
        match self.meta {
            Meta::Done { .. } | Meta::Bad(_) => StepState::Done,
            Meta::Missing if latest && running => StepState::InFlight,
            Meta::Missing => StepState::Failed,
        }
    }
}

/// One tool record.
#[derive(Debug, Clone, PartialEq)]
pub struct Tool {
    /// From `input.json`: the tool's name and a one-line summary of its input; `Err`
    /// with why when it is missing or does not parse.
    pub input: Result<(String, String), String>,
    /// Seconds: `input.json`'s mtime.
    pub input_mtime: Option<i64>,
    pub output: Option<Result<Output, String>>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Output {
    pub exit_code: i64,
    pub stdout_bytes: u64,
    pub stderr_bytes: u64,
    pub started: Option<i64>,
    pub ended: Option<i64>,
}

/// `YYYY-MM-DDTHH:MM:SSZ` (litany's clock, CONTRACT §3.3) as seconds since the epoch.
pub fn parse_utc(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    if b.len() != 20 || b[4] != b'-' || b[7] != b'-' || b[10] != b'T' || b[19] != b'Z' {
        return None;
    }
    let num = |r: std::ops::Range<usize>| -> Option<i64> {
        let t = s.get(r)?;
        t.bytes()
            .all(|c| c.is_ascii_digit())
            .then(|| t.parse().ok())?
    };
    let (y, m, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (hh, mm, ss) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&m) || !(1..=31).contains(&d) || hh > 23 || mm > 59 || ss > 60 {
        return None;
    }
    // Howard Hinnant's days_from_civil.
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(days * 86_400 + hh * 3600 + mm * 60 + ss)
}

/// Seconds since the epoch now.
pub fn now_secs() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

fn ns((s, n): (i64, i64)) -> i128 {
    i128::from(s) * 1_000_000_000 + i128::from(n)
}

/// What makes a directory's listing or a file's content stale.
type StatKey = (u64, i128, i128, u64);

fn key(st: &Stat) -> StatKey {
    (st.ino, ns(st.mtime), ns(st.ctime), st.size)
}

/// Every `(major, minor, inode)` with a granted `FLOCK` in `/proc/locks`.
pub fn held_flocks() -> BTreeSet<(u32, u32, u64)> {
    match std::fs::read_to_string(crate::deposit::wake::PROC_LOCKS) {
        Ok(text) => crate::deposit::wake::flocks(&text).collect(),
        Err(e) => {
            log::debug!("status: /proc/locks unreadable ({e}); nobody counts as running");
            BTreeSet::new()
        }
    }
}

/// Gathers [`Model`]s and remembers what it parsed (module docs).
pub struct Scanner {
    backing: Backing,
    refs: Refs,
    /// `steps/<id>` listings: its stat → step number → name.
    steps: FastMap<String, (StatKey, StepList)>,
    /// Step directories read, by path: the stats they were read at.
    step_cache: FastMap<PathBuf, (Vec<StatKey>, Step)>,
    tool_cache: FastMap<PathBuf, (Vec<StatKey>, Tool)>,
    /// `inbox/<id>` listings.
    inboxes: FastMap<String, (StatKey, Inbox)>,
    titles: FastMap<Oid, Option<String>>,
    blobs: FastMap<Oid, Option<String>>,
    /// Per agent, the latest step as last read, with what would make it stale: see
    /// [`Scanner::settled`].
    settled: FastMap<String, (Vec<StatKey>, bool, Arc<Step>)>,
    /// Scans since the last one that read every latest step afresh.
    since_full: u32,
    /// Whether a step, tool or title was remembered since the caches were last pruned
    /// ([`Scanner::prune`]): with that and the refs unchanged, none can hold a stale entry.
    grown: bool,
    /// The refs as last read, and when.
    last_refs: Option<(std::time::Instant, Arc<crate::workspace::refs::Snapshot>)>,
    /// Whether steps and tools read are remembered (not for a one-pass reader, such as
    /// history, which reads each record once and would only grow the caches).
    caching: bool,
}

/// The longest a reading of the refs is used by [`Scanner::scan_with`] when no watch
/// reported a change (a safety net should a watch miss one).
pub const REFS_TRUST: std::time::Duration = std::time::Duration::from_secs(5);

/// Every this many scans, every agent's latest step is read again even when it looks
/// settled (a safety net for writers that take no lock).
const FULL_SCAN_EVERY: u32 = 120;

impl Scanner {
    pub fn new(root: &Path) -> std::io::Result<Self> {
        let refs = Refs::open(&root.join(crate::workspace::REPO_DIR))
            .map_err(|e| std::io::Error::other(e.to_string()))?;
        Ok(Self {
            backing: Backing::open(root)?,
            refs,
            steps: FastMap::default(),
            step_cache: FastMap::default(),
            tool_cache: FastMap::default(),
            inboxes: FastMap::default(),
            titles: FastMap::default(),
            blobs: FastMap::default(),
            settled: FastMap::default(),
            since_full: 0,
            grown: false,
            last_refs: None,
            caching: true,
        })
    }

    /// A scanner that remembers no step or tool it reads (see `caching`).
    pub fn one_pass(root: &Path) -> std::io::Result<Self> {
        let mut s = Self::new(root)?;
        s.caching = false;
        Ok(s)
    }

    pub fn refs(&self) -> &Refs {
        &self.refs
    }

    /// The workspace now.
    pub fn scan(&mut self) -> Model {
        self.scan_with(true)
    }

    /// The workspace now; the refs are read again only when `refs_moved` (a watch on them
    /// reported a change) or the last reading is older than [`REFS_TRUST`]. A failed
    /// reading keeps the last one, so a git hiccup never reads as every agent deleted.
    pub fn scan_with(&mut self, refs_moved: bool) -> Model {
        let at = now_secs();
        if refs_moved {
            // Told of a change: what the refs' own cache holds may predate it.
            self.refs.invalidate();
        }
        let fresh = match &self.last_refs {
            Some((when, snap)) if !refs_moved && when.elapsed() < REFS_TRUST => Ok(snap.clone()),
            _ => self.refs.snapshot(),
        };
        let snap = match (fresh, &self.last_refs) {
            (Ok(s), _) => s,
            (Err(e), Some((_, last))) => {
                log::warn!("events: reading the refs failed ({e}); keeping what was known");
                last.clone()
            }
            (Err(e), None) => {
                log::warn!("events: reading the refs failed ({e})");
                return Model {
                    at,
                    ..Model::default()
                };
            }
        };
        let refs_changed = !self
            .last_refs
            .as_ref()
            .is_some_and(|(_, last)| Arc::ptr_eq(last, &snap));
        if refs_changed {
            self.last_refs = Some((std::time::Instant::now(), snap.clone()));
        }
        let names: FastMap<&str, &str> = snap
            .names
            .iter()
            .map(|(n, id)| (id.as_str(), n.as_str()))
            .collect();
        let locks = held_flocks();
        let mut model = Model {
            at,
            ..Model::default()
        };
        for (kind, ids) in &snap.marks {
            for (id, oid) in ids {
                let value = self.blob_text(*oid);
                model
                    .marks
                    .insert((kind.clone(), id.clone()), Mark { oid: *oid, value });
            }
        }
        self.since_full += 1;
        if self.since_full >= FULL_SCAN_EVERY {
            self.since_full = 0;
            self.settled.clear();
        }
        // One listing of `steps/` and one of `inbox/` stat every agent's directories.
        let tops = [STEPS_DIR, INBOX_DIR].map(|top| -> FastMap<OsString, Stat> {
            self.backing
                .list(Path::new(top))
                .unwrap_or_default()
                .into_iter()
                .collect()
        });
        for (id, tip) in &snap.agents {
            let stats = tops
                .each_ref()
                .map(|t| t.get(std::ffi::OsStr::new(id)).copied());
            let agent = self.agent(id, *tip, names.get(id.as_str()).copied(), &locks, stats);
            model.agents.insert(id.clone(), agent);
        }
        if refs_changed || self.grown {
            self.prune(&snap, &model);
        }
        if self.blobs.len() > 4096 {
            self.blobs.clear();
        }
        model
    }

    /// Forgets what no agent of `snap` and no latest step of `model` needs. An idle look
    /// skips this (see `grown`): at 2,000 agents it was a fifth of the look's cost.
    fn prune(&mut self, snap: &crate::workspace::refs::Snapshot, model: &Model) {
        self.grown = false;
        let live = |id: &String| snap.agents.contains_key(id);
        self.settled.retain(|id, _| live(id));
        self.steps.retain(|id, _| live(id));
        self.inboxes.retain(|id, _| live(id));
        // A cached step is `steps/<id>/<dir>`; a cached tool is `<step>/tools/<tool>`.
        let latest = |step: &Path| -> bool {
            let mut parts = step
                .strip_prefix(STEPS_DIR)
                .into_iter()
                .flat_map(Path::iter);
            let (Some(id), Some(dir), None) = (parts.next(), parts.next(), parts.next()) else {
                return false;
            };
            id.to_str()
                .and_then(|id| model.agents.get(id))
                .and_then(|a| a.latest.as_ref())
                .is_some_and(|s| std::ffi::OsStr::new(&s.dir) == dir)
        };
        self.step_cache.retain(|p, _| latest(p));
        self.tool_cache
            .retain(|p, _| p.parent().and_then(Path::parent).is_some_and(latest));
        let tips: crate::FastSet<Oid> = snap.agents.values().copied().collect();
        self.titles.retain(|oid, _| tips.contains(oid));
    }

    fn agent(
        &mut self,
        id: &str,
        tip: Oid,
        name: Option<&str>,
        locks: &BTreeSet<(u32, u32, u64)>,
        [steps_st, inbox]: [Option<Stat>; 2],
    ) -> Agent {
        // `inbox/<id>` is stated from `inbox/`: no descriptor on the directory itself.
        let inbox = inbox.filter(Stat::is_dir);
        let running = inbox
            .is_some_and(|st| locks.contains(&(libc::major(st.dev), libc::minor(st.dev), st.ino)));
        let steps = self.step_list_at(id, steps_st.filter(Stat::is_dir));
        let latest = steps.iter().next_back().map(|(n, dir)| {
            let keys = self.settle_keys(id);
            match self.settled.get(id) {
                Some((k, was_running, s))
                    if *k == keys && !*was_running && !running && s.number == *n =>
                {
                    s.clone()
                }
                _ => {
                    let s = Arc::new(self.step(id, *n, &dir.get(*n)));
                    let all_out = s.tools.values().all(|t| t.output.is_some());
                    if all_out {
                        self.settled
                            .insert(id.to_string(), (keys, running, s.clone()));
                    } else {
                        self.settled.remove(id);
                    }
                    s
                }
            }
        });
        let pending = self.pending(id, inbox);
        let title = self.title(tip);
        let tip_time = self
            .refs
            .commit_time(tip)
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map(|d| d.as_secs() as i64);
        let last_activity = [
            tip_time,
            latest.as_ref().map(|s| s.mtime),
            pending.values().map(|p| p.mtime).max(),
        ]
        .into_iter()
        .flatten()
        .max();
        Agent {
            tip,
            name: name.map(str::to_string),
            title,
            running,
            pending,
            steps,
            latest,
            last_activity,
        }
    }

    fn title(&mut self, tip: Oid) -> Option<String> {
        if let Some(t) = self.titles.get(&tip) {
            return t.clone();
        }
        let t = match self.refs.entry_at(tip, &[TITLE_FILE]) {
            Ok(Some(GitEntry::Blob { oid, .. })) => self
                .refs
                .blob(oid)
                .ok()
                .map(|b| String::from_utf8_lossy(&b).trim().to_string())
                .filter(|t| !t.is_empty()),
            _ => None,
        };
        self.titles.insert(tip, t.clone());
        self.grown = true;
        t
    }

    /// A blob's text, or `None` for anything that is not a blob.
    fn blob_text(&mut self, oid: Oid) -> Option<String> {
        if let Some(v) = self.blobs.get(&oid) {
            return v.clone();
        }
        let v = match self.refs.header(oid) {
            Ok((ObjectType::Blob, _)) => self
                .refs
                .blob(oid)
                .ok()
                .map(|b| String::from_utf8_lossy(&b).into_owned()),
            _ => None,
        };
        self.blobs.insert(oid, v.clone());
        v
    }

    /// What must stand for an agent's latest step to be taken as last read without
    /// listing it: `steps/<id>` unchanged (no step came or went); and (the caller checks)
    /// no executor then or now, and every tool finished. Records change only under an
    /// executor, which holds the lock, so an idle agent costs two `stat`s a scan (its
    /// steps and its inbox); a writer that takes no lock is seen at the next full scan.
    fn settle_keys(&self, id: &str) -> Vec<StatKey> {
        // `steps/<id>` was just stated by the listing of the steps.
        vec![self.steps.get(id).map(|(k, _)| *k).unwrap_or_default()]
    }

    /// The numbered step directories of agent `id`, whose `steps/<id>` has stat `st`.
    fn step_list_at(&mut self, id: &str, st: Option<Stat>) -> StepList {
        let rel = Path::new(STEPS_DIR).join(id);
        let Some(st) = st else {
            self.steps.remove(id);
            return StepList::default();
        };
        if let Some((k, list)) = self.steps.get(id)
            && *k == key(&st)
        {
            return list.clone();
        }
        let list: StepList = self
            .backing
            .list(&rel)
            .unwrap_or_default()
            .into_iter()
            .filter(|(_, st)| st.is_dir())
            .filter_map(|(n, _)| {
                let n = n.into_string().ok()?;
                let number = step_number(n.as_bytes())?;
                Some((number, StepName::of(number, n)))
            })
            .collect::<BTreeMap<_, _>>()
            .into();
        self.steps.insert(id.to_string(), (key(&st), list.clone()));
        list
    }

    /// The pending deposits of agent `id`, whose inbox directory's stat is `st`.
    fn pending(&mut self, id: &str, st: Option<Stat>) -> Inbox {
        let rel = Path::new(INBOX_DIR).join(id);
        let Some(st) = st else {
            self.inboxes.remove(id);
            return BTreeMap::new();
        };
        if let Some((k, p)) = self.inboxes.get(id)
            && *k == key(&st)
        {
            return p.clone();
        }
        let old = self.inboxes.remove(id).map(|(_, p)| p).unwrap_or_default();
        let mut out = BTreeMap::new();
        for (name, fst) in self.backing.list(&rel).unwrap_or_default() {
            let Ok(name) = name.into_string() else {
                continue;
            };
            let Some(sender) = pending_sender(&name) else {
                continue;
            };
            if !fst.is_file() {
                continue;
            }
            let k = (name.clone(), ns(fst.mtime));
            let p = match old.get(&k) {
                Some(p) => p.clone(),
                None => Pending {
                    sender: sender.to_string(),
                    mtime: fst.mtime.0,
                    ino: fst.ino,
                    deposited_at: self.deposited_at(&rel.join(&name)),
                },
            };
            out.insert(k, p);
        }
        self.inboxes.insert(id.to_string(), (key(&st), out.clone()));
        out
    }

    fn deposited_at(&self, rel: &Path) -> Option<i64> {
        let (f, _) = self.backing.open_file(rel).ok()?;
        let mut head = Vec::with_capacity(DEPOSIT_HEAD_BYTES);
        f.take(DEPOSIT_HEAD_BYTES as u64)
            .read_to_end(&mut head)
            .ok()?;
        deposited_at(&String::from_utf8_lossy(&head))
    }

    /// Step `dir` (number `n`) of agent `id`, from the cache while its stats stand.
    pub fn step(&mut self, id: &str, n: u64, dir: &str) -> Step {
        let rel = Path::new(STEPS_DIR).join(id).join(dir);
        let entries = self.backing.list(&rel).unwrap_or_default();
        let stat_of = |name: &str| entries.iter().find(|(e, _)| e == name).map(|(_, s)| *s);
        let tools_st = stat_of(TOOLS_DIR).filter(Stat::is_dir);
        let mut keys: Vec<StatKey> = entries.iter().map(|(_, s)| key(s)).collect();
        if let Ok(d) = self.backing.lstat(&rel) {
            keys.push(key(&d));
        }
        // Listing the tools is cheap and each tool is cached on its own; the step's own
        // files are read again only when a stat in the step directory moved.
        let cached = self
            .step_cache
            .get(&rel)
            .filter(|(k, _)| *k == keys)
            .map(|(_, s)| s.clone());
        if let Some(s) = &cached
            && tools_st.is_none()
        {
            return s.clone();
        }
        let (meta, finish, has_response, mtime) = match cached {
            Some(s) => (s.meta, s.finish, s.has_response, s.mtime),
            None => {
                let dir_mtime = self.backing.lstat(&rel).map(|s| s.mtime.0).unwrap_or(0);
                let response = stat_of(RESPONSE_FILE);
                let meta = match stat_of(META_FILE) {
                    None => Meta::Missing,
                    Some(_) => read_meta(&self.backing, &rel.join(META_FILE)),
                };
                let done = !matches!(meta, Meta::Missing);
                let finish = match (done, response) {
                    (true, Some(_)) => Some(read_finish(&self.backing, &rel.join(RESPONSE_FILE))),
                    _ => None,
                };
                let mtime = dir_mtime.max(response.map_or(0, |r| r.mtime.0));
                (meta, finish, response.is_some(), mtime)
            }
        };
        let mut tools = BTreeMap::new();
        let mut odd_tools = Vec::new();
        if tools_st.is_some() {
            let tdir = rel.join(TOOLS_DIR);
            for (name, st) in self.backing.list(&tdir).unwrap_or_default() {
                if !st.is_dir() {
                    continue;
                }
                match name.into_string() {
                    Ok(t) => {
                        let tool = self.tool(&tdir.join(&t));
                        tools.insert(t, tool);
                    }
                    Err(o) => odd_tools.push(lossy(o)),
                }
            }
        }
        let step = Step {
            number: n,
            dir: dir.to_string(),
            meta,
            finish,
            has_response,
            mtime,
            tools,
            odd_tools,
        };
        if self.caching {
            self.grown |= self.step_cache.insert(rel, (keys, step.clone())).is_none();
        }
        step
    }

    fn tool(&mut self, rel: &Path) -> Tool {
        let entries = self.backing.list(rel).unwrap_or_default();
        let keys: Vec<StatKey> = entries.iter().map(|(_, s)| key(s)).collect();
        if let Some((k, t)) = self.tool_cache.get(rel)
            && *k == keys
        {
            return t.clone();
        }
        let stat_of = |name: &str| entries.iter().find(|(e, _)| e == name).map(|(_, s)| *s);
        let input_st = stat_of(INPUT_FILE);
        let input = match input_st {
            None => Err(format!("no {INPUT_FILE}")),
            Some(_) => read_input(&self.backing, &rel.join(INPUT_FILE)),
        };
        let output = stat_of(OUTPUT_FILE)
            .map(|st| read_output(&self.backing, &rel.join(OUTPUT_FILE), st.size));
        let tool = Tool {
            input,
            input_mtime: input_st.map(|s| s.mtime.0),
            output,
        };
        if self.caching {
            self.grown |= self
                .tool_cache
                .insert(rel.to_path_buf(), (keys, tool.clone()))
                .is_none();
        }
        tool
    }
}

fn lossy(o: OsString) -> String {
    o.to_string_lossy().into_owned()
}

/// The `deposited_at:` of a deposit's frontmatter, in seconds.
pub fn deposited_at(text: &str) -> Option<i64> {
    let rest = text.strip_prefix("---\n")?;
    let front = &rest[..rest.find("\n---\n").unwrap_or(rest.len())];
    front
        .lines()
        .find_map(|l| l.strip_prefix("deposited_at: "))
        .and_then(|v| parse_utc(v.trim()))
}

fn read_small(backing: &Backing, rel: &Path, limit: u64) -> Result<Vec<u8>, String> {
    let (f, _) = backing.open_file(rel).map_err(|e| e.to_string())?;
    let mut buf = Vec::new();
    f.take(limit)
        .read_to_end(&mut buf)
        .map_err(|e| e.to_string())?;
    Ok(buf)
}

fn read_meta(backing: &Backing, rel: &Path) -> Meta {
    let bytes = match read_small(backing, rel, 1 << 20) {
        Ok(b) => b,
        Err(e) => return Meta::Bad(e),
    };
    match serde_json::from_slice::<Value>(&bytes) {
        Ok(v) if v.is_object() => {
            let t = |k: &str| v.get(k).and_then(Value::as_str).and_then(parse_utc);
            Meta::Done {
                started: t("started_at"),
                ended: t("ended_at"),
            }
        }
        Ok(_) => Meta::Bad("not a JSON object".into()),
        Err(e) => Meta::Bad(format!("does not parse: {e}")),
    }
}

/// The last finish reason and output-token count in the tail of a `response.json`.
fn read_finish(backing: &Backing, rel: &Path) -> Finish {
    use std::os::unix::fs::FileExt;
    let mut out = Finish::default();
    let Ok((f, st)) = backing.open_file(rel) else {
        return out;
    };
    for tail in RESPONSE_TAIL_BYTES {
        let start = st.size.saturating_sub(tail);
        let mut buf = vec![0u8; (st.size - start) as usize];
        if f.read_exact_at(&mut buf, start).is_err() {
            return out;
        }
        for line in buf.split(|b| *b == b'\n') {
            let Ok(v) = serde_json::from_slice::<Value>(line) else {
                continue;
            };
            match v.get("type").and_then(Value::as_str) {
                Some("finish") => {
                    out.reason = v.get("reason").and_then(Value::as_str).map(str::to_string)
                }
                Some("usage") => {
                    if let Some(n) = v.get("output_tokens").and_then(Value::as_u64) {
                        out.output_tokens = Some(n);
                    }
                }
                _ => {}
            }
        }
        if out.reason.is_some() || start == 0 {
            break;
        }
    }
    out
}

/// A tool's name and a summary of its input: a `bash` command as typed, anything else
/// as compact JSON.
fn read_input(backing: &Backing, rel: &Path) -> Result<(String, String), String> {
    let bytes = read_small(backing, rel, 1 << 20)?;
    let v: Value =
        serde_json::from_slice(&bytes).map_err(|e| format!("{INPUT_FILE} does not parse: {e}"))?;
    let name = v
        .get("name")
        .and_then(Value::as_str)
        .ok_or_else(|| format!("{INPUT_FILE} has no name"))?
        .to_string();
    let input = v.get("input").cloned().unwrap_or(Value::Null);
    let summary = match input.get("command").and_then(Value::as_str) {
        Some(cmd) => cmd.to_string(),
        None => input.to_string(),
    };
    Ok((name, super::event::summary(&summary)))
}

fn read_output(backing: &Backing, rel: &Path, size: u64) -> Result<Output, String> {
    #[derive(serde::Deserialize)]
    struct Record {
        stdout: String,
        stderr: String,
        exit_code: i64,
        started_at: String,
        ended_at: String,
    }
    if size <= OUTPUT_PARSE_BYTES {
        let bytes = read_small(backing, rel, OUTPUT_PARSE_BYTES + 1)?;
        let r: Record = serde_json::from_slice(&bytes)
            .map_err(|e| format!("{OUTPUT_FILE} does not parse: {e}"))?;
        return Ok(Output {
            exit_code: r.exit_code,
            stdout_bytes: r.stdout.len() as u64,
            stderr_bytes: r.stderr.len() as u64,
            started: parse_utc(&r.started_at),
            ended: parse_utc(&r.ended_at),
        });
    }
    // Too large to hold: the paging scanner measures the streams (and checks the record
    // parses as litany parses it); the fields after them are read from the tail.
    use std::os::unix::fs::FileExt;
    let (f, st) = backing.open_file(rel).map_err(|e| e.to_string())?;
    let index = crate::paging::scan::scan(&f, u64::MAX)
        .map_err(|_| format!("{OUTPUT_FILE} does not parse"))?;
    let start = st.size.saturating_sub(OUTPUT_TAIL_BYTES);
    let mut tail = vec![0u8; (st.size - start) as usize];
    f.read_exact_at(&mut tail, start)
        .map_err(|e| e.to_string())?;
    let tail = String::from_utf8_lossy(&tail);
    // The streams come first, so the last occurrence of each key is the field itself.
    let field = |k: &str| -> Option<&str> {
        let at = tail.rfind(&format!("\"{k}\":"))? + k.len() + 3;
        let rest = tail[at..].trim_start();
        let end = rest.find([',', '\n', '}']).unwrap_or(rest.len());
        Some(rest[..end].trim().trim_matches('"'))
    };
    Ok(Output {
        exit_code: field("exit_code")
            .and_then(|v| v.parse().ok())
            .unwrap_or(-1),
        stdout_bytes: index.stdout.len,
        stderr_bytes: index.stderr.len,
        started: field("started_at").and_then(parse_utc),
        ended: field("ended_at").and_then(parse_utc),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_step_name_is_kept_only_when_it_is_not_the_number_as_litany_writes_it() {
        for (n, name, kept) in [
            (7, "007", false),
            (1000, "1000", false),
            (7, "7", true),
            (7, "0007", true),
        ] {
            let s = StepName::of(n, name.to_string());
            assert_eq!(s.0.is_some(), kept, "{name}");
            assert_eq!(s.get(n), name);
        }
        assert_eq!(
            std::mem::size_of::<StepName>(),
            2 * std::mem::size_of::<usize>()
        );
    }
    use crate::fixture::Fixture;
    use crate::workspace::refs::Flavour;

    #[test]
    fn utc_round_trips() {
        for secs in [0, 1_796_204_571, 951_782_400, 4_102_444_799] {
            let s = crate::deposit::format_utc(secs);
            assert_eq!(parse_utc(&s), Some(secs), "{s}");
        }
        for bad in [
            "",
            "2026-12-02T09:42:51",
            "2026-13-02T09:42:51Z",
            "2026-12-02 09:42:51Z",
        ] {
            assert_eq!(parse_utc(bad), None, "{bad}");
        }
        assert_eq!(
            deposited_at("---\nfrom: user\ndeposited_at: 2026-12-02T09:42:51Z\n---\nhi"),
            Some(1_796_204_571)
        );
        assert_eq!(deposited_at("deposited_at: 2026-12-02T09:42:51Z\n"), None);
    }

    #[test]
    fn a_scan_reads_agents_steps_tools_inboxes_and_marks() {
        let t = tempfile::tempdir().unwrap();
        let f = Fixture::create(t.path(), Flavour::Litany).unwrap();
        f.agent("r1", Some("Alpha"), &[("title", b"Fix the build\n")])
            .unwrap();
        f.agent("r1-c1-x", None, &[]).unwrap();
        f.blob_mark(
            "held",
            "r1",
            br#"{"tool_use_id":"t","tool":"bash","reason":"ask"}"#,
        )
        .unwrap();
        let tip = f.agent_tip("r1").unwrap();
        f.commit_mark("notify", "r1", tip).unwrap();
        f.step("r1", 1, &[
            ("meta.json", br#"{"started_at":"2026-12-02T09:42:30Z","ended_at":"2026-12-02T09:42:31Z"}"#),
            ("response.json", b"{\"type\":\"usage\",\"output_tokens\":7}\n{\"type\":\"finish\",\"reason\":\"tool_use\"}\n{\"type\":\"end\"}\n"),
            ("tools/toolu_1/input.json", br#"{"id":"toolu_1","name":"bash","input":{"command":"ls -l"}}"#),
        ]).unwrap();
        f.step(
            "r1",
            1,
            &[(
                "tools/toolu_1/output.json",
                &Fixture::tool_output("ab", "c", 2),
            )],
        )
        .unwrap();
        f.step("r1", 2, &[("meta.json", b"{not json")]).unwrap();
        f.step(
            "r1-c1-x",
            1,
            &[("tools/odd/output.json", &Fixture::tool_output("", "", 0))],
        )
        .unwrap();
        f.inbox_file(
            "r1",
            "user-001.md",
            b"---\nfrom: user\ndeposited_at: 2026-12-02T09:42:51Z\n---\nhi",
        )
        .unwrap();
        f.inbox_file("r1", ".user-002.md.tmp", b"x").unwrap();
        let mut s = Scanner::new(f.root()).unwrap();
        let m = s.scan();
        let a = &m.agents["r1"];
        assert_eq!(a.name.as_deref(), Some("Alpha"));
        assert_eq!(a.title.as_deref(), Some("Fix the build"));
        assert!(!a.running);
        assert_eq!(a.pending.len(), 1);
        let p = a.pending.values().next().unwrap();
        assert_eq!(
            (p.sender.as_str(), p.deposited_at),
            ("user", Some(1_796_204_571))
        );
        assert_eq!(a.steps.keys().copied().collect::<Vec<_>>(), vec![1, 2]);
        let latest = a.latest.as_ref().unwrap();
        assert_eq!(latest.number, 2);
        assert!(matches!(latest.meta, Meta::Bad(_)), "{:?}", latest.meta);
        let one = s.step("r1", 1, "001");
        assert_eq!(
            one.finish,
            Some(Finish {
                reason: Some("tool_use".into()),
                output_tokens: Some(7)
            })
        );
        let tool = &one.tools["toolu_1"];
        assert_eq!(tool.input, Ok(("bash".into(), "ls -l".into())));
        let out = tool.output.clone().unwrap().unwrap();
        assert_eq!(
            (out.exit_code, out.stdout_bytes, out.stderr_bytes),
            (2, 2, 1)
        );
        let child = m.agents["r1-c1-x"].latest.as_ref().unwrap();
        assert!(child.tools["odd"].input.is_err());
        assert_eq!(child.state(true, false), StepState::Failed);
        assert_eq!(child.state(true, true), StepState::InFlight);
        let marks: Vec<&str> = m.marks_of("r1").map(|(k, _)| k).collect();
        assert_eq!(marks, vec!["held", "notify"]);
        let held = m.marks[&("held".to_string(), "r1".to_string())]
            .value
            .clone()
            .unwrap();
        assert_eq!(Held::parse(&held).unwrap().tool, "bash");
        assert_eq!(
            m.marks[&("notify".to_string(), "r1".to_string())].value,
            None
        );
        // A second scan of nothing changed agrees.
        let again = s.scan();
        assert_eq!(again.agents, m.agents);
    }

    #[test]
    fn the_caches_keep_only_the_latest_steps_of_living_agents() {
        let t = tempfile::tempdir().unwrap();
        let f = Fixture::create(t.path(), Flavour::Litany).unwrap();
        f.agent("r1", None, &[]).unwrap();
        f.agent("r2", None, &[]).unwrap();
        let tool = Fixture::tool_output("a", "", 0);
        for id in ["r1", "r2"] {
            f.step(id, 1, &[("tools/t/output.json", &tool)]).unwrap();
        }
        let mut s = Scanner::new(f.root()).unwrap();
        s.scan();
        assert_eq!((s.step_cache.len(), s.tool_cache.len()), (2, 2));
        // Idle looks prune nothing and keep everything.
        s.scan();
        assert!(!s.grown);
        assert_eq!((s.step_cache.len(), s.tool_cache.len()), (2, 2));
        // A new step replaces its agent's old one in both caches...
        f.step("r1", 2, &[("tools/u/output.json", &tool)]).unwrap();
        s.scan();
        let rel = |id, n| {
            f.step_dir(id, n)
                .strip_prefix(f.root())
                .unwrap()
                .to_path_buf()
        };
        let mut cached: Vec<&PathBuf> = s.step_cache.keys().collect();
        cached.sort();
        assert_eq!(cached, [&rel("r1", 2), &rel("r2", 1)]);
        assert_eq!(s.tool_cache.len(), 2);
        // ...and a deleted agent leaves them.
        f.delete_agent("r2").unwrap();
        s.scan();
        assert_eq!((s.step_cache.len(), s.tool_cache.len()), (1, 1));
        assert!(s.titles.len() <= 1);
    }

    #[test]
    fn a_settled_step_is_not_read_again_until_the_full_scan() {
        let t = tempfile::tempdir().unwrap();
        let f = Fixture::create(t.path(), Flavour::Litany).unwrap();
        f.agent("r1", None, &[]).unwrap();
        f.step("r1", 1, &[("meta.json", b"{}")]).unwrap();
        f.step(
            "r1",
            1,
            &[("tools/t/output.json", &Fixture::tool_output("a", "", 0))],
        )
        .unwrap();
        let mut s = Scanner::new(f.root()).unwrap();
        let exit = |m: &Model| {
            let step = m.agents["r1"].latest.clone().unwrap();
            step.tools["t"].output.clone().unwrap().unwrap().exit_code
        };
        assert_eq!(exit(&s.scan()), 0);
        // Rewritten in place by something that holds no lock: unseen for a while...
        let out = f.step_dir("r1", 1).join("tools/t/output.json");
        std::fs::write(&out, Fixture::tool_output("a", "", 3)).unwrap();
        assert_eq!(exit(&s.scan()), 0);
        // ...and seen by the full scan.
        let seen = (0..FULL_SCAN_EVERY).any(|_| exit(&s.scan()) == 3);
        assert!(seen);
        // A new tool directory is seen at once by the holder of the executor lock...
        f.step(
            "r1",
            1,
            &[("tools/u/input.json", br#"{"name":"bash","input":{}}"#)],
        )
        .unwrap();
        std::fs::create_dir_all(f.inbox("r1")).unwrap();
        let dir = std::fs::File::open(f.inbox("r1")).unwrap();
        use std::os::fd::AsRawFd;
        // SAFETY: a valid descriptor.
        assert_eq!(unsafe { libc::flock(dir.as_raw_fd(), libc::LOCK_EX) }, 0);
        let latest = |m: Model| m.agents["r1"].latest.clone().unwrap();
        assert!(latest(s.scan()).tools.contains_key("u"));
        drop(dir);
        // ...and a new step by anyone.
        f.step("r1", 2, &[("request.json", b"{}")]).unwrap();
        assert_eq!(latest(s.scan()).number, 2);
    }

    #[test]
    fn a_held_flock_makes_the_agent_running() {
        let t = tempfile::tempdir().unwrap();
        let f = Fixture::create(t.path(), Flavour::Litany).unwrap();
        f.agent("r1", None, &[]).unwrap();
        std::fs::create_dir_all(f.inbox("r1")).unwrap();
        let mut s = Scanner::new(f.root()).unwrap();
        assert!(!s.scan().agents["r1"].running);
        let dir = std::fs::File::open(f.inbox("r1")).unwrap();
        use std::os::fd::AsRawFd;
        // SAFETY: a valid descriptor.
        assert_eq!(unsafe { libc::flock(dir.as_raw_fd(), libc::LOCK_EX) }, 0);
        assert!(s.scan().agents["r1"].running);
        drop(dir);
        assert!(!s.scan().agents["r1"].running);
    }
}
