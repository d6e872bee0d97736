#!/usr/bin/env bash
# catchup.sh - how long a server that comes back with its disk wiped takes
# to hold every shard again: one rkv-coordinator and three rkv-servers on
# loopback (tcp, R = 3, 1024 shards), --records keys of --value_bytes loaded
# with rkv-ycsb, then one server killed (kill -9), its data dir removed and
# the server started again on its address (it joins under a new id; its old
# id is replaced after --replace_after_ms). Measured from that start to the
# first map in which no shard has a syncing replica and every shard has its
# three UP replicas: seconds, MB/s of values, the ReportCaughtUp calls the
# new server made and the map versions committed meanwhile. Beside it, in
# the same run, the baseline: copying a surviving server's data dir (the
# same records, as RocksDB holds them) with cp, what the disk moves.
#
# Usage: bench/catchup.sh [--build_dir=DIR] [--out=FILE] [--records=N]
#                         [--value_bytes=N] [--replace_after_ms=N]
#
#   --build_dir         a built tree with rkv-server, rkv-coordinator, kvctl
#                       and rkv-ycsb (default build/release); nothing is
#                       built here.
#   --out               the report (default bench/results/catchup-<UTC
#                       date>.md).
#   --records           keys loaded before the kill (default 100000).
#   --value_bytes       bytes per value (default 1024).
#   --replace_after_ms  the coordinator's --replace_after_ms (default 1000:
#                       the catch-up, not the wait before it, is measured).
#
# Ports: RKV_COORDINATOR_PORT (default 8600) and RKV_SERVER_BASE_PORT
# (default 8701, then the two after it; their admin ports 100 above).
# Exit status: 0 when the server caught up within 900 s, 1 when it did not,
# 2 for bad usage or a missing build.
set -euo pipefail

die() { printf 'catchup.sh: ERROR: %s\n' "$*" >&2; exit 2; }

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
invocation="bench/catchup.sh${*:+ $*}"
build_dir=$repo/build/release
out=""
records=100000
value_bytes=1024
replace_after_ms=1000
for arg in "$@"; do
  case $arg in
    --build_dir=*) build_dir=${arg#*=} ;;
    --out=*) out=${arg#*=} ;;
    --records=*) records=${arg#*=} ;;
    --value_bytes=*) value_bytes=${arg#*=} ;;
    --replace_after_ms=*) replace_after_ms=${arg#*=} ;;
    -h | --help) sed -n '2,/^set -euo/{/^#/s/^# \{0,1\}//p}' "$0"; exit 0 ;;
    *) die "unknown argument '$arg' (see --help)" ;;
  esac
done
for n in "$records" "$value_bytes" "$replace_after_ms"; do
  [[ $n =~ ^[1-9][0-9]*$ ]] || die "'$n' is not a positive integer"
done
build_dir=$(cd "$build_dir" 2>/dev/null && pwd -P) || die "build dir missing; build with deploy/build.sh"
server_bin=$build_dir/server/rkv-server
coordinator_bin=$build_dir/coordinator/rkv-coordinator
kvctl_bin=$build_dir/client/kvctl
ycsb_bin=$build_dir/bench/rkv-ycsb
for b in "$server_bin" "$coordinator_bin" "$kvctl_bin" "$ycsb_bin"; do
  [[ -x $b ]] || die "$b not built; build with deploy/build.sh"
done
coordinator_port=${RKV_COORDINATOR_PORT:-8600}
base_port=${RKV_SERVER_BASE_PORT:-8701}
coordinator=127.0.0.1:$coordinator_port

stamp=$(date -u +%Y-%m-%dT%H%MZ)
[[ -n $out ]] || out=$repo/bench/results/catchup-$stamp.md
mkdir -p "$(dirname "$out")"
work=$(mktemp -d "${TMPDIR:-/tmp}/rkv-catchup.XXXXXX")
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", b - a }'; }

head -c 32 /dev/urandom | base64 >"$work/token"
head -c 32 /dev/urandom | base64 >"$work/cluster_token"
"$coordinator_bin" --listen="$coordinator" --data_dir="$work/coordinator" --token_file="$work/token" \
  --servers=3 --replicas=3 --shards=1024 --replace_after_ms="$replace_after_ms" \
  >"$work/coordinator.out" 2>"$work/coordinator.log" &
pids+=($!)
memory=$((records * (value_bytes + 256) * 2 / 1048576 + 256))
server_pid=()
start_server() {  # INDEX (0..2)
  local i=$1 port=$((base_port + $1))
  "$server_bin" --listen="127.0.0.1:$port" --admin_listen="127.0.0.1:$((port + 100))" --data_dir="$work/s$i" \
    --token_file="$work/token" --cluster_token_file="$work/cluster_token" --coordinator="$coordinator" \
    --transport=tcp --memory="${memory}M" --max_keys=$((records * 2 + 1000)) \
    >"$work/s$i.out" 2>>"$work/s$i.log" &
  server_pid[i]=$!
  pids+=($!)
}
kvctl() { "$kvctl_bin" --coordinator="$coordinator" --token_file="$work/token" "$@"; }
# "SYNCING UP" of the current map: shards with a syncing replica, UP servers.
state() {
  kvctl --output=json members 2>/dev/null | python3 -c '
import json, sys
ms = json.load(sys.stdin)
print(sum(m.get("syncing_shards", 0) for m in ms), sum(1 for m in ms if m.get("state") == "UP"))' 2>/dev/null ||
    echo "? ?"
}
map_version() { kvctl where map-version-probe 2>/dev/null | grep -o 'map version [0-9]*' | grep -o '[0-9]*$' || echo "?"; }

