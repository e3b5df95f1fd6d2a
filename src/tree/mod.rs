//! The virtual tree: what a path under the mount is, what a directory lists, what a file
//! holds, how long the kernel may keep each answer, and which errno refuses what. No FUSE
//! types appear here; the adapter in [`crate::fs`] only numbers nodes and handles and
//! turns these answers into replies.
//!
//! The mount root mirrors the workspace root, so every workspace-relative path litany
//! prints resolves verbatim:
//!
//! | path | family | shows |
//! |---|---|---|
//! | `steps/...` | [`backing`] | every record as on disk; the harness's `*.tmp` are hidden |
//! | `.../tools/<t>/output.json#...`, `stdout`, `stderr` | [`capture`] | pages and whole streams |
//! | `inbox/<id>/` | [`backing`], [`inbox`] | pending deposits, and messages being written |
//! | `agents/<id>/...`, `marks/<kind>/<id>`, `names/<Name>` | [`git`] | branches, marks, names |
//! | `steps/<id>/latest`, `transcript.md`, `<NNN>/response.md` | [`records`] | an agent's records as text |
//! | `status`, `status.json`, `events`, `events.ndjson` | [`views`] | every agent at a glance, what happened |
//! | `steps/<id>/ctl`, `new/` | [`acts`] | commands to an agent; goals that start conversations |
//!
//! A path is parsed once into a typed [`Node`] (see [`node`]); each family's module
//! answers every operation on its nodes, and this module only dispatches. Content is
//! read from disk or git when asked; what is cached (capture indexes, git object facts,
//! the refs snapshot) is keyed by what makes it stale, so the view is as live as the
//! kernel's TTLs allow.

mod acts;
mod backing;
mod capture;
pub mod drafts;
mod error;
mod git;
mod inbox;
mod live;
pub(crate) mod modes;
mod node;
mod records;
mod views;

pub use acts::{CTL, Deferred, NEW_DIR, Writer};
pub(crate) use error::{ErrorKind, TreeError};
pub(crate) use inbox::{Closing, PendingClose, SPAWN_POLL, Writing};
pub(crate) use modes::{Modes, Owner};
pub use node::{
    ActNode, Backed, Capture, DraftNode, GitNode, HomeNode, INODES_KEPT, Node, Place, RecordView,
    TOP_LEVEL, ViewFile,
};
pub use records::{DEFAULT_RECORDS_CACHE_BYTES, LATEST, RESPONSE_MD, TRANSCRIPT_MD, derived_from};

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use parking_lot::Mutex;

use crate::deposit::Depositor;
use crate::paging::{CaptureKey, PageCache, Stream};
use crate::records::Records;
use crate::views::Views;
use crate::watch::Watcher;
use crate::witness::Witness;
use crate::workspace::Workspace;
use crate::workspace::backing::Backing;
use crate::workspace::refs::{Refs, Snapshot};
use crate::workspace::shared_path::SharedPath;
use drafts::{DraftOpen, Drafts};

/// Permission bits of what the view shows: records and git content are read-only.
pub(crate) const FILE_PERM: u16 = 0o444;
pub(crate) const EXEC_PERM: u16 = 0o555;
pub(crate) const DIR_PERM: u16 = 0o555;
pub(crate) const LINK_PERM: u16 = 0o777;
/// An inbox directory that takes deposits.
pub(crate) const INBOX_DIR_PERM: u16 = 0o755;
/// A draft being written: its writer's alone, whatever `chmod` asks (a half-written
/// message is nobody else's to read, and another user's write would join it).
pub(crate) const DRAFT_PERM: u16 = 0o600;
/// The default bound of the page cache (`--cache-bytes`).
pub(crate) const DEFAULT_PAGE_CACHE_BYTES: usize = 64 << 20;
/// Extended attributes of pages and streams.
pub const XATTR_NEXT: &str = "user.litany.next";
pub(crate) const XATTR_BANNER: &str = "user.litany.banner";
pub(crate) const XATTR_LENGTH: &str = "user.litany.length";

/// The longest file name a draft may have (as on ext4).
pub(crate) const NAME_MAX: usize = 255;
/// The most files open through the mount at once; past it, `open` and `create` answer
/// `ENFILE`. Each holds at most a descriptor or a draft, so this bounds what opens that
/// are never closed can cost.
pub(crate) const MAX_OPEN: usize = 65_536;

/// Captures up to this size are parsed when their tool directory is listed, so that
/// `stdout` and `stderr` are listed with their sizes (and only when the capture parses);
/// larger ones are listed without being read, since a walk of a workspace full of
/// multi-megabyte captures must not parse them all.
pub const EAGER_STREAMS_BYTES: u64 = 1 << 20;

