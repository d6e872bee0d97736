#!/usr/bin/env bash
# gateway.sh - Redis clients on rkv-gateway beside redis-server itself:
# redis-benchmark GET and SET with 16-command pipelines, the same flags for
# both, and one client's GET latency through the gateway beside rkv's own on
# the same server, in one run, into one report.
#
# Usage: bench/gateway.sh [--quick] [--build_dir=DIR] [--out=FILE]
#                         [--requests=N] [--clients=N] [--data_bytes=N]
#                         [--threads=N]
#
#   --quick       a proof that the command works, in seconds: 2000
#                 requests per test and 2000 GETs per latency run; the report goes under the build dir
#                 (gateway-quick.md) unless --out says otherwise, and its
#                 figures mean nothing.
#   --build_dir   a built tree holding server/rkv-server,
#                 gateway/rkv-gateway and bench/rkv-ycsb (default
#                 build/release); nothing is built here. The binaries and librkv are copied at the
#                 start, so a rebuild during the run does not mix versions.
#   --out         the report (default bench/results/gateway-<UTC time>.md).
#   --requests    requests per redis-benchmark test (default 200000).
#   --clients     redis-benchmark connections (default 50, its own).
#   --data_bytes  SET value size (default 1024).
#   --threads     rkv-gateway's --threads (default 2).
#   --latency_ops GETs per latency run (default 20000).
#
# Stores, one at a time on 127.0.0.1 (free ports, a temporary folder
# removed at exit), each stopped before the next starts:
#   rkv-gateway  rkv-server --transport=tcp --durability=none --memory=1G,
#                and rkv-gateway --transport=tcp on it (Redis only);
#   redis        redis-server --save '' --appendonly no (memory only, the
#                like-for-like peer of rkv --durability=none).
# Each runs `redis-benchmark -t set,get -P 16 -n N -c C -d D -r 100000
# --csv`; the report gives each test's requests per second, the ratio of
# rkv-gateway to redis, and every command. Latency, while the gateway's
# store is up: one rkv-ycsb thread GETs 10,000 records of D bytes (loaded
# and read once first, so that both clients' location caches are warm)
# through the gateway (--target=redis) and from rkv-server directly
# (--target=rkv, tcp), three rounds alternating, and the report gives the
# median p50 of each and the gateway's added p50 (the target: under
# 10 µs); the same rkv-ycsb run on redis-server gives Redis's own p50. One machine runs the stores and
# the client: the figures compare on equal terms, not absolute capacity.
set -euo pipefail
cd "$(dirname "$0")/.."

quick=0
build_dir=build/release
out=""
requests=200000
clients=50
data_bytes=1024
threads=2
latency_ops=20000
for arg in "$@"; do
  case "$arg" in
    --quick) quick=1 ;;
    --build_dir=*) build_dir="${arg#*=}" ;;
    --out=*) out="${arg#*=}" ;;
    --requests=*) requests="${arg#*=}" ;;
    --clients=*) clients="${arg#*=}" ;;
    --data_bytes=*) data_bytes="${arg#*=}" ;;
    --threads=*) threads="${arg#*=}" ;;
    --latency_ops=*) latency_ops="${arg#*=}" ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "gateway.sh: unknown argument $arg (--help)" >&2; exit 2 ;;
  esac
done
for n in "$requests" "$clients" "$data_bytes" "$threads" "$latency_ops"; do
  [[ "$n" =~ ^[1-9][0-9]*$ ]] || { echo "gateway.sh: counts must be positive integers" >&2; exit 2; }
done
if [ "$quick" = 1 ]; then
  requests=2000
  latency_ops=2000
  [ -n "$out" ] || out="$build_dir/gateway-quick.md"
fi
stamp="$(date -u +%Y-%m-%dT%H%MZ)"
[ -n "$out" ] || out="bench/results/gateway-${stamp}.md"

for tool in redis-server redis-benchmark; do
  command -v "$tool" >/dev/null || { echo "gateway.sh: $tool is not installed (deploy/install-deps.sh)" >&2; exit 2; }
done
for b in server/rkv-server gateway/rkv-gateway bench/rkv-ycsb; do
  [ -x "$build_dir/$b" ] || { echo "gateway.sh: $build_dir/$b is missing: build it first" >&2; exit 2; }
done

