#!/usr/bin/env bash
# perftest.sh - raw RDMA figures of the SoftRoCE device, as a baseline for rkv's
# own numbers. Meant to run INSIDE the guest of run-in-guest.sh, e.g.
#
#   deploy/softroce/run-in-guest.sh --out results -- \
#     'deploy/softroce/perftest.sh "$RKV_GUEST_OUT/perftest.txt" 64 4096 65536'
#
# Usage: perftest.sh OUTFILE SIZE...
#
# For every SIZE (bytes) it runs, server and client on the same rxe device
# (rxe loopback), one after the other:
#   ib_read_lat   RDMA READ round-trip latency
#   ib_read_bw    RDMA READ bandwidth / message rate
#   ib_send_lat   SEND/RECV half round-trip latency (perftest's convention)
# and writes OUTFILE: a comment line starting with '#', then one line per test
#   test size_bytes typical_us p99_us msg_per_s MB_per_s
# with "-" where a figure does not apply (bandwidth figures for latency tests,
# latency figures for bandwidth tests). typical_us is perftest's t_typical
# (median), p99_us its 99% percentile; MB_per_s is perftest's "BW average" in
# MB/s, where perftest's MB is 2^20 bytes; msg_per_s is its MsgRate.
# A test that fails (after retries) gets no line; the script then exits 1
# after running the others.
#
# Environment (all optional):
#   RKV_RDMA_DEV              device (default rxe0)
#   RKV_RDMA_ADDR             IPv4 address bound to it (default 10.99.0.1)
#   RKV_PERFTEST_LAT_ITERS    latency iterations, at most (default 200)
#   RKV_PERFTEST_BW_ITERS     bandwidth iterations, at most (default 1000)
#   RKV_PERFTEST_BYTES        per-test byte budget that lowers the iteration
#                             count for large sizes (default 33554432 = 32 MiB;
#                             never below 20 latency / 50 bandwidth iterations)
#   RKV_PERFTEST_TIMEOUT      seconds per server/client step (default 180)
#   RKV_PERFTEST_RETRIES      extra attempts per failed test (default 2)
#   RKV_PERFTEST_PORT         first TCP port for perftest's exchange (default
#                             18515; each step uses the next one)
#   RKV_PERFTEST_TESTS        which tests, space-separated (default all three)
#   RKV_PERFTEST_PIN          1 (default): pin server and client to different
#                             CPUs (below); 0: leave placement to the scheduler
#
# Facts this relies on (measured on rxe under QEMU TCG):
#   * Plain perftest (TCP exchange of QP data, GID index auto-selected to the
#     IPv4 RoCE v2 GID) works on rxe; so does -R (rdma_cm). Inline data is
#     reported unsupported and disabled by perftest itself.
#   * perftest converts cycles to microseconds with a clock calibration
#     (gettimeofday vs TSC, r^2 >= 0.9) that occasionally fails under
#     emulation ("Correlation coefficient", results of inf, or "Can't produce
#     a report"). Latency tests therefore run with -C (cycles) and are
#     converted here with the "cpu MHz" of /proc/cpuinfo (the TSC rate, which
#     is what perftest itself uses when the two agree); any test whose output
#     cannot be parsed is retried.
#   * With two or more CPUs, server and client are pinned to different CPUs
#     (both busy-poll).
set -euo pipefail

die() { printf 'perftest.sh: ERROR: %s\n' "$*" >&2; exit 2; }
log() { printf 'perftest.sh: %s\n' "$*" >&2; }

