// The client's routing: a table that sends each key to the server that
// owns it (key -> shard -> owning server, the shard's primary), the
// shard's replica set (primary first, then its backups), and the holder
// that publishes the newest table. Writes go to the primary only; a read
// goes to the primary, or to any replica marked UP when its caller allows
// (ReplicaIndexOf). A table is built from a validated v1::ClusterMap (a
// client of a coordinator), or for one server given by its address, which
// then owns every shard (a client of one server: no coordinator).
//
// A RoutingTable is immutable once built; the holder swaps whole tables
// (a shared_ptr under a mutex), so a reader sees either the old map or the
// new one, never a mix.
//
// Thread safety: RoutingTable is immutable (any thread); MapHolder is
// thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/hash.h"
#include "common/mutex.h"
#include "common/status.h"
#include "proto/rkv.pb.h"

namespace rkv::client {

// One server as the map describes it.
struct ServerEntry {
  std::string server_id;
  // The incarnation the map lists; 0 in a table built by ForServer.
  uint64_t epoch = 0;
  bool up = false;
  std::string state;  // "UP" or "DOWN"
  std::string data_address;
  std::string admin_address;
  std::string transport;  // "tcp" or "verbs"
  uint32_t max_key_bytes = 0;
  uint32_t max_value_bytes = 0;
  std::string zone;  // failure domain; empty when unlabelled
  uint32_t shards_owned = 0;    // shards it is the primary of
  uint32_t backup_shards = 0;   // shards it holds as a backup
  uint32_t syncing_shards = 0;  // shards it is catching up on
  bool draining = false;        // Coordinator.Drain: its roles move away
  // DOWN: when the coordinator marked it DOWN (ms since the Unix epoch, the
  // coordinator's wall clock); 0 when UP or not known.
  uint64_t down_since_unix_ms = 0;
  uint64_t keys = 0;
  uint64_t heap_bytes_used = 0;
  uint64_t heap_bytes = 0;

  // Whether a connection must reach the incarnation `epoch` names
  // (CompareEpoch). A coordinator's map pins every server's; the table of
  // one server given by its address pins none: whichever incarnation
  // answers is the one meant, so a restarted server is followed by
  // reconnecting alone.
  bool pins_epoch() const { return epoch != 0; }

  // "server ID (epoch E, ADDRESS)", the prefix of every error about it.
  std::string Describe() const;
};

// One server of a shard's replica set.
enum class ReplicaRole { kPrimary, kBackup };
struct ReplicaEntry {
  const ServerEntry* server = nullptr;  // into the table's servers()
  ReplicaRole role = ReplicaRole::kPrimary;
};

class RoutingTable {
 public:
  // Validates `map` (proto/validation.h) and indexes it. INVALID_ARGUMENT
  // for a malformed map; UNAVAILABLE "cluster has K of N servers" while
  // the map has no shard assignment yet (the cluster is not complete).
  static StatusOr<std::shared_ptr<const RoutingTable>> Build(const v1::ClusterMap& map);
  // The table of one server reached directly at `data_address`, speaking
  // `transport` ("tcp" or "verbs"): version 0, one shard, which the server
  // owns; its entry is UP, named by its address, pins no epoch (0), and
  // knows no limits (the min_max_*() are 0: the connections' accept data
  // tells them).
  static std::shared_ptr<const RoutingTable> ForServer(const std::string& data_address,
                                                       const std::string& transport);

  uint64_t version() const { return version_; }
  uint32_t shard_count() const { return static_cast<uint32_t>(shard_to_server_.size()); }
  // Servers in the map's (join) order.
  const std::vector<ServerEntry>& servers() const { return servers_; }

