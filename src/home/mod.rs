//! A home mount: every workspace of a home in one tree, made here without FUSE.
//!
//! `MNT/<ws>/` is workspace `ws`'s whole tree exactly as a single mount shows it, so
//! every workspace-relative path litany prints works under `MNT/<ws>/`. Around those
//! trees the home adds its own few nodes ([`HomeNode`]): the root, which lists the
//! workspaces of the root shelf, the other shelves (`world/`, `replays/`, see
//! [`layout`]) and `status`, `status.json`, `events`, `events.ndjson`, `attention`,
//! `attention.json` over every workspace; and each shelf's directory.
//!
//! Guarantees:
//! - **Live.** A listing reads the shelves afresh and a directory's mtime is its shelf's,
//!   so a workspace created or removed shows at the next listing the kernel does not
//!   answer from its cache (within [`SHORT_TTL`]). The `litanyfs-home` thread watches
//!   the shelves with inotify, and sweeps them every [`SWEEP`] besides (every other one
//!   while the mount is busy serving requests, [`crate::busy`]), to follow each
//!   workspace's events from the moment it appears.
//! - **Gone means gone.** A workspace is known by its directory's device and inode: once
//!   its directory is removed or replaced, every node under its old tree answers
//!   `ENOENT` (checked at most every [`RECHECK`]), never the old data, and its tree is
//!   dropped (its threads end with it).
//! - **Cost follows use.** Listing the root or a shelf opens no workspace. A workspace's
//!   tree (its watches, caches and deposit threads) is built when something first looks
//!   inside it, and closed again once it is idle ([`TreeLimits`]): more than
//!   [`MAX_OPEN_TREES`] open, the least recently used go first; any left unused for
//!   [`IDLE_CLOSE`] go too. A tree is closed only at rest (no draft, no guarded deposit,
//!   no request inside it), so closing loses nothing but caches; the kernel is told to
//!   forget what it holds of it, and the next look opens it again. Every workspace's
//!   events are followed from discovery by one [`Pool`] (two threads, whatever the
//!   number of workspaces), which looks at a workspace nobody has opened only every few
//!   seconds once it is quiet.
//! - **The same rules in every workspace.** Each tree is built by the mount's own
//!   [`Opener`] with the mount's options, so deposits, pages, the close rule,
//!   `--read-only` and `--sender` work as on a single mount; a replay's tree is
//!   read-only.

pub(crate) mod layout;
mod merge;
mod space;

pub use layout::{Shelf, Source, classify, litany_data_root};
pub(crate) use space::{Space, SpaceClosing, WaitingClose};

use std::ffi::{OsStr, OsString};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use parking_lot::Mutex;

use crate::FastMap;
use crate::tree::{
    Attr, Child, Content, HomeNode, Identity, Kind, NO_TTL, Node, SHORT_TTL, Tree, TreeError,
    ViewFile,
};
use crate::views::pool::Pool;
use crate::views::{EventLog, Views};
use crate::workspace::Workspace;

/// A workspace's mount-relative directory: its name on the root shelf, `<shelf>/<name>`
/// on another.
pub(crate) type WsKey = Arc<str>;

/// How a home builds the tree of one of its workspaces, ready to serve: the workspace,
/// and whether it is read-only (a replay). The tree shares the given views, which the
/// home already follows.
pub(crate) type Opener =
    Box<dyn Fn(&WsKey, &Workspace, bool, Arc<Views>) -> Result<Arc<Tree>, String> + Send + Sync>;

/// What a home tells of each workspace that has gone.
pub(crate) type OnGone = Box<dyn Fn(&WsKey) + Send + Sync>;

/// How often an open workspace's directory is checked to be the one its tree serves.
pub(crate) const RECHECK: Duration = Duration::from_millis(250);
/// How often the shelves are read again even when inotify reports nothing (a shelf that
/// appears, a watch that could not be set).
pub const SWEEP: Duration = Duration::from_secs(2);

/// At most this many workspaces' trees are open at once, while the others are idle.
pub const MAX_OPEN_TREES: usize = 8;
/// A tree unused for this long is closed however few are open.
pub(crate) const IDLE_CLOSE: Duration = Duration::from_secs(300);
/// A tree used this recently is never closed: a walk or a copy is going on in it.
pub const IN_USE: Duration = Duration::from_secs(2);

