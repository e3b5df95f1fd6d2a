//! The cache over real files: live appends, checkpointed reads, fresh renders, the bound.

use std::fs::{File, OpenOptions};
use std::io::Write;

use super::ev;
use super::{ndjson, render_all, render_closed};
use crate::paging::CaptureKey;
use crate::records::Records;

struct Response {
    _dir: tempfile::TempDir,
    path: std::path::PathBuf,
}

impl Response {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("response.json");
        File::create(&path).unwrap();
        Response { _dir: dir, path }
    }

    fn append(&self, bytes: &[u8]) {
        let mut f = OpenOptions::new().append(true).open(&self.path).unwrap();
        f.write_all(bytes).unwrap();
    }

    fn open(&self) -> (File, CaptureKey) {
        let f = File::open(&self.path).unwrap();
        let key = CaptureKey::of(&f).unwrap();
        (f, key)
    }

    /// What the cache shows now: its length and every byte, read in one go.
    fn shown(&self, records: &Records, closed: bool) -> Vec<u8> {
        let (f, key) = self.open();
        let len = records.response_len(&f, key, closed).unwrap();
        let got = records.response_read(&f, key, closed, 0, len + 10).unwrap();
        assert_eq!(
            got.len() as u64,
            len,
            "the length is the bytes a read returns"
        );
        got
    }
}

