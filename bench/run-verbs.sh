#!/usr/bin/env bash
# run-verbs.sh - rkv over real verbs (SoftRoCE) against the raw device, in the
# same guest, in the same run. Meant to run INSIDE the SoftRoCE guest:
#
#   deploy/softroce/run-in-guest.sh --timeout 1500 --out DIR -- bench/run-verbs.sh BUILD_DIR
#
# (bench/verbs.sh does exactly that from the host and files the report.)
#
# BUILD_DIR holds a built server/rkv-server, bench/rkv-ycsb and
# bench/rkv-read-lat; nothing is built here. Steps:
#   1. rkv-server --transport=verbs --threads=1 (one polling thread, on the
#      one CPU it is given) on $RKV_RDMA_ADDR (a free port), data dir
#      under /tmp, durability $RKV_BENCH_DURABILITY (default none: the
#      figures compare the data path with the raw device, not RocksDB under
#      emulation);
#   2. rkv-ycsb, one client thread: cold get (location cache off) and put
#      with 1024- and 64-byte values, then cold get with $RKV_BENCH_THREADS
#      threads (default 2) for throughput, then MultiGets of 16 cached keys
#      (--batch=16 --warm_reads) against ib_read_bw's message rate;
#      then rkv-read-lat: single READs of 1024 and 64 bytes through rkv's
#      own transport, which splits a GET's time into transport and protocol;
#   3. $RKV_BENCH_ROUNDS (default 15) interleaved rounds of: rkv-ycsb get with
#      1 KiB values, cold and then cached (--warm_reads: every GET a location
#      cache hit, one READ), rkv-read-lat 1 KiB, ib_read_lat 1 KiB, then
#      rkv-ycsb put 1 KiB and ib_send_lat 1 KiB (rkv-server stopped with
#      SIGSTOP meanwhile, so that its busy polling leaves perftest's CPU
#      alone), each for $RKV_BENCH_ROUND_OPS operations; each target ratio is taken round by
#      round, next to each other, and the report gives the median. Under
#      emulation a process's READs run ~40 us slower for a while after it
#      starts (from nothing to over 100 ms, at random: a 1 KiB ib_read_lat
#      of 1000 iterations came out ~61 or ~105 us, flipping from one run to
#      the next, for every program), so a run must last well past that:
#      5000 iterations (~0.3 s of READs) gave 16 fast runs out of 16;
#   3b. YCSB-A (zipfian, 1 KiB, one thread) on rkv over verbs, then, with
#      rkv-server stopped, on Redis over TCP in the same guest (redis-server
#      without persistence, on the CPU rkv-server had);
#   3c. connection scale: tests/rkv_connection_scale_test with
#      $RKV_BENCH_CONNECTIONS (default 1000) connections over verbs on one
#      rkv-server --threads=2, each PUTting and GETting; its line of figures
#      (server threads with one connection and with all, resident memory);
#   4. deploy/softroce/perftest.sh: ib_read_lat, ib_read_bw, ib_send_lat at
#      the same sizes;
#   5. $RKV_GUEST_OUT/verbs-results.md: rkv next to the raw figures, and the
#      raw data (ycsb.txt, readlat.txt, perftest*.txt, server.log) beside it.
#
# Environment (optional):
#   RKV_BENCH_RECORDS     records loaded (default 1000)
#   RKV_BENCH_OPS         timed operations per run (default 3000)
#   RKV_BENCH_DURATION_S  cap per timed run in seconds (default 120)
#   RKV_BENCH_THREADS     threads of the throughput run (default 2)
#   RKV_BENCH_ROUNDS      interleaved rounds for the 1 KiB GET ratio (default 15)
#   RKV_BENCH_ROUND_OPS   GETs, READs and ib_read_lat iterations per round
#                         (default 5000, see 3.)
#   RKV_BENCH_PIN         1 (default): with 2+ CPUs, rkv-server runs on CPU 1
#                         and every one-thread client (rkv-ycsb, rkv-read-lat)
#                         on CPU 0, the placement deploy/softroce/perftest.sh
#                         gives perftest's server and client (RKV_PERFTEST_PIN),
#                         so both sides are measured alike; 0: no pinning.
#                         Multi-thread clients are never pinned.
#   RKV_BENCH_DURABILITY  none | wal | sync (default none)
#   RKV_BENCH_POLL        rkv-server --poll: adaptive | busy (default busy: its
#                         polling threads never sleep, as perftest's server
#                         polls its CQ)
#   RKV_BENCH_COMMAND     the host command line to quote in the report
#
# Emulated CPUs (QEMU TCG) run 10-50x slower than the host: absolute figures
# mean nothing outside the guest; the ratios to perftest's figures do.
#
# Exit status: 0 when every step was clean; 1 when a run reported errors or
# a step failed (the report is still written with what there is); 2 for
# bad usage or a missing build or device.
set -euo pipefail

