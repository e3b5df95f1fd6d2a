//! Record views: names under `steps/<id>/` that read an agent's records for people,
//! derived from them and never stored.
//!
//! | name | what it reads |
//! |---|---|
//! | `steps/<id>/latest` | a symlink to the highest-numbered step directory, so `tail -f steps/<id>/latest/response.md` follows an agent |
//! | `steps/<id>/<NNN>/response.md` | the step's `response.json` rendered as text ([`crate::records`]); grows as the model streams |
//! | `steps/<id>/transcript.md` | the agent's conversation: the committed entries at its branch tip, then where it stands now ([`crate::records::live`], gathered in `live.rs`) |
//!
//! Guarantees: these names never shadow a record (litany writes only numbered step
//! directories and `driver.log` under `steps/<id>/`, and fixed record names in a step,
//! CONTRACT §4.1; a file of the same name on disk wins); they follow the same
//! confinement as the records they are made from (under `--agent ID`, only ID's); their
//! sizes are exact, from the one rendering that reads serve. An open `transcript.md`
//! serves the view it last took while a read falls inside it (so `cat` reads one
//! consistent file) and takes the view afresh for a read that reaches its end (so
//! `tail -f` and `less +F` see it grow).

use std::ffi::OsStr;
use std::fs::File;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use parking_lot::Mutex;

use super::node::{Backed, Place, RecordView};
use super::{Attr, Child, Content, EAGER_STREAMS_BYTES, ErrorKind, Kind, NO_TTL, Node, Tree};
use super::{TreeError, WATCHED_TTL, kept_while};
use crate::paging::CaptureKey;
use crate::records::live::View;
use crate::workspace::STEPS_DIR;
use crate::workspace::backing::Stat;
use crate::workspace::steps::{META_FILE, RESPONSE_FILE, step_number};

/// The name of the symlink to an agent's highest-numbered step directory.
pub const LATEST: &str = "latest";
/// The text rendering beside each `response.json`.
pub const RESPONSE_MD: &str = "response.md";
/// The agent's conversation, beside its step directories.
pub const TRANSCRIPT_MD: &str = "transcript.md";
/// The default bound of the renderings kept ([`crate::records::Records`]).
pub const DEFAULT_RECORDS_CACHE_BYTES: usize = 64 << 20;

/// The record view `name` names in backing directory `dir`, at `place`, if any.
pub(super) fn child(dir: &Backed, place: &Place, name: &OsStr) -> Option<RecordView> {
    let name = name.to_str()?;
    match (place, name) {
        (Place::AgentSteps { agent }, LATEST) => Some(RecordView::Latest {
            agent: agent.to_string(),
        }),
        (Place::AgentSteps { agent }, TRANSCRIPT_MD) => Some(RecordView::Transcript {
            agent: agent.to_string(),
        }),
        (Place::Step { .. }, RESPONSE_MD) => Some(RecordView::Response { step: dir.clone() }),
        _ => None,
    }
}

/// The record view whose content derives from backing entry `name` of `dir`, for
/// invalidating it when that entry changes: a step's `response.md` from its
/// `response.json` and `meta.json`, an agent's `latest` from every entry of its
/// `steps/<id>/` (its target is the highest step, its times the directory's).
pub fn derived_from(dir: &Path, name: &OsStr) -> Option<Node> {
    match Place::of(dir) {
        Place::Step { .. } => (name == RESPONSE_FILE || name == META_FILE).then(|| {
            Node::record(RecordView::Response {
                step: Backed::new(dir),
            })
        }),
        Place::AgentSteps { agent } => Some(Node::record(RecordView::Latest {
            agent: agent.to_string(),
        })),
        _ => None,
    }
}

/// The agent and step of a `response.md`'s step directory (always a step directory, as
/// [`child`] and [`derived_from`] make it).
fn response_parts<'a>(node: &Node, step: &'a Backed) -> Result<(&'a str, &'a str), TreeError> {
    step.step_parts()
        .ok_or_else(|| TreeError::not_found(node.path()))
}

fn step_dir(agent: &str, step: &str) -> PathBuf {
    Path::new(STEPS_DIR).join(agent).join(step)
}

/// An agent's `steps/<id>/`, where its `latest` and `transcript.md` are listed.
fn agent_steps(agent: &str) -> Backed {
    Backed::new(Path::new(STEPS_DIR).join(agent))
}

