#include "bench/ycsb/key_chooser.h"

#include <cmath>
#include <cstdio>

namespace rkv::bench {
namespace {

double Zeta(uint64_t n, double theta) {
  double sum = 0;
  for (uint64_t i = 1; i <= n; ++i) sum += 1.0 / std::pow(static_cast<double>(i), theta);
  return sum;
}

uint64_t Fnv1a64(uint64_t value) {
  uint64_t hash = 0xcbf29ce484222325ULL;
  for (int i = 0; i < 8; ++i) {
    hash ^= value & 0xff;
    hash *= 0x100000001b3ULL;
    value >>= 8;
  }
  return hash;
}

}  // namespace

StatusOr<KeyDistribution> ParseKeyDistribution(std::string_view name) {
  if (name == "uniform") return KeyDistribution::kUniform;
  if (name == "zipfian") return KeyDistribution::kZipfian;
  return InvalidArgument("unknown key distribution '" + std::string(name) +
                         "' (want uniform or zipfian)");
}

KeyChooser::KeyChooser(KeyDistribution distribution, uint64_t records)
    : distribution_(distribution), records_(records == 0 ? 1 : records) {
  if (distribution_ != KeyDistribution::kZipfian) return;
  const double theta = kZipfianConstant;
  zeta_n_ = Zeta(records_, theta);
  zeta_2_ = Zeta(2, theta);
  alpha_ = 1.0 / (1.0 - theta);
  eta_ = (1.0 - std::pow(2.0 / static_cast<double>(records_), 1.0 - theta)) /
         (1.0 - zeta_2_ / zeta_n_);
}

uint64_t KeyChooser::NextZipfianRank(double u) const {
  const double uz = u * zeta_n_;
  if (uz < 1.0) return 0;
  if (uz < 1.0 + std::pow(0.5, kZipfianConstant)) return records_ > 1 ? 1 : 0;
  const double rank =
      static_cast<double>(records_) * std::pow(eta_ * u - eta_ + 1.0, alpha_);
  // Rounding can reach records_ for u close to 1.
  const uint64_t r = static_cast<uint64_t>(rank);
  return r < records_ ? r : records_ - 1;
}

uint64_t KeyChooser::Next(std::mt19937_64& rng) const {
  if (distribution_ == KeyDistribution::kUniform) {
    return std::uniform_int_distribution<uint64_t>(0, records_ - 1)(rng);
  }
  const double u = std::uniform_real_distribution<double>(0.0, 1.0)(rng);
  return Fnv1a64(NextZipfianRank(u)) % records_;
}

std::string RecordKey(uint64_t index) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "user%012llu", static_cast<unsigned long long>(index));
  return buf;
}

}  // namespace rkv::bench
