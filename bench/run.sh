#!/usr/bin/env bash
# run.sh - rkv against memcached and Redis over loopback TCP, same client
# code (rkv-ycsb), same machine, same run.
#
# Usage: bench/run.sh [--durability=wal|sync|none] [--build_dir=DIR]
#                     [--records=N] [--operations=N] [--duration_s=S]
#                     [--threads=N] [--repeat=N] [--out=FILE]
#
#   --durability   rkv-server's durability for the first rkv run (default
#                  wal). rkv also runs once with `none` (unless that was the
#                  choice), since memcached and Redis without AOF are not
#                  durable either.
#   --build_dir    a configured and built tree holding server/rkv-server and
#                  bench/rkv-ycsb (default build/release). Nothing is built
#                  here: run `cmake --preset release && cmake --build
#                  build/release -j2` first.
#   --records      keys loaded before each run (default 5000).
#   --operations   timed operations per run (default 20000).
#   --duration_s   cap on each timed run in seconds (default 4).
#   --threads      client threads, one connection each (default 1).
#   --repeat       runs per cell; the report shows the run with the median
#                  ops/s and the range of all of them (default 3).
#   --out          the report (default bench/results/tcp-<UTC date>.md).
#
# Stores, all on 127.0.0.1, started here and stopped on exit:
#   rkv-server --transport=tcp, a fresh temporary data dir, --durability as
#       chosen, then again with none;
#   memcached -m 1024 -t 2 -U 0;
#   redis-server --save '' --appendonly no, and a second instance with
#       --appendonly yes --appendfsync everysec (acknowledged writes survive
#       a process crash, as with rkv's wal).
# Workloads: get (100% GET) and put (100% PUT), values of 64, 1024 and 16384
# bytes; per size the records are loaded once, untimed, and every timed run
# reuses them (--noload). Beside each latency the report gives the store
# process's CPU time per operation (user + system, all its threads, from
# /proc/PID/stat over the timed runs alone): rkv's polling threads spin
# while requests come, memcached and Redis sleep in epoll, so ops/s alone
# would hide what each costs the machine. The whole script takes 3-4
# minutes on 2 cores.
#
# Exit status: 0 when every run was clean; 1 when a run failed or reported
# errors (the report says which); 2 for bad usage or a missing build.
set -euo pipefail

die() { printf 'run.sh: ERROR: %s\n' "$*" >&2; exit 2; }
log() { printf 'run.sh: %s\n' "$*" >&2; }

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
invocation="bench/run.sh${*:+ $*}"

durability=wal
build_dir=$repo/build/release
records=5000
operations=20000
duration_s=4
threads=1
repeat=3
out=""
for arg in "$@"; do
  case $arg in
    --durability=*) durability=${arg#*=} ;;
    --build_dir=*) build_dir=${arg#*=} ;;
    --records=*) records=${arg#*=} ;;
    --operations=*) operations=${arg#*=} ;;
    --duration_s=*) duration_s=${arg#*=} ;;
    --threads=*) threads=${arg#*=} ;;
    --repeat=*) repeat=${arg#*=} ;;
    --out=*) out=${arg#*=} ;;
    -h | --help) sed -n '2,/^set -euo/{/^#/s/^# \{0,1\}//p}' "$0"; exit 0 ;;
    *) die "unknown argument '$arg' (see --help)" ;;
  esac
done
case $durability in wal | sync | none) ;; *) die "--durability must be wal, sync or none" ;; esac
for n in "$records" "$operations" "$duration_s" "$threads" "$repeat"; do
  [[ $n =~ ^[0-9]+$ && $n -gt 0 ]] || die "not a positive integer: $n"
done
build_dir=$(cd "$build_dir" 2>/dev/null && pwd -P) ||
  die "build dir missing; build first: cmake --preset release && cmake --build build/release -j2"
server_bin=$build_dir/server/rkv-server
ycsb_bin=$build_dir/bench/rkv-ycsb
for b in "$server_bin" "$ycsb_bin"; do
  [[ -x $b ]] || die "$b not built; build first: cmake --preset release && cmake --build $build_dir -j2"
done
for tool in memcached redis-server ss; do
  command -v "$tool" >/dev/null 2>&1 || die "'$tool' not found (deploy/install-deps.sh installs it)"
done

stamp=$(date -u +%Y-%m-%dT%H%MZ)
load_at_start=$(cut -d' ' -f1-3 /proc/loadavg)
[[ -n $out ]] || out=$repo/bench/results/tcp-$stamp.md
mkdir -p "$(dirname "$out")"

