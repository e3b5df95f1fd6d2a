//! The mount(8) command line: `litanyfs WORKSPACE MOUNTPOINT -o OPTIONS`, as
//! `mount.fuse3` runs it for `mount -t fuse.litanyfs` and `/etc/fstab`, and the same
//! arguments under the name `mount.fuse.litanyfs`, as mount(8) runs a helper it finds in
//! `/sbin` (a symlink to this binary).
//!
//! Guarantees:
//! - Every option of `litanyfs mount` has an `-o` spelling, derived here from its clap
//!   definition ([`MountOptions`]): the long name with `_` for `-` (and each alias, so
//!   `ro` for `read_only`). An `-o` list is translated into `litanyfs mount` arguments
//!   and then parsed by clap like any command line, so both forms validate and default
//!   alike.
//! - The generic options mount(8), `mount.fuse3` and systemd pass ([`GENERIC`]) are
//!   accepted; an unknown option is refused with one line that names it (unless `-s`).
//! - With no `PATH` and no `HOME`, as mount(8) runs helpers (it clears both) and systemd
//!   runs units, [`settle_environment`] gives the process the ones a login would, so the
//!   harness and the default log file are found as from a shell.

use std::ffi::{OsStr, OsString};
use std::path::PathBuf;

use clap::{Arg, Args, Command};

use crate::mount::{MountOptions, SUBTYPE};

/// Generic mount options that litanyfs accepts, each group with what becomes of it.
pub const GENERIC: &[(&[&str], &str)] = &[
    (&["defaults", "rw"], "the defaults; `ro` is `read_only`"),
    (
        &["auto", "noauto", "nofail", "_netdev", "x-*", "comment=*"],
        "for mount -a and systemd's ordering; not seen by the filesystem",
    ),
    (
        &["user", "nouser", "users", "owner", "group"],
        "who may mount, checked by mount(8)",
    ),
    (
        &[
            "nosuid", "nodev", "suid", "dev", "noatime", "atime", "relatime",
        ],
        "litanyfs always mounts nosuid,nodev,noatime (mount.fuse3 adds suid,dev)",
    ),
    (&["exec", "noexec", "async"], "accepted and not applied"),
];

/// Whether `name` (the part before any `=`) is one of [`GENERIC`].
fn is_generic(option: &str) -> bool {
    let name = option.split_once('=').map_or(option, |(n, _)| n);
    GENERIC
        .iter()
        .flat_map(|(names, _)| names.iter())
        .any(|g| match g.strip_suffix('*') {
            Some(prefix) => option.starts_with(prefix),
            None => *g == name && !option.contains('='),
        })
}

/// The program names under which this binary is a mount helper: `mount.fuse.litanyfs`
/// (for `-t fuse.litanyfs`) and `mount.litanyfs` (for `-t litanyfs`).
pub(crate) fn helper_names() -> [String; 2] {
    [format!("mount.fuse.{SUBTYPE}"), format!("mount.{SUBTYPE}")]
}

/// The types a helper accepts with `-t`.
fn is_our_type(t: &str) -> bool {
    t == SUBTYPE || t.strip_prefix("fuse.") == Some(SUBTYPE)
}

/// The options of `litanyfs mount`, as clap defines them.
fn mount_args() -> Command {
    MountOptions::augment_args(Command::new("mount"))
}

/// An option's `-o` names: its long name and aliases, with `_` for `-`.
fn o_names(arg: &Arg) -> Vec<String> {
    arg.get_long()
        .into_iter()
        .chain(arg.get_all_aliases().unwrap_or_default())
        .map(|n| n.replace('-', "_"))
        .collect()
}

/// How an option is written after `-o`, e.g. `threads=N`, or `read_only` and `ro`.
fn o_spellings(arg: &Arg) -> Vec<String> {
    let takes_value = arg.get_action().takes_values();
    let value = arg
        .get_value_names()
        .and_then(|v| v.first())
        .map_or_else(|| arg.get_id().as_str().to_uppercase(), |v| v.to_string());
    o_names(arg)
        .iter()
        .map(|n| {
            if takes_value {
                format!("{n}={value}")
            } else {
                n.clone()
            }
        })
        .collect()
}

