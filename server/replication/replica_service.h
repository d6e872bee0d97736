// The Replica gRPC service of an rkv-server (catch-up, server to server;
// docs/design.md, "Catch-up"), served beside Admin on --admin_listen and
// answering only callers presenting the cluster credential's digest
// (ClusterToken, server/options.h), which no client holds, or, with
// per-server credentials, any server's (PeerCredentials).
//
// FetchShard(server S, epoch, map_version V, shards s1..sn each with its
// since_version): 1..kMaxFetchShards distinct shards (INVALID_ARGUMENT
// otherwise); waits up to kMapWait for a map >= V (DEADLINE_EXCEEDED
// otherwise); checks in the map it holds that this server, at its epoch,
// is the primary of every s and that S, at that epoch, is among each one's
// syncing servers (FAILED_PRECONDITION naming which it is not), then again
// at the cut (Applier::ListShards: writes_gate_ held exclusively only while
// the client writes in flight end), lists the shards' keys and versions in
// one pass over the table, and streams them in chunks of at most
// kChunkRecords records and about kChunkBytes bytes: a record at or below
// its shard's since_version as listed, the others with their value as read
// then, kReadBatch keys at a time under the table's lock alone (a newer
// version when rewritten since the cut; left out when deleted since). Then
// a `done` chunk with snapshot_version, the cut. The stream's pace is the
// fetcher's: gRPC's flow control holds the sender while the fetcher does
// not read, and the sender holds no lock meanwhile.
//
// FetchKeys(server S, epoch, shard s, keys): the same checks on the map
// held now (no wait, no snapshot); each key must be 1..max_key_bytes and
// of shard s, at most kMaxFetchKeys of them; the records of the keys held,
// with values.
//
// Counts every record sent (records_served).
//
// Thread safety: the handlers run on gRPC's threads, concurrently.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "common/client_credentials.h"
#include "common/status.h"
#include "proto/rkv.grpc.pb.h"
#include "server/apply/apply.h"
#include "server/replication/map_source.h"

namespace rkv::server {

class ReplicaService final : public v1::Replica::Service {
 public:
  static constexpr std::chrono::milliseconds kMapWait{2000};
  static constexpr size_t kChunkRecords = 1024;
  static constexpr size_t kChunkBytes = 256 << 10;
  static constexpr int kMaxFetchShards = 1024;
  static constexpr size_t kReadBatch = 256;
  static constexpr int kMaxFetchKeys = 1024;

  // `applier` must outlive the service; `max_key_bytes` is the server's
  // limit. INVALID_ARGUMENT for an empty token or no applier. Until Attach,
  // every call is refused with FAILED_PRECONDITION (no cluster map yet).
  static StatusOr<std::unique_ptr<ReplicaService>> Create(const std::string& token, Applier* applier,
                                                          uint32_t max_key_bytes);
  // The same, answering a caller that presents any credential of `peers`
  // (the per-server credentials; INVALID_ARGUMENT when empty).
  static StatusOr<std::unique_ptr<ReplicaService>> Create(ClientCredentials peers, Applier* applier,
                                                          uint32_t max_key_bytes);

  // Gives the service the map it follows (the server's membership, known
  // only after the Admin port is bound), which must outlive the service. A
  // second call is ignored.
  void Attach(MapSource* source);

  grpc::Status FetchShard(grpc::ServerContext* context, const v1::FetchShardRequest* request,
                          grpc::ServerWriter<v1::ShardChunk>* writer) override;
  grpc::Status FetchKeys(grpc::ServerContext* context, const v1::FetchKeysRequest* request,
                         v1::FetchKeysResponse* response) override;

  // Served with TLS: a caller must also present a certificate verified
  // against the CA (mutual TLS; PERMISSION_DENIED otherwise). Call before
  // the service is served.
  void RequirePeerCertificate() { require_peer_certificate_ = true; }

  // Records sent in FetchShard streams and FetchKeys answers.
  uint64_t records_served() const { return records_served_.load(std::memory_order_relaxed); }

 private:
  ReplicaService(ClientCredentials peers, Applier* applier, uint32_t max_key_bytes)
      : peers_(std::move(peers)), applier_(applier), max_key_bytes_(max_key_bytes) {}

  // OK when the caller presents a credential of peers_ (its name in
  // *credential); UNAUTHENTICATED.
  grpc::Status CheckPeer(const grpc::ServerContext* context, std::string* credential) const;

  MapSource* source() const { return source_.load(std::memory_order_acquire); }

  // OK when, in `map`, this server (at its epoch) is the primary of
  // `shard` and `fetcher` (at `epoch`) is syncing it; FAILED_PRECONDITION
  // saying what is not so otherwise; PERMISSION_DENIED when the map binds
  // `fetcher` to a server credential other than `credential`, the one the
  // caller presented (per-server credentials: no server fetches as another).
  Status CheckFetcher(const MapSource& source, const v1::ClusterMap* map, const std::string& fetcher,
                      uint64_t epoch, uint32_t shard, const std::string& credential) const;

  const ClientCredentials peers_;
  bool require_peer_certificate_ = false;  // set before serving
  std::atomic<MapSource*> source_{nullptr};
  Applier* const applier_;
  const uint32_t max_key_bytes_;
  std::atomic<uint64_t> records_served_{0};
};

}  // namespace rkv::server
