//! The address grammar, against litany 0.0.15's own parser, which is
//! copied below verbatim apart from names. The copy is itself checked
//! against the real `read_tool_output` on every shape of the fuzz corpus
//! and every shape listed here (`super::litany`), so the many generated
//! texts below are compared with litany's verdicts, not with a guess.

use super::Rng;
use crate::paging::address::{
    Address, Malformation, PAGE_BYTES, PageName, RecordPath, Stream, parse_page_name,
};

/// litany's `Address::parse` (read_tool_output/address.rs), returning
/// (record, agent, stream, offset).
pub(super) fn litany_parse(text: &str) -> Option<(String, String, String, usize)> {
    let (record, fragment) = text.rsplit_once('#')?;
    let (stream, offset) = fragment.rsplit_once('@')?;
    if !["stdout", "stderr"].contains(&stream) {
        return None;
    }
    let offset: usize = offset.parse().ok()?;
    let segments: Vec<&str> = record.split('/').collect();
    let [steps, agent_id, step, tools, tool_id, output] = segments.as_slice() else {
        return None;
    };
    let literals = *steps == "steps" && *tools == "tools" && *output == "output.json";
    let plain = |s: &str| !s.is_empty() && s != "." && s != "..";
    let named = plain(agent_id) && plain(tool_id);
    let numbered = !step.is_empty() && step.bytes().all(|b| b.is_ascii_digit());
    (literals && named && numbered).then(|| {
        (
            record.to_string(),
            (*agent_id).to_string(),
            stream.to_string(),
            offset,
        )
    })
}

/// Ours and litany's agree on `text`: both refuse it, or both accept it
/// with the same parts. An accepted address renders back to the record
/// as written.
fn agree(text: &str) {
    let theirs = litany_parse(text);
    let ours = Address::parse(text);
    match (&theirs, &ours) {
        (None, Err(e)) => {
            assert_eq!(e.given(), text);
            assert_eq!(
                e.to_string(),
                format!(
                    "malformed address {text:?}: expected steps/<agent-id>/<NNN>/tools/<tool-id>/\
                     output.json#<stdout|stderr>@<byte offset>, copied verbatim from the marker \
                     in the cut result"
                )
            );
        }
        (Some((record, agent, stream, offset)), Ok(a)) => {
            assert_eq!(&a.record.to_string(), record, "{text:?}");
            assert_eq!(a.record.agent(), agent, "{text:?}");
            assert_eq!(a.stream.as_str(), stream, "{text:?}");
            assert_eq!(a.offset, *offset as u64, "{text:?}");
            assert_eq!(a.to_string(), format!("{record}#{stream}@{offset}"));
            assert_eq!(Address::parse(&a.to_string()).as_ref(), Ok(a));
        }
        _ => panic!("{text:?}: litany {theirs:?}, ours {ours:?}"),
    }
}

