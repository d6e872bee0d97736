#!/usr/bin/env bash
# The builds CI runs beside deploy/test.sh, each a check of its own:
#   debug-asan     AddressSanitizer + UndefinedBehaviorSanitizer (GCC), every
#                  host test but those of sanitizer_excluded (below), two at
#                  a time (the cross-process suites alone: RUN_SERIAL)
#   tsan           ThreadSanitizer, built with clang, which also checks the
#                  lock annotations (-Wthread-safety -Werror): the same tests
#                  less the grow and crash suites (tsan_excluded, below)
#   release-plain  the plain Release type (-O3) of what a user installs
#                  (`cmake -S . -B b -DCMAKE_BUILD_TYPE=Release`, default
#                  generator, warnings not errors: GCC 12 at -O3 warns
#                  falsely, e.g. -Wrestrict on string concatenation): the
#                  library, server, coordinator, kvctl and benchmarks; the
#                  tests are left out (RKV_BUILD_TESTS=OFF): the release
#                  preset builds and runs them, and compiling them again at
#                  -O3 proves nothing a user relies on. Built as a unity
#                  build (CMAKE_UNITY_BUILD, as the sanitizer presets are):
#                  the same code at the same -O3, in fewer, larger
#                  translation units; that each file also compiles alone
#                  is checked by the release preset, which never merges
#   fuzz           every libFuzzer target for the run count of
#                  fuzz/ci_runs.txt with a fixed seed (deploy/fuzz.sh --ci),
#                  so that a dry run repeats it
# The sanitizer builds run the cross-process suites at smaller loads (the
# release run of deploy/test.sh runs them in full): RKV_TEST_SCALE 0.25 (the
# loads of the grow, replication, failover, cluster and integration suites;
# the SoftRoCE guest runs them at 0.1), 5 crash cycles and 30 histories
# unless RKV_TEST_SCALE / RKV_CRASH_CYCLES / RKV_LIN_HISTORIES say. What the
# sanitizers look for (a race, a use after free, undefined behaviour) is in
# the code paths, which the smaller loads still take.
# Each build and its tests is a stage (deploy/test-stages.sh); a failed stage
# does not stop the next, and one summary at the end gives each stage's
# time, its tests' passed/failed/skipped counts (each test's output in
# build/PRESET/test-logs/tests/), the failures and the skips' reasons.
# Usage: deploy/test-presets.sh [--build-only] [STAGE...]   (default: all four)
# --build-only builds the stages' trees and nothing else, no summary
# (.ci/run starts it at the lowest priority beside the tests, so that the
# stages later find their builds done); exits non-zero when a build fails.
# Exits non-zero when a build or a test fails, or when a test was skipped
# and RKV_NO_SKIP=1 (CI).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
source deploy/test-stages.sh

build_only=0
if [ "${1:-}" = --build-only ]; then
  build_only=1
  shift
fi
presets=("$@")
[ ${#presets[@]} -gt 0 ] || presets=(debug-asan tsan release-plain fuzz)
for preset in "${presets[@]}"; do
  case "${preset}" in
    debug-asan|tsan|release-plain|fuzz) ;;
    *)
      echo "test-presets: unknown preset '${preset}' (expected debug-asan, tsan, release-plain or fuzz)" >&2
      exit 2
      ;;
  esac
done

# Tests the sanitizer stages leave out (ctest -E; see below).
sanitizer_excluded='^(layering_.*|install_find_package|debian_packages)$|CrashTest\..*/sync'
# Both sanitizers also leave to the release run the cross-process suites of
# the control plane whose time goes to processes waiting on it (deadlines,
# leases, etcd elections, TLS reloads, a benchmark's fixed run): TLS across
# processes, several coordinators on etcd, the histories across leader
# kills, Prometheus's scrape and the gateway's redis-benchmark. The rkv code
# they run is run under both sanitizers by in-process tests (the
# coordinator's on etcd, the etcd client's with members stopped, the
# coordinator set's, the TLS files' and transport's, the gateway's loop) and
# by the data-plane suites kept (cluster, replication, failover,
# linearizability, backup reads, verify, expiry, the coordinator killed
# under clients). ThreadSanitizer, which runs each process 5-15x slower,
# also leaves grow and drain and the crash cycles to AddressSanitizer.
sanitizer_excluded+='|^TlsClusterTest\.|^HaTest\.|HistoriesAcrossKillsOfTheLeadingCoordinator'
sanitizer_excluded+='|^(prometheus_scrapes_a_cluster|gateway_redis_benchmark)$'
tsan_excluded="${sanitizer_excluded}"'|^GrowTest\.|CrashTest\.'

build_release_plain() {
  cmake -S . -B build/release-plain -DCMAKE_BUILD_TYPE=Release -DRKV_BUILD_TESTS=OFF \
    -DCMAKE_UNITY_BUILD=ON -DCMAKE_UNITY_BUILD_BATCH_SIZE=8 >/dev/null &&
    cmake --build build/release-plain --parallel "$(nproc 2>/dev/null || echo 2)"
}

if [ "${build_only}" -eq 1 ]; then
  for preset in "${presets[@]}"; do
    echo "== test-presets: building ${preset}"
    case "${preset}" in
      release-plain) build_release_plain || exit 1 ;;
      *) deploy/build.sh "${preset}" || exit 1 ;;
    esac
  done
  exit 0
fi

if stage_step "dependencies" deploy/install-deps.sh; then
  for preset in "${presets[@]}"; do
    case "${preset}" in
      debug-asan|tsan)
        if stage_step "${preset} build" deploy/build.sh "${preset}"; then
          excluded="${sanitizer_excluded}"
          [ "${preset}" = tsan ] && excluded="${tsan_excluded}"
          # Two tests at a time: the unit tests (most of them wait on
          # threads, sockets or deadlines, not on a CPU); every
          # cross-process suite is RUN_SERIAL and runs alone. Left out:
          # what is the same in every build and proves nothing more under a
          # sanitizer (the layer, install and package checks build with CMake; the
          # release run has them), and the crash suite's sync mode (it
          # differs from wal only in RocksDB's fsync).
          RKV_TEST_SCALE="${RKV_TEST_SCALE:-0.25}" RKV_CRASH_CYCLES="${RKV_CRASH_CYCLES:-5}" \
            RKV_LIN_HISTORIES="${RKV_LIN_HISTORIES:-30}" \
            stage_ctest "${preset} tests" "build/${preset}/test-logs" --preset "${preset}" --timeout 1200 \
            --parallel "$(nproc 2>/dev/null || echo 2)" -E "${excluded}"
        else
          stage_not_run "${preset} tests" "not run: the build failed"
        fi
        ;;
      release-plain)
        stage_step "release-plain build" build_release_plain
        ;;
      fuzz)
        # Configured here so that RKV_DEBUG_INFO applies (deploy/build.sh);
        # deploy/fuzz.sh then builds in the existing directory.
        fuzz() { deploy/build.sh fuzz --configure-only && deploy/fuzz.sh --ci; }
        stage_step "fuzz" fuzz
        ;;
    esac
  done
fi
stage_summary "deploy/test-presets.sh ${presets[*]}"
