//! The fold over synthetic events: every event kind, notes, attempts, and the
//! append-only rule.

use super::ev;
use super::{ndjson, render_all, render_closed, text};
use crate::records::response::takes_fast_path;

fn render(lines: &[String]) -> String {
    text(&render_all(&ndjson(lines))).to_string()
}

#[test]
fn an_empty_file_renders_nothing() {
    assert_eq!(render_all(b""), b"");
    assert_eq!(render_closed(b""), b"");
    // A blank line counts but shows nothing.
    assert_eq!(render_all(b"\n"), b"");
}

#[test]
fn text_blocks_stream_verbatim_and_the_attempt_ends_with_finish_and_usage() {
    let got = render(&[
        ev::start("msg_1"),
        ev::text_start(0),
        ev::text(0, "Hel"),
        ev::text(0, "lo, wörld € "),
        ev::text(0, "\"quoted\"\n"),
        ev::stop(0),
        ev::text_start(1),
        ev::stop(1),
        ev::text_start(2),
        ev::text(2, "second"),
        ev::stop(2),
        ev::usage(10, 3),
        ev::finish("stop"),
        ev::end(),
    ]);
    assert_eq!(
        got,
        "# attempt 1 · id msg_1 · model fake\n\n\
         ## text\n\nHello, wörld € \"quoted\"\n\n\n\
         ## text\n\n\n\n\
         ## text\n\nsecond\n\n\
         ## finish stop · usage input_tokens=10 output_tokens=3\n\n"
    );
}

#[test]
fn tool_calls_show_their_joined_input() {
    let got = render(&[
        ev::start("m"),
        ev::tool_start(0, "toolu_1", "bash"),
        ev::json(0, "{\"command\":\"echo \\"),
        ev::json(0, "\"größe € ```\\\"\"}"),
        ev::stop(0),
        ev::tool_start(1, "toolu_2", "read_file"),
        ev::json(1, "{\"path\":\"/tmp/ü\",\"limit\":5}"),
        ev::stop(1),
        ev::tool_start(2, "toolu_3", "cd"),
        ev::stop(2),
        ev::tool_start(3, "toolu_4", "bash"),
        ev::json(3, "{\"command\":"),
        ev::stop(3),
        ev::finish("tool_use"),
        ev::end(),
    ]);
    assert_eq!(
        got,
        "# attempt 1 · id m · model fake\n\n\
         ## tool_use bash (toolu_1)\n\n````sh\necho \"größe € ```\"\n````\n\n\
         ## tool_use read_file (toolu_2)\n\n```json\n{\n  \"limit\": 5,\n  \"path\": \"/tmp/ü\"\n}\n```\n\n\
         ## tool_use cd (toolu_3)\n\n```json\n{}\n```\n\n\
         ## tool_use bash (toolu_4)\n\n\
         ## tool input does not parse: EOF while parsing a value at line 1 column 11\n\n\
         ```text\n{\"command\":\n```\n\n\
         ## finish tool_use\n\n"
    );
}

