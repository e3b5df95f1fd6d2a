//! The ref namespace, read through git2: agents, their names, and marks (CONTRACT §2, §6).
//!
//! The refs are litany's only registry, so every list here comes from them. Reads go
//! through a [`Snapshot`] that is rebuilt when the refs change: a watch on the refs
//! invalidates it (see [`Refs::set_watched`]), or, without one, a cheap fingerprint (the
//! modification times of the ref directories and `packed-refs`, which every ref update
//! touches through its lock-and-rename) is checked on use. Without a watch a snapshot is
//! never trusted for longer than [`SNAPSHOT_MAX_AGE`], which bounds staleness even when
//! two updates land within one timestamp tick. With one, a snapshot that old is checked
//! against the fingerprint (a lost event shows there) and kept while it matches, up to
//! [`WATCHED_SNAPSHOT_MAX_AGE`]: re-reading every loose ref costs 35 ms at 2,000 agents,
//! and every request that needs the refs waits for it. Git objects are immutable and read
//! on demand.
//!
//! Bounded: each read goes through a handle of its own from a small pool
//! ([`super::handles`]), so one slow read (a large blob, a long history) holds up only the
//! request that asked for it; a blob is read whole only up to [`MAX_BLOB_BYTES`], and one being read is shared
//! by every open of it; a first-parent walk stops after [`MAX_HISTORY_COMMITS`].

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant, SystemTime};

use git2::{ObjectType, Oid, Repository};
use parking_lot::Mutex;

use super::handles::Pool;
use super::ids::is_component;

/// The branch prefix of every config lineage: `refs/heads/config/<name>`.
pub(crate) const CONFIG_REF_PREFIX: &str = "refs/heads/config/";
/// The branch prefix of every agent: `refs/heads/agents/<id>`.
pub(crate) const AGENT_REF_PREFIX: &str = "refs/heads/agents/";
/// `refs/heads/agents/<id>`: the ref that makes `id` an agent.
pub fn agent_ref(id: &str) -> String {
    format!("{AGENT_REF_PREFIX}{id}")
}

/// Every place a ref update touches, the one home of that map: `packed-refs` in the
/// repository directory, the directories above and of the agent branches (where a first
/// branch or a `pack-refs` lands), and each mark root of both flavours with its kind
/// directories. Watching the directories among them sees every ref come, go or move; a
/// stat of the rest ([`Refs`]'s fingerprint) tells whether any did.
pub(crate) fn ref_places(repo_dir: &Path) -> Vec<PathBuf> {
    let mut places = vec![
        repo_dir.join("packed-refs"),
        repo_dir.to_path_buf(),
        repo_dir.join("refs"),
        repo_dir.join("refs/heads"),
        repo_dir.join(AGENT_REF_PREFIX),
    ];
    for flavour in [Flavour::Litany, Flavour::Lernie] {
        let root = repo_dir.join(flavour.mark_root());
        if let Ok(rd) = std::fs::read_dir(&root) {
            places.extend(
                rd.flatten()
                    .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                    .map(|e| e.path()),
            );
        }
        places.push(root);
    }
    places
}

/// The file at an agent's tree root that holds its name (`<Name>\n`, or empty).
pub(crate) const NAME_FILE: &str = "name";
/// The file at an agent's tree root where the titler lands a title (CONTRACT §1.2).
pub(crate) const TITLE_FILE: &str = "title";
/// The transcript directory at an agent's tree root: `<NNN>-<origin>.<md|json>` entries.
pub(crate) const MESSAGES_DIR: &str = "messages";

/// The subjects of the commits litany writes on an agent's branch (CONTRACT §2.4): the
/// one home of their grammar.
pub(crate) mod subject {
    /// `transcript NNN: <origin> [<id>]`: the commit that adds entry `NNN`.
    pub(crate) const TRANSCRIPT: &str = "transcript ";
    /// `config: ...`: a config commit (an agent ref is created at one, before its
    /// dispatch commit).
    pub(crate) const CONFIG: &str = "config: ";
    /// An agent's creating commit: `dispatch: <role> [<id>]`, or `step 001: dispatch
    /// [<id>]` for roots made before roles.
    pub(crate) const DISPATCH: [&str; 2] = ["dispatch: ", "step 001: dispatch"];

