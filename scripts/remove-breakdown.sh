#!/usr/bin/env bash
# Issue 23: where one-process removes of empty files through the mount
# go. One fresh server (journal in SYNC mode, /metrics on) and one
# default mount per round; N empty files made in one directory, then
# removed by one Python process with os.unlink, timed per call. Reports:
# the caller's unlink (p50, mean); the kernel's FUSE requests per remove
# and their time from send to end (the fuse:fuse_request_send/_end
# tracepoints, all CPUs: the time the mount took to answer, server round
# trip included); the server's own time per unlink (/metrics); the CPU
# the server and the mount spent per remove (/proc/PID/stat); how often
# the server's and the mount's threads were put on a CPU per remove (the
# run counts of /proc/PID/task/*/schedstat: a wake-up of a thread that
# slept, or a preemption).
#
#   BINARY=target/release/sextant ROUNDS=3 scripts/remove-breakdown.sh
#
# Environment: BINARY, ROUNDS (3), N (4000 files), SYNC (background),
# VIA (tcp: the mount reaches the server at 127.0.0.1:PORT; unix: at the
# server's Unix socket), PORT (18871; metrics on PORT+1), OUT
# (/tmp/remove-breakdown), MPERF (set: a perf profile of the mount
# during the removes, mperf.data), TRACE (set: `perf trace` of the
# mount's and the server's system calls, trace.txt: slows both a lot).
# Needs root (perf tracepoints, FUSE).
set -euo pipefail
BINARY=${BINARY:-target/release/sextant}
ROUNDS=${ROUNDS:-3}
N=${N:-4000}
SYNC=${SYNC:-background}
VIA=${VIA:-tcp}
PORT=${PORT:-18871}
OUT=${OUT:-/tmp/remove-breakdown}
MP=$((PORT + 1))
# shellcheck source=scripts/lib/remove-fixture.sh
. "$(dirname "$0")/lib/remove-fixture.sh"

round() { # round NAME
  local w=$OUT/$1 sp mpid sock maddr pp tp= c0 c1
  rm -rf "$w"
  case $VIA in
    unix) sock=$w/s.sock maddr=unix:$w/s.sock ;;
    tcp) sock=off maddr=127.0.0.1:$PORT ;;
    *) echo "VIA is tcp or unix, not $VIA" >&2; exit 2 ;;
  esac
  start_mount_with_files "$w" "$sock" "$maddr" "$SYNC"
  curl -s 127.0.0.1:$MP/metrics >"$w/m0"
  cpu() { for p in $sp $mpid; do awk '{print $14 + $15}' "/proc/$p/stat"; done | paste -sd' '; }
  runs() { for p in $sp $mpid; do cat /proc/$p/task/*/schedstat | awk '{s += $3} END {print s}'; done | paste -sd' '; }
  c0=$(cpu) r0=$(runs)
  perf record -e fuse:fuse_request_send,fuse:fuse_request_end -a -o "$w/fuse.data" >/dev/null 2>&1 &
  pp=$!
  if [ -n "${MPERF:-}" ]; then
    perf record -F 4999 -g -p "$mpid" -o "$w/mperf.data" >/dev/null 2>&1 &
    tp=$!
  elif [ -n "${TRACE:-}" ]; then
    perf trace -p "$mpid,$sp" -o "$w/trace.txt" 2>/dev/null &
    tp=$!
  fi
  sleep 0.5
  python3 -c '
import os, sys, time
d, n, ts = sys.argv[1], int(sys.argv[2]), []
for i in range(n):
    t = time.perf_counter_ns()
    os.unlink(f"{d}/f{i}")
    ts.append(time.perf_counter_ns() - t)
ts.sort()
print("caller unlink: p50 %.1f us, mean %.1f us" % (ts[n // 2] / 1e3, sum(ts) / n / 1e3))
' "$w/mnt/d" "$N"
  sleep 0.2
  kill -INT "$pp"
  wait "$pp" || true
  if [ -n "$tp" ]; then kill -INT "$tp"; wait "$tp" || true; fi
  c1=$(cpu) r1=$(runs)
  curl -s 127.0.0.1:$MP/metrics >"$w/m1"
  fusermount3 -u "$w/mnt" 2>/dev/null || fusermount3 -u -z "$w/mnt" || true
  kill "$sp"
  wait "$sp" || true
  perf script -i "$w/fuse.data" -F time,event,trace >"$w/fuse.txt" 2>/dev/null || true
  python3 - "$w" "$N" "$c0" "$c1" "$r0" "$r1" <<'PY'
import collections, re, sys
w, n = sys.argv[1], int(sys.argv[2])
c0, c1 = [int(x) for x in sys.argv[3].split()], [int(x) for x in sys.argv[4].split()]
tick = 1e6 / 100  # µs per clock tick
print(f"CPU per remove: server {(c1[0] - c0[0]) * tick / n:.0f} us, mount {(c1[1] - c0[1]) * tick / n:.0f} us")
r0, r1 = [int(x) for x in sys.argv[5].split()], [int(x) for x in sys.argv[6].split()]
print(f"threads put on a CPU per remove: server {(r1[0] - r0[0]) / n:.2f}, mount {(r1[1] - r0[1]) / n:.2f}")
def metrics(f):
    d = {}
    for line in open(f):
        m = re.match(r'sextant_request_seconds_(sum|count)\{op="(\w+)"\} (\S+)', line)
        if m:
            d[(m.group(1), m.group(2))] = float(m.group(3))
    return d
a, b = metrics(w + "/m0"), metrics(w + "/m1")
for op in ["unlink", "getattr", "lookup"]:
    c = b.get(("count", op), 0) - a.get(("count", op), 0)
    s = b.get(("sum", op), 0) - a.get(("sum", op), 0)
    if c:
        print(f"server {op}: {c / n:.2f} per remove, {s / c * 1e6:.1f} us each")
sent, lat = {}, collections.defaultdict(list)
for line in open(w + "/fuse.txt"):
    m = re.match(r'\s*([\d.]+):\s+fuse:(fuse_request_\w+):.*req (\d+)(?: opcode \d+ \((\w+)\))?', line)
    if not m:
        continue
    t, ev, req, op = float(m.group(1)), m.group(2), m.group(3), m.group(4)
    if ev == "fuse_request_send":
        sent[req] = (t, op)
    elif req in sent:
        t0, op = sent.pop(req)
        lat[op].append((t - t0) * 1e6)
for op, v in sorted(lat.items()):
    v.sort()
    print(f"FUSE {op}: {len(v) / n:.2f} per remove, send to end p50 {v[len(v) // 2]:.1f} us, mean {sum(v) / len(v):.1f} us")
PY
}

uptime
for r in $(seq "$ROUNDS"); do
  echo "== round $r ($VIA)"
  round "$VIA-r$r"
done
uptime
