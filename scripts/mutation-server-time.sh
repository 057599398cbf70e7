#!/usr/bin/env bash
# Where a mutation's server time goes (issue 23): one fresh server per run,
# the mdtest-like `sextant bench` over the client library against it
# (files: create, stat, remove), and the server's own time per request
# from its /metrics (sextant_request_seconds: arrival to reply), its
# journal syncs and its threads' context switches. Builds alternate,
# round by round, so the ratios are same-run.
#
#   BUILDS="base=/tmp/sextant-base new=target/release/sextant" \
#     scripts/mutation-server-time.sh
#
# Environment: BUILDS (NAME=BINARY ...; default new=target/release/sextant),
# ROUNDS (3), TASKS ("1 16": requests in flight), ITEMS (4000 per task),
# SYNC (background: the default journal mode; fsync, nosync, off),
# PORT (18751; metrics on PORT+1), OUT (/tmp/mutation-server-time),
# PERF (perf record options, e.g. "-F 999 -g": a profile per run in
# $OUT/RUN/perf.data; slows the server, not for timed runs).
# Prints one line per run; raw files stay in $OUT.
set -euo pipefail
BUILDS=${BUILDS:-new=target/release/sextant}
ROUNDS=${ROUNDS:-3}
TASKS=${TASKS:-1 16}
ITEMS=${ITEMS:-4000}
SYNC=${SYNC:-background}
PORT=${PORT:-18751}
OUT=${OUT:-/tmp/mutation-server-time}
MP=$((PORT + 1))
mkdir -p "$OUT"

run() { # run NAME BINARY TASKS
  local w=$OUT/$1 sp pp=
  rm -rf "$w"
  mkdir -p "$w"
  SEXTANT_METRICS=127.0.0.1:$MP SEXTANT_JOURNAL_SYNC=$SYNC "$2" serve --data "$w/data" \
    --listen "127.0.0.1:$PORT" --socket off >"$w/serve.log" 2>&1 &
  sp=$!
  for _ in $(seq 100); do grep -qs "listening on" "$w/serve.log" && break; sleep 0.1; done
  if [ -n "${PERF:-}" ]; then
    # shellcheck disable=SC2086
    perf record $PERF -p "$sp" -o "$w/perf.data" >/dev/null 2>&1 &
    pp=$!
  fi
  "$2" --server "127.0.0.1:$PORT" --data "$w/data" bench -q --cpu-of "$sp" --tasks "$3" \
    --items "$ITEMS" -F --phases create,stat,remove --json >"$w/bench.json" 2>"$w/bench.err"
  for t in /proc/"$sp"/task/*; do
    echo "$(cat "$t/comm") $(grep ctxt "$t/status" | tr '\n' ' ')"
  done >"$w/ctx-threads"
  curl -s "127.0.0.1:$MP/metrics" >"$w/metrics.txt"
  if [ -n "$pp" ]; then kill -INT "$pp"; wait "$pp" || true; fi
  kill "$sp"
  wait "$sp" || true
  rm -rf "$w/data"
  python3 - "$w" "$1" <<'EOF'
import json, re, sys
w, name = sys.argv[1], sys.argv[2]
def walk(x):
    if isinstance(x, dict):
        if "phase" in x and "p50_us" in x:
            yield x
        for v in x.values():
            yield from walk(v)
    elif isinstance(x, list):
        for v in x:
            yield from walk(v)
seen, out = set(), []
for s in walk(json.load(open(w + "/bench.json"))):
    if s["phase"] in seen:
        continue
    seen.add(s["phase"])
    out.append(f"{s['phase']} {s['ops_per_sec']:.0f}/s p50 {s['p50_us']:.0f} us")
m = open(w + "/metrics.txt").read()
srv = []
for op in ["create", "unlink", "getattr"]:
    su = re.search(r'sextant_request_seconds_sum\{op="%s"\} (\S+)' % op, m)
    co = re.search(r'sextant_request_seconds_count\{op="%s"\} (\S+)' % op, m)
    if su and co and float(co.group(1)) > 0:
        srv.append(f"{op} {float(su.group(1)) / float(co.group(1)) * 1e6:.0f} us")
sy = re.search(r"sextant_journal_syncs_total (\d+)", m)
print(f"{name}: {' | '.join(out)} || server: {', '.join(srv)}; syncs {sy.group(1) if sy else '-'}")
EOF
}

uptime
for r in $(seq "$ROUNDS"); do
  for b in $BUILDS; do
    for t in $TASKS; do
      run "${b%%=*}-t$t-r$r" "${b#*=}" "$t"
    done
  done
done
uptime
