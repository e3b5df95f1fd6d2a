//! Times deposits through the engine alone, without FUSE: the engine's share of a
//! deposit through the mount (`cargo run --release --example depositbench [N]`, N
//! deposits into one inbox nobody drains for each of three settings, 300 by default).

use std::time::{Duration, Instant};

use litanyfs::deposit::{Depositor, Options, WakeMode};
use litanyfs::fixture::Fixture;
use litanyfs::workspace::Workspace;
use litanyfs::workspace::refs::Flavour;

fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let n: u32 = std::env::args()
        .nth(1)
        .map_or(Ok(300), |a| a.parse())
        .map_err(|e| format!("usage: depositbench [N]: {e}"))?;
    let t = tempfile_dir()?;
    let f = Fixture::create(&t.join("ws"), Flavour::Litany)?;
    f.agent("a1", None, &[])?;
    let ws = Workspace::open(f.root())?;
    // Deposits through the mount arrive a few hundred microseconds apart, which is when
    // the spare files are refilled; so deposits are paced like that and only the time
    // inside `deposit` is counted.
    let gap = Duration::from_micros(300);
    for (label, guard, spares) in [
        ("guarded, spare files", true, true),
        ("guarded, files made per deposit", true, false),
        ("unguarded, spare files", false, true),
    ] {
        let mut opts = Options {
            wake: WakeMode::Off,
            spares,
            ..Options::default()
        };
        if !guard {
            opts.guard = None;
        }
        let dep = Depositor::new(&ws, opts)?;
        std::thread::sleep(Duration::from_millis(50));
        let mut inside = Duration::ZERO;
        for i in 0..n {
            let start = Instant::now();
            dep.deposit("a1", "user", format!("message {i}\n").as_bytes())?;
            inside += start.elapsed();
            std::thread::sleep(gap);
        }
        println!("{label}: {:?} per deposit", inside / n);
    }
    std::fs::remove_dir_all(&t)?;
    Ok(())
}

fn tempfile_dir() -> std::io::Result<std::path::PathBuf> {
    let d = std::env::temp_dir().join(format!("litanyfs-depositbench-{}", std::process::id()));
    std::fs::create_dir_all(&d)?;
    Ok(d)
}
