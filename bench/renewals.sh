#!/usr/bin/env bash
# renewals.sh - lease renewals one coordinator answers, against the number
# of clients renewing (docs/design.md §8.8, "What renewals cost").
#
# Usage: bench/renewals.sh [--build_dir=DIR] [--mode=stream|unary]
#                          [--clients=N,N,...] [--duration_s=S]
#                          [--warmup_s=S] [--lease_ms=MS] [--channels=N]
#                          [--pin] [--out=FILE]
#
#   --build_dir   a configured and built tree holding
#                 coordinator/rkv-coordinator and bench/rkv-renewal-bench
#                 (default build/release). Nothing is built here.
#   --mode        how each client renews (default stream): stream, one
#                 KeepLease stream per client with each renewal a message
#                 on it, as librkv's clients renew; unary, one RenewLease
#                 call per renewal.
#   --clients     simulated clients per step (default
#                 100,1000,5000,10000,20000).
#   --duration_s  seconds counted per step (default 10).
#   --warmup_s    seconds run before counting, per step (default 2).
#   --lease_ms    the coordinator's --lease_ms (default 1000): each client
#                 renews every lease_ms / 3; the target is p99 below
#                 lease_ms / 10.
#   --channels    gRPC connections the load is spread over (default 4).
#   --pin         run the coordinator on CPU 1 and the load generator on
#                 CPU 0 (taskset), so that each has one core of its own.
#   --out         the report (default bench/results/renewals-<UTC time>.md);
#                 the CSV goes beside it (same name, .csv).
#
# Started here, on 127.0.0.1, and stopped on exit: one rkv-coordinator on
# a fresh temporary data dir (embedded store, no election: it leads) with
# no servers. A renewal needs none (RenewLease, or a request on a
# KeepLease stream): it answers the current map version
# (0 before any server joins), lease_ms and the fenced servers (none)
# from the published lease view, the same work as in a running cluster
# (the answer only grows by the fenced servers' ids). The load generator
# (rkv-renewal-bench) runs on the same machine and shares its cores with
# the coordinator; the report says how many there are.
#
# Exit status: 0 when every step ran; 1 when the bench failed; 2 for bad
# usage or a missing build.
set -euo pipefail

die() { printf 'renewals.sh: ERROR: %s\n' "$*" >&2; exit 2; }
log() { printf 'renewals.sh: %s\n' "$*" >&2; }

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
invocation="bench/renewals.sh${*:+ $*}"

build_dir=$repo/build/release
mode=stream
clients=100,1000,5000,10000,20000
duration_s=10
warmup_s=2
lease_ms=1000
channels=4
pin=0
out=""
for arg in "$@"; do
  case $arg in
    --build_dir=*) build_dir=${arg#*=} ;;
    --mode=*) mode=${arg#*=} ;;
    --clients=*) clients=${arg#*=} ;;
    --duration_s=*) duration_s=${arg#*=} ;;
    --warmup_s=*) warmup_s=${arg#*=} ;;
    --lease_ms=*) lease_ms=${arg#*=} ;;
    --channels=*) channels=${arg#*=} ;;
    --pin) pin=1 ;;
    --out=*) out=${arg#*=} ;;
    -h | --help) sed -n '2,/^set -euo/{/^#/s/^# \{0,1\}//p}' "$0"; exit 0 ;;
    *) die "unknown argument '$arg' (see --help)" ;;
  esac
done
for n in "$duration_s" "$lease_ms" "$channels"; do
  [[ $n =~ ^[0-9]+$ && $n -gt 0 ]] || die "not a positive integer: $n"
done
[[ $mode == stream || $mode == unary ]] || die "--mode must be stream or unary (not '$mode')"
[[ $warmup_s =~ ^[0-9]+$ ]] || die "--warmup_s must be a whole number of seconds"
[[ $clients =~ ^[0-9]+(,[0-9]+)*$ ]] || die "--clients must be a comma-separated list of counts"
build_dir=$(cd "$build_dir" 2>/dev/null && pwd -P) ||
  die "build dir missing; build first: cmake --preset release && cmake --build build/release -j2"
coordinator_bin=$build_dir/coordinator/rkv-coordinator
bench_bin=$build_dir/bench/rkv-renewal-bench
for b in "$coordinator_bin" "$bench_bin"; do
  [[ -x $b ]] || die "$b not built; build first: cmake --build $build_dir --target rkv-coordinator rkv-renewal-bench"
done
coordinator_cmd=("$coordinator_bin")
bench_cmd=("$bench_bin")
if ((pin)); then
  command -v taskset >/dev/null 2>&1 || die "--pin needs taskset (util-linux)"
  (($(nproc) >= 2)) || die "--pin needs at least 2 CPUs"
  coordinator_cmd=(taskset -c 1 "$coordinator_bin")
  bench_cmd=(taskset -c 0 "$bench_bin")
fi