/// When a home closes the trees of its workspaces (module docs).
#[derive(Debug, Clone, Copy)]
pub(crate) struct TreeLimits {
    /// With more open than this, the least recently used idle trees are closed.
    pub(crate) max_open: usize,
    /// A tree used more recently than this is not idle.
    pub(crate) in_use: Duration,
    /// A tree unused for this long is closed whatever the number open.
    pub(crate) idle_close: Duration,
}

impl Default for TreeLimits {
    fn default() -> Self {
        Self {
            max_open: MAX_OPEN_TREES,
            in_use: IN_USE,
            idle_close: IDLE_CLOSE,
        }
    }
}

/// One workspace the home knows: where it is, what it is, and its tree once opened.
struct Known {
    dir: PathBuf,
    /// The directory's device and inode when found: a directory with another is another
    /// workspace.
    id: (u64, u64),
    read_only: bool,
    views: Arc<Views>,
    tree: Option<Arc<Tree>>,
    /// When a request last asked for its tree.
    used: Instant,
    /// How many holders its tree has when no request is inside it (the home's, and the
    /// adapter's invalidation thread's): more means a request is, and it stays open.
    rest: usize,
    checked: Instant,
}

/// Every workspace of a home (module docs).
pub(crate) struct Home {
    root: PathBuf,
    shelves: Vec<Shelf>,
    opener: Opener,
    limits: TreeLimits,
    known: Mutex<FastMap<WsKey, Known>>,
    /// The root's events: every workspace's, as the root shows them.
    log: Arc<EventLog>,
    /// What feeds `log`, in time order across the histories ([`merge`]).
    merge: Arc<merge::Merge>,
    /// What follows every workspace's events, with two threads whatever their number.
    followers: Arc<Pool>,
    born: SystemTime,
    /// The length of the last `status`, `status.json`, `attention` and `attention.json`
    /// made (as a single mount's).
    status_lens: [AtomicU64; 4],
    /// Told of each workspace that has gone (the adapter, so that the kernel forgets it).
    on_gone: std::sync::OnceLock<OnGone>,
    /// The price table every workspace's views price with (`--prices`).
    prices: std::sync::OnceLock<Arc<crate::views::prices::Prices>>,
}

fn mtime(m: &std::fs::Metadata) -> SystemTime {
    m.modified().unwrap_or(SystemTime::UNIX_EPOCH)
}

impl Home {
    /// The home of `shelves` (`root` is the SOURCE, for messages and `statfs`).
    pub(crate) fn new(root: PathBuf, shelves: Vec<Shelf>, opener: Opener) -> Arc<Self> {
        let log = Arc::new(EventLog::new());
        Arc::new(Self {
            root,
            shelves,
            opener,
            limits: TreeLimits::default(),
            known: Mutex::new(FastMap::default()),
            merge: merge::Merge::new(log.clone()),
            log,
            followers: Pool::start(),
            born: SystemTime::now(),
            status_lens: Default::default(),
            on_gone: std::sync::OnceLock::new(),
            prices: std::sync::OnceLock::new(),
        })
    }

    /// The same home, closing trees by `limits` rather than the defaults (tests).
    #[cfg(test)]
    pub(crate) fn with_limits(
        root: PathBuf,
        shelves: Vec<Shelf>,
        opener: Opener,
        limits: TreeLimits,
    ) -> Arc<Self> {
        let mut home = Self::new(root, shelves, opener);
        if let Some(h) = Arc::get_mut(&mut home) {
            h.limits = limits;
        }
        home
    }

    /// Prices every workspace's tokens with `prices`, when given (once, before
    /// [`Home::start`]).
    pub(crate) fn set_prices(&self, prices: Option<Arc<crate::views::prices::Prices>>) {
        let Some(prices) = prices else { return };
        for k in self.known.lock().values() {
            k.views.set_prices(Some(prices.clone()));
        }
        let _ = self.prices.set(prices);
    }

    /// Sets what is told of each workspace that goes from now on (once).
    pub(crate) fn on_gone(&self, f: OnGone) {
        let _ = self.on_gone.set(f);
    }

