// Client: the public API over pools of ServerConnections: one pool for a
// single server, or one per server of a cluster (created on first use),
// routed by the cluster map that ControlClient keeps current.
#include "rkv/client.h"

#include <glog/logging.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
#include <optional>
#include <mutex>
#include <random>
#include <thread>

#include "client/cluster_map.h"
#include "client/control_client.h"
#include "client/server_connection.h"
#include "common/clock.h"
#include "common/net_address.h"
#include "common/protocol.h"
#include "common/token.h"
#include "common/transport/factory.h"
#include "common/transport/transport.h"
#include "proto/validation.h"

namespace rkv {

using client::Clock;
using client::Deadline;
using client::ServerConnection;
using client::ServerEntry;
using std::to_string;

namespace {

constexpr int kMaxConnections = 64;
constexpr char kDefaultServer[] = "127.0.0.1:7700";
// Retry backoff of a cluster call between attempts.
constexpr std::chrono::milliseconds kClusterBackoffMax{100};

// Connect errors worth retrying: the server is down, restarting, or was
// between accept and epoch publication.
bool RetryableConnectError(const Status& s) {
  return s.code() == StatusCode::kUnavailable || s.code() == StatusCode::kDeadlineExceeded ||
         s.code() == StatusCode::kAborted;
}

// A pool of connections to one server address. Each call holds one slot
// (its mutex) while it uses the slot's connection.
class ConnectionPool {
 public:
  struct Slot {
    std::mutex mu;
    std::unique_ptr<ServerConnection> conn;  // guarded by mu
  };

  ConnectionPool(transport::Transport* transport, std::string address, uint64_t map_epoch, int size)
      : transport_(transport), address_(std::move(address)), map_epoch_(map_epoch) {
    for (int i = 0; i < size; ++i) slots_.push_back(std::make_unique<Slot>());
  }

  const std::string& address() const { return address_; }
  uint64_t map_epoch() const { return map_epoch_; }
  size_t size() const { return slots_.size(); }
  Slot& slot(size_t i) { return *slots_[i]; }

  // Returns a slot whose mutex the caller now holds: a free one if any,
  // else waits for one chosen round-robin.
  Slot& Acquire() {
    const size_t start = next_slot_.fetch_add(1, std::memory_order_relaxed);
    // The common case, inline: the round-robin slot is free.
    if (Slot& s = *slots_[start % slots_.size()]; s.mu.try_lock()) [[likely]] return s;
    return AcquireAny(start);
  }

  // Makes slot.conn a live connection (a new one when missing or broken).
  // With `retry`, retries while the server is unreachable until the
  // deadline (UNAVAILABLE then); without, returns the first failure.
  // Sets *fresh when it opened a new connection. Requires slot.mu.
  Status EnsureConnected(Slot& slot, const protocol::ConnectRequestData& request, Deadline deadline,
                         bool retry, bool* fresh) {
    *fresh = false;
    if (slot.conn && !slot.conn->broken()) [[likely]] return Status::Ok();
    return Reconnect(slot, request, deadline, retry, fresh);
  }

 private:
  // Acquire's other cases: another free slot, else a wait for the
  // round-robin one.
  [[gnu::noinline]] Slot& AcquireAny(size_t start) {
    for (size_t i = 1; i < slots_.size(); ++i) {
      Slot& s = *slots_[(start + i) % slots_.size()];
      if (s.mu.try_lock()) return s;
    }
    Slot& s = *slots_[start % slots_.size()];
    s.mu.lock();
    return s;
  }

