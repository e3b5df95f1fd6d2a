//! The events log: the bounded, append-only store both `events` and `events.ndjson`
//! read from.
//!
//! Guarantees:
//! - **Memory stays bounded.** The text of every event lives in two unlinked temporary
//!   files (`O_TMPFILE` in [`std::env::temp_dir`], else created and unlinked at once),
//!   one per rendering; the daemon keeps only their lengths. The files vanish with the
//!   daemon, whatever way it ends. (On a `tmpfs` `/tmp` they cost memory up to the cap;
//!   set `TMPDIR` to put them on disk.)
//! - **No half lines, offsets only grow.** One lock serialises appends; each event's line
//!   is written whole, to both files, before the new lengths are published, and a read
//!   never returns a byte past the published length. A reader at any offset therefore
//!   sees whole lines, and what it has read never changes.
//! - **Capped.** Each file stops at [`MAX_LOG_BYTES`]: the append that would pass it
//!   writes one last `log-full` event instead (room for it is reserved), logs a warning,
//!   and every later event is dropped (counted, not stored). Nothing written is ever
//!   removed, so `tail -f` never sees a line twice.
//! - **A full disk loses nothing it can keep.** A write that fails (`ENOSPC` in a small
//!   `TMPDIR`) publishes nothing; the event waits in memory, with every later one behind
//!   it (at most [`MAX_WAITING`]; past that, new events are dropped and counted), and
//!   each append tries again first, so once there is room the log goes on, in order.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

use super::event::Event;

/// The most bytes each rendering of the log holds.
pub(crate) const MAX_LOG_BYTES: u64 = 1 << 30;
/// Room kept below the cap for the final `log-full` line.
const FULL_RESERVE: u64 = 4096;
/// The most events kept in memory while the files cannot be written.
pub(crate) const MAX_WAITING: usize = 10_000;

/// Which rendering a reader reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Rendering {
    /// `events`: one line per event.
    Text,
    /// `events.ndjson`: one JSON object per line.
    Ndjson,
}

struct Files {
    text: File,
    ndjson: File,
    /// The cap was reached; nothing more is stored.
    full: bool,
    dropped: u64,
    /// Events a failed write left unwritten, oldest first (module docs).
    waiting: std::collections::VecDeque<Event>,
}

/// The log (module docs).
pub(crate) struct EventLog {
    files: Mutex<Option<Files>>,
    text_len: AtomicU64,
    ndjson_len: AtomicU64,
    cap: u64,
}

impl EventLog {
    /// A log in two new unlinked temporary files. Without them the log stays empty and
    /// says so once.
    pub(crate) fn new() -> Self {
        Self::with_cap(MAX_LOG_BYTES)
    }

    /// A log capped at `cap` bytes per rendering (tests use small caps).
    pub(crate) fn with_cap(cap: u64) -> Self {
        let files = match (unlinked_temp(), unlinked_temp()) {
            (Ok(text), Ok(ndjson)) => Some(Files {
                text,
                ndjson,
                full: false,
                dropped: 0,
                waiting: Default::default(),
            }),
            (Err(e), _) | (_, Err(e)) => {
                log::warn!(
                    "events: no temporary file in {} ({e}); `events` stays empty",
                    std::env::temp_dir().display()
                );
                None
            }
        };
        Self {
            files: Mutex::new(files),
            text_len: AtomicU64::new(0),
            ndjson_len: AtomicU64::new(0),
            cap: cap.max(2 * FULL_RESERVE),
        }
    }

    fn len_of(&self, r: Rendering) -> &AtomicU64 {
        match r {
            Rendering::Text => &self.text_len,
            Rendering::Ndjson => &self.ndjson_len,
        }
    }

