//! litanyfs: a litany agent-harness workspace, mounted as one live directory tree.
//!
//! The crate reads in one direction. A FUSE request reaches [`fs`], the only module that
//! knows about FUSE; it asks [`tree`] what a path is and what it holds; the tree asks
//! [`workspace`] (paths, ids, refs, marks), [`paging`] (continuation addresses),
//! [`deposit`] (the inbox write path), [`views`] (`status` and the events) and
//! [`control`] (acting on agents: `ctl` and `new/`).
//! Everything but [`fs`], [`mount`], [`sentinel`] and the process helpers those two share
//! ([`process`]) is plain Rust, unit-tested without a mount: the tree decides what every
//! entry is, how long the kernel may keep it and how an open is served; the adapter only
//! numbers inodes and handles and turns those answers into replies.
//!
//! # Threads
//!
//! Every thread the daemon runs, what wakes it, and what it may block on. None of them
//! holds an fd on an `inbox/<id>` directory or takes an executor lock.
//!
//! | thread | started in | woken by | may block on |
//! |---|---|---|---|
//! | FUSE request threads (`--threads`) | [`mount`] (fuser's session) | a request on `/dev/fuse` | the backing filesystem, git, a deposit's publish; at a draft's close, `/proc` files that take no lock the closer may hold ([`witness`]) |
//! | `invalidate` | [`fs::Invalidator`] | inotify events on watched backing dirs and refs ([`watch`]) | the kernel's invalidation calls |
//! | `signals` | [`mount`] | SIGINT, SIGTERM, SIGHUP (`sigwait`) | unmounting |
//! | `ready` | [`mount`] | the mount answering, once, then exits | `stat` of the mount point |
//! | `litanyfs-guard` | [`deposit::guard`] | inotify on inboxes it published into; a kick per publish; a 500 ms tick | re-depositing a message a `litany message` replaced |
//! | `litanyfs-spares` | [`deposit::spare`] | a spare unnamed file taken | creating an `O_TMPFILE` in `inbox/` |
//! | `litanyfs-wake` | [`deposit::wake`] | a deposit that asks for a wake | reading `/proc/locks` ([`locks`], shared with every reader), spawning `litany advance` |
//! | `litanyfs-events` | [`views`] | a poke from `invalidate` after each batch of changes; a tick of 250 ms, 750 ms once idle ([`views::idle_wait`]) | listing steps and inboxes, reading `/proc/locks` and the refs, appending to the events log |
//! | `litanyfs-history` | [`views`] | started once by `litanyfs-events` (at nice 19), then exits; on a home mount, by the pool when a workspace needs its history, gone when none does | reading the records and walking the branches |
//! | `litanyfs-home` | [`home`] (home mounts) | inotify on the home's shelves; a sweep every 2 s (4 s while the mount serves requests: [`busy`]) | listing the shelves |
//! | `litanyfs-follow` | [`views::pool`] (home mounts: instead of one `litanyfs-events` per workspace) | a poke of any workspace's views; each workspace's tick (10 s once quiet and unopened, later while the mount serves requests: [`busy`]) | as `litanyfs-events`, one workspace at a time |
//! | `litanyfs-top` | [`views::pool`] (home mounts) | inotify on the top directories of every workspace | poking the followers |
//! | `invalidate-gone` | [`fs`] (home mounts) | a workspace that has gone, once, then exits | the kernel's invalidation calls |
//! | `litanyfs-reap` | [`deposit::wake`] | a launched driver exiting (one per launch) | `waitpid` of that driver |
//! | `litanyfs-act` (up to 8) | [`control::pool`], started as acts come | a `ctl` command or a start from `new/` handed over by a request thread | running a `litany` verb to its end (at most 30 s), `litany prompt` until its agent's ref exists, a deposit; then the reply |
//! | `litanyfs-act-out` | [`control::run`], [`control::start`] (two per verb run) | output of that `litany` child | reading its pipe to the end |
//! | `upkeep` | [`mount`] | a tick of 10 s | closing git handles whose packs a repack replaced ([`workspace::handles`]); giving the heap's free pages back (`malloc_trim`); with `RUST_LOG=litanyfs::census=debug`, logging the census |
//! | `litanyfs-gather` (up to 4) | [`home`] (scoped, inside a request thread's root `status` or `attention`) | started per call, exits before the request replies | reading each workspace's status |
//! | `litanyfs-render` | [`records`] (scoped, inside a request thread's render of a long `response.json`) | started per part, exits before the request replies | reading that part of the `response.json` |
//!
//! On a home mount, each workspace opened (something looked inside it) adds the threads a
//! single mount runs for its tree: `invalidate`, and the deposit threads when it takes
//! deposits; a workspace nobody opened adds none, and an opened one closes again when idle
//! (at most [`home::MAX_OPEN_TREES`] stay open once idle), ending its threads.
//!
//! With `--auto-unmount` the daemon also starts one process, its [`sentinel`], which
//! outlives it to unmount a mount it left dead.

// The public face is what the binary, tests/, examples/ and the fuzz targets use
// (doc/ARCHITECTURE.md); the rest is pub(crate). Inside a private or pub(crate) module a
// `pub` item is refused, so the face cannot widen there unnoticed.
#![deny(unreachable_pub)]
// A panic on a request path kills the mount: outside tests, a failure is an error the
// caller answers (an errno, a log line), never an `unwrap` or an `expect`.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]
// These docs are for the people who work on the daemon, read with
// `cargo doc --document-private-items`: links to private items are how they say where
// a rule lives.
#![allow(rustdoc::private_intra_doc_links)]

#[doc(hidden)]
pub(crate) mod busy;
pub(crate) mod control;
#[doc(hidden)]
pub mod demo;
pub mod deposit;
#[doc(hidden)]
pub mod fixture;
pub(crate) mod fs;
pub mod guide;
pub mod helper;
pub mod home;
pub(crate) mod inotify;
pub mod kernel;
mod locks;
mod lru;
pub mod manual;
pub mod mount;
pub mod paging;
mod process;
pub mod records;
pub mod sentinel;
#[doc(hidden)]
pub mod testing;
pub mod tree;
pub mod views;
pub mod watch;
pub(crate) mod witness;
pub mod workspace;

/// The hash map of the request path (inodes, watches): foldhash, several times faster
/// than the standard SipHash on the short keys a walk inserts by the thousand, and still
/// seeded per map, so names chosen by whoever writes the workspace cannot be made to
/// collide in advance.
pub(crate) type FastMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;

/// A request handler, or a reading of `status`, that takes this long is logged with its
/// parts: a reader that waited can tell the daemon's time from its own wait for a CPU or
/// for a request thread.
pub const SLOW_REQUEST: std::time::Duration = std::time::Duration::from_millis(250);

/// The set of the same hash (see [`FastMap`]).
pub(crate) type FastSet<K> = std::collections::HashSet<K, foldhash::fast::RandomState>;
