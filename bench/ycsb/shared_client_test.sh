#!/bin/bash
# ctest bench_ycsb_shared_client: rkv-ycsb's threads share one rkv::Client
# (--rkv_client=shared, the default), so a key one thread found is a cached
# location for all: over 4 threads the reads of a few hot records miss about
# once per record, where a Client per thread (--rkv_client=per_thread)
# misses about once per record and thread. Also: a bad --rkv_client is
# refused with exit status 2, and both modes run without errors.
#
# Usage: shared_client_test.sh BUILD_DIR WORK_DIR
set -u
build=$1
work=$2
records=200
threads=4

fail() {
  echo "bench_ycsb_shared_client: $*" >&2
  exit 1
}

rm -rf "$work"
mkdir -p "$work"
head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$work/token"
"$build/server/rkv-server" --listen=127.0.0.1:0 --data_dir="$work/data" --token_file="$work/token" \
  --transport=tcp --durability=none --memory=64M >"$work/server.out" 2>"$work/server.log" &
server=$!
trap 'kill $server 2>/dev/null; wait $server 2>/dev/null' EXIT
addr=
for ((i = 0; i < 300; i++)); do
  addr=$(sed -n 's/^rkv-server listening on \([^ ]*\).*/\1/p' "$work/server.out" | tail -n 1)
  [[ -n $addr ]] && break
  kill -0 "$server" 2>/dev/null || fail "rkv-server exited: $(tail -n 5 "$work/server.log")"
  sleep 0.1
done
[[ -n $addr ]] || fail "rkv-server printed no listening line in 30 s"

ycsb=("$build/bench/rkv-ycsb" --target=rkv --server="$addr" --token_file="$work/token" --transport=tcp
  --records=$records --value_bytes=100 --threads=$threads --progress=false --timeout_ms=10000)

said=$("${ycsb[@]}" --workload=c --operations=10 --rkv_client=bogus 2>&1)
rc=$?
[[ $rc == 2 && $said == *"--rkv_client must be shared or per_thread"* ]] ||
  fail "--rkv_client=bogus: exit $rc, not 2 with the flag's error: $said"

"${ycsb[@]}" --workload=put --operations=1 >"$work/load.out" 2>&1 || fail "load failed: $(cat "$work/load.out")"

misses() { # mode: runs workload c, prints the location cache's misses
  local out=$work/$1.out
  "${ycsb[@]}" --workload=c --noload --key_distribution=uniform --operations=20000 --rkv_client="$1" \
    >"$out" 2>&1 || fail "--rkv_client=$1 failed: $(cat "$out")"
  grep -q '^  errors: none' "$out" || fail "--rkv_client=$1 had errors: $(cat "$out")"
  sed -n 's/^  location cache: .* \([0-9][0-9]*\) misses)$/\1/p' "$out"
}
shared=$(misses shared)
own=$(misses per_thread)
[[ -n $shared && -n $own ]] || fail "no location cache line in $work/shared.out or $work/per_thread.out"
# 20000 uniform reads of 200 records: every record is read by every thread.
((shared <= records * 3 / 2)) ||
  fail "--rkv_client=shared: $shared misses, more than 1.5 per record ($records records): the cache is not shared"
((own > records * 3 / 2)) ||
  fail "--rkv_client=per_thread: $own misses, not above 1.5 per record: the test cannot tell the modes apart"
echo "bench_ycsb_shared_client: misses over $records records, $threads threads: shared $shared, per_thread $own"