/// What kind of thing a node is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    Dir,
    File,
    Symlink,
}

impl Kind {
    /// The mode bits the view shows for this kind of node, before exceptions (inbox
    /// directories, executable blobs, drafts).
    pub(crate) fn perm(self) -> u16 {
        match self {
            Kind::Dir => DIR_PERM,
            Kind::File => FILE_PERM,
            Kind::Symlink => LINK_PERM,
        }
    }
}

/// What names a node for as long as it exists: a backing file by its device and inode
/// (names in `inbox/` are reused, so a name is never enough) and the generation that
/// tells it from a later file given the same inode number, anything derived from git by
/// the node itself.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Identity {
    Backing {
        dev: u64,
        ino: u64,
        /// [`crate::workspace::backing::Stat::generation`].
        generation: u32,
    },
    /// A node that is its own identity (shared: a clone of a node is a count).
    Virtual(Node),
    /// A draft, by its number: it keeps its inode when renamed.
    Draft(u64),
}

impl Identity {
    /// The generation the kernel is told with the inode number: when a number it holds
    /// comes back with another, the file is new, and the kernel drops what it cached
    /// under the old one (its names beneath it among them) rather than take it over.
    pub(crate) fn generation(&self) -> u64 {
        match self {
            Identity::Backing { generation, .. } => u64::from(*generation),
            _ => 0,
        }
    }
}

/// A node's attributes, in the view's terms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attr {
    pub kind: Kind,
    pub size: u64,
    pub(crate) perm: u16,
    pub(crate) nlink: u32,
    pub(crate) mtime: SystemTime,
    pub(crate) ctime: SystemTime,
    pub(crate) atime: SystemTime,
    pub identity: Identity,
    /// Who it shows as owner and group; `None` for the daemon's user ([`modes`]).
    pub(crate) owner: Owner,
}

/// How long the kernel may trust a name or attributes under a watched backing directory:
/// long, because every change there is invalidated as it happens (see [`crate::watch`]).
pub(crate) const WATCHED_TTL: Duration = Duration::from_secs(3600);
/// How long it may trust everything else (git-derived nodes, the top level, directories
/// that could not be watched): short, so that changes show within a second.
pub const SHORT_TTL: Duration = Duration::from_millis(250);
/// What it may not keep at all: a size not known yet, or a file that grows by itself.
pub(crate) const NO_TTL: Duration = Duration::ZERO;

/// How long an answer may be kept when `watched` says whether every change to what it
/// derives from is reported: [`WATCHED_TTL`], else [`SHORT_TTL`].
fn kept_while(watched: bool) -> Duration {
    if watched { WATCHED_TTL } else { SHORT_TTL }
}

/// The smallest watched backing file the kernel reads straight from the disk
/// (passthrough); a smaller one is read through the daemon once and then kept in the
/// kernel's cache across opens. Passthrough costs each open and release a registration
/// with the kernel, about a third of what an open of a small file costs the daemon, and
/// it gains nothing on a file a single read covers; a large file is read at the disk's
/// speed without a copy through the daemon. One kernel read (256 pages) is the size at
/// which the trade turns.
pub const PASSTHROUGH_BYTES: u64 = 1 << 20;

/// One answer about a name: the node, its attributes, and how long the kernel may keep
/// both (an entry of a listing, or the result of a lookup).
#[derive(Debug, Clone)]
pub struct Child {
    pub name: OsString,
    pub node: Node,
    pub attr: Attr,
    /// [`NO_TTL`] when `attr.size` is not known yet: a stream of a large capture listed
    /// without parsing it ([`EAGER_STREAMS_BYTES`]), whose size is found at the first
    /// lookup or stat.
    pub(crate) ttl: Duration,
}

/// How an open file is served: decided here, carried out by the adapter.
#[derive(Debug)]
pub struct Opened {
    pub content: Content,
    /// The kernel must not cache its pages: it changes under the opener's own writes.
    pub(crate) direct_io: bool,
    /// The kernel may keep pages cached by an earlier open: every change to the file is
    /// invalidated as it happens.
    pub(crate) keep_cache: bool,
    /// Its close tells the daemon nothing, so the kernel need not send `FLUSH`.
    pub(crate) no_flush: bool,
    /// The kernel may read it straight from the backing file ([`Content::File`]), when
    /// it offers passthrough.
    pub(crate) passthrough: bool,
}

/// What an `open` asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenMode {
    Read,
    /// Writing, by thread `by`; `truncate` for `O_TRUNC`.
    Write {
        by: u32,
        truncate: bool,
    },
}

