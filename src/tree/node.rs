//! Nodes: what a path under the mount *is*, decided when the path is resolved and carried
//! from then on. A backing node carries only its path, since the inode table keeps one for
//! every entry the kernel holds; what that path is ([`Place`]) is derived from it by one
//! grammar, without allocating but for a tool record, once per operation that asks.
//!
//! Each family of nodes has one home, which answers every operation on it:
//!
//! | variant | family | module |
//! |---|---|---|
//! | [`Node::Root`] | the mount root | [`super`] |
//! | [`Node::Backing`] | files and directories under `steps/` and `inbox/` | [`super::backing`] |
//! | [`Node::Capture`] | pages and whole streams of a tool capture | [`super::capture`] |
//! | [`Node::Git`] | `agents/`, `marks/`, `names/` | [`super::git`] |
//! | [`Node::Draft`] | a message being written in `inbox/<id>/` | [`super::inbox`] |
//! | [`Node::Record`] | readable views of an agent's records (`steps/<id>/latest`) | [`super::records`] |
//! | [`Node::View`] | `status`, `status.json`, `events`, `events.ndjson` at the root | [`super::views`] |
//! | [`Node::Act`] | `steps/<id>/ctl` and `new/` | [`super::acts`] |

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::paging::{Address, RecordPath, Stream};
use crate::views::{ATTENTION, ATTENTION_JSON, EVENTS, EVENTS_NDJSON, STATUS, STATUS_JSON};
use crate::workspace::shared_path::SharedPath;
use crate::workspace::steps::{OUTPUT_FILE, TOOLS_DIR, step_number};
use crate::workspace::{AGENTS_DIR, INBOX_DIR, MARKS_DIR, NAMES_DIR, STEPS_DIR};
use std::os::unix::ffi::OsStrExt;

/// The mount root's entries, in listing order: the workspace's own, then the views
/// (none of which litany writes at a workspace root, CONTRACT §1.2).
pub const TOP_LEVEL: [&str; 12] = [
    AGENTS_DIR,
    INBOX_DIR,
    MARKS_DIR,
    NAMES_DIR,
    STEPS_DIR,
    STATUS,
    STATUS_JSON,
    EVENTS,
    EVENTS_NDJSON,
    ATTENTION,
    ATTENTION_JSON,
    super::acts::NEW_DIR,
];

/// A node of the view. The inode table keeps one for every entry the kernel holds, and
/// hands it to every request on that entry, so a node is two words and a clone of it
/// is a reference count: a backing node is its shared path, and the other families are
/// shared too (construct them with [`Node::capture`], [`Node::git`], [`Node::draft`],
/// [`Node::record`]).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Node {
    Root,
    Backing(Backed),
    Capture(Arc<Capture>),
    Git(Arc<GitNode>),
    Draft(Arc<DraftNode>),
    Record(Arc<RecordView>),
    View(ViewFile),
    /// What acts on the workspace: an agent's `ctl`, `new/` ([`super::acts`]).
    Act(Arc<ActNode>),
    /// A node of a home mount outside any one workspace's tree, or a node of one of its
    /// workspaces ([`crate::home`]). A workspace's tree never sees one.
    Home(Arc<HomeNode>),
}

/// The files through which the mount acts ([`super::acts`]).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ActNode {
    /// `steps/<id>/ctl`: commands to agent `agent`.
    Ctl { agent: String },
    /// `new/`: goals of conversations being written (drafts, [`super::acts::NEW_DRAFTS`]).
    NewDir,
}

/// What a home mount adds around its workspaces' trees ([`crate::home`]).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum HomeNode {
    /// A directory of workspaces below the home's root (`world/`, `replays/`).
    Shelf(&'static str),
    /// `node` of the workspace shown at mount-relative directory `ws`.
    In { ws: Arc<str>, node: Node },
}

/// The files at the root that show the workspace at a glance ([`crate::views`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ViewFile {
    Status,
    StatusJson,
    Events,
    EventsNdjson,
    Attention,
    AttentionJson,
}

impl ViewFile {
    pub(crate) fn name(self) -> &'static str {
        match self {
            ViewFile::Status => STATUS,
            ViewFile::StatusJson => STATUS_JSON,
            ViewFile::Events => EVENTS,
            ViewFile::EventsNdjson => EVENTS_NDJSON,
            ViewFile::Attention => ATTENTION,
            ViewFile::AttentionJson => ATTENTION_JSON,
        }
    }
}

