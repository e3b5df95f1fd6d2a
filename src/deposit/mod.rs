//! The inbox write path: litany's atomic, sender-namespaced deposit (CONTRACT §3), done
//! natively and without losing messages.
//!
//! [`Depositor::deposit`] is the whole act, in litany's order: validate ([`validate`]:
//! content, recipient, sender, each failure its own errno via [`DepositError::errno`]);
//! render the bytes `litany message` would write ([`render()`]); publish them atomically and
//! create-only as `<sender>-<NNN>.md` ([`publish::publish_with`]), under the [`guard`] that re-deposits
//! a message a concurrent `litany message` renamed over; then wake the recipient like the
//! verb does ([`wake`]), reading the executor lock instead of probing it. Nothing here
//! knows about FUSE.
//!
//! # How the FUSE side drives it
//!
//! A file created in `inbox/<id>/` is a message being written, not a backing file:
//! - `create`: check the recipient with [`Depositor::check_recipient`] (`ENOENT`), pick
//!   the sender, and start an in-memory buffer. Nothing touches the inbox yet.
//! - `write`: append to the buffer; refuse with [`Depositor::check_len`] (`EFBIG`) as soon
//!   as the buffer would pass the limit.
//! - `flush` (each `close(2)`): if the buffer holds bytes not yet deposited, call
//!   [`Depositor::deposit`] and answer with its errno, so the writer's `close` reports the
//!   failure; [`DepositError::Empty`] is success. The message is then immutable: a later
//!   write on the same handle (a dup'd fd) is refused with `EPERM`.
//! - `release`: deposit only if no flush did (errors can only be logged here), then drop
//!   the buffer.
//!
//! The deposit's name is litany's, never the one the writer chose: the created file is a
//! staging handle, and the message appears as `<sender>-<NNN>.md` ([`Published::name`]).

pub(crate) mod error;
pub(crate) mod guard;
pub(crate) mod publish;
pub(crate) mod render;
pub(crate) mod spare;
pub mod validate;
pub(crate) mod wake;

#[cfg(test)]
mod tests;

use crate::workspace::clock::now_utc;
use std::path::PathBuf;
use std::sync::Arc;

pub(crate) use error::DepositError;
pub(crate) use guard::{Guard, GuardOptions, OnRedeposit};
pub(crate) use publish::Published;
pub(crate) use render::{render, sender_name};
pub(crate) use spare::Spares;
pub(crate) use validate::{
    DEFAULT_MAX_MESSAGE_BYTES, check_content, check_len, check_recipient, check_sender,
};
pub(crate) use wake::{Later, Wake, Waker, executor_busy, find_harness};

use crate::workspace::Workspace;
use crate::workspace::handles::Pool;

/// Waits for one of the engine's helper threads, already told to stop, and logs it if it
/// panicked (`what` names it).
fn join(thread: Option<std::thread::JoinHandle<()>>, what: &str) {
    if let Some(t) = thread
        && t.join().is_err()
    {
        log::error!("{what} thread panicked");
    }
}

/// How a [`Depositor`] behaves.
#[derive(Debug, Clone)]
pub struct Options {
    /// The largest content accepted, in bytes.
    pub max_message_bytes: usize,
    /// The harness launched as `<harness> advance -- <ws> <id>`; `None` searches the
    /// absolute `PATH` entries for `litany`. Its environment is ours (minus
    /// [`wake::PRIVATE_ENV`]), so `LITANY_HOME` must be right for the workspace.
    pub harness: Option<PathBuf>,
    /// Protection against `litany message` renaming over our deposits; `None` turns it
    /// off (then a same-sender race with litany can lose one of our messages).
    pub guard: Option<GuardOptions>,
    /// Whether and how to wake the recipient after a deposit.
    pub wake: WakeMode,
    /// Keep unnamed files ready for deposits ([`spare`]), so that a deposit does not
    /// wait for the filesystem to allocate one.
    pub spares: bool,
}

/// Whether and how a [`Depositor`] wakes the recipient after a deposit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WakeMode {
    /// Never (`--no-wake`; `litany scan` launches the pending drivers later).
    Off,
    /// Before [`Depositor::deposit`] returns, with the outcome in [`Deposited::wake`].
    Inline,
    /// On a thread of its own ([`wake::Later`]), so the deposit returns without waiting
    /// for the lock check or the launch: what the mount uses.
    Background,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            max_message_bytes: DEFAULT_MAX_MESSAGE_BYTES,
            harness: None,
            guard: Some(GuardOptions::default()),
            wake: WakeMode::Inline,
            spares: true,
        }
    }
}

