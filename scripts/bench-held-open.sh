#!/usr/bin/env bash
# Attribute changes of files held open for writing (issue 23, crate
# sextant-fuse `writers`): one process opens N files for writing through
# the mount, writes a byte to each, then fchmods and futimens each while
# all stay open (held: answered by the mount), then closes them all.
# Times the fchmod + futimens phase and the whole, for two builds of
# `sextant`, alternating per round on fresh servers and mounts (same run).
#
#   scripts/bench-held-open.sh OLD_BIN NEW_BIN [N] [ROUNDS]
#
# Prints one line per round and build, then the medians and new/old.
set -euo pipefail
old=$1 new=$2 n=${3:-5000} rounds=${4:-5}
work=$(mktemp -d /tmp/bench-held-open.XXXXXX)
ulimit -n $((n + 1000))
cleanup() {
    for m in "$work"/*/mnt; do
        [ -d "$m" ] && "$new" umount "$m" >/dev/null 2>&1 || true
    done
    rm -rf "$work"
}
trap cleanup EXIT

workload='
import os, sys, time
n = int(sys.argv[1]); d = sys.argv[2]
fds = [os.open(os.path.join(d, "f%d" % i), os.O_WRONLY | os.O_CREAT, 0o644) for i in range(n)]
for fd in fds:
    os.write(fd, b"x")
t0 = time.perf_counter()
for fd in fds:
    os.fchmod(fd, 0o600)
    os.utime(fd, (1000000000, 1000000000))
t1 = time.perf_counter()
for fd in fds:
    os.close(fd)
t2 = time.perf_counter()
print("%.3f %.3f" % (t1 - t0, t2 - t0))
'

run() { # BIN NAME -> "changes_s whole_s"
    local bin=$1 w=$work/$2
    mkdir -p "$w/mnt"
    "$bin" serve --listen 127.0.0.1:0 --journal-sync nosync --data "$w/data" \
        >"$w/serve.out" 2>"$w/serve.err" &
    local server=$!
    local addr=""
    for _ in $(seq 100); do
        addr=$(sed -n 's/^listening on //p' "$w/serve.out" 2>/dev/null | head -1)
        [ -n "$addr" ] && break
        sleep 0.1
    done
    "$bin" --server "$addr" --data "$w/data" mount -o allow_other \
        --log "$w/mount.log" "$w/mnt" >/dev/null 2>&1
    # Attribute changes are held only once the watcher is up.
    "$bin" --server "$addr" --data "$w/data" mkdir /warm >/dev/null
    for _ in $(seq 100); do [ -d "$w/mnt/warm" ] && break; sleep 0.05; done
    mkdir "$w/mnt/d"
    python3 -c "$workload" "$n" "$w/mnt/d"
    "$bin" umount "$w/mnt" >/dev/null 2>&1
    kill "$server" 2>/dev/null || true
    wait "$server" 2>/dev/null || true
}

declare -a old_c old_w new_c new_w
for r in $(seq "$rounds"); do
    read -r c w < <(run "$old" "old$r"); old_c+=("$c"); old_w+=("$w")
    echo "round $r old: changes ${c}s whole ${w}s"
    read -r c w < <(run "$new" "new$r"); new_c+=("$c"); new_w+=("$w")
    echo "round $r new: changes ${c}s whole ${w}s"
done
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
oc=$(median "${old_c[@]}") ow=$(median "${old_w[@]}")
nc=$(median "${new_c[@]}") nw=$(median "${new_w[@]}")
echo "N=$n rounds=$rounds medians: old changes ${oc}s whole ${ow}s; new changes ${nc}s whole ${nw}s"
awk -v a="$nc" -v b="$oc" -v c="$nw" -v d="$ow" \
    'BEGIN {printf "new/old: changes %.2fx, whole %.2fx\n", a / b, c / d}'
