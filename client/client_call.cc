// Client::Impl's call loop (client_impl.h): the routes a call takes, the
// attempts of WithServer with their leases, refetches, backoff and
// incarnation checks, and the pools and transports the attempts use.
#include <glog/logging.h>

#include <algorithm>
#include <thread>
#include <utility>

#include "client/client_impl.h"
#include "client/refusal.h"
#include "common/transport/factory.h"

namespace rkv {

using client::Clock;
using client::ConnectionPool;
using client::Deadline;
using client::Routes;
using client::RoutingTable;
using client::ServerConnection;
using client::ServerEntry;
using client::SlotLease;
using std::to_string;

namespace {

// The longest wait between two attempts of a call.
constexpr std::chrono::milliseconds kBackoffMax{100};

// Connect errors worth retrying: the server is down, restarting, or was
// between accept and epoch publication.
bool RetryableConnectError(const Status& s) {
  return s.code() == StatusCode::kUnavailable || s.code() == StatusCode::kDeadlineExceeded ||
         s.code() == StatusCode::kAborted;
}

// The transport a server announces ("verbs" or "tcp").
transport::Kind KindOf(const ServerEntry& e) {
  return e.transport == "verbs" ? transport::Kind::kVerbs : transport::Kind::kTcp;
}

// Whether `pool` was made for the incarnation `e` describes.
bool Serves(const ConnectionPool& pool, const ServerEntry& e) {
  return pool.map_epoch() == e.epoch && pool.address() == e.data_address && pool.kind() == KindOf(e);
}

}  // namespace

Status Client::Impl::WithServer(std::shared_ptr<Routes> routes, size_t index, Deadline deadline, Operation op,
                                size_t slot, std::span<const std::string_view> keys) {
  Attempts a(std::move(routes), index, keys);
  while (true) {
    Status leased = a.server->up ? CheckLease(a, deadline) : Status::Ok();
    if (!leased.ok()) [[unlikely]] {
      a.last = std::move(leased);
      a.last_from_op = false;
    } else if (a.server->up) [[likely]] {
      ConnectionPool* pool = a.routes->pool(a.index);
      if (pool == nullptr) [[unlikely]] {
        auto attached = AttachPool(a);
        if (!attached.ok()) return Named(*a.server, attached.status());
        pool = *attached;
      }
      last_kind_.store(static_cast<int>(pool->kind()), std::memory_order_relaxed);
      SlotLease lease(*pool, slot);
      bool fresh = false;
      Status s = lease.EnsureConnected(request_, deadline, &fresh);
      if (s.ok() && fresh) {
        s = AcceptIncarnation(a, lease);
        // The connect may have outlasted the lease checked above.
        if (s.ok()) s = CheckLease(a, deadline);
      } else if (!s.ok() && !RetryableConnectError(s)) {
        return Named(*a.server, std::move(s));
      }
      if (s.ok()) [[likely]] {
        pool->NoteAttempt();
        s = op(lease.conn());
        if (s.ok()) [[likely]] return s;
        if (cluster() && MayResend(s, &a.min_version)) [[unlikely]] {
          // The server wrote nothing for the request: docs/design.md §5.6
          // gives the argument (client/refusal.h decides).
          a.last = std::move(s);
          a.last_from_op = false;
          // A refusal that names a map this client already holds (a
          // handover in progress, a server waiting for its lease) is
          // waited out with the backoff, not retried at once.
          a.refetch_now = a.min_version == 0 || a.min_version > a.routes->table().version();
        } else if (!lease.conn().broken()) {
          return Named(*a.server, std::move(s));
        } else {
          VLOG(1) << "rkv: connection to " << a.server->data_address << " broke: " << s;
          ReportUnresponsive(*a.server, "its connection broke: " + s.ToString());
          a.last = std::move(s);
          a.last_from_op = true;
        }
      } else if (s.code() != StatusCode::kDeadlineExceeded || a.last.ok()) {
        ReportUnresponsive(*a.server, "a connect failed: " + s.ToString());
        // (A connect cut short by the deadline says less than the error
        // before it.)
        a.last = std::move(s);
        a.last_from_op = false;
      }
    } else {
      a.last = Unavailable("marked DOWN in cluster map version " + to_string(a.routes->table().version()));
      a.last_from_op = false;
    }
    // The lease is released: refetch and back off without holding a slot.
    RKV_RETURN_IF_ERROR(NextAttempt(a, deadline));
  }
}

void Client::Impl::ReportUnresponsive(const ServerEntry& e, std::string_view why) {
  if (reporter_ != nullptr && e.epoch != 0) reporter_->Report(e.server_id, e.epoch, why);
}

Status Client::Impl::Named(const ServerEntry& e, Status s) const {
  if (!cluster()) return s;
  return s.WithContext(e.Describe());
}

Status Client::Impl::AcceptIncarnation(Attempts& a, SlotLease& lease) {
  const ServerEntry& e = *a.server;
  const uint64_t server_epoch = lease.conn().accept().epoch;
  const client::EpochRelation relation =
      e.pins_epoch() ? client::CompareEpoch(e.epoch, server_epoch) : client::EpochRelation::kMatch;
  switch (relation) {
    case client::EpochRelation::kMatch:
      NoteConnection(lease.conn());
      if (leases_ != nullptr) {
        // A wait on this server ends once the lease excludes it: it is
        // being failed over, and its shards will answer elsewhere. A long
        // wait is reported, so that the coordinator probes the server now.
        lease.conn().set_abandon_check([leases = leases_.get(), reporter = reporter_.get(), id = e.server_id,
                                        epoch = e.epoch](Clock::duration waited) {
          if (reporter != nullptr && epoch != 0 && waited >= client::UnresponsiveReporter::kReportAfter) [[unlikely]] {
            reporter->Report(id, epoch,
                             "no answer for " +
                                 std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(waited).count()) +
                                 " ms");
          }
          return leases->CheckNotExcluded(id);
        });
      }
      return Status::Ok();
    case client::EpochRelation::kServerNewer:
      // Restarted after this map was made: its new regions are in a
      // newer map.
      a.refetch_now = true;
      [[fallthrough]];
    case client::EpochRelation::kServerOlder:
      break;
  }
  lease.Drop();
  return Unavailable("the server answered with epoch " + to_string(server_epoch) + ", cluster map version " +
                     to_string(a.routes->table().version()) + " lists epoch " + to_string(e.epoch));
}

