//! Times page reads without FUSE: the work a lookup of `output.json#stdout@N` does in the
//! daemon (`cargo run --release --example pagebench [MiB] [PAGES] [CHECKPOINT]`). It writes a capture
//! like the bench's (`scripts/bench.py`'s `make_capture`: a line of text with three escapes
//! and a newline, repeated), indexes it once, then reads pages at random offsets.

use std::fs::File;
use std::time::{Duration, Instant};

use litanyfs::paging::{Address, CaptureKey, PageCache};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let mib: usize = args.next().map_or(Ok(50), |n| n.parse())?;
    let pages: usize = args.next().map_or(Ok(3000), |n| n.parse())?;
    let interval: u64 = args
        .next()
        .map_or(Ok(litanyfs::paging::CHECKPOINT_BYTES), |n| n.parse())?;
    let dir = std::env::temp_dir().join(format!("pagebench-{}", std::process::id()));
    let rec = dir.join("steps/a/001/tools/t1");
    std::fs::create_dir_all(&rec)?;
    let mut line = String::new();
    for n in 0..1000 {
        line.push_str(&format!(
            "{n} the quick brown fox jumps over the lazy dog \\ \"q\" \u{e9}\n"
        ));
    }
    let mut stdout = line.repeat((mib << 20) / line.len() + 1);
    let mut cut = mib << 20;
    while !stdout.is_char_boundary(cut) {
        cut -= 1;
    }
    stdout.truncate(cut);
    let record = serde_json::json!({"stdout": stdout, "stderr": "", "exit_code": 0, "started_at": "2026-12-02T09:42:30Z", "ended_at": "2026-12-02T09:42:31Z"});
    let path = rec.join("output.json");
    std::fs::write(&path, serde_json::to_vec_pretty(&record)?)?;
    let file = File::open(&path)?;
    let key = CaptureKey::of(&file)?;
    let cache = PageCache::with_checkpoint_interval(64 << 20, interval);
    let base = Address::parse("steps/a/001/tools/t1/output.json#stdout@0")?;
    let t = Instant::now();
    let first = cache.page(&file, key, &base)?;
    let index = t.elapsed();
    let index_bytes = cache.used_bytes();
    let total = first.len;
    let mut seed = 7u64;
    let mut took: Vec<Duration> = Vec::with_capacity(pages);
    let mut bytes = 0usize;
    for _ in 0..pages {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let off = (seed >> 11) % total;
        let t = Instant::now();
        let page = cache.page(&file, key, &base.moved_to(off))?;
        took.push(t.elapsed());
        bytes += page.bytes.len();
    }
    std::fs::remove_dir_all(&dir)?;
    let sum: Duration = took.iter().sum();
    took.sort();
    let at = |q: usize| took.get(q * took.len() / 100).copied().unwrap_or_default();
    println!(
        "{mib} MiB capture, a checkpoint every {interval} bytes ({total} decoded bytes): index {index:?}, {index_bytes} bytes held; {pages} pages ({bytes} bytes): mean {:?}, median {:?}, p10 {:?}, p90 {:?}",
        sum / pages as u32,
        at(50),
        at(10),
        at(90)
    );
    Ok(())
}
