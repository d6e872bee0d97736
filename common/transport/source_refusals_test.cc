#include "common/transport/source_refusals.h"

#include <gtest/gtest.h>

#include <string>

namespace rkv::transport {
namespace {

using Clock = SourceRefusals::Clock;

TEST(SourceRefusalsTest, ASourceIsOverItsLimitUntilTheSecondEnds) {
  SourceRefusals refusals(2);
  const Clock::time_point t0 = Clock::now();
  EXPECT_FALSE(refusals.OverLimit("10.0.0.1", t0));
  refusals.Refused("10.0.0.1", t0);
  EXPECT_FALSE(refusals.OverLimit("10.0.0.1", t0));
  refusals.Refused("10.0.0.1", t0 + std::chrono::milliseconds(10));
  EXPECT_TRUE(refusals.OverLimit("10.0.0.1", t0 + std::chrono::milliseconds(20)));
  // Another address is counted apart.
  EXPECT_FALSE(refusals.OverLimit("10.0.0.2", t0 + std::chrono::milliseconds(20)));
  // A new second starts every count again.
  EXPECT_FALSE(refusals.OverLimit("10.0.0.1", t0 + SourceRefusals::kWindow));
}

// A client's hello (refused with a challenge) and proof (let on) leave its
// address's count as it was: a host may connect as often as it likes.
TEST(SourceRefusalsTest, ARequestLetOnTakesARefusalOff) {
  SourceRefusals refusals(2);
  const Clock::time_point t0 = Clock::now();
  for (int i = 0; i < 1000; ++i) {
    refusals.Refused("10.0.0.1", t0);
    EXPECT_FALSE(refusals.OverLimit("10.0.0.1", t0));
    refusals.Admitted("10.0.0.1", t0);
  }
  refusals.Admitted("10.0.0.1", t0);  // none below zero
  refusals.Refused("10.0.0.1", t0);
  refusals.Refused("10.0.0.1", t0);
  EXPECT_TRUE(refusals.OverLimit("10.0.0.1", t0));
}

TEST(SourceRefusalsTest, ZeroIsNoLimit) {
  SourceRefusals refusals(0);
  const Clock::time_point t0 = Clock::now();
  for (int i = 0; i < 100; ++i) refusals.Refused("10.0.0.1", t0);
  EXPECT_FALSE(refusals.OverLimit("10.0.0.1", t0));
}

TEST(SourceRefusalsTest, TheTableOfAddressesIsBounded) {
  SourceRefusals refusals(1);
  const Clock::time_point t0 = Clock::now();
  refusals.Refused("first", t0);
  EXPECT_TRUE(refusals.OverLimit("first", t0));
  // A flood over many addresses fills the table; the next new address
  // restarts the window rather than grow it.
  for (size_t i = 1; i < SourceRefusals::kMaxSources; ++i) refusals.Refused("a" + std::to_string(i), t0);
  EXPECT_TRUE(refusals.OverLimit("first", t0));
  refusals.Refused("one more", t0);
  EXPECT_FALSE(refusals.OverLimit("first", t0));
  EXPECT_TRUE(refusals.OverLimit("one more", t0));
}

}  // namespace
}  // namespace rkv::transport
