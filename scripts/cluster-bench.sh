#!/usr/bin/env bash
# Cluster benchmarks of issues 20 and 21 (a namespace served by several servers):
# etcd and N `sextant serve` processes on this machine, one shared cluster
# store, the prebuilt binary in SEXTANT_BIN. Every part prints one line per
# measurement and a summary of medians (python3 does the arithmetic).
#
#   SEXTANT_BIN=/path/to/sextant scripts/cluster-bench.sh cpu [ROUNDS]
#       server CPU µs per operation (create, stat, readdir, remove) with one
#       `sextant bench` client per server, all at once, client I in /cI
#       whose table is moved to server sI before every round (checked after
#       it). Clusters of SIZES (default "1 2 4"; "1 2 4 8" was run) are all
#       up at once and the rounds interleave them; round 0 is a warm-up
#       (splits settle) and is not counted. ROUNDS default 3 (5 was run).
#       Tables: table_dir_limit = DIRLIMIT (2), inode limit off; the
#       namespace (/c0 … /c{N-1}) is made on s0 alone, then s1 … join.
#       Per client: -F -n TASKS (16) -i ITEMS (500; 1000 was run) --shared
#       --readdir-passes PASSES (2). CPU: per-thread schedstat of every
#       server sampled every 10 ms by scripts/cluster-bench-clients.py;
#       a phase's cost is server sI's CPU in client I's phase window.
#   SEXTANT_BIN=... scripts/cluster-bench.sh creates [ROUNDS]
#       aggregate durable creates/s, servers at SEXTANT_BENCH_SYNC_FLOOR=7ms
#       (journal fsync), same layout and interleaving; ratio to N x the
#       1-server cluster of the same round. -F -n TASKS -i ITEMS --shared.
#   SEXTANT_BIN=... scripts/cluster-bench.sh durability [ROUNDS]
#       what `--durability logless` buys on a cluster (issue 21 item 6):
#       for each sync floor of FLOORS (default "7ms 0ms": the issues'
#       disk, SEXTANT_BENCH_SYNC_FLOOR, and this machine's own), two
#       clusters of SERVERS (3) servers, each with its own etcd, one
#       journaling and one log-less, all up at once; every round runs
#       both modes of each floor back to back (the order alternates by
#       round), one `sextant bench` client per server as in `creates`
#       (-F -n TASKS -i ITEMS --shared --phases create,remove). Round 0 is
#       a warm-up. Prints per floor the medians of aggregate creates/s and
#       removes/s and the logless/journal ratio of each round and their
#       median, the load average at each round, and what the clients held
#       for the servers' recovery (entries and peak bytes, from the
#       bench's `backups` report). JSON lines in OUT/cluster-bench-durability.jsonl.
#   SEXTANT_BIN=... scripts/cluster-bench.sh migration [MOVES]
#       /big, FILES (20000) files in one table (limits 100000 directories,
#       1000000 inodes), moved between s0 and s1 MOVES times (12), GAP
#       (1.5) s apart, by `cluster move /big sX`, while two `sextant bench`
#       loops work in /big (scripts/cluster-bench-migration.py): each
#       move's duration and the worst client latency of bench runs that
#       span a move, against BASE (8) s of runs before the first move.
#   SEXTANT_BIN=... scripts/cluster-bench.sh moves [COUNT]
#       coordinator moves per second on an etcd that fsyncs (its default):
#       DIRS (64) top-level directories split into 64 tables over two
#       servers, COUNT (64) `cluster move` requests (swaps, so the
#       balancer stays idle) one at a time, then 4 at a time.
#   SEXTANT_BIN=... scripts/cluster-bench.sh search [ROUNDS]
#       issue 21's search benchmark: one `sextant serve` and a cluster of
#       SERVERS (4) on one store, both with the same table limits
#       (CONFIG_LIMITS, default Magellan's: 2,000 directories / 20,000
#       inodes), COPIES (10) copies of SRC (/usr) imported into each as
#       ROOT/c0 … (ROOT /u). The cluster's copies go into s0 alone, then
#       s1 … join and the coordinator spreads the tables (into all four at
#       once the import failed operations with EXDEV). Then
#       scripts/cluster-bench-search.py runs the engine benchmark's query
#       kinds (sets 1-3, glob, substring, broad count, totals; SAMPLES (20)
#       sampled files, SEED) through the CLI on both, back to back, ROUNDS
#       (3) rounds after a warm-up, checks the answers agree, and prints
#       medians and cluster/single ratios — also over only the runs during
#       which no table changed hands (from the servers' logs) — and the
#       DirChain calls per query (servers' /metrics). JSON (every run) in
#       OUT/cluster-bench-search.json.
#   SEXTANT_BIN=... scripts/cluster-bench.sh search-moves [SECONDS]
#       reproduces a defect: a search on a cluster while tables move
#       (`cluster move` of every table in turn to a random server, for
#       SECONDS (20)) prints another count than the same search on the
#       single server, with exit status 0. One copy of SRC.
#   SEXTANT_BIN=... scripts/cluster-bench.sh pingpong
#       reproduces a defect: two servers, tiny tables (8 directories, 200
#       inodes), `mkdir /c0 /c1` then `mkdir /c0/d0 … /c0/d9`: the table
#       an operation pulls and the coordinator's count balancing move two
#       tables back and forth for tens of seconds; the mkdir fails.
#   SEXTANT_BIN=... scripts/cluster-bench.sh borrow
#       issue 21's Ursa Minor experiment, what BORROW/RETURN costs: two
#       servers, /p held by s0 and /q by s1 (table_dir_limit 2), then
#       sextant-borrow-bench (crates/bench/src/bin/borrow_bench.rs;
#       BORROW_BENCH, default target/release/sextant-borrow-bench):
#       SAMPLES (10) creates vs cold and warm cross-server renames, then
#       SECONDS (10) s runs of two clients (create+stat in their own
#       directory, a fraction FRACTIONS of cross-server renames) × REPS (3).
#       The servers journal with fsync at SYNC_FLOOR (7ms) per sync, as a
#       disk would. PAIRS (0) > 0: also PAIRS BORROW+RETURN pairs one after
#       another (a cold rename, then a wait on etcd's map until the table
#       is home), after the latencies; RETURN_AFTER (unset: the servers'
#       2 s) sets the servers' idle time before a RETURN
#       (SEXTANT_BENCH_RETURN_AFTER, e.g. 0ms). etcd fsyncs (its default).
#       With SEXTANT_LOG=info,borrow_trace=debug and KEEP=1 the servers log
#       each step of a BORROW: scripts/borrow-trace.py DIR/s0.log DIR/s1.log
#       prints where the time goes.
#   SEXTANT_BIN=... scripts/cluster-bench.sh spread
#       how fast balancing spreads tables onto servers that join: s0 alone
#       makes DIRS (24) directories in tables of two (table_dir_limit 2),
#       waits WARM (12) s so its figures are published, then s1, s2 and s3
#       join at once; prints when the last move came (no move for QUIET,
#       15, s after it; waiting MAX_S, 180, s at most), the layout, the
#       balancing moves, their rate (moves/minute from the first to the
#       last) and the longest gap between two (the coordinator's "move …
#       balancing" log lines). The servers' SEXTANT_BALANCE_MOVES (moves
#       in flight at most; default 16) passes through the environment.
#
# Knobs (environment): DURABILITY (journal, the default, or logless: the
# servers' --durability in the parts that use `cluster`: layout, cpu,
# creates), SIZES, TASKS (bench tasks per client), ITEMS (items
# per task), KEEP=1 keeps the work directory, HOLD=FILE (search parts: once
# the cluster has settled, writes the two command lines, etcd,
# the metrics addresses and the single server's pid to FILE (the cluster's
# pids are in CLUSTER_LOGS/sI.pid) and waits
# until FILE is removed, to probe by hand), ETCD_FLAGS (search parts:
# extra etcd flags, e.g. "--max-txn-ops 8192": with etcd's default of 128 a
# 10-copy import into s0 alone was seen to leave its checkpoints
# uncommitted, "too many operations in txn request", and tables unserved
# once s1 … joined). Needs etcd (3.4) on PATH.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${SEXTANT_BIN:-}" ]; then
  cargo build --release --locked -q -p sextant-cli
