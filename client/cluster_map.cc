#include "client/cluster_map.h"

#include <algorithm>
#include <limits>
#include <unordered_map>

#include "common/hash.h"
#include "proto/validation.h"

namespace rkv::client {

using std::to_string;

std::string ServerEntry::Describe() const {
  return "server " + server_id + " (epoch " + to_string(epoch) + ", " + data_address + ")";
}

StatusOr<std::shared_ptr<const RoutingTable>> RoutingTable::Build(const v1::ClusterMap& map) {
  RKV_RETURN_IF_ERROR(control::ValidateClusterMap(map).WithContext("cluster map"));
  if (map.shard_owner().empty()) {
    return Unavailable("cluster has " + to_string(map.servers_size()) + " of " +
                       to_string(map.expected_servers()) +
                       " servers: the shards are assigned once all have joined (map version " +
                       to_string(map.version()) + ")");
  }
  std::shared_ptr<RoutingTable> t(new RoutingTable());
  t->version_ = map.version();
  t->min_max_key_bytes_ = std::numeric_limits<uint32_t>::max();
  t->min_max_value_bytes_ = std::numeric_limits<uint32_t>::max();
  std::unordered_map<std::string, uint32_t> index;
  for (const v1::ServerInfo& s : map.servers()) {
    ServerEntry e;
    e.server_id = s.server_id();
    e.epoch = s.epoch();
    e.up = s.state() == v1::UP;
    e.state = e.up ? "UP" : "DOWN";
    e.data_address = s.data_address();
    e.admin_address = s.admin_address();
    e.transport = s.transport();
    e.max_key_bytes = s.table().max_key_bytes();
    e.max_value_bytes = s.table().max_value_bytes();
    e.zone = s.zone();
    e.shards_owned = static_cast<uint32_t>(s.shards_size());
    e.backup_shards = static_cast<uint32_t>(s.backup_shards_size());
    e.syncing_shards = static_cast<uint32_t>(s.syncing_shards_size());
    e.draining = s.draining();
    e.down_since_unix_ms = s.down_since_unix_ms();
    e.keys = s.keys();
    e.heap_bytes_used = s.heap_bytes_used();
    e.heap_bytes = s.heap_bytes();
    t->min_max_key_bytes_ = std::min(t->min_max_key_bytes_, e.max_key_bytes);
    t->min_max_value_bytes_ = std::min(t->min_max_value_bytes_, e.max_value_bytes);
    index.emplace(e.server_id, static_cast<uint32_t>(t->servers_.size()));
    t->servers_.push_back(std::move(e));
  }
  t->shard_to_server_.reserve(map.shard_owner_size());
  for (const std::string& owner : map.shard_owner()) {
    // ValidateClusterMap checked that every owner is a listed server.
    const auto it = index.find(owner);
    if (it == index.end()) return InvalidArgument("cluster map: shard owner '" + control::Printable(owner) + "' not listed");
    t->shard_to_server_.push_back(it->second);
  }
  // ValidateClusterMap checked the lists: the owner first, listed servers.
  t->replication_factor_ = control::EffectiveReplicationFactor(map);
  t->replica_begin_.reserve(map.shard_count() + 1);
  t->replica_begin_.push_back(0);
  for (uint32_t shard = 0; shard < map.shard_count(); ++shard) {
    if (map.shard_replicas().empty()) {
      t->replica_servers_.push_back(t->shard_to_server_[shard]);
    } else {
      for (const std::string& id : map.shard_replicas(static_cast<int>(shard)).server_ids()) {
        const auto it = index.find(id);
        if (it == index.end()) {
          return InvalidArgument("cluster map: replica '" + control::Printable(id) + "' not listed");
        }
        t->replica_servers_.push_back(it->second);
      }
    }
    t->replica_begin_.push_back(static_cast<uint32_t>(t->replica_servers_.size()));
  }
  if (!map.shard_replicas().empty()) {
    t->syncing_.reserve(map.shard_count());
    t->handover_from_.reserve(map.shard_count());
    for (const v1::ShardReplicas& r : map.shard_replicas()) {
      t->syncing_.emplace_back(r.syncing_ids().begin(), r.syncing_ids().end());
      t->handover_from_.push_back(r.handover_from());
    }
  }
  t->IndexUpReplicas();
  return std::shared_ptr<const RoutingTable>(std::move(t));
}

std::shared_ptr<const RoutingTable> RoutingTable::ForServer(const std::string& data_address,
                                                           const std::string& transport) {
  std::shared_ptr<RoutingTable> t(new RoutingTable());
  ServerEntry e;
  e.server_id = data_address;
  e.up = true;
  e.state = "UP";
  e.data_address = data_address;
  e.transport = transport;
  e.shards_owned = 1;
  t->servers_.push_back(std::move(e));
  t->shard_to_server_.push_back(0);
  t->replica_begin_ = {0, 1};
  t->replica_servers_ = {0};
  t->IndexUpReplicas();
  return t;
}

void RoutingTable::IndexUpReplicas() {
  up_replica_begin_.assign(1, 0);
  up_replica_servers_.clear();
  for (size_t shard = 0; shard + 1 < replica_begin_.size(); ++shard) {
    for (uint32_t i = replica_begin_[shard]; i < replica_begin_[shard + 1]; ++i) {
      if (servers_[replica_servers_[i]].up) up_replica_servers_.push_back(replica_servers_[i]);
    }
    up_replica_begin_.push_back(static_cast<uint32_t>(up_replica_servers_.size()));
  }
}

const ServerEntry& RoutingTable::OwnerOfShard(uint32_t shard) const {
  return servers_[shard_to_server_[shard]];
}

const ServerEntry& RoutingTable::OwnerOf(std::string_view key) const { return servers_[OwnerIndexOf(key)]; }

std::vector<ReplicaEntry> RoutingTable::ReplicasOfShard(uint32_t shard) const {
  std::vector<ReplicaEntry> out;
  for (uint32_t i = replica_begin_[shard]; i < replica_begin_[shard + 1]; ++i) {
    out.push_back({&servers_[replica_servers_[i]], i == replica_begin_[shard] ? ReplicaRole::kPrimary
                                                                               : ReplicaRole::kBackup});
  }
  return out;
}

const std::vector<std::string>& RoutingTable::SyncingOfShard(uint32_t shard) const {
  static const std::vector<std::string> kNone;
  return shard < syncing_.size() ? syncing_[shard] : kNone;
}

const std::string& RoutingTable::HandoverFromOfShard(uint32_t shard) const {
  static const std::string kNone;
  return shard < handover_from_.size() ? handover_from_[shard] : kNone;
}

std::vector<ReplicaEntry> RoutingTable::ReplicasOf(std::string_view key) const {
  return ReplicasOfShard(ShardOf(key, shard_count()));
}

const ServerEntry* RoutingTable::Find(std::string_view server_id) const {
  for (const ServerEntry& e : servers_) {
    if (e.server_id == server_id) return &e;
  }
  return nullptr;
}

EpochRelation CompareEpoch(uint64_t map_epoch, uint64_t server_epoch) {
  if (server_epoch == map_epoch) return EpochRelation::kMatch;
  return server_epoch > map_epoch ? EpochRelation::kServerNewer : EpochRelation::kServerOlder;
}

std::shared_ptr<const RoutingTable> MapHolder::Current() const {
  MutexLock lock(mu_);
  return table_;
}

bool MapHolder::InstallIfNewer(std::shared_ptr<const RoutingTable> table) {
  if (!table) return false;
  std::shared_ptr<const RoutingTable> old;  // released outside the lock
  MutexLock lock(mu_);
  if (table_ && table->version() <= table_->version()) return false;
  old = std::move(table_);
  table_ = std::move(table);
  generation_.fetch_add(1, std::memory_order_release);
  return true;
}

}  // namespace rkv::client
