#!/usr/bin/env bash
# The builds CI runs beside deploy/test.sh, each a check of its own:
#   debug-asan     AddressSanitizer + UndefinedBehaviorSanitizer (GCC), every
#                  host test
#   tsan           ThreadSanitizer, built with clang, which also checks the
#                  lock annotations (-Wthread-safety -Werror): every host test
#   release-plain  the plain Release type (-O3) as a user's own build, with
#                  warnings as errors so that a GCC -O3 false positive is
#                  caught here rather than by a user
# Usage: deploy/test-presets.sh [PRESET...]   (default: all three)
# Exits non-zero when a build or a test fails.
set -euo pipefail
cd "$(dirname "$0")/.."

deploy/install-deps.sh

presets=("$@")
[ ${#presets[@]} -gt 0 ] || presets=(debug-asan tsan release-plain)

for preset in "${presets[@]}"; do
  start=$SECONDS
  case "${preset}" in
    debug-asan|tsan)
      deploy/build.sh "${preset}"
      echo "== host tests under ${preset}"
      ctest --preset "${preset}" --timeout 1200
      ;;
    release-plain)
      if [ ! -f build/release-plain/CMakeCache.txt ]; then
        cmake --preset release-plain -DRKV_WERROR=ON >/dev/null
      fi
      deploy/build.sh release-plain
      ;;
    *)
      echo "test-presets: unknown preset '${preset}' (expected debug-asan, tsan or release-plain)" >&2
      exit 2
      ;;
  esac
  echo "== ${preset}: done in $((SECONDS - start)) s"
done
