#!/usr/bin/env python3
"""Where a mount's memory goes: the daemon's RSS after mounting, once the events have
settled, and after a cold walk (os.walk + lstat) of steps/, for a generated workspace of
AGENTS agents x 40 steps. The developer's loop for the scale section's RSS target,
without its timings.

    python3 scripts/rss.py [AGENTS] [LITANYFS] [--settle | --grep] [--captures]
        (default: 200, target/release/litanyfs; --settle stops before the walk, --grep
        adds a `grep -r` over steps/ after it, which reads every record; --captures
        makes every output.json a capture litany parses, so that its stdout and stderr
        are listed too, in a workspace of its own)

AGENTS=2000 is the scale section's workspace (728,000 entries shown). The workspace is
kept under $TMPDIR/litanyfs-rss/ for the next run.
"""
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench  # noqa: E402  (make_workspace, events_settled)

settle_only = "--settle" in sys.argv[1:]
then_grep = "--grep" in sys.argv[1:]
captures = "--captures" in sys.argv[1:]
args = [a for a in sys.argv[1:] if a not in ("--settle", "--grep", "--captures")]
agents = int(args[0]) if args else 200
binary = args[1] if len(args) > 1 else str(Path(__file__).resolve().parent.parent / "target/release/litanyfs")
base = Path(tempfile.gettempdir()) / "litanyfs-rss"
base.mkdir(exist_ok=True)
ws = base / (f"ws{agents}c" if captures else f"ws{agents}")
if not ws.exists():
    bench.make_workspace(ws, agents, 40, captures=captures)
mnt = base / "mnt"
mnt.mkdir(exist_ok=True)
subprocess.run([binary, "mount", str(ws), str(mnt), "--log-file", str(base / "log")], check=True, capture_output=True)
try:
    pid = bench.daemon_pid(mnt)
    if pid is None:
        sys.exit("no daemon found for the mount (the binary must be named litanyfs)")

    def rss():
        fields = dict(line.split(":", 1) for line in open(f"/proc/{pid}/status").read().splitlines())
        return f"RSS {fields['VmRSS'].strip()}, peak {fields['VmHWM'].strip()}"

    print(f"mounted: {rss()}", flush=True)
    bench.events_settled(mnt, 600)
    print(f"events settled: {rss()}", flush=True)
    if settle_only:
        sys.exit(0)
    n, t = 0, time.perf_counter()
    for d, _, files in os.walk(mnt / "steps"):
        for f in files:
            os.lstat(os.path.join(d, f))
            n += 1
    print(f"after a cold walk of {n} files ({time.perf_counter() - t:.1f} s): {rss()}", flush=True)
    if then_grep:
        t = time.perf_counter()
        subprocess.run(["grep", "-r", "-c", "no such text", str(mnt / "steps")], capture_output=True)
        print(f"after grep -r ({time.perf_counter() - t:.1f} s): {rss()}", flush=True)
finally:
    subprocess.run([binary, "unmount", str(mnt)], capture_output=True)
