//! litanyfs: a litany agent-harness workspace, mounted as one live directory tree.
//!
//! The crate reads in one direction. A FUSE request reaches [`fs`], the only module that
//! knows about FUSE; it asks [`tree`] what a path is and what it holds; the tree asks
//! [`workspace`] (paths, ids, refs, marks), [`paging`] (continuation addresses) and
//! [`deposit`] (the inbox write path). Everything but [`fs`] and [`mount`] is plain Rust,
//! unit-tested without a mount.

pub mod demo;
pub mod deposit;
pub mod fixture;
pub mod fs;
pub mod mount;
pub mod paging;
pub mod records;
pub mod tree;
pub mod watch;
pub mod workspace;
