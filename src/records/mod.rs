//! Readable records: `response.md` beside each step's `response.json`, and the agent's
//! conversation as `transcript.md` (issue #12).
//!
//! **What is guaranteed.**
//! - *Live and append-only.* `response.md` is a function of the complete lines of
//!   `response.json` (those ending in `\n`), and the rendering of a prefix of lines is a
//!   prefix of the rendering of any longer one. So while the harness appends,
//!   `response.md` only grows, `tail -f` shows the words as they stream, and a line
//!   still being written (perhaps cut inside a character) shows nothing until it ends.
//!   The one exception is `closed`: once the caller says nobody appends any more, a
//!   half-stream note (and a cut last line) is added at the end.
//! - *Incremental.* A call renders only the lines appended since the last one for the
//!   same inode; a shrunk or rewritten file is rendered afresh. The cost of an append is
//!   the cost of rendering it.
//! - *Exact sizes.* [`Records::response_len`] is the length that reads will return, from
//!   the one rendering pass; nothing is rendered twice to know it.
//! - *Faithful.* Events are read and folded as litany reads and folds them (see
//!   `response.rs`), so every text block's text is byte-identical to the block litany
//!   commits, and every tool input is equal, as JSON, to the committed one. A line that
//!   does not parse is shown, with its number, and rendering goes on: never an `EIO`.
//! - *Bounded.* Renderings and transcripts share one byte budget, least recently used
//!   first out; the lengths of small closed `response.md` files have a share of it to
//!   themselves ([`LENGTHS_SHARE`]), kept in a table of their own, since a walk sizes one
//!   per step listed and each is a few words.
//!
//! **What is kept.** A rendering no longer than an eighth of the budget is held whole,
//! so reads copy bytes (a text-delta line is ~70 bytes for a few bytes of text, so a
//! 50 MB `response.json` renders to ~4 MB). A longer one keeps a checkpoint (raw offset,
//! rendered offset, fold) every [`CHECKPOINT_BYTES`] of output and the bytes since the
//! last, and a read elsewhere renders again from the checkpoint at or before it, or from
//! where the previous read stopped, so `cat` costs one pass. Holding every rendering
//! whole would be simpler, but pretty-printing a deeply nested tool input multiplies its
//! size, and checkpoints keep memory bounded whatever the rendering's size.
//!
//! **The format** (stable; `format.rs` is its one home). Every section is a header line,
//! a blank line, a body if it has one, and a blank line. Text and thinking bodies are
//! verbatim; tool inputs are fenced (`sh` for a `bash` command, else pretty `json`), with
//! a fence longer than any backtick run inside. `response.md`, one attempt per `bz` run:
//!
//! ````text
//! # attempt 1 · id msg_1 · model fake
//!
//! ## text
//!
//! Let me look.
//!
//! ## tool_use bash (toolu_1)
//!
//! ```sh
//! ls -l
//! ```
//!
//! ## error transport: connection reset
//!
//! # attempt 2 · id msg_2 · model fake
//!
//! ## text
//!
//! Done.
//!
//! ## finish stop · usage input_tokens=20 output_tokens=1
//! ````
//!
//! Other notes: `## thinking`, `## text (continued)` (after a note cut into a block),
//! `## half stream: attempt N has no end event`, `## line N does not parse: <reason> ·
//! "<excerpt>"`, `## line N: text_delta outside a matching block, ignored`, `## image
//! <type>`, `## redacted_thinking (N bytes)`, `## content <kind>` for kinds litany skips.
//!
//! `transcript.md`, one section per `messages/NNN-<origin>.{md,json}` entry at the
//! branch tip, in number order, timed by the author time of its `transcript NNN:`
//! commit; a model entry's blocks are shown as in `response.md`, one level down, then its
//! usage; a tool result verbatim, as the model saw it (cut markers and their
//! `read_tool_output` addresses included), its header naming the call it answers; a run
//! of compacted numbers as `## compacted <first> to <last>` with the summaries at the tip
//! (`transcript.rs`); then where the conversation stands now ([`live`]: mail waiting, the
//! step streaming, a tool running, a held call, a wound), each live entry rendered as the
//! entry it becomes with its state in the time's place:
//!
//! ````text
//! ## 001 user · 2026-12-02T09:42:26Z · from: user · deposited_at: 2026-12-02T09:42:26Z
//!
//! hello alpha
//!
//! ## 002 claude-sonnet-5 · 2026-12-02T09:42:27Z
//!
//! ### tool_use bash (toolu_1)
//!
//! ```sh
//! seq 1 3000
//! ```
//!
//! ### usage input_tokens=10 output_tokens=2
//!
//! ## 003 tool · 2026-12-02T09:42:27Z · bash (toolu_1)
//!
//! ### tool_result toolu_1
//!
//! Exit code: 0
//! …
//!
//! ## 004 claude-sonnet-5 · streaming, in flight
//!
//! ### text
//!
//! The listing sh
//! ````
//!
//! **lernie.** lernie's events have the same v=1 shape, so its `response.json` renders the
//! same. Its model entries are bare block arrays named `NNN-assistant.json` with no
//! usage: they render with no usage line. Its cut markers carry no address, so its tool
//! results show none.

