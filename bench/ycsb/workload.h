// The operation mixes rkv-ycsb runs (--workload) and the kinds of
// operation they are made of.
//
// YCSB's core workloads, on a hash store:
//   a  50% read, 50% update               (zipfian keys in YCSB)
//   b  95% read, 5% update
//   c  100% read
//   d  95% read, 5% insert                (latest keys by default)
//   e  refused: 95% scans, which a hash store does not have
//   f  50% read, 50% read-modify-write (a GET, then a PUT of a new value
//      that the store's compare-and-set refuses if another write came
//      between; then both again: KvTarget::ReadModifyWrite)
// and rkv's own: get (100% GET) and put (100% PUT of loaded records).
// A read is a GET, an update a PUT of a loaded record, an insert a PUT of a
// new record (bench/ycsb/insert_counter.h).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

#include "bench/ycsb/key_chooser.h"
#include "rkv/status.h"

namespace rkv::bench {

// Kinds of operation, each with its own latency histogram. kBatch is not
// an operation: the latency of a whole --batch.
enum class OpType : uint8_t { kRead, kUpdate, kInsert, kReadModifyWrite, kBatch };
inline constexpr size_t kOpTypeCount = 5;
inline constexpr std::array<OpType, kOpTypeCount> kAllOpTypes = {
    OpType::kRead, OpType::kUpdate, OpType::kInsert, OpType::kReadModifyWrite, OpType::kBatch};

// Upper-case name in the text summary: GET, PUT, INSERT, RMW, BATCH (GET
// and PUT as in earlier releases: scripts read those lines).
std::string_view OpLabel(OpType op);
// Lower-case name in the json and csv output: get, put, insert, rmw, batch.
std::string_view OpName(OpType op);

struct Workload {
  std::string_view name;
  // Fractions of the operations; they add up to 1.
  double read = 0;
  double update = 0;
  double insert = 0;
  double read_modify_write = 0;
  // The key distribution when --key_distribution is not given; nullopt:
  // uniform, as rkv-ycsb always defaulted to.
  std::optional<KeyDistribution> default_distribution;
  std::string_view description;

  bool Has(OpType op) const;
  // The operation for a uniform draw u in [0, 1): read, update, insert,
  // read-modify-write by their fractions, in that order.
  OpType Pick(double u) const;
};

// Every workload --workload accepts, in --help order.
std::span<const Workload> Workloads();

// The workload named `name`; INVALID_ARGUMENT for an unknown name, and for
// "e" (scans) with the reason.
StatusOr<Workload> FindWorkload(std::string_view name);

}  // namespace rkv::bench
