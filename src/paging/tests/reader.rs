//! Pages and the cache: what `read_tool_output` answers, one parse per
//! key, a byte budget, and reads whose cost does not grow with the
//! offset.

use super::{Rng, ToolOutputRecord, capture, key, mixed_text};
use crate::paging::address::{Address, AddressError, PAGE_BYTES, Stream};
use crate::paging::reader::{CHECKPOINT_BYTES, CaptureKey, PageCache, PageError};
use std::path::Path;

const RECORD: &str = "steps/ag/001/tools/t1/output.json";

fn address(stream: &str, offset: u64) -> Address {
    Address::parse(&format!("{RECORD}#{stream}@{offset}")).expect("grammar")
}

/// The page litany cuts from `text` at `offset`.
fn expected_page(text: &[u8], offset: usize) -> &[u8] {
    &text[offset..(offset + PAGE_BYTES as usize).min(text.len())]
}

#[test]
fn pages_are_the_tools_pages() {
    let mut rng = Rng::new(9);
    let rec = ToolOutputRecord::new(&mixed_text(&mut rng, 9000), "short\n");
    let c = capture(&rec.pretty());
    let cache = PageCache::with_checkpoint_interval(1 << 20, 1000);
    let text = rec.stdout.as_bytes();
    let total = text.len() as u64;
    assert!(total > 3 * PAGE_BYTES);
    assert_eq!(
        cache.stream_len(&c.file, key(1), Stream::Stdout).ok(),
        Some(total)
    );
    assert_eq!(
        cache.stream_len(&c.file, key(1), Stream::Stderr).ok(),
        Some(6)
    );

    for offset in [
        0,
        1,
        2048,
        4095,
        4096,
        total / 2,
        total - 4096,
        total - 1,
        total,
    ] {
        let a = address("stdout", offset);
        let page = cache.page(&c.file, key(1), &a).expect("page");
        assert_eq!(
            page.bytes,
            expected_page(text, offset as usize),
            "@{offset}"
        );
        assert_eq!(page.len, total);
        let end = offset + page.bytes.len() as u64;
        let rest = if end < total {
            format!("continue with address {RECORD}#stdout@{end}")
        } else {
            "end of stream".to_string()
        };
        assert_eq!(
            page.banner,
            format!(
                "read_tool_output: bytes {offset}-{end} of {total} from {RECORD} stdout; {rest}\n"
            )
        );
        assert_eq!(page.next, (end < total).then(|| address("stdout", end)));
    }

    // Following `next` from 0 walks the whole stream.
    let mut walked = Vec::new();
    let mut at = Some(address("stdout", 0));
    while let Some(a) = at {
        let page = cache.page(&c.file, key(1), &a).expect("page");
        walked.extend_from_slice(&page.bytes);
        at = page.next;
    }
    assert_eq!(walked, text);

    for offset in [total + 1, total + 4096, u64::MAX] {
        let err = cache
            .page(&c.file, key(1), &address("stdout", offset))
            .expect_err("past the end");
        assert_eq!(
            err.to_string(),
            format!("offset {offset} is past the end of stdout ({total} bytes)")
        );
        assert_eq!(err.errno(), libc::ENOENT);
        assert!(err.is_refusal());
    }
    let page = cache
        .page(&c.file, key(1), &address("stderr", 6))
        .expect("empty page");
    assert!(page.bytes.is_empty());
    assert_eq!(page.next, None);
    assert!(cache.page(&c.file, key(1), &address("stderr", 7)).is_err());
    // One capture, parsed once.
    assert_eq!(cache.passes(), 1);
    assert_eq!(cache.entries(), 1);
}

#[test]
fn reads_clamp_like_a_file() {
    let rec = ToolOutputRecord::new("0123456789", "");
    let c = capture(&rec.pretty());
    let cache = PageCache::new(1 << 20);
    let read = |offset, len| {
        cache
            .read(&c.file, key(1), Stream::Stdout, offset, len)
            .expect("read")
    };
    assert_eq!(read(0, 4), b"0123");
    assert_eq!(read(8, 100), b"89");
    assert_eq!(read(10, 1), b"");
    assert_eq!(read(11, 1), b"");
    assert_eq!(read(u64::MAX, u64::MAX), b"");
    assert_eq!(read(3, u64::MAX), b"3456789");
    assert_eq!(read(3, 0), b"");
    assert_eq!(
        cache
            .read(&c.file, key(1), Stream::Stderr, 0, 10)
            .expect("read"),
        b""
    );
}

