//! A fixture workspace in a temporary directory that goes when the value does.

use litanyfs::fixture::Fixture;
use litanyfs::workspace::refs::Flavour;

pub struct Ws {
    _dir: tempfile::TempDir,
    pub f: Fixture,
}

impl Ws {
    /// An empty workspace (a bare `repo.git` with its first config commit).
    pub fn new(flavour: Flavour) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let f = Fixture::create(&dir.path().join("ws"), flavour).expect("fixture workspace");
        Self { _dir: dir, f }
    }
}
