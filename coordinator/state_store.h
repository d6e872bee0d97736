// Durable storage of the coordinator's state: one meta record and one
// record per server (proto/coordinator_store.proto).
//
// Thread safety: an implementation need not be thread-safe; the
// CoordinatorState that owns it serializes all calls.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "proto/coordinator_store.pb.h"

namespace rkv::coordinator {

class StateStore {
 public:
  struct Snapshot {
    std::optional<v1::store::StoredMeta> meta;  // absent in a new store
    std::vector<v1::store::StoredServer> servers;
  };

  virtual ~StateStore() = default;

  // Everything stored. DATA_LOSS for a record that does not parse.
  virtual StatusOr<Snapshot> Load() = 0;

  // Writes `meta` and `servers` (each replacing the record of the same
  // server id) and deletes the records of the server ids in `removed` (a
  // forgotten server: none of `servers`; an id without a record is no
  // error), all or nothing, durably (synced) before returning OK.
  virtual Status Commit(const v1::store::StoredMeta& meta, const std::vector<v1::store::StoredServer>& servers,
                        const std::vector<std::string>& removed) = 0;
};

// A StateStore in a RocksDB database. Keys: "meta", "server/<server_id>".
class RocksDbStateStore;

// Opens (creating if missing) the database in `dir`. FAILED_PRECONDITION
// when another process holds it; other RocksDB errors keep their message.
StatusOr<std::unique_ptr<StateStore>> OpenRocksDbStateStore(const std::string& dir);

}  // namespace rkv::coordinator
