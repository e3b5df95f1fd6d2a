//! Acting on agents through the mount: the command grammar of `steps/<id>/ctl`, what
//! each command runs, who may run it, and how its outcome is answered; and the goal of a
//! conversation started from `new/` ([`start`]). No FUSE here: the tree hands the parsed
//! act to [`run`] on a worker of the [`pool`], and the adapter answers the write or the
//! close with its result.
//!
//! Guarantees:
//! - a write to `ctl` is parsed once, whole, into a [`Command`]; anything else is
//!   `EINVAL`, and the refusal names the commands ([`COMMANDS`]);
//! - every command but `nudge` and the deposit of `interrupt` runs the real harness
//!   binary (the one `--harness` names, resolved once), with litany's own verb, its
//!   options in their `--opt=value` form and the workspace and agent after `--`, so no
//!   text an operator writes is ever read as an option ([`Command::argv`]);
//! - [`Policy`] says who may do what: nothing under `--read-only` (`EROFS`); under
//!   `--agent ID` only `stop`, `nudge` and `interrupt`, only on ID's descendants (`EPERM`
//!   otherwise), and no `new/`;
//! - a command's failure is one errno that says what went wrong (`EBUSY` for a live
//!   agent where litany refuses one, `ENOTEMPTY` for a subtree `delete` did not ask for,
//!   `EINVAL` for a config or role the workspace lacks), with litany's own words in the
//!   log and in the `control` event.

pub(crate) mod pool;
pub(crate) mod run;
pub(crate) mod start;

use std::ffi::OsString;
use std::path::Path;

/// What `ctl` takes, one per write: the text shown when `ctl` is read and when a write
/// is refused as not a command.
pub(crate) const COMMANDS: &str = "\
stop                          stop the agent and its whole subtree (SIGTERM, SIGKILL after 5 s)
nudge                         run a step now (`litany advance`); EBUSY while it is live
interrupt TEXT                stop, then deposit TEXT as a message, then wake it
retarget [CONFIG] [role ROLE] follow config CONFIG (default: default) and/or role ROLE
workflow CONFIG               run config CONFIG's workflow from its next step
workflow clear                run its own config's workflow again
delete NAME-OR-ID             delete the stopped agent (its name or id again, to confirm)
delete-tree NAME-OR-ID        delete the stopped agent and all its descendants
";

/// The longest write `ctl` takes as a command: one write(2) always reaches the daemon
/// whole up to this size, so a longer one (which the kernel could split) is refused
/// whole (`EFBIG`) rather than run in parts. A longer interrupt is a message written
/// into `inbox/<id>/` after a `stop`.
pub(crate) const MAX_COMMAND_BYTES: usize = 64 * 1024;

/// The words that introduce the list of commands in a refusal.
const TAKES: &str = "; ctl takes one of:";

/// The commands allowed under `--agent ID` (on ID's descendants).
pub(crate) const CONFINED_COMMANDS: [&str; 3] = ["stop", "nudge", "interrupt"];

/// One command written to an agent's `ctl`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Command {
    Stop,
    Nudge,
    /// Stop, deposit the text, wake.
    Interrupt(String),
    Retarget {
        config: Option<String>,
        role: Option<String>,
    },
    /// `Some(config)`: `workflow CONFIG`; `None`: `workflow clear`.
    Workflow(Option<String>),
    /// `confirm` is the name or id typed again; `tree` takes the descendants too.
    Delete {
        confirm: String,
        tree: bool,
    },
}

/// Why an act was refused or failed: the errno the writer sees and the reason in words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ActError {
    pub(crate) errno: i32,
    pub(crate) why: String,
}

impl ActError {
    pub(crate) fn new(errno: i32, why: impl Into<String>) -> Self {
        Self {
            errno,
            why: why.into(),
        }
    }

    /// Not a command: `EINVAL`, and the commands.
    fn not_a_command(why: impl std::fmt::Display) -> Self {
        Self::new(
            libc::EINVAL,
            format!(
                "{why}{TAKES}\n  {}",
                COMMANDS.trim_end().replace('\n', "\n  ")
            ),
        )
    }

    /// The reason without the list of commands (for an event, which the list would
    /// only make long).
    pub(crate) fn summary(&self) -> &str {
        self.why.split(TAKES).next().unwrap_or(&self.why)
    }

    /// The short word of the errno, for an event's `result`.
    pub(crate) fn word(&self) -> String {
        errno_word(self.errno)
    }
}

impl std::fmt::Display for ActError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.why)
    }
}