/// Views derived from an agent's step records, under `steps/<id>/`, where litany writes
/// only numbered step directories and `driver.log` (CONTRACT §4.1), so no name here can
/// collide with a record.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum RecordView {
    /// `steps/<id>/latest`: a symlink to the highest-numbered step directory.
    Latest { agent: String },
    /// `steps/<id>/<NNN>/response.md`: the step's `response.json` as text. `step` is the
    /// step directory (its place a [`Place::Step`]), shared with that directory's node:
    /// a walk lists one of these per step.
    Response { step: Backed },
    /// `steps/<id>/transcript.md`: the agent's committed conversation as text.
    Transcript { agent: String },
}

impl RecordView {
    pub(crate) fn agent(&self) -> &str {
        match self {
            RecordView::Latest { agent } | RecordView::Transcript { agent } => agent,
            RecordView::Response { step } => step.step_parts().map_or("", |(agent, _)| agent),
        }
    }
}

/// A file or directory under `steps/` or `inbox/`: its workspace-relative path, and no
/// more. What that path is ([`Place`]) is derived from it when asked, borrowing from it:
/// the inode table keeps one of these for every entry the kernel holds (hundreds of
/// thousands in a large workspace), so it is one pointer to its name, which shares its
/// directory's path with its siblings ([`SharedPath`]).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Backed {
    rel: SharedPath,
}