    /// The entry number and the rest (`<origin> [<id>]`) of a transcript commit's subject.
    pub(crate) fn transcript(summary: &str) -> Option<(&str, &str)> {
        summary.strip_prefix(TRANSCRIPT)?.split_once(": ")
    }

    pub(crate) fn is_config(summary: &str) -> bool {
        summary.starts_with(CONFIG)
    }

    pub(crate) fn is_dispatch(summary: &str) -> bool {
        DISPATCH.iter().any(|p| summary.starts_with(p))
    }
}
/// The longest a snapshot is trusted without looking at the refs: past it, a use re-reads
/// them (no watch) or compares their fingerprint (watched).
pub(crate) const SNAPSHOT_MAX_AGE: Duration = Duration::from_millis(500);
/// With a watch, the longest a snapshot whose fingerprint still matches is kept: a lost
/// event whose update landed within the fingerprint's timestamp tick is seen by then.
pub(crate) const WATCHED_SNAPSHOT_MAX_AGE: Duration = Duration::from_secs(5);

/// Which engine wrote the workspace; it decides the mark root (CONTRACT §7).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Flavour {
    #[default]
    Litany,
    Lernie,
}

impl Flavour {
    /// `refs/litany/` or `refs/lernie/`: where this flavour keeps `<kind>/<id>` marks.
    pub(crate) fn mark_root(self) -> &'static str {
        match self {
            Self::Litany => "refs/litany/",
            Self::Lernie => "refs/lernie/",
        }
    }

    /// `<mark root><kind>/<id>`: the ref of one mark.
    pub(crate) fn mark_ref(self, kind: &str, id: &str) -> String {
        format!("{}{kind}/{id}", self.mark_root())
    }

    /// The flavour a set of mark-root presences implies: litany when it has marks (a
    /// migrated workspace may hold both, and litany is the live engine), else lernie when
    /// only lernie marks exist, else litany.
    pub(crate) fn detect(has_litany_marks: bool, has_lernie_marks: bool) -> Self {
        if !has_litany_marks && has_lernie_marks {
            Self::Lernie
        } else {
            Self::Litany
        }
    }
}

/// Everything the view needs from the refs at one moment.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// Agent id → branch tip.
    pub agents: BTreeMap<String, Oid>,
    pub(crate) flavour: Flavour,
    /// Mark kind → agent id → target, under the flavour's mark root.
    pub(crate) marks: BTreeMap<String, BTreeMap<String, Oid>>,
    /// Name → id, for names that exactly one living agent wears.
    pub names: BTreeMap<String, String>,
    /// Names that two or more living agents wear, with their ids (sorted); left out of
    /// [`Self::names`].
    pub(crate) clashes: BTreeMap<String, Vec<String>>,
    /// Ref names that could not be used as one path component, and so are not shown.
    pub(crate) skipped: Vec<String>,
    /// When what this snapshot shows last changed: the mtime of the directories built
    /// from it, so that the kernel drops a cached listing once it is stale.
    pub(crate) changed_at: Option<SystemTime>,
    /// Ref name → (target, when it last moved), for every agent branch and mark shown.
    /// The time is carried over while the target stays the same and is the snapshot's
    /// own time when it moved, so a time always comes with the content it dates: the
    /// kernel, which keeps a node's cached content until its mtime changes, can never
    /// be told a new time for old content (a live stat of the ref file could, between a
    /// ref update and the snapshot's invalidation).
    pub(crate) moved: HashMap<String, (Oid, SystemTime)>,
}

impl Snapshot {
    /// When ref `refname` last moved, as this snapshot knows it.
    pub(crate) fn moved_at(&self, refname: &str) -> Option<SystemTime> {
        self.moved.get(refname).map(|(_, at)| *at)
    }

