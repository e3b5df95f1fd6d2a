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
//! - a reading is as few `read`s as the kernel allows: it hands out at most a page of
//!   lines per `read` (its `seq_file` buffer), so a table that fits a page is one `read`
//!   and one that finds its end (a growing buffer took about nine);
//! - callers that overlap share a reading: [`held`] answers with a reading *begun after it
//!   was called*, so nothing it says is older than the question (the waker's race-safety
//!   rests on that, `deposit::wake::executor_busy`), while every caller that arrives during
//!   one reading is answered by the next, one reading for all of them.
//!
//! A table longer than a page is not one snapshot: the kernel resumes each `read` at a
//! line *number*, so a lock dropped between two `read`s moves the rest up by one and the
//! line at the seam is never shown, though its lock was held throughout (a test that held
//! 1,738 locks while others came and went lost some). Such a table is read again until
//! two readings agree, at most [`READINGS_AT_MOST`] in all, every other one with a short
//! first `read` ([`SEAM_SHIFT`]) so that its seams fall between the last one's, and the
//! answer is every lock any of them saw: a line hidden at one reading's seam is inside
//! a page of the next. Each lock seen was held at some moment after the question, which
//! is all the waker's argument needs; one missed by every reading errs towards "free",
//! the safe side there.

use std::collections::BTreeSet;
use std::io::{self, Read};
use std::sync::Arc;

use parking_lot::{Condvar, Mutex};

/// Where the kernel lists every file lock.
pub(crate) const PROC_LOCKS: &str = "/proc/locks";
/// The buffer a reading starts with; it doubles should the table not fit.
const READ_BYTES: usize = 64 << 10;
/// Readings of a table longer than a page, until two agree (module docs).
const READINGS_AT_MOST: usize = 4;
/// The first `read` of every other reading: well under a page (4 KiB here, 64 KiB on
/// some arm64 kernels) and well over a line, so its seams fall between the other's.
const SEAM_SHIFT: usize = 2 << 10;

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
            let answer = parking_lot::MutexGuard::unlocked(&mut r, || settled(read))
                .map(Arc::new)
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

/// The held locks from `read` (given the size of its first `read`, a whole table and
/// how many `read`s gave lines): one reading when one `read` held it all, else readings
/// until two agree, at most [`READINGS_AT_MOST`], and every lock any of them saw (module
/// docs).
fn settled(mut read: impl FnMut(usize) -> io::Result<(String, usize)>) -> io::Result<Held> {
    let (text, reads) = read(READ_BYTES)?;
    let mut last: Held = flocks(&text).collect();
    if reads <= 1 {
        return Ok(last);
    }
    let mut seen = last.clone();
    for n in 1..READINGS_AT_MOST {
        let (text, _) = read(if n % 2 == 1 { SEAM_SHIFT } else { READ_BYTES })?;
        let now: Held = flocks(&text).collect();
        let agree = now == last;
        seen.extend(now.iter().copied());
        if agree {
            break;
        }
        last = now;
    }
    Ok(seen)
}

/// `/proc/locks` whole, the first `read` asking for `first` bytes, and how many `read`s
/// gave lines (module docs).
fn read(first: usize) -> io::Result<(String, usize)> {
    read_whole(std::fs::File::open(PROC_LOCKS)?, first)
}