    fn gone(&self, keys: &[WsKey]) {
        if let Some(f) = self.on_gone.get() {
            for k in keys {
                f(k);
            }
        }
    }

    pub(crate) fn root(&self) -> &Path {
        &self.root
    }

    /// The shelves shown as directories of the root, which exist now.
    fn shelf_dirs(&self) -> impl Iterator<Item = &Shelf> {
        self.shelves
            .iter()
            .filter(|s| s.at.is_some() && s.dir.is_dir())
    }

    fn shelf_at(&self, at: Option<&str>) -> Option<&Shelf> {
        self.shelves.iter().find(|s| s.at == at)
    }

    /// The workspaces on every shelf now, by key, with their shelf.
    fn scan(&self) -> Vec<(WsKey, &Shelf, OsString)> {
        let mut out = Vec::new();
        for shelf in &self.shelves {
            for name in layout::scan(shelf) {
                let Some(utf8) = name.to_str() else {
                    log::warn!(
                        "{}: a workspace whose name is not UTF-8 is not shown",
                        shelf.dir.join(&name).display()
                    );
                    continue;
                };
                if shelf.at.is_none() && self.reserved(utf8) {
                    log::warn!(
                        "{}: not shown: its name is one of the home root's own",
                        shelf.dir.join(&name).display()
                    );
                    continue;
                }
                let key: WsKey = match shelf.at {
                    None => utf8.into(),
                    Some(at) => format!("{at}/{utf8}").into(),
                };
                out.push((key, shelf, name));
            }
        }
        out
    }

    /// Whether `name` is an entry of the root other than a workspace.
    fn reserved(&self, name: &str) -> bool {
        ViewFile::ALL.iter().any(|v| v.name() == name)
            || self.shelves.iter().any(|s| s.at == Some(name))
    }

    /// Reads the shelves and brings what the home knows up to date: a new workspace is
    /// followed from now on (its views tee into the root's events), a removed or
    /// replaced one is forgotten with its tree.
    pub(crate) fn sweep(&self) {
        let found = self.scan();
        let mut known = self.known.lock();
        let mut seen: crate::FastSet<WsKey> = crate::FastSet::default();
        for (key, shelf, name) in found {
            let dir = shelf.dir.join(&name);
            let Ok(meta) = std::fs::metadata(&dir) else {
                continue;
            };
            let id = (meta.dev(), meta.ino());
            seen.insert(key.clone());
            if known.get(&key).is_some_and(|k| k.id == id) {
                continue;
            }
            self.follow(&mut known, key, shelf, dir, id);
        }
        let mut gone = Vec::new();
        known.retain(|key, k| {
            let keep = seen.contains(key);
            if !keep {
                log::info!("home: workspace {key} is gone ({})", k.dir.display());
                gone.push(key.clone());
                // Its invalidation thread would otherwise wait on a watch of nothing.
                if let Some(t) = k.tree.take() {
                    t.end_watch();
                }
            }
            keep
        });
        drop(known);
        self.gone(&gone);
    }

    /// Knows workspace `key` (directory `dir`, with device and inode `id`, on `shelf`)
    /// from now on, and follows its events.
    fn follow(
        &self,
        known: &mut FastMap<WsKey, Known>,
        key: WsKey,
        shelf: &Shelf,
        dir: PathBuf,
        id: (u64, u64),
    ) {
        let views = Views::new(&dir, None);
        views.set_prices(self.prices.get().cloned());
        views.tee_to(self.merge.clone(), key.clone());
        self.followers.add(views.clone());
        log::info!("home: following workspace {key} ({})", dir.display());
        let replaced = known.insert(
            key,
            Known {
                dir,
                id,
                read_only: shelf.read_only,
                views,
                tree: None,
                used: Instant::now(),
                rest: 0,
                checked: Instant::now(),
            },
        );
        // A workspace replaced under the same name: the old one's tree is closed.
        if let Some(t) = replaced.and_then(|k| k.tree) {
            t.end_watch();
        }
    }

