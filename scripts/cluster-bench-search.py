#!/usr/bin/env python3
"""Search on one server against the same search on a cluster (issue 21's
benchmark; `scripts/cluster-bench.sh search` starts both and imports the
same tree into each, then runs this).

The queries are those of `sextant-engine-bench search`
(crates/bench/src/suite/search.rs), sampled the same way (files drawn
uniformly with a fixed seed) and asked through the CLI, as a user would:
- set1: `find / -name NAME -uid U`; set2: the same below the file's
  grandparent; set3: `find / -uid U -newermt @M-15d ! -newermt @M+15d
  -size +(S/2-1)c`;
- glob: `find / -name 'abcd*wxyz'` (first and last four bytes of a name
  of at least 10); substring: `find / -name '*abcdef*'` (six middle bytes);
- broad: `stats / -size +P90c` (a count, as `find -count`);
- totals: `stats /` (whole namespace), `du GRANDPARENT`, `stats --by user
  TOPDIR -type f` (TOPDIR: a top-level directory of one imported copy).
find prints NUL-separated paths (-print0) that are counted; stats/du print
their totals line. Every query is run on both, the order alternating
between rounds; round 0 warms up (indexes built, caches filled) and is not
counted, and timed rounds start once no cluster table has changed hands
for 15 s (the coordinator balances by request rates, and searches count).
Both should give the same answer: a run that differs is logged and
counted. Wall time per CLI process (start, connect and, on the cluster,
the route map included); `stat ROOT` is timed alongside as the fixed cost
of a command. Runs during which a cluster table changed hands (the
servers' logs, $SEXTANT_CLUSTER_LOGS) are also summarised apart.

DirChain calls (reads of another server's directories) per query are
estimated from the servers' Prometheus counters in an extra, untimed pass:
the gRPC calls every cluster server admitted (sextant_auth_calls_total)
less the requests and searches it counted (sextant_requests_total) less
the calls a query with no DirChain makes (`stat`'s map and resolve calls,
measured the same way).

usage: cluster-bench-search.py BIN ROOT SAMPLES ROUNDS SEED \
           SINGLE_ADDR SINGLE_DATA SINGLE_METRICS \
           CLUSTER_ADDR CLUSTER_DATA CLUSTER_METRICS[,...] [OUT.json]
(`cluster status` needs $SEXTANT_ETCD.)
"""
import calendar
import json
import os
import random
import re
import statistics as st
import subprocess
import sys
import time
import urllib.request

(binp, root, samples, rounds, seed, s_addr, s_data, s_metrics,
 c_addr, c_data, c_metrics) = sys.argv[1:12]
samples, rounds = int(samples), int(rounds)
c_metrics = c_metrics.split(",")
TARGETS = {
    "single": [binp, "--server", s_addr, "--data", s_data],
    "cluster": [binp, "--server", c_addr, "--data", c_data],
}
DAYS_15 = 15 * 86400


def log(*a):
    print(f"[{time.strftime('%H:%M:%S', time.gmtime())}]", *a, file=sys.stderr, flush=True)


def escape(b: bytes) -> bytes:
    return re.sub(rb"([*?\[\]\\])", rb"\\\1", b)


def grandparent(p: bytes) -> bytes:
    for _ in range(2):
        i = p.rfind(b"/")
        if i <= 0:
            return b"/"
        p = p[:i]
    return p


# --- sample files (reservoir, fixed seed), from the single server -------
rng = random.Random(int(seed))
t0 = time.monotonic()
out = subprocess.run(TARGETS["single"] + ["find", root, "-type", "f", "-printf", r"%s %T@ %U %p\0"],
                     capture_output=True, check=True).stdout
files = []
for i, rec in enumerate(out.split(b"\0")):
    if not rec:
        continue
    size, mt, uid, path = rec.split(b" ", 3)
    f = (int(size), int(float(mt)), int(uid), path)
    if len(files) < samples:
        files.append(f)
    else:
        j = rng.randrange(i + 1)
        if j < samples:
            files[j] = f
