use super::*;

/// A value of every option, each different from its default.
pub(crate) fn every_option() -> MountOptions {
    MountOptions {
        foreground: true,
        log_file: Some("/var/log/l og".into()),
        threads: 7,
        sender: "20261202T094226Z-0122ccc2".into(),
        max_message_bytes: 123,
        harness: Some("/opt/litany".into()),
        no_wake: true,
        read_only: true,
        cache_bytes: 456,
        agent: Some("20261202T094226Z-0122ccc2".into()),
        allow_other: true,
        view_modes: true,
        depositors: vec![1001, 1002],
        auto_unmount: true,
        prices: Some("/etc/prices.json".into()),
        nice: Some(-7),
    }
}

#[test]
fn every_option_reaches_the_daemon() {
    use clap::{Args, parser::ValueSource};
    let all = every_option();
    let args = all.to_args();
    assert_eq!(MountOptions::parse_args(&args).unwrap(), all, "{args:?}");
    // Each option was passed, so none equals its default and none is dropped.
    let cmd = MountOptions::augment_args(clap::Command::new("mount").no_binary_name(true));
    let matches = cmd.clone().try_get_matches_from(&args).unwrap();
    for arg in cmd.get_arguments() {
        assert_eq!(
            matches.value_source(arg.get_id().as_str()),
            Some(ValueSource::CommandLine),
            "--{} is not passed on",
            arg.get_id()
        );
    }
    assert_eq!(MountOptions::default().to_args(), Vec::<OsString>::new());
}

#[test]
fn defaults_are_the_command_lines() {
    let d = MountOptions::default();
    assert_eq!(d.threads, DEFAULT_THREADS);
    assert_eq!(d.sender, crate::workspace::inbox::USER_SENDER);
    assert_eq!(
        d.max_message_bytes,
        crate::deposit::DEFAULT_MAX_MESSAGE_BYTES
    );
    assert_eq!(d.cache_bytes, crate::tree::DEFAULT_PAGE_CACHE_BYTES);
    assert!(!d.foreground && !d.no_wake && !d.read_only && d.agent.is_none());
}

#[test]
fn a_homes_workspaces_share_one_pair_of_caches() {
    use crate::fixture::Fixture;
    use crate::workspace::refs::Flavour;
    let t = tempfile::tempdir().unwrap();
    let opts = MountOptions::default();
    let shared = crate::tree::Caches::new(opts.cache_bytes);
    let opener = home_opener(
        &opts,
        &t.path().join("mnt"),
        &Arc::new(Default::default()),
        &shared,
    );
    let open = |name: &str| {
        let f = Fixture::create(&t.path().join(name), Flavour::Litany).unwrap();
        let ws = Workspace::open(f.root()).unwrap();
        let views = crate::views::Views::new(f.root(), None);
        opener(&crate::home::WsKey::from(name), &ws, false, views).unwrap()
    };
    let (a, b) = (open("a"), open("b"));
    assert!(
        std::ptr::eq(a.pages(), b.pages()),
        "one page cache for the mount"
    );
    // A single mount's tree has its own.
    let f = Fixture::create(&t.path().join("c"), Flavour::Litany).unwrap();
    let caches = crate::tree::Caches::new(opts.cache_bytes);
    let ws = Workspace::open(f.root()).unwrap();
    let c = workspace_tree(&ws, &t.path().join("mnt"), &opts, false, None, &caches).unwrap();
    assert!(!std::ptr::eq(a.pages(), c.pages()));
}

#[test]
fn mountinfo_escapes() {
    assert_eq!(unescape_octal("/a\\040b"), "/a b");
    assert_eq!(unescape_octal("/a\\134b"), "/a\\b");
    assert_eq!(unescape_octal("/plain"), "/plain");
    assert_eq!(unescape_octal("/trail\\04"), "/trail\\04");
}

#[test]
fn preflight_refusals() {
    let t = tempfile::tempdir().unwrap();
    let ws = t.path().join("ws");
    std::fs::create_dir_all(ws.join("repo.git")).unwrap();
    let not_ws = t.path().join("plain");
    std::fs::create_dir(&not_ws).unwrap();
    let mnt = t.path().join("mnt");
    let err = preflight(&not_ws, &mnt).unwrap_err().to_string();
    assert!(err.contains("is not a workspace (no repo.git)"), "{err}");
    assert!(matches!(
        preflight(&ws, &mnt),
        Err(MountError::MountpointMissing(_))
    ));
    std::fs::write(&mnt, b"").unwrap();
    assert!(matches!(
        preflight(&ws, &mnt),
        Err(MountError::NotADirectory(_))
    ));
    std::fs::remove_file(&mnt).unwrap();
    std::fs::create_dir(&mnt).unwrap();
    std::fs::write(mnt.join("x"), b"").unwrap();
    assert!(matches!(preflight(&ws, &mnt), Err(MountError::NotEmpty(_))));
    std::fs::remove_file(mnt.join("x")).unwrap();
    assert!(preflight(&ws, &mnt).is_ok());
    assert!(matches!(
        preflight(&ws, Path::new("/proc")),
        Err(MountError::AlreadyMounted(_))
    ));
}
