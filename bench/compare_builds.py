#!/usr/bin/env python3
"""Two builds of the mount, interleaved: markdown tables for docs/BENCHMARKS.md.

    bench/compare_builds.py [DIR]   (default /work/bench-results/mount-perf)

DIR holds the JSON reports of scripts/bench-mount.sh run with
TAG=old-rN / TAG=new-rN, REPS=1, TTL=0 (`compare procs`), one pair of runs
per round N. Per phase: medians over the rounds present for both builds,
and the median of per-round ratios (each round's runs were measured back
to back, so a round's ratio cancels most of the machine's load drift).
"""

import json, glob, statistics, sys
D = sys.argv[1] if len(sys.argv) > 1 else "/work/bench-results/mount-perf"
def load(f):
    r=json.load(open(f)); out={}
    for run in r["runs"]:
        for p in run: out[p["phase"]]=p
    return out
def med(x):
    x=[v for v in x if v is not None]
    return statistics.median(x) if x else None
def rounds(v):
    return sorted({f.split(f"-{v}-r")[1].split("-")[0] for f in glob.glob(f"{D}/compare-ttl0-{v}-r*-t1-sextant-1.json")})
R=[r for r in rounds("new") if r in rounds("old")]
print("rounds", R)
for t in ["1","4"]:
    print(f"\n#### {t} thread(s)\n")
    print("| phase | new ops/s | new p50 µs | old ops/s | old p50 µs | bindfs ops/s | bindfs p50 µs | new / old | bindfs / new | bindfs / old | CPU µs/op new · old · bindfs |")
    print("|---|---:|---:|---:|---:|---:|---:|---|---|---|---|")
    try:
        data={(v,fs,r):load(f"{D}/compare-ttl0-{v}-r{r}-t{t}-{fs}-1.json") for v in ["new","old"] for fs in ["sextant","bindfs"] for r in R}
    except FileNotFoundError as e:
        print("missing", e); continue
    phases=list(data[("new","sextant",R[0])].keys())
    for ph in phases:
        g=lambda v,fs,k: [data[(v,fs,r)][ph][k] for r in R]
        ops=lambda v,fs: g(v,fs,"ops_per_sec")
        def ratio(a,b): 
            xs=[x/y for x,y in zip(a,b)]
            return "**%.2f×** (%s)"%(med(xs), " / ".join("%.2f"%x for x in xs))
        cpu=lambda v,fs: med([1e6/x if x else None for x in g(v,fs,"ops_per_cpu_sec")])
        bo=[ (data[("old","bindfs",r)][ph]["ops_per_sec"]) for r in R]
        print(f"| {ph} | {med(ops('new','sextant')):,.0f} | {med(g('new','sextant','p50_us')):,.1f} | {med(ops('old','sextant')):,.0f} | {med(g('old','sextant','p50_us')):,.1f} | {med(ops('new','bindfs')+ops('old','bindfs')):,.0f} | {med(g('new','bindfs','p50_us')+g('old','bindfs','p50_us')):,.1f} | {ratio(ops('new','sextant'),ops('old','sextant'))} | {ratio(ops('new','bindfs'),ops('new','sextant'))} | {ratio(ops('old','bindfs'),ops('old','sextant'))} | {cpu('new','sextant'):.0f} · {cpu('old','sextant'):.0f} · {med([cpu('new','bindfs'),cpu('old','bindfs')]):.0f} |")
print("\n#### procs\n")
print("| P | new creates/s | old creates/s | new / old | new creates per fdatasync (each round) | old creates per fdatasync (each round) | new p50 µs | old p50 µs |")
print("|---|---:|---:|---|---|---|---:|---:|")
for p in ["1","2","4","8","16"]:
    try:
        d={(v,r):load(f"{D}/procs-fsync-{v}-r{r}-p{p}-1.json")["file-create"] for v in ["new","old"] for r in R}
    except FileNotFoundError: continue
    g=lambda v,k:[d[(v,r)][k] for r in R]
    xs=[a/b for a,b in zip(g("new","ops_per_sec"),g("old","ops_per_sec"))]
    print(f"| {p} | {med(g('new','ops_per_sec')):,.0f} | {med(g('old','ops_per_sec')):,.0f} | **{med(xs):.2f}×** | **{med(g('new','ops_per_sync')):.1f}** ({' / '.join('%.1f'%x for x in g('new','ops_per_sync'))}) | {med(g('old','ops_per_sync')):.1f} ({' / '.join('%.1f'%x for x in g('old','ops_per_sync'))}) | {med(g('new','p50_us')):,.0f} | {med(g('old','p50_us')):,.0f} |")
