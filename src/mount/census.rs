//! The census: when asked for (`RUST_LOG=litanyfs::census=debug`), a log line a minute
//! of what the daemon holds, so that a memory that grows can be told apart: the caches
//! filling to their bound, the inode numbers the kernel references, or something else.

use std::time::Duration;

use crate::fs::Fs;

/// How often the census is logged.
const CENSUS_EVERY: Duration = Duration::from_secs(60);
/// The census's log target: `RUST_LOG=litanyfs::census=debug` turns it on alone.
pub const CENSUS_TARGET: &str = "litanyfs::census";
/// What a census line says first (the soak reads them).
pub const CENSUS_MARK: &str = "census: ";

/// When [`CENSUS_TARGET`] logs at debug, a line every [`CENSUS_EVERY`] of what the
/// daemon holds (RSS, the heap in use and free, inode numbers, handles, the caches), so
/// that a memory that grows can be told apart: data held, or a heap that frays.
pub(super) fn start(fs: &Fs, caches: &crate::tree::Caches) {
    if !log::log_enabled!(target: CENSUS_TARGET, log::Level::Debug) {
        return;
    }
    let fs = fs.clone();
    let caches = caches.clone();
    let spawned = std::thread::Builder::new()
        .name("census".into())
        .spawn(move || {
            loop {
                std::thread::sleep(CENSUS_EVERY);
                let (pages, renderings) = caches.used_bytes();
                log::debug!(
                    target: CENSUS_TARGET,
                    "{CENSUS_MARK}rss {} KiB, {}, {}, caches: pages {} KiB, renderings {} KiB",
                    crate::process::rss_kib().unwrap_or(0),
                    heap(),
                    fs.census(),
                    pages / 1024,
                    renderings / 1024
                );
            }
        });
    if let Err(e) = spawned {
        log::warn!("no census thread ({e})");
    }
}

/// glibc's heap: what is in use and what it holds free (`mallinfo2`).
fn heap() -> String {
    #[cfg(target_env = "gnu")]
    {
        // SAFETY: mallinfo2 only reads the allocator's counters.
        let m = unsafe { libc::mallinfo2() };
        format!(
            "heap: in use {} KiB (mmapped {} KiB), free {} KiB",
            (m.uordblks + m.hblkhd) / 1024,
            m.hblkhd / 1024,
            m.fordblks / 1024
        )
    }
    #[cfg(not(target_env = "gnu"))]
    {
        String::from("heap: unknown")
    }
}
