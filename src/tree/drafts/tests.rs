use super::*;

#[test]
fn create_get_rename_remove() {
    let d = Drafts::default();
    let a = d.create("x", OsStr::new("note"), 0o644).unwrap();
    assert_eq!(
        d.create("x", OsStr::new("note"), 0o644).unwrap_err(),
        DraftError::Exists
    );
    assert!(d.create("y", OsStr::new("note"), 0o644).is_ok());
    assert_eq!(d.get("x", OsStr::new("note")).unwrap().id, a.id);
    assert_eq!(d.listed("x").len(), 1);
    let p = d.create("x", OsStr::new(".note.swp"), 0o644).unwrap();
    assert!(p.is_private() && !a.is_private());
    d.rename("x", OsStr::new(".note.swp"), OsStr::new("note"));
    assert_eq!(d.get("x", OsStr::new("note")).unwrap().id, p.id);
    assert!(d.by_id(a.id).is_none(), "the replaced draft is gone");
    assert!(!d.get("x", OsStr::new("note")).unwrap().is_private());
    d.remove("x", OsStr::new("note"));
    assert!(d.get("x", OsStr::new("note")).is_none());
}

fn published(i: usize) -> Published {
    Published {
        name: format!("user-{i:03}.md"),
        path: format!("/w/inbox/x/user-{i:03}.md").into(),
        dev: 1,
        ino: i as u64,
    }
}

/// Marks `st` as sent as deposit `i`, just now (what the tree does at a deposit).
fn sent(st: &mut DraftState, i: usize) {
    st.sent(published(i));
}

/// Forgets every draft (as the last handles closing would).
fn forget_all(d: &Drafts) {
    let mut index = d.index.lock();
    index.by_name.clear();
    index.by_id.clear();
}

#[test]
fn every_transition_keeps_the_phase_and_the_totals_right() {
    let d = Drafts::default();
    let a = d.create("x", OsStr::new("note"), 0o644).unwrap();
    let mut st = a.state.lock();
    let writing = |dirty, refused| Phase::Writing { dirty, refused };
    assert_eq!(*st.phase(), writing(false, None));
    assert!(
        st.pending(),
        "an empty message is refused at its last close"
    );
    assert!(!st.closed());
    // Write, overwrite in the middle, extend with a hole.
    st.write(0, b"hello").unwrap();
    st.write(1, b"EL").unwrap();
    st.write(7, b"!").unwrap();
    assert_eq!(st.buf(), b"hELlo\0\0!");
    assert_eq!(*st.phase(), writing(true, None));
    assert_eq!(d.live_bytes(), 8);
    // Truncate down and up.
    st.truncate(2).unwrap();
    st.truncate(4).unwrap();
    assert_eq!(st.buf(), b"hE\0\0");
    assert_eq!(d.live_bytes(), 4);
    // A refused write: recorded, nothing changed; emptying it clears the refusal.
    st.refuse(Refused::TooLarge { len: 9, max: 8 });
    assert!(st.pending());
    assert_eq!(st.refused(), Some(Refused::TooLarge { len: 9, max: 8 }));
    st.truncate(0).unwrap();
    assert_eq!(st.refused(), None);
    st.write(0, b"whole").unwrap();
    // An attempt to send: no longer dirty, still being written.
    st.attempting();
    assert!(!st.pending() && !st.closed());
    st.touch_content();
    assert!(st.pending());
    // Sent: its bytes move to the aliases' total.
    sent(&mut st, 1);
    assert!(st.closed() && !st.pending());
    assert_eq!((d.live_bytes(), d.alias_bytes()), (0, 5));
    assert_eq!(st.buf(), b"whole", "an alias still reads as what was sent");
    // Reused (O_TRUNC on the alias): a new, empty message.
    st.reuse();
    assert_eq!(*st.phase(), writing(false, None));
    assert_eq!((d.live_bytes(), d.alias_bytes()), (0, 0));
    st.write(0, b"cut").unwrap();
    // Given up (a killed writer): its content goes at once.
    st.give_up(Gone::Killed { pid: 7, signal: 9 });
    assert_eq!(*st.phase(), Phase::Gone(Gone::Killed { pid: 7, signal: 9 }));
    assert!(st.closed() && !st.pending() && st.buf().is_empty());
    assert_eq!((d.live_bytes(), d.alias_bytes()), (0, 0));
    st.reuse();
    // Closed empty: a writable open starts anew (there is nothing to append to).
    st.give_up(Gone::Empty);
    assert!(st.closed() && !st.pending() && st.closed_empty());
    st.reuse();
    st.write(0, b"again").unwrap();
    drop(st);
    assert_eq!(d.live_bytes(), 5);
    // Forgotten: its bytes leave the total with it.
    drop(a);
    forget_all(&d);
    assert_eq!((d.live_bytes(), d.alias_bytes()), (0, 0));
}