/// `litanyfs mount` documented with the `-o` spelling of each option and the form
/// mount(8) uses, for `--help`, the man page and the completions alike.
pub fn document(mount: Command) -> Command {
    let spellings: Vec<(String, String)> = mount_args()
        .get_arguments()
        .map(|a| (a.get_id().to_string(), o_spellings(a).join(" | ")))
        .collect();
    let generic: String = GENERIC
        .iter()
        .map(|(names, what)| crate::guide::item(&names.join(", "), what))
        .collect();
    mount
        .mut_args(|arg| {
            let Some((_, o)) = spellings.iter().find(|(id, _)| arg.get_id() == id.as_str()) else {
                return arg;
            };
            let note = format!("[-o {o}]");
            let help = arg.get_help().map(|h| format!("{h} {note}"));
            let long = arg.get_long_help().map(|h| format!("{h}\n\n{note}"));
            let arg = arg.help(help.unwrap_or(note));
            match long {
                Some(l) => arg.long_help(l),
                None => arg,
            }
        })
        .after_long_help(format!(
            "Every option can also be given as -o OPTION[,OPTION...], with the -o \
             spelling shown for it above, here and as mount(8) runs it (mount -t \
             fuse.{SUBTYPE}, /etc/fstab, or the helper mount.fuse.{SUBTYPE}):\n\n  \
             litanyfs mount WORKSPACE MOUNTPOINT -o OPTION[,OPTION...]\n  \
             litanyfs WORKSPACE MOUNTPOINT -o OPTION[,OPTION...]\n\n\
             Generic options are accepted:\n{generic}\nAny other option is refused."
        ))
}

/// The markdown tables of the options (both spellings and the meaning) and of the
/// generic options, as doc/USAGE.md shows them.
#[cfg(test)]
pub(crate) fn options_table() -> String {
    let mut t = String::from("| option | `-o` | meaning |\n|---|---|---|\n");
    for arg in mount_args().get_arguments() {
        let long = arg.get_long().unwrap_or_default();
        let flag = match arg.get_value_names().and_then(|v| v.first()) {
            Some(v) if arg.get_action().takes_values() => format!("--{long} {v}"),
            _ => format!("--{long}"),
        };
        let help = arg
            .get_long_help()
            .or(arg.get_help())
            .map(|h| {
                let h = h.to_string().replace("\n\n", " ").replace('\n', " ");
                h.trim_end_matches('.').to_string()
            })
            .unwrap_or_default();
        let default = arg
            .get_default_values()
            .first()
            .map(|d| format!(" (default {})", d.to_string_lossy()))
            .unwrap_or_default();
        let o = o_spellings(arg)
            .iter()
            .map(|s| format!("`{s}`"))
            .collect::<Vec<_>>()
            .join(", ");
        t.push_str(&format!("| `{flag}` | {o} | {help}{default} |\n"));
    }
    t.push_str("\n| generic `-o` option | in litanyfs |\n|---|---|\n");
    for (names, what) in GENERIC {
        let names: Vec<String> = names.iter().map(|n| format!("`{n}`")).collect();
        t.push_str(&format!("| {} | {what} |\n", names.join(", ")));
    }
    t
}

/// What the command line asks for, once the mount-helper form is recognised.
pub struct CommandLine {
    /// The arguments for clap: unchanged, or `litanyfs mount ... -- WORKSPACE MOUNTPOINT`.
    pub args: Vec<OsString>,
    /// Whether they came from the mount-helper form, whose errors are one line.
    pub helper: bool,
}

