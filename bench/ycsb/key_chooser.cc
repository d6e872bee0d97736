#include "bench/ycsb/key_chooser.h"

#include <cstdio>

namespace rkv::bench {

StatusOr<KeyDistribution> ParseKeyDistribution(std::string_view name) {
  if (name == "uniform") return KeyDistribution::kUniform;
  if (name == "zipfian") return KeyDistribution::kZipfian;
  if (name == "latest") return KeyDistribution::kLatest;
  return InvalidArgument("unknown key distribution '" + std::string(name) +
                         "' (want uniform, zipfian or latest)");
}

std::string_view KeyDistributionName(KeyDistribution distribution) {
  switch (distribution) {
    case KeyDistribution::kUniform:
      return "uniform";
    case KeyDistribution::kZipfian:
      return "zipfian";
    case KeyDistribution::kLatest:
      return "latest";
  }
  return "?";
}

KeyChooser::KeyChooser(KeyDistribution distribution, uint64_t records, const InsertCounter* inserts)
    : distribution_(distribution),
      records_(records == 0 ? 1 : records),
      inserts_(inserts),
      zipfian_(records_),
      latest_(records_) {}

uint64_t KeyChooser::Next(std::mt19937_64& rng) const {
  switch (distribution_) {
    case KeyDistribution::kUniform:
      return std::uniform_int_distribution<uint64_t>(0, records_ - 1)(rng);
    case KeyDistribution::kZipfian:
      return zipfian_.Next(std::uniform_real_distribution<double>(0.0, 1.0)(rng));
    case KeyDistribution::kLatest: {
      const uint64_t last = inserts_ != nullptr ? inserts_->Last() : records_ - 1;
      return latest_.Next(std::uniform_real_distribution<double>(0.0, 1.0)(rng), last);
    }
  }
  return 0;
}

std::string RecordKey(uint64_t index) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "user%012llu", static_cast<unsigned long long>(index));
  return buf;
}

}  // namespace rkv::bench
