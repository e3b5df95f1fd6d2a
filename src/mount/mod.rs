//! The mount's lifecycle: checks before mounting, the background daemon and its
//! readiness handshake, signals, stale mounts and unmounting.
//!
//! `litanyfs mount` returns only once the mount answers, so a script can use it on the
//! next line. The parent runs every check itself (so each refusal is one line on its own
//! stderr), then starts the daemon detached and waits for one line on a pipe: `ready`, or
//! the reason it could not mount. The daemon is started through a double fork, so it is
//! in a session of its own but not a process-group leader: `litany stop` signals the
//! holder of an inbox directory's fd only when that holder leads its group (CONTRACT
//! §3.7), and the daemon never holds one for longer than a listing anyway.
//!
//! Under a service manager (`NOTIFY_SOCKET`, systemd's `Type=notify`) the serving process
//! says `READY=1` (with `STATUS=` naming the workspace) only once the mount answers, as
//! the pipe's `ready` does, and `STOPPING=1` when a signal makes it unmount or its mount
//! goes.

use std::ffi::OsString;
use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use fuser::{Config, MountOption, Session, SessionACL};
use sd_notify::NotifyState;

use crate::deposit::{Depositor, Options as DepositOptions, WakeMode};
use crate::fs::Fs;
use crate::home::{Source, Space};
use crate::process;
use crate::process::READY_ENV;
use crate::tree::{Deposits, Tree};
use crate::views::Views;
use crate::witness::Witness;
use crate::workspace::{Workspace, WorkspaceError};

/// The readiness line a daemon writes once the mount answers.
const READY_LINE: &str = "ready";
/// How long a daemon waits for its own mount to answer before giving up.
const READY_TIMEOUT: Duration = Duration::from_secs(10);
/// The filesystem type shown in `/proc/mounts` (`fuse.litanyfs`).
pub(crate) const SUBTYPE: &str = "litanyfs";
/// Threads serving requests unless `--threads` says otherwise: enough that a slow request
/// (a big page, a git lookup) leaves others to answer the rest.
pub const DEFAULT_THREADS: usize = 4;

/// How the mount is run: every option of `litanyfs mount`, defined once here with its
/// doc, default and spelling. The command line parses into it (`#[command(flatten)]`),
/// `-o` spellings are derived from it ([`crate::helper`]), `demo` starts from its
/// [`Default`] (the command line's defaults, parsed from no arguments), and the daemon
/// receives it through [`MountOptions::to_args`], the inverse of parsing, so an option
/// can neither be missing from one of these nor reach the daemon differently.
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub struct MountOptions {
    /// Stay attached and log to stderr instead of running as a daemon.
    ///
    /// Under a systemd unit with `Type=notify` it sends `READY=1` once the mount answers
    /// and `STOPPING=1` when it unmounts. Under an interactive shell the process leads its process group, which `litany
    /// stop` can mistake for an executor; prefer the daemon next to a running harness.
    #[arg(long)]
    pub foreground: bool,
    /// Where the daemon logs (default: `$XDG_STATE_HOME/litanyfs/<mountpoint>.log`, else
    /// `~/.local/state/litanyfs/...`).
    #[arg(long, value_name = "FILE")]
    pub log_file: Option<PathBuf>,
    /// Threads serving requests.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_THREADS)]
    pub threads: usize,
    /// Who messages deposited through the mount are from: `user`, or an existing agent's
    /// id.
    #[arg(long, value_name = "ID", default_value = crate::workspace::inbox::USER_SENDER)]
    pub sender: String,
    /// The largest message a deposit accepts, in bytes; a write past it gets `EFBIG`.
    #[arg(long, value_name = "N", default_value_t = crate::deposit::DEFAULT_MAX_MESSAGE_BYTES)]
    pub max_message_bytes: usize,
    /// The `litany` binary that wakes an agent after a deposit (default: `litany` in an
    /// absolute `PATH` entry). Resolved once, at mount, to an absolute path.
    #[arg(long, value_name = "PATH")]
    pub harness: Option<PathBuf>,
    /// Deposit without waking the agent; `litany scan` launches the pending drivers later.
    #[arg(long)]
    pub no_wake: bool,
    /// Refuse deposits too: the kernel mounts it read-only (`ro` in /proc/mounts), and
    /// every change answers `EROFS`.
    #[arg(long, alias = "ro")]
    pub read_only: bool,
    /// The bound in bytes of the cache of parsed tool captures, and again of the
    /// renderings' cache, for the whole mount: a home's workspaces share both.
    #[arg(long, value_name = "N", default_value_t = crate::tree::DEFAULT_PAGE_CACHE_BYTES)]
    pub cache_bytes: usize,
    /// Show only what agent ID may see (its own step records and pending deposits),
    /// and stamp every deposit `from: ID`. The view a sandboxed agent gets.
    #[arg(long, value_name = "ID")]
    pub agent: Option<String>,
    /// Let other users use the mount; the kernel then enforces the modes shown
    /// (`default_permissions`).
    #[arg(long)]
    pub allow_other: bool,
    /// Show the view's fixed modes (records 0444, directories 0555, owned by the daemon's
    /// user) instead of what the workspace grants (each node's own mode masked by the
    /// view's, and its owner): for a shared setup in which every local user is to read
    /// the view.
    #[arg(long)]
    pub view_modes: bool,
    /// With --allow-other: users (numeric ids, `:`-separated) who may write messages
    /// into every inbox though the workspace does not let them; the way there and the
    /// inboxes show `o+x` and `o+wx` (sticky), and any other user's message is refused.
    #[arg(long, value_name = "UID[:UID...]", value_delimiter = ':')]
    pub depositors: Vec<u32>,
    /// Unmount automatically when the daemon dies, however it dies: a sentinel process
    /// (`litanyfs sentinel`) outlives it and detaches the dead mount.
    #[arg(long)]
    pub auto_unmount: bool,
    /// A price table (JSON, see doc/VIEWS.md#spend): the views add a COST column and
    /// `cost_usd`; tokens no rate covers are `unpriced_tokens`, never free.
    #[arg(long, value_name = "FILE")]
    pub prices: Option<PathBuf>,
    /// The daemon's niceness, -20 to 19, for its threads and, where the kernel groups
    /// each session (`sched_autogroup_enabled`), for its session's group: under load that
    /// group weighs the same as each agent's session, and every request waits its turn
    /// (doc/USAGE.md#priority). Below 0 needs root (`CAP_SYS_NICE`). Unset: as started.
    #[arg(long, value_name = "N", allow_negative_numbers = true,
          value_parser = clap::value_parser!(i8).range(-20..=19))]
    pub nice: Option<i8>,
}