/// The command line to parse: `argv` itself; or, when it is the mount-helper form (the
/// program is one of [`helper_names`], or its first argument is `-o` or is neither an
/// option nor one of `subcommands` and a second follows), its translation into
/// `litanyfs mount`; or, for `litanyfs mount ...`, `argv` with each `-o OPTIONS` among
/// its arguments replaced by the flags it spells, so `-o` is taken wherever a mount(8)
/// user types it.
pub fn command_line(argv: Vec<OsString>, subcommands: &[&str]) -> Result<CommandLine, String> {
    let prog = argv.first().map(PathBuf::from).unwrap_or_default();
    let named = prog
        .file_name()
        .and_then(OsStr::to_str)
        .is_some_and(|n| helper_names().iter().any(|h| h == n));
    let first = argv.get(1).map(|a| a.as_encoded_bytes());
    let positional_first = argv.get(1).is_some_and(|a| {
        !a.as_encoded_bytes().starts_with(b"-") && !subcommands.iter().any(|s| a == *s)
    });
    let options_first = first.is_some_and(|a| a.starts_with(b"-o"));
    let helper = named || options_first || (positional_first && argv.len() > 2);
    if !helper {
        let args = if argv.get(1).is_some_and(|a| a == MOUNT) {
            with_o_expanded(argv)?
        } else {
            argv
        };
        return Ok(CommandLine {
            args,
            helper: false,
        });
    }
    Ok(CommandLine {
        args: translate(&argv[1..])?,
        helper: true,
    })
}

/// The subcommand whose arguments take `-o` as well.
const MOUNT: &str = "mount";

/// `litanyfs mount ARGS...` with each `-o OPTIONS` (or `-oOPTIONS`) before a `--`
/// replaced by the flags it spells ([`mount_flags`]); the value of a flag that takes
/// one is left alone, even if it starts with `-o`.
fn with_o_expanded(argv: Vec<OsString>) -> Result<Vec<OsString>, String> {
    let cmd = mount_args();
    let takes_value = |flag: &str| {
        flag.strip_prefix("--").is_some_and(|long| {
            !long.contains('=')
                && cmd
                    .get_arguments()
                    .any(|a| a.get_long() == Some(long) && a.get_action().takes_values())
        })
    };
    let mut out = Vec::with_capacity(argv.len());
    let mut it = argv.into_iter();
    out.extend(it.by_ref().take(2));
    while let Some(a) = it.next() {
        let s = a.to_string_lossy().into_owned();
        if s == "--" {
            out.push(a);
            out.extend(it.by_ref());
            break;
        }
        if s == "-o" {
            let value = it.next().ok_or("-o needs a value")?;
            let value = value.to_str().ok_or("-o: not UTF-8")?;
            out.extend(mount_flags(value, false)?);
        } else if let Some(list) = s.strip_prefix("-o") {
            out.extend(mount_flags(list, false)?);
        } else {
            let value = takes_value(&s).then(|| it.next()).flatten();
            out.push(a);
            out.extend(value);
        }
    }
    Ok(out)
}

/// `WORKSPACE MOUNTPOINT [-o OPTIONS]... [-t TYPE] [-n] [-s] [-v]` as `litanyfs mount`
/// arguments (with the program name `litanyfs`).
fn translate(args: &[OsString]) -> Result<Vec<OsString>, String> {
    let mut positional: Vec<&OsString> = Vec::new();
    let mut options: Vec<String> = Vec::new();
    let mut sloppy = false;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let s = a.to_string_lossy();
        match s.as_ref() {
            "--" => positional.extend(it.by_ref()),
            "-n" | "-v" => {}
            "-s" => sloppy = true,
            "-o" | "-t" => {
                let value = it
                    .next()
                    .ok_or_else(|| format!("{s} needs a value"))?
                    .to_str()
                    .ok_or_else(|| format!("{s}: not UTF-8"))?;
                if s == "-o" {
                    options.push(value.to_string());
                } else if !is_our_type(value) {
                    return Err(format!("type {value} is not fuse.{SUBTYPE}"));
                }
            }
            o if o.starts_with("-o") => options.push(o[2..].to_string()),
            o if o.starts_with('-') => {
                return Err(format!(
                    "unknown argument {o}: the mount form is `litanyfs WORKSPACE MOUNTPOINT \
                     -o OPTIONS` (see `litanyfs mount --help`)"
                ));
            }
            _ => positional.push(a),
        }
    }
    let [ws, mnt] = positional[..] else {
        return Err(format!(
            "expected WORKSPACE MOUNTPOINT, got {} argument(s) (see `litanyfs mount --help`)",
            positional.len()
        ));
    };
    let mut out: Vec<OsString> = vec!["litanyfs".into(), "mount".into()];
    out.extend(mount_flags(&options.join(","), sloppy)?);
    out.extend(["--".into(), ws.clone(), mnt.clone()]);
    Ok(out)
}

