#!/usr/bin/env bash
# failover.sh - what the failure of a shard's primary costs the clients
# under load: kill -9 (--events=kill) or SIGSTOP (--events=stop) of a server
# that is the primary of some shards, in a cluster of one coordinator (no
# etcd) and N servers with R replicas on this machine (tcp, loopback);
# per-key unavailability of the victim's keys, the longest stall of the
# whole load, throughput per second, failed calls by status code, map
# versions committed, time until every shard has R UP replicas again;
# --rounds rounds per event, with p50 and max over them
# (rkv-failover-bench: bench/failover/rkv_failover_bench.cc and its --help
# say what each figure measures). --events=none adds control rounds with
# no fault at all, where every server marked DOWN is a false failover; in
# every round the report counts live servers marked DOWN and the
# coordinator's probes of suspected servers (sent, refuted, confirmed).
# --stress_cpus loads the machine meanwhile, to see suspicion under load.
# --verbs runs the whole bench over verbs inside the SoftRoCE guest
# (deploy/softroce/run-in-guest.sh): emulation (QEMU TCG) slows every step,
# so compare its figures with each other, not with a tcp run's.
#
# Usage: bench/failover.sh [--build_dir=DIR] [--out=FILE] [--stress_cpus=N]
#                          [--verbs [--guest_timeout_s=S]] [BENCH FLAGS...]
#
#   --build_dir  a built tree with rkv-failover-bench, rkv-server,
#                rkv-coordinator and kvctl (default build/release). Nothing
#                is built here.
#   --out        the report (default bench/results/failover-<UTC date>.md);
#                the rounds go to the same name with .csv.
#   --stress_cpus  N > 0: runs `stress-ng --cpu N` (N CPU-bound workers) on
#                this machine for the whole bench run, from before the
#                cluster starts until this script exits (killed then,
#                whatever the outcome); the report's header says so.
#                Needs stress-ng. 0 (the default): none.
#   --verbs      in the SoftRoCE guest over verbs (rxe0), the report
#                named failover-verbs-<UTC date>.md by default; the guest
#                gets --guest_timeout_s (default 1800), boot included.
#   BENCH FLAGS  passed on, e.g. --rounds=3 (the default), --events=kill,stop
#                (the default; any of kill, stop, none in the order given)
#                or --event=none, --servers=3, --replicas=3, --clients=4,
#                --records=300, --steady_s=3, --window_s=20
#                (rkv-failover-bench --help lists them all).
#
# Exit status: the bench's (0: every round ran and the cluster had R UP
# replicas of every shard again after each), 2 for bad usage or a missing
# build.
set -euo pipefail

die() { printf 'failover.sh: ERROR: %s\n' "$*" >&2; exit 2; }

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
invocation="bench/failover.sh${*:+ $*}"

build_dir=$repo/build/release
out=""
stress_cpus=0
verbs=0
guest_timeout_s=1800
bench_flags=()
help=0
guest_args=()  # what the guest's run of this script is given
for arg in "$@"; do
  case $arg in
    --out=*) ;;
    --guest_timeout_s=*) ;;
    *) guest_args+=("$arg") ;;
  esac
  case $arg in
    --build_dir=*) build_dir=${arg#*=} ;;
    --out=*) out=${arg#*=} ;;
    --stress_cpus=*) stress_cpus=${arg#*=} ;;
    --verbs) verbs=1 ;;
    --guest_timeout_s=*) guest_timeout_s=${arg#*=} ;;
    -h | --help) help=1 ;;
    --csv=* | --md=*) die "$arg: the report's files are named by --out" ;;
    --*) bench_flags+=("$arg") ;;
    *) die "unknown argument '$arg' (see --help)" ;;
  esac
done
bench_bin=$build_dir/bench/rkv-failover-bench
if ((help)); then
  sed -n '2,/^set -euo/{/^#/s/^# \{0,1\}//p}' "$0"
  if [[ -x $bench_bin ]]; then echo; "$bench_bin" --help; fi
  exit 0
