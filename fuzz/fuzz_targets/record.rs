//! The streaming `output.json` reader against serde_json itself: arbitrary bytes as a
//! capture must get serde_json's verdict, message and decoded strings, through
//! `PageCache` (with the default checkpoint interval and with a tiny one).
#![no_main]

use std::fs::File;
use std::io::Write;
use std::os::fd::FromRawFd;

use libfuzzer_sys::fuzz_target;
use litanyfs::paging::{CaptureKey, PageCache, PageError, RecordPath, Stream};
use serde::Deserialize;

/// litany's record, under litany's name, so serde's messages name the same struct.
#[derive(Debug, Deserialize)]
#[allow(dead_code)]
struct ToolOutputRecord {
    stdout: String,
    stderr: String,
    exit_code: i32,
    started_at: String,
    ended_at: String,
}

/// The bytes the reader takes from a capture at a time (`paging::scan`'s `SCAN_CHUNK`).
const SCAN_CHUNK: usize = 64 * 1024;

/// An anonymous in-memory file holding `bytes`.
fn capture(bytes: &[u8]) -> File {
    // SAFETY: memfd_create takes a NUL-terminated name and flags; on success the fd is
    // new and owned by nobody else.
    let fd = unsafe { libc::memfd_create(c"output.json".as_ptr(), libc::MFD_CLOEXEC) };
    assert!(fd >= 0, "memfd_create: {}", std::io::Error::last_os_error());
    // SAFETY: `fd` was just created and is owned here.
    let mut file = unsafe { File::from_raw_fd(fd) };
    file.write_all(bytes).expect("write capture");
    file
}

/// serde_json 1.0.149 (litany's) and 1.0.154 (this build's) place an invalid-UTF-8
/// error differently; the scan follows 1.0.149. Compare those without the position.
fn without_utf8_position(msg: &str) -> &str {
    if msg.starts_with("invalid unicode code point") {
        msg.split(" at line ").next().unwrap_or(msg)
    } else {
        msg
    }
}

fn check(data: &[u8], file: &File, cache: &PageCache, theirs: &Result<ToolOutputRecord, String>) {
    let key = CaptureKey::of(file).expect("fstat");
    for stream in Stream::ALL {
        let len = cache.stream_len(file, key, stream);
        let whole = cache.read(file, key, stream, 0, u64::MAX);
        match (theirs, len, whole) {
            (Ok(rec), Ok(len), Ok(whole)) => {
                let want = match stream {
                    Stream::Stdout => rec.stdout.as_bytes(),
                    Stream::Stderr => rec.stderr.as_bytes(),
                };
                assert_eq!(len, want.len() as u64, "{stream} length of {data:?}");
                assert_eq!(whole, want, "{stream} of {data:?}");
                // Every range is the same slice of serde's string.
                let n = want.len();
                for offset in [0, 1, 2, 5, n / 2, n.saturating_sub(1), n, n + 1] {
                    for size in [0, 1, 3, 4096] {
                        let got = cache
                            .read(file, key, stream, offset as u64, size as u64)
                            .expect("range reads");
                        let from = offset.min(n);
                        let to = (offset + size).min(n).max(from);
                        assert_eq!(
                            got,
                            &want[from..to],
                            "{stream}[{offset}..+{size}] of {data:?}"
                        );
                    }
                }
                // A page is the first 4096 bytes.
                let record = RecordPath::new("a", "001", "t").expect("a record path");
                let page = cache
                    .page(file, key, &record.at(stream, 0))
                    .expect("first page");
                assert_eq!(page.bytes, &want[..n.min(4096)]);
                assert_eq!(page.len, n as u64);
            }
            (Err(msg), Err(PageError::Unreadable { reason, .. }), Err(_)) => {
                assert_eq!(
                    without_utf8_position(&reason),
                    without_utf8_position(msg),
                    "message for {data:?}"
                );
            }
            (theirs, len, whole) => panic!(
                "verdicts differ on {:?}:\n serde_json: {theirs:?}\n ours: {len:?} / {:?}",
                String::from_utf8_lossy(data),
                whole.map(|w| String::from_utf8_lossy(&w).into_owned()),
            ),
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let theirs = serde_json::from_slice::<ToolOutputRecord>(data).map_err(|e| e.to_string());
    let file = capture(data);
    check(data, &file, &PageCache::new(1 << 20), &theirs);
    let interval = 1 + u64::from(data.first().copied().unwrap_or(0) % 7);
    check(
        data,
        &file,
        &PageCache::with_checkpoint_interval(1 << 20, interval),
        &theirs,
    );

    // The same record behind leading blanks, so that the reader's 64 KiB read chunk
    // ends inside it, at a byte the input picks. 64 KiB of blanks is slow to parse
    // under the fuzzer's instrumentation, so one input in eight.
    if let Some(&pick) = data.first()
        && pick % 8 == 0
    {
        let cut = usize::from(pick / 8) % data.len();
        let mut padded = vec![b' '; SCAN_CHUNK - cut];
        padded.extend_from_slice(data);
        let theirs = serde_json::from_slice::<ToolOutputRecord>(&padded).map_err(|e| e.to_string());
        check(
            &padded,
            &capture(&padded),
            &PageCache::new(1 << 20),
            &theirs,
        );
    }
});
