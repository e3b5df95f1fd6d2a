//! `response.md`: the fold over a `response.json`'s brazen events (CONTRACT §8.3).
//!
//! [`Fold`] is the renderer's whole state between two lines. [`Fold::feed_line`] takes
//! one complete line and appends its rendering, so the rendering of a prefix of complete
//! lines is a prefix of the rendering of any longer one. [`Rendering`] drives the fold
//! over a file: it renders each complete line once and holds the output whole while it
//! is short; past that it keeps a [`Checkpoint`] (raw offset, rendered offset, fold)
//! every `interval` rendered bytes and the bytes since the last one, and serves a read by
//! rendering again from the checkpoint at or before it, or from the [`Cursor`] where the
//! previous read stopped.
//!
//! The events are read as litany reads them (`serde_json::from_slice::<brazen::Event>`)
//! and folded as litany's staging writer folds them: one block at a time, whatever its
//! `index`, a delta counting only for the block kind it belongs to, a tool's input the
//! join of its `json_delta`s (empty meaning `{}`). So a text block shows exactly the text
//! litany commits for it. The one shape litany cannot tell apart, and neither can this
//! fold: lines after an attempt's `end` start the next attempt.
//!
//! Text deltas are nearly every line of a long answer, so a line of the exact shape brazen
//! writes for them is matched without building an event ([`fast::fast_delta`]); anything else
//! takes serde's path, which accepts and refuses the same lines. A run of them into the
//! text block being shown only appends their strings, so it is scanned a buffer at a time
//! ([`text_run`]); and since that depends on the bytes alone, a long file's later parts
//! are rendered ahead on threads of their own while the fold reaches them
//! ([`Rendering::render_parts`]).
//!
//! Bounded: a line is read into memory only up to [`MAX_LINE_BYTES`]; a longer one (a
//! broken writer, a hostile file) is skipped without being held and shows as a line
//! naming its length ([`Fold::feed_long_line`]).

use std::fs::File;
use std::io;
use std::ops::ControlFlow;
use std::os::unix::fs::FileExt;

use crate::paging::CaptureKey;

mod fast;
mod fold;
mod tally;

use fast::{Run, text_run};
pub(super) use fold::{Fold, Outcome};
pub(crate) use tally::{Attempt, Tally, Tokens};

#[cfg(test)]
pub(super) use fast::takes_fast_path;

/// Bytes read at a time.
const CHUNK: usize = 256 * 1024;
/// The longest line of a `response.json` read into memory (brazen's longest, a whole
/// tool input, is far shorter); a longer one is shown as a line naming its length.
pub(crate) const MAX_LINE_BYTES: usize = 8 << 20;

/// What [`each_lines`] hands over: complete lines (each with its `\n`), or one line
/// longer than [`MAX_LINE_BYTES`], by its length with its `\n`, never read whole.
enum Lines<'a> {
    Complete(&'a [u8]),
    TooLong(u64),
}

/// One line as [`each_line`] hands it over: its bytes without the `\n`, or the length of
/// one too long to hold.
pub(super) enum Line<'a> {
    Bytes(&'a [u8]),
    TooLong(u64),
}

/// `read_at`, retried on `EINTR`.
fn read_at(file: &File, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    loop {
        match file.read_at(buf, offset) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            other => return other,
        }
    }
}

/// Reads exactly `len` bytes at `offset`, fewer if the file ends first.
pub(super) fn read_exact_at(file: &File, offset: u64, len: usize) -> io::Result<Vec<u8>> {
    let mut buf = vec![0; len];
    let mut got = 0;
    while got < len {
        let n = read_at(file, &mut buf[got..], offset + got as u64)?;
        if n == 0 {
            break;
        }
        got += n;
    }
    buf.truncate(got);
    Ok(buf)
}