die() { printf 'run-verbs.sh: ERROR: %s\n' "$*" >&2; exit 2; }
log() { printf 'run-verbs.sh: %s\n' "$*" >&2; }

[[ $# -eq 1 ]] || die "usage: bench/run-verbs.sh BUILD_DIR (inside the SoftRoCE guest)"
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
build_dir=$(cd "$1" 2>/dev/null && pwd -P) || die "build dir '$1' not found"
server_bin=$build_dir/server/rkv-server
ycsb_bin=$build_dir/bench/rkv-ycsb
readlat_bin=$build_dir/bench/rkv-read-lat
scale_bin=$build_dir/tests/rkv_connection_scale_test
perftest=$repo/deploy/softroce/perftest.sh
for f in "$server_bin" "$ycsb_bin" "$readlat_bin" "$scale_bin" "$perftest"; do
  [[ -x $f ]] || die "$f missing or not executable"
done
[[ -n ${RKV_RDMA_ADDR:-} ]] || die "RKV_RDMA_ADDR is not set: run this inside deploy/softroce/run-in-guest.sh"
[[ -n ${RKV_GUEST_OUT:-} && -d ${RKV_GUEST_OUT:-} ]] || die "RKV_GUEST_OUT is not a folder"
dev=${RKV_RDMA_DEV:-rxe0}
[[ -d /sys/class/infiniband/$dev ]] || die "RDMA device $dev not present"

records=${RKV_BENCH_RECORDS:-1000}
ops=${RKV_BENCH_OPS:-3000}
duration_s=${RKV_BENCH_DURATION_S:-120}
tp_threads=${RKV_BENCH_THREADS:-2}
rounds=${RKV_BENCH_ROUNDS:-15}
round_ops=${RKV_BENCH_ROUND_OPS:-5000}
durability=${RKV_BENCH_DURABILITY:-none}
poll=${RKV_BENCH_POLL:-busy}
command_line=${RKV_BENCH_COMMAND:-bench/run-verbs.sh $1}
for n in "$records" "$ops" "$duration_s" "$tp_threads" "$rounds" "$round_ops"; do
  [[ $n =~ ^[0-9]+$ && $n -gt 0 ]] || die "not a positive integer: $n"
done
case $durability in none | wal | sync) ;; *) die "RKV_BENCH_DURABILITY must be none, wal or sync" ;; esac
case $poll in adaptive | busy) ;; *) die "RKV_BENCH_POLL must be adaptive or busy" ;; esac

server_cpu=()
client_cpu=()
pinning="none"
if [[ ${RKV_BENCH_PIN:-1} == 1 && $(nproc) -ge 2 ]] && command -v taskset >/dev/null 2>&1; then
  server_cpu=(taskset -c 1)
  client_cpu=(taskset -c 0)
  pinning="rkv-server on CPU 1, one-thread clients on CPU 0 (as perftest.sh places perftest)"
fi

out=$RKV_GUEST_OUT
report=$out/verbs-results.md
ycsb_results=$out/ycsb.txt
perf_results=$out/perftest.txt
readlat_results=$out/readlat.txt
rm -f "$ycsb_results" "$perf_results" "$readlat_results" "$out"/perftest-r*.txt "$out"/perftest-send-r*.txt

