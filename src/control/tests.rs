use super::*;

fn parse(s: &str) -> Result<Command, ActError> {
    Command::parse(s.as_bytes())
}

fn argv(c: &Command) -> Vec<String> {
    c.argv(Path::new("/w"), "A")
        .unwrap()
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect()
}

#[test]
fn every_command_parses_from_what_echo_writes() {
    assert_eq!(parse("stop\n").unwrap(), Command::Stop);
    assert_eq!(parse("stop").unwrap(), Command::Stop);
    assert_eq!(parse("  nudge \r\n").unwrap(), Command::Nudge);
    assert_eq!(
        parse("interrupt do the other thing\nand this\n").unwrap(),
        Command::Interrupt("do the other thing\nand this".into())
    );
    assert_eq!(
        parse("retarget\n").unwrap(),
        Command::Retarget {
            config: None,
            role: None
        }
    );
    assert_eq!(
        parse("retarget alt\n").unwrap(),
        Command::Retarget {
            config: Some("alt".into()),
            role: None
        }
    );
    assert_eq!(
        parse("retarget role planner\n").unwrap(),
        Command::Retarget {
            config: None,
            role: Some("planner".into())
        }
    );
    assert_eq!(
        parse("retarget alt role planner\n").unwrap(),
        Command::Retarget {
            config: Some("alt".into()),
            role: Some("planner".into())
        }
    );
    assert_eq!(
        parse("workflow alt\n").unwrap(),
        Command::Workflow(Some("alt".into()))
    );
    assert_eq!(parse("workflow clear\n").unwrap(), Command::Workflow(None));
    assert_eq!(
        parse("delete Scout\n").unwrap(),
        Command::Delete {
            confirm: "Scout".into(),
            tree: false
        }
    );
    assert_eq!(
        parse("delete-tree Scout\n").unwrap(),
        Command::Delete {
            confirm: "Scout".into(),
            tree: true
        }
    );
}

#[test]
fn anything_else_is_einval_and_names_the_commands() {
    for bad in [
        "bogus\n",
        "",
        "\n",
        "stop now\n",
        "stop\nnudge\n",
        "interrupt\n",
        "interrupt   \n",
        "workflow\n",
        "retarget --config=x\n",
        "retarget alt role\n",
        "delete\n",
        "delete a b\n",
        "stopper\n",
    ] {
        let e = parse(bad).unwrap_err();
        assert_eq!(e.errno, libc::EINVAL, "{bad:?}");
        assert!(e.why.contains("interrupt TEXT"), "{bad:?}: {e}");
    }
    assert!(
        parse("bogus\n")
            .unwrap_err()
            .why
            .contains("unknown command \"bogus\"")
    );
    assert!(
        parse("stop now\n")
            .unwrap_err()
            .why
            .contains("stop: wrong arguments")
    );
    assert_eq!(parse("stop\u{0}\u{ff}").unwrap_err().errno, libc::EINVAL);
    assert_eq!(
        Command::parse(b"stop \xff\n").unwrap_err().errno,
        libc::EINVAL
    );
}

#[test]
fn each_command_is_litanys_own_verb_with_the_id_after_a_double_dash() {
    assert_eq!(argv(&Command::Stop), ["stop", "--", "/w", "A"]);
    assert_eq!(
        argv(&Command::Interrupt("x".into())),
        ["stop", "--", "/w", "A"]
    );
    assert_eq!(
        argv(&parse("retarget alt role planner").unwrap()),
        [
            "retarget",
            "--config=alt",
            "--role=planner",
            "--",
            "/w",
            "A"
        ]
    );
    assert_eq!(
        argv(&parse("retarget").unwrap()),
        ["retarget", "--", "/w", "A"]
    );
    assert_eq!(
        argv(&parse("workflow alt").unwrap()),
        ["workflow", "--config=alt", "--", "/w", "A"]
    );
    assert_eq!(
        argv(&parse("workflow clear").unwrap()),
        ["workflow", "--clear", "--", "/w", "A"]
    );
    assert_eq!(
        argv(&parse("delete A").unwrap()),
        ["delete", "--", "/w", "A"]
    );
    assert_eq!(
        argv(&parse("delete-tree A").unwrap()),
        ["delete", "--children", "--", "/w", "A"]
    );
    assert_eq!(Command::Nudge.argv(Path::new("/w"), "A"), None);
}

#[test]
fn descendants_are_by_the_id_grammar() {
    let root = "20261206T231853Z-171910ab";
    let child = "20261206T231853Z-171910ab-20261206T231853Z-20e59562";
    assert!(is_descendant(child, root));
    assert!(!is_descendant(root, root));
    assert!(!is_descendant(root, child));
    assert!(!is_descendant("20261206T231853Z-171910abc", root));
}

#[test]
fn the_policy_refuses_by_mount_and_by_confinement() {
    let root = "R-1";
    let child = "R-1-2-3";
    let open = Policy::default();
    assert!(open.has_ctl(root) && open.has_new());
    assert_eq!(open.allows(&Command::Stop, root), Ok(()));
    assert_eq!(open.allows_start(), Ok(()));

    let ro = Policy {
        read_only: true,
        confined: None,
    };
    assert!(ro.has_ctl(root) && ro.has_new());
    assert_eq!(
        ro.allows(&Command::Stop, root).unwrap_err().errno,
        libc::EROFS
    );
    assert_eq!(ro.allows_start().unwrap_err().errno, libc::EROFS);

    let agent = Policy {
        read_only: false,
        confined: Some(root.into()),
    };
    assert!(!agent.has_ctl(root) && agent.has_ctl(child) && !agent.has_new());
    for ok in ["stop", "nudge", "interrupt hey"] {
        assert_eq!(agent.allows(&parse(ok).unwrap(), child), Ok(()), "{ok}");
    }
    for refused in ["delete x", "delete-tree x", "retarget", "workflow clear"] {
        let e = agent.allows(&parse(refused).unwrap(), child).unwrap_err();
        assert_eq!(e.errno, libc::EPERM, "{refused}");
    }
    assert_eq!(
        agent.allows(&Command::Stop, root).unwrap_err().errno,
        libc::EPERM
    );
    assert_eq!(agent.allows_start().unwrap_err().errno, libc::EPERM);
}

#[test]
fn a_command_shows_in_an_event_without_the_interrupts_text() {
    assert_eq!(
        Command::Interrupt("secret plan".into()).describe(),
        "interrupt (11 bytes)"
    );
    assert_eq!(
        parse("retarget alt role r").unwrap().describe(),
        "retarget alt role r"
    );
    assert_eq!(parse("delete-tree S").unwrap().describe(), "delete-tree S");
    assert_eq!(errno_word(libc::EBUSY), "EBUSY");
}