[[ $# -ge 2 ]] || die "usage: perftest.sh OUTFILE SIZE..."
outfile=$1
shift
sizes=("$@")
for s in "${sizes[@]}"; do
  [[ $s =~ ^[0-9]+$ && $s -gt 0 ]] || die "bad size: $s"
done

dev=${RKV_RDMA_DEV:-rxe0}
addr=${RKV_RDMA_ADDR:-10.99.0.1}
lat_iters_max=${RKV_PERFTEST_LAT_ITERS:-200}
bw_iters_max=${RKV_PERFTEST_BW_ITERS:-1000}
byte_budget=${RKV_PERFTEST_BYTES:-33554432}
step_timeout=${RKV_PERFTEST_TIMEOUT:-180}
retries=${RKV_PERFTEST_RETRIES:-2}
port=${RKV_PERFTEST_PORT:-18515}

for tool in ib_read_lat ib_read_bw ib_send_lat timeout ss; do
  command -v "$tool" >/dev/null 2>&1 || die "'$tool' not found"
done
[[ -d /sys/class/infiniband/$dev ]] || die "RDMA device $dev not present"

mhz=$(awk -F: '/^cpu MHz/ {gsub(/ /, "", $2); print $2; exit}' /proc/cpuinfo)
[[ -n $mhz ]] || die "cannot read the CPU clock from /proc/cpuinfo"

server_cpu=()
client_cpu=()
if [[ ${RKV_PERFTEST_PIN:-1} == 1 && $(nproc) -ge 2 ]] && command -v taskset >/dev/null 2>&1; then
  server_cpu=(taskset -c 1)
  client_cpu=(taskset -c 0)
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/rkv-perftest.XXXXXX")
server_pid=""
# shellcheck disable=SC2317  # invoked by the EXIT trap
cleanup() {
  if [[ -n $server_pid ]]; then kill "$server_pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

iters_for() { # max min size
  local n=$((byte_budget / $3))
  ((n > $1)) && n=$1
  ((n < $2)) && n=$2
  echo "$n"
}

# Runs one server/client pair; the client's output ends up in $work/client.log.
run_pair() { # tool args...
  local tool=$1
  shift
  port=$((port + 1))
  timeout -k 5 "$step_timeout" "${server_cpu[@]}" "$tool" -d "$dev" -p "$port" "$@" \
    >"$work/server.log" 2>&1 &
  server_pid=$!
  # Wait until the server listens on its exchange port.
  local i
  for ((i = 0; i < 200; i++)); do
    ss -Hltn "sport = :$port" 2>/dev/null | grep -q . && break
    kill -0 "$server_pid" 2>/dev/null || break
    sleep 0.1
  done
  local rc=0
  timeout -k 5 "$step_timeout" "${client_cpu[@]}" "$tool" -d "$dev" -p "$port" "$@" "$addr" \
    >"$work/client.log" 2>&1 || rc=$?
  # The server ends by itself once the client is done; give it a moment.
  for ((i = 0; i < 100; i++)); do
    kill -0 "$server_pid" 2>/dev/null || break
    sleep 0.1
  done
  kill "$server_pid" 2>/dev/null || true
  wait "$server_pid" 2>/dev/null || true
  server_pid=""
  return "$rc"
}

# Prints "typical_us p99_us" from a -C latency report.
parse_lat() { # size iters
  awk -v size="$1" -v iters="$2" -v mhz="$mhz" '
    $1 == size && $2 == iters && NF >= 8 {
      t = $5; p = $8
      if (t ~ /^[0-9.]+$/ && p ~ /^[0-9.]+$/ && t > 0) {
        printf "%.2f %.2f\n", t / mhz, p / mhz; found = 1; exit
      }
    }
    END { if (!found) exit 1 }' "$work/client.log"
}

# Prints "msg_per_s MB_per_s" from a bandwidth report.
parse_bw() { # size iters
  awk -v size="$1" -v iters="$2" '
    $1 == size && $2 == iters && NF >= 5 {
      bw = $4; rate = $5
      if (bw ~ /^[0-9.]+$/ && rate ~ /^[0-9.]+$/ && bw > 0) {
        printf "%.0f %.2f\n", rate * 1000000, bw; found = 1; exit
      }
    }
    END { if (!found) exit 1 }' "$work/client.log"
}

results=()
failed=()
run_test() { # test size
  local test=$1 size=$2 iters args figures attempt
  case $test in
    ib_read_lat | ib_send_lat)
      iters=$(iters_for "$lat_iters_max" 20 "$size")
      args=(-C -s "$size" -n "$iters")
      ;;
    ib_read_bw)
      iters=$(iters_for "$bw_iters_max" 50 "$size")
      args=(-s "$size" -n "$iters")
      ;;
  esac
  for ((attempt = 0; attempt <= retries; attempt++)); do
    local start=$SECONDS
    if run_pair "$test" "${args[@]}"; then
      case $test in
        ib_read_bw) figures=$(parse_bw "$size" "$iters") && figures="- - $figures" ;;
        *) figures=$(parse_lat "$size" "$iters") && figures="$figures - -" ;;
      esac
      if [[ -n ${figures:-} ]]; then
        log "$test size=$size iters=$iters: $figures ($((SECONDS - start))s)"
        results+=("$test $size $figures")
        return 0
      fi
      log "$test size=$size: could not parse the report (attempt $((attempt + 1)))"
    else
      log "$test size=$size: failed (attempt $((attempt + 1)))"
    fi
    sed 's/^/  client| /' "$work/client.log" | tail -n 15 >&2
    sed 's/^/  server| /' "$work/server.log" | tail -n 5 >&2
    figures=""
  done
  failed+=("$test/$size")
}

read -r -a tests <<<"${RKV_PERFTEST_TESTS:-ib_read_lat ib_read_bw ib_send_lat}"
for test in "${tests[@]}"; do
  case $test in ib_read_lat | ib_read_bw | ib_send_lat) ;; *) die "unknown test in RKV_PERFTEST_TESTS: $test" ;; esac
done
for size in "${sizes[@]}"; do
  for test in "${tests[@]}"; do
    run_test "$test" "$size"
  done
done

mkdir -p "$(dirname "$outfile")"
{
  echo "# test size_bytes typical_us p99_us msg_per_s MB_per_s (device $dev, cpu MHz $mhz)"
  if [[ ${#results[@]} -gt 0 ]]; then printf '%s\n' "${results[@]}"; fi
} >"$outfile.tmp"
mv "$outfile.tmp" "$outfile"
log "wrote ${#results[@]} result(s) to $outfile"
if [[ ${#failed[@]} -gt 0 ]]; then
  log "FAILED: ${failed[*]}"
  exit 1
fi
