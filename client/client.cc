// Client (rkv/client.h): Connect, the setup of its Impl (client_impl.h)
// and the accessors that report the client's own state. The calls
// themselves are in client_read.cc and client_write.cc, the loop they run
// in client_call.cc. What only a coordinator's map has (the map, shards,
// map versions) fails with FAILED_PRECONDITION without one.
#include "rkv/client.h"

#include <glog/logging.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <thread>
#include <utility>

#include "client/client_impl.h"
#include "common/net_address.h"
#include "common/token.h"
#include "common/transport/factory.h"
#include "proto/coordinator_set.h"
#include "proto/tls.h"
#include "proto/validation.h"

namespace rkv {

using client::Clock;
using client::Deadline;
using client::ReplicaEntry;
using client::RoutingTable;
using client::ServerConnection;
using client::ServerEntry;
using std::to_string;

namespace {

constexpr int kMaxConnections = 64;
constexpr char kDefaultServer[] = "127.0.0.1:7700";

control::TlsFiles TlsFilesOf(const ClientOptions& o) { return {o.tls_cert_file, o.tls_key_file, o.tls_ca_file}; }

}  // namespace

Client::Impl::Impl(const ClientOptions& options)
    : options_(options),
      location_cache_(options.location_cache_bytes == 0
                          ? nullptr
                          : std::make_unique<client::LocationCache>(options.location_cache_bytes)) {
  std::memset(&request_, 0, sizeof(request_));
  request_.magic = protocol::kConnectMagic;
  request_.protocol_version = protocol::kProtocolVersion;
  request_.layout_version = layout::kLayoutVersion;
  // Random, so that no two clients share the server's replay cache
  // entries; 0 is avoided only to keep it recognizable in logs.
  std::random_device rd;
  do {
    request_.client_id = (uint64_t{rd()} << 32) | rd();
  } while (request_.client_id == 0);
  const Sha256Digest digest = TokenDigest(options.token);
  static_assert(sizeof(request_.token_digest) == std::tuple_size_v<Sha256Digest>);
  std::memcpy(request_.token_digest, digest.data(), digest.size());
}

Client::Impl::~Impl() {
  // The watch thread goes first: nothing may install maps while the
  // pools are torn down; the pools go before the transports they use.
  // The lease share goes first: once it has left, the shared lease no
  // longer installs maps into holder_.
  reporter_.reset();
  leases_.reset();
  control_.reset();
  {
    MutexLock lock(routes_mu_);
    routes_.reset();
  }
  MutexLock lock(pools_mu_);
  pools_.clear();
}

Status Client::Impl::InitServer(transport::Kind kind, std::string reason) {
  fixed_kind_ = kind;
  transport_reason_ = std::move(reason);
  holder_.InstallIfNewer(RoutingTable::ForServer(options_.server, transport::KindName(kind)));
  const Deadline deadline = Clock::now() + options_.timeout;
  for (size_t slot = 0; slot < static_cast<size_t>(options_.connections); ++slot) {
    RKV_RETURN_IF_ERROR(
        WithServer(Routing(), 0, deadline, [](ServerConnection&) { return Status::Ok(); }, slot));
  }
  return Status::Ok();
}

Status Client::Impl::InitCluster(std::optional<transport::Kind> fixed_kind, std::string reason) {
  fixed_kind_ = fixed_kind;
  transport_reason_ = std::move(reason);
  RKV_ASSIGN_OR_RETURN(std::unique_ptr<control::CoordinatorSet> coordinators,
                       control::CoordinatorSet::Create(options_.coordinator, options_.token, TlsFilesOf(options_),
                                                       control::ClientOptionsTlsNames()));
  control_ = std::make_unique<client::ControlClient>(std::move(coordinators), options_.token, &holder_);
  const Deadline deadline = Clock::now() + options_.timeout;
  std::chrono::milliseconds backoff(10);
  // The last answer that was not a timeout (an incomplete cluster, say):
  // when the deadline then cuts an attempt short, that answer is what
  // the caller needs to know.
  Status last_answer;
  while (true) {
    auto t = control_->Fetch(deadline);
    if (t.ok()) break;
    const StatusCode code = t.status().code();
    if (code != StatusCode::kUnavailable && code != StatusCode::kDeadlineExceeded) return t.status();
    if (code != StatusCode::kDeadlineExceeded) last_answer = t.status();
    const auto now = Clock::now();
    if (now + backoff >= deadline) {
      if (code != StatusCode::kDeadlineExceeded) return t.status();
      if (last_answer.ok()) return Unavailable(t.status().message());
      return Unavailable(std::string(last_answer.message()) + " (then an attempt timed out: " +
                         std::string(t.status().message()) + ")");
    }
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, std::chrono::milliseconds(200));
  }
  control_->StartWatch();
  reporter_ = std::make_unique<client::UnresponsiveReporter>(
      [control = control_.get()](const v1::ReportUnresponsiveRequest& r, client::Deadline d) {
        return control->ReportUnresponsive(r, d).status();
      });
  // The process's lease for these coordinators and this token, shared
  // with every other client of it (docs/design.md §8.8).
  RKV_ASSIGN_OR_RETURN(leases_, client::LeaseShare::Join(options_.coordinator, options_.token, &holder_,
                                                                 TlsFilesOf(options_)));
  // The first lease, so that the first calls need not wait for one: none
  // is asked for when the shared one already covers this client's map. A
  // failure here is not Connect's: each call renews (or waits) on its own.
  const auto table = holder_.Current();
  const Status leased = leases_->Check(table != nullptr ? table->version() : 0, "", deadline);
  if (!leased.ok()) VLOG(1) << "rkv: no lease at connect (calls will renew): " << leased;
  return Status::Ok();
}