/// What an open file reads from.
#[derive(Debug)]
pub enum Content {
    /// A backing file, opened beneath the root without following symlinks.
    File(File),
    /// Bytes derived when the file was opened (git blobs, marks, pages).
    Bytes(Arc<Vec<u8>>),
    /// A message being written through the mount.
    Draft(DraftOpen),
    /// A whole decoded stream of a tool capture, read through the page cache.
    Stream {
        file: File,
        key: CaptureKey,
        stream: Stream,
    },
    /// A `response.json` read as `response.md`, rendered as it grows.
    Response {
        file: File,
        key: CaptureKey,
        closed: bool,
    },
    /// One rendering of the events log, read at an offset as it grows.
    Log(crate::views::Rendering),
    /// An agent's `transcript.md`, read as it stands ([`records::TranscriptOpen`]).
    Transcript(records::TranscriptOpen),
}

/// What deposits through the mount need: the engine and who they come from.
pub(crate) struct Deposits {
    pub(crate) depositor: Arc<Depositor>,
    pub(crate) sender: String,
}

/// The virtual tree over one workspace.
pub struct Tree {
    ws: Workspace,
    backing: Backing,
    /// Shared with the workers of acts, which make it read the refs afresh after one.
    refs: Arc<Refs>,
    born: SystemTime,
    /// What was last said about clashing names and unusable refs, so that each change
    /// is logged once rather than on every lookup.
    reported: Mutex<Reported>,
    /// `None` when the mount refuses deposits.
    deposits: Option<Deposits>,
    /// `--agent <id>`: the one agent whose view this is.
    confined: Option<String>,
    drafts: Drafts,
    pages: Arc<PageCache>,
    /// Renderings of `response.json` and transcripts ([`records`]).
    records: Arc<Records>,
    /// Change detection on the backing directories answered so far and on the refs;
    /// `None` when inotify is unavailable, and everything is kept only briefly.
    watcher: Option<Watcher>,
    /// The refs as [`Tree::refs_changed`] last compared them: what the kernel was last
    /// told about. Not the refs' own cached snapshot, which any request may rebuild
    /// (it expires) before the change is reported, hiding the change from the report.
    refs_reported: Mutex<Option<Arc<Snapshot>>>,
    /// When each agent's branch last came or went, as its `steps/<id>/` directory's
    /// mtime: its listing (`transcript.md`) changes with no change on disk, and the
    /// kernel keeps a directory's listing until it sees a new mtime. An invalidation
    /// alone can lose to a listing reply already on its way.
    agents_changed: Mutex<crate::FastMap<String, SystemTime>>,
    /// `status` and the events ([`crate::views`]).
    views: Arc<Views>,
    /// Who holds a draft at a close (`None` off a mount: every close is then the last).
    witness: Option<Witness>,
    /// The threads inside a close of a draft now (a thread is in one system call at a
    /// time): a holder that is closing may be an exec closing what it inherited (see
    /// `inbox.rs`).
    closing: Arc<Mutex<crate::FastSet<u32>>>,
    /// What modes and owners nodes show, and who may deposit ([`modes`]).
    modes: Modes,
}

/// The page cache and the renderings' cache, each bounded by `--cache-bytes`: one pair
/// for a mount, whether it shows one workspace or a home of many (their keys are file
/// identities and commit ids, which no two workspaces share unless they hold the same
/// file or commit).
#[derive(Clone)]
pub(crate) struct Caches {
    pages: Arc<PageCache>,
    records: Arc<Records>,
}

impl Caches {
    /// A pair bounded by `bytes` each.
    pub(crate) fn new(bytes: usize) -> Self {
        Self {
            pages: Arc::new(PageCache::new(bytes)),
            records: Arc::new(Records::new(bytes)),
        }
    }

    /// What the pair holds: (pages, renderings), in bytes.
    pub(crate) fn used_bytes(&self) -> (usize, usize) {
        (self.pages.used_bytes(), self.records.used_bytes())
    }
}

/// A `close(2)` of a draft, as FUSE reports it: the closing thread and the draft's inode
/// number as the kernel knows it (the witness finds its other holders by it).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Closer {
    pub(crate) tid: u32,
    pub(crate) ino: u64,
}

/// The clashing names and unusable refs last logged.
type Reported = (BTreeMap<String, Vec<String>>, Vec<String>);

fn system_time((secs, nsecs): (i64, i64)) -> SystemTime {
    if secs >= 0 {
        SystemTime::UNIX_EPOCH + Duration::new(secs as u64, nsecs.clamp(0, 999_999_999) as u32)
    } else {
        SystemTime::UNIX_EPOCH
    }
}