/// Shapes litany refuses, with the reason ours gives.
pub(super) const REFUSED: &[(&str, Malformation)] = &[
    ("", Malformation::NoStream),
    ("steps/a/001/tools/t/output.json", Malformation::NoStream),
    (
        "steps/a/001/tools/t/output.json#stdout",
        Malformation::NoOffset,
    ),
    (
        "steps/a/001/tools/t/output.json@5#stdout",
        Malformation::NoOffset,
    ),
    (
        "steps/a/001/tools/t/output.json#stdlog@0",
        Malformation::Stream,
    ),
    (
        "steps/a/001/tools/t/output.json#STDOUT@0",
        Malformation::Stream,
    ),
    ("steps/a/001/tools/t/output.json#@0", Malformation::Stream),
    (
        "steps/a/001/tools/t/output.json#stdout@",
        Malformation::Offset,
    ),
    (
        "steps/a/001/tools/t/output.json#stdout@x",
        Malformation::Offset,
    ),
    (
        "steps/a/001/tools/t/output.json#stdout@-1",
        Malformation::Offset,
    ),
    (
        "steps/a/001/tools/t/output.json#stdout@-0",
        Malformation::Offset,
    ),
    (
        "steps/a/001/tools/t/output.json#stdout@+",
        Malformation::Offset,
    ),
    (
        "steps/a/001/tools/t/output.json#stdout@ 1",
        Malformation::Offset,
    ),
    (
        "steps/a/001/tools/t/output.json#stdout@1 ",
        Malformation::Offset,
    ),
    (
        "steps/a/001/tools/t/output.json#stdout@0x10",
        Malformation::Offset,
    ),
    (
        "steps/a/001/tools/t/output.json#stdout@1e3",
        Malformation::Offset,
    ),
    (
        "steps/a/001/tools/t/output.json#stdout@1.0",
        Malformation::Offset,
    ),
    (
        "steps/a/001/tools/t/output.json#stdout@١٢",
        Malformation::Offset,
    ),
    (
        "steps/a/001/tools/t/output.json#stdout@18446744073709551616",
        Malformation::Offset,
    ),
    (
        "steps/a/001/tools/t/output.json#stdout@99999999999999999999999",
        Malformation::Offset,
    ),
    (
        "steps/a/001/tools/t/output.json#stdout@5@6",
        Malformation::Stream,
    ),
    (
        "steps/a/001/tools/t/output.json#stdout@5#stderr",
        Malformation::NoOffset,
    ),
    (
        "steps/../001/tools/t/output.json#stdout@0",
        Malformation::Name,
    ),
    (
        "steps/./001/tools/t/output.json#stdout@0",
        Malformation::Name,
    ),
    (
        "steps/a/001/tools/../output.json#stdout@0",
        Malformation::Name,
    ),
    (
        "steps/a/001/tools/./output.json#stdout@0",
        Malformation::Name,
    ),
    (
        "steps//001/tools/t/output.json#stdout@0",
        Malformation::Name,
    ),
    (
        "steps/a/001/tools//output.json#stdout@0",
        Malformation::Name,
    ),
    ("steps/a//tools/t/output.json#stdout@0", Malformation::Step),
    (
        "steps/a/00x/tools/t/output.json#stdout@0",
        Malformation::Step,
    ),
    (
        "steps/a/-1/tools/t/output.json#stdout@0",
        Malformation::Step,
    ),
    (
        "steps/a/+1/tools/t/output.json#stdout@0",
        Malformation::Step,
    ),
    ("steps/a/١/tools/t/output.json#stdout@0", Malformation::Step),
    (
        "/steps/a/001/tools/t/output.json#stdout@0",
        Malformation::Segments,
    ),
    (
        "steps/a/001/tools/t/output.json/#stdout@0",
        Malformation::Segments,
    ),
    (
        "steps/a/001/tools/t/x/output.json#stdout@0",
        Malformation::Segments,
    ),
    (
        "steps/a/b/001/tools/t/output.json#stdout@0",
        Malformation::Segments,
    ),
    ("a/001/tools/t/output.json#stdout@0", Malformation::Segments),
    (
        "./steps/a/001/tools/t/output.json#stdout@0",
        Malformation::Segments,
    ),
    (
        "logs/a/001/tools/t/output.json#stdout@0",
        Malformation::Literal,
    ),
    (
        "Steps/a/001/tools/t/output.json#stdout@0",
        Malformation::Literal,
    ),
    (
        "steps/a/001/records/t/output.json#stdout@0",
        Malformation::Literal,
    ),
    (
        "steps/a/001/tools/t/input.json#stdout@0",
        Malformation::Literal,
    ),
    (
        "steps/a/001/tools/t/output.json #stdout@0",
        Malformation::Literal,
    ),
    (
        "steps\\a\\001\\tools\\t\\output.json#stdout@0",
        Malformation::Segments,
    ),
];

/// Shapes litany accepts that a reader might not expect.
pub(super) const ODD_BUT_LEGAL: &[&str] = &[
    // `usize::from_str` takes a plus sign and leading zeros.
    "steps/a/001/tools/t/output.json#stdout@+5",
    "steps/a/001/tools/t/output.json#stdout@007",
    "steps/a/001/tools/t/output.json#stdout@0",
    "steps/a/001/tools/t/output.json#stderr@18446744073709551615",
    // Any width of step, kept as written.
    "steps/a/1/tools/t/output.json#stdout@0",
    "steps/a/0/tools/t/output.json#stdout@0",
    "steps/a/000000000000000000000000000001/tools/t/output.json#stdout@0",
    // Segments may hold `#`, `@`, `...`, spaces, NUL and any Unicode.
    "steps/a#b/001/tools/t/output.json#stdout@1",
    "steps/a/001/tools/t@x/output.json#stdout@1",
    "steps/a/001/tools/t#stdout@9/output.json#stderr@1",
    "steps/.../001/tools/..../output.json#stdout@1",
    "steps/ a /001/tools/\t/output.json#stdout@1",
    "steps/\0/001/tools/\u{1}/output.json#stdout@1",
    "steps/агент/001/tools/工具😀/output.json#stdout@1",
    "steps/a\\b/001/tools/c:d/output.json#stdout@1",
];

