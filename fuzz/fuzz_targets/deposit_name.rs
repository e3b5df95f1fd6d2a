//! The inbox file-name grammar: what the deposit engine names a message, and
//! what a drain then accepts, must agree for every sender and sequence.
#![no_main]

use libfuzzer_sys::fuzz_target;
use litanyfs::deposit::validate::sender_shape_ok;
use litanyfs::workspace::ids::is_component;
use litanyfs::workspace::inbox::{
    USER_SENDER, message_filename, next_sequence, pending_sender, sequence_of,
};

/// A sender whose deposits a drain takes: `user`, or an agent id (one path component)
/// that is not a dotfile. Every sender the deposit engine accepts is one.
fn drained(sender: &str) -> bool {
    let drained = sender == USER_SENDER || (is_component(sender) && !sender.starts_with('.'));
    assert!(drained || !sender_shape_ok(sender), "{sender:?}");
    drained
}

fuzz_target!(|input: (String, u32, Vec<String>)| {
    let (sender, seq, names) = input;

    // A name litany would give, read back by the drain and by next_sequence.
    let name = message_filename(&sender, seq);
    assert_eq!(sequence_of(&name, &sender), Some(seq), "{name:?}");
    for s in [sender.as_str(), USER_SENDER, "20261202T094226Z-0122ccc2"] {
        if drained(s) {
            let name = message_filename(s, seq);
            assert_eq!(pending_sender(&name), Some(s), "{name:?}");
            assert_eq!(sequence_of(&name, s), Some(seq), "{name:?}");
        }
    }

    // Arbitrary names: the drain's view and the sequence's view agree.
    for n in &names {
        if let Some(s) = pending_sender(n) {
            assert!(
                sequence_of(n, s).is_some(),
                "{n:?} is {s:?}'s but has no sequence"
            );
        }
        if drained(&sender) && sequence_of(n, &sender).is_some() {
            assert_eq!(pending_sender(n), Some(sender.as_str()), "{n:?}");
        }
    }

    // The next number is one no existing deposit of the sender has.
    let mut all: Vec<&str> = names.iter().map(String::as_str).collect();
    all.push(&name);
    match next_sequence(all.iter().copied(), &sender) {
        Some(next) => {
            for n in &all {
                assert_ne!(
                    sequence_of(n, &sender),
                    Some(next),
                    "{n:?} already has {next}"
                );
            }
            assert!(!all.contains(&message_filename(&sender, next).as_str()));
            assert!(next > seq);
        }
        None => assert!(
            all.iter()
                .any(|n| sequence_of(n, &sender) == Some(u32::MAX))
        ),
    }
});