impl Tree {
    pub fn new(ws: Workspace) -> Result<Self, TreeError> {
        let backing = Backing::open(ws.root())
            .map_err(|e| TreeError::io(ws.root().display().to_string(), e))?;
        let refs = Refs::open(&ws.repo_dir()).map_err(|e| TreeError::git("repo.git", e))?;
        let refs = Arc::new(refs);
        Ok(Self {
            views: Views::new(ws.root(), None),
            ws,
            backing,
            refs,
            born: SystemTime::now(),
            reported: Mutex::new(Default::default()),
            deposits: None,
            confined: None,
            drafts: Drafts::default(),
            pages: Arc::new(PageCache::new(DEFAULT_PAGE_CACHE_BYTES)),
            records: Arc::new(Records::new(DEFAULT_RECORDS_CACHE_BYTES)),
            watcher: None,
            refs_reported: Mutex::new(None),
            agents_changed: Mutex::new(Default::default()),
            witness: None,
            closing: Arc::new(Mutex::new(Default::default())),
            modes: Modes::default(),
        }
        .learning_workspace())
    }

    /// Shows modes and owners, and lets users deposit, as `modes` says.
    pub(crate) fn with_modes(mut self, modes: Modes) -> Self {
        self.modes = modes;
        self.learning_workspace()
    }

    fn learning_workspace(self) -> Self {
        if let Ok(root) = self.backing.lstat(Path::new("")) {
            self.learn_workspace(&root);
        }
        self
    }

    /// Takes what the workspace grants from its root's `stat` (and `repo.git`'s).
    fn learn_workspace(&self, root: &crate::workspace::backing::Stat) {
        let repo = self
            .backing
            .lstat(Path::new(crate::workspace::REPO_DIR))
            .ok();
        self.modes.learn_workspace(root, repo.as_ref());
    }

    /// Watches what is answered, so that answers may be kept long and every change
    /// reported ([`Tree::watcher`]); without inotify, everything is kept only briefly.
    pub(crate) fn watching(mut self) -> Self {
        match Watcher::new(&self.ws.repo_dir()) {
            Ok(w) => {
                self.refs.set_watched(true);
                self.watcher = Some(w);
                // What every later change is reported against.
                *self.refs_reported.get_mut() = self.refs.snapshot().ok();
            }
            Err(e) => {
                log::warn!("inotify unavailable ({e}); everything is re-read at short intervals")
            }
        }
        self
    }

    /// The change detection whose reports the adapter turns into kernel invalidations.
    pub(crate) fn watcher(&self) -> Option<&Watcher> {
        self.watcher.as_ref()
    }

    /// Whether the tree holds nothing that closing it would lose: no draft resolvable,
    /// no deposit still guarded ([`crate::deposit::guard`]). Caches are not counted:
    /// a tree opened again rebuilds them.
    pub(crate) fn at_rest(&self) -> bool {
        self.drafts.is_empty()
            && self
                .deposits
                .as_ref()
                .and_then(|d| d.depositor.guard())
                .is_none_or(|g| g.tracked() == 0)
    }

    /// Ends the tree's watch (the adapter's invalidation thread then drops what the
    /// kernel holds of it and ends). The tree answers on, but only for the requests
    /// already holding it: a home opens a new tree for the next ones.
    pub(crate) fn end_watch(&self) {
        if let Some(w) = &self.watcher {
            w.close();
        }
    }

    /// Opens `inbox/<id>/` to deposits from `deposits.sender`.
    pub(crate) fn with_deposits(mut self, deposits: Deposits) -> Self {
        self.deposits = Some(deposits);
        self
    }

    /// Decides the closes of drafts by what `witness` sees (see [`crate::witness`]).
    pub(crate) fn with_witness(mut self, witness: Witness) -> Self {
        self.witness = Some(witness);
        self
    }

    /// Confines the view to what agent `id` may see: its own step records (as
    /// `read_tool_output` confines paging) and its own pending deposits. Other agents'
    /// records and inboxes' contents cannot be reached by any path, and `status` and the
    /// events show what `id` may see.
    pub(crate) fn confined_to(mut self, id: &str) -> Self {
        self.confined = Some(id.to_string());
        // Before anything shares the views, they are confined in place; after, anew.
        match Arc::get_mut(&mut self.views) {
            Some(views) => views.confine(id),
            None => self.views = Views::new(self.ws.root(), Some(id)),
        }
        self
    }

    /// Serves `views` (which someone else already follows, as a home does) instead of
    /// its own. Before [`Tree::confined_to`], which makes confined ones anew.
    pub(crate) fn sharing_views(mut self, views: Arc<Views>) -> Self {
        self.views = views;
        self
    }

    /// Keeps its capture indexes and renderings in `caches`, which other trees may
    /// share: a home's workspaces keep theirs within one bound, the mount's.
    pub(crate) fn with_caches(mut self, caches: &Caches) -> Self {
        self.pages = caches.pages.clone();
        self.records = caches.records.clone();
        self
    }