/// An `-o` list as `litanyfs mount` flags. A flag given twice is passed once, and of an
/// option given twice the last value counts, as mount(8) does.
fn mount_flags(list: &str, sloppy: bool) -> Result<Vec<OsString>, String> {
    let cmd = mount_args();
    let mut flags: Vec<(String, Option<String>)> = Vec::new();
    for option in list.split(',').filter(|o| !o.is_empty()) {
        let (name, value) = match option.split_once('=') {
            Some((n, v)) => (n, Some(v)),
            None => (option, None),
        };
        let Some(arg) = cmd
            .get_arguments()
            .find(|a| o_names(a).iter().any(|n| n == name))
        else {
            if is_generic(option) {
                log::debug!("mount option {option}: accepted, changes nothing");
                continue;
            }
            if sloppy {
                log::warn!("ignoring unknown mount option `{option}` (-s)");
                continue;
            }
            return Err(format!("unknown mount option `{option}`"));
        };
        let long = format!("--{}", arg.get_long().unwrap_or(name));
        let value = match (arg.get_action().takes_values(), value) {
            (true, Some(v)) => Some(v.to_string()),
            (true, None) => {
                return Err(format!(
                    "mount option `{name}` needs a value: {}",
                    o_spellings(arg).join(" or ")
                ));
            }
            (false, None) => None,
            (false, Some(_)) => return Err(format!("mount option `{name}` takes no value")),
        };
        flags.retain(|(l, _)| *l != long);
        flags.push((long, value));
    }
    Ok(flags
        .into_iter()
        .flat_map(|(l, v)| std::iter::once(l).chain(v))
        .map(OsString::from)
        .collect())
}