work=$(mktemp -d "${TMPDIR:-/tmp}/rkv-bench.XXXXXX")
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

# A TCP port nobody listens on (the store binds it right after; a race with
# another program is possible but harmless: the start then fails loudly).
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

wait_listening() { # pid port name
  local i
  for ((i = 0; i < 200; i++)); do
    kill -0 "$1" 2>/dev/null || die "$3 exited during startup (log: $work/$3.log)"
    ss -Hltn "sport = :$2" | grep -q . && return 0
    sleep 0.1
  done
  die "$3 is not listening on port $2 after 20 s"
}

stop() { # pid
  kill "$1" 2>/dev/null || true
  wait "$1" 2>/dev/null || true
}

token_file=$work/token
head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$token_file"
results=$work/results.txt
: >"$results"
# "label workload size ticks": the store's CPU time over each timed run.
cpu=$work/cpu.txt
: >"$cpu"
clk_tck=$(getconf CLK_TCK)

# User + system CPU ticks of process `pid` so far (all its threads).
cpu_ticks() { # pid
  local stat
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || { echo 0; return; }
  # Fields after the command name, which ends at the last ')': utime and
  # stime are the 12th and 13th of them.
  awk '{print $12 + $13}' <<<"${stat##*) }"
}
failed=()
server_addr=""
server_pid=""

start_rkv() { # durability
  local dir=$work/rkv-$1 i
  mkdir -p "$dir"
  : >"$dir/stdout"  # exists before the server's redirection does: polled below
  "$server_bin" --listen=127.0.0.1:0 --data_dir="$dir/data" --token_file="$token_file" \
    --transport=tcp --durability="$1" --memory=1G >"$dir/stdout" 2>"$work/rkv-$1.log" &
  server_pid=$!
  pids+=("$server_pid")
  server_addr=""
  for ((i = 0; i < 300; i++)); do
    server_addr=$(sed -n 's/^rkv-server listening on \([^ ]*\) .*/\1/p' "$dir/stdout")
    [[ -n $server_addr ]] && break
    kill -0 "$server_pid" 2>/dev/null || die "rkv-server exited during startup: $(tail -n 5 "$work/rkv-$1.log")"
    sleep 0.1
  done
  [[ -n $server_addr ]] || die "rkv-server did not report its address within 30 s"
  log "rkv-server (durability $1) on $server_addr"
}

start_memcached() {
  local port user_args=()
  port=$(free_port)
  # memcached refuses to run as root without naming a user.
  [[ $(id -u) -eq 0 ]] && user_args=(-u root)
  memcached -p "$port" -m 1024 -t 2 -U 0 -l 127.0.0.1 "${user_args[@]}" >"$work/memcached.log" 2>&1 &
  server_pid=$!
  pids+=("$server_pid")
  wait_listening "$server_pid" "$port" memcached
  server_addr=127.0.0.1:$port
  log "memcached on $server_addr"
}

start_redis() { # name extra-args...
  local name=$1 port
  shift
  port=$(free_port)
  mkdir -p "$work/$name"
  redis-server --port "$port" --bind 127.0.0.1 --save '' --dir "$work/$name" "$@" \
    >"$work/$name.log" 2>&1 &
  server_pid=$!
  pids+=("$server_pid")
  wait_listening "$server_pid" "$port" "$name"
  server_addr=127.0.0.1:$port
  log "$name on $server_addr"
}

# Runs every workload and size against the store started last.
run_all() { # label target
  local label=$1 target=$2 workload size rc rep lines ticks extra=()
  [[ $target == rkv ]] && extra=(--token_file="$token_file" --transport=tcp)
  # rkv-ycsb against this store, records of this size, more flags after.
  ycsb() { "$ycsb_bin" --target="$target" --server="$server_addr" "${extra[@]}" \
    --value_bytes="$size" --records="$records" "$@" >"$work/ycsb.out" 2>&1; }
  for size in 64 1024 16384; do
    # The records, once per size: the timed runs below reuse them.
    rc=0
    ycsb --workload=put --operations=1 --threads=1 || rc=$?
    if ((rc != 0)); then
      sed "s/^/  [$label load $size] /" "$work/ycsb.out" >&2
      failed+=("$label/load/$size (rc $rc)")
    fi
    for workload in get put; do
      for ((rep = 1; rep <= repeat; rep++)); do
        lines=$(wc -l <"$results")
        rc=0
        ticks=$(cpu_ticks "$server_pid")
        ycsb --workload="$workload" --noload --operations="$operations" --duration_s="$duration_s" \
          --threads="$threads" --label="$label" --output="$results" || rc=$?
        echo "$label $workload $size $(($(cpu_ticks "$server_pid") - ticks))" >>"$cpu"
        sed "s/^/  [$label $workload $size #$rep] /" "$work/ycsb.out" >&2
        if ((rc != 0)); then
          failed+=("$label/$workload/$size#$rep (rc $rc)")
          # A run that could not even connect leaves no line: add one.
          (($(wc -l <"$results") > lines)) ||
            echo "$label $workload $size $threads - FAILED - - - - -" >>"$results"
        fi
      done
    done
  done
}

