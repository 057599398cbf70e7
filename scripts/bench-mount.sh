#!/usr/bin/env bash
# Issue 3's mount benchmarks (docs/BENCHMARKS.md, "Issue 3"): a `sextant
# mount` against a FUSE passthrough (bindfs) of a local directory and the
# local directory itself, measured in the same run, repetitions interleaved.
#
#   scripts/bench-mount.sh [compare] [procs] [postmark]   (default: all three)
#
#   compare   sextant bench --dir on the mount, on bindfs and on the local
#             directory: create/stat/lookup/readdir/remove of files and
#             directories, 1 and 4 threads
#   procs     creates from P = 1 2 4 8 16 processes on the mount (journal
#             fsync): creates/s and creates per fdatasync
#   postmark  Postmark with Magellan's setting (bench/postmark/magellan.pmrc)
#             on the mount, on bindfs and on the local directory
#
# Environment: TAG (added to the compare and procs result names, e.g. to
# interleave two builds), REPS (3), ITEMS (2000 per worker, compare),
# MOUNT_THREADS (the mount's FUSE threads for compare and postmark: 4, the
# mount's default), PROCS_MOUNT_THREADS (16 for procs: a thread for each of
# up to 16 processes, so that their creates share journal syncs),
# THREADS ("1 4", compare), PROCS ("1 2 4 8 16", procs), PROC_ITEMS (1000
# per process, procs), TTL (kernel attr/entry cache seconds on both mounts,
# 0 = every operation reaches the daemon; "default" = each mount's own
# defaults: sextant's 30 s kept exact by watching the server, bindfs's
# 1 s), JOURNAL (fsync), MOUNT_VIA (how the mount reaches the server:
# tcp, 127.0.0.1:PORT, the default; or unix, the server's Unix socket,
# which measured the same through the mount), MOUNT_OPTS (more
# `sextant mount` arguments, e.g. "-o default_permissions"), WORK
# (${TMPDIR:-/tmp}/sextant-bench-data/mount: scratch, wiped), OBJECTS (the mount's file-data
# directory, --data-dir; default <data>/objects), OUT (${TMPDIR:-/tmp}/sextant-bench-results/issue3:
# raw JSON and logs), PORT (7441), SEXTANT (a built binary; default: build
# --release into $CARGO_TARGET_DIR or target/).
# Installs postmark and bindfs when missing (scripts/ensure-deps.sh with
# SEXTANT_BENCH_DEPS=1). Needs root or fuse permissions. Unmounts and stops
# the server it started on exit, also on failure.
set -euo pipefail
cd "$(dirname "$0")/.."
SEXTANT_BENCH_DEPS=1 source scripts/ensure-deps.sh

REPS=${REPS:-3}
ITEMS=${ITEMS:-2000}
THREADS=${THREADS:-1 4}
PROCS=${PROCS:-1 2 4 8 16}
PROC_ITEMS=${PROC_ITEMS:-1000}
TTL=${TTL:-0}
JOURNAL=${JOURNAL:-fsync}
WORK=${WORK:-${TMPDIR:-/tmp}/sextant-bench-data/mount}
OUT=${OUT:-${TMPDIR:-/tmp}/sextant-bench-results/issue3}
PORT=${PORT:-7441}
MOUNT_THREADS=${MOUNT_THREADS:-4}
PROCS_MOUNT_THREADS=${PROCS_MOUNT_THREADS:-16}
MOUNT_VIA=${MOUNT_VIA:-tcp}
ADDR=127.0.0.1:$PORT
SOCKET=$WORK/sextant.sock
case $MOUNT_VIA in
  unix) MOUNT_ADDR=unix:$SOCKET ;;
  tcp) MOUNT_ADDR=$ADDR ;;
  *) echo "MOUNT_VIA is unix or tcp, not $MOUNT_VIA" >&2; exit 2 ;;
