// The zipfian family of YCSB's key generators, implemented from their
// published definitions.
//
// ZipfianGenerator: Gray et al., "Quickly generating billion-record
// synthetic databases" (SIGMOD 1994), as YCSB's ZipfianGenerator uses it:
// rank r in [0, n) is drawn with probability (1 / (r+1)^theta) / zeta(n),
// rank 0 the most popular. YCSB's constant is theta = 0.99.
//
// ScrambledZipfianGenerator: YCSB's ScrambledZipfianGenerator. A rank is
// drawn over a fixed space of 10^10 items (kScrambledItems, whatever the
// record count) and hashed with FNV-1a 64 onto [0, records), so that the
// popular records are spread over the key space instead of being the first
// ones loaded.
//
// SkewedLatest: YCSB's SkewedLatestGenerator. The newest record is rank 0
// of a zipfian over the records inserted so far: record last - r, where
// `last` is the newest record whose insert has completed.
//
// Thread safety: every generator here is immutable after construction and
// may be shared; callers pass their own uniform draw u in [0, 1).
#pragma once

#include <cstdint>
#include <vector>

namespace rkv::bench {

inline constexpr double kZipfianConstant = 0.99;
inline constexpr uint64_t kScrambledItems = 10'000'000'000ULL;

// zeta(n, theta) = sum over i = 1..n of 1 / i^theta. Exact summation up to
// 4096 terms; beyond, the Euler-Maclaurin expansion of the remaining terms
// (relative error below 1e-15), so the cost does not grow with n.
double Zeta(uint64_t n, double theta);

// FNV-1a 64 of the 8 bytes of `value`, least significant first, made
// non-negative as a Java long would be (YCSB's Utils.fnvhash64).
uint64_t FnvHash64(uint64_t value);

class ZipfianGenerator {
 public:
  // items >= 1, 0 < theta < 1.
  explicit ZipfianGenerator(uint64_t items, double theta = kZipfianConstant);

  // A rank in [0, items()) for the uniform draw u in [0, 1).
  uint64_t Next(double u) const;
  // A rank in [0, items) for a count other than items() (SkewedLatest's
  // growing count); zeta(items) is computed from the cached prefix sums,
  // in constant time. items >= 1.
  uint64_t Next(double u, uint64_t items) const;

  uint64_t items() const { return items_; }
  double theta() const { return theta_; }
  double zeta() const { return zeta_n_; }
  // Probability of rank r (0-based): 1 / ((r+1)^theta * zeta(items)).
  double Probability(uint64_t rank) const;

 private:
  uint64_t Draw(double u, uint64_t items, double zeta_n, double eta) const;
  double ZetaOf(uint64_t items) const;
  double EtaOf(uint64_t items, double zeta_n) const;

  uint64_t items_;
  double theta_;
  double alpha_;  // 1 / (1 - theta)
  double zeta_2_;
  double zeta_n_;
  double eta_;
  // prefix_[i] = zeta(i, theta) for i < prefix_.size().
  std::vector<double> prefix_;
};

class ScrambledZipfianGenerator {
 public:
  // records >= 1.
  explicit ScrambledZipfianGenerator(uint64_t records);
  // A record index in [0, records).
  uint64_t Next(double u) const { return FnvHash64(ranks_.Next(u)) % records_; }

 private:
  uint64_t records_;
  ZipfianGenerator ranks_;
};

class SkewedLatest {
 public:
  explicit SkewedLatest(uint64_t initial_records);
  // A record index in [0, last], the newest (`last`) the most likely.
  uint64_t Next(double u, uint64_t last) const { return last - ranks_.Next(u, last + 1); }

 private:
  ZipfianGenerator ranks_;
};

}  // namespace rkv::bench