  [[gnu::noinline]] Status Reconnect(Slot& slot, const protocol::ConnectRequestData& request,
                                     Deadline deadline, bool retry, bool* fresh) {
    slot.conn.reset();
    std::chrono::milliseconds backoff(1);
    while (true) {
      auto c = ServerConnection::Open(*transport_, address_, request, deadline);
      if (c.ok()) {
        slot.conn = std::move(*c);
        *fresh = true;
        VLOG(1) << "rkv: connected to " << address_ << " epoch " << slot.conn->accept().epoch << " ("
                << transport::KindName(transport_->kind()) << ")";
        return Status::Ok();
      }
      if (!retry || !RetryableConnectError(c.status())) return c.status();
      const auto now = Clock::now();
      if (now + backoff >= deadline) {
        return Unavailable("cannot connect to " + address_ + " within the deadline; last error: " +
                           c.status().ToString());
      }
      std::this_thread::sleep_for(backoff);
      backoff = std::min(backoff * 2, std::chrono::milliseconds(200));
    }
  }

  transport::Transport* const transport_;
  const std::string address_;
  const uint64_t map_epoch_;  // the epoch the map listed when this pool was made (0: single server)
  std::vector<std::unique_ptr<Slot>> slots_;
  std::atomic<size_t> next_slot_{0};
};

// Holds a slot's mutex for a scope.
class SlotLease {
 public:
  explicit SlotLease(ConnectionPool& pool) : slot_(pool.Acquire()) {}
  ~SlotLease() { slot_.mu.unlock(); }
  SlotLease(const SlotLease&) = delete;
  SlotLease& operator=(const SlotLease&) = delete;
  ConnectionPool::Slot& slot() { return slot_; }

 private:
  ConnectionPool::Slot& slot_;
};

MemberInfo ToMember(const ServerEntry& e) {
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
  return m;
}

}  // namespace

class Client::Impl {
 public:
  explicit Impl(const ClientOptions& options) : options_(options) {
    std::memset(&request_, 0, sizeof(request_));
    request_.magic = protocol::kConnectMagic;
    request_.protocol_version = protocol::kProtocolVersion;
    request_.layout_version = layout::kLayoutVersion;
    std::random_device rd;
    request_.client_id = (uint64_t{rd()} << 32) | rd();
    const Sha256Digest digest = TokenDigest(options.token);
    static_assert(sizeof(request_.token_digest) == std::tuple_size_v<Sha256Digest>);
    std::memcpy(request_.token_digest, digest.data(), digest.size());
  }

  ~Impl() {
    // The watch thread goes first: nothing may install maps while the
    // pools and transports are torn down.
    control_.reset();
    pools_.clear();
    single_pool_.reset();
  }

  bool cluster() const { return control_ != nullptr; }

  // ---- single-server mode ----

  Status InitSingle(std::unique_ptr<transport::Transport> transport, std::string reason) {
    single_transport_ = std::move(transport);
    transport_reason_ = std::move(reason);
    single_pool_ = std::make_unique<ConnectionPool>(single_transport_.get(), options_.server, 0,
                                                    options_.connections);
    const Deadline deadline = Clock::now() + options_.timeout;
    for (size_t i = 0; i < single_pool_->size(); ++i) {
      ConnectionPool::Slot& slot = single_pool_->slot(i);
      std::lock_guard<std::mutex> lock(slot.mu);
      bool fresh = false;
      RKV_RETURN_IF_ERROR(single_pool_->EnsureConnected(slot, request_, deadline, /*retry=*/true, &fresh));
      NoteConnection(*slot.conn);
    }
    return Status::Ok();
  }

  // ---- cluster mode ----

  // Fetches the first complete map (retrying within the timeout while the
  // coordinator is unreachable or the cluster incomplete), then starts the
  // watch.
  Status InitCluster(std::optional<transport::Kind> fixed_kind, std::string reason) {
    fixed_kind_ = fixed_kind;
    transport_reason_ = std::move(reason);
    control_ = std::make_unique<client::ControlClient>(options_.coordinator, options_.token, &holder_);
    const Deadline deadline = Clock::now() + options_.timeout;
    std::chrono::milliseconds backoff(10);
    while (true) {
      auto t = control_->Fetch(deadline);
      if (t.ok()) break;
      const StatusCode code = t.status().code();
      if (code != StatusCode::kUnavailable && code != StatusCode::kDeadlineExceeded) return t.status();
      const auto now = Clock::now();
      if (now + backoff >= deadline) {
        if (code == StatusCode::kDeadlineExceeded) return Unavailable(t.status().message());
        return t.status();
      }
      std::this_thread::sleep_for(backoff);
      backoff = std::min(backoff * 2, std::chrono::milliseconds(200));
    }
    control_->StartWatch();
    return Status::Ok();
  }

