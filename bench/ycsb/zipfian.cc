#include "bench/ycsb/zipfian.h"

#include <glog/logging.h>

#include <algorithm>
#include <cmath>

namespace rkv::bench {
namespace {

// Terms summed exactly before the Euler-Maclaurin tail takes over.
constexpr uint64_t kExactTerms = 4096;

double Term(double i, double theta) { return std::pow(i, -theta); }

// sum over i = a..b of i^-theta, a >= kExactTerms, by Euler-Maclaurin:
// the integral, half the end terms, then the first two Bernoulli
// corrections. At a >= 4096 the next correction is below 1e-20 of the sum.
double ZetaTail(double a, double b, double theta) {
  const double s = 1.0 - theta;
  const double integral = (std::pow(b, s) - std::pow(a, s)) / s;
  const double ends = (Term(a, theta) + Term(b, theta)) / 2.0;
  // f'(x) = -theta x^(-theta-1); f'''(x) = -theta (theta+1) (theta+2) x^(-theta-3).
  const auto d1 = [theta](double x) { return -theta * std::pow(x, -theta - 1.0); };
  const auto d3 = [theta](double x) {
    return -theta * (theta + 1.0) * (theta + 2.0) * std::pow(x, -theta - 3.0);
  };
  return integral + ends + (d1(b) - d1(a)) / 12.0 - (d3(b) - d3(a)) / 720.0;
}

}  // namespace

double Zeta(uint64_t n, double theta) {
  double sum = 0;
  const uint64_t exact = std::min(n, kExactTerms - 1);
  for (uint64_t i = 1; i <= exact; ++i) sum += Term(static_cast<double>(i), theta);
  if (n >= kExactTerms) sum += ZetaTail(static_cast<double>(kExactTerms), static_cast<double>(n), theta);
  return sum;
}

uint64_t FnvHash64(uint64_t value) {
  uint64_t hash = 0xcbf29ce484222325ULL;
  for (int i = 0; i < 8; ++i) {
    hash ^= value & 0xff;
    hash *= 0x100000001b3ULL;
    value >>= 8;
  }
  // Java's Math.abs of the signed value (Long.MIN_VALUE stays itself,
  // whose low 63 bits are 0).
  const int64_t signed_hash = static_cast<int64_t>(hash);
  if (signed_hash >= 0) return hash;
  return signed_hash == INT64_MIN ? 0 : static_cast<uint64_t>(-signed_hash);
}

ZipfianGenerator::ZipfianGenerator(uint64_t items, double theta)
    : items_(std::max<uint64_t>(items, 1)), theta_(theta) {
  CHECK(theta > 0.0 && theta < 1.0) << "zipfian theta must be in (0, 1), got " << theta;
  alpha_ = 1.0 / (1.0 - theta_);
  prefix_.resize(kExactTerms);
  prefix_[0] = 0;
  for (uint64_t i = 1; i < kExactTerms; ++i) prefix_[i] = prefix_[i - 1] + Term(static_cast<double>(i), theta_);
  zeta_2_ = prefix_[2];
  zeta_n_ = ZetaOf(items_);
  eta_ = EtaOf(items_, zeta_n_);
}

double ZipfianGenerator::ZetaOf(uint64_t items) const {
  if (items < kExactTerms) return prefix_[items];
  return prefix_[kExactTerms - 1] +
         ZetaTail(static_cast<double>(kExactTerms), static_cast<double>(items), theta_);
}

double ZipfianGenerator::EtaOf(uint64_t items, double zeta_n) const {
  // Used only past the first two ranks, so only for items > 2 (where the
  // denominator is not 0).
  if (items <= 2) return 0;
  return (1.0 - std::pow(2.0 / static_cast<double>(items), 1.0 - theta_)) / (1.0 - zeta_2_ / zeta_n);
}

uint64_t ZipfianGenerator::Draw(double u, uint64_t items, double zeta_n, double eta) const {
  const double uz = u * zeta_n;
  if (uz < 1.0 || items == 1) return 0;
  if (uz < 1.0 + std::pow(0.5, theta_) || items == 2) return 1;
  const double rank = static_cast<double>(items) * std::pow(eta * u - eta + 1.0, alpha_);
  // Rounding can reach `items` for u close to 1.
  const uint64_t r = static_cast<uint64_t>(rank);
  return r < items ? r : items - 1;
}

uint64_t ZipfianGenerator::Next(double u) const { return Draw(u, items_, zeta_n_, eta_); }

uint64_t ZipfianGenerator::Next(double u, uint64_t items) const {
  if (items == items_) return Next(u);
  items = std::max<uint64_t>(items, 1);
  const double zeta_n = ZetaOf(items);
  return Draw(u, items, zeta_n, EtaOf(items, zeta_n));
}

double ZipfianGenerator::Probability(uint64_t rank) const {
  return Term(static_cast<double>(rank + 1), theta_) / zeta_n_;
}

ScrambledZipfianGenerator::ScrambledZipfianGenerator(uint64_t records)
    : records_(std::max<uint64_t>(records, 1)), ranks_(kScrambledItems) {}

SkewedLatest::SkewedLatest(uint64_t initial_records) : ranks_(std::max<uint64_t>(initial_records, 1)) {}

}  // namespace rkv::bench