fi
BIN=${SEXTANT_BIN:-$PWD/target/release/sextant}
command -v etcd >/dev/null || { echo "needs etcd (scripts/ensure-deps.sh installs it)" >&2; exit 1; }
work=$(mktemp -d "${TMPDIR:-/tmp}/sextant-cluster-bench.XXXXXX")
pids=() etcd_pids=()
cleanup() {
  # servers first (they leave the cluster through etcd), then etcd
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for _ in $(seq 100); do
    local alive=0; for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
    [ $alive = 0 ] && break; sleep 0.1
  done
  for p in "${pids[@]}" "${etcd_pids[@]}"; do kill "$p" 2>/dev/null || true; done
  sleep 0.5
  for p in "${pids[@]}" "${etcd_pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  if [ "${KEEP:-0}" = 1 ]; then echo "work directory kept: $work" >&2; else rm -rf "$work"; fi
}
trap cleanup EXIT
free_port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
now() { python3 -c 'import time;print(time.monotonic())'; }
log() { echo "[$(date -u +%H:%M:%S)] $*" >&2; }

# start_etcd DIR [extra etcd flags]: prints the client URL.
start_etcd() {
  local dir=$1; shift
  local c p; c=$(free_port); p=$(free_port)
  mkdir -p "$dir"
  etcd --name t --data-dir "$dir/etcd" --listen-client-urls "http://127.0.0.1:$c" \
    --advertise-client-urls "http://127.0.0.1:$c" --listen-peer-urls "http://127.0.0.1:$p" \
    --initial-advertise-peer-urls "http://127.0.0.1:$p" --initial-cluster "t=http://127.0.0.1:$p" \
    "$@" >"$dir/etcd.log" 2>&1 &
  etcd_pids+=("$!"); echo "$!" >"$dir/etcd.pid"
  until (echo > "/dev/tcp/127.0.0.1/$c") 2>/dev/null; do sleep 0.05; done
  echo "http://127.0.0.1:$c" >"$dir/etcd.url"
}

# start_server DIR NAME [serve flags...]: the server's data is DIR/NAME;
# writes DIR/NAME.addr and DIR/NAME.pid. Environment passes through
# (SEXTANT_BENCH_SYNC_FLOOR etc.). The journal syncs before every reply
# (JOURNAL_SYNC, default fsync: these runs measure durable creates; the
# server's own default is background since issue 23).
start_server() {
  local dir=$1 name=$2; shift 2
  SEXTANT_METRICS=${SERVER_METRICS:-off} SEXTANT_LEASE_TTL=${LEASE:-2s} "$BIN" serve --data "$dir/$name" \
    --listen 127.0.0.1:0 --etcd "$(cat "$dir/etcd.url")" --name "$name" \
    --cluster-store "$dir/store" --socket off --journal-sync "${JOURNAL_SYNC:-fsync}" "$@" \
    >"$dir/$name.out" 2>"$dir/$name.log" &
  local pid=$!; pids+=("$pid"); echo "$pid" >"$dir/$name.pid"
  until grep -q "listening on" "$dir/$name.out" 2>/dev/null; do
    kill -0 "$pid" 2>/dev/null || { echo "server $name died; see $dir/$name.log" >&2; exit 1; }
    sleep 0.05
  done
  sed -n 's/listening on //p' "$dir/$name.out" >"$dir/$name.addr"
  # The secret is the first server's (all share the store's).
  until "$BIN" --server "$(cat "$dir/$name.addr")" --data "$dir/s0" ls / >/dev/null 2>&1; do sleep 0.05; done
}