labels=()
start_rkv "$durability"
labels+=("rkv-$durability")
run_all "rkv-$durability" rkv
stop "$server_pid"
if [[ $durability != none ]]; then
  start_rkv none
  labels+=(rkv-none)
  run_all rkv-none rkv
  stop "$server_pid"
fi
start_memcached
labels+=(memcached)
run_all memcached memcached
stop "$server_pid"
start_redis redis --appendonly no
labels+=(redis)
run_all redis redis
stop "$server_pid"
start_redis redis-aof --appendonly yes --appendfsync everysec
labels+=(redis-aof)
run_all redis-aof redis
stop "$server_pid"

# ---------------------------------------------------------------------------
# The report.
# ---------------------------------------------------------------------------

# Column c of the run of label/workload/size with the median ops/s (a
# failed run counts as 0 ops/s); "-" when there is none.
field() { # label workload size column(1-based)
  awk -v l="$1" -v w="$2" -v s="$3" -v c="$4" '
    $1 == l && $2 == w && $3 == s { n++; rate[n] = ($6 ~ /^[0-9.]+$/) ? $6 + 0 : 0; line[n] = $0 }
    END {
      if (n == 0) { print "-"; exit }
      for (i = 2; i <= n; i++)  # insertion sort by rate
        for (j = i; j > 1 && rate[j - 1] > rate[j]; j--) {
          t = rate[j]; rate[j] = rate[j - 1]; rate[j - 1] = t
          t = line[j]; line[j] = line[j - 1]; line[j - 1] = t
        }
      split(line[int((n + 1) / 2)], f, " ")
      print (f[c] == "" ? "-" : f[c])
    }' "$results"
}

# "median (min-max)" of the ops/s of label/workload/size.
rate_cell() { # label workload size
  local median
  median=$(field "$1" "$2" "$3" 6)
  awk -v l="$1" -v w="$2" -v s="$3" -v m="$median" '
    $1 == l && $2 == w && $3 == s {
      r = ($6 ~ /^[0-9.]+$/) ? $6 + 0 : 0
      if (n == 0 || r < lo) lo = r
      if (n == 0 || r > hi) hi = r
      n++
    }
    END { if (n <= 1 || hi == 0) print m; else printf "%s (%d-%d)\n", m, lo, hi }' "$results"
}

# The store's CPU microseconds per operation over every run of
# label/workload/size: its CPU ticks over the operations the runs did.
cpu_cell() { # label workload size
  awk -v l="$1" -v w="$2" -v s="$3" -v hz="$clk_tck" '
    FILENAME == ARGV[1] && $1 == l && $2 == w && $3 == s { t += $4 }
    FILENAME == ARGV[2] && $1 == l && $2 == w && $3 == s && $5 ~ /^[0-9]+$/ { ops += $5 }
    END { if (ops == 0) print "-"; else printf "%.1f\n", t * 1e6 / hz / ops }' "$cpu" "$results"
}

# Sum of the errors of every run of label/workload/size.
errors_cell() { # label workload size
  awk -v l="$1" -v w="$2" -v s="$3" '
    $1 == l && $2 == w && $3 == s { if ($11 ~ /^[0-9]+$/) e += $11; else bad = 1 }
    END { print (bad ? "FAILED" : e + 0) }' "$results"
}