    /// Whether there is a workspace `key` now; one not known yet is known from now on.
    /// One `stat` or two, not a sweep: a lookup of a name that is no workspace (a shell
    /// completing, a typo) must not read every shelf.
    fn discover(&self, key: &str) -> bool {
        if self.known.lock().contains_key(key) {
            return true;
        }
        let (at, name) = match key.split_once('/') {
            Some((at, name)) => (Some(at), name),
            None => (None, key),
        };
        let Some(shelf) = self.shelf_at(at) else {
            return false;
        };
        if layout::hidden(OsStr::new(name)) || (at.is_none() && self.reserved(name)) {
            return false;
        }
        let dir = shelf.dir.join(name);
        if !layout::is_workspace(&dir) {
            return false;
        }
        let Ok(meta) = std::fs::metadata(&dir) else {
            return false;
        };
        let mut known = self.known.lock();
        if !known.contains_key(key) {
            self.follow(&mut known, key.into(), shelf, dir, (meta.dev(), meta.ino()));
        }
        true
    }

    /// Whether `k` still names the directory it was found as.
    fn still_there(k: &Known) -> bool {
        std::fs::metadata(&k.dir)
            .is_ok_and(|m| (m.dev(), m.ino()) == k.id && layout::is_workspace(&k.dir))
    }

    /// The tree of workspace `ws`, built at its first use; `NotFound` when there is no
    /// such workspace now (never a tree of a directory that has gone).
    pub(crate) fn tree(&self, ws: &str) -> Result<Arc<Tree>, TreeError> {
        let gone = || TreeError::not_found(ws.to_string());
        let mut known = self.known.lock();
        let k = match known.get_mut(ws) {
            Some(k) => k,
            None => {
                drop(known);
                if !self.discover(ws) {
                    return Err(gone());
                }
                known = self.known.lock();
                known.get_mut(ws).ok_or_else(gone)?
            }
        };
        if k.checked.elapsed() >= RECHECK {
            if !Self::still_there(k) {
                log::info!("home: workspace {ws} is gone ({})", k.dir.display());
                if let Some(t) = known.remove(ws).and_then(|k| k.tree) {
                    t.end_watch();
                }
                drop(known);
                self.gone(&[ws.into()]);
                return Err(gone());
            }
            k.checked = Instant::now();
        }
        let now = Instant::now();
        k.used = now;
        if let Some(t) = &k.tree {
            return Ok(t.clone());
        }
        let workspace = Workspace::open(&k.dir).map_err(|_| gone())?;
        let key: WsKey = ws.into();
        let tree =
            (self.opener)(&key, &workspace, k.read_only, k.views.clone()).map_err(|why| {
                log::warn!("home: cannot open workspace {ws}: {why}");
                TreeError::io(ws.to_string(), std::io::Error::from_raw_os_error(libc::EIO))
            })?;
        k.rest = Arc::strong_count(&tree);
        k.tree = Some(tree.clone());
        let closed = self.pick_closing(&mut known, now);
        let open = known.values().filter(|k| k.tree.is_some()).count();
        drop(known);
        log::info!("home: opened workspace {ws} ({open} open)");
        Self::close_trees(closed);
        Ok(tree)
    }

    /// Closes the trees that [`TreeLimits`] say to (the `litanyfs-home` thread, every
    /// [`SWEEP`] at most).
    pub(crate) fn close_idle(&self) {
        let closed = self.pick_closing(&mut self.known.lock(), Instant::now());
        Self::close_trees(closed);
    }

    /// Takes out of `known` the trees to close now: least recently used first, each at
    /// rest (no request inside it, nothing it would lose).
    fn pick_closing(
        &self,
        known: &mut FastMap<WsKey, Known>,
        now: Instant,
    ) -> Vec<(WsKey, Arc<Tree>)> {
        let mut open: Vec<(Instant, WsKey)> = known
            .iter()
            .filter(|(_, k)| k.tree.is_some())
            .map(|(key, k)| (k.used, key.clone()))
            .collect();
        open.sort();
        let mut count = open.len();
        let mut out = Vec::new();
        for (used, key) in open {
            let idle = now.saturating_duration_since(used);
            let over = count > self.limits.max_open;
            if idle < self.limits.in_use || !(over || idle >= self.limits.idle_close) {
                continue;
            }
            let Some(k) = known.get_mut(&key) else {
                continue;
            };
            // Under the lock every holder but the invalidation thread takes its copy
            // under, so a count at rest stays so until the tree is out of `known`.
            let at_rest = k
                .tree
                .as_ref()
                .is_some_and(|t| Arc::strong_count(t) <= k.rest && t.at_rest());
            if at_rest && let Some(t) = k.tree.take() {
                count -= 1;
                log::info!(
                    "home: closing workspace {key}'s tree, unused for {idle:.1?} ({count} open)"
                );
                out.push((key, t));
            }
        }
        out
    }