work=$(mktemp -d /tmp/rkv-bench-verbs.XXXXXX)
server_pid=""
# shellcheck disable=SC2317  # invoked by the EXIT trap
cleanup() {
  if [[ -n $server_pid ]]; then
    kill "$server_pid" 2>/dev/null || true
    kill -CONT "$server_pid" 2>/dev/null || true  # stopped for a round's ib_send_lat
    wait "$server_pid" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT

failed=()
head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$work/token"

# 1. The server.
: >"$work/server.stdout"  # exists before the server's redirection does: polled below
"${server_cpu[@]}" "$server_bin" --listen="$RKV_RDMA_ADDR:0" --data_dir="$work/data" --token_file="$work/token" \
  --transport=verbs --durability="$durability" --poll="$poll" --threads=1 --memory=256M \
  >"$work/server.stdout" 2>"$out/server.log" &
server_pid=$!
addr=""
for ((i = 0; i < 1200; i++)); do
  addr=$(sed -n 's/^rkv-server listening on \([^ ]*\) .*/\1/p' "$work/server.stdout")
  [[ -n $addr ]] && break
  kill -0 "$server_pid" 2>/dev/null || break
  sleep 0.1
done
if [[ -z $addr ]]; then
  tail -n 20 "$out/server.log" >&2 || true
  die "rkv-server did not come up on $RKV_RDMA_ADDR (log: server.log)"
fi
log "rkv-server: $(head -n 1 "$work/server.stdout")"

# 2. rkv-ycsb.
ycsb() { # label workload size threads [operations [more rkv-ycsb flags...]]
  local rc=0
  local pin=()
  (($4 == 1)) && pin=("${client_cpu[@]}")
  "${pin[@]}" "$ycsb_bin" --target=rkv --server="$addr" --token_file="$work/token" --transport=verbs \
    --workload="$2" --value_bytes="$3" --threads="$4" --records="$records" \
    --operations="${5:-$ops}" --duration_s="$duration_s" --timeout_ms=20000 \
    --label="$1" --output="$ycsb_results" "${@:6}" >"$work/ycsb.out" 2>&1 || rc=$?
  sed "s/^/  [$1 $2 $3 x$4] /" "$work/ycsb.out" >&2
  if ((rc != 0)); then
    failed+=("rkv-ycsb $1 $2 $3 (rc $rc)")
    grep -q "^$1 $2 $3 " "$ycsb_results" 2>/dev/null ||
      echo "$1 $2 $3 $4 - FAILED - - - - -" >>"$ycsb_results"
  fi
}
for size in 1024 64; do
  ycsb rkv get "$size" 1 "$ops" --location_cache_bytes=0
  ycsb rkv put "$size" 1
done
ycsb rkv-mt get 1024 "$tp_threads" "$ops" --location_cache_bytes=0
# MultiGet batches of 16 cached keys on one connection: one READ per key.
ycsb rkv-b16 get 1024 1 "$ops" --noload --warm_reads --batch=16
# Five short runs per size, alternating sizes; the report takes the median
# p50 (emulation is noisy from one second to the next).
for round in 1 2 3 4 5; do
  for size in 1024 64; do
    if ! "${client_cpu[@]}" "$readlat_bin" --server="$addr" --token_file="$work/token" --transport=verbs --bytes="$size" \
      --iterations=2000 --label=rkv-read --output="$readlat_results" 2>"$work/readlat.out"; then
      sed "s/^/  [rkv-read-lat $round] /" "$work/readlat.out" >&2
      failed+=("rkv-read-lat $size (round $round)")
    fi
  done
done
# 3. Interleaved rounds for the target ratio (the server is idle during
#    ib_read_lat: it serves no GET with its CPU and has no requests). Short
#    and back to back; the GETs reuse the 1 KiB records the throughput run
#    above loaded (--noload), so a round spends its time measuring.
for ((r = 1; r <= rounds; r++)); do
  ycsb "rkv-r$r" get 1024 1 "$round_ops" --noload --location_cache_bytes=0
  ycsb "rkv-hit-r$r" get 1024 1 "$round_ops" --noload --warm_reads
  if ! "${client_cpu[@]}" "$readlat_bin" --server="$addr" --token_file="$work/token" --transport=verbs --bytes=1024 \
    --iterations="$round_ops" --label="rkv-read-r$r" --output="$readlat_results" 2>"$work/readlat.out"; then
    sed "s/^/  [rkv-read-lat r$r] /" "$work/readlat.out" >&2
    failed+=("rkv-read-lat 1024 (round $r)")
  fi
  if ! RKV_PERFTEST_TESTS=ib_read_lat RKV_PERFTEST_LAT_ITERS=$round_ops RKV_PERFTEST_PORT=$((19000 + 10 * r)) \
    "$perftest" "$out/perftest-r$r.txt" 1024; then
    failed+=("ib_read_lat (round $r)")
  fi
  # The PUT target's round: PUTs of the loaded 1 KiB records, then
  # ib_send_lat 1 KiB with rkv-server stopped (SIGSTOP): its busy polling
  # would otherwise share perftest's server CPU and slow the reference.
  ycsb "rkv-put-r$r" put 1024 1 "$round_ops" --noload
  kill -STOP "$server_pid"
  if ! RKV_PERFTEST_TESTS=ib_send_lat RKV_PERFTEST_LAT_ITERS=$round_ops RKV_PERFTEST_PORT=$((19500 + 10 * r)) \
    "$perftest" "$out/perftest-send-r$r.txt" 1024; then
    failed+=("ib_send_lat (round $r)")
  fi
  kill -CONT "$server_pid"
done

# 3b. YCSB-A (50% GET, 50% PUT, zipfian, 1 KiB): rkv over verbs, then Redis
#     over TCP in the same guest (redis-server --save '' --appendonly no,
#     placed like rkv-server), the same client count: one thread. rkv-server
#     is stopped first: with --poll=busy it would keep Redis's CPU busy.
ycsb rkv-ycsba a 1024 1 "$ops" --key_distribution=zipfian
kill "$server_pid" 2>/dev/null || true
wait "$server_pid" 2>/dev/null || true
server_pid=""
redis_pid=""
if command -v redis-server >/dev/null && command -v redis-cli >/dev/null; then
  redis_port=$((20000 + RANDOM % 20000))
  mkdir -p "$work/redis"
  "${server_cpu[@]}" redis-server --port "$redis_port" --bind "$RKV_RDMA_ADDR" --protected-mode no --save '' \
    --appendonly no --dir "$work/redis" >"$work/redis/log" 2>&1 &
  redis_pid=$!
  for ((i = 0; i < 300; i++)); do
    redis-cli -h "$RKV_RDMA_ADDR" -p "$redis_port" ping 2>/dev/null | grep -q PONG && break
    sleep 0.1
  done
  if "${client_cpu[@]}" "$ycsb_bin" --target=redis --server="$RKV_RDMA_ADDR:$redis_port" --workload=a \
    --key_distribution=zipfian --value_bytes=1024 --threads=1 --records="$records" --operations="$ops" \
    --duration_s="$duration_s" --timeout_ms=20000 --label=redis-ycsba --output="$ycsb_results" \
    >"$work/ycsb.out" 2>&1; then
    sed "s/^/  [redis-ycsba a 1024 x1] /" "$work/ycsb.out" >&2
  else
    sed "s/^/  [redis-ycsba a 1024 x1] /" "$work/ycsb.out" >&2
    failed+=("rkv-ycsb --target=redis (YCSB-A)")
  fi
  kill "$redis_pid" 2>/dev/null || true
  wait "$redis_pid" 2>/dev/null || true
else
  failed+=("redis-server or redis-cli missing in the guest (YCSB-A baseline)")
fi

# 3c. Connection scale: one server (its own, started by the test) holding
#     $RKV_BENCH_CONNECTIONS connections, every one served.
connections=${RKV_BENCH_CONNECTIONS:-1000}
scale_results=$out/scale.txt
if RKV_TEST_TRANSPORT=verbs RKV_TEST_HOST="$RKV_RDMA_ADDR" RKV_TEST_CONNECTIONS="$connections"   "$scale_bin" >"$work/scale.out" 2>&1; then
  scale_verdict=met
else
  scale_verdict="not met"
  failed+=("rkv_connection_scale_test with $connections connections")
fi
grep '^connection-scale:' "$work/scale.out" >"$scale_results" || echo "connection-scale: no figures" >"$scale_results"
sed 's/^/  [scale] /' "$scale_results" >&2

# 4. The raw device.
# 2000 latency iterations (perftest.sh's default is 200): a steadier median.
if ! RKV_PERFTEST_LAT_ITERS=${RKV_PERFTEST_LAT_ITERS:-2000} "$perftest" "$perf_results" 64 1024; then
  failed+=("perftest.sh")
fi
[[ -f $perf_results ]] || : >"$perf_results"

# 5. The report.
ycsb_field() { # label workload size column
  awk -v l="$1" -v w="$2" -v s="$3" -v c="$4" '
    $1 == l && $2 == w && $3 == s { v = $c } END { print (v == "" ? "-" : v) }' "$ycsb_results"
}
readlat_field() { # size column: the median over the runs
  awk -v s="$1" -v c="$2" '$1 == "rkv-read" && $2 == s { print $c }' "$readlat_results" 2>/dev/null |
    sort -g | awk '{ v[NR] = $1 } END { print (NR == 0 ? "-" : v[int((NR + 1) / 2)]) }'
}
perf_field() { # test size column
  awk -v t="$1" -v s="$2" -v c="$3" '
    $1 == t && $2 == s { v = $c } END { print (v == "" ? "-" : v) }' "$perf_results"
}
# a / b with two decimals, or "-" when either is missing.
ratio() {
  awk -v a="$1" -v b="$2" 'BEGIN {
    if (a ~ /^[0-9.]+$/ && b ~ /^[0-9.]+$/ && b > 0) printf "%.2f", a / b; else print "-" }'
}
median() { # numbers, negative ones too ("-" ignored); "-" when none
  printf '%s\n' "$@" | { grep -E '^-?[0-9.]+$' || true; } | sort -g |
    awk '{ v[NR] = $1 } END { if (NR == 0) print "-"; else if (NR % 2) print v[(NR + 1) / 2];
      else printf "%.2f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
minus() { # a - b
  awk -v a="$1" -v b="$2" 'BEGIN {
    if (a ~ /^[0-9.]+$/ && b ~ /^[0-9.]+$/) printf "%.1f", a - b; else print "-" }'
}
round_rkv_read() { # round: its rkv-read-lat 1 KiB p50
  awk -v l="rkv-read-r$1" '$1 == l { v = $4 } END { print (v == "" ? "-" : v) }' "$readlat_results" 2>/dev/null || echo -
}
round_raw() { # test file: the 1 KiB typical of perftest test `test` in a round's file
  awk -v t="$1" '$1 == t && $2 == 1024 { v = $3 } END { print (v == "" ? "-" : v) }' "$2" 2>/dev/null || echo -
}
round_raw_read() { round_raw ib_read_lat "$out/perftest-r$1.txt"; }       # round
round_raw_send() { round_raw ib_send_lat "$out/perftest-send-r$1.txt"; }  # round
verdict() { # value op(<= or >=) limit: "met" or "not met" (also for "-")
  awk -v m="$1" -v op="$2" -v l="$3" 'BEGIN {
    ok = m ~ /^[0-9.]+$/ && (op == "<=" ? m <= l : m >= l); print (ok ? "met" : "not met") }'
}
times() { # a * b
  awk -v a="$1" -v b="$2" 'BEGIN {
    if (a ~ /^[0-9.]+$/ && b ~ /^[0-9.]+$/) printf "%.2f", a * b; else print "-" }'
}

