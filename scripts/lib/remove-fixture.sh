# shellcheck shell=bash
# Sourced by scripts/remove-breakdown.sh and scripts/remove-wakes.sh: the
# start both measure from.
#
# start_mount_with_files DIR SOCKET MOUNT_ADDR SYNC: a fresh server of
# $BINARY (data DIR/data, TCP 127.0.0.1:$PORT, /metrics on $PORT+1, Unix
# socket SOCKET or `off`, --journal-sync SYNC), a default mount of it
# through MOUNT_ADDR on DIR/mnt (4 threads, objects in DIR/data/objects),
# and $N empty files in DIR/mnt/d. Sets the caller's `sp` (the server's
# pid) and `mpid` (the mount's).
start_mount_with_files() {
  local w=$1 sock=$2 maddr=$3 sync=$4
  mkdir -p "$w/mnt" "$w/data/objects"
  SEXTANT_METRICS=127.0.0.1:$((PORT + 1)) "$BINARY" serve --data "$w/data" --listen 127.0.0.1:$PORT \
    --socket "$sock" --journal-sync "$sync" >"$w/serve.log" 2>&1 &
  sp=$!
  for _ in $(seq 100); do grep -qs "listening on" "$w/serve.log" && break; sleep 0.1; done
  "$BINARY" --server "$maddr" --data "$w/data" mount --threads 4 --log "$w/mount.log" \
    --data-dir "$w/data/objects" "$w/mnt" 2>/dev/null
  sleep 0.5
  mpid=$(pgrep -f -- "mount --threads 4 --log $w/mount.log" | head -1)
  mkdir "$w/mnt/d"
  python3 -c '
import os, sys
for i in range(int(sys.argv[2])):
    os.close(os.open(f"{sys.argv[1]}/f{i}", os.O_CREAT | os.O_WRONLY, 0o644))
' "$w/mnt/d" "$N"
}
