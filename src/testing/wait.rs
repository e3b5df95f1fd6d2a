//! Waiting for a condition, with a deadline. A test that needs something asynchronous
//! to have happened (a mount to show a change, a process to be ready or gone, a file to
//! appear) polls for exactly that instead of sleeping: a sleep long enough on an idle
//! machine is too short on a loaded one, and one long enough everywhere wastes every
//! run. The deadline only bounds a failure; when it passes, the test fails naming the
//! condition it waited for. No test asserts how long something took.

use std::time::{Duration, Instant};

/// How often a condition is looked at.
pub(crate) const POLL: Duration = Duration::from_millis(10);

/// Polls `cond` until it holds. Panics naming `what` (and where the wait was) when
/// `deadline` passes first.
#[track_caller]
pub fn wait_for(cond: impl FnMut() -> bool, deadline: Duration, what: &str) {
    if !within(deadline, cond) {
        panic!("timed out after {deadline:?} waiting for {what}");
    }
}

/// Polls `probe` until it gives a value, and returns that. Panics naming `what` when
/// `deadline` passes first.
#[track_caller]
pub fn wait_for_some<T>(mut probe: impl FnMut() -> Option<T>, deadline: Duration, what: &str) -> T {
    let end = Instant::now() + deadline;
    loop {
        if let Some(v) = probe() {
            return v;
        }
        if Instant::now() >= end {
            // Looked at once more after the deadline, as `within` does.
            match probe() {
                Some(v) => return v,
                None => panic!("timed out after {deadline:?} waiting for {what}"),
            }
        }
        std::thread::sleep(POLL);
    }
}

/// Whether `cond` holds within `deadline` (polled; looked at once more after the
/// deadline, so a slow first look still counts).
pub fn within(deadline: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + deadline;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= end {
            return cond();
        }
        std::thread::sleep(POLL);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_condition_that_comes_true_ends_the_wait() {
        let mut n = 0;
        wait_for(
            || {
                n += 1;
                n == 3
            },
            Duration::from_secs(60),
            "the third look",
        );
        assert_eq!(n, 3);
        let mut m = 0;
        let got = wait_for_some(
            || {
                m += 1;
                (m == 2).then_some("x")
            },
            Duration::from_secs(60),
            "a value",
        );
        assert_eq!((got, m), ("x", 2));
    }

    #[test]
    fn a_timeout_names_the_condition() {
        let e = std::panic::catch_unwind(|| wait_for(|| false, Duration::ZERO, "the moon"))
            .unwrap_err();
        let msg = e.downcast_ref::<String>().unwrap();
        assert!(msg.contains("waiting for the moon"), "{msg}");
        assert!(!within(Duration::ZERO, || false));
    }
}