#[test]
fn deposited_drafts_are_unlisted_aliases_until_the_grace_passes() {
    let d = Drafts::default();
    let a = d.create("x", OsStr::new("note"), 0o644).unwrap();
    sent(&mut a.state.lock(), 1);
    assert!(d.listed("x").is_empty());
    assert!(d.get("x", OsStr::new("note")).is_some());
    assert_eq!(
        d.create("x", OsStr::new("note"), 0o644).unwrap_err(),
        DraftError::Exists,
        "an alias is reused by O_TRUNC, not replaced by a create"
    );
    a.state.lock().last_used = Instant::now() - ALIAS_GRACE - Duration::from_millis(1);
    assert!(d.get("x", OsStr::new("note")).is_none());
    assert!(d.listed("x").is_empty());
    assert!(d.by_id(a.id).is_none());
    // Past the grace the name is free for a new draft.
    assert!(d.create("x", OsStr::new("note"), 0o644).is_ok());
    // A gone draft is an alias too.
    let g = d.create("x", OsStr::new("cut"), 0o644).unwrap();
    g.state.lock().give_up(Gone::Cut(Refused::NoSpace));
    assert!(d.get("x", OsStr::new("cut")).is_some());
    assert!(!d.listed("x").iter().any(|l| l.id == g.id));
}

#[test]
fn renames_move_a_draft_between_public_and_private_names() {
    let d = Drafts::default();
    let a = d.create("x", OsStr::new(".f.swp"), 0o644).unwrap();
    assert!(a.is_private());
    d.rename("x", OsStr::new(".f.swp"), OsStr::new("f"));
    assert!(!a.is_private());
    assert_eq!(d.get("x", OsStr::new("f")).unwrap().id, a.id);
    assert!(d.get("x", OsStr::new(".f.swp")).is_none());
    d.rename("x", OsStr::new("f"), OsStr::new(".f~"));
    assert!(a.is_private());
    assert!(
        d.rename("x", OsStr::new("nothing"), OsStr::new("g"))
            .is_none()
    );
    let index = d.index.lock();
    assert_eq!(index.by_name.len(), index.by_id.len());
}

#[test]
fn aliases_give_way_to_new_messages() {
    // A fast sender: more messages within the alias grace than drafts may be held.
    // None is refused; the aliases used longest ago go first.
    let d = Drafts::default();
    let deposit = |a: &Arc<Draft>, i: usize| sent(&mut a.state.lock(), i);
    let mut made = Vec::new();
    for i in 0..MAX_DRAFTS * 3 {
        let a = d.create("x", OsStr::new(&format!("m{i}")), 0o644).unwrap();
        deposit(&a, i);
        made.push(a);
    }
    let last = made.last().unwrap();
    assert!(
        d.get("x", OsStr::new(&format!("m{}", MAX_DRAFTS * 3 - 1)))
            .is_some()
    );
    assert!(d.by_id(last.id).is_some());
    assert!(
        d.get("x", OsStr::new("m0")).is_none(),
        "the oldest alias stayed"
    );
    assert!(d.by_id(made[0].id).is_none());
    {
        let index = d.index.lock();
        assert!(index.by_name.len() <= MAX_DRAFTS);
        assert_eq!(index.by_name.len(), index.by_id.len());
    }
    // Messages still being written never give way.
    let live: Vec<_> = (0..MAX_DRAFTS)
        .map_while(|i| d.create("y", OsStr::new(&format!("w{i}")), 0o644).ok())
        .collect();
    assert_eq!(
        live.len(),
        MAX_DRAFTS,
        "aliases must make room for live drafts"
    );
    assert_eq!(
        d.create("y", OsStr::new("one-more"), 0o644).unwrap_err(),
        DraftError::Full
    );
    assert!(live.iter().all(|a| d.by_id(a.id).is_some()));
}

#[test]
fn aliases_keep_a_bounded_number_of_bytes() {
    let d = Drafts::default();
    let size = 1 << 20;
    let n = ALIAS_BYTES / size * 2;
    for i in 0..n {
        let a = d.create("x", OsStr::new(&format!("m{i}")), 0o644).unwrap();
        let mut st = a.state.lock();
        st.write(0, &vec![b'x'; size]).unwrap();
        sent(&mut st, i);
        drop(st);
        drop(a); // the writer's handle closed
        d.shed_aliases();
        assert!(
            d.alias_bytes() <= ALIAS_BYTES,
            "{} after {i}",
            d.alias_bytes()
        );
    }
    // The newest is still readable under its name; the oldest gave way.
    let newest = d.get("x", OsStr::new(&format!("m{}", n - 1))).unwrap();
    assert_eq!(newest.state.lock().buf().len(), size);
    assert!(d.get("x", OsStr::new("m0")).is_none());
    // Reusing a name for a new message takes its old content out of the total.
    let before = d.alias_bytes();
    newest.state.lock().reuse();
    assert_eq!(d.alias_bytes(), before - size);
    drop(newest);
    // Everything forgotten: nothing counted.
    forget_all(&d);
    assert_eq!(d.alias_bytes(), 0);
}

