#!/bin/sh
# Installs rkv's client component into a scratch prefix, then configures,
# builds and runs a consumer project that uses find_package(rkv CONFIG).
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
echo "install_find_package: OK"