    /// Every agent branch and mark this snapshot shows, as (ref name, target).
    fn shown_refs(&self) -> impl Iterator<Item = (String, Oid)> + '_ {
        let agents = self.agents.iter().map(|(id, tip)| (agent_ref(id), *tip));
        let marks = self.marks.iter().flat_map(move |(kind, ids)| {
            ids.iter()
                .map(move |(id, oid)| (self.flavour.mark_ref(kind, id), *oid))
        });
        agents.chain(marks)
    }

    /// Whether two snapshots show the same thing (whenever they were taken).
    fn same_view(&self, other: &Snapshot) -> bool {
        self.agents == other.agents
            && self.flavour == other.flavour
            && self.marks == other.marks
            && self.names == other.names
    }
}

/// What a path inside an agent's committed tree is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GitEntry {
    Tree(Oid),
    Blob {
        oid: Oid,
        executable: bool,
    },
    Link(Oid),
    /// A gitlink (submodule): shown as an empty directory.
    Gitlink(Oid),
}

/// One commit of a [`Refs::first_parent_log`] walk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogEntry {
    pub id: Oid,
    /// Seconds since the epoch.
    pub(crate) author_time: i64,
    /// The subject line (lossy UTF-8).
    pub summary: String,
}

/// Git errors carry the operation that failed, for the log line.
#[derive(Debug)]
pub struct GitError {
    pub(crate) op: String,
    pub(crate) source: git2::Error,
}

impl std::fmt::Display for GitError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.op, self.source.message())
    }
}

impl std::error::Error for GitError {}

pub(super) fn git<T>(
    op: impl FnOnce() -> String,
    r: Result<T, git2::Error>,
) -> Result<T, GitError> {
    r.map_err(|source| GitError { op: op(), source })
}

type Fingerprint = Vec<(PathBuf, Option<(SystemTime, u64)>)>;

struct Cached {
    fingerprint: Fingerprint,
    taken: Instant,
    /// When the fingerprint was last found unchanged, or `taken`.
    checked: Instant,
    /// Invalidated, but kept to tell whether the next snapshot shows anything new.
    stale: bool,
    snapshot: Arc<Snapshot>,
}

/// How many object headers and commit times are remembered. Objects never change, so
/// the cache needs no invalidation, only a bound; past it, it starts over.
pub(crate) const OBJECT_CACHE_ENTRIES: usize = 65_536;

/// What is remembered about an object.
#[derive(Debug, Clone, Copy)]
enum ObjectInfo {
    Header(ObjectType, u64),
    CommitTime(SystemTime),
}

/// The largest blob read whole: a file under `agents/`, a mark, a transcript entry. A
/// larger one is never read into memory (the view answers `EFBIG`).
pub(crate) const MAX_BLOB_BYTES: u64 = 32 << 20;

/// The most commits a first-parent walk reads; an older commit is as if it were not
/// there (a transcript entry it alone dates shows `time unknown`).
pub(crate) const MAX_HISTORY_COMMITS: usize = 100_000;
/// The longest `name` file read as a name; a longer one names nobody.
const MAX_NAME_BYTES: u64 = 4096;
/// How many blobs being read are remembered (by a weak reference) before the forgotten
/// ones are swept.
const SHARED_BLOBS: usize = 1024;

/// The workspace's `repo.git`, shared by the request threads.
pub struct Refs {
    repo_dir: PathBuf,
    pool: Pool,
    cache: Mutex<Option<Cached>>,
    watched: AtomicBool,
    objects: Mutex<HashMap<(Oid, bool), ObjectInfo>>,
    /// Blobs read and still held by someone (an open file), by id: a second open of one
    /// shares the first's copy.
    shared: Mutex<HashMap<Oid, Weak<Vec<u8>>>>,
}

impl Refs {
    pub fn open(repo_dir: &Path) -> Result<Self, GitError> {
        let pool = Pool::open(repo_dir)?;
        Ok(Self {
            repo_dir: repo_dir.to_path_buf(),
            pool,
            cache: Mutex::new(None),
            watched: AtomicBool::new(false),
            objects: Mutex::new(HashMap::new()),
            shared: Mutex::new(HashMap::new()),
        })
    }

