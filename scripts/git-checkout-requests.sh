#!/bin/bash
# Server requests by op for a `git checkout` of SRC (default
# /usr/include/linux/netfilter) into a fresh Sextant mount: a fresh server
# (journal, nosync: counts, not times) with /metrics, its mount, the
# checkout, and the difference of sextant_requests_total before and after.
# The counts are exact (they repeat to the digit).
#   scripts/git-checkout-requests.sh [SEXTANT_BINARY] [SRC]
set -euo pipefail
B=${1:-target/debug/sextant}
SRC=${2:-/usr/include/linux/netfilter}
W=$(mktemp -d /tmp/git-requests.XXXXXX)
PORT=${PORT:-7599}
mkdir -p "$W/data" "$W/mnt" "$W/mnt-data"
SEXTANT_METRICS=127.0.0.1:$((PORT + 1)) "$B" serve --data "$W/data" --listen 127.0.0.1:$PORT \
  --journal-sync nosync >"$W/server.log" 2>&1 &
SERVER=$!
cleanup() { fusermount3 -u "$W/mnt" 2>/dev/null || true; kill $SERVER 2>/dev/null || true; wait $SERVER 2>/dev/null || true; rm -rf "$W"; }
trap cleanup EXIT
for _ in $(seq 100); do grep -qs "listening on" "$W/server.log" && break; sleep 0.1; done
"$B" --server 127.0.0.1:$PORT --data "$W/data" mount --log "$W/mount.log" "$W/mnt"
git init -q --bare "$W/src.git"
git --git-dir="$W/src.git" --work-tree="$SRC" add -A . >/dev/null 2>&1
git --git-dir="$W/src.git" --work-tree="$SRC" -c user.name=b -c user.email=b@b commit -qm src >/dev/null
mkdir "$W/mnt/co"
snap() { curl -s "127.0.0.1:$((PORT + 1))/metrics" | grep '^sextant_requests_total' | sort; }
snap >"$W/before"
git --git-dir="$W/src.git" --work-tree="$W/mnt/co" checkout -q -f HEAD -- .
snap >"$W/after"
echo "files: $(find "$SRC" -type f | wc -l)"
join -a2 -e0 -o 2.1,1.2,2.2 <(sed 's/ /\t/' "$W/before" | tr '\t' ' ') <(sed 's/ /\t/' "$W/after" | tr '\t' ' ') |
  awk '{ d = $3 - $2; if (d) { sub(/sextant_requests_total/, "", $1); print $1, d } }'