# cli DIR [args...]: the CLI against server s0 of the cluster in DIR.
cli() { local dir=$1; shift; SEXTANT_SECRET_FILE="$dir/s0/secret" "$BIN" --server "$(cat "$dir/s0.addr")" --data "$dir/s0" "$@"; }
status_json() { cli "$1" --json cluster status --etcd "$(cat "$1/etcd.url")"; }

# settle DIR [QUIET_S] [MAX_S]: waits until no table changes owner or epoch
# for QUIET_S seconds (default 3), at most MAX_S (default 90). Prints the
# seconds waited, or "unsettled".
settle() {
  local dir=$1 quiet=${2:-3} max=${3:-90}
  python3 - "$dir" "$quiet" "$max" "$BIN" <<'PY'
import json, os, subprocess, sys, time
d, quiet, mx, binp = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
env = dict(os.environ, SEXTANT_SECRET_FILE=f"{d}/s0/secret")
addr = open(f"{d}/s0.addr").read().strip(); url = open(f"{d}/etcd.url").read().strip()
t0 = time.monotonic(); last = None; since = t0
while True:
    try:
        out = subprocess.run([binp, "--server", addr, "--data", f"{d}/s0", "--json", "cluster", "status", "--etcd", url],
                             env=env, capture_output=True, text=True, timeout=20).stdout
        j = json.loads(out)
        key = sorted((t["table"], t["owner"], t["epoch"], t["moving_to"]) for t in j["tables"])
    except Exception:
        key = None
    t = time.monotonic()
    if key != last: last, since = key, t
    elif t - since >= quiet:
        print(f"{t - t0:.1f}"); break
    if t - t0 > mx:
        print("unsettled"); break
    time.sleep(0.5)
PY
}

# layout DIR: one line per server: name tables inodes, and each table's owner.
layout() {
  status_json "$1" | python3 -c "$(cat <<'PY'
import json, sys
j = json.load(sys.stdin)
print(" ".join("%s:%st/%si" % (s["name"], s["tables"], s["inodes"]) for s in j["servers"]),
      "| owners", " ".join("t%s@%s/e%s" % (t["table"], t["owner"], t["epoch"]) for t in j["tables"]))
PY
)"
}

# placement DIR N: which server owns the table holding each /cI.
placement() {
  local dir=$1 n=$2 i soids=()
  for i in $(seq 0 $((n-1))); do soids+=("$(cli "$dir" --json stat "/c$i" | python3 -c 'import json,sys;print(json.load(sys.stdin)["soid"])')"); done
  status_json "$dir" | python3 -c "$(cat <<'PY'
import json, sys
j = json.load(sys.stdin); out = []
for i, s in enumerate(sys.argv[1:]):
    v = int(s, 16)
    t = [t for t in j["tables"] if int(t["first"], 16) <= v <= int(t["last"], 16)][0]
    out.append("/c%d:t%s@%s" % (i, t["table"], t["owner"]))
print(" ".join(out))
PY
)" "${soids[@]}"
}

# cpu_s PID...: user+system CPU seconds of these processes.
cpu_s() {
  python3 - "$@" <<'PY'
import os, sys
tck = os.sysconf("SC_CLK_TCK"); tot = 0
for p in sys.argv[1:]:
    f = open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()
    tot += int(f[11]) + int(f[12])
print(tot / tck)
PY
}
server_pids() { local dir=$1 n=$2 i; for i in $(seq 0 $((n-1))); do cat "$dir/s$i.pid"; done; }

# place DIR N: moves each /cI's table to sI (a no-op if it is there) and
# waits for the coordinator to settle.
place() {
  local dir=$1 n=$2 i
  for i in $(seq 0 $((n-1))); do
    cli "$dir" cluster move "/c$i" "s$i" --etcd "$(cat "$dir/etcd.url")" >/dev/null 2>&1 || true
  done
  settle "$dir" 3 60 >/dev/null
}

# cluster DIR N CONFIG [serve flags]: etcd + N servers; the namespace
# (/c0 … /c{N-1}, each with PAD subdirectories) is made on s0 alone, so its
# tables split there, then s1 … join and the coordinator spreads tables;
# finally each /cI's table is moved to sI.
cluster() {
  local dir=$1 n=$2 config=$3; shift 3
  [ -n "${DURABILITY:-}" ] && set -- --durability "$DURABILITY" "$@"
  start_etcd "$dir"
  start_server "$dir" s0 --config "$config" "$@"
  local i j
  for i in $(seq 0 $((n-1))); do
    cli "$dir" mkdir "/c$i"
    for j in $(seq 1 "${PAD:-0}"); do cli "$dir" mkdir "/c$i/pad$j"; done
  done
  for i in $(seq 1 $((n-1))); do start_server "$dir" "s$i" --config "$config" "$@"; done
  log "cluster $dir: $n servers up; settling: $(settle "$dir" 3 60) s"
  place "$dir" "$n"
  log "cluster $dir: $(layout "$dir"); $(placement "$dir" "$n")"
}