Status Client::Impl::NextAttempt(Attempts& a, Deadline deadline) {
  bool newer = control_ != nullptr && control_->MaybeRefetch(deadline);
  if (control_ != nullptr && a.min_version > Routing()->table().version()) {
    // A server named a map newer than ours: fetch it now, past the
    // refetch rate limit (bounded like MaybeRefetch's).
    const auto now = Clock::now();
    auto t = control_->Fetch(std::min(now + (deadline - now) / 2, now + std::chrono::milliseconds(500)));
    if (t.ok()) newer = (*t)->version() >= a.min_version;
  }
  newer = newer || a.refetch_now;
  a.refetch_now = false;
  const auto now = Clock::now();
  if (now >= deadline) return GiveUp(*a.server, std::move(a.last), a.last_from_op);
  if (!newer) {
    std::this_thread::sleep_for(std::min<Clock::duration>(a.backoff, deadline - now));
    a.backoff = std::min(a.backoff * 2, kBackoffMax);
  }
  auto routes = Routing();
  const RoutingTable& table = routes->table();
  const ServerEntry* e = nullptr;
  if (!a.keys.empty()) {
    const size_t owner = table.OwnerIndexOf(a.keys[0]);
    for (std::string_view k : a.keys.subspan(1)) {
      if (table.OwnerIndexOf(k) != owner) {
        return Status(StatusCode::kUnavailable,
                      "the keys of this call moved to several servers in cluster map version " +
                          to_string(table.version()) + " (last error: " + a.last.ToString() + ")",
                      Reason::kKeysMoved, table.version());
      }
    }
    e = &table.servers()[owner];
  } else {
    e = table.Find(a.server->server_id);
  }
  if (e == nullptr) {
    return Unavailable("server " + a.server->server_id + " is not in cluster map version " +
                       to_string(table.version()));
  }
  a.index = static_cast<size_t>(e - table.servers().data());
  a.server = e;
  a.routes = std::move(routes);
  retries_.fetch_add(1, std::memory_order_relaxed);
  return Status::Ok();
}

Status Client::Impl::CheckLease(Attempts& a, Deadline deadline) {
  if (leases_ == nullptr) return Status::Ok();
  return leases_->Check(a.routes->table().version(), a.server->server_id, deadline);
}

bool Client::Impl::MayResend(const Status& s, uint64_t* min_version) {
  const client::RefusalDecision d = client::DecideOnRefusal(s);
  if (!d.resend) return false;
  *min_version = std::max(*min_version, d.min_map_version);
  return true;
}

Status Client::Impl::GiveUp(const ServerEntry& e, Status last, bool from_op) const {
  if (from_op && last.code() == StatusCode::kDeadlineExceeded) return Named(e, std::move(last));
  if (cluster()) return Unavailable(e.Describe() + ": " + last.ToString());
  if (from_op) {
    return Unavailable("connection to " + e.data_address + " broke and the deadline passed: " + last.ToString());
  }
  return Unavailable("cannot connect to " + e.data_address + " within the deadline; last error: " +
                     last.ToString());
}

std::shared_ptr<Routes> Client::Impl::NewRoutes() {
  // The generation is read first: the table is that one or newer, and
  // routes stamped older than their table are only remade once more.
  const uint64_t generation = holder_.generation();
  auto routes = std::make_shared<Routes>(holder_.Current(), generation);
  std::shared_ptr<Routes> old;  // released outside the lock
  MutexLock lock(routes_mu_);
  if (routes_ != nullptr && routes_->generation() >= generation) return routes_;
  old = std::move(routes_);
  routes_ = routes;
  return routes;
}

