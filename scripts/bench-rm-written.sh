#!/usr/bin/env bash
# Issue 23: removes of files whose data is already on disk (docs/BENCHMARKS.md,
# "removes off the UNLINK's path"). Postmark's deletion phase removes files
# whose data ext4 has written back when the run is slow: each such remove then
# frees data blocks. This measures exactly that, through a Sextant mount
# (default mode: --journal-sync background, each mount's cache defaults) with
# the object files removed by the remover thread ("new") and unlinked inside
# the UNLINK as before ("inline", SEXTANT_INLINE_OBJECT_REMOVAL=1 on the mount),
# and through bindfs, alternating, ROUNDS times:
#   N files of SIZE bytes in DIRS directories are written, `sync` writes them
#   back, then one Python process unlinks them all (os.unlink, timed each).
#
#   SEXTANT=path/to/sextant scripts/bench-rm-written.sh
#
# Environment: SEXTANT (required: a built binary), N (3000), SIZE (8192),
# DIRS (30), ROUNDS (3), TARGETS ("new inline bindfs"), WORK
# (${TMPDIR:-/tmp}/sextant-rm-written: scratch, wiped), OUT (results: one line
# per run in $OUT/results), PORT (7971).
set -euo pipefail
cd "$(dirname "$0")/.."
: "${SEXTANT:?set SEXTANT to a built sextant binary}"
N=${N:-3000} SIZE=${SIZE:-8192} DIRS=${DIRS:-30} ROUNDS=${ROUNDS:-3}
TARGETS=${TARGETS:-new inline bindfs}
WORK=${WORK:-${TMPDIR:-/tmp}/sextant-rm-written}
OUT=${OUT:-${TMPDIR:-/tmp}/sextant-rm-written-results}
PORT=${PORT:-7971}
mkdir -p "$OUT"
SERVER_PID=
cleanup() {
  for m in "$WORK/mnt" "$WORK/bind"; do
    if mountpoint -q "$m" 2>/dev/null; then fusermount3 -u "$m" 2>/dev/null || fusermount3 -u -z "$m" || true; fi
  done
  if [ -n "$SERVER_PID" ]; then kill "$SERVER_PID" 2>/dev/null && wait "$SERVER_PID" 2>/dev/null || true; fi
  SERVER_PID=
}
trap cleanup EXIT
log() { echo "[$(date +%T) load $(cut -d' ' -f1-3 /proc/loadavg)] $*" | tee -a "$OUT/log" >&2; }

# run TARGET ROUND: one measured run on a fresh server and mount (or bindfs).
run() {
  rm -rf "$WORK"
  mkdir -p "$WORK"/{mnt,bind,local}
  local dir
  case $1 in
  bindfs)
    bindfs --multithreaded "$WORK/local" "$WORK/bind"
    dir=$WORK/bind
    ;;
  *)
    SEXTANT_METRICS=off "$SEXTANT" serve --data "$WORK/data" --listen "127.0.0.1:$PORT" \
      --socket "$WORK/sextant.sock" --journal-sync background >"$OUT/serve.log" 2>&1 &
    SERVER_PID=$!
    for _ in $(seq 100); do grep -qs "listening on" "$OUT/serve.log" && break; sleep 0.1; done
    local inline=0
    [ "$1" = inline ] && inline=1
    SEXTANT_INLINE_OBJECT_REMOVAL=$inline "$SEXTANT" --server "127.0.0.1:$PORT" --data "$WORK/data" \
      mount --log "$OUT/mount.log" "$WORK/mnt"
    dir=$WORK/mnt
    ;;
  esac
  local line
  line=$(python3 - "$dir" "$N" "$SIZE" "$DIRS" <<'PY'
import os, sys, time
d, n, size, dirs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
blob = os.urandom(size)
paths = []
for i in range(dirs):
    os.mkdir(f"{d}/d{i}")
for i in range(n):
    p = f"{d}/d{i % dirs}/f{i}"
    with open(p, "wb") as f:
        f.write(blob)
    paths.append(p)
os.sync()  # written back: each unlink then frees data blocks
t = []
start = time.perf_counter()
for p in paths:
    s = time.perf_counter()
    os.unlink(p)
    t.append(time.perf_counter() - s)
wall = time.perf_counter() - start
t.sort()
print(f"removes/s {n / wall:.0f} mean_us {sum(t) / n * 1e6:.0f} p50_us {t[n // 2] * 1e6:.0f} "
      f"p90_us {t[n * 9 // 10] * 1e6:.0f} p99_us {t[n * 99 // 100] * 1e6:.0f}")
PY
)
  log "round $2 $1: $line"
  echo "round $2 $1 $line" >>"$OUT/results"
  cleanup
}

log "N=$N SIZE=$SIZE DIRS=$DIRS binary $SEXTANT commit $(git rev-parse --short HEAD)"
for r in $(seq "$ROUNDS"); do
  for t in $TARGETS; do run "$t" "$r"; done
done