esac
WHAT=("$@")
[ ${#WHAT[@]} -eq 0 ] && WHAT=(compare procs postmark)

if [ -z "${SEXTANT:-}" ]; then
  cargo build --release --locked -p sextant-cli >&2
  SEXTANT=${CARGO_TARGET_DIR:-target}/release/sextant
fi

mkdir -p "$OUT"
rm -rf "$WORK"
mkdir -p "$WORK"/{local,mnt,bind}
DATA=$WORK/data
SERVER_PID=

cleanup() {
  for m in "$WORK/mnt" "$WORK/bind"; do
    if mountpoint -q "$m"; then fusermount3 -u "$m" 2>/dev/null || fusermount3 -u -z "$m" || true; fi
  done
  if [ -n "$SERVER_PID" ]; then kill "$SERVER_PID" 2>/dev/null && wait "$SERVER_PID" 2>/dev/null || true; fi
}
trap cleanup EXIT

log() { echo "[$(date +%T) load $(cut -d' ' -f1-3 /proc/loadavg)] $*" | tee -a "$OUT/log" >&2; }

rm -f "$OUT/serve.log"
SEXTANT_METRICS=off "$SEXTANT" serve --data "$DATA" --listen "$ADDR" --socket "$SOCKET" \
  --journal-sync "$JOURNAL" >"$OUT/serve.log" 2>&1 &
SERVER_PID=$!
for _ in $(seq 100); do grep -qs "listening on" "$OUT/serve.log" && break; sleep 0.1; done
OBJECTS=${OBJECTS:-$DATA/objects}
mkdir -p "$OBJECTS"
if [ "$TTL" = default ]; then
  TTL_ARGS=() BINDFS_ARGS=()
else
  TTL_ARGS=(--attr-timeout "$TTL" --entry-timeout "$TTL")
  BINDFS_ARGS=(-o "attr_timeout=$TTL,entry_timeout=$TTL")
fi
# mount_sextant THREADS: (re)mounts the sextant mount with THREADS FUSE
# threads, unless it is mounted with those already; sets MOUNT_PID.
MOUNTED_THREADS= MOUNT_PID=
mount_sextant() {
  [ "$MOUNTED_THREADS" = "$1" ] && return
  if mountpoint -q "$WORK/mnt"; then
    fusermount3 -u "$WORK/mnt"
    # The unmounted daemon exits; wait (up to 10 s) so that the next
    # mount's CPU accounting starts clean.
    for _ in $(seq 100); do kill -0 "$MOUNT_PID" 2>/dev/null || break; sleep 0.1; done
  fi
  "$SEXTANT" --server "$MOUNT_ADDR" --data "$DATA" mount "${TTL_ARGS[@]}" \
    ${MOUNT_OPTS:-} --threads "$1" --log "$OUT/mount.log" --data-dir "$OBJECTS" "$WORK/mnt"
  MOUNT_PID=$(pgrep -f -- "mount .*--threads $1 --log $OUT/mount.log --data-dir $OBJECTS $WORK/mnt" | head -1)
  MOUNTED_THREADS=$1
  log "sextant mount (journal $JOURNAL, ttl $TTL, $1 FUSE threads, via $MOUNT_ADDR, options '${MOUNT_OPTS:-}', objects in $OBJECTS) at $WORK/mnt"
}

bindfs --multithreaded "${BINDFS_ARGS[@]}" "$WORK/local" "$WORK/bind"
log "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), kernel $(uname -r)"
log "bindfs --multithreaded at $WORK/bind; commit $(git rev-parse --short HEAD); binary $SEXTANT${TAG:+; tag $TAG}"
BINDFS_PID=$(pgrep -f -- "bindfs --multithreaded .* $WORK/bind" | head -1)

# bench NAME DIR ARGS... -> $OUT/NAME.json. On the mount: the server's
# journal syncs, and CPU time of server + mount daemon (+ bench); on bindfs:
# CPU time of bindfs (+ bench).
bench() {
  local name=$1 dir=$2; shift 2
  local global=() cpu=()
  case $dir in
  "$WORK/mnt") global=(--server "$ADDR" --data "$DATA") cpu=(--cpu-of "$SERVER_PID,$MOUNT_PID") ;;
  "$WORK/bind") cpu=(--cpu-of "$BINDFS_PID") ;;
  esac
  "$SEXTANT" "${global[@]}" bench "${cpu[@]}" --dir "$dir" -q --json "$@" >"$OUT/$name.json"
}

for w in "${WHAT[@]}"; do
  case $w in
  compare)
    mount_sextant "$MOUNT_THREADS"
    for rep in $(seq "$REPS"); do
      for t in $THREADS; do
        for fs in sextant bindfs local; do
          case $fs in sextant) d=$WORK/mnt ;; bindfs) d=$WORK/bind ;; local) d=$WORK/local ;; esac
          log "compare rep $rep: $fs, $t threads × $ITEMS items"
          bench "compare-ttl$TTL${TAG:+-$TAG}-t$t-$fs-$rep" "$d" --tasks "$t" --items "$ITEMS"
        done
      done
    done
    ;;
  procs)
    mount_sextant "$PROCS_MOUNT_THREADS"
    for rep in $(seq "$REPS"); do
      for p in $PROCS; do
        log "procs rep $rep: P=$p × $PROC_ITEMS creates"
        bench "procs-$JOURNAL${TAG:+-$TAG}-p$p-$rep" "$WORK/mnt" -P "$p" --tasks 1 --items "$PROC_ITEMS" -F --phases create
      done
    done
    ;;
  postmark)
    mount_sextant "$MOUNT_THREADS"
    for rep in $(seq "$REPS"); do
      for fs in local bindfs sextant; do
        case $fs in sextant) d=$WORK/mnt ;; bindfs) d=$WORK/bind ;; local) d=$WORK/local ;; esac
        mkdir -p "$d/pm"
        { echo "set location $d/pm"; grep -v '^#' bench/postmark/magellan.pmrc; echo run; echo quit; } >"$WORK/pm.cfg"
        log "postmark rep $rep: $fs"
        s=$(date +%s.%N)
        postmark "$WORK/pm.cfg" >"$OUT/postmark-$fs-$rep.txt"
        e=$(date +%s.%N)
        echo "wall_seconds $(echo "$e - $s" | bc)" >>"$OUT/postmark-$fs-$rep.txt"
        rmdir "$d/pm"
        log "postmark rep $rep: $fs took $(tail -1 "$OUT/postmark-$fs-$rep.txt")"
      done
    done
    ;;
  *) echo "unknown benchmark $w (compare, procs, postmark)" >&2; exit 2 ;;
  esac
done
log "done; raw results in $OUT"
