#!/usr/bin/env python3
"""A directory moved below a path twenty tables deep on a cluster, with and
without the BORROW read-ahead (issue 21), in one run.

usage: deep-move-bench.py BIN [RUNS]

Starts two clusters of etcd plus three `BIN serve` (table_dir_limit = 1,
table_inode_limit = 4: every directory a table of its own, as the test
`cluster::a_directory_moves_below_a_path_twenty_tables_deep`), one with
SEXTANT_BORROW_READ_AHEAD=0 ("off": a BORROW round per refused table),
one without ("on"). In each: `mkdir -p /l0/…/l19`, `mkdir /x`, `touch
/x/f` on s0, then s1 and s2 join and the tables spread (each server >= 5).
Then RUNS (7) rounds; each times `mv /x /l0/…/l19/x` (the CLI's wall
time) on both clusters, the order alternating by round, and moves it back
untimed. Before each timed move the cluster must be settled: no borrow,
no table moving or away from home, the same owners two looks 300 ms
apart. Borrowed tables are RETURNed after 500 ms idle
(SEXTANT_BENCH_RETURN_AFTER; the timed move does not wait for a RETURN).
Prints per run and the medians: ms, BORROW rounds
(sextant_borrow_rounds_total over the three servers; the "off" cluster
counts them too) and borrow key writes (sextant_table_pulls_total).
KEEP=1 keeps the scratch directory.
"""
import json, os, shutil, socket, statistics as st, subprocess, sys, tempfile, time, urllib.request

BIN = os.path.abspath(sys.argv[1])
RUNS = int(sys.argv[2]) if len(sys.argv) > 2 else 7
DEEP = "".join(f"/l{i}" for i in range(20))
procs = []


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def log(*a):
    print(time.strftime("[%H:%M:%S]", time.gmtime()), *a, file=sys.stderr, flush=True)


class Cluster:
    def __init__(self, work, name, env):
        self.dir = os.path.join(work, name)
        os.makedirs(self.dir)
        self.name = name
        with open(os.path.join(self.dir, "limits.toml"), "w") as f:
            f.write("table_dir_limit = 1\ntable_inode_limit = 4\n")
        c, p = free_port(), free_port()
        self.etcd = f"http://127.0.0.1:{c}"
        procs.append(subprocess.Popen(
            ["etcd", "--name", "t", "--data-dir", os.path.join(self.dir, "etcd"),
             "--listen-client-urls", self.etcd, "--advertise-client-urls", self.etcd,
             "--listen-peer-urls", f"http://127.0.0.1:{p}",
             "--initial-advertise-peer-urls", f"http://127.0.0.1:{p}",
             "--initial-cluster", f"t=http://127.0.0.1:{p}", "--unsafe-no-fsync"],
            stdout=subprocess.DEVNULL, stderr=open(os.path.join(self.dir, "etcd.log"), "w")))
        while True:
            try:
                socket.create_connection(("127.0.0.1", c)).close()
                break
            except OSError:
                time.sleep(0.05)
        self.env = dict(os.environ, SEXTANT_BENCH_RETURN_AFTER="500ms", **env)
        self.metrics = []
        self.addr = {}

    def serve(self, s):
        m = free_port()
        self.metrics.append(m)
        out = os.path.join(self.dir, f"{s}.out")
        env = dict(self.env, SEXTANT_METRICS=f"127.0.0.1:{m}")
        procs.append(subprocess.Popen(
            [BIN, "serve", "--data", os.path.join(self.dir, s), "--listen", "127.0.0.1:0",
             "--socket", "off", "--config", os.path.join(self.dir, "limits.toml"),
             "--etcd", self.etcd, "--name", s, "--cluster-store", os.path.join(self.dir, "store")],
            stdout=open(out, "w"), stderr=open(os.path.join(self.dir, f"{s}.log"), "w"), env=env))
        while True:
            text = open(out).read()
            if "listening on " in text:
                self.addr[s] = text.split("listening on ")[1].split()[0]
                return
            time.sleep(0.05)

    def cli(self, *args, check=True):
        out = subprocess.run([BIN, "--server", self.addr["s0"], "--data", os.path.join(self.dir, "s0"), *args],
                             capture_output=True, env=self.env)
        if check and out.returncode != 0:
            raise SystemExit(f"{self.name}: {args}: {out.stderr.decode()[-400:]}")
        return out

    def status(self):
        out = subprocess.run([BIN, "--json", "cluster", "status", "--etcd", self.etcd], capture_output=True,
                             env=dict(self.env, SEXTANT_SECRET_FILE=os.path.join(self.dir, "s0", "secret")))
        return json.loads(out.stdout) if out.returncode == 0 else None

    def settled_layout(self):
        s = self.status()
        if not s or s["borrows"]:
            return None
        if any(t["moving_to"] or t["home"] for t in s["tables"]):
            return None
        return sorted((t["table"], t["owner"]) for t in s["tables"])

    def settle(self, limit=90):
        deadline = time.time() + limit
        last = None
        while time.time() < deadline:
            now = self.settled_layout()
            if now is not None and now == last:
                return now
            last = now
            time.sleep(0.3)
        log(f"{self.name}: not settled after {limit} s; measuring anyway")
        return last

    def counted(self):
        sums = [0.0, 0.0]
        for m in self.metrics:
            body = urllib.request.urlopen(f"http://127.0.0.1:{m}/metrics", timeout=5).read().decode()
            for line in body.splitlines():
                for i, name in enumerate(["sextant_borrow_rounds_total ", "sextant_table_pulls_total "]):
                    if line.startswith(name):
                        sums[i] += float(line.split()[1])
        return sums


