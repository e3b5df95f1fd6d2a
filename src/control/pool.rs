//! The workers that carry acts (a `ctl` command, a start from `new/`) to their end, so
//! that no FUSE request thread ever waits on a child process: the request thread hands
//! the act, with its reply, to [`submit`] and is free at once; a worker runs it and
//! replies.
//!
//! Guarantees: at most [`MAX_WORKERS`] workers, started as acts come and kept; at most
//! [`MAX_QUEUED`] acts waiting, past which [`submit`] refuses (the caller answers
//! `EAGAIN`), so a flood of writes costs bounded memory and threads; acts run in the
//! order they were handed in, several at a time. One pool serves the whole daemon (every
//! workspace of a home).

use std::collections::VecDeque;
use std::sync::OnceLock;

use parking_lot::{Condvar, Mutex};

/// The most acts running at once (a `stop` may take 5 s: a few stops must not hold up
/// every other act).
pub(crate) const MAX_WORKERS: usize = 8;
/// The most acts waiting for a worker.
pub(crate) const MAX_QUEUED: usize = 1024;

/// One act to carry out.
pub(crate) type Job = Box<dyn FnOnce() + Send + 'static>;

struct Pool {
    queue: Mutex<Queue>,
    ready: Condvar,
}

#[derive(Default)]
struct Queue {
    jobs: VecDeque<Job>,
    workers: usize,
    idle: usize,
}

fn pool() -> &'static Pool {
    static POOL: OnceLock<Pool> = OnceLock::new();
    POOL.get_or_init(|| Pool {
        queue: Mutex::new(Queue::default()),
        ready: Condvar::new(),
    })
}

/// Hands `job` to a worker; gives it back when [`MAX_QUEUED`] acts already wait, or no
/// worker could be started.
pub(crate) fn submit(job: Job) -> Result<(), Job> {
    let p = pool();
    let mut q = p.queue.lock();
    if q.jobs.len() >= MAX_QUEUED {
        return Err(job);
    }
    if q.idle == 0 && q.workers < MAX_WORKERS {
        let spawned = std::thread::Builder::new()
            .name("litanyfs-act".into())
            .stack_size(256 * 1024)
            .spawn(work);
        match spawned {
            Ok(_) => q.workers += 1,
            Err(e) if q.workers == 0 => {
                log::warn!("no thread to carry an act ({e})");
                return Err(job);
            }
            Err(e) => log::warn!("no further act thread ({e}); the act waits its turn"),
        }
    }
    q.jobs.push_back(job);
    p.ready.notify_one();
    Ok(())
}

fn work() {
    let p = pool();
    loop {
        let job = {
            let mut q = p.queue.lock();
            loop {
                if let Some(job) = q.jobs.pop_front() {
                    break job;
                }
                q.idle += 1;
                p.ready.wait(&mut q);
                q.idle -= 1;
            }
        };
        // A job that panics must not take its worker's place with it.
        if std::panic::catch_unwind(std::panic::AssertUnwindSafe(job)).is_err() {
            log::error!("an act panicked; its reply was dropped (EIO)");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::{Duration, Instant};

    #[test]
    fn acts_run_several_at_a_time_and_all_run() {
        let done = Arc::new(AtomicUsize::new(0));
        let started = Instant::now();
        for _ in 0..32 {
            let done = done.clone();
            submit(Box::new(move || {
                std::thread::sleep(Duration::from_millis(50));
                done.fetch_add(1, Ordering::SeqCst);
            }))
            .ok()
            .unwrap();
        }
        while done.load(Ordering::SeqCst) < 32 {
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "acts never ran"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        // 32 acts of 50 ms on one worker would take 1.6 s; on several, less.
        assert!(pool().queue.lock().workers > 1);
    }
}
