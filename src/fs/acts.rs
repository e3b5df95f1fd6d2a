//! Answering an act off the request thread: a command written to `ctl`, or the last
//! close of a goal in `new/`, is carried out by a worker of [`crate::control::pool`],
//! which sends the reply (fuser's replies may be sent from any thread). The request
//! thread only hands it over; when the workers' queue is full the request is answered
//! `EAGAIN` at once.

use fuser::{ReplyEmpty, ReplyWrite};

use super::{answer_close, refuse};
use crate::tree::Deferred;

/// Answers a write with `later`'s result: `n` bytes written, or its errno.
pub(crate) fn answer_write(later: Deferred, path: String, n: usize, reply: ReplyWrite) {
    later.run_elsewhere(path, move |r| match r {
        Ok(()) => reply.written(u32::try_from(n).unwrap_or(u32::MAX)),
        Err(e) => reply.error(refuse("write", &e)),
    });
}

/// Answers a close with `later`'s result.
pub(crate) fn answer_close_later(later: Deferred, path: String, reply: ReplyEmpty) {
    later.run_elsewhere(path, move |r| answer_close(reply, r));
}
