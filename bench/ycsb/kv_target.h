// The store under test, behind one small interface so that rkv and the
// baselines (memcached, Redis) run the very same load and timing code.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "rkv/status.h"

namespace rkv {
class Client;
}  // namespace rkv

namespace rkv::bench {

// A read-modify-write retries at most this many conflicts; when the try
// after the last of them meets one too, it fails with ABORTED.
inline constexpr uint64_t kReadModifyWriteRetries = 100;

// What one KvTarget::ReadModifyWrite did. The read and the write keep
// their own outcome, so that the caller counts a failed read as a GET's
// error and a failed write as a PUT's without reading a message.
struct ReadModifyWriteResult {
  // The last read: the length of the value it got, or its error (then
  // nothing was written: NOT_FOUND when the key was absent).
  StatusOr<size_t> read = size_t{0};
  // The compare-and-set that followed the last read: OK when it stored
  // the value; its error otherwise, ABORTED after kReadModifyWriteRetries
  // conflicts. OK and meaningless when the read failed.
  Status write;
  // Conflicts met and retried: compare-and-sets refused because another
  // write of the key came between the read and them.
  uint64_t conflicts = 0;
};

// One connection to one store. Thread safety: none; each benchmark thread
// opens its own.
class KvTarget {
 public:
  virtual ~KvTarget() = default;

  // Stores `value` under `key`. OK only when the store acknowledged it.
  virtual Status Put(std::string_view key, std::string_view value) = 0;
  // Fetches `key` and returns the length of its value (the bytes themselves
  // are fetched in full and dropped). NOT_FOUND when absent.
  virtual StatusOr<size_t> Get(std::string_view key) = 0;
  // Workload f's read-modify-write, a compare-and-set loop: reads `key`
  // (its value fetched in full and dropped, as Get), then stores `value`
  // under it only if no other write of the key came between, with the
  // store's own compare-and-set (rkv: a PUT conditioned on the version
  // read; memcached: gets, then cas; Redis: WATCH and GET, then SET in a
  // MULTI/EXEC). When another write came between (a conflict), reads
  // again and tries again, up to kReadModifyWriteRetries times
  // (RetryConflicts). The value is stored whatever the length read.
  virtual ReadModifyWriteResult ReadModifyWrite(std::string_view key, std::string_view value) = 0;
  // Batches (rkv-ycsb --batch): whether this target has a batched path of
  // its own (rkv: MultiGet / MultiPut; Redis: pipelining). Without one
  // rkv-ycsb refuses --batch > 1 rather than time a loop of single calls.
  virtual bool SupportsBatch() const { return false; }
  // As Get, for every key, in one batch: one result per key, in order.
  // The default fails every key (UNIMPLEMENTED).
  virtual std::vector<StatusOr<size_t>> MultiGet(std::span<const std::string> keys);
  // As Put, for keys[i] = values[i], in one batch: one result per key, in
  // order. The default fails every key (UNIMPLEMENTED).
  virtual std::vector<Status> MultiPut(std::span<const std::string> keys, std::span<const std::string_view> values);
  // One line about the connection (e.g. the transport rkv picked), or "".
  virtual std::string Description() const { return ""; }
  // rkv: adds this connection's location cache hits, fallbacks and misses
  // (rkv::Client::LocationCacheStats) to the counts; other stores: nothing.
  virtual void AddCacheCounts(uint64_t* /*hits*/, uint64_t* /*fallbacks*/, uint64_t* /*misses*/) const {}
};

// One try of a read-modify-write, as a ReadModifyWrite implementation
// makes it: read.ok() false, or the compare-and-set's outcome in write and
// conflict.
struct ReadModifyWriteTry {
  StatusOr<size_t> read = size_t{0};
  Status write;
  bool conflict = false;  // the compare-and-set was refused: retry
};

// The retry loop of every ReadModifyWrite: calls `attempt()` (returning a
// ReadModifyWriteTry) until a try meets no conflict, at most
// 1 + kReadModifyWriteRetries times; when the last try also meets one,
// write is ABORTED naming `key`. A template, not a std::function: the
// loop runs once per timed operation.
template <typename Attempt>
ReadModifyWriteResult RetryConflicts(std::string_view key, Attempt&& attempt) {
  ReadModifyWriteResult result;
  for (;;) {
    ReadModifyWriteTry t = attempt();
    result.read = std::move(t.read);
    result.write = std::move(t.write);
    if (!t.conflict) return result;
    if (result.conflicts == kReadModifyWriteRetries) {
      result.write = Aborted("read-modify-write of " + std::string(key) + ": " +
                             std::to_string(kReadModifyWriteRetries + 1) +
                             " compare-and-sets in a row met a conflict");
      return result;
    }
    ++result.conflicts;
  }
}

// Settings shared by every kind of target.
struct TargetOptions {
  std::string kind;    // "rkv", "memcached" or "redis"
  std::string server;  // HOST:PORT
  // rkv only: HOST:PORT of an rkv-coordinator, or a comma-separated list
  // of the cluster's coordinators (ClientOptions::coordinator); when set,
  // the client runs in cluster mode (keys routed by the cluster map) and
  // `server` is unused.
  std::string coordinator;
  // redis only: after every SET, WAIT for this many replicas to acknowledge
  // it (0: no WAIT). A SET that fewer replicas acknowledged within
  // timeout_ms counts as a failed PUT.
  int redis_wait_replicas = 0;
  // rkv only.
  std::string token;
  std::string transport = "auto";
  int timeout_ms = 5000;
  // rkv with a coordinator: GETs read any replica of the key's shard
  // (rkv::ReadFrom::kAnyReplica) instead of its primary.
  bool read_any_replica = false;
  // rkv: rkv::ClientOptions::location_cache_bytes (0: off).
  uint64_t location_cache_bytes = uint64_t{32} << 20;
  // rkv: rkv::ClientOptions::data_plane_tls and tls_ca_file.
  bool data_plane_tls = false;
  std::string tls_ca_file;
  // rkv: GETs go into one registered buffer per target (Client::GetInto),
  // room for `batch` values of the server's largest size, instead of into
  // a string.
  bool get_into = false;
  int batch = 1;
  // rkv: the one Client that every target of the run uses (ShareRkvClient),
  // or null for a Client of each target's own, with one connection.
  std::shared_ptr<Client> rkv_client;
};

// Opens a new connection. INVALID_ARGUMENT for an unknown kind or a bad
// address; the store's own error when it cannot be reached.
StatusOr<std::unique_ptr<KvTarget>> OpenTarget(const TargetOptions& options);

// Splits "HOST:PORT" or "[V6]:PORT"; INVALID_ARGUMENT when malformed or the
// port is outside 1..65535.
Status SplitHostPort(std::string_view address, std::string* host, int* port);

// rkv: connects one Client with `connections` connections and sets
// options->rkv_client, so that the targets opened after share it, as the
// threads of one application share its Client: its connections (a call
// takes a free one), its location cache and its leases.
Status ShareRkvClient(TargetOptions* options, int connections);

// Implementations, one per file.
StatusOr<std::unique_ptr<KvTarget>> OpenRkvTarget(const TargetOptions& options);
StatusOr<std::unique_ptr<KvTarget>> OpenMemcachedTarget(const TargetOptions& options);
StatusOr<std::unique_ptr<KvTarget>> OpenRedisTarget(const TargetOptions& options);

}  // namespace rkv::bench