/// The symbolic name of an errno the acts answer (`EBUSY`), else its number.
pub(crate) fn errno_word(errno: i32) -> String {
    let name = match errno {
        libc::EBUSY => "EBUSY",
        libc::EINVAL => "EINVAL",
        libc::EPERM => "EPERM",
        libc::EROFS => "EROFS",
        libc::ENOENT => "ENOENT",
        libc::ENOTEMPTY => "ENOTEMPTY",
        libc::EEXIST => "EEXIST",
        libc::EIO => "EIO",
        libc::ETIMEDOUT => "ETIMEDOUT",
        libc::EAGAIN => "EAGAIN",
        libc::EOPNOTSUPP => "EOPNOTSUPP",
        libc::EILSEQ => "EILSEQ",
        libc::EFBIG => "EFBIG",
        _ => return format!("errno {errno}"),
    };
    name.to_string()
}

/// A config or role name as an operator may write it: one word, not an option.
fn is_word(s: &str) -> bool {
    !s.is_empty() && !s.starts_with('-') && s.chars().all(|c| !c.is_whitespace() && !c.is_control())
}

fn word_arg(what: &str, s: &str) -> Result<String, ActError> {
    if is_word(s) {
        Ok(s.to_string())
    } else {
        Err(ActError::not_a_command(format!(
            "{what} {s:?} is not a name (one word, not starting with '-')"
        )))
    }
}

impl Command {
    /// Parses one write to `ctl`. One trailing newline is dropped; `interrupt`'s text is
    /// everything after `interrupt ` (it may span lines); every other command is one
    /// line of words separated by blanks.
    pub(crate) fn parse(bytes: &[u8]) -> Result<Command, ActError> {
        if bytes.len() > MAX_COMMAND_BYTES {
            return Err(ActError::new(
                libc::EFBIG,
                format!(
                    "a command is at most {MAX_COMMAND_BYTES} bytes (this write: {}); write a \
                     longer message into inbox/<id>/",
                    bytes.len()
                ),
            ));
        }
        let text = std::str::from_utf8(bytes)
            .map_err(|_| ActError::not_a_command("the command is not UTF-8"))?;
        let text = text
            .strip_suffix("\r\n")
            .or_else(|| text.strip_suffix('\n'))
            .unwrap_or(text);
        let trimmed = text.trim_start();
        if let Some(rest) = trimmed.strip_prefix("interrupt")
            && (rest.is_empty() || rest.starts_with(char::is_whitespace))
        {
            let body = rest.strip_prefix([' ', '\t']).unwrap_or(rest);
            if body.trim().is_empty() {
                return Err(ActError::not_a_command(
                    "interrupt needs the text of the message",
                ));
            }
            return Ok(Command::Interrupt(body.to_string()));
        }
        if text.contains('\n') {
            return Err(ActError::not_a_command(
                "one command per write (only interrupt's text may span lines)",
            ));
        }
        let words: Vec<&str> = text.split_whitespace().collect();
        Ok(match words.as_slice() {
            ["stop"] => Command::Stop,
            ["nudge"] => Command::Nudge,
            ["retarget"] => Command::Retarget {
                config: None,
                role: None,
            },
            ["retarget", "role", role] => Command::Retarget {
                config: None,
                role: Some(word_arg("role", role)?),
            },
            ["retarget", config] => Command::Retarget {
                config: Some(word_arg("config", config)?),
                role: None,
            },
            ["retarget", config, "role", role] => Command::Retarget {
                config: Some(word_arg("config", config)?),
                role: Some(word_arg("role", role)?),
            },
            ["workflow", "clear"] => Command::Workflow(None),
            ["workflow", config] => Command::Workflow(Some(word_arg("config", config)?)),
            ["delete", who] => Command::Delete {
                confirm: who.to_string(),
                tree: false,
            },
            ["delete-tree", who] => Command::Delete {
                confirm: who.to_string(),
                tree: true,
            },
            [] => return Err(ActError::not_a_command("empty command")),
            [verb, ..] if is_verb(verb) => {
                return Err(ActError::not_a_command(format!(
                    "{verb}: wrong arguments in {text:?}"
                )));
            }
            [verb, ..] => {
                return Err(ActError::not_a_command(format!("unknown command {verb:?}")));
            }
        })
    }

