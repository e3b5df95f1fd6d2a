//! Agent ids and other names that become path components.
//!
//! litany validates an id only as "one path component" (CONTRACT §2.2) and takes the
//! real list from the refs, so litanyfs does the same: an id is opaque, and the only
//! question asked of it is whether it is safe to use as exactly one component.

/// True when `s` is usable as exactly one path component: not empty, not `.` or `..`,
/// and free of `/`, `\` and NUL (litany's `is_component`).
pub fn is_component(s: &str) -> bool {
    !s.is_empty() && s != "." && s != ".." && !s.contains(['/', '\\', '\0'])
}

/// The parent of agent `id`: the id without its last two hyphen tokens (CONTRACT §2.2,
/// litany's `parent_of`); `None` for an id of two tokens or fewer (a root).
pub(crate) fn parent_of(id: &str) -> Option<&str> {
    let (rest, _short) = id.rsplit_once('-')?;
    let (parent, _ts) = rest.rsplit_once('-')?;
    (!parent.is_empty()).then_some(parent)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parents() {
        let root = "20261202T094226Z-0122ccc2";
        let child = "20261202T094226Z-0122ccc2-20261202T094300Z-00aa11bb";
        assert_eq!(parent_of(root), None);
        assert_eq!(parent_of(child), Some(root));
        assert_eq!(parent_of(&format!("{child}-x-y")), Some(child));
        assert_eq!(parent_of("a"), None);
        assert_eq!(parent_of("-a-b"), None);
    }

    #[test]
    fn components() {
        for ok in [
            "20261202T094226Z-0122ccc2",
            "user",
            "a b",
            "x.y",
            "...",
            "ü",
        ] {
            assert!(is_component(ok), "{ok:?}");
        }
        for bad in ["", ".", "..", "a/b", "a\\b", "a\0b", "/"] {
            assert!(!is_component(bad), "{bad:?}");
        }
    }
}
