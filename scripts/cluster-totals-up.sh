#!/usr/bin/env bash
# cluster-totals-up.sh BIN DIR [SRC]: the setup of BENCHMARKS "Issue 21: totals
# across servers": one `sextant serve` and etcd + four `sextant serve` (s0..s3)
# under DIR, tables of DIRLIM (12) directories / INOLIM (400) inodes, SRC
# (/usr/share) imported as /u/c0 into both (into s0 alone), then s1..s3 join
# and every table is moved round-robin by `cluster move` (quicker than the
# balancer). Servers log search phases (SEXTANT_LOG sextant::search_timing).
# Writes DIR/env (S=(...) C=(...): the two CLI command lines). Leaves the
# processes running: kill them by DIR/*.pid.
set -euo pipefail
BIN=$1; D=$2; SRC=${3:-/usr/share}
mkdir -p $D
printf "table_dir_limit = ${DIRLIM:-12}\ntable_inode_limit = ${INOLIM:-400}\n" > $D/limits.toml
free_port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
export SEXTANT_LOG=info,sextant::search_timing=debug
sp=$(free_port)
SEXTANT_METRICS=off "$BIN" serve --data $D/single --listen 127.0.0.1:$sp --socket off --config $D/limits.toml >$D/single.out 2>$D/single.log &
echo $! > $D/single.pid
c=$(free_port); p=$(free_port)
etcd --name t --data-dir $D/etcd --listen-client-urls http://127.0.0.1:$c --advertise-client-urls http://127.0.0.1:$c \
  --listen-peer-urls http://127.0.0.1:$p --initial-advertise-peer-urls http://127.0.0.1:$p --initial-cluster t=http://127.0.0.1:$p \
  --max-txn-ops 8192 >$D/etcd.log 2>&1 &
echo $! > $D/etcd.pid
until (echo > /dev/tcp/127.0.0.1/$c) 2>/dev/null; do sleep 0.05; done
ETCD=http://127.0.0.1:$c
start() {
  local n=$1 port; port=$(free_port)
  SEXTANT_METRICS=off SEXTANT_LEASE_TTL=2s "$BIN" serve --data $D/$n --listen 127.0.0.1:$port --etcd $ETCD --name $n \
    --cluster-store $D/store --socket off --config $D/limits.toml >$D/$n.out 2>$D/$n.log &
  echo $! > $D/$n.pid; echo 127.0.0.1:$port > $D/$n.addr
  until grep -q "listening on" $D/$n.out 2>/dev/null; do sleep 0.05; done
  until "$BIN" --server 127.0.0.1:$port --data $D/s0 ls / >/dev/null 2>&1; do sleep 0.05; done
}
start s0
S=("$BIN" --server 127.0.0.1:$sp --data $D/single)
C=("$BIN" --server "$(cat $D/s0.addr)" --data $D/s0)
until "${S[@]}" ls / >/dev/null 2>&1; do sleep 0.05; done
"${S[@]}" mkdir /u; "${C[@]}" mkdir /u
"${S[@]}" import $SRC /u/c0 >/dev/null; "${C[@]}" import $SRC /u/c0 >/dev/null
for n in s1 s2 s3; do start $n; done
{ printf 'S=(%q %q %q %q %q)\n' "${S[@]}"; printf 'C=(%q %q %q %q %q)\n' "${C[@]}"; printf 'export SEXTANT_ETCD=%q\nD=%q\n' "$ETCD" "$D"; } > $D/env
export SEXTANT_ETCD=$ETCD
sleep 3
ids=$("${C[@]}" --json cluster status | python3 -c 'import json,sys;print(" ".join(str(t["table"]) for t in json.load(sys.stdin)["tables"]))')
i=0
for t in $ids; do
  "${C[@]}" cluster move "$t" "s$((i % 4))" >/dev/null 2>&1 || true; i=$((i+1))
done
"${C[@]}" --json cluster status | python3 -c 'import json,sys;j=json.load(sys.stdin);print(" ".join("%s:%s tables/%s inodes"%(s["name"],s["tables"],s["inodes"]) for s in j["servers"]))'
echo up
