//! The `litanyfs` command: mount, unmount, demo.

// Every failure here is a message and an exit code, never a panic (as in the library).
#![deny(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

use litanyfs::helper;
use litanyfs::mount::{self, MountOptions};

/// Mount a litany agent-harness workspace as one live directory tree.
///
/// `--help` describes the tree from its one table ([`litanyfs::guide`]).
#[derive(Parser)]
#[command(name = "litanyfs", version = VERSION, after_long_help = environment())]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Mount SOURCE at MOUNTPOINT; returns once the mount answers.
    ///
    /// SOURCE is a workspace (a directory holding repo.git), or a home of workspaces:
    /// litany's data root, yog's data root, or any directory of workspaces. Without
    /// SOURCE, litany's data root ($LITANY_HOME, else $XDG_DATA_HOME/litany, else
    /// ~/.local/share/litany): every workspace `litany new` made.
    Mount {
        /// [SOURCE] MOUNTPOINT: the workspace or home, and an existing, empty directory.
        #[arg(num_args = 1..=2, required = true, value_names = ["SOURCE", "MOUNTPOINT"])]
        paths: Vec<PathBuf>,
        #[command(flatten)]
        opts: MountOptions,
    },
    /// Unmount a litanyfs mount; its daemon then exits.
    Unmount { mountpoint: PathBuf },
    /// Create a home of two sample workspaces in DIR/home, mount it at DIR/mnt, and print
    /// a tour.
    ///
    /// DIR must be yours and writable by you alone (it is created 0700 if missing);
    /// without DIR, a new private directory under $TMPDIR (or /tmp) is made. Run again
    /// with the same DIR, it replaces the sample there.
    Demo { dir: Option<PathBuf> },
    /// Print the completions for SHELL, generated from these definitions.
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print the man page litanyfs.1, generated from these definitions.
    Man,
}

/// The environment the command reads, for `--help` and the man page.
fn environment() -> String {
    let vars = [
        ("RUST_LOG", "the log filter (default: info)".to_string()),
        (
            "XDG_STATE_HOME",
            "daemons log in $XDG_STATE_HOME/litanyfs/ (else ~/.local/state/litanyfs/)".into(),
        ),
        (
            "HOME",
            "when unset, taken from the password database".into(),
        ),
        (
            "PATH",
            format!(
                "where `litany` is found to wake agents; when unset, this binary's \
                 directory, then {}",
                helper::DEFAULT_PATH
            ),
        ),
        (
            "NOTIFY_SOCKET",
            "with --foreground, told READY=1 once the mount answers, STOPPING=1 when it \
             goes (systemd Type=notify)"
                .into(),
        ),
    ];
    let mut out = String::from("Environment:\n");
    for (name, what) in vars {
        out.push_str(&litanyfs::guide::item(name, &what));
    }
    out.trim_end().to_string()
}

fn init_logging() {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info,fuser=error"))
        .init();
}

/// The command line as clap defines it, with the tree described (from its one table)
/// and the `-o` spelling of each mount option.
fn command() -> clap::Command {
    let cmd = Cli::command();
    let about = cmd.get_about().map(|a| a.to_string()).unwrap_or_default();
    // mut_subcommands keeps the subcommands' order (mut_subcommand moves one last).
    cmd.long_about(litanyfs::guide::help(&about))
        .mut_subcommands(|sub| {
            if sub.get_name() == "mount" {
                helper::document(sub)
            } else {
                sub
            }
        })
}

/// The crate's version, and the commit it was built from when built from a checkout
/// (see build.rs).
const VERSION: &str = env!("LITANYFS_VERSION");

/// `--version`: the version, and what the kernel granted at the last mount logged.
fn long_version() -> String {
    let dir = mount::log_dir().ok();
    format!(
        "{}\n{}",
        VERSION,
        litanyfs::kernel::version_note(dir.as_deref())
    )
}

/// Parses this process's arguments in either form (`litanyfs mount WS MNT --flags` or
/// mount(8)'s `litanyfs WS MNT -o options`); on a mistake, the mount form says it in
/// one line and the subcommands as clap does.
fn parse() -> Result<Cli, String> {
    let cmd = command();
    let mut names: Vec<&str> = vec!["help"];
    for sub in cmd.get_subcommands() {
        names.push(sub.get_name());
        names.extend(sub.get_all_aliases());
    }
    let line = helper::command_line(std::env::args_os().collect(), &names)?;
    // Reading the logs costs a little, so only when asked.
    let cmd = if line.args.get(1).is_some_and(|a| a == "--version") {
        cmd.long_version(long_version())
    } else {
        cmd
    };
    let parsed = cmd
        .try_get_matches_from(line.args)
        .and_then(|m| Cli::from_arg_matches(&m));
    match parsed {
        Ok(cli) => Ok(cli),
        Err(e) if line.helper => {
            let text = e.render().to_string();
            let first = text.lines().next().unwrap_or_default();
            Err(first.trim_start_matches("error: ").to_string())
        }
        Err(e) => e.exit(),
    }
}