stamp=$(date -u +%Y-%m-%dT%H%MZ)
load_at_start=$(cut -d' ' -f1-3 /proc/loadavg)
[[ -n $out ]] || out=$repo/bench/results/renewals-$stamp.md
mkdir -p "$(dirname "$out")"
csv=${out%.md}.csv

work=$(mktemp -d "${TMPDIR:-/tmp}/rkv-renewals.XXXXXX")
coordinator_pid=""
# shellcheck disable=SC2317  # invoked by the EXIT trap
cleanup() {
  if [[ -n $coordinator_pid ]]; then
    kill "$coordinator_pid" 2>/dev/null || true
    wait "$coordinator_pid" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

token_file=$work/token
head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$token_file"
: >"$work/stdout"
# The heartbeat timeout must be at least the lease.
heartbeat_timeout_ms=$((lease_ms > 3000 ? lease_ms : 3000))
"${coordinator_cmd[@]}" --listen=127.0.0.1:0 --data_dir="$work/data" --token_file="$token_file" \
  --servers=1 --replicas=1 --lease_ms="$lease_ms" --heartbeat_timeout_ms="$heartbeat_timeout_ms" \
  >"$work/stdout" 2>"$work/coordinator.log" &
coordinator_pid=$!
address=""
for ((i = 0; i < 300; i++)); do
  address=$(sed -n 's/^rkv-coordinator listening on \(.*\)$/\1/p' "$work/stdout")
  [[ -n $address ]] && break
  kill -0 "$coordinator_pid" 2>/dev/null || die "rkv-coordinator exited during startup: $(tail -n 5 "$work/coordinator.log")"
  sleep 0.1
done
[[ -n $address ]] || die "rkv-coordinator did not report its address within 30 s"
log "rkv-coordinator (pid $coordinator_pid) on $address; $mode mode, sweep $clients, ${duration_s}s per step"

bench_out=$work/bench.txt
status=0
"${bench_cmd[@]}" --coordinator="$address" --token_file="$token_file" --mode="$mode" --clients="$clients" \
  --duration_s="$duration_s" --warmup_s="$warmup_s" --channels="$channels" \
  --coordinator_pid="$coordinator_pid" --csv="$csv" | tee "$bench_out" >&2 || status=1

cpu_model=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)
{
  echo "# Lease renewals against the number of clients ($mode mode)"
  echo
  echo "Command: \`$invocation\` (UTC $stamp; CSV: \`$(basename "$csv")\`)"
  echo
  echo "Machine: $(nproc) CPUs (${cpu_model:-unknown}), $(uname -r); load average at start $load_at_start."
  if ((pin)); then
    echo "The coordinator ran on CPU 1 and the load generator on CPU 0 (\`--pin\`)."
  else
    echo "The coordinator and the load generator ran on the same machine and shared its CPUs."
  fi
  echo
  echo "One \`rkv-coordinator\` (embedded store, leading, \`--lease_ms=$lease_ms\`); \`rkv-renewal-bench\`"
  echo "simulates N clients, each renewing every lease_ms / 3 on its own open-loop schedule"
  echo "(random phase), over $channels gRPC connections; latency counts from each renewal's"
  echo "intended send time. Target: p99 below lease_ms / 10 = $((lease_ms / 10)) ms."
  echo "\`lag p99\` is how late the generator itself sent (when it is large, the generator,"
  echo "not the coordinator, is what saturated); \`cpu µs/renewal\` and \`cores\` are the"
  echo "coordinator's CPU time (user + system, all threads) over the counted window."
  echo
  if [[ $mode == stream ]]; then
    echo "Mode: \`stream\`. Each simulated client holds one \`KeepLease\` stream, as librkv's clients"
    echo "hold, opened before the warm-up, and sends each renewal as a message on it: a renewal costs"
    echo "the coordinator a message, not a call. A renewal answered more than a lease after it was"
    echo "due counts as an error (4); a stream that breaks fails its unanswered renewals with its code."
  else
    echo "Mode: \`unary\`. Each renewal is one \`RenewLease\` call (deadline: one lease), as before"
    echo "\`KeepLease\`: a renewal costs the coordinator a whole call."
  fi
  echo
  echo "| clients | offered/s | answered/s | p50 ms | p99 ms | max ms | errors | lag p99 ms | cpu µs/renewal | cores |"
  echo "|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|"
  tail -n +2 "$csv" | while IFS=, read -r n offered answered p50 p99 max errors codes lag cpu cores; do
    [[ -n $codes ]] && errors="$errors ($codes)"
    echo "| $n | $offered | $answered | $p50 | $p99 | $max | $errors | $lag | $cpu | $cores |"
  done
  echo
  if [[ $mode == stream ]]; then
    echo "Error codes are gRPC's (4: DEADLINE_EXCEEDED, the renewal took longer than a lease; any other:"
    echo "the code its stream ended with)."
  else
    echo "Error codes are gRPC's (4: DEADLINE_EXCEEDED, the renewal took longer than a lease)."
  fi
} >"$out"
log "report: $out"
exit "$status"