/// Calls `f` with each complete line in `[from, limit)` (without its `\n`) and the offset
/// just past it, until `f` breaks. Returns the offset past the last line handed over.
fn each_line(
    file: &File,
    from: u64,
    limit: u64,
    mut f: impl FnMut(Line<'_>, u64) -> ControlFlow<()>,
) -> io::Result<u64> {
    let mut consumed = from;
    each_lines(file, from, limit, |lines, base| {
        let lines = match lines {
            Lines::Complete(lines) => lines,
            Lines::TooLong(len) => {
                consumed = base + len;
                return f(Line::TooLong(len - 1), consumed);
            }
        };
        let mut start = 0;
        for end in memchr::memchr_iter(b'\n', lines) {
            consumed = base + end as u64 + 1;
            f(Line::Bytes(&lines[start..end]), consumed)?;
            start = end + 1;
        }
        ControlFlow::Continue(())
    })?;
    Ok(consumed)
}

/// Calls `f` with the complete lines in `[from, limit)` (each with its `\n`) a buffer at a
/// time, and the file offset of the first, until `f` breaks; a line longer than
/// [`MAX_LINE_BYTES`] is handed over by its length alone. Returns the offset past the
/// last line handed over.
fn each_lines(
    file: &File,
    from: u64,
    limit: u64,
    mut f: impl FnMut(Lines<'_>, u64) -> ControlFlow<()>,
) -> io::Result<u64> {
    // No bigger than what there is to read: an append of one line reads one line.
    let span = usize::try_from(limit.saturating_sub(from)).unwrap_or(CHUNK);
    let mut buf = vec![0u8; span.clamp(1, CHUNK)];
    // File offset of buf[0]; bytes of buf that hold data.
    let (mut base, mut filled) = (from, 0usize);
    while base + (filled as u64) < limit {
        if filled == buf.len() {
            if filled >= MAX_LINE_BYTES {
                // One line longer than the bound: find where it ends without holding it.
                let Some(end) = line_after(file, base + filled as u64, limit)? else {
                    // It does not end before `limit`: not a complete line yet.
                    return Ok(base);
                };
                if f(Lines::TooLong(end - base), base).is_break() {
                    return Ok(end);
                }
                (base, filled) = (end, 0);
                continue;
            }
            // One line longer than the buffer: make room for more of it.
            buf.resize((buf.len() * 2).min(MAX_LINE_BYTES), 0);
        }
        let at = base + filled as u64;
        let room =
            usize::try_from(limit - at).map_or(buf.len() - filled, |w| w.min(buf.len() - filled));
        let n = read_at(file, &mut buf[filled..filled + room], at)?;
        if n == 0 {
            break;
        }
        let searched = filled;
        filled += n;
        let Some(last) = memchr::memrchr(b'\n', &buf[searched..filled]) else {
            continue;
        };
        let end = searched + last + 1;
        if f(Lines::Complete(&buf[..end]), base).is_break() {
            return Ok(base + end as u64);
        }
        buf.copy_within(end..filled, 0);
        base += end as u64;
        filled -= end;
    }
    Ok(base)
}

/// Raw bytes rendered in one go, split between threads: what a window's runs rendered
/// ahead hold at once is about a thirteenth of it (text deltas render to that share).
const AHEAD_WINDOW: u64 = 64 << 20;
/// The least a thread renders ahead: below it, starting the thread costs more than it saves.
pub(super) const AHEAD_PART: u64 = 4 << 20;
/// Threads one rendering uses at most.
const AHEAD_THREADS: u64 = 4;

/// Where `[from, limit)` is split for rendering ahead: `from`, then the start of a line
/// near each equal share (one part per CPU, each at least `least` bytes), then `limit`.
fn split(file: &File, from: u64, limit: u64, least: u64) -> io::Result<Vec<u64>> {
    let span = limit.saturating_sub(from);
    let mut bounds = vec![from];
    if span / least.max(1) < 2 {
        // An append: no thread to start, and no CPUs to count (a look at the cgroup).
        bounds.push(limit);
        return Ok(bounds);
    }
    static CPUS: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    let cpus =
        *CPUS.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get() as u64));
    let parts = cpus.min(AHEAD_THREADS).min(span / least.max(1)).max(1);
    for i in 1..parts {
        let at = from + span / parts * i;
        match line_after(file, at.max(bounds[bounds.len() - 1]), limit)? {
            Some(start) if start < limit => bounds.push(start),
            _ => break,
        }
    }
    bounds.push(limit);
    Ok(bounds)
}

