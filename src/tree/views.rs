//! The view files at the mount root: `status`, `status.json`, `events`, `events.ndjson`,
//! `attention`, `attention.json` ([`crate::views`] makes them; this module only answers
//! for them).
//!
//! Guarantees: `status`, `attention` and their JSON are a snapshot taken at open and
//! served with direct I/O and no attribute caching, so `watch -n1 cat attention` is fresh
//! every time; `events` and `events.ndjson` are read at an offset from the log, their
//! size is the log's published length (never cached, so `tail -f`, which polls `fstat`
//! on FUSE, sees each append, and `cat` ends at the current end), and an open of either
//! waits for the history while it is being reconstructed ([`HISTORY_WAIT`] at most), so
//! `mount && cat events` reads it whole. All are read-only.

use std::sync::Arc;
use std::time::SystemTime;

use super::node::ViewFile;
use super::{Attr, Content, Kind, Node, Tree, TreeError};
use crate::views::{HISTORY_WAIT, Rendering};

impl ViewFile {
    /// Every view file, in listing order.
    pub(crate) const ALL: [ViewFile; 6] = [
        ViewFile::Status,
        ViewFile::StatusJson,
        ViewFile::Events,
        ViewFile::EventsNdjson,
        ViewFile::Attention,
        ViewFile::AttentionJson,
    ];

    /// The log rendering an events file reads; `None` for a snapshot file.
    pub(crate) fn rendering(self) -> Option<Rendering> {
        match self {
            ViewFile::Events => Some(Rendering::Text),
            ViewFile::EventsNdjson => Some(Rendering::Ndjson),
            ViewFile::Status
            | ViewFile::StatusJson
            | ViewFile::Attention
            | ViewFile::AttentionJson => None,
        }
    }

    /// Whether it is the JSON rendering of its pair.
    pub(crate) fn json(self) -> bool {
        matches!(
            self,
            ViewFile::StatusJson | ViewFile::EventsNdjson | ViewFile::AttentionJson
        )
    }
}

impl Tree {
    pub(super) fn view_attr(&self, node: &Node, v: ViewFile) -> Attr {
        let size = match v {
            ViewFile::Events | ViewFile::EventsNdjson => self
                .views
                .log()
                .len(v.rendering().unwrap_or(Rendering::Text)),
            ViewFile::Status | ViewFile::StatusJson => self.views.status_len(v.json()),
            ViewFile::Attention | ViewFile::AttentionJson => self.views.attention_len(v.json()),
        };
        self.virtual_attr(node, Kind::File, size, SystemTime::now())
    }

    pub(super) fn view_open(&self, v: ViewFile) -> Content {
        match v {
            ViewFile::Events | ViewFile::EventsNdjson => {
                if !self.views.wait_history(HISTORY_WAIT) {
                    log::info!(
                        "{}: the history is still being reconstructed after {HISTORY_WAIT:?}; \
                         serving what is logged so far",
                        v.name()
                    );
                }
                Content::Log(v.rendering().unwrap_or(Rendering::Text))
            }
            ViewFile::Status | ViewFile::StatusJson => {
                Content::Bytes(Arc::new(self.views.status(v.json())))
            }
            ViewFile::Attention | ViewFile::AttentionJson => {
                Content::Bytes(Arc::new(self.views.attention(v.json())))
            }
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