/// What a listing of a step's directory knows of it: its descriptor, and whether it
/// holds a `meta.json`.
#[derive(Clone, Copy)]
struct Listed<'a> {
    dir: &'a OwnedFd,
    done: bool,
}

/// An open `transcript.md`: the view it last served.
#[derive(Debug)]
pub struct TranscriptOpen {
    agent: String,
    view: Mutex<Arc<View>>,
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
    pub(crate) fn refs_changed(&self) -> Vec<Node> {
        let mut reported = self.refs_reported.lock();
        let before = reported.take().or_else(|| self.refs.snapshot().ok());
        self.refs.invalidate();
        let after = self.refs.snapshot().ok();
        reported.clone_from(&after);
        drop(reported);
        let (Some(before), Some(after)) = (before, after) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        let ids: std::collections::BTreeSet<&String> =
            before.agents.keys().chain(after.agents.keys()).collect();
        for id in ids {
            match (before.agents.get(id), after.agents.get(id)) {
                (Some(a), Some(b)) if a == b => {}
                (Some(_), Some(_)) => {
                    out.push(Node::record(RecordView::Transcript { agent: id.clone() }))
                }
                _ => {
                    self.agents_changed
                        .lock()
                        .insert(id.clone(), SystemTime::now());
                    out.push(Node::backing(Path::new(STEPS_DIR).join(id)));
                    out.push(Node::record(RecordView::Transcript { agent: id.clone() }));
                }
            }
        }
        out
    }

    /// The highest-numbered step directory of `agent`, with the attributes of the agent's
    /// directory; `None` when it has none.
    pub(super) fn latest_step(&self, agent: &str) -> Result<Option<(String, Attr)>, TreeError> {
        let dir = agent_steps(agent);
        let node = Node::Backing(dir.clone());
        let dir_attr = self.backing_getattr(&node, &dir)?;
        let entries = self
            .backing
            .list(&dir.rel())
            .map_err(|e| TreeError::io(node.path(), e))?;
        Ok(entries
            .into_iter()
            .filter(|(_, st)| st.is_dir())
            .filter_map(|(n, _)| Some((step_number(n.as_bytes())?, n)))
            .max()
            .and_then(|(_, n)| n.into_string().ok())
            .map(|n| (n, dir_attr)))
    }

