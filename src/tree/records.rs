//! Record views: names under `steps/<id>/` that read an agent's records for people,
//! derived from them and never stored.
//!
//! | name | what it reads |
//! |---|---|
//! | `steps/<id>/latest` | a symlink to the highest-numbered step directory, so `tail -f steps/<id>/latest/response.md` follows an agent |
//! | `steps/<id>/<NNN>/response.md` | the step's `response.json` rendered as text ([`crate::records`]); grows as the model streams |
//! | `steps/<id>/transcript.md` | the agent's committed conversation at its branch tip |
//!
//! Guarantees: these names never shadow a record (litany writes only numbered step
//! directories and `driver.log` under `steps/<id>/`, and fixed record names in a step,
//! CONTRACT §4.1; a file of the same name on disk wins); they follow the same
//! confinement as the records they are made from (under `--agent ID`, only ID's); their
//! sizes are exact, from the one rendering that reads serve.

use std::ffi::OsStr;
use std::fs::File;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use super::node::{Backed, Place, RecordView};
use super::{Attr, Child, Content, EAGER_STREAMS_BYTES, ErrorKind, Kind, NO_TTL, Node, Tree};
use super::{TreeError, WATCHED_TTL, system_time};
use crate::paging::CaptureKey;
use crate::workspace::STEPS_DIR;
use crate::workspace::backing::{Stat, fstat};
use crate::workspace::steps::{META_FILE, RESPONSE_FILE, step_number};

/// The name of the symlink to an agent's highest-numbered step directory.
pub const LATEST: &str = "latest";
/// The text rendering beside each `response.json`.
pub const RESPONSE_MD: &str = "response.md";
/// The agent's conversation, beside its step directories.
pub const TRANSCRIPT_MD: &str = "transcript.md";
/// The default bound of the renderings kept ([`crate::records::Records`]).
pub const DEFAULT_RECORDS_CACHE_BYTES: usize = 64 << 20;

/// The record view `name` names in the backing directory at `place`, if any.
pub(super) fn child(place: &Place, name: &OsStr) -> Option<RecordView> {
    let name = name.to_str()?;
    match (place, name) {
        (Place::AgentSteps { agent }, LATEST) => Some(RecordView::Latest {
            agent: agent.clone(),
        }),
        (Place::AgentSteps { agent }, TRANSCRIPT_MD) => Some(RecordView::Transcript {
            agent: agent.clone(),
        }),
        (Place::Step { agent, step }, RESPONSE_MD) => Some(RecordView::Response {
            agent: agent.clone(),
            step: step.clone(),
        }),
        _ => None,
    }
}

/// The record view whose content derives from backing entry `name` of `dir`, for
/// invalidating it when that entry changes.
pub fn derived_from(dir: &Path, name: &OsStr) -> Option<Node> {
    let Place::Step { agent, step } = Place::of(dir) else {
        return None;
    };
    (name == RESPONSE_FILE || name == META_FILE)
        .then_some(Node::Record(RecordView::Response { agent, step }))
}

fn step_dir(agent: &str, step: &str) -> PathBuf {
    Path::new(STEPS_DIR).join(agent).join(step)
}

/// An open `response.json`: what a `response.md` is rendered from.
struct Response {
    file: File,
    key: CaptureKey,
    st: Stat,
    /// Nothing will be appended any more: the step has its `meta.json` or a successor.
    closed: bool,
}

impl Tree {
    /// The refs changed: re-reads them, and gives the nodes whose answers changed with
    /// them beyond the git nodes themselves (which are kept only briefly): the listing of
    /// `steps/<id>/` of an agent that came or went (its `transcript.md` with it), and the
    /// `transcript.md` of an agent whose branch moved.
    pub fn refs_changed(&self) -> Vec<Node> {
        let before = self.refs.snapshot().ok();
        self.refs.invalidate();
        let (Some(before), Ok(after)) = (before, self.refs.snapshot()) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        let ids: std::collections::BTreeSet<&String> =
            before.agents.keys().chain(after.agents.keys()).collect();
        for id in ids {
            match (before.agents.get(id), after.agents.get(id)) {
                (Some(a), Some(b)) if a == b => {}
                (Some(_), Some(_)) => {
                    out.push(Node::Record(RecordView::Transcript { agent: id.clone() }))
                }
                _ => {
                    out.push(Node::backing(Path::new(STEPS_DIR).join(id)));
                    out.push(Node::Record(RecordView::Transcript { agent: id.clone() }));
                }
            }
        }
        out
    }

