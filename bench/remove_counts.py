#!/usr/bin/env python3
"""Per-remove costs of daemons behind a mount (docs/BENCHMARKS.md, issue 5).

    bench/remove_counts.py DIR FILES_PER_THREAD PID[,PID...] [--threads N]

Makes DIR/rmtest/d0 .. d{N-1} with FILES_PER_THREAD files each (untimed,
then stats them so the kernel caches the names), then N threads unlink all
of them at once. Prints removes/s and, for each PID (e.g. the server and
the mount daemon, or bindfs), its voluntary and involuntary context
switches and CPU time per remove, read from /proc before and after (all
threads of the process, including ones that exited: /proc/PID/stat counts
those, the per-thread switch counts do not, so a daemon that retires
threads can show negative switches).
"""
import argparse
import os
import threading
import time

CLK_TCK = os.sysconf("SC_CLK_TCK")


def counters(pid):
    vol = invol = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/status") as f:
                for line in f:
                    if line.startswith("voluntary_ctxt_switches"):
                        vol += int(line.split()[1])
                    elif line.startswith("nonvoluntary_ctxt_switches"):
                        invol += int(line.split()[1])
        except FileNotFoundError:
            pass  # the thread exited meanwhile
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    ticks = int(fields[11]) + int(fields[12])  # utime + stime
    return vol, invol, ticks


def in_threads(n, work):
    threads = [threading.Thread(target=work, args=(t,)) for t in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dir")
    ap.add_argument("files", type=int)
    ap.add_argument("pids")
    ap.add_argument("--threads", type=int, default=4)
    a = ap.parse_args()
    pids = [p for p in a.pids.split(",") if p]
    root = os.path.join(a.dir, "rmtest")
    dirs = [os.path.join(root, f"d{t}") for t in range(a.threads)]
    for d in dirs:
        os.makedirs(d)

    def make(t):
        for i in range(a.files):
            os.close(os.open(f"{dirs[t]}/f{i}", os.O_CREAT | os.O_WRONLY | os.O_EXCL, 0o644))
        for i in range(a.files):
            os.stat(f"{dirs[t]}/f{i}")

    def remove(t):
        for i in range(a.files):
            os.unlink(f"{dirs[t]}/f{i}")

    in_threads(a.threads, make)
    before = {p: counters(p) for p in pids}
    start = time.monotonic()
    in_threads(a.threads, remove)
    seconds = time.monotonic() - start
    after = {p: counters(p) for p in pids}
    ops = a.threads * a.files
    line = [f"{ops / seconds:.0f} removes/s"]
    for p in pids:
        (v0, n0, c0), (v1, n1, c1) = before[p], after[p]
        cpu_us = (c1 - c0) / CLK_TCK * 1e6 / ops
        line.append(
            f"pid {p}: voluntary {(v1 - v0) / ops:.2f} involuntary {(n1 - n0) / ops:.2f} "
            f"cpu {cpu_us:.1f} us"
        )
    print(" | ".join(line))
    for d in dirs:
        os.rmdir(d)
    os.rmdir(root)


if __name__ == "__main__":
    main()