#[test]
fn messages_being_written_hold_a_bounded_number_of_bytes() {
    let d = Drafts::default();
    let mib = 1 << 20;
    let mut held = Vec::new();
    for i in 0..DRAFT_BYTES / mib {
        let a = d.create("x", OsStr::new(&format!("w{i}")), 0o644).unwrap();
        a.state.lock().truncate(mib).unwrap();
        held.push(a);
    }
    assert_eq!(d.live_bytes(), DRAFT_BYTES);
    let one_more = d.create("x", OsStr::new("one-more"), 0o644).unwrap();
    assert_eq!(
        one_more.state.lock().write(0, b"y").unwrap_err(),
        Refused::NoSpace
    );
    {
        let st = one_more.state.lock();
        assert!(st.buf().is_empty(), "a refused write grew the draft");
        assert_eq!(st.refused(), Some(Refused::NoSpace), "the cut is recorded");
    }
    // Shrinking, depositing and forgetting give the bytes back.
    held[0].state.lock().truncate(0).unwrap();
    one_more.state.lock().truncate(mib).unwrap();
    sent(&mut held[1].state.lock(), 1);
    assert_eq!(d.live_bytes(), DRAFT_BYTES - mib);
    assert_eq!(d.alias_bytes(), mib);
    drop(held);
    drop(one_more);
    forget_all(&d);
    assert_eq!((d.live_bytes(), d.alias_bytes()), (0, 0));
}

fn task(tgid: u32, how: Option<Exit>) -> Task {
    Task {
        tid: tgid + 1000,
        exit: how.map(|how| Exiting {
            tgid,
            how,
            start: None,
        }),
    }
}

#[test]
fn a_writer_is_its_id_and_start_time() {
    let w = Writer {
        tid: 80,
        start: Some(1000),
    };
    assert!(w.is(Some(1000)));
    assert!(!w.is(Some(2000)), "the id reused by a later task");
    assert!(w.is(None), "unknown now: the id decides");
    let unknown = Writer {
        tid: 80,
        start: None,
    };
    assert!(unknown.is(Some(2000)));
}

#[test]
fn the_last_close_sends_unless_a_writer_was_killed() {
    let running = task(1, None);
    let exiting = task(1, Some(Exit::Status(0)));
    let killed = task(1, Some(Exit::Signal(9)));
    let bystander_killed = task(2, Some(Exit::Signal(15)));
    // The writer closes and nobody else holds it: sent.
    assert_eq!(verdict(Some(&running), &[1], &[]), Verdict::Send);
    assert_eq!(verdict(Some(&exiting), &[1], &[]), Verdict::Send);
    // A dup, a forked child or an exec'ed program still holds it: wait.
    assert_eq!(verdict(Some(&running), &[1], &[1]), Verdict::Wait);
    assert_eq!(verdict(Some(&exiting), &[1], &[3]), Verdict::Wait);
    // The writer killed: dropped, even if others hold it.
    let drop = Verdict::Drop { pid: 1, signal: 9 };
    assert_eq!(verdict(Some(&killed), &[1], &[]), drop);
    assert_eq!(verdict(Some(&killed), &[2, 1], &[3]), drop);
    // A holder that never wrote (a `sleep`) killed: its close may still be the last.
    assert_eq!(verdict(Some(&bystander_killed), &[1], &[]), Verdict::Send);
    assert_eq!(verdict(Some(&bystander_killed), &[1], &[1]), Verdict::Wait);
    // A closer already gone (the release, or a task reaped before it was seen).
    assert_eq!(verdict(None, &[1], &[]), Verdict::Send);
}

#[test]
fn hands_stay_bounded() {
    let mut h = Hands::default();
    for i in 0..(witness::MAX_PROCESSES as u32 + 10) {
        h.held(i);
        h.held(i);
        h.wrote(i, Some(7));
        h.wrote(i, Some(7));
    }
    assert_eq!(h.holders.len(), witness::MAX_PROCESSES);
    assert_eq!(h.writers.len(), witness::MAX_PROCESSES);
}

