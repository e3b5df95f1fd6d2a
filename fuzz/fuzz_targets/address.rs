//! The continuation-address grammar on arbitrary UTF-8: `Address::parse`,
//! `PageName::parse` and `RecordPath::new`, and the round trips between them.
#![no_main]

use libfuzzer_sys::fuzz_target;
use litanyfs::paging::{Address, PageName, RecordPath};

/// A record path the page-name checks are made under.
const RECORD: &str = "steps/20261202T094226Z-0122ccc2/001/tools/toolu_1/";

fn named(segment: &str) -> bool {
    !segment.is_empty() && segment != "." && segment != ".." && !segment.contains('/')
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };

    // Whole addresses.
    if let Ok(a) = Address::parse(text) {
        let shown = a.to_string();
        assert_eq!(
            Address::parse(&shown).as_ref(),
            Ok(&a),
            "{text:?} -> {shown:?}"
        );
        assert!(named(a.record.agent()), "agent of {text:?}");
        assert!(named(a.record.tool()), "tool of {text:?}");
        let step = a.record.step();
        assert!(!step.is_empty() && step.bytes().all(|b| b.is_ascii_digit()));
        let record = a.record.to_string();
        assert_eq!(record.split('/').count(), 6, "{record:?}");
        assert_eq!(RecordPath::parse(&record).as_ref(), Ok(&a.record));
        // The mount's file name for the same page: the last component.
        let (_, name) = text.rsplit_once('/').expect("a record has slashes");
        assert_eq!(PageName::parse(name), Some(a.page_name()), "{text:?}");
        assert_eq!(a.page_name().within(&a.record), a);
        assert_eq!(a.moved_to(a.offset), a);
        // Canonical names are exactly the Display forms.
        let canonical = a.page_name().to_string();
        assert_eq!(PageName::parse_canonical(&canonical), Some(a.page_name()));
    }

    // Page names agree with whole addresses under a record.
    let page = PageName::parse(text);
    let full = Address::parse(&format!("{RECORD}{text}"));
    match (&page, &full) {
        (Some(p), Ok(a)) => {
            assert_eq!(p.within(&a.record), *a, "{text:?}");
            assert_eq!(PageName::parse(&p.to_string()), Some(*p));
        }
        (None, Err(_)) => {}
        _ => panic!("page name {text:?}: PageName says {page:?}, Address says {full:?}"),
    }
    if let Some(p) = PageName::parse_canonical(text) {
        assert_eq!(p.to_string(), text);
        assert_eq!(page, Some(p));
    }

    // Record paths built from parts render to paths that parse back.
    let mut parts = text.splitn(3, '\n');
    let (agent, step, tool) = (
        parts.next().unwrap_or(""),
        parts.next().unwrap_or(""),
        parts.next().unwrap_or(""),
    );
    if let Some(r) = RecordPath::new(agent, step, tool) {
        assert_eq!(
            RecordPath::parse(&r.to_string()).as_ref(),
            Ok(&r),
            "{text:?}"
        );
        assert_eq!((r.agent(), r.step(), r.tool()), (agent, step, tool));
    }
});
