//! Which files someone holds a `flock` on, read from `/proc/locks`: the one read-only way
//! to tell that an executor works on an agent (it holds its `inbox/<id>` directory), as a
//! probing `flock` of our own could make a starting executor give up (CONTRACT §5).
//!
//! A reading is dear. For every `read(2)` of `/proc/locks` the kernel takes the
//! machine's file-lock semaphore for writing (`locks_start` in `fs/locks.c`): it waits
//! for an RCU grace period and for every `flock` under way anywhere to finish, and holds
//! up every new one meanwhile. Under the soak the daemon's request threads, its follower
//! and its waker read it about 34 times a second, each time sleeping uninterruptibly and
//! then waiting again for a CPU (an off-CPU profile, doc/TESTING.md). So:
//! - a reading is one `read` into a buffer big enough for the whole table, and one more
//!   that finds its end (a growing buffer took about nine, each a round of the semaphore);
//! - callers that overlap share a reading: [`held`] answers with a reading *begun after it
//!   was called*, so nothing it says is older than the question (the waker's race-safety
//!   rests on that, `deposit::wake::executor_busy`), while every caller that arrives during
//!   one reading is answered by the next, one reading for all of them.

use std::collections::BTreeSet;
use std::io::{self, Read};
use std::sync::Arc;

use parking_lot::{Condvar, Mutex};

/// Where the kernel lists every file lock.
pub(crate) const PROC_LOCKS: &str = "/proc/locks";
/// The buffer a reading starts with; it doubles should the table not fit.
const READ_BYTES: usize = 64 << 10;

/// Every `(major, minor, inode)` a granted `FLOCK` is held on.
pub(crate) type Held = BTreeSet<(u32, u32, u64)>;

/// The readings, one at a time, and the last one's answer.
struct Readings {
    /// Readings begun so far, and readings ended.
    begun: u64,
    ended: u64,
    last: Result<Arc<Held>, (io::ErrorKind, String)>,
}

static READINGS: Mutex<Readings> = Mutex::new(Readings {
    begun: 0,
    ended: 0,
    // Never answered: a reading has ended before anyone is answered.
    last: Err((io::ErrorKind::Other, String::new())),
});
static ENDED: Condvar = Condvar::new();

/// The held `FLOCK`s, from a reading of `/proc/locks` begun after this call (module docs).
pub(crate) fn held() -> io::Result<Arc<Held>> {
    let mut r = READINGS.lock();
    // A reading under way began before this call: the one after it is the first to do.
    let wanted = r.begun + 1;
    loop {
        if r.ended >= wanted {
            return r.last.clone().map_err(|(kind, e)| io::Error::new(kind, e));
        }
        if r.begun == r.ended {
            r.begun += 1;
            let answer = parking_lot::MutexGuard::unlocked(&mut r, read)
                .map(|text| Arc::new(flocks(&text).collect::<Held>()))
                .map_err(|e| (e.kind(), e.to_string()));
            r.last = answer;
            r.ended = r.begun;
            ENDED.notify_all();
        } else {
            ENDED.wait(&mut r);
        }
    }
}

/// Whether a `FLOCK` is held on the file of `st_dev` `dev` and inode `ino`.
pub(crate) fn is_held(held: &Held, dev: u64, ino: u64) -> bool {
    held.contains(&(libc::major(dev), libc::minor(dev), ino))
}

/// `/proc/locks` whole, in as few `read`s as it takes (module docs).
fn read() -> io::Result<String> {
    read_whole(std::fs::File::open(PROC_LOCKS)?)
}

