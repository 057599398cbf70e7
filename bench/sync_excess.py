#!/usr/bin/env python3
"""Issue 23's sync target checked on a scripts/sync-excess.sh run.

    python3 bench/sync_excess.py RESULTS [--json]

RESULTS holds probe.jsonl (scripts/fdatasync-p50.py's lines, tagged with
the round and the target they ran before, in run order) and r1, r2, ...
(scripts/workload-breakdown.sh outputs, read with bench/breakdown.py).
For each Sextant run: time per entry, journal syncs per entry, the
fdatasync p50 (the mean of the probes just before and just after the
run), the bound syncs x p50 + 150 us, and the excess (time per entry -
syncs x p50) beside the server's own time per entry (arrival to reply,
sync included) and per request. Medians over rounds at the end.
"""

import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import breakdown  # noqa: E402

ALLOWANCE_US = 150.0


def probes(results):
    out = []
    try:
        with open(os.path.join(results, "probe.jsonl")) as f:
            for line in f:
                line = line.strip()
                if line:
                    out.append(json.loads(line))
    except OSError:
        pass
    return out


def p50_around(ps, rnd, target, size=None):
    """The fdatasync p50 of the probe before (rnd, target) and the next
    one, of appends of `size` bytes (None: the first size probed)."""
    if size is None and ps:
        size = ps[0].get("bytes")
    ps = [p for p in ps if p.get("bytes") == size]
    for i, p in enumerate(ps):
        if p.get("round") == rnd and p.get("before") == target:
            near = [p] + ([ps[i + 1]] if i + 1 < len(ps) else [])
            vals = [q["fdatasync"]["p50_us"] for q in near]
            return statistics.fmean(vals), vals
    return None, []


def sizes(ps):
    out = []
    for p in ps:
        if p.get("bytes") not in out:
            out.append(p.get("bytes"))
    return out


def rows(results):
    ps = probes(results)
    out = []
    rounds = sorted(
        int(d[1:]) for d in os.listdir(results) if d.startswith("r") and d[1:].isdigit()
    )
    for rnd in rounds:
        base = os.path.join(results, f"r{rnd}")
        for d in sorted(os.listdir(base)):
            path = os.path.join(base, d)
            if not (os.path.isdir(path) and "-" in d):
                continue
            r = breakdown.run(path)
            n = r["entries"]
            if not n:
                continue
            row = {
                "round": rnd,
                "target": r["target"],
                "workload": r["workload"],
                "entries": n,
                "failed": r["failed"],
                "wall_s": r["wall_s"],
                "us_per_entry": r["wall_s"] * 1e6 / n,
                "fuse_per_entry": r["fuse_total"] / n,
                # CPU per entry: the workload (tar, the kernel's FUSE side
                # of its calls included), the mount (or bindfs), the server.
                "cpu_us": {
                    "workload": r["workload_cpu_s"] * 1e6 / n,
                    "mount": r["mount_proc"]["cpu_s"] * 1e6 / n,
                    "server": r["server_proc"]["cpu_s"] * 1e6 / n,
                },
            }
            if r["server_total"]:
                p50, vals = p50_around(ps, rnd, r["target"])
                syncs = r["journal_syncs"] / n
                row.update(
                    {
                        "server_req_per_entry": r["server_total"] / n,
                        "syncs_per_entry": syncs,
                        "server_us_per_entry": r["server_seconds_total"] * 1e6 / n,
                        "server_us_per_request": r["server_seconds_total"] * 1e6 / r["server_total"],
                        "server_us_by_op": {
                            k: v * 1e6 / n for k, v in sorted(r["server_seconds"].items())
                        },
                        # The server's own timing of its syncs (fdatasync).
                        "sync_mean_us": (
                            r["journal_sync_s"] * 1e6 / r["journal_syncs"]
                            if r["journal_syncs"] and r["journal_sync_s"]
                            else None
                        ),
                        "sync_timed_us_per_entry": r["journal_sync_s"] * 1e6 / n,
                        "p50_us": p50,
                        "p50_probes_us": vals,
                        "p50_by_bytes_us": {
                            str(b): p50_around(ps, rnd, r["target"], b)[0] for b in sizes(ps)
                        },
                    }
                )
                if p50 is not None:
                    row["sync_us_per_entry"] = syncs * p50
                    row["excess_us"] = row["us_per_entry"] - syncs * p50
                    row["bound_us"] = syncs * p50 + ALLOWANCE_US
                    row["server_excess_us"] = row["server_us_per_entry"] - syncs * p50
                if row["sync_mean_us"] is not None:
                    # Against what the server's syncs actually took.
                    row["excess_timed_us"] = row["us_per_entry"] - row["sync_timed_us_per_entry"]
            out.append(row)
    return out


