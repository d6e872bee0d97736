// CoordinatorServer::Metrics: the families of rkv-coordinator's GET
// /metrics (docs/design.md, "Metrics"). Everything is read at scrape time:
// the state's current map (a copy under CoordinatorState::mu_, as
// GetClusterMap answers), the prober's counts and the gate's view of the
// leadership; nothing here reaches the store or etcd.
#include <string>
#include <utility>

#include "coordinator/coordinator_service.h"

namespace rkv::coordinator {

using metrics::MetricFamily;
using metrics::MetricType;

std::vector<MetricFamily> CoordinatorServer::Metrics() const {
  const v1::ClusterMap map = state_->Map();
  std::vector<MetricFamily> out;
  const auto gauge = [&](std::string name, std::string help, double value) {
    out.push_back({std::move(name), std::move(help), MetricType::kGauge, {{{}, value}}, {}});
  };
  const auto counter = [&](std::string name, std::string help, double value) {
    out.push_back({std::move(name), std::move(help), MetricType::kCounter, {{{}, value}}, {}});
  };

  gauge("rkv_coordinator_map_version", "Version of the cluster map this coordinator holds.",
        static_cast<double>(map.version()));
  uint64_t up = 0;
  uint64_t down = 0;
  uint64_t draining = 0;
  for (const v1::ServerInfo& s : map.servers()) {
    (s.state() == v1::UP ? up : down) += 1;
    if (s.draining()) ++draining;
  }
  out.push_back({"rkv_coordinator_members", "Servers of the cluster map, by state (up: joined and heartbeating).",
                 MetricType::kGauge,
                 {{{{"state", "up"}}, static_cast<double>(up)}, {{{"state", "down"}}, static_cast<double>(down)}},
                 {}});
  gauge("rkv_coordinator_members_draining", "Servers being drained (kvctl drain): they take no new role.",
        static_cast<double>(draining));
  gauge("rkv_coordinator_expected_servers", "Cluster size N: shards are assigned once N servers have joined.",
        static_cast<double>(map.expected_servers()));
  gauge("rkv_coordinator_shards", "Shards of the cluster (--shards).", static_cast<double>(map.shard_count()));
  const uint32_t replication = map.replication_factor() == 0 ? 1 : map.replication_factor();
  gauge("rkv_coordinator_replication_factor", "Copies each shard is meant to have (--replicas).", replication);
  uint64_t assigned = 0;
  uint64_t under = 0;
  uint64_t syncing = 0;
  uint64_t handovers = 0;
  for (const v1::ShardReplicas& r : map.shard_replicas()) {
    ++assigned;
    if (static_cast<uint32_t>(r.server_ids_size()) < replication) ++under;
    syncing += static_cast<uint64_t>(r.syncing_ids_size());
    if (!r.handover_from().empty()) ++handovers;
  }
  gauge("rkv_coordinator_shards_assigned", "Shards with replicas assigned (0 until the cluster is complete).",
        static_cast<double>(assigned));
  gauge("rkv_coordinator_shards_underreplicated", "Assigned shards holding fewer replicas than the replication factor.",
        static_cast<double>(under));
  gauge("rkv_coordinator_syncing_replicas", "Replicas catching up on a shard, not yet serving it (all shards).",
        static_cast<double>(syncing));
  gauge("rkv_coordinator_shard_handovers", "Shards whose primary role is passing to another server now.",
        static_cast<double>(handovers));

  Prober::Counts probes;
  if (prober_ != nullptr) probes = prober_->counts();
  counter("rkv_coordinator_probes_total", "Probes of suspected servers sent since start.",
          static_cast<double>(probes.probes));
  counter("rkv_coordinator_probes_refuted_total",
          "Probes answered by a live server (or overtaken by its heartbeat) since start.",
          static_cast<double>(probes.refuted));
  counter("rkv_coordinator_probes_confirmed_total", "Probes that ended with the server marked DOWN since start.",
          static_cast<double>(probes.confirmed));
  const CoordinatorService::RenewalCounts renewals = service_->renewals();
  out.push_back({"rkv_coordinator_lease_renewals_total",
                 "Lease renewals answered since start, by outcome: granted, or refused (not the leader).",
                 MetricType::kCounter,
                 {{{{"outcome", "granted"}}, static_cast<double>(renewals.granted)},
                  {{{"outcome", "refused"}}, static_cast<double>(renewals.refused)}},
                 {}});
  const CoordinatorService::RefusalCounts refusals = service_->refusals();
  out.push_back({"rkv_coordinator_refused_calls_total",
                 "Calls refused by the credential check since start: unauthenticated (no or a wrong credential) or "
                 "permission_denied (a client's credential on a server's call).",
                 MetricType::kCounter,
                 {{{{"code", "unauthenticated"}}, static_cast<double>(refusals.unauthenticated)},
                  {{{"code", "permission_denied"}}, static_cast<double>(refusals.permission_denied)}},
                 {}});
  counter("rkv_coordinator_failovers_total",
          "Promotions since start that moved the primary role of a fenced server's shards to their backups.",
          static_cast<double>(failovers_.load(std::memory_order_relaxed)));
  counter("rkv_coordinator_shards_promoted_total", "Shards whose primary role a promotion moved to a backup.",
          static_cast<double>(shards_promoted_.load(std::memory_order_relaxed)));
  gauge("rkv_coordinator_lease_streams", "KeepLease streams open now (one per lease holder renewing here).",
        static_cast<double>(lease_streams_->open()));

  const v1::CoordinatorStatus::Role role = CoordinatorRoleOf(gate_).role;
  MetricFamily roles{"rkv_coordinator_role",
                     "1 for this coordinator's role: single (the only one, state in a data dir), leader or standby "
                     "(sharing etcd).",
                     MetricType::kGauge, {}, {}};
  for (const auto& [r, name] : {std::pair{v1::CoordinatorStatus::SINGLE, "single"},
                                std::pair{v1::CoordinatorStatus::LEADER, "leader"},
                                std::pair{v1::CoordinatorStatus::STANDBY, "standby"}}) {
    roles.samples.push_back({{{"role", name}}, role == r ? 1.0 : 0.0});
  }
  out.push_back(std::move(roles));
  return out;
}

}  // namespace rkv::coordinator