# clients DIR N [bench args]: one bench client per server (client I on sI,
# under /cI), run at once by cluster-bench-clients.py; prints its JSON.
clients() {
  local dir=$1 n=$2 i; shift 2
  local ps=() as=() ds=()
  for i in $(seq 0 $((n-1))); do ps+=("$(cat "$dir/s$i.pid")"); as+=("$(cat "$dir/s$i.addr")"); ds+=("/c$i"); done
  python3 scripts/cluster-bench-clients.py "$BIN" "$dir/s0/secret" "$dir/s0" \
    "$(IFS=,; echo "${ps[*]}")" "$(IFS=,; echo "${as[*]}")" "$(IFS=,; echo "${ds[*]}")" -- "$@"
}

# rounds PART ROUNDS [bench args]: clusters of SIZES already up in
# $work/nN; each round runs every size once, in order (interleaved).
rounds() {
  local part=$1 r=$2 i n; shift 2
  for i in $(seq 0 "$r"); do
    for n in $SIZES; do
      place "$work/n$n" "$n"
      local before after j; before=$(placement "$work/n$n" "$n")
      j=$(clients "$work/n$n" "$n" "$@") || { log "round $i N=$n failed: $j"; continue; }
      after=$(placement "$work/n$n" "$n")
      local pulls moves; pulls=$(cat "$work/n$n"/s*.log | grep -c "pulling a table" || true)
      moves=$(cat "$work/n$n"/s*.log | grep -c "coordinator: move" || true)
      log "N=$n round $i: server logs so far: $pulls table pulls by operations, $moves coordinator moves"
      [ "$before" = "$after" ] || log "N=$n: placement changed during the round: $before -> $after"
      [ "$i" = 0 ] && continue  # warm-up round: splits settle, not recorded
      echo "{\"part\":\"$part\",\"round\":$i,\"n\":$n,\"placed\":\"$before\",\"after\":\"$after\",\"r\":$j}" | tee -a "$work/results.jsonl" |
        python3 -c 'import json,sys;d=json.load(sys.stdin);print("round",d["round"],"N",d["n"]," ".join("%s %.1fus/op(paired) %.1fus(window) %.0f/s ovl%.2f"%(k[5:],v["paired_cpu_us_per_op"],v["window_cpu_us_per_op"],v["agg_ops_per_sec"],v["overlap_frac"]) for k,v in d["r"]["phases"].items()))' >&2
    done
  done
}

summary() {  # $1 = results.jsonl
  python3 - "$1" <<'PY'
import json, statistics as st, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
div = lambda a, b: a / b if b else float("nan")
by, whole = {}, {}
for r in rows:
    ok = r["placed"] == r["after"]
    creates = r["r"]["phases"]["file-create"]["ops"]
    whole.setdefault((r["part"], r["n"]), []).append((1e6 * r["r"]["all_servers_cpu_s"] / creates, ok))
    for ph, v in r["r"]["phases"].items():
        by.setdefault((r["part"], ph), {}).setdefault(r["n"], []).append(dict(v, ok=ok))
print("whole run, all servers' CPU per item (one create + stat + readdir share + remove):")
base = {}
for (part, n), v in sorted(whole.items()):
    m = st.median(x for x, _ in v); base.setdefault(part, m)
    print(f"  {part:8} N={n}: {m:8.2f} µs/item ({div(m, base[part]):.2f}x N=1) over {len(v)} rounds: "
          + ", ".join(f"{x:.1f}" for x, _ in v))
for (part, ph), ns in sorted(by.items()):
    base = None
    for n in sorted(ns):
        v = ns[n]; good = [x for x in v if x["ok"]] or v
        pc = st.median(x["paired_cpu_us_per_op"] for x in good)
        wc = st.median(x["window_cpu_us_per_op"] for x in v)
        ag = st.median(x["agg_ops_per_sec"] for x in v)
        sm = st.median(x["sum_client_ops_per_sec"] for x in v)
        if base is None: base = (pc, wc, ag, sm)
        line = (f"{part:8} {ph:13} N={n}: paired CPU {pc:8.2f} µs/op ({div(pc, base[0]):.2f}x) "
                f"[{sum(x['ok'] for x in v)}/{len(v)} rounds kept placement], all-server window CPU {wc:8.2f} µs/op ({div(wc, base[1]):.2f}x), "
                f"aggregate {ag:9.0f}/s (÷ N×N=1: {div(ag, n*base[2]):.2f}), sum of clients {sm:9.0f}/s (÷ N×N=1: {div(sm, n*base[3]):.2f}), "
                f"overlap {st.median(x['overlap_frac'] for x in v):.2f}, worst p99 {max(x['p99_us_worst'] for x in v)/1e3:.1f} ms, max {max(x['max_us_worst'] for x in v)/1e3:.1f} ms")
        if "entries" in v[0]:
            line += f", entries/listing {v[0]['entries']/v[0]['ops']:.0f}"
        print(line)
PY
}