/// What a backing path is in the workspace's layout, its parts borrowed from the path.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Place<'a> {
    /// `steps/`.
    StepsRoot,
    /// `steps/<id>`: an agent's step directories and `driver.log`.
    AgentSteps { agent: &'a str },
    /// `steps/<id>/<NNN>`: one numbered step directory.
    Step { agent: &'a str, step: &'a str },
    /// `steps/<id>/...`, at any depth not named here (`None` for a non-UTF-8 id).
    Steps { agent: Option<&'a str> },
    /// `steps/<id>/<NNN>/tools/<tool-id>`, when the page grammar takes it as a record.
    ToolDir(RecordPath),
    /// `steps/<id>/<NNN>/tools/<tool-id>/output.json` of such a record.
    Output(RecordPath),
    /// `inbox/`.
    InboxRoot,
    /// `inbox/<id>` (`None` for a non-UTF-8 id, which takes no deposits).
    Inbox { agent: Option<&'a str> },
    /// `inbox/<id>/<name>`.
    InboxEntry { agent: Option<&'a str> },
    /// Anything deeper under `inbox/`: never part of the view.
    InboxDeep,
}

/// The most components a [`Place`] looks at: `steps/<id>/<NNN>/tools/<tool-id>/output.json`
/// and one more, to tell that path from anything deeper.
const PLACE_DEPTH: usize = 7;

impl<'a> Place<'a> {
    /// The place of workspace-relative path `rel` (under `steps/` or `inbox/`).
    pub(crate) fn of(rel: &'a Path) -> Self {
        let mut parts: [&OsStr; PLACE_DEPTH] = [OsStr::new(""); PLACE_DEPTH];
        let mut n = 0;
        for c in rel.components() {
            if n == PLACE_DEPTH {
                break;
            }
            parts[n] = c.as_os_str();
            n += 1;
        }
        Self::of_parts(&parts[..n])
    }

    /// The place of the path whose first components (at most [`PLACE_DEPTH`]) are
    /// `parts`.
    fn of_parts(parts: &[&'a OsStr]) -> Self {
        let text = |s: &'a OsStr| s.to_str();
        match parts {
            [top] if *top == INBOX_DIR => Place::InboxRoot,
            [top, id] if *top == INBOX_DIR => Place::Inbox { agent: text(id) },
            [top, id, _] if *top == INBOX_DIR => Place::InboxEntry { agent: text(id) },
            [top, ..] if *top == INBOX_DIR => Place::InboxDeep,
            [top] if *top == STEPS_DIR => Place::StepsRoot,
            [top, agent] if *top == STEPS_DIR => match agent.to_str() {
                Some(agent) => Place::AgentSteps { agent },
                None => Place::Steps { agent: None },
            },
            [top, agent, step] if *top == STEPS_DIR && step_number(step.as_bytes()).is_some() => {
                // A step number is ASCII digits, so always text.
                match (agent.to_str(), step.to_str()) {
                    (Some(agent), Some(step)) => Place::Step { agent, step },
                    _ => Place::Steps { agent: None },
                }
            }
            [top, agent, step, tools, tool] if *top == STEPS_DIR && *tools == TOOLS_DIR => {
                record(agent, step, tool)
                    .map(Place::ToolDir)
                    .unwrap_or_else(|| Place::Steps { agent: text(agent) })
            }
            [top, agent, step, tools, tool, out]
                if *top == STEPS_DIR && *tools == TOOLS_DIR && *out == OUTPUT_FILE =>
            {
                record(agent, step, tool)
                    .map(Place::Output)
                    .unwrap_or_else(|| Place::Steps { agent: text(agent) })
            }
            [_, agent, ..] => Place::Steps { agent: text(agent) },
            _ => Place::StepsRoot,
        }
    }

    /// Whether the place lies under `inbox/`.
    pub(crate) fn in_inbox(&self) -> bool {
        matches!(
            self,
            Place::InboxRoot | Place::Inbox { .. } | Place::InboxEntry { .. } | Place::InboxDeep
        )
    }

    /// The agent whose `steps/<id>` or `inbox/<id>` this lies in.
    #[cfg(test)]
    pub(crate) fn agent(&self) -> Option<&str> {
        match self {
            Place::Steps { agent } | Place::Inbox { agent } | Place::InboxEntry { agent } => *agent,
            Place::AgentSteps { agent } | Place::Step { agent, .. } => Some(agent),
            Place::ToolDir(r) | Place::Output(r) => Some(r.agent()),
            Place::StepsRoot | Place::InboxRoot | Place::InboxDeep => None,
        }
    }
}

fn record(agent: &OsStr, step: &OsStr, tool: &OsStr) -> Option<RecordPath> {
    RecordPath::new(agent.to_str()?, step.to_str()?, tool.to_str()?)
}

impl Backed {
    pub(crate) fn new(rel: impl Into<PathBuf>) -> Self {
        Self {
            rel: SharedPath::new(&rel.into()),
        }
    }

    /// The whole workspace-relative path, made afresh (for a system call).
    pub fn rel(&self) -> PathBuf {
        self.rel.to_path()
    }

    /// The last component.
    pub(crate) fn file_name(&self) -> &OsStr {
        self.rel.file_name()
    }

    /// The path itself, for whoever keeps it as long as the node (the watch of a
    /// directory): shared, not copied.
    pub(crate) fn shared(&self) -> &SharedPath {
        &self.rel
    }

    /// What the path is, derived from it.
    pub(crate) fn place(&self) -> Place<'_> {
        let mut parts = [OsStr::new(""); PLACE_DEPTH];
        let n = self.rel.components(&mut parts);
        Place::of_parts(&parts[..n])
    }

    /// The directory this entry is in, sharing its path, if the path has a parent.
    pub(crate) fn parent(&self) -> Option<Backed> {
        self.rel.parent().map(|rel| Backed { rel: rel.clone() })
    }

    /// The entry `name` inside this directory.
    pub(crate) fn join(&self, name: &OsStr) -> Self {
        Self {
            rel: self.rel.join(name),
        }
    }

    /// The agent and step number of this step directory, if it is one.
    pub(crate) fn step_parts(&self) -> Option<(&str, &str)> {
        match self.place() {
            Place::Step { agent, step } => Some((agent, step)),
            _ => None,
        }
    }

    /// The agent whose inbox directory this is, if it is one.
    pub(crate) fn inbox_agent(&self) -> Option<&str> {
        match self.place() {
            Place::Inbox { agent } => agent,
            _ => None,
        }
    }
}

/// Derived views of a tool capture: never backing files.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Capture {
    /// `output.json#<stream>@<offset>`: one page, never listed.
    Page(Address),
    /// `stdout`/`stderr` beside an `output.json`: the whole decoded stream.
    Stream { record: RecordPath, stream: Stream },
}

impl Capture {
    pub(crate) fn record(&self) -> &RecordPath {
        match self {
            Capture::Page(a) => &a.record,
            Capture::Stream { record, .. } => record,
        }
    }
}

/// Nodes read from the refs and the objects of `repo.git`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum GitNode {
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
    /// `inbox/<Name>`: a symlink to `<id>`, the inbox of the one living agent that wears
    /// the name, so that a name reaches an inbox wherever an id does (never listed:
    /// `inbox/` lists the real inboxes, by id).
    InboxName(String),
}

/// A message being written in `inbox/<agent>/` (see [`super::drafts`]); `name` is the
/// name it was created with, for log lines.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct DraftNode {
    pub(crate) agent: String,
    pub(crate) id: u64,
    pub(crate) name: OsString,
}

