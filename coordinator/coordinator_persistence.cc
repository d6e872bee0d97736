// CoordinatorState: loading the store and committing to it.
#include "coordinator/coordinator_state.h"

#include <map>
#include <string>
#include <utility>
#include <vector>

#include <glog/logging.h>

#include "common/client_credentials.h"
#include "coordinator/coordinator_state_util.h"
#include "proto/validation.h"

namespace rkv::coordinator {

using std::chrono::steady_clock;

Status CoordinatorState::Reload(bool quiet) {
  MutexLock lock(mu_);
  RKV_RETURN_IF_ERROR(LoadLocked(quiet));
  changed_cv_.NotifyAll();
  return Status::Ok();
}

Status CoordinatorState::Load() {
  MutexLock lock(mu_);
  return LoadLocked(/*quiet=*/false);
}

Status CoordinatorState::LoadLocked(bool quiet) {
  RKV_ASSIGN_OR_RETURN(StateStore::Snapshot snap, store_->Load());
  // What memory alone knew belongs to the state loaded before (a reload).
  servers_.clear();
  version_ = 0;
  assigned_ = false;
  expected_servers_ = config_.expected_servers;
  fenced_since_.clear();
  suspect_fenced_since_.clear();
  down_since_.clear();
  syncing_since_.clear();
  reported_at_.clear();
  handover_since_.clear();
  if (!snap.meta.has_value()) {
    if (!snap.servers.empty()) return DataLoss("the store holds servers but no meta record");
    PublishLeaseLocked();
    return Status::Ok();
  }
  const v1::store::StoredMeta& meta = *snap.meta;
  if (meta.shard_count() != config_.shard_count) {
    return FailedPrecondition("the data dir holds a cluster of " + std::to_string(meta.shard_count()) +
                              " shards, not --shards " + std::to_string(config_.shard_count) +
                              "; changing the shard count is not supported");
  }
  if (meta.expected_servers() < config_.expected_servers || meta.expected_servers() > control::kMaxExpectedServers) {
    return FailedPrecondition("the data dir holds a cluster of " + std::to_string(meta.expected_servers()) +
                              " servers, fewer than --servers " + std::to_string(config_.expected_servers) +
                              "; a cluster grows by servers joining it, not by a flag");
  }
  expected_servers_ = meta.expected_servers();
  // A store written before replication existed holds one copy per shard.
  const uint32_t stored_replicas = meta.replication_factor() == 0 ? 1 : meta.replication_factor();
  if (stored_replicas != replicas_) {
    return FailedPrecondition("the data dir holds a cluster of " + std::to_string(stored_replicas) +
                              " replicas per shard, not --replicas " + std::to_string(replicas_) +
                              "; changing the replication factor is not supported");
  }
  const size_t n = snap.servers.size();
  if (n > expected_servers_) return DataLoss("the store holds more servers than the cluster size");
  std::vector<Server> servers(n);
  std::vector<bool> seen(n, false);
  const steady_clock::time_point now = clock_();
  for (auto& stored : snap.servers) {
    const uint64_t order = stored.join_order();
    if (order >= n || seen[order]) {
      return DataLoss("server '" + control::Printable(stored.info().server_id()) + "' has join order " +
                      std::to_string(order) + ", not a distinct one below " + std::to_string(n));
    }
    seen[order] = true;
    Server& s = servers[order];
    s.info = std::move(*stored.mutable_info());
    s.join_order = order;
    s.last_heartbeat = now;  // a restarted coordinator gives every UP server a full timeout
    s.handover_shards.assign(stored.handover_shards().begin(), stored.handover_shards().end());
    if (!stored.credential().empty() && !IsValidCredentialName(stored.credential())) {
      return DataLoss("server '" + control::Printable(s.info.server_id()) +
                      "' is bound to a credential whose name is not one a credentials file can hold");
    }
    s.credential = stored.credential();
  }
  servers_ = std::move(servers);
  version_ = meta.map_version();
  assigned_ = meta.shards_assigned();
  if (assigned_ != (n == expected_servers_)) {
    return DataLoss("the store says shards are " + std::string(assigned_ ? "" : "not ") + "assigned with " +
                    std::to_string(n) + " of " + std::to_string(expected_servers_) + " servers");
  }
  // Handovers: each shard handed over by one server at most, which backs
  // it up (ValidateClusterMap checks that the map built from them agrees).
  std::vector<bool> handed(config_.shard_count, false);
  for (const Server& s : servers_) {
    for (uint32_t shard : s.handover_shards) {
      if (shard >= config_.shard_count || handed[shard] || !Contains(s.info.backup_shards(), shard)) {
        return DataLoss("server '" + control::Printable(s.info.server_id()) + "' hands over shard " +
                        std::to_string(shard) + ", which it does not back up, or another server hands over too");
      }
      handed[shard] = true;
      handover_since_[shard] = now;
    }
  }
  if (Status s = control::ValidateClusterMap(MapLocked()); !s.ok()) {
    return DataLoss("the stored cluster map is inconsistent: " + s.message());
  }
  LOG_IF(INFO, !quiet) << "loaded cluster map version " << version_ << ": " << n << " of " << expected_servers_
                       << " servers, " << config_.shard_count << " shards"
                       << (assigned_ ? " assigned" : " not assigned yet") << ", " << replicas_
                       << " replicas per shard";
  for (const Server& s : servers_) {
    LOG_IF(INFO, !quiet) << Describe(s.info) << " is " << v1::ServerState_Name(s.info.state()) << " (as stored)"
                         << (s.info.draining() ? ", draining" : "");
    if (s.info.state() == v1::DOWN) down_since_[s.info.server_id()] = now;
    for (uint32_t shard : s.info.syncing_shards()) syncing_since_[{shard, s.info.server_id()}] = version_;
  }
  PublishLeaseLocked();
  // Whatever leases the previous coordinator granted, none outlives a
  // fence counted from now.
  if (!quiet) {
    for (size_t i = 0; i < servers_.size(); ++i) FenceLocked(i, "it is DOWN at the coordinator's start");
  }
  return Status::Ok();
}

Status CoordinatorState::CommitLocked(std::vector<Server> next, const std::vector<size_t>& changed,
                                      bool next_assigned, uint32_t next_expected,
                                      const std::vector<std::string>& removed) {
  const uint32_t expected = next_expected != 0 ? next_expected : expected_servers_;
  v1::store::StoredMeta meta;
  meta.set_map_version(version_ + 1);
  meta.set_shard_count(config_.shard_count);
  meta.set_expected_servers(expected);
  meta.set_shards_assigned(next_assigned);
  meta.set_replication_factor(replicas_);
  std::vector<v1::store::StoredServer> records;
  records.reserve(changed.size());
  for (size_t i : changed) {
    v1::store::StoredServer& r = records.emplace_back();
    *r.mutable_info() = next[i].info;
    r.mutable_info()->clear_keys();
    r.mutable_info()->clear_heap_bytes_used();
    r.set_join_order(next[i].join_order);
    r.mutable_handover_shards()->Assign(next[i].handover_shards.begin(), next[i].handover_shards.end());
    r.set_credential(next[i].credential);
  }
  RKV_RETURN_IF_ERROR(store_->Commit(meta, records, removed));
  NoteSyncingLocked(next);
  servers_ = std::move(next);
  assigned_ = next_assigned;
  expected_servers_ = expected;
  ++version_;
  PublishLeaseLocked();
  changed_cv_.NotifyAll();
  return Status::Ok();
}

void CoordinatorState::NoteSyncingLocked(const std::vector<Server>& next) {
  std::map<std::pair<uint32_t, std::string>, uint64_t> now;
  for (const Server& s : next) {
    for (uint32_t shard : s.info.syncing_shards()) {
      auto key = std::make_pair(shard, s.info.server_id());
      const auto was = syncing_since_.find(key);
      // Kept from the last version when it had the role, at the same epoch.
      const int found = FindLocked(s.info.server_id());
      const bool kept = was != syncing_since_.end() && found >= 0 &&
                        servers_[static_cast<size_t>(found)].info.epoch() == s.info.epoch() &&
                        Contains(servers_[static_cast<size_t>(found)].info.syncing_shards(), shard);
      now[key] = kept ? was->second : version_ + 1;
    }
  }
  syncing_since_ = std::move(now);
}

}  // namespace rkv::coordinator
