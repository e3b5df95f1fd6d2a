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

use crate::workspace::backing::{Backing, Stat};
use crate::workspace::refs::{GitEntry, Refs, Snapshot};
use crate::workspace::{AGENTS_DIR, Workspace, ids::is_component, inbox, steps};

/// Permission bits of what the view shows: records and git content are read-only.
pub const FILE_PERM: u16 = 0o444;
pub const EXEC_PERM: u16 = 0o555;
pub const DIR_PERM: u16 = 0o555;
pub const LINK_PERM: u16 = 0o777;

/// What kind of thing a node is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    Dir,
    File,
    Symlink,
}

/// What names a node for as long as it exists: a backing file by its device and inode
/// (names in `inbox/` are reused, so a name is never enough), anything derived from git by
/// the node itself.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Identity {
    Backing { dev: u64, ino: u64 },
    Virtual(Node),
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

/// One entry of a listing.
#[derive(Debug, Clone)]
pub struct Child {
    pub name: OsString,
    pub node: Node,
    pub attr: Attr,
}

/// What an open file reads from.
#[derive(Debug)]
pub enum Content {
    /// A backing file, opened beneath the root without following symlinks.
    File(File),
    /// Bytes derived when the file was opened (git blobs, marks).
    Bytes(Arc<Vec<u8>>),
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
        })
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
        let perm = match kind {
            Kind::Dir => DIR_PERM,
            Kind::File => FILE_PERM,
            Kind::Symlink => LINK_PERM,
        };
        Attr {
            kind,
            size,
            perm,
            nlink: if kind == Kind::Dir { 2 } else { 1 },
            mtime,
            ctime: mtime,
            atime: mtime,
            identity: Identity::Virtual(node.clone()),
        }
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
        let perm = match kind {
            Kind::Dir => DIR_PERM,
            Kind::File => FILE_PERM,
            Kind::Symlink => LINK_PERM,
        };
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
            Node::MarkKind(_) | Node::Mark { .. } | Node::Agent { .. } | Node::Name(_) => {
                self.attr_in(&*self.snapshot()?, node)
            }
            _ => self.attr_in(&Snapshot::default(), node),
        }
    }

    /// The attributes of `node`, with git-derived nodes answered from `snap` (so that a
    /// listing reads the refs once, not once per entry).
    fn attr_in(&self, snap: &Snapshot, node: &Node) -> Result<Attr, TreeError> {
        match node {
            Node::Root | Node::MarksRoot | Node::AgentsRoot | Node::NamesRoot => {
                Ok(self.virtual_attr(node, Kind::Dir, 0, self.born))
            }
            Node::Backing(rel) => {
                let st = self
                    .backing
                    .lstat(rel)
                    .map_err(|e| TreeError::io(node.path(), e))?;
                if !Area::of(rel).shows(rel, &st) {
                    return Err(TreeError::NotFound(node.path()));
                }
                Ok(self.backing_attr(&st))
            }
            Node::MarkKind(kind) => {
                if !snap.marks.contains_key(kind) {
                    return Err(TreeError::NotFound(node.path()));
                }
                let mtime = self
                    .refs
                    .ref_mtime(&format!("{}{kind}", snap.flavour.mark_root()));
                Ok(self.virtual_attr(node, Kind::Dir, 0, mtime.unwrap_or(self.born)))
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
                let refname = format!("{}{kind}/{id}", snap.flavour.mark_root());
                let mtime = self.refs.ref_mtime(&refname).unwrap_or(self.born);
                Ok(self.virtual_attr(node, Kind::File, size, mtime))
            }
            Node::Agent { id, path } => {
                let tip = *snap
                    .agents
                    .get(id)
                    .ok_or_else(|| TreeError::NotFound(node.path()))?;
                let parts: Vec<&str> = path.iter().map(String::as_str).collect();
                let entry = self
                    .refs
                    .entry_at(tip, &parts)
                    .map_err(|e| TreeError::git(node.path(), e))?
                    .ok_or_else(|| TreeError::NotFound(node.path()))?;
                let mtime = self
                    .refs
                    .commit_time(tip)
                    .map_err(|e| TreeError::git(node.path(), e))?;
                self.git_attr(node, entry, mtime)
            }
            Node::Name(name) => {
                let id = snap
                    .names
                    .get(name)
                    .ok_or_else(|| TreeError::NotFound(node.path()))?;
                let mtime = self
                    .refs
                    .ref_mtime(&format!("refs/heads/agents/{id}"))
                    .unwrap_or(self.born);
                Ok(self.virtual_attr(node, Kind::Symlink, name_target(id).len() as u64, mtime))
            }
        }
    }

    fn git_attr(&self, node: &Node, entry: GitEntry, mtime: SystemTime) -> Result<Attr, TreeError> {
        Ok(match entry {
            GitEntry::Tree(_) | GitEntry::Gitlink(_) => {
                self.virtual_attr(node, Kind::Dir, 0, mtime)
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
            Node::Backing(rel) => Node::Backing(rel.join(name)),
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
            Node::Mark { .. } | Node::Name(_) => return Err(TreeError::NotDir(parent.path())),
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
                    .filter(|(name, st)| Area::of(rel).shows(&rel.join(name), st))
                    .collect();
                entries.sort_by(|a, b| a.0.cmp(&b.0));
                for (name, st) in entries {
                    out.push(Child {
                        node: Node::Backing(rel.join(&name)),
                        attr: self.backing_attr(&st),
                        name,
                    });
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
                let snap = self.snapshot()?;
                let tip = *snap
                    .agents
                    .get(id)
                    .ok_or_else(|| TreeError::NotFound(node.path()))?;
                let parts: Vec<&str> = path.iter().map(String::as_str).collect();
                let entry = self
                    .refs
                    .entry_at(tip, &parts)
                    .map_err(|e| TreeError::git(node.path(), e))?
                    .ok_or_else(|| TreeError::NotFound(node.path()))?;
                let mtime = self
                    .refs
                    .commit_time(tip)
                    .map_err(|e| TreeError::git(node.path(), e))?;
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
                    let attr = self.git_attr(&child, entry, mtime)?;
                    out.push(Child {
                        name: name.into(),
                        node: child,
                        attr,
                    });
                }
            }
            Node::NamesRoot => {
                let snap = self.snapshot()?;
                for name in snap.names.keys() {
                    self.push_virtual(&snap, &mut out, Node::Name(name.clone()), name);
                }
            }
            Node::Mark { .. } | Node::Name(_) => return Err(TreeError::NotDir(node.path())),
        }
        Ok(out)
    }

    /// Adds `node` to a listing unless it vanished between the snapshot and its stat.
    fn push_virtual(&self, snap: &Snapshot, out: &mut Vec<Child>, node: Node, name: &str) {
        match self.attr_in(snap, &node) {
            Ok(attr) => out.push(Child {
                name: name.into(),
                node,
                attr,
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
                let snap = self.snapshot()?;
                let tip = *snap
                    .agents
                    .get(id)
                    .ok_or_else(|| TreeError::NotFound(node.path()))?;
                let parts: Vec<&str> = path.iter().map(String::as_str).collect();
                match self
                    .refs
                    .entry_at(tip, &parts)
                    .map_err(|e| TreeError::git(node.path(), e))?
                {
                    Some(GitEntry::Blob { oid, .. }) => {
                        let bytes = self
                            .refs
                            .blob(oid)
                            .map_err(|e| TreeError::git(node.path(), e))?;
                        Ok(Content::Bytes(Arc::new(bytes)))
                    }
                    Some(GitEntry::Link(_)) => Err(TreeError::Loop(node.path())),
                    Some(_) => Err(TreeError::IsDir(node.path())),
                    None => Err(TreeError::NotFound(node.path())),
                }
            }
            Node::Name(_) => Err(TreeError::Loop(node.path())),
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
                let snap = self.snapshot()?;
                let tip = *snap
                    .agents
                    .get(id)
                    .ok_or_else(|| TreeError::NotFound(node.path()))?;
                let parts: Vec<&str> = path.iter().map(String::as_str).collect();
                match self
                    .refs
                    .entry_at(tip, &parts)
                    .map_err(|e| TreeError::git(node.path(), e))?
                {
                    Some(GitEntry::Link(oid)) => self
                        .refs
                        .blob(oid)
                        .map_err(|e| TreeError::git(node.path(), e)),
                    _ => Err(TreeError::Invalid(node.path())),
                }
            }
            _ => Err(TreeError::Invalid(node.path())),
        }
    }

    /// The backing path of a node that has one (for logs and tests).
    pub fn backing_path(&self, node: &Node) -> Option<PathBuf> {
        match node {
            Node::Backing(rel) => Some(self.ws.root().join(rel)),
            _ => None,
        }
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