    /// The published length of rendering `r`: what a reader may read.
    pub(crate) fn len(&self, r: Rendering) -> u64 {
        self.len_of(r).load(Ordering::Acquire)
    }

    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.len(Rendering::Text) == 0
    }

    /// Appends `events` in order, after any that wait for room (module docs).
    pub(crate) fn append(&self, events: &[Event]) {
        let mut guard = self.files.lock();
        let Some(files) = guard.as_mut() else {
            return;
        };
        let waited = std::mem::take(&mut files.waiting);
        let late = waited.len();
        for e in waited.iter().chain(events) {
            self.store(files, e);
        }
        if late > 0 && files.waiting.is_empty() {
            log::info!("events: the log is written again; {late} events waited for room");
        }
    }

    /// Stores one event, or keeps it waiting behind a failed write.
    fn store(&self, files: &mut Files, e: &Event) {
        if files.full {
            files.dropped += 1;
            return;
        }
        if !files.waiting.is_empty() {
            Self::wait(files, e);
            return;
        }
        let text = e.line();
        let json = e.ndjson();
        let (t, j) = (self.len(Rendering::Text), self.len(Rendering::Ndjson));
        let over = |at: u64, add: usize| at + add as u64 > self.cap - FULL_RESERVE;
        if over(t, text.len()) || over(j, json.len()) {
            let last = Event::log_full(e.at, self.cap);
            log::warn!(
                "events: the log reached {} bytes; later events are not stored",
                self.cap
            );
            files.full = true;
            files.dropped += 1;
            if let Err(err) = self.write(files, &last.line(), &last.ndjson()) {
                log::warn!("events: writing the log's last line failed ({err})");
            }
            return;
        }
        if let Err(err) = self.write(files, &text, &json) {
            log::warn!(
                "events: writing the log failed ({err}); events wait in memory (at most \
                 {MAX_WAITING}) until it can be written"
            );
            Self::wait(files, e);
        }
    }

    fn wait(files: &mut Files, e: &Event) {
        if files.waiting.len() < MAX_WAITING {
            files.waiting.push_back(e.clone());
        } else {
            if files.dropped == 0 {
                log::warn!("events: {MAX_WAITING} events wait for room; later ones are dropped");
            }
            files.dropped += 1;
        }
    }

    /// Writes one event's two lines at the ends of the files, then publishes both
    /// lengths; on an error publishes nothing (what was half written lies past the
    /// published lengths, unseen, and the next write goes over it).
    fn write(&self, files: &mut Files, text: &str, json: &str) -> io::Result<()> {
        let (t, j) = (self.len(Rendering::Text), self.len(Rendering::Ndjson));
        files.text.write_all_at(text.as_bytes(), t)?;
        files.ndjson.write_all_at(json.as_bytes(), j)?;
        self.text_len
            .store(t + text.len() as u64, Ordering::Release);
        self.ndjson_len
            .store(j + json.len() as u64, Ordering::Release);
        Ok(())
    }

    /// How many events were dropped (at the cap, or past [`MAX_WAITING`]).
    #[cfg(test)]
    pub(crate) fn dropped(&self) -> u64 {
        self.files.lock().as_ref().map_or(0, |f| f.dropped)
    }

    /// Up to `size` bytes of rendering `r` at `offset`, never past the published length.
    pub(crate) fn read(&self, r: Rendering, offset: u64, size: u32) -> io::Result<Vec<u8>> {
        let len = self.len(r);
        if offset >= len {
            return Ok(Vec::new());
        }
        let want = (len - offset).min(u64::from(size)) as usize;
        let file = {
            let guard = self.files.lock();
            match guard.as_ref() {
                Some(f) => match r {
                    Rendering::Text => f.text.try_clone()?,
                    Rendering::Ndjson => f.ndjson.try_clone()?,
                },
                None => return Ok(Vec::new()),
            }
        };
        let mut buf = vec![0u8; want];
        file.read_exact_at(&mut buf, offset)?;
        Ok(buf)
    }
}

impl Default for EventLog {
    fn default() -> Self {
        Self::new()
    }
}

