#!/usr/bin/env bash
# Builds the libFuzzer targets (the `fuzz` preset: clang, ASan, UBSan) and
# runs each for a bounded time, starting from its seed corpus
# (fuzz/corpus/<target>/) and its regression inputs
# (fuzz/regressions/<target>/). The repository is never written: each run
# works in a copy under build/fuzz/runs/<target>/, where what it found new
# stays for a look (or `<target>_fuzz -merge=1 fuzz/corpus/<target> DIR`).
#
# Usage: deploy/fuzz.sh [SECONDS_PER_TARGET]   (default 20)
#        deploy/fuzz.sh --ci
# The first explores: each target for that long, from a seed of libFuzzer's
# choosing, so two runs differ. --ci repeats itself: each target runs the
# number of inputs fuzz/ci_runs.txt gives it with a fixed -seed
# ($RKV_FUZZ_SEED, default 1), so a dry run of CI's fuzz stage tries the
# same inputs as CI did (a hang still ends after 600 s a target).
# Environment: RKV_FUZZ_TARGETS="record apply" runs only those targets;
#              RKV_FUZZ_JOBS=N runs N targets at a time (default: 2, or 1
#              on a one-core machine).
#
# Prints one line per target (executions, executions per second, corpus
# size) and exits non-zero when any target crashed, hung, ran out of
# memory or broke a property, naming the input that did it; that input
# belongs in fuzz/regressions/<target>/ once the bug is fixed.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() { echo "usage: deploy/fuzz.sh [SECONDS_PER_TARGET | --ci]" >&2; exit 2; }
[ $# -le 1 ] || usage
ci=0
secs="${1:-20}"
seed="${RKV_FUZZ_SEED:-1}"
if [ "$secs" = "--ci" ]; then
  ci=1
  secs=600
  if ! [[ "$seed" =~ ^[1-9][0-9]{0,8}$ ]]; then
    echo "deploy/fuzz.sh: RKV_FUZZ_SEED must be a whole number from 1 to 999999999, not '$seed'" >&2
    exit 2
  fi
elif ! [[ "$secs" =~ ^[1-9][0-9]*$ ]]; then
  usage
fi
cores="$(nproc 2>/dev/null || echo 1)"
jobs="${RKV_FUZZ_JOBS:-$(( cores >= 2 ? 2 : 1 ))}"

if [ ! -f build/fuzz/CMakeCache.txt ]; then
  cmake --preset fuzz >/dev/null
fi
echo "fuzz: building the fuzz targets (clang, ASan, UBSan)"
cmake --build --preset fuzz -j "${cores}"

if [ -n "${RKV_FUZZ_TARGETS:-}" ]; then
  read -r -a targets <<<"${RKV_FUZZ_TARGETS}"
else
  targets=()
  for src in fuzz/*_fuzz.cc; do
    name="$(basename "$src" _fuzz.cc)"
    targets+=("$name")
  done
fi

# --ci: each target's run count from fuzz/ci_runs.txt, checked before
# anything runs (a target without a count, or a count that is not a number,
# stops the stage with the line to fix).
declare -A ci_runs=()
if [ "$ci" = 1 ]; then
  while read -r name count rest; do
    case "$name" in ''|'#'*) continue ;; esac
    if ! [[ "$count" =~ ^[1-9][0-9]*$ ]] || [ -n "$rest" ]; then
      echo "deploy/fuzz.sh: fuzz/ci_runs.txt: expected 'TARGET RUNS', not '$name $count $rest'" >&2
      exit 2
    fi
    ci_runs[$name]="$count"
  done < fuzz/ci_runs.txt
  for t in "${targets[@]}"; do
    if [ -z "${ci_runs[$t]:-}" ]; then
      echo "deploy/fuzz.sh: fuzz/ci_runs.txt gives no run count for target '$t'" >&2
      exit 2
    fi
  done
fi
runs="build/fuzz/runs"
mkdir -p "$runs"

# One target: a fresh working corpus from the seeds and regressions, a
# bounded run, its log kept in runs/<target>/log.
run_one() {
  local t="$1" dir="$runs/$1"
  rm -rf "$dir"
  mkdir -p "$dir/corpus" "$dir/artifacts"
  cp -r "fuzz/corpus/$t/." "$dir/corpus/"
  if [ -d "fuzz/regressions/$t" ]; then cp -r "fuzz/regressions/$t/." "$dir/corpus/"; fi
  local rc=0 fixed=() norandom=() clean_env=()
  # --ci: a fixed seed and count, no corpus reload, no address randomisation
  # and an environment of nothing but PATH, so that every address the target
  # compares (libFuzzer keeps compared values and mutates with them) is the
  # same in every run of the same build, wherever it runs (the stack's
  # place depends on the environment's size).
  if [ "$ci" = 1 ]; then
    fixed=(-seed="$seed" -runs="$2" -reload=0)
    norandom=(setarch -R)
    clean_env=(-i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin)
  fi
  # -timeout: one input may take at most 30 s (the harnesses bound their
  # own waits below that); -rss_limit_mb: 2 GiB, ASan included.
  "${norandom[@]}" env "${clean_env[@]}" ASAN_OPTIONS="detect_leaks=1:abort_on_error=0" \
    UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1" "build/fuzz/fuzz/${t}_fuzz" -max_total_time="$secs" \
    -timeout=30 -rss_limit_mb=2048 -artifact_prefix="$dir/artifacts/" -print_final_stats=1 "${fixed[@]}" \
    "$dir/corpus" >"$dir/log" 2>&1 || rc=$?
  echo "$rc" >"$dir/rc"
}
export -f run_one
export runs secs ci seed

if [ "$ci" = 1 ]; then
  echo "fuzz: ${#targets[@]} targets, the run counts of fuzz/ci_runs.txt, -seed=${seed}, ${jobs} at a time"
else
  echo "fuzz: ${#targets[@]} targets, ${secs} s each, ${jobs} at a time"
fi
for t in "${targets[@]}"; do printf '%s %s\n' "$t" "${ci_runs[$t]:-0}"; done |
  xargs -P "$jobs" -L 1 bash -c 'run_one "$1" "$2"' _

failed=0
printf '%-16s %12s %10s %8s  %s\n' target executions exec/s corpus result
for t in "${targets[@]}"; do
  dir="$runs/$t"
  rc="$(cat "$dir/rc" 2>/dev/null || echo 1)"
  # libFuzzer's final statistics: stat::number_of_executed_units and
  # stat::average_exec_per_sec; the corpus size is that of the directory.
  execs="$(sed -n 's/^stat::number_of_executed_units: *//p' "$dir/log" | tail -1)"
  rate="$(sed -n 's/^stat::average_exec_per_sec: *//p' "$dir/log" | tail -1)"
  corpus="$(find "$dir/corpus" -type f | wc -l)"
  result="ok"
  if [ "$rc" != "0" ]; then
    failed=1
    crash="$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$dir/log" | tail -1)"
    result="FAILED (exit $rc): input ${crash:-not saved}; log $dir/log"
  fi
  printf '%-16s %12s %10s %8s  %s\n' "$t" "${execs:-?}" "${rate:-?}" "$corpus" "$result"
done
if [ "$failed" != "0" ]; then
  echo "fuzz: FAILED; each failing target's log ends with the report" >&2
  for t in "${targets[@]}"; do
    if [ "$(cat "$runs/$t/rc")" != "0" ]; then
      echo "---- $t" >&2
      grep -v '^#\|^INFO' "$runs/$t/log" | tail -30 >&2
    fi
  done
  exit 1
fi
echo "fuzz: all targets ran clean"
