#!/usr/bin/env bash
# tls.sh - what TLS on the tcp data plane costs: rkv-ycsb GETs and PUTs on
# an rkv-server with --data_plane_tls beside the same on plain tcp (the
# baseline), in one run, alternating, into one report.
#
# Usage: bench/tls.sh [--quick] [--build_dir=DIR] [--out=FILE]
#                     [--operations=N] [--value_bytes=N] [--rounds=N]
#
#   --quick        a proof that the command works, in seconds: 2000
#                  operations a run, one round; the report goes under the
#                  build dir (tls-quick.md) unless --out says otherwise, and
#                  its figures mean nothing.
#   --build_dir    a built tree holding server/rkv-server and bench/rkv-ycsb
#                  (default build/release); nothing is built here. The
#                  binaries and librkv are copied at the start, so a rebuild
#                  during the run does not mix versions.
#   --out          the report (default bench/results/tls-<UTC time>.md).
#   --operations   operations per rkv-ycsb run (default 50000).
#   --value_bytes  value size (default 1024).
#   --rounds       runs of each case per store, alternating (default 3).
#
# Two rkv-servers on 127.0.0.1 (--transport=tcp --durability=none, so that
# the disk does not hide the transport), up together: "plain" and "tls"
# (--data_plane_tls with a CA and a certificate made here with openssl).
# Each case (workload get or put, 1 or 4 client threads, 10,000 records
# loaded and read once first) runs on plain, then on tls, --rounds times;
# the report gives the median ops/s of each and their ratio, and the
# median p50 and p99 with TLS's added p50. A connection's handshake is
# outside the timed phase: the figures are the steady state's.
set -euo pipefail
cd "$(dirname "$0")/.."

quick=0
build_dir=build/release
out=""
operations=50000
value_bytes=1024
rounds=3
for arg in "$@"; do
  case "$arg" in
    --quick) quick=1 ;;
    --build_dir=*) build_dir="${arg#*=}" ;;
    --out=*) out="${arg#*=}" ;;
    --operations=*) operations="${arg#*=}" ;;
    --value_bytes=*) value_bytes="${arg#*=}" ;;
    --rounds=*) rounds="${arg#*=}" ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "tls.sh: unknown argument $arg (--help)" >&2; exit 2 ;;
  esac
done
for n in "$operations" "$value_bytes" "$rounds"; do
  [[ "$n" =~ ^[1-9][0-9]*$ ]] || { echo "tls.sh: counts must be positive integers" >&2; exit 2; }
done
if [ "$quick" = 1 ]; then
  operations=2000
  rounds=1
  [ -n "$out" ] || out="$build_dir/tls-quick.md"
fi
stamp="$(date -u +%Y-%m-%dT%H%MZ)"
[ -n "$out" ] || out="bench/results/tls-${stamp}.md"

command -v openssl >/dev/null || { echo "tls.sh: openssl is not installed (deploy/install-deps.sh)" >&2; exit 2; }
for b in server/rkv-server bench/rkv-ycsb; do
  [ -x "$build_dir/$b" ] || { echo "tls.sh: $build_dir/$b is missing: build it first" >&2; exit 2; }
done

work="$(mktemp -d /tmp/rkv-bench-tls.XXXXXX)"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
mkdir -p "$work/bin" "$work/lib" "$work/pki"
cp "$build_dir/server/rkv-server" "$build_dir/bench/rkv-ycsb" "$work/bin/"
cp -P "$build_dir"/client/librkv.so* "$work/lib/"
[ -e "$build_dir/proto/librkv_proto.so" ] && cp -P "$build_dir"/proto/librkv_proto.so* "$work/lib/"
export LD_LIBRARY_PATH="$work/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

# A CA and a server certificate for 127.0.0.1 (as deploy/cluster.sh --tls
# makes them).
pki="$work/pki"
{
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout "$pki/ca.key" \
    -out "$pki/ca.crt" -days 2 -subj "/CN=rkv-bench-ca" &&
    openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$pki/server.key" &&
    openssl req -new -key "$pki/server.key" -subj "/CN=server" -out "$pki/server.csr" &&
    printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\n' > "$pki/ext" &&
    openssl x509 -req -in "$pki/server.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" -CAcreateserial -days 2 \
      -extfile "$pki/ext" -out "$pki/server.crt"
} > "$work/openssl.log" 2>&1 || { echo "tls.sh: openssl failed:" >&2; cat "$work/openssl.log" >&2; exit 1; }

echo "bench-token-$$" > "$work/token"
chmod 600 "$work/token"

# Waits for "listening on HOST:PORT" in FILE and prints HOST:PORT.
wait_address() {
  local file="$1" pid="$2" what="$3"
  for _ in $(seq 1 600); do
    if m="$(grep -oE 'listening on [^ ]+' "$file" 2>/dev/null | head -n 1)" && [ -n "$m" ]; then
      echo "${m#listening on }"
      return 0
    fi
    kill -0 "$pid" 2>/dev/null || { echo "tls.sh: $what exited during start-up:" >&2; cat "$work/$what.log" >&2; exit 1; }
    sleep 0.1
  done
  echo "tls.sh: $what did not start" >&2
  exit 1
}

