#!/usr/bin/env bash
# leader_failover.sh - what a change of the leading coordinator costs under
# load: kill -9 of the leader, time until another coordinator leads and
# answers, the longest stall and the longest call of the clients across the
# change, failed calls; --rounds rounds, with p50 and max over them
# (rkv-leader-failover-bench: bench/leader_failover/rkv_leader_failover_bench.cc
# says what each figure measures).
#
# Usage: bench/leader_failover.sh [--build_dir=DIR] [--out=FILE] [BENCH FLAGS...]
#
#   --build_dir  a built tree with rkv-leader-failover-bench, rkv-server,
#                rkv-coordinator and kvctl (default build/release). Nothing
#                is built here.
#   --out        the report (default bench/results/leader-failover-<UTC
#                date>.md); the rounds go to the same name with .csv.
#   BENCH FLAGS  passed on, e.g. --rounds=10 (the default), --clients=6,
#                --steady_s=3, --settle_s=3 (rkv-leader-failover-bench --help).
#
# Needs etcd (Debian's etcd-server and etcd-client; deploy/install-deps.sh).
# Exit status: the bench's (0: every round ran and etcd's history checked
# out), 2 for bad usage or a missing build.
set -euo pipefail

die() { printf 'leader_failover.sh: ERROR: %s\n' "$*" >&2; exit 2; }

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
invocation="bench/leader_failover.sh${*:+ $*}"

build_dir=$repo/build/release
out=""
bench_flags=()
for arg in "$@"; do
  case $arg in
    --build_dir=*) build_dir=${arg#*=} ;;
    --out=*) out=${arg#*=} ;;
    -h | --help) sed -n '2,/^set -euo/{/^#/s/^# \{0,1\}//p}' "$0"; exit 0 ;;
    --csv=* | --md=*) die "$arg: the report's files are named by --out" ;;
    --*) bench_flags+=("$arg") ;;
    *) die "unknown argument '$arg' (see --help)" ;;
  esac
done
build_hint="build first: cmake --preset release && cmake --build build/release --target rkv-leader-failover-bench"
build_dir=$(cd "$build_dir" 2>/dev/null && pwd -P) || die "build dir missing; $build_hint"
bench_bin=$build_dir/bench/rkv-leader-failover-bench
for b in "$bench_bin" "$build_dir/server/rkv-server" "$build_dir/coordinator/rkv-coordinator"; do
  [[ -x $b ]] || die "$b not built; $build_hint"
done
for tool in etcd etcdctl; do
  command -v "$tool" >/dev/null 2>&1 || [[ -x /usr/bin/$tool ]] ||
    die "'$tool' not found (deploy/install-deps.sh installs it)"
done

stamp=$(date -u +%Y-%m-%dT%H%MZ)
[[ -n $out ]] || out=$repo/bench/results/leader-failover-$stamp.md
csv=${out%.md}.csv
mkdir -p "$(dirname "$out")"
work=$(mktemp -d "${TMPDIR:-/tmp}/rkv-leader-failover.XXXXXX")
trap 'rm -rf "$work"' EXIT

commit=$(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo unknown)
if [[ -n $(git -C "$repo" status --porcelain 2>/dev/null | head -n 1) ]]; then commit+=" (with uncommitted changes)"; fi
cpu_model=$(awk -F': ' '/^model name/ {print $2; exit}' /proc/cpuinfo)
load_at_start=$(cut -d' ' -f1-3 /proc/loadavg)

rc=0
"$bench_bin" --md="$work/body.md" --csv="$csv" ${bench_flags[@]+"${bench_flags[@]}"} || rc=$?
load_at_end=$(cut -d' ' -f1-3 /proc/loadavg)
[[ -s $work/body.md ]] || { echo "leader_failover.sh: the bench wrote no report (exit $rc)" >&2; exit "$((rc == 0 ? 1 : rc))"; }
{
  echo "# Leader failover of the coordinators under load ($stamp)"
  echo
  echo "Produced by \`$invocation\` (rkv commit $commit, binaries from \`${build_dir#"$repo"/}\`);"
  echo "the rounds are in \`$(basename "$csv")\`."
  echo
  echo "Machine: $(nproc) CPUs, ${cpu_model:-unknown CPU}, Linux $(uname -r); load average before"
  echo "the run $load_at_start, after $load_at_end. etcd, the coordinators, the servers and the clients"
  echo "share these CPUs."
  echo
  cat "$work/body.md"
} >"$out"
echo "leader_failover.sh: report: $out" >&2
exit "$rc"
