#include "server/replication/replica_service.h"

#include <algorithm>
#include <unordered_map>
#include <utility>
#include <vector>

#include <glog/logging.h>

#include "common/hash.h"
#include "proto/auth.h"
#include "proto/tls.h"
#include "proto/grpc_status.h"
#include "proto/validation.h"

namespace rkv::server {
namespace {

std::string VersionOf(const v1::ClusterMap& map) { return "map version " + std::to_string(map.version()); }

void Fill(v1::ShardRecord* out, const Applier::ShardRecord& r) {
  out->set_key(r.key);
  out->set_version(r.version);
  out->set_has_value(r.has_value);
  if (r.has_value) out->set_value(r.value);
  if (r.has_value && r.expires_at_ms != 0) out->set_expires_at_ms(r.expires_at_ms);
}

}  // namespace

StatusOr<std::unique_ptr<ReplicaService>> ReplicaService::Create(const std::string& token, Applier* applier,
                                                                 uint32_t max_key_bytes) {
  if (token.empty()) return InvalidArgument("the token is empty");
  ClientCredentials peers;
  RKV_RETURN_IF_ERROR(peers.Add("cluster", token));
  return Create(std::move(peers), applier, max_key_bytes);
}

StatusOr<std::unique_ptr<ReplicaService>> ReplicaService::Create(ClientCredentials peers, Applier* applier,
                                                                 uint32_t max_key_bytes) {
  if (peers.size() == 0) return InvalidArgument("no peer credential");
  if (applier == nullptr) return InvalidArgument("no applier");
  return std::unique_ptr<ReplicaService>(new ReplicaService(std::move(peers), applier, max_key_bytes));
}

grpc::Status ReplicaService::CheckPeer(const grpc::ServerContext* context, std::string* credential) const {
  grpc::Status s = control::CheckClientCredential(context, peers_, credential);
  if (s.ok() && require_peer_certificate_ && !control::PeerHasCertificate(*context)) {
    return grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                        "the Replica service needs a server's certificate (mutual TLS): this server serves TLS and "
                        "the caller presented no certificate of its CA (rkv-server --tls_cert, --tls_key)");
  }
  return s;
}

void ReplicaService::Attach(MapSource* source) {
  MapSource* expected = nullptr;
  source_.compare_exchange_strong(expected, source, std::memory_order_release, std::memory_order_relaxed);
}

Status ReplicaService::CheckFetcher(const MapSource& source, const v1::ClusterMap* map, const std::string& fetcher,
                                    uint64_t epoch, uint32_t shard, const std::string& credential) const {
  if (map == nullptr) return FailedPrecondition("this server has no cluster map yet: not the primary of any shard");
  if (map->shard_count() == 0 || map->shard_owner().empty()) {
    return FailedPrecondition(VersionOf(*map) + " assigns no shards yet");
  }
  if (shard >= map->shard_count()) {
    return InvalidArgument("shard " + std::to_string(shard) + " is not below shard_count " +
                           std::to_string(map->shard_count()) + " of " + VersionOf(*map));
  }
  const auto listed_at = [&](std::string_view id) -> uint64_t {
    for (const v1::ServerInfo& s : map->servers()) {
      if (s.server_id() == id) return s.epoch();
    }
    return 0;
  };
  const std::string& self = source.server_id();
  const std::string which = "shard " + std::to_string(shard) + " in " + VersionOf(*map);
  const bool primary = shard < static_cast<uint32_t>(map->shard_replicas_size())
                           ? map->shard_replicas(static_cast<int>(shard)).server_ids(0) == self
                           : map->shard_owner(static_cast<int>(shard)) == self;
  if (!primary || listed_at(self) != source.epoch()) {
    return FailedPrecondition("this server (" + self + ") is not the primary of " + which + ": fetch from its primary");
  }
  bool syncing = false;
  if (shard < static_cast<uint32_t>(map->shard_replicas_size())) {
    const auto& ids = map->shard_replicas(static_cast<int>(shard)).syncing_ids();
    syncing = std::find(ids.begin(), ids.end(), fetcher) != ids.end();
  }
  if (!syncing) {
    return FailedPrecondition("server " + control::Printable(fetcher) + " is not syncing " + which +
                              ": only a server the map lists as catching up on a shard may fetch it");
  }
  if (listed_at(fetcher) != epoch) {
    return FailedPrecondition("server " + control::Printable(fetcher) + " is listed at epoch " +
                              std::to_string(listed_at(fetcher)) + ", not " + std::to_string(epoch) + ", in " +
                              VersionOf(*map));
  }
  for (const v1::ServerInfo& s : map->servers()) {
    if (s.server_id() == fetcher && !s.credential().empty() && s.credential() != credential) {
      return PermissionDenied("credential " + control::Printable(credential) + " cannot fetch as server " +
                              control::Printable(fetcher) + ", which is bound to credential " +
                              control::Printable(s.credential()));
    }
  }
  return Status::Ok();
}

