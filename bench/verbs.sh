#!/usr/bin/env bash
# verbs.sh - runs bench/run-verbs.sh inside a SoftRoCE guest and files its
# report as bench/results/verbs-<UTC date>.md.
#
# Usage: bench/verbs.sh [--mtu BYTES] [BUILD_DIR]   (default build/release)
#
#   --mtu BYTES  MTU of the guest's link under rxe0 (default 9000: jumbo
#                frames, as RoCE fabrics are run, giving rxe a 4096-byte
#                path MTU; 1500 gives 1024, and then a 1 KiB value's block,
#                1 KiB plus header and key, needs two packets where the raw
#                1 KiB READ needs one). The report states both MTUs.
#
# Nothing is built here: build first (cmake --preset release && cmake
# --build build/release -j2). The guest comes from
# deploy/softroce/run-in-guest.sh (QEMU TCG; the first run downloads a
# kernel), with --pin-vcpu0: guest CPU 0, where the clients run, gets a
# host CPU to itself. RKV_BENCH_* variables are passed through to run-verbs.sh (see
# there). The guest's raw files (ycsb.txt, perftest.txt, server.log) stay in
# a temporary folder that is printed at the end.
#
# Exit status: run-verbs.sh's (0 clean, 1 errors in a step, 2 usage), 124
# when the guest timed out, 125 when the guest could not be started, or 2
# when the report is missing.
set -euo pipefail

die() { printf 'verbs.sh: ERROR: %s\n' "$*" >&2; exit 2; }

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
mtu=9000
while [[ $# -gt 0 ]]; do
  case $1 in
    --mtu) mtu=${2:-}; shift 2 || die "--mtu needs a value" ;;
    --mtu=*) mtu=${1#*=}; shift ;;
    -h | --help) sed -n '2,/^set -euo/{/^#/s/^# \{0,1\}//p}' "$0"; exit 0 ;;
    -*) die "unknown option: $1 (usage: bench/verbs.sh [--mtu BYTES] [BUILD_DIR])" ;;
    *) break ;;
  esac
done
[[ $mtu =~ ^[0-9]+$ ]] || die "--mtu must be a number of bytes, got '$mtu'"
[[ $# -le 1 ]] || die "usage: bench/verbs.sh [--mtu BYTES] [BUILD_DIR]"
build_arg=${1:-$repo/build/release}
build_dir=$(cd "$build_arg" 2>/dev/null && pwd -P) ||
  die "build dir '$build_arg' missing; build first: cmake --preset release && cmake --build build/release -j2"
for b in server/rkv-server bench/rkv-ycsb bench/rkv-read-lat; do
  [[ -x $build_dir/$b ]] || die "$build_dir/$b not built"
done

stamp=$(date -u +%Y-%m-%dT%H%MZ)
raw=$(mktemp -d "${TMPDIR:-/tmp}/rkv-verbs-results.XXXXXX")
export RKV_BENCH_COMMAND="bench/verbs.sh --mtu $mtu${*:+ $*} (in the guest: bench/run-verbs.sh ${build_dir#"$repo"/})"
rc=0
(cd "$repo" && deploy/softroce/run-in-guest.sh --timeout 1500 --mtu "$mtu" --pin-vcpu0 --out "$raw" -- \
  bench/run-verbs.sh "$build_dir") || rc=$?
if [[ -f $raw/verbs-results.md ]]; then
  mkdir -p "$repo/bench/results"
  cp "$raw/verbs-results.md" "$repo/bench/results/verbs-$stamp.md"
  printf 'verbs.sh: wrote bench/results/verbs-%s.md (raw files in %s)\n' "$stamp" "$raw" >&2
else
  printf 'verbs.sh: no report came back (guest exit code %d; files in %s)\n' "$rc" "$raw" >&2
  ((rc != 0)) || rc=2
fi
exit "$rc"
