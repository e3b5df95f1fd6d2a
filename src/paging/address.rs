//! The continuation-address grammar, defined once for the whole crate.
//!
//! ```text
//! steps/<agent-id>/<NNN>/tools/<tool-id>/output.json#<stream>@<offset>
//! ```
//!
//! An address is what litany's cut marker hands a model and what
//! `read_tool_output` redeems. The mount shows the same thing as a file
//! name under a tool directory (`output.json#stdout@2048`), so both shapes
//! are parsed by the same split ([`split_fragment`]). A name the mount
//! accepts is therefore an address the tool accepts, and the reverse.
//!
//! The rules are litany 0.0.15's, including the strange ones:
//! - the text is split at its **last** `#`, then at the last `@` after it.
//!   The agent and tool segments can contain `#` and `@`.
//! - the offset is whatever `str::parse::<usize>` takes, so `+5` and `007`
//!   are accepted. They mean 5 and 7, and every address rendered from
//!   them is canonical ([`Address`]'s `Display`). A mount that wants one
//!   name per page can use [`PageName::parse_canonical`].
//! - the record has exactly six `/`-separated segments: three fixed
//!   words, an all-ASCII-digit step of any width (kept as written), and
//!   agent and tool segments that are not empty, `.` or `..`.
//!
//! A rejection does not say what was meant. [`AddressError`] prints the
//! tool's message, which quotes the grammar.

use std::fmt;
use std::sync::Arc;

/// Bytes per page. This is litany's `PAGE_BYTES`, the shipped
/// `tool_output` allowance of 2048 + 2048.
pub const PAGE_BYTES: u64 = 4096;

/// The literal first segment of a record path.
pub(crate) use crate::workspace::STEPS_DIR;
/// The literal fourth and last segments of a record path.
pub(crate) use crate::workspace::steps::{OUTPUT_FILE, TOOLS_DIR};

/// Separates the record from the stream.
const STREAM_SEP: char = '#';
/// Separates the stream from the offset.
const OFFSET_SEP: char = '@';

/// One of the two captured streams an address can name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Stream {
    Stdout,
    Stderr,
}

impl Stream {
    /// Both streams, in record order.
    pub const ALL: [Stream; 2] = [Stream::Stdout, Stream::Stderr];

    /// The stream's label, which is also its key in `output.json`.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Stream::Stdout => "stdout",
            Stream::Stderr => "stderr",
        }
    }

    /// The stream `label` names. Only the two exact lowercase labels are
    /// accepted.
    pub(crate) fn parse(label: &str) -> Option<Stream> {
        match label {
            "stdout" => Some(Stream::Stdout),
            "stderr" => Some(Stream::Stderr),
            _ => None,
        }
    }
}

impl fmt::Display for Stream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Which rule a malformed address broke. The tool does not report this;
/// it is here for logs and tests. [`AddressError`]'s `Display` always
/// prints the tool's own message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Malformation {
    /// No `#` anywhere.
    NoStream,
    /// No `@` after the last `#`.
    NoOffset,
    /// The stream is neither `stdout` nor `stderr`.
    Stream,
    /// The offset does not parse as a `usize`.
    Offset,
    /// The record is not exactly six `/`-separated segments.
    Segments,
    /// A fixed segment (`steps`, `tools`, `output.json`) is wrong.
    Literal,
    /// The step segment is empty or has a character that is not an ASCII digit.
    Step,
    /// The agent or tool segment is empty, `.` or `..`.
    Name,
}

/// A text that is not the grammar. `Display` prints
/// `read_tool_output`'s message for it, byte for byte.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddressError {
    given: String,
    kind: Malformation,
}

impl AddressError {
    fn new(given: &str, kind: Malformation) -> Self {
        AddressError {
            given: given.to_string(),
            kind,
        }
    }

    /// The text that was refused, as given.
    #[cfg(test)]
    pub(crate) fn given(&self) -> &str {
        &self.given
    }

    /// The rule it broke.
    #[cfg(test)]
    pub(crate) fn kind(&self) -> Malformation {
        self.kind
    }
}

impl fmt::Display for AddressError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "malformed address {:?}: expected \
             steps/<agent-id>/<NNN>/tools/<tool-id>/output.json#<stdout|stderr>@<byte offset>, \
             copied verbatim from the marker in the cut result",
            self.given
        )
    }
}