  std::shared_ptr<const client::RoutingTable> Table() const { return holder_.Current(); }

  // ---- shared ----

  Deadline DeadlineOf(const CallOptions& call) const {
    return SteadyNow() + (call.timeout.count() > 0 ? call.timeout : options_.timeout);
  }

  uint32_t MaxKeyBytes() const {
    if (cluster()) return Table()->min_max_key_bytes();
    return max_key_bytes_.load(std::memory_order_relaxed);
  }
  uint32_t MaxValueBytes() const {
    if (cluster()) return Table()->min_max_value_bytes();
    return max_value_bytes_.load(std::memory_order_relaxed);
  }

  Status CheckKey(std::string_view key) const {
    const uint32_t max = MaxKeyBytes();
    if (!key.empty() && key.size() <= max) [[likely]] return Status::Ok();
    return BadKey(key, max);
  }
  [[gnu::cold, gnu::noinline]] static Status BadKey(std::string_view key, uint32_t max) {
    return InvalidArgument("key of " + to_string(key.size()) + " bytes: keys must be 1.." + to_string(max) +
                           " bytes (the server's max_key_bytes)");
  }
  Status CheckValue(std::string_view value) const {
    const uint32_t max = MaxValueBytes();
    if (value.size() > max) {
      return InvalidArgument("value of " + to_string(value.size()) + " bytes: values must be 0.." +
                             to_string(max) + " bytes (the server's max_value_bytes)");
    }
    return Status::Ok();
  }

  // Runs `fn(connection)` on a connection to the server that owns `key`.
  template <typename Fn>
  Status WithKey(std::string_view key, Deadline deadline, Fn&& fn) {
    if (!cluster()) return WithSingle(deadline, fn);
    return WithServer(Table()->OwnerOf(key).server_id, deadline, fn);
  }

  // Single-server mode: runs `fn` on a pool connection, reconnecting and
  // retrying while the connection breaks, until `deadline`. `fn` returns a
  // Status; a non-OK one with the connection still intact is final.
  template <typename Fn>
  Status WithSingle(Deadline deadline, Fn&& fn) {
    SlotLease lease(*single_pool_);
    ConnectionPool::Slot& slot = lease.slot();
    std::chrono::milliseconds backoff(1);
    while (true) {
      bool fresh = false;
      RKV_RETURN_IF_ERROR(single_pool_->EnsureConnected(slot, request_, deadline, /*retry=*/true, &fresh));
      if (fresh) NoteConnection(*slot.conn);
      Status s = fn(*slot.conn);  // not const: returned by move
      if (s.ok() || !slot.conn->broken()) return s;
      VLOG(1) << "rkv: connection to " << options_.server << " broke: " << s;
      const auto now = Clock::now();
      if (now >= deadline) {
        if (s.code() == StatusCode::kDeadlineExceeded) return s;
        return Unavailable("connection to " + options_.server +
                           " broke and the deadline passed: " + s.ToString());
      }
      std::this_thread::sleep_for(std::min<Clock::duration>(backoff, deadline - now));
      backoff = std::min(backoff * 2, std::chrono::milliseconds(50));
    }
  }

