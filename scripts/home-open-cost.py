#!/usr/bin/env python3
"""What the first request into a workspace costs inside a home mount against a single
mount of it, cold (issue 31's walk; doc/PERFORMANCE.md). A home opens a workspace's tree
at its first use; a single mount opens it at mount time.

    python3 scripts/home-open-cost.py BIN [MOUNT OPTIONS...]     (ROUNDS=4 by default)

BIN must be named `litanyfs`. Uses the home `scripts/walk-home-ab.py` makes (run that
once first). Each round mounts `ws00` alone and the home, in turn (the order reversed
every other round), waits until the root `events` has not grown for 2 s, drops the
caches, and times the first `stat` of `steps` and then its listing. Prints each run and
the medians.
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

HOME = Path("/tmp/litanyfs-walk-home/home")
ROUNDS = int(os.environ.get("ROUNDS", "4"))


def main():
    if not args:
        sys.exit(__doc__)
    binary, extra = args[0], args[1:]
    if not (HOME / "ws00" / "repo.git").exists():
        sys.exit(f"no {HOME}: run scripts/walk-home-ab.py once first")
    res = {"single": [], "home": []}
    for r in range(ROUNDS):
        for which in ("single", "home") if r % 2 == 0 else ("home", "single"):
            src, mnt = (HOME / "ws00", Path("/tmp/oc-single")) if which == "single" else (HOME, Path("/tmp/oc-home"))
            mnt.mkdir(exist_ok=True)
            subprocess.run([binary, "mount", str(src), str(mnt), *extra], check=True, capture_output=True)
            try:
                bench.home_settled(mnt)
                root = mnt if which == "single" else mnt / "ws00"
                bench.drop_caches()
                t0 = time.perf_counter()
                os.stat(root / "steps")
                t1 = time.perf_counter()
                os.listdir(root / "steps")
                t2 = time.perf_counter()
                res[which].append((t1 - t0, t2 - t1))
            finally:
                subprocess.run([binary, "unmount", str(mnt)], capture_output=True)
                time.sleep(0.3)
    for k, v in res.items():
        print(k, "first stat, then listing, ms:", [(round(a * 1e3, 2), round(b * 1e3, 2)) for a, b in v])
        print(k, "median first stat", round(statistics.median(a for a, _ in v) * 1e3, 2), "ms")


if __name__ == "__main__":
    main()