    /// The `response.json` of a step, opened beneath the root; or, from a listing of the
    /// step's directory, opened from its descriptor, with whether the listing holds a
    /// `meta.json`.
    fn response(
        &self,
        node: &Node,
        agent: &str,
        step: &str,
        listed: Option<Listed<'_>>,
    ) -> Result<Response, TreeError> {
        let io = |e| TreeError::io(node.path(), e);
        let (file, st, done) = match listed {
            Some(Listed { dir, done }) => {
                let (f, st) = self
                    .backing
                    .open_file_in(dir, OsStr::new(RESPONSE_FILE))
                    .map_err(io)?;
                (f, st, done)
            }
            None => {
                let dir = step_dir(agent, step);
                let (f, st) = self
                    .backing
                    .open_file(&dir.join(RESPONSE_FILE))
                    .map_err(io)?;
                (f, st, self.backing.lstat(&dir.join(META_FILE)).is_ok())
            }
        };
        let closed = done
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

    /// `transcript.md` as `agent` stands now ([`crate::records::live`]), and its times:
    /// the newest of the tip's commit time and the live records'.
    fn transcript(&self, node: &Node, agent: &str) -> Result<(Arc<View>, Attr), TreeError> {
        let mut snap = self.snapshot()?;
        let mut tip = *snap
            .agents
            .get(agent)
            .ok_or_else(|| TreeError::not_found(node.path()))?;
        let git = |e| TreeError::git(node.path(), e);
        let (mut facts, mut newest) = self.live_facts(agent, tip, &snap)?;
        if facts.wound.as_ref().is_some_and(|w| w.unsure) {
            // The records say the step's entry was committed after the tip this snapshot
            // holds, and its executor is gone: a snapshot older than the commit, most
            // likely. Read the refs again before calling it a wound.
            self.refs.invalidate();
            snap = self.snapshot()?;
            tip = *snap
                .agents
                .get(agent)
                .ok_or_else(|| TreeError::not_found(node.path()))?;
            (facts, newest) = self.live_facts(agent, tip, &snap)?;
        }
        let view = self
            .records
            .transcript_view(&self.refs, tip, facts)
            .map_err(|e| match e {
                crate::records::ViewError::Git(e) => TreeError::git(node.path(), e),
                crate::records::ViewError::Io(e) => TreeError::io(node.path(), e),
            })?;
        let mut mtime = self.refs.commit_time(tip).map_err(git)?;
        if let Ok(secs) = u64::try_from(newest) {
            mtime = mtime.max(SystemTime::UNIX_EPOCH + Duration::from_secs(secs));
        }
        let attr = self.virtual_attr(node, Kind::File, view.len(), mtime);
        Ok((Arc::new(view), attr))
    }

    /// Reads of an open `transcript.md`, into `out`: from the view it holds while the read
    /// falls inside it, else from a fresh one (see the module docs).
    pub(super) fn read_transcript(
        &self,
        node: &Node,
        open: &TranscriptOpen,
        offset: u64,
        size: u32,
        out: &mut Vec<u8>,
    ) -> Result<(), TreeError> {
        let end = offset.saturating_add(u64::from(size));
        let view = {
            let held = Arc::clone(&open.view.lock());
            if end <= held.len() {
                held
            } else {
                let fresh = self.transcript(node, &open.agent)?.0;
                *open.view.lock() = Arc::clone(&fresh);
                fresh
            }
        };
        self.records
            .view_read(&view, offset, u64::from(size), out)
            .map_err(|e| TreeError::io(node.path(), e))
    }

    pub(super) fn record_attr(&self, node: &Node, v: &RecordView) -> Result<Attr, TreeError> {
        self.record_may_see(node, v)?;
        match v {
            RecordView::Latest { agent } => {
                let (step, dir) = self
                    .latest_step(agent)?
                    .ok_or_else(|| TreeError::not_found(node.path()))?;
                Ok(self.latest_attr(node, &step, &dir))
            }
            RecordView::Response { step } => {
                let (agent, step) = response_parts(node, step)?;
                let r = self.response(node, agent, step, None)?;
                self.response_attr(node, &r)
            }
            RecordView::Transcript { agent } => Ok(self.transcript(node, agent)?.1),
        }
    }

    fn response_attr(&self, node: &Node, r: &Response) -> Result<Attr, TreeError> {
        let len = self.response_len(node, r)?;
        Ok(self.derived_attr(node, len, &r.st))
    }

    /// How long the kernel may keep a record view's name and attributes: a response that
    /// may still grow not at all (`tail -f` polls its size), a finished one as long as
    /// its step directory is watched (a change to its `response.json` is invalidated as
    /// it happens, [`derived_from`]); `latest` and `transcript.md` as long as what they
    /// derive from is watched, else briefly.
    pub(super) fn record_ttl(&self, v: &RecordView) -> Duration {
        match v {
            RecordView::Response { step } => {
                let done = self.backing.lstat(&step.rel().join(META_FILE)).is_ok();
                self.response_ttl(step, done)
            }
            // Its target and times change with the entries of `steps/<id>/` only, which
            // its watch reports ([`derived_from`]).
            RecordView::Latest { agent } => kept_while(self.watched(agent_steps(agent).shared())),
            // Its live tail changes with the step records and the inbox, and `tail -f`
            // polls its size: never kept.
            RecordView::Transcript { .. } => NO_TTL,
        }
    }

    fn response_ttl(&self, dir: &Backed, done: bool) -> Duration {
        if done && self.watched(dir.shared()) {
            WATCHED_TTL
        } else {
            NO_TTL
        }
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
            RecordView::Response { step } => {
                let (agent, step) = response_parts(node, step)?;
                let r = self.response(node, agent, step, None)?;
                Ok(Content::Response {
                    file: r.file,
                    key: r.key,
                    closed: r.closed,
                })
            }
            RecordView::Transcript { agent } => Ok(Content::Transcript(TranscriptOpen {
                agent: agent.clone(),
                view: Mutex::new(self.transcript(node, agent)?.0),
            })),
        }
    }

