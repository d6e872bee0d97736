// The replication policy of a server in a cluster: who the primary and
// backups of a key's shard are, read from the cluster map this server
// follows (a MapSource: Membership in rkv-server, a fake in tests). See
// server/replication/replication.h for the contract and docs/design.md, "Map
// following".
//
// A server learns its role from the map alone: it is the primary of shard
// s when shard_replicas[s] starts with its id (shard_owner[s] in a map
// without replica lists, which is R = 1), and a backup of s when it is
// listed after the first; in both cases only when the map lists this
// server with its own epoch (a map that still shows a previous
// incarnation does not speak for this one).
//
// Bounds on the calls that may reach the coordinator (the data path waits
// for them): FindPeer at most kPeerRefreshTimeout, AcceptReplica at most
// kSenderMapWait, ReportFailedBackup at most kReportTimeout +
// kReportedMapWait, CheckLease at most kLeaseMapWait (only when the grant
// named a map version not yet installed). RouteWrite never waits.
//
// A promoted backup needs nothing of its own here: once the map names this
// server (at its epoch) first in a shard's replica list, RouteWrite routes
// the shard's writes to it (why its versions stay above what it received:
// docs/design.md §5.7, "A promoted backup").
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "common/status.h"
#include "server/replication/map_source.h"
#include "server/replication/replication.h"

namespace rkv::server {

// Thread safety: every method may be called from any thread, concurrently;
// Attach once, from any thread, also while other calls run.
class MapPolicy final : public ReplicationPolicy {
 public:
  static constexpr std::chrono::milliseconds kPeerRefreshTimeout{1000};
  static constexpr std::chrono::milliseconds kSenderMapWait{1000};
  static constexpr std::chrono::milliseconds kReportTimeout{2000};
  static constexpr std::chrono::milliseconds kReportedMapWait{2000};
  static constexpr std::chrono::milliseconds kLeaseMapWait{500};

  // Without a source: every call answers as before the first map (see
  // below) until Attach.
  MapPolicy() = default;
  // `source` must outlive the policy.
  explicit MapPolicy(MapSource* source) : source_(source) {}
  MapPolicy(const MapPolicy&) = delete;
  MapPolicy& operator=(const MapPolicy&) = delete;

  // Gives the policy its source (the server's identity and epoch are only
  // known once its data plane runs, after the policy was handed to it).
  // `source` must outlive the policy. A second call is ignored.
  void Attach(MapSource* source);

  // FAILED_PRECONDITION with Reason::kNotPrimary and the map version (0
  // without a map) without a map, with a map that assigns no shards yet,
  // or with one that lists this server at another epoch (or not at all),
  // and when this server is not the primary (the message names the shard
  // and its primary). During a handover (handover_from set) the new
  // primary routes writes as usual: the old one is one of its backups
  // until the coordinator clears it. Nothing is written on a refusal, so the
  // client may resend (docs/design.md §5.6). The backups are every other server of the
  // shard's replica list, in map order, then its syncing servers
  // (syncing_ids), DOWN ones included: only the coordinator takes one out
  // (ReportFailedBackup), so that a write acknowledged under a map is on
  // every replica and syncing server that map lists.
  StatusOr<WriteRoute> RouteWrite(std::string_view key) override;

  // ReportReplicaFailure(backup, shards) within kReportTimeout, where
  // `shards` is `shard` and every other shard this server leads in its map
  // that lists the backup (SharedShards: one map version takes the backup
  // out of all of them, instead of one forward timeout each), then waits
  // up to kReportedMapWait for this server's map to reach the version the
  // coordinator answered (refetching it once if the watch has not brought
  // it). OK only then; otherwise the coordinator's error, or
  // DEADLINE_EXCEEDED naming the version not learned.
  Status ReportFailedBackup(uint32_t shard, const ReplicaPeer& backup, std::string_view reason) override;

  // From the map the source holds now.
  bool IsDown(const std::string& server_id, uint64_t epoch) override;

  // The listed server with PeerFingerprint(id) == fingerprint and that
  // epoch (UP or DOWN); when none, refetches the map once (at most
  // kPeerRefreshTimeout) and looks again.
  std::optional<std::string> FindPeer(uint64_t fingerprint, uint64_t epoch) override;
  std::string BoundCredential(std::string_view id) override;

  // When `sender_map_version` is above this server's map version, first
  // waits up to kSenderMapWait for it. Then OK iff, in the map this server
  // holds, `sender_id` is the first of the key's shard's replica list and
  // this server (at its epoch) is listed after it or among the shard's
  // syncing servers. FAILED_PRECONDITION
  // naming this server's map version and what is wrong otherwise, also
  // without any map ("map version 0").
  Status AcceptReplica(std::string_view sender_id, std::string_view key, uint64_t sender_map_version) override;

  // From the source's lease(): OK while it is valid or disabled;
  // UNAVAILABLE "lease on the cluster map expired" (naming how long ago)
  // once it ran out, also before the first grant and without a source.
  // A lease granted with a map version newer than the one installed covers
  // nothing until that map arrives: CheckLease waits up to kLeaseMapWait
  // for it, then refuses.
  Status CheckLease() override;
  // CheckLease, refusing too while less than `margin` of the lease is left
  // ("lease on the cluster map runs out in N ms").
  Status CheckLeaseWithMargin(std::chrono::nanoseconds margin) override;

 private:
  // The shards of `src`'s map whose primary is this server and that list
  // `backup_id` as a backup or a syncing server, ascending (none without
  // an assigned map that lists this server at its epoch).
  static std::vector<uint32_t> SharedShards(MapSource& src, std::string_view backup_id);

  MapSource* source() const { return source_.load(std::memory_order_acquire); }

  // Release on Attach, acquire on use: the source is fully built before a
  // data-path thread sees it.
  std::atomic<MapSource*> source_{nullptr};
};

}  // namespace rkv::server
