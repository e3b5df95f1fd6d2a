//! `transcript.md`: the committed transcript at a branch tip, entry by entry.
//!
//! The entries are what litany's assembler reads (`messages/` in the tip's tree, ordered
//! by the `u32` before the first `-` of the name, other names left out), read from git,
//! never from the worktree. Each entry is timed by the author time of the newest commit
//! on the tip's first-parent line whose subject is `transcript <NNN>: …`: author, because
//! a compaction's replay keeps it while it rewrites the committer. An entry no such
//! commit names (one a compaction base carried over) shows `time unknown`.
//!
//! **Compactions.** litany numbers entries max-present-plus-one and never renumbers, and a
//! compaction landing takes the entries of its span out of the tree, keeping the dispatch
//! entry and a trailing unsettled tool window (litany's `compactor/land/product.rs`). So a
//! number missing below the highest is a compacted entry: each run of them is shown, where
//! it was, as a `## compacted <first> to <last>` section. The summaries at the tip
//! (`summary/<u32>.md`, litany's `write_summary` names) are shown under the last such
//! section: each pass's sweep takes every entry before its point but the dispatch entry, so
//! the runs of successive passes merge and the newest summary speaks for all of them. A
//! compaction whose span was the whole tail leaves no run (the next entry reuses the first
//! free number); its summaries are then shown after the first entry, under
//! `## compacted`.
//!
//! **Nothing dropped.** A message entry is shown as its bytes are (lossily as UTF-8); a
//! JSON entry that does not parse, or is neither a block array nor an object with a
//! `content` array, is shown raw in a `text` fence under its number.
//!
//! **What the live tail needs** ([`super::live`]): the highest number at the tip (the
//! next entry's is one more, litany's `next_seq`), and the tool calls with no result yet,
//! oldest first, so that a tool entry's header names its call (`· bash (toolu_1)`): the
//! entry a running tool will commit then begins with exactly the header its `in progress`
//! section shows.
//!
//! A rendering remembers its entries (name and blob) and the summaries at its tip. A new
//! tip whose first-parent line reaches a rendered tip, whose entries begin with that tip's
//! entries and go on numbering from its highest without a gap, and whose summaries are the
//! same, is rendered as that rendering plus its new entries; anything else afresh.
//!
//! Bounded: a rendering holds at most [`MAX_TRANSCRIPT_BYTES`]. Past it the oldest
//! entries are left out, and a line at the top says how many; an entry whose blob is
//! larger than git content is read whole ([`MAX_BLOB_BYTES`]), or whose rendering alone
//! would pass the bound, shows as a line naming its size. Entries are timed from at most
//! [`MAX_HISTORY_COMMITS`](crate::workspace::refs::MAX_HISTORY_COMMITS) commits. The
//! entries are rendered oldest first (a tool result's header names the call an earlier
//! entry made), and what a bound leaves out is dropped as rendering goes, an entry or a
//! compaction section at a time; an extension past the bound drops from the front of the
//! rendering it extends.
use std::collections::HashMap;
use std::sync::Arc;

use git2::Oid;
use serde_json::Value;

use super::format::{self, Prose, Usage};
use crate::workspace::refs::{GitEntry, GitError, MAX_BLOB_BYTES, Refs};

// A delivered message keeps its deposit's extension; every other entry is JSON.
use crate::workspace::inbox::MESSAGE_EXT;
pub(super) use crate::workspace::inbox::{frontmatter_fields, split_frontmatter};
pub(super) use crate::workspace::refs::MESSAGES_DIR;
use crate::workspace::refs::subject;

use super::format::ENTRY_BLOCK as BLOCK;

/// Where litany's compactor writes its summaries, at the branch's tree root
/// (`compactor/tools.rs` `SUMMARY_DIR`).
pub(super) const SUMMARY_DIR: &str = "summary";
/// The extension of a summary (`summary/<NNN>.md`); `NNN.refs.md` extracts have a stem
/// that is no number and are left out, as litany's own `next_seq` leaves them.
const SUMMARY_EXT: &str = ".md";