    /// The command's verb, as written.
    pub(crate) fn verb(&self) -> &'static str {
        match self {
            Command::Stop => "stop",
            Command::Nudge => "nudge",
            Command::Interrupt(_) => "interrupt",
            Command::Retarget { .. } => "retarget",
            Command::Workflow(_) => "workflow",
            Command::Delete { tree: false, .. } => "delete",
            Command::Delete { tree: true, .. } => "delete-tree",
        }
    }

    /// The command as an event shows it: the verb and its arguments, an interrupt's
    /// text by its length only (it is in the inbox, and then the transcript).
    pub(crate) fn describe(&self) -> String {
        match self {
            Command::Interrupt(text) => format!("interrupt ({} bytes)", text.len()),
            Command::Retarget { config, role } => {
                let mut s = "retarget".to_string();
                if let Some(c) = config {
                    s += &format!(" {c}");
                }
                if let Some(r) = role {
                    s += &format!(" role {r}");
                }
                s
            }
            Command::Workflow(Some(c)) => format!("workflow {c}"),
            Command::Workflow(None) => "workflow clear".into(),
            Command::Delete { confirm, .. } => format!("{} {confirm}", self.verb()),
            other => other.verb().into(),
        }
    }

    /// The litany argv (after the binary) that carries the command out on agent `id` of
    /// workspace `ws`: for `interrupt`, its stop; `None` for `nudge`, which is a driver
    /// launch, as a deposit's wake does.
    pub(crate) fn argv(&self, ws: &Path, id: &str) -> Option<Vec<OsString>> {
        let mut argv: Vec<OsString> = Vec::new();
        match self {
            Command::Nudge => return None,
            Command::Stop | Command::Interrupt(_) => argv.push("stop".into()),
            Command::Retarget { config, role } => {
                argv.push("retarget".into());
                if let Some(c) = config {
                    argv.push(format!("--config={c}").into());
                }
                if let Some(r) = role {
                    argv.push(format!("--role={r}").into());
                }
            }
            Command::Workflow(config) => {
                argv.push("workflow".into());
                argv.push(match config {
                    Some(c) => format!("--config={c}").into(),
                    None => "--clear".into(),
                });
            }
            Command::Delete { tree, .. } => {
                argv.push("delete".into());
                if *tree {
                    argv.push("--children".into());
                }
            }
        }
        argv.push("--".into());
        argv.push(ws.as_os_str().to_owned());
        argv.push(id.into());
        Some(argv)
    }
}

/// Whether `w` is one of the verbs (a command with the wrong arguments, not an unknown
/// one).
fn is_verb(w: &str) -> bool {
    [
        "stop",
        "nudge",
        "interrupt",
        "retarget",
        "workflow",
        "delete",
        "delete-tree",
    ]
    .contains(&w)
}

/// Whether `id` is a descendant of `ancestor` (CONTRACT §2.2: a child's id is its
/// parent's, a hyphen, and two tokens of its own).
pub(crate) fn is_descendant(id: &str, ancestor: &str) -> bool {
    id.len() > ancestor.len() + 1
        && id.starts_with(ancestor)
        && id.as_bytes()[ancestor.len()] == b'-'
}

/// Who may act through this mount.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Policy {
    /// `--read-only` (or a home's read-only shelf): every act is `EROFS`.
    pub(crate) read_only: bool,
    /// `--agent ID`: acts only on ID's descendants, and only [`CONFINED_COMMANDS`].
    pub(crate) confined: Option<String>,
}

impl Policy {
    /// Whether agent `id` has a `ctl` in this mount.
    pub(crate) fn has_ctl(&self, id: &str) -> bool {
        self.confined
            .as_deref()
            .is_none_or(|me| is_descendant(id, me))
    }

    /// Whether the mount shows `new/`.
    pub(crate) fn has_new(&self) -> bool {
        self.confined.is_none()
    }

    /// Whether `command` may be run on `id`.
    pub(crate) fn allows(&self, command: &Command, id: &str) -> Result<(), ActError> {
        if self.read_only {
            return Err(ActError::new(libc::EROFS, "the mount is read-only"));
        }
        if let Some(me) = &self.confined {
            if !is_descendant(id, me) {
                return Err(ActError::new(
                    libc::EPERM,
                    format!("--agent {me} acts only on its own descendants"),
                ));
            }
            if !CONFINED_COMMANDS.contains(&command.verb()) {
                return Err(ActError::new(
                    libc::EPERM,
                    format!(
                        "--agent {me} may only {} its descendants, not {}",
                        CONFINED_COMMANDS.join(", "),
                        command.verb()
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Whether a conversation may be started (`new/`).
    pub(crate) fn allows_start(&self) -> Result<(), ActError> {
        if self.read_only {
            return Err(ActError::new(libc::EROFS, "the mount is read-only"));
        }
        if let Some(me) = &self.confined {
            return Err(ActError::new(
                libc::EPERM,
                format!("--agent {me} starts no conversations"),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
