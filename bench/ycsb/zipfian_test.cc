#include "bench/ycsb/zipfian.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>
#include <vector>

namespace rkv::bench {
namespace {

double DirectZeta(uint64_t n, double theta) {
  double sum = 0;
  for (uint64_t i = 1; i <= n; ++i) sum += 1.0 / std::pow(static_cast<double>(i), theta);
  return sum;
}

TEST(ZetaTest, MatchesTheDirectSum) {
  for (uint64_t n : {1ULL, 2ULL, 10ULL, 4095ULL, 4096ULL, 4097ULL, 100'000ULL, 1'000'000ULL}) {
    const double want = DirectZeta(n, kZipfianConstant);
    EXPECT_NEAR(Zeta(n, kZipfianConstant), want, want * 1e-12) << n;
  }
  EXPECT_NEAR(Zeta(50'000, 0.5), DirectZeta(50'000, 0.5), 1e-9);
}

TEST(ZetaTest, TenBillionItemsGiveYcsbsConstant) {
  // YCSB's ScrambledZipfianGenerator hard-codes zeta(10^10, 0.99) as
  // 26.46902820178302.
  EXPECT_NEAR(Zeta(kScrambledItems, kZipfianConstant), 26.46902820178302, 1e-9);
}

TEST(ZipfianGeneratorTest, RankSharesMatchTheClosedForm) {
  constexpr uint64_t kItems = 1000;
  constexpr int kDraws = 1'000'000;
  const ZipfianGenerator zipf(kItems);
  EXPECT_NEAR(zipf.zeta(), DirectZeta(kItems, 0.99), 1e-12);
  std::mt19937_64 rng(42);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::vector<uint64_t> hits(kItems, 0);
  for (int i = 0; i < kDraws; ++i) {
    const uint64_t r = zipf.Next(u(rng));
    ASSERT_LT(r, kItems);
    ++hits[r];
  }
  // Ranks 0 and 1 are exact in Gray et al.'s method: 1/zeta(n) and
  // 2^-theta/zeta(n) (about 13.4% and 6.7% here); 2% relative is more
  // than 5 standard deviations at a million draws.
  const double p0 = 1.0 / DirectZeta(kItems, 0.99);
  EXPECT_NEAR(static_cast<double>(hits[0]) / kDraws, p0, 0.02 * p0);
  EXPECT_NEAR(zipf.Probability(0), p0, 1e-12);
  const double p1 = std::pow(0.5, 0.99) * p0;
  EXPECT_NEAR(static_cast<double>(hits[1]) / kDraws, p1, 0.02 * p1);
  // Beyond, the method approximates the law: shares fall with the rank and
  // stay near it.
  for (uint64_t r : {2ULL, 5ULL, 10ULL, 100ULL}) {
    const double want = zipf.Probability(r);
    EXPECT_NEAR(static_cast<double>(hits[r]) / kDraws, want, 0.25 * want) << "rank " << r;
  }
  EXPECT_GT(hits[0], hits[1]);
  EXPECT_GT(hits[1], hits[10]);
  EXPECT_GT(hits[10], hits[500]);
}

TEST(ZipfianGeneratorTest, EdgesStayInRange) {
  const ZipfianGenerator one(1);
  EXPECT_EQ(one.Next(0.0), 0u);
  EXPECT_EQ(one.Next(0.999999), 0u);
  const ZipfianGenerator two(2);
  EXPECT_EQ(two.Next(0.0), 0u);
  EXPECT_EQ(two.Next(0.999999), 1u);
  const ZipfianGenerator many(1000);
  EXPECT_EQ(many.Next(0.0), 0u);
  EXPECT_LT(many.Next(std::nextafter(1.0, 0.0)), 1000u);
  // Another count than the generator's own, as SkewedLatest asks.
  for (uint64_t items : {1ULL, 2ULL, 3ULL, 999ULL, 5000ULL, 1'000'000ULL}) {
    EXPECT_LT(many.Next(std::nextafter(1.0, 0.0), items), items);
    EXPECT_EQ(many.Next(0.0, items), 0u);
  }
}

TEST(ZipfianGeneratorTest, AnotherCountDrawsAsAGeneratorOfThatCount) {
  const ZipfianGenerator small(1000);
  const ZipfianGenerator large(123'456);
  std::mt19937_64 rng(5);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  for (int i = 0; i < 10'000; ++i) {
    const double x = u(rng);
    ASSERT_EQ(small.Next(x, 123'456), large.Next(x)) << x;
  }
}

TEST(ScrambledZipfianTest, StaysInRangeAndSpreadsTheHotKeys) {
  std::mt19937_64 rng(9);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  for (uint64_t records : {1ULL, 2ULL, 7ULL, 1000ULL, 1'000'000'000'000ULL}) {
    const ScrambledZipfianGenerator gen(records);
    for (int i = 0; i < 20'000; ++i) ASSERT_LT(gen.Next(u(rng)), records) << records;
  }
  // The hottest record is rank 0's hash, not record 0; the ten hottest are
  // spread over the key space.
  const ScrambledZipfianGenerator gen(1000);
  std::map<uint64_t, int> hits;
  for (int i = 0; i < 200'000; ++i) ++hits[gen.Next(u(rng))];
  uint64_t hottest = 0;
  int most = 0;
  for (const auto& [record, n] : hits) {
    if (n > most) {
      most = n;
      hottest = record;
    }
  }
  EXPECT_EQ(hottest, FnvHash64(0) % 1000);
  uint64_t low = 1000;
  uint64_t high = 0;
  for (uint64_t rank = 0; rank < 10; ++rank) {
    low = std::min(low, FnvHash64(rank) % 1000);
    high = std::max(high, FnvHash64(rank) % 1000);
  }
  EXPECT_GT(high - low, 500u);
  // Over 10^10 ranks the hottest record gets about 1/zeta(10^10) = 3.8%.
  EXPECT_NEAR(static_cast<double>(most) / 200'000, 1.0 / 26.469, 0.01);
}

TEST(FnvHash64Test, IsNonNegativeAsAJavaLong) {
  for (uint64_t v = 0; v < 10'000; ++v) ASSERT_EQ(FnvHash64(v) >> 63, 0u) << v;
}

}  // namespace
}  // namespace rkv::bench