    /// Ends the watches of closed trees; each goes with its last holder (the adapter's
    /// invalidation thread, once it has told the kernel to forget the tree).
    fn close_trees(closed: Vec<(WsKey, Arc<Tree>)>) {
        for (_, t) in closed {
            t.end_watch();
        }
    }

    /// The open trees now, by key.
    #[cfg(test)]
    pub(crate) fn open_trees(&self) -> Vec<(WsKey, Arc<Tree>)> {
        self.known
            .lock()
            .iter()
            .filter_map(|(k, v)| v.tree.clone().map(|t| (k.clone(), t)))
            .collect()
    }

    /// A directory of the home's own: `Kind::Dir`, its mtime its backing directory's.
    fn dir_attr(&self, node: Node, dir: &Path) -> Result<Attr, TreeError> {
        let meta = std::fs::metadata(dir).map_err(|e| TreeError::io(node.path(), e))?;
        Ok(virtual_attr(node, Kind::Dir, 0, mtime(&meta)))
    }

    fn root_attr(&self) -> Attr {
        // Its listing changes with the root shelf's, and with a shelf that appears.
        let newest = std::iter::once(self.root.as_path())
            .chain(self.shelf_at(None).map(|s| s.dir.as_path()))
            .filter_map(|d| std::fs::metadata(d).ok())
            .map(|m| mtime(&m))
            .max()
            .unwrap_or(self.born);
        virtual_attr(Node::Root, Kind::Dir, 0, newest)
    }

    /// The directory of workspace `ws`, as the home lists it: without opening it.
    fn workspace_attr(&self, node: Node, ws: &str) -> Result<Attr, TreeError> {
        let dir = self
            .known
            .lock()
            .get(ws)
            .map(|k| k.dir.clone())
            .ok_or_else(|| TreeError::not_found(ws.to_string()))?;
        self.dir_attr(node, &dir)
    }

    /// The attributes of one of the home's own nodes (`Node::Root`, a root view, a
    /// shelf, a workspace's directory).
    pub(crate) fn getattr(&self, node: &Node) -> Result<Attr, TreeError> {
        match node {
            Node::Root => Ok(self.root_attr()),
            Node::View(v) => Ok(self.view_attr(*v)),
            Node::Home(h) => match &**h {
                HomeNode::Shelf(at) => match self.shelf_at(Some(at)) {
                    Some(s) => self.dir_attr(node.clone(), &s.dir),
                    None => Err(TreeError::not_found(node.path())),
                },
                HomeNode::In {
                    ws,
                    node: Node::Root,
                } => self.workspace_attr(node.clone(), ws),
                HomeNode::In { .. } => Err(TreeError::not_found(node.path())),
            },
            _ => Err(TreeError::not_found(node.path())),
        }
    }

    fn view_attr(&self, v: ViewFile) -> Attr {
        let size = match v.rendering() {
            Some(r) => self.log.len(r),
            None => self.status_lens[lens_slot(v)].load(Ordering::Relaxed),
        };
        virtual_attr(Node::View(v), Kind::File, size, SystemTime::now())
    }

    /// The child `name` of one of the home's own directories.
    pub(crate) fn lookup(&self, parent: &Node, name: &OsStr) -> Result<Child, TreeError> {
        let not_found = || TreeError::not_found(parent.join(name));
        let utf8 = name.to_str().ok_or_else(not_found)?;
        let node = match parent {
            Node::Root => {
                if let Some(v) = ViewFile::ALL.iter().find(|v| v.name() == utf8) {
                    Node::View(*v)
                } else if let Some(s) = self.shelf_dirs().find(|s| s.at == Some(utf8)) {
                    Node::Home(Arc::new(HomeNode::Shelf(s.at.unwrap_or_default())))
                } else {
                    self.workspace_node(utf8.into()).ok_or_else(not_found)?
                }
            }
            Node::Home(h) => match &**h {
                HomeNode::Shelf(at) => self
                    .workspace_node(format!("{at}/{utf8}").into())
                    .ok_or_else(not_found)?,
                HomeNode::In { .. } => return Err(not_found()),
            },
            _ => return Err(not_found()),
        };
        let attr = self.getattr(&node)?;
        Ok(self.child(name.to_os_string(), node, attr))
    }

