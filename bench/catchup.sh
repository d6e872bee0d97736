#!/usr/bin/env bash
# catchup.sh - how long a server that comes back with its disk wiped takes
# to hold every shard again, and what the clients see meanwhile: one
# rkv-coordinator and three rkv-servers on loopback (tcp, R = 3, 1024
# shards), --records keys of --value_bytes loaded with rkv-ycsb, then one
# server killed (kill -9), its data dir removed and the server started
# again on its address (it joins under a new id; its old id is replaced
# after --replace_after_ms). Measured from that start to the first map in
# which no shard has a syncing replica and every shard has its three UP
# replicas: seconds, MB/s of values, the ReportCaughtUp calls the new
# server made and the map versions committed meanwhile. Beside it, in the
# same run, the baseline: copying a surviving server's data dir (the same
# records, as RocksDB holds them) with cp, what the disk moves.
#
# The client load (--load=ycsb, the default): --clients rkv-ycsb clients
# run --workload over the loaded keys from 2 s before the before-window
# (the --before_s seconds up to the kill) to the catch-up's end, or
# --after_s seconds after it; the map is polled once a second in the
# before-window as in the catch-up, so that the polls' cost is in both.
# rkv-ycsb reports only whole runs, so each
# client is a chain of 1-second runs (--noload --duration_s=1, 1 thread, a
# new seed each); a run's ops are spread evenly over its timed phase, the
# time between runs (a new process connecting, with a cold location cache)
# counts as uncovered, and ops/s is the ops over the covered time, times
# --clients (the report gives the coverage). Reported, per phase (before;
# during the catch-up, from the restarted server's start to the end above;
# re-replication, from the first poll that saw a syncing shard to the end;
# after, with --after_s): ops/s, its ratio to before, yes/no against the
# target of >= 80% of before, failed calls, and GET and PUT latency (p50,
# p99: the median of the runs' own p50 and p99, not the phase's
# percentiles; the worst run's p99; max: the longest call); and per second
# the same beside the polled map (syncing shards, UP servers, map version,
# primary handovers). Before counts the runs that ended before the kill;
# the others every run that overlaps them, so the stall of the kill's
# failover is in the during-figures. The target does not change the exit
# status. --load=none: no load, the catch-up alone.
#
# Usage: bench/catchup.sh [--build_dir=DIR] [--out=FILE] [--records=N]
#                         [--value_bytes=N] [--replace_after_ms=N]
#                         [--load=none|ycsb] [--clients=N] [--workload=W]
#                         [--before_s=N] [--after_s=N] [--rate_mb_per_s=N]
#                         [--stress_cpus=N]
#
#   --build_dir         a built tree with rkv-server, rkv-coordinator, kvctl
#                       and rkv-ycsb (default build/release); nothing is
#                       built here.
#   --out               the report (default bench/results/catchup-<UTC
#                       date>.md).
#   --records           keys loaded before the kill, 1..10000000 (default
#                       100000).
#   --value_bytes       bytes per value, 1..1048576 (default 1024).
#   --replace_after_ms  the coordinator's --replace_after_ms, 1..3600000
#                       (default 1000: the catch-up, not the wait before
#                       it, is measured).
#   --load              ycsb (the default): the client load above; none:
#                       no client load.
#   --clients           rkv-ycsb clients of the load, 1..16 (default 2).
#   --workload          rkv-ycsb's --workload: a (50% GET, 50% PUT; the
#                       default), b (95/5), c or get (100% GET), put.
#   --before_s          seconds of load measured before the kill, 2..600
#                       (default 5).
#   --after_s           seconds the load and the polls go on after the
#                       catch-up's end, 0..600 (default 0); the primaries
#                       moving to the new server come then.
#   --rate_mb_per_s     0..100000: every rkv-server gets
#                       --catchup_rate_mb_per_s=N (0: no limit); without
#                       it the servers get no such flag and use their
#                       default (the report says which).
#   --stress_cpus       N > 0: `stress-ng --cpu N` (N CPU-bound workers) runs
#                       from before the cluster starts until this script
#                       exits, so that the clients and the catch-up share
#                       the CPUs with a busy neighbour; the report's header
#                       says so. Needs stress-ng. 0 (the default): none.
#
# Ports: RKV_COORDINATOR_PORT (default 8600) and RKV_SERVER_BASE_PORT
# (default 8701, then the two after it; their admin ports 100 above).
# Exit status: 0 when the server caught up within 900 s (and, with a load,
# the load ran in the before-window), 1 when not or when a step failed (the
# cluster did not form, the loading failed; the logs are kept then), 2 for
# bad usage or a missing build.
set -euo pipefail