impl std::error::Error for AddressError {}

/// The grammar's tail, shared by whole addresses and page names: split
/// `text` at its last `#`, split what follows at its last `@`, and check
/// the stream and the offset. Returns the part before the `#`.
fn split_fragment(text: &str) -> Result<(&str, Stream, u64), AddressError> {
    let (head, fragment) = text
        .rsplit_once(STREAM_SEP)
        .ok_or_else(|| AddressError::new(text, Malformation::NoStream))?;
    let (stream, offset) = fragment
        .rsplit_once(OFFSET_SEP)
        .ok_or_else(|| AddressError::new(text, Malformation::NoOffset))?;
    let stream =
        Stream::parse(stream).ok_or_else(|| AddressError::new(text, Malformation::Stream))?;
    // usize first, as the tool parses it; on the 64-bit targets litanyfs
    // runs on, every usize is a u64.
    let offset = offset
        .parse::<usize>()
        .ok()
        .and_then(|o| u64::try_from(o).ok())
        .ok_or_else(|| AddressError::new(text, Malformation::Offset))?;
    Ok((head, stream, offset))
}

/// A segment that names something: not empty, not `.` and not `..`.
fn plain(segment: &str) -> bool {
    !segment.is_empty() && segment != "." && segment != ".."
}

/// A workspace-relative capture path,
/// `steps/<agent>/<step>/tools/<tool>/output.json`.
///
/// The segments are kept as written (`001` stays `001`), so the path
/// renders back to the string it was parsed from. They are kept in one
/// shared allocation (`<agent>/<step>/<tool>`, the separators being no part
/// of any segment): every listed tool directory's `stdout` and `stderr` hold
/// one, so a clone is a count, and a workspace's worth of them is not three
/// allocations each.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct RecordPath {
    segments: Arc<str>,
    /// Where the step segment starts in `segments`.
    step_at: u32,
    /// Where the tool segment starts in `segments`.
    tool_at: u32,
}

impl fmt::Debug for RecordPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RecordPath")
            .field("agent", &self.agent())
            .field("step", &self.step())
            .field("tool", &self.tool())
            .finish()
    }
}

/// Ordered by agent, then step, then tool, each as a string.
impl Ord for RecordPath {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.agent(), self.step(), self.tool()).cmp(&(other.agent(), other.step(), other.tool()))
    }
}

impl PartialOrd for RecordPath {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl RecordPath {
    /// A record path from its three variable segments. Each one is checked
    /// against the grammar, so every `RecordPath` renders to a path
    /// [`RecordPath::parse`] accepts.
    pub fn new(agent: &str, step: &str, tool: &str) -> Option<RecordPath> {
        let numbered = !step.is_empty() && step.bytes().all(|b| b.is_ascii_digit());
        let single = |s: &str| plain(s) && !s.contains('/');
        (single(agent) && single(tool) && numbered)
            .then(|| Self::of(agent, step, tool))
            .flatten()
    }

    /// The three segments, already checked, in one allocation. `None` only if a
    /// segment is longer than 4 GiB.
    fn of(agent: &str, step: &str, tool: &str) -> Option<RecordPath> {
        let step_at = u32::try_from(agent.len() + 1).ok()?;
        let tool_at = u32::try_from(agent.len() + 1 + step.len() + 1).ok()?;
        Some(RecordPath {
            segments: Arc::from(format!("{agent}/{step}/{tool}")),
            step_at,
            tool_at,
        })
    }

    /// Parse the record part of an address (everything before the `#`).
    /// `given` is the whole text, which the error quotes.
    fn parse_within(record: &str, given: &str) -> Result<RecordPath, AddressError> {
        let segments: Vec<&str> = record.split('/').collect();
        let [steps, agent, step, tools, tool, output] = segments.as_slice() else {
            return Err(AddressError::new(given, Malformation::Segments));
        };
        if *steps != STEPS_DIR || *tools != TOOLS_DIR || *output != OUTPUT_FILE {
            return Err(AddressError::new(given, Malformation::Literal));
        }
        if !plain(agent) || !plain(tool) {
            return Err(AddressError::new(given, Malformation::Name));
        }
        if step.is_empty() || !step.bytes().all(|b| b.is_ascii_digit()) {
            return Err(AddressError::new(given, Malformation::Step));
        }
        RecordPath::of(agent, step, tool)
            .ok_or_else(|| AddressError::new(given, Malformation::Name))
    }

