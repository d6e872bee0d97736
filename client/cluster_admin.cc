// ClusterAdmin (rkv/admin.h): the cluster's administration over a Client's
// cached map and coordinator connection (Client::Impl, client_impl.h).
// Each call finds the server in the cached map and calls its Admin
// service (or the coordinator) through ControlClient.
#include "rkv/admin.h"

#include <utility>

#include "client/client_impl.h"
#include "proto/validation.h"

namespace rkv {

using client::Deadline;
using client::ServerEntry;
using std::to_string;

namespace {

Status NeedsCoordinator(std::string_view what) {
  return FailedPrecondition(std::string(what) + " needs a client connected through a coordinator");
}

}  // namespace

StatusOr<ServerEntry> Client::Impl::AdminOf(std::string_view server_id) {
  const auto routes = Routing();
  const ServerEntry* e = routes->table().Find(server_id);
  if (e == nullptr) {
    return NotFound("no server '" + control::Printable(server_id) + "' in cluster map version " +
                    to_string(routes->table().version()));
  }
  return *e;
}

StatusOr<std::unique_ptr<ClusterAdmin>> ClusterAdmin::Connect(const ClientOptions& options) {
  if (options.coordinator.empty()) return InvalidArgument("ClusterAdmin needs ClientOptions.coordinator");
  RKV_ASSIGN_OR_RETURN(std::unique_ptr<Client> client, Client::Connect(options));
  return std::unique_ptr<ClusterAdmin>(new ClusterAdmin(std::move(client)));
}

ClusterAdmin::ClusterAdmin(Client& client) : client_(&client) {}
ClusterAdmin::ClusterAdmin(std::unique_ptr<Client> owned) : owned_(std::move(owned)), client_(owned_.get()) {}
ClusterAdmin::~ClusterAdmin() = default;

StatusOr<std::vector<MemberInfo>> ClusterAdmin::Members() const {
  Client::Impl& impl = *client_->impl_;
  if (!impl.cluster()) return NeedsCoordinator("Members");
  const auto routes = impl.Routing();
  std::vector<MemberInfo> out;
  out.reserve(routes->table().servers().size());
  for (const ServerEntry& e : routes->table().servers()) out.push_back(Client::Impl::ToMember(e));
  return out;
}

StatusOr<ServerStatsInfo> ClusterAdmin::ServerStats(std::string_view server_id, const CallOptions& call) {
  Client::Impl& impl = *client_->impl_;
  if (!impl.cluster()) return NeedsCoordinator("ServerStats");
  RKV_ASSIGN_OR_RETURN(const ServerEntry e, impl.AdminOf(server_id));
  auto r = impl.control().Stats(e.admin_address, impl.DeadlineOf(call));
  if (!r.ok()) return r.status().WithContext(e.Describe());
  if (r->server_id() != e.server_id) {
    return FailedPrecondition(e.Describe() + ": the admin service at " + e.admin_address +
                              " answered as server '" + control::Printable(r->server_id()) + "'");
  }
  ServerStatsInfo out;
  out.server_id = r->server_id();
  out.epoch = r->epoch();
  out.counters.reserve(r->counters_size());
  for (v1::Counter& c : *r->mutable_counters()) {
    // A name is what callers find a counter by: one per server, never empty.
    if (c.name().empty() || out.Find(c.name())) {
      return InvalidArgument(e.Describe() + ": malformed Stats: counter '" + control::Printable(c.name()) +
                             "' is empty or listed twice");
    }
    out.counters.push_back(StatCounter{std::move(*c.mutable_name()), c.value(), std::move(*c.mutable_help())});
  }
  return out;
}

StatusOr<ServerShardChecksums> ClusterAdmin::ShardChecksums(std::string_view server_id,
                                                            std::span<const uint32_t> shards,
                                                            const CallOptions& call) {
  Client::Impl& impl = *client_->impl_;
  if (!impl.cluster()) return NeedsCoordinator("ShardChecksums");
  RKV_ASSIGN_OR_RETURN(const ServerEntry entry, impl.AdminOf(server_id));
  auto r = impl.control().ShardChecksums(entry.admin_address, std::vector<uint32_t>(shards.begin(), shards.end()),
                                         impl.DeadlineOf(call));
  if (!r.ok()) return r.status().WithContext(entry.Describe());
  ServerShardChecksums out;
  out.server_id = entry.server_id;
  out.map_version = r->map_version();
  out.shards.reserve(r->shards_size());
  for (const v1::ShardChecksum& c : r->shards()) {
    out.shards.push_back(ShardChecksumInfo{c.shard(), c.keys(), c.checksum(), c.max_version()});
  }
  return out;
}

StatusOr<ShardListingInfo> ClusterAdmin::ListShard(std::string_view server_id, uint32_t shard,
                                                   const CallOptions& call) {
  Client::Impl& impl = *client_->impl_;
  if (!impl.cluster()) return NeedsCoordinator("ListShard");
  RKV_ASSIGN_OR_RETURN(const ServerEntry entry, impl.AdminOf(server_id));
  auto r = impl.control().ListShard(entry.admin_address, shard, impl.DeadlineOf(call));
  if (!r.ok()) return r.status().WithContext(entry.Describe());
  ShardListingInfo out;
  out.server_id = entry.server_id;
  out.snapshot_version = r->snapshot_version();
  out.records.reserve(r->records_size());
  for (v1::ShardRecord& rec : *r->mutable_records()) {
    out.records.push_back(ShardKeyVersion{std::move(*rec.mutable_key()), rec.version()});
  }
  return out;
}

StatusOr<std::vector<CoordinatorInfo>> ClusterAdmin::Coordinators(const CallOptions& call) {
  Client::Impl& impl = *client_->impl_;
  if (!impl.cluster()) return NeedsCoordinator("Coordinators");
  const std::vector<std::string>& addresses = impl.control().coordinator_addresses();
  auto answers = impl.control().CoordinatorStatuses(impl.DeadlineOf(call));
  std::vector<CoordinatorInfo> out;
  for (size_t i = 0; i < answers.size() && i < addresses.size(); ++i) {
    CoordinatorInfo& c = out.emplace_back();
    c.address = addresses[i];
    if (!answers[i].ok()) {
      c.error = answers[i].status().ToString();
      continue;
    }
    const v1::CoordinatorStatus& s = *answers[i];
    c.reachable = true;
    switch (s.role()) {
      case v1::CoordinatorStatus::SINGLE: c.role = "single"; break;
      case v1::CoordinatorStatus::LEADER: c.role = "leader"; break;
      case v1::CoordinatorStatus::STANDBY: c.role = "standby"; break;
      default: c.role = "unknown"; break;
    }
    c.leader = control::Printable(s.leader());
    c.why_not_leader = control::Printable(s.why_not_leader(), 512);
    c.map_version = s.map_version();
    c.state_revision = s.state_revision();
    c.etcd_prefix = control::Printable(s.etcd_prefix());
    for (const auto& e : s.etcd()) {
      EtcdEndpointInfo& info = c.etcd.emplace_back();
      info.endpoint = control::Printable(e.endpoint());
      info.healthy = e.healthy();
      info.version = control::Printable(e.version());
      info.error = control::Printable(e.error(), 512);
      info.leads_etcd = e.is_leader();
    }
  }
  return out;
}

StatusOr<DrainInfo> ClusterAdmin::Drain(std::string_view server_id, const CallOptions& call) {
  Client::Impl& impl = *client_->impl_;
  if (!impl.cluster()) return NeedsCoordinator("Drain");
  auto r = impl.control().Drain(std::string(server_id), impl.DeadlineOf(call));
  if (!r.ok()) return r.status();
  return DrainInfo{r->map_version(), r->roles_to_move()};
}

StatusOr<ForgetInfo> ClusterAdmin::Forget(std::string_view server_id, const CallOptions& call) {
  Client::Impl& impl = *client_->impl_;
  if (!impl.cluster()) return NeedsCoordinator("Forget");
  RKV_RETURN_IF_ERROR(control::ValidateServerId(server_id).WithContext("Forget"));
  auto r = impl.control().Forget(std::string(server_id), impl.DeadlineOf(call));
  if (!r.ok()) return r.status();
  return ForgetInfo{r->map_version()};
}

}  // namespace rkv