def main():
    work = tempfile.mkdtemp(prefix="deep-move-bench.")
    try:
        clusters = {"off": Cluster(work, "off", {"SEXTANT_BORROW_READ_AHEAD": "0"}), "on": Cluster(work, "on", {})}
        for c in clusters.values():
            c.serve("s0")
            while c.cli("ls", "/", check=False).returncode != 0:
                time.sleep(0.1)
            c.cli("mkdir", "-p", DEEP)
            c.cli("mkdir", "/x")
            c.cli("touch", "/x/f")
            c.serve("s1")
            c.serve("s2")
        for c in clusters.values():
            deadline = time.time() + 180
            while True:
                s = c.status()
                if s and len(s["servers"]) == 3 and all(x["tables"] >= 5 for x in s["servers"]):
                    break
                if time.time() > deadline:
                    raise SystemExit(f"{c.name}: the tables did not spread: {s and s['servers']}")
                time.sleep(0.5)
            log(c.name, "spread:", [(x["name"], x["tables"]) for x in s["servers"]])
        res = {k: [] for k in clusters}
        for r in range(RUNS):
            order = ["off", "on"] if r % 2 == 0 else ["on", "off"]
            for k in order:
                c = clusters[k]
                layout = c.settle()
                before = c.counted()
                t0 = time.monotonic()
                c.cli("mv", "/x", f"{DEEP}/x")
                ms = (time.monotonic() - t0) * 1e3
                after = c.counted()
                rounds, pulls = after[0] - before[0], after[1] - before[1]
                c.cli("mv", f"{DEEP}/x", "/x")
                owners = {}
                for _, o in layout or []:
                    owners[o] = owners.get(o, 0) + 1
                res[k].append((ms, rounds, pulls))
                log(f"run {r} {k:3s}: {ms:8.1f} ms, {rounds:.0f} BORROW rounds, {pulls:.0f} borrow key writes; tables {sorted(owners.items())}")
        print(f"{'read-ahead':10s} {'runs':>4s} {'median ms':>10s} {'min ms':>8s} {'max ms':>8s} {'rounds':>7s} {'key writes':>10s}")
        for k in ("off", "on"):
            v = res[k]
            ms = [x[0] for x in v]
            print(f"{k:10s} {len(v):4d} {st.median(ms):10.1f} {min(ms):8.1f} {max(ms):8.1f} "
                  f"{st.median(x[1] for x in v):7.1f} {st.median(x[2] for x in v):10.1f}")
        off, on = st.median(x[0] for x in res["off"]), st.median(x[0] for x in res["on"])
        print(f"on / off (medians): {on / off:.3f}")
        print(json.dumps({k: v for k, v in res.items()}))
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in reversed(procs):
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
        if os.environ.get("KEEP") == "1":
            log("kept:", work)
        else:
            shutil.rmtree(work, ignore_errors=True)


main()