    /// The current snapshot, rebuilt when the refs changed since the last one.
    pub fn snapshot(&self) -> Result<Arc<Snapshot>, GitError> {
        let watched = self.is_watched();
        // With a watch on the refs, every change invalidates, and the fingerprint is only
        // a check on the watch once the snapshot is SNAPSHOT_MAX_AGE old.
        if watched
            && let Some(c) = self.cache.lock().as_ref()
            && !c.stale
            && c.checked.elapsed() < SNAPSHOT_MAX_AGE
        {
            return Ok(c.snapshot.clone());
        }
        let fingerprint = self.fingerprint();
        let mut cache = self.cache.lock();
        let max_age = if watched {
            WATCHED_SNAPSHOT_MAX_AGE
        } else {
            SNAPSHOT_MAX_AGE
        };
        if let Some(c) = cache.as_mut()
            && !c.stale
            && c.fingerprint == fingerprint
            && c.taken.elapsed() < max_age
        {
            c.checked = Instant::now();
            return Ok(c.snapshot.clone());
        }
        let taken = Instant::now();
        let prev = cache.as_ref().map(|c| c.snapshot.clone());
        // The first snapshot dates its refs by their files, read before the refs are, so
        // that no time is newer than the target it is paired with.
        let files = if prev.is_none() {
            self.ref_file_times()
        } else {
            HashMap::new()
        };
        let mut snapshot = self.read_snapshot()?;
        let now = SystemTime::now();
        // An unchanged view keeps the time it first appeared.
        snapshot.changed_at = match &prev {
            Some(p) if p.same_view(&snapshot) => p.changed_at,
            _ => Some(now),
        };
        snapshot.moved = snapshot
            .shown_refs()
            .map(|(refname, target)| {
                let at = match &prev {
                    Some(p) => match p.moved.get(&refname) {
                        Some((was, at)) if *was == target => *at,
                        _ => now,
                    },
                    None => files.get(&refname).copied().unwrap_or(now),
                };
                (refname, (target, at))
            })
            .collect();
        let snapshot = Arc::new(snapshot);
        *cache = Some(Cached {
            fingerprint,
            taken,
            checked: taken,
            stale: false,
            snapshot: snapshot.clone(),
        });
        Ok(snapshot)
    }

    /// Dates the cached snapshot: taken at `taken`, last checked at `checked`. The tests
    /// of the ageing rules use this instead of sleeping past an age and hoping nothing
    /// in between (a git commit on a busy machine) took longer than another.
    #[cfg(test)]
    fn date_cached(&self, taken: Instant, checked: Instant) {
        let mut cache = self.cache.lock();
        let c = cache.as_mut().expect("a cached snapshot to date");
        c.taken = taken;
        c.checked = checked;
    }

    /// Marks the cached snapshot stale, so the next read sees the refs as they are now.
    pub fn invalidate(&self) {
        if let Some(c) = self.cache.lock().as_mut() {
            c.stale = true;
        }
    }

    /// Tells the refs that a watch invalidates them on every change, so that a
    /// snapshot need not be checked against the ref directories on each use.
    pub(crate) fn set_watched(&self, watched: bool) {
        self.watched.store(watched, Ordering::Relaxed);
    }

    /// Whether a watch invalidates the refs on every change (see [`Refs::set_watched`]).
    pub(crate) fn is_watched(&self) -> bool {
        self.watched.load(Ordering::Relaxed)
    }

    /// Stat of every place a ref update touches ([`ref_places`]), but the repository
    /// directory itself, which changes with every temp file the harness makes there
    /// (`packed-refs` stands for it).
    fn fingerprint(&self) -> Fingerprint {
        ref_places(&self.repo_dir)
            .into_iter()
            .filter(|p| *p != self.repo_dir)
            .map(|p| {
                let stamp = std::fs::metadata(&p).ok().and_then(|m| {
                    use std::os::unix::fs::MetadataExt;
                    Some((m.modified().ok()?, m.ino() ^ (m.size() << 32)))
                });
                (p, stamp)
            })
            .collect()
    }

