#!/bin/bash
# Server requests by op for one workload into a fresh Sextant mount: a
# fresh server (journal, nosync: counts, not times) with /metrics, its
# mount, the workload, and the difference of sextant_requests_total
# before and after. The counts are exact (they repeat to the digit).
#   WORKLOAD=cp|git|postmark|rsync|tar scripts/workload-requests.sh [SEXTANT_BINARY] [SRC]
# git: a checkout of SRC (default /usr/include/linux/netfilter);
# postmark: PM_FILES files (200), PM_TX transactions (400), seed 42;
# rsync: rsync -a of SRC; tar: tar x of a tar of SRC; cp: cp -a of SRC.
# (scripts/workload-breakdown.sh times the whole set against bindfs.)
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
WORKLOAD=${WORKLOAD:-git}
mkdir "$W/mnt/co"
snap() { curl -s "127.0.0.1:$((PORT + 1))/metrics" | grep '^sextant_requests_total' | sort; }
case $WORKLOAD in
  git)
    git init -q --bare "$W/src.git"
    git --git-dir="$W/src.git" --work-tree="$SRC" add -A . >/dev/null 2>&1
    git --git-dir="$W/src.git" --work-tree="$SRC" -c user.name=b -c user.email=b@b commit -qm src >/dev/null
    snap >"$W/before"
    git --git-dir="$W/src.git" --work-tree="$W/mnt/co" checkout -q -f HEAD -- .
    snap >"$W/after"
    echo "files: $(find "$SRC" -type f | wc -l)" ;;
  postmark)
    snap >"$W/before"
    printf 'set location %s\nset number %s\nset transactions %s\nset seed 42\nrun\nquit\n' \
      "$W/mnt/co" "${PM_FILES:-200}" "${PM_TX:-400}" | postmark >"$W/postmark.txt"
    snap >"$W/after"
    echo "files created: $(awk '/^Files:/ {f = 1; next} f && / created/ {print $1; exit}' "$W/postmark.txt")" ;;
  rsync)
    snap >"$W/before"
    rsync -a "$SRC" "$W/mnt/co/"
    snap >"$W/after"
    echo "entries: $(find "$SRC" | wc -l)" ;;
  cp)
    snap >"$W/before"
    cp -a "$SRC" "$W/mnt/co/"
    snap >"$W/after"
    echo "entries: $(find "$SRC" | wc -l)" ;;
  tar)
    tar cf "$W/src.tar" -C "$(dirname "$SRC")" "$(basename "$SRC")"
    snap >"$W/before"
    tar xf "$W/src.tar" -C "$W/mnt/co"
    snap >"$W/after"
    echo "entries: $(find "$SRC" | wc -l)" ;;
  *) echo "WORKLOAD: cp, git, postmark, rsync or tar" >&2; exit 2 ;;
esac
join -a2 -e0 -o 2.1,1.2,2.2 <(sed 's/ /\t/' "$W/before" | tr '\t' ' ') <(sed 's/ /\t/' "$W/after" | tr '\t' ' ') |
  awk '{ d = $3 - $2; if (d) { sub(/sextant_requests_total/, "", $1); print $1, d } }'
