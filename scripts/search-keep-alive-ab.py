#!/usr/bin/env python3
"""Searches with keep-alives against the same searches without (issue 21,
what the servers' keep-alive relay costs per search; the client's switch
`SEXTANT_SEARCH_KEEP_ALIVE=0`), on the servers `scripts/cluster-bench.sh
search` holds (its HOLD file: the single server's and the cluster's
command lines and pids).

Every round runs, for each mode (keep-alives on, off; which goes first
alternates by round), each query RUNS times on the single server, then on
the cluster; round 0 warms up and is not counted. Per run: the wall time
of the CLI process (start, connection, route map, search). Per batch of
RUNS runs: the CPU the servers used (the sum over their threads of
/proc/PID/task/*/schedstat's run time; the single server alone, or the
four cluster servers together) divided by RUNS. Prints per query and
target the medians of the wall times (and p90) and of the per-batch CPU
over the counted rounds, on/off ratios of each (above 1: keep-alives cost), and the
ratio of each round's medians (their median and spread), and checks that every run of
a query printed the same answer. Load average at the start of each round.

usage: search-keep-alive-ab.py HOLD_FILE ROUNDS RUNS ROOT [OUT.json]
queries (ROOT /u): QUERIES, `|`-separated, each a CLI argument list split
on spaces; default: a name with few hits, a name with many, a count.
"""
import json
import os
import statistics as st
import subprocess
import sys
import time

hold, rounds, runs, root = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
out_path = sys.argv[5] if len(sys.argv) > 5 else None


def from_hold(expr):
    r = subprocess.run(["bash", "-c", f'source "$1"; {expr}', "_", hold],
                       capture_output=True, check=True)
    return r.stdout


S = from_hold('printf "%s\\0" "${S[@]}"').decode().rstrip("\0").split("\0")
C = from_hold('printf "%s\\0" "${C[@]}"').decode().rstrip("\0").split("\0")
etcd = from_hold('printf "%s" "$SEXTANT_ETCD"').decode()
logs = from_hold('printf "%s" "$CLUSTER_LOGS"').decode()
single_pid = int(from_hold('printf "%s" "$SINGLE_PID"'))
cluster_pids = []
for name in sorted(os.listdir(logs)):
    if name.endswith(".pid") and name.startswith("s"):
        cluster_pids.append(int(open(os.path.join(logs, name)).read()))
TARGETS = {"single": (S, [single_pid]), "cluster": (C, cluster_pids)}
QUERIES = os.environ.get(
    "QUERIES",
    f"find {root} -name 00-about-docs.txt -print0|find {root} -name copyright -print0"
    f"|stats {root} -size +100000c")
QUERIES = [q.split(" ") for q in QUERIES.split("|")]


def log(*a):
    print(f"[{time.strftime('%H:%M:%S', time.gmtime())}]", *a, file=sys.stderr, flush=True)


def cpu_ns(pids):
    total = 0
    for pid in pids:
        tdir = f"/proc/{pid}/task"
        for t in os.listdir(tdir):
            try:
                with open(f"{tdir}/{t}/schedstat") as f:
                    total += int(f.read().split()[0])
            except (FileNotFoundError, ProcessLookupError):
                pass  # a thread that ended meanwhile
    return total


def answer(q, stdout):
    if "-print0" in q:
        return stdout.count(b"\0")
    lines = stdout.strip().splitlines()
    return lines[-1].decode(errors="replace") if lines else ""


env_of = {
    "on": dict(os.environ, SEXTANT_SEARCH_KEEP_ALIVE="1", SEXTANT_ETCD=etcd),
    "off": dict(os.environ, SEXTANT_SEARCH_KEEP_ALIVE="0", SEXTANT_ETCD=etcd),
}
# results[(query, target, mode)] = {"wall": [[ms per run] per round], "cpu": [µs/run per round]}
results = {}
answers = {}
bad = 0
loads = []
for r in range(rounds + 1):
    load = os.getloadavg()
    loads.append(load)
    modes = ["on", "off"] if r % 2 == 0 else ["off", "on"]
    log(f"round {r}{' (warm-up)' if r == 0 else ''}: {' then '.join(modes)}; load {load[0]:.2f}")
    for mode in modes:
        for qi, q in enumerate(QUERIES):
            for target, (cmd, pids) in TARGETS.items():
                walls = []
                c0 = cpu_ns(pids)
                for _ in range(runs):
                    t0 = time.perf_counter()
                    p = subprocess.run(cmd + q, env=env_of[mode], capture_output=True)
                    walls.append((time.perf_counter() - t0) * 1e3)
                    a = (p.returncode, answer(q, p.stdout))
                    key = (qi, target)
                    if p.returncode != 0 or answers.setdefault(key, a) != a:
                        bad += 1
                        log(f"{target} {mode} {' '.join(q)}: {a} (first {answers[key]}); "
                            f"stderr {p.stderr[-200:]!r}")
                cpu = (cpu_ns(pids) - c0) / runs / 1e3
                if r == 0:
                    continue
                e = results.setdefault((qi, target, mode), {"wall": [], "cpu": []})
                e["wall"].append(walls)
                e["cpu"].append(cpu)


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p * len(xs)))]


print(f"rounds {rounds} (+1 warm-up), {runs} runs per query, target and mode per round; "
      f"load at the rounds' starts {[round(lo[0], 2) for lo in loads]}; differing answers {bad}")
print("| query | target | answer | on: wall p50 / p90 ms | off: wall p50 / p90 ms | on/off p50 "
      "| per-round on/off p50 (median, min–max) | server CPU µs/search on / off | on/off CPU |")
print("|---|---|---|---|---|---|---|---|---|")
summary = []
for qi, q in enumerate(QUERIES):
    for target in TARGETS:
        on, off = results[(qi, target, "on")], results[(qi, target, "off")]
        w_on = [x for rr in on["wall"] for x in rr]
        w_off = [x for rr in off["wall"] for x in rr]
        per_round = [st.median(a) / st.median(b) for a, b in zip(on["wall"], off["wall"])]
        c_on, c_off = st.median(on["cpu"]), st.median(off["cpu"])
        row = {
            "query": " ".join(q), "target": target, "answer": str(answers[(qi, target)][1]),
            "wall_on_p50": st.median(w_on), "wall_on_p90": pct(w_on, 0.9),
            "wall_off_p50": st.median(w_off), "wall_off_p90": pct(w_off, 0.9),
            "ratio_p50": st.median(w_on) / st.median(w_off),
            "per_round_ratio": per_round,
            "cpu_on": c_on, "cpu_off": c_off, "cpu_on_rounds": on["cpu"], "cpu_off_rounds": off["cpu"],
            "cpu_ratio": c_on / c_off if c_off else None,
        }
        summary.append(row)
        print(f"| `{row['query']}` | {target} | {row['answer']} "
              f"| {row['wall_on_p50']:.2f} / {row['wall_on_p90']:.2f} "
              f"| {row['wall_off_p50']:.2f} / {row['wall_off_p90']:.2f} | {row['ratio_p50']:.3f} "
              f"| {st.median(per_round):.3f} ({min(per_round):.3f}–{max(per_round):.3f}) "
              f"| {c_on:.0f} / {c_off:.0f} | {row['cpu_ratio']:.3f} |")
if out_path:
    with open(out_path, "w") as f:
        json.dump({"rounds": rounds, "runs": runs, "loads": loads, "bad": bad, "rows": summary,
                   "raw": {f"{k[0]}/{k[1]}/{k[2]}": v for k, v in results.items()}}, f)