impl Default for MountOptions {
    /// The command line's defaults: the options parsed from no arguments.
    fn default() -> Self {
        Self::parse_args(std::iter::empty::<OsString>()).unwrap_or_else(|e| e.exit())
    }
}

impl MountOptions {
    /// The options parsed from `litanyfs mount` arguments (without the program name and
    /// the positionals).
    pub(crate) fn parse_args<I, T>(args: I) -> Result<Self, clap::Error>
    where
        I: IntoIterator<Item = T>,
        T: Into<OsString> + Clone,
    {
        use clap::{Args, FromArgMatches};
        let cmd = Self::augment_args(clap::Command::new("mount").no_binary_name(true));
        Self::from_arg_matches(&cmd.try_get_matches_from(args)?)
    }

    /// The options as `litanyfs mount` arguments: the inverse of [`Self::parse_args`],
    /// listing each option that differs from its default. The parent passes these to
    /// the daemon it starts. The destructuring names every field, so a new option does
    /// not compile until it is passed on.
    pub(crate) fn to_args(&self) -> Vec<OsString> {
        let Self {
            foreground,
            log_file,
            threads,
            sender,
            max_message_bytes,
            harness,
            no_wake,
            read_only,
            cache_bytes,
            agent,
            allow_other,
            view_modes,
            depositors,
            auto_unmount,
            prices,
            nice,
        } = self;
        let d = Self::default();
        let mut a = ArgList::default();
        a.flag("foreground", *foreground);
        a.value("log_file", log_file.as_ref().map(|p| p.as_os_str()));
        a.value(
            "threads",
            (*threads != d.threads).then(|| threads.to_string()),
        );
        a.value("sender", (*sender != d.sender).then_some(sender));
        a.value(
            "max_message_bytes",
            (*max_message_bytes != d.max_message_bytes).then(|| max_message_bytes.to_string()),
        );
        a.value("harness", harness.as_ref().map(|p| p.as_os_str()));
        a.flag("no_wake", *no_wake);
        a.flag("read_only", *read_only);
        a.value(
            "cache_bytes",
            (*cache_bytes != d.cache_bytes).then(|| cache_bytes.to_string()),
        );
        a.value("agent", agent.as_ref());
        a.flag("allow_other", *allow_other);
        a.flag("view_modes", *view_modes);
        a.value(
            "depositors",
            (!depositors.is_empty()).then(|| {
                let uids: Vec<String> = depositors.iter().map(u32::to_string).collect();
                uids.join(":")
            }),
        );
        a.flag("auto_unmount", *auto_unmount);
        a.value("prices", prices.as_ref().map(|p| p.as_os_str()));
        a.value("nice", nice.map(|n| n.to_string()));
        a.0
    }
}

