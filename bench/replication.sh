#!/usr/bin/env bash
# replication.sh - what replication costs: rkv clusters of three servers with
# --replicas=1, 2 and 3, beside Redis with one replica and `WAIT 1` after
# every SET (a synchronously replicated write in the store users know), and
# Redis alone, all driven by the same client code (rkv-ycsb), in one run.
#
# Usage: bench/replication.sh [--transport=tcp|verbs] [--host=ADDR]
#                             [--durability=wal|sync|none] [--build_dir=DIR]
#                             [--records=N] [--operations=N] [--duration_s=S]
#                             [--threads=N] [--value_bytes=N] [--repeat=N]
#                             [--server_threads=N] [--out=FILE]
#
#   --transport    rkv's data plane (default tcp). verbs needs an RDMA device
#                  (the SoftRoCE guest: bench/run-verbs.sh style).
#   --host         the address every store listens on (default 127.0.0.1;
#                  in the guest, the rxe0 address).
#   --durability   rkv-server --durability (default wal).
#   --build_dir    a built tree with rkv-server, rkv-coordinator and rkv-ycsb
#                  (default build/release). Nothing is built here.
#   --records      keys loaded before each run (default 5000).
#   --operations   timed operations per run (default 20000).
#   --duration_s   cap on each timed run in seconds (default 4).
#   --threads      client threads, one connection each (default 1: latency;
#                  more measures throughput).
#   --value_bytes  bytes per value (default 1024).
#   --repeat       runs per cell; the report shows the median ops/s run and
#                  the range (default 3).
#   --server_threads  rkv-server --threads (default: the server's own
#                  default, the CPUs it may run on). With N >= 3 a server
#                  has N - 1 client pollers, whose writes to different keys
#                  are forwarded to the backups in parallel.
#   --out          the report (default bench/results/replication-<transport>-<UTC date>.md).
#
# Exit status: 0 when every run was clean; 1 when a run failed or reported
# errors (the report says which); 2 for bad usage or a missing build.
set -euo pipefail

die() { printf 'replication.sh: ERROR: %s\n' "$*" >&2; exit 2; }
log() { printf 'replication.sh: %s\n' "$*" >&2; }

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
invocation="bench/replication.sh${*:+ $*}"

transport=tcp
host=127.0.0.1
durability=wal
build_dir=$repo/build/release
records=5000
operations=20000
duration_s=4
threads=1
value_bytes=1024
repeat=3
server_threads=""
out=""
for arg in "$@"; do
  case $arg in
    --transport=*) transport=${arg#*=} ;;
    --host=*) host=${arg#*=} ;;
    --durability=*) durability=${arg#*=} ;;
    --build_dir=*) build_dir=${arg#*=} ;;
    --records=*) records=${arg#*=} ;;
    --operations=*) operations=${arg#*=} ;;
    --duration_s=*) duration_s=${arg#*=} ;;
    --threads=*) threads=${arg#*=} ;;
    --value_bytes=*) value_bytes=${arg#*=} ;;
    --repeat=*) repeat=${arg#*=} ;;
    --server_threads=*) server_threads=${arg#*=} ;;
    --out=*) out=${arg#*=} ;;
    -h | --help) sed -n '2,/^set -euo/{/^#/s/^# \{0,1\}//p}' "$0"; exit 0 ;;
    *) die "unknown argument '$arg' (see --help)" ;;
  esac
done
case $transport in tcp | verbs) ;; *) die "--transport must be tcp or verbs" ;; esac
case $durability in wal | sync | none) ;; *) die "--durability must be wal, sync or none" ;; esac
for n in "$records" "$operations" "$duration_s" "$threads" "$value_bytes" "$repeat" ${server_threads:+"$server_threads"}; do
  [[ $n =~ ^[0-9]+$ && $n -gt 0 ]] || die "not a positive integer: $n"
done
[[ $host =~ ^[0-9A-Za-z.:-]+$ ]] || die "--host must be an address, got '$host'"
build_dir=$(cd "$build_dir" 2>/dev/null && pwd -P) ||
  die "build dir missing; build first: cmake --preset release && cmake --build build/release -j2"