nfiles = out.count(b"\0")
del out
log(f"sampled {len(files)} of {nfiles} files in {time.monotonic() - t0:.1f} s")
sizes = sorted(f[0] for f in files)
p90 = sizes[len(sizes) * 9 // 10]
rootb = root.encode()


def top_dir(p: bytes) -> bytes:
    # ROOT/cK/X: a top-level directory of one imported copy
    rest = p[len(rootb) + 1:].split(b"/")
    return b"/".join([rootb] + rest[:2]) if len(rest) > 2 else grandparent(p)


def name_of(p: bytes) -> bytes:
    return p.rsplit(b"/", 1)[1]


queries = {k: [] for k in ("set1", "set2", "set3", "glob", "substring", "broad-count",
                           "totals-root", "totals-subtree", "totals-topdir-by-user")}
for size, mt, uid, path in files:
    n = name_of(path)
    u = str(uid).encode()
    queries["set1"].append([b"find", b"/", b"-name", escape(n), b"-uid", u, b"-print0"])
    queries["set2"].append([b"find", grandparent(path), b"-name", escape(n), b"-uid", u, b"-print0"])
    q3 = [b"find", b"/", b"-uid", u, b"-newermt", b"@%d" % (mt - DAYS_15 - 1),
          b"!", b"-newermt", b"@%d" % (mt + DAYS_15)]
    if size // 2 > 0:
        q3 += [b"-size", b"+%dc" % (size // 2 - 1)]
    queries["set3"].append(q3 + [b"-print0"])
    if len(n) >= 10:
        queries["glob"].append([b"find", b"/", b"-name", escape(n[:4]) + b"*" + escape(n[-4:]), b"-print0"])
        mid = len(n) // 2 - 3
        queries["substring"].append([b"find", b"/", b"-name", b"*" + escape(n[mid:mid + 6]) + b"*", b"-print0"])
for size, mt, uid, path in files[:5]:
    queries["totals-subtree"].append([b"du", grandparent(path)])
    queries["totals-topdir-by-user"].append([b"stats", b"--by", b"user", top_dir(path), b"-type", b"f"])
queries["broad-count"] = [[b"stats", b"/", b"-size", b"+%dc" % p90]]
queries["totals-root"] = [[b"stats", b"/"]]
queries["stat (fixed cost)"] = [[b"stat", rootb]]
# the few-query kinds are repeated so each kind has several samples a round
REPEAT = {"broad-count": 5, "totals-root": 5, "stat (fixed cost)": 5}


def answer(kind, stdout: bytes):
    if kind.startswith("set") or kind in ("glob", "substring"):
        return stdout.count(b"\0")
    if kind.startswith("stat ("):
        return 1
    return stdout.strip().splitlines()[-1].decode(errors="replace")  # the total line


windows = []  # (kind, round, cluster run's wall-clock start, end, ms, same answer)


def run(target, q):
    global last_window
    w0 = time.time()
    t = time.perf_counter()
    p = subprocess.run(TARGETS[target] + q, capture_output=True)
    dt = time.perf_counter() - t
    last_window = (w0, time.time())
    if p.returncode != 0:
        log(f"{target}: {b' '.join(q)!r} failed: {p.stderr.decode(errors='replace')[-300:].strip()}")
        return dt, None
    return dt, p.stdout


for k, qs in queries.items():
    log(f"{k}: {len(qs)} queries, e.g. {b' '.join(qs[0]).decode(errors='replace')[:160]}")

# --- timed rounds ---------------------------------------------------------
times = {}  # (kind, target) -> [ms]
pairs = {}  # kind -> [cluster/single of one query in one round]
counts = {}  # kind -> [matches]
differ = {}  # kind -> runs whose answers differed
moved = []  # rounds during which a cluster table changed owner or epoch


def placement():
    """Every cluster table's (number, owner, epoch) by `cluster status`."""
    out = subprocess.run(TARGETS["cluster"] + ["--json", "cluster", "status"],  # etcd: $SEXTANT_ETCD
                         capture_output=True, text=True).stdout
    try:
        return sorted((t["table"], t["owner"], t["epoch"]) for t in json.loads(out)["tables"])
    except (ValueError, KeyError):
        return None


for r in range(rounds + 1):
    before = placement()
    order = ["single", "cluster"] if r % 2 == 0 else ["cluster", "single"]
    t0 = time.monotonic()
    for kind, qs in queries.items():
        for q in qs:
            for _ in range(REPEAT.get(kind, 1)):
                got = {}
                for target in order:
                    dt, stdout = run(target, q)
                    got[target] = (dt, "failed" if stdout is None else answer(kind, stdout))
                    if target == "cluster":
                        cw = last_window
                if got["single"][1] != got["cluster"][1]:
                    log(f"round {r}: answers differ for {b' '.join(q)!r}: single {got['single'][1]}, "
                        f"cluster {got['cluster'][1]}")
                    differ[kind] = differ.get(kind, 0) + 1
                if r > 0:
                    windows.append({"kind": kind, "round": r, "start": cw[0], "end": cw[1],
                                    "single_ms": got["single"][0] * 1e3, "cluster_ms": got["cluster"][0] * 1e3,
                                    "same": got["single"][1] == got["cluster"][1]})
                if r == 0 or "failed" in (got["single"][1], got["cluster"][1]):
                    continue
                for target in order:
                    times.setdefault((kind, target), []).append(got[target][0] * 1e3)
                pairs.setdefault(kind, []).append(got["cluster"][0] / got["single"][0])
                if r == 1:
                    counts.setdefault(kind, []).append(got["single"][1])
    after = placement()
    if before != after:
        moved.append(r)
        log(f"round {r}: cluster tables moved during the round: {before} -> {after}")
    log(f"round {r}{' (warm-up, not counted)' if r == 0 else ''}: {time.monotonic() - t0:.1f} s")
    if r == 0:
        # The warm-up's searches count as requests on the tables; the
        # coordinator balances by them. Timed rounds start once no table
        # has changed owner or epoch for 15 s (at most 180 s).
        t1 = time.monotonic(); last = placement(); since = t1
        while time.monotonic() - t1 < 180 and time.monotonic() - since < 15:
            time.sleep(1)
            now_p = placement()
            if now_p != last:
                last, since = now_p, time.monotonic()
        log(f"after the warm-up: tables settled in {time.monotonic() - t1:.0f} s"
            f"{'' if time.monotonic() - since >= 15 else ' (NOT settled)'}")


# --- DirChain calls per query (untimed pass) ------------------------------
def scrape(url):
    text = urllib.request.urlopen(f"http://{url}/metrics", timeout=5).read().decode()
    auth = req = 0.0
    for line in text.splitlines():
        if line.startswith("sextant_auth_calls_total{"):
            auth += float(line.rsplit(" ", 1)[1])
        elif line.startswith("sextant_requests_total{"):
            req += float(line.rsplit(" ", 1)[1])
    return auth, req


def unexplained_calls(q, n=3):
    """gRPC calls the cluster's servers admitted beyond the requests and
    searches they counted, per run of q."""
    before = [scrape(u) for u in c_metrics]
    for _ in range(n):
        run("cluster", q)
    time.sleep(1.2)  # the exporter's counters are read as they stand; the search counter lands after the reply
    after = [scrape(u) for u in c_metrics]
    return sum((a[0] - b[0]) - (a[1] - b[1]) for a, b in zip(after, before)) / n


dirchain = {}
try:
    base = unexplained_calls([b"stat", rootb], 5)
    base_search = unexplained_calls([b"find", rootb, b"-maxdepth", b"0", b"-print0"], 5)
    for kind, qs in queries.items():
        if kind.startswith("stat ("):
            continue
        dirchain[kind] = max(0.0, st.mean(unexplained_calls(q, 1) for q in qs[:10]) - base_search)
    log(f"calls not counted as requests: stat {base:.1f}, find -maxdepth 0 {base_search:.1f} per run")
except Exception as e:  # metrics are optional
    log(f"no DirChain estimate: {e}")

# --- summary ----------------------------------------------------------------
print(f"== {rounds} rounds (after a warm-up), {nfiles} files below {root}; medians of every run, ms")
print(f"{'query':24} {'n':>4} {'matches(med)':>12} {'single':>9} {'cluster':>9} {'ratio':>6} "
      f"{'ratio/query(med)':>16} {'DirChain/q':>10}")
print(f"answers that differed (runs): {differ or 'none'}; rounds in which tables moved: {moved or 'none'}")
# Runs during which a table changed hands: from the servers' logs
# ("table handed over"), given in $SEXTANT_CLUSTER_LOGS (':'-separated).
handovers = []
for f in filter(None, os.environ.get("SEXTANT_CLUSTER_LOGS", "").split(":")):
    for line in open(f, errors="replace"):
        if "table handed over" in line or "table added: serving" in line:
            ts = line.split()[0]  # 2026-11-27T06:17:04.912320Z
            base, frac = ts.rstrip("Z").split(".")
            handovers.append(calendar.timegm(time.strptime(base, "%Y-%m-%dT%H:%M:%S")) + float("0." + frac))
handovers.sort()
for w in windows:
    w["move"] = any(w["start"] - 0.05 <= h <= w["end"] + 0.05 for h in handovers)
if handovers:
    print(f"table handovers during the timed rounds: "
          f"{sum(1 for h in handovers if windows and windows[0]['start'] <= h <= windows[-1]['end'])}; "
          f"runs overlapping one: {sum(w['move'] for w in windows)} of {len(windows)}; "
          f"of those with another answer than the single server: "
          f"{sum(w['move'] and not w['same'] for w in windows)}; differing answers in runs overlapping none: "
          f"{sum(not w['move'] and not w['same'] for w in windows)}")
    print("medians over the runs during which no table changed hands (ms):")
    for kind in queries:
        ok = [w for w in windows if w["kind"] == kind and not w["move"] and w["same"]]
        if ok:
            ms, mc = st.median(w["single_ms"] for w in ok), st.median(w["cluster_ms"] for w in ok)
            print(f"  {kind:24} {len(ok):4} {ms:9.2f} {mc:9.2f} {mc / ms:6.2f}  per-query ratio "
                  f"{st.median(w['cluster_ms'] / w['single_ms'] for w in ok):5.2f}")
rows = []
for kind in queries:
    s, c = times[(kind, "single")], times[(kind, "cluster")]
    ms, mc = st.median(s), st.median(c)
    m = counts.get(kind, [])
    # paths counted, or the first number of the totals line
    mm = st.median(m) if m and all(isinstance(x, int) for x in m) else (m[0].split()[0] if m else "")
    dc = dirchain.get(kind)
    print(f"{kind:24} {len(s):4} {mm!s:>12.12} {ms:9.2f} {mc:9.2f} {mc / ms:6.2f} "
          f"{st.median(pairs[kind]):16.2f} {'' if dc is None else f'{dc:10.1f}'}")
    rows.append({"kind": kind, "n": len(s), "matches": m, "single_ms": ms, "cluster_ms": mc,
                 "ratio": mc / ms, "ratio_per_query": st.median(pairs[kind]), "dirchain_per_query": dc})
json.dump({"files": nfiles, "rows": rows, "differ": differ, "moved": moved, "windows": windows,
           "handovers": handovers}, open(sys.argv[12] if len(sys.argv) > 12 else "/dev/null", "w"))
