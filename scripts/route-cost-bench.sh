#!/usr/bin/env bash
# The fixed cost of a CLI command on a cluster with many tables against a
# single server holding the same tree (issue 21: `stat /u` cost 15.9 ms on
# 1,059 tables over 4 servers against 5.0 ms on one server).
#
# Usage: scripts/route-cost-bench.sh BIN [BIN2 ...]
#   Starts one `sextant serve` and a cluster of etcd plus SERVERS (4)
#   `sextant serve`, both with table_dir_limit = DIRLIMIT (2), and makes the
#   same tree in both: /u/c0 … /u/c{SERVERS-1}, each placed on its own
#   server before it grows, each holding DIRS/SERVERS directories with one
#   file each and one `needle` file in the last directory (DIRS 1000:
#   about 1,000 tables). Then times, alternating the binaries run by run,
#   RUNS (20) runs of each command on each target:
#     stat /u
#     find /u -name needle          (a selective predicate)
#     ls /u/c2/d{last}              (a directory another server holds)
#     stats /u, du /u               (totals: spread searches, like find)
#   SERVER_BIN: the binary the servers run (default: the first BIN).
#   Prints medians (ms) per binary and target, and the cluster/single
#   ratios. OUT (default /tmp/route-cost-bench.json) gets the raw times.
#   HOLD=FILE: after the runs, keep everything up until FILE is removed
#   (FILE gets the command lines, shell syntax).
#   Needs etcd on PATH.
set -euo pipefail
[ $# -ge 1 ] || { sed -n '2,22p' "$0"; exit 2; }
BINS=("$@")
BIN=${SERVER_BIN:-${BINS[0]}}
SERVERS=${SERVERS:-4} DIRS=${DIRS:-1000} RUNS=${RUNS:-20}
command -v etcd >/dev/null || { echo "needs etcd" >&2; exit 1; }
work=$(mktemp -d "${TMPDIR:-/tmp}/route-cost-bench.XXXXXX")
pids=() etcd_pid=
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  sleep 1
  [ -n "$etcd_pid" ] && kill "$etcd_pid" 2>/dev/null || true
  sleep 0.5
  for p in "${pids[@]}" $etcd_pid; do kill -9 "$p" 2>/dev/null || true; done
  if [ "${KEEP:-0}" = 1 ]; then echo "kept: $work" >&2; else rm -rf "$work"; fi
}
trap cleanup EXIT
free_port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
log() { echo "[$(date -u +%H:%M:%S)] $*" >&2; }

printf 'table_dir_limit = %s\ntable_inode_limit = 10000000\n' "${DIRLIMIT:-2}" >"$work/limits.toml"

# serve NAME [flags]: starts a server with data $work/NAME; writes NAME.addr.
serve() {
  local name=$1; shift
  SEXTANT_METRICS=off "$BIN" serve --data "$work/$name" --listen 127.0.0.1:0 --socket off \
    --config "$work/limits.toml" "$@" >"$work/$name.out" 2>"$work/$name.log" &
  local pid=$!; pids+=("$pid")
  until grep -q "listening on" "$work/$name.out" 2>/dev/null; do
    kill -0 "$pid" 2>/dev/null || { echo "server $name died; see $work/$name.log" >&2; cat "$work/$name.log" >&2; exit 1; }
    sleep 0.05
  done
  sed -n 's/listening on //p' "$work/$name.out" >"$work/$name.addr"
}

serve single
c=$(free_port); p=$(free_port)
etcd --name t --data-dir "$work/etcd" --listen-client-urls "http://127.0.0.1:$c" \
  --advertise-client-urls "http://127.0.0.1:$c" --listen-peer-urls "http://127.0.0.1:$p" \
  --initial-advertise-peer-urls "http://127.0.0.1:$p" --initial-cluster "t=http://127.0.0.1:$p" \
  >"$work/etcd.log" 2>&1 &
etcd_pid=$!
until (echo > "/dev/tcp/127.0.0.1/$c") 2>/dev/null; do sleep 0.05; done
export SEXTANT_ETCD=http://127.0.0.1:$c
serve s0 --etcd "$SEXTANT_ETCD" --name s0 --cluster-store "$work/store"
for i in $(seq 1 $((SERVERS-1))); do
  serve "s$i" --etcd "$SEXTANT_ETCD" --name "s$i" --cluster-store "$work/store"
done
S=("$BIN" --server "$(cat "$work/single.addr")" --data "$work/single")
C=("$BIN" --server "$(cat "$work/s0.addr")" --data "$work/s0")
until "${C[@]}" ls / >/dev/null 2>&1; do sleep 0.1; done