    /// Reads of an open `response.md`, into `out`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn read_response(
        &self,
        node: &Node,
        file: &File,
        key: CaptureKey,
        closed: bool,
        offset: u64,
        size: u32,
        out: &mut Vec<u8>,
    ) -> Result<(), TreeError> {
        // Each read renders what was appended since: `tail -f` and `less +F` see the
        // model's words as they stream, through the one open file.
        let key = CaptureKey::of(file).unwrap_or(key);
        self.records
            .response_read_into(file, key, closed, offset, u64::from(size), out)
            .map_err(|e| TreeError::io(node.path(), e))
    }

    fn record_may_see(&self, node: &Node, v: &RecordView) -> Result<(), TreeError> {
        match &self.confined {
            Some(me) if me != v.agent() => Err(TreeError::not_found(node.path())),
            _ => Ok(()),
        }
    }

    /// Adds the record views of the backing directory at `place` to its listing, from
    /// what the listing already holds: which step is the highest, whether a step has its
    /// `response.json` and `meta.json`, and their stats (a walk lists every directory, so
    /// a second look at the disk here would cost the walk one per step). A `response.md`
    /// whose `response.json` is over [`EAGER_STREAMS_BYTES`] is listed without rendering
    /// it (a walk must not render every record); its size is found at the first lookup or
    /// stat. `listed` is the directory's descriptor, which its records are opened from.
    pub(super) fn push_record_views(
        &self,
        out: &mut Vec<Child>,
        dir: &Backed,
        place: &Place,
        listed: &OwnedFd,
    ) {
        let named = |out: &[Child], name: &str| out.iter().position(|c| c.name == name);
        match place {
            Place::AgentSteps { agent } => {
                if named(out, LATEST).is_none()
                    && let Some(child) = self.listed_latest(out, dir, agent)
                {
                    out.push(child);
                }
                if named(out, TRANSCRIPT_MD).is_none() {
                    let node = Node::record(RecordView::Transcript {
                        agent: agent.to_string(),
                    });
                    match self.getattr(&node) {
                        Ok(attr) => out.push(self.kept_child(TRANSCRIPT_MD, node, attr)),
                        Err(e) => log::debug!("{}: not listed: {e}", node.path()),
                    }
                }
            }
            Place::Step { agent, step } if named(out, RESPONSE_MD).is_none() => {
                let Some(json) = named(out, RESPONSE_FILE) else {
                    return;
                };
                let done = named(out, META_FILE).is_some();
                let json = out[json].attr.clone();
                let view = RecordView::Response { step: dir.clone() };
                let node = Node::record(view.clone());
                if self.record_may_see(&node, &view).is_err() {
                    return;
                }
                let listed = if json.size > EAGER_STREAMS_BYTES {
                    let mut attr = self.virtual_attr(&node, Kind::File, 0, json.mtime);
                    attr.ctime = json.ctime;
                    // No more than `response.json` itself grants.
                    (attr.perm, attr.owner) = (json.perm, json.owner);
                    Ok((attr, NO_TTL))
                } else {
                    self.response(&node, agent, step, Some(Listed { dir: listed, done }))
                        .and_then(|r| self.response_attr(&node, &r))
                        .map(|attr| (attr, self.response_ttl(dir, done)))
                };
                match listed {
                    Ok((attr, ttl)) => {
                        let mut child = Child::new(RESPONSE_MD, node, attr);
                        child.ttl = ttl;
                        out.push(child);
                    }
                    Err(e) => log::debug!("{}: not listed: {e}", node.path()),
                }
            }
            _ => {}
        }
    }

    /// `latest` in the listing `out` of an agent's step directories, `dir`.
    fn listed_latest(&self, out: &[Child], dir: &Backed, agent: &str) -> Option<Child> {
        let step = out
            .iter()
            .filter(|c| c.attr.kind == Kind::Dir)
            .filter_map(|c| Some((step_number(c.name.as_bytes())?, &c.name)))
            .max()?
            .1
            .to_str()?
            .to_string();
        let node = Node::record(RecordView::Latest {
            agent: agent.to_string(),
        });
        let dir_attr = self
            .backing_getattr(&Node::Backing(dir.clone()), dir)
            .map_err(|e| log::debug!("{}: not listed: {e}", node.path()))
            .ok()?;
        let attr = self.latest_attr(&node, &step, &dir_attr);
        Some(self.kept_child(LATEST, node, attr))
    }

    /// A listed record view, kept as long as [`Tree::ttl`] allows.
    fn kept_child(&self, name: &str, node: Node, attr: Attr) -> Child {
        let ttl = self.ttl(&node, &attr);
        let mut child = Child::new(name, node, attr);
        child.ttl = ttl;
        child
    }

    fn latest_attr(&self, node: &Node, step: &str, dir: &Attr) -> Attr {
        let mut a = self.virtual_attr(node, Kind::Symlink, step.len() as u64, dir.mtime);
        a.ctime = dir.ctime;
        a
    }
}