const GOOD: &str = "steps/root-child/001/tools/toolu_01/output.json#stdout@2048";

#[test]
fn the_canonical_form_parses_and_renders_back() {
    let a = Address::parse(GOOD).expect("grammar");
    assert_eq!(a.record.agent(), "root-child");
    assert_eq!(a.record.step(), "001");
    assert_eq!(a.record.tool(), "toolu_01");
    assert_eq!(a.stream, Stream::Stdout);
    assert_eq!(a.offset, 2048);
    assert_eq!(a.to_string(), GOOD);
    assert_eq!(
        a.record.to_string(),
        "steps/root-child/001/tools/toolu_01/output.json"
    );
    assert_eq!(a.moved_to(6144).to_string(), GOOD.replace("2048", "6144"));
    assert_eq!(PAGE_BYTES, 4096);
}

#[test]
fn hostile_shapes_are_refused_exactly_as_litany_refuses_them() {
    for (text, kind) in REFUSED {
        agree(text);
        let err = Address::parse(text).expect_err(text);
        assert_eq!(err.kind(), *kind, "{text:?}");
    }
}

#[test]
fn odd_but_legal_shapes_are_accepted_exactly_as_litany_accepts_them() {
    for text in ODD_BUT_LEGAL {
        agree(text);
        Address::parse(text).expect(text);
    }
    let a = Address::parse("steps/a/001/tools/t/output.json#stdout@+5").expect("plus");
    assert_eq!(a.offset, 5);
    assert_eq!(a.to_string(), "steps/a/001/tools/t/output.json#stdout@5");
    let a = Address::parse("steps/a#b/001/tools/t/output.json#stdout@1").expect("hash");
    assert_eq!(a.record.agent(), "a#b");
}

/// Random texts built from the grammar's own pieces, so most of them are
/// near misses.
#[test]
fn generated_near_misses_agree_with_litany() {
    const PIECES: &[&str] = &[
        "steps",
        "tools",
        "output.json",
        "input.json",
        "/",
        "/",
        "/",
        "#",
        "@",
        "stdout",
        "stderr",
        "0",
        "1",
        "007",
        "+",
        "-",
        ".",
        "..",
        "",
        "a",
        "é",
        "18446744073709551616",
        " ",
        "\\",
    ];
    let mut rng = Rng::new(7);
    for _ in 0..20_000 {
        let mut text = String::new();
        for _ in 0..rng.below(14) {
            text.push_str(rng.pick(PIECES));
        }
        agree(&text);
    }
    // Mutations of a good address, one edit each.
    let good: Vec<char> = GOOD.chars().collect();
    for _ in 0..20_000 {
        let mut chars = good.clone();
        let at = rng.below(chars.len());
        match rng.below(3) {
            0 => {
                chars.remove(at);
            }
            1 => chars.insert(at, rng.pick(&['/', '#', '@', '.', '0', '+', '-', 'x', 'é'])),
            _ => chars[at] = rng.pick(&['/', '#', '@', '.', '0', '+', '-', 'x', 'é']),
        }
        agree(&chars.into_iter().collect::<String>());
    }
}