StatusOr<ConnectionPool*> Client::Impl::AttachPool(const Attempts& a) {
  RKV_ASSIGN_OR_RETURN(std::shared_ptr<ConnectionPool> pool, PoolFor(*a.server));
  return a.routes->Attach(a.index, std::move(pool));
}

StatusOr<std::shared_ptr<ConnectionPool>> Client::Impl::PoolFor(const ServerEntry& e) {
  {
    MutexLock lock(pools_mu_);
    const auto it = pools_.find(e.server_id);
    if (it != pools_.end() && Serves(*it->second, e)) return it->second;
  }
  RKV_ASSIGN_OR_RETURN(transport::Transport * t, TransportFor(e));
  MutexLock lock(pools_mu_);
  std::shared_ptr<ConnectionPool>& p = pools_[e.server_id];
  if (!p || !Serves(*p, e)) {
    if (p) VLOG(1) << "rkv: " << e.Describe() << ": new incarnation, replacing its connections";
    // The cache keys entries by server identity (and epoch): a server
    // that changes address keeps its entries, which its epoch check
    // then drops if it restarted.
    p = std::make_shared<ConnectionPool>(
        t, e.data_address, e.epoch, options_.connections, location_cache_.get(),
        location_cache_ ? location_cache_->ServerTag(e.server_id) : 0);
  }
  return p;
}

StatusOr<transport::Transport*> Client::Impl::TransportFor(const ServerEntry& e) {
  const transport::Kind wanted = KindOf(e);
  if (fixed_kind_ && *fixed_kind_ != wanted) {
    return FailedPrecondition("the server speaks " + e.transport + " but ClientOptions.transport is " +
                              options_.transport);
  }
  if (options_.data_plane_tls && wanted != transport::Kind::kTcp) {
    return FailedPrecondition("the server at " + e.data_address + " speaks " + e.transport +
                              ", which has no TLS; ClientOptions.data_plane_tls needs the tcp transport");
  }
  MutexLock lock(transports_mu_);
  auto& t = transports_[wanted];
  if (!t) {
    transport::Options topts;
    // The servers' certificates are verified against the CA; the client's
    // own certificate is the control plane's alone (the data plane proves
    // the client's credential itself).
    if (options_.data_plane_tls) topts.tls.ca_file = options_.tls_ca_file;
    RKV_ASSIGN_OR_RETURN(t, transport::CreateTransport(wanted, topts));
  }
  last_kind_.store(static_cast<int>(wanted), std::memory_order_relaxed);
  return t.get();
}

StatusOr<BufferHandle> Client::Impl::RegisterBuffer(std::span<std::byte> memory) {
  std::vector<transport::Transport*> made;
  {
    MutexLock lock(transports_mu_);
    for (const auto& [kind, t] : transports_) made.push_back(t.get());
  }
  // Transports are never destroyed before the client: the pointers stay
  // valid outside the lock.
  RKV_ASSIGN_OR_RETURN(const uint64_t id, buffers_.Add(memory, made));
  return BufferHandle{id};
}

ClientCounters Client::Impl::Counters() {
  ClientCounters c;
  c.location_cache = LocationCacheStats();
  c.retries = retries_.load(std::memory_order_relaxed);
  c.get_into_in_place = get_into_in_place_.load(std::memory_order_relaxed);
  c.get_into_copied = get_into_copied_.load(std::memory_order_relaxed);
  MutexLock lock(pools_mu_);
  for (const auto& [id, pool] : pools_) c.attempts_by_server.emplace(id, pool->attempts());
  return c;
}

uint64_t Client::Impl::AttemptsOn(std::string_view server_id) {
  const auto routes = Routing();
  const ServerEntry* e = routes->table().Find(server_id);
  if (e == nullptr) return 0;
  MutexLock lock(pools_mu_);
  const auto it = pools_.find(e->server_id);
  if (it == pools_.end() || !Serves(*it->second, *e)) return 0;
  return it->second->attempts();
}

void Client::Impl::NoteConnection(const ServerConnection& conn) {
  const protocol::AcceptData& a = conn.accept();
  // Relaxed: independent values, read only to check sizes (the server
  // rechecks) and for reporting.
  max_key_bytes_.store(a.max_key_bytes, std::memory_order_relaxed);
  max_value_bytes_.store(a.max_value_bytes, std::memory_order_relaxed);
  epoch_.store(a.epoch, std::memory_order_relaxed);
}

std::string Client::Impl::TransportName() const {
  if (fixed_kind_) return transport::KindName(*fixed_kind_);
  const int k = last_kind_.load(std::memory_order_relaxed);
  return k < 0 ? "auto" : transport::KindName(static_cast<transport::Kind>(k));
}

}  // namespace rkv
