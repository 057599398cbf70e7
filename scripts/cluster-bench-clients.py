#!/usr/bin/env python3
"""Helper of scripts/cluster-bench.sh: runs one `sextant bench` client per
server at once and attributes server CPU to phases.

Client I talks to server I and works under directory I (placed on server I),
so server I's CPU during client I's phase window is that phase's cost. A
sampler reads utime+stime of every server from /proc every 10 ms (per-thread schedstat); each
client's phase windows come from its progress lines on stderr (the moment
the line arrives is the phase's end, its JSON `seconds` gives the start).

Usage: cluster-bench-clients.py BIN SECRET_FILE DATA PIDS ADDRS DIRS -- BENCH_ARGS...
(PIDS, ADDRS, DIRS comma-separated, one per client/server). Prints one JSON
object: per phase the ops of all clients, the paired server CPU µs per op,
the whole-window CPU of all servers per op, aggregate ops/s, worst p99/max;
and `backups` (the clients' sums) when a client held log-less backups.
"""
import bisect, json, os, re, subprocess, sys, threading, time

binp, secret, data, pids, addrs, dirs = sys.argv[1:7]
assert sys.argv[7] == "--"
bench_args = sys.argv[8:]
pids = [int(p) for p in pids.split(",")]
addrs = addrs.split(","); dirs = dirs.split(",")
TCK = os.sysconf("SC_CLK_TCK")

seen = {}  # (pid, tid) -> last run time (s) from /proc/PID/task/TID/schedstat
def cpu(pid):
    """CPU seconds of every thread the process has had (ns resolution:
    schedstat's run time; a thread that exits keeps its last value)."""
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            seen[(pid, tid)] = int(open(f"/proc/{pid}/task/{tid}/schedstat").read().split()[0]) / 1e9
        except (OSError, ValueError, IndexError):
            pass
    return sum(v for (p, _), v in seen.items() if p == pid)

samples = {p: ([], []) for p in pids}  # pid -> (times, cpu)
stop = False
def sampler():
    while not stop:
        t = time.monotonic()
        for p in pids:
            try:
                c = cpu(p)
            except OSError:
                continue
            samples[p][0].append(t); samples[p][1].append(c)
        time.sleep(0.01)

def cpu_at(p, t):
    ts, cs = samples[p]
    i = bisect.bisect_left(ts, t)
    if i <= 0: return cs[0]
    if i >= len(ts): return cs[-1]
    t0, t1, c0, c1 = ts[i-1], ts[i], cs[i-1], cs[i]
    return c0 + (c1 - c0) * (t - t0) / (t1 - t0) if t1 > t0 else c1

th = threading.Thread(target=sampler, daemon=True); th.start()
time.sleep(0.05)
env = dict(os.environ, SEXTANT_SECRET_FILE=secret)
procs, lines = [], []
t_start = time.monotonic()
for i, (a, d) in enumerate(zip(addrs, dirs)):
    p = subprocess.Popen([binp, "--server", a, "--data", data, "bench", "--under", d, "--json"] + bench_args,
                         env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    procs.append(p); lines.append([])
def reader(i, p):
    for line in p.stderr:
        lines[i].append((time.monotonic(), line.rstrip()))
readers = [threading.Thread(target=reader, args=(i, p), daemon=True) for i, p in enumerate(procs)]
for r in readers: r.start()
outs = [p.stdout.read() for p in procs]
for p in procs: p.wait()
for r in readers: r.join()
t_end = time.monotonic()
time.sleep(0.02); stop = True; th.join()

res, errors = [], []
for i, (p, o) in enumerate(zip(procs, outs)):
    if p.returncode != 0:
        errors.append(f"client {i} exit {p.returncode}: " + " | ".join(l for _, l in lines[i])[-600:])
        res.append(None); continue
    res.append(json.loads(o))
if errors:
    print(json.dumps({"error": errors})); sys.exit(1)

phases = {}
for i, r in enumerate(res):
    ends = {}
    for t, l in lines[i]:
        m = re.match(r"(file-\w+|dir-\w+): (\d+) ops in", l)
        if m: ends[m[1]] = t
    for ph in r["median"]:
        name = ph["phase"]
        end = ends[name]; start = end - ph["seconds"]
        c = cpu_at(pids[i], end) - cpu_at(pids[i], start)
        e = phases.setdefault(name, {"ops": 0, "paired_cpu_s": 0.0, "starts": [], "ends": [],
                                     "client_ops_per_sec": [], "p99_us": [], "max_us": [], "p50_us": []})
        e["ops"] += ph["ops"]; e["paired_cpu_s"] += c
        e["starts"].append(start); e["ends"].append(end)
        e["client_ops_per_sec"].append(ph["ops_per_sec"])
        e["p50_us"].append(ph["p50_us"]); e["p99_us"].append(ph["p99_us"]); e["max_us"].append(ph["max_us"])
        if "entries_per_sec" in ph:
            e["entries"] = e.get("entries", 0) + ph["entries_per_sec"] * ph["seconds"]

out = {"clients": len(procs), "wall_s": t_end - t_start,
       "ops_all_phases": sum(e["ops"] for e in phases.values()),
       "all_servers_cpu_s": sum(cpu_at(p, t_end) - cpu_at(p, t_start) for p in pids), "phases": {}}
for name, e in phases.items():
    w0, w1 = min(e["starts"]), max(e["ends"])
    allcpu = sum(cpu_at(p, w1) - cpu_at(p, w0) for p in pids)
    # the span in which every client was in this phase
    o0, o1 = max(e["starts"]), min(e["ends"])
    out["phases"][name] = {
        "ops": e["ops"],
        "paired_cpu_us_per_op": 1e6 * e["paired_cpu_s"] / e["ops"],
        "window_cpu_us_per_op": 1e6 * allcpu / e["ops"],
        "agg_ops_per_sec": e["ops"] / (w1 - w0),
        "sum_client_ops_per_sec": sum(e["client_ops_per_sec"]),
        "overlap_frac": max(0.0, o1 - o0) / (w1 - w0),
        "p50_us_median": sorted(e["p50_us"])[len(e["p50_us"]) // 2],
        "p99_us_worst": max(e["p99_us"]), "max_us_worst": max(e["max_us"]),
        **({"entries": e["entries"]} if "entries" in e else {}),
    }
# what the clients held for the servers' recovery when they finished
# (log-less servers; `sextant bench` reports it when it held anything)
held = [r["backups"] for r in res if r.get("backups")]
if held:
    out["backups"] = {k: sum(b[k] for b in held) for k in ("entries", "bytes", "peak_bytes", "received")}
print(json.dumps(out))
