#!/usr/bin/env bash
# Counts (not times): for N unlinks of empty files through a default mount
# (VIA=unix: the frame door), per thread of the server and the mount,
# voluntary/involuntary context switches per remove, and who woke whom
# (perf sched:sched_waking, all CPUs, filtered to the two processes' threads).
#   BINARY=target/release/sextant OUT=/tmp/remove-wakes N=4000 scripts/remove-wakes.sh
# (perf record -g and perf script -F ...,ip,sym for the wake-ups' kernel stacks.)
# Needs root (perf, FUSE).
set -euo pipefail
BINARY=${BINARY:?}
N=${N:-4000}
PORT=${PORT:-18931}
OUT=${OUT:-/tmp/remove-wakes}
w=$OUT
rm -rf "$w"
# shellcheck source=scripts/lib/remove-fixture.sh
. "$(dirname "$0")/lib/remove-fixture.sh"
start_mount_with_files "$w" "$w/s.sock" "unix:$w/s.sock" background
snap() { for p in $sp $mpid; do for t in /proc/$p/task/*; do
  printf '%s %s %s %s %s\n' "$p" "${t##*/}" "$(tr ' ' _ <"$t/comm")" \
    "$(awk '/^voluntary_ctxt/{print $2}' "$t/status")" "$(awk '/^nonvoluntary_ctxt/{print $2}' "$t/status")"
done; done; }
snap >"$w/s0"
curl -s 127.0.0.1:$((PORT+1))/metrics >"$w/m0"
perf record -e sched:sched_waking -a -o "$w/wake.data" >/dev/null 2>&1 &
pp=$!
sleep 0.5
python3 -c '
import os, sys
d, n = sys.argv[1], int(sys.argv[2])
print("caller pid", os.getpid(), flush=True)
for i in range(n):
    os.unlink(f"{d}/f{i}")
' "$w/mnt/d" "$N" >"$w/caller"
sleep 0.3
kill -INT "$pp"; wait "$pp" || true
snap >"$w/s1"
curl -s 127.0.0.1:$((PORT+1))/metrics >"$w/m1"
cat /proc/$sp/task/*/comm | sort | uniq -c >"$w/server-threads"
fusermount3 -u "$w/mnt" 2>/dev/null || fusermount3 -u -z "$w/mnt" || true
kill "$sp"; wait "$sp" || true
perf script -i "$w/wake.data" -F tid,comm,event,trace >"$w/wake.txt" 2>/dev/null || true
python3 - "$w" "$N" "$sp" "$mpid" <<'PY'
import collections, re, sys
w, n, sp, mp = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
def snap(f):
    d = {}
    for l in open(f):
        p, t, c, v, nv = l.split()
        d[t] = (p, c, int(v), int(nv))
    return d
a, b = snap(w + "/s0"), snap(w + "/s1")
who = {t: ("server" if p == sp else "mount") + ":" + c for t, (p, c, _, _) in b.items()}
caller = open(w + "/caller").read().split()[-1]
print("context switches per remove (voluntary / involuntary), by thread:")
tot = collections.Counter()
for t, (p, c, v, nv) in sorted(b.items(), key=lambda x: (x[1][0], x[1][1])):
    v0, nv0 = a.get(t, (p, c, 0, 0))[2:]
    dv, dn = (v - v0) / n, (nv - nv0) / n
    side = "server" if p == sp else "mount"
    tot[side + " vol"] += dv; tot[side + " invol"] += dn
    if dv + dn >= 0.005:
        print(f"  {side:6} {c:24} {t:>8}  {dv:.3f} / {dn:.3f}")
for k, v in sorted(tot.items()):
    print(f"  total {k}: {v:.3f}")
pairs = collections.Counter()
for l in open(w + "/wake.txt"):
    m = re.match(r'\s*(\S.*?)\s+(\d+)\s+sched:sched_waking:\s+comm=(.*?) pid=(\d+) prio', l)
    if not m:
        continue
    wcomm, wtid, tcomm, ttid = m.group(1), m.group(2), m.group(3), m.group(4)
    if ttid not in who and ttid != caller:
        continue
    waker = who.get(wtid, "caller" if wtid == caller else f"other:{wcomm}")
    wakee = who.get(ttid, "caller")
    pairs[(wakee, waker)] += 1
print("wake-ups per remove (wakee <- waker):")
for (wakee, waker), c in sorted(pairs.items(), key=lambda x: -x[1]):
    if c / n >= 0.005:
        print(f"  {wakee:32} <- {waker:32} {c / n:.3f}")
PY