/// The most bytes one rendered `transcript.md` holds (module docs).
pub(crate) const MAX_TRANSCRIPT_BYTES: usize = 16 << 20;

/// The origin of a tool result entry (`NNN-tool.json`, litany's one reserved token).
pub(super) const TOOL_ORIGIN: &str = "tool";

/// The most open tool calls remembered: the calls of one turn, with room to spare (a
/// result that never comes, after a compaction or a lernie branch, must not grow it).
const OPEN_CALLS_KEPT: usize = 256;

/// A tool call with no result yet: (`tool_use` id, tool name).
pub(super) type OpenCall = (String, String);

/// A rendered transcript and the entries it shows.
#[derive(Debug)]
pub(crate) struct Transcript {
    pub(super) bytes: Arc<Vec<u8>>,
    /// (file name, blob), in the order rendered.
    entries: Vec<(String, Oid)>,
    /// The summaries at the tip: (file name, blob), by number.
    summaries: Vec<(String, Oid)>,
    /// The highest entry number at the tip (0 for none).
    pub(super) max_seq: u32,
    /// Tool calls with no result yet, oldest first.
    pub(super) open_calls: Vec<OpenCall>,
    /// How many of the oldest entries were left out to keep within the bound.
    omitted: usize,
    /// Where each piece shown (an entry, or a compaction section) starts in `bytes`, and
    /// whether it is an entry: what a bound leaves out first.
    pieces: Pieces,
}

/// What rendering one entry depends on from the entries before it.
#[derive(Debug, Default, Clone)]
struct State {
    max_seq: u32,
    open_calls: Vec<OpenCall>,
}

impl State {
    /// The name of open call `id`, if it is one.
    fn call(&self, id: &str) -> Option<&str> {
        self.open_calls
            .iter()
            .find(|(i, _)| i == id)
            .map(|(_, n)| n.as_str())
    }

    fn answered(&mut self, id: &str) {
        self.open_calls.retain(|(i, _)| i != id);
    }

    fn called(&mut self, id: &str, name: &str) {
        if self.open_calls.len() >= OPEN_CALLS_KEPT {
            self.open_calls.remove(0);
        }
        self.open_calls.push((id.to_string(), name.to_string()));
    }
}

impl Transcript {
    /// Bytes this rendering holds.
    pub(super) fn cost(&self) -> usize {
        let names = |v: &Vec<(String, Oid)>| {
            v.iter()
                .map(|(n, _)| n.capacity() + std::mem::size_of::<(String, Oid)>())
                .sum::<usize>()
        };
        std::mem::size_of::<Self>()
            + self.bytes.capacity()
            + names(&self.entries)
            + names(&self.summaries)
            + self.pieces.capacity() * std::mem::size_of::<(usize, bool)>()
            + self
                .open_calls
                .iter()
                .map(|(i, n)| i.capacity() + n.capacity() + 48)
                .sum::<usize>()
    }

    /// The rendered bytes.
    pub(crate) fn bytes(&self) -> &Arc<Vec<u8>> {
        &self.bytes
    }

    /// The highest entry number at the tip (0 for none): the next entry's is one more.
    pub(crate) fn max_seq(&self) -> u32 {
        self.max_seq
    }

    /// The transcript at `tip`, extending one of `cached` when `tip` only added entries
    /// to it. Returns the rendering and the tip it extended.
    pub(super) fn render(
        refs: &Refs,
        tip: Oid,
        cached: &HashMap<Oid, Arc<Transcript>>,
    ) -> Result<(Transcript, Option<Oid>), GitError> {
        let entries = list(refs, tip)?;
        let summaries = summaries(refs, tip)?;
        let (log, reached) = refs.first_parent_log(tip, &mut |id| cached.contains_key(&id))?;
        if let Some(base_tip) = reached
            && let Some(base) = cached.get(&base_tip)
            && entries.starts_with(&base.entries)
            && summaries == base.summaries
            && numbered_on(base.max_seq, &entries[base.entries.len()..])
        {
            let times = times(&log);
            let mut state = State {
                max_seq: base.max_seq,
                open_calls: base.open_calls.clone(),
            };
            let mut shown = Shown::from(base);
            for (name, oid) in &entries[base.entries.len()..] {
                shown.push(true, bounded_entry(refs, name, *oid, &times, &mut state)?);
            }
            let (bytes, pieces, omitted) = shown.assemble();
            let t = Transcript {
                bytes,
                entries,
                summaries,
                max_seq: state.max_seq,
                open_calls: state.open_calls,
                omitted,
                pieces,
            };
            return Ok((t, Some(base_tip)));
        }
        let log = if reached.is_some() {
            refs.first_parent_log(tip, &mut |_| false)?.0
        } else {
            log
        };
        afresh(refs, entries, summaries, &times(&log)).map(|t| (t, None))
    }
}

