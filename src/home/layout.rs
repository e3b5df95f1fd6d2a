//! What a mount's SOURCE is, and where a home's workspaces live.
//!
//! Nothing registers a workspace anywhere: a workspace is any directory holding a bare
//! `repo.git`, and finding them is a scan of the few directories each layout keeps them
//! in. A home is a list of [`Shelf`]s, each a backing directory whose children are
//! workspaces and the mount-relative directory that shows them:
//!
//! | SOURCE | shelves (backing dir → mount dir) |
//! |---|---|
//! | a workspace (holds `repo.git`) | none: a single mount |
//! | litany's data root (holds `workspaces/`) | `workspaces/` → the root; `replays/` → `replays/`, read-only |
//! | yog's data root (holds `world/litany/`) | `workspaces/` → the root (by name); `world/litany/workspaces/` → `world/` (by id); `world/litany/replays/` → `replays/`, read-only |
//! | any other directory | itself → the root |
//!
//! Each of yog's places is a shelf of its own, so a named workspace and one of the
//! world's can never collide, and replays are kept apart as litany and yog keep them.

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};

use crate::workspace::REPO_DIR;

/// litany's override of its data root (and config root): `LITANY_HOME`.
pub(crate) const LITANY_HOME_ENV: &str = "LITANY_HOME";
/// Where `litany new` puts a workspace under a data root, and yog its named ones.
pub(crate) const WORKSPACES_DIR: &str = "workspaces";
/// Where `litany replay` restores archives under a data root.
pub(crate) const REPLAYS_DIR: &str = "replays";
/// yog's embedded litany home, under yog's data root.
pub(crate) const YOG_WORLD_DIR: &str = "world/litany";
/// The mount directory of the workspaces yog's world creates.
pub(crate) const WORLD_SHELF: &str = "world";

/// The shelf directory names a home shows, as the one static string each is.
pub(crate) fn shelf_name(at: &str) -> &'static str {
    match at {
        WORLD_SHELF => WORLD_SHELF,
        _ => REPLAYS_DIR,
    }
}

/// A directory whose children are workspaces, and where the mount shows them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shelf {
    /// The backing directory (absolute).
    pub(crate) dir: PathBuf,
    /// The mount-relative directory showing its workspaces: `None` for the root.
    pub(crate) at: Option<&'static str>,
    /// Replays: read-only in spirit, so deposits there are refused.
    pub(crate) read_only: bool,
}

/// What a SOURCE is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// One workspace: today's single mount.
    Workspace(PathBuf),
    /// Every workspace on these shelves (`root` is the SOURCE as given, absolute).
    Home { root: PathBuf, shelves: Vec<Shelf> },
}

/// Whether `dir` is a workspace: it holds a bare `repo.git`.
pub(crate) fn is_workspace(dir: &Path) -> bool {
    dir.join(REPO_DIR).is_dir()
}

/// A child name that is never a workspace of a home: a dot name is private or a
/// workspace being created (`.<name>.yog-tmp-<pid>`, renamed into place when ready).
pub(crate) fn hidden(name: &OsStr) -> bool {
    name.as_encoded_bytes().starts_with(b".")
}

/// What `path` (absolute) is, as a mount's SOURCE.
pub fn classify(path: &Path) -> Source {
    if is_workspace(path) {
        return Source::Workspace(path.to_path_buf());
    }
    let shelf = |rel: &str, at, read_only| Shelf {
        dir: path.join(rel),
        at,
        read_only,
    };
    let world = path.join(YOG_WORLD_DIR);
    let shelves = if world.is_dir() {
        vec![
            shelf(WORKSPACES_DIR, None, false),
            Shelf {
                dir: world.join(WORKSPACES_DIR),
                at: Some(WORLD_SHELF),
                read_only: false,
            },
            Shelf {
                dir: world.join(REPLAYS_DIR),
                at: Some(REPLAYS_DIR),
                read_only: true,
            },
        ]
    } else if path.join(WORKSPACES_DIR).is_dir() {
        vec![
            shelf(WORKSPACES_DIR, None, false),
            shelf(REPLAYS_DIR, Some(REPLAYS_DIR), true),
        ]
    } else {
        vec![Shelf {
            dir: path.to_path_buf(),
            at: None,
            read_only: false,
        }]
    };
    Source::Home {
        root: path.to_path_buf(),
        shelves,
    }
}

/// litany's data root as litany resolves it: `$LITANY_HOME` when set and non-empty, else
/// `$XDG_DATA_HOME/litany` when that is set and non-empty, else `~/.local/share/litany`.
pub fn litany_data_root() -> Option<PathBuf> {
    data_root_from(
        std::env::var_os(LITANY_HOME_ENV).as_deref(),
        std::env::var_os("XDG_DATA_HOME").as_deref(),
        std::env::var_os("HOME")
            .map(PathBuf::from)
            .or_else(passwd_home)
            .as_deref(),
    )
}

/// [`litany_data_root`] from the three values it reads.
pub(crate) fn data_root_from(
    litany_home: Option<&OsStr>,
    xdg_data: Option<&OsStr>,
    home: Option<&Path>,
) -> Option<PathBuf> {
    let set = |v: Option<&OsStr>| v.filter(|v| !v.is_empty()).map(PathBuf::from);
    set(litany_home)
        .or_else(|| set(xdg_data).map(|x| x.join("litany")))
        .or_else(|| home.map(|h| h.join(".local/share/litany")))
}

