#!/usr/bin/env bash
# Runs the verbs tests inside the SoftRoCE guest (deploy/softroce/), one test
# at a time: the transport and poll group conformance suites for verbs and
# the fault-injecting wrapper around verbs (RKV_TRANSPORTS), the verbs
# transport's own tests, a check that --transport=auto picks verbs, then the
# cross-process suites (single server, cluster, crash, linearizability,
# replication, failover, backup reads, 200 connections on one server and a
# coordinator leader killed under load) with RKV_TEST_TRANSPORT=verbs; what
# only the control plane does (the coordinator's flags and restarts, etcd)
# is left to the host's run
# on the rxe0 address (RKV_TEST_SCALE sizes their loads: 5 crash cycles in the
# wal durability mode, 30 linearizability histories, 40 keys per failover load
# thread).
#
# Prints one line per test as it ends ("[ 37/412] PASS Name (2 s)"; SKIP
# with gtest's reason; FAIL followed by the last lines of its output) and
# writes each test's whole output to a file of its own under LOG_DIR:
# $RKV_GUEST_OUT/verbs-logs when run by deploy/softroce/run-in-guest.sh
# --out (deploy/test.sh), else a new folder under /tmp. Ends with
# "verbs-suite: N passed, N failed, N skipped" and writes the same counts,
# the failures' names and the skips' reasons to LOG_DIR/summary for
# deploy/test.sh. Exits non-zero when anything failed, or, with
# RKV_NO_SKIP=1 (CI), when anything was skipped.
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
# Set per binary below: the conformance suites only.
unset RKV_TRANSPORTS

if [ -n "${RKV_GUEST_OUT:-}" ]; then
  log_dir="${RKV_GUEST_OUT}/verbs-logs"
else
  log_dir="$(mktemp -d /tmp/rkv-verbs-logs.XXXXXX)"
fi
mkdir -p "${log_dir}"
# Lines of a failure's output shown on the console (the rest is in its file).
readonly FAILURE_TAIL=40

# The plan: every test, listed before the first runs so that each line can
# say how far the suite has got. A test is a gtest case of a binary, or a
# shell function (plan_kind "fn").
plan_kind=()
plan_name=()
plan_limit=()
plan_target=()
planned=0
passed=0
failed=0
skipped=0
failures=()
skips=()

plan_gtest_binary() {  # BINARY TIMEOUT [ENV_ASSIGNMENT]
  local bin="$1" limit="$2" env="${3:-}"
  local suite="" line t listed=0
  if [ ! -x "${bin}" ]; then
    failed=$((failed + 1))
    failures+=("${bin##*/} (not built)")
    echo "verbs-suite: FAIL ${bin} is missing"
    return
  fi
  local list
  if ! list="$(env ${env} "${bin}" --gtest_list_tests 2>&1)" || ! grep -q '^ ' <<< "${list}"; then
    failed=$((failed + 1))
    failures+=("${bin##*/} (could not list its tests)")
    echo "verbs-suite: FAIL ${bin} lists no tests:"
    printf '%s\n' "${list}" | tail -n "${FAILURE_TAIL}" | sed 's/^/    /'
    return
  fi
  while IFS= read -r line; do
    if [[ "${line}" =~ ^[^[:space:]] ]]; then
      suite="${line%%#*}"
      suite="${suite// /}"
    else
      t="${line%%#*}"
      t="${t// /}"
      if [ -n "${t}" ]; then
        plan_kind+=("gtest")
        plan_name+=("${suite}${t}")
        plan_limit+=("${limit}")
        plan_target+=("${env}|${bin}")
        listed=$((listed + 1))
      fi
    fi
  done <<< "${list}"
  planned=$((planned + listed))
}

plan_function() {  # NAME TIMEOUT FUNCTION
  plan_kind+=("fn")
  plan_name+=("$1")
  plan_limit+=("$2")
  plan_target+=("$3")
  planned=$((planned + 1))
}

# The file a test's output goes to: its name with / and other odd
# characters made safe.
log_file_for() { printf '%s/%s.log' "${log_dir}" "$(printf '%s' "$1" | tr -c 'A-Za-z0-9._-' '_')"; }

# gtest's reason for a skip: the lines between "Skipped" and "[  SKIPPED ]".
skip_reason() {  # LOG
  awk '/: Skipped$/ { on = 1; next } /^\[  SKIPPED \]/ { on = 0 } on' "$1" | tr '\n' ' ' | sed 's/ *$//'
}

