// The spin window's rules and the oversubscription sample's parser
// (spin_window.h).
#include "common/transport/spin_window.h"

#include <gtest/gtest.h>

#include <chrono>

namespace rkv::transport {
namespace {

using namespace std::chrono_literals;

TEST(SpinWindowTest, AWaitWithinTheBoundGrowsTheWindowAndALongerOneShrinksIt) {
  // Within the window: nothing learned.
  EXPECT_EQ(NextSpinWindow(100us, 50us, 1000us), 100us);
  // Past the window, within the bound: doubled, up to the bound.
  EXPECT_EQ(NextSpinWindow(100us, 150us, 1000us), 200us);
  EXPECT_EQ(NextSpinWindow(800us, 900us, 1000us), 1000us);
  // From nothing, the smallest window.
  EXPECT_EQ(NextSpinWindow(0us, 5us, 1000us), kMinSpinWindow);
  // Past the bound: halved, to nothing below the smallest.
  EXPECT_EQ(NextSpinWindow(1000us, 5000us, 1000us), 500us);
  EXPECT_EQ(NextSpinWindow(15us, 5000us, 1000us), 0us);
  // No bound: no spinning to adapt.
  EXPECT_EQ(NextSpinWindow(0us, 50us, 0us), 0us);
}

TEST(SpinWindowTest, TheRunningCountIsTheFourthFieldOfLoadavg) {
  EXPECT_EQ(ParseLoadavgRunning("0.29 1.16 2.37 2/345 12345\n"), 2);
  EXPECT_EQ(ParseLoadavgRunning("12.00 9.50 8.25 17/2048 999"), 17);
  EXPECT_EQ(ParseLoadavgRunning(""), -1);
  EXPECT_EQ(ParseLoadavgRunning("0.29 1.16 2.37"), -1);
  EXPECT_EQ(ParseLoadavgRunning("0.29 1.16 2.37 /345 1"), -1);
  EXPECT_EQ(ParseLoadavgRunning("0.29 1.16 2.37 2 345 1"), -1);
  EXPECT_EQ(ParseLoadavgRunning("0.29 1.16 2.37 99999999999/345 1"), -1);
}

TEST(SpinWindowTest, ASpinCooldownLastsItsTime) {
  SpinCooldown cooldown;
  const auto now = std::chrono::steady_clock::now();
  cooldown.Start(now);
  EXPECT_TRUE(cooldown.Active(now + kSpinCooldown / 2));
}

TEST(SpinWindowTest, ARoundLongAfterTheLastOneLostTheCpuAndStartsTheCooldown) {
  SpinCooldown cooldown;
  const auto start = std::chrono::steady_clock::now();
  auto last = start;
  // Rounds a few microseconds apart: the spin kept its CPU.
  EXPECT_FALSE(cooldown.LostCpu(start + std::chrono::microseconds(3), &last));
  EXPECT_EQ(last, start + std::chrono::microseconds(3));
  EXPECT_FALSE(cooldown.LostCpu(last + kPreemptedGap, &last));
  // One round more than the gap after the last: lost, and the cooldown
  // lasts from that round on.
  const auto late = last + kPreemptedGap + std::chrono::microseconds(1);
  EXPECT_TRUE(cooldown.LostCpu(late, &last));
  EXPECT_EQ(last, late);
  EXPECT_TRUE(cooldown.Active(late + kSpinCooldown - std::chrono::milliseconds(1)));
}

}  // namespace
}  // namespace rkv::transport
