//! The virtual tree: what a path under the mount is, what a directory lists, what a file
//! holds, and which errno refuses what. No FUSE types appear here; the adapter in
//! [`crate::fs`] turns these answers into replies.
//!
//! The mount root mirrors the workspace root, so every workspace-relative path litany
//! prints resolves verbatim:
//!
//! | path | source | shows |
//! |---|---|---|
//! | `steps/...` | backing files | every record as on disk; the harness's `*.tmp` are hidden |
//! | `inbox/<id>/` | backing files | the pending deposits a drain would accept |
//! | `agents/<id>/...` | git | the committed tree at the branch tip |
//! | `marks/<kind>/<id>` | git | a blob mark's bytes, or a commit mark's id and `\n` |
//! | `names/<Name>` | git | a symlink to `../agents/<id>` for each uniquely named agent |
//!
//! Nothing here caches content: every answer is read from disk or git when asked, so the
//! view is as live as the kernel's TTLs allow.

pub mod drafts;
mod error;
mod node;

pub use error::TreeError;
pub use node::{Area, Node, TOP_LEVEL};

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use git2::{ObjectType, Oid};
use parking_lot::Mutex;

use crate::deposit::{DepositError, Depositor};
use crate::paging::{
    Address, CaptureKey, Page, PageCache, PageError, PageName, RecordPath, Stream,
};
use crate::workspace::backing::{Backing, Stat};
use crate::workspace::refs::{GitEntry, Refs, Snapshot, agent_ref};
use crate::workspace::{AGENTS_DIR, STEPS_DIR, Workspace, ids::is_component, inbox, steps};
use drafts::{Draft, DraftError, Drafts, Refused};

/// Permission bits of what the view shows: records and git content are read-only.
pub const FILE_PERM: u16 = 0o444;
pub const EXEC_PERM: u16 = 0o555;
pub const DIR_PERM: u16 = 0o555;
pub const LINK_PERM: u16 = 0o777;
/// An inbox directory that takes deposits, and a draft being written.
pub const INBOX_DIR_PERM: u16 = 0o755;
pub const DRAFT_PERM: u16 = 0o644;
/// The default bound of the page cache (`--cache-bytes`).
pub const DEFAULT_PAGE_CACHE_BYTES: usize = 64 << 20;
/// How many computed pages are remembered (each at most 4 KiB).
const RECENT_PAGES: usize = 64;
/// A computed page, by its address and the version of the record it came from.
type RecentPage = ((Address, CaptureKey), Arc<Page>);
/// Extended attributes of pages and streams.
pub const XATTR_NEXT: &str = "user.litany.next";
pub const XATTR_BANNER: &str = "user.litany.banner";
pub const XATTR_LENGTH: &str = "user.litany.length";

/// The longest file name a draft may have (as on ext4).
pub const NAME_MAX: usize = 255;

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
    pub fn perm(self) -> u16 {
        match self {
            Kind::Dir => DIR_PERM,
            Kind::File => FILE_PERM,
            Kind::Symlink => LINK_PERM,
        }
    }
}

/// What names a node for as long as it exists: a backing file by its device and inode
/// (names in `inbox/` are reused, so a name is never enough), anything derived from git by
/// the node itself.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Identity {
    Backing {
        dev: u64,
        ino: u64,
    },
    /// Boxed: identities are hash keys of the inode table, and most are backing files.
    Virtual(Box<Node>),
    /// A draft, by its number: it keeps its inode when renamed.
    Draft(u64),
}

/// A node's attributes, in the view's terms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attr {
    pub kind: Kind,
    pub size: u64,
    pub perm: u16,
    pub nlink: u32,
    pub mtime: SystemTime,
    pub ctime: SystemTime,
    pub atime: SystemTime,
    pub identity: Identity,
}

/// Captures up to this size are parsed when their tool directory is listed, so that
/// `stdout` and `stderr` are listed with their sizes (and only when the capture parses);
/// larger ones are listed without being read, since a walk of a workspace full of
/// multi-megabyte captures must not parse them all.
pub const EAGER_STREAMS_BYTES: u64 = 1 << 20;

/// One entry of a listing.
#[derive(Debug, Clone)]
pub struct Child {
    pub name: OsString,
    pub node: Node,
    pub attr: Attr,
    /// False when `attr.size` is not known yet: a stream of a large capture listed
    /// without parsing it ([`EAGER_STREAMS_BYTES`]). Its size is found at the first
    /// lookup or stat, so the kernel must not keep this entry's attributes.
    pub size_known: bool,
}

/// What an open file reads from.
#[derive(Debug)]
pub enum Content {
    /// A backing file, opened beneath the root without following symlinks.
    File(File),
    /// Bytes derived when the file was opened (git blobs, marks).
    Bytes(Arc<Vec<u8>>),
    /// A message being written through the mount.
    Draft(Arc<Draft>),
    /// A whole decoded stream of a tool capture, read through the page cache.
    Stream {
        file: File,
        key: CaptureKey,
        stream: Stream,
    },
}

/// What deposits through the mount need: the engine and who they come from.
pub struct Deposits {
    pub depositor: Depositor,
    pub sender: String,
}

/// The error a refused write to a draft answers, at the write and at every close after.
fn refused_error(node: &Node, why: Refused) -> TreeError {
    match why {
        Refused::TooLarge { len, max } => {
            TreeError::Deposit(node.path(), DepositError::TooLarge { len, max })
        }
        Refused::NoSpace => TreeError::NoSpace(node.path()),
    }
}

/// The times of a node in an agent's tree.
#[derive(Debug, Clone, Copy)]
struct GitTimes {
    /// The tip commit's time: what files and links show.
    commit: SystemTime,
    /// What directories show: they change whenever the branch moves, even to an older
    /// commit, so the later of the commit's time and the move's.
    dirs: SystemTime,
}

