#!/usr/bin/env python3
"""Pages side by side: the bench's paging figures for two or more binaries, alternated.

    python3 scripts/page-ab.py BIN[+FLAG...] BIN[+FLAG...] ...   (ROUNDS=5 by default)

Each round mounts each binary in turn over one 50 MB capture (the bench's), reads 300
pages at random offsets, each followed by a 4 KiB read of a plain 64 MiB file (the anchor), then
follows `user.litany.next` through the whole stream, and unmounts. It prints the median
page and plain latencies, their ratio (#15: at most 1.5) and the whole chain's time. The
workspace is made once under /tmp/litanyfs-page-ab and kept.
"""

import os
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench  # noqa: E402

WS = Path("/tmp/litanyfs-page-ab/ws")
MNT = Path("/tmp/litanyfs-page-ab/mnt")


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    if not WS.exists():
        aid = bench.make_workspace(WS, 1, 1)[0]
        bench.make_capture(WS, aid, 50)
        (WS / "steps" / aid / "001" / "plain.bin").write_bytes(os.urandom(64 << 20))
    # make_capture's record, not the workspace's small one beside it.
    record = next((WS / "steps").glob("*/001/tools/toolu_big/output.json")).relative_to(WS)
    plain = next((WS / "steps").glob("*/001/plain.bin")).relative_to(WS)

    def measure(r, _steps):
        rnd = random.Random(r)
        total = os.stat(MNT / record.parent / "stdout").st_size
        offsets = [rnd.randrange(0, total) for _ in range(300)]

        def page(off):
            with open(MNT / f"{record}#stdout@{off}", "rb") as f:
                return f.read()

        def plain_read(off):
            with open(MNT / plain, "rb") as f:
                f.seek(off)
                return f.read(4096)

        page(0)
        # In turn, so that both see the machine in the same mood.
        both = [(bench.timed(page, o)[0], bench.timed(plain_read, o)[0]) for o in offsets]
        lat = statistics.median(a for a, _ in both) * 1e6
        pl = statistics.median(b for _, b in both) * 1e6
        t = time.perf_counter()
        addr, pages = f"{record}#stdout@0", 0
        while addr:
            p = MNT / addr
            with open(p, "rb") as f:
                f.read()
            try:
                addr = os.getxattr(p, "user.litany.next").decode()
            except OSError:
                addr = None
            pages += 1
        return lat, pl, pages, time.perf_counter() - t

    for r, spec, (lat, pl, pages, whole) in bench.alternate(sys.argv[1:], WS, MNT, measure):
        print(f"round {r} {spec}: page {lat:.0f} us, plain {pl:.0f} us ({lat / pl:.2f}x); {pages} pages in {whole:.2f} s", flush=True)


if __name__ == "__main__":
    main()