case "${1:-}" in
  layout)  # a quick look at how the namespace splits and spreads
    n=${2:-4}
    printf 'table_dir_limit = %s\ntable_inode_limit = 10000000\n' "${DIRLIMIT:-2}" >"$work/small.toml"
    cluster "$work/n$n" "$n" "$work/small.toml"
    layout "$work/n$n"
    for i in $(seq 0 $((n-1))); do echo "/c$i: $(cli "$work/n$n" --json stat "/c$i" | head -c 300)"; done
    ;;
  cpu|creates)
    part=$1; r=${2:-3}
    SIZES=${SIZES:-1 2 4}; TASKS=${TASKS:-16}; ITEMS=${ITEMS:-500}
    printf 'table_dir_limit = %s\ntable_inode_limit = 10000000\n' "${DIRLIMIT:-2}" >"$work/small.toml"
    for n in $SIZES; do
      if [ "$part" = creates ]; then
        SEXTANT_BENCH_SYNC_FLOOR=7ms cluster "$work/n$n" "$n" "$work/small.toml"
      else
        cluster "$work/n$n" "$n" "$work/small.toml"
      fi
    done
    if [ "$part" = cpu ]; then
      rounds cpu "$r" -F -n "$TASKS" -i "$ITEMS" --shared --readdir-passes "${PASSES:-2}" \
        --phases create,stat,readdir,remove
    else
      rounds creates "$r" -F -n "$TASKS" -i "$ITEMS" --shared --phases create
    fi
    for n in $SIZES; do log "after: N=$n $(layout "$work/n$n"); $(placement "$work/n$n" "$n")"; done
    summary "$work/results.jsonl"
    cp "$work/results.jsonl" "${OUT:-/tmp}/cluster-bench-$part.jsonl" 2>/dev/null || true
    ;;
  durability)
    r=${2:-3}; n=${SERVERS:-3}; FLOORS=${FLOORS:-7ms 0ms}; TASKS=${TASKS:-16}; ITEMS=${ITEMS:-500}
    printf 'table_dir_limit = %s\ntable_inode_limit = 10000000\n' "${DIRLIMIT:-2}" >"$work/small.toml"
    for f in $FLOORS; do
      for mode in journal logless; do
        DURABILITY=$mode SEXTANT_BENCH_SYNC_FLOOR=$f cluster "$work/$mode-$f" "$n" "$work/small.toml"
      done
    done
    for i in $(seq 0 "$r"); do
      order="journal logless"; [ $((i % 2)) = 1 ] && order="logless journal"
      for f in $FLOORS; do
        for mode in $order; do
          d=$work/$mode-$f
          place "$d" "$n"
          before=$(placement "$d" "$n")
          load=$(cut -d' ' -f1-3 /proc/loadavg)
          j=$(clients "$d" "$n" -F -n "$TASKS" -i "$ITEMS" --shared --phases create,remove) ||
            { log "round $i $mode floor $f failed: $j"; continue; }
          after=$(placement "$d" "$n")
          [ "$before" = "$after" ] || log "$mode floor $f: placement changed during the round: $before -> $after"
          echo "{\"part\":\"durability\",\"round\":$i,\"floor\":\"$f\",\"mode\":\"$mode\",\"n\":$n,\"load\":\"$load\",\"ok\":$([ "$before" = "$after" ] && echo true || echo false),\"r\":$j}" |
            tee -a "$work/durability.jsonl" |
            python3 -c 'import json,sys;d=json.load(sys.stdin);print("round",d["round"],d["mode"],"floor",d["floor"],"load",d["load"]," ".join("%s %.0f/s"%(k[5:],v["agg_ops_per_sec"]) for k,v in d["r"]["phases"].items()),"held",d["r"].get("backups"))' >&2
        done
      done
    done
    mkdir -p "${OUT:-/tmp}"
    cp "$work/durability.jsonl" "${OUT:-/tmp}/cluster-bench-durability.jsonl"
    python3 - "$work/durability.jsonl" <<'PY'
import json, statistics as st, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
rows = [x for x in rows if x["round"] > 0]  # round 0: warm-up
for f in dict.fromkeys(x["floor"] for x in rows):
    print(f"sync floor {f}:")
    for ph in ("file-create", "file-remove"):
        med, ratios = {}, []
        for m in ("journal", "logless"):
            med[m] = st.median(x["r"]["phases"][ph]["agg_ops_per_sec"] for x in rows if x["floor"] == f and x["mode"] == m)
        for i in sorted({x["round"] for x in rows}):
            v = {x["mode"]: x["r"]["phases"][ph]["agg_ops_per_sec"] for x in rows if x["floor"] == f and x["round"] == i}
            if len(v) == 2: ratios.append(v["logless"] / v["journal"])
        print(f"  {ph[5:]:6}: journal {med['journal']:8.0f}/s, logless {med['logless']:8.0f}/s (medians); "
              f"logless/journal per round " + " ".join(f"{x:.2f}" for x in ratios) + f", median {st.median(ratios):.2f}")
    for m in ("journal", "logless"):
        v = [x for x in rows if x["floor"] == f and x["mode"] == m]
        p50 = {ph: st.median(x["r"]["phases"][ph]["p50_us_median"] for x in v) / 1e3 for ph in ("file-create", "file-remove")}
        b = [x["r"]["backups"] for x in v if x["r"].get("backups")]
        held = (f"; clients held at the end {st.median(x['entries'] for x in b):.0f} entries, "
                f"peak {st.median(x['peak_bytes'] for x in b)/1024:.0f} KiB, received {st.median(x['received'] for x in b):.0f} entries "
                "(sum over the clients, median over rounds)") if b else ""
        print(f"  {m:7}: median client p50 create {p50['file-create']:.2f} ms, remove {p50['file-remove']:.2f} ms; "
              f"rounds kept placement {sum(x['ok'] for x in v)}/{len(v)}{held}")
