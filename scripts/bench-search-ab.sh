#!/usr/bin/env bash
# A/B comparison of search builds on one store (docs/BENCHMARKS.md, §8):
# runs `sextant-engine-bench search` with each binary in turn, ROUNDS
# times, the order of the binaries alternating between rounds (on this
# shared machine the same binary reads up to 1.5× apart from one minute
# to the next, so only medians over interleaved rounds are compared).
# Prints each run's p50 per query kind, then the median of those p50s.
#
#   scripts/bench-search-ab.sh STORE BIN_A BIN_B [BIN_C ...]
#
# Environment: ROUNDS (4), ONLY (glob,substring), REPEAT (3), SAMPLES (40),
# SCANS (0; brute-force scans per kind: each run then also prints
# "KIND/scan-ratio", the scan's p50 over the index's),
# EXTRA (more arguments for every run, e.g. "--threads 1").
set -euo pipefail
[ $# -ge 2 ] || { sed -n 2,14p "$0" | grep "^#"; exit 2; }
store=$1; shift
bins=("$@")
rounds=${ROUNDS:-4}
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for r in $(seq 1 "$rounds"); do
  order=("${bins[@]}")
  if [ $((r % 2)) -eq 0 ]; then
    order=(); for ((i = ${#bins[@]} - 1; i >= 0; i--)); do order+=("${bins[$i]}"); done
  fi
  for b in "${order[@]}"; do
    # shellcheck disable=SC2086
    "$b" search --dir "$store" --samples "${SAMPLES:-40}" --scans "${SCANS:-0}" \
      --repeat "${REPEAT:-3}" --only "${ONLY:-glob,substring}" \
      --summaries-off-too false ${EXTRA:-} 2>&1 |
      awk -v bin="$b" -v round="$r" '
        /: latency \(index\)/ { sub(":", "", $1); printf "%s %s %s %s\n", round, bin, $1, $5 }
        /: scan p50 \/ index p50/ && $8 != "NaN" {
          sub(":", "", $1); printf "%s %s %s/scan-ratio %s\n", round, bin, $1, $8 }' |
      tee -a "$out"
  done
done
echo "== median of the rounds' p50 (ms)"
sort -k2,2 -k3,3 -k4,4g "$out" | awk '
  { key = $2 " " $3; v[key, ++n[key]] = $4 }
  END { for (k in n) { m = n[k]; i = int((m + 1) / 2);
          printf "%-60s %s (rounds: %d)\n", k, v[k, i], m } }' | sort