pub(crate) mod failure;
pub(crate) mod format;
pub mod live;
mod response;
mod transcript;

use std::collections::HashMap;
use std::fs::File;
use std::io;
use std::sync::Arc;

use git2::Oid;
use parking_lot::Mutex;

use crate::lru::ByteLru;
use crate::paging::CaptureKey;
use crate::workspace::refs::{GitError, Refs};
use live::{Facts, Part, View};
pub(crate) use response::{Attempt, Tally, Tokens};
use response::{Fold, Rendering};
pub(crate) use transcript::Transcript;

/// Rendered bytes between two checkpoints of a `response.md` not held whole. A read
/// re-renders at most this much before the bytes it wants, under 1 ms for text deltas.
pub(crate) const CHECKPOINT_BYTES: u64 = 64 * 1024;

/// A rendering up to 1/`KEEP_SHARE` of the budget is held whole, so reads of it copy
/// bytes; a longer one holds its checkpoints and the bytes since the last.
const KEEP_SHARE: usize = 8;

/// What a cache slot is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Key {
    /// A `response.json` as `response.md`, by (dev, ino).
    Response(u64, u64),
    /// A `response.json` as the model entry it streams into `transcript.md`, by (dev, ino).
    Entry(u64, u64),
    /// A transcript, by branch tip.
    Transcript(Oid),
}

/// Which rendering of a `response.json`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    /// `response.md`.
    Response,
    /// The model entry it becomes, in `transcript.md` ([`Fold::entry`]).
    Entry,
}

impl Shape {
    fn key(self, key: CaptureKey) -> Key {
        match self {
            Shape::Response => Key::Response(key.dev, key.ino),
            Shape::Entry => Key::Entry(key.dev, key.ino),
        }
    }

    fn fold(self) -> Fold {
        match self {
            Shape::Response => Fold::default(),
            Shape::Entry => Fold::entry(),
        }
    }
}

#[derive(Clone)]
enum Value {
    Response(Arc<Mutex<Rendering>>),
    Transcript(Arc<Transcript>),
}

/// Only the length of a closed `response.md` of at most [`LENGTH_ONLY_BYTES`] of
/// `response.json`, as of that file's version (its size and mtime; the (dev, ino) are
/// the table's key): what a listing needs. Each read renders it again, which costs less
/// than keeping the rendering of every step listed or read (a `grep -r` reads them all
/// once).
#[derive(Clone, Copy, PartialEq, Eq)]
struct Length {
    size: u64,
    mtime_ns: i64,
    len: u64,
}

impl Length {
    fn of(key: CaptureKey, len: u64) -> Self {
        Length {
            size: key.size,
            mtime_ns: key.mtime_ns,
            len,
        }
    }

    /// The length, if it was taken of version `key`.
    fn at(self, key: CaptureKey) -> Option<u64> {
        (self.size == key.size && self.mtime_ns == key.mtime_ns).then_some(self.len)
    }
}