die() { printf 'catchup.sh: ERROR: %s\n' "$*" >&2; exit 2; }
fail() { printf 'catchup.sh: FAILED: %s\n' "$*" >&2; exit 1; }

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
invocation="bench/catchup.sh${*:+ $*}"
build_dir=$repo/build/release
out=""
records=100000
value_bytes=1024
replace_after_ms=1000
load=ycsb
clients=2
workload=a
before_s=5
after_s=0
rate_mb_per_s=""
stress_cpus=0
for arg in "$@"; do
  case $arg in
    --build_dir=*) build_dir=${arg#*=} ;;
    --out=*) out=${arg#*=}; [[ -n $out ]] || die "--out= is empty" ;;
    --records=*) records=${arg#*=} ;;
    --value_bytes=*) value_bytes=${arg#*=} ;;
    --replace_after_ms=*) replace_after_ms=${arg#*=} ;;
    --load=*) load=${arg#*=} ;;
    --clients=*) clients=${arg#*=} ;;
    --workload=*) workload=${arg#*=} ;;
    --before_s=*) before_s=${arg#*=} ;;
    --after_s=*) after_s=${arg#*=} ;;
    --rate_mb_per_s=*) rate_mb_per_s=${arg#*=} ;;
    --stress_cpus=*) stress_cpus=${arg#*=} ;;
    -h | --help) sed -n '2,/^set -euo/{/^#/s/^# \{0,1\}//p}' "$0"; exit 0 ;;
    *) die "unknown argument '$arg' (see --help)" ;;
  esac