#[test]
fn every_other_event_kind() {
    let lines = [
        r#"{"type":"message_start","v":2,"role":"assistant"}"#.to_string(),
        ev::thinking_start(0),
        ev::thinking(0, "let me think"),
        r#"{"type":"content_delta","index":0,"delta":{"signature_delta":"sig"}}"#.to_string(),
        ev::stop(0),
        r#"{"type":"content_start","index":1,"kind":{"redacted_thinking":{"data":"abcd"}}}"#
            .to_string(),
        ev::stop(1),
        r#"{"type":"content_start","index":2,"kind":{"image":{"media_type":"image/png"}}}"#
            .to_string(),
        r#"{"type":"content_delta","index":2,"delta":{"image_delta":"AAAA"}}"#.to_string(),
        ev::stop(2),
        r#"{"type":"content_start","index":3,"kind":{"web_search_tool_result":{"tool_use_id":"srv_1","content":[1]}}}"#
            .to_string(),
        ev::stop(3),
        r#"{"type":"content_start","index":4,"kind":{"server_tool_use":{"id":"srv_1","name":"web_search"}}}"#
            .to_string(),
        ev::json(4, r#"{"q":"x"}"#),
        ev::stop(4),
        r#"{"type":"content_start","index":5,"kind":{"hologram":{}}}"#.to_string(),
        ev::text(5, "not shown: litany skips this block"),
        ev::stop(5),
        r#"{"type":"ping","future":true}"#.to_string(),
        r#"{"type":"usage","input_tokens":1,"output_tokens":null,"cache_read_tokens":7,"context_window":9}"#
            .to_string(),
        ev::usage(2, 5),
        r#"{"type":"finish","reason":"refusal","category":"cyber","explanation":"no"}"#
            .to_string(),
        ev::end(),
    ];
    assert_eq!(
        render(&lines),
        "# attempt 1 · v 2\n\n\
         ## thinking\n\nlet me think\n\n\
         ## redacted_thinking (4 bytes)\n\n\
         ## image image/png\n\n4 bytes of base64\n\n\
         ## web_search_tool_result (srv_1)\n\n```json\n[\n  1\n]\n```\n\n\
         ## server_tool_use web_search (srv_1)\n\n```json\n{\n  \"q\": \"x\"\n}\n```\n\n\
         ## content hologram\n\n\
         ## finish refusal (cyber: no) · usage input_tokens=2 output_tokens=5 \
         cache_read_tokens=7 context_window=9\n\n"
    );
}

#[test]
fn a_line_that_does_not_parse_is_shown_with_its_number_and_rendering_goes_on() {
    let got = render(&[
        ev::start("m"),
        ev::text_start(0),
        ev::text(0, "before "),
        "{not json".to_string(),
        r#"{"type":"content_start"}"#.to_string(),
        ev::text(0, "after"),
        ev::stop(0),
        ev::end(),
    ]);
    assert_eq!(
        got,
        "# attempt 1 · id m · model fake\n\n\
         ## text\n\nbefore \n\n\
         ## line 4 does not parse: key must be a string at line 1 column 2 · \"{not json\"\n\n\
         ## line 5 does not parse: missing field `index` · \
         \"{\\\"type\\\":\\\"content_start\\\"}\"\n\n\
         ## text (continued)\n\nafter\n\n\
         ## finish (none)\n\n"
    );
    // Bytes that are not UTF-8 are refused like any other line, and shown lossily.
    let got = render_all(b"\xff\xfe\n");
    assert!(
        text(&got).starts_with("## line 1 does not parse: "),
        "{got:?}"
    );
}

#[test]
fn deltas_outside_their_block_are_noted_and_ignored() {
    let got = render(&[
        ev::start("m"),
        ev::text(0, "orphan"),
        ev::tool_start(1, "t", "bash"),
        ev::text(1, "wrong kind"),
        ev::json(1, "{}"),
        ev::stop(1),
        ev::end(),
    ]);
    assert_eq!(
        got,
        "# attempt 1 · id m · model fake\n\n\
         ## line 2: text_delta outside a matching block, ignored\n\n\
         ## tool_use bash (t)\n\n\
         ## line 4: text_delta outside a matching block, ignored\n\n\
         ```json\n{}\n```\n\n\
         ## finish (none)\n\n"
    );
}

#[test]
fn a_failed_attempt_shows_its_error_then_the_retry() {
    let got = render(&[
        ev::start("m1"),
        ev::text_start(0),
        ev::text(0, "partial"),
        ev::error(r#""transport""#, "connection reset"),
        ev::end(),
        ev::start("m2"),
        ev::error(r#"{"provider":{"status":503}}"#, "overloaded"),
        // No end: litany retries all the same.
        ev::start("m3"),
        ev::text_start(0),
        ev::text(0, "whole"),
        ev::stop(0),
        ev::finish("stop"),
        ev::end(),
    ]);
    assert_eq!(
        got,
        "# attempt 1 · id m1 · model fake\n\n\
         ## text\n\npartial\n\n\
         ## error transport: connection reset\n\n\
         # attempt 2 · id m2 · model fake\n\n\
         ## error provider 503: overloaded\n\n\
         # attempt 3 · id m3 · model fake\n\n\
         ## text\n\nwhole\n\n\
         ## finish stop\n\n"
    );
}

#[test]
fn a_half_stream_is_shown_when_the_next_attempt_starts_or_the_file_is_closed() {
    let got = render(&[
        ev::start("m1"),
        ev::text_start(0),
        ev::text(0, "cut"),
        ev::start("m2"),
        ev::end(),
    ]);
    assert_eq!(
        got,
        "# attempt 1 · id m1 · model fake\n\n\
         ## text\n\ncut\n\n\
         ## half stream: attempt 1 has no end event\n\n\
         # attempt 2 · id m2 · model fake\n\n\
         ## finish (none)\n\n"
    );
    // Closed in the middle of a block, and with a last line that never ended.
    let mut bytes = ndjson(&[ev::start("m"), ev::text_start(0), ev::text(0, "cut")]);
    bytes.extend_from_slice(br#"{"type":"content_delta","index":0,"delta":{"text_de"#);
    let open = text(&render_all(&bytes)).to_string();
    let closed = text(&render_closed(&bytes)).to_string();
    assert_eq!(open, "# attempt 1 · id m · model fake\n\n## text\n\ncut");
    assert_eq!(
        closed,
        format!(
            "{open}\n\n## line 4 does not parse: EOF while parsing a string at line 1 column 51 · \
             \"{{\\\"type\\\":\\\"content_delta\\\",\\\"index\\\":0,\\\"delta\\\":{{\\\"text_de\"\n\n\
             ## half stream: attempt 1 has no end event\n\n"
        )
    );
    // A closed file whose last attempt ended or failed adds nothing.
    let done = ndjson(&[ev::start("m"), ev::end()]);
    assert_eq!(render_closed(&done), render_all(&done));
    let failed = ndjson(&[ev::start("m"), ev::error(r#""auth""#, "no")]);
    assert_eq!(render_closed(&failed), render_all(&failed));
}

#[test]
fn events_before_a_message_start_open_an_attempt() {
    let got = render(&[ev::error(r#""config""#, "no row"), ev::end(), ev::end()]);
    assert_eq!(
        got,
        "# attempt 1\n\n## error config: no row\n\n# attempt 2\n\n## finish (none)\n\n"
    );
}

/// A stream that exercises every path, for the prefix properties.
fn busy_stream() -> Vec<String> {
    vec![
        ev::start("m1"),
        ev::thinking_start(0),
        ev::thinking(0, "hmm"),
        ev::stop(0),
        ev::text_start(1),
        ev::text(1, "héllo "),
        "garbage".to_string(),
        ev::text(1, "wörld"),
        ev::stop(1),
        ev::tool_start(2, "t1", "bash"),
        ev::json(2, "{\"command\":\"ls €\"}"),
        ev::stop(2),
        ev::error(r#""transport""#, "reset"),
        ev::end(),
        ev::start("m2"),
        ev::text_start(0),
        ev::text(0, "ok"),
        ev::usage(1, 1),
        ev::finish("stop"),
        ev::end(),
    ]
}

#[test]
fn the_rendering_of_a_prefix_is_a_prefix_of_the_rendering() {
    let bytes = ndjson(&busy_stream());
    let whole = render_all(&bytes);
    for cut in 0..=bytes.len() {
        let part = render_all(&bytes[..cut]);
        assert!(whole.starts_with(&part), "cut at byte {cut}");
        // Only complete lines count, so only complete UTF-8 is ever shown.
        assert!(std::str::from_utf8(&part).is_ok(), "cut at byte {cut}");
    }
}

#[test]
fn the_fast_path_reads_what_serde_reads() {
    let cases = [
        "plain",
        "",
        "wörld € 𝄞",
        "quote \" and backslash \\ and slash /",
        "tab\tnewline\ncr\r",
        "\u{1}\u{1f}",
        "\u{7f}\u{2028}",
    ];
    for t in cases {
        let fast = ev::text(3, t);
        assert!(takes_fast_path(fast.as_bytes()), "{fast}");
        // The same event with a space in it takes serde's path.
        let slow = fast.replacen("\"index\":", "\"index\": ", 1);
        assert!(!takes_fast_path(slow.as_bytes()), "{slow}");
        let frame = |l: &String| render(&[ev::start("m"), ev::text_start(3), l.clone()]);
        assert_eq!(frame(&fast), frame(&slow), "{t:?}");
        assert!(frame(&fast).ends_with(t), "{t:?}");
    }
    // Lines the fast path declines are serde's to refuse or accept.
    for line in [
        r#"{"type":"content_delta","index":01,"delta":{"text_delta":"x"}}"#,
        r#"{"type":"content_delta","index":4294967296,"delta":{"text_delta":"x"}}"#,
        "{\"type\":\"content_delta\",\"index\":0,\"delta\":{\"text_delta\":\"a\u{1}\"}}",
        r#"{"type":"content_delta","index":0,"delta":{"text_delta":"a"}}"}}"#,
        r#"{"type":"content_delta","index":0,"delta":{"text_delta":"\ud800"}}"#,
    ] {
        assert!(!takes_fast_path(line.as_bytes()), "{line}");
        let got = render(&[line.to_string()]);
        assert!(
            got.starts_with("## line 1 does not parse: "),
            "{line}: {got}"
        );
    }
    for line in [
        r#"{"type":"content_delta","index":4294967295,"delta":{"text_delta":"x"}}"#,
        r#"{"type":"content_delta","index":0,"delta":{"text_delta":"\ud83d\ude00"}}"#,
    ] {
        assert!(takes_fast_path(line.as_bytes()), "{line}");
    }
    // Hand-written escapes: the fast path and serde agree, or both refuse.
    for escaped in [
        r"\/\b\f\u00E9\u00e9",
        r"\x",
        r"\u12",
        r"\ud83d",
        r"\ud83dx",
        r"\ude00",
        r"a\",
    ] {
        let line =
            format!(r#"{{"type":"content_delta","index":0,"delta":{{"text_delta":"{escaped}"}}}}"#);
        let slow = line.replacen("\"index\":", "\"index\": ", 1);
        let frame = |l: &str| render(&[ev::text_start(0), l.to_string()]);
        let (fast, slow) = (frame(&line), frame(&slow));
        if slow.contains("does not parse") {
            assert!(fast.contains("does not parse"), "{escaped}: {fast}");
        } else {
            assert_eq!(fast, slow, "{escaped}");
        }
    }
    // Escapes decode as serde decodes them.
    let got = render(&[
        ev::text_start(0),
        r#"{"type":"content_delta","index":0,"delta":{"text_delta":"\ud83d\ude00\u00e9\n"}}"#
            .to_string(),
    ]);
    assert!(got.ends_with("😀é\n"), "{got:?}");
}
