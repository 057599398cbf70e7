#!/usr/bin/env bash
# totals-after-join.sh [ROUNDS]: issue 21 item 4, "totals across servers
# stay exact". Tries to reproduce a wrong `sextant stats /` seen once after
# a third server joined a 2-server cluster and the balancer moved tables
# onto it.
#
# Setup (under DIR, default a new temporary directory; kept with KEEP=1):
# etcd and servers s0, s1 (the debug binary SEXTANT_BIN, default
# target/debug/sextant), small tables (DIRLIM 6 directories / INOLIM 150
# inodes) so that a few thousand files make dozens of tables. A local tree
# of NDIRS (60) directories x NFILES (50) files of known sizes (file k of
# directory d: (d*131 + k*17) % 5000 bytes), owned by uid 1001 or 1002 (and
# some directories by 1001), is imported as /t into s0, s1 then joins and
# the balancer spreads the tables. The truth is computed from the local
# tree (count, size, per uid; `/` and `/t` are root's directories).
#
# Then, ROUNDS (default 3) times:
#   join   s2 joins: the balancer moves tables onto it while QUERIES run in
#          a loop (for JOIN_FOR, 25 s), then after the moves settle;
#   moves  every table in turn `cluster move`d to a random server (forced
#          moves, no waiting) while the queries run;
#   leave  odd rounds: s2 is drained (`cluster drain s2`) and stopped while
#          the queries run; even rounds: s2 is killed (-9) holding tables,
#          which fail over after its lease (2 s); it joins again next round.
#          LEAVE=drain or LEAVE=crash: always that way.
# MOVES=0 leaves the forced moves out.
# QUERIES: `stats /`, `--json stats /`, `--json stats --by user /`,
# `--json stats --by user / -type f`, each asked of s0, s1 or s2 in turn.
# Every answer is compared with the truth: a wrong one is printed as
# "WRONG <phase> <server> <query>: <what differed>" and counted; an
# answer that is an error (a server stopping, a range chased too long)
# is printed as "ERROR ..." and counted apart. Exit status 1 if any answer
# was wrong.
set -uo pipefail
ROUNDS=${1:-3}
BIN=${SEXTANT_BIN:-$(dirname "$0")/../target/debug/sextant}
BIN=$(realpath "$BIN")
D=${DIR:-$(mktemp -d /tmp/totals-after-join.XXXXXX)}
NDIRS=${NDIRS:-60}; NFILES=${NFILES:-50}; JOIN_FOR=${JOIN_FOR:-25}
mkdir -p "$D"
echo "dir $D"
printf "table_dir_limit = ${DIRLIM:-6}\ntable_inode_limit = ${INOLIM:-150}\n" > "$D/limits.toml"
free_port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
cleanup() {
  for p in "$D"/*.pid; do [ -f "$p" ] && kill "$(cat "$p")" 2>/dev/null; done
  wait 2>/dev/null
  [ "${KEEP:-0}" = 1 ] || rm -rf "$D"
}
trap cleanup EXIT

# The local tree and its truth.
python3 - "$D/src" "$NDIRS" "$NFILES" <<'EOF'
import os, sys
root, nd, nf = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
os.makedirs(root)
for d in range(nd):
    dp = os.path.join(root, "d%03d" % d)
    os.mkdir(dp)
    if d % 3 == 0:
        os.chown(dp, 1001, 1001)
    for k in range(nf):
        fp = os.path.join(dp, "f%03d" % k)
        with open(fp, "wb") as f:
            f.truncate((d * 131 + k * 17) % 5000)
        os.chown(fp, 1001 + (d + k) % 2, 1001)
EOF
python3 - "$D/src" > "$D/truth.json" <<'EOF'
import os, sys, json
root = sys.argv[1]
# `/` and `/t` (the import's target: the tree's root, owned by root).
users = {0: [2, 0]}
files = {}
for dp, dns, fns in os.walk(root):
    for n in dns:
        st = os.lstat(os.path.join(dp, n))
        users.setdefault(st.st_uid, [0, 0])[0] += 1
    for n in fns:
        st = os.lstat(os.path.join(dp, n))
        for m in (users, files):
            g = m.setdefault(st.st_uid, [0, 0]); g[0] += 1; g[1] += st.st_size
tot = lambda m: [sum(v[0] for v in m.values()), sum(v[1] for v in m.values())]
json.dump({"all": tot(users), "users": {str(k): v for k, v in users.items()},
           "files": tot(files), "file_users": {str(k): v for k, v in files.items()}}, sys.stdout)
EOF
echo "truth $(cat "$D/truth.json")"

c=$(free_port); p=$(free_port)
etcd --name t --data-dir "$D/etcd" --listen-client-urls http://127.0.0.1:$c --advertise-client-urls http://127.0.0.1:$c \
  --listen-peer-urls http://127.0.0.1:$p --initial-advertise-peer-urls http://127.0.0.1:$p --initial-cluster t=http://127.0.0.1:$p \
  --max-txn-ops 8192 >"$D/etcd.log" 2>&1 &
echo $! > "$D/etcd.pid"
until (echo > /dev/tcp/127.0.0.1/$c) 2>/dev/null; do sleep 0.05; done
export SEXTANT_ETCD=http://127.0.0.1:$c
start() {
  local n=$1 port; port=$(free_port)
  SEXTANT_METRICS=off SEXTANT_LEASE_TTL=2s "$BIN" serve --data "$D/$n" --listen 127.0.0.1:$port --etcd "$SEXTANT_ETCD" --name $n \
    --cluster-store "$D/store" --socket off --config "$D/limits.toml" >>"$D/$n.out" 2>>"$D/$n.log" &
  echo $! > "$D/$n.pid"; echo 127.0.0.1:$port > "$D/$n.addr"
  until "$BIN" --server 127.0.0.1:$port --data "$D/s0" ls / >/dev/null 2>&1; do sleep 0.05; done
}
stop() { kill "$(cat "$D/$1.pid")"; wait "$(cat "$D/$1.pid")" 2>/dev/null; rm -f "$D/$1.pid"; }
cli() { local s=$1; shift; "$BIN" --server "$(cat "$D/$s.addr")" --data "$D/s0" "$@"; }
status() { cli s0 --json cluster status 2>/dev/null; }
moving() { status | python3 -c 'import json,sys;j=json.load(sys.stdin);print(sum(1 for t in j["tables"] if t.get("moving_to")))' 2>/dev/null || echo 1; }
layout() { status | python3 -c 'import json,sys;j=json.load(sys.stdin);print(" ".join("%s:%s"%(s["name"],s["tables"]) for s in j["servers"]))'; }
settle() {  # until no move is pending twice in a row (at most 60 s)
  local quiet=0 i
  for i in $(seq 600); do
    if [ "$(moving)" = 0 ]; then quiet=$((quiet+1)); else quiet=0; fi
    [ $quiet -ge 10 ] && return 0
    sleep 0.1
  done
  echo "moves did not settle"
}

start s0
cli s0 import "$D/src" /t >/dev/null || { echo "import failed"; exit 2; }
start s1
settle
echo "2 servers: $(layout)"

WRONG=0; ERRORS=0; ASKED=0
# check PHASE SERVER: one round of the queries, asked of SERVER.
check() {
  local phase=$1 s=$2 q out why
  for q in plain json user user-files; do
    case $q in
      plain) out=$(cli $s stats / 2>&1) ;;
      json) out=$(cli $s --json stats / 2>&1) ;;
      user) out=$(cli $s --json stats --by user / 2>&1) ;;
      user-files) out=$(cli $s --json stats --by user / -type f 2>&1) ;;
    esac
    local rc=$?
    ASKED=$((ASKED+1))
    if [ $rc -ne 0 ]; then
      ERRORS=$((ERRORS+1)); echo "ERROR $phase $s $q: $(echo "$out" | tail -1)"; continue
    fi
    why=$(python3 - "$D/truth.json" "$q" "$out" <<'EOF'
import json, sys
t = json.load(open(sys.argv[1])); q = sys.argv[2]; out = sys.argv[3]
def diff(name, want, got):
    return [] if want == got else ["%s %s want %s" % (name, got, want)]
d = []
if q == "plain":
    f = out.split()
    got = [int(f[0]), int(f[1])] if len(f) >= 2 and f[0].isdigit() else out
    d += diff("total", t["all"], got)
else:
    j = json.loads(out)
    tot = [j["total"]["count"], j["total"]["size"]]
    want_tot, want_groups = {"json": (t["all"], None), "user": (t["all"], t["users"]),
                             "user-files": (t["files"], t["file_users"])}[q]
    d += diff("total", want_tot, tot)
    if want_groups is not None:
        got = {str(g["uid"]): [g["count"], g["size"]] for g in j["groups"]}
        for u in sorted(set(got) | set(want_groups)):
            d += diff("uid " + u, want_groups.get(u), got.get(u))
print("; ".join(d))
EOF
)
    if [ -n "$why" ]; then
      WRONG=$((WRONG+1)); echo "WRONG $phase $s $q: $why"
    fi
  done
}
# loop PHASE SECONDS SERVERS...: the queries in a loop, round-robin.
loop() {
  local phase=$1 secs=$2; shift 2
  local end=$((SECONDS + secs)) i=0 servers=("$@")
  while [ $SECONDS -lt $end ]; do
    check "$phase" "${servers[$((i % ${#servers[@]}))]}"; i=$((i+1))
  done
}

check baseline s0; check baseline s1
[ $WRONG -eq 0 ] || echo "wrong before any join"
for r in $(seq "$ROUNDS"); do
  # join: s2 comes (again) and the balancer moves tables onto it.
  start s2
  loop "join$r" "$JOIN_FOR" s0 s1 s2
  settle
  echo "round $r joined: $(layout)"
  check "settled$r" s0; check "settled$r" s1; check "settled$r" s2
  # moves: every table to a random server, forced, while the queries run.
  if [ "${MOVES:-1}" = 1 ]; then
  ids=$(status | python3 -c 'import json,sys;print(" ".join(str(t["table"]) for t in json.load(sys.stdin)["tables"]))')
  ( for t in $ids; do cli s0 cluster move "$t" "s$((RANDOM % 3))" >/dev/null 2>&1; done ) &
  mover=$!
  while kill -0 $mover 2>/dev/null; do check "moves$r" "s$((RANDOM % 3))"; done
  wait $mover
  settle
  echo "round $r moved: $(layout)"
  check "moved$r" s0; check "moved$r" s1; check "moved$r" s2
  fi
  case ${LEAVE:-alternate} in drain) odd=1 ;; crash) odd=0 ;; *) odd=$((r % 2)) ;; esac
  if [ $odd = 1 ]; then
    # leave: s2 drained and stopped while the queries run.
    cli s0 cluster drain s2 >/dev/null 2>&1 &
    drainer=$!
    loop "drain$r" 8 s0 s1
    wait $drainer
    settle
    stop s2
    cli s0 cluster drain s2 --undo >/dev/null 2>&1
    loop "left$r" 4 s0 s1
  else
    # crash: s2 killed (-9) holding tables; they fail over after its
    # lease (2 s) while the queries run.
    kill -9 "$(cat "$D/s2.pid")"; wait "$(cat "$D/s2.pid")" 2>/dev/null; rm -f "$D/s2.pid"
    loop "crash$r" 12 s0 s1
    settle
  fi
  echo "round $r left: $(layout)"
done
echo "asked $ASKED, wrong $WRONG, errors $ERRORS"
[ $WRONG -eq 0 ]
