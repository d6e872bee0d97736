#!/bin/sh
# Installs rkv's client component into a scratch prefix, then configures,
# builds and runs a consumer project that uses find_package(rkv CONFIG);
# then installs everything into another and runs each installed program's
# --help.
# Usage: install_find_package.sh CMAKE BUILD_DIR CONSUMER_SRC GENERATOR [SANITIZERS]
set -eu
cmake=$1
build=$2
consumer=$3
generator=$4
sanitize=${5:-}

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

"$cmake" --install "$build" --component client --prefix "$scratch/prefix" > "$scratch/install.log"

for f in include/rkv/client.h include/rkv/admin.h include/rkv/status.h bin/kvctl; do
  [ -e "$scratch/prefix/$f" ] || { echo "missing installed $f"; exit 1; }
done
# The public headers must reach no internal header.
if grep -n '#include "common/' "$scratch/prefix/include/rkv/"*.h; then
  echo "an installed header includes an internal one"; exit 1
fi
# Nothing test-only is exported (client/client_test_peer.h stays inside).
lib=$(find "$scratch/prefix" -name 'librkv.so.*' -type f | head -n 1)
[ -n "$lib" ] || { echo "missing installed librkv.so"; exit 1; }
if nm -DC --defined-only "$lib" | grep -E 'ClientTestPeer|AttemptsOn'; then
  echo "librkv exports a test-only symbol"; exit 1
fi
nm -DC --defined-only "$lib" | grep -q 'rkv::ClusterAdmin::Members' || { echo "librkv lacks ClusterAdmin"; exit 1; }

flags=""
if [ -n "$sanitize" ]; then
  flags="-fsanitize=$(echo "$sanitize" | tr ';' ',')"
fi
"$cmake" -S "$consumer" -B "$scratch/build" -G "$generator" \
  -DCMAKE_PREFIX_PATH="$scratch/prefix" -DCMAKE_CXX_FLAGS="$flags" > "$scratch/configure.log" \
  || { cat "$scratch/configure.log"; exit 1; }
"$cmake" --build "$scratch/build" > "$scratch/build.log" || { cat "$scratch/build.log"; exit 1; }

# The consumer connects to a port where nothing listens and must get a
# clean UNAVAILABLE; `--help` of the installed kvctl must run (RPATH).
"$scratch/build/rkv_consumer"
"$scratch/prefix/bin/kvctl" --help > "$scratch/help.txt"
grep -q "kvctl \[flags\] put KEY" "$scratch/help.txt" || { echo "kvctl --help lacks the usage"; exit 1; }

# The whole install (no --component), as deploy/quickstart.sh runs it: the
# daemons beside kvctl, each runnable from the prefix (RPATH).
"$cmake" --install "$build" --prefix "$scratch/full" > "$scratch/install-full.log"
for b in kvctl rkv-server rkv-coordinator; do
  [ -x "$scratch/full/bin/$b" ] || { echo "missing installed bin/$b"; exit 1; }
  "$scratch/full/bin/$b" --help > "$scratch/$b-help.txt" 2>&1 || true
  grep -q "$b" "$scratch/$b-help.txt" || { echo "installed $b --help failed:"; cat "$scratch/$b-help.txt"; exit 1; }
done
[ -n "$(find "$scratch/full" -path '*/cmake/rkv/rkvConfig.cmake')" ] || { echo "missing installed rkvConfig.cmake"; exit 1; }

# The installed kvctl against the installed server: piped, `get` writes the
# value's bytes alone and `put` the bare version; on a terminal (script(1)
# gives it one) `put` says "version N" and `get` ends the value with a
# newline.
mkdir -p "$scratch/server"
# out exists before the loop below reads it: the background job opens its
# redirection in the forked shell, which may run after the first sed.
: > "$scratch/server/out"
head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$scratch/server/token"
"$scratch/full/bin/rkv-server" --listen=127.0.0.1:0 --data_dir="$scratch/server/data" \
  --token_file="$scratch/server/token" --transport=tcp --memory=16777216 \
  > "$scratch/server/out" 2> "$scratch/server/log" &
server=$!
trap 'kill $server 2>/dev/null; wait $server 2>/dev/null; rm -rf "$scratch"' EXIT
address=""
for _ in $(seq 1 600); do
  address=$(sed -n 's/^rkv-server listening on \([^ ]*\) .*/\1/p' "$scratch/server/out")
  [ -n "$address" ] && break
  kill -0 $server 2>/dev/null || { echo "rkv-server did not start:"; cat "$scratch/server/log"; exit 1; }
  sleep 0.1
done
[ -n "$address" ] || { echo "rkv-server did not listen within 60 s"; exit 1; }
kvctl="$scratch/full/bin/kvctl --server=$address --token_file=$scratch/server/token"
[ "$($kvctl put k v1)" = "1" ] || { echo "piped put does not print the bare version"; exit 1; }
$kvctl get k > "$scratch/piped"
[ "$(od -An -c "$scratch/piped" | tr -d ' ')" = "v1" ] || { echo "piped get adds bytes to the value"; exit 1; }
script -qec "$kvctl put k v2; $kvctl get k" /dev/null > "$scratch/tty"
[ "$(tr -d '\r' < "$scratch/tty" | od -An -c | tr -d ' \n')" = 'version2\nv2\n' ] \
  || { echo "kvctl on a terminal printed:"; od -c "$scratch/tty"; exit 1; }
echo "install_find_package: OK"
