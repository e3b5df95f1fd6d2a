//! The daemon's upkeep: every [`UPKEEP_EVERY`] it closes the git handles whose packs a
//! repack replaced, and retires those old enough that libgit2's caches through them
//! should go ([`crate::workspace::handles::sweep`]), asks the kernel to forget the files
//! nobody used since its last round once it holds many ([`crate::fs`]'s inode bound),
//! gives the heap's free pages back
//! to the kernel, and, when asked for (`RUST_LOG=litanyfs::census=debug`), logs a census line of
//! what it holds, so that a memory that grows can be told apart: the caches filling to
//! their bound, the inode numbers the kernel references, or a heap that frays.
//!
//! Why the giving back: glibc keeps what a thread frees in that thread's arena for the
//! next allocation, and only ever shrinks an arena from its top. A daemon whose request
//! threads each build and drop renderings of many sizes holds more and more memory it no
//! longer uses (measured under the soak: 3 MiB free-but-kept at minute 5, 33 MiB at
//! minute 30, doc/TESTING.md). `malloc_trim` returns every whole free page of every arena.

use std::time::Duration;

use crate::fs::Fs;

/// How often the heap is trimmed and the census logged: often enough that what a burst
/// freed does not stay in the RSS for long (one `malloc_trim` took a soak's daemon of 164
/// MiB to 152 MiB), and each costs a few milliseconds.
const UPKEEP_EVERY: Duration = Duration::from_secs(10);
/// The census's log target: `RUST_LOG=litanyfs::census=debug` turns it on alone.
pub const CENSUS_TARGET: &str = "litanyfs::census";
/// What a census line says first (the soak reads them).
pub const CENSUS_MARK: &str = "census: ";

/// Every [`UPKEEP_EVERY`], the heap trimmed and, when [`CENSUS_TARGET`] logs at debug, a
/// line of what the daemon holds (RSS, the heap in use and free, inode numbers, handles,
/// the caches).
pub(super) fn start(fs: &Fs, caches: &crate::tree::Caches, notifier: fuser::Notifier) {
    let fs = fs.clone();
    let caches = caches.clone();
    let spawned = std::thread::Builder::new()
        .name("upkeep".into())
        .spawn(move || {
            loop {
                std::thread::sleep(UPKEEP_EVERY);
                let census = log::log_enabled!(target: CENSUS_TARGET, log::Level::Debug);
                let before = census.then(crate::process::rss_kib).flatten();
                crate::workspace::handles::sweep();
                fs.hand_back(&notifier);
                crate::process::trim_heap();
                if !census {
                    continue;
                }
                let after = crate::process::rss_kib().unwrap_or(0);
                let (pages, renderings) = caches.used_bytes();
                log::debug!(
                    target: CENSUS_TARGET,
                    "{CENSUS_MARK}rss {after} KiB ({} KiB given back), {}, {}, caches: pages {} \
                     KiB, renderings {} KiB",
                    before.unwrap_or(after).saturating_sub(after),
                    heap(),
                    fs.census(),
                    pages / 1024,
                    renderings / 1024
                );
            }
        });
    if let Err(e) = spawned {
        log::warn!("no upkeep thread ({e}): the heap's free pages stay with the daemon");
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