Status Client::Impl::CheckValue(const RoutingTable& table, std::string_view value) const {
  const uint32_t max = MaxValueBytes(table);
  if (value.size() > max) {
    return InvalidArgument("value of " + to_string(value.size()) + " bytes: values must be 0.." +
                           to_string(max) + " bytes (the server's max_value_bytes)");
  }
  return Status::Ok();
}

Status Client::Impl::BadKey(std::string_view key, uint32_t max) {
  return InvalidArgument("key of " + to_string(key.size()) + " bytes: keys must be 1.." + to_string(max) +
                         " bytes (the server's max_key_bytes)");
}

LocationCacheStatsInfo Client::Impl::LocationCacheStats() const {
  LocationCacheStatsInfo out;
  if (!location_cache_) return out;
  const client::LocationCacheCounters c = location_cache_->counters();
  out.enabled = true;
  out.entries = c.entries;
  out.bytes = c.bytes;
  out.capacity_bytes = c.capacity_bytes;
  out.hits = c.hits;
  out.misses = c.misses;
  out.fallbacks = c.fallbacks;
  out.evictions = c.evictions;
  return out;
}

MemberInfo Client::Impl::ToMember(const ServerEntry& e) {
  MemberInfo m;
  m.server_id = e.server_id;
  m.epoch = e.epoch;
  m.state = e.state;
  m.data_address = e.data_address;
  m.admin_address = e.admin_address;
  m.transport = e.transport;
  m.shards = e.shards_owned;
  m.keys = e.keys;
  m.heap_bytes_used = e.heap_bytes_used;
  m.heap_bytes = e.heap_bytes;
  m.zone = e.zone;
  m.backup_shards = e.backup_shards;
  m.syncing_shards = e.syncing_shards;
  m.draining = e.draining;
  m.down_since_unix_ms = e.down_since_unix_ms;
  return m;
}