/// Arguments being listed by [`MountOptions::to_args`], each named by its field, whose
/// long option clap derives as the field's name in kebab case.
#[derive(Default)]
struct ArgList(Vec<OsString>);

impl ArgList {
    fn long(field: &str) -> OsString {
        format!("--{}", field.replace('_', "-")).into()
    }

    fn flag(&mut self, field: &str, on: bool) {
        if on {
            self.0.push(Self::long(field));
        }
    }

    fn value(&mut self, field: &str, value: Option<impl AsRef<std::ffi::OsStr>>) {
        if let Some(v) = value {
            self.0.push(Self::long(field));
            self.0.push(v.as_ref().to_os_string());
        }
    }
}

/// Why a mount or unmount was refused; each is one line for the user.
#[derive(Debug)]
pub enum MountError {
    Workspace(WorkspaceError),
    MountpointMissing(PathBuf),
    NotADirectory(PathBuf),
    NotEmpty(PathBuf),
    AlreadyMounted(PathBuf),
    NotMounted(PathBuf),
    Io(String, std::io::Error),
    Daemon(String),
}

impl std::fmt::Display for MountError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Workspace(WorkspaceError::Io(p, e))
                if e.kind() == std::io::ErrorKind::NotFound =>
            {
                write!(f, "workspace {} does not exist", p.display())
            }
            Self::Workspace(e) => write!(f, "{e}"),
            Self::MountpointMissing(p) => write!(f, "mountpoint {} does not exist", p.display()),
            Self::NotADirectory(p) => write!(f, "mountpoint {} is not a directory", p.display()),
            Self::NotEmpty(p) => write!(f, "mountpoint {} is not empty", p.display()),
            Self::AlreadyMounted(p) => write!(f, "{} is already mounted", p.display()),
            Self::NotMounted(p) => write!(f, "{} is not mounted", p.display()),
            Self::Io(what, e) => write!(f, "{what}: {e}"),
            Self::Daemon(why) => write!(f, "{why}"),
        }
    }
}

impl std::error::Error for MountError {}

/// `path` made absolute without resolving its last component (which may be a dead mount).
fn absolute(path: &Path) -> Result<PathBuf, MountError> {
    let abs =
        std::path::absolute(path).map_err(|e| MountError::Io(path.display().to_string(), e))?;
    match (abs.parent(), abs.file_name()) {
        (Some(parent), Some(name)) => match std::fs::canonicalize(parent) {
            Ok(p) => Ok(p.join(name)),
            Err(_) => Ok(abs),
        },
        _ => Ok(abs),
    }
}

/// Mount points from `/proc/self/mountinfo`, with their filesystem types.
fn mounts() -> Vec<(PathBuf, String)> {
    let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return Vec::new();
    };
    info.lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split(' ').collect();
            let point = fields.get(4)?;
            let sep = fields.iter().position(|f| *f == "-")?;
            let fstype = fields.get(sep + 1)?;
            Some((PathBuf::from(unescape_octal(point)), fstype.to_string()))
        })
        .collect()
}