/// The offset just past the first `\n` at or after `at`, if there is one before `limit`.
fn line_after(file: &File, mut at: u64, limit: u64) -> io::Result<Option<u64>> {
    let mut buf = vec![0; 64 * 1024];
    while at < limit {
        let room = usize::try_from(limit - at).map_or(buf.len(), |r| r.min(buf.len()));
        let n = read_at(file, &mut buf[..room], at)?;
        if n == 0 {
            return Ok(None);
        }
        if let Some(i) = memchr::memchr(b'\n', &buf[..n]) {
            return Ok(Some(at + i as u64 + 1));
        }
        at += n as u64;
    }
    Ok(None)
}

/// A run of text deltas rendered ahead of the fold ([`text_run`]): its length in bytes and
/// lines, its rendering, and marks at line ends about every `grain` rendered bytes, where
/// checkpoints can go.
#[derive(Debug, Default)]
struct Ahead {
    bytes: u64,
    lines: u64,
    out: Vec<u8>,
    marks: Vec<Mark>,
}

/// A line end in an [`Ahead`] run: bytes and lines consumed, bytes rendered, up to it.
#[derive(Debug, Clone, Copy)]
struct Mark {
    bytes: u64,
    lines: u64,
    out: usize,
}

/// The leading run of text deltas of `[from, to)`, rendered (see [`Ahead`]).
fn render_ahead(file: &File, from: u64, to: u64, grain: u64) -> io::Result<Ahead> {
    let grain = usize::try_from(grain).unwrap_or(usize::MAX);
    let mut run = Ahead::default();
    each_lines(file, from, to, |lines, _| {
        // A line too long to hold is of no run: the fold takes it.
        let Lines::Complete(lines) = lines else {
            return ControlFlow::Break(());
        };
        let mut at = 0;
        while at < lines.len() {
            let stop = (run.out.len() / grain + 1).saturating_mul(grain);
            match text_run(&lines[at..], &mut run.out, stop) {
                Run::Text { bytes, lines: n } if bytes > 0 => {
                    at += bytes;
                    run.bytes += bytes as u64;
                    run.lines += n;
                    run.marks.push(Mark {
                        bytes: run.bytes,
                        lines: run.lines,
                        out: run.out.len(),
                    });
                    if at < lines.len() && run.out.len() < stop {
                        // Stopped before a line of another kind: the run ends there.
                        return ControlFlow::Break(());
                    }
                }
                _ => return ControlFlow::Break(()),
            }
        }
        ControlFlow::Continue(())
    })?;
    Ok(run)
}

/// A point the rendering can restart from: the fold after the line ending at `raw`,
/// whose rendering ends at `rendered`.
#[derive(Debug, Clone)]
struct Checkpoint {
    raw: u64,
    rendered: u64,
    fold: Fold,
}

/// Rendered bytes since the last checkpoint, of a body whose bytes from `held_from` on
/// are `held`.
fn since_checkpoint(checkpoints: &[Checkpoint], held: &[u8], held_from: u64) -> u64 {
    let last = checkpoints.last().map_or(0, |c| c.rendered);
    (held_from + held.len() as u64).saturating_sub(last)
}

/// The checkpoint rule, for a body just rendered up to the line ending at `raw`: once
/// `interval` bytes were rendered since the last checkpoint, one is kept here with the
/// fold `fold` gives; and a body longer than `keep` lets go of what it held before it.
fn checkpoint_if_due(
    checkpoints: &mut Vec<Checkpoint>,
    held: &mut Vec<u8>,
    held_from: &mut u64,
    (interval, keep): (u64, u64),
    raw: u64,
    fold: impl FnOnce() -> Fold,
) {
    if since_checkpoint(checkpoints, held, *held_from) < interval {
        return;
    }
    let rendered = *held_from + held.len() as u64;
    checkpoints.push(Checkpoint {
        raw,
        rendered,
        fold: fold(),
    });
    if rendered > keep {
        held.clear();
        *held_from = rendered;
    }
}

/// Where the last re-rendering stopped: a checkpoint, plus the rendering of the line
/// before it (`pending`, ending at `at.rendered`), so a sequential reader carries on
/// from there instead of from a checkpoint behind it.
#[derive(Debug, Clone)]
struct Cursor {
    at: Checkpoint,
    pending: Vec<u8>,
}

/// How many bytes at each end of the rendered prefix are compared to tell an append from
/// a rewrite.
const PROBE_BYTES: usize = 64;

