// Waiting on a condition instead of sleeping, for every test that waits for
// something asynchronous: the cross-process suites (tests/test_cluster.h),
// the in-process control-plane tests (tests/in_process_coordinator.h) and
// the unit tests of every layer (a test file may include it; library code
// may not: cmake/layers.txt).
//
// A deadline bounds a hang; it is never a claim on speed: a test must not
// pass or fail because a machine is fast or slow, only hang for at most
// the deadline when what it waits for never comes.
#pragma once

#include <algorithm>
#include <chrono>
#include <string_view>
#include <thread>

#include <gtest/gtest.h>

namespace rkv::testing {

// The one deadline of a wait on a condition (a promotion, a map that
// converges, load that makes progress, a restarted process answering).
inline constexpr std::chrono::seconds kConditionDeadline{180};

// Polls `condition` (a callable returning bool) until it holds: first
// every millisecond, backing off to every `poll`. Returns success as soon
// as it holds, or a failure naming `what` once `timeout` passed without
// it (checked once more at the end). Use as
//   ASSERT_TRUE(WaitFor("the promotion", [&] { ... }));
// or keep the result and assert later (e.g. after stopping a load).
// Thread safety: as safe as `condition`; runs it on the calling thread.
template <typename Condition>
::testing::AssertionResult WaitFor(std::string_view what, Condition&& condition,
                                   std::chrono::milliseconds timeout = kConditionDeadline,
                                   std::chrono::milliseconds poll = std::chrono::milliseconds(20)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::chrono::milliseconds delay{1};
  while (!condition()) {
    if (std::chrono::steady_clock::now() >= deadline) {
      if (condition()) break;
      return ::testing::AssertionFailure() << "gave up after " << timeout.count() << " ms waiting for " << what;
    }
    std::this_thread::sleep_for(delay);
    delay = std::min(delay * 2, poll);
  }
  return ::testing::AssertionSuccess();
}

}  // namespace rkv::testing
