#!/usr/bin/env python3
"""Re-reads side by side: a walk of a fresh mount, then `grep -r` three times over every
record of a 200 x 40 workspace.

    python3 scripts/grep-ab.py BIN[+FLAG...] BIN[+FLAG...] ...   (ROUNDS=5 by default)

Each argument is a litanyfs binary, with mount flags after `+` (for example
`target/release/litanyfs+--read-only`). Each round mounts each in turn, walks the tree
once (so entries are cached), greps three times through the mount and once natively, and
unmounts. The first grep reads through the daemon, the next ones may be served from the
page cache. The workspace is made once under /tmp/litanyfs-grep-ab and kept.
"""

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench  # noqa: E402

WS = Path("/tmp/litanyfs-grep-ab/ws")
MNT = Path("/tmp/litanyfs-grep-ab/mnt")


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    if not WS.exists():
        bench.make_workspace(WS, 200, 40)

    def measure(_round, _steps):
        t = time.perf_counter()
        bench.walk(MNT / "steps")
        w = time.perf_counter() - t
        return w, [bench.grep(MNT / "steps") for _ in range(3)], bench.grep(WS / "steps")

    for r, spec, (w, g, n) in bench.alternate(sys.argv[1:], WS, MNT, measure):
        print(f"round {r} {spec}: walk {w:.2f} s, grep {' '.join(f'{x:.2f}' for x in g)} s, native {n:.2f} s (third / native {g[2] / n:.1f}x)", flush=True)


if __name__ == "__main__":
    main()