#[test]
fn an_unparseable_capture_is_refused_with_the_tools_text() {
    let c = capture(b"not json");
    let cache = PageCache::new(1 << 20);
    let err = cache
        .page(&c.file, key(1), &address("stdout", 0))
        .expect_err("refused");
    assert_eq!(
        err.to_string(),
        format!("capture at {RECORD} did not parse: expected ident at line 1 column 2")
    );
    assert_eq!(err.errno(), libc::ENOENT);
    let err = err.with_record(Path::new("/ws").join(RECORD).as_path());
    assert_eq!(
        err.to_string(),
        format!("capture at /ws/{RECORD} did not parse: expected ident at line 1 column 2")
    );
    let err = cache
        .stream_len(&c.file, key(1), Stream::Stdout)
        .expect_err("refused");
    assert_eq!(
        err.to_string(),
        "capture did not parse: expected ident at line 1 column 2"
    );

    // Missing fields, wrong types, truncation.
    let good = ToolOutputRecord::new("x", "y").pretty();
    let text = String::from_utf8(good.clone()).expect("utf8");
    for (bytes, reason) in [
        (
            text.replace("\"exit_code\": 0", "\"exit_code\": \"0\"")
                .into_bytes(),
            "invalid type: string \"0\", expected i32 at line 4 column 18",
        ),
        (
            text.replace("  \"ended_at\": \"2026-12-02T09:42:31Z\"\n", "")
                .replace("09:42:30Z\",", "09:42:30Z\"")
                .into_bytes(),
            "missing field `ended_at` at line 6 column 1",
        ),
        (
            good[..good.len() - 3].to_vec(),
            "EOF while parsing a string at line 6 column 35",
        ),
        (
            text.replace("\"stdout\": \"x\"", "\"stdout\": 1.5")
                .into_bytes(),
            "invalid type: floating point `1.5`, expected a string at line 2 column 15",
        ),
    ] {
        let c = capture(&bytes);
        assert_eq!(
            super::reference(&bytes).expect_err("serde refuses"),
            reason,
            "reference"
        );
        let err = cache.stream_len(&c.file, key(2), Stream::Stdout);
        cache.forget(&key(2));
        match err {
            Err(PageError::Unreadable { reason: got, .. }) => assert_eq!(got, reason),
            other => panic!("{other:?}"),
        }
    }
}

#[test]
fn a_key_is_parsed_once_and_its_verdict_kept() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("output.json");
    std::fs::write(&path, b"{oops").expect("write");
    let file = std::fs::File::open(&path).expect("open");
    let cache = PageCache::new(1 << 20);
    assert!(matches!(
        cache.stream_len(&file, key(1), Stream::Stdout),
        Err(PageError::Unreadable { .. })
    ));
    // The same key over different bytes: the kept verdict answers, so
    // the file was not parsed again.
    std::fs::write(&path, ToolOutputRecord::new("fine", "").pretty()).expect("rewrite");
    assert!(matches!(
        cache.stream_len(&file, key(1), Stream::Stdout),
        Err(PageError::Unreadable { .. })
    ));
    // A new key is a new parse.
    assert_eq!(
        cache.stream_len(&file, key(2), Stream::Stdout).ok(),
        Some(4)
    );
    // Under a kept index, bytes that vanished are an I/O error, not a
    // short page.
    std::fs::write(&path, b"").expect("truncate");
    let err = cache
        .read(&file, key(2), Stream::Stdout, 0, 4)
        .expect_err("changed");
    assert!(matches!(err, PageError::Changed));
    assert_eq!(err.errno(), libc::EIO);
    assert!(!err.is_refusal());
    // ... and the stale index is dropped, so the next request parses
    // what is there now.
    assert_eq!(cache.entries(), 1);
    assert!(matches!(
        cache.stream_len(&file, key(2), Stream::Stdout),
        Err(PageError::Unreadable { .. })
    ));
}

#[test]
fn real_keys_come_from_fstat() {
    let c = capture(&ToolOutputRecord::new("x", "").pretty());
    let k = CaptureKey::of(&c.file).expect("fstat");
    let meta = std::fs::metadata(&c.path).expect("stat");
    assert_eq!(k, CaptureKey::from_metadata(&meta));
    assert_eq!(k.size, meta.len());
    assert!(k.mtime_ns > 0);
    assert_eq!(std::mem::size_of::<CaptureKey>(), 32);
    // A rename over the path (how litany lands a capture) is a new inode.
    let tmp = c.path.with_extension("json.tmp");
    std::fs::write(&tmp, ToolOutputRecord::new("x", "").pretty()).expect("tmp");
    std::fs::rename(&tmp, &c.path).expect("rename");
    let again = CaptureKey::of(&std::fs::File::open(&c.path).expect("open")).expect("fstat");
    assert_ne!(k, again);
}