grpc::Status ReplicaService::FetchShard(grpc::ServerContext* context, const v1::FetchShardRequest* request,
                                        grpc::ServerWriter<v1::ShardChunk>* writer) {
  std::string credential;
  if (grpc::Status s = CheckPeer(context, &credential); !s.ok()) return s;
  if (Status s = control::ValidateServerAndEpoch(request->server_id(), request->epoch()); !s.ok()) {
    return control::ToGrpc(s.WithContext("FetchShard"));
  }
  if (request->shards_size() == 0 || request->shards_size() > kMaxFetchShards) {
    return control::ToGrpc(InvalidArgument("FetchShard asks for " + std::to_string(request->shards_size()) +
                                           " shards (1.." + std::to_string(kMaxFetchShards) + " allowed)"));
  }
  MapSource* const src = source();
  if (src == nullptr) return control::ToGrpc(FailedPrecondition("FetchShard: this server has not joined a cluster yet"));
  std::shared_ptr<const v1::ClusterMap> map = src->map();
  if (map == nullptr || map->version() < request->map_version()) {
    const Status waited = src->WaitForVersion(request->map_version(), kMapWait);
    if (!waited.ok()) {
      return control::ToGrpc(
          (waited.code() == StatusCode::kCancelled ? waited : DeadlineExceeded(waited.message()))
              .WithContext("waiting for map version " + std::to_string(request->map_version()) +
                           ", which lists the fetcher"));
    }
  }
  // The shards asked for, each below the map's shard_count and once, with
  // the version above which their values are sent.
  uint32_t shard_count = 0;
  std::vector<uint32_t> shards;
  std::unordered_map<uint32_t, uint64_t> since;
  {
    const std::shared_ptr<const v1::ClusterMap> now = src->map();
    shard_count = now != nullptr ? now->shard_count() : 0;  // CheckFetcher refuses a map without shards
    for (const v1::ShardSince& s : request->shards()) {
      if (!since.emplace(s.shard(), s.since_version()).second) {
        return control::ToGrpc(InvalidArgument("FetchShard: shard " + std::to_string(s.shard()) + " asked for twice"));
      }
      if (Status st = CheckFetcher(*src, now.get(), request->server_id(), request->epoch(), s.shard(), credential);
          !st.ok()) {
        return control::ToGrpc(st.WithContext("FetchShard"));
      }
      shards.push_back(s.shard());
    }
  }
  // The map is read again at the cut (the Applier's writes_gate_ held
  // exclusively): the one that routes every write after the cut must list
  // the fetcher as syncing each shard.
  std::vector<Applier::ShardRecord> listed;
  uint64_t snapshot_version = 0;
  const Status taken = applier_->ListShards(
      shards, shard_count,
      [&] {
        const std::shared_ptr<const v1::ClusterMap> now = src->map();
        if (now != nullptr && now->shard_count() != shard_count) {
          return Unavailable("the map's shard_count changed during the fetch; retry");
        }
        for (uint32_t shard : shards) {
          RKV_RETURN_IF_ERROR(CheckFetcher(*src, now.get(), request->server_id(), request->epoch(), shard, credential));
        }
        return Status::Ok();
      },
      &listed, &snapshot_version);
  if (!taken.ok()) {
    VLOG(1) << "FetchShard of " << shards.size() << " shard(s) by " << request->server_id() << " refused: " << taken;
    return control::ToGrpc(taken.WithContext("FetchShard"));
  }
  LOG(INFO) << "sending " << shards.size() << " shard(s) (the first " << shards.front() << "; " << listed.size()
            << " records, cut at version " << snapshot_version << ") to " << request->server_id();
  // Records at or below their shard's since_version go as listed (version
  // only); the values of the others are read now, kReadBatch keys at a
  // time under the table's lock alone: a key rewritten since the cut
  // comes at its newer version, one deleted since is left out (both
  // changes were forwarded to the fetcher too).
  v1::ShardChunk chunk;
  size_t bytes = 0;
  // Cancellation is looked at once a chunk, not once a record:
  // IsCancelled polls the call's completion queue (design §5.8).
  const auto send = [&]() -> bool {
    if (context->IsCancelled() || !writer->Write(chunk)) return false;
    records_served_.fetch_add(static_cast<uint64_t>(chunk.records_size()), std::memory_order_relaxed);
    chunk.Clear();
    bytes = 0;
    return true;
  };
  const auto add = [&](const Applier::ShardRecord& r) -> bool {
    Fill(chunk.add_records(), r);
    bytes += r.key.size() + r.value.size() + 32;
    return (static_cast<size_t>(chunk.records_size()) < kChunkRecords && bytes < kChunkBytes) || send();
  };
  std::vector<std::string> to_read;
  const auto read = [&]() -> bool {
    for (const Applier::ShardRecord& r : applier_->ReadKeys(to_read)) {
      if (!add(r)) return false;
    }
    to_read.clear();
    return true;
  };
  for (Applier::ShardRecord& r : listed) {
    if (r.version <= since[ShardOf(r.key, shard_count)]) {
      if (!add(r)) return grpc::Status(grpc::StatusCode::CANCELLED, "the fetcher went away");
      continue;
    }
    to_read.push_back(std::move(r.key));
    if (to_read.size() >= kReadBatch && !read()) {
      return grpc::Status(grpc::StatusCode::CANCELLED, "the fetcher went away");
    }
  }
  if (!read()) return grpc::Status(grpc::StatusCode::CANCELLED, "the fetcher went away");
  chunk.set_done(true);
  chunk.set_snapshot_version(snapshot_version);
  if (!send()) return grpc::Status(grpc::StatusCode::CANCELLED, "the fetcher went away");
  return grpc::Status::OK;
}

