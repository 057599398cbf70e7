#!/usr/bin/env python3
"""Medians over repetitions of `sextant bench --json` reports.

    bench/summarize.py OUT/client-many-ct1-*.json [more globs...]

Each argument is a glob; the files it matches are repetitions of one
configuration. Prints, per configuration and phase, the median ops/s,
p50/p99 latency and ops per journal sync, with every repetition's ops/s.
With --ratio A B (two globs), also prints per phase the median of the
per-repetition ratios A/B of ops/s (repetitions paired by file order).
"""
import glob
import json
import statistics
import sys


def load(pattern):
    files = sorted(glob.glob(pattern))
    if not files:
        sys.exit(f"no files match {pattern}")
    return files, [json.load(open(f)) for f in files]


def phases(reports):
    out = {}
    for r in reports:
        for run in r["runs"]:
            for p in run:
                out.setdefault(p["phase"], []).append(p)
    return out


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def show(pattern):
    files, reports = load(pattern)
    print(f"{pattern}  (n={len(files)})")
    for name, ps in phases(reports).items():
        rate = med([p["ops_per_sec"] for p in ps])
        p50 = med([p["p50_us"] for p in ps])
        p99 = med([p["p99_us"] for p in ps])
        ops_sync = med([p.get("ops_per_sync") for p in ps])
        ent = med([p.get("entries_per_sec") for p in ps])
        each = " / ".join(f"{p['ops_per_sec']:.0f}" for p in ps)
        extra = f"  ops/sync {ops_sync:.1f}" if ops_sync else ""
        extra += f"  entries/s {ent:.0f}" if ent else ""
        cpu = med([p.get("ops_per_cpu_sec") for p in ps])
        extra += f"  ops/CPU-s {cpu:.0f}" if cpu else ""
        print(f"  {name:<13} {rate:>10.0f}/s  p50 {p50:>8.1f} µs  p99 {p99:>9.1f} µs{extra}  [{each}]")


def ratio(a, b):
    _, ra = load(a)
    _, rb = load(b)
    pa, pb = phases(ra), phases(rb)
    print(f"ratio {a} / {b}")
    for name in pa:
        if name not in pb:
            continue
        rs = [x["ops_per_sec"] / y["ops_per_sec"] for x, y in zip(pa[name], pb[name]) if y["ops_per_sec"]]
        l50 = [x["p50_us"] / y["p50_us"] for x, y in zip(pa[name], pb[name]) if y["p50_us"]]
        print(f"  {name:<13} ops/s ratio median {med(rs):.2f} (min {min(rs):.2f}, max {max(rs):.2f}); "
              f"p50 ratio median {med(l50):.2f}")


args = sys.argv[1:]
if args[:1] == ["--ratio"]:
    ratio(args[1], args[2])
else:
    for a in args:
        show(a)