    fn read_snapshot(&self) -> Result<Snapshot, GitError> {
        let repo = self.pool.get()?;
        let mut skipped = Vec::new();
        let agents = list_refs(&repo, AGENT_REF_PREFIX, &mut skipped)?;
        let litany = list_refs(&repo, Flavour::Litany.mark_root(), &mut skipped)?;
        let lernie = list_refs(&repo, Flavour::Lernie.mark_root(), &mut skipped)?;
        let flavour = Flavour::detect(!litany.is_empty(), !lernie.is_empty());
        let flat = if flavour == Flavour::Litany {
            litany
        } else {
            lernie
        };
        let mut marks: BTreeMap<String, BTreeMap<String, Oid>> = BTreeMap::new();
        for (rest, oid) in flat {
            match rest.split_once('/') {
                Some((kind, id)) if is_component(kind) && is_component(id) => {
                    marks.entry(kind.into()).or_default().insert(id.into(), oid);
                }
                _ => skipped.push(format!("{}{rest}", flavour.mark_root())),
            }
        }
        let mut agents_by_name: BTreeMap<String, Vec<String>> = BTreeMap::new();
        let mut live = BTreeMap::new();
        for (id, tip) in agents {
            if !is_component(&id) {
                skipped.push(agent_ref(&id));
                continue;
            }
            if let Some(name) = read_name(&repo, tip)
                && is_component(&name)
            {
                agents_by_name.entry(name).or_default().push(id.clone());
            }
            live.insert(id, tip);
        }
        let (mut names, mut clashes) = (BTreeMap::new(), BTreeMap::new());
        for (name, mut ids) in agents_by_name {
            if ids.len() == 1 {
                names.insert(name, ids.remove(0));
            } else {
                ids.sort();
                clashes.insert(name, ids);
            }
        }
        Ok(Snapshot {
            agents: live,
            flavour,
            marks,
            names,
            clashes,
            skipped,
            changed_at: None,
            moved: HashMap::new(),
        })
    }

    /// What `path` (components below the tree root) is in the tree of `commit`; `None`
    /// when it does not exist there.
    pub fn entry_at(&self, commit: Oid, path: &[&str]) -> Result<Option<GitEntry>, GitError> {
        let repo = self.pool.get()?;
        let tree = git(
            || format!("tree of {commit}"),
            repo.find_commit(commit).and_then(|c| c.tree()),
        )?;
        if path.is_empty() {
            return Ok(Some(GitEntry::Tree(tree.id())));
        }
        let mut current = tree;
        for (i, part) in path.iter().enumerate() {
            let Some(kind) = current.get_name(part).map(|e| classify(&e)) else {
                return Ok(None);
            };
            if i + 1 == path.len() {
                return Ok(kind);
            }
            match kind {
                Some(GitEntry::Tree(oid)) => {
                    current = git(|| format!("tree {oid}"), repo.find_tree(oid))?;
                }
                _ => return Ok(None),
            }
        }
        Ok(None)
    }

    /// The entries of a tree, in git's order; names that are not valid UTF-8 components
    /// are left out.
    pub(crate) fn list_tree(&self, tree: Oid) -> Result<Vec<(String, GitEntry)>, GitError> {
        let repo = self.pool.get()?;
        let tree = git(|| format!("tree {tree}"), repo.find_tree(tree))?;
        Ok(tree
            .iter()
            .filter_map(|e| {
                let name = e.name()?;
                is_component(name).then_some(())?;
                Some((name.to_string(), classify(&e)?))
            })
            .collect())
    }

    fn remember(&self, key: (Oid, bool), info: ObjectInfo) {
        let mut objects = self.objects.lock();
        if objects.len() >= OBJECT_CACHE_ENTRIES {
            objects.clear();
        }
        objects.insert(key, info);
    }

    /// An object's type and size, read from its header only.
    pub(crate) fn header(&self, oid: Oid) -> Result<(ObjectType, u64), GitError> {
        if let Some(ObjectInfo::Header(kind, size)) = self.objects.lock().get(&(oid, false)) {
            return Ok((*kind, *size));
        }
        let (size, kind) = {
            let repo = self.pool.get()?;
            let odb = git(|| "open odb".into(), repo.odb())?;
            git(|| format!("header {oid}"), odb.read_header(oid))?
        };
        self.remember((oid, false), ObjectInfo::Header(kind, size as u64));
        Ok((kind, size as u64))
    }