declare -A address
declare -A client_flags
server_cmds=()
for store in plain tls; do
  cmd=("$work/bin/rkv-server" --listen=127.0.0.1:0 --data_dir="$work/data-$store" --token_file="$work/token"
    --transport=tcp --durability=none --memory=512M)
  if [ "$store" = tls ]; then
    cmd+=(--data_plane_tls --tls_cert="$pki/server.crt" --tls_key="$pki/server.key" --tls_ca="$pki/ca.crt")
    client_flags[$store]="--data_plane_tls --tls_ca=$pki/ca.crt"
  else
    client_flags[$store]=""
  fi
  server_cmds+=("$(printf '%q ' "${cmd[@]}")")
  "${cmd[@]}" > "$work/$store.out" 2> "$work/$store.log" &
  pid=$!
  pids+=("$pid")
  address[$store]="$(wait_address "$work/$store.out" "$pid" "$store")"
done

# One rkv-ycsb run; appends "ops_per_s p50 p99" to res[STORE,CASE].
declare -A res
commands=()
run_case() {
  local store="$1" workload="$2" threads="$3"
  # shellcheck disable=SC2206
  local extra=(${client_flags[$store]})
  local cmd=("$work/bin/rkv-ycsb" --target=rkv --server="${address[$store]}" --token_file="$work/token"
    --transport=tcp "${extra[@]}" --workload="$workload" --records=10000 --value_bytes="$value_bytes"
    --operations="$operations" --warm_reads --threads="$threads" --progress=false --output_format=csv)
  commands+=("$store $workload x$threads: ${cmd[*]}")
  echo "tls.sh: $store $workload x$threads" >&2
  local csv
  csv="$("${cmd[@]}" 2>"$work/ycsb.err")" || { echo "tls.sh: $store $workload failed:" >&2; cat "$work/ycsb.err" >&2; exit 1; }
  local got
  got="$(awk -F, -v op="$workload" 'NR == 1 { for (i = 1; i <= NF; i++) col[$i] = i; next }
                  $col["op"] == op { print $col["ops_per_s"], $col["p50_us"], $col["p99_us"] }' <<< "$csv")"
  [ -n "$got" ] || { echo "tls.sh: $store $workload: no result in:" >&2; echo "$csv" >&2; exit 1; }
  local errors
  errors="$(awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) col[$i] = i; next } { print $col["errors"]; exit }' <<< "$csv")"
  [ "$errors" = 0 ] || { echo "tls.sh: $store $workload: $errors errors" >&2; cat "$work/ycsb.err" >&2; exit 1; }
  res["$store,$workload,$threads"]="${res[$store,$workload,$threads]:-} $got"
}

# The median of field F (1: ops/s, 2: p50, 3: p99) of res[KEY].
median() {
  echo "${res[$1]}" | awk -v f="$2" '{ for (i = f; i <= NF; i += 3) print $i }' | sort -g |
    awk '{ v[NR] = $1 } END { printf "%.1f", (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

cases=("get 1" "put 1" "get 4" "put 4")
for _ in $(seq 1 "$rounds"); do
  for c in "${cases[@]}"; do
    read -r workload threads <<< "$c"
    run_case plain "$workload" "$threads"
    run_case tls "$workload" "$threads"
  done
done

mkdir -p "$(dirname "$out")"
{
  echo "# TLS on rkv's tcp data plane against plain tcp"
  echo
  echo "Run $stamp on $(hostname) ($(nproc) CPUs, $(uname -r)), commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown);"
  echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg). $(openssl version)."
  echo "Written by \`bench/tls.sh $*\`; nothing edited by hand."
  [ "$quick" = 1 ] && echo && echo "**--quick: a proof that the command works; the figures mean nothing.**"
  echo
  echo "rkv-ycsb against two rkv-servers up together on loopback (tcp, --durability=none),"
  echo "$value_bytes-byte values, $operations operations a run, $rounds round(s) alternating plain"
  echo "and TLS; medians over the rounds. Latency in µs."
  echo
  echo "| case | plain ops/s | TLS ops/s | TLS / plain | plain p50 | TLS p50 | added p50 | plain p99 | TLS p99 |"
  echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|"
  for c in "${cases[@]}"; do
    read -r workload threads <<< "$c"
    p="plain,$workload,$threads"
    t="tls,$workload,$threads"
    po="$(median "$p" 1)"
    to="$(median "$t" 1)"
    p50="$(median "$p" 2)"
    t50="$(median "$t" 2)"
    echo "| $workload, $threads thread(s) | $po | $to | $(awk -v a="$to" -v b="$po" 'BEGIN { printf "%.2fx", a / b }') |" \
         "$p50 | $t50 | $(awk -v a="$t50" -v b="$p50" 'BEGIN { printf "%.1f", a - b }') |" \
         "$(median "$p" 3) | $(median "$t" 3) |"
  done
  echo
  echo "Each run's ops/s, p50 and p99, in order:"
  echo
  for c in "${cases[@]}"; do
    read -r workload threads <<< "$c"
    echo "- $workload x$threads: plain${res[plain,$workload,$threads]}; tls${res[tls,$workload,$threads]}"
  done
  echo
  echo "TLS 1.3 in user space (OpenSSL through the transport's own BIO, no kTLS: docs/design.md §10)."
  echo
  echo "Commands:"
  echo
  for cmd in "${server_cmds[@]}"; do echo "    ${cmd% }" | sed "s|$work|\$WORK|g"; done
  for c in "${commands[@]}"; do echo "    $c" | sed "s|$work|\$WORK|g"; done
} > "$out"
echo "tls.sh: report in $out" >&2
cat "$out"