    /// `status` and the events; [`Views::start`] starts following the workspace.
    pub(crate) fn views(&self) -> &Arc<Views> {
        &self.views
    }

    pub fn pages(&self) -> &PageCache {
        &self.pages
    }

    pub(crate) fn workspace(&self) -> &Workspace {
        &self.ws
    }

    pub(crate) fn refs(&self) -> &Refs {
        &self.refs
    }

    /// The confined access to the backing tree (for watching its directories).
    pub(crate) fn backing(&self) -> &Backing {
        &self.backing
    }

    fn snapshot(&self) -> Result<Arc<Snapshot>, TreeError> {
        let snap = self
            .refs
            .snapshot()
            .map_err(|e| TreeError::git("repo.git", e))?;
        let mut reported = self.reported.lock();
        if reported.0 != snap.clashes {
            for (name, ids) in &snap.clashes {
                log::warn!(
                    "names/{name}: left out, worn by {} living agents ({})",
                    ids.len(),
                    ids.join(", ")
                );
            }
            reported.0 = snap.clashes.clone();
        }
        if reported.1 != snap.skipped {
            for r in &snap.skipped {
                log::warn!("{r}: not shown, the ref name is not a single path component");
            }
            reported.1 = snap.skipped.clone();
        }
        Ok(snap)
    }

    /// The attributes of a node derived from git or the whole workspace.
    fn virtual_attr(&self, node: &Node, kind: Kind, size: u64, mtime: SystemTime) -> Attr {
        let (perm, owner) = self.modes.derived(kind);
        Attr {
            kind,
            size,
            perm,
            nlink: if kind == Kind::Dir { 2 } else { 1 },
            mtime,
            ctime: mtime,
            atime: mtime,
            identity: Identity::Virtual(node.clone()),
            owner,
        }
    }

    /// The attributes of a file derived from one backing record (`st`): its times, and
    /// no more than the record grants.
    fn derived_attr(&self, node: &Node, size: u64, st: &crate::workspace::backing::Stat) -> Attr {
        let mut a = self.virtual_attr(node, Kind::File, size, system_time(st.mtime));
        a.ctime = system_time(st.ctime);
        (a.perm, a.owner) = self.modes.backing(Kind::File, st);
        a
    }

    /// The attributes of `node` as it is now; `NotFound` when it no longer exists.
    pub fn getattr(&self, node: &Node) -> Result<Attr, TreeError> {
        match node {
            Node::Root => Ok(self.root_attr()),
            Node::Backing(b) => self.backing_getattr(node, b),
            Node::Capture(c) => self.capture_attr(node, c),
            Node::Git(g) => self.git_attr_in(&*self.snapshot()?, node, g),
            Node::Draft(d) => self.draft_attr(node, d),
            Node::Record(v) => self.record_attr(node, v),
            Node::View(v) => Ok(self.view_attr(node, *v)),
            Node::Act(a) => self.act_attr(node, a),
            // A home's own nodes are the home's to answer (crate::home).
            Node::Home(_) => Err(TreeError::not_found(node.path())),
        }
    }

    /// A directory's mtime changes whenever its listing does: the kernel keeps listings
    /// cached and drops one when it sees a new mtime.
    fn root_attr(&self) -> Attr {
        let root = self.backing.lstat(Path::new(""));
        if let Ok(st) = &root {
            self.learn_workspace(st);
        }
        let mtime = root.map(|st| system_time(st.mtime)).unwrap_or(self.born);
        let mut a = self.virtual_attr(&Node::Root, Kind::Dir, 0, mtime);
        if self.deposits.is_some() {
            a.perm = self.modes.on_the_way(a.perm);
        }
        a
    }

    /// Resolves `name` in directory `parent`. Both directories are watched before the
    /// answer is given, so no change after it can go unseen.
    pub fn lookup(&self, parent: &Node, name: &OsStr) -> Result<Child, TreeError> {
        self.watch(parent);
        let node = self.child(parent, name)?;
        let attr = self.getattr(&node)?;
        if attr.kind == Kind::Dir {
            self.watch(&node);
        }
        Ok(self.entry(name.to_os_string(), node, attr))
    }

    /// The attributes of the node an inode stands for, which was `identity` when the
    /// kernel learnt it: a path that now names another file is `NotFound` through it
    /// (the kernel looks the name up again once its entry expires).
    pub(crate) fn stat(
        &self,
        node: &Node,
        identity: &Identity,
    ) -> Result<(Attr, Duration), TreeError> {
        let attr = self.getattr(node)?;
        if attr.identity != *identity {
            return Err(TreeError::not_found(node.path()));
        }
        let ttl = self.ttl(node, &attr);
        Ok((attr, ttl))
    }

