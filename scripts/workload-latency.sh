#!/usr/bin/env bash
# Issue 23: how long each FUSE request of a workload takes, by opcode, on a
# fresh Sextant mount (log-less by default): the kernel's own
# fuse:fuse_request_send / fuse_request_end tracepoints (kernel >= 6.16)
# in a private tracefs instance filtered on the mount's connection, paired
# by request id. Prints, per opcode, requests per entry of the source tree
# and their mean, p50 and total time per entry (from the kernel's send to
# the reply's arrival: the mount's work and any server call in it).
#
#   scripts/workload-latency.sh [tar|cp] [SEXTANT_BINARY]
#
# Environment: SRC (/usr/include), WORK (/tmp/sextant-latency: scratch,
# wiped), PORT (7795), DURABILITY (logless), SERVER (what the mount is
# given as --server: 127.0.0.1:PORT; e.g. unix:$WORK/data/sextant.sock).
# Needs root (tracefs, FUSE). Unmounts and stops what it started on exit.
set -euo pipefail
WL=${1:-tar}
B=${2:-target/release/sextant}
SRC=${SRC:-/usr/include}
W=${WORK:-/tmp/sextant-latency}
PORT=${PORT:-7795}
I=/sys/kernel/tracing/instances/sextant-latency-$$
[ -d /sys/kernel/tracing/events ] || mount -t tracefs nodev /sys/kernel/tracing
rm -rf "$W"
mkdir -p "$W/data" "$W/mnt"
SERVER_PID= PIPE_PID=
cleanup() {
  [ -n "$PIPE_PID" ] && kill "$PIPE_PID" 2>/dev/null || true
  mountpoint -q "$W/mnt" && { fusermount3 -u "$W/mnt" 2>/dev/null || fusermount3 -u -z "$W/mnt" || true; }
  [ -n "$SERVER_PID" ] && { kill "$SERVER_PID" 2>/dev/null; wait "$SERVER_PID" 2>/dev/null || true; }
  [ -d "$I" ] && rmdir "$I" 2>/dev/null || true
}
trap cleanup EXIT
[ "$WL" = tar ] && tar cf "$W/src.tar" -C "$(dirname "$SRC")" "$(basename "$SRC")"
ENTRIES=$(find "$SRC" | wc -l)
SEXTANT_DURABILITY=${DURABILITY:-logless} "$B" serve --data "$W/data" --listen "127.0.0.1:$PORT" \
  >"$W/server.log" 2>&1 &
SERVER_PID=$!
for _ in $(seq 100); do grep -qs "listening on" "$W/server.log" && break; sleep 0.1; done
"$B" --server "${SERVER:-127.0.0.1:$PORT}" --data "$W/data" mount --log "$W/mount.log" "$W/mnt"
mkdir -p "$I"
echo 65536 >"$I/buffer_size_kb"
for e in fuse_request_send fuse_request_end; do
  echo "connection==$(stat -c %d "$W/mnt")" >"$I/events/fuse/$e/filter"
  echo 1 >"$I/events/fuse/$e/enable"
done
cat "$I/trace_pipe" >"$W/trace.txt" &
PIPE_PID=$!
mkdir "$W/mnt/co"
t0=$(date +%s.%N)
case $WL in
  tar) tar xf "$W/src.tar" -C "$W/mnt/co" ;;
  cp) cp -a "$SRC" "$W/mnt/co/" ;;
  *) echo "workload: tar or cp" >&2; exit 2 ;;
esac
t1=$(date +%s.%N)
# RELEASE is sent after close returns: let the last ones arrive.
sleep 1
for e in fuse_request_send fuse_request_end; do echo 0 >"$I/events/fuse/$e/enable"; done
sleep 0.5
kill "$PIPE_PID" 2>/dev/null || true
wait "$PIPE_PID" 2>/dev/null || true
PIPE_PID=
echo "$WL: $ENTRIES entries, wall $(echo "$t1 $t0" | awk '{printf "%.3f", $1 - $2}') s, load $(cut -d' ' -f1 /proc/loadavg)"
python3 - "$W/trace.txt" "$ENTRIES" <<'PY'
import collections, re, sys
pat = re.compile(r" (\d+\.\d+): fuse_request_(send|end): connection \d+ req (\d+)(?: opcode \d+ \((FUSE_\w+)\))?")
sent, took = {}, collections.defaultdict(list)
for line in open(sys.argv[1]):
    m = pat.search(line)
    if not m:
        continue
    t, req = float(m.group(1)), m.group(3)
    if m.group(2) == "send":
        sent[req] = (t, m.group(4))
    elif req in sent:
        t0, op = sent.pop(req)
        took[op].append(t - t0)
n = int(sys.argv[2])
total = sum(sum(v) for v in took.values())
print(f"in FUSE requests: {total / n * 1e6:.0f} us per entry")
print("| opcode | per entry | mean (us) | p50 (us) | us per entry |")
print("|---|---|---|---|---|")
for op, v in sorted(took.items(), key=lambda x: -sum(x[1])):
    v.sort()
    print(f"| {op[5:]} | {len(v) / n:.2f} | {sum(v) / len(v) * 1e6:.1f} | {v[len(v) // 2] * 1e6:.0f} | {sum(v) / n * 1e6:.1f} |")
PY