#[test]
fn record_paths_render_what_they_parse() {
    let r = RecordPath::parse("steps/a/0042/tools/t/output.json").expect("record");
    assert_eq!(r.step(), "0042");
    assert_eq!(r.to_string(), "steps/a/0042/tools/t/output.json");
    assert!(RecordPath::parse("steps/a/0042/tools/t/output.json#stdout@0").is_err());
    assert_eq!(RecordPath::new("a", "0042", "t"), Some(r.clone()));
    for (agent, step, tool) in [
        ("", "1", "t"),
        (".", "1", "t"),
        ("..", "1", "t"),
        ("a/b", "1", "t"),
        ("a", "", "t"),
        ("a", "1x", "t"),
        ("a", "1", ""),
        ("a", "1", ".."),
        ("a", "1", "x/y"),
    ] {
        assert_eq!(
            RecordPath::new(agent, step, tool),
            None,
            "{agent}/{step}/{tool}"
        );
    }
    // Whatever `new` accepts renders to a path the grammar accepts.
    for (agent, tool) in [("a#b", "t@u"), ("#", "@"), ("...", "x#stdout@1")] {
        let r = RecordPath::new(agent, "7", tool).expect("legal");
        let a = r.at(Stream::Stderr, 3);
        assert_eq!(Address::parse(&a.to_string()), Ok(a));
    }
}

#[test]
fn page_names_follow_the_same_grammar() {
    assert_eq!(
        parse_page_name("output.json#stdout@2048"),
        Some((Stream::Stdout, 2048))
    );
    assert_eq!(
        PageName::parse("output.json#stderr@0"),
        Some(PageName {
            stream: Stream::Stderr,
            offset: 0
        })
    );
    for bad in [
        "output.json",
        "output.json#stdout",
        "output.json#stdout@",
        "output.json#stdout@-1",
        "output.json#stdout@x",
        "output.json#stdout@18446744073709551616",
        "output.json#stdlog@0",
        "input.json#stdout@0",
        "output.json#x#stdout@0",
        "x/output.json#stdout@0",
        "/output.json#stdout@0",
        "#stdout@0",
        "",
        ".",
        "..",
    ] {
        assert_eq!(PageName::parse(bad), None, "{bad:?}");
    }
    // Exactly the names that complete an address litany accepts.
    let mut rng = Rng::new(11);
    const PIECES: &[&str] = &[
        "output.json",
        "#",
        "@",
        "stdout",
        "stderr",
        "0",
        "12",
        "+",
        "-",
        "/",
        "x",
    ];
    for _ in 0..20_000 {
        let mut name = String::new();
        for _ in 0..rng.below(7) {
            name.push_str(rng.pick(PIECES));
        }
        let full = format!("steps/a/001/tools/t/{name}");
        let theirs = litany_parse(&full).map(|(_, _, s, o)| (s, o as u64));
        let ours = parse_page_name(&name).map(|(s, o)| (s.as_str().to_string(), o));
        assert_eq!(ours, theirs, "{name:?}");
    }
    // Aliases parse, but only the canonical spelling is canonical.
    assert_eq!(
        parse_page_name("output.json#stdout@+5"),
        Some((Stream::Stdout, 5))
    );
    assert_eq!(
        parse_page_name("output.json#stdout@05"),
        Some((Stream::Stdout, 5))
    );
    assert_eq!(PageName::parse_canonical("output.json#stdout@+5"), None);
    assert_eq!(PageName::parse_canonical("output.json#stdout@05"), None);
    assert!(PageName::parse_canonical("output.json#stdout@5").is_some());
    assert!(PageName::parse_canonical("output.json#stdout@0").is_some());
    // A name placed under a record is that record's address.
    let record = RecordPath::parse("steps/a/001/tools/t/output.json").expect("record");
    let page = PageName::parse("output.json#stderr@9").expect("name");
    let a = page.within(&record);
    assert_eq!(a.to_string(), "steps/a/001/tools/t/output.json#stderr@9");
    assert_eq!(a.page_name(), page);
    assert_eq!(page.to_string(), "output.json#stderr@9");
}

#[test]
fn streams_are_the_two_exact_labels() {
    assert_eq!(Stream::parse("stdout"), Some(Stream::Stdout));
    assert_eq!(Stream::parse("stderr"), Some(Stream::Stderr));
    for bad in ["", "Stdout", "stdin", "stdout ", "stdоut"] {
        assert_eq!(Stream::parse(bad), None, "{bad:?}");
    }
    for s in Stream::ALL {
        assert_eq!(Stream::parse(s.as_str()), Some(s));
        assert_eq!(s.to_string(), s.as_str());
    }
}
