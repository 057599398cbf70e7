#!/usr/bin/env bash
# Failover time of a cluster: etcd and two `sextant serve` processes on
# this machine; the owner of the root table is killed with SIGKILL and the
# time until the survivor answers `sextant ls /` for it is measured.
# Rounds alternate the lease TTL (2 s and 6 s, the default) so both are
# measured in the same run, and the durability modes in MODES (default
# "journal"; "journal logless" measures both: a log-less server's tables
# wait --recovery-grace, GRACE, default 5 s as the server's, for its
# clients' backups before they move). Prints one line per round and the
# medians.
#
#   scripts/cluster-failover.sh [ROUNDS]    (default 5 per TTL and mode)
#
# FAULT=etcd measures instead the service back after an etcd restart
# (issue 20: "within etcd's restart time + TTL"): etcd is killed (-9) and
# started again on the same data and ports; from the kill, the time until
# etcd answers and until a `mkdir` through a, then through b, succeeds
# again (the journal default; ROUNDS per TTL).
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-5}
# SEXTANT_BIN: a binary already built (default: a release build).
if [ -z "${SEXTANT_BIN:-}" ]; then
  cargo build --release --locked -q -p sextant-cli
fi
BIN=${SEXTANT_BIN:-$PWD/target/release/sextant}
command -v etcd >/dev/null || { echo "needs etcd (scripts/ensure-deps.sh installs it)" >&2; exit 1; }
work=$(mktemp -d "${TMPDIR:-/tmp}/sextant-failover.XXXXXX")
pids=()
cleanup() { for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT
free_port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
now() { python3 -c 'import time;print(time.monotonic())'; }

MODES=${MODES:-journal}
FAULT=${FAULT:-server}
GRACE=${GRACE:-5s}

start_etcd() {  # $1 = dir, $2 = client port, $3 = peer port; sets etcd_pid
  etcd --name t --data-dir "$1/etcd" --listen-client-urls "http://127.0.0.1:$2" \
    --advertise-client-urls "http://127.0.0.1:$2" --listen-peer-urls "http://127.0.0.1:$3" \
    --initial-advertise-peer-urls "http://127.0.0.1:$3" --initial-cluster "t=http://127.0.0.1:$3" \
    >>"$1/etcd.log" 2>&1 &
  etcd_pid=$!; pids+=("$etcd_pid")
  until (echo > "/dev/tcp/127.0.0.1/$2") 2>/dev/null; do sleep 0.02; done
}

round() {  # $1 = TTL, $2 = durability
  local ttl=$1 mode=$2 dir; dir=$(mktemp -d "$work/r.XXXX")
  local c p; c=$(free_port); p=$(free_port)
  start_etcd "$dir" "$c" "$p"
  declare -A pid addr
  for n in a b; do
    SEXTANT_METRICS=off SEXTANT_LEASE_TTL=${ttl}s "$BIN" serve --data "$dir/$n" --listen 127.0.0.1:0 \
      --etcd "http://127.0.0.1:$c" --name "$n" --cluster-store "$dir/store" --socket off \
      --durability "$mode" --recovery-grace "$GRACE" \
      >"$dir/$n.out" 2>"$dir/$n.log" &
    pid[$n]=$!; pids+=("${pid[$n]}")
    until grep -q "listening on" "$dir/$n.out" 2>/dev/null; do sleep 0.05; done
    addr[$n]=$(sed -n 's/listening on //p' "$dir/$n.out")
    # The first server makes the root table before the second starts.
    until "$BIN" --server "${addr[a]}" --data "$dir/a" ls / >/dev/null 2>&1; do sleep 0.05; done
  done
  "$BIN" --server "${addr[b]}" --data "$dir/a" mkdir /acked >/dev/null
  if [ "$FAULT" = etcd ]; then
    local t0 te ta tb i=0; t0=$(now)
    kill -9 "$etcd_pid"; wait "$etcd_pid" 2>/dev/null || true
    start_etcd "$dir" "$c" "$p"
    te=$(now)
    until "$BIN" --server "${addr[a]}" --data "$dir/a" mkdir "/a$i" >/dev/null 2>&1; do i=$((i+1)); sleep 0.02; done
    ta=$(now)
    until "$BIN" --server "${addr[b]}" --data "$dir/a" mkdir "/b$i" >/dev/null 2>&1; do i=$((i+1)); sleep 0.02; done
    tb=$(now)
    python3 -c "print(f'ttl {$ttl} s: etcd answers after {($te-$t0):.2f} s; a mutation through a after {($ta-$t0):.2f} s, through b after {($tb-$t0):.2f} s (bound: etcd + ttl = {($te-$t0+$ttl):.2f} s)')"
    kill "${pid[a]}" "${pid[b]}" "$etcd_pid" 2>/dev/null || true
    wait "${pid[a]}" "${pid[b]}" "$etcd_pid" 2>/dev/null || true
    return
  fi
  local t0; t0=$(now)
  kill -9 "${pid[a]}"
  until "$BIN" --server "${addr[b]}" --data "$dir/a" ls / 2>/dev/null | grep -q acked; do sleep 0.02; done
  local t1; t1=$(now)
  python3 -c "print(f'$mode ttl {$ttl} s: served again after {($t1-$t0):.2f} s')"
  kill "${pid[b]}" "$etcd_pid" 2>/dev/null || true
  wait "${pid[b]}" "$etcd_pid" 2>/dev/null || true
}

for i in $(seq "$ROUNDS"); do
  for mode in $MODES; do
    for ttl in 2 6; do round "$ttl" "$mode"; done
  done
done | tee "$work/out.txt"
python3 - "$work/out.txt" <<'PY'
import re, statistics, sys
by = {}
for line in open(sys.argv[1]):
    m = re.match(r"(\w+) ttl (\d+) s: served again after ([\d.]+) s", line)
    if m: by.setdefault((m[1], int(m[2])), []).append(float(m[3]))
for (mode, ttl), v in sorted(by.items()):
    print(f"{mode}, TTL {ttl} s: median {statistics.median(v):.2f} s, max {max(v):.2f} s over {len(v)} rounds (target <= TTL + 2 s = {ttl+2} s)")
PY
