//! A path shared by everyone who keeps it, one word wide.
//!
//! A large workspace's mount keeps a path for every entry the kernel holds (the inode
//! table's node) and one for every watched directory, hundreds of thousands of each, and
//! the tables that hold them are arrays of slots sized by their largest member. A
//! standard `Arc<Path>` is two words (pointer and length); a [`SharedPath`] keeps the
//! length beside the bytes, behind one pointer, so each of those slots is a word
//! smaller. Cloning is a reference count, as with `Arc`. Equality and hashing are the
//! [`Path`]'s own, so a `SharedPath` can stand wherever an `Arc<Path>` stood as a key.

use std::ffi::OsStr;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::ops::Deref;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use triomphe::ThinArc;

/// A shared, immutable path behind a single pointer.
#[derive(Clone)]
pub struct SharedPath(ThinArc<(), u8>);

impl SharedPath {
    pub fn new(path: &Path) -> Self {
        Self(ThinArc::from_header_and_slice(
            (),
            path.as_os_str().as_bytes(),
        ))
    }

    pub fn as_path(&self) -> &Path {
        Path::new(OsStr::from_bytes(&self.0.slice))
    }
}

impl Deref for SharedPath {
    type Target = Path;

    fn deref(&self) -> &Path {
        self.as_path()
    }
}

impl AsRef<Path> for SharedPath {
    fn as_ref(&self) -> &Path {
        self.as_path()
    }
}

impl std::borrow::Borrow<Path> for SharedPath {
    fn borrow(&self) -> &Path {
        self.as_path()
    }
}

impl PartialEq for SharedPath {
    fn eq(&self, other: &Self) -> bool {
        std::ptr::eq(self.0.ptr(), other.0.ptr()) || self.as_path() == other.as_path()
    }
}

impl Eq for SharedPath {}

impl Hash for SharedPath {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_path().hash(state)
    }
}

impl fmt::Debug for SharedPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_path(), f)
    }
}

impl From<&Path> for SharedPath {
    fn from(path: &Path) -> Self {
        Self::new(path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

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
    fn equal_and_hashed_as_the_path_it_holds() {
        let a = SharedPath::new(Path::new("steps/a/001/tools"));
        let b = SharedPath::new(Path::new("steps/a/001/tools"));
        assert_eq!(a, b);
        assert_ne!(a, SharedPath::new(Path::new("steps/a/002/tools")));
        assert_eq!(a.as_path(), Path::new("steps/a/001/tools"));
        assert_eq!(a.file_name(), Some(OsStr::new("tools")));
        // As a key, it is found by the path alone.
        let map: HashMap<SharedPath, u8> = HashMap::from([(a.clone(), 7)]);
        assert_eq!(map.get(Path::new("steps/a/001/tools")), Some(&7));
        assert_eq!(map.get(&b), Some(&7));
    }

    #[test]
    fn any_bytes_and_the_empty_path() {
        let odd = Path::new(OsStr::from_bytes(b"inbox/\xff\xfe/x"));
        assert_eq!(SharedPath::new(odd).as_path(), odd);
        assert_eq!(SharedPath::new(Path::new("")).as_path(), Path::new(""));
    }
}
