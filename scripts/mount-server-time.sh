#!/usr/bin/env bash
# Issue 23: does a mutation from the mount cost the server more than the
# same mutation from the library client? One fresh server (journal in
# SYNC mode, /metrics on) and one default mount (4 FUSE threads, the
# kernel caches' own defaults); the mdtest-like files bench (create,
# remove; one task) once through the client library, then once through
# the mount, against that same server; the server's own time per request
# (sextant_request_seconds: arrival to reply) from /metrics deltas.
#
#   BUILDS="base=/tmp/base/sextant new=target/release/sextant" ROUNDS=3 \
#     scripts/mount-server-time.sh
#
# Environment: BUILDS (NAME=BINARY ...; default new=target/release/sextant),
# ROUNDS (3, builds alternating), ITEMS (4000), SYNC (background), PORT
# (18861; metrics on PORT+1), OUT (/tmp/mount-server-time; raw files per
# run), PERF (set: a perf profile of the server per part, perf-lib.data
# and perf-mnt.data; slows the server, not for timed runs).
# Prints one line per part: the bench's ops/s and p50, the server's mean
# time per op.
set -euo pipefail
BUILDS=${BUILDS:-new=target/release/sextant}
ROUNDS=${ROUNDS:-3}
ITEMS=${ITEMS:-4000}
SYNC=${SYNC:-background}
PORT=${PORT:-18861}
OUT=${OUT:-/tmp/mount-server-time}
MP=$((PORT + 1))

run() { # run NAME BINARY
  local name=$1 bin=$2 w=$OUT/$1 sp mpid
  rm -rf "$w"
  mkdir -p "$w/mnt" "$w/data/objects"
  SEXTANT_METRICS=127.0.0.1:$MP "$bin" serve --data "$w/data" --listen 127.0.0.1:$PORT \
    --socket off --journal-sync "$SYNC" >"$w/serve.log" 2>&1 &
  sp=$!
  for _ in $(seq 100); do grep -qs "listening on" "$w/serve.log" && break; sleep 0.1; done
  "$bin" --server 127.0.0.1:$PORT --data "$w/data" mount --threads 4 --log "$w/mount.log" \
    --data-dir "$w/data/objects" "$w/mnt" 2>/dev/null
  sleep 0.5
  mpid=$(pgrep -f -- "mount --threads 4 --log $w/mount.log" | head -1)
  part() { # part TAG BENCH-ARGS...
    local tag=$1 pp=
    shift
    curl -s 127.0.0.1:$MP/metrics >"$w/m-$tag-0"
    if [ -n "${PERF:-}" ]; then
      perf record -F 999 -g -p "$sp" -o "$w/perf-$tag.data" >/dev/null 2>&1 &
      pp=$!
      sleep 0.3
    fi
    "$bin" --server 127.0.0.1:$PORT --data "$w/data" bench -q --cpu-of "$sp,$mpid" --tasks 1 \
      --items "$ITEMS" -F --phases create,remove --json "$@" >"$w/bench-$tag.json" 2>"$w/bench-$tag.err"
    if [ -n "$pp" ]; then kill -INT "$pp"; wait "$pp" || true; fi
    curl -s 127.0.0.1:$MP/metrics >"$w/m-$tag-1"
  }
  part lib
  part mnt --dir "$w/mnt"
  fusermount3 -u "$w/mnt" 2>/dev/null || fusermount3 -u -z "$w/mnt" || true
  kill "$sp"
  wait "$sp" || true
  rm -rf "$w/data"
  python3 - "$w" "$name" <<'PY'
import json, re, sys
w, name = sys.argv[1], sys.argv[2]
def metrics(f):
    d = {}
    for line in open(f):
        m = re.match(r'sextant_request_seconds_(sum|count)\{op="(\w+)"\} (\S+)', line)
        if m:
            d[(m.group(1), m.group(2))] = float(m.group(3))
    return d
def walk(x):
    if isinstance(x, dict):
        if "phase" in x and "p50_us" in x:
            yield x
        for v in x.values():
            yield from walk(v)
    elif isinstance(x, list):
        for v in x:
            yield from walk(v)
for tag in ["lib", "mnt"]:
    a, b = metrics(f"{w}/m-{tag}-0"), metrics(f"{w}/m-{tag}-1")
    srv = []
    for op in ["create", "unlink", "getattr", "lookup", "setattr"]:
        c = b.get(("count", op), 0) - a.get(("count", op), 0)
        s = b.get(("sum", op), 0) - a.get(("sum", op), 0)
        if c:
            srv.append(f"{op} n={c:.0f} {s / c * 1e6:.1f} us")
    seen, ph = set(), []
    for s in walk(json.load(open(f"{w}/bench-{tag}.json"))):
        if s["phase"] not in seen:
            seen.add(s["phase"])
            ph.append(f"{s['phase']} {s['ops_per_sec']:.0f}/s p50 {s['p50_us']:.0f} us")
    print(f"{name} {tag}: {' | '.join(ph)} || server {', '.join(srv)}")
PY
}

uptime
for r in $(seq "$ROUNDS"); do
  for b in $BUILDS; do
    run "${b%%=*}-r$r" "${b#*=}"
  done
done
uptime