    /// The content of blob `oid`, shared with every other holder of it. One larger than
    /// [`MAX_BLOB_BYTES`] is refused, its header only read.
    pub fn blob(&self, oid: Oid) -> Result<Arc<Vec<u8>>, GitError> {
        if let Some(held) = self.shared.lock().get(&oid).and_then(Weak::upgrade) {
            return Ok(held);
        }
        let (_, size) = self.header(oid)?;
        if size > MAX_BLOB_BYTES {
            return Err(GitError {
                op: format!("blob {oid}"),
                source: git2::Error::from_str(&format!(
                    "{size} bytes, over the {} MiB a blob is read whole",
                    MAX_BLOB_BYTES >> 20
                )),
            });
        }
        let bytes = {
            let repo = self.pool.get()?;
            let blob = git(|| format!("blob {oid}"), repo.find_blob(oid))?;
            Arc::new(blob.content().to_vec())
        };
        let mut shared = self.shared.lock();
        if shared.len() >= SHARED_BLOBS {
            shared.retain(|_, held| held.strong_count() > 0);
        }
        shared.insert(oid, Arc::downgrade(&bytes));
        Ok(bytes)
    }

    /// The tip of every config lineage (`refs/heads/config/*`), sorted.
    pub(crate) fn config_heads(&self) -> Result<Vec<Oid>, GitError> {
        let repo = self.pool.get()?;
        let mut skipped = Vec::new();
        let mut heads: Vec<Oid> = list_refs(&repo, CONFIG_REF_PREFIX, &mut skipped)?
            .into_values()
            .collect();
        heads.sort();
        Ok(heads)
    }

    /// The best common ancestor of commits `a` and `b`, if they have one.
    pub(crate) fn merge_base(&self, a: Oid, b: Oid) -> Option<Oid> {
        self.pool.get().ok()?.merge_base(a, b).ok()
    }

    /// Whether commit `a` is `b` or an ancestor of it (`git merge-base --is-ancestor`).
    pub(crate) fn is_ancestor(&self, a: Oid, b: Oid) -> bool {
        a == b
            || self
                .pool
                .get()
                .is_ok_and(|repo| repo.graph_descendant_of(b, a).unwrap_or(false))
    }

    /// The committer time of a commit, used as the mtime of what it holds.
    pub(crate) fn commit_time(&self, oid: Oid) -> Result<SystemTime, GitError> {
        if let Some(ObjectInfo::CommitTime(t)) = self.objects.lock().get(&(oid, true)) {
            return Ok(*t);
        }
        let secs = {
            let repo = self.pool.get()?;
            let commit = git(|| format!("commit {oid}"), repo.find_commit(oid))?;
            commit.committer().when().seconds().max(0) as u64
        };
        let t = SystemTime::UNIX_EPOCH + Duration::from_secs(secs);
        self.remember((oid, true), ObjectInfo::CommitTime(t));
        Ok(t)
    }

    /// `tip` and its first parents, newest first, until the first commit `stop` answers
    /// true for (left out, and returned as where the walk stopped), the root, or
    /// [`MAX_HISTORY_COMMITS`] commits.
    pub fn first_parent_log(
        &self,
        tip: Oid,
        stop: &mut dyn FnMut(Oid) -> bool,
    ) -> Result<(Vec<LogEntry>, Option<Oid>), GitError> {
        self.first_parent_log_within(tip, stop, MAX_HISTORY_COMMITS)
    }

    /// [`Refs::first_parent_log`], reading at most `max` commits.
    fn first_parent_log_within(
        &self,
        tip: Oid,
        stop: &mut dyn FnMut(Oid) -> bool,
        max: usize,
    ) -> Result<(Vec<LogEntry>, Option<Oid>), GitError> {
        let repo = self.pool.get()?;
        let mut log = Vec::new();
        let mut next = Some(tip);
        while let Some(id) = next {
            if stop(id) {
                return Ok((log, Some(id)));
            }
            if log.len() >= max {
                log::debug!("history of {tip}: stopped after {max} commits");
                break;
            }
            let commit = git(|| format!("commit {id}"), repo.find_commit(id))?;
            log.push(LogEntry {
                id,
                author_time: commit.author().when().seconds(),
                summary: String::from_utf8_lossy(commit.summary_bytes().unwrap_or_default())
                    .into_owned(),
            });
            next = commit.parent_id(0).ok();
        }
        Ok((log, None))
    }

