#include "common/clock.h"

#include <thread>

#include <gtest/gtest.h>

namespace rkv {
namespace {

// SteadyNow and steady_clock::now are one clock: their readings interleave
// in order, so deadlines made with one can be checked with the other.
TEST(ClockTest, SteadyNowIsTheSteadyClock) {
  for (int i = 0; i < 1000; ++i) {
    const auto a = std::chrono::steady_clock::now();
    const auto b = SteadyNow();
    const auto c = std::chrono::steady_clock::now();
    ASSERT_LE(a, b);
    ASSERT_LE(b, c);
  }
}

TEST(ClockTest, SteadyNowAdvances) {
  const auto a = SteadyNow();
  // The sleep is the test's input: sleep_for blocks at least this long by
  // the steady clock, so SteadyNow must show at least as much.
  std::this_thread::sleep_for(std::chrono::milliseconds(2));
  EXPECT_GE(SteadyNow() - a, std::chrono::milliseconds(2));
}

}  // namespace
}  // namespace rkv
