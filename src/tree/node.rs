//! Nodes: the view's names for things, and the top-level layout.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use crate::paging::{Address, RecordPath, Stream};
use crate::workspace::{AGENTS_DIR, INBOX_DIR, STEPS_DIR};

/// The virtual directory of marks (`marks/<kind>/<id>`).
pub const MARKS_DIR: &str = "marks";
/// The virtual directory of name symlinks (`names/<Name>`).
pub const NAMES_DIR: &str = "names";

/// The mount root's entries, in listing order.
pub const TOP_LEVEL: [&str; 5] = [AGENTS_DIR, INBOX_DIR, MARKS_DIR, NAMES_DIR, STEPS_DIR];

/// A node of the view. Backing nodes carry their workspace-relative path; git nodes
/// carry what names them in the refs.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Node {
    Root,
    /// A file or directory under `steps/` or `inbox/`, at this workspace-relative path.
    Backing(PathBuf),
    MarksRoot,
    MarkKind(String),
    Mark {
        kind: String,
        id: String,
    },
    AgentsRoot,
    /// `agents/<id>/<path...>`: a path in the committed tree at the agent's tip.
    Agent {
        id: String,
        path: Vec<String>,
    },
    NamesRoot,
    Name(String),
    /// A message being written in `inbox/<agent>/` (see [`super::drafts`]); `name` is
    /// the name it was created with, for log lines.
    Draft {
        agent: String,
        id: u64,
        name: std::ffi::OsString,
    },
    /// `output.json#<stream>@<offset>`: one page of a tool capture, never listed.
    Page(Address),
    /// `stdout`/`stderr` beside an `output.json`: the whole decoded stream.
    Stream {
        record: RecordPath,
        stream: Stream,
    },
}

/// The backing areas, each with its own rule for what is shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Area {
    Steps,
    Inbox,
}

impl Area {
    /// The area a workspace-relative backing path lies in.
    pub fn of(rel: &Path) -> Self {
        if rel.starts_with(INBOX_DIR) {
            Area::Inbox
        } else {
            Area::Steps
        }
    }
}

impl Node {
    /// The node a top-level name stands for.
    pub fn top(name: &OsStr) -> Option<Node> {
        Some(match name.to_str()? {
            STEPS_DIR => Node::Backing(STEPS_DIR.into()),
            INBOX_DIR => Node::Backing(INBOX_DIR.into()),
            AGENTS_DIR => Node::AgentsRoot,
            MARKS_DIR => Node::MarksRoot,
            NAMES_DIR => Node::NamesRoot,
            _ => return None,
        })
    }

    /// The mount-relative path, for log lines and errors.
    pub fn path(&self) -> String {
        match self {
            Node::Root => ".".into(),
            Node::Backing(rel) => rel.to_string_lossy().into_owned(),
            Node::MarksRoot => MARKS_DIR.into(),
            Node::MarkKind(k) => format!("{MARKS_DIR}/{k}"),
            Node::Mark { kind, id } => format!("{MARKS_DIR}/{kind}/{id}"),
            Node::AgentsRoot => AGENTS_DIR.into(),
            Node::Agent { id, path } if path.is_empty() => format!("{AGENTS_DIR}/{id}"),
            Node::Agent { id, path } => format!("{AGENTS_DIR}/{id}/{}", path.join("/")),
            Node::NamesRoot => NAMES_DIR.into(),
            Node::Name(n) => format!("{NAMES_DIR}/{n}"),
            Node::Page(address) => address.to_string(),
            Node::Stream { record, stream } => {
                let record = record.to_string();
                let dir = record.rsplit_once('/').map_or("", |(d, _)| d);
                format!("{dir}/{stream}")
            }
            Node::Draft { agent, name, .. } => {
                format!("{INBOX_DIR}/{agent}/{}", name.to_string_lossy())
            }
        }
    }

    /// The mount-relative path of `name` inside this node, for errors.
    pub fn join(&self, name: &OsStr) -> String {
        match self {
            Node::Root => name.to_string_lossy().into_owned(),
            _ => format!("{}/{}", self.path(), name.to_string_lossy()),
        }
    }
}
