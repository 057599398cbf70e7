#!/usr/bin/env bash
# Issue 23, item 1: where the time of a real workload goes through the
# mount, per entry. Runs tar x, cp -a and rsync -a of a source tree
# (/usr/include), a git checkout of it and a small Postmark, on a Sextant
# mount with the journal (default) and log-less, on bindfs and on the
# local directory, and counts per entry of the source tree:
#
#   - FUSE requests by opcode: the kernel's own `fuse:fuse_request_send`
#     tracepoint (kernel >= 6.16), in a private tracefs instance filtered
#     on the mount's connection (works for bindfs too, no debug logging);
#   - server requests by op and journal syncs: the server's /metrics
#     (`SEXTANT_METRICS`): sextant_requests_total, sextant_journal_syncs_total
#     and the time they took (sextant_journal_sync_microseconds_total);
#     and the server's time per request (sextant_request_seconds_sum/_count:
#     from the request's arrival to its reply, journal sync included);
#   - the mount's and the server's context switches (all threads:
#     /proc/PID/task/*/status) and the mount's I/O syscalls and bytes
#     (/proc/PID/io: they include the /dev/fuse reads and writes, one of
#     each per request);
#   - the workload's own CPU time (bash's `times`: user + system of the
#     children reaped, before and after);
#   - wall time.
#
# The parser (bench/breakdown.py) turns $OUT into the markdown table of
# docs/BENCHMARKS.md ("Issue 23").
#
#   scripts/workload-breakdown.sh [WORKLOAD...]   (default: tar cp rsync git postmark)
#
# PERF ("perf record" options, e.g. "-F 499 --call-graph dwarf,8192"):
# profile the server and the mount during each workload ($OUT/*/perf.data;
# it slows them: not for timed runs).
# Environment: TARGETS ("journal logless bindfs local"; also "background": the journal synced in the background), SRC (/usr/include),
# SEXTANT (a built binary; default: build --release into $CARGO_TARGET_DIR
# or target/), WORK (${TMPDIR:-/tmp}/sextant-breakdown: scratch, wiped), OUT
# ($WORK/out unless given), PORT (7461; the metrics port is PORT+1),
# TTL (the mount's attr/entry timeouts: its defaults when unset),
# PM_FILES / PM_TX / PM_DIRS (Postmark: 2000 files, 4000 transactions,
# no subdirectories; Magellan's setting is 50000 / 10000 / 20000), BUILDS
# ("NAME=BINARY ...": compare builds in one run; each Sextant target then
# runs once per build, builds alternating, named TARGET.NAME).
# Needs root (tracefs, FUSE). Unmounts and stops what it started on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
SEXTANT_BENCH_DEPS=1 source scripts/ensure-deps.sh
if ! command -v rsync >/dev/null 2>&1; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq rsync >/dev/null
fi