  // Cluster mode: runs `fn` on a connection to server `server_id` as the
  // current map describes it. A server marked DOWN, a failed connect, a
  // broken connection or an epoch other than the map's make the call
  // refetch the map (rate-limited) and retry with backoff until `deadline`.
  // Errors name the server, its epoch and address. (Shards stay with their
  // server id across restarts, so the id, not the key, is re-resolved.)
  template <typename Fn>
  Status WithServer(const std::string& server_id, Deadline deadline, Fn&& fn) {
    std::chrono::milliseconds backoff(1);
    Status last;
    bool last_from_op = false;  // `last` came from fn, not from reaching the server
    std::string last_server;
    while (true) {
      const auto table = Table();
      const ServerEntry* e = table->Find(server_id);
      if (e == nullptr) {
        return Unavailable("server " + server_id + " is not in cluster map version " +
                           to_string(table->version()));
      }
      last_server = e->Describe();
      bool refetch_now = false;
      if (!e->up) {
        last = Unavailable("marked DOWN in cluster map version " + to_string(table->version()));
        last_from_op = false;
      } else {
        auto pool = PoolFor(*e);
        if (!pool.ok()) return pool.status().WithContext(last_server);
        SlotLease lease(**pool);
        ConnectionPool::Slot& slot = lease.slot();
        bool fresh = false;
        Status s = (*pool)->EnsureConnected(slot, request_, deadline, /*retry=*/false, &fresh);
        if (s.ok() && fresh) {
          const uint64_t server_epoch = slot.conn->accept().epoch;
          switch (client::CompareEpoch(e->epoch, server_epoch)) {
            case client::EpochRelation::kMatch:
              NoteConnection(*slot.conn);
              break;
            case client::EpochRelation::kServerNewer:
              // Restarted after this map was made: its new regions are in
              // a newer map.
              refetch_now = true;
              [[fallthrough]];
            case client::EpochRelation::kServerOlder:
              slot.conn.reset();
              last_from_op = false;
              s = Unavailable("the server answered with epoch " + to_string(server_epoch) +
                              ", cluster map version " + to_string(table->version()) + " lists epoch " +
                              to_string(e->epoch));
              break;
          }
        } else if (!s.ok() && !RetryableConnectError(s)) {
          return s.WithContext(last_server);
        }
        if (s.ok()) {
          s = fn(*slot.conn);
          if (s.ok() || !slot.conn->broken()) return s.ok() ? s : s.WithContext(last_server);
          VLOG(1) << "rkv: " << last_server << ": connection broke: " << s;
          last = std::move(s);
          last_from_op = true;
        } else if (s.code() != StatusCode::kDeadlineExceeded || last.ok()) {
          // (A connect cut short by the deadline says less than the error
          // before it.)
          last = std::move(s);
          last_from_op = false;
        }
      }
      // The lease is released: refetch and back off without holding a slot.
      const bool newer = control_->MaybeRefetch(deadline) || refetch_now;
      const auto now = Clock::now();
      if (now >= deadline) {
        if (last_from_op && last.code() == StatusCode::kDeadlineExceeded) return last.WithContext(last_server);
        return Unavailable(last_server + ": " + last.ToString());
      }
      if (!newer) {
        std::this_thread::sleep_for(std::min<Clock::duration>(backoff, deadline - now));
        backoff = std::min(backoff * 2, kClusterBackoffMax);
      }
    }
  }

  // The pool for the incarnation `e` describes: the existing one when the
  // map still lists the same epoch and address, else a new one (calls that
  // still hold the old one finish on it).
  StatusOr<std::shared_ptr<ConnectionPool>> PoolFor(const ServerEntry& e) {
    RKV_ASSIGN_OR_RETURN(transport::Transport * t, TransportFor(e));
    std::lock_guard<std::mutex> lock(pools_mu_);
    std::shared_ptr<ConnectionPool>& p = pools_[e.server_id];
    if (!p || p->map_epoch() != e.epoch || p->address() != e.data_address) {
      if (p) VLOG(1) << "rkv: " << e.Describe() << ": new incarnation, replacing its connections";
      p = std::make_shared<ConnectionPool>(t, e.data_address, e.epoch, options_.connections);
    }
    return p;
  }

