//! Git nodes: `agents/<id>/...` (the committed tree at each agent's tip), `marks/<kind>/<id>`
//! (one file per mark ref) and `names/<Name>` (a symlink per uniquely named living agent).
//!
//! Guarantees: every answer about these nodes within one request comes from one refs
//! [`Snapshot`], and each node's mtime comes from the snapshot its content comes from, so
//! the kernel can never pair a new mtime with an old listing. Nothing is read from the
//! worktrees, which may be gone; nothing is written to `repo.git`.

use std::ffi::OsStr;
use std::sync::Arc;
use std::time::SystemTime;

use git2::{ObjectType, Oid};

use super::node::GitNode;
use super::{Attr, Child, Content, EXEC_PERM, ErrorKind, Kind, Node, Tree, TreeError};
use crate::workspace::AGENTS_DIR;
use crate::workspace::ids::is_component;
use crate::workspace::refs::{GitEntry, MAX_BLOB_BYTES, Snapshot, agent_ref};

/// The times of a node in an agent's tree.
#[derive(Debug, Clone, Copy)]
struct GitTimes {
    /// The tip commit's time: what files and links show.
    commit: SystemTime,
    /// What directories show: they change whenever the branch moves, even to an older
    /// commit, so the later of the commit's time and the move's.
    dirs: SystemTime,
}

/// The node `name` would be in git directory `g`.
pub(super) fn child(parent: &Node, g: &GitNode, name: &OsStr) -> Result<Node, TreeError> {
    let text = || -> Result<String, TreeError> {
        name.to_str()
            .filter(|s| is_component(s))
            .map(str::to_string)
            .ok_or_else(|| TreeError::not_found(parent.join(name)))
    };
    Ok(Node::git(match g {
        GitNode::MarksRoot => GitNode::MarkKind(text()?),
        GitNode::MarkKind(kind) => GitNode::Mark {
            kind: kind.clone(),
            id: text()?,
        },
        GitNode::AgentsRoot => GitNode::Agent {
            id: text()?,
            path: Vec::new(),
        },
        GitNode::Agent { id, path } => {
            let mut path = path.clone();
            path.push(text()?);
            GitNode::Agent {
                id: id.clone(),
                path,
            }
        }
        GitNode::NamesRoot => GitNode::Name(text()?),
        GitNode::Mark { .. } | GitNode::Name(_) | GitNode::InboxName(_) => {
            return Err(TreeError::new(parent.path(), ErrorKind::NotDir));
        }
    }))
}

fn mark_target(snap: &Snapshot, kind: &str, id: &str) -> Option<Oid> {
    snap.marks.get(kind)?.get(id).copied()
}

/// What a mark that points at a commit (or anything but a blob) reads as.
pub(crate) fn commit_mark_bytes(oid: Oid) -> Vec<u8> {
    format!("{oid}\n").into_bytes()
}

/// The id whose inbox `inbox/<name>` reaches: the one living agent wearing `name`;
/// `ENOTUNIQ` when two or more do (the log names them), `ENOENT` when none does.
fn inbox_of<'a>(snap: &'a Snapshot, node: &Node, name: &str) -> Result<&'a str, TreeError> {
    if let Some(id) = snap.names.get(name) {
        return Ok(id);
    }
    match snap.clashes.get(name) {
        Some(ids) => Err(TreeError::new(
            node.path(),
            ErrorKind::Ambiguous {
                name: name.to_string(),
                ids: ids.clone(),
            },
        )),
        None => Err(TreeError::not_found(node.path())),
    }
}

/// Where `names/<Name>` points.
pub(crate) fn name_target(id: &str) -> String {
    format!("../{AGENTS_DIR}/{id}")
}

