#include "bench/failover/map_watch.h"

#include <thread>

#include <grpcpp/client_context.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>

#include "proto/auth.h"
#include "proto/rkv.grpc.pb.h"

namespace rkv::bench {

namespace {

using std::chrono::duration_cast;
using std::chrono::microseconds;

const MemberInfo* FindMember(const ClusterInfo& map, const std::string& id) {
  for (const MemberInfo& m : map.members) {
    if (m.server_id == id) return &m;
  }
  return nullptr;
}

bool IsUp(const ClusterInfo& map, const std::string& id) {
  const MemberInfo* m = FindMember(map, id);
  return m != nullptr && m->state == "UP";
}

}  // namespace

bool FullyReplicated(const ClusterInfo& map, uint32_t replicas) {
  for (const ShardInfo& s : map.shards) {
    if (s.replicas.size() != replicas || !s.syncing.empty() || !s.handover_from.empty()) return false;
    for (const std::string& id : s.replicas) {
      if (!IsUp(map, id)) return false;
    }
  }
  return !map.shards.empty();
}

std::string PrimaryOf(const ClusterInfo& map, uint32_t shard) {
  if (shard >= map.shards.size() || map.shards[shard].replicas.empty()) return "";
  return map.shards[shard].replicas[0];
}

MapTimeline Watch(Client& monitor, const WatchSpec& spec, const std::atomic<bool>& stop) {
  MapTimeline t;
  CallOptions call;
  call.timeout = std::chrono::milliseconds(1000);
  while (!stop.load(std::memory_order_relaxed)) {
    const auto polled = Clock::now();
    ++t.polls;
    const Status refreshed = monitor.RefreshClusterMap(call);
    auto map = monitor.Cluster();
    if (!refreshed.ok() || !map.ok()) {
      ++t.failed_polls;
      t.last_error = (refreshed.ok() ? map.status() : refreshed).ToString();
    } else {
      const auto since = duration_cast<microseconds>(polled - spec.event);
      t.last_version = map->map_version;
      for (const MemberInfo& m : map->members) {
        if (m.state == "DOWN") t.downs.emplace(m.server_id, since);  // keeps the first
      }
      const MemberInfo* victim = FindMember(*map, spec.victim);
      const bool victim_down = victim != nullptr && victim->state == "DOWN";
      if (!t.down && victim_down) t.down = since;
      if (!t.promoted) {
        bool moved = true;
        for (uint32_t s : spec.shards) {
          const std::string primary = PrimaryOf(*map, s);
          moved = moved && !primary.empty() && primary != spec.victim && IsUp(*map, primary);
        }
        if (moved) t.promoted = since;
      }
      if (t.down && !t.back_up && victim != nullptr && victim->state == "UP") t.back_up = since;
      t.healthy_at_end = FullyReplicated(*map, spec.replicas);
      if (!t.degraded && !t.healthy_at_end) t.degraded = since;
      if (t.degraded && !t.replicated && t.healthy_at_end) t.replicated = since;
    }
    const auto now = Clock::now();
    if (now >= spec.give_up || (t.healthy_at_end && now >= spec.keep_until)) break;
    std::this_thread::sleep_until(polled + spec.poll);
  }
  return t;
}

ProbeCounts operator-(const ProbeCounts& after, const ProbeCounts& before) {
  const auto minus = [](uint64_t a, uint64_t b) { return a >= b ? a - b : 0; };
  return {minus(after.probes, before.probes), minus(after.refuted, before.refuted),
          minus(after.confirmed, before.confirmed)};
}

StatusOr<ProbeCounts> ReadProbeCounts(const std::string& address, const std::string& token,
                                      std::chrono::milliseconds timeout) {
  auto stub = v1::Coordinator::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  control::AttachToken(&context, token);
  context.set_deadline(std::chrono::system_clock::now() + timeout);
  v1::CoordinatorStatus status;
  const grpc::Status s = stub->GetCoordinatorStatus(&context, v1::CoordinatorStatusRequest(), &status);
  if (!s.ok()) {
    return Unavailable("GetCoordinatorStatus of " + address + ": " + s.error_message() + " (gRPC code " +
                       std::to_string(static_cast<int>(s.error_code())) + ")");
  }
  return ProbeCounts{status.probes(), status.probes_refuted(), status.probes_confirmed()};
}

}  // namespace rkv::bench