/// The share of the budget the lengths table has (1/`LENGTHS_SHARE`); the renderings
/// and transcripts have the rest. At about 56 bytes an entry, the default budget's
/// share holds some 150,000 steps' lengths.
pub(crate) const LENGTHS_SHARE: usize = 8;

/// The largest `response.json` whose closed `response.md` is remembered by its length
/// alone once sized or read ([`Length`]): rendering this much again takes well
/// under a millisecond, and a listing or a `grep -r` of many steps then costs the cache
/// a slot a step instead of each step's rendering.
pub(crate) const LENGTH_ONLY_BYTES: u64 = CHECKPOINT_BYTES;

type Lru = ByteLru<Key, Value>;
type Lengths = ByteLru<(u64, u64), Length>;

/// The models named by the `request.json` files of streaming steps, by (dev, ino), as of
/// the version read: a request holds the whole conversation, so it is read once a step.
type Models = crate::FastMap<(u64, u64), (CaptureKey, Option<String>)>;
/// The most request models remembered (one per agent streaming now, and more).
const MODELS_KEPT: usize = 4096;
/// A top-level key of the pretty JSON, keys sorted, litany writes a request as.
const REQUEST_MODEL_KEY: &[u8] = b"\n  \"model\": ";

/// Renderings of `response.json` files and transcripts, within a byte budget. Shared by
/// the request threads: calls for different files run in parallel, calls for the same
/// `response.json` one at a time.
pub struct Records {
    budget: usize,
    interval: u64,
    keep: u64,
    ahead_part: u64,
    lru: Mutex<Lru>,
    lengths: Mutex<Lengths>,
    models: Mutex<Models>,
}

impl Records {
    /// A cache holding at most `max_bytes`, with a checkpoint every [`CHECKPOINT_BYTES`].
    pub fn new(max_bytes: usize) -> Self {
        Self::with_checkpoint_interval(max_bytes, CHECKPOINT_BYTES)
    }

    /// A cache with a checkpoint every `interval` rendered bytes (small ones are for
    /// tests).
    pub fn with_checkpoint_interval(max_bytes: usize, interval: u64) -> Self {
        Self::with_limits(max_bytes, interval, (max_bytes / KEEP_SHARE) as u64)
    }

    /// A cache that holds a rendering whole while it is at most `keep` bytes long.
    pub(crate) fn with_limits(max_bytes: usize, interval: u64, keep: u64) -> Self {
        Records {
            budget: max_bytes,
            interval: interval.max(1),
            keep,
            ahead_part: response::AHEAD_PART,
            lru: Mutex::new(Lru::default()),
            lengths: Mutex::new(Lengths::default()),
            models: Mutex::new(Models::default()),
        }
    }

    /// The `model` of the `request.json` open as `file` (fstat `key`): the origin litany
    /// gives the step's model entry. Read once per version of the file.
    pub(crate) fn request_model(&self, file: &File, key: CaptureKey) -> io::Result<Option<String>> {
        if let Some((k, m)) = self.models.lock().get(&(key.dev, key.ino))
            && *k == key
        {
            return Ok(m.clone());
        }
        let len = usize::try_from(key.size).map_err(io::Error::other)?;
        let bytes = response::read_exact_at(file, 0, len)?;
        let model = request_model(&bytes);
        let mut models = self.models.lock();
        if models.len() >= MODELS_KEPT {
            models.clear();
        }
        models.insert((key.dev, key.ino), (key, model.clone()));
        Ok(model)
    }

    /// The same cache rendering ahead on other threads from `bytes` of a file on (small
    /// ones are for tests).
    #[cfg(test)]
    pub(crate) fn rendering_ahead_from(mut self, bytes: u64) -> Self {
        self.ahead_part = bytes.max(1);
        self
    }

    fn rendering(&self, shape: Shape) -> Rendering {
        Rendering::new(self.interval, self.keep(), self.ahead_part, shape.fold())
    }

    /// The longest rendering held whole.
    fn keep(&self) -> u64 {
        self.keep
    }