/// The virtual tree over one workspace.
pub struct Tree {
    ws: Workspace,
    backing: Backing,
    refs: Refs,
    born: SystemTime,
    /// What was last said about clashing names and unusable refs, so that each change
    /// is logged once rather than on every lookup.
    reported: Mutex<Reported>,
    /// `None` when the mount refuses deposits.
    deposits: Option<Deposits>,
    /// `--agent <id>`: the one agent whose view this is.
    confined: Option<String>,
    drafts: Drafts,
    pages: PageCache,
    recent_pages: Mutex<std::collections::VecDeque<RecentPage>>,
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
        Ok(Self {
            ws,
            backing,
            refs,
            born: SystemTime::now(),
            reported: Mutex::new(Default::default()),
            deposits: None,
            confined: None,
            drafts: Drafts::default(),
            pages: PageCache::new(DEFAULT_PAGE_CACHE_BYTES),
            recent_pages: Mutex::new(Default::default()),
        })
    }

    /// Opens `inbox/<id>/` to deposits from `deposits.sender`.
    pub fn with_deposits(mut self, deposits: Deposits) -> Self {
        self.deposits = Some(deposits);
        self
    }

    /// Confines the view to what agent `id` may see: its own step records (as
    /// `read_tool_output` confines paging) and its own pending deposits. Other agents'
    /// records and inboxes' contents cannot be reached by any path.
    pub fn confined_to(mut self, id: &str) -> Self {
        self.confined = Some(id.to_string());
        self
    }

    /// Whether the confinement lets backing path `rel` be seen: under `steps/` only the
    /// agent's own directory, under `inbox/` only its own pending deposits (the other
    /// inboxes are listed, so that it can write to them, but show nothing).
    fn may_see(&self, rel: &Path) -> bool {
        let Some(me) = &self.confined else {
            return true;
        };
        let parts: Vec<&OsStr> = rel.components().map(|c| c.as_os_str()).collect();
        match parts.as_slice() {
            [top, id, ..] if *top == STEPS_DIR => id == &OsStr::new(me.as_str()),
            [top, id, _] if *top == crate::workspace::INBOX_DIR => id == &OsStr::new(me.as_str()),
            _ => true,
        }
    }

    /// Whether the confinement lets `record` be paged.
    fn may_page(&self, record: &RecordPath) -> bool {
        self.confined
            .as_deref()
            .is_none_or(|me| record.agent() == me)
    }

    /// Bounds what the page cache keeps, in bytes.
    pub fn with_cache_bytes(mut self, bytes: usize) -> Self {
        self.pages = PageCache::new(bytes);
        self
    }

    pub fn pages(&self) -> &PageCache {
        &self.pages
    }

    pub fn deposits(&self) -> Option<&Deposits> {
        self.deposits.as_ref()
    }

    pub fn workspace(&self) -> &Workspace {
        &self.ws
    }

    pub fn refs(&self) -> &Refs {
        &self.refs
    }

    /// The confined access to the backing tree (for watching its directories).
    pub fn backing(&self) -> &Backing {
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

    fn virtual_attr(&self, node: &Node, kind: Kind, size: u64, mtime: SystemTime) -> Attr {
        let perm = kind.perm();
        Attr {
            kind,
            size,
            perm,
            nlink: if kind == Kind::Dir { 2 } else { 1 },
            mtime,
            ctime: mtime,
            atime: mtime,
            identity: Identity::Virtual(Box::new(node.clone())),
        }
    }

    /// The attributes of backing node `rel`: those of its `stat`, with an inbox
    /// directory writable when the mount takes deposits.
    fn backing_node_attr(&self, rel: &Path, st: &Stat) -> Attr {
        let mut attr = self.backing_attr(st);
        if attr.kind == Kind::Dir
            && let Some(agent) = inbox_agent_of(rel)
        {
            if self.deposits.is_some() {
                attr.perm = INBOX_DIR_PERM;
            }
            // Drafts come and go without touching the backing directory.
            if let Some(at) = self.drafts.changed_at(agent) {
                attr.mtime = attr.mtime.max(at);
            }
        }
        attr
    }

    /// The attributes of a backing file from its `stat`.
    pub fn backing_attr(&self, st: &Stat) -> Attr {
        let kind = if st.is_dir() {
            Kind::Dir
        } else if st.is_symlink() {
            Kind::Symlink
        } else {
            Kind::File
        };
        let perm = kind.perm();
        Attr {
            kind,
            size: st.size,
            perm,
            nlink: st.nlink.min(u32::MAX as u64) as u32,
            mtime: system_time(st.mtime),
            ctime: system_time(st.ctime),
            atime: system_time(st.atime),
            identity: Identity::Backing {
                dev: st.dev,
                ino: st.ino,
            },
        }
    }

    /// The attributes of `node` as it is now; `NotFound` when it no longer exists.
    pub fn getattr(&self, node: &Node) -> Result<Attr, TreeError> {
        match node {
            Node::MarksRoot
            | Node::AgentsRoot
            | Node::NamesRoot
            | Node::MarkKind(_)
            | Node::Mark { .. }
            | Node::Agent { .. }
            | Node::Name(_) => self.attr_in(&*self.snapshot()?, node),
            _ => self.attr_in(&Snapshot::default(), node),
        }
    }

    /// The attributes of `node`, with git-derived nodes answered from `snap` (so that a
    /// listing reads the refs once, not once per entry).
    fn attr_in(&self, snap: &Snapshot, node: &Node) -> Result<Attr, TreeError> {
        match node {
            // A directory's mtime changes whenever its listing does: the kernel keeps
            // listings cached and drops one when it sees a new mtime.
            Node::Root => {
                let mtime = self
                    .backing
                    .lstat(Path::new(""))
                    .map(|st| system_time(st.mtime))
                    .unwrap_or(self.born);
                Ok(self.virtual_attr(node, Kind::Dir, 0, mtime))
            }
            Node::MarksRoot | Node::AgentsRoot | Node::NamesRoot => {
                let mtime = snap.changed_at.unwrap_or(self.born);
                Ok(self.virtual_attr(node, Kind::Dir, 0, mtime))
            }
            Node::Backing(rel) => {
                if !self.may_see(rel) {
                    return Err(TreeError::NotFound(node.path()));
                }
                let st = self
                    .backing
                    .lstat(rel)
                    .map_err(|e| TreeError::io(node.path(), e))?;
                if !Area::of(rel).shows(rel, &st) {
                    return Err(TreeError::NotFound(node.path()));
                }
                Ok(self.backing_node_attr(rel, &st))
            }
            Node::Page(address) if !self.may_page(&address.record) => {
                Err(TreeError::NotFound(node.path()))
            }
            Node::Stream { record, .. } if !self.may_page(record) => {
                Err(TreeError::NotFound(node.path()))
            }
            Node::Page(address) => {
                let (page, st) = self.page_of(node, address)?;
                let mut a = self.virtual_attr(
                    node,
                    Kind::File,
                    page.bytes.len() as u64,
                    system_time(st.mtime),
                );
                a.ctime = system_time(st.ctime);
                Ok(a)
            }
            Node::Stream { record, stream } => {
                let (file, key, st) = self.record(record, node)?;
                let len = self
                    .pages
                    .stream_len(&file, key, *stream)
                    .map_err(|e| self.page_error(node, e))?;
                let mut a = self.virtual_attr(node, Kind::File, len, system_time(st.mtime));
                a.ctime = system_time(st.ctime);
                Ok(a)
            }
            Node::Draft { id, .. } => {
                let d = self
                    .drafts
                    .by_id(*id)
                    .ok_or_else(|| TreeError::NotFound(node.path()))?;
                let st = d.state.lock();
                Ok(Attr {
                    kind: Kind::File,
                    size: st.buf.len() as u64,
                    perm: if st.deposited.is_some() {
                        FILE_PERM
                    } else {
                        st.perm
                    },
                    nlink: 1,
                    mtime: st.mtime,
                    ctime: st.ctime,
                    atime: st.atime,
                    identity: Identity::Draft(*id),
                })
            }
            Node::MarkKind(kind) => {
                if !snap.marks.contains_key(kind) {
                    return Err(TreeError::NotFound(node.path()));
                }
                let mtime = snap.changed_at.unwrap_or(self.born);
                Ok(self.virtual_attr(node, Kind::Dir, 0, mtime))
            }
            Node::Mark { kind, id } => {
                let oid =
                    mark_target(snap, kind, id).ok_or_else(|| TreeError::NotFound(node.path()))?;
                let (otype, size) = self
                    .refs
                    .header(oid)
                    .map_err(|e| TreeError::git(node.path(), e))?;
                let size = if otype == ObjectType::Blob {
                    size
                } else {
                    commit_mark_bytes(oid).len() as u64
                };
                let refname = snap.flavour.mark_ref(kind, id);
                let mtime = snap.moved_at(&refname).unwrap_or(self.born);
                Ok(self.virtual_attr(node, Kind::File, size, mtime))
            }
            Node::Agent { id, path } => {
                let (entry, times) = self.agent_entry(snap, node, id, path)?;
                self.git_attr(node, entry, times)
            }
            Node::Name(name) => {
                let id = snap
                    .names
                    .get(name)
                    .ok_or_else(|| TreeError::NotFound(node.path()))?;
                let mtime = snap.moved_at(&agent_ref(id)).unwrap_or(self.born);
                Ok(self.virtual_attr(node, Kind::Symlink, name_target(id).len() as u64, mtime))
            }
        }
    }

    /// What `agents/<id>/<path>` is at the agent's tip in `snap`, and its times, all from
    /// `snap` (see [`Snapshot::moved`]).
    fn agent_entry(
        &self,
        snap: &Snapshot,
        node: &Node,
        id: &str,
        path: &[String],
    ) -> Result<(GitEntry, GitTimes), TreeError> {
        let git_err = |e| TreeError::git(node.path(), e);
        let tip = *snap
            .agents
            .get(id)
            .ok_or_else(|| TreeError::NotFound(node.path()))?;
        let parts: Vec<&str> = path.iter().map(String::as_str).collect();
        let entry = self
            .refs
            .entry_at(tip, &parts)
            .map_err(git_err)?
            .ok_or_else(|| TreeError::NotFound(node.path()))?;
        let commit = self.refs.commit_time(tip).map_err(git_err)?;
        let moved = snap.moved_at(&agent_ref(id)).unwrap_or(commit);
        Ok((
            entry,
            GitTimes {
                commit,
                dirs: moved.max(commit),
            },
        ))
    }

    fn git_attr(&self, node: &Node, entry: GitEntry, times: GitTimes) -> Result<Attr, TreeError> {
        let mtime = times.commit;
        Ok(match entry {
            // A directory of an agent's tree changes whenever its branch moves.
            GitEntry::Tree(_) | GitEntry::Gitlink(_) => {
                self.virtual_attr(node, Kind::Dir, 0, times.dirs)
            }
            GitEntry::Blob { oid, executable } => {
                let (_, size) = self
                    .refs
                    .header(oid)
                    .map_err(|e| TreeError::git(node.path(), e))?;
                let mut a = self.virtual_attr(node, Kind::File, size, mtime);
                if executable {
                    a.perm = EXEC_PERM;
                }
                a
            }
            GitEntry::Link(oid) => {
                let (_, size) = self
                    .refs
                    .header(oid)
                    .map_err(|e| TreeError::git(node.path(), e))?;
                self.virtual_attr(node, Kind::Symlink, size, mtime)
            }
        })
    }

    /// Resolves `name` in directory `parent`.
    pub fn lookup(&self, parent: &Node, name: &OsStr) -> Result<(Node, Attr), TreeError> {
        let child = self.child(parent, name)?;
        let attr = self.getattr(&child)?;
        Ok((child, attr))
    }

    /// The node `name` would be in `parent`, without checking that it exists.
    fn child(&self, parent: &Node, name: &OsStr) -> Result<Node, TreeError> {
        let bytes = name.as_bytes();
        let not_found = || TreeError::NotFound(parent.join(name));
        if bytes.is_empty() || bytes == b"." || bytes == b".." || bytes.contains(&b'/') {
            return Err(not_found());
        }
        let text = || {
            name.to_str()
                .filter(|s| is_component(s))
                .ok_or_else(not_found)
        };
        Ok(match parent {
            Node::Root => Node::top(name).ok_or_else(not_found)?,
            Node::Backing(rel) if tool_record(rel).is_some() && is_capture_name(name) => {
                let record = tool_record(rel).ok_or_else(not_found)?;
                let text = name.to_str().ok_or_else(not_found)?;
                if let Some(stream) = Stream::parse(text) {
                    Node::Stream { record, stream }
                } else if let Some(page) = PageName::parse(text) {
                    Node::Page(page.within(&record))
                } else {
                    let full = format!("{}/{text}", rel.display());
                    return Err(match Address::parse(&full) {
                        Err(e) => TreeError::Page(full, PageError::Malformed(e)),
                        Ok(_) => not_found(),
                    });
                }
            }
            // A draft answers for its name, except that a deposited draft's alias never
            // hides a real deposit of the same name.
            Node::Backing(rel) => {
                match inbox_agent(parent)
                    .and_then(|a| self.drafts.get(a, name))
                    .filter(|d| d.listed() || self.backing.lstat(&rel.join(name)).is_err())
                {
                    Some(d) => Node::Draft {
                        agent: d.agent.clone(),
                        id: d.id,
                        name: name.to_os_string(),
                    },
                    None => Node::Backing(rel.join(name)),
                }
            }
            Node::MarksRoot => Node::MarkKind(text()?.into()),
            Node::MarkKind(kind) => Node::Mark {
                kind: kind.clone(),
                id: text()?.into(),
            },
            Node::AgentsRoot => Node::Agent {
                id: text()?.into(),
                path: Vec::new(),
            },
            Node::Agent { id, path } => {
                let mut path = path.clone();
                path.push(text()?.into());
                Node::Agent {
                    id: id.clone(),
                    path,
                }
            }
            Node::NamesRoot => Node::Name(text()?.into()),
            Node::Mark { .. }
            | Node::Name(_)
            | Node::Draft { .. }
            | Node::Page(_)
            | Node::Stream { .. } => {
                return Err(TreeError::NotDir(parent.path()));
            }
        })
    }

    /// The entries of directory `node`, with their attributes, in a stable order.
    pub fn list(&self, node: &Node) -> Result<Vec<Child>, TreeError> {
        let mut out = Vec::new();
        match node {
            Node::Root => {
                for name in TOP_LEVEL {
                    let node = Node::top(OsStr::new(name))
                        .ok_or_else(|| TreeError::NotFound(name.into()))?;
                    match self.getattr(&node) {
                        Ok(attr) => out.push(Child {
                            name: name.into(),
                            node,
                            attr,
                            size_known: true,
                        }),
                        // steps/ or inbox/ may not exist yet in a new workspace.
                        Err(TreeError::NotFound(_)) => {}
                        Err(e) => return Err(e),
                    }
                }
            }
            Node::Backing(rel) => {
                let entries = self
                    .backing
                    .list(rel)
                    .map_err(|e| TreeError::io(node.path(), e))?;
                let mut entries: Vec<_> = entries
                    .into_iter()
                    .filter(|(name, st)| {
                        let child = rel.join(name);
                        Area::of(rel).shows(&child, st) && self.may_see(&child)
                    })
                    .collect();
                entries.sort_by(|a, b| a.0.cmp(&b.0));
                for (name, st) in entries {
                    let child = rel.join(&name);
                    out.push(Child {
                        attr: self.backing_node_attr(&child, &st),
                        node: Node::Backing(child),
                        name,
                        size_known: true,
                    });
                }
                if let Some(record) = tool_record(rel)
                    && out
                        .iter()
                        .any(|c| c.name == crate::paging::address::OUTPUT_FILE)
                {
                    self.push_streams(&mut out, &record);
                }
                if let Some(agent) = inbox_agent(node) {
                    for d in self.drafts.listed(agent) {
                        let name = d.name();
                        if out.iter().any(|c| c.name == name) {
                            continue;
                        }
                        let node = Node::Draft {
                            agent: agent.to_string(),
                            id: d.id,
                            name: name.clone(),
                        };
                        if let Ok(attr) = self.getattr(&node) {
                            out.push(Child {
                                name,
                                node,
                                attr,
                                size_known: true,
                            });
                        }
                    }
                }
            }
            Node::MarksRoot => {
                let snap = self.snapshot()?;
                for kind in snap.marks.keys() {
                    self.push_virtual(&snap, &mut out, Node::MarkKind(kind.clone()), kind);
                }
            }
            Node::MarkKind(kind) => {
                let snap = self.snapshot()?;
                let ids = snap
                    .marks
                    .get(kind)
                    .ok_or_else(|| TreeError::NotFound(node.path()))?;
                for id in ids.keys() {
                    let child = Node::Mark {
                        kind: kind.clone(),
                        id: id.clone(),
                    };
                    self.push_virtual(&snap, &mut out, child, id);
                }
            }
            Node::AgentsRoot => {
                let snap = self.snapshot()?;
                for id in snap.agents.keys() {
                    let child = Node::Agent {
                        id: id.clone(),
                        path: Vec::new(),
                    };
                    self.push_virtual(&snap, &mut out, child, id);
                }
            }
            Node::Agent { id, path } => {
                let (entry, times) = self.agent_entry(&*self.snapshot()?, node, id, path)?;
                let tree = match entry {
                    GitEntry::Tree(oid) => oid,
                    GitEntry::Gitlink(_) => return Ok(out),
                    _ => return Err(TreeError::NotDir(node.path())),
                };
                let entries = self
                    .refs
                    .list_tree(tree)
                    .map_err(|e| TreeError::git(node.path(), e))?;
                for (name, entry) in entries {
                    let mut p = path.clone();
                    p.push(name.clone());
                    let child = Node::Agent {
                        id: id.clone(),
                        path: p,
                    };
                    let attr = self.git_attr(&child, entry, times)?;
                    out.push(Child {
                        name: name.into(),
                        node: child,
                        attr,
                        size_known: true,
                    });
                }
            }
            Node::NamesRoot => {
                let snap = self.snapshot()?;
                for name in snap.names.keys() {
                    self.push_virtual(&snap, &mut out, Node::Name(name.clone()), name);
                }
            }
            Node::Mark { .. }
            | Node::Name(_)
            | Node::Draft { .. }
            | Node::Page(_)
            | Node::Stream { .. } => {
                return Err(TreeError::NotDir(node.path()));
            }
        }
        Ok(out)
    }

    /// Adds the `stdout` and `stderr` files of `record` to a tool directory's listing,
    /// opening the record once for both. A capture up to [`EAGER_STREAMS_BYTES`] is
    /// parsed for their sizes and gets none if it does not parse; a larger one that is
    /// not indexed yet is listed without reading it (a walk must not read every capture),
    /// with sizes found at the first lookup or stat.
    fn push_streams(&self, out: &mut Vec<Child>, record: &RecordPath) {
        if !self.may_page(record) {
            return;
        }
        let first = Node::Stream {
            record: record.clone(),
            stream: Stream::Stdout,
        };
        let (file, key, st) = match self.record(record, &first) {
            Ok(r) => r,
            Err(e) => return log::debug!("{e}: its streams are not listed"),
        };
        let lazy = st.size > EAGER_STREAMS_BYTES && !self.pages.indexed(&key);
        for stream in Stream::ALL {
            let node = Node::Stream {
                record: record.clone(),
                stream,
            };
            let len = if lazy {
                None
            } else {
                match self.pages.stream_len(&file, key, stream) {
                    Ok(len) => Some(len),
                    Err(e) => {
                        return log::debug!("{}: {e}: its streams are not listed", node.path());
                    }
                }
            };
            let mut attr =
                self.virtual_attr(&node, Kind::File, len.unwrap_or(0), system_time(st.mtime));
            attr.ctime = system_time(st.ctime);
            out.push(Child {
                name: stream.as_str().into(),
                node,
                attr,
                size_known: len.is_some(),
            });
        }
    }

    /// Adds `node` to a listing unless it vanished between the snapshot and its stat.
    fn push_virtual(&self, snap: &Snapshot, out: &mut Vec<Child>, node: Node, name: &str) {
        match self.attr_in(snap, &node) {
            Ok(attr) => out.push(Child {
                name: name.into(),
                node,
                attr,
                size_known: true,
            }),
            Err(e) => log::debug!("{}: left out of its listing: {e}", node.path()),
        }
    }

    /// Opens a file node for reading.
    pub fn open(&self, node: &Node) -> Result<Content, TreeError> {
        match node {
            Node::Backing(rel) => {
                if !self.getattr(node)?.kind.eq(&Kind::File) {
                    return Err(TreeError::IsDir(node.path()));
                }
                let f = self
                    .backing
                    .open_file(rel)
                    .map_err(|e| TreeError::io(node.path(), e))?;
                Ok(Content::File(f))
            }
            Node::Mark { kind, id } => {
                let snap = self.snapshot()?;
                let oid =
                    mark_target(&snap, kind, id).ok_or_else(|| TreeError::NotFound(node.path()))?;
                let (otype, _) = self
                    .refs
                    .header(oid)
                    .map_err(|e| TreeError::git(node.path(), e))?;
                let bytes = if otype == ObjectType::Blob {
                    self.refs
                        .blob(oid)
                        .map_err(|e| TreeError::git(node.path(), e))?
                } else {
                    commit_mark_bytes(oid)
                };
                Ok(Content::Bytes(Arc::new(bytes)))
            }
            Node::Agent { id, path } => {
                match self.agent_entry(&*self.snapshot()?, node, id, path)?.0 {
                    GitEntry::Blob { oid, .. } => {
                        let bytes = self
                            .refs
                            .blob(oid)
                            .map_err(|e| TreeError::git(node.path(), e))?;
                        Ok(Content::Bytes(Arc::new(bytes)))
                    }
                    GitEntry::Link(_) => Err(TreeError::Loop(node.path())),
                    GitEntry::Tree(_) | GitEntry::Gitlink(_) => Err(TreeError::IsDir(node.path())),
                }
            }
            Node::Name(_) => Err(TreeError::Loop(node.path())),
            Node::Draft { id, .. } => self
                .drafts
                .by_id(*id)
                .map(Content::Draft)
                .ok_or_else(|| TreeError::NotFound(node.path())),
            Node::Page(address) => {
                let (page, _) = self.page_of(node, address)?;
                Ok(Content::Bytes(Arc::new(page.bytes.clone())))
            }
            Node::Stream { record, stream } => {
                let (file, key, _) = self.record(record, node)?;
                self.pages
                    .stream_len(&file, key, *stream)
                    .map_err(|e| self.page_error(node, e))?;
                Ok(Content::Stream {
                    file,
                    key,
                    stream: *stream,
                })
            }
            Node::Root
            | Node::MarksRoot
            | Node::MarkKind(_)
            | Node::AgentsRoot
            | Node::NamesRoot => Err(TreeError::IsDir(node.path())),
        }
    }

    /// The target of a symlink node, as bytes.
    pub fn readlink(&self, node: &Node) -> Result<Vec<u8>, TreeError> {
        match node {
            Node::Backing(rel) => self
                .backing
                .readlink(rel)
                .map_err(|e| TreeError::io(node.path(), e)),
            Node::Name(name) => {
                let snap = self.snapshot()?;
                let id = snap
                    .names
                    .get(name)
                    .ok_or_else(|| TreeError::NotFound(node.path()))?;
                Ok(name_target(id).into_bytes())
            }
            Node::Agent { id, path } => {
                match self.agent_entry(&*self.snapshot()?, node, id, path)?.0 {
                    GitEntry::Link(oid) => self
                        .refs
                        .blob(oid)
                        .map_err(|e| TreeError::git(node.path(), e)),
                    _ => Err(TreeError::Invalid(node.path())),
                }
            }
            _ => Err(TreeError::Invalid(node.path())),
        }
    }

    /// The `output.json` named by `record`, opened beneath the root, with its cache key.
    fn record(
        &self,
        record: &RecordPath,
        node: &Node,
    ) -> Result<(File, CaptureKey, Stat), TreeError> {
        let rel = PathBuf::from(record.to_string());
        let refuse = |e: std::io::Error| {
            let e = PageError::NoRecord {
                record: self.ws.root().join(&rel),
                source: e,
            };
            TreeError::Page(node.path(), e)
        };
        let file = self.backing.open_file(&rel).map_err(refuse)?;
        let st = crate::workspace::backing::fstat(&file).map_err(refuse)?;
        let key = CaptureKey::from_stat(&st);
        Ok((file, key, st))
    }

    /// The page `address` names, computed once per (address, record version) and
    /// remembered for the next few requests: a `cat` asks for it at lookup, open and
    /// getxattr.
    fn page_of(&self, node: &Node, address: &Address) -> Result<(Arc<Page>, Stat), TreeError> {
        let (file, key, st) = self.record(&address.record, node)?;
        let memo_key = (address.clone(), key);
        if let Some(p) = self
            .recent_pages
            .lock()
            .iter()
            .find(|(k, _)| *k == memo_key)
        {
            return Ok((p.1.clone(), st));
        }
        let page = Arc::new(
            self.pages
                .page(&file, key, address)
                .map_err(|e| self.page_error(node, e))?,
        );
        let mut recent = self.recent_pages.lock();
        if recent.len() >= RECENT_PAGES {
            recent.pop_front();
        }
        recent.push_back((memo_key, page.clone()));
        Ok((page, st))
    }

    fn page_error(&self, node: &Node, e: PageError) -> TreeError {
        let record = match node {
            Node::Page(a) => Some(a.record.to_string()),
            Node::Stream { record, .. } => Some(record.to_string()),
            _ => None,
        };
        let e = match record {
            Some(r) => e.with_record(&self.ws.root().join(r)),
            None => e,
        };
        TreeError::Page(node.path(), e)
    }

    /// Reads `len` bytes at `offset` of a whole-stream file.
    pub fn read_stream(
        &self,
        content: &Content,
        offset: u64,
        len: u64,
    ) -> Result<Vec<u8>, PageError> {
        match content {
            Content::Stream { file, key, stream } => {
                self.pages.read(file, *key, *stream, offset, len)
            }
            _ => Ok(Vec::new()),
        }
    }

    /// The extended attributes of `node`: on a page, the tool's banner, the stream's
    /// length and (unless the page ends the stream) the next address; on a stream, its
    /// length; on an `output.json`, the length of each stream.
    pub fn xattrs(&self, node: &Node) -> Result<Vec<(String, Vec<u8>)>, TreeError> {
        let mut out = Vec::new();
        match node {
            Node::Page(address) => {
                let (page, _) = self.page_of(node, address)?;
                if let Some(next) = &page.next {
                    out.push((XATTR_NEXT.into(), next.to_string().into_bytes()));
                }
                out.push((
                    XATTR_BANNER.into(),
                    page.banner.trim_end_matches('\n').as_bytes().to_vec(),
                ));
                out.push((XATTR_LENGTH.into(), page.len.to_string().into_bytes()));
            }
            Node::Stream { record, stream } => {
                let (file, key, _) = self.record(record, node)?;
                let len = self
                    .pages
                    .stream_len(&file, key, *stream)
                    .map_err(|e| self.page_error(node, e))?;
                out.push((XATTR_LENGTH.into(), len.to_string().into_bytes()));
            }
            Node::Backing(rel) => {
                if let Some(record) = rel.parent().and_then(tool_record)
                    && rel
                        .file_name()
                        .is_some_and(|n| n == crate::paging::address::OUTPUT_FILE)
                {
                    let (file, key, _) = self.record(&record, node)?;
                    for stream in Stream::ALL {
                        if let Ok(len) = self.pages.stream_len(&file, key, stream) {
                            out.push((
                                format!("{XATTR_LENGTH}.{stream}"),
                                len.to_string().into_bytes(),
                            ));
                        }
                    }
                }
            }
            _ => {}
        }
        Ok(out)
    }

    fn deposits_for<'a>(
        &'a self,
        parent: &'a Node,
        name: &OsStr,
    ) -> Result<(&'a Deposits, &'a str), TreeError> {
        let agent = inbox_agent(parent).ok_or_else(|| TreeError::ReadOnly(parent.join(name)))?;
        let deposits = self
            .deposits
            .as_ref()
            .ok_or_else(|| TreeError::ReadOnly(parent.join(name)))?;
        Ok((deposits, agent))
    }

    /// Creates a draft `name` in inbox directory `parent`: a message to be deposited when
    /// its writer closes it (or private scratch, for a dot-prefixed name).
    pub fn create(&self, parent: &Node, name: &OsStr) -> Result<(Node, Attr), TreeError> {
        let (deposits, agent) = self.deposits_for(parent, name)?;
        let path = parent.join(name);
        let bytes = name.as_bytes();
        if bytes.is_empty() || bytes == b"." || bytes == b".." || bytes.contains(&b'/') {
            return Err(TreeError::Invalid(path));
        }
        if bytes.len() > NAME_MAX {
            let e = std::io::Error::from_raw_os_error(libc::ENAMETOOLONG);
            return Err(TreeError::Io(path, e));
        }
        if let Node::Backing(rel) = parent
            && self.getattr(&Node::Backing(rel.join(name))).is_ok()
        {
            return Err(TreeError::Exists(path));
        }
        if !drafts::is_private(name) {
            deposits
                .depositor
                .check_recipient(agent)
                .map_err(|e| TreeError::Deposit(path.clone(), e))?;
        }
        let d = self
            .drafts
            .create(agent, name, DRAFT_PERM)
            .map_err(|e| match e {
                DraftError::Exists => TreeError::Exists(path.clone()),
                DraftError::Full => TreeError::NoSpace(path.clone()),
            })?;
        let node = Node::Draft {
            agent: agent.to_string(),
            id: d.id,
            name: name.to_os_string(),
        };
        let attr = self.getattr(&node)?;
        Ok((node, attr))
    }

    fn draft(&self, node: &Node) -> Result<Arc<Draft>, TreeError> {
        match node {
            Node::Draft { id, .. } => self
                .drafts
                .by_id(*id)
                .ok_or_else(|| TreeError::NotFound(node.path())),
            _ => Err(self.refusal(node)),
        }
    }

    /// Why a change to a node that is not a draft is refused: a deposit is immutable,
    /// everything else read-only.
    pub fn refusal(&self, node: &Node) -> TreeError {
        match node {
            Node::Backing(rel)
                if self.deposits.is_some() && rel.parent().and_then(inbox_agent_of).is_some() =>
            {
                TreeError::Immutable(node.path())
            }
            _ => TreeError::ReadOnly(node.path()),
        }
    }

    fn max_message_bytes(&self) -> u64 {
        self.deposits
            .as_ref()
            .map_or(0, |d| d.depositor.max_message_bytes() as u64)
    }

    /// Opens `node` for writing: only a draft can be. A deposited draft's alias opened
    /// with `O_TRUNC` starts a new message under the same name (`echo a > f; echo b > f`
    /// sends two); any other write to it is refused, as a message is immutable.
    pub fn open_write(&self, node: &Node, truncate: bool) -> Result<Content, TreeError> {
        let d = self.draft(node)?;
        {
            let mut st = d.state.lock();
            if st.deposited.is_some() {
                if !truncate {
                    return Err(TreeError::Immutable(node.path()));
                }
                self.drafts.reused(&mut st);
                st.dirty = false;
                st.writer = None;
                st.mtime = SystemTime::now();
                drop(st);
                self.drafts.touch(&d.agent);
                return Ok(Content::Draft(d));
            }
            if truncate {
                // Emptied: whatever was refused before is gone with it.
                st.refused = None;
            }
            if truncate && !st.buf.is_empty() {
                self.drafts
                    .resize(&mut st, 0)
                    .map_err(|_| TreeError::NoSpace(node.path()))?;
                st.dirty = true;
                st.mtime = SystemTime::now();
            }
        }
        Ok(Content::Draft(d))
    }

    /// Writes `data` at `offset` into a draft for process `pid`; refuses past the size
    /// limit (EFBIG).
    pub fn write(
        &self,
        node: &Node,
        offset: u64,
        data: &[u8],
        pid: u32,
    ) -> Result<usize, TreeError> {
        let d = self.draft(node)?;
        let max = self.max_message_bytes();
        let mut st = d.state.lock();
        if st.deposited.is_some() {
            return Err(TreeError::Immutable(node.path()));
        }
        let end = offset.saturating_add(data.len() as u64);
        if end > max {
            st.refused = Some(Refused::TooLarge { len: end, max });
            return Err(refused_error(node, Refused::TooLarge { len: end, max }));
        }
        let (start, end) = (offset as usize, end as usize);
        if st.buf.len() < end && self.drafts.resize(&mut st, end).is_err() {
            st.refused = Some(Refused::NoSpace);
            return Err(refused_error(node, Refused::NoSpace));
        }
        st.buf[start..end].copy_from_slice(data);
        st.dirty = true;
        st.writer = Some(pid);
        st.mtime = SystemTime::now();
        st.ctime = st.mtime;
        Ok(data.len())
    }

    /// Deposits a draft's content if it has unsaved bytes. Each `close(2)` asks (with the
    /// closing process in `by`) and hears the answer, but only the writer's own close
    /// deposits; `by: None` is the last release, which deposits whoever it is. An empty
    /// or private draft deposits nothing.
    pub fn flush(&self, node: &Node, by: Option<u32>) -> Result<(), TreeError> {
        let Node::Draft { .. } = node else {
            return Ok(());
        };
        let d = self.draft(node)?;
        if d.is_private() {
            return Ok(());
        }
        let Some(deposits) = self.deposits.as_ref() else {
            return Err(TreeError::ReadOnly(node.path()));
        };
        // The draft stays locked across the deposit, so two closes of one message (dup'd
        // descriptors) can never deposit it twice.
        let mut st = d.state.lock();
        if st.deposited.is_some() || !st.dirty || st.buf.is_empty() {
            return Ok(());
        }
        if by.is_some() && by != st.writer {
            return Ok(());
        }
        if let Some(why) = st.refused {
            // Part of a message is not the message: keep it unsent (still listed, so the
            // writer sees it was not sent) and say so at every close.
            log::warn!(
                "{}: not sent: a write to it was refused, so it holds only part of the \
                 message; truncate it and write it again, or remove it",
                node.path()
            );
            return Err(refused_error(node, why));
        }
        st.dirty = false;
        match deposits
            .depositor
            .deposit(&d.agent, &deposits.sender, &st.buf)
        {
            Ok(done) => {
                log::info!(
                    "{}: deposited as {} ({} bytes, wake: {:?})",
                    node.path(),
                    done.published.path.display(),
                    st.buf.len(),
                    done.wake
                );
                st.deposited = Some(done.published);
                st.last_used = std::time::Instant::now();
                self.drafts.deposited(&mut st);
                drop(st);
                self.drafts.shed_aliases();
                self.drafts.touch(&d.agent);
                Ok(())
            }
            Err(DepositError::Empty) => Ok(()),
            Err(e) => Err(TreeError::Deposit(node.path(), e)),
        }
    }

    /// The last handle on a draft closed: deposit what no flush did (errors can only be
    /// logged now). The alias grace runs from the deposit (or a later change of times or
    /// mode), not from reads, so a reader cannot keep an alias alive.
    pub fn release(&self, node: &Node) {
        if let Err(e) = self.flush(node, None) {
            log::warn!("{e} (at release; the writer was not told)");
        }
    }

    /// `truncate`/`ftruncate` of a draft.
    pub fn set_size(&self, node: &Node, size: u64) -> Result<(), TreeError> {
        let d = self.draft(node)?;
        let max = self.max_message_bytes();
        let mut st = d.state.lock();
        if st.deposited.is_some() {
            return Err(TreeError::Immutable(node.path()));
        }
        if size > max {
            let e = DepositError::TooLarge { len: size, max };
            return Err(TreeError::Deposit(node.path(), e));
        }
        if st.buf.len() as u64 != size {
            self.drafts
                .resize(&mut st, size as usize)
                .map_err(|_| TreeError::NoSpace(node.path()))?;
            if size == 0 {
                st.refused = None;
            }
            st.dirty = true;
            st.mtime = SystemTime::now();
        }
        Ok(())
    }

    /// Times and mode of a draft (kept in memory; a deposit's real file is not touched).
    pub fn set_meta(
        &self,
        node: &Node,
        atime: Option<SystemTime>,
        mtime: Option<SystemTime>,
        perm: Option<u16>,
    ) -> Result<(), TreeError> {
        let d = self.draft(node)?;
        let mut st = d.state.lock();
        if let Some(t) = atime {
            st.atime = t;
        }
        if let Some(t) = mtime {
            st.mtime = t;
        }
        if let Some(p) = perm {
            st.perm = p & 0o7777;
        }
        st.ctime = SystemTime::now();
        st.last_used = std::time::Instant::now();
        Ok(())
    }

    /// A node in `parent` that exists, or why not.
    fn existing(&self, parent: &Node, name: &OsStr) -> Result<Node, TreeError> {
        let c = self.child(parent, name)?;
        self.getattr(&c)?;
        Ok(c)
    }

    /// Removes draft `name` from inbox directory `parent`. A deposit already made stays.
    pub fn unlink(&self, parent: &Node, name: &OsStr) -> Result<(), TreeError> {
        let (_, agent) = self.deposits_for(parent, name)?;
        if self.drafts.remove(agent, name).is_some() {
            return Ok(());
        }
        Err(self.refusal(&self.existing(parent, name)?))
    }

    /// Renames a draft within one inbox. A private draft renamed to a public name is
    /// deposited then (editors that save through a temp file and a rename).
    pub fn rename(
        &self,
        parent: &Node,
        name: &OsStr,
        newparent: &Node,
        newname: &OsStr,
    ) -> Result<(), TreeError> {
        let (_, agent) = self.deposits_for(parent, name)?;
        let Some(d) = self.drafts.get(agent, name) else {
            return Err(self.refusal(&self.existing(parent, name)?));
        };
        if inbox_agent(newparent) != Some(agent) {
            let e = std::io::Error::from_raw_os_error(libc::EXDEV);
            return Err(TreeError::Io(newparent.join(newname), e));
        }
        if let Node::Backing(rel) = newparent
            && self.getattr(&Node::Backing(rel.join(newname))).is_ok()
        {
            return Err(TreeError::Immutable(newparent.join(newname)));
        }
        self.drafts.rename(agent, name, newname);
        if drafts::is_private(name) && !drafts::is_private(newname) {
            d.state.lock().dirty = true;
            let node = Node::Draft {
                agent: agent.to_string(),
                id: d.id,
                name: newname.to_os_string(),
            };
            self.flush(&node, None)?;
        }
        Ok(())
    }

    /// The backing path of a node that has one (for logs and tests).
    pub fn backing_path(&self, node: &Node) -> Option<PathBuf> {
        match node {
            Node::Backing(rel) => Some(self.ws.root().join(rel)),
            _ => None,
        }
    }
}