fi
[[ $stress_cpus =~ ^[0-9]+$ ]] && ((10#$stress_cpus <= 1024)) ||
  die "--stress_cpus=$stress_cpus: a number of CPU workers, 0..1024 (0: no stress)"
stress_cpus=$((10#$stress_cpus))
build_hint="build first: cmake --preset release && cmake --build build/release --target rkv-failover-bench rkv-server rkv-coordinator kvctl"
build_dir=$(cd "$build_dir" 2>/dev/null && pwd -P) || die "build dir missing; $build_hint"
bench_bin=$build_dir/bench/rkv-failover-bench
for b in "$bench_bin" "$build_dir/server/rkv-server" "$build_dir/coordinator/rkv-coordinator"; do
  [[ -x $b ]] || die "$b not built; $build_hint"
done

stamp=$(date -u +%Y-%m-%dT%H%MZ)
if ((verbs)) && [[ ${RKV_IN_GUEST:-0} != 1 ]]; then
  # The host's part: the same command inside the guest, whose report comes
  # back through --out.
  [[ $guest_timeout_s =~ ^[0-9]+$ ]] && ((guest_timeout_s >= 300)) ||
    die "--guest_timeout_s=$guest_timeout_s: seconds, at least 300"
  [[ -n $out ]] || out=$repo/bench/results/failover-verbs-$stamp.md
  [[ $out == *.md ]] || die "--out=$out: the report's name must end in .md"
  raw=$(mktemp -d "${TMPDIR:-/tmp}/rkv-failover-verbs.XXXXXX")
  rc=0
  (cd "$repo" && RKV_FAILOVER_INVOCATION="$invocation" deploy/softroce/run-in-guest.sh --timeout "$guest_timeout_s" \
    --out "$raw" -- bench/failover.sh ${guest_args[@]+"${guest_args[@]}"}) || rc=$?
  if [[ -s $raw/failover.md ]]; then
    mkdir -p "$(dirname "$out")"
    cp "$raw/failover.md" "$out"
    if [[ -f $raw/failover.csv ]]; then
      cp "$raw/failover.csv" "${out%.md}.csv"
      sed -i "s|\`failover.csv\`|\`$(basename "${out%.md}.csv")\`|" "$out"
    fi
    echo "failover.sh: report: $out (raw files in $raw)" >&2
  else
    echo "failover.sh: no report came back from the guest (exit $rc; files in $raw)" >&2
    ((rc != 0)) || rc=1
  fi
  exit "$rc"
fi
if ((verbs)); then
  # Inside the guest: the cluster runs over verbs on rxe0, and the report
  # goes where the host collects it.
  export RKV_TEST_TRANSPORT=verbs RKV_TEST_HOST=${RKV_RDMA_ADDR:?}
  out=${RKV_GUEST_OUT:?}/failover.md
  invocation=${RKV_FAILOVER_INVOCATION:-$invocation}
fi
[[ -n $out ]] || out=$repo/bench/results/failover-$stamp.md
[[ $out == *.md ]] || die "--out=$out: the report's name must end in .md"
csv=${out%.md}.csv
mkdir -p "$(dirname "$out")"
work=$(mktemp -d "${TMPDIR:-/tmp}/rkv-failover.XXXXXX")
source "$repo/bench/stress.sh"
cleanup() {
  stress_stop
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

commit=$(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo unknown)
if [[ -n $(git -C "$repo" status --porcelain 2>/dev/null | head -n 1) ]]; then commit+=" (with uncommitted changes)"; fi
cpu_model=$(awk -F': ' '/^model name/ {print $2; exit}' /proc/cpuinfo)
load_at_start=$(cut -d' ' -f1-3 /proc/loadavg)

stress_start "$stress_cpus" "$work/stress-ng.log" || die "$stress_error"
[[ -z $stress_pid ]] || echo "failover.sh: stress-ng --cpu $stress_cpus running (pid $stress_pid)" >&2

rc=0
"$bench_bin" --md="$work/body.md" --csv="$csv" ${bench_flags[@]+"${bench_flags[@]}"} || rc=$?
load_at_end=$(cut -d' ' -f1-3 /proc/loadavg)
stress_check "$work/stress-ng.log"
# Bad usage: the bench said why and wrote nothing.
((rc == 2)) && exit 2
[[ -s $work/body.md ]] || { echo "failover.sh: the bench wrote no report (exit $rc)" >&2; exit "$((rc == 0 ? 1 : rc))"; }
{
  echo "# Failover of a shard's primary under load ($stamp)"
  echo
  echo "Produced by \`$invocation\` (rkv commit $commit, binaries from \`${build_dir#"$repo"/}\`);"
  echo "the rounds are in \`$(basename "$csv")\`."
  echo
  echo "Machine: $(nproc) CPUs, ${cpu_model:-unknown CPU}, Linux $(uname -r); load average before"
  if [[ -n $stress_note ]]; then
    echo "the run $load_at_start (before stress-ng started), after $load_at_end. The coordinator, the servers,"
    echo "the clients and stress-ng share these CPUs: the run was made $stress_note."
  else
    echo "the run $load_at_start, after $load_at_end. The coordinator, the servers and the clients"
    echo "share these CPUs."
  fi
  echo
  cat "$work/body.md"
} >"$out"
echo "failover.sh: report: $out" >&2
exit "$rc"