    /// Bytes held now, by the cache's own accounting.
    pub fn used_bytes(&self) -> usize {
        self.lru.lock().used() + self.lengths.lock().used()
    }

    /// Renderings, transcripts and lengths held now.
    pub fn entries(&self) -> usize {
        self.lru.lock().len() + self.lengths.lock().len()
    }

    /// The budget of the renderings and transcripts: all but the lengths' share.
    fn renderings_budget(&self) -> usize {
        self.budget - self.budget / LENGTHS_SHARE
    }

    /// Runs `f` on the rendering of the `response.json` open as `file`, brought up to
    /// `key` first.
    fn with_response<T>(
        &self,
        file: &File,
        key: CaptureKey,
        closed: bool,
        f: impl FnOnce(&mut Rendering) -> io::Result<T>,
    ) -> io::Result<T> {
        self.with_rendering(Shape::Response, file, key, closed, f)
    }

    /// Runs `f` on the `shape` rendering of the `response.json` open as `file`, brought
    /// up to `key` first.
    fn with_rendering<T>(
        &self,
        shape: Shape,
        file: &File,
        key: CaptureKey,
        closed: bool,
        f: impl FnOnce(&mut Rendering) -> io::Result<T>,
    ) -> io::Result<T> {
        let slot = shape.key(key);
        let rendering = {
            let mut lru = self.lru.lock();
            match lru.get(slot) {
                Some(Value::Response(r)) => r,
                _ => {
                    let r = Arc::new(Mutex::new(self.rendering(shape)));
                    lru.insert(slot, Value::Response(Arc::clone(&r)), 0);
                    r
                }
            }
        };
        let (result, cost) = {
            let mut r = rendering.lock();
            let result = r.sync(file, key, closed).and_then(|()| f(&mut r));
            if result.is_err() {
                // A failed read may have left the rendering half done: start over.
                *r = self.rendering(shape);
            }
            (result, r.cost())
        };
        let mut lru = self.lru.lock();
        // Unless the rendering was evicted or replaced meanwhile.
        lru.set_cost(
            &slot,
            |v| matches!(v, Value::Response(r) if Arc::ptr_eq(r, &rendering)),
            cost,
        );
        lru.evict(self.renderings_budget());
        result
    }

    /// The exact length of `response.md` for the `response.json` open as `file`, whose
    /// fstat gave `key`. Renders only the complete lines appended since the last call for
    /// the same (dev, ino) when the file only grew, afresh otherwise. `closed` says that
    /// nothing will be appended any more (the step has a successor or a `meta.json`, or
    /// its executor is gone); it adds the end of a half stream. Pass it monotonically.
    pub fn response_len(&self, file: &File, key: CaptureKey, closed: bool) -> io::Result<u64> {
        match self.length_only(file, key, closed, None)? {
            Some(len) => Ok(len),
            None => self.with_response(file, key, closed, |r| Ok(r.len())),
        }
    }

    /// For a closed `response.md` of at most [`LENGTH_ONLY_BYTES`] of `response.json`
    /// that the cache holds no rendering of: its length, and `read`'s bytes
    /// (`offset`, `len`, appended to the buffer) from a rendering made for this call
    /// alone; only the length is kept ([`Length`]). `None` for any other
    /// `response.md`, which [`Records::with_response`] serves.
    fn length_only(
        &self,
        file: &File,
        key: CaptureKey,
        closed: bool,
        read: Option<(u64, u64, &mut Vec<u8>)>,
    ) -> io::Result<Option<u64>> {
        if !closed || key.size > LENGTH_ONLY_BYTES {
            return Ok(None);
        }
        // A rendering already held answers itself.
        if matches!(
            self.lru.lock().peek(&Key::Response(key.dev, key.ino)),
            Some(Value::Response(_))
        ) {
            return Ok(None);
        }
        let slot = (key.dev, key.ino);
        let known = self.lengths.lock().get(slot).and_then(|l| l.at(key));
        // Sizing, or a read at or past the end (a reader's last, empty one), needs no
        // rendering once the length is known.
        if let Some(len) = known
            && read.as_ref().is_none_or(|(offset, _, _)| *offset >= len)
        {
            return Ok(Some(len));
        }
        let mut r = self.rendering(Shape::Response);
        r.sync(file, key, closed)?;
        if let Some((offset, n, out)) = read {
            r.read(file, offset, n, out)?;
        }
        let len = r.len();
        if known.is_none() {
            let mut lengths = self.lengths.lock();
            // Its slot is all it costs, and the table counts slots itself.
            lengths.insert(slot, Length::of(key, len), 0);
            lengths.evict(self.budget / LENGTHS_SHARE);
        }
        Ok(Some(len))
    }

