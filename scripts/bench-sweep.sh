#!/usr/bin/env bash
# How fast a watching mount sweeps its data store for leftover objects
# (docs/BENCHMARKS.md, "The mount's sweep of leftover objects"): 20,000
# object files of SOIDs the server does not know, a journaling server, a
# mount of that store; the time until the store is empty (mount start
# included). Environment: SEXTANT (a built binary; default
# target/release/sextant), WORK (/tmp/sw: scratch, wiped), PORT (7640).
set -euo pipefail
cd "$(dirname "$0")/.."
S=${SEXTANT:-target/release/sextant}
W=${WORK:-/tmp/sw}; PORT=${PORT:-7640}
rm -rf "$W"; mkdir -p "$W"/mnt "$W"/store
$S serve --data $W/data --listen 127.0.0.1:$PORT > $W/serve.log 2>&1 &
SP=$!
sleep 1
python3 - "$W/store" <<'PY'
import os, random
import sys
d=sys.argv[1]
for i in range(20000):
    open(os.path.join(d, "%032x" % random.getrandbits(120) ), "w").close()
PY
ls $W/store | wc -l
t0=$(date +%s.%N)
$S --server 127.0.0.1:$PORT --data $W/data mount --data-dir $W/store $W/mnt
while [ "$(ls $W/store | wc -l)" -gt 0 ]; do sleep 0.2; done
t1=$(date +%s.%N)
echo "swept 20000 leftovers in $(echo "$t1 - $t0" | bc) s"
fusermount3 -u $W/mnt; kill $SP