/// The transcript of `entries` rendered from nothing, oldest first, keeping the newest
/// pieces that fit in [`MAX_TRANSCRIPT_BYTES`].
fn afresh(
    refs: &Refs,
    entries: Vec<(String, Oid)>,
    summaries: Vec<(String, Oid)>,
    times: &HashMap<String, String>,
) -> Result<Transcript, GitError> {
    let mut state = State::default();
    let mut shown = Shown::default();
    let holes = holes(&entries);
    let last_hole = holes.last().map(|h| h.0);
    let compacted = |at: Option<(u32, u32)>| -> Result<Vec<u8>, GitError> {
        let mut out = Vec::new();
        format::compacted(&mut out, at);
        if at.map(|h| h.0) == last_hole {
            for (name, oid) in &summaries {
                let text = refs.blob(*oid)?;
                format::summary(&mut out, &format!("{SUMMARY_DIR}/{name}"), &text);
            }
        }
        Ok(out)
    };
    let mut holes = holes.iter().peekable();
    for (i, (name, oid)) in entries.iter().enumerate() {
        let n = seq_of(name).unwrap_or(0);
        if let Some(&&hole) = holes.peek()
            && hole.1 < n
        {
            holes.next();
            shown.push(false, compacted(Some(hole))?);
        }
        shown.push(true, bounded_entry(refs, name, *oid, times, &mut state)?);
        if i == 0 && last_hole.is_none() && !summaries.is_empty() {
            shown.push(false, compacted(None)?);
        }
    }
    let (bytes, pieces, omitted) = shown.assemble();
    Ok(Transcript {
        bytes,
        entries,
        summaries,
        max_seq: state.max_seq,
        open_calls: state.open_calls,
        omitted,
        pieces,
    })
}

/// Where each piece of a rendering starts, and whether it is an entry.
type Pieces = Vec<(usize, bool)>;

/// The pieces a rendering shows, oldest first, the oldest dropped while they pass
/// [`MAX_TRANSCRIPT_BYTES`]: a rendering's own (shared, by offset) and then new ones.
#[derive(Default)]
struct Shown {
    /// The rendering extended, and its pieces from the first still shown.
    base: Option<(Arc<Vec<u8>>, Pieces)>,
    added: std::collections::VecDeque<(bool, Vec<u8>)>,
    len: usize,
    omitted: usize,
}

impl Shown {
    fn from(t: &Transcript) -> Self {
        let start = t.pieces.first().map_or(t.bytes.len(), |p| p.0);
        Shown {
            base: Some((Arc::clone(&t.bytes), t.pieces.clone())),
            added: Default::default(),
            len: t.bytes.len() - start,
            omitted: t.omitted,
        }
    }

    fn push(&mut self, entry: bool, piece: Vec<u8>) {
        self.len += piece.len();
        self.added.push_back((entry, piece));
        while self.len > MAX_TRANSCRIPT_BYTES {
            let dropped = self.drop_first();
            if dropped.is_none() {
                break;
            }
        }
    }

    /// Drops the oldest piece; its length.
    fn drop_first(&mut self) -> Option<usize> {
        if let Some((bytes, pieces)) = &mut self.base
            && !pieces.is_empty()
        {
            let (start, entry) = pieces.remove(0);
            let end = pieces.first().map_or(bytes.len(), |p| p.0);
            self.len -= end - start;
            self.omitted += usize::from(entry);
            return Some(end - start);
        }
        let (entry, piece) = self.added.pop_front()?;
        self.len -= piece.len();
        self.omitted += usize::from(entry);
        Some(piece.len())
    }

