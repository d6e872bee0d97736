#include "bench/ycsb/key_chooser.h"

#include <gtest/gtest.h>

#include <random>
#include <thread>
#include <vector>

#include "bench/ycsb/insert_counter.h"
#include "bench/ycsb/workload.h"

namespace rkv::bench {
namespace {

TEST(KeyChooserTest, ParsesEveryDistribution) {
  EXPECT_EQ(*ParseKeyDistribution("uniform"), KeyDistribution::kUniform);
  EXPECT_EQ(*ParseKeyDistribution("zipfian"), KeyDistribution::kZipfian);
  EXPECT_EQ(*ParseKeyDistribution("latest"), KeyDistribution::kLatest);
  EXPECT_FALSE(ParseKeyDistribution("hotspot").ok());
  for (KeyDistribution d : {KeyDistribution::kUniform, KeyDistribution::kZipfian, KeyDistribution::kLatest}) {
    EXPECT_EQ(*ParseKeyDistribution(KeyDistributionName(d)), d);
  }
}

TEST(KeyChooserTest, UniformAndZipfianStayInRange) {
  std::mt19937_64 rng(1);
  for (KeyDistribution d : {KeyDistribution::kUniform, KeyDistribution::kZipfian}) {
    const KeyChooser chooser(d, 37);
    for (int i = 0; i < 10'000; ++i) ASSERT_LT(chooser.Next(rng), 37u);
  }
}

TEST(KeyChooserTest, LatestFavoursTheNewestRecords) {
  constexpr uint64_t kRecords = 1000;
  constexpr int kDraws = 200'000;
  InsertCounter inserts(kRecords);
  const KeyChooser chooser(KeyDistribution::kLatest, kRecords, &inserts);
  std::mt19937_64 rng(2);
  std::vector<int> hits(kRecords, 0);
  for (int i = 0; i < kDraws; ++i) {
    const uint64_t r = chooser.Next(rng);
    ASSERT_LT(r, kRecords);
    ++hits[r];
  }
  // The newest record is rank 0 of a zipfian over 1000 records.
  const double p0 = ZipfianGenerator(kRecords).Probability(0);
  EXPECT_NEAR(static_cast<double>(hits[kRecords - 1]) / kDraws, p0, 0.03 * p0);
  int newest_ten = 0;
  for (uint64_t r = kRecords - 10; r < kRecords; ++r) newest_ten += hits[r];
  int oldest_ten = 0;
  for (uint64_t r = 0; r < 10; ++r) oldest_ten += hits[r];
  // Ranks 0..9 of a zipfian over 1000 records: about 40% of the draws.
  EXPECT_GT(newest_ten, kDraws * 35 / 100);
  EXPECT_LT(oldest_ten, newest_ten / 50);
}

TEST(KeyChooserTest, LatestFollowsTheAcknowledgedInserts) {
  InsertCounter inserts(100);
  const KeyChooser chooser(KeyDistribution::kLatest, 100, &inserts);
  std::mt19937_64 rng(3);
  const uint64_t a = inserts.Issue();
  const uint64_t b = inserts.Issue();
  EXPECT_EQ(a, 100u);
  EXPECT_EQ(b, 101u);
  // Nothing acknowledged yet: never a record being inserted.
  for (int i = 0; i < 5'000; ++i) ASSERT_LE(chooser.Next(rng), 99u);
  inserts.Acknowledge(b);
  EXPECT_EQ(inserts.Last(), 99u);  // a is still in flight
  inserts.Acknowledge(a);
  EXPECT_EQ(inserts.Last(), 101u);
  int newest = 0;
  for (int i = 0; i < 5'000; ++i) {
    const uint64_t r = chooser.Next(rng);
    ASSERT_LE(r, 101u);
    newest += r == 101 ? 1 : 0;
  }
  EXPECT_GT(newest, 5'000 / 10);
}

TEST(InsertCounterTest, LastAdvancesOverContiguousAcknowledgementsFromManyThreads) {
  InsertCounter inserts(10);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&inserts] {
      for (int i = 0; i < 1000; ++i) inserts.Acknowledge(inserts.Issue());
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(inserts.Last(), 10u + 4000u - 1u);
}

TEST(WorkloadTest, CoreWorkloadsHaveTheirMixes) {
  EXPECT_EQ(FindWorkload("a")->read, 0.5);
  EXPECT_EQ(FindWorkload("a")->update, 0.5);
  EXPECT_EQ(FindWorkload("b")->read, 0.95);
  EXPECT_EQ(FindWorkload("c")->read, 1.0);
  const Workload d = *FindWorkload("d");
  EXPECT_EQ(d.insert, 0.05);
  EXPECT_EQ(d.default_distribution, KeyDistribution::kLatest);
  const Workload f = *FindWorkload("f");
  EXPECT_EQ(f.read_modify_write, 0.5);
  EXPECT_TRUE(f.Has(OpType::kReadModifyWrite));
  EXPECT_FALSE(f.Has(OpType::kUpdate));
  EXPECT_TRUE(FindWorkload("get").ok());
  EXPECT_TRUE(FindWorkload("put").ok());
  EXPECT_FALSE(FindWorkload("z").ok());
}

TEST(WorkloadTest, WorkloadERefusedWithTheReason) {
  const StatusOr<Workload> e = FindWorkload("e");
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(e.status().message().find("scan"), std::string::npos) << e.status().message();
}

TEST(WorkloadTest, PickFollowsTheFractions) {
  const Workload d = *FindWorkload("d");
  std::mt19937_64 rng(4);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  int inserts = 0;
  for (int i = 0; i < 100'000; ++i) {
    const OpType op = d.Pick(u(rng));
    ASSERT_TRUE(op == OpType::kRead || op == OpType::kInsert);
    inserts += op == OpType::kInsert ? 1 : 0;
  }
  EXPECT_NEAR(inserts, 5'000, 400);
  EXPECT_EQ(FindWorkload("c")->Pick(0.999999), OpType::kRead);
  EXPECT_EQ(FindWorkload("put")->Pick(0.0), OpType::kUpdate);
  EXPECT_EQ(FindWorkload("f")->Pick(0.75), OpType::kReadModifyWrite);
}

}  // namespace
}  // namespace rkv::bench
