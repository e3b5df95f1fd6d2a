//! `litanyfs demo`: a sample workspace with the layout the harness writes, mounted, and a
//! short tour of what to try. It needs nothing but this binary, so the README's first
//! command works on a fresh machine.

use std::path::Path;

use crate::fixture::{Fixture, Result};
use crate::workspace::refs::Flavour;

/// The sample's root agent and its child.
pub const ROOT_ID: &str = "20261202T094226Z-0122ccc2";
pub const CHILD_ID: &str = "20261202T094226Z-0122ccc2-20261202T094301Z-1a2b3c4d";
pub const WORKER_ID: &str = "20261202T095012Z-2f00d00d";

/// Writes the sample workspace at `ws` (which must not exist or be empty).
pub fn build(ws: &Path) -> Result<()> {
    let f = Fixture::create(ws, Flavour::Litany)?;
    let transcript_tool = br#"[{"type":"tool_result","tool_use_id":"toolu_fake1","content":"Exit code: 0\n1\n2\n..."}]"#;
    let root_tip = f.agent(
        ROOT_ID,
        Some("BoulderThunder"),
        &[
            ("messages/001-user.md", b"---\nfrom: user\ndeposited_at: 2026-12-02T09:42:26Z\n---\ncount to 3000\n"),
            ("messages/002-claude-sonnet-5.json", br#"{"content":[{"type":"tool_use","id":"toolu_fake1","name":"bash","input":{"command":"seq 1 3000"}}]}"#),
            ("messages/003-tool.json", transcript_tool),
            ("title", b"Counting exercise\n"),
        ],
    )?;
    let child_tip = f.agent(
        CHILD_ID,
        Some("PeachHollow"),
        &[("notes.md", b"child work product\n")],
    )?;
    f.agent(WORKER_ID, None, &[])?;
    f.commit_mark("returned", CHILD_ID, child_tip)?;
    f.commit_mark("notify", ROOT_ID, root_tip)?;
    f.blob_mark(
        "cwd",
        ROOT_ID,
        ws.join("agents").join(ROOT_ID).to_string_lossy().as_bytes(),
    )?;
    f.blob_mark(
        "held",
        WORKER_ID,
        br#"{"tool_use_id":"toolu_9","tool":"bash","reason":"needs approval"}"#,
    )?;

    let seq: String = (1..=3000).map(|n| format!("{n}\n")).collect();
    let output = Fixture::tool_output(&seq, "", 0);
    let response = concat!(
        r#"{"type":"message_start","v":1,"id":"msg_1","model":"claude-sonnet-5","role":"assistant"}"#,
        "\n",
        r#"{"type":"content_start","index":0,"kind":{"tool_use":{"id":"toolu_fake1","name":"bash"}}}"#,
        "\n",
        r#"{"type":"content_delta","index":0,"delta":{"json_delta":"{\"command\":\"seq 1 3000\"}"}}"#,
        "\n",
        r#"{"type":"content_stop","index":0}"#,
        "\n",
        r#"{"type":"finish","reason":"tool_use"}"#,
        "\n",
        r#"{"type":"end"}"#,
        "\n",
    );
    let meta = format!(
        "{{\n  \"commit\": \"{root_tip}\",\n  \"started_at\": \"2026-12-02T09:42:27Z\",\n  \"ended_at\": \"2026-12-02T09:42:29Z\"\n}}"
    );
    f.step(
        ROOT_ID,
        1,
        &[
            ("request.json", b"{\n  \"cache_key\": \"20261202T094226Z-0122ccc2\",\n  \"max_tokens\": 4096\n}"),
            ("response.json", response.as_bytes()),
            ("stderr.log", b""),
            ("meta.json", meta.as_bytes()),
            ("tools/toolu_fake1/input.json", b"{\n  \"id\": \"toolu_fake1\",\n  \"name\": \"bash\",\n  \"input\": {\n    \"command\": \"seq 1 3000\"\n  }\n}"),
            ("tools/toolu_fake1/output.json", &output),
        ],
    )?;
    f.step(
        ROOT_ID,
        2,
        &[
            ("request.json", b"{}"),
            ("response.json", b""),
            ("staging.json", b"{\"content\":["),
        ],
    )?;
    std::fs::write(
        ws.join("steps").join(ROOT_ID).join("driver.log"),
        b"litany: notice: setpgid: Operation not permitted (os error 1)\n",
    )?;
    f.inbox_file(
        ROOT_ID,
        "user-001.md",
        b"---\nfrom: user\ndeposited_at: 2026-12-02T09:50:00Z\n---\nand now summarise\n",
    )?;
    f.inbox_file(ROOT_ID, ".user-002.md.tmp", b"half-written")?;
    Ok(())
}

/// What to try once the sample is mounted at `mnt`; `bin` is how to call this binary.
pub fn tour(mnt: &Path, bin: &Path) -> String {
    let m = mnt.display();
    let b = bin.display();
    let tool = format!("{m}/steps/{ROOT_ID}/001/tools/toolu_fake1");
    format!(
        "\
litanyfs: the sample workspace is mounted at {m}

Try:
  ls {m}                                   # agents inbox marks names steps status events ...
  cat {m}/status                           # what every agent is doing now
  less {m}/events                          # what happened, oldest first; tail -f follows it
  cat {m}/steps/{ROOT_ID}/transcript.md    # an agent's whole conversation
  ls -l {m}/names/                         # a symlink per named agent
  cat {m}/names/BoulderThunder/goal.md     # an agent's committed tree, read from git
  find {m}/steps -type f                   # every step record, as on disk
  cat '{tool}/output.json#stdout@2048'     # the page read_tool_output returns for that address
  tail -c 20 {tool}/stdout                 # the whole decoded stream
  cat {m}/inbox/{ROOT_ID}/user-001.md      # a pending deposit
  echo 'and then stop' > {m}/inbox/{ROOT_ID}/note   # deposits as user-002.md
  ls {m}/inbox/{ROOT_ID}
  cat {m}/marks/cwd/{ROOT_ID}              # a blob mark reads as its value
  cat {m}/marks/returned/{CHILD_ID}        # a commit mark reads as its id
  touch {m}/steps/x                        # refused: Read-only file system

Unmount with: {b} unmount {m}
"
    )
}