    /// The attributes of an open file: an open backing file answers for itself (`tail -f`
    /// polls fstat on its fd, and a file renamed away under an open fd is still that
    /// file); anything else as [`Tree::stat`].
    pub(crate) fn stat_open(
        &self,
        node: &Node,
        identity: &Identity,
        content: &Content,
    ) -> Result<(Attr, Duration), TreeError> {
        match content {
            Content::File(f) => {
                let st = crate::workspace::backing::fstat(f)
                    .map_err(|e| TreeError::io(node.path(), e))?;
                let attr = self.backing_attr(&st);
                let ttl = self.ttl(node, &attr);
                Ok((attr, ttl))
            }
            _ => self.stat(node, identity),
        }
    }

    fn entry(&self, name: OsString, node: Node, attr: Attr) -> Child {
        let ttl = self.ttl(&node, &attr);
        Child {
            name,
            node,
            attr,
            ttl,
        }
    }

    /// Watches backing directory `node` (nothing else is watched this way).
    fn watch(&self, node: &Node) {
        if let (Node::Backing(b), Some(w)) = (node, &self.watcher) {
            w.watch_backing(&self.backing, b.shared());
        }
    }

    /// [`Tree::watch`] for backing directory `b`, an entry of the directory `parent` is
    /// open on (the listing it was found in).
    fn watch_entry(&self, parent: &std::os::fd::OwnedFd, b: &Backed) {
        if let Some(w) = &self.watcher {
            w.watch_entry(parent, b.shared());
        }
    }

    fn watched(&self, rel: &SharedPath) -> bool {
        self.watcher.as_ref().is_some_and(|w| w.is_watched(rel))
    }

    /// How long the kernel may keep `node`'s name and attributes: long only when every
    /// change to them is reported, i.e. its directory (and, for a directory, itself) is
    /// watched.
    pub(crate) fn ttl(&self, node: &Node, attr: &Attr) -> Duration {
        let b = match node {
            Node::Backing(b) => b,
            Node::Record(v) => return self.record_ttl(v),
            // A snapshot per open, a log that grows: the kernel keeps nothing.
            Node::View(_) => return NO_TTL,
            _ => return SHORT_TTL,
        };
        // An inbox directory's listing also changes with drafts, which no watch reports;
        // its mtime says so, and the kernel must ask for it often.
        if attr.kind == Kind::Dir && b.place().in_inbox() {
            return SHORT_TTL;
        }
        let rel = b.shared();
        let parent_watched = rel.parent().is_some_and(|p| self.watched(p));
        kept_while(parent_watched && (attr.kind != Kind::Dir || self.watched(rel)))
    }

    /// The node `name` would be in `parent`, without checking that it exists.
    fn child(&self, parent: &Node, name: &OsStr) -> Result<Node, TreeError> {
        if !is_single_name(name) {
            return Err(TreeError::not_found(parent.join(name)));
        }
        match parent {
            Node::Root => Node::top(name).ok_or_else(|| TreeError::not_found(parent.join(name))),
            Node::Backing(b) => self.backing_child(parent, b, name),
            Node::Git(g) => git::child(parent, g, name),
            Node::Act(a) => self.act_child(parent, a, name),
            Node::Capture(_) | Node::Draft(_) | Node::Record(_) | Node::View(_) => {
                Err(TreeError::new(parent.path(), ErrorKind::NotDir))
            }
            Node::Home(_) => Err(TreeError::not_found(parent.join(name))),
        }
    }

    /// The entries of directory `node`, with their attributes, in a stable order. The
    /// directory and its subdirectories are watched first, so that the entries (which
    /// carry them to the kernel with readdirplus) may be kept long: a walk then needs no
    /// lookups.
    pub fn list(&self, node: &Node) -> Result<Vec<Child>, TreeError> {
        self.watch(node);
        let (mut children, dir) = self.list_unwatched(node)?;
        for c in children.iter_mut() {
            if c.attr.kind == Kind::Dir {
                match (&c.node, &dir) {
                    // From the listing's own descriptor: no second walk from the root.
                    (Node::Backing(b), Some(dir)) => self.watch_entry(dir, b),
                    (node, _) => self.watch(node),
                }
            }
            // A backing entry's time depends on the watches just placed; the others
            // carry theirs from the family that listed them.
            if matches!(c.node, Node::Backing(_)) {
                c.ttl = self.ttl(&c.node, &c.attr);
            }
        }
        Ok(children)
    }

