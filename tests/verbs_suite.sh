#!/usr/bin/env bash
# Runs the verbs tests inside the SoftRoCE guest (deploy/softroce/), one test
# at a time: the transport and poll group conformance suites for tcp, verbs
# and the fault-injecting wrapper around verbs (RKV_TRANSPORTS), the verbs
# transport's own tests, a check that --transport=auto picks verbs, then the
# cross-process suites (single server, cluster, crash, linearizability,
# replication, failover, backup reads and 200 connections on one server)
# with RKV_TEST_TRANSPORT=verbs
# on the rxe0 address (RKV_TEST_SCALE sizes their loads: 5 crash cycles per
# durability mode, 30 linearizability histories, 40 keys per failover load
# thread).
# Prints "N passed, N failed" and exits non-zero when anything failed.
#
# Usage (inside the guest): tests/verbs_suite.sh BUILD_DIR
set -uo pipefail
build="${1:?usage: verbs_suite.sh BUILD_DIR}"
: "${RKV_RDMA_ADDR:?RKV_RDMA_ADDR is not set: run this inside the SoftRoCE guest}"
export RKV_TEST_TRANSPORT=verbs
export RKV_TEST_HOST="${RKV_RDMA_ADDR}"
# The guest emulates its CPU (10-50x slower than the host): smaller loads.
export RKV_TEST_SCALE="${RKV_TEST_SCALE:-0.1}"
export GTEST_COLOR=no

passed=0
failed=0
failures=()

run_one() {  # NAME TIMEOUT COMMAND...
  local name="$1" limit="$2"
  shift 2
  local start=$SECONDS
  if timeout --kill-after=10 "${limit}" "$@"; then
    passed=$((passed + 1))
    echo "verbs-suite: PASS ${name} ($((SECONDS - start)) s)"
  else
    failed=$((failed + 1))
    failures+=("${name}")
    echo "verbs-suite: FAIL ${name} ($((SECONDS - start)) s)"
  fi
}

run_gtest_binary() {  # BINARY TIMEOUT
  local bin="$1" limit="$2"
  if [ ! -x "${bin}" ]; then
    failed=$((failed + 1))
    failures+=("${bin} (not built)")
    echo "verbs-suite: FAIL ${bin} is missing"
    return
  fi
  local suite="" line list count=0
  list="$(mktemp /tmp/rkv-gtest-list.XXXXXX)"
  if ! "${bin}" --gtest_list_tests > "${list}" || ! grep -q '^ ' "${list}"; then
    failed=$((failed + 1))
    failures+=("${bin} (could not list its tests)")
    echo "verbs-suite: FAIL ${bin} lists no tests"
    rm -f "${list}"
    return
  fi
  while IFS= read -r line; do
    if [[ "${line}" =~ ^[^[:space:]] ]]; then
      suite="${line%%#*}"
      suite="${suite// /}"
    else
      local t="${line%%#*}"
      t="${t// /}"
      if [ -n "${t}" ]; then
        count=$((count + 1))
        run_one "${suite}${t}" "${limit}" "${bin}" --gtest_filter="${suite}${t}"
      fi
    fi
  done < "${list}"
  rm -f "${list}"
  echo "verbs-suite: ran ${count} tests of ${bin##*/}"
}

check_auto_picks_verbs() {
  local build="$1" dir
  dir="$(mktemp -d /tmp/rkv-auto.XXXXXX)"
  echo "auto-token" > "${dir}/token"
  timeout 60 "${build}/server/rkv-server" --listen="${RKV_RDMA_ADDR}:0" --data_dir="${dir}/data" \
    --token_file="${dir}/token" --transport=auto > "${dir}/out" 2> "${dir}/log" &
  local pid=$!
  for _ in $(seq 1 300); do
    grep -q "listening on" "${dir}/out" 2>/dev/null && break
    sleep 0.1
  done
  kill -TERM "${pid}" 2>/dev/null
  wait "${pid}" 2>/dev/null
  if grep -q "transport verbs" "${dir}/out"; then
    rm -rf "${dir}"
    return 0
  fi
  echo "--transport=auto did not pick verbs; server said:"
  cat "${dir}/out" "${dir}/log"
  rm -rf "${dir}"
  return 1
}

# The conformance suite's instances are named at startup: the same binary
# that ctest runs for tcp on the host.
export RKV_TRANSPORTS="tcp,verbs,fault(verbs)"
run_gtest_binary "${build}/common/transport/transport_conformance_test" 300
run_gtest_binary "${build}/common/transport/poll_group_conformance_test" 300
unset RKV_TRANSPORTS
run_gtest_binary "${build}/common/transport/verbs_transport_test" 300
export -f check_auto_picks_verbs
run_one "TransportAutoPicksVerbs" 120 bash -c 'check_auto_picks_verbs "$1"' _ "${build}"
run_gtest_binary "${build}/tests/rkv_integration_test" 900
run_gtest_binary "${build}/tests/rkv_remote_access_test" 300
run_gtest_binary "${build}/tests/rkv_cluster_test" 900
run_gtest_binary "${build}/tests/rkv_crash_test" 900
run_gtest_binary "${build}/tests/rkv_linearizability_test" 900
run_gtest_binary "${build}/tests/rkv_replication_test" 900
run_gtest_binary "${build}/tests/rkv_failover_test" 900
run_gtest_binary "${build}/tests/rkv_backup_read_test" 900
run_gtest_binary "${build}/tests/rkv_connection_scale_test" 600

echo
if [ "${failed}" -gt 0 ]; then
  printf 'verbs-suite: failed: %s\n' "${failures[@]}"
fi
echo "verbs-suite: ${passed} passed, ${failed} failed"
[ "${failed}" -eq 0 ]