grpc::Status ReplicaService::FetchKeys(grpc::ServerContext* context, const v1::FetchKeysRequest* request,
                                       v1::FetchKeysResponse* response) {
  std::string credential;
  if (grpc::Status s = CheckPeer(context, &credential); !s.ok()) return s;
  if (Status s = control::ValidateServerAndEpoch(request->server_id(), request->epoch()); !s.ok()) {
    return control::ToGrpc(s.WithContext("FetchKeys"));
  }
  if (request->keys_size() > kMaxFetchKeys) {
    return control::ToGrpc(InvalidArgument("FetchKeys asks for " + std::to_string(request->keys_size()) +
                                           " keys, more than " + std::to_string(kMaxFetchKeys)));
  }
  MapSource* const src = source();
  if (src == nullptr) return control::ToGrpc(FailedPrecondition("FetchKeys: this server has not joined a cluster yet"));
  const std::shared_ptr<const v1::ClusterMap> map = src->map();
  if (Status s = CheckFetcher(*src, map.get(), request->server_id(), request->epoch(), request->shard(), credential);
      !s.ok()) {
    return control::ToGrpc(s.WithContext("FetchKeys"));
  }
  std::vector<std::string> keys;
  keys.reserve(static_cast<size_t>(request->keys_size()));
  for (const std::string& key : request->keys()) {
    if (key.empty() || key.size() > max_key_bytes_) {
      return control::ToGrpc(InvalidArgument("FetchKeys: a key of " + std::to_string(key.size()) + " bytes (1.." +
                                             std::to_string(max_key_bytes_) + " allowed)"));
    }
    if (ShardOf(key, map->shard_count()) != request->shard()) {
      return control::ToGrpc(InvalidArgument("FetchKeys: key '" + control::Printable(key) + "' is not of shard " +
                                             std::to_string(request->shard())));
    }
    keys.push_back(key);
  }
  for (const Applier::ShardRecord& r : applier_->ReadKeys(keys)) Fill(response->add_records(), r);
  records_served_.fetch_add(static_cast<uint64_t>(response->records_size()), std::memory_order_relaxed);
  return grpc::Status::OK;
}

}  // namespace rkv::server
