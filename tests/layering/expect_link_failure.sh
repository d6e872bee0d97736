#!/bin/sh
# Builds a target that must fail to link because one layer uses another it
# does not link, and checks that it failed for that reason: an undefined
# reference to SYMBOL. Usage: expect_link_failure.sh CMAKE BUILD_DIR TARGET SYMBOL
set -u
cmake=$1
build=$2
target=$3
symbol=$4
out=$("$cmake" --build "$build" --target "$target" 2>&1)
rc=$?
if [ "$rc" -eq 0 ]; then
  echo "FAIL: $target linked although its layer uses one it does not link"
  exit 1
fi
if ! printf '%s\n' "$out" | grep -q "undefined reference to .*$symbol"; then
  printf '%s\n' "$out" | tail -20
  echo "FAIL: $target failed, but not with an undefined reference to $symbol"
  exit 1
fi
echo "ok: $target fails to link (undefined reference to $symbol)"
