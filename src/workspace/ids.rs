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

#[cfg(test)]
mod tests {
    use super::*;

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
