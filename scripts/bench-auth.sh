#!/usr/bin/env bash
# Issue 22's benchmark: what the identity checks cost per call. One
# log-less server (so a create costs CPU, not a journal sync) and a client
# key for it; `sextant-auth-bench` (crates/bench/src/bin/auth_bench.rs)
# then creates and getattrs files through three doors in interleaved
# rounds — TCP with the cluster secret, the Unix socket as the kernel's
# caller, TCP with the key (an HMAC proof per call) — and prints each
# door's median ops/s, p50 and ratio to the secret's.
#
#   scripts/bench-auth.sh
#
# Environment: REPS (3), TASKS ("1,16": workers, one connection), ITEMS
# (2000 per worker), PORT (7451), WORK (${TMPDIR:-/tmp}/sextant-bench-data/auth:
# scratch, wiped), OUT (${TMPDIR:-/tmp}/sextant-bench-results/auth), SEXTANT and
# AUTH_BENCH (built binaries; default: build --release).
set -euo pipefail
cd "$(dirname "$0")/.."

REPS=${REPS:-3}
TASKS=${TASKS:-1,16}
ITEMS=${ITEMS:-2000}
PORT=${PORT:-7451}
WORK=${WORK:-${TMPDIR:-/tmp}/sextant-bench-data/auth}
OUT=${OUT:-${TMPDIR:-/tmp}/sextant-bench-results/auth}
if [ -z "${SEXTANT:-}" ] || [ -z "${AUTH_BENCH:-}" ]; then
  cargo build --release --locked -p sextant-cli -p sextant-bench >&2
  SEXTANT=${SEXTANT:-${CARGO_TARGET_DIR:-target}/release/sextant}
  AUTH_BENCH=${AUTH_BENCH:-${CARGO_TARGET_DIR:-target}/release/sextant-auth-bench}
fi

rm -rf "$WORK" "$OUT"
mkdir -p "$WORK" "$OUT"
DATA=$WORK/data
SOCKET=$WORK/sextant.sock
ADDR=127.0.0.1:$PORT
SERVER_PID=
cleanup() {
  if [ -n "$SERVER_PID" ]; then kill "$SERVER_PID" 2>/dev/null && wait "$SERVER_PID" 2>/dev/null || true; fi
}
trap cleanup EXIT

SEXTANT_METRICS=off "$SEXTANT" serve --data "$DATA" --listen "$ADDR" --socket "$SOCKET" \
  --durability logless >"$OUT/serve.log" 2>&1 &
SERVER_PID=$!
for _ in $(seq 100); do grep -qs "listening on" "$OUT/serve.log" && break; sleep 0.1; done
"$SEXTANT" --server "$ADDR" --data "$DATA" auth add bench --out "$WORK/bench.key" >/dev/null

echo "machine: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), commit $(git rev-parse --short HEAD), binaries $SEXTANT $AUTH_BENCH" | tee "$OUT/log" >&2
"$AUTH_BENCH" --server "$ADDR" --socket "$SOCKET" --secret-file "$DATA/secret" \
  --key-file "$WORK/bench.key" --tasks "$TASKS" --items "$ITEMS" --reps "$REPS" \
  2> >(tee -a "$OUT/log" >&2) | tee "$OUT/result.txt"
