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

use crate::workspace::clock::now_secs;
use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use git2::{ObjectType, Oid};

use crate::FastMap;
use crate::workspace::backing::{Backing, Stat};
use crate::workspace::refs::{GitEntry, Refs, TITLE_FILE};
use crate::workspace::{INBOX_DIR, STEPS_DIR};

mod budget;
mod inbox;
pub(crate) mod spend;
mod steps;

pub(crate) use budget::{Budget, WorkflowFrom};
pub(crate) use inbox::{Inbox, deposited_at};
pub(crate) use spend::{Account, Ledger, Spend};
pub(crate) use steps::{META_READ_BYTES, Meta, MetaRecord, Step, StepList, StepState, Tool};

/// The workspace at one moment.
#[derive(Debug, Clone, Default)]
pub struct Model {
    /// Seconds since the epoch when it was gathered.
    pub(crate) at: i64,
    pub agents: BTreeMap<String, Agent>,
    /// (kind, id) → mark.
    pub(crate) marks: BTreeMap<(String, String), Mark>,
}

impl Model {
    /// The name agent `id` wears, if it has one.
    pub(crate) fn name(&self, id: &str) -> Option<&str> {
        self.agents.get(id).and_then(|a| a.name.as_deref())
    }

    /// The marks of agent `id`, by kind (a scan of all of them: `status` indexes them
    /// once instead).
    #[cfg(test)]
    pub(crate) fn marks_of<'a>(&'a self, id: &'a str) -> impl Iterator<Item = (&'a str, &'a Mark)> {
        self.marks
            .iter()
            .filter(move |((_, who), _)| who == id)
            .map(|((kind, _), m)| (kind.as_str(), m))
    }
}

/// One living agent (an `refs/heads/agents/<id>` ref).
#[derive(Debug, Clone, PartialEq)]
pub struct Agent {
    pub(crate) tip: Oid,
    pub(crate) name: Option<String>,
    pub(crate) title: Option<String>,
    /// An executor holds its lock.
    pub(crate) running: bool,
    /// Deposits the drain would accept, by (file name, mtime in ns): names are reused.
    pub(crate) pending: Inbox,
    /// Every numbered step directory, by number.
    pub(crate) steps: StepList,
    /// The highest-numbered step, read. Shared with the scanner's record of it and with
    /// the next model while it stands, like `steps`.
    pub(crate) latest: Option<Arc<Step>>,
    /// Seconds: the newest of the tip's commit time, the latest step's files and the
    /// inbox's entries.
    pub(crate) last_activity: Option<i64>,
    /// What its steps cost, and how its highest step's call ended ([`spend`]).
    pub(crate) account: Arc<Account>,
    /// The budget its governing workflow sets, when it sets one (gathered for `status`
    /// only: [`Scanner::scan_for_status`]).
    pub(crate) budget: Option<Arc<Budget>>,
    /// What needs a look, most urgent first, as the whole workspace sees it
    /// ([`crate::views::signal`]); `None` when nothing does.
    pub(crate) signals: crate::views::signal::Signals,
}

/// A mark; `value` for a blob mark (`cwd`, `held`, `role`), as text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Mark {
    pub(crate) oid: Oid,
    pub(crate) value: Option<String>,
}

/// The `held` mark's value (CONTRACT §6): the tool waiting for approval and why.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
pub(crate) struct Held {
    pub(crate) tool_use_id: String,
    pub(crate) tool: String,
    pub(crate) reason: String,
}

impl Held {
    pub(crate) fn parse(value: &str) -> Option<Held> {
        serde_json::from_str(value).ok()
    }
}

fn ns((s, n): (i64, i64)) -> i128 {
    i128::from(s) * 1_000_000_000 + i128::from(n)
}

/// What makes a directory's listing or a file's content stale.
type StatKey = (u64, i128, i128, u64);

fn key(st: &Stat) -> StatKey {
    (st.ino, ns(st.mtime), ns(st.ctime), st.size)
}

/// Every `(major, minor, inode)` with a granted `FLOCK` ([`crate::locks`]); none when
/// `/proc/locks` cannot be read.
pub(crate) fn held_flocks() -> Arc<crate::locks::Held> {
    crate::locks::held().unwrap_or_else(|e| {
        log::debug!("status: /proc/locks unreadable ({e}); nobody counts as running");
        Arc::default()
    })
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
    /// How long the last reading of the refs is used when no watch told of a change
    /// ([`REFS_TRUST`] unless [`Scanner::trust_refs_for`] says otherwise).
    refs_trust: std::time::Duration,
    /// Whether steps and tools read are remembered (not for a one-pass reader, such as
    /// history, which reads each record once and would only grow the caches).
    caching: bool,
    /// What the steps cost, shared with every scanner of the same views.
    ledger: Arc<parking_lot::Mutex<Ledger>>,
    /// The workflows' budgets ([`budget`]).
    workflows: budget::Workflows,
    /// The signals last made, by agent, and what from ([`crate::views::signal::Memo`]).
    signal_memo: crate::views::signal::Memo,
    root: PathBuf,
}

/// The longest a reading of the refs is used by [`Scanner::scan_with`] when no watch
/// reported a change (a safety net should a watch miss one).
pub(crate) const REFS_TRUST: std::time::Duration = std::time::Duration::from_secs(5);

/// Every this many scans, every agent's latest step is read again even when it looks
/// settled (a safety net for writers that take no lock).
const FULL_SCAN_EVERY: u32 = 120;

impl Scanner {
    pub fn new(root: &Path) -> std::io::Result<Self> {
        Self::with_ledger(root, Arc::default())
    }

    /// A scanner that shares `ledger` (the views' one: [`spend`]).
    pub(crate) fn with_ledger(
        root: &Path,
        ledger: Arc<parking_lot::Mutex<Ledger>>,
    ) -> std::io::Result<Self> {
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
            refs_trust: REFS_TRUST,
            caching: true,
            ledger,
            workflows: budget::Workflows::default(),
            signal_memo: Default::default(),
            root: root.to_path_buf(),
        })
    }

    /// A scanner that remembers no step or tool it reads (see `caching`).
    pub(crate) fn one_pass(
        root: &Path,
        ledger: Arc<parking_lot::Mutex<Ledger>>,
    ) -> std::io::Result<Self> {
        let mut s = Self::with_ledger(root, ledger)?;
        s.caching = false;
        Ok(s)
    }

    /// Uses a reading of the refs for up to `trust` when no watch told of a change.
    pub(crate) fn trust_refs_for(&mut self, trust: std::time::Duration) {
        self.refs_trust = trust;
    }

    pub(crate) fn refs(&self) -> &Refs {
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
            Some((when, snap)) if !refs_moved && when.elapsed() < self.refs_trust => {
                Ok(snap.clone())
            }
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
        if refs_changed {
            self.ledger.lock().retain(|id| snap.agents.contains_key(id));
            self.signal_memo.retain(|id| snap.agents.contains_key(id));
        }
        if self.blobs.len() > 4096 {
            self.blobs.clear();
        }
        crate::views::signal::assign(&mut model, &self.root, &mut self.signal_memo);
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
        let running = inbox.is_some_and(|st| crate::locks::is_held(locks, st.dev, st.ino));
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
        let account = self
            .ledger
            .lock()
            .account(&self.backing, id, &steps, latest.as_ref());
        Agent {
            tip,
            name: name.map(str::to_string),
            title,
            running,
            pending,
            steps,
            latest,
            last_activity,
            account,
            budget: None,
            signals: None,
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
}

#[cfg(test)]
mod tests;
