// The durable copy of a server's table, in RocksDB. The in-memory table
// (server/table.h) is rebuilt from it at every start.
//
// RocksDB keys and values (one keyspace, split by a one-byte prefix):
//   'd' + key        -> StoredRecord: format byte (1), version (8, LE),
//                       CRC32C (4, LE) of format, version, key and value;
//                       then the value bytes.
//   'm' + "version"  -> the version high-water mark (8, LE): every version
//                       ever assigned is <= it. Written in the same
//                       WriteBatch as each Put, so versions stay monotonic
//                       per key across deletes and restarts.
//   'm' + "epoch"    -> the server epoch (8, LE): incremented and synced
//                       once per Open.
//
// Durability (what an OK from Put/Delete means):
//   kNone: WriteOptions::disableWAL. Survives nothing but a clean shutdown
//          (memtables are flushed on Close).
//   kWal:  written to the WAL without fsync: survives a process crash.
//   kSync: WAL fsynced before returning: survives power loss. RocksDB
//          group-commits concurrent writers; the apply path, however,
//          writes under one mutex, so writes from different connections
//          are fsynced one after the other.
//
// Everything read back is validated: a malformed stored record or meta
// value is DATA_LOSS naming the key, and the server refuses to start rather
// than serve wrong data.
//
// Thread safety: Put, Delete, NextVersion are called under one external
// lock (the apply mutex). Get and Scan may run concurrently with them
// (RocksDB is thread-safe) but see a point-in-time view only for Scan.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "common/status.h"

namespace rocksdb {
class DB;
}

namespace rkv::server {

enum class Durability { kNone, kWal, kSync };

// "none" | "wal" | "sync"; INVALID_ARGUMENT otherwise.
StatusOr<Durability> ParseDurability(std::string_view name);
const char* DurabilityName(Durability d);

class Store {
 public:
  struct Value {
    uint64_t version = 0;
    std::string value;
  };

  // Opens (creating if missing) the database in `dir`, increments and
  // syncs the epoch. FAILED_PRECONDITION when another process holds the
  // database (RocksDB's LOCK file), DATA_LOSS when the meta keys are
  // malformed, INTERNAL/PERMISSION_DENIED etc. for other failures, always
  // naming the directory.
  static StatusOr<std::unique_ptr<Store>> Open(const std::string& dir, Durability durability);

  ~Store();  // flushes (for kNone) and closes the database
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  // The epoch of this open (>= 1).
  uint64_t epoch() const { return epoch_; }
  // Highest version ever assigned (0 for a new store).
  uint64_t version_high_water() const { return version_hw_; }
  // The version the next write should carry: version_high_water() + 1. It
  // becomes the high-water mark when a Put carrying it succeeds.
  uint64_t NextVersion() const { return version_hw_ + 1; }

  // Writes `key` -> {version, value} and the high-water mark max(hw,
  // version) in one batch, durable per the store's durability.
  Status Put(std::string_view key, std::string_view value, uint64_t version);
  // Removes `key` (not an error if absent), durable per the durability.
  Status Delete(std::string_view key);

  // Reads `key`; nullopt when absent; DATA_LOSS when malformed.
  StatusOr<std::optional<Value>> Get(std::string_view key) const;

  // Calls `fn` for every stored record in key order; stops at the first
  // non-OK status from `fn` and returns it. DATA_LOSS (naming the key) for a
  // malformed record. The views are valid during the call only.
  using ScanFn = std::function<Status(std::string_view key, uint64_t version, std::string_view value)>;
  Status Scan(const ScanFn& fn) const;

 private:
  Store(std::string dir, Durability durability, rocksdb::DB* db);
  Status Write(std::string_view what, std::string_view key, bool put, std::string_view value, uint64_t version);

  std::string dir_;
  Durability durability_;
  std::unique_ptr<rocksdb::DB> db_;
  uint64_t epoch_ = 0;
  uint64_t version_hw_ = 0;
};

// Printable form of a binary key for messages: printable ASCII as is,
// anything else as \xNN; cut to 64 bytes with "...".
std::string PrintableKey(std::string_view key);

}  // namespace rkv::server
