// What the replication policy (server/map_policy.h) needs from the code
// that follows the cluster map: this server's identity, the latest map, a
// bounded way to learn a newer one, and the coordinator's
// ReportReplicaFailure. Membership (server/membership.h) implements it; the
// policy's tests use a fake.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "proto/rkv.pb.h"

namespace rkv::server {

// Thread safety: every method may be called from any thread, concurrently.
class MapSource {
 public:
  virtual ~MapSource() = default;

  // This server's id and epoch; fixed for the life of the source.
  virtual const std::string& server_id() const = 0;
  virtual uint64_t epoch() const = 0;

  // The latest valid map this server learned (versions only grow), or null
  // before the first. Never blocks on the coordinator.
  virtual std::shared_ptr<const v1::ClusterMap> map() const = 0;

  // Waits until map() has at least `version`, for at most `timeout`: OK,
  // DEADLINE_EXCEEDED naming both versions, or CANCELLED when the source
  // is stopping.
  virtual Status WaitForVersion(uint64_t version, std::chrono::milliseconds timeout) = 0;

  // Fetches the map from the coordinator now (one GetClusterMap, bounded
  // by `timeout`) and installs it if it is valid and newer. OK when the
  // coordinator answered with a valid map (newer or not); its error
  // otherwise, or CANCELLED when the source is stopping.
  virtual Status RefreshNow(std::chrono::milliseconds timeout) = 0;

  // Asks the coordinator to take `backup_id` out of the replica sets of
  // `shards` (this server being their primary), retrying within `timeout`
  // while the coordinator is unreachable. The version of a committed map
  // in which it holds none of them, or the coordinator's error
  // (DEADLINE_EXCEEDED when `timeout` ran out, CANCELLED when the source is
  // stopping).
  virtual StatusOr<uint64_t> ReportReplicaFailure(std::string_view backup_id, const std::vector<uint32_t>& shards,
                                                  std::string_view reason, std::chrono::milliseconds timeout) = 0;
};

}  // namespace rkv::server