/// mountinfo escapes space, tab, newline and backslash as `\ooo`.
fn unescape_octal(s: &str) -> std::ffi::OsString {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            out.push((b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0'));
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    std::os::unix::ffi::OsStringExt::from_vec(out)
}

/// The filesystem type mounted at `mnt`, if anything is.
pub fn mounted_type(mnt: &Path) -> Option<String> {
    mounts()
        .into_iter()
        .rev()
        .find(|(p, _)| p == mnt)
        .map(|(_, t)| t)
}

/// What SOURCE `source` is, for a mount: a workspace, or a home of workspaces (a data
/// root of litany's or yog's, or a directory that holds workspaces now).
pub(crate) fn source_of(source: &Path) -> Result<Source, MountError> {
    let abs = std::fs::canonicalize(source)
        .map_err(|e| MountError::Workspace(WorkspaceError::Io(source.to_path_buf(), e)))?;
    let classified = crate::home::classify(&abs);
    match &classified {
        Source::Workspace(_) => {}
        Source::Home { shelves, .. } => {
            let data_root = shelves.iter().any(|s| s.dir != abs);
            if !data_root && crate::home::layout::scan(&shelves[0]).is_empty() {
                // A plain directory that holds no workspace: most likely a mistyped
                // workspace, so say that first.
                let e = Workspace::open(&abs).err();
                return Err(match e {
                    Some(e) => MountError::Daemon(format!(
                        "{e}, nor a home: it holds no workspace, and is neither litany's \
                         data root (workspaces/) nor yog's (world/litany/)"
                    )),
                    None => MountError::Daemon(format!("{}: not a directory", abs.display())),
                });
            }
        }
    }
    Ok(classified)
}

/// Checks the source and the mountpoint, clearing a stale mount left by a killed
/// daemon. Returns what the source is and the absolute mountpoint.
pub(crate) fn preflight(source: &Path, mnt: &Path) -> Result<(Source, PathBuf), MountError> {
    let source = source_of(source)?;
    let mnt = absolute(mnt)?;
    if mounted_type(&mnt).is_some() {
        if !process::is_stale(&mnt) {
            return Err(MountError::AlreadyMounted(mnt));
        }
        log::warn!(
            "{}: clearing a stale mount (Transport endpoint is not connected)",
            mnt.display()
        );
        process::detach(&mnt, true)
            .map_err(|e| MountError::Io(format!("clearing stale mount at {}", mnt.display()), e))?;
    }
    let meta = match std::fs::metadata(&mnt) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(MountError::MountpointMissing(mnt));
        }
        Err(e) => return Err(MountError::Io(mnt.display().to_string(), e)),
        Ok(m) => m,
    };
    if !meta.is_dir() {
        return Err(MountError::NotADirectory(mnt));
    }
    let mut entries =
        std::fs::read_dir(&mnt).map_err(|e| MountError::Io(mnt.display().to_string(), e))?;
    if entries.next().is_some() {
        return Err(MountError::NotEmpty(mnt));
    }
    Ok((source, mnt))
}

/// `litanyfs unmount`: detaches the mount; the daemon exits when its session ends.
pub fn unmount(mnt: &Path) -> Result<(), MountError> {
    let mnt = absolute(mnt)?;
    if mounted_type(&mnt).is_none() {
        return Err(MountError::NotMounted(mnt));
    }
    process::detach(&mnt, false)
        .or_else(|e| {
            log::warn!("{}: busy ({e}); detaching lazily", mnt.display());
            process::detach(&mnt, true)
        })
        .map_err(|e| MountError::Io(format!("unmounting {}", mnt.display()), e))
}

/// The directory of the logs of background daemons: `$XDG_STATE_HOME/litanyfs`, else
/// `$HOME/.local/state/litanyfs`. With neither set (and `HOME` not found in the password
/// database, see [`crate::helper::settle_environment`]) there is none, and the error says
/// what to set.
pub fn log_dir() -> Result<PathBuf, MountError> {
    std::env::var_os("XDG_STATE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .filter(|v| !v.is_empty())
                .map(|h| PathBuf::from(h).join(".local/state"))
        })
        .map(|state| state.join(SUBTYPE))
        .ok_or_else(|| {
            MountError::Daemon(
                "no place for the log: set log_file= (--log-file), HOME or XDG_STATE_HOME".into(),
            )
        })
}

/// Where a background daemon logs when `--log-file` is not given: a file in [`log_dir`]
/// named after the mountpoint.
pub(crate) fn default_log_file(mnt: &Path) -> Result<PathBuf, MountError> {
    let name: String = mnt
        .to_string_lossy()
        .trim_start_matches('/')
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    Ok(log_dir()?.join(format!("{name}.log")))
}