/// All of `file`, in one `read` while it fits in the buffer, and one that finds the end.
fn read_whole(mut file: impl Read) -> io::Result<String> {
    let mut buf = vec![0u8; READ_BYTES];
    let mut len = 0;
    loop {
        if len == buf.len() {
            buf.resize(buf.len() * 2, 0);
        }
        match file.read(&mut buf[len..]) {
            Ok(0) => break,
            Ok(n) => len += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    buf.truncate(len);
    String::from_utf8(buf).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

/// Every `(major, minor, inode)` with a granted `FLOCK` in `/proc/locks` text, the one
/// reading of its grammar. Lines look like `1: FLOCK  ADVISORY  WRITE 12463
/// fe:00:5316619 0 EOF` (major and minor in hex, the inode in decimal); `->` lines are
/// blocked waiters, not holders.
pub(crate) fn flocks(locks: &str) -> impl Iterator<Item = (u32, u32, u64)> + '_ {
    locks.lines().filter_map(|line| {
        let mut tokens = line.split_whitespace();
        let (Some(_ordinal), Some(kind)) = (tokens.next(), tokens.next()) else {
            return None;
        };
        if kind != "FLOCK" {
            return None;
        }
        tokens.find_map(|t| {
            let mut parts = t.split(':');
            let (Some(ma), Some(mi), Some(i), None) =
                (parts.next(), parts.next(), parts.next(), parts.next())
            else {
                return None;
            };
            Some((
                u32::from_str_radix(ma, 16).ok()?,
                u32::from_str_radix(mi, 16).ok()?,
                i.parse::<u64>().ok()?,
            ))
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::MetadataExt;

    fn held_on(locks: &str, major: u32, minor: u32, ino: u64) -> bool {
        flocks(locks).any(|h| h == (major, minor, ino))
    }

    #[test]
    fn parses_proc_locks() {
        let locks = "1: FLOCK  ADVISORY  WRITE 12463 fe:00:5316619 0 EOF\n\
                     2: POSIX  ADVISORY  WRITE 12456 fe:00:10019029 0 EOF\n\
                     3: -> FLOCK  ADVISORY  WRITE 99 103:02:77 0 EOF\n\
                     4: FLOCK  ADVISORY  WRITE 12435 103:0a:5308480 0 EOF\n";
        assert!(held_on(locks, 0xfe, 0, 5_316_619));
        assert!(!held_on(locks, 0xfe, 0, 531_661), "inode must match whole");
        assert!(!held_on(locks, 0xfe, 1, 5_316_619), "minor must match");
        assert!(
            !held_on(locks, 0xfe, 0, 10_019_029),
            "POSIX is not the lock"
        );
        assert!(!held_on(locks, 0x103, 2, 77), "a waiter is not a holder");
        assert!(held_on(locks, 0x103, 10, 5_308_480));
        assert!(!held_on("", 0, 0, 0));
    }

    /// Counts the reads made of it; each gives what fits, as a `seq_file` does.
    struct Counted<'a>(&'a [u8], usize);

    impl Read for Counted<'_> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            self.1 += 1;
            let n = buf.len().min(self.0.len());
            buf[..n].copy_from_slice(&self.0[..n]);
            self.0 = &self.0[n..];
            Ok(n)
        }
    }

    #[test]
    fn a_table_is_read_in_one_read_and_one_that_finds_its_end() {
        // Each read(2) of /proc/locks is a round of the kernel's file-lock semaphore
        // (module docs); a growing buffer (std's read_to_string) made about nine of a
        // table this size.
        let line = "1: FLOCK  ADVISORY  WRITE 12463 fe:00:5316619 0 EOF\n";
        let table = line.repeat(80);
        let mut src = Counted(table.as_bytes(), 0);
        assert_eq!(read_whole(&mut src).unwrap(), table);
        assert_eq!(src.1, 2);
        let big = line.repeat(READ_BYTES / line.len() + 10);
        let mut src = Counted(big.as_bytes(), 0);
        assert_eq!(read_whole(&mut src).unwrap(), big, "a bigger table, whole");
    }

    #[test]
    fn a_reading_is_never_older_than_the_question() {
        // Threads ask at once, each while holding a lock of its own and after dropping
        // it: however the readings are shared, each answer is the state it asked in.
        let t = tempfile::tempdir().unwrap();
        std::thread::scope(|s| {
            for n in 0..4 {
                let dir = t.path().join(n.to_string());
                std::fs::create_dir(&dir).unwrap();
                s.spawn(move || {
                    let st = std::fs::metadata(&dir).unwrap();
                    for _ in 0..50 {
                        let f = std::fs::File::open(&dir).unwrap();
                        // SAFETY: flock on a descriptor this owns.
                        assert_eq!(unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) }, 0);
                        assert!(is_held(&held().unwrap(), st.dev(), st.ino()));
                        drop(f);
                        assert!(!is_held(&held().unwrap(), st.dev(), st.ino()));
                    }
                });
            }
        });
    }

    #[test]
    fn a_table_bigger_than_the_first_buffer_is_read_whole() {
        // Enough locks that /proc/locks outgrows READ_BYTES (each line is over 40 bytes).
        let t = tempfile::tempdir().unwrap();
        let mut kept = Vec::new();
        for i in 0..(READ_BYTES / 40 + 100) {
            let p = t.path().join(i.to_string());
            let f = std::fs::File::create(&p).unwrap();
            // SAFETY: flock on a descriptor this owns.
            assert_eq!(unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) }, 0);
            kept.push((f, std::fs::metadata(&p).unwrap()));
        }
        let held = held().unwrap();
        let (_, last) = kept.last().unwrap();
        assert!(is_held(&held, last.dev(), last.ino()));
        assert!(kept.iter().all(|(_, m)| is_held(&held, m.dev(), m.ino())));
    }
}