    /// The node of workspace `key`'s directory, if there is such a workspace now.
    fn workspace_node(&self, key: WsKey) -> Option<Node> {
        self.discover(&key).then(|| in_workspace(key, Node::Root))
    }

    fn child(&self, name: OsString, node: Node, attr: Attr) -> Child {
        let ttl = match node {
            Node::View(_) => NO_TTL,
            _ => SHORT_TTL,
        };
        Child {
            name,
            node,
            attr,
            ttl,
        }
    }

    /// The entries of one of the home's own directories.
    pub(crate) fn list(&self, node: &Node) -> Result<Vec<Child>, TreeError> {
        self.sweep();
        let shelf = match node {
            Node::Root => None,
            Node::Home(h) => match &**h {
                HomeNode::Shelf(at) => Some(*at),
                HomeNode::In { .. } => return Err(TreeError::not_found(node.path())),
            },
            _ => return Err(TreeError::not_found(node.path())),
        };
        let mut out = Vec::new();
        let keys: Vec<(WsKey, PathBuf)> = {
            let known = self.known.lock();
            let mut v: Vec<_> = known
                .iter()
                .filter(|(key, _)| shelf_of(key) == shelf)
                .map(|(key, k)| (key.clone(), k.dir.clone()))
                .collect();
            v.sort();
            v
        };
        for (key, dir) in keys {
            let name = key.rsplit('/').next().unwrap_or(&key).to_string();
            let node = in_workspace(key, Node::Root);
            // A workspace removed since the sweep is simply not listed.
            if let Ok(attr) = self.dir_attr(node.clone(), &dir) {
                out.push(self.child(name.into(), node, attr));
            }
        }
        if shelf.is_none() {
            for s in self.shelf_dirs() {
                let node = Node::Home(Arc::new(HomeNode::Shelf(s.at.unwrap_or_default())));
                if let Ok(attr) = self.getattr(&node) {
                    out.push(self.child(s.at.unwrap_or_default().into(), node, attr));
                }
            }
            for v in ViewFile::ALL {
                let node = Node::View(v);
                let attr = self.view_attr(v);
                out.push(self.child(v.name().into(), node, attr));
            }
        }
        Ok(out)
    }

    /// What a root view holds when opened. An events file waits for the histories of
    /// the workspaces known now ([`crate::views::HISTORY_WAIT`] at most, in all).
    pub(crate) fn open_view(&self, v: ViewFile) -> Content {
        match v {
            ViewFile::Events | ViewFile::EventsNdjson => {
                self.sweep();
                let views: Vec<Arc<Views>> = self
                    .known
                    .lock()
                    .values()
                    .map(|k| k.views.clone())
                    .collect();
                let deadline = Instant::now() + crate::views::HISTORY_WAIT;
                let waited = views
                    .iter()
                    .filter(|v| !v.wait_history(deadline.saturating_duration_since(Instant::now())))
                    .count();
                if waited > 0 {
                    log::info!(
                        "{}: {waited} workspaces' histories are still being reconstructed; \
                         serving what is logged so far",
                        v.name()
                    );
                }
                // What was held for the histories is shown now, whatever is still awaited.
                self.merge.flush(true);
                Content::Log(v.rendering().unwrap_or(crate::views::Rendering::Text))
            }
            ViewFile::Status | ViewFile::StatusJson => {
                Content::Bytes(Arc::new(self.status(v.json())))
            }
            ViewFile::Attention | ViewFile::AttentionJson => {
                Content::Bytes(Arc::new(self.attention(v.json())))
            }
        }
    }

    /// Reads the root's events.
    pub(crate) fn read_log(
        &self,
        node: &Node,
        r: crate::views::Rendering,
        offset: u64,
        size: u32,
    ) -> Result<Vec<u8>, TreeError> {
        self.log
            .read(r, offset, size)
            .map_err(|e| TreeError::io(node.path(), e))
    }