    /// The bytes (the line saying how many entries were left out, if any, then the
    /// pieces), where each piece starts, and how many were left out.
    fn assemble(self) -> (Arc<Vec<u8>>, Pieces, usize) {
        let mut bytes = Vec::with_capacity(self.len + 256);
        if self.omitted > 0 {
            format::named(
                &mut bytes,
                format::ENTRY,
                &format!(
                    "{} earlier entries left out: the transcript shows its last {} MiB \
                     (every entry is in {MESSAGES_DIR}/ at the branch tip)",
                    self.omitted,
                    MAX_TRANSCRIPT_BYTES >> 20
                ),
            );
        }
        let mut pieces = Vec::new();
        if let Some((base, base_pieces)) = &self.base
            && let Some(&(first, _)) = base_pieces.first()
        {
            let shift = bytes.len() as isize - first as isize;
            pieces.extend(
                base_pieces
                    .iter()
                    .map(|&(at, e)| ((at as isize + shift) as usize, e)),
            );
            bytes.extend_from_slice(&base[first..]);
        }
        for (entry, piece) in &self.added {
            pieces.push((bytes.len(), *entry));
            bytes.extend_from_slice(piece);
        }
        (Arc::new(bytes), pieces, self.omitted)
    }
}

/// Entry `name` (blob `oid`) rendered on its own, or, when its blob is too large to read
/// whole or its rendering would pass [`MAX_TRANSCRIPT_BYTES`] alone, a line naming it.
fn bounded_entry(
    refs: &Refs,
    name: &str,
    oid: Oid,
    times: &HashMap<String, String>,
    state: &mut State,
) -> Result<Vec<u8>, GitError> {
    let (_, size) = refs.header(oid)?;
    let mut out = Vec::new();
    if let Some(n) = seq_of(name) {
        state.max_seq = state.max_seq.max(n);
    }
    if size <= MAX_BLOB_BYTES {
        entry(refs, name, oid, times, state, &mut out)?;
        if out.len() <= MAX_TRANSCRIPT_BYTES {
            return Ok(out);
        }
        out.clear();
    }
    let (number, rest) = name.split_once('-').unwrap_or((name, ""));
    let origin = rest.rsplit_once('.').map_or(rest, |(o, _)| o);
    format::entry(
        &mut out,
        number,
        origin,
        times.get(number).map(String::as_str),
        &[],
        &[],
    );
    format::named(
        &mut out,
        BLOCK,
        &format!(
            "entry of {size} bytes, too large to show here: {MESSAGES_DIR}/{name} at the branch tip"
        ),
    );
    Ok(out)
}

/// litany's `seq_of`: the `u32` before the first `-` of an entry's name.
pub(super) fn seq_of(name: &str) -> Option<u32> {
    name.split('-').next()?.parse().ok()
}

/// The runs of numbers missing from `entries` (in order) below the highest, inclusive.
fn holes(entries: &[(String, Oid)]) -> Vec<(u32, u32)> {
    let mut out = Vec::new();
    let mut next = 1u32;
    for (name, _) in entries {
        let Some(n) = seq_of(name) else { continue };
        if n > next {
            out.push((next, n - 1));
        }
        next = next.max(n.saturating_add(1));
    }
    out
}

/// Whether `new` entries number on from `max` without a gap (a gap is a compaction).
fn numbered_on(max: u32, new: &[(String, Oid)]) -> bool {
    let mut next = max.saturating_add(1);
    for (name, _) in new {
        match seq_of(name) {
            Some(n) if n <= next => next = next.max(n.saturating_add(1)),
            _ => return false,
        }
    }
    true
}

/// The transcript entries at `tip`, in litany's order.
fn list(refs: &Refs, tip: Oid) -> Result<Vec<(String, Oid)>, GitError> {
    let Some(GitEntry::Tree(tree)) = refs.entry_at(tip, &[MESSAGES_DIR])? else {
        return Ok(Vec::new());
    };
    let mut entries: Vec<(u32, String, Oid)> = refs
        .list_tree(tree)?
        .into_iter()
        .filter_map(|(name, e)| match e {
            GitEntry::Blob { oid, .. } => Some((seq_of(&name)?, name, oid)),
            _ => None,
        })
        .collect();
    entries.sort();
    Ok(entries.into_iter().map(|(_, n, o)| (n, o)).collect())
}

