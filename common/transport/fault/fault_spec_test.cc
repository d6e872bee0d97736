#include "common/transport/fault/fault_spec.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace rkv::transport::fault {
namespace {

using namespace std::chrono_literals;

TEST(FaultSpecTest, ParsesEveryRuleInOrder) {
  StatusOr<std::vector<FaultRule>> rules =
      ParseFaultSpec("read:corrupt:nth=3;send:drop:every=10;write:fail:p=0.01,seed=7");
  ASSERT_TRUE(rules.ok()) << rules.status();
  ASSERT_EQ(rules->size(), 3u);
  const FaultRule& a = (*rules)[0];
  EXPECT_EQ(a.op, FaultOp::kRead);
  EXPECT_EQ(a.action, FaultAction::kCorrupt);
  EXPECT_EQ(a.select, FaultSelect::kNth);
  EXPECT_EQ(a.n, 3u);
  EXPECT_EQ(a.corrupt_at, 0u);
  EXPECT_EQ(a.corrupt_bytes, 1u);
  const FaultRule& b = (*rules)[1];
  EXPECT_EQ(b.op, FaultOp::kSend);
  EXPECT_EQ(b.action, FaultAction::kDrop);
  EXPECT_EQ(b.select, FaultSelect::kEvery);
  EXPECT_EQ(b.n, 10u);
  const FaultRule& c = (*rules)[2];
  EXPECT_EQ(c.op, FaultOp::kWrite);
  EXPECT_EQ(c.action, FaultAction::kFail);
  EXPECT_EQ(c.select, FaultSelect::kProbability);
  EXPECT_DOUBLE_EQ(c.probability, 0.01);
  EXPECT_EQ(c.seed, 7u);
}

TEST(FaultSpecTest, ParsesEachParameter) {
  StatusOr<std::vector<FaultRule>> rules = ParseFaultSpec(
      " recv : delay : ms=250 ; accept:delay:us=40,nth=2; connect:corrupt:at=4,bytes=3 ;read:fail ;send:delay:us=1");
  ASSERT_TRUE(rules.ok()) << rules.status();
  ASSERT_EQ(rules->size(), 5u);
  EXPECT_EQ((*rules)[0].op, FaultOp::kRecv);
  EXPECT_EQ((*rules)[0].delay, 250ms);
  EXPECT_EQ((*rules)[0].select, FaultSelect::kAll);
  EXPECT_EQ((*rules)[1].op, FaultOp::kAccept);
  EXPECT_EQ((*rules)[1].delay, 40us);
  EXPECT_EQ((*rules)[1].n, 2u);
  EXPECT_EQ((*rules)[2].op, FaultOp::kConnect);
  EXPECT_EQ((*rules)[2].corrupt_at, 4u);
  EXPECT_EQ((*rules)[2].corrupt_bytes, 3u);
  EXPECT_EQ((*rules)[3].action, FaultAction::kFail);
  EXPECT_EQ((*rules)[3].select, FaultSelect::kAll);
  EXPECT_TRUE(ParseFaultSpec("").ok());
  EXPECT_TRUE(ParseFaultSpec("  ")->empty());
}

TEST(FaultSpecTest, FormattedRulesParseBackToThemselves) {
  const char* specs[] = {"read:corrupt:nth=3,at=5,bytes=2", "send:drop:every=10", "write:fail:p=0.25,seed=7",
                         "recv:delay:us=1500", "accept:fail", "connect:drop:nth=1"};
  for (const char* spec : specs) {
    StatusOr<std::vector<FaultRule>> rules = ParseFaultSpec(spec);
    ASSERT_TRUE(rules.ok()) << spec << ": " << rules.status();
    ASSERT_EQ(rules->size(), 1u);
    const std::string formatted = FormatFaultRule((*rules)[0]);
    StatusOr<std::vector<FaultRule>> again = ParseFaultSpec(formatted);
    ASSERT_TRUE(again.ok()) << formatted << ": " << again.status();
    EXPECT_EQ(FormatFaultRule((*again)[0]), formatted) << spec;
  }
}

TEST(FaultSpecTest, BadSpecsAreInvalidArgumentsThatSayWhatIsWrong) {
  struct Case {
    const char* spec;
    const char* says;
  };
  const Case cases[] = {
      {"read", "OP:ACTION"},
      {"read:drop:nth=1:more", "OP:ACTION"},
      {"reed:drop", "unknown operation 'reed'"},
      {"read:explode", "unknown action 'explode'"},
      {"read:drop:nth", "NAME=VALUE"},
      {"read:drop:nth=0", "count from 1"},
      {"read:drop:nth=x", "nth=x is not a whole number"},
      {"read:drop:every=-2", "every=-2 is not a whole number"},
      {"read:drop:nth=1,every=2", "at most one of nth, every and p"},
      {"read:drop:p=1.5", "p must lie in [0, 1]"},
      {"read:drop:p=half", "p=half is not a number"},
      {"read:drop:seed=3", "seed is for p only"},
      {"read:drop:p=0.5,seed=1,seed=2", "more than once"},
      {"read:delay", "delay needs a duration"},
      {"read:delay:ms=0", "the delay must be positive"},
      {"read:delay:ms=1,us=1", "at most one of ms and us"},
      {"read:drop:ms=5", "ms is for delay, not drop"},
      {"read:fail:at=1", "at is for corrupt, not fail"},
      {"read:corrupt:bytes=0", "bytes must be at least 1"},
      {"read:corrupt:colour=red", "unknown parameter 'colour'"},
      {"write:delay:ms=1", "a WRITE has no completion"},
      {"read:drop;;send:drop", "rule 2"},
  };
  for (const Case& c : cases) {
    StatusOr<std::vector<FaultRule>> rules = ParseFaultSpec(c.spec);
    ASSERT_FALSE(rules.ok()) << c.spec;
    EXPECT_EQ(rules.status().code(), StatusCode::kInvalidArgument) << c.spec;
    EXPECT_NE(rules.status().message().find(c.says), std::string::npos)
        << c.spec << " -> " << rules.status().message();
    EXPECT_NE(rules.status().message().find(c.spec), std::string::npos) << "names the spec";
  }
}

}  // namespace
}  // namespace rkv::transport::fault
