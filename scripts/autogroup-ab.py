#!/usr/bin/env python3
"""The daemon's weight under load, A/B within one run (doc/TESTING.md, the eighth run).

    python3 scripts/autogroup-ab.py MNT NICE SECONDS

Beside a soak whose daemon runs as started (`scripts/soak --minutes 10 --nice none
--keep`; MNT is its `<dir>/mnt`): every 20 s the session group of the daemon serving MNT is set to
niceness 0 (A) or NICE (B) in turn (`/proc/<pid>/autogroup`, root only), and `cat
MNT/status` is timed once a second. Prints each side's reads, median, 90th percentile,
longest, and how many took 0.5 s and 1 s or more. Puts the group back to 0 at the end.
"""
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.argv, args = sys.argv[:1], sys.argv[1:]
import bench  # noqa: E402

PERIOD = 20


def set_nice(mnt, nice):
    pid = bench.daemon_pid(mnt)
    try:
        with open(f"/proc/{pid}/autogroup", "w") as f:
            f.write(str(nice))
    except OSError as e:
        print(f"autogroup of {pid}: {e}", flush=True)


def main():
    if len(args) != 3:
        sys.exit(__doc__)
    mnt, nice_b, total = args[0], int(args[1]), float(args[2])
    times = {"A": [], "B": []}
    start, k = time.time(), 0
    while time.time() - start < total:
        side = "AB"[k % 2]
        set_nice(mnt, 0 if side == "A" else nice_b)
        end = time.time() + PERIOD
        while time.time() < end:
            t = time.time()
            try:
                with open(os.path.join(mnt, "status"), "rb") as f:
                    f.read()
            except OSError:
                pass
            took = time.time() - t
            times[side].append(took)
            time.sleep(max(0.0, 1 - took))
        k += 1
    set_nice(mnt, 0)
    for side, xs in times.items():
        xs.sort()
        if xs:
            print(
                f"{side} (nice {0 if side == 'A' else nice_b}): {len(xs)} reads, "
                f"median {statistics.median(xs):.3f} s, p90 {xs[int(len(xs) * 0.9)]:.3f} s, "
                f"longest {xs[-1]:.3f} s, {sum(x >= 0.5 for x in xs)} over 0.5 s, "
                f"{sum(x >= 1 for x in xs)} over 1 s"
            )


if __name__ == "__main__":
    main()
