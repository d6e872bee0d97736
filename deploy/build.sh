#!/usr/bin/env bash
# Configures and builds rkv with a CMake preset (default: release).
# Usage: deploy/build.sh [PRESET]
set -euo pipefail
cd "$(dirname "$0")/.."
preset="${1:-release}"
jobs="$(nproc 2>/dev/null || echo 2)"
if [ ! -f "build/${preset}/CMakeCache.txt" ]; then
  cmake --preset "${preset}" >/dev/null
fi
echo "build: compiling preset ${preset} with ${jobs} jobs (a first build takes several minutes)"
cmake --build --preset "${preset}" -j "${jobs}"