/// `litanyfs mount` without `--foreground`: checks, starts the daemon, and returns once
/// it reports that the mount answers.
pub fn spawn_daemon(ws: &Path, mnt: &Path, opts: &MountOptions) -> Result<PathBuf, MountError> {
    let (_, mnt) = preflight(ws, mnt)?;
    let ws = std::fs::canonicalize(ws).map_err(|e| MountError::Io(ws.display().to_string(), e))?;
    // A relative --harness names a file from here, not from wherever the daemon runs.
    let mut opts = opts.clone();
    if let Some(h) = &opts.harness {
        opts.harness =
            Some(std::path::absolute(h).map_err(|e| MountError::Io(h.display().to_string(), e))?);
    }
    let opts = &opts;
    let log_path = match &opts.log_file {
        Some(f) => f.clone(),
        None => default_log_file(&mnt)?,
    };
    if let Some(dir) = log_path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| MountError::Io(dir.display().to_string(), e))?;
    }
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log_path)
        .map_err(|e| MountError::Io(log_path.display().to_string(), e))?;
    let mut cmd = process::detached_self(None);
    cmd.arg("mount")
        .args(
            MountOptions {
                foreground: true,
                ..opts.clone()
            }
            .to_args(),
        )
        .arg("--")
        .arg(&ws)
        .arg(&mnt)
        .env(READY_ENV, "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(log);
    let mut child = cmd
        .spawn()
        .map_err(|e| MountError::Io("starting the daemon".into(), e))?;
    let stdout = child.stdout.take();
    let _ = child.wait(); // the intermediate exits at once; the daemon lives on
    let mut line = String::new();
    if let Some(out) = stdout {
        let _ = BufReader::new(out).read_line(&mut line);
    }
    match line.trim_end() {
        READY_LINE => Ok(log_path),
        "" => Err(MountError::Daemon(format!(
            "the daemon exited before the mount answered; see {}",
            log_path.display()
        ))),
        why => Err(MountError::Daemon(why.to_string())),
    }
}

/// Tells the service manager how the mount is doing, when one listens (`NOTIFY_SOCKET`,
/// as under a systemd unit with `Type=notify`); a failure to tell is logged, never fatal.
fn notify(state: &[NotifyState]) {
    if let Err(e) = sd_notify::notify(state) {
        log::warn!("telling the service manager {state:?}: {e}");
    }
}

/// Blocks SIGINT, SIGTERM and SIGHUP in this thread (and so in every thread started after
/// it), and starts a thread that unmounts `mnt` when one arrives.
fn handle_signals(mnt: PathBuf) {
    // SAFETY: sigset manipulation on a local set; pthread_sigmask on the current thread.
    let set = unsafe {
        let mut set = std::mem::zeroed::<libc::sigset_t>();
        libc::sigemptyset(&mut set);
        for s in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
            libc::sigaddset(&mut set, s);
        }
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        set
    };
    let spawned = std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            loop {
                // SAFETY: `set` is a valid, initialised signal set; no siginfo is asked for.
                let sig =
                    unsafe { libc::sigtimedwait(&set, std::ptr::null_mut(), std::ptr::null()) };
                if sig < 0 {
                    // A stray signal came (EINTR).
                    continue;
                }
                log::info!("signal {sig}: unmounting {}", mnt.display());
                notify(&[NotifyState::Stopping, NotifyState::Status("unmounting")]);
                if let Err(e) =
                    process::detach(&mnt, false).or_else(|_| process::detach(&mnt, true))
                {
                    log::error!("{}: unmount failed: {e}", mnt.display());
                }
            }
        });
    if let Err(e) = spawned {
        log::error!("could not start the signal thread: {e}");
    }
}

