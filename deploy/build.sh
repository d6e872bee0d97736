#!/usr/bin/env bash
# Configures and builds rkv with a CMake preset (default: release).
# Usage: deploy/build.sh [PRESET [--configure-only]]
# Prints ninja's progress ([finished/total percent elapsed-seconds] per step)
# and the time the build took.
# Environment: RKV_DEBUG_INFO=lines configures a new build directory with
#              line tables only (-g1) in place of full debug info (-g). CI
#              sets it (.ci/run): every stack trace a failing test, a
#              sanitizer or a fuzzer prints still names files and lines, and
#              the compiler writes a quarter of the debug information, which
#              at -O2 saves about a third of the compile time. A developer's
#              build keeps full debug info for the debugger.
set -euo pipefail
cd "$(dirname "$0")/.."
preset="${1:-release}"
jobs="$(nproc 2>/dev/null || echo 2)"
if [ ! -f "build/${preset}/CMakeCache.txt" ]; then
  debug_info=()
  case "${RKV_DEBUG_INFO:-full}" in
    full) ;;
    lines)
      case "${preset}" in
        fuzz) debug_info=(-DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1") ;;
        *) debug_info=(-DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG" -DCMAKE_CXX_FLAGS_DEBUG="-g1") ;;
      esac
      ;;
    *)
      echo "build: RKV_DEBUG_INFO must be 'full' or 'lines', not '${RKV_DEBUG_INFO}'" >&2
      exit 2
      ;;
  esac
  echo "build: configuring preset ${preset}"
  cmake --preset "${preset}" "${debug_info[@]}" >/dev/null
fi
if [ "${2:-}" = "--configure-only" ]; then
  exit 0
fi
echo "build: compiling preset ${preset} with ${jobs} jobs; a first build takes several minutes" \
  "(each line: [steps done/total percent seconds])"
start=$SECONDS
# Ninja's status line, with the elapsed time, unless the caller set one.
export NINJA_STATUS="${NINJA_STATUS:-[%f/%t %p %es] }"
rc=0
cmake --build --preset "${preset}" -j "${jobs}" || rc=$?
elapsed=$((SECONDS - start))
if [ "${rc}" -ne 0 ]; then
  echo "build: preset ${preset} FAILED after ${elapsed} s" >&2
  exit "${rc}"
fi
echo "build: preset ${preset} built in ${elapsed} s"
