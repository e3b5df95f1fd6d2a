//! The guard's books: a record per deposit of ours and a watch per inbox, and how each
//! inotify event moves them (the parent module's docs, points 2–4), how an overflow is
//! settled from the files alone, and how the books stay within their bounds.

use std::collections::{HashMap, VecDeque};
use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

use git2::Repository;

use super::{FULL_WARNING_INTERVAL, Shared};
use crate::deposit::publish::Published;
use crate::deposit::validate::agent_exists;
use crate::workspace::REPO_DIR;
use crate::workspace::backing::fstat;
use crate::workspace::inbox::InboxNames;

#[derive(Default)]
pub(super) struct State {
    /// Watch descriptor → the inbox it watches.
    pub(super) watches: HashMap<i32, Watch>,
    /// (watch, name) → the deposit of ours that holds (or is about to hold) the name.
    pub(super) records: HashMap<(i32, String), Record>,
    /// Replaced deposits waiting to be deposited again.
    pub(super) jobs: VecDeque<Job>,
    bytes: usize,
    next_serial: u64,
    /// Opened on first need, for "does the recipient still exist".
    repo: Option<Repository>,
    /// The buffer events are read into, kept between drains.
    pub(super) events: Vec<u8>,
    /// Deposits dropped from protection since the last warning about it, and when that
    /// warning was.
    unprotected: u64,
    warned_full: Option<Instant>,
}

pub(super) struct Watch {
    pub(super) recipient: String,
    pub(super) path: PathBuf,
    /// The inbox's names as of the last drain: listed once after the watch was added,
    /// then kept by the events (`None` until first needed, and after an overflow). It
    /// spares each deposit a listing of the inbox to find its number; it is exactly as
    /// current as a listing taken at the drain point (module docs, point 2).
    pub(super) names: Option<InboxNames>,
}

/// Where a record is in its name's event stream (module docs, points 2–3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Linked, but our own `IN_CREATE` has not been read yet.
    Awaiting,
    /// Our file holds the name as far as the events read so far tell.
    Present,
}

pub(super) struct Record {
    recipient: String,
    sender: String,
    body: Vec<u8>,
    /// Our published file, held open so that its inode number stays ours (point 4).
    file: File,
    dev: u64,
    ino: u64,
    phase: Phase,
    since: Instant,
    serial: u64,
}

pub(super) struct Job {
    pub(super) recipient: String,
    pub(super) sender: String,
    pub(super) body: Vec<u8>,
    pub(super) replaced: PathBuf,
}

impl Shared {
    #[allow(clippy::too_many_arguments)]
    pub(super) fn remember(
        &self,
        st: &mut State,
        wd: i32,
        recipient: &str,
        sender: &str,
        body: Vec<u8>,
        file: File,
        p: &Published,
    ) {
        st.next_serial += 1;
        st.bytes += body.len();
        let record = Record {
            recipient: recipient.to_string(),
            sender: sender.to_string(),
            body,
            file,
            dev: p.dev,
            ino: p.ino,
            phase: Phase::Awaiting,
            since: Instant::now(),
            serial: st.next_serial,
        };
        if let Some(old) = st.records.insert((wd, p.name.clone()), record) {
            // Cannot happen after a drain (module docs), but keep the books straight.
            st.bytes -= old.body.len();
            log::warn!("{}: a stale guard record was replaced", p.path.display());
        }
        while st.records.len() > self.opts.max_records
            || (st.bytes > self.opts.max_bytes && st.records.len() > 1)
        {
            let Some(oldest) = st
                .records
                .iter()
                .min_by_key(|(_, r)| r.serial)
                .map(|(k, _)| k.clone())
            else {
                break;
            };
            log::debug!("deposit guard is full; {} is no longer protected", oldest.1);
            forget(st, &oldest);
            st.unprotected += 1;
        }
        // A fast sender fills the guard with every deposit: say so once in a while, not
        // once per message.
        if st.unprotected > 0
            && st
                .warned_full
                .is_none_or(|at| at.elapsed() >= FULL_WARNING_INTERVAL)
        {
            log::warn!(
                "deposit guard is full ({} deposits tracked): the {} oldest are no longer \
                 protected against a concurrent `litany message` (deposited long enough \
                 ago that such a race is unlikely)",
                self.opts.max_records,
                st.unprotected
            );
            st.unprotected = 0;
            st.warned_full = Some(Instant::now());
        }
    }