#[test]
fn the_cache_stays_within_its_budget_and_evicts_the_oldest() {
    let mut rng = Rng::new(1);
    let captures: Vec<_> = (0..6)
        .map(|_| capture(&ToolOutputRecord::new(&mixed_text(&mut rng, 2000), "").pretty()))
        .collect();
    // Measure one entry, then allow three.
    let probe = PageCache::with_checkpoint_interval(usize::MAX, 64);
    probe
        .stream_len(&captures[0].file, key(0), Stream::Stdout)
        .expect("len");
    let one = probe.used_bytes();
    assert!(one > 0);
    let cache = PageCache::with_checkpoint_interval(3 * one + one / 2, 64);
    for (i, c) in captures.iter().enumerate() {
        cache
            .stream_len(&c.file, key(i as u64), Stream::Stdout)
            .expect("len");
        assert!(cache.used_bytes() <= cache.max_bytes());
    }
    assert_eq!(cache.entries(), 3);
    // Touch the oldest kept one (3), add another: 4 goes, not 3.
    cache
        .stream_len(&captures[3].file, key(3), Stream::Stdout)
        .expect("len");
    cache
        .stream_len(&captures[0].file, key(0), Stream::Stdout)
        .expect("len");
    assert_eq!(cache.entries(), 3);
    let before = cache.used_bytes();
    cache.forget(&key(3));
    assert!(cache.used_bytes() < before, "3 was still held");
    cache.forget(&key(4));
    assert_eq!(cache.used_bytes(), before - one, "4 was already gone");

    // A budget smaller than one entry keeps nothing, and still answers.
    let tiny = PageCache::new(1);
    let len = tiny
        .stream_len(&captures[1].file, key(1), Stream::Stdout)
        .expect("len");
    assert!(len > 0);
    assert_eq!(tiny.entries(), 0);
    assert_eq!(tiny.used_bytes(), 0);
}

#[test]
fn concurrent_readers_share_one_file_and_one_parse() {
    let mut rng = Rng::new(77);
    let rec = ToolOutputRecord::new(&mixed_text(&mut rng, 20_000), &mixed_text(&mut rng, 3000));
    let c = capture(&rec.pretty());
    let cache = PageCache::with_checkpoint_interval(1 << 20, 333);
    std::thread::scope(|s| {
        for t in 0..8u64 {
            let (cache, file, rec) = (&cache, &c.file, &rec);
            s.spawn(move || {
                let mut rng = Rng::new(100 + t);
                for _ in 0..200 {
                    let (stream, text) = if rng.below(2) == 0 {
                        (Stream::Stdout, rec.stdout.as_bytes())
                    } else {
                        (Stream::Stderr, rec.stderr.as_bytes())
                    };
                    let offset = rng.below(text.len() + 10);
                    let len = rng.below(9000);
                    let got = cache
                        .read(file, key(1), stream, offset as u64, len as u64)
                        .expect("read");
                    let from = offset.min(text.len());
                    let to = (offset + len).min(text.len());
                    assert_eq!(got, &text[from..to]);
                }
            });
        }
    });
    assert_eq!(cache.passes(), 1, "8 readers, 1,600 reads: one pass");
    assert_eq!(cache.entries(), 1);
}

/// A few MB of output costs the cache a few KiB.
#[test]
fn an_index_is_small() {
    let line = "error: something happened in a long log line, with \"quotes\" and é\n";
    let stdout = line.repeat(5 * 1024 * 1024 / line.len());
    let c = capture(&ToolOutputRecord::new(&stdout, "").pretty());
    let cache = PageCache::new(1 << 20);
    let len = cache
        .stream_len(&c.file, key(1), Stream::Stdout)
        .expect("len");
    assert_eq!(len, stdout.len() as u64);
    let checkpoints = len / CHECKPOINT_BYTES;
    assert!(
        cache.used_bytes() < 512 + 16 * checkpoints as usize * 2,
        "{}",
        cache.used_bytes()
    );
    let last = cache
        .page(
            &c.file,
            key(1),
            &Address::parse(&format!("{RECORD}#stdout@{}", len - 100)).expect("grammar"),
        )
        .expect("page");
    assert_eq!(last.bytes, &stdout.as_bytes()[stdout.len() - 100..]);
}

