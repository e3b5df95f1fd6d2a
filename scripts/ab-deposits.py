#!/usr/bin/env python3
"""A/B of the cost of a deposit through the mount, for two litanyfs binaries.

Both binaries mount one generated workspace side by side, and deposits alternate between
the two mounts one by one, so that the machine's drift (other jobs, frequency changes)
falls on both alike; the run is then repeated with the order swapped. Prints the median
time per deposit for each and the ratio B/A of each run.

    python3 scripts/ab-deposits.py OLD/litanyfs NEW/litanyfs [deposits] [runs]

Build an older commit's binary with `git worktree add /tmp/old <commit>` and
`cargo build --release` there. The agent's executor lock is held for the whole run (as
a running agent would), so no deposit launches anything.
"""
import fcntl
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench  # noqa: E402  (make_workspace)


def run(bins, n, tmp, ws, aid):
    mnts = []
    try:
        for k, b in enumerate(bins):
            m = tmp / f"mnt{k}"
            m.mkdir(exist_ok=True)
            subprocess.run([b, "mount", str(ws), str(m), "--log-file", str(tmp / f"log{k}")],
                           check=True, capture_output=True)
            mnts.append(m)
        times = [[] for _ in bins]
        for i in range(n):
            for k, m in enumerate(mnts):
                t = time.perf_counter()
                with open(m / "inbox" / aid / f"m{time.time_ns()}-{k}", "w") as f:
                    f.write(f"message {i}\n")
                times[k].append(time.perf_counter() - t)
        return [statistics.median(t) for t in times]
    finally:
        for k, m in enumerate(mnts):
            subprocess.run([bins[k], "unmount", str(m)], capture_output=True)


def main():
    a, b = sys.argv[1], sys.argv[2]
    n = int(sys.argv[3]) if len(sys.argv) > 3 else 3000
    runs = int(sys.argv[4]) if len(sys.argv) > 4 else 3
    tmp = Path(tempfile.mkdtemp(prefix="litanyfs-ab-"))
    ws = tmp / "ws"
    aid = bench.make_workspace(ws, 1, 0)[0]
    lock = os.open(ws / "inbox" / aid, os.O_RDONLY)
    fcntl.flock(lock, fcntl.LOCK_EX)
    ratios = []
    try:
        for r in range(runs):
            for order in ((a, b), (b, a)):
                med = dict(zip(order, run(order, n, tmp, ws, aid)))
                ratios.append(med[b] / med[a])
                print(f"run {r + 1}, {'A first' if order[0] == a else 'B first'}: "
                      f"A {med[a] * 1e6:.0f} us, B {med[b] * 1e6:.0f} us, B/A {ratios[-1]:.3f}",
                      flush=True)
        print(f"B/A: mean {statistics.mean(ratios):.3f}, median {statistics.median(ratios):.3f} "
              f"over {len(ratios)} runs of {n} deposits each")
    finally:
        subprocess.run(["rm", "-rf", str(tmp)])


if __name__ == "__main__":
    main()