/// How many inode numbers the kernel may hold before the daemon asks it to forget the
/// files nobody used since its upkeep last looked ([`Node::entry_name`] says which may
/// be forgotten; the adapter's inode table does the asking): about 4 MiB of the daemon's
/// memory with the nodes they hold, and more than a walk of a large workspace's records
/// holds at once. Without it the daemon's memory follows every file a `grep -r` ever
/// touched, as the kernel forgets nothing while memory is plentiful.
pub const INODES_KEPT: usize = 16_384;

impl Node {
    /// Its name in its directory, when the kernel may be asked to forget it
    /// ([`crate::fs`]'s inode bound): the files a walk leaves by the thousand (backing
    /// records, files of an agent's committed tree, `response.md`), named as their
    /// directory lists them. `None` for the rest, which stay while the kernel holds them.
    pub(crate) fn entry_name(&self) -> Option<&OsStr> {
        match self {
            Node::Backing(b) => Some(b.file_name()),
            Node::Git(g) => match &**g {
                GitNode::Agent { path, .. } => path.last().map(OsStr::new),
                _ => None,
            },
            Node::Record(r) => match &**r {
                RecordView::Response { .. } => Some(OsStr::new(super::records::RESPONSE_MD)),
                _ => None,
            },
            Node::Home(h) => match &**h {
                HomeNode::In { node, .. } => node.entry_name(),
                HomeNode::Shelf(_) => None,
            },
            _ => None,
        }
    }

    pub fn capture(c: Capture) -> Node {
        Node::Capture(Arc::new(c))
    }

    pub(crate) fn git(g: GitNode) -> Node {
        Node::Git(Arc::new(g))
    }

    pub(crate) fn draft(d: DraftNode) -> Node {
        Node::Draft(Arc::new(d))
    }

    pub(crate) fn record(v: RecordView) -> Node {
        Node::Record(Arc::new(v))
    }

    /// A backing node at workspace-relative `rel`.
    pub(crate) fn backing(rel: impl Into<PathBuf>) -> Node {
        Node::Backing(Backed::new(rel))
    }

    /// The node a top-level name stands for.
    pub(crate) fn top(name: &OsStr) -> Option<Node> {
        Some(match name.to_str()? {
            STEPS_DIR => Node::backing(STEPS_DIR),
            INBOX_DIR => Node::backing(INBOX_DIR),
            AGENTS_DIR => Node::git(GitNode::AgentsRoot),
            MARKS_DIR => Node::git(GitNode::MarksRoot),
            NAMES_DIR => Node::git(GitNode::NamesRoot),
            STATUS => Node::View(ViewFile::Status),
            STATUS_JSON => Node::View(ViewFile::StatusJson),
            EVENTS => Node::View(ViewFile::Events),
            EVENTS_NDJSON => Node::View(ViewFile::EventsNdjson),
            ATTENTION => Node::View(ViewFile::Attention),
            ATTENTION_JSON => Node::View(ViewFile::AttentionJson),
            super::acts::NEW_DIR => Node::Act(Arc::new(ActNode::NewDir)),
            _ => return None,
        })
    }