/// The record a tool directory (`steps/<id>/<NNN>/tools/<tool-id>`) holds, if `rel` is
/// one; the page grammar decides what a valid one is.
fn tool_record(rel: &Path) -> Option<RecordPath> {
    let parts: Vec<&str> = rel
        .components()
        .map(|c| c.as_os_str().to_str())
        .collect::<Option<_>>()?;
    match parts.as_slice() {
        [steps, agent, step, tools, tool]
            if *steps == STEPS_DIR && *tools == crate::paging::address::TOOLS_DIR =>
        {
            RecordPath::new(agent, step, tool)
        }
        _ => None,
    }
}

/// Whether a name in a tool directory is one the paging layer answers: a stream file,
/// or anything shaped like a page (`output.json#...`).
fn is_capture_name(name: &OsStr) -> bool {
    let b = name.as_bytes();
    Stream::ALL.iter().any(|s| s.as_str().as_bytes() == b)
        || (b.starts_with(crate::paging::address::OUTPUT_FILE.as_bytes()) && b.contains(&b'#'))
}

/// The agent whose inbox directory `node` is, if it is one.
fn inbox_agent(node: &Node) -> Option<&str> {
    match node {
        Node::Backing(rel) => inbox_agent_of(rel),
        _ => None,
    }
}

