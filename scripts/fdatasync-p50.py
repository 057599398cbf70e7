#!/usr/bin/env python3
"""The disk's fdatasync latency, as the journal pays it (issue 23's target).

    scripts/fdatasync-p50.py DIR [--samples 2000] [--bytes 4096] [--json]

Appends BYTES to a new file in DIR and fdatasyncs it, SAMPLES times (the
journal's default mode does exactly this per batch: an append to a
growing segment, then fdatasync — so the size change is synced too), and
prints the p50, p90, p99 and mean of the fdatasync alone and of
write + fdatasync, in microseconds. DIR must be on the same file system
as the server's data directory. The file is removed afterwards.
"""

import argparse
import json
import os
import statistics
import sys
import time


def quantile(sorted_us, q):
    return sorted_us[min(len(sorted_us) - 1, int(q * len(sorted_us)))]


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("dir")
    p.add_argument("--samples", type=int, default=2000)
    p.add_argument("--bytes", type=int, default=4096)
    p.add_argument("--json", action="store_true")
    a = p.parse_args()
    if a.samples < 1 or a.bytes < 1:
        sys.exit("--samples and --bytes must be positive")
    path = os.path.join(a.dir, f"fdatasync-probe-{os.getpid()}.log")
    buf = os.urandom(a.bytes)
    sync_us, both_us = [], []
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o600)
    try:
        for _ in range(a.samples):
            t0 = time.perf_counter_ns()
            os.write(fd, buf)
            t1 = time.perf_counter_ns()
            os.fdatasync(fd)
            t2 = time.perf_counter_ns()
            sync_us.append((t2 - t1) / 1000)
            both_us.append((t2 - t0) / 1000)
    finally:
        os.close(fd)
        os.unlink(path)
    out = {"dir": a.dir, "samples": a.samples, "bytes": a.bytes}
    for name, xs in (("fdatasync", sync_us), ("write_fdatasync", both_us)):
        s = sorted(xs)
        out[name] = {
            "p50_us": round(quantile(s, 0.50), 1),
            "p90_us": round(quantile(s, 0.90), 1),
            "p99_us": round(quantile(s, 0.99), 1),
            "mean_us": round(statistics.fmean(s), 1),
        }
    if a.json:
        print(json.dumps(out, sort_keys=True))
    else:
        for name in ("fdatasync", "write_fdatasync"):
            v = out[name]
            print(
                f"{name}: p50 {v['p50_us']} us, p90 {v['p90_us']} us, "
                f"p99 {v['p99_us']} us, mean {v['mean_us']} us ({a.samples} x {a.bytes} B)"
            )


if __name__ == "__main__":
    main()
