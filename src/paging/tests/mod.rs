//! Tests for the paging layer. The reference throughout is what litany
//! itself does: `serde_json::from_slice::<ToolOutputRecord>` for the
//! parse, a byte slice of the resulting `String` for a page, and the
//! real `litany` binary ([`litany`]; a prerequisite, see [`crate::testing::prereq`]).

mod address;
mod banner;
mod litany;
mod reader;
mod scan;

use super::reader::CaptureKey;
use serde::{Deserialize, Serialize};
use std::fs::File;
use std::path::PathBuf;
use tempfile::TempDir;

/// litany's record type, under litany's name, so serde's messages name
/// the same struct.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub(super) struct ToolOutputRecord {
    pub(crate) stdout: String,
    pub(crate) stderr: String,
    pub(crate) exit_code: i32,
    pub(crate) started_at: String,
    pub(crate) ended_at: String,
}

impl ToolOutputRecord {
    pub(super) fn new(stdout: &str, stderr: &str) -> Self {
        ToolOutputRecord {
            stdout: stdout.to_string(),
            stderr: stderr.to_string(),
            exit_code: 0,
            started_at: "2026-12-02T09:42:30Z".to_string(),
            ended_at: "2026-12-02T09:42:31Z".to_string(),
        }
    }

    /// Pretty JSON in field order, as litany writes a capture.
    pub(super) fn pretty(&self) -> Vec<u8> {
        serde_json::to_vec_pretty(self).expect("a record serializes")
    }
}

/// What litany makes of `bytes`: the record, or serde_json's message.
pub(super) fn reference(bytes: &[u8]) -> Result<ToolOutputRecord, String> {
    serde_json::from_slice::<ToolOutputRecord>(bytes).map_err(|e| e.to_string())
}

/// A file holding `bytes`, open for reading, in its own directory.
pub(super) struct Capture {
    _dir: TempDir,
    pub(crate) path: PathBuf,
    pub(crate) file: File,
}

pub(super) fn capture(bytes: &[u8]) -> Capture {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("output.json");
    std::fs::write(&path, bytes).expect("write capture");
    let file = File::open(&path).expect("open capture");
    Capture {
        _dir: dir,
        path,
        file,
    }
}

/// A made-up key; tests that share no file use distinct `n`.
pub(super) fn key(n: u64) -> CaptureKey {
    CaptureKey {
        dev: 1,
        ino: n,
        size: 0,
        mtime_ns: 0,
    }
}

/// A small deterministic generator (xorshift64*), so failures replay.
pub(super) struct Rng(u64);

impl Rng {
    pub(super) fn new(seed: u64) -> Self {
        Rng(seed.max(1))
    }

    pub(super) fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform-ish in `0..n` (`n > 0`).
    pub(super) fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    pub(super) fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len())]
    }
}

/// Text that exercises the decoder: ASCII, two- three- and four-byte
/// characters, and characters serde escapes (quotes, backslashes,
/// control bytes).
pub(super) fn mixed_text(rng: &mut Rng, chars: usize) -> String {
    const PIECES: &[&str] = &[
        "a",
        "b",
        " ",
        "\n",
        "\t",
        "\"",
        "\\",
        "/",
        "\u{0}",
        "\u{1f}",
        "\u{7f}",
        "é",
        "ß",
        "€",
        "中",
        "\u{fffd}",
        "😀",
        "\u{10ffff}",
        "\r\n",
        "line\n",
        "\u{8}",
        "\u{c}",
    ];
    let mut s = String::new();
    for _ in 0..chars {
        s.push_str(rng.pick(PIECES));
    }
    s
}