/// All of `file`, the first `read` asking for at most `first` bytes, and how many `read`s
/// gave bytes: one while the kernel can hand it out in one, and one more that finds the
/// end.
fn read_whole(mut file: impl Read, first: usize) -> io::Result<(String, usize)> {
    let mut buf = vec![0u8; READ_BYTES];
    let mut len = 0;
    let mut reads = 0;
    loop {
        if len == buf.len() {
            buf.resize(buf.len() * 2, 0);
        }
        // `len` is 0 until a `read` gives bytes: only the first asks for `first`.
        let end = if reads == 0 {
            first.min(buf.len())
        } else {
            buf.len()
        };
        match file.read(&mut buf[len..end]) {
            Ok(0) => break,
            Ok(n) => {
                len += n;
                reads += 1;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    buf.truncate(len);
    let text = String::from_utf8(buf).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
    Ok((text, reads))
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

    /// The kernel's `seq_file`, as `/proc/locks` reads: each `read` hands out the whole
    /// lines that fit a page from the line number where the last one stopped, then runs
    /// `between` (a lock coming or going); counts the reads made of it.
    struct SeqFile<'a> {
        table: &'a mut Vec<String>,
        next: usize,
        reads: usize,
        between: &'a mut dyn FnMut(&mut Vec<String>),
    }

    const PAGE: usize = 4096;

    impl Read for SeqFile<'_> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            self.reads += 1;
            let mut n = 0;
            while let Some(line) = self.table.get(self.next) {
                if n + line.len() > buf.len().min(PAGE) {
                    break;
                }
                buf[n..n + line.len()].copy_from_slice(line.as_bytes());
                n += line.len();
                self.next += 1;
            }
            (self.between)(self.table);
            Ok(n)
        }
    }

    fn table(locks: u64) -> Vec<String> {
        (0..locks)
            .map(|i| {
                format!(
                    "{}: FLOCK  ADVISORY  WRITE 12463 fe:00:{} 0 EOF\n",
                    i + 1,
                    5_000_000 + i
                )
            })
            .collect()
    }

    fn reading(
        table: &mut Vec<String>,
        first: usize,
        between: &mut dyn FnMut(&mut Vec<String>),
    ) -> (String, usize, usize) {
        let mut file = SeqFile {
            table,
            next: 0,
            reads: 0,
            between,
        };
        let (text, gave) = read_whole(&mut file, first).unwrap();
        (text, gave, file.reads)
    }

    /// What [`settled`] answers of `t` when `between` runs after every `read`, and how
    /// many readings it made.
    fn settle(t: &mut Vec<String>, between: &mut dyn FnMut(&mut Vec<String>)) -> (Held, usize) {
        let mut readings = 0;
        let answer = settled(|first| {
            readings += 1;
            let (text, gave, _) = reading(t, first, between);
            Ok((text, gave))
        })
        .unwrap();
        (answer, readings)
    }

    #[test]
    fn a_table_is_read_in_one_read_and_one_that_finds_its_end() {
        // Each read(2) of /proc/locks is a round of the kernel's file-lock semaphore
        // (module docs); a growing buffer (std's read_to_string) made about nine of a
        // table this size.
        let mut small = table(60);
        let (text, gave, reads) = reading(&mut small, READ_BYTES, &mut |_| {});
        assert_eq!(text, small.concat());
        assert_eq!((gave, reads), (1, 2));
        let mut big = table(1000);
        let (text, gave, _) = reading(&mut big, READ_BYTES, &mut |_| {});
        assert_eq!(text, big.concat(), "a table of many pages, whole");
        assert!(gave > 1);
        let (text, _, _) = reading(&mut big, SEAM_SHIFT, &mut |_| {});
        assert_eq!(text, big.concat(), "whole, after a short first read");
    }

    #[test]
    fn a_lock_dropped_between_reads_hides_none_held_throughout() {
        let held = |t: &[String]| -> Held { flocks(&t.concat()).collect() };
        // The first lock goes after the first read: that reading skips the line at the
        // seam, as the kernel does.
        let once = || {
            let mut first = true;
            move |t: &mut Vec<String>| {
                if std::mem::take(&mut first) {
                    t.remove(0);
                }
            }
        };
        let mut t = table(200);
        let (text, _, _) = reading(&mut t, READ_BYTES, &mut once());
        let one: Held = flocks(&text).collect();
        assert!(!held(&t).is_subset(&one), "the model skips the seam's line");

        let mut t = table(200);
        let (answer, readings) = settle(&mut t, &mut once());
        assert!(held(&t).is_subset(&answer));
        assert_eq!(readings, 3, "read until two agree");

        // A lock at the head taken and dropped at every read, as a busy flock loop does
        // (the kernel lists a new lock first): no reading agrees with the last, and none
        // held throughout is missed by them all.
        let mut t = table(200);
        let churn = t.remove(0);
        let throughout = held(&t);
        let (answer, readings) = settle(&mut t, &mut |t: &mut Vec<String>| {
            if t.first() == Some(&churn) {
                t.remove(0);
            } else {
                t.insert(0, churn.clone());
            }
        });
        assert_eq!(readings, READINGS_AT_MOST);
        assert!(
            throughout.is_subset(&answer),
            "{} missed",
            throughout.difference(&answer).count()
        );

        // One page is one snapshot, read once.
        let (_, readings) = settle(&mut table(10), &mut |_| {});
        assert_eq!(readings, 1);
    }

    /// The tests here that read the real table, one at a time (one makes it long).
    static REAL_TABLE: Mutex<()> = Mutex::new(());

    #[test]
    fn a_reading_is_never_older_than_the_question() {
        let _one = REAL_TABLE.lock();
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
    fn a_real_table_of_many_pages_misses_no_lock() {
        // Enough locks that /proc/locks takes several reads (each line is over 40 bytes).
        let _one = REAL_TABLE.lock();
        let t = tempfile::tempdir().unwrap();
        let mut kept = Vec::new();
        for i in 0..(4 * PAGE / 40) {
            let p = t.path().join(i.to_string());
            let f = std::fs::File::create(&p).unwrap();
            // SAFETY: flock on a descriptor this owns.
            assert_eq!(unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) }, 0);
            kept.push((f, std::fs::metadata(&p).unwrap()));
        }
        let (_, gave) = read(READ_BYTES).unwrap();
        assert!(gave > 1, "the kernel hands out a page a read");
        let held = held().unwrap();
        let missed = kept
            .iter()
            .filter(|(_, m)| !is_held(&held, m.dev(), m.ino()))
            .count();
        assert_eq!(missed, 0);
    }
}
