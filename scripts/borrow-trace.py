#!/usr/bin/env python3
"""Where a cold BORROW's time goes, from the servers' logs.

Servers run with SEXTANT_LOG=info,borrow_trace=debug log each step of a
BORROW (target `borrow_trace`: the borrower's borrow key, every etcd watch
event of the map, the coordinator's decision and transactions, the
lender's DROP, the borrower's ADD, the operation's re-execution). This
merges the logs of all servers by timestamp (one machine, one clock) and,
for every BORROW (from "operation needs another table" to "operation ran
after BORROW" on the borrower), prints each step's time since the start
and the median of each step over all BORROWs.

    scripts/borrow-trace.py DIR/s0.log DIR/s1.log [--show N]
"""
import re
import statistics
import sys
from datetime import datetime

LINE = re.compile(r"^(\d{4}-\d\d-\d\dT[\d:.]+)Z\s+(\w+)\s+(.*)$")
ANSI = re.compile(r"\x1b\[[0-9;]*m")

# The steps, in the order they happen, as (label, server role, regex on the message).
STEPS = [
    ("needs table", "b", r"operation needs another table"),
    ("borrow key put sent", "b", r"BORROW: writing the borrow key"),
    ("borrow key put answered", "b", r"BORROW: asked for the tables"),
    ("watch: borrow key", "c", r"map: watch event key=\"borrow/"),
    ("coordinator decided", "c", r"coordinator: decided .*actions=[1-9]"),
    ("coordinator lend txn sent", "c", r"coordinator: txn sent: move .*BORROW"),
    ("coordinator lend txn answered", "c", r"coordinator: move .*BORROW"),
    ("lender: watch move key", "l", r"map: watch event key=\"move/.* put=true"),
    ("lender: DROP starts", "l", r"ownership: DROP starts"),
    ("lender: checkpoint done", "l", r"DROP: checkpoint of new tables done"),
    ("lender: final snapshot written", "l", r"DROP: final snapshot written"),
    ("lender: catalogue commit", "l", r"DROP: final manifest committed"),
    ("lender: host done", "l", r"DROP: host wrote the table back"),
    ("lender: handover txn answered", "l", r"table handed over \(moved\)"),
    ("borrower: watch owner key", "b", r"map: watch event key=\"owner/"),
    ("borrower: ADD starts", "b", r"ownership: ADD starts"),
    ("borrower: manifest read", "b", r"ADD: manifest read"),
    ("borrower: snapshot loaded", "b", r"ADD: snapshots loaded"),
    ("borrower: journal replayed", "b", r"ADD: journal replayed"),
    ("borrower: catalogue commit", "b", r"ADD: manifest committed"),
    ("borrower: host loaded", "b", r"ADD: host loaded"),
    ("borrower: serving", "b", r"table added: serving"),
    ("borrower: grant seen", "b", r"BORROW: every table serves here"),
    ("op re-executed (durable)", "b", r"operation ran after BORROW"),
]


def parse(path, server):
    out = []
    with open(path, errors="replace") as f:
        for line in f:
            m = LINE.match(ANSI.sub("", line.rstrip("\n")))
            if not m:
                continue
            t = datetime.fromisoformat(m.group(1)[:26]).timestamp()
            out.append((t, server, m.group(3)))
    return out


def main():
    args = sys.argv[1:]
    show = 2
    if "--show" in args:
        i = args.index("--show")
        show = int(args[i + 1])
        del args[i : i + 2]
    events = []
    for p in args:
        name = p.rsplit("/", 1)[-1].split(".")[0]
        events += parse(p, name)
    events.sort(key=lambda e: e[0])
    starts = [i for i, e in enumerate(events) if "operation needs another table" in e[2]]
    per_step = {label: [] for label, _, _ in STEPS}
    totals = []
    shown = 0
    for i in starts:
        t0, borrower, _ = events[i]
        end = next(
            (j for j in range(i, len(events)) if events[j][1] == borrower and "operation ran after BORROW" in events[j][2]),
            None,
        )
        if end is None:
            continue
        window = events[i : end + 1]
        totals.append((events[end][0] - t0) * 1e3)
        if shown < show:
            print(f"--- BORROW at {datetime.fromtimestamp(t0).isoformat()} on {borrower}")
            for t, s, msg in window:
                print(f"{(t - t0) * 1e3:8.2f} ms  {s:3} {msg[:150]}")
            shown += 1
        # First occurrence of each step (on the borrower "b", on another
        # server "l", on any "c").
        for label, role, rx in STEPS:
            r = re.compile(rx)
            for t, s, msg in window:
                if role == "b" and s != borrower or role == "l" and s == borrower:
                    continue
                if r.search(msg):
                    per_step[label].append((t - t0) * 1e3)
                    break
    print(f"\n{len(totals)} BORROWs; end-to-end on the server: median {statistics.median(totals):.2f} ms" if totals else "no BORROW found")
    prev = 0.0
    for label, _, _ in STEPS:
        v = per_step[label]
        if not v:
            continue
        m = statistics.median(v)
        print(f"{label:34} at {m:8.2f} ms  (+{m - prev:7.2f})  n={len(v)}")
        prev = m


if __name__ == "__main__":
    main()
