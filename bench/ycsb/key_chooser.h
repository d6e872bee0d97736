// Which record a benchmark operation touches.
//
// Uniform: every record index in [0, records) equally likely.
// Zipfian: YCSB's scrambled zipfian (bench/ycsb/zipfian.h): constant 0.99,
// ranks over 10^10 items hashed with FNV-1a 64 onto [0, records), so the
// popular records are spread over the key space instead of being the first
// ones loaded.
// Latest: YCSB's skewed latest: a zipfian over recency, the newest record
// the most likely. With an InsertCounter the newest is the counter's
// Last() (it follows the run's inserts); without one, records - 1.
//
// Uniform and zipfian pick among the loaded records only, as YCSB's core
// workload does; records a run inserts are picked only by latest.
//
// Thread safety: a KeyChooser is immutable after construction and may be
// shared (the InsertCounter it follows is itself thread-safe); each thread
// passes its own random engine to Next().
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <string_view>

#include "bench/ycsb/insert_counter.h"
#include "bench/ycsb/zipfian.h"
#include "rkv/status.h"

namespace rkv::bench {

enum class KeyDistribution { kUniform, kZipfian, kLatest };

// "uniform", "zipfian" or "latest"; INVALID_ARGUMENT otherwise.
StatusOr<KeyDistribution> ParseKeyDistribution(std::string_view name);
// The name ParseKeyDistribution takes.
std::string_view KeyDistributionName(KeyDistribution distribution);

class KeyChooser {
 public:
  static constexpr double kZipfianConstant = bench::kZipfianConstant;

  // records >= 1. `inserts` (latest only, may be null) must outlive the
  // chooser. Construction is O(1) in records.
  KeyChooser(KeyDistribution distribution, uint64_t records, const InsertCounter* inserts = nullptr);

  // A record index: in [0, records) for uniform and zipfian, in
  // [0, inserts->Last()] for latest.
  uint64_t Next(std::mt19937_64& rng) const;

  uint64_t records() const { return records_; }

 private:
  KeyDistribution distribution_;
  uint64_t records_;
  const InsertCounter* inserts_;
  ScrambledZipfianGenerator zipfian_;
  SkewedLatest latest_;
};

// The key of record `index`: "user" and 12 decimal digits, the same for
// every target so their runs touch identical key sets.
std::string RecordKey(uint64_t index);

}  // namespace rkv::bench