/// The rendering of one `response.json` (one inode), as far as it has grown.
#[derive(Debug)]
pub(super) struct Rendering {
    interval: u64,
    /// A rendering no longer than this is held whole.
    keep: u64,
    /// The least a thread renders ahead ([`AHEAD_PART`] but in tests).
    ahead_part: u64,
    /// The last key synced to.
    key: Option<CaptureKey>,
    /// End of the last complete line rendered.
    raw_end: u64,
    /// The file's first and last [`PROBE_BYTES`] before `raw_end`, when last read.
    head: Vec<u8>,
    probe: Vec<u8>,
    /// The fold after `raw_end`.
    fold: Fold,
    /// Restart points, the first at the start of the file.
    checkpoints: Vec<Checkpoint>,
    /// Rendered bytes `[held_from, body_len)`: all of them while the rendering is at most
    /// `keep` long, else those since the last checkpoint.
    held: Vec<u8>,
    held_from: u64,
    cursor: Option<Cursor>,
    /// The closing rendering, for the size it was computed at.
    epilogue: Option<(u64, Vec<u8>)>,
    /// The fold a fresh rendering starts from: `response.md`'s or an entry's.
    start: Fold,
}

impl Rendering {
    /// An empty rendering with a checkpoint every `interval` rendered bytes, held whole
    /// while it is at most `keep` bytes long, rendering ahead on other threads parts of at
    /// least `ahead_part` bytes, folding from `start` ([`Fold::default`] for `response.md`,
    /// [`Fold::entry`] for a transcript's streaming entry).
    pub(super) fn new(interval: u64, keep: u64, ahead_part: u64, start: Fold) -> Self {
        Rendering {
            interval: interval.max(1),
            keep,
            ahead_part,
            key: None,
            raw_end: 0,
            head: Vec::new(),
            probe: Vec::new(),
            fold: start.clone(),
            checkpoints: vec![Checkpoint {
                raw: 0,
                rendered: 0,
                fold: start.clone(),
            }],
            held: Vec::new(),
            held_from: 0,
            cursor: None,
            epilogue: None,
            start,
        }
    }

    /// The fold after the last complete line rendered.
    pub(super) fn fold(&self) -> &Fold {
        &self.fold
    }

    /// Rendered bytes of the complete lines.
    fn body_len(&self) -> u64 {
        self.held_from + self.held.len() as u64
    }

    /// The exact length of the rendering.
    pub(super) fn len(&self) -> u64 {
        self.body_len() + self.epilogue.as_ref().map_or(0, |(_, e)| e.len() as u64)
    }

    /// Bytes this rendering holds, by its own accounting.
    pub(super) fn cost(&self) -> usize {
        let checkpoint = |c: &Checkpoint| std::mem::size_of::<Checkpoint>() + c.fold.heap_bytes();
        std::mem::size_of::<Self>()
            + self.held.capacity()
            + self.head.capacity()
            + self.probe.capacity()
            + self.fold.heap_bytes()
            + self.epilogue.as_ref().map_or(0, |(_, e)| e.capacity())
            + self.checkpoints.iter().map(checkpoint).sum::<usize>()
            + self
                .cursor
                .as_ref()
                .map_or(0, |c| checkpoint(&c.at) + c.pending.capacity())
    }

    /// Brings the rendering up to the file `key` describes: the lines appended since the
    /// last sync when the file only grew, a fresh rendering otherwise. `closed` adds what
    /// a file nobody appends to any more ends with.
    pub(super) fn sync(&mut self, file: &File, key: CaptureKey, closed: bool) -> io::Result<()> {
        if self.key != Some(key) {
            if !self.continues(file, key)? {
                *self = Rendering::new(
                    self.interval,
                    self.keep,
                    self.ahead_part,
                    self.start.clone(),
                );
            }
            self.render_to(file, key.size)?;
            self.key = Some(key);
        }
        if !closed {
            self.epilogue = None;
        } else if self.epilogue.as_ref().is_none_or(|(at, _)| *at != key.size) {
            let partial_len = key.size.saturating_sub(self.raw_end);
            let mut out = Vec::new();
            let mut fold = self.fold.clone();
            match usize::try_from(partial_len) {
                Ok(len) if len <= MAX_LINE_BYTES => {
                    fold.close(&read_exact_at(file, self.raw_end, len)?, &mut out);
                }
                _ => {
                    fold.feed_long_line(partial_len, &mut out);
                    fold.close(&[], &mut out);
                }
            }
            self.epilogue = Some((key.size, out));
        }
        Ok(())
    }