    /// Bytes `[offset, offset + len)` of `response.md`, cut short at its end (as a file
    /// read is); `key` and `closed` as for [`Records::response_len`].
    pub fn response_read(
        &self,
        file: &File,
        key: CaptureKey,
        closed: bool,
        offset: u64,
        len: u64,
    ) -> io::Result<Vec<u8>> {
        let mut out = Vec::new();
        self.response_read_into(file, key, closed, offset, len, &mut out)?;
        Ok(out)
    }

    /// [`Records::response_read`], appending to `out`.
    pub(crate) fn response_read_into(
        &self,
        file: &File,
        key: CaptureKey,
        closed: bool,
        offset: u64,
        len: u64,
        out: &mut Vec<u8>,
    ) -> io::Result<()> {
        if self
            .length_only(file, key, closed, Some((offset, len, &mut *out)))?
            .is_some()
        {
            return Ok(());
        }
        self.with_response(file, key, closed, |r| r.read(file, offset, len, out))
    }

    /// `transcript.md`'s committed part for the branch tip `tip`, cached by tip (the
    /// bytes of [`Records::transcript_rendering`]).
    pub fn transcript(&self, refs: &Refs, tip: Oid) -> Result<Arc<Vec<u8>>, GitError> {
        Ok(Arc::clone(self.transcript_rendering(refs, tip)?.bytes()))
    }

    /// The committed transcript of the agent whose branch tip is `tip`, cached by tip. A
    /// tip that only added entries to a cached one renders only those; rewritten history
    /// (a compaction landing) is rendered afresh.
    pub(crate) fn transcript_rendering(
        &self,
        refs: &Refs,
        tip: Oid,
    ) -> Result<Arc<Transcript>, GitError> {
        if let Some(Value::Transcript(t)) = self.lru.lock().get(Key::Transcript(tip)) {
            return Ok(t);
        }
        let cached: HashMap<Oid, Arc<Transcript>> = {
            let lru = self.lru.lock();
            lru.iter()
                .filter_map(|(k, v)| match (k, v) {
                    (Key::Transcript(oid), Value::Transcript(t)) => Some((*oid, Arc::clone(t))),
                    _ => None,
                })
                .collect()
        };
        let (rendered, base) = Transcript::render(refs, tip, &cached)?;
        let rendered = Arc::new(rendered);
        let mut lru = self.lru.lock();
        if let Some(base) = base {
            // The base's tip is history now; its bytes live on in the new rendering.
            lru.remove(&Key::Transcript(base));
        }
        let cost = rendered.cost();
        lru.insert(
            Key::Transcript(tip),
            Value::Transcript(Arc::clone(&rendered)),
            cost,
        );
        lru.evict(self.renderings_budget());
        Ok(rendered)
    }

