//! Step records: which backing names under `steps/` are records and which are the
//! harness's own scratch (CONTRACT §4).

/// The driver's stderr log beside an agent's numbered step directories.
pub(crate) const DRIVER_LOG: &str = "driver.log";

/// A step's raw model answer: the NDJSON of brazen stream events, appended as they come.
pub(crate) const RESPONSE_FILE: &str = "response.json";
/// A step's closing record: written once the step is done, so its records no longer grow.
pub(crate) const META_FILE: &str = "meta.json";
/// A step's canonical request, written before the model call (CONTRACT §4.1).
pub(crate) const REQUEST_FILE: &str = "request.json";
/// The model entry being built during the call; renamed into the worktree as
/// `messages/NNN-<model>.json` when it is committed, left behind when the step fails.
pub(crate) const STAGING_FILE: &str = "staging.json";
/// The adapter's stderr, every attempt's appended (normally empty: brazen speaks its
/// failures in-band).
pub(crate) const STDERR_FILE: &str = "stderr.log";
/// A step's tool records directory: one `<tool_use_id>/` per tool call.
pub(crate) const TOOLS_DIR: &str = "tools";
/// A tool record's input (the model's call as litany wrote it).
pub(crate) const INPUT_FILE: &str = "input.json";
/// A tool record's capture: stdout, stderr, exit code and times (CONTRACT §4.2, §5).
pub(crate) const OUTPUT_FILE: &str = "output.json";

/// The tool whose input is a command line.
pub(crate) const BASH_TOOL: &str = "bash";
/// The one field of a `bash` input.
pub(crate) const BASH_COMMAND: &str = "command";

/// The command line a tool call runs, as the model typed it: the input of a `bash` call
/// that holds nothing but its command. Anything else (another tool, more fields) is shown
/// as its JSON by whoever asks: the transcripts, `response.md` and the events all ask here.
pub(crate) fn command_as_typed<'a>(tool: &str, input: &'a serde_json::Value) -> Option<&'a str> {
    if tool != BASH_TOOL {
        return None;
    }
    let fields = input.as_object()?;
    if fields.len() != 1 {
        return None;
    }
    fields.get(BASH_COMMAND)?.as_str()
}

/// The suffix of the harness's write-then-rename temp files (`output.json.tmp`,
/// `input.json.tmp`, `*-mark.<pid>.tmp`). A `.tmp` file is never a finished record.
pub(crate) const HARNESS_TEMP_SUFFIX: &str = ".tmp";

/// The number of a step directory's name (`007` is 7), if it is one: digits only.
pub(crate) fn step_number(name: &[u8]) -> Option<u64> {
    if name.is_empty() || !name.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(name).ok()?.parse().ok()
}

/// The name litany gives step `n`'s directory: the number, three digits at least
/// (CONTRACT §4.1, `{:03}`).
pub(crate) fn step_dir_name(n: u64) -> String {
    format!("{n:03}")
}

/// True for a name under `steps/` that the view hides: the harness's temp files.
pub(crate) fn is_harness_temp(name: &[u8]) -> bool {
    name.ends_with(HARNESS_TEMP_SUFFIX.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn temp_names() {
        assert!(is_harness_temp(b"output.json.tmp"));
        assert!(is_harness_temp(b".tmp"));
        assert!(!is_harness_temp(b"output.json"));
        assert!(!is_harness_temp(b"tmp"));
        assert!(!is_harness_temp(b"x.tmp.json"));
    }

    #[test]
    fn step_numbers() {
        assert_eq!(step_number(b"007"), Some(7));
        assert_eq!(step_number(b"1000"), Some(1000));
        assert_eq!(step_number(b"driver.log"), None);
        assert_eq!(step_number(b""), None);
        assert_eq!(step_number(b"-1"), None);
    }

    #[test]
    fn only_a_bash_call_holding_just_its_command_is_a_command_line() {
        let v = |t: &str| serde_json::from_str::<serde_json::Value>(t).unwrap();
        assert_eq!(
            command_as_typed("bash", &v(r#"{"command":"ls -l"}"#)),
            Some("ls -l")
        );
        assert_eq!(command_as_typed("run", &v(r#"{"command":"ls -l"}"#)), None);
        assert_eq!(
            command_as_typed("bash", &v(r#"{"command":"ls","timeout":5}"#)),
            None
        );
        assert_eq!(command_as_typed("bash", &v(r#"{"command":5}"#)), None);
        assert_eq!(command_as_typed("bash", &v(r#"["ls"]"#)), None);
    }
}
