#!/usr/bin/env python3
"""Same-run before/after of issue 21's totals on a cluster and one server.

usage: cluster-totals-ab.py ENV_BEFORE ROUNDS BEFORE_BIN AFTER_BIN [ENV_AFTER]

ENV_*: DIR/env of scripts/cluster-totals-up.sh (the CLI command lines of a
single server and a cluster). Each round runs, for each query kind (`stats
/`, `du` of a grandparent, `stats --by user` of a top directory -type f; the
directories rotate by round), on the cluster then the single server, the two
binaries back to back (the order alternates by round), each against its own
setup. Prints medians (ms, wall time per CLI process), the cluster/single
ratio of the medians and the median of per-round ratios, also without the
runs during which a table changed hands (the servers' logs), and checks that
every binary and target gave one answer per query.
"""
import subprocess, sys, time, statistics as st, json, shlex, os
envf, rounds, before, after = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
envs = {"before": envf, "after": sys.argv[5] if len(sys.argv) > 5 else envf}
def parse(f):
    vals = {}
    for line in open(f):
        if line.startswith(("S=(", "C=(")):
            k = line[0]; vals[k] = shlex.split(line[3:].rstrip().rstrip(")"))[1:]
    return vals
setups = {b: parse(f) for b, f in envs.items()}
queries = {
    "stats /": [["stats", "/"]],
    "du grandparent": [["du", d] for d in ["/u/c0/share/locale/fr", "/u/c0/share/doc/git", "/u/c0/include/linux", "/u/c0/lib/python3/dist-packages", "/u/c0/share/man/man1"]],
    "stats --by user topdir": [["stats", "--by", "user", d, "-type", "f"] for d in ["/u/c0/share", "/u/c0/lib", "/u/c0/include", "/u/c0/bin", "/u/c0/libexec"]],
}
bins = {"before": before, "after": after}
t = {}; answers = {}; spans = {}
for r in range(rounds):
    order = ["before", "after"] if r % 2 == 0 else ["after", "before"]
    for qn, qs in queries.items():
        q = qs[r % len(qs)]
        for tgt in ("cluster", "single"):
            for b in order:
                cmd = [bins[b]] + setups[b]["C" if tgt == "cluster" else "S"] + q
                w0 = time.time(); t0 = time.monotonic(); out = subprocess.run(cmd, capture_output=True); dt = (time.monotonic() - t0) * 1e3
                spans.setdefault((qn, tgt, b), []).append((w0, time.time()))
                if out.returncode != 0: print("FAILED", cmd, out.stderr[-300:], file=sys.stderr)
                t.setdefault((qn, tgt, b), []).append(dt)
                answers.setdefault((qn, " ".join(q)), set()).add(out.stdout)
# table handovers from the cluster servers' logs (DIR/sN.log)
import glob, datetime
moves = []
for f in sorted(set(glob.glob(f"{os.path.dirname(envs['before'])}/s[0-9].log") + glob.glob(f"{os.path.dirname(envs['after'])}/s[0-9].log"))):
    for line in open(f, errors="replace"):
        if "table handed over" in line:
            ts = line.split()[0].rstrip("Z")
            moves.append(datetime.datetime.fromisoformat(ts).replace(tzinfo=datetime.timezone.utc).timestamp())
def clean(key):
    out = []
    for dt, (a, b_) in zip(t[key], spans[key]):
        out.append(None if any(a - 0.05 <= m <= b_ + 0.05 for m in moves) else dt)
    return out
bad = [k for k, v in answers.items() if len(v) != 1]
print(f"rounds {rounds}; queries whose answers differed (any binary/target): {bad}")
print(f"{'query':26s} {'binary':7s} {'cluster ms':>10s} {'single ms':>10s} {'ratio':>6s} {'ratio/round':>11s}")
res = {}
for qn in queries:
    for b in ("before", "after"):
        c, s = t[(qn, "cluster", b)], t[(qn, "single", b)]
        per = st.median([x / y for x, y in zip(c, s)])
        res[(qn, b)] = (st.median(c), st.median(s))
        print(f"{qn:26s} {b:7s} {st.median(c):10.2f} {st.median(s):10.2f} {st.median(c)/st.median(s):6.2f} {per:11.2f}")
print("without the rounds during which a table changed hands (cluster runs overlapping a handover, and their single twins):")
for qn in queries:
    for b in ("before", "after"):
        c, s_ = clean((qn, "cluster", b)), t[(qn, "single", b)]
        pairs = [(x, y) for x, y in zip(c, s_) if x is not None]
        cc = [x for x, _ in pairs]; ss = [y for _, y in pairs]
        print(f"{qn:26s} {b:7s} {st.median(cc):10.2f} {st.median(ss):10.2f} {st.median(cc)/st.median(ss):6.2f} {st.median([x/y for x,y in pairs]):11.2f}  ({len(pairs)} of {len(c)} runs)")
for qn in queries:
    cb, sb = res[(qn, "before")]; ca, sa = res[(qn, "after")]
    print(f"{qn:26s} after/before: cluster {ca/cb:.2f}, single {sa/sb:.2f}")
json.dump({f"{k[0]}|{k[1]}|{k[2]}": v for k, v in t.items()}, open(os.environ.get("AB_OUT", "/tmp/t21/ab.json"), "w"))