/// The summaries at `tip`, by number.
fn summaries(refs: &Refs, tip: Oid) -> Result<Vec<(String, Oid)>, GitError> {
    let Some(GitEntry::Tree(tree)) = refs.entry_at(tip, &[SUMMARY_DIR])? else {
        return Ok(Vec::new());
    };
    let mut out: Vec<(u32, String, Oid)> = refs
        .list_tree(tree)?
        .into_iter()
        .filter_map(|(name, e)| match e {
            GitEntry::Blob { oid, .. } => {
                let n = name.strip_suffix(SUMMARY_EXT)?.parse().ok()?;
                Some((n, name, oid))
            }
            _ => None,
        })
        .collect();
    out.sort();
    Ok(out.into_iter().map(|(_, n, o)| (n, o)).collect())
}

/// Entry number (as written in the subject) → author time, newest commit first.
fn times(log: &[crate::workspace::refs::LogEntry]) -> HashMap<String, String> {
    let mut times = HashMap::new();
    for c in log {
        if let Some((number, _)) = subject::transcript(&c.summary) {
            times
                .entry(number.to_string())
                .or_insert_with(|| crate::workspace::clock::format_utc(c.author_time));
        }
    }
    times
}

/// Renders entry `name` (blob `oid`).
fn entry(
    refs: &Refs,
    name: &str,
    oid: Oid,
    times: &HashMap<String, String>,
    state: &mut State,
    out: &mut Vec<u8>,
) -> Result<(), GitError> {
    let bytes = refs.blob(oid)?;
    let number = name.split_once('-').map_or(name, |(n, _)| n);
    let time = times.get(number).map(String::as_str);
    entry_bytes(name, &bytes, time, state, out);
    Ok(())
}

/// Renders entry `name` holding `bytes`, timed `time`.
fn entry_bytes(name: &str, bytes: &[u8], time: Option<&str>, state: &mut State, out: &mut Vec<u8>) {
    let (number, rest) = name.split_once('-').unwrap_or((name, ""));
    let (origin, ext) = rest.rsplit_once('.').unwrap_or((rest, ""));
    if let Some(n) = seq_of(name) {
        state.max_seq = state.max_seq.max(n);
    }
    if ext == MESSAGE_EXT {
        message(number, origin, time, bytes, out);
    } else {
        model_or_tool(number, origin, time, bytes, state, out);
    }
}

impl Transcript {
    /// Renders `entries` (name, bytes, state for its time), in order, as they will read
    /// once committed after this transcript's own: entries litany has written into the
    /// worktree and not committed yet ([`super::live`]). Returns the highest number.
    pub(super) fn render_after(&self, entries: &[(&str, &[u8], &str)], out: &mut Vec<u8>) -> u32 {
        let mut state = State {
            max_seq: self.max_seq,
            open_calls: self.open_calls.clone(),
        };
        for (name, bytes, time) in entries {
            entry_bytes(name, bytes, Some(time), &mut state, out);
        }
        state.max_seq
    }
}

/// A delivered message: its frontmatter fields in the header, its body verbatim. A
/// deposit still waiting is rendered by the same function with its state for a time, so
/// that its delivery only fills the time in ([`super::live`]).
pub(super) fn message(
    number: &str,
    origin: &str,
    time: Option<&str>,
    bytes: &[u8],
    out: &mut Vec<u8>,
) {
    let text = String::from_utf8_lossy(bytes);
    let (fields, body) = match split_frontmatter(&text) {
        Some((front, body)) => (frontmatter_fields(front), body),
        None => (Vec::new(), &*text),
    };
    format::entry(out, number, origin, time, &fields, &[]);
    out.extend_from_slice(body.as_bytes());
    out.extend_from_slice(format::BODY_END);
}

