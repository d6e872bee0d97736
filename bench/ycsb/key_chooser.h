// Which record a benchmark operation touches.
//
// Uniform: every record index in [0, records) equally likely.
// Zipfian: YCSB's generator (Gray et al., "Quickly generating billion-record
// synthetic databases") with constant 0.99, so that rank 0 is the most
// popular; the rank is then scrambled with FNV-1a 64 (as YCSB's
// ScrambledZipfianGenerator does) so the popular records are spread over
// the key space instead of being the first ones loaded.
//
// Thread safety: a KeyChooser is immutable after construction and may be
// shared; each thread passes its own random engine to Next().
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <string_view>

#include "rkv/status.h"

namespace rkv::bench {

enum class KeyDistribution { kUniform, kZipfian };

// "uniform" or "zipfian"; INVALID_ARGUMENT otherwise.
StatusOr<KeyDistribution> ParseKeyDistribution(std::string_view name);

class KeyChooser {
 public:
  static constexpr double kZipfianConstant = 0.99;

  // records >= 1. Zipfian construction is O(records) (the zeta sum).
  KeyChooser(KeyDistribution distribution, uint64_t records);

  // A record index in [0, records).
  uint64_t Next(std::mt19937_64& rng) const;

  uint64_t records() const { return records_; }

 private:
  uint64_t NextZipfianRank(double u) const;

  KeyDistribution distribution_;
  uint64_t records_;
  // Zipfian constants (see the paper): zeta(n), zeta(2), alpha, eta.
  double zeta_n_ = 0;
  double zeta_2_ = 0;
  double alpha_ = 0;
  double eta_ = 0;
};

// The key of record `index`: "user" and 12 decimal digits, the same for
// every target so their runs touch identical key sets.
std::string RecordKey(uint64_t index);

}  // namespace rkv::bench