cpu_model=$(awk -F': ' '/^model name/ {print $2; exit}' /proc/cpuinfo)
commit=$(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo unknown)
if [[ -n $(git -C "$repo" status --porcelain 2>/dev/null | head -n 1) ]]; then commit+=" (with uncommitted changes)"; fi
{
  echo "# rkv vs memcached vs Redis over loopback TCP ($stamp)"
  echo
  echo "Produced by \`$invocation\` (rkv commit $commit, binaries from \`${build_dir#"$repo"/}\`)."
  echo
  echo "Machine: $(nproc) CPUs, ${cpu_model:-unknown CPU}, Linux $(uname -r)."
  echo "Load average (1/5/15 min) before the run: $load_at_start; after: $(cut -d' ' -f1-3 /proc/loadavg)."
  echo "Anything above the benchmark's own ~1.5 is other work sharing the CPUs: expect noise."
  echo "Client and stores share those CPUs. Versions: $(memcached -V 2>/dev/null || echo memcached),"
  echo "$(redis-server --version | sed -n 's/^Redis server v=\([^ ]*\).*/redis-server \1/p')."
  echo
  echo "Each cell was measured $repeat time(s) by \`rkv-ycsb\`: $records records loaded once per size (not"
  echo "timed), then $operations operations or $duration_s s, whichever ended first, uniform keys,"
  echo "$threads client thread(s), one connection each. Shown: the run with the median ops/s (its"
  echo "latencies), with the range of ops/s over all runs in brackets, and the errors of all"
  echo "runs. Latencies in microseconds, from a log-linear histogram (< 0.4% error). Every"
  echo "GET's value length was checked. rkv's GETs do not depend on --durability (they are reads"
  echo "the server's worker never sees), so a GET gap between rkv-wal and rkv-none is noise, e.g."
  echo "from where the scheduler puts the client and the server's threads on the CPUs."
  echo
  echo "\"store CPU us/op\": the store process's CPU time (user + system, all threads) over the"
  echo "timed runs of the cell, divided by their operations. rkv's polling threads spin while"
  echo "requests come (--poll=adaptive) and its client spins for its replies; memcached and Redis"
  echo "sleep in epoll between requests. On an otherwise idle machine spinning buys latency with"
  echo "CPU (a sleeping thread's wake-up is slow in a VM); on a busy one the spinner competes"
  echo "with the work around it. Read ops/s together with this column."
  echo
  echo "| store | durability |"
  echo "|---|---|"
  for l in "${labels[@]}"; do
    case $l in
      rkv-wal) echo "| rkv-wal | rkv-server --transport=tcp --durability=wal: acknowledged PUTs survive a process crash |" ;;
      rkv-sync) echo "| rkv-sync | rkv-server --transport=tcp --durability=sync: acknowledged PUTs survive power loss |" ;;
      rkv-none) echo "| rkv-none | rkv-server --transport=tcp --durability=none: memory only, like memcached |" ;;
      memcached) echo "| memcached | memcached -m 1024 -t 2 -U 0, text protocol, TCP_NODELAY: memory only |" ;;
      redis) echo "| redis | redis-server --save '' --appendonly no: memory only |" ;;
      redis-aof) echo "| redis-aof | redis-server --appendonly yes --appendfsync everysec: survives a process crash |" ;;
    esac
  done
  for size in 64 1024 16384; do
    echo
    echo "## ${size}-byte values"
    echo
    echo "| store | GET ops/s | GET p50 | GET p99 | GET store CPU us/op | PUT ops/s | PUT p50 | PUT p99 | PUT store CPU us/op | errors (GET/PUT runs) |"
    echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    for l in "${labels[@]}"; do
      echo "| $l | $(rate_cell "$l" get "$size") | $(field "$l" get "$size" 7) | $(field "$l" get "$size" 8)" \
        "| $(cpu_cell "$l" get "$size")" \
        "| $(rate_cell "$l" put "$size") | $(field "$l" put "$size" 9) | $(field "$l" put "$size" 10)" \
        "| $(cpu_cell "$l" put "$size")" \
        "| $(errors_cell "$l" get "$size")/$(errors_cell "$l" put "$size") |"
    done
  done
  echo
  if [[ ${#failed[@]} -gt 0 ]]; then
    echo "**RUNS WITH ERRORS (their figures are not valid): ${failed[*]}**"
    echo
  fi
  echo "## What this is not"
  echo
  echo "Loopback TCP is not RDMA. rkv's tcp transport is its fallback for machines"
  echo "without an RDMA device: the one-sided READs of a GET become request/response"
  echo "exchanges served by the server's polling thread. A GET whose location the client"
  echo "has cached (every key after its first GET here) is one READ of the block, one round"
  echo "trip as with memcached and Redis; a cold one is two (the key's neighbourhood, then"
  echo "the block). These figures compare the software path on equal terms; the RDMA"
  echo "figures come from bench/run-verbs.sh (SoftRoCE)."
  echo
  echo "## Raw lines (rkv-ycsb --output)"
  echo
  echo '```'
  cat "$results"
  echo '```'
} >"$out.tmp"
mv "$out.tmp" "$out"
log "wrote $out"
if [[ ${#failed[@]} -gt 0 ]]; then
  log "RUNS WITH ERRORS: ${failed[*]}"
  exit 1
fi
