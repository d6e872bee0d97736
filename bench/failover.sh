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
# say what each figure measures).
#
# Usage: bench/failover.sh [--build_dir=DIR] [--out=FILE] [BENCH FLAGS...]
#
#   --build_dir  a built tree with rkv-failover-bench, rkv-server,
#                rkv-coordinator and kvctl (default build/release). Nothing
#                is built here.
#   --out        the report (default bench/results/failover-<UTC date>.md);
#                the rounds go to the same name with .csv.
#   BENCH FLAGS  passed on, e.g. --rounds=3 (the default), --events=kill,stop
#                (the default) or --event=stop, --servers=3, --replicas=3,
#                --clients=4, --records=300, --steady_s=3, --window_s=20
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
bench_flags=()
help=0
for arg in "$@"; do
  case $arg in
    --build_dir=*) build_dir=${arg#*=} ;;
    --out=*) out=${arg#*=} ;;
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
build_hint="build first: cmake --preset release && cmake --build build/release --target rkv-failover-bench rkv-server rkv-coordinator kvctl"
build_dir=$(cd "$build_dir" 2>/dev/null && pwd -P) || die "build dir missing; $build_hint"
bench_bin=$build_dir/bench/rkv-failover-bench
for b in "$bench_bin" "$build_dir/server/rkv-server" "$build_dir/coordinator/rkv-coordinator"; do
  [[ -x $b ]] || die "$b not built; $build_hint"
done

stamp=$(date -u +%Y-%m-%dT%H%MZ)
[[ -n $out ]] || out=$repo/bench/results/failover-$stamp.md
[[ $out == *.md ]] || die "--out=$out: the report's name must end in .md"
csv=${out%.md}.csv
mkdir -p "$(dirname "$out")"
work=$(mktemp -d "${TMPDIR:-/tmp}/rkv-failover.XXXXXX")
trap 'rm -rf "$work"' EXIT

commit=$(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo unknown)
if [[ -n $(git -C "$repo" status --porcelain 2>/dev/null | head -n 1) ]]; then commit+=" (with uncommitted changes)"; fi
cpu_model=$(awk -F': ' '/^model name/ {print $2; exit}' /proc/cpuinfo)
load_at_start=$(cut -d' ' -f1-3 /proc/loadavg)

rc=0
"$bench_bin" --md="$work/body.md" --csv="$csv" ${bench_flags[@]+"${bench_flags[@]}"} || rc=$?
load_at_end=$(cut -d' ' -f1-3 /proc/loadavg)
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
  echo "the run $load_at_start, after $load_at_end. The coordinator, the servers and the clients"
  echo "share these CPUs."
  echo
  cat "$work/body.md"
} >"$out"
echo "failover.sh: report: $out" >&2
exit "$rc"