impl Tree {
    /// The attributes of `g`, answered from `snap` (so that a listing reads the refs
    /// once, not once per entry).
    pub(super) fn git_attr_in(
        &self,
        snap: &Snapshot,
        node: &Node,
        g: &GitNode,
    ) -> Result<Attr, TreeError> {
        let not_found = || TreeError::not_found(node.path());
        let git_err = |e| TreeError::git(node.path(), e);
        match g {
            GitNode::MarksRoot | GitNode::AgentsRoot | GitNode::NamesRoot => {
                let mtime = snap.changed_at.unwrap_or(self.born);
                Ok(self.virtual_attr(node, Kind::Dir, 0, mtime))
            }
            GitNode::MarkKind(kind) => {
                if !snap.marks.contains_key(kind) {
                    return Err(not_found());
                }
                let mtime = snap.changed_at.unwrap_or(self.born);
                Ok(self.virtual_attr(node, Kind::Dir, 0, mtime))
            }
            GitNode::Mark { kind, id } => {
                let oid = mark_target(snap, kind, id).ok_or_else(not_found)?;
                let (otype, size) = self.refs.header(oid).map_err(git_err)?;
                let size = if otype == ObjectType::Blob {
                    size
                } else {
                    commit_mark_bytes(oid).len() as u64
                };
                let refname = snap.flavour.mark_ref(kind, id);
                let mtime = snap.moved_at(&refname).unwrap_or(self.born);
                Ok(self.virtual_attr(node, Kind::File, size, mtime))
            }
            GitNode::Agent { id, path } => {
                let (entry, times) = self.agent_entry(snap, node, id, path)?;
                self.entry_attr(node, entry, times)
            }
            GitNode::Name(name) => {
                let id = snap.names.get(name).ok_or_else(not_found)?;
                let mtime = snap.moved_at(&agent_ref(id)).unwrap_or(self.born);
                let len = name_target(id).len() as u64;
                Ok(self.virtual_attr(node, Kind::Symlink, len, mtime))
            }
            GitNode::InboxName(name) => {
                let id = inbox_of(snap, node, name)?;
                let mtime = snap.moved_at(&agent_ref(id)).unwrap_or(self.born);
                Ok(self.virtual_attr(node, Kind::Symlink, id.len() as u64, mtime))
            }
        }
    }

