// What the apply path needs to know about the cluster to replicate a write,
// and who may send replication traffic: the boundary between the data path
// (server/apply/apply_replicate.cc, server/replication/replicator.h) and the
// code that follows the cluster map (server/membership.h).
//
// A primary forwards every PUT and DELETE of a key to the backups and the
// syncing servers (catching up) of the key's shard in the current map
// before it makes the write durable and publishes it locally, and replies
// only when every one has acknowledged it (or has been taken out of the
// shard by the coordinator). See
// docs/design.md, "Replication".
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "common/status.h"

namespace rkv::server {

// One backup of a shard, as the current map names it.
struct ReplicaPeer {
  std::string server_id;
  uint64_t epoch = 0;
  std::string data_address;  // HOST:PORT of its data plane
  // Catching up on the shard (in its syncing_ids), not yet a backup.
  bool syncing = false;
};

// Where a key's writes must go, decided from one map version.
struct WriteRoute {
  uint64_t map_version = 0;
  uint32_t shard = 0;
  // The backups, then the servers catching up on the shard (syncing):
  // every one gets every write and must acknowledge it. May be empty
  // (R = 1, or none left).
  std::vector<ReplicaPeer> backups;
};

// Implemented by the map follower; a fake in tests. Thread-safe.
class ReplicationPolicy {
 public:
  virtual ~ReplicationPolicy() = default;

  // The route for a client's write of `key`: OK with the backups to forward
  // to when this server is the primary of the key's shard in the current
  // map; FAILED_PRECONDITION with Reason::kNotPrimary and the map version
  // when it is not, or has no role yet (no complete map, or one from before
  // its restart), so the client refetches the map and resends.
  virtual StatusOr<WriteRoute> RouteWrite(std::string_view key) = 0;

  // A backup did not acknowledge a forwarded write of `shard` in time (or
  // refused it): asks the coordinator to take it out of the shard's replica
  // set, and out of every other shard this server leads that lists it (a
  // backup that failed one forward fails the others), and returns OK once a
  // map without it is committed (the write may then be acknowledged
  // without it; so may a write of any of those shards routed by an earlier
  // map, which Applier::ApplyBatch relies on to report a backup once per
  // group), or the error that prevented that (the write must then fail
  // with UNAVAILABLE: its outcome is unknown).
  virtual Status ReportFailedBackup(uint32_t shard, const ReplicaPeer& backup, std::string_view reason) = 0;

  // The id of the server of the current map whose id has fingerprint
  // `fingerprint` (PeerFingerprint) and whose epoch is `epoch`; nullopt when
  // there is none (its replication traffic is then refused at the
  // handshake with PERMISSION_DENIED). When the current map has no such
  // server, the map is refetched once (bounded, about a second) before
  // answering, so that a peer that just restarted is not refused.
  virtual std::optional<std::string> FindPeer(uint64_t fingerprint, uint64_t epoch) = 0;

  // The name of the server credential the current map binds server `id`
  // to (ServerInfo.credential; per-server credentials), or empty when it
  // binds none (a shared cluster credential): a peer claiming to be `id`
  // must have presented that credential (docs/design.md §10).
  virtual std::string BoundCredential(std::string_view id) {
    (void)id;
    return {};
  }

  // Whether this server accepts a forwarded write of `key` from `sender_id`,
  // which forwarded it under map version `sender_map_version`: OK when, in
  // the current map, the sender is the primary of the key's shard and this
  // server one of its backups or syncing servers; FAILED_PRECONDITION
  // naming the map version otherwise. When this server's map is older than the sender's, it first
  // waits (bounded, about a second) to learn a newer one, so that a map
  // change seen by the primary first is not mistaken for a bad sender.
  virtual Status AcceptReplica(std::string_view sender_id, std::string_view key, uint64_t sender_map_version) = 0;

  // Whether this server may acknowledge a client's write now: OK while its
  // lease on the cluster map is valid (or the coordinator grants none);
  // UNAVAILABLE "lease on the cluster map expired" otherwise. Called just
  // before a client write is published locally, after the backups have it
  // (docs/design.md, "Replication"). Never waits.
  virtual Status CheckLease() = 0;

  // Whether the map this server holds shows `server_id` DOWN, or lists no
  // server of that id at `epoch` (then it is gone or restarted). Never
  // waits. Without a map: false (nothing is known). The default answers
  // false: a policy without a map knows of no server being down.
  virtual bool IsDown(const std::string& server_id, uint64_t epoch) {
    (void)server_id;
    (void)epoch;
    return false;
  }

  // CheckLease, also failing while the lease has less than `margin` left
  // (a lease about to run out counts as run out): for a caller that checks
  // the lease again later and must not see it expire in between. The
  // default, for a policy that knows no expiry instant, is CheckLease.
  virtual Status CheckLeaseWithMargin(std::chrono::nanoseconds margin) {
    (void)margin;
    return CheckLease();
  }

  // CheckLeaseWithMargin(margin), retried every few milliseconds for up to
  // `max_wait` while it fails (the next heartbeat's grant may be on its
  // way); its last answer. For a write whose forward outlasted the lease:
  // it waits for a renewal rather than end "outcome unknown", and for one
  // that leaves `margin` for the final check (CheckLease) under the
  // Applier's table_mu_.
  // (Inline, like the rest of this interface: its implementations live in
  // several libraries.)
  virtual Status AwaitLease(std::chrono::milliseconds max_wait,
                            std::chrono::nanoseconds margin = std::chrono::nanoseconds::zero()) {
    const auto deadline = std::chrono::steady_clock::now() + max_wait;
    Status lease = CheckLeaseWithMargin(margin);
    while (!lease.ok() && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      lease = CheckLeaseWithMargin(margin);
    }
    return lease;
  }
};

// 64 bits that name a server id in a replication handshake (the connect
// private data has no room for the id itself): XXH3 of the id.
uint64_t PeerFingerprint(std::string_view server_id);

}  // namespace rkv::server