/// `PATH` when the process was given none: the directory of this binary first (where
/// `cargo install` puts both litanyfs and litany), then systemd's default.
pub const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Sets `PATH` (see [`DEFAULT_PATH`]) and `HOME` (the user's home from the password
/// database) when they are unset, as they are under mount(8) and may be under systemd:
/// the harness is looked up on `PATH`, the default log file lives under `HOME`, and the
/// harness itself needs both.
///
/// # Safety
/// Changes the environment: call before any other thread starts.
pub unsafe fn settle_environment() {
    if std::env::var_os("PATH").is_none() {
        let mut path = OsString::new();
        if let Some(dir) = std::env::current_exe()
            .ok()
            .and_then(|e| e.parent().map(PathBuf::from))
        {
            path.push(dir);
            path.push(":");
        }
        path.push(DEFAULT_PATH);
        // SAFETY: the caller guarantees no other thread runs.
        unsafe { std::env::set_var("PATH", path) };
    }
    if std::env::var_os("HOME").is_none()
        && let Some(home) = passwd_home()
    {
        // SAFETY: as above.
        unsafe { std::env::set_var("HOME", home) };
    }
}

pub(crate) use crate::home::layout::passwd_home;

#[cfg(test)]
mod tests {
    use super::*;

    fn line(args: &[&str]) -> Result<CommandLine, String> {
        command_line(
            args.iter().map(OsString::from).collect(),
            &["mount", "unmount", "demo", "help"],
        )
    }

    fn translated(args: &[&str]) -> Vec<String> {
        let l = line(args).unwrap();
        assert!(l.helper, "{args:?} not taken as the mount form");
        l.args
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect()
    }

    #[test]
    fn subcommands_and_options_are_left_alone() {
        for args in [
            &["litanyfs", "mount", "ws", "mnt", "--read-only"][..],
            &["litanyfs", "--version"],
            &["litanyfs", "unmount", "mnt"],
            &["litanyfs", "demo"],
            &["litanyfs", "typo"],
        ] {
            let l = line(args).unwrap();
            assert!(!l.helper, "{args:?}");
            assert_eq!(l.args, args.iter().map(OsString::from).collect::<Vec<_>>());
        }
    }

    #[test]
    fn every_option_has_an_o_spelling_that_parses_as_its_flag() {
        let all = crate::mount::tests::every_option();
        let (ws, mnt) = ("/srv/ws", "/mnt/ws");
        let list = format!(
            "foreground,log_file={},threads={},sender={},max_message_bytes={},harness={},\
             no_wake,read_only,cache_bytes={},agent={},allow_other,view_modes,\
             depositors=1001:1002,auto_unmount,prices={},nice=-7",
            all.log_file.as_ref().unwrap().display(),
            all.threads,
            all.sender,
            all.max_message_bytes,
            all.harness.as_ref().unwrap().display(),
            all.cache_bytes,
            all.agent.as_ref().unwrap(),
            all.prices.as_ref().unwrap().display(),
        );
        let args = translated(&["litanyfs", ws, mnt, "-o", &list]);
        assert_eq!(args[..2], ["litanyfs", "mount"]);
        assert_eq!(args[args.len() - 3..], ["--", ws, mnt]);
        let flags = &args[2..args.len() - 3];
        assert_eq!(MountOptions::parse_args(flags).unwrap(), all);
        // Every option is in that list: each one's flag was produced.
        for arg in mount_args().get_arguments() {
            let long = format!("--{}", arg.get_long().unwrap());
            assert!(flags.contains(&long), "{long} has no -o spelling here");
        }
    }

    #[test]
    fn generic_options_are_accepted_and_unknown_ones_named() {
        let args = translated(&[
            "/sbin/mount.fuse.litanyfs",
            "/srv/ws",
            "/mnt/ws",
            "-o",
            "rw,nosuid,nodev,noexec,agent=ID,ro,read_only,allow_other,nofail,_netdev,user,\
             defaults,noauto,x-systemd.automount,x-systemd.requires=a.mount,dev,suid",
            "-t",
            "fuse.litanyfs",
        ]);
        assert_eq!(
            args,
            [
                "litanyfs",
                "mount",
                "--agent",
                "ID",
                "--read-only",
                "--allow-other",
                "--",
                "/srv/ws",
                "/mnt/ws"
            ]
        );
        let err = line(&["litanyfs", "w", "m", "-o", "ro,bogus=1"])
            .err()
            .unwrap();
        assert_eq!(err, "unknown mount option `bogus=1`");
        assert!(line(&["litanyfs", "w", "m", "-s", "-o", "ro,bogus"]).is_ok());
        let err = line(&["litanyfs", "w", "m", "-o", "threads"])
            .err()
            .unwrap();
        assert!(err.contains("threads=N"), "{err}");
        let err = line(&["litanyfs", "w", "m", "-o", "ro=1"]).err().unwrap();
        assert!(err.contains("takes no value"), "{err}");
        let err = line(&["mount.litanyfs", "w", "m", "-t", "ext4"])
            .err()
            .unwrap();
        assert!(err.contains("ext4"), "{err}");
        let err = line(&["mount.litanyfs", "w"]).err().unwrap();
        assert!(err.contains("got 1"), "{err}");
        let err = line(&["litanyfs", "w", "m", "--read-only"]).err().unwrap();
        assert!(err.contains("unknown argument --read-only"), "{err}");
    }

    #[test]
    fn o_is_taken_after_the_mount_subcommand_and_first() {
        let args = |l: CommandLine| -> Vec<String> {
            l.args
                .iter()
                .map(|a| a.to_string_lossy().into_owned())
                .collect()
        };
        let l = line(&["litanyfs", "mount", "ws", "mnt", "-o", "ro,threads=2"]).unwrap();
        assert!(!l.helper);
        assert_eq!(
            args(l),
            [
                "litanyfs",
                "mount",
                "ws",
                "mnt",
                "--read-only",
                "--threads",
                "2"
            ]
        );
        let l = line(&["litanyfs", "mount", "-oro", "ws", "mnt", "--no-wake"]).unwrap();
        assert_eq!(
            args(l),
            ["litanyfs", "mount", "--read-only", "ws", "mnt", "--no-wake"]
        );
        // A flag's value is its own, even one spelt like -o; after `--`, nothing is.
        let l = line(&[
            "litanyfs",
            "mount",
            "--log-file",
            "-o",
            "w",
            "m",
            "--",
            "-o",
        ])
        .unwrap();
        assert_eq!(
            args(l),
            [
                "litanyfs",
                "mount",
                "--log-file",
                "-o",
                "w",
                "m",
                "--",
                "-o"
            ]
        );
        let err = line(&["litanyfs", "mount", "w", "m", "-o", "bogus"])
            .err()
            .unwrap();
        assert_eq!(err, "unknown mount option `bogus`");
        assert!(line(&["litanyfs", "mount", "w", "m", "-o"]).is_err());
        // Options before the positionals, as some mount(8) users write them.
        assert_eq!(
            translated(&["litanyfs", "-o", "ro", "/srv/ws", "/mnt/ws"]),
            [
                "litanyfs",
                "mount",
                "--read-only",
                "--",
                "/srv/ws",
                "/mnt/ws"
            ]
        );
        // Whatever clap then parses is the same options as the flags.
        let flags = &args(line(&["litanyfs", "mount", "w", "m", "-o", "ro,agent=X"]).unwrap())[4..];
        let parsed = MountOptions::parse_args(flags).unwrap();
        assert!(parsed.read_only);
        assert_eq!(parsed.agent.as_deref(), Some("X"));
    }

    #[test]
    fn last_value_wins() {
        let args = translated(&["litanyfs", "w", "m", "-o", "threads=2", "-o", "threads=3"]);
        assert_eq!(args[2..4], ["--threads", "3"]);
    }

    #[test]
    fn help_shows_each_o_spelling() {
        let mut cmd = document(mount_args());
        let help = cmd.render_long_help().to_string();
        for arg in mount_args().get_arguments() {
            let o = format!("[-o {}]", o_spellings(arg).join(" | "));
            assert!(help.contains(&o), "{o} missing from\n{help}");
        }
        assert!(help.contains("[-o read_only | ro]"), "{help}");
    }

    /// The copy of [`options_table`] in doc/USAGE.md sits between these two lines;
    /// `LITANYFS_BLESS=1 cargo test --lib helper` rewrites it.
    const USAGE_START: &str = "<!-- options: generated by helper::options_table -->\n";
    const USAGE_END: &str = "<!-- /options -->\n";

    #[test]
    fn the_usage_page_lists_every_option_as_defined() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/doc/USAGE.md");
        let usage = std::fs::read_to_string(path).unwrap();
        let start = usage
            .find(USAGE_START)
            .expect("doc/USAGE.md has the start marker");
        let body = start + USAGE_START.len();
        let end = body
            + usage[body..]
                .find(USAGE_END)
                .expect("doc/USAGE.md has the end marker");
        let table = options_table();
        if std::env::var_os("LITANYFS_BLESS").is_some() {
            let blessed = format!("{}{table}{}", &usage[..body], &usage[end..]);
            std::fs::write(path, blessed).unwrap();
        } else {
            assert_eq!(
                usage[body..end],
                table,
                "doc/USAGE.md's options differ from their definition; \
                 `LITANYFS_BLESS=1 cargo test --lib helper` rewrites them"
            );
        }
    }
}