def f(v, fmt="{:.0f}"):
    return "-" if v is None else fmt.format(v)


def table(rs):
    lines = [
        "| round | target | wall s | µs/entry | journal syncs/entry | fdatasync p50 µs (before, after) "
        "| bound µs (syncs × p50 + 150) | excess µs (µs/entry − syncs × p50) "
        "| server µs/entry (arrival → reply) | server − syncs × p50 | server req/entry "
        "| server-timed sync, µs mean | µs/entry − server-timed syncs/entry "
        "| CPU µs/entry: workload, mount, server |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rs:
        probes_s = ", ".join(f"{v:.0f}" for v in r.get("p50_probes_us", []))
        lines.append(
            f"| {r['round']} | {r['target']}{' (FAILED)' if r['failed'] else ''} | {r['wall_s']:.2f} | "
            f"{r['us_per_entry']:.0f} | {f(r.get('syncs_per_entry'), '{:.2f}')} | "
            f"{f(r.get('p50_us'))}{f' ({probes_s})' if probes_s else ''} | {f(r.get('bound_us'))} | "
            f"{f(r.get('excess_us'))} | {f(r.get('server_us_per_entry'))} | "
            f"{f(r.get('server_excess_us'))} | {f(r.get('server_req_per_entry'), '{:.2f}')} | "
            f"{f(r.get('sync_mean_us'))} | {f(r.get('excess_timed_us'))} | "
            f"{r['cpu_us']['workload']:.0f}, {r['cpu_us']['mount']:.0f}, {r['cpu_us']['server']:.0f} |"
        )
    lines += [
        "",
        "Medians over rounds:",
        "",
        "| target | µs/entry | journal syncs/entry | fdatasync p50 µs | bound µs | excess µs "
        "| server µs/entry | server − syncs × p50 | server-timed sync µs | µs/entry − server-timed syncs "
        "| CPU µs/entry: workload, mount, server | ÷ bindfs (median of per-round ratios) "
        "| fdatasync p50 µs by append size |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    bind = {r["round"]: r["us_per_entry"] for r in rs if r["target"] == "bindfs"}
    targets = []
    for r in rs:
        if r["target"] not in targets:
            targets.append(r["target"])

    def med(xs):
        xs = [x for x in xs if x is not None]
        return statistics.median(xs) if xs else None

    for t in targets:
        ts = [r for r in rs if r["target"] == t]
        ratios = [r["us_per_entry"] / bind[r["round"]] for r in ts if bind.get(r["round"])]
        lines.append(
            f"| {t} | {f(med([r['us_per_entry'] for r in ts]))} | "
            f"{f(med([r.get('syncs_per_entry') for r in ts]), '{:.2f}')} | "
            f"{f(med([r.get('p50_us') for r in ts]))} | {f(med([r.get('bound_us') for r in ts]))} | "
            f"{f(med([r.get('excess_us') for r in ts]))} | "
            f"{f(med([r.get('server_us_per_entry') for r in ts]))} | "
            f"{f(med([r.get('server_excess_us') for r in ts]))} | "
            f"{f(med([r.get('sync_mean_us') for r in ts]))} | "
            f"{f(med([r.get('excess_timed_us') for r in ts]))} | "
            + ", ".join(f(med([r["cpu_us"][k] for r in ts])) for k in ("workload", "mount", "server"))
            + f" | {f(med(ratios), '{:.2f}×')} | "
            + ", ".join(
                f"{b} B: {f(med([r['p50_by_bytes_us'].get(b) for r in ts]))}"
                for b in (ts[0].get("p50_by_bytes_us") or {})
            )
            + " |"
        )
    ops = {}
    for r in rs:
        for op, us in r.get("server_us_by_op", {}).items():
            ops.setdefault((r["target"], op), []).append(us)
    if ops:
        lines += [
            "",
            "Server µs per entry by op (median over rounds; arrival → reply, sync included):",
            "",
        ]
        for t in targets:
            items = sorted(
                ((op, statistics.median(v)) for (tt, op), v in ops.items() if tt == t),
                key=lambda kv: -kv[1],
            )
            if items:
                lines.append(f"- {t}: " + ", ".join(f"{op} {us:.0f}" for op, us in items if us >= 0.5))
    return "\n".join(lines)


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    rs = rows(sys.argv[1])
    if "--json" in sys.argv[2:]:
        for r in rs:
            print(json.dumps(r, sort_keys=True))
    else:
        print(table(rs))


if __name__ == "__main__":
    main()