/// Waits until `mnt` is served by a filesystem other than the one it had before.
fn wait_until_mounted(mnt: &Path, before_dev: u64) -> Result<(), String> {
    let start = Instant::now();
    loop {
        match std::fs::metadata(mnt) {
            Ok(m) if m.dev() != before_dev => return Ok(()),
            Ok(_) => {}
            Err(e) => {
                return Err(format!(
                    "{}: the new mount does not answer: {e}",
                    mnt.display()
                ));
            }
        }
        if start.elapsed() > READY_TIMEOUT {
            return Err(format!(
                "{}: the mount did not answer within {READY_TIMEOUT:?}",
                mnt.display()
            ));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Runs the filesystem in this process until it is unmounted.
pub fn run(ws: &Path, mnt: &Path, opts: &MountOptions) -> Result<(), MountError> {
    let mut ready_pipe = None;
    if std::env::var_os(READY_ENV).is_some() {
        // What the caller of `litanyfs mount` held open is not the daemon's to keep: a
        // pipe held here would keep its reader waiting for as long as the mount lives.
        process::close_inherited(None);
        // Close-on-exec, so that no process the daemon starts holds the parent's pipe.
        // SAFETY: fcntl on fd 1, the readiness pipe the parent gave us.
        let fd = unsafe { libc::fcntl(1, libc::F_DUPFD_CLOEXEC, 3) };
        // SAFETY: a new descriptor, which we take over.
        ready_pipe =
            (fd >= 0).then(|| unsafe { <File as std::os::fd::FromRawFd>::from_raw_fd(fd) });
    }
    if ready_pipe.is_some() {
        redirect_stdout_to_null();
    }
    let result = serve(ws, mnt, opts, &mut ready_pipe);
    if let (Err(e), Some(pipe)) = (&result, ready_pipe.as_mut()) {
        let _ = writeln!(pipe, "{e}");
    }
    result
}

fn redirect_stdout_to_null() {
    if let Ok(null) = std::fs::OpenOptions::new().write(true).open("/dev/null") {
        use std::os::fd::AsRawFd;
        // SAFETY: both descriptors are valid; dup2 replaces fd 1.
        unsafe { libc::dup2(null.as_raw_fd(), 1) };
    }
}

/// Raises the soft limit on open descriptors to the hard one: every open record holds a
/// descriptor, and the handle table (not the default soft limit) is meant to bound them.
fn raise_fd_limit() {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit on a valid, initialised struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && lim.rlim_cur < lim.rlim_max {
            lim.rlim_cur = lim.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
    }
}

/// Allocations from this size up are mapped on their own and returned to the system when
/// freed: messages being written and the guard's copies are up to a MiB each, and glibc's
/// default (a threshold that rises after each such free) kept them in the heap, so a
/// burst of large messages left the daemon holding their memory long after.
const MMAP_THRESHOLD: libc::c_int = 256 << 10;

/// Fixes glibc's mmap threshold at [`MMAP_THRESHOLD`] (see there), and holds its arenas
/// to one a CPU. Each arena keeps what its threads freed for their next allocations, and
/// glibc makes up to eight a CPU: with the daemon's request threads spread over many, the
/// memory held free grew all through a soak in pages the trim cannot give back. A pair
/// of 8-minute soaks with two arenas on two CPUs: free-but-kept 21.8 against 7.8 MiB at
/// the end, RSS 71.0 against 64.0 MiB (doc/TESTING.md).
fn tune_heap() {
    // SAFETY: mallopt only changes allocator tuning; a refusal (0) leaves the default.
    if unsafe { libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD) } == 0 {
        log::debug!("mallopt(M_MMAP_THRESHOLD) refused; large buffers may stay in the heap");
    }
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let arenas = libc::c_int::try_from(cpus).unwrap_or(libc::c_int::MAX);
    // SAFETY: as above.
    if unsafe { libc::mallopt(libc::M_ARENA_MAX, arenas) } == 0 {
        log::debug!("mallopt(M_ARENA_MAX) refused; glibc makes arenas as it likes");
    }
}

/// Says so when the daemon runs as root over a workspace someone else owns: what it
/// writes there would be root's, and the drivers it wakes would run as root.
fn warn_if_root_over_others(ws: &Path) {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return;
    }
    if let Ok(m) = std::fs::metadata(ws)
        && m.uid() != 0
    {
        log::warn!(
            "running as root over {} (owned by uid {}): deposits and driver logs are made \
             as root and woken drivers run as root; run the mount as the workspace's owner \
             (doc/SYSTEM-MOUNTS.md)",
            ws.display(),
            m.uid()
        );
    }
}

/// How a home mount opens a workspace's tree: with the mount's options, one pair of
/// caches for every workspace (`--cache-bytes` bounds the mount, not each workspace),
/// and its invalidation thread once the session has started.
fn home_opener(
    opts: &MountOptions,
    mnt: &Path,
    started: &Arc<Started>,
    caches: &crate::tree::Caches,
) -> crate::home::Opener {
    let (o, m, s) = (opts.clone(), mnt.to_path_buf(), started.clone());
    let caches = caches.clone();
    Box::new(move |ws, workspace, read_only, views| {
        let tree = Arc::new(
            workspace_tree(workspace, &m, &o, read_only, Some(views), &caches)
                .map_err(|e| e.to_string())?,
        );
        if let Some((fs, notifier)) = s.get() {
            fs.invalidator(tree.clone(), Some(ws.clone()))
                .spawn(notifier.clone());
        }
        Ok(tree)
    })
}

/// The tree of `workspace` as the mount serves it, with the mount's options: read-only
/// also when `read_only` (a home's replays); serving `views` when given (a home follows
/// every workspace's events from discovery, before any tree exists).
fn workspace_tree(
    workspace: &Workspace,
    mnt: &Path,
    opts: &MountOptions,
    read_only: bool,
    views: Option<Arc<Views>>,
    caches: &crate::tree::Caches,
) -> Result<Tree, MountError> {
    let modes = if opts.view_modes {
        crate::tree::Modes::fixed()
    } else {
        crate::tree::Modes::masked()
    };
    let mut tree = Tree::new(workspace.clone())
        .map_err(|e| MountError::Daemon(e.to_string()))?
        .with_modes(modes.with_depositors(&opts.depositors))
        .with_caches(caches)
        .with_witness(Witness::new(mnt));
    if let Some(v) = views {
        tree = tree.sharing_views(v);
    }
    let mut tree = tree.watching();
    let mut sender = opts.sender.clone();
    if let Some(agent) = &opts.agent {
        if sender != crate::workspace::inbox::USER_SENDER && sender != *agent {
            return Err(MountError::Daemon(format!(
                "--agent {agent} stamps deposits from {agent}; --sender {sender} contradicts it"
            )));
        }
        let snap = tree
            .refs()
            .snapshot()
            .map_err(|e| MountError::Daemon(e.to_string()))?;
        if !snap.agents.contains_key(agent) {
            return Err(MountError::Daemon(format!(
                "--agent {agent}: no such agent"
            )));
        }
        sender = agent.clone();
        tree = tree.confined_to(agent);
    }
    if !opts.read_only && !read_only {
        warn_if_root_over_others(workspace.root());
        let depositor = Depositor::new(
            workspace,
            DepositOptions {
                max_message_bytes: opts.max_message_bytes,
                harness: opts.harness.clone(),
                // A writer's close waits for the deposit, not for the wake.
                wake: if !opts.no_wake {
                    WakeMode::Background
                } else {
                    WakeMode::Off
                },
                ..DepositOptions::default()
            },
        )
        .map_err(|e| MountError::Daemon(e.to_string()))?;
        depositor
            .check_sender(&sender)
            .map_err(|e| MountError::Daemon(format!("--sender: {e}")))?;
        let views = tree.views().clone();
        depositor
            .waker()
            .on_launch(Box::new(move |agent, pid| views.woken(agent, pid)));
        let depositor = Arc::new(depositor);
        tree = tree.with_deposits(Deposits { depositor, sender });
    }
    Ok(tree)
}

/// Once the session exists: what a home's opener needs to start a new tree's
/// invalidation thread.
type Started = std::sync::OnceLock<(Fs, fuser::Notifier)>;

fn serve(
    source: &Path,
    mnt: &Path,
    opts: &MountOptions,
    ready: &mut Option<File>,
) -> Result<(), MountError> {
    let (source, mnt) = preflight(source, mnt)?;
    let before_dev = std::fs::metadata(&mnt)
        .map_err(|e| MountError::Io(mnt.display().to_string(), e))?
        .dev();
    // Before any thread starts: each inherits its starter's niceness.
    if let Some(n) = opts.nice {
        crate::process::set_nice(n.into()).map_err(|e| {
            MountError::Daemon(format!(
                "--nice {n}: {e} (a niceness below 0 needs root or CAP_SYS_NICE)"
            ))
        })?;
    }
    handle_signals(mnt.clone());
    raise_fd_limit();
    tune_heap();
    if !opts.depositors.is_empty() && !opts.allow_other {
        return Err(MountError::Daemon(
            "--depositors needs --allow-other: no other user reaches the mount without it".into(),
        ));
    }
    // The harness is resolved once, here, to the absolute path every wake launches.
    let harness = crate::deposit::find_harness(opts.harness.as_deref());
    if !opts.read_only && !opts.no_wake {
        match &harness {
            Some(h) => log::info!(
                "waking agents with {} ({})",
                h.display(),
                if opts.harness.is_some() {
                    "--harness"
                } else {
                    "found on PATH"
                }
            ),
            None => log::warn!(
                "no `{}` in an absolute PATH entry ({}): deposits wait in their inbox for \
                 the next driver; set harness= (--harness) to wake agents",
                crate::deposit::wake::HARNESS_BIN,
                std::env::var("PATH").unwrap_or_default()
            ),
        }
    }
    let opts = &MountOptions {
        harness,
        ..opts.clone()
    };
    let prices =
        crate::views::prices::for_mount(opts.prices.as_deref()).map_err(MountError::Daemon)?;
    let started: Arc<Started> = Arc::new(std::sync::OnceLock::new());
    let caches = crate::tree::Caches::new(opts.cache_bytes);
    let (space, source_root, single) = match source {
        Source::Workspace(root) => {
            let workspace = Workspace::open(&root).map_err(MountError::Workspace)?;
            let tree = Arc::new(workspace_tree(
                &workspace, &mnt, opts, false, None, &caches,
            )?);
            tree.views().set_prices(prices.clone());
            (Space::One(tree.clone()), root, Some(tree))
        }
        Source::Home { root, shelves } => {
            if let Some(agent) = &opts.agent {
                return Err(MountError::Daemon(format!(
                    "--agent {agent} confines a mount to one agent of one workspace; \
                     mount that workspace ({}/<workspace>) rather than the home",
                    root.display()
                )));
            }
            if opts.sender != crate::workspace::inbox::USER_SENDER {
                return Err(MountError::Daemon(format!(
                    "--sender {} names an agent of one workspace; on a home mount every \
                     deposit is from `user`",
                    opts.sender
                )));
            }
            let opener = home_opener(opts, &mnt, &started, &caches);
            let home = crate::home::Home::new(root.clone(), shelves, opener);
            home.set_prices(prices.clone());
            home.start();
            (Space::Home(home), root, None)
        }
    };
    let home = match &space {
        Space::Home(h) => Some(h.clone()),
        Space::One(_) => None,
    };
    let fs = Fs::new(space);
    let handle = fs.clone();
    let mut config = Config::default();
    // The source is the workspace (or home) as an fstab line names it, so `mount -a` and
    // systemd see the line as mounted.
    config.mount_options = vec![
        MountOption::FSName(source_root.display().to_string()),
        MountOption::Subtype(SUBTYPE.into()),
        MountOption::NoDev,
        MountOption::NoSuid,
        MountOption::NoAtime,
    ];
    // fuser hands the subtype to fusermount3 only; mounting directly (as root), the
    // kernel must be told itself, or the type shows as plain `fuse`.
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        config
            .mount_options
            .push(MountOption::CUSTOM(format!("subtype={SUBTYPE}")));
    }
    // Read-only to the kernel too: it refuses every change itself, and it keeps a
    // file's attributes after a read (on a writable mount a read drops the atime, and
    // the next `stat` of a file costs a round trip).
    if opts.read_only {
        config.mount_options.push(MountOption::RO);
    }
    if opts.allow_other {
        config.acl = SessionACL::All;
        config.mount_options.push(MountOption::DefaultPermissions);
    }
    config.n_threads = Some(opts.threads.max(1));
    config.clone_fd = true;
    let session = Session::new(fs, &mnt, &config)
        .map_err(|e| MountError::Io(format!("mounting {}", mnt.display()), e))?;
    // Started before the mount is announced, so that a daemon that dies from here on
    // leaves no dead mount; an error drops the session, which unmounts.
    if opts.auto_unmount {
        crate::sentinel::start(&mnt).map_err(|e| {
            MountError::Io(format!("starting the sentinel of {}", mnt.display()), e)
        })?;
    }
    let notifier = session.notifier();
    if let Some(tree) = single {
        handle
            .invalidator(tree.clone(), None)
            .spawn(notifier.clone());
        tree.views().start();
    }
    if let Some(home) = &home {
        let (fs, n) = (handle.clone(), notifier.clone());
        home.on_gone(Box::new(move |ws| {
            fs.forget_workspace(ws.clone(), n.clone())
        }));
    }
    census::start(&handle, &caches, notifier.clone());
    // A home's trees opened from now on start their own; none was opened before.
    let _ = started.set((handle, notifier));
    let pipe = ready.take();
    let watched = mnt.clone();
    let served = source_root.clone();
    let served_root = source_root;
    let started = std::thread::Builder::new()
        .name("ready".into())
        .spawn(move || match wait_until_mounted(&watched, before_dev) {
            Ok(()) => {
                process::mounted_at(&watched);
                log::info!("{}: mounted and answering", watched.display());
                if let Some(mut p) = pipe {
                    let _ = writeln!(p, "{READY_LINE}");
                }
                let status = format!("serving {} at {}", served.display(), watched.display());
                notify(&[NotifyState::Ready, NotifyState::Status(&status)]);
            }
            Err(why) => {
                log::error!("{why}");
                if let Some(mut p) = pipe {
                    let _ = writeln!(p, "{why}");
                }
                let _ = process::detach(&watched, true);
            }
        });
    if let Err(e) = started {
        log::error!("could not start the readiness thread: {e}");
    }
    log::info!(
        "serving {} at {} with {} threads",
        served_root.display(),
        mnt.display(),
        opts.threads
    );
    session
        .run()
        .map_err(|e| MountError::Io(format!("serving {}", mnt.display()), e))?;
    log::info!("{}: unmounted; exiting", mnt.display());
    notify(&[NotifyState::Stopping]);
    Ok(())
}

mod census;
pub use census::{CENSUS_MARK, CENSUS_TARGET};

#[cfg(test)]
pub(crate) mod tests;
