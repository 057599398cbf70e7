#!/usr/bin/env bash
# A/B timing of search totals through the CLI (docs/BENCHMARKS.md,
# "Ungrouped totals"): a journaling server (BIN_B's: the newer answers
# both clients' requests as its own build would) on a fresh data
# directory; SRC imported twice, as /t/a and /t/b; then, ROUNDS times, the
# binaries alternating, each command run REPEAT times by each binary, wall
# time per run (process start and connection included). Prints the median
# per binary and command (ms) and checks both binaries print the same.
#
#   scripts/bench-totals-ab.sh SRC BIN_A BIN_B
#
# Environment: ROUNDS (4), REPEAT (5), WORK (a temporary directory).
set -euo pipefail
[ $# -eq 3 ] || { sed -n 2,13p "$0" | grep "^#"; exit 2; }
src=$1; a=$2; b=$3
rounds=${ROUNDS:-4}; repeat=${REPEAT:-5}
work=${WORK:-$(mktemp -d)}
mkdir -p "$work"
sock=$work/sock
"$b" serve --data "$work/data" --listen 127.0.0.1:0 --socket "$sock" >"$work/serve.log" 2>&1 &
server=$!
trap 'kill $server 2>/dev/null; wait $server 2>/dev/null || true' EXIT
for _ in $(seq 100); do [ -S "$sock" ] && break; sleep 0.1; done
run() { "$1" --server "unix:$sock" --data "$work/data" "${@:2}"; }
run "$b" mkdir -p /t >/dev/null
run "$b" import "$src" /t/a | tail -n 4
run "$b" import "$src" /t/b | tail -n 4
commands=("du /t" "stats /t" "stats --by user /t" "du /")
for c in "${commands[@]}"; do
  # shellcheck disable=SC2086
  if [ "$(run "$a" $c)" != "$(run "$b" $c)" ]; then
    echo "the binaries disagree on: $c" >&2; exit 1
  fi
  # shellcheck disable=SC2086
  echo "$c: $(run "$a" $c | tail -n 1)"
done
out=$work/times
: >"$out"
for r in $(seq "$rounds"); do
  order=("$a" "$b"); [ $((r % 2)) -eq 0 ] && order=("$b" "$a")
  for bin in "${order[@]}"; do
    for c in "${commands[@]}"; do
      for _ in $(seq "$repeat"); do
        t0=$EPOCHREALTIME
        # shellcheck disable=SC2086
        run "$bin" $c >/dev/null
        t1=$EPOCHREALTIME
        echo "$bin|$c|$(echo "($t1 - $t0) * 1000" | bc -l)" >>"$out"
      done
    done
  done
done
echo "== median wall time per run (ms), $rounds rounds x $repeat runs"
sort -t'|' -k1,1 -k2,2 -k3,3g "$out" | awk -F'|' '
  { key = $1 " | " $2; v[key, ++n[key]] = $3 }
  END { for (k in n) { m = n[k]; printf "%-70s %.1f (n=%d)\n", k, v[k, int((m + 1) / 2)], m } }' | sort