    /// The highest-numbered step directory of `agent`, with the attributes of the agent's
    /// directory; `None` when it has none.
    fn latest_step(&self, agent: &str) -> Result<Option<(String, Attr)>, TreeError> {
        let dir = Backed::new(Path::new(STEPS_DIR).join(agent));
        let node = Node::Backing(dir.clone());
        let dir_attr = self.backing_getattr(&node, &dir)?;
        let entries = self
            .backing
            .list(dir.rel())
            .map_err(|e| TreeError::io(node.path(), e))?;
        Ok(entries
            .into_iter()
            .filter(|(_, st)| st.is_dir())
            .filter_map(|(n, _)| Some((step_number(n.as_bytes())?, n)))
            .max()
            .and_then(|(_, n)| n.into_string().ok())
            .map(|n| (n, dir_attr)))
    }

    /// The `response.json` of a step, opened beneath the root.
    fn response(&self, node: &Node, agent: &str, step: &str) -> Result<Response, TreeError> {
        let dir = step_dir(agent, step);
        let file = self
            .backing
            .open_file(&dir.join(RESPONSE_FILE))
            .map_err(|e| TreeError::io(node.path(), e))?;
        let st = fstat(&file).map_err(|e| TreeError::io(node.path(), e))?;
        let closed = self.backing.lstat(&dir.join(META_FILE)).is_ok()
            || self.latest_step(agent)?.is_some_and(|(latest, _)| {
                step_number(latest.as_bytes()) > step_number(step.as_bytes())
            });
        Ok(Response {
            file,
            key: CaptureKey::from_stat(&st),
            st,
            closed,
        })
    }

    fn response_len(&self, node: &Node, r: &Response) -> Result<u64, TreeError> {
        self.records
            .response_len(&r.file, r.key, r.closed)
            .map_err(|e| TreeError::io(node.path(), e))
    }

    /// `transcript.md` at the agent's tip, and the tip's commit time.
    fn transcript(&self, node: &Node, agent: &str) -> Result<(Arc<Vec<u8>>, Attr), TreeError> {
        let snap = self.snapshot()?;
        let tip = *snap
            .agents
            .get(agent)
            .ok_or_else(|| TreeError::not_found(node.path()))?;
        let git = |e| TreeError::git(node.path(), e);
        let bytes = self.records.transcript(&self.refs, tip).map_err(git)?;
        let mtime = self.refs.commit_time(tip).map_err(git)?;
        let attr = self.virtual_attr(node, Kind::File, bytes.len() as u64, mtime);
        Ok((bytes, attr))
    }

    pub(super) fn record_attr(&self, node: &Node, v: &RecordView) -> Result<Attr, TreeError> {
        self.record_may_see(node, v)?;
        match v {
            RecordView::Latest { agent } => {
                let (step, dir) = self
                    .latest_step(agent)?
                    .ok_or_else(|| TreeError::not_found(node.path()))?;
                let mut a = self.virtual_attr(node, Kind::Symlink, step.len() as u64, dir.mtime);
                a.ctime = dir.ctime;
                Ok(a)
            }
            RecordView::Response { agent, step } => {
                let r = self.response(node, agent, step)?;
                let len = self.response_len(node, &r)?;
                let mut a = self.virtual_attr(node, Kind::File, len, system_time(r.st.mtime));
                a.ctime = system_time(r.st.ctime);
                Ok(a)
            }
            RecordView::Transcript { agent } => Ok(self.transcript(node, agent)?.1),
        }
    }

    /// How long the kernel may keep a record view's attributes: a response that may
    /// still grow not at all (`tail -f` polls its size), a finished one as long as its
    /// step directory is watched (a change to its `response.json` is invalidated as it
    /// happens, [`derived_from`]).
    pub(super) fn record_ttl(&self, v: &RecordView) -> Option<Duration> {
        let RecordView::Response { agent, step } = v else {
            return None;
        };
        let dir = step_dir(agent, step);
        let done = self.backing.lstat(&dir.join(META_FILE)).is_ok();
        Some(if done && self.watched(&dir) {
            WATCHED_TTL
        } else {
            NO_TTL
        })
    }

