#include "bench/ycsb/workload.h"

#include <string>

namespace rkv::bench {
namespace {

constexpr Workload kWorkloads[] = {
    {"get", 1.0, 0, 0, 0, std::nullopt, "100% GET"},
    {"put", 0, 1.0, 0, 0, std::nullopt, "100% PUT"},
    {"a", 0.5, 0.5, 0, 0, std::nullopt, "YCSB A: 50% read (GET), 50% update (PUT)"},
    {"b", 0.95, 0.05, 0, 0, std::nullopt, "YCSB B: 95% read (GET), 5% update (PUT)"},
    {"c", 1.0, 0, 0, 0, std::nullopt, "YCSB C: 100% read (GET)"},
    {"d", 0.95, 0, 0.05, 0, KeyDistribution::kLatest, "YCSB D: 95% read (GET) of the latest, 5% insert (PUT)"},
    {"f", 0.5, 0, 0, 0.5, std::nullopt,
     "YCSB F: 50% read (GET), 50% read-modify-write (GET then compare-and-set PUT, retried on conflict)"},
};

}  // namespace

std::string_view OpLabel(OpType op) {
  switch (op) {
    case OpType::kRead:
      return "GET";
    case OpType::kUpdate:
      return "PUT";
    case OpType::kInsert:
      return "INSERT";
    case OpType::kReadModifyWrite:
      return "RMW";
    case OpType::kBatch:
      return "BATCH";
  }
  return "?";
}

std::string_view OpName(OpType op) {
  switch (op) {
    case OpType::kRead:
      return "get";
    case OpType::kUpdate:
      return "put";
    case OpType::kInsert:
      return "insert";
    case OpType::kReadModifyWrite:
      return "rmw";
    case OpType::kBatch:
      return "batch";
  }
  return "?";
}

bool Workload::Has(OpType op) const {
  switch (op) {
    case OpType::kRead:
      return read > 0;
    case OpType::kUpdate:
      return update > 0;
    case OpType::kInsert:
      return insert > 0;
    case OpType::kReadModifyWrite:
      return read_modify_write > 0;
    case OpType::kBatch:
      return false;
  }
  return false;
}

OpType Workload::Pick(double u) const {
  // Exact for the pure mixes (read = 1 never draws anything else), as the
  // comparisons run in a fixed order.
  if (u < read) return OpType::kRead;
  if (u < read + update) return OpType::kUpdate;
  if (u < read + update + insert) return OpType::kInsert;
  if (read_modify_write > 0) return OpType::kReadModifyWrite;
  // Rounding left u above the sum of fractions that should be 1: the last
  // kind the mix has.
  if (insert > 0) return OpType::kInsert;
  if (update > 0) return OpType::kUpdate;
  return OpType::kRead;
}

std::span<const Workload> Workloads() { return kWorkloads; }

StatusOr<Workload> FindWorkload(std::string_view name) {
  if (name == "e") {
    return InvalidArgument(
        "workload e (95% scans, 5% inserts) is not supported: rkv is a hash store and has no range "
        "scans");
  }
  for (const Workload& w : kWorkloads) {
    if (w.name == name) return w;
  }
  return InvalidArgument("unknown workload '" + std::string(name) + "' (want get, put, a, b, c, d or f)");
}

}  // namespace rkv::bench