    /// The mount-relative path, for log lines and errors.
    pub fn path(&self) -> String {
        match self {
            Node::Root => ".".into(),
            Node::Backing(b) => b.rel().to_string_lossy().into_owned(),
            Node::Git(g) => match &**g {
                GitNode::MarksRoot => MARKS_DIR.into(),
                GitNode::MarkKind(k) => format!("{MARKS_DIR}/{k}"),
                GitNode::Mark { kind, id } => format!("{MARKS_DIR}/{kind}/{id}"),
                GitNode::AgentsRoot => AGENTS_DIR.into(),
                GitNode::Agent { id, path } if path.is_empty() => format!("{AGENTS_DIR}/{id}"),
                GitNode::Agent { id, path } => format!("{AGENTS_DIR}/{id}/{}", path.join("/")),
                GitNode::NamesRoot => NAMES_DIR.into(),
                GitNode::Name(n) => format!("{NAMES_DIR}/{n}"),
                GitNode::InboxName(n) => format!("{INBOX_DIR}/{n}"),
            },
            Node::Capture(c) => match &**c {
                Capture::Page(address) => address.to_string(),
                Capture::Stream { record, stream } => format!("{}/{stream}", record.dir()),
            },
            Node::Draft(d) if d.agent == super::acts::NEW_DRAFTS => {
                format!("{}/{}", super::acts::NEW_DIR, d.name.to_string_lossy())
            }
            Node::Draft(d) => format!("{INBOX_DIR}/{}/{}", d.agent, d.name.to_string_lossy()),
            Node::Record(v) => match &**v {
                RecordView::Latest { agent } => {
                    format!("{STEPS_DIR}/{agent}/{}", super::records::LATEST)
                }
                RecordView::Response { step } => {
                    format!("{}/{}", step.rel().display(), super::records::RESPONSE_MD)
                }
                RecordView::Transcript { agent } => {
                    format!("{STEPS_DIR}/{agent}/{}", super::records::TRANSCRIPT_MD)
                }
            },
            Node::View(v) => v.name().into(),
            Node::Act(a) => match &**a {
                ActNode::Ctl { agent } => format!("{STEPS_DIR}/{agent}/{}", super::acts::CTL),
                ActNode::NewDir => super::acts::NEW_DIR.into(),
            },
            Node::Home(h) => match &**h {
                HomeNode::Shelf(s) => (*s).into(),
                HomeNode::In {
                    ws,
                    node: Node::Root,
                } => ws.to_string(),
                HomeNode::In { ws, node } => format!("{ws}/{}", node.path()),
            },
        }
    }

    /// The mount-relative path of `name` inside this node, for errors.
    pub(crate) fn join(&self, name: &OsStr) -> String {
        match self {
            Node::Root => name.to_string_lossy().into_owned(),
            _ => format!("{}/{}", self.path(), name.to_string_lossy()),
        }
    }

    /// The agent whose inbox directory this node is, if it is one.
    pub(crate) fn inbox_agent(&self) -> Option<&str> {
        match self {
            Node::Backing(b) => b.inbox_agent(),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_is_two_words() {
        // The inode table holds one per entry the kernel keeps (module docs of `Node`).
        assert_eq!(
            std::mem::size_of::<Node>(),
            2 * std::mem::size_of::<usize>()
        );
        assert_eq!(std::mem::size_of::<Backed>(), std::mem::size_of::<usize>());
    }

    #[test]
    fn places_are_derived_from_the_path() {
        let cases: [(&str, Place); 9] = [
            ("steps", Place::StepsRoot),
            ("steps/a", Place::AgentSteps { agent: "a" }),
            (
                "steps/a/001/request.json",
                Place::Steps { agent: Some("a") },
            ),
            (
                "steps/a/001/tools/t1",
                Place::ToolDir(RecordPath::new("a", "001", "t1").unwrap()),
            ),
            (
                "steps/a/001/tools/t1/output.json",
                Place::Output(RecordPath::new("a", "001", "t1").unwrap()),
            ),
            ("inbox", Place::InboxRoot),
            ("inbox/a", Place::Inbox { agent: Some("a") }),
            (
                "inbox/a/user-001.md",
                Place::InboxEntry { agent: Some("a") },
            ),
            ("inbox/a/x/y", Place::InboxDeep),
        ];
        for (rel, place) in cases {
            assert_eq!(Place::of(Path::new(rel)), place, "{rel}");
        }
        assert_eq!(
            Place::of(Path::new("steps/a/001")),
            Place::Step {
                agent: "a",
                step: "001"
            }
        );
        assert_eq!(
            Place::of(Path::new("steps/a/notes")),
            Place::Steps { agent: Some("a") }
        );
        assert_eq!(Backed::new("inbox/a").inbox_agent(), Some("a"));
        assert_eq!(Backed::new("inbox/a/f").inbox_agent(), None);
        assert!(Place::of(Path::new("inbox/a/f")).in_inbox());
        assert_eq!(Place::of(Path::new("steps/b/001")).agent(), Some("b"));
    }
}
