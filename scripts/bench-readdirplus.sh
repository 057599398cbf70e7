#!/usr/bin/env bash
# Issue 23: READDIRPLUS through the mount. Walks a copy of a source tree
# (/usr/include, imported metadata only: what `ls -l`, `du` and `find`
# read) with `ls -lR`, `du -s` and `find . -type f | wc -l`, each on a
# fresh mount (cold kernel caches, warm server) with `--readdirplus off`,
# `always` (the default) and `auto`, modes alternating within each round,
# and prints per run: wall seconds and the server's requests by op (from
# its /metrics, sextant_requests_total, before and after), then the
# medians per workload and mode (wall time, requests per entry).
#
#   scripts/bench-readdirplus.sh [SEXTANT_BINARY]   (default target/release/sextant)
# Environment: SRC (/usr/include), ROUNDS (3), MODES ("off always auto"),
# WORK (/tmp/sextant-rdplus: scratch, wiped), PORT (7471; metrics PORT+1).
# Needs FUSE. Unmounts and stops what it started on exit.
set -euo pipefail
B=$(realpath "${1:-target/release/sextant}")
SRC=${SRC:-/usr/include}
ROUNDS=${ROUNDS:-3}
MODES=${MODES:-off always auto}
W=${WORK:-/tmp/sextant-rdplus}
PORT=${PORT:-7471}
MPORT=$((PORT + 1))
rm -rf "$W"
mkdir -p "$W/data" "$W/mnt"
SEXTANT_METRICS=127.0.0.1:$MPORT "$B" serve --data "$W/data" --listen 127.0.0.1:$PORT \
  --journal-sync nosync >"$W/server.log" 2>&1 &
SERVER=$!
cleanup() {
  fusermount3 -u "$W/mnt" 2>/dev/null || true
  kill $SERVER 2>/dev/null || true
  wait $SERVER 2>/dev/null || true
}
trap cleanup EXIT
for _ in $(seq 100); do grep -qs "listening on" "$W/server.log" && break; sleep 0.1; done
S=("$B" --server 127.0.0.1:$PORT --data "$W/data")
"${S[@]}" import "$SRC" /tree >"$W/import.log" 2>&1
ENTRIES=$(find "$SRC" | wc -l)
echo "source: $SRC, $ENTRIES entries; binary: $B"

snap() { curl -s "127.0.0.1:$MPORT/metrics" | awk '/^sextant_requests_total/ {
  match($0, /op="[^"]*"/); op = substr($0, RSTART + 4, RLENGTH - 5); n[op] += $NF }
  END { for (o in n) print o, n[o] }' | sort; }

declare -A CMD=(
  [ls]='ls -lR . >/dev/null'
  [du]='du -s . >/dev/null'
  [find]='find . -type f | wc -l >/dev/null'
)
RESULTS="$W/results"
: >"$RESULTS"
for round in $(seq "$ROUNDS"); do
  for w in ls du find; do
    for mode in $MODES; do
      "${S[@]}" mount --log "$W/mount.log" "$W/mnt" --readdirplus "$mode"
      snap >"$W/before"
      t0=$(date +%s.%N)
      (cd "$W/mnt/tree" && eval "${CMD[$w]}")
      t1=$(date +%s.%N)
      snap >"$W/after"
      fusermount3 -u "$W/mnt"
      reqs=$(join -a2 -e0 -o 2.1,1.2,2.2 "$W/before" "$W/after" |
        awk '{ d = $3 - $2; if (d > 0) { printf "%s=%d ", $1, d; t += d } } END { printf "total=%d", t }')
      wall=$(echo "$t1 - $t0" | bc)
      echo "round=$round workload=$w mode=$mode wall=$wall $reqs" | tee -a "$RESULTS"
    done
  done
done

echo
echo "medians of $ROUNDS rounds ($ENTRIES entries):"
printf '%-6s %-7s %8s %14s %14s %14s\n' workload mode wall_s req/entry lookup/entry readdir/entry
for w in ls du find; do
  for mode in $MODES; do
    grep " workload=$w mode=$mode " "$RESULTS" | python3 -c '
import sys, statistics
rows = [dict(kv.split("=", 1) for kv in l.split()) for l in sys.stdin]
e = int(sys.argv[3])
med = lambda k: statistics.median(float(r.get(k, 0)) for r in rows)
print("%-8s %-7s %8.2f %14.3f %14.3f %14.3f" % (sys.argv[1], sys.argv[2], med("wall"),
      med("total") / e, med("lookup") / e, med("readdir") / e))
' "$w" "$mode" "$ENTRIES"
  done
done