/// A message that now sits in the recipient's inbox, and what was done to deliver it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Deposited {
    pub(crate) published: Published,
    pub(crate) wake: Wake,
}

/// The deposit engine of one workspace.
pub struct Depositor {
    root: PathBuf,
    repo: Pool,
    max: usize,
    waker: Arc<Waker>,
    wake: WakeMode,
    /// The wake thread, for [`WakeMode::Background`].
    later: Option<Later>,
    spares: Option<Arc<Spares>>,
    guard: Option<Guard>,
}

impl Depositor {
    pub fn new(ws: &Workspace, opts: Options) -> Result<Self, DepositError> {
        let repo_dir = ws.repo_dir();
        let repo = Pool::open(&repo_dir)?;
        let waker = Arc::new(Waker::new(ws.root(), opts.harness.as_deref()));
        let wake = opts.wake;
        let guard = opts.guard.and_then(|g| {
            let waker = waker.clone();
            let hook: OnRedeposit = Box::new(move |recipient, _| {
                if wake != WakeMode::Off {
                    waker.wake(recipient);
                }
            });
            Guard::new(ws.root(), g, Some(hook))
                .map_err(|e| {
                    log::warn!(
                        "deposit guard unavailable ({e}); a same-sender race with \
                         `litany message` can lose a deposit"
                    )
                })
                .ok()
        });
        let spares = opts
            .spares
            .then(|| Spares::start(ws.root()))
            .and_then(|r| {
                r.map_err(|e| log::warn!("no spare-file thread ({e}); deposits make their own"))
                    .ok()
            })
            .map(Arc::new);
        if let (Some(g), Some(s)) = (&guard, &spares) {
            g.use_spares(s.clone());
        }
        let later = match wake {
            WakeMode::Background => Later::new(waker.clone())
                .map_err(|e| log::warn!("no wake thread ({e}); deposits wake inline"))
                .ok(),
            WakeMode::Off | WakeMode::Inline => None,
        };
        Ok(Self {
            root: ws.root().to_path_buf(),
            repo,
            max: opts.max_message_bytes,
            waker,
            wake,
            later,
            spares,
            guard,
        })
    }

    /// `Err(TooLarge)` once a message being written reaches `len` bytes past the limit.
    pub(crate) fn check_len(&self, len: u64) -> Result<(), DepositError> {
        check_len(len, self.max)
    }

    /// Whether `recipient` can receive messages now (one component with an agent ref).
    pub(crate) fn check_recipient(&self, recipient: &str) -> Result<(), DepositError> {
        check_recipient(&*self.repo.get()?, recipient)
    }

    /// Whether `sender` may stamp deposits: `user`, or an existing agent's id.
    pub(crate) fn check_sender(&self, sender: &str) -> Result<(), DepositError> {
        check_sender(&*self.repo.get()?, sender)
    }

    /// Validates, renders and publishes `content` from `sender` to `recipient`, then
    /// wakes the recipient. The deposit stands whatever the wake does.
    pub fn deposit(
        &self,
        recipient: &str,
        sender: &str,
        content: &[u8],
    ) -> Result<Deposited, DepositError> {
        let text = check_content(content, self.max)?;
        let from_name = {
            let repo = self.repo.get()?;
            check_recipient(&repo, recipient)?;
            check_sender(&repo, sender)?;
            sender_name(&repo, sender)
        };
        let body = render(sender, from_name.as_deref(), &now_utc(), text);
        let published = match &self.guard {
            Some(g) => g.publish(recipient, sender, &body)?,
            None => publish::publish_with(
                &self.root,
                recipient,
                sender,
                &body,
                self.spares.as_ref().and_then(|s| s.take()),
            )?,
        };
        log::debug!("deposited {}", published.path.display());
        let wake = match (self.wake, &self.later) {
            (WakeMode::Off, _) => Wake::Off,
            (WakeMode::Background, Some(later)) => later.wake(recipient),
            (WakeMode::Inline | WakeMode::Background, _) => self.waker.wake(recipient),
        };
        Ok(Deposited { published, wake })
    }

    /// The guard, when it runs.
    pub(crate) fn guard(&self) -> Option<&Guard> {
        self.guard.as_ref()
    }

    pub(crate) fn waker(&self) -> &Waker {
        &self.waker
    }
}