done
# FLAG VALUE MIN MAX: VALUE a decimal integer in [MIN, MAX].
check_int() {
  if ! [[ $2 =~ ^[0-9]{1,9}$ ]] || ((10#$2 < $3 || 10#$2 > $4)); then
    die "$1=$2: an integer in $3..$4 (see --help)"
  fi
}
check_int --records "$records" 1 10000000
check_int --value_bytes "$value_bytes" 1 1048576
check_int --replace_after_ms "$replace_after_ms" 1 3600000
check_int --clients "$clients" 1 16
check_int --before_s "$before_s" 2 600
check_int --after_s "$after_s" 0 600
records=$((10#$records)) value_bytes=$((10#$value_bytes)) replace_after_ms=$((10#$replace_after_ms))
clients=$((10#$clients)) before_s=$((10#$before_s)) after_s=$((10#$after_s))
if [[ -n $rate_mb_per_s ]]; then
  check_int --rate_mb_per_s "$rate_mb_per_s" 0 100000
  rate_mb_per_s=$((10#$rate_mb_per_s))
fi
check_int --stress_cpus "$stress_cpus" 0 1024
stress_cpus=$((10#$stress_cpus))
case $load in none | ycsb) ;; *) die "--load=$load: none or ycsb" ;; esac
case $workload in a | b | c | get | put) ;; *) die "--workload=$workload: a, b, c, get or put" ;; esac
[[ -n $build_dir ]] || die "--build_dir= is empty"
[[ ! -d $out ]] || die "--out=$out is a directory; name the report's file"
[[ -z $out || $out != */ ]] || die "--out=$out: name the report's file"
for v in RKV_COORDINATOR_PORT RKV_SERVER_BASE_PORT; do
  [[ -z ${!v:-} ]] || { [[ ${!v} =~ ^[0-9]{1,5}$ ]] && ((10#${!v} >= 1 && 10#${!v} <= 65433)); } ||
    die "$v=${!v}: a port number, 1..65433"
done
build_dir=$(cd "$build_dir" 2>/dev/null && pwd -P) || die "build dir missing; build with deploy/build.sh"
server_bin=$build_dir/server/rkv-server
coordinator_bin=$build_dir/coordinator/rkv-coordinator
kvctl_bin=$build_dir/client/kvctl
ycsb_bin=$build_dir/bench/rkv-ycsb
for b in "$server_bin" "$coordinator_bin" "$kvctl_bin" "$ycsb_bin"; do
  [[ -x $b ]] || die "$b not built; build with deploy/build.sh"
done
# The servers' catch-up rate: passed only when asked for (older servers
# have no such flag); otherwise what this rkv-server's --help gives as its
# default, for the report.
rate_default=$("$server_bin" --help 2>&1 | awk '/-catchup_rate_mb_per_s /{f=1} f && /default: /{sub(/.*default: /, ""); print; exit}' || true)
server_flags=()
if [[ -n $rate_mb_per_s ]]; then
  [[ -n $rate_default ]] || die "--rate_mb_per_s=$rate_mb_per_s: $server_bin has no --catchup_rate_mb_per_s flag"
  server_flags+=(--catchup_rate_mb_per_s="$rate_mb_per_s")
  rate_note="\`--catchup_rate_mb_per_s=$rate_mb_per_s\` on every server"
elif [[ -n $rate_default ]]; then
  rate_note="no \`--catchup_rate_mb_per_s\` given: the servers' default, $rate_default MB/s"
else
  rate_note="no catch-up rate limit (this rkv-server has no \`--catchup_rate_mb_per_s\`)"
fi
coordinator_port=$((10#${RKV_COORDINATOR_PORT:-8600}))
base_port=$((10#${RKV_SERVER_BASE_PORT:-8701}))
coordinator=127.0.0.1:$coordinator_port

stamp=$(date -u +%Y-%m-%dT%H%MZ)
[[ -n $out ]] || out=$repo/bench/results/catchup-$stamp.md
mkdir -p "$(dirname "$out")" || die "cannot create the directory of --out=$out"
work=$(mktemp -d "${TMPDIR:-/tmp}/rkv-catchup.XXXXXX")
pids=()
client_pids=()
source "$repo/bench/stress.sh"
# On a failure the logs stay in $work (the error names it).
cleanup() {
  local rc=$?
  # The client loops end after their current run once stop exists.
  touch "$work/stop" 2>/dev/null || true
  for p in "${client_pids[@]}"; do wait "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  stress_stop
  wait 2>/dev/null || true
  if ((rc == 0)); then rm -rf "$work"; else echo "catchup.sh: logs kept in $work" >&2; fi
}
trap cleanup EXIT

now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", b - a }'; }

commit=$(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo unknown)
if [[ -n $(git -C "$repo" status --porcelain 2>/dev/null | head -n 1) ]]; then commit+=" (with uncommitted changes)"; fi
cpu_model=$(awk -F': ' '/^model name/ {print $2; exit}' /proc/cpuinfo)
load_at_start=$(cut -d' ' -f1-3 /proc/loadavg)
stress_start "$stress_cpus" "$work/stress-ng.log" || die "$stress_error"
[[ -z $stress_pid ]] || echo "catchup.sh: stress-ng --cpu $stress_cpus running (pid $stress_pid)" >&2
built=$(date -u -r "$server_bin" +'%Y-%m-%d %H:%M UTC')

head -c 32 /dev/urandom | base64 >"$work/token"
head -c 32 /dev/urandom | base64 >"$work/cluster_token"
"$coordinator_bin" --listen="$coordinator" --data_dir="$work/coordinator" --token_file="$work/token" \
  --cluster_token_file="$work/cluster_token" \
  --servers=3 --replicas=3 --shards=1024 --replace_after_ms="$replace_after_ms" \
  >"$work/coordinator.out" 2>"$work/coordinator.log" &
pids+=($!)
memory=$((records * (value_bytes + 256) * 2 / 1048576 + 256))
server_pid=()
start_server() {  # INDEX (0..2)
  local i=$1 port=$((base_port + $1))
  "$server_bin" --listen="127.0.0.1:$port" --admin_listen="127.0.0.1:$((port + 100))" --data_dir="$work/s$i" \
    --token_file="$work/token" --cluster_token_file="$work/cluster_token" --coordinator="$coordinator" \
    --transport=tcp --memory="${memory}M" --max_keys=$((records * 2 + 1000)) ${server_flags[@]+"${server_flags[@]}"} \
    >"$work/s$i.out" 2>>"$work/s$i.log" &
  server_pid[i]=$!
  pids+=($!)
}
kvctl() { "$kvctl_bin" --coordinator="$coordinator" --token_file="$work/token" "$@"; }
# "SYNCING UP VERSION HANDOVERS SHORT" of the current map: shards with a
# syncing replica, UP servers, the map's version, the shards whose primary
# role is passing from one server to another, and the shards with fewer
# than three UP replicas that are not syncing ("? ? ? ? ?" when not read).
state() {
  { kvctl --output=json members && kvctl --output=json shards; } 2>/dev/null | python3 -c '
import json, sys
text, dec = sys.stdin.read(), json.JSONDecoder()
ms, i = dec.raw_decode(text)
sh, _ = dec.raw_decode(text[i:].lstrip())
up = {m["server_id"] for m in ms if m.get("state") == "UP"}
short = sum(1 for s in sh["shards"] if len(({s.get("primary")} | set(s.get("backups", []))) & up) < 3)
print(sum(m.get("syncing_shards", 0) for m in ms), len(up), sh["map_version"],
      sum(1 for s in sh["shards"] if s.get("handover_from")), short)' 2>/dev/null ||
    echo "? ? ? ? ?"
}
# One poll of the map, the same before the kill and after it: state() into
# syncing, up, version, handovers and short, its time into t_poll, and
# "TIME SYNCING UP VERSION HANDOVERS" appended to FILE.
poll_map() {  # FILE
  read -r syncing up version handovers short <<<"$(state)"
  t_poll=$(now)
  echo "$t_poll $syncing $up $version $handovers" >>"$1"
}
map_version() { kvctl where map-version-probe 2>/dev/null | grep -o 'map version [0-9]*' | grep -o '[0-9]*$' || echo "?"; }
# One client of the load: 1-second rkv-ycsb runs, one after the other,
# until $work/stop exists; each run's output in $work/load/cCLIENT-N.out
# and "CLIENT N END_TIME EXIT_STATUS" appended to $work/load/runs.
client_loop() {  # CLIENT (1..)
  local c=$1 n=0 rc
  while [[ ! -e $work/stop ]]; do
    n=$((n + 1))
    rc=0
    "$ycsb_bin" --coordinator="$coordinator" --token_file="$work/token" --transport=tcp --records="$records" \
      --value_bytes="$value_bytes" --noload --workload="$workload" --threads=1 --operations=0 --duration_s=1 \
      --seed=$((c * 1000000 + n)) >"$work/load/c$c-$n.out" 2>&1 || rc=$?
    echo "$c $n $(now) $rc" >>"$work/load/runs"
  done
}

sleep 1
for i in 0 1 2; do start_server "$i"; done
for _ in $(seq 1 120); do
  read -r syncing up _ <<<"$(state)"
  [[ $up == 3 && $syncing == 0 ]] && break
  sleep 0.5
done
[[ $up == 3 ]] || fail "the cluster did not form"

echo "catchup.sh: loading $records records of $value_bytes bytes"
t0=$(now)
"$ycsb_bin" --coordinator="$coordinator" --token_file="$work/token" --transport=tcp --records="$records" \
  --value_bytes="$value_bytes" --threads=4 --workload=get --operations=1000 >"$work/ycsb.out" 2>&1 ||
  fail "rkv-ycsb failed to load: $(tail -n 3 "$work/ycsb.out")"
load_s=$(secs "$t0" "$(now)")

# The baseline: the same records, as a surviving server's RocksDB holds them.
sync
t0=$(now)
cp -a "$work/s0" "$work/copy" && sync
copy_s=$(secs "$t0" "$(now)")
copy_mb=$(du -sm "$work/copy" | cut -f1)
rm -rf "$work/copy"

if [[ $load == ycsb ]]; then
  echo "catchup.sh: $clients client(s) of workload $workload; $before_s s measured before the kill"
  mkdir "$work/load"
  touch "$work/load/runs"
  for c in $(seq 1 "$clients"); do
    client_loop "$c" &
    client_pids+=($!)
  done
  # The before-window is polled as the catch-up is (state(), then a second's
  # sleep), so that the polls' own CPU (two kvctl runs and a python3 a
  # poll, up to a sixth of a CPU of two) weighs on both windows alike and
  # the ratio of the two is the catch-up's alone; these polls go to
  # polls.before.
  sleep 2
  t_polls=$(now)
  while awk -v a="$t_polls" -v b="$(now)" -v s="$before_s" 'BEGIN { exit !(b - a < s) }'; do
    poll_map "$work/polls.before"
    sleep 1
  done
  if ! grep -qs 'run: ' "$work"/load/c*.out; then
    read -r c n _ <<<"$(tail -n 1 "$work/load/runs")" || true
    fail "the client load did not run: ${c:+$(tail -n 3 "$work/load/c$c-$n.out")}"
  fi
fi

version_before=$(map_version)
t_kill=$(now)
kill -9 "${server_pid[2]}"
wait "${server_pid[2]}" 2>/dev/null || true
rm -rf "$work/s2"
t0=$(now)
start_server 2
caught=1
t_end=""
progress=""
: >"$work/polls"
while true; do
  poll_map "$work/polls"
  elapsed=$(secs "$t0" "$t_poll")
  progress+="| $elapsed | $syncing | $up | $version | $handovers |"$'\n'
  if [[ -z $t_end ]]; then
    if [[ $up == 3 && $syncing == 0 && $short == 0 ]] && awk -v e="$elapsed" -v r="$replace_after_ms" 'BEGIN { exit !(e * 1000 > r + 2000) }'; then
      t_end=$t_poll
      version_after=$(map_version)
    elif awk -v e="$elapsed" 'BEGIN { exit !(e > 900) }'; then
      caught=0
      t_end=$t_poll
      version_after=$(map_version)
      break
    fi
  fi
  # With --after_s the load and the polls go on that long after the end.
  if [[ -n $t_end ]] && awk -v a="$t_end" -v b="$(now)" -v s="$after_s" 'BEGIN { exit !(b - a >= s) }'; then
    break
  fi
  sleep 1
done
catchup_s=$(secs "$t0" "$t_end")
if [[ $load == ycsb ]]; then
  touch "$work/stop"
  for p in "${client_pids[@]}"; do wait "$p" 2>/dev/null || true; done
  client_pids=()
fi
t_after=$(now)
load_at_end=$(cut -d' ' -f1-3 /proc/loadavg)
stress_check "$work/stress-ng.log"
reports=$(grep -c "caught up on" "$work/s2.log" || true)
mb=$(awk -v n="$records" -v b="$value_bytes" 'BEGIN { printf "%.1f", n * b / 1e6 }')
rate=$(awk -v m="$mb" -v s="$catchup_s" 'BEGIN { printf "%.2f", m / s }')
copy_rate=$(awk -v m="$copy_mb" -v s="$copy_s" 'BEGIN { printf "%.0f", (s > 0 ? m * 1.048576 / s : 0) }')

# The client load's figures: $work/load.md (the report's part) and
# $work/load.summary (one line for the console); exit status 3 when no run
# of the before-window had a timed phase.
load_rc=0
if [[ $load == ycsb ]]; then
  python3 - "$work" "$t_kill" "$t0" "$t_end" "$t_after" "$after_s" "$before_s" "$clients" "$workload" >"$work/load.md" <<'PY' || load_rc=$?
import math, os, re, statistics, sys

work, t_kill, t0, t_end, t_after, after_s, before_s, clients, workload = sys.argv[1:]
t_kill, t0, t_end, t_after = float(t_kill), float(t0), float(t_end), float(t_after)
after_s, before_s, clients = float(after_s), float(before_s), int(clients)

RUN = re.compile(r"run:\s+(\d+) ops in ([0-9.]+) s")
LAT = re.compile(r"^\s+(GET|PUT)\s+(\d+) ok\s+mean\s+[0-9.]+\s+p50\s+([0-9.]+)\s+p90\s+[0-9.]+\s+"
                 r"p99\s+([0-9.]+)\s+p99\.9\s+[0-9.]+\s+max\s+([0-9.]+)", re.M)
ERR = re.compile(r"errors: (\d+)")
SAMPLE = re.compile(r"^rkv-ycsb:\s+e\.g\. (.*)$", re.M)

# Every run with a timed phase: its client, [start, end] (end: when the
# process had exited; start: end less the timed phase's length), ops,
# failed calls, and per op (count, p50, p99, max) in us.
runs, broken, samples = [], 0, []
with open(os.path.join(work, "load", "runs")) as f:
    for line in f:
        c, n, end, rc = line.split()
        with open(os.path.join(work, "load", f"c{c}-{n}.out"), errors="replace") as g:
            text = g.read()
        m = RUN.search(text)
        if not m:  # no timed phase: it did not connect, or died
            broken += 1
            tail = text.strip().splitlines()[-1:] or ["(no output)"]
            samples.append(f"run {c}-{n} (exit {rc}): {tail[0]}")
            continue
        secs = max(float(m.group(2)), 1e-6)
        e = ERR.search(text)
        r = {"start": float(end) - secs, "end": float(end), "secs": secs, "ops": int(m.group(1)),
             "errors": int(e.group(1)) if e else 0, "lat": {}}
        for op, count, p50, p99, mx in LAT.findall(text):
            r["lat"][op] = (int(count), float(p50), float(p99), float(mx))
        samples += SAMPLE.findall(text)
        runs.append(r)

# Polls: (time, syncing, UP, map version, handovers).
with open(os.path.join(work, "polls")) as f:
    polls = [(float(t), *rest) for t, *rest in (line.split() for line in f)]
t_sync = next((p[0] for p in polls if p[1] not in ("0", "?") and p[0] <= t_end), None)


def overlap(r, a, b):
    return max(0.0, min(r["end"], b) - max(r["start"], a))


def throughput(rs, a, b):
    """ops/s in [a, b] of the runs rs (each run's ops spread evenly over it)
    per covered second, times the clients; and the covered share of
    clients * (b - a)."""
    ops = cov = 0.0
    for r in rs:
        o = overlap(r, a, b)
        ops += r["ops"] * o / r["secs"]
        cov += o
    if cov <= 0:
        return None, 0.0
    return ops / cov * clients, cov / (clients * (b - a))


def latency(rs, op):
    xs = [r["lat"][op] for r in rs if op in r["lat"]]
    if not xs:
        return None
    return (sum(x[0] for x in xs), statistics.median(x[1] for x in xs), statistics.median(x[2] for x in xs),
            max(x[2] for x in xs), max(x[3] for x in xs))


def fmt(x, digits=0):
    return "-" if x is None else f"{x:.{digits}f}"


a_before = t_kill - before_s
# (name, legend, from, to, runs, judged against the target)
phases = [("before", f"the {before_s:g} s up to the kill; runs that ended before it", a_before, t_kill,
           [r for r in runs if a_before < r["end"] <= t_kill], False),
          ("during catch-up", "restart to every shard with 3 UP replicas", t0, t_end,
           [r for r in runs if overlap(r, t0, t_end) > 0], True)]
if t_sync is not None and t_end - t_sync >= 1:
    phases.append(("re-replication", "of which: first poll that saw a syncing shard to the end", t_sync, t_end,
                   [r for r in runs if overlap(r, t_sync, t_end) > 0], True))
if after_s > 0 and t_after > t_end:
    phases.append(("after", f"--after_s: the load from the end on", t_end, t_after,
                   [r for r in runs if overlap(r, t_end, t_after) > 0], False))

out = []
p = out.append
base, _ = throughput(phases[0][4], phases[0][2], phases[0][3])
p(f"Client load: {clients} rkv-ycsb client(s), workload {workload} over the loaded keys, each a chain of 1-second")
p("runs (1 thread, `--noload --duration_s=1`). A run's ops are spread evenly over its timed phase; the time")
p("between runs (a new process connecting, with a cold location cache) is not covered, and ops/s is the ops")
p("over the covered time, times the clients. Times are seconds from the restarted server's start (the kill")
p(f"was at {t_kill - t0:.2f}). The target: ops/s during the catch-up >= 80% of before.")
p("")
p("| phase | from | to | covered | ops/s | of before | >= 80% | runs | failed calls |")
p("|---|---:|---:|---:|---:|---:|:---:|---:|---:|")
summary = []
for name, legend, a, b, rs, judged in phases:
    rate, cov = throughput(rs, a, b)
    ratio = rate / base if rate is not None and base and name != "before" else None
    verdict = ("yes" if ratio >= 0.8 else "**no**") if judged and ratio is not None else "-"
    p(f"| {name} ({legend}) | {a - t0:.2f} | {b - t0:.2f} | {cov * 100:.0f}% | {fmt(rate)} | "
      f"{'-' if ratio is None else fmt(ratio * 100, 1) + '%'} | {verdict} | {len(rs)} | "
      f"{sum(r['errors'] for r in rs)} |")
    summary.append(f"{name} {fmt(rate)} ops/s" + ("" if ratio is None else f" ({ratio * 100:.1f}% of before)"))
p("")
p("Latency in us, of the same runs (p50, p99: the median over the runs of each run's own p50 and p99, as")
p("rkv-ycsb reports them, not the phase's percentiles; worst p99: the highest run's p99; max: the longest call):")
p("")
p("| phase | op | calls | p50 | p99 | worst p99 | max |")
p("|---|---|---:|---:|---:|---:|---:|")
for name, legend, a, b, rs, judged in phases:
    for op in ("GET", "PUT"):
        lat = latency(rs, op)
        if lat is not None:
            p(f"| {name} | {op} | {lat[0]} | {fmt(lat[1], 1)} | {fmt(lat[2], 1)} | {fmt(lat[3], 1)} | "
              f"{fmt(lat[4], 1)} |")
p("")
if broken or samples:
    shown = "; ".join(f"`{s}`" for s in samples[:3]) or "none"
    p(f"Runs without a timed phase: {broken}. Errors (up to 3 examples): {shown}.")
    p("")
p("Per second (second k: [k, k+1) from the restart; ops/s and covered as above; latency: the worst of the runs")
p("that overlap the second; failed calls: of the runs that ended in it; syncing, UP, map version and handovers")
p("(shards whose primary role is passing to another server): the last poll up to the second's end, from the")
p("restart on):")
p("")
p("| s | ops/s | covered | GET p99 | PUT p99 | max | failed calls | syncing | UP | map version | handovers |")
p("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for k in range(math.floor(a_before - t0), math.ceil(t_after - t0)):
    a, b = t0 + k, min(t0 + k + 1, t_after)
    if b - a < 0.05:
        continue
    rate, cov = throughput(runs, a, b)
    seen_runs = [r for r in runs if overlap(r, a, b) > 0]
    ended = sum(r["errors"] for r in runs if a <= r["end"] < b)

    def worst(op, i):
        xs = [r["lat"][op][i] for r in seen_runs if op in r["lat"]]
        return max(xs) if xs else None

    mx = max([x for x in (worst("GET", 3), worst("PUT", 3)) if x is not None], default=None)
    seen = [q[1:] for q in polls if q[0] <= b]
    poll = seen[-1] if k >= 0 and seen else ("-",) * 4
    marks = [m for m, t in (("kill", t_kill), ("restart", t0), ("caught up", t_end)) if a <= t < b]
    p(f"| {k}{' (' + ', '.join(marks) + ')' if marks else ''} | {fmt(rate)} | {cov * 100:.0f}% | "
      f"{fmt(worst('GET', 2), 1)} | {fmt(worst('PUT', 2), 1)} | {fmt(mx, 1)} | {ended} | "
      + " | ".join(poll) + " |")
print("\n".join(out))
with open(os.path.join(work, "load.summary"), "w") as f:
    f.write("; ".join(summary) + "\n")
sys.exit(0 if base else 3)
PY
fi

{
  echo "# Catch-up of a wiped server ($stamp)"
  echo
  echo "Produced by \`$invocation\` (rkv commit $commit, binaries from \`${build_dir#"$repo"/}\`, rkv-server built $built)."
  echo "Machine: $(nproc) CPUs, ${cpu_model:-unknown CPU}, Linux $(uname -r); load average at the start $load_at_start,"
  if [[ -n $stress_note ]]; then
    echo "at the end $load_at_end. The coordinator, the servers, the clients and stress-ng share these CPUs:"
    echo "the run was made $stress_note."
  else
    echo "at the end $load_at_end. The coordinator, the servers and the clients share these CPUs."
  fi
  echo "One rkv-coordinator and three rkv-servers on loopback (tcp), R = 3, 1024 shards,"
  echo "\`--replace_after_ms=$replace_after_ms\`, $rate_note; $records records of $value_bytes bytes loaded in $load_s s."
  if [[ $load == ycsb ]]; then
    if ((after_s > 0)); then
      echo "Under a client load ($clients rkv-ycsb client(s), workload $workload) from before the kill to $after_s s after the catch-up's end."
    else
      echo "Under a client load ($clients rkv-ycsb client(s), workload $workload) from before the kill to the catch-up's end."
    fi
  else
    echo "No client load (\`--load=none\`)."
  fi
  echo
  echo "| figure | value |"
  echo "|---|---:|"
  if [[ $caught == 1 ]]; then
    echo "| wiped server back to every shard (from its start), s | $catchup_s |"
  else
    echo "| wiped server back to every shard (from its start), s | not within 900 s |"
  fi
  echo "| values caught up, MB | $mb |"
  echo "| MB/s of values | $rate |"
  echo "| ReportCaughtUp calls of the new server | $reports |"
  echo "| map versions committed meanwhile | $version_before -> $version_after |"
  echo "| baseline: cp -a of a surviving server's data dir ($copy_mb MiB), s | $copy_s |"
  echo "| baseline MB/s | $copy_rate |"
  echo
  if [[ $load == ycsb ]]; then
    cat "$work/load.md"
    echo
  fi
  echo "Progress (seconds from the start; shards with a syncing replica; UP servers; the map's version; shards"
  echo "whose primary role is passing to another server):"
  echo
  echo "| s | syncing | UP | map version | handovers |"
  echo "|---:|---:|---:|---:|---:|"
  printf '%s' "$progress"
} >"$out"
echo "catchup.sh: caught up in $catchup_s s ($rate MB/s; cp baseline $copy_rate MB/s); report in ${out#"$repo"/}"
if [[ $load == ycsb ]]; then
  echo "catchup.sh: client load: $(cat "$work/load.summary" 2>/dev/null || echo "no figures")"
  ((load_rc != 3)) || fail "the client load had no run in the before-window (the runs are in the report)"
  ((load_rc == 0)) || fail "the client load's figures could not be computed (exit $load_rc)"
fi
[[ $caught == 1 ]]