/// The agent whose inbox directory the workspace-relative `rel` is (`inbox/<id>`).
fn inbox_agent_of(rel: &Path) -> Option<&str> {
    let mut parts = rel.components();
    match (parts.next(), parts.next(), parts.next()) {
        (Some(first), Some(id), None) if first.as_os_str() == crate::workspace::INBOX_DIR => {
            id.as_os_str().to_str()
        }
        _ => None,
    }
}

fn mark_target(snap: &Snapshot, kind: &str, id: &str) -> Option<Oid> {
    snap.marks.get(kind)?.get(id).copied()
}

/// What a mark that points at a commit (or anything but a blob) reads as.
pub fn commit_mark_bytes(oid: Oid) -> Vec<u8> {
    format!("{oid}\n").into_bytes()
}

/// Where `names/<Name>` points.
pub fn name_target(id: &str) -> String {
    format!("../{AGENTS_DIR}/{id}")
}

impl Area {
    /// Whether a backing entry at `rel` (workspace-relative) is part of the view.
    fn shows(self, rel: &Path, st: &Stat) -> bool {
        let Some(name) = rel.file_name() else {
            return true;
        };
        let depth = rel.components().count();
        match self {
            Area::Steps => depth == 1 || !steps::is_harness_temp(name.as_bytes()),
            Area::Inbox => match depth {
                1 => true,
                2 => st.is_dir() && !name.as_bytes().starts_with(b"."),
                3 => st.is_file() && name.to_str().and_then(inbox::pending_sender).is_some(),
                _ => false,
            },
        }
    }
}

#[cfg(test)]
mod tests;
