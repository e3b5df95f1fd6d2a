//! The view files at the mount root: `status`, `status.json`, `events`, `events.ndjson`
//! ([`crate::views`] makes them; this module only answers for them).
//!
//! Guarantees: `status` and `status.json` are a snapshot taken at open and served with
//! direct I/O and no attribute caching, so `watch -n1 cat status` is fresh every time;
//! `events` and `events.ndjson` are read at an offset from the log, their size is the
//! log's published length (never cached, so `tail -f`, which polls `fstat` on FUSE, sees
//! each append, and `cat` ends at the current end). All four are read-only.

use std::sync::Arc;
use std::time::SystemTime;

use super::node::ViewFile;
use super::{Attr, Content, Kind, Node, Tree, TreeError};
use crate::views::Rendering;

impl ViewFile {
    /// Every view file, in listing order.
    pub const ALL: [ViewFile; 4] = [
        ViewFile::Status,
        ViewFile::StatusJson,
        ViewFile::Events,
        ViewFile::EventsNdjson,
    ];

    /// The log rendering an events file reads; `None` for a status file.
    pub fn rendering(self) -> Option<Rendering> {
        match self {
            ViewFile::Events => Some(Rendering::Text),
            ViewFile::EventsNdjson => Some(Rendering::Ndjson),
            ViewFile::Status | ViewFile::StatusJson => None,
        }
    }
}

impl Tree {
    pub(super) fn view_attr(&self, node: &Node, v: ViewFile) -> Attr {
        let size = match v.rendering() {
            Some(r) => self.views.log().len(r),
            None => self.views.status_len(v == ViewFile::StatusJson),
        };
        self.virtual_attr(node, Kind::File, size, SystemTime::now())
    }

    pub(super) fn view_open(&self, v: ViewFile) -> Content {
        match v.rendering() {
            Some(r) => Content::Log(r),
            None => Content::Bytes(Arc::new(self.views.status(v == ViewFile::StatusJson))),
        }
    }

    pub(super) fn read_log(
        &self,
        node: &Node,
        r: Rendering,
        offset: u64,
        size: u32,
    ) -> Result<Vec<u8>, TreeError> {
        self.views
            .log()
            .read(r, offset, size)
            .map_err(|e| TreeError::io(node.path(), e))
    }
}