    /// Whether the file behind `key` is the one rendered, grown: no shorter than what was
    /// rendered, with the same bytes at both ends of it.
    fn continues(&self, file: &File, key: CaptureKey) -> io::Result<bool> {
        let Some(prev) = self.key else {
            return Ok(self.raw_end == 0);
        };
        if (prev.dev, prev.ino) != (key.dev, key.ino) || key.size < self.raw_end {
            return Ok(false);
        }
        Ok(read_exact_at(file, 0, self.head.len())? == self.head
            && read_exact_at(
                file,
                self.raw_end - self.probe.len() as u64,
                self.probe.len(),
            )? == self.probe)
    }

    /// Renders the complete lines between `raw_end` and `limit`: a long span a window at
    /// a time, the later parts of each window rendered ahead on threads of their own.
    fn render_to(&mut self, file: &File, limit: u64) -> io::Result<()> {
        loop {
            let from = self.raw_end;
            let window = limit.min(from.saturating_add(AHEAD_WINDOW));
            let parts = split(file, from, window, self.ahead_part)?;
            if parts.len() > 2 {
                self.render_parts(file, &parts)?;
            } else {
                self.render_lines(file, window)?;
            }
            if window == limit {
                break;
            }
            if self.raw_end == from {
                // No line ends in the window: the rest in one go.
                self.render_lines(file, limit)?;
                break;
            }
        }
        let head_len = PROBE_BYTES.min(usize::try_from(self.raw_end).unwrap_or(PROBE_BYTES));
        self.head = read_exact_at(file, 0, head_len)?;
        self.probe = read_exact_at(file, self.raw_end - head_len as u64, head_len)?;
        Ok(())
    }

    /// Renders `[parts[0], parts[last])`: the first part here, while each later part's
    /// leading run of text deltas ([`text_run`]) is rendered ahead on a thread; that
    /// rendering is taken when the fold reaches its part showing a text block (a text
    /// delta only appends its string then), and the rest of the part is folded here.
    fn render_parts(&mut self, file: &File, parts: &[u64]) -> io::Result<()> {
        let grain = (self.interval / 4).max(1);
        std::thread::scope(|scope| {
            let ahead: Vec<_> = parts[1..parts.len() - 1]
                .iter()
                .zip(&parts[2..])
                .map(|(&from, &to)| {
                    std::thread::Builder::new()
                        .name("litanyfs-render".into())
                        .spawn_scoped(scope, move || render_ahead(file, from, to, grain))
                        .ok()
                })
                .collect();
            let mut result = self.render_lines(file, parts[1]);
            for (handle, bounds) in ahead.into_iter().zip(parts[1..].windows(2)) {
                // Joined whatever happens, so that no thread outlives an error.
                let taken = handle.and_then(|h| h.join().ok());
                if result.is_err() {
                    continue;
                }
                if let Some(Ok(run)) = taken
                    && self.raw_end == bounds[0]
                    && self.fold.showing_text()
                {
                    self.adopt(run);
                }
                result = self.render_lines(file, bounds[1]);
            }
            result
        })
    }

    /// Appends a run rendered ahead from `raw_end`, with the checkpoints the run would
    /// have had rendered here (at its marks), and moves past it.
    fn adopt(&mut self, run: Ahead) {
        let (from, line) = (self.raw_end, self.fold.line);
        let mut copied = 0;
        for mark in &run.marks {
            self.held.extend_from_slice(&run.out[copied..mark.out]);
            copied = mark.out;
            let fold = &self.fold;
            checkpoint_if_due(
                &mut self.checkpoints,
                &mut self.held,
                &mut self.held_from,
                (self.interval, self.keep),
                from + mark.bytes,
                || {
                    let mut fold = fold.clone();
                    fold.line = line + mark.lines;
                    fold
                },
            );
        }
        self.held.extend_from_slice(&run.out[copied..]);
        self.fold.line = line + run.lines;
        self.raw_end = from + run.bytes;
    }

