#!/usr/bin/env python3
"""Reading `status` at rest, two builds side by side (doc/TESTING.md, the fourth and fifth
30-minute runs):

    python3 scripts/status-ab.py BIN_A BIN_B SOURCE      (ROUNDS=2 by default)

SOURCE is what to mount (a home such as a kept soak's `home/`, or a workspace). Each
round mounts it with each build in turn (the order reversed every other round), waits
for the root `events` to settle (`bench.home_settled`), reads the root `status` once, then prints the median milliseconds of 30 reads of the root
`status` and of each workspace's.
"""

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench  # noqa: E402

ROUNDS = int(os.environ.get("ROUNDS", "2"))


def medians(binary, source, mnt):
    subprocess.run([binary, "mount", source, mnt], check=True, capture_output=True)
    try:
        bench.home_settled(Path(mnt))
        # A single workspace has its `status` at the root alone.
        wss = sorted(w for w in os.listdir(mnt) if os.path.isdir(os.path.join(mnt, w, "steps")))
        paths = ["status"] + [f"{w}/status" for w in wss]
        with open(os.path.join(mnt, "status"), "rb") as f:
            f.read()
        out = {}
        for p in paths:
            ts = []
            for _ in range(30):
                t0 = time.perf_counter()
                with open(os.path.join(mnt, p), "rb") as f:
                    f.read()
                ts.append(time.perf_counter() - t0)
            out[p] = round(statistics.median(ts) * 1000, 1)
        return out
    finally:
        subprocess.run(["fusermount3", "-u", mnt], capture_output=True)
        time.sleep(0.5)


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    bins = {"A": sys.argv[1], "B": sys.argv[2]}
    source = sys.argv[3]
    with tempfile.TemporaryDirectory() as mnt:
        for r in range(ROUNDS):
            order = list(bins.items())
            if r % 2:
                order.reverse()
            for k, b in order:
                print(k, b, medians(b, source, mnt), flush=True)


if __name__ == "__main__":
    main()