print("load average (1/5/15 min) at each run: " + ", ".join(f"r{x['round']} {x['mode'][0]} {x['floor']}: {x['load']}" for x in rows))
PY
    ;;
  migration)
    m=${2:-12}; files=${FILES:-20000}
    printf 'table_dir_limit = 100000\ntable_inode_limit = 1000000\n' >"$work/big.toml"
    d=$work/mig; start_etcd "$d"
    start_server "$d" s0 --config "$work/big.toml"
    cli "$d" mkdir /big
    t0=$(now)
    seq 0 $((files-1)) | sed 's|^|/big/f|' | xargs -n 500 -P 4 env SEXTANT_SECRET_FILE="$d/s0/secret" \
      "$BIN" --server "$(cat "$d/s0.addr")" --data "$d/s0" touch
    log "made $files files in $(python3 -c "print(round($(now)-$t0,1))") s"
    start_server "$d" s1 --config "$work/big.toml"
    log "settling: $(settle "$d" 3 60) s; $(layout "$d")"
    python3 scripts/cluster-bench-migration.py "$BIN" "$d/s0/secret" "$d/s0" "$(cat "$d/etcd.url")" \
      "$(cat "$d/s0.addr")" "$(cat "$d/s1.addr")" /big "$m" | tee "$work/migration.json"
    log "after: $(layout "$d")"
    # Server-side: the coordinator's move and the target's "table added"
    grep -h "coordinator: move\|table handed over\|table added\|pulling" "$d"/s*.log | sort | cut -c12-200 >"$work/migration-events.txt"
    cp "$work/migration.json" "$work/migration-events.txt" "${OUT:-/tmp}/" 2>/dev/null || true
    ;;
  moves)
    count=${2:-64}; dirs=${DIRS:-64}
    printf 'table_dir_limit = 2\ntable_inode_limit = 10000000\n' >"$work/small.toml"
    d=$work/moves; start_etcd "$d"   # etcd's default: fsync on every commit
    start_server "$d" s0 --config "$work/small.toml"
    cli "$d" mkdir $(seq 0 $((dirs-1)) | sed 's|^|/m|')
    start_server "$d" s1 --config "$work/small.toml"
    log "settling: $(settle "$d" 3 90) s; $(layout "$d" | cut -c1-200)"
    python3 - "$BIN" "$d" "$count" <<'PY' | tee "$work/moves.txt"
import json, os, subprocess, sys, time, threading
binp, d, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
env = dict(os.environ, SEXTANT_SECRET_FILE=f"{d}/s0/secret")
addr = open(f"{d}/s0.addr").read().strip(); url = open(f"{d}/etcd.url").read().strip()
base = [binp, "--server", addr, "--data", f"{d}/s0"]
def owners():
    j = json.loads(subprocess.run(base + ["--json", "cluster", "status", "--etcd", url], env=env, capture_output=True, text=True).stdout)
    o = {"s0": [], "s1": []}
    for t in j["tables"]: o[t["owner"]].append(t["table"])
    return o
def epochs():
    j = json.loads(subprocess.run(base + ["--json", "cluster", "status", "--etcd", url], env=env, capture_output=True, text=True).stdout)
    return {t["table"]: t["epoch"] for t in j["tables"]}
def move(t, to, out):
    t0 = time.monotonic()
    p = subprocess.run(base + ["cluster", "move", str(t), to, "--etcd", url], env=env, capture_output=True, text=True)
    out.append((time.monotonic() - t0, p.returncode, (p.stdout + p.stderr).strip()[-200:]))
for par in (1, 4):
    o = owners(); print(f"tables: s0 {len(o['s0'])}, s1 {len(o['s1'])}")
    ep0 = epochs()
    # swaps keep the counts even, so the balancer adds no moves of its own
    # (from the newest tables: the balancer, when it acts, takes the oldest)
    o = {k: sorted(v, reverse=True) for k, v in o.items()}
    plan = []
    for i in range(count // 2):
        plan.append((o["s0"][i % len(o["s0"])], "s1")); plan.append((o["s1"][i % len(o["s1"])], "s0"))
    plan = plan[:min(count, len(o["s0"]) + len(o["s1"]))]  # each table once: every move is a real one
    out = []; t0 = time.monotonic()
    for i in range(0, len(plan), par):
        ths = [threading.Thread(target=move, args=(t, to, out)) for t, to in plan[i:i + par]]
        for th in ths: th.start()
        for th in ths: th.join()
    el = time.monotonic() - t0
    time.sleep(3); ep1 = epochs()
    adv = sum(ep1[t] - ep0.get(t, 0) for t in ep1)
    print(f"  table epochs advanced by {adv} in all (every move, the balancer's too): {adv/el:.1f} epoch changes/s")
    ok = [x for x in out if x[1] == 0]; lat = sorted(x[0] * 1e3 for x in ok)
    print(f"{par} at a time: {len(ok)}/{len(out)} moves ok in {el:.2f} s = {len(ok)/el:.1f} moves/s; "
          f"per move p50 {lat[len(lat)//2]:.0f} ms, max {lat[-1]:.0f} ms (CLI process included)")
    fails = {}
    for x in out:
        if x[1] != 0: fails[x[2]] = fails.get(x[2], 0) + 1
    for m, c in fails.items(): print(f"  failed {c}x: {m}")
t0 = time.monotonic()
for _ in range(10): owners()
print(f"CLI + status round trip for reference: {(time.monotonic()-t0)*100:.0f} ms")
PY
    cp "$work/moves.txt" "${OUT:-/tmp}/" 2>/dev/null || true
    ;;
  pingpong)  # the defect seen on 2026-11-27: operation pulls vs count balancing
    printf 'table_dir_limit = 8\ntable_inode_limit = 200\n' >"$work/pp.toml"
    d=$work/pp; start_etcd "$d"
    start_server "$d" s0 --config "$work/pp.toml"
    start_server "$d" s1 --config "$work/pp.toml"
    cli "$d" mkdir /c0 /c1
    t0=$(now)
    rc=0; cli "$d" mkdir $(seq 0 9 | sed 's|^|/c0/d|') || rc=$?
    log "mkdir of 10 directories: exit $rc after $(python3 -c "print(round($(now)-$t0,1))") s"
    log "coordinator balancing moves: $(cat "$d"/s*.log | grep -c 'coordinator: move'), pulls by operations: $(cat "$d"/s*.log | grep -c 'pulling a table')"
    log "$(layout "$d")"
    cp "$d/s0.log" "${OUT:-/tmp}/pingpong-s0.log" 2>/dev/null || true
    cp "$d/s1.log" "${OUT:-/tmp}/pingpong-s1.log" 2>/dev/null || true
    ;;
  search|search-moves)
    part=$1
    src=${SRC:-/usr}; root=${ROOT:-/u}; servers=${SERVERS:-4}
    copies=${COPIES:-10}; [ "$part" = search-moves ] && copies=1
    printf '%s\n' "${CONFIG_LIMITS:-table_dir_limit = 2000
