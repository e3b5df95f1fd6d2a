//! Times the events follower's idle look without FUSE: one scan of the workspace and its
//! diff from the last, repeated (`cargo run --release --example scanbench <ws> [looks]`).
//! Nothing changes meanwhile, so this is what the follower costs an idle mount per look.

use std::time::{Duration, Instant};

use litanyfs::views::follow;
use litanyfs::views::model::Scanner;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let ws = args.next().ok_or("usage: scanbench WORKSPACE [LOOKS]")?;
    let looks: usize = args.next().map_or(Ok(200), |n| n.parse())?;
    let mut scanner = Scanner::new(std::path::Path::new(&ws))?;
    let t = Instant::now();
    let mut model = scanner.scan();
    let first = t.elapsed();
    let mut took: Vec<Duration> = Vec::with_capacity(looks);
    let mut events = 0;
    for _ in 0..looks {
        let t = Instant::now();
        let next = scanner.scan_with(false);
        events += follow::diff(&model, &next, &mut scanner, &mut |_, _, _| false).len();
        model = next;
        took.push(t.elapsed());
    }
    let total: Duration = took.iter().sum();
    took.sort();
    let at = |q: usize| took.get(q * took.len() / 100).copied().unwrap_or_default();
    println!(
        "{} agents: first scan {first:?}; {looks} looks: {total:?} in all, median {:?}, p10 {:?}, p90 {:?}, max {:?}; {events} events",
        model.agents.len(),
        at(50),
        at(10),
        at(90),
        took.last().copied().unwrap_or_default()
    );
    Ok(())
}
