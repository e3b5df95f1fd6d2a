//! The tour of the sample home: what to run in it, each line with what it shows, and
//! the private directory a demo runs in.

use std::path::{Path, PathBuf};

use super::{SEQ_TOOL, Sample};

/// One line of the tour: a command to run in the mount, what it shows, and whether it
/// is meant to be refused.
#[derive(Debug, Clone)]
pub struct Stop {
    pub command: String,
    pub(crate) says: &'static str,
    pub refused: bool,
}

fn stop(command: String, says: &'static str) -> Stop {
    Stop {
        command,
        says,
        refused: false,
    }
}

/// The shell variables the tour's commands use, with the values they stand for.
pub fn tour_vars(sample: &Sample) -> Vec<(&'static str, String)> {
    vec![
        ("R", sample.root.id.clone()),
        ("C", sample.child.id.clone()),
        ("H", sample.held.id.clone()),
    ]
}

/// The tour, each command run in the mount with [`tour_vars`] set (bash).
pub fn tour_stops(sample: &Sample) -> Vec<Stop> {
    let seq = format!("steps/$R/001/tools/{SEQ_TOOL}");
    let (r, c) = (sample.root.name, sample.child.name);
    vec![
        stop(
            "cat status".into(),
            "every agent now: state, newest step, mail waiting",
        ),
        stop(
            "tail -n 8 events".into(),
            "what happened, a line each (tail -f events follows it live)",
        ),
        stop(
            "cat steps/$R/latest/response.md".into(),
            "BoulderThunder's newest answer, as text (latest: its newest step)",
        ),
        stop(
            "less steps/$R/transcript.md".into(),
            "its whole conversation, each entry with its time",
        ),
        stop(
            "grep -o 'address [^ ]*' steps/$R/transcript.md".into(),
            "the continuation address litany printed where it cut seq's output",
        ),
        stop(
            format!("cat \"{seq}/output.json#stdout@2048\" | head -n 3"),
            "that address, as read_tool_output pages it",
        ),
        stop(
            format!("tail -n 2 {seq}/stdout"),
            "the whole decoded stream the pages slice",
        ),
        stop(
            format!("cat inbox/{r}/$C-001.md"),
            "PeachHollow's result, waiting for BoulderThunder (an inbox by name)",
        ),
        stop(
            format!("cat names/{c}/counts.txt"),
            "the child's work product, read from git",
        ),
        stop("cat marks/held/$H".into(), "CopperLantern's held call"),
        stop(
            format!("echo 'and now summarise' > inbox/{r}/note"),
            "a message: deposited as user-001.md (this mount does not wake agents)",
        ),
        stop("ls inbox/$R".into(), "the message beside the result"),
        Stop {
            command: format!("printf 'caf\\xe9\\n' > inbox/{r}/latin1"),
            says: "refused at the write: not UTF-8",
            refused: true,
        },
        Stop {
            command: "touch steps/x".into(),
            says: "refused: Read-only file system",
            refused: true,
        },
    ]
}

/// The sample home's workspaces, by directory name: the first is the one the tour walks
/// through, the second is there so that the home's root shows two.
pub const HOME_WORKSPACES: [&str; 2] = ["research", "ops"];

/// What to try once a home of the samples is mounted at `mnt` (its first workspace,
/// [`HOME_WORKSPACES`], is `sample`); `bin` is how to call this binary.
pub fn tour(mnt: &Path, sample: &Sample, bin: &Path) -> String {
    let m = mnt.display();
    let [first, second] = HOME_WORKSPACES;
    let home = format!(
        "A home of two sample workspaces, {first} and {second}, as `litany new` leaves \
         them under its data root: the mount shows each as a directory, and every agent \
         of both in its status and events."
    );
    let about = format!(
        "In {first}, a few minutes of three agents, as litany leaves them: {} ran a \
         command whose output litany cut, dispatched {}, and answered; {}'s result waits \
         in its inbox; {}'s call is held. The mount does not wake agents, so nothing moves \
         while you look. Try, in bash, one line at a time:",
        sample.root.name, sample.child.name, sample.child.name, sample.held.name
    );
    let mut out = format!(
        "litanyfs: a home of sample workspaces is mounted at {m}\n\n{}\n  ls {m}\n  \
         cat {m}/status\n\n{}\n  cd {m}/{first}\n",
        crate::guide::wrap(&home, 0, 80),
        crate::guide::wrap(&about, 0, 80)
    );
    for (var, value) in tour_vars(sample) {
        out += &format!("  {var}={value}\n");
    }
    for s in tour_stops(sample) {
        out += &format!("\n  # {}\n  {}\n", s.says, s.command);
    }
    out += &format!(
        "\nEverything else: {bin} --help, and README.md.\nUnmount with: {bin} unmount {m}\n",
        bin = bin.display()
    );
    out
}

/// The directory a demo runs in: `dir`, which must be the caller's and writable by no
/// one else when it exists (so nobody else can have placed a workspace or a link there),
/// and is created `0700` otherwise; or, with no `dir`, a new private one under the
/// temporary directory (`mkdtemp`).
pub fn demo_dir(dir: Option<&Path>) -> std::io::Result<PathBuf> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    let Some(dir) = dir else {
        let template = std::env::temp_dir().join("litanyfs-demo.XXXXXX");
        let mut bytes = std::ffi::CString::new(template.into_os_string().into_encoded_bytes())
            .map_err(std::io::Error::other)?
            .into_bytes_with_nul();
        // SAFETY: `bytes` is a NUL-terminated template mkdtemp fills in place.
        let made = unsafe { libc::mkdtemp(bytes.as_mut_ptr().cast()) };
        if made.is_null() {
            return Err(std::io::Error::last_os_error());
        }
        bytes.pop();
        // SAFETY: the bytes came from an OsString and mkdtemp replaced ASCII by ASCII.
        let path = unsafe { std::ffi::OsString::from_encoded_bytes_unchecked(bytes) };
        return Ok(PathBuf::from(path));
    };
    match std::fs::symlink_metadata(dir) {
        Ok(st) => {
            // SAFETY: geteuid cannot fail.
            let me = unsafe { libc::geteuid() };
            if !st.is_dir() || st.uid() != me || st.mode() & 0o022 != 0 {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::PermissionDenied,
                    format!(
                        "{}: not a directory of yours that only you can write to; \
                         give another DIR, or none for a private one",
                        dir.display()
                    ),
                ));
            }
            Ok(dir.to_path_buf())
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)?;
            Ok(dir.to_path_buf())
        }
        Err(e) => Err(e),
    }
}