/// A model or tool entry: `{"content":[…],"usage":{…}}` or a bare block array; anything
/// else raw. A tool entry's header names the calls its results answer.
fn model_or_tool(
    number: &str,
    origin: &str,
    time: Option<&str>,
    bytes: &[u8],
    state: &mut State,
    out: &mut Vec<u8>,
) {
    let value = serde_json::from_slice::<Value>(bytes);
    let shape = match &value {
        Ok(Value::Array(blocks)) => Ok((blocks.as_slice(), None)),
        Ok(Value::Object(o)) => match o.get("content") {
            Some(Value::Array(blocks)) => Ok((blocks.as_slice(), o.get("usage"))),
            _ => Err("an object with no content array".to_string()),
        },
        Ok(_) => Err("neither a block array nor an object".to_string()),
        Err(e) => Err(format!("does not parse: {e}")),
    };
    let (blocks, usage) = match shape {
        Ok(shape) => shape,
        Err(why) => {
            format::entry(out, number, origin, time, &[], &[]);
            format::named(out, BLOCK, &format!("entry {why}"));
            format::fenced(out, "text", &String::from_utf8_lossy(bytes));
            return;
        }
    };
    let answered: Vec<(&str, &str)> = blocks
        .iter()
        .filter(|b| b["type"] == "tool_result")
        .filter_map(|b| {
            let id = b["tool_use_id"].as_str()?;
            Some((state.call(id)?, id))
        })
        .collect();
    format::entry(out, number, origin, time, &[], &answered);
    let answered: Vec<String> = answered.iter().map(|(_, id)| id.to_string()).collect();
    for id in &answered {
        state.answered(id);
    }
    for b in blocks {
        block(b, out);
        if let Some(name) = b["name"].as_str()
            && b["type"] == "tool_use"
            && let Some(id) = b["id"].as_str()
        {
            state.called(id, name);
        }
    }
    if let Some(usage) = usage.and_then(Value::as_object) {
        let usage: Usage = usage.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        format::usage(out, BLOCK, &usage);
    }
}

/// The `type` of a content block; a bare string is text.
fn block(b: &Value, out: &mut Vec<u8>) {
    if let Value::String(text) = b {
        format::prose_block(out, BLOCK, Prose::Text, text);
        return;
    }
    let str_at = |k: &str| b[k].as_str().unwrap_or_default();
    match str_at("type") {
        "text" => format::prose_block(out, BLOCK, Prose::Text, str_at("text")),
        "thinking" => format::prose_block(out, BLOCK, Prose::Thinking, str_at("text")),
        label @ ("tool_use" | "server_tool_use") => {
            format::call(out, BLOCK, label, str_at("name"), str_at("id"));
            format::call_input(out, str_at("name"), &b["input"]);
        }
        "tool_result" => {
            format::tool_result(
                out,
                BLOCK,
                str_at("tool_use_id"),
                b["is_error"].as_bool().unwrap_or(false),
            );
            let items = match &b["content"] {
                Value::Array(items) => items.iter().collect::<Vec<_>>(),
                Value::Null => Vec::new(),
                one => vec![one],
            };
            for item in items {
                match item {
                    Value::String(text) => result_text(text, out),
                    v if v["type"] == "text" => result_text(v["text"].as_str().unwrap_or(""), out),
                    v => format::fenced(out, "json", &format::pretty(v)),
                }
            }
        }
        "redacted_thinking" => format::named(
            out,
            BLOCK,
            &format!("redacted_thinking ({} bytes)", str_at("data").len()),
        ),
        "image" | "document" => {
            let source = &b["source"];
            let media = source["media_type"].as_str().or(source["url"].as_str());
            format::named(
                out,
                BLOCK,
                &format!("{} {}", str_at("type"), media.unwrap_or("")),
            );
        }
        other => {
            format::named(out, BLOCK, if other.is_empty() { "block" } else { other });
            format::fenced(out, "json", &format::pretty(b));
        }
    }
}

