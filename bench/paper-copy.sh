#!/usr/bin/env bash
# Liao et al.'s client-overhead experiment (log-less paper, §3.2, Figure 4):
# a program copies an empty file N times; its execution time is compared
# across durability modes. Here through a `sextant mount` (the mount holds
# the log-less backups for its programs), one fresh server and mount per
# run, modes interleaved within each repetition:
#
#   journal   --durability journal (fsync before each reply)
#   logless   --durability logless (K = 4; the mount keeps backups)
#   off       --durability journal --journal-sync off (no durability: the
#             same server work without syncs or backups)
#
#   bench/paper-copy.sh            prints one line per run, then medians
#
# Environment: N (5000 copies), REPS (3), MODES ("journal logless off"),
# SEXTANT (a built binary; default: build --release), WORK
# (${TMPDIR:-/tmp}/sextant-bench-data/paper-copy: scratch, wiped), PORT (7451).
set -euo pipefail
cd "$(dirname "$0")/.."
N=${N:-5000}
REPS=${REPS:-3}
MODES=${MODES:-journal logless off}
WORK=${WORK:-${TMPDIR:-/tmp}/sextant-bench-data/paper-copy}
PORT=${PORT:-7451}
if [ -z "${SEXTANT:-}" ]; then
  cargo build --release --locked -p sextant-cli >&2
  SEXTANT=${CARGO_TARGET_DIR:-target}/release/sextant
fi

SERVER_PID=
cleanup() {
  if mountpoint -q "$WORK/mnt" 2>/dev/null; then fusermount3 -u "$WORK/mnt" || fusermount3 -u -z "$WORK/mnt" || true; fi
  if [ -n "$SERVER_PID" ]; then kill "$SERVER_PID" 2>/dev/null && wait "$SERVER_PID" 2>/dev/null || true; fi
  SERVER_PID=
}
trap cleanup EXIT

# run MODE -> prints the seconds N copies took.
run() {
  local args=()
  case $1 in
    journal) args=(--durability journal --journal-sync fsync) ;;
    logless) args=(--durability logless) ;;
    off) args=(--durability journal --journal-sync off) ;;
    *) echo "unknown mode $1" >&2; exit 2 ;;
  esac
  rm -rf "$WORK"
  mkdir -p "$WORK/mnt"
  : >"$WORK/empty"
  SEXTANT_METRICS=off "$SEXTANT" serve --data "$WORK/data" --listen "127.0.0.1:$PORT" \
    "${args[@]}" >"$WORK/serve.log" 2>&1 &
  SERVER_PID=$!
  for _ in $(seq 100); do grep -qs "listening on" "$WORK/serve.log" && break; sleep 0.1; done
  "$SEXTANT" --server "127.0.0.1:$PORT" --data "$WORK/data" mount "$WORK/mnt"
  mkdir "$WORK/mnt/d"
  local start end
  start=$(date +%s.%N)
  for i in $(seq "$N"); do cp "$WORK/empty" "$WORK/mnt/d/f$i"; done
  end=$(date +%s.%N)
  cleanup
  awk -v a="$start" -v b="$end" 'BEGIN { printf "%.3f\n", b - a }'
}

declare -A times
for rep in $(seq "$REPS"); do
  for mode in $MODES; do
    t=$(run "$mode")
    times[$mode]+="$t "
    echo "rep $rep $mode: $N copies in $t s"
  done
done
echo "medians ($REPS repetitions, $N copies each):"
for mode in $MODES; do
  med=$(printf '%s\n' ${times[$mode]} | sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}')
  echo "  $mode: $med s"
done
