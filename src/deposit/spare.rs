//! Unnamed files made ahead of deposits.
//!
//! Making the file is most of a deposit's own cost: the filesystem allocates an inode
//! then, and ext4's search for one near a directory with many recent deletions took
//! 150 µs per file on this project's machine, against 2 µs to write a message and 6 µs
//! to link it. So a thread of its own keeps a few `O_TMPFILE` files ready, and a deposit
//! writes into one and links it into the recipient's inbox.
//!
//! Guarantees:
//! - A spare is unnamed until a deposit links it, so nothing ever sees it; one never used
//!   is freed by the kernel when the daemon exits (an unnamed inode dies with its last
//!   descriptor). Nothing is left on disk, whatever happens.
//! - Spares are made in `inbox/`, never in an `inbox/<id>/`: their descriptors must not
//!   look like descriptors on an agent's inbox (`litany stop` takes whoever holds one for
//!   the executor, CONTRACT §3.7). `inbox/` is reached with `openat2(RESOLVE_BENEATH |
//!   RESOLVE_NO_SYMLINKS)` from the workspace root and held only while making them.
//! - A spare serves only a deposit on its own filesystem; the caller checks the device
//!   and falls back to making its own file (an inbox mounted from elsewhere).
//! - Bounded: at most [`SPARES`] files; the thread refills once fewer than half are left,
//!   so a run of deposits wakes it once per few messages, and it sleeps when none are
//!   taken.

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread::JoinHandle;

use parking_lot::{Condvar, Mutex};

use super::publish::unnamed_file;
use crate::workspace::INBOX_DIR;
use crate::workspace::backing::{cstring, fstat, open_beneath, open_root};

/// How many spare files are kept ready.
pub(crate) const SPARES: usize = 8;

/// A spare file and the device it lives on.
pub(crate) struct Spare {
    pub(crate) file: File,
    pub(crate) dev: u64,
}

/// Keeps [`SPARES`] unnamed files ready in `<root>/inbox/` (module docs).
pub(crate) struct Spares {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

struct Shared {
    root: PathBuf,
    state: Mutex<State>,
    wanted: Condvar,
}

#[derive(Default)]
struct State {
    ready: Vec<Spare>,
    stop: bool,
}

impl Spares {
    /// Starts the thread that makes spares for the workspace at `root`.
    pub(crate) fn start(root: &Path) -> io::Result<Self> {
        let shared = Arc::new(Shared {
            root: root.to_path_buf(),
            state: Mutex::new(State::default()),
            wanted: Condvar::new(),
        });
        let worker = shared.clone();
        let thread = std::thread::Builder::new()
            .name("litanyfs-spares".into())
            .spawn(move || worker.run())?;
        Ok(Self {
            shared,
            thread: Some(thread),
        })
    }

    /// A spare, if one is ready.
    pub(crate) fn take(&self) -> Option<Spare> {
        let mut st = self.shared.state.lock();
        let spare = st.ready.pop();
        if st.ready.len() < SPARES / 2 {
            self.shared.wanted.notify_one();
        }
        spare
    }

    /// How many are ready (for tests).
    #[cfg(test)]
    pub(crate) fn ready(&self) -> usize {
        self.shared.state.lock().ready.len()
    }
}

impl Shared {
    fn run(&self) {
        loop {
            {
                let mut st = self.state.lock();
                while !st.stop && st.ready.len() >= SPARES / 2 {
                    self.wanted.wait(&mut st);
                }
                if st.stop {
                    return;
                }
            }
            let made = self.make(SPARES - self.state.lock().ready.len());
            let short = match made {
                Ok(files) => {
                    let mut st = self.state.lock();
                    st.ready.extend(files);
                    st.ready.len() < SPARES / 2
                }
                Err(e) => {
                    log::debug!("no spare files in {INBOX_DIR}/ ({e}); deposits make their own");
                    true
                }
            };
            if short {
                // Nothing to make them in (no `inbox/` yet, no O_TMPFILE): deposits make
                // their own files; look again later rather than spin.
                let mut st = self.state.lock();
                if !st.stop {
                    self.wanted
                        .wait_for(&mut st, std::time::Duration::from_secs(5));
                }
            }
        }
    }

    /// Makes `n` spares in `inbox/`.
    fn make(&self, n: usize) -> io::Result<Vec<Spare>> {
        let root = open_root(&self.root)?;
        let c_inbox = cstring(INBOX_DIR.as_bytes())?;
        let inbox = open_beneath(&root, &c_inbox, libc::O_PATH | libc::O_DIRECTORY)?;
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            let file = unnamed_file(&inbox)?;
            let dev = fstat(&file)?.dev;
            out.push(Spare { file, dev });
        }
        Ok(out)
    }
}

impl Drop for Spares {
    fn drop(&mut self) {
        self.shared.state.lock().stop = true;
        self.shared.wanted.notify_one();
        super::join(self.thread.take(), "spare-file");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    fn wait_ready(s: &Spares, n: usize) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while s.ready() < n {
            assert!(Instant::now() < deadline, "only {} ready", s.ready());
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    #[test]
    fn spares_are_unnamed_and_refilled() {
        let t = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(t.path().join("inbox/a1")).unwrap();
        let s = Spares::start(t.path()).unwrap();
        wait_ready(&s, SPARES);
        let taken: Vec<Spare> = (0..SPARES).map_while(|_| s.take()).collect();
        assert_eq!(taken.len(), SPARES);
        wait_ready(&s, SPARES / 2);
        // Nothing is named: inbox/ holds only the agent's directory.
        let names: Vec<_> = std::fs::read_dir(t.path().join("inbox"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["a1"]);
        for sp in &taken {
            let st = fstat(&sp.file).unwrap();
            assert_eq!(st.nlink, 0, "a spare has no name");
            assert_eq!(st.dev, sp.dev);
        }
    }

    #[test]
    fn without_an_inbox_there_are_none_and_that_is_fine() {
        let t = tempfile::tempdir().unwrap();
        let s = Spares::start(t.path()).unwrap();
        std::thread::sleep(Duration::from_millis(50));
        assert!(s.take().is_none());
        drop(s); // stops promptly although the thread is waiting to look again
    }
}
