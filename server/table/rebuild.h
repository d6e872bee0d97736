// Rebuilding the in-memory table from the durable store at start
// (design.md §6): every stored record is validated and inserted with its
// stored version, before any client can read the table.
#pragma once

#include <cstdint>

#include "common/status.h"
#include "server/store/store.h"
#include "server/table/table.h"

namespace rkv::server {

struct RebuildLimits {
  uint32_t max_key_bytes = 0;
  uint32_t max_value_bytes = 0;
};

// Inserts every record of `store` into `table`, which must be empty and not
// yet serving readers. Returns the number of keys. Errors: the store's
// (DATA_LOSS for a malformed record), FAILED_PRECONDITION for a record over
// `limits`, RESOURCE_EXHAUSTED when the table or its heap is too small; each
// names the key. On error the table holds an unspecified part of the store.
StatusOr<uint64_t> RebuildTable(const Store& store, Table& table, const RebuildLimits& limits);

}  // namespace rkv::server
