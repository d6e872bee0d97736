#include "common/log_throttle.h"

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace rkv {
namespace {

using std::chrono::milliseconds;

TEST(LogThrottleTest, LogsTheFirstEventThenOneLinePerIntervalCountingTheOthers) {
  LogThrottle throttle(std::chrono::seconds(1));
  const LogThrottle::Clock::time_point t0 = LogThrottle::Clock::now();
  EXPECT_EQ(throttle.Note(t0), 1u);
  EXPECT_EQ(throttle.Note(t0 + milliseconds(10)), 0u);
  EXPECT_EQ(throttle.Note(t0 + milliseconds(999)), 0u);
  // The line after the interval stands for the two held back and itself.
  EXPECT_EQ(throttle.Note(t0 + milliseconds(1000)), 3u);
  EXPECT_EQ(throttle.Note(t0 + milliseconds(1500)), 0u);
  EXPECT_EQ(throttle.Note(t0 + milliseconds(5000)), 2u);
}

TEST(LogThrottleTest, ThreadsTogetherLoseNoEventAndLogOncePerInterval) {
  LogThrottle throttle(std::chrono::hours(1));
  const LogThrottle::Clock::time_point t0 = LogThrottle::Clock::now();
  constexpr int kThreads = 4;
  constexpr int kEach = 10000;
  std::atomic<uint64_t> lines{0};
  std::atomic<uint64_t> counted{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&] {
      for (int j = 0; j < kEach; ++j) {
        if (const uint64_t n = throttle.Note(t0); n > 0) {
          lines.fetch_add(1);
          counted.fetch_add(n);
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(lines.load(), 1u);  // one interval: one line
  // The next interval's line stands for every event the first did not.
  const uint64_t rest = throttle.Note(t0 + std::chrono::hours(2));
  EXPECT_EQ(counted.load() + rest, uint64_t{kThreads} * kEach + 1);
}

}  // namespace
}  // namespace rkv
