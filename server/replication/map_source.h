// What the replication policy (server/replication/map_policy.h) needs from the code
// that follows the cluster map: this server's identity, the latest map, a
// bounded way to learn a newer one, the coordinator's
// ReportReplicaFailure, and this server's lease. Membership
// (server/membership.h) implements it; the policy's tests use a fake.
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

// A server's lease (docs/design.md, "Replication"): each successful Join or
// Heartbeat grants it until the steady time the request was SENT plus
// lease_ms * 0.99 - 10 ms, lease_ms being the coordinator's answer.
struct ServerLease {
  // False when the coordinator's last answer granted no lease (lease_ms 0:
  // a coordinator without leases); `until` means nothing then.
  bool enabled = true;
  // Valid strictly before this instant; the epoch of the clock (already
  // past) before the first grant.
  std::chrono::steady_clock::time_point until{};
  // The map version the granting answer reported: the lease covers only a
  // map at least that new (a server that was frozen while its shards moved,
  // then granted a lease again, must not use the map it held before).
  uint64_t map_version = 0;
  // Why the last heartbeat got no grant ("" after a grant): what a write
  // refused for an expired lease tells its client.
  std::string why_not_renewed{};
  // How long the grant was for (from the heartbeat's send, as `until`);
  // zero when unknown. Bounds the margin a check may ask for
  // (MapPolicy::CheckLeaseWithMargin: at most a tenth of it).
  std::chrono::nanoseconds length{0};
};

// The lease a grant of `lease_ms` on a request sent at `sent` gives: until
// sent + lease_ms * 0.99 - 10 ms (the 1% covers a clock that runs up to 1%
// slow against the coordinator's, the 10 ms the time between the check
// and the publish it guards), for maps of at least `map_version`. Disabled
// when lease_ms is 0.
ServerLease LeaseFrom(std::chrono::steady_clock::time_point sent, uint32_t lease_ms, uint64_t map_version);

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

  // The lease the last successful Join or Heartbeat granted (a refused or
  // failed one grants nothing, so it runs out). Never blocks on the
  // coordinator.
  virtual ServerLease lease() const = 0;
};

}  // namespace rkv::server
