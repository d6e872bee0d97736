#include "server/replication/replica_service.h"

#include <algorithm>
#include <utility>
#include <vector>

#include <glog/logging.h>

#include "common/hash.h"
#include "proto/auth.h"
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
}

}  // namespace

StatusOr<std::unique_ptr<ReplicaService>> ReplicaService::Create(const std::string& token, Applier* applier,
                                                                 uint32_t max_key_bytes) {
  if (token.empty()) return InvalidArgument("the token is empty");
  if (applier == nullptr) return InvalidArgument("no applier");
  return std::unique_ptr<ReplicaService>(new ReplicaService(control::TokenDigestHex(token), applier, max_key_bytes));
}

void ReplicaService::Attach(MapSource* source) {
  MapSource* expected = nullptr;
  source_.compare_exchange_strong(expected, source, std::memory_order_release, std::memory_order_relaxed);
}

Status ReplicaService::CheckFetcher(const MapSource& source, const v1::ClusterMap* map, const std::string& fetcher,
                                    uint64_t epoch, uint32_t shard) const {
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
  return Status::Ok();
}

grpc::Status ReplicaService::FetchShard(grpc::ServerContext* context, const v1::FetchShardRequest* request,
                                        grpc::ServerWriter<v1::ShardChunk>* writer) {
  if (grpc::Status s = control::CheckToken(context, digest_hex_); !s.ok()) return s;
  if (Status s = control::ValidateServerAndEpoch(request->server_id(), request->epoch()); !s.ok()) {
    return control::ToGrpc(s.WithContext("FetchShard"));
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
  std::vector<Applier::ShardRecord> records;
  uint64_t snapshot_version = 0;
  uint32_t shard_count = 0;
  {
    const std::shared_ptr<const v1::ClusterMap> now = src->map();
    if (Status s = CheckFetcher(*src, now.get(), request->server_id(), request->epoch(), request->shard()); !s.ok()) {
      return control::ToGrpc(s.WithContext("FetchShard"));
    }
    shard_count = now->shard_count();
  }
  // The map is read again holding the Applier's writes_gate_ exclusively:
  // the one that routes every write after the snapshot must list the
  // fetcher.
  const Status taken = applier_->SnapshotShard(
      request->shard(), shard_count, request->since_version(),
      [&] {
        const std::shared_ptr<const v1::ClusterMap> now = src->map();
        if (now != nullptr && now->shard_count() != shard_count) {
          return Unavailable("the map's shard_count changed during the fetch; retry");
        }
        return CheckFetcher(*src, now.get(), request->server_id(), request->epoch(), request->shard());
      },
      &records, &snapshot_version);
  if (!taken.ok()) {
    VLOG(1) << "FetchShard of shard " << request->shard() << " by " << request->server_id() << " refused: " << taken;
    return control::ToGrpc(taken.WithContext("FetchShard"));
  }
  LOG(INFO) << "sending shard " << request->shard() << " (" << records.size() << " records, snapshot version "
            << snapshot_version << ", values above " << request->since_version() << ") to "
            << request->server_id();
  v1::ShardChunk chunk;
  size_t bytes = 0;
  for (const Applier::ShardRecord& r : records) {
    Fill(chunk.add_records(), r);
    bytes += r.key.size() + r.value.size() + 32;
    if (static_cast<size_t>(chunk.records_size()) >= kChunkRecords || bytes >= kChunkBytes) {
      if (!writer->Write(chunk)) return grpc::Status(grpc::StatusCode::CANCELLED, "the fetcher went away");
      records_served_.fetch_add(static_cast<uint64_t>(chunk.records_size()), std::memory_order_relaxed);
      chunk.Clear();
      bytes = 0;
    }
  }
  records_served_.fetch_add(static_cast<uint64_t>(chunk.records_size()), std::memory_order_relaxed);
  chunk.set_done(true);
  chunk.set_snapshot_version(snapshot_version);
  if (!writer->Write(chunk)) return grpc::Status(grpc::StatusCode::CANCELLED, "the fetcher went away");
  return grpc::Status::OK;
}

grpc::Status ReplicaService::FetchKeys(grpc::ServerContext* context, const v1::FetchKeysRequest* request,
                                       v1::FetchKeysResponse* response) {
  if (grpc::Status s = control::CheckToken(context, digest_hex_); !s.ok()) return s;
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
  if (Status s = CheckFetcher(*src, map.get(), request->server_id(), request->epoch(), request->shard()); !s.ok()) {
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