  // The transport to reach a server that announces `e.transport`.
  StatusOr<transport::Transport*> TransportFor(const ServerEntry& e) {
    const transport::Kind wanted = e.transport == "verbs" ? transport::Kind::kVerbs : transport::Kind::kTcp;
    if (fixed_kind_ && *fixed_kind_ != wanted) {
      return FailedPrecondition("the server speaks " + e.transport + " but ClientOptions.transport is " +
                                options_.transport);
    }
    std::lock_guard<std::mutex> lock(transports_mu_);
    auto& t = transports_[wanted];
    if (!t) {
      RKV_ASSIGN_OR_RETURN(t, transport::CreateTransport(wanted, transport::Options{}));
    }
    last_kind_.store(static_cast<int>(wanted), std::memory_order_relaxed);
    return t.get();
  }

  void NoteConnection(const ServerConnection& conn) {
    const protocol::AcceptData& a = conn.accept();
    // Relaxed: independent values, read only to check sizes (the server
    // rechecks) and for reporting.
    max_key_bytes_.store(a.max_key_bytes, std::memory_order_relaxed);
    max_value_bytes_.store(a.max_value_bytes, std::memory_order_relaxed);
    epoch_.store(a.epoch, std::memory_order_relaxed);
  }

  std::string TransportName() const {
    if (!cluster()) return transport::KindName(single_transport_->kind());
    if (fixed_kind_) return transport::KindName(*fixed_kind_);
    const int k = last_kind_.load(std::memory_order_relaxed);
    return k < 0 ? "auto" : transport::KindName(static_cast<transport::Kind>(k));
  }

  StatusOr<ServerStatsInfo> Stats(std::string_view server_id, Deadline deadline) {
    const auto table = Table();
    const ServerEntry* e = table->Find(server_id);
    if (e == nullptr) {
      return NotFound("no server '" + control::Printable(server_id) + "' in cluster map version " +
                      to_string(table->version()));
    }
    auto r = control_->Stats(e->admin_address, deadline);
    if (!r.ok()) return r.status().WithContext(e->Describe());
    if (r->server_id() != e->server_id) {
      return FailedPrecondition(e->Describe() + ": the admin service at " + e->admin_address +
                                " answered as server '" + control::Printable(r->server_id()) + "'");
    }
    ServerStatsInfo out;
    out.server_id = r->server_id();
    out.epoch = r->epoch();
    out.keys = r->keys();
    out.puts = r->puts();
    out.deletes = r->deletes();
    out.request_errors = r->request_errors();
    out.connections = r->connections();
    out.gets_served_by_cpu = r->gets_served_by_cpu();
    out.heap_bytes = r->heap_bytes();
    out.heap_bytes_used = r->heap_bytes_used();
    out.heap_bytes_quarantined = r->heap_bytes_quarantined();
    return out;
  }

  const ClientOptions options_;
  std::string transport_reason_;
  std::atomic<uint32_t> max_key_bytes_{0};
  std::atomic<uint32_t> max_value_bytes_{0};
  std::atomic<uint64_t> epoch_{0};

  // Cluster mode.
  client::MapHolder holder_;
  std::unique_ptr<client::ControlClient> control_;

 private:
  protocol::ConnectRequestData request_;

  // Single-server mode.
  std::unique_ptr<transport::Transport> single_transport_;
  std::unique_ptr<ConnectionPool> single_pool_;

