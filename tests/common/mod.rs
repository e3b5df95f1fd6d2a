//! Shared support for the integration tests. Include it with `mod common;`.
//!
//! Every test crate uses a different part of this module, so unused items are
//! expected rather than dead.
#![allow(dead_code)]

pub mod drain;
pub mod harness;
pub mod mount;
pub mod tmux;
pub mod workspace;