run_planned() {  # INDEX
  local i="$1" name="${plan_name[$1]}" limit="${plan_limit[$1]}" target="${plan_target[$1]}"
  local log start rc verdict
  log="$(log_file_for "${name}")"
  start=$SECONDS
  if [ "${plan_kind[$i]}" = "gtest" ]; then
    local env="${target%%|*}" bin="${target#*|}"
    timeout --kill-after=10 "${limit}" env ${env} "${bin}" --gtest_filter="${name}" > "${log}" 2>&1
  else
    timeout --kill-after=10 "${limit}" bash -c "${target} \"\$1\"" _ "${build}" > "${log}" 2>&1
  fi
  rc=$?
  if [ "${rc}" -eq 0 ] && grep -q '^\[  SKIPPED \] ' "${log}"; then
    verdict=SKIP
    skipped=$((skipped + 1))
    skips+=("${name}: $(skip_reason "${log}")")
  elif [ "${rc}" -eq 0 ]; then
    verdict=PASS
    passed=$((passed + 1))
  else
    verdict=FAIL
    failed=$((failed + 1))
    [ "${rc}" -ge 124 ] && [ "${rc}" -le 137 ] && [ "${rc}" -ne 125 ] && name+=" (timed out after ${limit} s)"
    failures+=("${name}")
  fi
  printf '[%*d/%d] %s %s (%d s)\n' "${#planned}" "$((i + 1))" "${planned}" "${verdict}" "${name}" \
    "$((SECONDS - start))"
  case "${verdict}" in
    SKIP) echo "    ${skips[-1]#*: }" ;;
    FAIL)
      echo "    last ${FAILURE_TAIL} lines of ${log}:"
      tail -n "${FAILURE_TAIL}" "${log}" | sed 's/^/    | /'
      ;;
  esac
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
    cat "${dir}/out"
    rm -rf "${dir}"
    return 0
  fi
  echo "--transport=auto did not pick verbs; server said:"
  cat "${dir}/out" "${dir}/log"
  rm -rf "${dir}"
  return 1
}
export -f check_auto_picks_verbs

# The conformance suite's instances are named at startup: the same binary
# that ctest runs for tcp on the host, here for verbs and the fault wrapper
# around it (tcp's instances are the host's).
transports="RKV_TRANSPORTS=verbs,fault(verbs)"
plan_gtest_binary "${build}/common/transport/transport_conformance_test" 300 "${transports}"
plan_gtest_binary "${build}/common/transport/poll_group_conformance_test" 300 "${transports}"
plan_gtest_binary "${build}/common/transport/verbs_transport_test" 300
plan_function "TransportAutoPicksVerbs" 120 check_auto_picks_verbs
plan_gtest_binary "${build}/tests/rkv_integration_test" 900
plan_gtest_binary "${build}/tests/rkv_remote_access_test" 300
# The connect handshake's replay tests (a captured proof replayed byte for
# byte, a proof for one server sent to another) over rdma_cm's private
# data, a flood of 2,000 bad-token connection requests screened out before
# any queue pair exists while a good client works, and a peer whose queue
# pair vanishes without a disconnect released within the probe bound; the
# rest of the hostile suite is tcp's raw sockets and frames.
plan_gtest_binary "${build}/tests/rkv_hostile_client_test" 600 \
  "GTEST_FILTER=HostileClientTest.ACapturedProofIsRefusedWhenReplayed:HostileClientTest.AProofForOneServerIsRefusedByAnother:HostileClientTest.AFloodOfBadTokenConnectsDoesNotKeepAGoodClientOut:HostileClientTest.APeerThatVanishesIsReleasedWithinTheProbeBound"
# Less the coordinator's flag and restart tests: they are the control
# plane's alone (gRPC on the host's loopback either way); the coordinator
# killed under running clients stays.
plan_gtest_binary "${build}/tests/rkv_cluster_test" 900 \
  "GTEST_FILTER=-CoordinatorFlagsTest.*:CoordinatorRestartTest.*"
# The crash suite in the default durability mode (wal) only: what sync adds
# is below the transport, and the host and sanitizer runs cover it.
plan_gtest_binary "${build}/tests/rkv_crash_test" 900 "GTEST_FILTER=*/wal"
# Less the histories across kills of the leading coordinator: the leader
# killed under a load over verbs is HaTest's below.
plan_gtest_binary "${build}/tests/rkv_linearizability_test" 900 \
  "GTEST_FILTER=-LinearizabilityTest.HistoriesAcrossKillsOfTheLeadingCoordinator"
plan_gtest_binary "${build}/tests/rkv_replication_test" 900
plan_gtest_binary "${build}/tests/rkv_failover_test" 900
plan_gtest_binary "${build}/tests/rkv_backup_read_test" 900
# Expiry on the one-sided GET (the deadline in the block READ).
plan_gtest_binary "${build}/tests/rkv_expiry_test" 600
plan_gtest_binary "${build}/tests/rkv_connection_scale_test" 600
# Several coordinators on etcd: the leader killed under a load over verbs
# (the etcd suites of the control plane alone run on the host).
plan_gtest_binary "${build}/tests/rkv_ha_test" 600 "GTEST_FILTER=HaTest.KillingTheLeader*"

echo "verbs-suite: ${planned} tests, one at a time; each one's output in ${log_dir}/"
for i in "${!plan_name[@]}"; do
  run_planned "${i}"
done

{
  echo "passed ${passed}"
  echo "failed ${failed}"
  echo "skipped ${skipped}"
  for f in "${failures[@]}"; do echo "failure ${f}"; done
  for s in "${skips[@]}"; do echo "skip ${s}"; done
} > "${log_dir}/summary"

echo
[ "${failed}" -eq 0 ] || printf 'verbs-suite: failed: %s\n' "${failures[@]}"
[ "${skipped}" -eq 0 ] || printf 'verbs-suite: skipped: %s\n' "${skips[@]}"
echo "verbs-suite: ${passed} passed, ${failed} failed, ${skipped} skipped (logs in ${log_dir}/)"
[ "${failed}" -eq 0 ] || exit 1
if [ "${skipped}" -gt 0 ] && [ "${RKV_NO_SKIP:-0}" = "1" ]; then
  echo "verbs-suite: RKV_NO_SKIP=1: every test must run here, so a skip fails the suite"
  exit 1
fi
exit 0