    /// `transcript.md` as it stands: the committed entries at `tip`, then the live tail
    /// `facts` describe ([`live`]). The streaming entry's blocks are rendered from its
    /// `response.json` by the same cache as `response.md` (in their own slot), so a
    /// delta appended costs the rendering of that delta.
    pub fn transcript_view(&self, refs: &Refs, tip: Oid, facts: Facts) -> Result<View, ViewError> {
        let committed = self.transcript_rendering(refs, tip)?;
        let mut stream = None;
        let mut kind = String::new();
        if let Some(m) = &facts.model
            && let Some((file, key)) = &m.response
        {
            let (len, outcome, open) =
                self.with_rendering(Shape::Entry, file, *key, m.closed, |r| {
                    Ok((r.len(), r.fold().outcome().cloned(), r.fold().in_attempt()))
                })?;
            kind = live::wound_kind(outcome.as_ref(), open);
            stream = Some(len);
        }
        let sections = live::sections(&committed, &facts, &kind);
        let mut parts = Vec::new();
        if !sections.before.is_empty() {
            parts.push(Part::Bytes(sections.before));
        }
        if let (Some(len), Some(m)) = (stream, facts.model)
            && let Some((file, key)) = m.response
        {
            parts.push(Part::Stream {
                file,
                key,
                closed: m.closed,
                len,
            });
        }
        if !sections.after.is_empty() {
            parts.push(Part::Bytes(sections.after));
        }
        Ok(View::new(Arc::clone(committed.bytes()), parts))
    }

    /// Bytes `[offset, offset + len)` of `view`, cut short at its end, appended to `out`.
    /// The streaming entry is read from its rendering as it is now: it only grew since the
    /// view was taken, so the view's bytes are a prefix of it.
    pub fn view_read(
        &self,
        view: &View,
        offset: u64,
        len: u64,
        out: &mut Vec<u8>,
    ) -> io::Result<()> {
        let end = offset.saturating_add(len).min(view.len());
        let mut at = 0u64;
        let slice = |bytes: &[u8], at: u64, out: &mut Vec<u8>| {
            let hi = at + bytes.len() as u64;
            if hi > offset && at < end {
                let from = (offset.max(at) - at) as usize;
                let to = (end.min(hi) - at) as usize;
                out.extend_from_slice(&bytes[from..to]);
            }
        };
        slice(&view.committed, at, out);
        at += view.committed.len() as u64;
        for part in &view.parts {
            if at >= end {
                break;
            }
            let part_len = part.len();
            match part {
                Part::Bytes(b) => slice(b, at, out),
                Part::Stream {
                    file, key, closed, ..
                } => {
                    if at + part_len > offset {
                        let from = offset.saturating_sub(at);
                        let to = end.min(at + part_len) - at;
                        let now = CaptureKey::of(file).unwrap_or(*key);
                        self.with_rendering(Shape::Entry, file, now, *closed, |r| {
                            r.read(file, from, to - from, out)
                        })?;
                    }
                }
            }
            at += part_len;
        }
        Ok(())
    }
}

/// The top-level `model` of a canonical request: found as the line litany's pretty,
/// key-sorted writing puts it on (a string inside the request cannot hold a raw newline),
/// else by parsing the whole request.
fn request_model(bytes: &[u8]) -> Option<String> {
    if let Some(at) = memchr::memmem::find(bytes, REQUEST_MODEL_KEY) {
        let rest = &bytes[at + REQUEST_MODEL_KEY.len()..];
        if let Some(Ok(model)) = serde_json::Deserializer::from_slice(rest)
            .into_iter::<String>()
            .next()
        {
            return Some(model);
        }
    }
    let v: serde_json::Value = serde_json::from_slice(bytes).ok()?;
    v.get("model")?.as_str().map(str::to_string)
}

/// Why a transcript could not be rendered.
#[derive(Debug)]
pub enum ViewError {
    Git(GitError),
    Io(io::Error),
}

impl std::fmt::Display for ViewError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ViewError::Git(e) => e.fmt(f),
            ViewError::Io(e) => e.fmt(f),
        }
    }
}

impl From<GitError> for ViewError {
    fn from(e: GitError) -> Self {
        ViewError::Git(e)
    }
}

impl From<io::Error> for ViewError {
    fn from(e: io::Error) -> Self {
        ViewError::Io(e)
    }
}

impl std::fmt::Debug for Records {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let lru = self.lru.lock();
        f.debug_struct("Records")
            .field("budget", &self.budget)
            .field("interval", &self.interval)
            .field("entries", &lru.len())
            .field("used", &lru.used())
            .finish()
    }
}

#[cfg(test)]
mod tests;