/// Whether `buf` is text as a message being written may be: UTF-8, but for an
/// incomplete sequence at its very end.
fn text_so_far(buf: &[u8]) -> bool {
    match std::str::from_utf8(buf) {
        Ok(_) => true,
        Err(e) => e.error_len().is_none(),
    }
}

#[test]
fn a_write_that_makes_a_message_not_utf8_is_refused_at_that_write() {
    let d = Drafts::default();
    let a = d.create("x", OsStr::new("m"), 0o600).unwrap();
    let mut st = a.state.lock();
    st.write_text(0, b"caf").unwrap();
    // `printf '\xff\xfe bad'`: refused at once, nothing written, the message cut.
    assert_eq!(
        st.write_text(3, b"\xff\xfe bad\n"),
        Err(Refused::NotUtf8 { at: 3 })
    );
    assert_eq!(st.buf(), b"caf");
    assert_eq!(st.refused(), Some(Refused::NotUtf8 { at: 3 }));
    st.truncate(0).unwrap();
    // `echo $'caf\xe9'`: Latin-1, an invalid sequence inside one write.
    assert_eq!(
        st.write_text(0, b"caf\xe9\n"),
        Err(Refused::NotUtf8 { at: 3 })
    );
    st.truncate(0).unwrap();
    // A character cut across writes waits for its end...
    st.write_text(0, b"caf\xc3").unwrap();
    st.write_text(4, b"\xa9 ok").unwrap();
    assert_eq!(st.buf(), "café ok".as_bytes());
    // ...but not a cut followed by something that does not continue it.
    let len = st.buf().len();
    st.write_text(len, b"\xe2\x82").unwrap();
    assert_eq!(
        st.write_text(len + 2, b"x"),
        Err(Refused::NotUtf8 { at: len as u64 })
    );
    // Overwriting inside a character breaks it.
    st.truncate(0).unwrap();
    st.write_text(0, "é!".as_bytes()).unwrap();
    assert_eq!(st.write_text(1, b"x"), Err(Refused::NotUtf8 { at: 0 }));
    // A raw write (private scratch) is never checked.
    st.truncate(0).unwrap();
    st.write(0, b"\xff").unwrap();
    assert_eq!(st.refused(), None);
}

#[test]
fn the_incremental_check_agrees_with_checking_the_whole_message() {
    // Random writes of UTF-8 pieces and stray bytes at random offsets, and shrinking
    // truncates: each write is refused exactly when the whole message would then
    // not be text (the first bad byte named), and is applied exactly when not.
    let pieces: [&[u8]; 9] = [
        b"a",
        b"hello ",
        "é".as_bytes(),
        "€".as_bytes(),
        "😀".as_bytes(),
        b"\xc3",
        b"\xa9",
        b"\x82\xac",
        b"\xff",
    ];
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = |n: usize| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed % n as u64) as usize
    };
    let d = Drafts::default();
    let a = d.create("x", OsStr::new("m"), 0o600).unwrap();
    let (mut refused, mut applied) = (0, 0);
    for _ in 0..20_000 {
        let mut st = a.state.lock();
        if next(20) == 0 {
            let len = next(st.buf().len() + 1);
            st.truncate(len).unwrap();
            continue;
        }
        let mut data = Vec::new();
        for _ in 0..1 + next(3) {
            data.extend_from_slice(pieces[next(pieces.len())]);
        }
        let offset = next(st.buf().len() + 3);
        let before = st.buf().to_vec();
        let mut whole = before.clone();
        if whole.len() < offset + data.len() {
            whole.resize(offset + data.len(), 0);
        }
        whole[offset..offset + data.len()].copy_from_slice(&data);
        match st.write_text(offset, &data) {
            Ok(()) => {
                assert!(text_so_far(&whole), "{before:?} + {data:?}@{offset}");
                assert_eq!(st.buf(), whole);
                applied += 1;
            }
            Err(Refused::NotUtf8 { at }) => {
                let e = std::str::from_utf8(&whole).unwrap_err();
                assert!(e.error_len().is_some(), "{before:?} + {data:?}@{offset}");
                assert_eq!(at as usize, e.valid_up_to());
                assert_eq!(st.buf(), before, "a refused write changed the message");
                refused += 1;
                // Emptied and written again, as a writer that starts over would.
                st.truncate(0).unwrap();
            }
            Err(other) => panic!("{other:?}"),
        }
    }
    assert!(refused > 1000 && applied > 1000, "{refused} {applied}");
}

#[test]
fn the_number_of_drafts_is_bounded() {
    let d = Drafts::default();
    for i in 0..MAX_DRAFTS {
        d.create("x", OsStr::new(&format!("n{i}")), 0o644).unwrap();
    }
    assert_eq!(
        d.create("x", OsStr::new("one-more"), 0o644).unwrap_err(),
        DraftError::Full
    );
}