TARGETS=${TARGETS:-journal logless bindfs local}
SRC=${SRC:-/usr/include}
WORK=${WORK:-${TMPDIR:-/tmp}/sextant-breakdown}
PORT=${PORT:-7461}
METRICS=127.0.0.1:$((PORT + 1))
PM_FILES=${PM_FILES:-2000}
PM_TX=${PM_TX:-4000}
PM_DIRS=${PM_DIRS:-0}
WHAT=("$@")
[ ${#WHAT[@]} -eq 0 ] && WHAT=(tar cp rsync git postmark)
TRACING=/sys/kernel/tracing
[ -d $TRACING/events ] || mount -t tracefs nodev $TRACING
if [ ! -d $TRACING/events/fuse/fuse_request_send ]; then
  echo "no fuse:fuse_request_send tracepoint (kernel >= 6.16 needed): FUSE requests not counted" >&2
fi

if [ -z "${SEXTANT:-}" ] && [ -z "${BUILDS:-}" ]; then
  cargo build --release --locked -p sextant-cli >&2
  SEXTANT=${CARGO_TARGET_DIR:-target}/release/sextant
fi

SEXTANT=${SEXTANT:-}
rm -rf "$WORK"
mkdir -p "$WORK"/{local,mnt,bind,bindsrc}
OUT=${OUT:-$WORK/out}
mkdir -p "$OUT"
INST=$TRACING/instances/sextant-breakdown-$$
SERVER_PID= MOUNT_PID= BINDFS_PID= PIPE_PID=

unmount_all() {
  for m in "$WORK/mnt" "$WORK/bind"; do
    if mountpoint -q "$m"; then fusermount3 -u "$m" 2>/dev/null || fusermount3 -u -z "$m" || true; fi
  done
  for p in "$MOUNT_PID" "$BINDFS_PID"; do
    [ -n "$p" ] && for _ in $(seq 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
  done
  MOUNT_PID= BINDFS_PID=
}
stop_server() {
  if [ -n "$SERVER_PID" ]; then kill "$SERVER_PID" 2>/dev/null && wait "$SERVER_PID" 2>/dev/null || true; fi
  SERVER_PID=
}
cleanup() {
  [ -n "$PIPE_PID" ] && kill "$PIPE_PID" 2>/dev/null || true
  unmount_all
  stop_server
  [ -d "$INST" ] && rmdir "$INST" 2>/dev/null || true
}
trap cleanup EXIT
trap 'exit 143' TERM INT

log() { echo "[$(date +%T) load $(cut -d' ' -f1-3 /proc/loadavg)] $*" | tee -a "$OUT/log" >&2; }
log "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), kernel $(uname -r); commit $(git rev-parse --short HEAD); binary $SEXTANT"

# The inputs, made once on the local disk.
tar cf "$WORK/src.tar" -C "$(dirname "$SRC")" "$(basename "$SRC")"
ENTRIES=$(find "$SRC" | wc -l)
GITDIR=$WORK/src.git
if printf '%s\n' "${WHAT[@]}" | grep -qx git; then
  git init -q --bare "$GITDIR"
  git --git-dir="$GITDIR" --work-tree="$SRC" add -A . >/dev/null 2>&1
  git --git-dir="$GITDIR" --work-tree="$SRC" -c user.name=b -c user.email=b@b commit -qm src >/dev/null
fi
log "source $SRC: $ENTRIES entries"

# start_sextant DURABILITY NAME BINARY: a fresh server (with metrics) and mount.
start_sextant() {
  rm -rf "$WORK/data"
  # Removed first: the wait below must not find the last server's line.
  rm -f "$OUT/serve-$2.log"
  # background: the journal, synced in the background (--journal-sync background).
  local durability=$1 sync=fsync
  [ "$1" = background ] && durability=journal sync=background
  SEXTANT_METRICS=$METRICS SEXTANT_DURABILITY=$durability SEXTANT_JOURNAL_SYNC=$sync "$3" serve --data "$WORK/data" \
    --listen "127.0.0.1:$PORT" --socket "$WORK/sextant.sock" >"$OUT/serve-$2.log" 2>&1 &
  SERVER_PID=$!
  for _ in $(seq 100); do grep -qs "listening on" "$OUT/serve-$2.log" && break; sleep 0.1; done
  local ttl=()
  [ -n "${TTL:-}" ] && ttl=(--attr-timeout "$TTL" --entry-timeout "$TTL")
  "$3" --server "127.0.0.1:$PORT" --data "$WORK/data" mount "${ttl[@]}" \
    --log "$OUT/mount-$2.log" "$WORK/mnt"
  MOUNT_PID=$(pgrep -f -- "mount .*--log $OUT/mount-$2.log $WORK/mnt" | head -1)
}

# proc_snapshot PID FILE: context switches of all threads, and /proc/PID/io.
proc_snapshot() {
  local pid=$1 out=$2
  if [ -z "$pid" ]; then : >"$out"; return; fi
  cat /proc/"$pid"/task/*/status 2>/dev/null |
    awk '/^voluntary_ctxt_switches/{v+=$2} /^nonvoluntary_ctxt_switches/{n+=$2} END{print "ctxt_vol", v+0; print "ctxt_invol", n+0}' >"$out"
  sed 's/:/ /' /proc/"$pid"/io >>"$out" 2>/dev/null || true
  awk '{print "cpu_ticks", $14 + $15}' /proc/"$pid"/stat >>"$out"
}

metrics() {
  if [ -n "$SERVER_PID" ]; then
    curl -s "http://$METRICS/metrics" | grep -E '^sextant_(requests_total|request_seconds_(sum|count)|journal_syncs_total|journal_sync_microseconds_total|journal_bytes_total)' || true
  fi
}

# run TARGET WORKLOAD DIR CONNECTION: one measured run into $OUT/TARGET-WORKLOAD.
run() {
  local target=$1 w=$2 dir=$3 conn=$4 r=$OUT/$1-$2
  mkdir -p "$r"
  echo "$ENTRIES" >"$r/entries"
  rm -rf "${dir:?}"/* 2>/dev/null || true
  sync
  if [ -n "$conn" ] && [ -d $TRACING/events/fuse/fuse_request_send ]; then
    mkdir -p "$INST"
    echo 32768 >"$INST/buffer_size_kb"
    echo "connection==$conn" >"$INST/events/fuse/fuse_request_send/filter"
    echo 1 >"$INST/events/fuse/fuse_request_send/enable"
    cat "$INST/trace_pipe" >"$r/trace.txt" &
    PIPE_PID=$!
  fi
  metrics >"$r/metrics0"
  proc_snapshot "$MOUNT_PID" "$r/mount0"; proc_snapshot "$SERVER_PID" "$r/server0"
  local t0 t1 perf_pid=
  # PERF: a profile of the server and the mount (or bindfs) while the
  # workload runs, into $r/perf.data (diagnosis only: it slows them).
  local pids
  pids=$(echo $SERVER_PID $MOUNT_PID | tr ' ' ,)
  if [ -n "${PERF:-}" ] && [ -n "$pids" ]; then
    # shellcheck disable=SC2086 # PERF is a list of options
    perf record $PERF -o "$r/perf.data" -p "$pids" 2>"$r/perf.log" &
    perf_pid=$!
    sleep 1
  fi
  # The workload's own CPU (user and system, the kernel's FUSE side of
  # its calls included): `times`' second line, children reaped so far.
  times >"$r/times0"
  t0=$(date +%s.%N)
  # A workload that fails is noted (in $r/failed and the log), not fatal.
  local rc=0
  case $w in
    tar) tar xf "$WORK/src.tar" -C "$dir" || rc=$? ;;
    cp) cp -a "$SRC" "$dir/" || rc=$? ;;
    rsync) rsync -a "$SRC" "$dir/" || rc=$? ;;
    git) git --git-dir="$GITDIR" --work-tree="$dir" checkout -q -f HEAD -- . || rc=$? ;;
    postmark)
      printf 'set location %s\nset number %s\nset transactions %s\nset subdirectories %s\nset seed 42\nrun\nquit\n' \
        "$dir" "$PM_FILES" "$PM_TX" "$PM_DIRS" | postmark >"$r/postmark.txt" || rc=$?
      # Per entry = per file Postmark created (initial set + transactions).
      awk '/^Files:/ {f = 1; next} f && / created/ {print $1; exit}' "$r/postmark.txt" >"$r/entries" ;;
  esac
  t1=$(date +%s.%N)
  times >"$r/times1"
  if [ -n "$perf_pid" ]; then kill -INT "$perf_pid" 2>/dev/null || true; wait "$perf_pid" 2>/dev/null || true; fi
  [ $rc -eq 0 ] || { echo "$rc" >"$r/failed"; log "$target $w FAILED (exit $rc)"; }
  # RELEASE is sent after close returns: let the last ones arrive.
  sleep 1
  echo "$t0 $t1" | awk '{printf "%.3f\n", $2 - $1}' >"$r/wall"
  metrics >"$r/metrics1"
  proc_snapshot "$MOUNT_PID" "$r/mount1"; proc_snapshot "$SERVER_PID" "$r/server1"
  if [ -n "$PIPE_PID" ]; then
    echo 0 >"$INST/events/fuse/fuse_request_send/enable"
    sleep 0.5
    kill "$PIPE_PID" 2>/dev/null || true
    wait "$PIPE_PID" 2>/dev/null || true
    PIPE_PID=
  fi
  log "$target $w: $(cat "$r/wall") s"
}

for target in $TARGETS; do
  case $target in
    journal | background | logless)
      for w in "${WHAT[@]}"; do
        for build in ${BUILDS:-=$SEXTANT}; do
          name=$target${build%%=*}
          [ -n "${build%%=*}" ] && name=$target.${build%%=*}
          start_sextant "$target" "$name" "${build#*=}"
          log "sextant mount ($name, ${build#*=}) at $WORK/mnt, mount pid $MOUNT_PID, server pid $SERVER_PID"
          run "$name" "$w" "$WORK/mnt" "$(stat -c %d "$WORK/mnt")"
          unmount_all
          stop_server
        done
      done ;;
    bindfs)
      bindfs --multithreaded "$WORK/bindsrc" "$WORK/bind"
      BINDFS_PID=$(pgrep -f -- "bindfs --multithreaded .* $WORK/bind" | head -1)
      MOUNT_PID=$BINDFS_PID SERVER_PID=
      conn=$(stat -c %d "$WORK/bind")
      for w in "${WHAT[@]}"; do run bindfs "$w" "$WORK/bind" "$conn"; done
      unmount_all ;;
    local)
      MOUNT_PID= SERVER_PID=
      for w in "${WHAT[@]}"; do run local "$w" "$WORK/local" ""; done ;;
  esac
done
python3 bench/breakdown.py "$OUT" | tee "$OUT/table.md"