  // Cluster mode.
  std::optional<transport::Kind> fixed_kind_;  // set unless transport is "auto"
  std::atomic<int> last_kind_{-1};
  std::mutex transports_mu_;
  std::map<transport::Kind, std::unique_ptr<transport::Transport>> transports_;  // guarded by transports_mu_
  std::mutex pools_mu_;
  std::map<std::string, std::shared_ptr<ConnectionPool>> pools_;  // guarded by pools_mu_
};

StatusOr<std::unique_ptr<Client>> Client::Connect(const ClientOptions& options) {
  if (options.token.empty()) return InvalidArgument("ClientOptions.token is empty");
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
  std::string why;
  RKV_ASSIGN_OR_RETURN(const transport::Kind kind, transport::ResolveKind(options.transport, &why));

  ClientOptions effective = options;
  if (cluster) {
    RKV_RETURN_IF_ERROR(control::ValidateHostPort(options.coordinator).WithContext("ClientOptions.coordinator"));
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
  RKV_ASSIGN_OR_RETURN(std::unique_ptr<transport::Transport> t,
                       transport::CreateTransport(kind, transport::Options{}));
  auto impl = std::make_unique<Impl>(effective);
  RKV_RETURN_IF_ERROR(impl->InitSingle(std::move(t), std::move(why)));
  return std::unique_ptr<Client>(new Client(std::move(impl)));
}

Client::Client(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Client::~Client() = default;

Status Client::Get(std::string_view key, std::string* value, uint64_t* version,
                   const CallOptions& call) {
  if (value == nullptr) return InvalidArgument("Get: no string to put the value in (value is null)");
  value->clear();
  RKV_RETURN_IF_ERROR(impl_->CheckKey(key));
  const Deadline deadline = impl_->DeadlineOf(call);
  client::LookupResult result;
  result.value.swap(*value);  // the lookup copies the value into the caller's memory
  Status s = impl_->WithKey(key, deadline, [&](ServerConnection& conn) {
    return conn.Lookup(std::span<const std::string_view>(&key, 1),
                       std::span<client::LookupResult>(&result, 1), deadline);
  });
  result.value.swap(*value);
  if (!s.ok() || !result.status.ok()) [[unlikely]] {
    value->clear();
    return s.ok() ? std::move(result.status) : s;
  }
  if (version != nullptr) *version = result.version;
  return Status::Ok();
}

StatusOr<VersionedValue> Client::GetVersioned(std::string_view key, const CallOptions& call) {
  VersionedValue v;
  RKV_RETURN_IF_ERROR(Get(key, &v.value, &v.version, call));
  return v;
}

StatusOr<std::string> Client::Get(std::string_view key, const CallOptions& call) {
  std::string value;
  RKV_RETURN_IF_ERROR(Get(key, &value, nullptr, call));
  return value;
}

StatusOr<uint64_t> Client::Put(std::string_view key, std::string_view value,
                               const CallOptions& call) {
  RKV_RETURN_IF_ERROR(impl_->CheckKey(key));
  RKV_RETURN_IF_ERROR(impl_->CheckValue(value));
  const Deadline deadline = impl_->DeadlineOf(call);
  client::ApplyResult result;
  const Status s = impl_->WithKey(key, deadline, [&](ServerConnection& conn) -> Status {
    // The limits may differ on a restarted server; the check above used the
    // newest connection's (or the map's), this one uses this connection's.
    if (key.size() > conn.accept().max_key_bytes || value.size() > conn.accept().max_value_bytes) {
      return InvalidArgument("key of " + to_string(key.size()) + " bytes or value of " +
                             to_string(value.size()) + " bytes over the server's limits (" +
                             to_string(conn.accept().max_key_bytes) + ", " +
                             to_string(conn.accept().max_value_bytes) + ")");
    }
    auto r = conn.Apply(protocol::Op::kPut, key, value, deadline);
    if (!r.ok()) return r.status();
    result = std::move(*r);
    return Status::Ok();
  });
  if (!s.ok()) return s;
  if (!result.status.ok()) return result.status;
  return result.version;
}

Status Client::Delete(std::string_view key, const CallOptions& call) {
  RKV_RETURN_IF_ERROR(impl_->CheckKey(key));
  const Deadline deadline = impl_->DeadlineOf(call);
  client::ApplyResult result;
  RKV_RETURN_IF_ERROR(impl_->WithKey(key, deadline, [&](ServerConnection& conn) -> Status {
    if (key.size() > conn.accept().max_key_bytes) {
      return InvalidArgument("key of " + to_string(key.size()) + " bytes: over the server's max_key_bytes " +
                             to_string(conn.accept().max_key_bytes));
    }
    auto r = conn.Apply(protocol::Op::kDelete, key, {}, deadline);
    if (!r.ok()) return r.status();
    result = std::move(*r);
    return Status::Ok();
  }));
  return result.status;
}

std::vector<StatusOr<std::string>> Client::MultiGet(std::span<const std::string> keys,
                                                    const CallOptions& call) {
  const Deadline deadline = impl_->DeadlineOf(call);
  std::vector<client::LookupResult> results(keys.size());
  std::vector<Status> group_status(keys.size());  // per key: its group's call status
  for (size_t i = 0; i < keys.size(); ++i) {
    Status s = impl_->CheckKey(keys[i]);
    if (!s.ok()) {
      results[i].done = true;
      results[i].status = std::move(s);
    }
  }
  if (!impl_->cluster()) {
    std::vector<std::string_view> views(keys.begin(), keys.end());
    const Status s = impl_->WithSingle(deadline, [&](ServerConnection& conn) {
      return conn.Lookup(views, results, deadline);
    });
    std::fill(group_status.begin(), group_status.end(), s);
  } else {
    // Group the keys by owner (one map snapshot), run each group on its
    // server, results land back at the keys' positions.
    const auto table = impl_->Table();
    std::map<size_t, std::vector<size_t>> groups;  // server index -> key positions
    for (size_t i = 0; i < keys.size(); ++i) {
      if (!results[i].done) groups[table->OwnerIndexOf(keys[i])].push_back(i);
    }
    for (const auto& [server, positions] : groups) {
      std::vector<std::string_view> views;
      std::vector<client::LookupResult> group(positions.size());
      views.reserve(positions.size());
      for (size_t p : positions) views.push_back(keys[p]);
      const Status s = impl_->WithServer(table->servers()[server].server_id, deadline,
                                         [&](ServerConnection& conn) { return conn.Lookup(views, group, deadline); });
      for (size_t j = 0; j < positions.size(); ++j) {
        results[positions[j]] = std::move(group[j]);
        group_status[positions[j]] = s;
      }
    }
  }
  std::vector<StatusOr<std::string>> out;
  out.reserve(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    client::LookupResult& r = results[i];
    if (!r.done) {
      out.emplace_back(group_status[i].ok() ? Internal("key left unresolved") : group_status[i]);
    } else if (!r.status.ok()) {
      out.emplace_back(std::move(r.status));
    } else {
      out.emplace_back(std::move(r.value));
    }
  }
  return out;
}

uint32_t Client::max_key_bytes() const { return impl_->MaxKeyBytes(); }
uint32_t Client::max_value_bytes() const { return impl_->MaxValueBytes(); }
uint64_t Client::server_epoch() const { return impl_->epoch_.load(std::memory_order_relaxed); }
std::string Client::transport_name() const { return impl_->TransportName(); }
std::string Client::transport_reason() const { return impl_->transport_reason_; }

bool Client::cluster_mode() const { return impl_->cluster(); }

uint64_t Client::cluster_map_version() const {
  if (!impl_->cluster()) return 0;
  return impl_->Table()->version();
}

StatusOr<std::vector<MemberInfo>> Client::Members() const {
  if (!impl_->cluster()) return FailedPrecondition("Members needs a client connected through a coordinator");
  const auto table = impl_->Table();
  std::vector<MemberInfo> out;
  out.reserve(table->servers().size());
  for (const ServerEntry& e : table->servers()) out.push_back(ToMember(e));
  return out;
}

StatusOr<ServerStatsInfo> Client::ServerStats(std::string_view server_id, const CallOptions& call) {
  if (!impl_->cluster()) return FailedPrecondition("ServerStats needs a client connected through a coordinator");
  return impl_->Stats(server_id, impl_->DeadlineOf(call));
}

Status Client::RefreshClusterMap(const CallOptions& call) {
  if (!impl_->cluster()) return FailedPrecondition("RefreshClusterMap needs a client connected through a coordinator");
  auto t = impl_->control_->Fetch(impl_->DeadlineOf(call));
  return t.ok() ? Status::Ok() : t.status();
}

}  // namespace rkv
