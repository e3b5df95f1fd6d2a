#!/usr/bin/env python3
"""Cold walks side by side: `os.walk` + `lstat` of `steps/` through a fresh mount of each
spec in turn, with the daemon's CPU (all its threads, and its request threads alone) and the machine's iowait during each
walk.

    python3 scripts/walk-ab.py BIN[+FLAG...] ... [floor]   (ROUNDS=5 by default)

Each argument is a litanyfs binary, with mount flags after `+`, or `floor` for
`examples/floorfs` over the same tree (build it with `cargo build --release --examples`).
The workspace is the bench's, AGENTS x 40 steps (AGENTS=200 by default), made once under
/tmp/litanyfs-walk-ab and kept; with AGENTS=2000 the inotify watch limit is raised for
the run as the bench's scale section does, and put back. RESET_ATIME=1 sets every
atime under `steps/` to 2000-01-01 before each walk, so that a first read updates it as
on a workspace just written. At the end: each spec's median, and its ratio to the
floor's when `floor` was given.
"""

import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench  # noqa: E402

AGENTS = int(os.environ.get("AGENTS", "200"))
BASE = Path("/tmp/litanyfs-walk-ab")
WS = BASE / f"ws{AGENTS}"
MNT = BASE / "mnt"


def iowait():
    """The machine's iowait so far, in seconds (the fifth figure of /proc/stat's `cpu`)."""
    with open("/proc/stat") as f:
        return int(f.readline().split()[5]) / os.sysconf("SC_CLK_TCK")


def ticks(stat):
    """User and system CPU seconds from a `/proc/.../stat` file."""
    with open(stat) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu(pid):
    """CPU seconds so far: process `pid`'s (every thread, those gone included), and
    those of fuser's request threads by thread id."""
    req = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                if f.read().startswith("fuser"):
                    req[tid] = ticks(f"/proc/{pid}/task/{tid}/stat")
        except OSError:
            continue
    return ticks(f"/proc/{pid}/stat"), req


def spent(before, after):
    """CPU seconds between two `cpu()` readings: the request threads', everyone's."""
    req = sum(t - before[1].get(tid, 0) for tid, t in after[1].items())
    return req, after[0] - before[0]


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    if not WS.exists():
        bench.make_workspace(WS, AGENTS, 40)
    dirs = sum(1 for _ in os.walk(WS))
    limit_was = bench.read_watch_limit()
    raise_limit = limit_was is not None and limit_was < 2 * dirs
    if raise_limit:
        bench.set_watch_limit(2 * dirs)
    try:
        run(sys.argv[1:])
    finally:
        if raise_limit:
            bench.set_watch_limit(limit_was)


def run(specs):
    def prepare():
        if os.environ.get("RESET_ATIME") == "1":
            subprocess.run(f"find {WS / 'steps'} -print0 | xargs -0 touch -h -a -d 2000-01-01", shell=True, check=True)
            subprocess.run(["sync"], check=True)

    def measure(_round, steps):
        floor = bench.FLOORS.get(MNT)
        pid = floor.pid if floor else bench.daemon_pid(MNT)
        if pid is None:
            sys.exit(f"no daemon found for {MNT}: a litanyfs binary's name must end in litanyfs")
        c0, io0, t = cpu(pid), iowait(), time.perf_counter()
        bench.walk(steps)
        return time.perf_counter() - t, spent(c0, cpu(pid)), iowait() - io0

    walks = {spec: [] for spec in specs}
    for r, spec, (w, (req, c), io) in bench.alternate(specs, WS, MNT, measure, prepare):
        walks[spec].append(w)
        print(f"round {r} {spec}: cold walk {w:.2f} s, daemon CPU {c:.2f} s ({req:.2f} s in request threads), iowait {io:.2f} s", flush=True)
    floor = statistics.median(walks["floor"]) if "floor" in walks else None
    for spec, ws in walks.items():
        m = statistics.median(ws)
        vs = f", {m / floor:.2f}x the floor" if floor else ""
        print(f"{spec}: median {m:.2f} s{vs}; {' '.join(f'{x:.2f}' for x in sorted(ws))}")


if __name__ == "__main__":
    main()