/// A tool result's text, verbatim: what the model read.
fn result_text(text: &str, out: &mut Vec<u8>) {
    out.extend_from_slice(text.as_bytes());
    out.extend_from_slice(format::BODY_END);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holes_are_the_numbers_missing_below_the_highest() {
        let e = |names: &[&str]| -> Vec<(String, Oid)> {
            names.iter().map(|n| (n.to_string(), Oid::zero())).collect()
        };
        assert_eq!(holes(&e(&["001-u.md", "002-m.json"])), []);
        assert_eq!(
            holes(&e(&["001-u.md", "005-m.json", "006-t.json", "009-u.md"])),
            [(2, 4), (7, 8)]
        );
        assert_eq!(holes(&e(&["003-m.json"])), [(1, 2)]);
        assert!(numbered_on(2, &e(&["003-t.json", "004-m.json"])));
        assert!(!numbered_on(2, &e(&["004-m.json"])));
        assert!(numbered_on(0, &[]));
    }

    #[test]
    fn entry_numbers_are_litanys() {
        assert_eq!(seq_of("001-user.md"), Some(1));
        assert_eq!(seq_of("1000-tool.json"), Some(1000));
        assert_eq!(seq_of("+5-x.json"), Some(5));
        assert_eq!(seq_of("007.md"), None);
        assert_eq!(seq_of("x-user.md"), None);
    }

    fn render(f: impl FnOnce(&mut Vec<u8>)) -> String {
        let mut out = Vec::new();
        f(&mut out);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn a_message_shows_its_fields_and_its_body() {
        let got = render(|o| {
            message(
                "006",
                "b",
                Some("2026-01-01T00:00:00Z"),
                b"---\nfrom: b\nfrom_name: Beta\ndeposited_at: 2026-01-01T00:00:00Z\n---\nping\n",
                o,
            )
        });
        assert_eq!(
            got,
            "## 006 b · 2026-01-01T00:00:00Z · from: b · from_name: Beta · \
             deposited_at: 2026-01-01T00:00:00Z\n\nping\n\n\n"
        );
    }

    #[test]
    fn model_and_tool_entries() {
        let model = br#"{"content":[{"type":"text","text":"hi"},{"type":"tool_use","id":"t1","name":"bash","input":{"command":"ls"}},{"type":"thinking","text":"hm","signature":null}],"usage":{"output_tokens":2,"input_tokens":1}}"#;
        assert_eq!(
            render(|o| model_or_tool("002", "m", None, model, &mut State::default(), o)),
            "## 002 m · time unknown\n\n### text\n\nhi\n\n### tool_use bash (t1)\n\n\
             ```sh\nls\n```\n\n### thinking\n\nhm\n\n\
             ### usage input_tokens=1 output_tokens=2\n\n"
        );
        let tool = br#"[{"type":"tool_result","tool_use_id":"t1","content":[{"type":"text","text":"Exit code: 0\n"}],"is_error":true}]"#;
        let mut state = State::default();
        assert_eq!(
            render(|o| model_or_tool("003", "tool", Some("T"), tool, &mut state, o)),
            "## 003 tool · T\n\n### tool_result t1 · error\n\nExit code: 0\n\n\n"
        );
        // After the call it answers, a result's header names it; the call is then closed.
        render(|o| model_or_tool("002", "m", None, model, &mut state, o));
        assert_eq!(state.open_calls, [("t1".to_string(), "bash".to_string())]);
        assert!(
            render(|o| model_or_tool("003", "tool", Some("T"), tool, &mut state, o))
                .starts_with("## 003 tool · T · bash (t1)\n\n### tool_result t1 · error\n\n")
        );
        assert!(state.open_calls.is_empty());
        assert!(
            render(|o| model_or_tool("004", "x", None, b"{oops", &mut state, o))
                .starts_with("## 004 x · time unknown\n\n### entry does not parse: ")
        );
        // Parsed, but no entry: shown raw too.
        for odd in [&b"42"[..], br#"{"usage":{}}"#] {
            let got = render(|o| model_or_tool("005", "x", None, odd, &mut state, o));
            assert!(
                got.starts_with("## 005 x · time unknown\n\n### entry "),
                "{got}"
            );
            assert!(got.contains(&format!("```text\n{}\n```", String::from_utf8_lossy(odd))));
        }
    }
}
