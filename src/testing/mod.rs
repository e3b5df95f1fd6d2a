//! Support for the tests, unit and integration alike (hidden from the API docs, like
//! the fixture): what a test needs from the machine ([`prereq`]), and waiting for a
//! condition instead of sleeping for a guess at how long it takes ([`wait`]).

pub mod prereq;
pub mod wait;

/// The daemon's slow-handler log, for the soak to count.
pub use crate::fs::{SLOW_LOG_MARK, SLOW_REQUEST};
/// The daemon's census of what it holds, for the soak's report.
pub use crate::mount::{CENSUS_MARK, CENSUS_TARGET};

/// The daemon serving `mnt`: the `litanyfs ... --foreground ... MNT` process the mount
/// command left running (tests and the soak signal and measure it).
pub fn daemon_pid(mnt: &std::path::Path) -> Option<i32> {
    let want = mnt.as_os_str().as_encoded_bytes();
    for e in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        let Ok(cmd) = std::fs::read(e.path().join("cmdline")) else {
            continue;
        };
        let args: Vec<&[u8]> = cmd.split(|b| *b == 0).collect();
        if args.first().is_some_and(|a| a.ends_with(b"litanyfs"))
            && args.contains(&b"--foreground".as_slice())
            && args.contains(&want)
        {
            return Some(pid);
        }
    }
    None
}