    /// `attention` (`json: false`) or `attention.json` over every workspace, most
    /// urgent first.
    pub(crate) fn attention(&self, json: bool) -> Vec<u8> {
        let list = crate::views::status::attention(&self.rows());
        let bytes = if json {
            crate::views::status::attention_json(&list).into_bytes()
        } else {
            crate::views::status::attention_text(&list).into_bytes()
        };
        let slot = lens_slot(if json {
            ViewFile::AttentionJson
        } else {
            ViewFile::Attention
        });
        self.status_lens[slot].store(bytes.len() as u64, Ordering::Relaxed);
        bytes
    }

    /// `status` (`json: false`) or `status.json` over every workspace: each workspace's
    /// rows, in the order of their keys, led by the workspace.
    pub(crate) fn status(&self, json: bool) -> Vec<u8> {
        let rows = self.rows();
        let bytes = if json {
            crate::views::status::json(&rows).into_bytes()
        } else {
            crate::views::status::text_of_home(&rows).into_bytes()
        };
        self.status_lens[usize::from(json)].store(bytes.len() as u64, Ordering::Relaxed);
        bytes
    }

    /// Every workspace's rows, in the order of their keys, each naming its workspace,
    /// paths mount-relative; gathered by up to [`STATUS_GATHERERS`] threads at once.
    fn rows(&self) -> Vec<crate::views::status::Row> {
        self.sweep();
        let mut views: Vec<(WsKey, Arc<Views>)> = self
            .known
            .lock()
            .iter()
            .map(|(k, v)| (k.clone(), v.views.clone()))
            .collect();
        views.sort_by(|a, b| a.0.cmp(&b.0));
        let mut parts = gather_each(&views, |(ws, v)| {
            let mut rows = v.rows();
            for row in &mut rows {
                row.workspace = Some(ws.clone());
                for note in &mut row.notes {
                    under(ws, note);
                }
                for s in &mut row.signals {
                    s.path = format!("{ws}/{}", s.path);
                }
            }
            rows
        });
        parts.sort_by_key(|p| p.0);
        parts.into_iter().flat_map(|p| p.1).collect()
    }

    /// Follows the shelves on a thread of its own (`litanyfs-home`) for as long as the
    /// home lives: inotify on the root and on each shelf, and a sweep every [`SWEEP`].
    pub(crate) fn start(self: &Arc<Self>) {
        self.sweep();
        self.merge
            .await_histories(self.known.lock().keys().cloned().collect::<Vec<_>>());
        let home = Arc::downgrade(self);
        let dirs: Vec<PathBuf> = std::iter::once(self.root.clone())
            .chain(self.shelves.iter().map(|s| s.dir.clone()))
            .collect();
        let started = std::thread::Builder::new()
            .name("litanyfs-home".into())
            .spawn(move || follow_shelves(home, dirs));
        if let Err(e) = started {
            log::error!("home: no thread to follow the shelves ({e}); listings still read them");
        }
    }
}

/// How many threads gather the root's `status` and `attention`, each taking the next
/// workspace not yet read: a workspace's reading waits on its files and on the CPU, and
/// one after another the root's took the sum of them (2.7 s under the soak's load, where
/// a workspace's alone took under 0.3 s).
pub(crate) const STATUS_GATHERERS: usize = 4;

/// `f` of each of `items`, by up to [`STATUS_GATHERERS`] scoped threads (the caller's
/// own when there is one item, or when no thread can be started): each result with its
/// item's index, in no particular order. A panic of `f` loses only that item's result.
fn gather_each<T: Sync, R: Send>(items: &[T], f: impl Fn(&T) -> R + Sync) -> Vec<(usize, R)> {
    let next = std::sync::atomic::AtomicUsize::new(0);
    let work = || {
        let mut out = Vec::new();
        loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            let Some(item) = items.get(i) else {
                return out;
            };
            match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(item))) {
                Ok(r) => out.push((i, r)),
                Err(_) => {
                    log::error!("status: reading a workspace panicked; its rows are left out")
                }
            }
        }
    };
    let helpers = items.len().min(STATUS_GATHERERS).saturating_sub(1);
    std::thread::scope(|s| {
        let started: Vec<_> = (0..helpers)
            .filter_map(|_| {
                std::thread::Builder::new()
                    .name("litanyfs-gather".into())
                    .spawn_scoped(s, work)
                    .ok()
            })
            .collect();
        let mut all = work();
        for h in started {
            all.extend(h.join().unwrap_or_default());
        }
        all
    })
}

