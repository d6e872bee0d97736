#!/usr/bin/env bash
# One command from a fresh Debian 12 machine to every rkv test, in four
# stages and one summary:
#   1. dependencies: installs what is missing (deploy/install-deps.sh),
#   2. build: builds the release preset (deploy/build.sh), ninja's [n/N]
#      progress with the elapsed time,
#   3. host tests: every test ctest knows, on the host (unit tests and the
#      cross-process suite over the tcp transport), one line per test as it
#      ends; unit tests one per CPU at a time, each cross-process suite's
#      tests alone (RUN_SERIAL),
#   4. verbs suite: boots a QEMU guest with SoftRoCE
#      (deploy/softroce/run-in-guest.sh) and runs tests/verbs_suite.sh there:
#      the verbs transport tests and the same cross-process suite with
#      --transport=verbs, one test at a time, one line per test.
# Stage 4 runs whatever stage 3 found: a host failure does not hide the
# guest's results. If stage 1 or 2 fails, nothing can be tested, and the
# summary says so.
#
# Every test's whole output is kept in build/release/test-logs/:
# host/tests/NAME.log, verbs/verbs-logs/NAME.log; the console shows the last
# lines of each failure. The summary gives each stage's time and its passed,
# failed and skipped counts, the failures' names and the skips' reasons.
# A test whose machine cannot give it what it needs (root, a mount
# namespace, an RDMA device) is skipped with its reason, never failed.
#
# Exits 0 when nothing failed (skips are listed), 1 when a stage or a test
# failed, or when something was skipped and RKV_NO_SKIP=1.
#
# Environment:
#   RKV_NO_SKIP=1       every test must run here: a skipped test or stage
#                       fails the run (CI sets it: .ci/run)
#   RKV_SKIP_VERBS=1    leaves out stage 4, a skipped stage (for a quick
#                       local loop only; CI never sets it)
#   RKV_TEST_REGEX=RE   stage 3 runs only the tests `ctest -R RE` selects
#                       (checking a few tests, or this script)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
source deploy/test-stages.sh

build="build/release"
logs="${build}/test-logs"

run() {
  if ! stage_step "dependencies" deploy/install-deps.sh; then
    stage_not_run "build" "not run: the dependencies did not install"
    return
  fi
  if ! stage_step "build" deploy/build.sh release; then
    stage_not_run "host tests" "not run: the build failed"
    stage_not_run "verbs suite" "not run: the build failed"
    return
  fi

  local regex=()
  [ -z "${RKV_TEST_REGEX:-}" ] || regex=(-R "${RKV_TEST_REGEX}")
  # Two tests at a time (one per CPU): the unit tests; every cross-process
  # suite is RUN_SERIAL and runs alone, as the sanitizer stages run them.
  stage_ctest "host tests" "${logs}/host" --test-dir "${build}" --timeout 900 \
    --parallel "$(nproc 2>/dev/null || echo 2)" "${regex[@]}"

  if [ "${RKV_SKIP_VERBS:-0}" = "1" ]; then
    stage_not_run "verbs suite" "skipped: RKV_SKIP_VERBS=1"
    return
  fi
  stage_banner "verbs suite: SoftRoCE guest, one line per test; each one's output in ${logs}/verbs/verbs-logs/"
  rm -rf "${logs}/verbs"
  mkdir -p "${logs}/verbs"
  local start=$SECONDS rc
  # A generous boot limit: on a shared, busy machine the emulated guest can
  # take several minutes to boot.
  deploy/softroce/run-in-guest.sh --timeout 2400 --boot-timeout 600 --out "${logs}/verbs" \
    -- tests/verbs_suite.sh "$(pwd)/${build}" 2>&1 | tee "${logs}/verbs/console.log"
  rc=${PIPESTATUS[0]}
  stage_counts "verbs suite" $((SECONDS - start)) "${logs}/verbs/verbs-logs/summary" "${rc}"
  case "${rc}" in
    124) echo "== verbs suite: the guest ran past its time limit (exit status 124)" ;;
    125) echo "== verbs suite: the guest harness failed (exit status 125; see ${logs}/verbs/console.log)" ;;
  esac
}

run
stage_summary deploy/test.sh "${logs}/"
