#include "common/transport/fault/fault_injector.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

namespace rkv::transport::fault {
namespace {

// The numbers of the operations of `op`'s kind that a rule hits, of the
// next `ops` ones.
std::vector<uint64_t> Hits(FaultInjector& faults, FaultOp op, int ops) {
  std::vector<uint64_t> hits;
  for (int i = 0; i < ops; ++i) {
    FaultPoint point;
    if (faults.Next(op, point)) hits.push_back(point.index);
  }
  return hits;
}

TEST(FaultInjectorTest, NthAndEveryCountFromWhenTheRuleWasAdded) {
  FaultInjector faults;
  EXPECT_TRUE(Hits(faults, FaultOp::kRead, 4).empty());
  ASSERT_TRUE(faults.AddSpec("read:drop:nth=3").ok());
  EXPECT_EQ(Hits(faults, FaultOp::kRead, 10), (std::vector<uint64_t>{7}));
  ASSERT_TRUE(faults.AddSpec("send:fail:every=4").ok());
  EXPECT_EQ(Hits(faults, FaultOp::kSend, 13), (std::vector<uint64_t>{4, 8, 12}));
  EXPECT_EQ(faults.count(FaultOp::kRead), 14u);
  EXPECT_EQ(faults.count(FaultOp::kSend), 13u);
  EXPECT_EQ(faults.count(FaultOp::kRecv), 0u);
}

TEST(FaultInjectorTest, ProbabilityDrawsRepeatWithTheSeed) {
  FaultInjector a;
  FaultInjector b;
  FaultInjector c;
  ASSERT_TRUE(a.AddSpec("recv:drop:p=0.3,seed=11").ok());
  ASSERT_TRUE(b.AddSpec("recv:drop:p=0.3,seed=11").ok());
  ASSERT_TRUE(c.AddSpec("recv:drop:p=0.3,seed=12").ok());
  const std::vector<uint64_t> hits = Hits(a, FaultOp::kRecv, 1000);
  EXPECT_EQ(Hits(b, FaultOp::kRecv, 1000), hits);
  EXPECT_NE(Hits(c, FaultOp::kRecv, 1000), hits);
  // The draws are fixed by the seed; these are about 300 of 1000.
  EXPECT_GT(hits.size(), 200u);
  EXPECT_LT(hits.size(), 400u);

  FaultInjector never;
  FaultInjector always;
  ASSERT_TRUE(never.AddSpec("read:drop:p=0").ok());
  ASSERT_TRUE(always.AddSpec("read:drop:p=1").ok());
  EXPECT_TRUE(Hits(never, FaultOp::kRead, 100).empty());
  EXPECT_EQ(Hits(always, FaultOp::kRead, 100).size(), 100u);
}

TEST(FaultInjectorTest, TheFirstRuleAddedWinsAndEveryRuleCounts) {
  FaultInjector faults;
  ASSERT_TRUE(faults.AddSpec("read:corrupt:every=2;read:drop:nth=2;read:fail:nth=3").ok());
  std::vector<FaultAction> actions;
  for (int i = 0; i < 4; ++i) {
    FaultPoint point;
    const std::optional<FaultRule> rule = faults.Next(FaultOp::kRead, point);
    ASSERT_EQ(rule.has_value(), i != 0) << i;
    if (rule) actions.push_back(rule->action);
  }
  // 2: corrupt (first added) over drop; 3: fail; 4: corrupt.
  EXPECT_EQ(actions, (std::vector<FaultAction>{FaultAction::kCorrupt, FaultAction::kFail, FaultAction::kCorrupt}));
  faults.ClearRules();
  EXPECT_TRUE(Hits(faults, FaultOp::kRead, 10).empty());
}

TEST(FaultInjectorTest, ABadRuleChangesNothing) {
  FaultInjector faults;
  EXPECT_EQ(faults.AddSpec("read:drop;send:explode").code(), StatusCode::kInvalidArgument);
  FaultRule bad;
  bad.action = FaultAction::kDelay;  // without a duration
  EXPECT_EQ(faults.Add(bad).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(faults.PassThrough(FaultOp::kRead, 1));
  EXPECT_TRUE(faults.PassThrough(FaultOp::kSend, 1));
}

TEST(FaultInjectorTest, HooksRunWithTheOperationsNumber) {
  FaultInjector faults;
  std::vector<uint64_t> seen;
  faults.SetHook(FaultOp::kWrite, [&](FaultPoint& p) {
    EXPECT_EQ(p.op, FaultOp::kWrite);
    seen.push_back(p.index);
  });
  EXPECT_FALSE(faults.PassThrough(FaultOp::kWrite, 1)) << "a hook must see every WRITE";
  EXPECT_TRUE(faults.PassThrough(FaultOp::kRead, 2));
  Hits(faults, FaultOp::kWrite, 3);
  EXPECT_EQ(seen, (std::vector<uint64_t>{1, 2, 3}));
  faults.SetHook(FaultOp::kWrite, nullptr);
  EXPECT_TRUE(faults.PassThrough(FaultOp::kWrite, 1));
  EXPECT_EQ(faults.count(FaultOp::kWrite), 4u);
  EXPECT_EQ(faults.count(FaultOp::kRead), 2u);
}

TEST(FaultInjectorTest, RulesMayChangeWhileOperationsRun) {
  FaultInjector faults;
  std::atomic<bool> stop{false};
  std::thread ops([&] {
    do {
      FaultPoint point;
      faults.Next(FaultOp::kSend, point);
      faults.PassThrough(FaultOp::kRead, 1);
    } while (!stop.load());
  });
  for (int i = 0; i < 200; ++i) {
    ASSERT_TRUE(faults.AddSpec("send:drop:every=3;read:corrupt:p=0.5").ok());
    faults.SetHook(FaultOp::kSend, [](FaultPoint&) {});
    faults.ClearRules();
    faults.SetHook(FaultOp::kSend, nullptr);
  }
  stop = true;
  ops.join();
  EXPECT_GT(faults.count(FaultOp::kSend) + faults.count(FaultOp::kRead), 0u);
}

}  // namespace
}  // namespace rkv::transport::fault