    /// The children of `node`, and the directory they were read from if it is a backing
    /// one.
    fn list_unwatched(
        &self,
        node: &Node,
    ) -> Result<(Vec<Child>, Option<std::os::fd::OwnedFd>), TreeError> {
        match node {
            Node::Root => Ok((self.list_root()?, None)),
            Node::Backing(b) => self.backing_list(node, b).map(|(c, dir)| (c, Some(dir))),
            Node::Git(g) => Ok((self.git_list(node, g)?, None)),
            Node::Act(a) => Ok((self.act_list(node, a)?, None)),
            Node::Capture(_) | Node::Draft(_) | Node::Record(_) | Node::View(_) => {
                Err(TreeError::new(node.path(), ErrorKind::NotDir))
            }
            Node::Home(_) => Err(TreeError::not_found(node.path())),
        }
    }

    fn list_root(&self) -> Result<Vec<Child>, TreeError> {
        let mut out = Vec::new();
        for name in TOP_LEVEL {
            let node = Node::top(OsStr::new(name)).ok_or_else(|| TreeError::not_found(name))?;
            match self.getattr(&node) {
                Ok(attr) => out.push(Child::new(name, node, attr)),
                // steps/ or inbox/ may not exist yet in a new workspace.
                Err(e) if e.is_not_found() => {}
                Err(e) => return Err(e),
            }
        }
        Ok(out)
    }

    /// Opens the file an inode stands for, which was `identity` when the kernel learnt
    /// it, and says how to serve it.
    pub fn open(
        &self,
        node: &Node,
        identity: &Identity,
        mode: OpenMode,
    ) -> Result<Opened, TreeError> {
        if let Node::Act(a) = node {
            // Made afresh at each open, and every write is a command: never cached.
            return Ok(Opened {
                content: self.act_open(node, a, matches!(mode, OpenMode::Write { .. }))?,
                direct_io: true,
                keep_cache: false,
                no_flush: true,
                passthrough: false,
            });
        }
        if let OpenMode::Write { truncate, by } = mode {
            // A draft changes under its own writes; never serve it from the cache. Its
            // every close is told to the tree.
            return Ok(Opened {
                content: self.open_write(node, truncate, by)?,
                direct_io: true,
                keep_cache: false,
                no_flush: false,
                passthrough: false,
            });
        }
        let content = self.open_content(node)?;
        let mut opened = Opened {
            direct_io: false,
            keep_cache: false,
            no_flush: true,
            passthrough: false,
            content,
        };
        match &opened.content {
            Content::File(f) => {
                let st = crate::workspace::backing::fstat(f)
                    .map_err(|e| TreeError::io(node.path(), e))?;
                let attr = self.backing_attr(&st);
                if attr.identity != *identity {
                    return Err(TreeError::not_found(node.path()));
                }
                // Pages of a watched record stay cached across opens: every change to
                // it is invalidated as it happens.
                opened.keep_cache = self.ttl(node, &attr) == WATCHED_TTL;
                opened.passthrough = !opened.keep_cache || attr.size >= PASSTHROUGH_BYTES;
            }
            Content::Draft(_) => {
                opened.direct_io = true;
                opened.no_flush = false;
            }
            // It grows (a response being streamed) or may differ from the size the
            // kernel last saw (a transcript whose tip moved): reads ask the daemon.
            Content::Response { .. } => opened.direct_io = true,
            Content::Bytes(_) if matches!(node, Node::Record(_) | Node::View(_)) => {
                opened.direct_io = true
            }
            // The log grows under the reader: every read asks for the current end; so
            // does a transcript, whose live tail grows and is rendered afresh.
            Content::Log(_) | Content::Transcript(_) => opened.direct_io = true,
            Content::Bytes(_) | Content::Stream { .. } => {}
        }
        Ok(opened)
    }

    /// What file `node` reads from.
    pub fn open_content(&self, node: &Node) -> Result<Content, TreeError> {
        match node {
            Node::Root => Err(TreeError::new(node.path(), ErrorKind::IsDir)),
            Node::Backing(b) => self.backing_open(node, b),
            Node::Capture(c) => self.capture_open(node, c),
            Node::Git(g) => self.git_open(node, g),
            Node::Draft(d) => self.draft(node, d).map(|draft| {
                Content::Draft(DraftOpen {
                    draft,
                    writable: false,
                })
            }),
            Node::Record(v) => self.record_open(node, v),
            Node::View(v) => Ok(self.view_open(*v)),
            Node::Act(a) => self.act_open(node, a, false),
            Node::Home(_) => Err(TreeError::not_found(node.path())),
        }
    }

    /// Up to `size` bytes at `offset` of `content`, opened from `node`: one read for every
    /// kind of content. Short only at the end.
    pub fn read(
        &self,
        node: &Node,
        content: &Content,
        offset: u64,
        size: u32,
    ) -> Result<Vec<u8>, TreeError> {
        let mut out = Vec::new();
        self.read_into(node, content, offset, size, &mut out)?;
        Ok(out)
    }