# `cluster status --json`, asked again while etcd times out (a loaded machine)
status() {
  local out
  for _ in $(seq 10); do
    out=$("${C[@]}" --json cluster status 2>/dev/null) && { echo "$out"; return; }
    sleep 1
  done
  echo "cluster status kept failing" >&2; exit 1
}
per=$((DIRS / SERVERS))
for t in S C; do
  declare -n X=$t
  "${X[@]}" mkdir /u
  for i in $(seq 0 $((SERVERS-1))); do "${X[@]}" mkdir "/u/c$i"; done
  if [ $t = C ]; then
    for i in $(seq 0 $((SERVERS-1))); do
      "${X[@]}" cluster move "/u/c$i" "s$i" >/dev/null
      # until the table holding /u/cI is sI's (moves go one at a time)
      soid=$("${X[@]}" --json stat "/u/c$i" | python3 -c 'import json,sys;print(json.load(sys.stdin)["soid"])')
      for _ in $(seq 300); do
        owner=$(status | python3 -c 'import json,sys
v=int(sys.argv[1],16)
print([t["owner"] for t in json.load(sys.stdin)["tables"] if int(t["first"],16)<=v<=int(t["last"],16)][0])' "$soid")
        [ "$owner" = "s$i" ] && break; sleep 0.2
      done
    done
  fi
  for i in $(seq 0 $((SERVERS-1))); do
    # shellcheck disable=SC2046
    "${X[@]}" mkdir $(seq -f "/u/c$i/d%g" 0 $((per-1)))
    # shellcheck disable=SC2046
    "${X[@]}" touch $(seq -f "/u/c$i/d%g/f" 0 $((per-1)))
  done
  "${X[@]}" touch "/u/c$((SERVERS-1))/d$((per-1))/needle"
  unset -n X
done
tables() { status | python3 -c 'import json,sys;j=json.load(sys.stdin);print(len(j["tables"]),"tables:"," ".join("%s %s"%(s["name"],s["tables"]) for s in j["servers"]))'; }
log "made; cluster: $(tables)"
# wait until the layout stops changing (the balancer)
last= same=0
for _ in $(seq 600); do
  now=$(tables); if [ "$now" = "$last" ]; then same=$((same+1)); else same=0; last=$now; fi
  [ $same -ge 5 ] && break; sleep 2
done
log "settled: $last"
log "single: $("${S[@]}" stats / | tail -n 1)"
log "cluster: $("${C[@]}" stats / | tail -n 1)"

LSDIR=/u/c$((SERVERS > 2 ? 2 : SERVERS - 1))/d$((per-1)) python3 - "$RUNS" "${OUT:-/tmp/route-cost-bench.json}" "$work" "${BINS[@]}" <<'PY'
import json, os, statistics as st, subprocess, sys, time
runs, out, work, bins = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4:]
addr = {t: open(f"{work}/{n}.addr").read().strip() for t, n in (("single", "single"), ("cluster", "s0"))}
data = {"single": f"{work}/single", "cluster": f"{work}/s0"}
cmds = {"stat /u": ["stat", "/u"], "find -name needle": ["find", "/u", "-name", "needle"],
        "ls " + os.environ["LSDIR"]: ["ls", os.environ["LSDIR"]],
        "stats /u": ["stats", "/u"], "du /u": ["du", "/u"]}
times = {}  # (bin, target, cmd) -> [ms]
answers = {}
for r in range(runs + 2):  # two warm-up rounds
    for cname, args in cmds.items():
        for target in ("single", "cluster"):
            order = bins if r % 2 == 0 else bins[::-1]
            for b in order:
                t0 = time.monotonic()
                p = subprocess.run([b, "--server", addr[target], "--data", data[target]] + args,
                                   capture_output=True)
                ms = (time.monotonic() - t0) * 1e3
                if p.returncode != 0:
                    print("failed:", b, target, args, p.stderr.decode()[-300:], file=sys.stderr)
                answers.setdefault((cname, target, b), set()).add(p.stdout)
                if r >= 2:
                    times.setdefault(f"{b}|{target}|{cname}", []).append(ms)
med = {k: st.median(v) for k, v in times.items()}
for cname in cmds:
    for b in bins:
        s, c = med[f"{b}|single|{cname}"], med[f"{b}|cluster|{cname}"]
        print(f"{cname:18s} {b}: single {s:6.2f} ms, cluster {c:6.2f} ms, ratio {c/s:.2f}")
for cname in cmds:
    got = {x for (c, _, _), a in answers.items() if c == cname for x in a}
    print(f"{cname}: answers agree across runs, targets and binaries: {len(got) == 1}")
json.dump({"times": times, "medians": med, "load": os.getloadavg()}, open(out, "w"), indent=1)
PY
uptime
if [ -n "${HOLD:-}" ]; then
  { printf 'S=(%q %q %q %q %q)\n' "${S[@]}"; printf 'C=(%q %q %q %q %q)\n' "${C[@]}"
    printf 'export SEXTANT_ETCD=%q\nWORK=%q\n' "$SEXTANT_ETCD" "$work"; } >"$HOLD"
  log "holding: source $HOLD; rm $HOLD to end"
  while [ -e "$HOLD" ]; do sleep 1; done
fi
