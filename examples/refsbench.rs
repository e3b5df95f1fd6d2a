//! Times rebuilding the refs snapshot (what every reader waits for once the cached one
//! is invalidated or too old): `cargo run --release --example refsbench <ws> [ROUNDS]`.

use std::time::Instant;

use litanyfs::workspace::refs::Refs;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let ws = args.next().ok_or("usage: refsbench WORKSPACE [ROUNDS]")?;
    let rounds: usize = args.next().map_or(Ok(20), |r| r.parse())?;
    let refs = Refs::open(&std::path::Path::new(&ws).join("repo.git"))?;
    let first = refs.snapshot()?;
    let mut times = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        refs.invalidate();
        let t = Instant::now();
        let s = refs.snapshot()?;
        times.push(t.elapsed());
        assert_eq!(s.agents.len(), first.agents.len());
    }
    times.sort();
    println!(
        "{} agents, {} names: rebuild median {:?}, min {:?}, max {:?}",
        first.agents.len(),
        first.names.len(),
        times[times.len() / 2],
        times[0],
        times[times.len() - 1]
    );
    Ok(())
}