    /// One event (module docs, points 2–4).
    pub(super) fn apply(&self, st: &mut State, wd: i32, mask: u32, name: &[u8]) {
        if mask & libc::IN_Q_OVERFLOW != 0 {
            self.overflowed(st);
            return;
        }
        if let Some(w) = st.watches.get_mut(&wd) {
            note_name(w, mask, name);
        }
        if mask & (libc::IN_IGNORED | libc::IN_DELETE_SELF | libc::IN_UNMOUNT) != 0 {
            // The inbox itself is gone (`litany delete`) or unwatched: nothing to protect.
            let keys: Vec<_> = st.records.keys().filter(|k| k.0 == wd).cloned().collect();
            for k in keys {
                forget(st, &k);
            }
            if mask & libc::IN_IGNORED != 0 {
                st.watches.remove(&wd);
            }
            return;
        }
        let Ok(name) = std::str::from_utf8(name) else {
            return;
        };
        let key = (wd, name.to_string());
        let Some(rec) = st.records.get_mut(&key) else {
            return;
        };
        if rec.phase == Phase::Awaiting {
            if mask & libc::IN_CREATE != 0 {
                rec.phase = Phase::Present;
            }
            return;
        }
        if mask & (libc::IN_MOVED_TO | libc::IN_MOVED_FROM | libc::IN_DELETE) == 0 {
            return;
        }
        let Some(path) = st.watches.get(&wd).map(|w| w.path.join(name)) else {
            return;
        };
        if holds(&path, rec) {
            return; // point 4: ours is still there; the event was about another file
        }
        if mask & libc::IN_MOVED_TO == 0 {
            log::debug!("{}: delivered or deleted", path.display());
            forget(st, &key);
            return;
        }
        if still_linked(rec) {
            log::debug!(
                "{}: moved elsewhere before the rename onto it",
                path.display()
            );
            forget(st, &key);
            return;
        }
        self.replaced(st, &key, path);
    }

    /// Our file was replaced under `key`: queue its re-deposit, unless the recipient is
    /// gone.
    fn replaced(&self, st: &mut State, key: &(i32, String), path: PathBuf) {
        let Some(rec) = forget(st, key) else {
            return;
        };
        if !self.recipient_exists(st, &rec.recipient) {
            log::info!(
                "{}: replaced, but agent {} is gone; not re-depositing",
                path.display(),
                rec.recipient
            );
            return;
        }
        st.jobs.push_back(Job {
            recipient: rec.recipient,
            sender: rec.sender,
            body: rec.body,
            replaced: path,
        });
    }

    fn recipient_exists(&self, st: &mut State, recipient: &str) -> bool {
        if st.repo.is_none() {
            st.repo = Repository::open_bare(self.root.join(REPO_DIR)).ok();
        }
        let Some(repo) = &st.repo else {
            log::warn!("cannot open {REPO_DIR}; assuming {recipient} exists");
            return true;
        };
        agent_exists(repo, recipient).unwrap_or_else(|e| {
            log::warn!("{e}; assuming {recipient} exists");
            true
        })
    }

    /// Events were lost: settle every record from the files alone (module docs).
    fn overflowed(&self, st: &mut State) {
        log::warn!("deposit guard: inotify queue overflowed; re-checking every deposit");
        for w in st.watches.values_mut() {
            w.names = None;
        }
        let keys: Vec<_> = st.records.keys().cloned().collect();
        for key in keys {
            let Some(path) = st.watches.get(&key.0).map(|w| w.path.join(&key.1)) else {
                forget(st, &key);
                continue;
            };
            let Some(rec) = st.records.get_mut(&key) else {
                continue;
            };
            if holds(&path, rec) {
                rec.phase = Phase::Present;
            } else if still_linked(rec) || std::fs::symlink_metadata(&path).is_err() {
                forget(st, &key);
            } else {
                self.replaced(st, &key, path);
            }
        }
    }

    /// Drops records older than the window, and watches that protect nothing.
    pub(super) fn expire(&self, st: &mut State) {
        let window = self.opts.window;
        let old: Vec<_> = st
            .records
            .iter()
            .filter(|(_, r)| r.since.elapsed() >= window)
            .map(|(k, _)| k.clone())
            .collect();
        for k in old {
            forget(st, &k);
        }
        let idle: Vec<i32> = st
            .watches
            .keys()
            .filter(|wd| !st.records.keys().any(|k| k.0 == **wd))
            .copied()
            .collect();
        for wd in idle {
            self.inotify.remove(wd);
            if let Some(w) = st.watches.remove(&wd) {
                log::trace!("stopped watching {} ({})", w.path.display(), w.recipient);
            }
        }
    }
}

/// Keeps `w`'s view of its inbox's names up to date with one event.
fn note_name(w: &mut Watch, mask: u32, name: &[u8]) {
    let Some(names) = &mut w.names else {
        return;
    };
    if mask & (libc::IN_IGNORED | libc::IN_DELETE_SELF | libc::IN_UNMOUNT) != 0 {
        w.names = None;
        return;
    }
    // Names that are not UTF-8 are not in the listing either (litany skips them).
    let Ok(name) = std::str::from_utf8(name) else {
        return;
    };
    if mask & (libc::IN_CREATE | libc::IN_MOVED_TO) != 0 {
        names.insert(name);
    } else if mask & (libc::IN_DELETE | libc::IN_MOVED_FROM) != 0 {
        names.remove(name);
    }
}

/// Removes a record and its bytes from the books.
fn forget(st: &mut State, key: &(i32, String)) -> Option<Record> {
    let rec = st.records.remove(key)?;
    st.bytes -= rec.body.len();
    Some(rec)
}

/// Whether the file at `path` is the record's (exact: the record holds the inode).
fn holds(path: &Path, rec: &Record) -> bool {
    std::fs::symlink_metadata(path)
        .map(|m| (m.dev(), m.ino()) == (rec.dev, rec.ino))
        .unwrap_or(false)
}

/// Whether the record's file still has a name anywhere (it was moved, not destroyed).
fn still_linked(rec: &Record) -> bool {
    fstat(&rec.file).map(|st| st.nlink > 0).unwrap_or(false)
}
