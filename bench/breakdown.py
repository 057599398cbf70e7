#!/usr/bin/env python3
"""Per-entry breakdown of a scripts/workload-breakdown.sh run (issue 23).

    python3 bench/breakdown.py OUT [--json]

OUT holds one directory per run, TARGET-WORKLOAD, with: entries (the
count to divide by), wall (seconds), trace.txt (the fuse_request_send
tracepoint's lines), metrics0/metrics1 (the server's /metrics before and
after: request counts and seconds by op, journal syncs), mount0/mount1 and
server0/server1 (context switches, /proc/PID/io, CPU ticks), times0/times1
(bash's `times`: the workload's own CPU). Prints a markdown table per
workload, one row per target, every count divided by the entries; with
--json, one JSON object per run.
"""

import json
import os
import re
import sys
from collections import Counter

OPCODE = re.compile(r"\((FUSE_[A-Z0-9_]+)\)")
SAMPLE = re.compile(r'^(\w+)(\{[^}]*\})?\s+([0-9.eE+-]+)$')
TARGETS = ["local", "bindfs", "logless", "journal"]
WORKLOADS = ["tar", "cp", "rsync", "git", "postmark"]
TICKS = os.sysconf("SC_CLK_TCK")


def read(path, default=""):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return default


def metrics(text):
    """{(name, labels): value} of a Prometheus text page."""
    out = {}
    for line in text.splitlines():
        m = SAMPLE.match(line.strip())
        if m:
            out[(m.group(1), m.group(2) or "")] = float(m.group(3))
    return out


def pairs(text):
    out = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2:
            try:
                out[parts[0]] = float(parts[1])
            except ValueError:
                pass
    return out


def child_cpu(text):
    """User + system seconds of the children in bash's `times` output."""
    lines = text.splitlines()
    if len(lines) < 2:
        return 0.0
    total = 0.0
    for t in lines[1].split():
        m = re.fullmatch(r"(\d+)m([0-9.]+)s", t)
        if m:
            total += int(m.group(1)) * 60 + float(m.group(2))
    return total


def delta(before, after):
    return {k: v - before.get(k, 0.0) for k, v in after.items()}


def run(path):
    target, _, workload = os.path.basename(path).partition("-")
    entries = float(read(os.path.join(path, "entries"), "0").strip() or 0)
    r = {
        "target": target,
        "workload": workload,
        "entries": entries,
        "wall_s": float(read(os.path.join(path, "wall"), "0").strip() or 0),
        "failed": os.path.exists(os.path.join(path, "failed")),
    }
    trace = read(os.path.join(path, "trace.txt"))
    ops = Counter(OPCODE.findall(trace))
    r["fuse"] = {k.removeprefix("FUSE_").lower(): v for k, v in ops.items()}
    r["fuse_total"] = sum(ops.values())
    m = delta(
        metrics(read(os.path.join(path, "metrics0"))),
        metrics(read(os.path.join(path, "metrics1"))),
    )
    server = Counter()
    for (name, labels), v in m.items():
        if name == "sextant_requests_total" and v:
            op = re.search(r'op="([^"]+)"', labels)
            outcome = re.search(r'outcome="([^"]+)"', labels)
            key = op.group(1) if op else "?"
            if outcome and outcome.group(1) != "ok":
                key += "!"  # failed (e.g. ENOENT of a lookup, ENODATA of a getxattr)
            server[key] += v
    r["server"] = dict(server)
    # Seconds the server spent per op, arrival to reply (sync included).
    seconds = Counter()
    for (name, labels), v in m.items():
        if name == "sextant_request_seconds_sum" and v:
            op = re.search(r'op="([^"]+)"', labels)
            seconds[op.group(1) if op else "?"] += v
    r["server_seconds"] = dict(seconds)
    r["server_seconds_total"] = sum(seconds.values())
    r["server_total"] = sum(server.values())
    r["workload_cpu_s"] = child_cpu(read(os.path.join(path, "times1"))) - child_cpu(
        read(os.path.join(path, "times0"))
    )
    r["journal_syncs"] = m.get(("sextant_journal_syncs_total", ""), 0.0)
    # Their fdatasyncs, as timed by the server (0 from builds without it).
    r["journal_sync_s"] = m.get(("sextant_journal_sync_microseconds_total", ""), 0.0) / 1e6
    for who in ("mount", "server"):
        d = delta(
            pairs(read(os.path.join(path, who + "0"))),
            pairs(read(os.path.join(path, who + "1"))),
        )
        r[who + "_proc"] = {
            "ctxt": d.get("ctxt_vol", 0) + d.get("ctxt_invol", 0),
            "syscalls": d.get("syscr", 0) + d.get("syscw", 0),
            "write_bytes": d.get("write_bytes", 0),
            "cpu_s": d.get("cpu_ticks", 0) / TICKS,
        }
    return r


def per(v, n):
    return f"{v / n:.2f}" if n else "-"


def top(counts, n, k=6):
    items = sorted(counts.items(), key=lambda kv: -kv[1])[:k]
    return ", ".join(f"{name} {v / n:.2f}" for name, v in items if v) or "-"


def order(r):
    """local, bindfs, then each Sextant target (builds of it together)."""
    base = r["target"].split(".")[0]
    return (TARGETS.index(base) if base in TARGETS else 99, r["target"])


def table(runs):
    lines = []
    for w in WORKLOADS + sorted({r["workload"] for r in runs} - set(WORKLOADS)):
        rows = [r for r in runs if r["workload"] == w]
        if not rows:
            continue
        rows.sort(key=order)
        base = {r["target"]: r["wall_s"] for r in rows}
        n0 = rows[0]["entries"]
        lines.append(f"\n**{w}** ({int(n0)} entries)\n")
        lines.append(
            "| target | wall s | ÷ local | FUSE req/entry | top FUSE opcodes /entry "
            "| server req/entry | top server ops /entry (! = failed) | journal syncs/entry "
            "| mount ctx sw/entry | server ctx sw/entry | mount CPU ms/entry |"
        )
        lines.append("|---|---|---|---|---|---|---|---|---|---|---|")
        for r in rows:
            n = r["entries"]
            local = base.get("local")
            ratio = f"{r['wall_s'] / local:.1f}×" if local else "-"
            server = r["server_total"] and per(r["server_total"], n) or "-"
            lines.append(
                f"| {r['target']}{' (FAILED)' if r['failed'] else ''} | {r['wall_s']:.2f} | {ratio} | "
                f"{per(r['fuse_total'], n) if r['fuse_total'] else '-'} | {top(r['fuse'], n)} | "
                f"{server} | {top(r['server'], n, 8)} | "
                f"{per(r['journal_syncs'], n) if r['server_total'] else '-'} | "
                f"{per(r['mount_proc']['ctxt'], n) if r['fuse_total'] else '-'} | "
                f"{per(r['server_proc']['ctxt'], n) if r['server_total'] else '-'} | "
                f"{r['mount_proc']['cpu_s'] * 1000 / n:.2f} |"
                if n
                else f"| {r['target']} | no entries | | | | | | | | | |"
            )
    return "\n".join(lines)


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    out = sys.argv[1]
    runs = [
        run(os.path.join(out, d))
        for d in sorted(os.listdir(out))
        if os.path.isdir(os.path.join(out, d)) and "-" in d
    ]
    if "--json" in sys.argv[2:]:
        for r in runs:
            print(json.dumps(r, sort_keys=True))
    else:
        print(table(runs))


if __name__ == "__main__":
    main()