fn stream() -> Vec<u8> {
    let mut lines = vec![ev::start("m1"), ev::text_start(0)];
    for i in 0..40 {
        lines.push(ev::text(0, &format!("wörd{i} € ")));
    }
    lines.extend([
        ev::stop(0),
        ev::tool_start(1, "t1", "bash"),
        ev::json(1, "{\"command\":\"echo größe\"}"),
        ev::stop(1),
        ev::error(r#""transport""#, "reset"),
        ev::end(),
        ev::start("m2"),
        ev::text_start(0),
        ev::text(0, "done ✓"),
        ev::stop(0),
        ev::usage(3, 4),
        ev::finish("stop"),
        ev::end(),
    ]);
    ndjson(&lines)
}

#[test]
fn appends_grow_the_rendering_and_never_change_what_was_shown() {
    let bytes = stream();
    let r = Response::new();
    let records = Records::with_limits(1 << 20, 64, 256);
    let mut shown = Vec::new();
    // Append in uneven pieces, many of them cut inside a multi-byte character.
    let mut at = 0;
    let mut step = 1;
    while at < bytes.len() {
        let next = (at + step).min(bytes.len());
        r.append(&bytes[at..next]);
        at = next;
        step = step % 23 + 2;
        let now = r.shown(&records, false);
        assert!(now.starts_with(&shown), "append-only, after byte {at}");
        assert!(std::str::from_utf8(&now).is_ok(), "complete UTF-8, at {at}");
        assert_eq!(now, render_all(&bytes[..at]), "after byte {at}");
        shown = now;
    }
    assert_eq!(shown, render_all(&bytes));
    assert_eq!(records.entries(), 1);
}

#[test]
fn a_multibyte_character_split_across_two_appends_shows_once_whole() {
    let r = Response::new();
    let records = Records::new(1 << 20);
    r.append(ndjson(&[ev::start("m"), ev::text_start(0)]).as_slice());
    let line = ev::text(0, "€");
    let cut = line.find('€').unwrap() + 1; // inside the character's three bytes
    r.append(&line.as_bytes()[..cut]);
    let before = r.shown(&records, false);
    assert!(!before.ends_with("€".as_bytes()));
    r.append(&line.as_bytes()[cut..]);
    assert_eq!(
        r.shown(&records, false),
        before,
        "the line has not ended yet"
    );
    r.append(b"\n");
    let after = r.shown(&records, false);
    assert_eq!(&after[..before.len()], &before[..]);
    assert_eq!(&after[before.len()..], "€".as_bytes());
}

#[test]
fn reads_anywhere_match_the_whole_rendering() {
    let bytes = stream();
    let whole = render_all(&bytes);
    let r = Response::new();
    r.append(&bytes);
    for (interval, keep) in [(1, 0), (7, 100), (64, 0), (64, 1 << 20), (1 << 20, 0)] {
        let records = Records::with_limits(1 << 20, interval, keep);
        let (f, key) = r.open();
        assert_eq!(
            records.response_len(&f, key, false).unwrap(),
            whole.len() as u64
        );
        for offset in (0..whole.len() + 3).step_by(5) {
            for len in [0, 1, 3, 17, 100, 4096] {
                let got = records
                    .response_read(&f, key, false, offset as u64, len)
                    .unwrap();
                let end = (offset + len as usize).min(whole.len());
                let want = whole.get(offset..end).unwrap_or(&[]);
                assert_eq!(
                    got, want,
                    "interval {interval} keep {keep}, [{offset}, +{len})"
                );
            }
        }
    }
}

#[test]
fn a_shrunk_or_rewritten_file_is_rendered_afresh() {
    let r = Response::new();
    let records = Records::new(1 << 20);
    let first = ndjson(&[ev::start("m1"), ev::text_start(0), ev::text(0, "one")]);
    r.append(&first);
    assert_eq!(r.shown(&records, false), render_all(&first));
    // Truncated and rewritten in place (litany's File::create on a re-run): same inode.
    let second = ndjson(&[ev::start("m2"), ev::text_start(0), ev::text(0, "two")]);
    std::fs::write(&r.path, &second).unwrap();
    assert_eq!(r.shown(&records, false), render_all(&second));
    // Shrunk.
    let third = ndjson(&[ev::start("m3")]);
    std::fs::write(&r.path, &third).unwrap();
    assert_eq!(r.shown(&records, false), render_all(&third));
    // Replaced by another file (a new inode) that happens to be longer.
    let fourth = stream();
    let tmp = r.path.with_extension("tmp");
    std::fs::write(&tmp, &fourth).unwrap();
    std::fs::rename(&tmp, &r.path).unwrap();
    assert_eq!(r.shown(&records, false), render_all(&fourth));
}

#[test]
fn a_closed_file_ends_with_its_half_stream() {
    let r = Response::new();
    let records = Records::new(1 << 20);
    let mut bytes = ndjson(&[ev::start("m"), ev::text_start(0), ev::text(0, "cut")]);
    bytes.extend_from_slice(b"{\"type\":");
    r.append(&bytes);
    let open = r.shown(&records, false);
    let closed = r.shown(&records, true);
    assert_eq!(open, render_all(&bytes));
    assert_eq!(closed, render_closed(&bytes));
    assert!(closed.starts_with(&open) && closed.len() > open.len());
    // Reads straddling the end of the body and the closing note.
    let (f, key) = r.open();
    let from = open.len() as u64 - 2;
    let got = records.response_read(&f, key, true, from, 20).unwrap();
    assert_eq!(got, &closed[from as usize..(from as usize + 20)]);
}

#[test]
fn the_cache_stays_within_its_budget() {
    let bytes = stream();
    let files: Vec<Response> = (0..8)
        .map(|_| {
            let r = Response::new();
            r.append(&bytes);
            r
        })
        .collect();
    let budget = 4096;
    let records = Records::with_checkpoint_interval(budget, 256);
    for r in &files {
        assert_eq!(r.shown(&records, false), render_all(&bytes));
        assert!(records.used_bytes() <= budget, "{records:?}");
    }
    assert!(records.entries() < files.len(), "{records:?}");
    // An evicted rendering is rendered again, correctly.
    assert_eq!(files[0].shown(&records, false), render_all(&bytes));
    // A budget below one rendering keeps nothing, and still answers.
    let tiny = Records::new(1);
    assert_eq!(files[0].shown(&tiny, false), render_all(&bytes));
    assert_eq!(tiny.entries(), 0);
}

#[test]
fn sequential_and_backward_reads_of_a_rendering_not_held_whole() {
    let bytes = stream();
    let whole = render_all(&bytes);
    let r = Response::new();
    r.append(&bytes);
    let records = Records::with_limits(1 << 20, 128, 0);
    let (f, key) = r.open();
    for chunk in [1u64, 5, 33, 4096] {
        // Forwards, as cat reads (the cursor carries on), then backwards (checkpoints).
        let mut got = Vec::new();
        while (got.len() as u64) < whole.len() as u64 {
            let part = records
                .response_read(&f, key, false, got.len() as u64, chunk)
                .unwrap();
            assert!(!part.is_empty());
            got.extend_from_slice(&part);
        }
        assert_eq!(got, whole, "forwards by {chunk}");
        let mut end = whole.len() as u64;
        while end > 0 {
            let from = end.saturating_sub(chunk);
            let part = records
                .response_read(&f, key, false, from, end - from)
                .unwrap();
            assert_eq!(
                part,
                &whole[from as usize..end as usize],
                "backwards by {chunk}"
            );
            end = from;
        }
    }
}

#[test]
fn readers_on_other_threads_see_prefixes_while_the_file_grows() {
    fn shared<T: Send + Sync>(_: &T) {}
    let bytes = stream();
    let r = Response::new();
    let records = Records::with_limits(1 << 20, 32, 128);
    shared(&records);
    let done = std::sync::atomic::AtomicBool::new(false);
    let whole = render_all(&bytes);
    std::thread::scope(|s| {
        for _ in 0..3 {
            s.spawn(|| {
                while !done.load(std::sync::atomic::Ordering::Relaxed) {
                    let seen = r.shown(&records, false);
                    assert!(whole.starts_with(&seen), "a reader saw a non-prefix");
                }
            });
        }
        for chunk in bytes.chunks(17) {
            r.append(chunk);
            std::thread::yield_now();
        }
        done.store(true, std::sync::atomic::Ordering::Relaxed);
    });
    assert_eq!(r.shown(&records, false), whole);
}

/// Text delta lines with the bytes of `body` as their string, taken raw (not escaped).
fn raw_text_line(body: &[u8]) -> Vec<u8> {
    let mut line = br#"{"type":"content_delta","index":0,"delta":{"text_delta":""#.to_vec();
    line.extend_from_slice(body);
    line.extend_from_slice(b"\"}}\n");
    line
}

/// A stream of long text runs broken by every other kind of line, with what the run
/// scanner must hand back to serde: a character split across two lines (each line alone
/// invalid UTF-8), a control byte, a lone surrogate, a spaced-out delta.
fn runs_stream() -> Vec<u8> {
    let mut bytes = ndjson(&[ev::start("m1"), ev::text_start(0)]);
    for i in 0..300 {
        let t = match i % 7 {
            0 => format!("wörd{i} "),
            1 => String::new(),
            2 => "quote \" back \\ tab\t nl\n 😀".to_string(),
            3 => "€".to_string(),
            _ => format!("w{i}"),
        };
        bytes.extend_from_slice(&ndjson(&[ev::text(0, &t)]));
        match i {
            40 => {
                bytes.extend_from_slice(&raw_text_line(b"split \xC3"));
                bytes.extend_from_slice(&raw_text_line(b"\xA9 char"));
            }
            90 => bytes.extend_from_slice(&raw_text_line(b"control \x01")),
            120 => bytes.extend_from_slice(&raw_text_line(br"\ud800")),
            150 => bytes
                .extend_from_slice(&ndjson(&[ev::text(0, "spaced").replacen(":0,", ": 0,", 1)])),
            200 => bytes.extend_from_slice(&ndjson(&[
                ev::stop(0),
                ev::thinking_start(1),
                ev::thinking(1, "hmm"),
                ev::stop(1),
                ev::text_start(2),
            ])),
            250 => bytes.extend_from_slice(&ndjson(&[ev::json(0, "{}"), ev::text(0, "after")])),
            _ => {}
        }
    }
    bytes.extend_from_slice(&ndjson(&[ev::stop(2), ev::finish("stop"), ev::end()]));
    bytes
}

#[test]
fn renderings_ahead_on_other_threads_match_the_fold_line_by_line() {
    let bytes = runs_stream();
    let whole = render_all(&bytes);
    assert!(String::from_utf8_lossy(&whole).contains("does not parse"));
    let r = Response::new();
    r.append(&bytes);
    for ahead in [1, 61, 500, 4096, 1 << 30] {
        for (interval, keep) in [(1, 0), (64, 0), (300, 1 << 20), (1 << 20, 1 << 20)] {
            let records = Records::with_limits(1 << 20, interval, keep).rendering_ahead_from(ahead);
            let (f, key) = r.open();
            let len = records.response_len(&f, key, false).unwrap();
            assert_eq!(
                len,
                whole.len() as u64,
                "ahead {ahead} interval {interval} keep {keep}"
            );
            let got = records.response_read(&f, key, false, 0, len).unwrap();
            assert!(
                got == whole,
                "ahead {ahead} interval {interval} keep {keep}"
            );
            // Reads from the checkpoints the runs rendered ahead placed.
            for offset in (0..whole.len()).step_by(97) {
                let got = records
                    .response_read(&f, key, false, offset as u64, 50)
                    .unwrap();
                let end = (offset + 50).min(whole.len());
                assert!(
                    got == whole[offset..end],
                    "ahead {ahead} interval {interval} keep {keep} at {offset}"
                );
            }
        }
    }
    // Grown a piece at a time, each sync rendering ahead what was appended.
    let r = Response::new();
    let records = Records::with_limits(1 << 20, 64, 256).rendering_ahead_from(100);
    for piece in bytes.chunks(1000) {
        r.append(piece);
        let shown = r.shown(&records, false);
        let (f, _) = r.open();
        let _ = f;
        assert!(whole.starts_with(&shown));
    }
    assert!(r.shown(&records, false) == whole);
}

#[test]
fn a_closed_small_response_is_remembered_by_its_length_and_rendered_afresh_for_each_read() {
    let bytes = stream();
    let r = Response::new();
    r.append(&bytes);
    let records = Records::new(1 << 20);
    let (f, key) = r.open();
    let whole = render_closed(&bytes);
    let len = records.response_len(&f, key, true).unwrap();
    assert_eq!(len, whole.len() as u64);
    let sized = records.used_bytes();
    // Sizing many steps' responses costs the cache a slot each, not a rendering each,
    // and the slot of a length is a few words (a walk sizes one per step).
    assert!(
        sized <= 64,
        "a length-only entry costs {sized} bytes against {} of text",
        whole.len()
    );
    assert_eq!(records.response_len(&f, key, true).unwrap(), len);
    assert_eq!(
        records.used_bytes(),
        sized,
        "the second sizing reuses the length"
    );
    // A read renders it for itself and keeps only the length, whole or in pieces.
    let got = records.response_read(&f, key, true, 0, len + 10).unwrap();
    assert_eq!(got, whole);
    let mut pieces = Vec::new();
    for at in (0..len + 7).step_by(7) {
        pieces.extend(records.response_read(&f, key, true, at, 7).unwrap());
    }
    assert_eq!(pieces, whole);
    assert!(
        records
            .response_read(&f, key, true, len, 10)
            .unwrap()
            .is_empty()
    );
    assert_eq!(records.used_bytes(), sized, "a read keeps no rendering");
    assert_eq!(records.entries(), 1);
    // A response still growing keeps its rendering, for the appends to come.
    let live = Response::new();
    live.append(&bytes);
    let (lf, lkey) = live.open();
    assert_eq!(
        records
            .response_read(&lf, lkey, false, 0, len + 10)
            .unwrap(),
        render_all(&bytes)
    );
    assert!(records.used_bytes() > sized + 256);
    // A new version of the file is sized again, not answered from the old length.
    let more = ndjson(&[
        ev::start("m3"),
        ev::text_start(0),
        ev::text(0, "again"),
        ev::stop(0),
        ev::end(),
    ]);
    let r2 = Response::new();
    r2.append(&bytes);
    let (f2, key2) = r2.open();
    let first = records.response_len(&f2, key2, true).unwrap();
    r2.append(&more);
    let (f2, key2) = r2.open();
    let grown = records.response_len(&f2, key2, true).unwrap();
    let mut all = bytes.clone();
    all.extend_from_slice(&more);
    assert_eq!(grown, render_closed(&all).len() as u64);
    assert!(grown > first);
}

/// A line longer than the bound is never held: it shows as a line naming its length,
/// the lines around it as always, whether rendered in one go, read back from a
/// checkpoint, or left unfinished at the end of a closed file.
#[test]
fn a_line_too_long_to_hold_shows_as_a_marked_stub() {
    use crate::records::response::{Fold, MAX_LINE_BYTES};
    let long = ev::text(0, &"x".repeat(MAX_LINE_BYTES));
    let lines = [
        ev::start("m1"),
        ev::text_start(0),
        ev::text(0, "before "),
        long.clone(),
        ev::text(0, "after"),
        ev::stop(0),
        ev::end(),
    ];
    let bytes = ndjson(&lines);
    // What the fold makes of it, the long line by its length alone.
    let mut want = Vec::new();
    let mut fold = Fold::default();
    for l in &lines {
        if l.len() > MAX_LINE_BYTES {
            fold.feed_long_line(l.len() as u64, &mut want);
        } else {
            fold.feed_line(l.as_bytes(), &mut want);
        }
    }
    let text = String::from_utf8_lossy(&want);
    assert!(
        text.contains(&format!(
            "line 4: {} bytes, longer than the 8 MiB a line is read; not shown",
            long.len()
        )),
        "{text}"
    );
    assert!(text.contains("after"), "{text}");
    let r = Response::new();
    r.append(&bytes);
    for (interval, keep) in [(1 << 20, 1 << 20), (16, 0)] {
        let records = Records::with_limits(64 << 20, interval, keep);
        assert_eq!(r.shown(&records, false), want, "interval {interval}");
        let (f, key) = r.open();
        for offset in [0, 10, want.len() / 2, want.len() - 5] {
            let got = records
                .response_read(&f, key, false, offset as u64, 64)
                .unwrap();
            let end = (offset + 64).min(want.len());
            assert_eq!(got, &want[offset..end], "interval {interval} at {offset}");
        }
    }
    // Unfinished at the end of a closed file: the same stub, then the half stream.
    let r = Response::new();
    r.append(&ndjson(&lines[..3]));
    r.append(long.as_bytes());
    let records = Records::with_limits(64 << 20, 1 << 20, 1 << 20);
    let shown = String::from_utf8(r.shown(&records, true)).unwrap();
    assert!(
        shown.contains(&format!("line 4: {} bytes, longer than", long.len())),
        "{shown}"
    );
}
