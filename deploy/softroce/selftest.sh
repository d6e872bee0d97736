#!/usr/bin/env bash
# selftest.sh - checks that the SoftRoCE guest of run-in-guest.sh is usable for
# RDMA: boots one guest and, inside it, runs
#   1. ibv_devices                 rxe0 is listed
#   2. ibv_devinfo -d rxe0         port 1 is PORT_ACTIVE
#   3. rping server + client       a few RDMA ping iterations over rdma_cm on
#                                  $RKV_RDMA_ADDR (rxe loopback)
#   4. ib_read_lat -d rxe0 -s 64 -n 200, server + client over loopback
#      (plain perftest, i.e. QP data exchanged over TCP; if that fails, the
#      same again with -R, rdma_cm)
# prints PASS/FAIL per check, checks that a file written to $RKV_GUEST_OUT
# comes back through --out, and exits non-zero on any failure.
#
# Usage: deploy/softroce/selftest.sh [--timeout SECONDS]
#   --timeout  limit for the whole guest run (default 300)
#
# Run without arguments on the host. (With --in-guest it is the guest-side
# half, which run-in-guest.sh starts.) Depends on run-in-guest.sh and the
# packages it needs, plus rdmacm-utils (rping), ibverbs-utils and perftest.
set -euo pipefail

script_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
self=$script_dir/$(basename "${BASH_SOURCE[0]}")

# ---------------------------------------------------------------------------
# Guest side.
# ---------------------------------------------------------------------------
in_guest() {
  local dev=${RKV_RDMA_DEV:-rxe0} addr=${RKV_RDMA_ADDR:-10.99.0.1}
  local report=${RKV_GUEST_OUT:-/tmp}/selftest.txt
  local work fails=0 out rc spid
  work=$(mktemp -d)
  : >"$report"

  result() { # PASS|FAIL name [detail]
    local line="$1 $2${3:+ ($3)}"
    printf 'selftest: %s\n' "$line"
    echo "$line" >>"$report"
    [[ $1 == PASS ]] || fails=$((fails + 1))
  }
  show() { sed 's/^/    | /' "$@"; }

  # 1. ibv_devices
  if out=$(timeout 60 ibv_devices 2>&1) && grep -qw "$dev" <<<"$out"; then
    result PASS ibv_devices
  else
    printf '%s\n' "$out" | show
    result FAIL ibv_devices "$dev not listed"
  fi

  # 2. ibv_devinfo
  if out=$(timeout 60 ibv_devinfo -d "$dev" 2>&1) && grep -q 'state:[[:space:]]*PORT_ACTIVE' <<<"$out"; then
    result PASS ibv_devinfo "$(grep -m1 'active_mtu' <<<"$out" | tr -s '\t ' ' ' | sed 's/^ //')"
  else
    printf '%s\n' "$out" | show
    result FAIL ibv_devinfo "port not PORT_ACTIVE"
  fi

  # 3. rping loopback
  local count=5 pings
  timeout 120 rping -s -a "$addr" -C "$count" -v >"$work/rping-server.log" 2>&1 &
  spid=$!
  rc=1
  for _ in 1 2 3; do
    sleep 2
    rc=0
    timeout 60 rping -c -a "$addr" -C "$count" -v >"$work/rping-client.log" 2>&1 || rc=$?
    [[ $rc -eq 0 ]] && break
  done
  local src=0
  wait "$spid" || src=$?
  pings=$(grep -c '^ping data' "$work/rping-client.log" || true)
  if [[ $rc -eq 0 && $src -eq 0 && $pings -eq $count ]]; then
    result PASS rping "$pings iterations"
  else
    show "$work/rping-client.log"
    show "$work/rping-server.log"
    result FAIL rping "client rc=$rc server rc=$src pings=$pings/$count"
  fi

  # 4. ib_read_lat loopback
  local mode flags ok="" port=18600 typical
  for mode in plain rdma_cm; do
    flags=()
    [[ $mode == rdma_cm ]] && flags=(-R)
    port=$((port + 1))
    timeout 120 ib_read_lat "${flags[@]}" -d "$dev" -p "$port" -s 64 -n 200 \
      >"$work/lat-server.log" 2>&1 &
    spid=$!
    sleep 2
    rc=0
    timeout 120 ib_read_lat "${flags[@]}" -d "$dev" -p "$port" -s 64 -n 200 "$addr" \
      >"$work/lat-client.log" 2>&1 || rc=$?
    src=0
    wait "$spid" || src=$?
    # Result line: size iterations t_min t_max t_typical ...; t_typical can be
    # inf if perftest's clock calibration failed under emulation.
    typical=$(awk '$1 == 64 && $2 == 200 && $5 ~ /^[0-9.]+$/ {print $5; exit}' "$work/lat-client.log")
    if [[ $rc -eq 0 && $src -eq 0 && -n $typical ]]; then
      ok=$mode
      break
    fi
    show "$work/lat-client.log"
    show "$work/lat-server.log"
    printf 'selftest: ib_read_lat (%s) failed: client rc=%s server rc=%s\n' "$mode" "$rc" "$src"
  done
  if [[ -n $ok ]]; then
    result PASS ib_read_lat "$ok, 64 B, typical ${typical} us"
  else
    result FAIL ib_read_lat "plain and -R both failed"
  fi

  rm -rf "$work"
  echo "fails=$fails" >>"$report"
  [[ $fails -eq 0 ]]
}

if [[ ${1:-} == --in-guest ]]; then
  in_guest
  exit
fi

# ---------------------------------------------------------------------------
# Host side.
# ---------------------------------------------------------------------------
timeout_s=300
while [[ $# -gt 0 ]]; do
  case $1 in
    --timeout) timeout_s=${2:?--timeout needs a value}; shift 2 ;;
    -h | --help) sed -n '2,/^set -euo/{/^#/s/^# \{0,1\}//p}' "$0"; exit 0 ;;
    *) echo "selftest: unknown argument: $1" >&2; exit 2 ;;
  esac
done

out=$(mktemp -d "${TMPDIR:-/tmp}/rkv-selftest.XXXXXX")
trap 'rm -rf "$out"' EXIT
start=$SECONDS
rc=0
"$script_dir/run-in-guest.sh" --timeout "$timeout_s" --out "$out" -- "$self" --in-guest || rc=$?
elapsed=$((SECONDS - start))

echo "================ SoftRoCE selftest summary ================"
if [[ -s $out/selftest.txt ]]; then
  grep -E '^(PASS|FAIL) ' "$out/selftest.txt"
  out_ok=1
else
  echo "FAIL --out: no report came back from the guest"
  out_ok=0
fi
if [[ $rc -eq 0 && $out_ok -eq 1 ]]; then
  echo "selftest: PASSED in ${elapsed}s"
  exit 0
fi
echo "selftest: FAILED (guest run exit code $rc) after ${elapsed}s"
[[ $rc -ne 0 ]] || rc=1
exit "$rc"