server_bin=$build_dir/server/rkv-server
coordinator_bin=$build_dir/coordinator/rkv-coordinator
ycsb_bin=$build_dir/bench/rkv-ycsb
for b in "$server_bin" "$coordinator_bin" "$ycsb_bin"; do
  [[ -x $b ]] || die "$b not built; build first: cmake --preset release && cmake --build $build_dir -j2"
done
for tool in redis-server redis-cli ss; do
  command -v "$tool" >/dev/null 2>&1 || die "'$tool' not found (deploy/install-deps.sh installs it)"
done

stamp=$(date -u +%Y-%m-%dT%H%MZ)
load_at_start=$(cut -d' ' -f1-3 /proc/loadavg)
[[ -n $out ]] || out=$repo/bench/results/replication-$transport-$stamp.md
mkdir -p "$(dirname "$out")"

work=$(mktemp -d "${TMPDIR:-/tmp}/rkv-replication-bench.XXXXXX")
pids=()
# shellcheck disable=SC2317  # invoked by the EXIT trap
cleanup() {
  local pid
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

free_port() {
  local port
  for _ in $(seq 1 100); do
    port=$((20000 + RANDOM % 40000))
    if ! ss -Hltn "sport = :$port" | grep -q .; then
      echo "$port"
      return 0
    fi
  done
  die "no free TCP port found"
}

# The address a process printed in its "<what> listening on ADDR" line.
wait_address() { # pid stdout-file what log-file
  local i addr
  for ((i = 0; i < 600; i++)); do
    addr=$(sed -n "s/^$3 listening on \\([^ ]*\\).*/\\1/p" "$2" | tail -n 1)
    if [[ -n $addr ]]; then
      echo "$addr"
      return 0
    fi
    kill -0 "$1" 2>/dev/null || die "$3 exited during startup: $(tail -n 5 "$4")"
    sleep 0.1
  done
  die "$3 printed no listening line within 60 s (log: $4)"
}

token_file=$work/token
head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$token_file"
results=$work/results.txt
: >"$results"
failed=()
cluster_pids=()
coordinator_addr=""

# A coordinator and three servers with --replicas=$1; returns once every
# server has joined and the shards are assigned (kvctl would do as well;
# rkv-ycsb's connect waits for a complete map within its timeout).
start_cluster() { # replicas
  local dir=$work/cluster-r$1 i pid
  mkdir -p "$dir"
  cluster_pids=()
  : >"$dir/coordinator.out"
  "$coordinator_bin" --listen="$host:0" --data_dir="$dir/coordinator" --token_file="$token_file" \
    --servers=3 --replicas="$1" >"$dir/coordinator.out" 2>"$dir/coordinator.log" &
  pid=$!
  pids+=("$pid")
  cluster_pids+=("$pid")
  coordinator_addr=$(wait_address "$pid" "$dir/coordinator.out" rkv-coordinator "$dir/coordinator.log")
  for i in 1 2 3; do
    : >"$dir/server$i.out"
    "$server_bin" --listen="$host:0" --data_dir="$dir/server$i" --token_file="$token_file" \
      --coordinator="$coordinator_addr" --transport="$transport" --durability="$durability" \
      --memory=512M ${server_threads:+--threads="$server_threads"} >"$dir/server$i.out" 2>"$dir/server$i.log" &
    pid=$!
    pids+=("$pid")
    cluster_pids+=("$pid")
  done
  for i in 1 2 3; do
    wait_address "${cluster_pids[$i]}" "$dir/server$i.out" rkv-server "$dir/server$i.log" >/dev/null
  done
  log "rkv cluster with --replicas=$1 (coordinator $coordinator_addr)"
}

stop_pids() {
  local pid
  for pid in "$@"; do kill "$pid" 2>/dev/null || true; done
  for pid in "$@"; do wait "$pid" 2>/dev/null || true; done
}

redis_port() { # stdout: a port redis listens on, once it does
  local port
  port=$(free_port)
  echo "$port"
}

# One cell: repeat runs of a workload against a target.
run_cell() { # label workload ycsb-args...
  local label=$1 workload=$2 rep rc lines
  shift 2
  for ((rep = 1; rep <= repeat; rep++)); do
    lines=$(wc -l <"$results")
    rc=0
    "$ycsb_bin" "$@" --workload="$workload" --value_bytes="$value_bytes" --records="$records" \
      --operations="$operations" --duration_s="$duration_s" --threads="$threads" --timeout_ms=10000 \
      --label="$label" --output="$results" >"$work/ycsb.out" 2>&1 || rc=$?
    sed "s/^/  [$label $workload #$rep] /" "$work/ycsb.out" >&2
    if ((rc != 0)); then
      failed+=("$label/$workload#$rep (rc $rc)")
      (($(wc -l <"$results") > lines)) ||
        echo "$label $workload $value_bytes $threads - FAILED - - - - -" >>"$results"
    fi
  done
}

labels=()
for r in 1 2 3; do
  start_cluster "$r"
  labels+=("rkv-r$r")
  for w in put get; do
    run_cell "rkv-r$r" "$w" --target=rkv --coordinator="$coordinator_addr" --token_file="$token_file" \
      --transport="$transport"
  done
  stop_pids "${cluster_pids[@]}"
done

# Redis: a primary alone, then a primary with one replica and WAIT 1.
redis_dir=$work/redis
mkdir -p "$redis_dir/primary" "$redis_dir/replica"
primary_port=$(redis_port)
# --protected-mode no: on an address other than loopback (the guest's rxe
# address), Redis refuses every client without a password otherwise; the
# bench's stores listen on a private test address only.
redis-server --port "$primary_port" --bind "$host" --protected-mode no --save '' --appendonly no --dir "$redis_dir/primary" \
  >"$redis_dir/primary.log" 2>&1 &
primary_pid=$!
pids+=("$primary_pid")
replica_port=$(redis_port)
while [[ $replica_port == "$primary_port" ]]; do replica_port=$(redis_port); done
redis-server --port "$replica_port" --bind "$host" --protected-mode no --save '' --appendonly no --dir "$redis_dir/replica" \
  --replicaof "$host" "$primary_port" >"$redis_dir/replica.log" 2>&1 &
replica_pid=$!
pids+=("$replica_pid")
# A full resynchronisation comes first (slow under emulation): up to 120 s.
linked=""
link_deadline=$((SECONDS + 120))
while ((SECONDS < link_deadline)); do
  if redis-cli -h "$host" -p "$replica_port" info replication 2>/dev/null | grep -q '^master_link_status:up'; then
    linked=yes
    break
  fi
  sleep 0.2
done
if [[ -z $linked ]]; then
  tail -n 20 "$redis_dir/primary.log" "$redis_dir/replica.log" >&2 || true
  die "the Redis replica did not link to its primary within 120 s (logs above)"
fi
log "redis primary on $host:$primary_port, replica on $host:$replica_port"
labels+=(redis-wait1 redis)
run_cell redis-wait1 put --target=redis --server="$host:$primary_port" --redis_wait_replicas=1
run_cell redis-wait1 get --target=redis --server="$host:$primary_port"
run_cell redis put --target=redis --server="$host:$primary_port"
run_cell redis get --target=redis --server="$host:$primary_port"
stop_pids "$replica_pid" "$primary_pid"

# ---------------------------------------------------------------------------
# The report.
# ---------------------------------------------------------------------------

# Column c of the run of label/workload with the median ops/s; "-" if none.
field() { # label workload column(1-based)
  awk -v l="$1" -v w="$2" -v c="$3" '
    $1 == l && $2 == w { n++; rate[n] = ($6 ~ /^[0-9.]+$/) ? $6 + 0 : 0; line[n] = $0 }
    END {
      if (n == 0) { print "-"; exit }
      for (i = 2; i <= n; i++)
        for (j = i; j > 1 && rate[j - 1] > rate[j]; j--) {
          t = rate[j]; rate[j] = rate[j - 1]; rate[j - 1] = t
          t = line[j]; line[j] = line[j - 1]; line[j - 1] = t
        }
      split(line[int((n + 1) / 2)], f, " ")
      print (f[c] == "" ? "-" : f[c])
    }' "$results"
}

errors_cell() { # label workload
  awk -v l="$1" -v w="$2" '
    $1 == l && $2 == w { if ($11 ~ /^[0-9]+$/) e += $11; else bad = 1 }
    END { print (bad ? "FAILED" : e + 0) }' "$results"
}

ratio() { # a b: a / b to two decimals, or "-"
  awk -v a="$1" -v b="$2" 'BEGIN {
    if (a !~ /^[0-9.]+$/ || b !~ /^[0-9.]+$/ || b + 0 == 0) { print "-"; exit }
    printf "%.2f\n", a / b }'
}

