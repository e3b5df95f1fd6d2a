//! The inbox write path: litany's atomic, sender-namespaced deposit (CONTRACT §3).
//!
//! [`render`] makes the bytes `litany message` would write; [`validate`] refuses what
//! litany would choke on or what could forge provenance; [`publish`] gives them a name
//! atomically and create-only; [`wake`] launches a driver when no executor holds the
//! lock; errors carry their errno ([`DepositError::errno`]). Nothing here knows about FUSE.

pub mod error;
pub mod guard;
pub mod publish;
pub mod render;
pub mod validate;
pub mod wake;

pub use error::DepositError;
pub use guard::{Guard, GuardOptions, OnRedeposit};
pub use publish::{MAX_ATTEMPTS, Published, publish};
pub use render::{format_utc, now_utc, render, sender_name, sender_name_at};
pub use validate::{
    DEFAULT_MAX_MESSAGE_BYTES, check_content, check_len, check_recipient, check_sender,
};
pub use wake::{Wake, Waker, executor_busy, find_harness, launch};