    /// Folds the complete lines between `raw_end` and `limit` here, one after another.
    fn render_lines(&mut self, file: &File, limit: u64) -> io::Result<()> {
        let limits = (self.interval, self.keep);
        let Rendering {
            fold,
            checkpoints,
            held,
            held_from,
            raw_end,
            ..
        } = self;
        *raw_end = each_lines(file, *raw_end, limit, |lines, base| {
            let lines = match lines {
                Lines::Complete(lines) => lines,
                Lines::TooLong(len) => {
                    fold.feed_long_line(len - 1, held);
                    checkpoint_if_due(checkpoints, held, held_from, limits, base + len, || {
                        fold.clone()
                    });
                    return ControlFlow::Continue(());
                }
            };
            let mut at = 0;
            while at < lines.len() {
                // Up to the next checkpoint (at least one byte, so at least one line).
                let room = limits
                    .0
                    .saturating_sub(since_checkpoint(checkpoints, held, *held_from));
                let stop = held
                    .len()
                    .saturating_add(usize::try_from(room.max(1)).unwrap_or(usize::MAX));
                at += fold.feed_lines(&lines[at..], held, stop);
                checkpoint_if_due(
                    checkpoints,
                    held,
                    held_from,
                    limits,
                    base + at as u64,
                    || fold.clone(),
                );
            }
            ControlFlow::Continue(())
        })?;
        Ok(())
    }

    /// Bytes `[offset, offset + len)` of the rendering, cut short at its end, appended to
    /// `got`.
    pub(super) fn read(
        &mut self,
        file: &File,
        offset: u64,
        len: u64,
        got: &mut Vec<u8>,
    ) -> io::Result<()> {
        let end = offset.saturating_add(len).min(self.len());
        if offset >= end {
            return Ok(());
        }
        let want = usize::try_from(end - offset).map_err(io::Error::other)?;
        got.reserve(want);
        let body = self.body_len();
        if offset < body {
            if offset >= self.held_from {
                let from = usize::try_from(offset - self.held_from).map_err(io::Error::other)?;
                let to =
                    usize::try_from(end.min(body) - self.held_from).map_err(io::Error::other)?;
                got.extend_from_slice(&self.held[from..to]);
            } else {
                self.rerender(file, offset, end.min(body), got)?;
            }
        }
        if end > body
            && let Some((_, epilogue)) = &self.epilogue
        {
            let from = usize::try_from(offset.max(body) - body).map_err(io::Error::other)?;
            let to = usize::try_from(end - body).map_err(io::Error::other)?;
            got.extend_from_slice(&epilogue[from..to]);
        }
        Ok(())
    }

    /// Renders `[offset, end)` of the body again, from the cursor when a reader left it
    /// at or before `offset`, else from the checkpoint at or before it.
    fn rerender(
        &mut self,
        file: &File,
        offset: u64,
        end: u64,
        got: &mut Vec<u8>,
    ) -> io::Result<()> {
        let k = self.checkpoints.partition_point(|c| c.rendered <= offset);
        let mut start = self.checkpoints[k.saturating_sub(1)].clone();
        let mut scratch = Vec::new();
        if let Some(cursor) = self.cursor.take() {
            let from = cursor.at.rendered - cursor.pending.len() as u64;
            if from <= offset && cursor.at.rendered > start.rendered {
                scratch = cursor.pending;
                start = cursor.at;
            }
        }
        let copy = |chunk: &[u8], lo: u64, got: &mut Vec<u8>| {
            let hi = lo + chunk.len() as u64;
            if hi > offset && lo < end {
                let from = (offset.max(lo) - lo) as usize;
                let to = (end.min(hi) - lo) as usize;
                got.extend_from_slice(&chunk[from..to]);
            }
        };
        copy(&scratch, start.rendered - scratch.len() as u64, got);
        let Checkpoint {
            mut raw,
            rendered: mut at,
            mut fold,
        } = start;
        if at < end {
            raw = each_line(file, raw, self.raw_end, |line, _| {
                scratch.clear();
                match line {
                    Line::Bytes(line) => fold.feed_line(line, &mut scratch),
                    Line::TooLong(len) => fold.feed_long_line(len, &mut scratch),
                }
                copy(&scratch, at, got);
                at += scratch.len() as u64;
                if at >= end {
                    ControlFlow::Break(())
                } else {
                    ControlFlow::Continue(())
                }
            })?;
        }
        self.cursor = Some(Cursor {
            at: Checkpoint {
                raw,
                rendered: at,
                fold,
            },
            pending: scratch,
        });
        Ok(())
    }
}
