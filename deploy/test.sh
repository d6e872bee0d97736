#!/usr/bin/env bash
# One command from a fresh Debian 12 machine to every rkv test:
#   1. installs what is missing (deploy/install-deps.sh),
#   2. builds the release preset,
#   3. runs every test on the host with ctest: unit tests and the
#      cross-process suite over the tcp transport,
#   4. boots a QEMU guest with SoftRoCE (deploy/softroce/run-in-guest.sh) and
#      runs the verbs transport tests and the same cross-process suite with
#      --transport=verbs there, one test at a time.
# Exits non-zero when any step or any test fails, or the guest does not
# come up.
#
# Environment: RKV_SKIP_VERBS=1 skips step 4 (for a quick local loop only;
# it is never set in CI).
set -euo pipefail
cd "$(dirname "$0")/.."

deploy/install-deps.sh
deploy/build.sh release

echo "== host tests (unit + cross-process suite over tcp)"
ctest --test-dir build/release --output-on-failure --timeout 900

if [ "${RKV_SKIP_VERBS:-0}" = "1" ]; then
  echo "== verbs suite skipped (RKV_SKIP_VERBS=1)"
  exit 0
fi

echo "== verbs suite in the SoftRoCE guest"
# A generous boot limit: on a shared, busy machine the emulated guest can
# take several minutes to boot.
deploy/softroce/run-in-guest.sh --timeout 2400 --boot-timeout 600 -- tests/verbs_suite.sh "$(pwd)/build/release"