    pub(super) fn record_readlink(
        &self,
        node: &Node,
        v: &RecordView,
    ) -> Result<Vec<u8>, TreeError> {
        self.record_may_see(node, v)?;
        match v {
            RecordView::Latest { agent } => self
                .latest_step(agent)?
                .map(|(step, _)| step.into_bytes())
                .ok_or_else(|| TreeError::not_found(node.path())),
            _ => Err(TreeError::new(node.path(), ErrorKind::NotSymlink)),
        }
    }

    pub(super) fn record_open(&self, node: &Node, v: &RecordView) -> Result<Content, TreeError> {
        self.record_may_see(node, v)?;
        match v {
            RecordView::Latest { .. } => Err(TreeError::new(node.path(), ErrorKind::Loop)),
            RecordView::Response { agent, step } => {
                let r = self.response(node, agent, step)?;
                Ok(Content::Response {
                    file: r.file,
                    key: r.key,
                    closed: r.closed,
                })
            }
            RecordView::Transcript { agent } => Ok(Content::Bytes(self.transcript(node, agent)?.0)),
        }
    }

    /// Reads of an open `response.md`.
    pub(super) fn read_response(
        &self,
        node: &Node,
        file: &File,
        key: CaptureKey,
        closed: bool,
        offset: u64,
        size: u32,
    ) -> Result<Vec<u8>, TreeError> {
        // Each read renders what was appended since: `tail -f` and `less +F` see the
        // model's words as they stream, through the one open file.
        let key = CaptureKey::of(file).unwrap_or(key);
        self.records
            .response_read(file, key, closed, offset, u64::from(size))
            .map_err(|e| TreeError::io(node.path(), e))
    }

    fn record_may_see(&self, node: &Node, v: &RecordView) -> Result<(), TreeError> {
        match &self.confined {
            Some(me) if me != v.agent() => Err(TreeError::not_found(node.path())),
            _ => Ok(()),
        }
    }

    /// Adds the record views of the backing directory at `place` to its listing. A
    /// `response.md` whose `response.json` is over [`EAGER_STREAMS_BYTES`] and not yet
    /// rendered is listed without rendering it (a walk must not render every record);
    /// its size is found at the first lookup or stat.
    pub(super) fn push_record_views(&self, out: &mut Vec<Child>, place: &Place) {
        let views: Vec<RecordView> = match place {
            Place::AgentSteps { agent } => vec![
                RecordView::Latest {
                    agent: agent.clone(),
                },
                RecordView::Transcript {
                    agent: agent.clone(),
                },
            ],
            Place::Step { agent, step } if out.iter().any(|c| c.name == RESPONSE_FILE) => {
                vec![RecordView::Response {
                    agent: agent.clone(),
                    step: step.clone(),
                }]
            }
            _ => return,
        };
        for view in views {
            let name = match &view {
                RecordView::Latest { .. } => LATEST,
                RecordView::Response { .. } => RESPONSE_MD,
                RecordView::Transcript { .. } => TRANSCRIPT_MD,
            };
            if out.iter().any(|c| c.name == name) {
                continue;
            }
            let node = Node::Record(view);
            if let Node::Record(RecordView::Response { agent, step }) = &node
                && let Some(child) = self.lazy_response(&node, agent, step)
            {
                out.push(child);
                continue;
            }
            match self.getattr(&node) {
                Ok(attr) => out.push(Child::new(name, node, attr)),
                Err(e) => log::debug!("{}: not listed: {e}", node.path()),
            }
        }
    }

    /// A `response.md` listed without rendering, when its record is large.
    fn lazy_response(&self, node: &Node, agent: &str, step: &str) -> Option<Child> {
        let st = self
            .backing
            .lstat(&step_dir(agent, step).join(RESPONSE_FILE))
            .ok()?;
        if st.size <= EAGER_STREAMS_BYTES {
            return None;
        }
        let mut attr = self.virtual_attr(node, Kind::File, 0, system_time(st.mtime));
        attr.ctime = system_time(st.ctime);
        let mut child = Child::new(RESPONSE_MD, node.clone(), attr);
        child.ttl = NO_TTL;
        Some(child)
    }
}
