//! Record views: names under `steps/<id>/` that read an agent's records for people,
//! derived from them and never stored. `latest` is a symlink to the highest-numbered
//! step directory, so `tail -f steps/<id>/latest/response.json` follows an agent from
//! step to step.
//!
//! Guarantees: these names never shadow a record (litany writes only numbered step
//! directories and `driver.log` under `steps/<id>/`, CONTRACT §4.1; a record of the same
//! name on disk wins); they are derived from the same listing and confinement as the
//! records themselves (under `--agent ID`, only ID's).

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use super::node::{Backed, RecordView};
use super::{Attr, Child, ErrorKind, Kind, Node, Tree, TreeError};
use crate::workspace::STEPS_DIR;
use crate::workspace::steps::step_number;

/// The name of the symlink to an agent's highest-numbered step directory.
pub const LATEST: &str = "latest";

/// The record view `name` names in `steps/<agent>/`, if any.
pub(super) fn child(agent: &str, name: &OsStr) -> Option<RecordView> {
    (name == LATEST).then(|| RecordView::Latest {
        agent: agent.to_string(),
    })
}

impl Tree {
    /// The highest-numbered step directory of `agent` and the time its directory last
    /// changed; `None` when it has none (or a record named like the view exists).
    fn latest_step(&self, agent: &str) -> Result<Option<(String, Attr)>, TreeError> {
        let dir = Backed::new(Path::new(STEPS_DIR).join(agent));
        let node = Node::Backing(dir.clone());
        let dir_attr = self.backing_getattr(&node, &dir)?;
        let entries = self
            .backing
            .list(dir.rel())
            .map_err(|e| TreeError::io(node.path(), e))?;
        if entries.iter().any(|(n, _)| n == LATEST) {
            return Ok(None);
        }
        Ok(entries
            .into_iter()
            .filter(|(_, st)| st.is_dir())
            .filter_map(|(n, _)| Some((step_number(n.as_bytes())?, n)))
            .max()
            .and_then(|(_, n)| n.into_string().ok())
            .map(|n| (n, dir_attr)))
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
        }
    }

    pub(super) fn record_open(
        &self,
        node: &Node,
        v: &RecordView,
    ) -> Result<super::Content, TreeError> {
        self.record_may_see(node, v)?;
        match v {
            RecordView::Latest { .. } => Err(TreeError::new(node.path(), ErrorKind::Loop)),
        }
    }

    fn record_may_see(&self, node: &Node, v: &RecordView) -> Result<(), TreeError> {
        match &self.confined {
            Some(me) if me != v.agent() => Err(TreeError::not_found(node.path())),
            _ => Ok(()),
        }
    }

    /// Adds the record views of `agent` to the listing of `steps/<agent>/`.
    pub(super) fn push_record_views(&self, out: &mut Vec<Child>, agent: &str) {
        let node = Node::Record(RecordView::Latest {
            agent: agent.to_string(),
        });
        if out.iter().any(|c| c.name == LATEST) {
            return;
        }
        if let Ok(attr) = self.getattr(&node) {
            out.push(Child::new(LATEST, node, attr));
        }
    }
}