table_inode_limit = 20000}" >"$work/limits.toml"
    # the single server, and etcd + s0 of the cluster (s1 … join after the
    # import: an import into 4 servers at once failed operations with EXDEV
    # while tables were pulled and balanced back and forth)
    smp=$(free_port)
    SEXTANT_METRICS=127.0.0.1:$smp "$BIN" serve --data "$work/single" --listen 127.0.0.1:0 \
      --socket off --config "$work/limits.toml" >"$work/single.out" 2>"$work/single.log" &
    pids+=("$!")
    until grep -q "listening on" "$work/single.out" 2>/dev/null; do
      kill -0 "${pids[0]}" 2>/dev/null || { cat "$work/single.log" >&2; exit 1; }; sleep 0.1
    done
    sp=$(sed -n 's/listening on //p' "$work/single.out")
    # shellcheck disable=SC2086 # ETCD_FLAGS: extra etcd flags, split
    d=$work/cl; start_etcd "$d" ${ETCD_FLAGS:-}
    cms=()
    cms+=("127.0.0.1:$(free_port)")
    SERVER_METRICS=${cms[0]} start_server "$d" s0 --config "$work/limits.toml"
    export SEXTANT_ETCD; SEXTANT_ETCD=$(cat "$d/etcd.url")
    S=("$BIN" --server "$sp" --data "$work/single")
    C=("$BIN" --server "$(cat "$d/s0.addr")" --data "$d/s0")
    "${S[@]}" mkdir "$root" && "${C[@]}" mkdir "$root"
    for i in $(seq 0 $((copies-1))); do
      for t in single cluster; do
        t0=$(now)
        if [ $t = single ]; then r=$("${S[@]}" import "$src" "$root/c$i")
        else r=$("${C[@]}" import "$src" "$root/c$i"); fi
        log "$t: copy $i: $(python3 -c "print(round($(now)-$t0,1))") s: ${r%%$'\n'*}"
      done
    done
    for i in $(seq 1 $((servers-1))); do
      cms+=("127.0.0.1:$(free_port)")
      SERVER_METRICS=${cms[$i]} start_server "$d" "s$i" --config "$work/limits.toml"
    done
    cstatus() { "${C[@]}" --json cluster status; }
    tables() { cstatus | python3 -c 'import json,sys;j=json.load(sys.stdin);print(" ".join("%s:%s tables/%s inodes"%(s["name"],s["tables"],s["inodes"]) for s in j["servers"]))'; }
    log "cluster: $servers servers; settled after $(settle "$d" 10 240) s"
    log "single: $("${S[@]}" stats / | tail -n 1)"
    log "cluster: $("${C[@]}" stats / | tail -n 1); $(tables)"
    if [ -n "${HOLD:-}" ]; then
      # probing by hand: the two command lines and etcd in $HOLD (shell
      # syntax), kept up until $HOLD is removed
      { printf 'S=(%q %q %q %q %q)\n' "${S[@]}"; printf 'C=(%q %q %q %q %q)\n' "${C[@]}"
        printf 'export SEXTANT_ETCD=%q\nCLUSTER_LOGS=%q\n' "$SEXTANT_ETCD" "$d"
        printf 'SINGLE_METRICS=%q\nCLUSTER_METRICS=(%s)\n' "127.0.0.1:$smp" "${cms[*]}"
        printf 'SINGLE_PID=%q\n' "${pids[0]}"; } >"$HOLD"
      log "holding: source $HOLD; rm $HOLD to go on"
      while [ -e "$HOLD" ]; do sleep 1; done
    fi
    if [ "$part" = search ]; then
      mkdir -p "${OUT:-/tmp}"
      SEXTANT_CLUSTER_LOGS=$(for i in $(seq 0 $((servers-1))); do printf "%s:" "$d/s$i.log"; done) \
        python3 scripts/cluster-bench-search.py "$BIN" "$root" "${SAMPLES:-20}" "${2:-3}" "${SEED:-21}" \
        "$sp" "$work/single" "127.0.0.1:$smp" "$(cat "$d/s0.addr")" "$d/s0" "$(IFS=,; echo "${cms[*]}")" \
        "${OUT:-/tmp}/cluster-bench-search.json"
      log "after: $(tables)"
    else
      # one broad query; its answer on the settled cluster, then again
      # while every table is moved to a random server in turn
      q=(find / -size +1000c -print0)
      # the truth: the single server's count of the same tree
      want=$("${S[@]}" "${q[@]}" | tr -cd '\0' | wc -c)
      log "before the moves: single $want, cluster $("${C[@]}" "${q[@]}" | tr -cd '\0' | wc -c): ${q[*]}"
      ids=$(cstatus | python3 -c 'import json,sys;print(" ".join(str(t["table"]) for t in json.load(sys.stdin)["tables"]))')
      end=$(python3 -c "print($(now) + ${2:-20})")
      ( while python3 -c "import sys;sys.exit(0 if $(now) < $end else 1)"; do
          for t in $ids; do "${C[@]}" cluster move "$t" "s$((RANDOM % servers))" >/dev/null 2>&1 || true; done
        done ) &
      mover=$!
      n=0 bad=0
      while kill -0 "$mover" 2>/dev/null; do
        rc=0; got=$("${C[@]}" "${q[@]}" 2>"$work/err" | tr -cd '\0' | wc -c) || rc=$?
        n=$((n+1))
        if [ "$got" != "$want" ]; then bad=$((bad+1)); log "run $n: $got paths, not $want (pipeline exit $rc; stderr: $(tail -c 200 "$work/err"))"; fi
      done
      log "while tables moved: $bad of $n searches gave another count than the single server's $want"
    fi
    ;;
  borrow)
    bench=${BORROW_BENCH:-$PWD/target/release/sextant-borrow-bench}
    [ -x "$bench" ] || cargo build --release --locked -q -p sextant-bench --bin sextant-borrow-bench
    printf 'table_dir_limit = 2\ntable_inode_limit = 10000000\n' >"$work/small.toml"
    d=$work/borrow; start_etcd "$d"
    [ -n "${RETURN_AFTER:-}" ] && export SEXTANT_BENCH_RETURN_AFTER=$RETURN_AFTER
    SEXTANT_BENCH_SYNC_FLOOR=${SYNC_FLOOR:-7ms} start_server "$d" s0 --config "$work/small.toml"
    cli "$d" mkdir /p /q /r /s
    SEXTANT_BENCH_SYNC_FLOOR=${SYNC_FLOOR:-7ms} start_server "$d" s1 --config "$work/small.toml"
    pairs=()
    [ "${PAIRS:-0}" -gt 0 ] && pairs=(--pairs "$PAIRS" --etcd "$(cat "$d/etcd.url")")
    log "settling: $(settle "$d" 3 60) s; $(layout "$d")"
    cli "$d" cluster move /p s0 --etcd "$(cat "$d/etcd.url")" >/dev/null
    cli "$d" cluster move /q s1 --etcd "$(cat "$d/etcd.url")" >/dev/null
    log "placed: $(layout "$d")"
    "$bench" --server "$(cat "$d/s0.addr")" --secret-file "$d/s0/secret" --dir-a /p --dir-b /q \
      --samples "${SAMPLES:-10}" --seconds "${SECONDS_PER_RUN:-10}" --reps "${REPS:-3}" \
      --fractions "${FRACTIONS:-0,0.0006,0.005,0.01,0.05}" "${pairs[@]}" | tee "$work/borrow.jsonl"
    log "after: $(layout "$d")"
    log "borrows asked: $(grep -h -c 'BORROW: asked' "$d"/s*.log | paste -sd' '), returns: $(grep -h -c 'RETURN:' "$d"/s*.log | paste -sd' ')"
    cp "$work/borrow.jsonl" "${OUT:-/tmp}/cluster-bench-borrow.jsonl" 2>/dev/null || true
    ;;
  spread)
    printf 'table_dir_limit = 2\ntable_inode_limit = 10000000\n' >"$work/small.toml"
    d=$work/spread; start_etcd "$d"
    start_server "$d" s0 --config "$work/small.toml"
    for i in $(seq 0 $((${DIRS:-24} - 1))); do cli "$d" mkdir "/c$i"; done
    log "s0 alone: $(settle "$d" 3 60) s; $(layout "$d" | cut -d'|' -f1)"
    # Long enough for s0 to publish its tables' figures (every 5 s): from
    # then on a table just moved has unknown figures until its new server
    # publishes them.
    sleep "${WARM:-12}"
    t0=$(date +%s.%N)
    for s in s1 s2 s3; do start_server "$d" "$s" --config "$work/small.toml"; done
    quiet=${QUIET:-15}
    settle "$d" "$quiet" "${MAX_S:-180}" >/dev/null
    t1=$(date +%s.%N)
    log "joined: no move for $quiet s from $(python3 -c "print(round($t1 - $t0 - $quiet, 1))") s after the joins began; $(layout "$d" | cut -d'|' -f1)"
    python3 - "$t0" "$d"/s*.log <<'PY'
import re, sys, datetime
t0 = float(sys.argv[1]); times = []
for f in sys.argv[2:]:
    for line in open(f, errors="replace"):
        if "coordinator: move" in line and "balancing" in line:
            ts = line.split()[0].rstrip("Z")
            t = datetime.datetime.fromisoformat(ts).replace(tzinfo=datetime.timezone.utc).timestamp()
            if t >= t0: times.append(t)
times.sort()
gaps = [b - a for a, b in zip(times, times[1:])]
span = times[-1] - times[0] if times else 0
rate = f"{len(times) / span * 60:.0f} moves/minute" if span > 0 else "-"
print(f"balancing moves {len(times)}, first {times[0] - t0:.1f} s after the joins, last {times[-1] - t0:.1f} s ({rate}), "
      f"longest gap {max(gaps, default=0):.1f} s, gaps over 2 s: {sum(g > 2 for g in gaps)}" if times else "no balancing move")
PY
    ;;
  *) sed -n '2,110p' "$0"; exit 2;;
esac
