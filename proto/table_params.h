// A server's table parameters: what a client needs, besides the regions, to
// interpret the table it reads (common/layout.h), and the one conversion to
// and from their control-plane message rkv.v1.TableParams.
//
// Thread safety: a plain value; pure functions.
#pragma once

#include <cstdint>

#include "common/status.h"

namespace rkv::v1 {
class TableParams;
}  // namespace rkv::v1

namespace rkv::control {

// The fields of rkv.v1.TableParams, with the same meaning.
struct TableParams {
  uint32_t bucket_count_log2 = 0;  // bucket_count == 1 << bucket_count_log2
  uint64_t hash_seed = 0;          // XXH3 seed for bucket choice
  uint64_t heap_size = 0;          // bytes in the heap region
  uint32_t max_key_bytes = 0;
  uint32_t max_value_bytes = 0;
  uint64_t grace_period_us = 0;    // heap quarantine; a client GET lease is half
};

// Every field copied.
v1::TableParams ToProto(const TableParams& table);

// The parameters in `table` once ValidateTableParams (proto/validation.h)
// accepts them; INVALID_ARGUMENT naming the field otherwise.
StatusOr<TableParams> FromProto(const v1::TableParams& table);

}  // namespace rkv::control