work="$(mktemp -d /tmp/rkv-bench-gateway.XXXXXX)"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
mkdir -p "$work/bin" "$work/lib"
cp "$build_dir/server/rkv-server" "$build_dir/gateway/rkv-gateway" "$build_dir/bench/rkv-ycsb" "$work/bin/"
cp -P "$build_dir"/client/librkv.so* "$work/lib/"
[ -e "$build_dir/proto/librkv_proto.so" ] && cp -P "$build_dir"/proto/librkv_proto.so* "$work/lib/"
export LD_LIBRARY_PATH="$work/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# Waits for PATTERN in FILE (a process's stdout) and prints its first group.
wait_line() {
  local file="$1" pattern="$2" pid="$3" what="$4"
  for _ in $(seq 1 1200); do
    if m="$(grep -oE "$pattern" "$file" 2>/dev/null | head -n 1)" && [ -n "$m" ]; then
      echo "$m"
      return 0
    fi
    kill -0 "$pid" 2>/dev/null || { echo "gateway.sh: $what exited during start-up" >&2; exit 1; }
    sleep 0.1
  done
  echo "gateway.sh: $what did not start" >&2
  exit 1
}

benchmark_cmd=(redis-benchmark -h 127.0.0.1 -t set,get -P 16 -n "$requests" -c "$clients" -d "$data_bytes"
  -r 100000 --csv)
declare -A rps
commands=()

# Runs redis-benchmark on PORT; fills rps[STORE,TEST].
run_benchmark() {
  local store="$1" port="$2"
  local cmd=("${benchmark_cmd[@]}" -p "$port")
  commands+=("$store: ${cmd[*]}")
  echo "gateway.sh: $store: ${cmd[*]}" >&2
  local csv
  csv="$("${cmd[@]}" 2>"$work/$store.benchmark.err")"
  while IFS=, read -r test value _; do
    test="${test//\"/}"
    value="${value//\"/}"
    [[ "$value" =~ ^[0-9.]+$ ]] && rps["$store,$test"]="$value"
  done <<< "$csv"
  for t in SET GET; do
    [ -n "${rps[$store,$t]:-}" ] || { echo "gateway.sh: $store: no $t result:" >&2; echo "$csv" >&2; exit 1; }
  done
}

# One rkv-ycsb GET latency run; appends "p50 p99" (µs) to lat[NAME] and
# the command to commands.
declare -A lat
run_latency() {
  local name="$1"
  shift
  local cmd=("$work/bin/rkv-ycsb" "$@" --workload=get --records=10000 --value_bytes="$data_bytes"
    --operations="$latency_ops" --warm_reads --threads=1 --progress=false --output_format=csv)
  commands+=("$name: ${cmd[*]}")
  echo "gateway.sh: $name: ${cmd[*]}" >&2
  local csv
  csv="$("${cmd[@]}" 2>"$work/$name.ycsb.err")" || { echo "gateway.sh: $name failed:" >&2; cat "$work/$name.ycsb.err" >&2; exit 1; }
  local got
  got="$(awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) col[$i] = i; next }
                  $col["op"] == "get" { print $col["p50_us"], $col["p99_us"] }' <<< "$csv")"
  [ -n "$got" ] || { echo "gateway.sh: $name: no GET latency in:" >&2; echo "$csv" >&2; exit 1; }
  lat["$name"]="${lat[$name]:-} $got"
}

