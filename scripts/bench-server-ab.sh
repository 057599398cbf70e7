#!/usr/bin/env bash
# A/B of two server builds on one machine: a fresh single `sextant serve`
# of each build in turn (journal fsync), the same client binary running
# `sextant bench -F` (create, stat, lookup, remove) against it; rounds
# alternate the builds, and the per-round ratios NEW/OLD are summarised
# by their medians (the machine is shared: ratios, not timings).
#
#   scripts/bench-server-ab.sh OLD_BIN NEW_BIN [ROUNDS]
#
# Environment: TASKS (64), ITEMS (500 per task), JOURNAL (fsync).
set -euo pipefail
OLD=$1 NEW=$2 ROUNDS=${3:-4}
TASKS=${TASKS:-64} ITEMS=${ITEMS:-500} JOURNAL=${JOURNAL:-fsync}
work=$(mktemp -d "${TMPDIR:-/tmp}/sextant-ab.XXXXXX")
pid=
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null; wait 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
for round in $(seq "$ROUNDS"); do
  for side in old new; do
    bin=$OLD; [ "$side" = new ] && bin=$NEW
    rm -rf "$work/data"
    SEXTANT_METRICS=off "$bin" serve --data "$work/data" --listen 127.0.0.1:0 --socket off \
      --journal-sync "$JOURNAL" >"$work/out" 2>"$work/log" &
    pid=$!
    until grep -q "listening on" "$work/out" 2>/dev/null; do sleep 0.05; done
    addr=$(sed -n 's/listening on //p' "$work/out")
    "$NEW" --server "$addr" --data "$work/data" bench -q --json -F --tasks "$TASKS" \
      --items "$ITEMS" --phases create,stat,lookup,remove \
      | python3 -c "import json,sys; d=json.load(sys.stdin); rs=d['median']; print('$round $side', ' '.join(f\"{r['phase']}={r['ops_per_sec']:.0f}\" for r in rs))"
    kill "$pid"; wait "$pid" 2>/dev/null || true; pid=
  done
done | tee "$work/rounds.txt"
python3 - "$work/rounds.txt" <<'PY'
import statistics, sys
rounds = {}
for line in open(sys.argv[1]):
    r, side, *kv = line.split()
    rounds.setdefault(r, {})[side] = dict(x.split('=') for x in kv)
phases = next(iter(rounds.values()))['old'].keys()
for p in phases:
    ratios = [float(v['new'][p]) / float(v['old'][p]) for v in rounds.values() if 'new' in v]
    olds = [float(v['old'][p]) for v in rounds.values()]
    news = [float(v['new'][p]) for v in rounds.values() if 'new' in v]
    print(f"{p}: old {statistics.median(olds):.0f}/s new {statistics.median(news):.0f}/s "
          f"new/old median {statistics.median(ratios):.3f} (rounds {' '.join(f'{x:.2f}' for x in ratios)})")
PY