StatusOr<std::unique_ptr<Client>> Client::Connect(const ClientOptions& options) {
  if (options.token.empty()) return InvalidArgument("ClientOptions.token is empty");
  if (options.location_cache_bytes != 0 && (options.location_cache_bytes < kMinLocationCacheBytes ||
                                            options.location_cache_bytes > kMaxLocationCacheBytes)) {
    return InvalidArgument("ClientOptions.location_cache_bytes is " + to_string(options.location_cache_bytes) +
                           "; must be 0 (off) or " + to_string(kMinLocationCacheBytes) + ".." +
                           to_string(kMaxLocationCacheBytes));
  }
  if (options.connections < 1 || options.connections > kMaxConnections) {
    return InvalidArgument("ClientOptions.connections is " + to_string(options.connections) +
                           ", expected 1.." + to_string(kMaxConnections));
  }
  if (options.timeout.count() <= 0) return InvalidArgument("ClientOptions.timeout must be positive");
  const bool cluster = !options.coordinator.empty();
  if (cluster && !options.server.empty() && options.server != kDefaultServer) {
    return InvalidArgument("set only one of ClientOptions.server ('" + control::Printable(options.server) +
                           "') and ClientOptions.coordinator");
  }
  if (!cluster && options.server.empty()) {
    return InvalidArgument("set one of ClientOptions.server and ClientOptions.coordinator");
  }
  if (!cluster && !TlsFilesOf(options).empty() && !options.data_plane_tls) {
    return InvalidArgument("ClientOptions.tls_ca_file, tls_cert_file and tls_key_file apply to the control plane "
                           "(ClientOptions.coordinator) and, with ClientOptions.data_plane_tls, to the data plane; "
                           "a client of one server speaks only the data plane");
  }
  if (options.data_plane_tls && options.tls_ca_file.empty()) {
    return InvalidArgument("ClientOptions.data_plane_tls needs ClientOptions.tls_ca_file, the CA bundle the "
                           "servers' certificates are verified against");
  }
  RKV_RETURN_IF_ERROR(control::CheckClientTlsFiles(TlsFilesOf(options), control::ClientOptionsTlsNames()));
  std::string why;
  RKV_ASSIGN_OR_RETURN(const transport::Kind kind, transport::ResolveKind(options.transport, &why));

  ClientOptions effective = options;
  if (cluster) {
    RKV_RETURN_IF_ERROR(control::ParseCoordinatorList(options.coordinator).status().WithContext("ClientOptions.coordinator"));
    effective.server.clear();
    auto impl = std::make_unique<Impl>(effective);
    std::optional<transport::Kind> fixed;
    if (options.transport != "auto") {
      fixed = kind;
    } else {
      why = "transport auto: each server's own (the cluster map's)";
    }
    RKV_RETURN_IF_ERROR(impl->InitCluster(fixed, std::move(why)));
    return std::unique_ptr<Client>(new Client(std::move(impl)));
  }

  std::string host;
  uint16_t port = 0;
  RKV_RETURN_IF_ERROR(ParseHostPort(options.server, &host, &port));
  if (port == 0) return InvalidArgument("server address '" + options.server + "' has port 0");
  VLOG(1) << "rkv: " << why;
  auto impl = std::make_unique<Impl>(effective);
  RKV_RETURN_IF_ERROR(impl->InitServer(kind, std::move(why)));
  return std::unique_ptr<Client>(new Client(std::move(impl)));
}

Client::Client(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Client::~Client() = default;

LocationCacheStatsInfo Client::LocationCacheStats() const { return impl_->LocationCacheStats(); }
ClientCounters Client::Counters() const { return impl_->Counters(); }

uint32_t Client::max_key_bytes() const { return impl_->MaxKeyBytes(impl_->Routing()->table()); }
uint32_t Client::max_value_bytes() const { return impl_->MaxValueBytes(impl_->Routing()->table()); }
uint64_t Client::server_epoch() const { return impl_->ServerEpoch(); }
std::string Client::transport_name() const { return impl_->TransportName(); }
std::string Client::transport_reason() const { return impl_->TransportReason(); }

bool Client::cluster_mode() const { return impl_->cluster(); }

uint64_t Client::cluster_map_version() const {
  if (!impl_->cluster()) return 0;
  return impl_->Routing()->table().version();
}

StatusOr<ClusterInfo> Client::Cluster() const {
  if (!impl_->cluster()) return FailedPrecondition("Cluster needs a client connected through a coordinator");
  const auto routes = impl_->Routing();
  const RoutingTable& table = routes->table();
  ClusterInfo out;
  out.map_version = table.version();
  out.replication_factor = table.replication_factor();
  out.members.reserve(table.servers().size());
  for (const ServerEntry& e : table.servers()) out.members.push_back(Impl::ToMember(e));
  out.shards.resize(table.shard_count());
  for (uint32_t shard = 0; shard < table.shard_count(); ++shard) {
    out.shards[shard].shard = shard;
    for (const ReplicaEntry& r : table.ReplicasOfShard(shard)) {
      out.shards[shard].replicas.push_back(r.server->server_id);
    }
    out.shards[shard].syncing = table.SyncingOfShard(shard);
    out.shards[shard].handover_from = table.HandoverFromOfShard(shard);
  }
  return out;
}

StatusOr<uint32_t> Client::ShardOfKey(std::string_view key) const {
  if (!impl_->cluster()) return FailedPrecondition("ShardOfKey needs a client connected through a coordinator");
  auto routes = impl_->Routing();
  RKV_RETURN_IF_ERROR(impl_->CheckKey(routes->table(), key));
  return ShardOf(key, routes->table().shard_count());
}

Status Client::RefreshClusterMap(const CallOptions& call) {
  if (!impl_->cluster()) return FailedPrecondition("RefreshClusterMap needs a client connected through a coordinator");
  auto t = impl_->control().Fetch(impl_->DeadlineOf(call));
  return t.ok() ? Status::Ok() : t.status();
}

}  // namespace rkv