#[test]
fn refusals_print_the_tools_messages() {
    let a = address("stdout", 0);
    assert!(PageError::confine(&a.record, "ag").is_ok());
    let err = PageError::confine(&a.record, "someone-else").expect_err("foreign");
    assert_eq!(
        err.to_string(),
        "address names agent \"ag\", and you are \"someone-else\": \
         an agent may page only its own tool captures"
    );
    assert_eq!(err.errno(), libc::ENOENT);
    let err = PageError::NoRecord {
        record: Path::new("/ws").join(RECORD),
        source: std::io::Error::from_raw_os_error(libc::ENOENT),
    };
    assert_eq!(
        err.to_string(),
        format!("no capture at /ws/{RECORD}: No such file or directory (os error 2)")
    );
    let malformed: AddressError = Address::parse("x").expect_err("malformed");
    let err = PageError::from(malformed);
    assert!(
        err.to_string()
            .starts_with("malformed address \"x\": expected steps/")
    );
    assert_eq!(err.errno(), libc::ENOENT);
    let err = PageError::Io(std::io::Error::other("disk on fire"));
    assert_eq!(err.errno(), libc::EIO);
}

#[test]
fn a_small_capture_costs_its_slot_alone_and_reads_the_same() {
    // Each stream is shorter than an interval: no checkpoint, and no index allocated.
    let small = capture(&ToolOutputRecord::new("héllo\nworld\n", "warn\n").pretty());
    let cache = PageCache::with_checkpoint_interval(usize::MAX, 64);
    assert_eq!(
        cache
            .stream_len(&small.file, key(1), Stream::Stdout)
            .expect("len"),
        "héllo\nworld\n".len() as u64
    );
    assert_eq!(
        cache
            .stream_len(&small.file, key(1), Stream::Stderr)
            .expect("len"),
        5
    );
    assert!(cache.indexed(&key(1)));
    let bare = cache.used_bytes();
    // What any entry costs before its outcome: a refusal's, less its message.
    let probe = PageCache::with_checkpoint_interval(usize::MAX, 64);
    let refused = capture(b"nope");
    let Err(PageError::Unreadable { reason, .. }) =
        probe.stream_len(&refused.file, key(3), Stream::Stdout)
    else {
        panic!("a capture that does not parse is refused");
    };
    assert_eq!(bare, probe.used_bytes() - reason.len(), "no index is kept");
    // A capture past one interval keeps its checkpoints, and costs them.
    let long = "x".repeat(1000);
    let big = capture(&ToolOutputRecord::new(&long, "").pretty());
    cache
        .stream_len(&big.file, key(2), Stream::Stdout)
        .expect("len");
    assert!(
        cache.used_bytes() - bare > bare,
        "the indexed entry costs more than the bare one ({} against {bare})",
        cache.used_bytes() - bare
    );
    // Both read as the streams they hold, from any offset.
    assert_eq!(
        cache
            .read(&small.file, key(1), Stream::Stdout, 1, 100)
            .expect("read"),
        "héllo\nworld\n".as_bytes()[1..]
    );
    assert_eq!(
        cache
            .read(&small.file, key(1), Stream::Stderr, 0, 100)
            .expect("read"),
        b"warn\n"
    );
    assert_eq!(
        cache
            .read(&big.file, key(2), Stream::Stdout, 990, 100)
            .expect("read"),
        &long.as_bytes()[990..]
    );
}

#[test]
fn captures_refused_for_one_reason_share_its_message() {
    let cache = PageCache::new(1 << 20);
    let same = [capture(b"{\"stdout\": 1}"), capture(b"{\"stdout\": 1}")];
    let other = capture(b"[]");
    for (i, c) in same.iter().enumerate() {
        assert!(
            cache
                .stream_len(&c.file, key(i as u64), Stream::Stdout)
                .is_err()
        );
    }
    assert!(
        cache
            .stream_len(&other.file, key(9), Stream::Stdout)
            .is_err()
    );
    assert!(cache.one_refusal(&key(0), &key(1)));
    assert!(
        !cache.one_refusal(&key(0), &key(9)),
        "another reason, another message"
    );
    // Each is still refused with its own text.
    let Err(PageError::Unreadable { reason, .. }) =
        cache.stream_len(&other.file, key(9), Stream::Stderr)
    else {
        panic!("refused");
    };
    assert_eq!(
        Err(reason),
        super::reference(b"[]").map(|_| ()),
        "litany's own message"
    );
}