    /// The mtime of every loose ref file under the agent and mark prefixes, by ref name;
    /// a packed ref is dated by `packed-refs`.
    fn ref_file_times(&self) -> HashMap<String, SystemTime> {
        let packed = std::fs::metadata(self.repo_dir.join("packed-refs"))
            .and_then(|m| m.modified())
            .ok();
        let mut out = HashMap::new();
        let mut dirs = vec![AGENT_REF_PREFIX.to_string()];
        for flavour in [Flavour::Litany, Flavour::Lernie] {
            if let Ok(rd) = std::fs::read_dir(self.repo_dir.join(flavour.mark_root())) {
                dirs.extend(rd.flatten().filter_map(|e| {
                    let kind = e.file_name().into_string().ok()?;
                    Some(format!("{}{kind}/", flavour.mark_root()))
                }));
            }
        }
        for prefix in dirs {
            let Ok(rd) = std::fs::read_dir(self.repo_dir.join(&prefix)) else {
                continue;
            };
            for e in rd.flatten() {
                let (Ok(name), Ok(md)) = (e.file_name().into_string(), e.metadata()) else {
                    continue;
                };
                if let Ok(t) = md.modified() {
                    out.insert(format!("{prefix}{name}"), t);
                }
            }
        }
        if let Some(packed) = packed {
            // Refs only in packed-refs are dated by it; a loose file wins.
            for line in std::fs::read_to_string(self.repo_dir.join("packed-refs"))
                .unwrap_or_default()
                .lines()
            {
                if let Some((_, refname)) = line.split_once(' ')
                    && !line.starts_with('#')
                    && !line.starts_with('^')
                {
                    out.entry(refname.to_string()).or_insert(packed);
                }
            }
        }
        out
    }
}

/// The refs under `prefix` as (rest of the name, target), peeled to what they point at.
fn list_refs(
    repo: &Repository,
    prefix: &str,
    skipped: &mut Vec<String>,
) -> Result<BTreeMap<String, Oid>, GitError> {
    let mut out = BTreeMap::new();
    let iter = git(
        || format!("list {prefix}*"),
        repo.references_glob(&format!("{prefix}*")),
    )?;
    for r in iter {
        let Ok(r) = r else { continue };
        let Some(name) = r.name() else {
            skipped.push(String::from_utf8_lossy(r.name_bytes()).into_owned());
            continue;
        };
        let Some(rest) = name.strip_prefix(prefix) else {
            continue;
        };
        let target = r.target().or_else(|| r.resolve().ok()?.target());
        match target {
            Some(oid) => {
                out.insert(rest.to_string(), oid);
            }
            None => skipped.push(name.to_string()),
        }
    }
    Ok(out)
}

/// The trimmed content of the `name` file at `tip`'s tree root; `None` when unnamed.
fn read_name(repo: &Repository, tip: Oid) -> Option<String> {
    let tree = repo.find_commit(tip).ok()?.tree().ok()?;
    let oid = tree.get_name(NAME_FILE)?.id();
    let (size, _) = repo.odb().ok()?.read_header(oid).ok()?;
    if size as u64 > MAX_NAME_BYTES {
        return None;
    }
    let blob = repo.find_blob(oid).ok()?;
    let name = std::str::from_utf8(blob.content()).ok()?.trim();
    (!name.is_empty()).then(|| name.to_string())
}

fn classify(entry: &git2::TreeEntry<'_>) -> Option<GitEntry> {
    let oid = entry.id();
    match entry.filemode() {
        0o040000 => Some(GitEntry::Tree(oid)),
        0o100644 | 0o100664 => Some(GitEntry::Blob {
            oid,
            executable: false,
        }),
        0o100755 => Some(GitEntry::Blob {
            oid,
            executable: true,
        }),
        0o120000 => Some(GitEntry::Link(oid)),
        0o160000 => Some(GitEntry::Gitlink(oid)),
        _ => None,
    }
}

#[cfg(test)]
mod tests;