    /// [`Tree::read`] into `out` (cleared first), so that a caller can keep one buffer for
    /// its reads: a fresh buffer of a MiB is 256 page faults, about as long as the read.
    pub(crate) fn read_into(
        &self,
        node: &Node,
        content: &Content,
        offset: u64,
        size: u32,
        out: &mut Vec<u8>,
    ) -> Result<(), TreeError> {
        out.clear();
        let slice = |b: &[u8], out: &mut Vec<u8>| {
            let start = (offset as usize).min(b.len());
            let end = start.saturating_add(size as usize).min(b.len());
            out.extend_from_slice(&b[start..end]);
        };
        match content {
            Content::File(f) => {
                read_file_at(f, offset, size, out).map_err(|e| TreeError::io(node.path(), e))
            }
            Content::Bytes(b) => {
                slice(b, out);
                Ok(())
            }
            Content::Draft(d) => {
                slice(d.draft.state.lock().buf(), out);
                Ok(())
            }
            Content::Stream { file, key, stream } => {
                let page = self
                    .pages
                    .read(file, *key, *stream, offset, u64::from(size))
                    .map_err(|e| TreeError::new(node.path(), ErrorKind::Page(e)))?;
                out.extend_from_slice(&page);
                Ok(())
            }
            Content::Response { file, key, closed } => {
                self.read_response(node, file, *key, *closed, offset, size, out)
            }
            Content::Log(r) => {
                out.extend_from_slice(&self.read_log(node, *r, offset, size)?);
                Ok(())
            }
            Content::Transcript(t) => self.read_transcript(node, t, offset, size, out),
        }
    }

    /// The target of a symlink node, as bytes.
    pub fn readlink(&self, node: &Node) -> Result<Vec<u8>, TreeError> {
        match node {
            Node::Backing(b) => self
                .backing
                .readlink(&b.rel())
                .map_err(|e| TreeError::io(node.path(), e)),
            Node::Git(g) => self.git_readlink(node, g),
            Node::Record(v) => self.record_readlink(node, v),
            _ => Err(TreeError::new(node.path(), ErrorKind::NotSymlink)),
        }
    }

    /// The extended attributes of `node`: on a page, the tool's banner, the stream's
    /// length and (unless the page ends the stream) the next address; on a stream, its
    /// length; on an `output.json`, the length of each stream.
    pub fn xattrs(&self, node: &Node) -> Result<Vec<(String, Vec<u8>)>, TreeError> {
        match node {
            Node::Capture(c) => self.capture_xattrs(node, c),
            Node::Backing(b) => match b.place() {
                Place::Output(record) => Ok(self.output_xattrs(node, &record)),
                _ => Ok(Vec::new()),
            },
            _ => Ok(Vec::new()),
        }
    }

    /// Why a change to a node that is not a draft is refused: a deposit is immutable,
    /// everything else read-only.
    pub(crate) fn refusal(&self, node: &Node) -> TreeError {
        match node {
            Node::Backing(b)
                if self.deposits.is_some()
                    && matches!(b.place(), Place::InboxEntry { agent: Some(_) }) =>
            {
                TreeError::new(node.path(), ErrorKind::Immutable)
            }
            _ => TreeError::read_only(node.path()),
        }
    }

    /// A node in `parent` that exists, or why not.
    fn existing(&self, parent: &Node, name: &OsStr) -> Result<Node, TreeError> {
        let c = self.child(parent, name)?;
        self.getattr(&c)?;
        Ok(c)
    }
}

impl Child {
    /// An entry the kernel may keep for the tree's usual time (set by [`Tree::list`]).
    pub(crate) fn new(name: impl Into<OsString>, node: Node, attr: Attr) -> Self {
        Child {
            name: name.into(),
            node,
            attr,
            ttl: SHORT_TTL,
        }
    }
}

/// Reads up to `size` bytes at `offset` of `f`, short only at its end.
fn read_file_at(f: &File, offset: u64, size: u32, out: &mut Vec<u8>) -> std::io::Result<()> {
    use std::os::unix::fs::FileExt;
    out.resize(size as usize, 0);
    let mut filled = 0;
    while filled < out.len() {
        match f.read_at(&mut out[filled..], offset + filled as u64) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    out.truncate(filled);
    Ok(())
}

/// Whether `name` is one path component a directory could hold.
fn is_single_name(name: &OsStr) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let b = name.as_bytes();
    !(b.is_empty() || b == b"." || b == b".." || b.contains(&b'/'))
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_acts;
#[cfg(test)]
mod tests_live;
