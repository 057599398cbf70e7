#!/usr/bin/env bash
# Issue 23's target for a mode that syncs every call: time per entry within
# (journal syncs per entry x fdatasync p50) + 150 us. Checks it for a
# workload through the mount (tar x of /usr/include by default), in one
# run of ROUNDS rounds; each round, alternating:
#
#   fdatasync probe, journal (default: fsync before every reply),
#   fdatasync probe, background (--journal-sync background),
#   fdatasync probe, bindfs, local
#
# The probe (scripts/fdatasync-p50.py: SAMPLES appends of 4 KiB, each
# fdatasynced, then the same with 256 B) runs in the directory that holds the server's data
# directory, so it measures the same disk and file system. Every
# Sextant/bindfs/local run is scripts/workload-breakdown.sh's (a fresh
# server and mount each: FUSE requests, server requests and seconds per
# op, journal syncs). The table: bench/sync_excess.py RESULTS.
#
#   scripts/sync-excess.sh [WORKLOAD]        (default: tar)
#
# Environment: ROUNDS (3), SAMPLES (2000), PROBE_BYTES ("4096 256"), SEXTANT (a built binary; default
# target/release/sextant), RESULTS (${TMPDIR:-/tmp}/sextant-sync-excess),
# TARGETS (journal background bindfs local: the order within a round),
# and what scripts/workload-breakdown.sh reads (SRC, PORT, TTL).
# Needs root (as workload-breakdown.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
W=${1:-tar}
ROUNDS=${ROUNDS:-3}
SAMPLES=${SAMPLES:-2000}
# Append sizes probed; the first sets the bound (the journal's own batches
# are ~200 B for tar: 256 shows the difference).
PROBE_BYTES=${PROBE_BYTES:-4096 256}
TARGETS=${TARGETS:-journal background bindfs local}
export SEXTANT=${SEXTANT:-target/release/sextant}
RESULTS=${RESULTS:-${TMPDIR:-/tmp}/sextant-sync-excess}
# workload-breakdown.sh wipes its WORK; the probe runs beside it.
export WORK=$RESULTS/work
[ -x "$SEXTANT" ] || { echo "no binary $SEXTANT: cargo build --release -p sextant-cli" >&2; exit 1; }
rm -rf "$RESULTS"
mkdir -p "$RESULTS/probe"

note() { echo "[$(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)] $*" | tee -a "$RESULTS/log" >&2; }
probe() {
  local r=$1 before=$2 b
  for b in $PROBE_BYTES; do
    scripts/fdatasync-p50.py "$RESULTS/probe" --samples "$SAMPLES" --bytes "$b" --json |
      python3 -c 'import json,sys; d=json.load(sys.stdin); d["round"]=int(sys.argv[1]); d["before"]=sys.argv[2]; print(json.dumps(d, sort_keys=True))' "$r" "$before" |
      tee -a "$RESULTS/probe.jsonl" >&2
  done
}

note "start: $(uptime); binary $SEXTANT ($(git rev-parse --short HEAD), uncommitted changes: $(git status --short | wc -l)); $W of ${SRC:-/usr/include}; $ROUNDS rounds"
for r in $(seq "$ROUNDS"); do
  for t in $TARGETS; do
    case $t in journal | background | logless) probe "$r" "$t" ;; esac
    note "round $r: $t $W"
    OUT=$RESULTS/r$r TARGETS=$t scripts/workload-breakdown.sh "$W" >"$RESULTS/r$r-$t.log" 2>&1 ||
      note "round $r: $t failed (see $RESULTS/r$r-$t.log)"
  done
done
probe "$ROUNDS" end
note "end: $(uptime)"
python3 bench/sync_excess.py "$RESULTS" | tee "$RESULTS/table.md"
