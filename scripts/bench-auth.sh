#!/usr/bin/env bash
# Issue 22's benchmark: what the identity checks cost per call. One
# log-less server (so a create costs CPU, not a journal sync) and a client
# key for it; `sextant-auth-bench` (crates/bench/src/bin/auth_bench.rs)
# then creates and getattrs files through the doors in interleaved rounds
# (the order rotated every round) — TCP with the cluster secret, the Unix
# socket as the kernel's caller, TCP with the key (its proof checked when
# a session opens, its limits on every request) — and prints each door's
# median ops/s, p50, the servers' CPU per operation and the ratios to
# the secret's.
#
#   scripts/bench-auth.sh
#   CLUSTER=3 scripts/bench-auth.sh
#
# CLUSTER=N: the same against `sextant cluster up --servers N` (its own
# etcd, journal written without fsync: `--journal-sync nosync`, so a
# create costs CPU), through the first server (TCP, and its Unix
# socket), plus a fourth door: a key limited to UNDER (`auth add NAME
# --path UNDER`; on a cluster its check may ask other servers). Every
# door works under UNDER (/sub), whose table is moved to PIN (s1). The
# servers split tables at CLUSTER_LIMITS (default table_dir_limit = 2,
# inode limit off, as scripts/cluster-bench.sh does): every worker's
# directory gets a table of its own, which the coordinator spreads over
# the servers: the bench makes every run's directories first and waits
# SETTLE (10) s before it times anything (files never split a table,
# though the coordinator may still move some by their request rates).
# The servers' CPU is all of theirs; they serve metrics on PORT+100 …,
# from which the bench reports the gRPC calls they admitted per
# operation (server-to-server calls: forwards, a confined key's reads).
# The coordinator's moves before and during the bench are counted from
# the servers' logs, which are copied to OUT.
#
# The bench runs as RUN_AS (default 65534:65534 when started as root;
# empty: as is) once it read the credential files: the server trusts a
# root peer on its socket as the secret's holder, so only a non-root
# bench measures the kernel's caller there.
#
# Environment: REPS (3), TASKS ("1,16": workers, one connection), ITEMS
# (2000 per worker; 20000 was run on one server), PORT (7451; a
# cluster's first server, the others follow), UNDER (/ alone, /sub on a
# cluster), DOORS (secret,socket,key alone; and pathkey on a cluster;
# pathkey works alone too, with UNDER), RUN_AS, WORK
# (${TMPDIR:-/tmp}/sextant-bench-data/auth: scratch, wiped), OUT
# (${TMPDIR:-/tmp}/sextant-bench-results/auth), SEXTANT and AUTH_BENCH
# (built binaries; default: build --release), COUNT (1: print, after
# each phase, every counter of the servers' metrics that moved, per 1,000
# operations: calls between servers, checks, lease asks, moves).
set -euo pipefail
cd "$(dirname "$0")/.."

REPS=${REPS:-3}
TASKS=${TASKS:-1,16}
ITEMS=${ITEMS:-2000}
PORT=${PORT:-7451}
CLUSTER=${CLUSTER:-}
if [ -n "$CLUSTER" ]; then
  UNDER=${UNDER:-/sub}
  DOORS=${DOORS:-secret,socket,key,pathkey}
else
  UNDER=${UNDER:-/}
  DOORS=${DOORS:-secret,socket,key}
fi
if [ "$(id -u)" = 0 ]; then RUN_AS=${RUN_AS-65534:65534}; else RUN_AS=${RUN_AS:-}; fi
WORK=${WORK:-${TMPDIR:-/tmp}/sextant-bench-data/auth}
OUT=${OUT:-${TMPDIR:-/tmp}/sextant-bench-results/auth}
if [ -z "${SEXTANT:-}" ] || [ -z "${AUTH_BENCH:-}" ]; then
  cargo build --release --locked -p sextant-cli -p sextant-bench >&2
  SEXTANT=${SEXTANT:-${CARGO_TARGET_DIR:-target}/release/sextant}
  AUTH_BENCH=${AUTH_BENCH:-${CARGO_TARGET_DIR:-target}/release/sextant-auth-bench}
fi

rm -rf "$WORK" "$OUT"
mkdir -p "$WORK" "$OUT"
ADDR=127.0.0.1:$PORT
SERVER_PID=
cleanup() {
  # One server, or `cluster up` (it stops its servers, then its etcd).
  if [ -n "$SERVER_PID" ]; then
    kill "$SERVER_PID" 2>/dev/null || true
    for _ in $(seq 300); do kill -0 "$SERVER_PID" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$SERVER_PID" 2>/dev/null || true
    wait "$SERVER_PID" 2>/dev/null || true
  fi
}
trap cleanup EXIT

if [ -z "$CLUSTER" ]; then
  DATA=$WORK/data
  SOCKET=$WORK/sextant.sock
  SEXTANT_METRICS=off "$SEXTANT" serve --data "$DATA" --listen "$ADDR" --socket "$SOCKET" \
    --durability logless >"$OUT/serve.log" 2>&1 &
  SERVER_PID=$!
  for _ in $(seq 100); do grep -qs "listening on" "$OUT/serve.log" && break; sleep 0.1; done
  PIDS=$SERVER_PID
