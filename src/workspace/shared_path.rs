//! A relative path kept as a chain of shared parents, one word wide.
//!
//! A large workspace's mount keeps a path for every entry the kernel holds (the inode
//! table's node) and one for every watched directory: hundreds of thousands of each,
//! most of them deep under a handful of directories. A [`SharedPath`] is its last
//! component and a count on its parent's `SharedPath`, so the entries of one directory
//! share that directory's bytes instead of each repeating them (a step's record path is
//! some 60 bytes, its own name about 12). It is one pointer (the name's length is kept
//! beside its bytes), so the tables that hold one per slot stay a word smaller than with
//! an `Arc<Path>`. Cloning is a reference count.
//!
//! The whole path is made on demand ([`SharedPath::to_path`]); the components are borrowed
//! from the chain, root first, without allocating ([`SharedPath::components`]).
//! Equality and hashing are by the sequence of components, so two chains built apart
//! from the same path are equal, and a chain is only ever compared with a chain.

use std::ffi::OsStr;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use triomphe::ThinArc;

/// A shared, immutable relative path: its last component, and its parent.
#[derive(Clone)]
pub(crate) struct SharedPath(ThinArc<Option<SharedPath>, u8>);

impl SharedPath {
    /// The chain of `path`'s components (`.` and empty components dropped, as
    /// [`Path::components`] does). The empty path is one empty component.
    pub(crate) fn new(path: &Path) -> Self {
        let mut chain: Option<SharedPath> = None;
        for c in path.components() {
            let name = match c {
                Component::Normal(n) => n,
                other => other.as_os_str(),
            };
            chain = Some(Self::link(chain, name));
        }
        chain.unwrap_or_else(|| Self::link(None, OsStr::new("")))
    }

    fn link(parent: Option<SharedPath>, name: &OsStr) -> Self {
        Self(ThinArc::from_header_and_slice(parent, name.as_bytes()))
    }

    /// The entry `name` inside this path, sharing this path as its parent. A `name` of
    /// several components is split, as [`Path::join`] would.
    pub(crate) fn join(&self, name: &OsStr) -> Self {
        let path = Path::new(name);
        let mut parts = path.components();
        match (parts.next(), parts.next()) {
            (Some(Component::Normal(n)), None) => Self::link(Some(self.clone()), n),
            _ if path.is_absolute() => Self::new(path),
            _ => path.components().fold(self.clone(), |parent, c| {
                Self::link(Some(parent), c.as_os_str())
            }),
        }
    }

    /// The last component.
    pub(crate) fn file_name(&self) -> &OsStr {
        OsStr::from_bytes(&self.0.slice)
    }

    /// The path without its last component, if it has more than one.
    pub(crate) fn parent(&self) -> Option<&SharedPath> {
        self.0.header.header.as_ref()
    }

    /// How many components the path has.
    pub(crate) fn depth(&self) -> usize {
        std::iter::successors(Some(self), |p| p.parent()).count()
    }

    /// The components, root first, borrowed from the chain: `out` is filled with the
    /// first `out.len()` of them (or all, if fewer), and the count written is returned.
    pub(crate) fn components<'a>(&'a self, out: &mut [&'a OsStr]) -> usize {
        let depth = self.depth();
        let n = depth.min(out.len());
        for (i, p) in std::iter::successors(Some(self), |p| p.parent()).enumerate() {
            // Component `depth - 1 - i`, counted from the root.
            let at = depth - 1 - i;
            if at < n {
                out[at] = p.file_name();
            }
        }
        n
    }

    /// The whole path, made afresh.
    pub(crate) fn to_path(&self) -> PathBuf {
        // One walk up the chain, leaf first; the path is built root first from it.
        let names: Vec<&OsStr> = std::iter::successors(Some(self), |p| p.parent())
            .map(|p| p.file_name())
            .collect();
        let mut path = PathBuf::with_capacity(names.iter().map(|n| n.len() + 1).sum());
        path.extend(names.iter().rev());
        path
    }
}

impl PartialEq for SharedPath {
    fn eq(&self, other: &Self) -> bool {
        std::ptr::eq(self.0.ptr(), other.0.ptr())
            || (self.file_name() == other.file_name() && self.parent() == other.parent())
    }
}

impl Eq for SharedPath {}

impl Hash for SharedPath {
    fn hash<H: Hasher>(&self, state: &mut H) {
        if let Some(parent) = self.parent() {
            parent.hash(state);
        }
        state.write(self.file_name().as_bytes());
        state.write_u8(0xff);
    }
}

/// The path as [`Path::display`] shows it.
impl fmt::Display for SharedPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.to_path().display(), f)
    }
}

impl fmt::Debug for SharedPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.to_path(), f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn sp(s: &str) -> SharedPath {
        SharedPath::new(Path::new(s))
    }

    #[test]
    fn one_word_wide_and_an_option_costs_nothing() {
        assert_eq!(
            std::mem::size_of::<SharedPath>(),
            std::mem::size_of::<usize>()
        );
        assert_eq!(
            std::mem::size_of::<Option<SharedPath>>(),
            std::mem::size_of::<usize>()
        );
    }

    #[test]
    fn a_joined_entry_shares_its_parent() {
        let dir = sp("steps/a/001");
        let file = dir.join(OsStr::new("response.json"));
        assert!(std::ptr::eq(
            file.parent().map_or(std::ptr::null(), |p| p.0.ptr()),
            dir.0.ptr()
        ));
        assert_eq!(file.to_path(), Path::new("steps/a/001/response.json"));
        assert_eq!(file.file_name(), OsStr::new("response.json"));
        assert_eq!(file.depth(), 4);
        // Built apart, the same path: equal, and hashed alike.
        let apart = sp("steps/a/001/response.json");
        assert_eq!(file, apart);
        let map: HashMap<SharedPath, u8> = HashMap::from([(file.clone(), 7)]);
        assert_eq!(map.get(&apart), Some(&7));
        assert_ne!(file, sp("steps/a/002/response.json"));
        assert_ne!(file, sp("steps/a/001"));
        // A component boundary is part of the identity: `ab/c` is not `a/bc`.
        assert_ne!(sp("ab/c"), sp("a/bc"));
    }

    #[test]
    fn components_come_root_first_and_may_be_cut() {
        let p = sp("steps/a/001/tools/t1/output.json");
        let mut all = [OsStr::new(""); 8];
        assert_eq!(p.components(&mut all), 6);
        let names: Vec<_> = all[..6].iter().map(|s| s.to_str().unwrap_or("?")).collect();
        assert_eq!(names, ["steps", "a", "001", "tools", "t1", "output.json"]);
        let mut three = [OsStr::new(""); 3];
        assert_eq!(p.components(&mut three), 3);
        assert_eq!(
            three,
            [OsStr::new("steps"), OsStr::new("a"), OsStr::new("001")]
        );
    }

    #[test]
    fn joins_of_several_components_and_odd_bytes() {
        let base = sp("inbox");
        assert_eq!(base.join(OsStr::new("x/y")), sp("inbox/x/y"));
        assert_eq!(base.join(OsStr::new("x/y")).depth(), 3);
        let odd = OsStr::from_bytes(b"\xff\xfe");
        assert_eq!(base.join(odd).to_path(), Path::new("inbox").join(odd));
        assert_eq!(sp("").to_path(), Path::new(""));
        assert_eq!(sp("a//b/./c"), sp("a/b/c"));
    }
}
