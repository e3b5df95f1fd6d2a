#!/usr/bin/env python3
"""A cold walk of one workspace inside a home mount against the same walk of a single
mount of it, for two builds side by side (issue 31's 5% target; doc/PERFORMANCE.md).

    python3 scripts/walk-home-ab.py BIN_A BIN_B     (ROUNDS=4 by default)

The home is the bench's (50 workspaces x 40 agents x 10 steps), made once under
/tmp/litanyfs-walk-home and kept. Each round mounts, in turn, the single workspace and
the home with each build (the order reversed every other round), waits until the root
`events` has not grown for 2 s, drops the caches and walks `ws00` (`os.walk` + `lstat`).
Printed per build and kind: each walk's seconds, the daemon's CPU seconds and its
`litanyfs-follow` thread's during it, the medians, and each build's home / single ratio.
"""

import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.argv, args = sys.argv[:1], sys.argv[1:]
import bench  # noqa: E402

BASE = Path("/tmp/litanyfs-walk-home")
HOME = BASE / "home"
ROUNDS = int(os.environ.get("ROUNDS", "4"))


def thread_cpu(pid, comm):
    """CPU seconds of the daemon's threads named `comm…`."""
    total = 0.0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            if Path(f"/proc/{pid}/task/{tid}/comm").read_text().startswith(comm):
                total += bench.cpu_seconds(f"{pid}/task/{tid}")
        except OSError:
            pass
    return total


def main():
    if len(args) != 2:
        sys.exit(__doc__)
    bins = {"A": args[0], "B": args[1]}
    if not (HOME / "ws49" / "repo.git").exists():
        HOME.mkdir(parents=True, exist_ok=True)
        for i in range(50):
            bench.make_workspace(HOME / f"ws{i:02d}", 40, 10)
    one = HOME / "ws00"
    res = {}
    for r in range(ROUNDS):
        order = [(k, w) for k in bins for w in ("single", "home")]
        if r % 2:
            order.reverse()
        for k, which in order:
            src, mnt = (one, BASE / "smnt") if which == "single" else (HOME, BASE / "hmnt")
            mnt.mkdir(exist_ok=True)
            subprocess.run([bins[k], "mount", str(src), str(mnt), "--log-file", str(BASE / f"{which}.log")], check=True, capture_output=True)
            try:
                bench.home_settled(mnt)
                root = mnt if which == "single" else mnt / "ws00"
                pid = bench.daemon_pid(mnt)
                bench.drop_caches()
                c0, f0 = bench.cpu_seconds(pid), thread_cpu(pid, "litanyfs-follow")
                t0 = time.perf_counter()
                bench.walk(root)
                dt = time.perf_counter() - t0
                c1, f1 = bench.cpu_seconds(pid), thread_cpu(pid, "litanyfs-follow")
                res.setdefault((k, which), []).append((dt, c1 - c0, f1 - f0))
            finally:
                subprocess.run([bins[k], "unmount", str(mnt)], capture_output=True)
                time.sleep(0.3)
    for key, v in sorted(res.items()):
        print(key, [(round(a, 3), round(c, 2), round(f, 2)) for a, c, f in v], "median", round(statistics.median(a for a, _, _ in v), 3))
    for k in bins:
        s = statistics.median(a for a, _, _ in res[(k, "single")])
        h = statistics.median(a for a, _, _ in res[(k, "home")])
        print(k, bins[k], "home / single", round(h / s, 3))


if __name__ == "__main__":
    main()