commit=$(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo unknown)
if [[ -n $(git -C "$repo" status --porcelain 2>/dev/null | head -n 1) ]]; then commit+=" (with uncommitted changes)"; fi
cpu_model=$(awk -F': ' '/^model name/ {print $2; exit}' /proc/cpuinfo)
for l in "${labels[@]}"; do
  for w in put get; do
    [[ $(errors_cell "$l" "$w") == 0 ]] || failed+=("$l/$w (errors)")
  done
done
redis_put_p50=$(field redis-wait1 put 9)
{
  echo "# What replication costs: rkv --replicas=1,2,3 beside Redis with WAIT 1 ($stamp)"
  echo
  echo "Produced by \`$invocation\` (rkv commit $commit, binaries from \`${build_dir#"$repo"/}\`)."
  echo
  echo "Machine: $(nproc) CPUs, ${cpu_model:-unknown CPU}, Linux $(uname -r); load average before"
  echo "the run $load_at_start, after $(cut -d' ' -f1-3 /proc/loadavg). Every process shares these CPUs."
  echo
  echo "rkv: one rkv-coordinator and three rkv-servers on $host, --transport=$transport,"
  echo "--durability=$durability${server_threads:+, --threads=$server_threads}; the client in cluster mode. A PUT goes to the key's primary,"
  echo "which forwards it to the R-1 backups and replies once all acknowledged. A GET reads the"
  echo "primary's memory (one-sided). Redis: redis-server --save '' --appendonly no, with one"
  echo "replica (--replicaof) and \`WAIT 1 <timeout>\` after every SET (redis-wait1), and the same"
  echo "primary without WAIT (redis), over TCP."
  echo
  echo "$records records of $value_bytes bytes loaded first (not timed), then $operations operations"
  echo "or $duration_s s, $threads client thread(s), one connection each; $repeat run(s) per cell, the"
  echo "median-ops/s run shown. Latencies in microseconds."
  echo
  echo "| store | PUT ops/s | PUT p50 | PUT p99 | PUT p50 / redis-wait1 | GET ops/s | GET p50 | GET p99 | errors |"
  echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|"
  for l in "${labels[@]}"; do
    echo "| $l | $(field "$l" put 6) | $(field "$l" put 9) | $(field "$l" put 10)" \
      "| $(ratio "$(field "$l" put 9)" "$redis_put_p50")" \
      "| $(field "$l" get 6) | $(field "$l" get 7) | $(field "$l" get 8)" \
      "| $(errors_cell "$l" put)/$(errors_cell "$l" get) |"
  done
  echo
  echo "PUT p50 with R replicas relative to R=1: R=2 $(ratio "$(field rkv-r2 put 9)" "$(field rkv-r1 put 9)"),"
  echo "R=3 $(ratio "$(field rkv-r3 put 9)" "$(field rkv-r1 put 9)"); Redis WAIT 1 relative to Redis alone:"
  echo "$(ratio "$redis_put_p50" "$(field redis put 9)")."
  echo
  if [[ ${#failed[@]} -gt 0 ]]; then
    echo "**RUNS WITH ERRORS (their figures are not valid): ${failed[*]}**"
    echo
  fi
} >"$out"
log "report: $out"
cat "$out"
[[ ${#failed[@]} -eq 0 ]]