/// The workspaces on `shelf` now, by directory name, sorted: children that hold
/// `repo.git` and are not [`hidden`]. A shelf that does not exist holds none.
pub(crate) fn scan(shelf: &Shelf) -> Vec<OsString> {
    let Ok(entries) = std::fs::read_dir(&shelf.dir) else {
        return Vec::new();
    };
    let mut names: Vec<OsString> = entries
        .filter_map(|e| e.ok())
        .map(|e| e.file_name())
        .filter(|n| !hidden(n) && is_workspace(&shelf.dir.join(n)))
        .collect();
    names.sort();
    names
}

/// The home directory of the real user, from the password database.
pub(crate) fn passwd_home() -> Option<PathBuf> {
    use std::os::unix::ffi::OsStrExt;
    let mut buf = vec![0 as libc::c_char; 16 * 1024];
    let mut pw = std::mem::MaybeUninit::<libc::passwd>::uninit();
    let mut found: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: getpwuid_r writes into `pw` and `buf`, both valid for their lengths, and
    // sets `found` to `pw` or null.
    let rc = unsafe {
        libc::getpwuid_r(
            libc::getuid(),
            pw.as_mut_ptr(),
            buf.as_mut_ptr(),
            buf.len(),
            &mut found,
        )
    };
    if rc != 0 || found.is_null() {
        return None;
    }
    // SAFETY: on success `pw` is initialised and `pw_dir` points into `buf`.
    let dir = unsafe { std::ffi::CStr::from_ptr((*found).pw_dir) };
    let dir = OsStr::from_bytes(dir.to_bytes());
    (!dir.is_empty()).then(|| PathBuf::from(dir))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ws(dir: &Path) {
        std::fs::create_dir_all(dir.join(REPO_DIR)).unwrap();
    }

    #[test]
    fn each_layout_has_its_shelves() {
        let t = tempfile::tempdir().unwrap();
        let one = t.path().join("one");
        ws(&one);
        assert_eq!(classify(&one), Source::Workspace(one.clone()));

        let litany = t.path().join("litany");
        ws(&litany.join("workspaces/ab12cd34"));
        let Source::Home { shelves, .. } = classify(&litany) else {
            panic!("a data root is a home");
        };
        assert_eq!(
            shelves
                .iter()
                .map(|s| (
                    s.dir.strip_prefix(&litany).unwrap().to_path_buf(),
                    s.at,
                    s.read_only
                ))
                .collect::<Vec<_>>(),
            [
                (PathBuf::from("workspaces"), None, false),
                (PathBuf::from("replays"), Some("replays"), true)
            ]
        );

        let yog = t.path().join("yog");
        ws(&yog.join("workspaces/research"));
        ws(&yog.join("world/litany/workspaces/0badf00d"));
        let Source::Home { shelves, .. } = classify(&yog) else {
            panic!("yog's data root is a home");
        };
        let ats: Vec<_> = shelves.iter().map(|s| (s.at, s.read_only)).collect();
        assert_eq!(
            ats,
            [
                (None, false),
                (Some("world"), false),
                (Some("replays"), true)
            ]
        );
        assert_eq!(shelves[1].dir, yog.join("world/litany/workspaces"));

        let plain = t.path().join("plain");
        std::fs::create_dir_all(&plain).unwrap();
        let Source::Home { shelves, .. } = classify(&plain) else {
            panic!("a directory of workspaces is a home");
        };
        assert_eq!(shelves.len(), 1);
        assert_eq!(
            (shelves[0].dir.as_path(), shelves[0].at),
            (plain.as_path(), None)
        );
    }

    #[test]
    fn a_scan_shows_workspaces_only_and_never_a_dot_temp() {
        let t = tempfile::tempdir().unwrap();
        ws(&t.path().join("b"));
        ws(&t.path().join("a"));
        ws(&t.path().join(".c.yog-tmp-42"));
        std::fs::create_dir_all(t.path().join("not-a-workspace")).unwrap();
        std::fs::write(t.path().join("file"), b"x").unwrap();
        let shelf = Shelf {
            dir: t.path().to_path_buf(),
            at: None,
            read_only: false,
        };
        assert_eq!(scan(&shelf), [OsString::from("a"), OsString::from("b")]);
        let missing = Shelf {
            dir: t.path().join("nope"),
            ..shelf
        };
        assert!(scan(&missing).is_empty());
    }

    #[test]
    fn the_data_root_resolves_as_litany_resolves_it() {
        let home = Path::new("/home/u");
        let r = |lh: Option<&str>, xdg: Option<&str>| {
            data_root_from(lh.map(OsStr::new), xdg.map(OsStr::new), Some(home))
        };
        assert_eq!(r(Some("/opt/l"), Some("/x")), Some(PathBuf::from("/opt/l")));
        assert_eq!(r(Some(""), Some("/x")), Some(PathBuf::from("/x/litany")));
        assert_eq!(
            r(None, Some("")),
            Some(PathBuf::from("/home/u/.local/share/litany"))
        );
        assert_eq!(data_root_from(None, None, None), None);
    }
}