    /// Whether `name` in `inbox/` is an agent's name rather than an inbox on disk: not
    /// an entry there and not an agent's id (an id is taken first, as `litany message`
    /// takes it), but the name of one or more living agents (two answer `ENOTUNIQ` when
    /// looked up).
    pub(super) fn is_inbox_name(&self, name: &str) -> bool {
        let Ok(snap) = self.snapshot() else {
            return false;
        };
        !snap.agents.contains_key(name)
            && (snap.names.contains_key(name) || snap.clashes.contains_key(name))
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
            .ok_or_else(|| TreeError::not_found(node.path()))?;
        let parts: Vec<&str> = path.iter().map(String::as_str).collect();
        let entry = self
            .refs
            .entry_at(tip, &parts)
            .map_err(git_err)?
            .ok_or_else(|| TreeError::not_found(node.path()))?;
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

    fn entry_attr(&self, node: &Node, entry: GitEntry, times: GitTimes) -> Result<Attr, TreeError> {
        let header = |oid| {
            self.refs
                .header(oid)
                .map(|(_, size)| size)
                .map_err(|e| TreeError::git(node.path(), e))
        };
        Ok(match entry {
            // A directory of an agent's tree changes whenever its branch moves.
            GitEntry::Tree(_) | GitEntry::Gitlink(_) => {
                self.virtual_attr(node, Kind::Dir, 0, times.dirs)
            }
            GitEntry::Blob { oid, executable } => {
                let mut a = self.virtual_attr(node, Kind::File, header(oid)?, times.commit);
                if executable {
                    a.perm = EXEC_PERM;
                }
                a
            }
            GitEntry::Link(oid) => {
                self.virtual_attr(node, Kind::Symlink, header(oid)?, times.commit)
            }
        })
    }

    pub(super) fn git_list(&self, node: &Node, g: &GitNode) -> Result<Vec<Child>, TreeError> {
        let snap = self.snapshot()?;
        let children: Vec<(GitNode, &str)> = match g {
            GitNode::Agent { id, path } => return self.list_agent_dir(&snap, node, id, path),
            GitNode::Mark { .. } | GitNode::Name(_) | GitNode::InboxName(_) => {
                return Err(TreeError::new(node.path(), ErrorKind::NotDir));
            }
            GitNode::MarksRoot => snap
                .marks
                .keys()
                .map(|kind| (GitNode::MarkKind(kind.clone()), kind.as_str()))
                .collect(),
            GitNode::MarkKind(kind) => snap
                .marks
                .get(kind)
                .ok_or_else(|| TreeError::not_found(node.path()))?
                .keys()
                .map(|id| {
                    let mark = GitNode::Mark {
                        kind: kind.clone(),
                        id: id.clone(),
                    };
                    (mark, id.as_str())
                })
                .collect(),
            GitNode::AgentsRoot => snap
                .agents
                .keys()
                .map(|id| {
                    let agent = GitNode::Agent {
                        id: id.clone(),
                        path: Vec::new(),
                    };
                    (agent, id.as_str())
                })
                .collect(),
            GitNode::NamesRoot => snap
                .names
                .keys()
                .map(|name| (GitNode::Name(name.clone()), name.as_str()))
                .collect(),
        };
        let mut out = Vec::with_capacity(children.len());
        for (child, name) in children {
            let node = Node::git(child.clone());
            // A node that vanished between the snapshot and its stat is left out.
            match self.git_attr_in(&snap, &node, &child) {
                Ok(attr) => out.push(Child::new(name, node, attr)),
                Err(e) => log::debug!("{}: left out of its listing: {e}", node.path()),
            }
        }
        Ok(out)
    }

    fn list_agent_dir(
        &self,
        snap: &Snapshot,
        node: &Node,
        id: &str,
        path: &[String],
    ) -> Result<Vec<Child>, TreeError> {
        let (entry, times) = self.agent_entry(snap, node, id, path)?;
        let tree = match entry {
            GitEntry::Tree(oid) => oid,
            GitEntry::Gitlink(_) => return Ok(Vec::new()),
            _ => return Err(TreeError::new(node.path(), ErrorKind::NotDir)),
        };
        let entries = self
            .refs
            .list_tree(tree)
            .map_err(|e| TreeError::git(node.path(), e))?;
        let mut out = Vec::with_capacity(entries.len());
        for (name, entry) in entries {
            let mut p = path.to_vec();
            p.push(name.clone());
            let child = Node::git(GitNode::Agent {
                id: id.to_string(),
                path: p,
            });
            let attr = self.entry_attr(&child, entry, times)?;
            out.push(Child::new(name, child, attr));
        }
        Ok(out)
    }

    pub(super) fn git_open(&self, node: &Node, g: &GitNode) -> Result<Content, TreeError> {
        let git_err = |e| TreeError::git(node.path(), e);
        match g {
            GitNode::Mark { kind, id } => {
                let snap = self.snapshot()?;
                let oid = mark_target(&snap, kind, id)
                    .ok_or_else(|| TreeError::not_found(node.path()))?;
                let (otype, _) = self.refs.header(oid).map_err(git_err)?;
                Ok(Content::Bytes(if otype == ObjectType::Blob {
                    self.whole_blob(node, oid)?
                } else {
                    Arc::new(commit_mark_bytes(oid))
                }))
            }
            GitNode::Agent { id, path } => {
                match self.agent_entry(&*self.snapshot()?, node, id, path)?.0 {
                    GitEntry::Blob { oid, .. } => Ok(Content::Bytes(self.whole_blob(node, oid)?)),
                    GitEntry::Link(_) => Err(TreeError::new(node.path(), ErrorKind::Loop)),
                    GitEntry::Tree(_) | GitEntry::Gitlink(_) => {
                        Err(TreeError::new(node.path(), ErrorKind::IsDir))
                    }
                }
            }
            GitNode::Name(_) | GitNode::InboxName(_) => {
                Err(TreeError::new(node.path(), ErrorKind::Loop))
            }
            GitNode::MarksRoot
            | GitNode::MarkKind(_)
            | GitNode::AgentsRoot
            | GitNode::NamesRoot => Err(TreeError::new(node.path(), ErrorKind::IsDir)),
        }
    }

    /// Blob `oid`, the content of `node`, read whole: `EFBIG` past
    /// [`MAX_BLOB_BYTES`], which is said from its header without reading it.
    fn whole_blob(&self, node: &Node, oid: Oid) -> Result<Arc<Vec<u8>>, TreeError> {
        let git_err = |e| TreeError::git(node.path(), e);
        let (_, size) = self.refs.header(oid).map_err(git_err)?;
        if size > MAX_BLOB_BYTES {
            return Err(TreeError::new(
                node.path(),
                ErrorKind::TooBig {
                    size,
                    max: MAX_BLOB_BYTES,
                },
            ));
        }
        self.refs.blob(oid).map_err(git_err)
    }

    pub(super) fn git_readlink(&self, node: &Node, g: &GitNode) -> Result<Vec<u8>, TreeError> {
        match g {
            GitNode::Name(name) => {
                let snap = self.snapshot()?;
                let id = snap
                    .names
                    .get(name)
                    .ok_or_else(|| TreeError::not_found(node.path()))?;
                Ok(name_target(id).into_bytes())
            }
            GitNode::InboxName(name) => Ok(inbox_of(&*self.snapshot()?, node, name)?
                .as_bytes()
                .to_vec()),
            GitNode::Agent { id, path } => {
                match self.agent_entry(&*self.snapshot()?, node, id, path)?.0 {
                    GitEntry::Link(oid) => Ok(self.whole_blob(node, oid)?.to_vec()),
                    _ => Err(TreeError::new(node.path(), ErrorKind::NotSymlink)),
                }
            }
            _ => Err(TreeError::new(node.path(), ErrorKind::NotSymlink)),
        }
    }
}