else
  printf '%b\n' "${CLUSTER_LIMITS:-table_dir_limit = 2\ntable_inode_limit = 10000000}" >"$WORK/limits.toml"
  "$SEXTANT" cluster up --servers "$CLUSTER" --data "$WORK/cluster" --base-port "$PORT" \
    --journal-sync nosync --server-config "$WORK/limits.toml" --metrics-base "$((PORT + 100))" \
    >"$OUT/cluster-up.log" 2>&1 &
  SERVER_PID=$!
  for _ in $(seq 600); do grep -qs "every sextant command" "$OUT/cluster-up.log" && break; sleep 0.1; done
  grep -qs "every sextant command" "$OUT/cluster-up.log" || { cat "$OUT/cluster-up.log" >&2; exit 1; }
  DATA=$WORK/cluster/s1
  SOCKET=$DATA/sextant.sock
  # The servers: `cluster up`'s children but etcd.
  PIDS=$(ps --ppid "$SERVER_PID" -o pid=,args= | awk '$0 ~ / serve / {print $1}' | paste -sd, -)
  [ "$(echo "$PIDS" | tr ',' '\n' | grep -c .)" = "$CLUSTER" ] || { echo "servers: $PIDS?" >&2; exit 1; }
  for _ in $(seq 100); do [ -S "$SOCKET" ] && break; sleep 0.1; done
  ETCD=$(sed -n 's/^etcd = "\(.*\)"/\1/p' "$WORK/cluster/cluster.toml")
  # UNDER's own table on the first server (PIN, default s1): the bench's
  # directories below it split off into tables of their own, which the
  # coordinator spreads; a path-limited key's check of a request on
  # another server then needs the path down to UNDER from the first.
  if [ "$UNDER" != / ]; then
    "$SEXTANT" --server "$ADDR" --data "$DATA" mkdir -p -m 777 "$UNDER"
    "$SEXTANT" --server "$ADDR" --data "$DATA" cluster move "$UNDER" "${PIN:-s1}" --etcd "$ETCD" >/dev/null
  fi
  METRICS=$(for i in $(seq 0 $((CLUSTER - 1))); do echo "127.0.0.1:$((PORT + 100 + i))"; done | paste -sd, -)
fi
"$SEXTANT" --server "$ADDR" --data "$DATA" auth add bench --out "$WORK/bench.key" >/dev/null
extra=()
if [[ ",$DOORS," == *,pathkey,* ]]; then
  "$SEXTANT" --server "$ADDR" --data "$DATA" auth add benchsub --path "$UNDER" \
    --out "$WORK/benchsub.key" >/dev/null
  extra+=(--path-key-file "$WORK/benchsub.key")
fi
[ -n "$RUN_AS" ] && extra+=(--run-as "$RUN_AS")
[ -n "${METRICS:-}" ] && extra+=(--metrics "$METRICS")
# The bench makes every run's directories first, then waits SETTLE s.
[ -n "$CLUSTER" ] && extra+=(--settle "${SETTLE:-10}")
# COUNT=1: every counter the servers moved, per phase (see --count).
[ -n "${COUNT:-}" ] && [ -n "${METRICS:-}" ] && extra+=(--count)

moves() { if [ -n "$CLUSTER" ]; then cat "$WORK"/cluster/s*.log | grep -c "coordinator: move" || true; fi; }
MOVES_BEFORE=$(moves)
echo "machine: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), commit $(git rev-parse --short HEAD), binaries $SEXTANT $AUTH_BENCH, cluster ${CLUSTER:-none}, under $UNDER, doors $DOORS, run as ${RUN_AS:-$(id -u):$(id -g)}, servers $PIDS" | tee "$OUT/log" >&2
"$AUTH_BENCH" --server "$ADDR" --socket "$SOCKET" --secret-file "$DATA/secret" \
  --key-file "$WORK/bench.key" --tasks "$TASKS" --items "$ITEMS" --reps "$REPS" \
  --doors "$DOORS" --under "$UNDER" --server-pids "$PIDS" "${extra[@]}" \
  2> >(tee -a "$OUT/log" >&2) | tee "$OUT/result.txt"
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT/log" >&2
if [ -n "$CLUSTER" ]; then
  echo "coordinator moves: $MOVES_BEFORE before the bench, $(moves) after; tables per server:" \
    "$("$SEXTANT" --server "$ADDR" --data "$DATA" --json cluster status --etcd "$ETCD" |
      python3 -c 'import json,sys; d=json.load(sys.stdin); print(" ".join("%s=%s" % (s["name"], s["tables"]) for s in d["servers"]))')" |
    tee -a "$OUT/log" >&2
  cp "$WORK"/cluster/s*.log "$OUT/" 2>/dev/null || true
fi
