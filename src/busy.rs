//! When the mount last served a request: what background work that can wait yields to.
//!
//! A home mount's follower looks at every resting workspace on a slow tick, each look a
//! `stat` of every agent's directories. Over a tree the kernel's caches let go of, those
//! reads go to the disk and queue beside the reads of whoever is walking the mount now
//! (a cold walk of one workspace: 400 of them in its half second, doc/PERFORMANCE.md).
//! Such a look waits while requests keep coming ([`busy`]), up to a bound its caller sets,
//! so that a look is late rather than in the way.

use std::sync::LazyLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How recent a request must be for the mount to count as busy.
pub(crate) const BUSY_FOR: Duration = Duration::from_millis(250);

/// The moment the clock counts from.
static EPOCH: LazyLock<Instant> = LazyLock::new(Instant::now);
/// When the last request was served, in milliseconds after [`EPOCH`] (0: none yet).
static LAST: AtomicU64 = AtomicU64::new(0);

fn millis(at: Instant) -> u64 {
    u64::try_from(at.saturating_duration_since(*EPOCH).as_millis())
        .unwrap_or(u64::MAX)
        .max(1)
}

/// Notes a request served at `at` (the adapter, once per request).
pub(crate) fn served(at: Instant) {
    // Written once a millisecond at most: the request threads need not take the line
    // from one another on every request.
    let m = millis(at);
    if LAST.load(Ordering::Relaxed) != m {
        LAST.store(m, Ordering::Relaxed);
    }
}

/// Whether a request was served within [`BUSY_FOR`] of `now`.
pub(crate) fn busy(now: Instant) -> bool {
    let last = LAST.load(Ordering::Relaxed);
    last != 0 && millis(now).saturating_sub(last) < BUSY_FOR.as_millis() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn busy_while_requests_come_and_idle_after() {
        let t = Instant::now();
        served(t);
        assert!(busy(t));
        assert!(busy(t + BUSY_FOR / 2));
        assert!(!busy(t + BUSY_FOR * 2));
    }
}