sleep 1
for i in 0 1 2; do start_server "$i"; done
for _ in $(seq 1 120); do
  read -r syncing up <<<"$(state)"
  [[ $up == 3 && $syncing == 0 ]] && break
  sleep 0.5
done
[[ $up == 3 ]] || die "the cluster did not form (logs in $work)"

echo "catchup.sh: loading $records records of $value_bytes bytes"
t0=$(now)
"$ycsb_bin" --coordinator="$coordinator" --token_file="$work/token" --transport=tcp --records="$records" \
  --value_bytes="$value_bytes" --threads=4 --workload=get --operations=1000 >"$work/ycsb.out" 2>&1 ||
  die "rkv-ycsb failed: $(tail -n 3 "$work/ycsb.out")"
load_s=$(secs "$t0" "$(now)")

# The baseline: the same records, as a surviving server's RocksDB holds them.
sync
t0=$(now)
cp -a "$work/s0" "$work/copy" && sync
copy_s=$(secs "$t0" "$(now)")
copy_mb=$(du -sm "$work/copy" | cut -f1)
rm -rf "$work/copy"

version_before=$(map_version)
kill -9 "${server_pid[2]}"
wait "${server_pid[2]}" 2>/dev/null || true
rm -rf "$work/s2"
t0=$(now)
start_server 2
caught=1
progress=""
while true; do
  read -r syncing up <<<"$(state)"
  elapsed=$(secs "$t0" "$(now)")
  progress+="| $elapsed | $syncing | $up |"$'\n'
  if [[ $up == 3 && $syncing == 0 ]] && awk -v e="$elapsed" -v r="$replace_after_ms" 'BEGIN { exit !(e * 1000 > r + 2000) }'; then
    break
  fi
  if awk -v e="$elapsed" 'BEGIN { exit !(e > 900) }'; then caught=0; break; fi
  sleep 1
done
catchup_s=$(secs "$t0" "$(now)")
version_after=$(map_version)
reports=$(grep -c "caught up on" "$work/s2.log" || true)
mb=$(awk -v n="$records" -v b="$value_bytes" 'BEGIN { printf "%.1f", n * b / 1e6 }')
rate=$(awk -v m="$mb" -v s="$catchup_s" 'BEGIN { printf "%.2f", m / s }')
copy_rate=$(awk -v m="$copy_mb" -v s="$copy_s" 'BEGIN { printf "%.0f", (s > 0 ? m * 1.048576 / s : 0) }')
commit=$(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo unknown)
if [[ -n $(git -C "$repo" status --porcelain 2>/dev/null | head -n 1) ]]; then commit+=" (with uncommitted changes)"; fi
{
  echo "# Catch-up of a wiped server ($stamp)"
  echo
  echo "Produced by \`$invocation\` (rkv commit $commit, binaries from \`${build_dir#"$repo"/}\`)."
  echo "Machine: $(nproc) CPUs, Linux $(uname -r); load average at the end $(cut -d' ' -f1-3 /proc/loadavg)."
  echo "One rkv-coordinator and three rkv-servers on loopback (tcp), R = 3, 1024 shards,"
  echo "\`--replace_after_ms=$replace_after_ms\`; $records records of $value_bytes bytes loaded in $load_s s."
  echo
  echo "| figure | value |"
  echo "|---|---:|"
  if [[ $caught == 1 ]]; then
    echo "| wiped server back to every shard (from its start), s | $catchup_s |"
  else
    echo "| wiped server back to every shard (from its start), s | not within 900 s |"
  fi
  echo "| values caught up, MB | $mb |"
  echo "| MB/s of values | $rate |"
  echo "| ReportCaughtUp calls of the new server | $reports |"
  echo "| map versions committed meanwhile | $version_before -> $version_after |"
  echo "| baseline: cp -a of a surviving server's data dir ($copy_mb MiB), s | $copy_s |"
  echo "| baseline MB/s | $copy_rate |"
  echo
  echo "Progress (seconds from the start; shards with a syncing replica; UP servers):"
  echo
  echo "| s | syncing | UP |"
  echo "|---:|---:|---:|"
  printf '%s' "$progress"
} >"$out"
echo "catchup.sh: caught up in $catchup_s s ($rate MB/s; cp baseline $copy_rate MB/s); report in ${out#"$repo"/}"
[[ $caught == 1 ]]