/// Which of the home's remembered lengths a snapshot view's is.
fn lens_slot(v: ViewFile) -> usize {
    match v {
        ViewFile::Attention => 2,
        ViewFile::AttentionJson => 3,
        v => usize::from(v.json()),
    }
}

/// The shelf a key is on (`None` for the root's).
fn shelf_of(key: &str) -> Option<&str> {
    key.split_once('/').map(|(at, _)| at)
}

/// A note that starts with a workspace-relative path, made mount-relative.
fn under(ws: &str, note: &mut String) {
    use crate::workspace::{INBOX_DIR, STEPS_DIR};
    if note.starts_with(&format!("{STEPS_DIR}/")) || note.starts_with(&format!("{INBOX_DIR}/")) {
        note.insert_str(0, &format!("{ws}/"));
    }
}

/// `node` of workspace `ws`, as the home's adapter knows it.
pub(crate) fn in_workspace(ws: WsKey, node: Node) -> Node {
    Node::Home(Arc::new(HomeNode::In { ws, node }))
}

fn virtual_attr(node: Node, kind: Kind, size: u64, mtime: SystemTime) -> Attr {
    Attr {
        kind,
        size,
        perm: kind.perm(),
        nlink: if kind == Kind::Dir { 2 } else { 1 },
        mtime,
        ctime: mtime,
        atime: mtime,
        identity: Identity::Virtual(node),
        owner: None,
    }
}

/// The `litanyfs-home` thread: sweeps at every change inotify reports on `dirs` (watched
/// as they appear) and every [`SWEEP`], until the home is dropped.
fn follow_shelves(home: std::sync::Weak<Home>, dirs: Vec<PathBuf>) {
    use std::os::fd::AsRawFd;
    let inotify = crate::inotify::Inotify::new(true)
        .map_err(|e| log::warn!("home: no inotify ({e}); shelves are swept every {SWEEP:?}"))
        .ok();
    let mask = libc::IN_CREATE
        | libc::IN_DELETE
        | libc::IN_MOVED_FROM
        | libc::IN_MOVED_TO
        | libc::IN_DELETE_SELF
        | libc::IN_MOVE_SELF
        | libc::IN_ONLYDIR;
    let mut watched: FastMap<PathBuf, i32> = FastMap::default();
    let mut buf = vec![0u8; crate::inotify::EVENT_BUFFER];
    // Whether the last timed sweep was put off (see below).
    let mut put_off = false;
    loop {
        let mut told = false;
        if let Some(ino) = &inotify {
            for d in &dirs {
                if !watched.contains_key(d)
                    && let Ok(wd) = ino.add(d, mask)
                {
                    watched.insert(d.clone(), wd);
                }
            }
            let mut pfd = libc::pollfd {
                fd: ino.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd for the duration of the call.
            let ready = unsafe { libc::poll(&mut pfd, 1, SWEEP.as_millis() as libc::c_int) };
            if ready > 0 {
                told = true;
                let mut ended = Vec::new();
                let _ = ino.read(&mut buf, |e| {
                    if e.watch_ended() || e.overflowed() {
                        ended.push(e.wd);
                    }
                });
                watched.retain(|_, wd| !ended.contains(wd));
            }
        } else {
            std::thread::sleep(SWEEP);
        }
        let Some(home) = home.upgrade() else {
            return;
        };
        // A sweep nothing asked for (inotify said nothing) stats every workspace's
        // directory: while the mount serves requests it waits, one period at most, so
        // that those reads do not queue beside a walk's ([`crate::busy`]).
        put_off = !told && !put_off && crate::busy::busy(std::time::Instant::now());
        if !put_off {
            home.sweep();
        }
        home.close_idle();
        home.merge.flush(false);
    }
}

#[cfg(test)]
mod tests;