    /// Parse a bare record path, with no `#<stream>@<offset>`.
    pub fn parse(record: &str) -> Result<RecordPath, AddressError> {
        Self::parse_within(record, record)
    }

    /// The agent id segment. `read_tool_output` compares it with the
    /// caller's id.
    pub fn agent(&self) -> &str {
        self.segments
            .get(..self.step_at as usize - 1)
            .unwrap_or_default()
    }

    /// The step segment, as written (any width of digits).
    pub fn step(&self) -> &str {
        self.segments
            .get(self.step_at as usize..self.tool_at as usize - 1)
            .unwrap_or_default()
    }

    /// The tool-use id segment.
    pub fn tool(&self) -> &str {
        self.segments
            .get(self.tool_at as usize..)
            .unwrap_or_default()
    }

    /// The address of `stream` at `offset` in this record.
    pub fn at(&self, stream: Stream, offset: u64) -> Address {
        Address {
            record: self.clone(),
            stream,
            offset,
        }
    }
}

impl RecordPath {
    /// The workspace-relative tool directory that holds the record.
    pub(crate) fn dir(&self) -> String {
        format!(
            "{STEPS_DIR}/{}/{}/{TOOLS_DIR}/{}",
            self.agent(),
            self.step(),
            self.tool()
        )
    }
}

impl fmt::Display for RecordPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{OUTPUT_FILE}", self.dir())
    }
}

/// A parsed continuation address. `Display` gives the canonical form,
/// `<record>#<stream>@<offset>` with the offset in plain decimal. That is
/// how the tool spells every next-page address.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Address {
    pub record: RecordPath,
    pub stream: Stream,
    pub offset: u64,
}

impl Address {
    /// Parse `text` exactly as `read_tool_output` does.
    pub fn parse(text: &str) -> Result<Address, AddressError> {
        let (record, stream, offset) = split_fragment(text)?;
        let record = RecordPath::parse_within(record, text)?;
        Ok(Address {
            record,
            stream,
            offset,
        })
    }

    /// The same record and stream at another offset.
    pub fn moved_to(&self, offset: u64) -> Address {
        self.record.at(self.stream, offset)
    }

    /// This address's last path component, as the mount names it.
    pub fn page_name(&self) -> PageName {
        PageName {
            stream: self.stream,
            offset: self.offset,
        }
    }
}

impl fmt::Display for Address {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}{STREAM_SEP}{}{OFFSET_SEP}{}",
            self.record, self.stream, self.offset
        )
    }
}

/// The last component of an address, `output.json#<stream>@<offset>`.
/// This is the file name a page has under its tool directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PageName {
    pub stream: Stream,
    pub offset: u64,
}

impl PageName {
    /// Parse a file name with the grammar's own rules. `name` is accepted
    /// exactly when `steps/<a>/<n>/tools/<t>/` + `name` is an address the
    /// tool accepts. So `output.json#stdout@+5` is accepted (offset 5),
    /// and anything with a `/` in it is not.
    pub fn parse(name: &str) -> Option<PageName> {
        let (head, stream, offset) = split_fragment(name).ok()?;
        (head == OUTPUT_FILE).then_some(PageName { stream, offset })
    }

    /// Like [`PageName::parse`], but only the canonical spelling: the name
    /// must be exactly what `Display` renders. This leaves one name per
    /// page, with no `+5` or `007` aliases.
    pub fn parse_canonical(name: &str) -> Option<PageName> {
        let page = Self::parse(name)?;
        (page.to_string() == name).then_some(page)
    }

    /// The address this name has under `record`.
    pub fn within(self, record: &RecordPath) -> Address {
        record.at(self.stream, self.offset)
    }
}

impl fmt::Display for PageName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{OUTPUT_FILE}{STREAM_SEP}{}{OFFSET_SEP}{}",
            self.stream, self.offset
        )
    }
}

/// The stream and offset of a page file name, or `None` when `name` is
/// not one. The same as [`PageName::parse`].
pub fn parse_page_name(name: &str) -> Option<(Stream, u64)> {
    PageName::parse(name).map(|p| (p.stream, p.offset))
}