/// A new file no name reaches, readable and writable by this process only.
fn unlinked_temp() -> io::Result<File> {
    let dir = std::env::temp_dir();
    match OpenOptions::new()
        .read(true)
        .write(true)
        .mode(0o600)
        .custom_flags(libc::O_TMPFILE)
        .open(&dir)
    {
        Ok(f) => return Ok(f),
        Err(e) => log::debug!("events: O_TMPFILE in {} refused ({e})", dir.display()),
    }
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    for attempt in 0..100u32 {
        let path = dir.join(format!(
            ".litanyfs-events-{}-{stamp}-{attempt}",
            std::process::id()
        ));
        match OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
        {
            Ok(f) => {
                std::fs::remove_file(&path)?;
                return Ok(f);
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
    }
    Err(io::Error::from(io::ErrorKind::AlreadyExists))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(i: i64) -> Event {
        Event::agent_created(1_796_204_571 + i, &format!("agent-{i}"), None)
    }

    #[test]
    fn appends_whole_lines_and_offsets_only_grow() {
        let log = EventLog::new();
        assert!(log.is_empty());
        log.append(&[ev(0), ev(1)]);
        let first = log.read(Rendering::Text, 0, 1 << 20).unwrap();
        assert_eq!(
            first,
            format!("{}{}", ev(0).line(), ev(1).line()).into_bytes()
        );
        let n = log.len(Rendering::Ndjson);
        log.append(&[ev(2)]);
        assert!(log.len(Rendering::Ndjson) > n);
        let rest = log.read(Rendering::Ndjson, n, 1 << 20).unwrap();
        assert_eq!(rest, ev(2).ndjson().into_bytes());
        // What was read before is unchanged.
        assert_eq!(
            log.read(Rendering::Text, 0, first.len() as u32).unwrap(),
            first
        );
        // Past the end: nothing.
        assert!(log.read(Rendering::Text, 1 << 40, 10).unwrap().is_empty());
    }

    #[test]
    fn readers_racing_a_writer_see_only_whole_lines() {
        let log = std::sync::Arc::new(EventLog::new());
        let writer = {
            let log = log.clone();
            std::thread::spawn(move || {
                for i in 0..2000 {
                    log.append(&[ev(i)]);
                }
            })
        };
        let mut offset = 0;
        let mut lines = 0;
        while lines < 2000 {
            let bytes = log.read(Rendering::Ndjson, offset, 4096).unwrap();
            offset += bytes.len() as u64;
            if bytes.is_empty() {
                continue;
            }
            // The published length always ends a line; a 4096-byte read may cut one,
            // so the next read continues it.
            let text = String::from_utf8(bytes).unwrap();
            lines += text.matches('\n').count();
            assert!(log.len(Rendering::Ndjson) >= offset);
        }
        writer.join().unwrap();
        let all = log.read(Rendering::Ndjson, 0, u32::MAX).unwrap();
        for (i, line) in String::from_utf8(all).unwrap().lines().enumerate() {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            assert_eq!(v["agent"], format!("agent-{i}"));
        }
    }

    #[test]
    fn stops_at_the_cap_with_one_line_saying_so() {
        let cap = 3 * FULL_RESERVE;
        let log = EventLog::with_cap(cap);
        let batch: Vec<Event> = (0..200).map(ev).collect();
        log.append(&batch);
        let text = String::from_utf8(log.read(Rendering::Text, 0, u32::MAX).unwrap()).unwrap();
        assert!(log.len(Rendering::Text) <= cap);
        let last = text.lines().last().unwrap();
        assert!(last.contains(" log-full "), "{last}");
        assert_eq!(text.matches("log-full").count(), 1);
        let stored = text.lines().count() as u64 - 1;
        assert_eq!(log.dropped(), 200 - stored);
        let len = log.len(Rendering::Text);
        log.append(&[ev(500)]);
        assert_eq!(log.len(Rendering::Text), len, "nothing after the cap");
        assert!(text.ends_with('\n'));
    }

    #[test]
    fn a_full_disk_delays_events_and_loses_none() {
        let log = EventLog::new();
        log.append(&[ev(0)]);
        // The disk fills: writes to the text rendering fail with ENOSPC.
        let full = OpenOptions::new().write(true).open("/dev/full").unwrap();
        let real = std::mem::replace(&mut log.files.lock().as_mut().unwrap().text, full);
        let before = log.len(Rendering::Text);
        log.append(&[ev(1), ev(2)]);
        assert_eq!(
            log.len(Rendering::Text),
            before,
            "nothing published while full"
        );
        assert_eq!(log.len(Rendering::Ndjson), ev(0).ndjson().len() as u64);
        // Room again: the next append writes the waiting events first, in order.
        log.files.lock().as_mut().unwrap().text = real;
        log.append(&[ev(3)]);
        let text = String::from_utf8(log.read(Rendering::Text, 0, u32::MAX).unwrap()).unwrap();
        let want: String = (0..4).map(|i| ev(i).line()).collect();
        assert_eq!(text, want);
        let json = String::from_utf8(log.read(Rendering::Ndjson, 0, u32::MAX).unwrap()).unwrap();
        assert_eq!(json, (0..4).map(|i| ev(i).ndjson()).collect::<String>());
        assert_eq!(log.dropped(), 0);
    }
}