fn main() -> ExitCode {
    // SAFETY: first thing in main, before any thread exists.
    unsafe { helper::settle_environment() };
    init_logging();
    // Internal, so not among the subcommands a user is shown.
    if let Some(code) = litanyfs::sentinel::run_if_called() {
        return code;
    }
    let args = match parse() {
        Ok(args) => args,
        Err(why) => {
            eprintln!("litanyfs: {why}");
            return ExitCode::FAILURE;
        }
    };
    let result = match args.command {
        Cmd::Mount { paths, opts } => match source_and_mountpoint(paths) {
            Ok((workspace, mountpoint)) => if opts.foreground {
                mount::run(&workspace, &mountpoint, &opts)
            } else {
                mount::spawn_daemon(&workspace, &mountpoint, &opts).map(|log| {
                    eprintln!(
                        "litanyfs: mounted {} at {} (log: {})",
                        workspace.display(),
                        mountpoint.display(),
                        log.display()
                    );
                })
            }
            .map_err(|e| e.to_string()),
            Err(why) => Err(why),
        },
        Cmd::Unmount { mountpoint } => mount::unmount(&mountpoint).map_err(|e| e.to_string()),
        Cmd::Demo { dir } => demo(dir.as_deref()),
        Cmd::Completions { shell } => print(&litanyfs::manual::completions(shell, &mut command())),
        Cmd::Man => litanyfs::manual::man_page(&command())
            .map_err(|e| e.to_string())
            .and_then(|page| print(&page)),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(why) => {
            eprintln!("litanyfs: {why}");
            ExitCode::FAILURE
        }
    }
}

/// `[SOURCE] MOUNTPOINT`: without SOURCE, litany's data root as litany resolves it.
fn source_and_mountpoint(mut paths: Vec<PathBuf>) -> Result<(PathBuf, PathBuf), String> {
    let mountpoint = paths.pop().ok_or("no MOUNTPOINT given")?;
    let source = match paths.pop() {
        Some(s) => s,
        None => litanyfs::home::litany_data_root().ok_or(
            "no SOURCE given, and litany's data root is unknown: \
             set LITANY_HOME or HOME, or name the workspace",
        )?,
    };
    Ok((source, mountpoint))
}

/// Writes `bytes` to stdout.
fn print(bytes: &[u8]) -> Result<(), String> {
    use std::io::Write;
    std::io::stdout()
        .write_all(bytes)
        .map_err(|e| format!("stdout: {e}"))
}

fn demo(dir: Option<&std::path::Path>) -> Result<(), String> {
    use litanyfs::demo;
    let dir = demo::demo_dir(dir).map_err(|e| format!("demo directory: {e}"))?;
    let home = dir.join("home");
    let mnt = dir.join("mnt");
    if mount::mounted_type(&std::path::absolute(&mnt).map_err(|e| e.to_string())?).is_some() {
        mount::unmount(&mnt).map_err(|e| e.to_string())?;
    }
    if home.exists() {
        std::fs::remove_dir_all(&home).map_err(|e| format!("{}: {e}", home.display()))?;
    }
    std::fs::create_dir_all(&mnt).map_err(|e| format!("{}: {e}", mnt.display()))?;
    // Two samples, their ids kept apart by their seeds; the tour walks the first.
    let samples: Vec<demo::Sample> = (0..demo::HOME_WORKSPACES.len() as u32)
        .map(demo::Sample::now)
        .collect();
    for (name, sample) in demo::HOME_WORKSPACES.iter().zip(&samples) {
        demo::build(&home.join(name), sample)
            .map_err(|e| format!("building the sample workspace {name}: {e}"))?;
    }
    let sample = &samples[0];
    let opts = MountOptions {
        no_wake: true,
        ..MountOptions::default()
    };
    let log = mount::spawn_daemon(&home, &mnt, &opts).map_err(|e| e.to_string())?;
    let bin = std::env::current_exe().unwrap_or_else(|_| "litanyfs".into());
    print!("{}", demo::tour(&mnt, sample, &bin));
    println!("The daemon logs to {}", log.display());
    Ok(())
}
