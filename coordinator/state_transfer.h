// Moving a cluster's coordinator state between stores: from a data dir
// (RocksDB) to etcd when a cluster grows several coordinators, or back
// (`rkv-coordinator --export_state=FILE` / `--import_state=FILE`, docs/
// design.md §8.11). The file is one StoredState message
// (proto/coordinator_store.proto).
//
// Thread safety: none needed; run by rkv-coordinator before it serves.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "common/status.h"
#include "coordinator/coordinator_state.h"
#include "coordinator/state_store.h"

namespace rkv::coordinator {

struct TransferSummary {
  uint64_t map_version = 0;
  size_t servers = 0;
};

// Writes everything `from` holds to `path` (mode 0600, written whole to a
// temporary file first, then renamed). FAILED_PRECONDITION when the store
// holds no cluster yet; the store's errors; INTERNAL naming the file when
// it cannot be written.
StatusOr<TransferSummary> ExportState(StateStore& from, const std::string& path);

// Reads `path`, checks that it is a consistent state for `config` (as a
// coordinator opening it would: shard count, replication factor, replica
// sets), and writes it into `to`, which must be empty: FAILED_PRECONDITION
// when it holds a cluster already (nothing is written), DATA_LOSS for a
// file that does not parse, the checks' errors otherwise. The map version
// is kept, so servers and clients that hold a map see no version go back.
StatusOr<TransferSummary> ImportState(const CoordinatorConfig& config, const std::string& path, StateStore& to);

}  // namespace rkv::coordinator
