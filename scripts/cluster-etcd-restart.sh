#!/usr/bin/env bash
# Service back after an etcd restart (issue 20's benchmark: "within etcd's
# restart time + TTL"): etcd and two `sextant serve` processes on this
# machine; etcd is killed (-9) and started again on the same data and
# ports; measured from the kill: when etcd answers again, and when a
# mutation (`mkdir`) through each server succeeds again. Rounds alternate
# the lease TTL (2 s and 6 s, the default). Prints one line per round.
#
#   scripts/cluster-etcd-restart.sh [ROUNDS]    (default 3 per TTL)
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-3}
# SEXTANT_BIN: a binary already built (default: a release build).
if [ -z "${SEXTANT_BIN:-}" ]; then
  cargo build --release --locked -q -p sextant-cli
fi
BIN=${SEXTANT_BIN:-$PWD/target/release/sextant}
command -v etcd >/dev/null || { echo "needs etcd (scripts/ensure-deps.sh installs it)" >&2; exit 1; }
work=$(mktemp -d "${TMPDIR:-/tmp}/sextant-etcd-restart.XXXXXX")
pids=()
cleanup() { for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT
free_port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
now() { python3 -c 'import time;print(time.monotonic())'; }

start_etcd() {  # $1 = dir, $2 = client port, $3 = peer port
  etcd --name t --data-dir "$1/etcd" --listen-client-urls "http://127.0.0.1:$2" \
    --advertise-client-urls "http://127.0.0.1:$2" --listen-peer-urls "http://127.0.0.1:$3" \
    --initial-advertise-peer-urls "http://127.0.0.1:$3" --initial-cluster "t=http://127.0.0.1:$3" \
    >>"$1/etcd.log" 2>&1 &
  etcd_pid=$!; pids+=("$etcd_pid")
}

round() {  # $1 = TTL
  local ttl=$1 dir; dir=$(mktemp -d "$work/r.XXXX")
  local c p; c=$(free_port); p=$(free_port)
  start_etcd "$dir" "$c" "$p"
  until (echo > "/dev/tcp/127.0.0.1/$c") 2>/dev/null; do sleep 0.05; done
  declare -A pid addr
  for n in a b; do
    SEXTANT_METRICS=off SEXTANT_LEASE_TTL=${ttl}s "$BIN" serve --data "$dir/$n" --listen 127.0.0.1:0 \
      --etcd "http://127.0.0.1:$c" --name "$n" --cluster-store "$dir/store" --socket off \
      >"$dir/$n.out" 2>"$dir/$n.log" &
    pid[$n]=$!; pids+=("${pid[$n]}")
    until grep -q "listening on" "$dir/$n.out" 2>/dev/null; do sleep 0.05; done
    addr[$n]=$(sed -n 's/listening on //p' "$dir/$n.out")
    until "$BIN" --server "${addr[a]}" --data "$dir/a" ls / >/dev/null 2>&1; do sleep 0.05; done
  done
  "$BIN" --server "${addr[b]}" --data "$dir/a" mkdir /before >/dev/null
  local t0 te ta tb; t0=$(now)
  kill -9 "$etcd_pid"; wait "$etcd_pid" 2>/dev/null || true
  start_etcd "$dir" "$c" "$p"
  until (echo > "/dev/tcp/127.0.0.1/$c") 2>/dev/null; do sleep 0.02; done
  te=$(now)
  local i=0
  until "$BIN" --server "${addr[a]}" --data "$dir/a" mkdir "/a$i" >/dev/null 2>&1; do i=$((i+1)); sleep 0.02; done
  ta=$(now)
  until "$BIN" --server "${addr[b]}" --data "$dir/a" mkdir "/b$i" >/dev/null 2>&1; do i=$((i+1)); sleep 0.02; done
  tb=$(now)
  python3 -c "print(f'ttl {$ttl} s: etcd answers after {($te-$t0):.2f} s; a mutation through a after {($ta-$t0):.2f} s, through b after {($tb-$t0):.2f} s (bound: etcd + ttl = {($te-$t0+$ttl):.2f} s)')"
  kill "${pid[a]}" "${pid[b]}" "$etcd_pid" 2>/dev/null || true
  wait "${pid[a]}" "${pid[b]}" "$etcd_pid" 2>/dev/null || true
}

for r in $(seq "$ROUNDS"); do
  for ttl in 2 6; do round "$ttl"; done
done