cpu_model=$(awk -F': ' '/^model name/ {print $2; exit}' /proc/cpuinfo)
link_mtu=$(cat /sys/class/net/veth0/mtu 2>/dev/null || echo unknown)
active_mtu=$(ibv_devinfo -d "$dev" 2>/dev/null | awk '/active_mtu/ {print $2, $3; exit}')
{
  echo "# rkv over verbs (SoftRoCE, $dev) vs the raw device ($(date -u +%Y-%m-%dT%H%MZ))"
  echo
  echo "Produced by \`$command_line\`."
  echo
  echo "Guest: $(nproc) vCPUs (QEMU TCG, ${cpu_model:-unknown CPU}), Linux $(uname -r), $dev on veth0"
  echo "(link MTU $link_mtu, rxe active_mtu ${active_mtu:-unknown});"
  echo "client and server on the same rxe device (rxe loopback). Emulation makes absolute"
  echo "figures meaningless outside this guest: read the ratios, taken in the same run."
  echo
  echo "rkv-server --transport=verbs --durability=$durability --poll=$poll; rkv-ycsb: $records records loaded, then"
  echo "$ops operations (cap $duration_s s), uniform keys, one client thread unless noted. A cold"
  echo "GET (--location_cache_bytes=0) is two dependent READs (the key's 512-byte neighbourhood"
  echo "of 8 buckets, then the block); a cached GET (--warm_reads: every record read once,"
  echo "untimed, so that the timed GETs hit the client's location cache) is one READ of the block."
  echo
  echo "CPU placement: $pinning."
  echo
  echo "## Cold 1 KiB GET vs a raw 1 KiB READ, interleaved rounds (the target)"
  echo
  echo "Each round runs, back to back: rkv-ycsb get ($round_ops GETs of 1 KiB values, records"
  echo "already loaded), rkv-read-lat (one 1 KiB READ through rkv's transport, $round_ops times),"
  echo "ib_read_lat 1 KiB ($round_ops iterations). Target: the median of the rounds' GET p50 /"
  echo "ib_read_lat typical <= 2.3 (a cold GET is two dependent READs)."
  echo
  echo "| round | rkv GET p50 us | rkv READ p50 us | ib_read_lat typical us | GET / ib_read_lat | GET / rkv READ |"
  echo "|---:|---:|---:|---:|---:|---:|"
  ratios=()
  ratios_own=()
  round_get=()
  round_read=()
  round_raw=()
  round_transport=()
  round_protocol=()
  for ((r = 1; r <= rounds; r++)); do
    g=$(ycsb_field "rkv-r$r" get 1024 7)
    rr=$(round_rkv_read "$r")
    rt=$(round_raw_read "$r")
    q=$(ratio "$g" "$rt")
    q2=$(ratio "$g" "$rr")
    ratios+=("$q")
    ratios_own+=("$q2")
    round_get+=("$g")
    round_read+=("$rr")
    round_raw+=("$rt")
    round_transport+=("$(minus "$(times "$rr" 2)" "$(times "$rt" 2)")")
    round_protocol+=("$(minus "$g" "$(times "$rr" 2)")")
    echo "| $r | $g | $rr | $rt | $q | $q2 |"
  done
  med=$(median "${ratios[@]}")
  med_own=$(median "${ratios_own[@]}")
  verdict=$(verdict "$med" "<=" 2.3)
  echo "| **median** | | | | **$med** | **$med_own** |"
  echo
  echo "Target <= 2.3: **$verdict** (median GET / ib_read_lat $med over $rounds rounds; GET / one"
  echo "READ through rkv's own transport: $med_own)."
  echo
  echo "## Cached 1 KiB GET vs a raw 1 KiB READ, the same rounds (the target)"
  echo
  echo "In each round, right after the cold run: rkv-ycsb get --warm_reads ($round_ops GETs,"
  echo "every record read once first, untimed). Target: the median of the rounds' cached GET p50"
  echo "/ ib_read_lat typical <= 1.25 (a hit is one READ of the block)."
  echo
  echo "| round | rkv cached GET p50 us | ib_read_lat typical us | cached GET / ib_read_lat | cached GET / rkv READ |"
  echo "|---:|---:|---:|---:|---:|"
  hit_ratios=()
  for ((r = 1; r <= rounds; r++)); do
    g=$(ycsb_field "rkv-hit-r$r" get 1024 7)
    rr=$(round_rkv_read "$r")
    rt=$(round_raw_read "$r")
    q=$(ratio "$g" "$rt")
    hit_ratios+=("$q")
    echo "| $r | $g | $rt | $q | $(ratio "$g" "$rr") |"
  done
  hmed=$(median "${hit_ratios[@]}")
  hverdict=$(verdict "$hmed" "<=" 1.25)
  echo "| **median** | | | **$hmed** | |"
  echo
  echo "Target <= 1.25: **$hverdict** (median cached GET / ib_read_lat $hmed over $rounds rounds)."
  echo
  echo "## GET latency vs ib_read_lat"
  echo
  echo "| value | rkv GET p50 us | rkv GET p99 us | ib_read_lat typical us | ib_read_lat p99 us | p50 / typical | target |"
  echo "|---:|---:|---:|---:|---:|---:|---|"
  for size in 1024 64; do
    g50=$(ycsb_field rkv get "$size" 7)
    g99=$(ycsb_field rkv get "$size" 8)
    rt=$(perf_field ib_read_lat "$size" 3)
    r99=$(perf_field ib_read_lat "$size" 4)
    target="-"
    [[ $size == 1024 ]] && target="one run; the target is judged on the rounds above"
    echo "| $size | $g50 | $g99 | $rt | $r99 | $(ratio "$g50" "$rt") | $target |"
  done
  echo
  echo "## Where a GET's time goes"
  echo
  echo "rkv-read-lat times one READ through rkv's own transport (posted and waited for"
  echo "as a GET does it), like ib_read_lat does on the raw device. A cold GET is two"
  echo "dependent READs, so: transport cost = 2 x (rkv READ - raw READ); protocol cost"
  echo "(hashing, slot scan, checksum check, copying the value out, the client API) = GET -"
  echo "2 x rkv READ. The 1 KiB row takes each figure round by round from the rounds"
  echo "above and gives the medians; the 64-byte row comes from single runs (GET) and"
  echo "the median of five rkv-read-lat runs of 2000, so emulation phases can skew it."
  echo "Under TCG every CPU instruction is emulated, so both costs weigh far more here"
  echo "than on a real NIC."
  echo
  echo "| value | rkv GET p50 us | rkv READ p50 us | 2 x rkv READ | 2 x ib_read_lat | transport cost us | protocol cost us |"
  echo "|---:|---:|---:|---:|---:|---:|---:|"
  mr=$(median "${round_read[@]}")
  mt=$(median "${round_raw[@]}")
  echo "| 1024 (rounds) | $(median "${round_get[@]}") | $mr | $(times "$mr" 2) | $(times "$mt" 2) |" \
    "$(median "${round_transport[@]}") | $(median "${round_protocol[@]}") |"
  g50=$(ycsb_field rkv get 64 7)
  rr=$(readlat_field 64 4)
  rt=$(perf_field ib_read_lat 64 3)
  rr2=$(times "$rr" 2)
  rt2=$(times "$rt" 2)
  echo "| 64 | $g50 | $rr | $rr2 | $rt2 | $(minus "$rr2" "$rt2") | $(minus "$g50" "$rr2") |"
  echo
  echo "## GET throughput vs ib_read_bw"
  echo
  echo "ib_read_bw keeps many READs in flight on one QP; an rkv GET waits for its own two"
  echo "rounds, so one client thread is bounded by latency, not by the device."
  echo
  echo "| value | client threads | rkv GET ops/s | ib_read_bw msg/s | ratio |"
  echo "|---:|---:|---:|---:|---:|"
  for row in "rkv 1024 1" "rkv-mt 1024 $tp_threads" "rkv 64 1"; do
    read -r l size th <<<"$row"
    gops=$(ycsb_field "$l" get "$size" 6)
    bw=$(perf_field ib_read_bw "$size" 5)
    echo "| $size | $th | $gops | $bw | $(ratio "$gops" "$bw") |"
  done
  echo
  echo "MultiGet of 16 cached keys per call on one connection (rkv-ycsb --batch=16 --warm_reads:"
  echo "one READ per key, the batch's READs in one posted list) against ib_read_bw's message"
  echo "rate. Target: keys/s >= 0.8 x ib_read_bw msg/s."
  echo
  echo "| value | keys/s | ib_read_bw msg/s | ratio | target |"
  echo "|---:|---:|---:|---:|---|"
  bops=$(ycsb_field rkv-b16 get 1024 6)
  bw=$(perf_field ib_read_bw 1024 5)
  bq=$(ratio "$bops" "$bw")
  bverdict=$(verdict "$bq" ">=" 0.8)
  echo "| 1024 | $bops | $bw | $bq | >= 0.8: $bverdict |"
  echo
  echo "## YCSB-A: rkv over verbs vs Redis over TCP"
  echo
  echo "50% GET, 50% PUT, zipfian keys (YCSB's constant 0.99), 1 KiB values, $records records,"
  echo "$ops operations, one client thread each; rkv with its location cache (default) and"
  echo "--durability=none, Redis without persistence, run after rkv-server stopped, on its CPU."
  echo "Target: rkv's p99 <= 0.5 x Redis's (the higher of the GET and PUT p99 of each)."
  echo
  echo "| store | ops/s | GET p50 us | GET p99 us | PUT p50 us | PUT p99 us | p99 |"
  echo "|---|---:|---:|---:|---:|---:|---:|"
  p99_of() { # label: max(GET p99, PUT p99)
    awk -v a="$(ycsb_field "$1" a 1024 8)" -v b="$(ycsb_field "$1" a 1024 10)" 'BEGIN {
      if (a ~ /^[0-9.]+$/ && b ~ /^[0-9.]+$/) print (a > b ? a : b); else print "-" }'
  }
  for l in rkv-ycsba redis-ycsba; do
    echo "| ${l%-ycsba} | $(ycsb_field "$l" a 1024 6) | $(ycsb_field "$l" a 1024 7) | $(ycsb_field "$l" a 1024 8) |" \
      "$(ycsb_field "$l" a 1024 9) | $(ycsb_field "$l" a 1024 10) | $(p99_of "$l") |"
  done
  aq=$(ratio "$(p99_of rkv-ycsba)" "$(p99_of redis-ycsba)")
  averdict=$(verdict "$aq" "<=" 0.5)
  echo
  echo "rkv p99 / Redis p99: **$aq** (target <= 0.5: **$averdict**)."
  echo
  echo "## Connection scale"
  echo
  echo "One rkv-server --threads=2 over verbs holding $connections connections, each of which PUTs"
  echo "its keys and GETs them back (tests/rkv_connection_scale_test, 4 client threads). Target:"
  echo "every connection served, the server's thread count not growing with its connections."
  echo
  echo '```'
  cat "$scale_results"
  echo '```'
  echo
  echo "Every connection served with a fixed set of threads: **$scale_verdict**."
  echo
  echo "## PUT latency vs ib_send_lat, interleaved rounds (the target)"
  echo
  echo "ib_send_lat reports half a round trip (perftest's convention). A PUT is a WRITE and a"
  echo "SEND in one doorbell, the server's apply, and a reply SEND: one round trip plus the"
  echo "server's work, so the fair raw reference is 2 x ib_send_lat. Each of the rounds above"
  echo "ends with rkv-ycsb put ($round_ops PUTs of the loaded 1 KiB records), then ib_send_lat"
  echo "1 KiB ($round_ops iterations) with rkv-server stopped (SIGSTOP), so that its busy polling"
  echo "does not share perftest's CPU. Target: the median of the rounds' PUT p50 / (2 x"
  echo "ib_send_lat typical) <= 2.5 with --durability=none (docs/design.md, \"Where a PUT's"
  echo "time goes\")."
  echo
  echo "| round | rkv PUT p50 us | rkv PUT p99 us | ib_send_lat typical us | 2 x typical | p50 / (2 x typical) |"
  echo "|---:|---:|---:|---:|---:|---:|"
  ratios=()
  for ((r = 1; r <= rounds; r++)); do
    p50=$(ycsb_field "rkv-put-r$r" put 1024 9)
    p99=$(ycsb_field "rkv-put-r$r" put 1024 10)
    st=$(round_raw_send "$r")
    st2=$(times "$st" 2)
    q=$(ratio "$p50" "$st2")
    ratios+=("$q")
    echo "| $r | $p50 | $p99 | $st | $st2 | $q |"
  done
  med=$(median "${ratios[@]}")
  pverdict=$(verdict "$med" "<=" 2.5)
  echo "| **median** | | | | | **$med** |"
  echo
  echo "Target <= 2.5: **$pverdict** (median PUT p50 / (2 x ib_send_lat) $med over $rounds rounds)."
  echo
  echo "## PUT latency vs ib_send_lat, single runs"
  echo
  echo "The PUT runs of step 2 (records loaded first) against ib_send_lat at the end of the"
  echo "run; one run each, so an emulation phase can skew them: the target is judged on the"
  echo "rounds above."
  echo
  echo "| value | rkv PUT p50 us | rkv PUT p99 us | ib_send_lat typical us | 2 x typical | p50 / (2 x typical) |"
  echo "|---:|---:|---:|---:|---:|---:|"
  for size in 1024 64; do
    p50=$(ycsb_field rkv put "$size" 9)
    p99=$(ycsb_field rkv put "$size" 10)
    st=$(perf_field ib_send_lat "$size" 3)
    st2=$(times "$st" 2)
    echo "| $size | $p50 | $p99 | $st | $st2 | $(ratio "$p50" "$st2") |"
  done
  echo
  if [[ ${#failed[@]} -gt 0 ]]; then
    echo "**STEPS WITH ERRORS (their figures are missing or not valid): ${failed[*]}**"
    echo
  fi
  echo "## Raw data"
  echo
  echo "rkv-ycsb --output lines:"
  echo
  echo '```'
  cat "$ycsb_results" 2>/dev/null || true
  echo '```'
  echo
  echo "rkv-read-lat --output lines:"
  echo
  echo '```'
  cat "$readlat_results" 2>/dev/null || true
  echo '```'
  echo
  echo "deploy/softroce/perftest.sh:"
  echo
  echo '```'
  cat "$perf_results"
  for ((r = 1; r <= rounds; r++)); do
    grep -v '^#' "$out/perftest-r$r.txt" 2>/dev/null | sed "s/^/round $r: /" || true
    grep -v '^#' "$out/perftest-send-r$r.txt" 2>/dev/null | sed "s/^/round $r: /" || true
  done
  echo '```'
} >"$report.tmp"
mv "$report.tmp" "$report"
log "wrote $report"
if [[ ${#failed[@]} -gt 0 ]]; then
  log "STEPS WITH ERRORS: ${failed[*]}"
  exit 1
fi
