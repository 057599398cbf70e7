#!/usr/bin/env bash
# Issue 3's client-library benchmarks (docs/BENCHMARKS.md, "Issue 3"):
# `sextant bench` over one connection to a fresh `sextant serve` on this
# machine, many requests in flight (throughput) and one (latency),
# repetitions interleaved.
#
#   scripts/bench-client.sh
#
# Environment: REPS (3), TASKS (256 in flight), ITEMS (400 per task),
# LAT_ITEMS (5000 one at a time), JOURNAL (fsync), WORK
# (${TMPDIR:-/tmp}/sextant-bench-data/client: scratch, wiped), OUT (${TMPDIR:-/tmp}/sextant-bench-results/issue3),
# PORT (7451), TAG (name of this set of results, default "client"),
# SEXTANT (a built binary; default: build --release), SERVER_BIN (the
# server's binary, default $SEXTANT: to compare servers with one client).
# Stops the server it started on exit, also on failure.
set -euo pipefail
cd "$(dirname "$0")/.."

REPS=${REPS:-3}
TASKS=${TASKS:-256}
ITEMS=${ITEMS:-400}
LAT_ITEMS=${LAT_ITEMS:-5000}
JOURNAL=${JOURNAL:-fsync}
WORK=${WORK:-${TMPDIR:-/tmp}/sextant-bench-data/client}
OUT=${OUT:-${TMPDIR:-/tmp}/sextant-bench-results/issue3}
PORT=${PORT:-7451}
TAG=${TAG:-client}
ADDR=127.0.0.1:$PORT

if [ -z "${SEXTANT:-}" ]; then
  cargo build --release --locked -p sextant-cli >&2
  SEXTANT=${CARGO_TARGET_DIR:-target}/release/sextant
fi

SERVER_BIN=${SERVER_BIN:-$SEXTANT}
mkdir -p "$OUT"
rm -rf "$WORK"
mkdir -p "$WORK"
SERVER_PID=
cleanup() {
  if [ -n "$SERVER_PID" ]; then kill "$SERVER_PID" 2>/dev/null && wait "$SERVER_PID" 2>/dev/null || true; fi
}
trap cleanup EXIT
log() { echo "[$(date +%T) load $(cut -d' ' -f1-3 /proc/loadavg)] $*" | tee -a "$OUT/log" >&2; }

rm -f "$OUT/serve-$TAG.log"
SEXTANT_METRICS=off "$SERVER_BIN" serve --data "$WORK/data" --listen "$ADDR" \
  --journal-sync "$JOURNAL" >"$OUT/serve-$TAG.log" 2>&1 &
SERVER_PID=$!
for _ in $(seq 100); do grep -qs "listening on" "$OUT/serve-$TAG.log" && break; sleep 0.1; done
log "$TAG: client $SEXTANT, server $SERVER_BIN, journal $JOURNAL, $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"

# --cpu-of: CPU time of client + server per phase (ops per CPU-second).
b() { "$SEXTANT" --server "$ADDR" --data "$WORK/data" bench -q --json --cpu-of "$SERVER_PID" "$@"; }
# The client's runtime on the calling thread (ct1, the default) and on 2
# worker threads (ct2, like #[tokio::main] on this machine), interleaved.
for rep in $(seq "$REPS"); do
  for ct in 1 2; do
    log "$TAG rep $rep ct$ct: $TASKS tasks × $ITEMS files (create, stat, lookup)"
    b --client-threads $ct --tasks "$TASKS" --items "$ITEMS" -F --phases create,stat,lookup \
      >"$OUT/$TAG-many-ct$ct-$rep.json"
    log "$TAG rep $rep ct$ct: 1 task × $LAT_ITEMS files (create, stat, lookup)"
    b --client-threads $ct --tasks 1 --items "$LAT_ITEMS" -F --phases create,stat,lookup \
      >"$OUT/$TAG-one-ct$ct-$rep.json"
  done
done
log "$TAG done"
