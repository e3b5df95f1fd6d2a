//! Times deposits through the engine alone, without FUSE: the engine's share of a
//! deposit through the mount (`cargo run --release --example depositbench`).

use std::time::Instant;

use litanyfs::deposit::{Depositor, Options, WakeMode};
use litanyfs::fixture::Fixture;
use litanyfs::workspace::Workspace;
use litanyfs::workspace::refs::Flavour;

fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let t = tempfile_dir()?;
    let f = Fixture::create(&t.join("ws"), Flavour::Litany)?;
    f.agent("a1", None, &[])?;
    let ws = Workspace::open(f.root())?;
    for (label, guard) in [("guarded", true), ("unguarded", false)] {
        let mut opts = Options {
            wake: WakeMode::Off,
            ..Options::default()
        };
        if !guard {
            opts.guard = None;
        }
        let dep = Depositor::new(&ws, opts)?;
        let n = 300;
        let start = Instant::now();
        for i in 0..n {
            dep.deposit("a1", "user", format!("message {i}\n").as_bytes())?;
        }
        println!("{label}: {:?} per deposit", start.elapsed() / n);
    }
    std::fs::remove_dir_all(&t)?;
    Ok(())
}

fn tempfile_dir() -> std::io::Result<std::path::PathBuf> {
    let d = std::env::temp_dir().join(format!("litanyfs-depositbench-{}", std::process::id()));
    std::fs::create_dir_all(&d)?;
    Ok(d)
}