  // The owner of shard `shard` (< shard_count()).
  const ServerEntry& OwnerOfShard(uint32_t shard) const;
  // The owner of `key`: OwnerOfShard(ShardOf(key, shard_count())).
  const ServerEntry& OwnerOf(std::string_view key) const;
  // The index into servers() of the owner of `key`. Inline: every call of
  // the client asks it; with one server, no hash is needed.
  size_t OwnerIndexOf(std::string_view key) const {
    if (servers_.size() == 1) return 0;
    return shard_to_server_[ShardOf(key, shard_count())];
  }
  // The same for the key whose ShardHash is `shard_hash`.
  size_t OwnerIndexOfHash(uint64_t shard_hash) const {
    if (servers_.size() == 1) return 0;
    return shard_to_server_[ShardOfHash(shard_hash, shard_count())];
  }
  // R, the copies each shard is meant to have (1 for a map older than
  // replication). A replica set may hold fewer while a backup is missing.
  uint32_t replication_factor() const { return replication_factor_; }
  // The replica set of shard `shard` (< shard_count()): the primary
  // (OwnerOfShard) first, then the backups in the map's order. A map older
  // than replication gives the owner alone.
  std::vector<ReplicaEntry> ReplicasOfShard(uint32_t shard) const;
  // The replica set of `key`'s shard.
  std::vector<ReplicaEntry> ReplicasOf(std::string_view key) const;
  // The index into servers() of the server a read of `key` that may use
  // any replica goes to: the `turn`-th (mod their count) of the replicas
  // of the key's shard that the map marks UP, in the replica set's order
  // (primary first). Only the shard's replicas (a ShardReplicas'
  // server_ids) are candidates, never a server still catching up on it
  // (its syncing_ids). The primary (OwnerIndexOf) when no replica is UP,
  // so that the call meets the DOWN primary and retries as any call does.
  size_t ReplicaIndexOf(std::string_view key, uint64_t turn) const {
    if (servers_.size() == 1) return 0;
    return ReplicaIndexOfHash(ShardHash(key), turn);
  }
  // The same for the key whose ShardHash is `shard_hash`.
  size_t ReplicaIndexOfHash(uint64_t shard_hash, uint64_t turn) const {
    if (servers_.size() == 1) return 0;
    const uint32_t shard = ShardOfHash(shard_hash, shard_count());
    const uint32_t begin = up_replica_begin_[shard];
    const uint32_t count = up_replica_begin_[shard + 1] - begin;
    if (count == 0) return shard_to_server_[shard];
    return up_replica_servers_[begin + turn % count];
  }

  // The servers catching up on shard `shard` (< shard_count()), in the
  // map's order (empty in a map older than catch-up), and the server the
  // primary role is passing from (empty when none). Shown by kvctl; data
  // calls never go to either.
  const std::vector<std::string>& SyncingOfShard(uint32_t shard) const;
  const std::string& HandoverFromOfShard(uint32_t shard) const;

  // The server named `server_id`, or nullptr.
  const ServerEntry* Find(std::string_view server_id) const;
  // The smallest limits over all servers (what every server accepts); 0
  // when the table does not know them (ForServer).
  uint32_t min_max_key_bytes() const { return min_max_key_bytes_; }
  uint32_t min_max_value_bytes() const { return min_max_value_bytes_; }

 private:
  RoutingTable() = default;
  // Fills up_replica_* from replica_* and the servers' states.
  void IndexUpReplicas();

  uint64_t version_ = 0;
  std::vector<ServerEntry> servers_;
  std::vector<uint32_t> shard_to_server_;  // shard -> index into servers_
  uint32_t replication_factor_ = 1;
  // Shard s's replicas are replica_servers_[replica_begin_[s] ..
  // replica_begin_[s + 1]), indices into servers_, primary first.
  std::vector<uint32_t> replica_begin_;
  std::vector<uint32_t> replica_servers_;
  // Per shard; empty vectors when the map lists no replica sets.
  std::vector<std::vector<std::string>> syncing_;
  std::vector<std::string> handover_from_;
  // The same lists less the servers the map marks DOWN (ReplicaIndexOf).
  std::vector<uint32_t> up_replica_begin_;
  std::vector<uint32_t> up_replica_servers_;
  uint32_t min_max_key_bytes_ = 0;
  uint32_t min_max_value_bytes_ = 0;
};

// How a connected server's epoch (from its accept data) relates to the
// epoch the map lists for it (see ServerEntry::pins_epoch).
enum class EpochRelation {
  kMatch,        // the incarnation the map describes
  kServerNewer,  // the server restarted after this map: refetch the map
  kServerOlder,  // a stale incarnation (or another process): reconnect
};
EpochRelation CompareEpoch(uint64_t map_epoch, uint64_t server_epoch);

// Publishes the newest routing table.
class MapHolder {
 public:
  // The current table; nullptr before the first Install.
  std::shared_ptr<const RoutingTable> Current() const EXCLUDES(mu_);
  // Installs `table` when there is none yet or its version is higher than
  // the current one's; returns whether it did.
  bool InstallIfNewer(std::shared_ptr<const RoutingTable> table) EXCLUDES(mu_);
  // How many tables were installed so far, without taking the lock: a
  // reader that keeps what it derived from a table checks it against this
  // to see whether a newer table came (then Current() has it, or a newer
  // one).
  uint64_t generation() const { return generation_.load(std::memory_order_acquire); }

 private:
  mutable Mutex mu_;
  std::shared_ptr<const RoutingTable> table_ GUARDED_BY(mu_);
  // Raised (release) after table_ changed, under mu_.
  std::atomic<uint64_t> generation_{0};
};

}  // namespace rkv::client
