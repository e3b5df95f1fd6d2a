//! The readable records' costs (issue #12), without FUSE:
//! `cargo run --release --example renderbench [MB]` (default 50).
//!
//! - rendering a `response.json` of MB megabytes of text deltas (`response_len` from
//!   cold, then every byte read back 128 KiB at a time, as `cat` does) against reading
//!   the file raw the same way (target: within 3x);
//! - the cost of one appended delta, `response_len` plus the read of the new bytes, at
//!   that size (target: under 1 ms);
//! - rendering a 1,000-entry transcript, cold and after one more entry;
//! - peak memory (VmHWM) and what the cache holds.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::time::{Duration, Instant};

use litanyfs::fixture::Fixture;
use litanyfs::paging::CaptureKey;
use litanyfs::records::Records;
use litanyfs::workspace::refs::{Flavour, Refs, agent_ref};

const READ_CHUNK: usize = 128 * 1024;
const BUDGET: usize = 64 << 20;

/// A token-sized piece of text: words of a few letters, some accented, some spaces.
fn token(i: usize) -> String {
    const WORDS: [&str; 8] = [
        "the ", "model", "'s ", "answer", " streams", " wörd", " €", ".\n",
    ];
    WORDS[i % WORDS.len()].to_string()
}

fn delta_line(i: usize) -> String {
    format!(
        "{{\"type\":\"content_delta\",\"index\":0,\"delta\":{{\"text_delta\":{}}}}}\n",
        serde_json::to_string(&token(i)).unwrap_or_default()
    )
}

fn write_response(path: &std::path::Path, bytes: usize) -> std::io::Result<usize> {
    let mut f = std::io::BufWriter::new(File::create(path)?);
    f.write_all(b"{\"type\":\"message_start\",\"v\":1,\"id\":\"msg_bench\",\"model\":\"fake\",\"role\":\"assistant\"}\n")?;
    f.write_all(b"{\"type\":\"content_start\",\"index\":0,\"kind\":{\"text\":{}}}\n")?;
    let (mut written, mut i) = (0, 0);
    while written < bytes {
        let line = delta_line(i);
        f.write_all(line.as_bytes())?;
        written += line.len();
        i += 1;
    }
    f.flush()?;
    Ok(i)
}

fn read_raw(path: &std::path::Path) -> std::io::Result<(Duration, u64)> {
    let t = Instant::now();
    let mut f = File::open(path)?;
    let mut buf = vec![0; READ_CHUNK];
    let mut total = 0u64;
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        total += n as u64;
    }
    Ok((t.elapsed(), total))
}

fn peak_rss() -> String {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("VmHWM"))
        .map(|l| l.split_whitespace().skip(1).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}

fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let mb: usize = std::env::args()
        .nth(1)
        .map(|a| a.parse())
        .transpose()?
        .unwrap_or(50);
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("response.json");
    let deltas = write_response(&path, mb << 20)?;
    let size = std::fs::metadata(&path)?.len();
    println!(
        "response.json: {:.1} MB, {deltas} text deltas",
        size as f64 / 1e6
    );

    // Raw, warm: the best of five passes.
    let mut raw = Duration::MAX;
    for _ in 0..5 {
        raw = raw.min(read_raw(&path)?.0);
    }

    // Rendered: cold length, then every byte, 128 KiB reads (best of three caches).
    let (mut first_len, mut cat, mut rendered) = (Duration::MAX, Duration::MAX, 0);
    for _ in 0..3 {
        let records = Records::new(BUDGET);
        let file = File::open(&path)?;
        let key = CaptureKey::of(&file)?;
        let t = Instant::now();
        let len = records.response_len(&file, key, false)?;
        first_len = first_len.min(t.elapsed());
        let t = Instant::now();
        let mut off = 0;
        while off < len {
            let got = records.response_read(&file, key, false, off, READ_CHUNK as u64)?;
            off += got.len() as u64;
        }
        cat = cat.min(t.elapsed());
        rendered = len;
    }
    println!(
        "raw read {}; render (response_len, cold) {} = {:.2}x raw; then cat of {:.1} MB \
         rendered {} (render + cat {:.2}x raw)",
        ms(raw),
        ms(first_len),
        first_len.as_secs_f64() / raw.as_secs_f64(),
        rendered as f64 / 1e6,
        ms(cat),
        (first_len + cat).as_secs_f64() / raw.as_secs_f64()
    );

    // The same with a budget too small to hold the rendering whole: checkpoints, the
    // cursor for cat, and the worst single read (one checkpoint interval re-rendered).
    let small = (rendered as usize / 2).max(1 << 16);
    let (mut cold_small, mut cat_small) = (Duration::MAX, Duration::MAX);
    let mut worst = Duration::ZERO;
    for _ in 0..3 {
        let records = Records::new(small);
        let file = File::open(&path)?;
        let key = CaptureKey::of(&file)?;
        let t = Instant::now();
        let len = records.response_len(&file, key, false)?;
        cold_small = cold_small.min(t.elapsed());
        let t = Instant::now();
        let mut off = 0;
        while off < len {
            let got = records.response_read(&file, key, false, off, READ_CHUNK as u64)?;
            off += got.len() as u64;
        }
        cat_small = cat_small.min(t.elapsed());
        // Reads of 4 KiB at offsets that defeat the cursor.
        for i in 0..200u64 {
            let at = (len / 200) * (199 - i) + 4096 * (i % 13);
            let t = Instant::now();
            records.response_read(&file, key, false, at.min(len), 4096)?;
            worst = worst.max(t.elapsed());
        }
    }
    println!(
        "not held whole (budget {:.1} MB): render {}, cat {} (render + cat {:.2}x raw), \
         worst 4 KiB read at a random offset {}",
        small as f64 / 1e6,
        ms(cold_small),
        ms(cat_small),
        (cold_small + cat_small).as_secs_f64() / raw.as_secs_f64(),
        ms(worst)
    );

    // One appended delta at a time: fstat, length, read of the new bytes.
    let records = Records::new(BUDGET);
    let file = File::open(&path)?;
    records.response_len(&file, CaptureKey::of(&file)?, false)?;
    let mut appender = OpenOptions::new().append(true).open(&path)?;
    let mut costs = Vec::new();
    for i in 0..1000 {
        appender.write_all(delta_line(i).as_bytes())?;
        let t = Instant::now();
        let key = CaptureKey::of(&file)?;
        let before = records.used_bytes();
        let len = records.response_len(&file, key, false)?;
        let got = records.response_read(&file, key, false, len.saturating_sub(64), 64)?;
        costs.push(t.elapsed());
        std::hint::black_box((before, got));
    }
    costs.sort();
    println!(
        "one appended delta (fstat + response_len + read of the tail), 1000 appends at {:.1} MB: \
         median {}, p99 {}, max {}",
        size as f64 / 1e6,
        ms(costs[costs.len() / 2]),
        ms(costs[costs.len() * 99 / 100]),
        ms(costs[costs.len() - 1])
    );
    println!(
        "cache after the appends: {} bytes in {} renderings",
        records.used_bytes(),
        records.entries()
    );

    // A 1,000-entry transcript.
    let f = Fixture::create(&dir.path().join("ws"), Flavour::Litany)?;
    let id = "bench";
    f.agent(id, Some("Bench"), &[])?;
    let mut files: Vec<(String, Vec<u8>)> = Vec::new();
    let tool = "Exit code: 0\n".to_string() + &"line of output\n".repeat(200);
    for n in 1..=1000 {
        let (name, bytes) = match n % 3 {
            1 => (
                format!("{n:03}-user.md"),
                format!("---\nfrom: user\ndeposited_at: 2026-12-02T18:08:10Z\n---\nmessage {n}")
                    .into_bytes(),
            ),
            2 => (
                format!("{n:03}-claude-sonnet-5.json"),
                serde_json::to_vec(&serde_json::json!({
                    "content": [
                        {"type": "text", "text": format!("answer {n} ").repeat(20)},
                        {"type": "tool_use", "id": format!("toolu_{n}"), "name": "bash",
                         "input": {"command": format!("seq 1 {n}")}},
                    ],
                    "usage": {"input_tokens": n, "output_tokens": 30},
                }))?,
            ),
            _ => (
                format!("{n:03}-tool.json"),
                serde_json::to_vec(&serde_json::json!([{
                    "type": "tool_result", "tool_use_id": format!("toolu_{}", n - 1),
                    "content": [{"type": "text", "text": tool}], "is_error": false,
                }]))?,
            ),
        };
        files.push((format!("messages/{name}"), bytes));
        let view: Vec<(&str, &[u8])> = files
            .iter()
            .map(|(p, b)| (p.as_str(), b.as_slice()))
            .collect();
        let tree = f.tree(&view)?;
        let origin = name.split_once('-').map_or("", |x| x.1);
        f.commit(
            &agent_ref(id),
            tree,
            &format!("transcript {n:03}: {origin} [{id}]"),
        )?;
    }
    let refs = Refs::open(&f.root().join("repo.git"))?;
    let tip = f.agent_tip(id)?;
    let records = Records::new(BUDGET);
    let t = Instant::now();
    let bytes = records.transcript(&refs, tip)?;
    let cold = t.elapsed();
    let t = Instant::now();
    records.transcript(&refs, tip)?;
    let cached = t.elapsed();
    files.push((
        "messages/1001-user.md".into(),
        b"---\nfrom: user\ndeposited_at: 2026-12-02T18:08:10Z\n---\none more".to_vec(),
    ));
    let view: Vec<(&str, &[u8])> = files
        .iter()
        .map(|(p, b)| (p.as_str(), b.as_slice()))
        .collect();
    let tree = f.tree(&view)?;
    let next = f.commit(
        &agent_ref(id),
        tree,
        &format!("transcript 1001: user [{id}]"),
    )?;
    let t = Instant::now();
    let grown = records.transcript(&refs, next)?;
    let extend = t.elapsed();
    println!(
        "transcript of 1000 entries ({:.1} MB): cold {}, cached {}, one more entry {} ({:.1} MB)",
        bytes.len() as f64 / 1e6,
        ms(cold),
        ms(cached),
        ms(extend),
        grown.len() as f64 / 1e6
    );
    println!("peak memory (VmHWM): {}", peak_rss());
    Ok(())
}