# The median of the p50s (odd fields) in lat[NAME].
median_p50() {
  echo "${lat[$1]}" | awk '{ for (i = 1; i <= NF; i += 2) print $i }' | sort -g |
    awk '{ v[NR] = $1 } END { printf "%.1f", (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

# The runs in lat[NAME] as "p50/p99, p50/p99, ...".
runs_of() {
  echo "${lat[$1]}" | awk '{ for (i = 1; i < NF; i += 2) printf "%s%s/%s", (i > 1 ? ", " : ""), $i, $(i + 1) }'
}

# rkv-gateway on rkv-server.
echo "bench-token-$$" > "$work/token"
chmod 600 "$work/token"
server_cmd=("$work/bin/rkv-server" --listen=127.0.0.1:0 --data_dir="$work/data" --token_file="$work/token"
  --transport=tcp --durability=none --memory=1G)
"${server_cmd[@]}" > "$work/server.out" 2> "$work/server.log" &
server_pid=$!
pids+=("$server_pid")
server="$(wait_line "$work/server.out" 'listening on [^ ]+' "$server_pid" rkv-server | awk '{print $3}')"
gateway_port="$(free_port)"
gateway_cmd=("$work/bin/rkv-gateway" --server="$server" --token_file="$work/token" --transport=tcp
  --redis_listen=127.0.0.1:"$gateway_port" --memcached_listen= --threads="$threads")
"${gateway_cmd[@]}" > "$work/gateway.out" 2> "$work/gateway.log" &
gateway_pid=$!
pids+=("$gateway_pid")
wait_line "$work/gateway.out" 'redis listening on [^ ]+' "$gateway_pid" rkv-gateway >/dev/null
run_benchmark rkv-gateway "$gateway_port"
for _ in 1 2 3; do
  run_latency gateway-get --target=redis --server=127.0.0.1:"$gateway_port"
  run_latency rkv-get --target=rkv --server="$server" --token_file="$work/token" --transport=tcp
done
errors="$(grep -cE '^[EF][0-9]{8} ' "$work/gateway.log" || true)"
kill "$gateway_pid" "$server_pid"
wait "$gateway_pid" "$server_pid" 2>/dev/null || true
pids=()

# redis-server.
redis_port="$(free_port)"
mkdir -p "$work/redis"
redis_cmd=(redis-server --port "$redis_port" --bind 127.0.0.1 --save "" --appendonly no --dir "$work/redis")
"${redis_cmd[@]}" > "$work/redis.log" 2>&1 &
redis_pid=$!
pids+=("$redis_pid")
for _ in $(seq 1 200); do
  redis-cli -p "$redis_port" ping >/dev/null 2>&1 && break
  sleep 0.1
done
run_benchmark redis "$redis_port"
run_latency redis-get --target=redis --server=127.0.0.1:"$redis_port"

mkdir -p "$(dirname "$out")"
{
  echo "# rkv-gateway beside redis-server: redis-benchmark GET and SET, pipelines of 16"
  echo
  echo "Run $stamp on $(hostname) ($(nproc) CPUs, $(uname -r)), commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)."
  echo "Written by \`bench/gateway.sh $*\`; nothing edited by hand."
  [ "$quick" = 1 ] && echo && echo "**--quick: a proof that the command works; the figures mean nothing.**"
  echo
  echo "| test | rkv-gateway (requests/s) | redis (requests/s) | rkv-gateway / redis |"
  echo "|---|---|---|---|"
  for t in SET GET; do
    g="${rps[rkv-gateway,$t]}"
    r="${rps[redis,$t]}"
    ratio="$(awk -v g="$g" -v r="$r" 'BEGIN { if (r > 0) printf "%.2fx", g / r; else print "-" }')"
    echo "| $t | $g | $r | $ratio |"
  done
  echo
  g50="$(median_p50 gateway-get)"
  k50="$(median_p50 rkv-get)"
  added="$(awk -v g="$g50" -v k="$k50" 'BEGIN { printf "%.1f", g - k }')"
  echo "One client's GET latency (rkv-ycsb, one thread, $data_bytes-byte values, $latency_ops GETs a run;"
  echo "median p50 of three alternating runs; each run's p50/p99 in brackets), in µs:"
  echo
  echo "| GET through rkv-gateway | rkv's own GET (same server) | added by the gateway (target < 10) | redis-server GET |"
  echo "|---|---|---|---|"
  echo "| $g50 ($(runs_of gateway-get)) | $k50 ($(runs_of rkv-get)) | **$added** | $(median_p50 redis-get) ($(runs_of redis-get)) |"
  echo
  echo "The gateway logged $errors error lines. Values of $data_bytes bytes, $clients connections,"
  echo "$requests requests per test, keys from 100,000 (-r). Each gateway loop thread executes"
  echo "the GETs (SETs) of all the pipelines it read in one pass over its ready connections as"
  echo "one MultiGet (MultiPut), its round (docs/design.md §8.14.2), over rkv's tcp transport on"
  echo "loopback: a GET is an emulated READ served by the server's polling thread, not an RDMA READ."
  echo
  echo "Commands:"
  echo
  for cmd in "$(printf '%q ' "${server_cmd[@]}")" "$(printf '%q ' "${gateway_cmd[@]}")" \
             "$(printf '%q ' "${redis_cmd[@]}")"; do
    echo "    ${cmd% }" | sed "s|$work|\$WORK|g"
  done
  for c in "${commands[@]}"; do echo "    $c" | sed "s|$work|\$WORK|g"; done
} > "$out"
echo "gateway.sh: report in $out" >&2
cat "$out"
