#!/usr/bin/env python3
"""Helper of scripts/cluster-bench.sh migration: moves the table holding
DIR back and forth between two servers while `sextant bench` loops work in
DIR, and reports each move's duration and the clients' worst latencies.

Usage: cluster-bench-migration.py BIN SECRET_FILE DATA ETCD ADDR0 ADDR1 DIR MOVES
Phases: BASE seconds of client loops with no move (baseline), then MOVES
moves (to s1, s0, s1, …) one every GAP seconds, then the loops stop.
Each bench run is recorded with its start/end; a run "overlaps a move" if
any move's span falls inside it.
"""
import json, os, subprocess, sys, threading, time, statistics as st

binp, secret, data, etcd, a0, a1, d, moves = sys.argv[1:9]
moves = int(moves)
BASE = float(os.environ.get("BASE", "8")); GAP = float(os.environ.get("GAP", "1.5"))
env = dict(os.environ, SEXTANT_SECRET_FILE=secret)
stop = False
runs = []  # (loop, start, end, {phase: (p99, max)}, error)
LOOPS = [  # (server, bench args): a create+stat+remove loop and a stat loop
    (a0, ["-F", "-n", "4", "-i", "300", "--shared", "--phases", "create,stat,remove"]),
    (a1, ["-F", "-n", "2", "-i", "2000", "--shared", "--phases", "stat"]),
]
def loop(k):
    addr, args = LOOPS[k]
    while not stop:
        t0 = time.monotonic()
        p = subprocess.run([binp, "--server", addr, "--data", data, "bench", "--under", d, "--json", "-q"] + args,
                           env=env, capture_output=True, text=True)
        t1 = time.monotonic()
        if p.returncode != 0:
            runs.append((k, t0, t1, {}, p.stderr.strip()[-400:])); time.sleep(0.2); continue
        j = json.loads(p.stdout)
        runs.append((k, t0, t1, {ph["phase"]: (ph["p99_us"], ph["max_us"]) for ph in j["median"]}, None))
ths = [threading.Thread(target=loop, args=(k,)) for k in range(len(LOOPS))]
for t in ths: t.start()
time.sleep(BASE)
t_moves0 = time.monotonic()
mv = []  # (target, start, end, rc, output)
for i in range(moves):
    target = "s1" if i % 2 == 0 else "s0"
    t0 = time.monotonic()
    p = subprocess.run([binp, "--server", a0, "--data", data, "cluster", "move", d, target, "--etcd", etcd],
                       env=env, capture_output=True, text=True)
    t1 = time.monotonic()
    mv.append((target, t0, t1, p.returncode, (p.stdout + p.stderr).strip()[-300:]))
    time.sleep(GAP)
t_moves1 = time.monotonic()
# CLI start-up and etcd connection, for reference: `cluster status` timed
cli = []
for _ in range(5):
    t0 = time.monotonic()
    subprocess.run([binp, "--server", a0, "--data", data, "cluster", "status", "--etcd", etcd], env=env, capture_output=True)
    cli.append(time.monotonic() - t0)
stop = True
for t in ths: t.join()

durs = sorted(1e3 * (t1 - t0) for _, t0, t1, rc, _ in mv if rc == 0)
def pct(v, q): return v[min(len(v) - 1, int(round(q * (len(v) - 1))))] if v else float("nan")
def worst(rs):
    out = {}
    for k, _, _, ph, _ in rs:
        for name, (p99, mx) in ph.items():
            o = out.setdefault(f"loop{k}:{name}", [0, 0, 0]); o[0] = max(o[0], p99); o[1] = max(o[1], mx); o[2] += 1
    return {k: {"worst_p99_ms": v[0] / 1e3, "max_ms": v[1] / 1e3, "runs": v[2]} for k, v in out.items()}
base = [r for r in runs if r[2] <= t_moves0]
during = [r for r in runs if any(r[1] <= m0 and m1 <= r[2] for _, m0, m1, rc, _ in mv)]
res = {
    "moves": len(mv), "failed_moves": [m for m in mv if m[3] != 0],
    "move_ms": [round(1e3 * (t1 - t0), 1) for _, t0, t1, _, _ in mv],
    "move_p50_ms": st.median(durs) if durs else None, "move_p99_ms": pct(durs, 0.99), "move_max_ms": max(durs) if durs else None,
    "cli_status_ms_median": 1e3 * st.median(cli),
    "baseline": worst(base), "runs_spanning_a_move": worst(during),
    "client_errors": [r[4] for r in runs if r[4]],
    "runs_total": len(runs), "runs_spanning_a_move_n": len(during),
    "move_times_mono": [(round(t0, 3), round(t1, 3)) for _, t0, t1, _, _ in mv],
}
print(json.dumps(res, indent=1))
