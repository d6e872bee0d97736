// Client: the public API over a routing table and one connection pool per
// server. A client of a coordinator routes by the cluster map that
// ControlClient keeps current; a client of one server (ClientOptions::
// server) routes by a table of that server alone (RoutingTable::ForServer),
// which owns every shard. Both go through the same routing (Routes), pools
// and retries (Client::Impl::WithServer); a client of a coordinator also
// holds a lease on its map (LeaseKeeper) and uses a server only under one
// that covers it (docs/design.md §8.4). A GET or MultiGet with
// ReadFrom::kAnyReplica starts on a replica (the shard's primary or a
// backup, taken in turn: NextReadTurn) and falls back to the primary
// (docs/design.md §4.3). What only a coordinator's map
// has (members, admin stats, map versions) fails with FAILED_PRECONDITION
// without one.
#include "rkv/client.h"

#include <glog/logging.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
#include <optional>
#include <random>
#include <thread>
#include <utility>

#include "client/cluster_map.h"
#include "client/connection_pool.h"
#include "client/control_client.h"
#include "client/lease_keeper.h"
#include "client/location_cache.h"
#include "client/refusal.h"
#include "client/routes.h"
#include "client/server_connection.h"
#include "common/clock.h"
#include "common/mutex.h"
#include "common/net_address.h"
#include "common/protocol.h"
#include "common/thread_annotations.h"
#include "common/token.h"
#include "common/transport/factory.h"
#include "common/transport/transport.h"
#include "proto/validation.h"

namespace rkv {

using client::Clock;
using client::ConnectionPool;
using client::Deadline;
using client::ReplicaEntry;
using client::Routes;
using client::RoutingTable;
using client::ServerConnection;
using client::ServerEntry;
using client::SlotLease;
using std::to_string;

namespace {

constexpr int kMaxConnections = 64;
constexpr char kDefaultServer[] = "127.0.0.1:7700";
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

// The calling thread's next turn among a shard's replicas (ReadFrom::
// kAnyReplica). A counter per thread rather than one per client: no cache
// line is written by every read of every thread, and a thread's
// consecutive reads still rotate over all the shard's replicas, so even one
// thread spreads its reads evenly. Each thread starts at a random turn, so
// that many threads that each read a little do not all start on the
// primary.
uint64_t NextReadTurn() {
  thread_local uint64_t turn = (uint64_t{std::random_device{}()} << 32) | std::random_device{}();
  return turn++;
}

// CallOptions::read_from names one of the enumerators.
Status CheckReadFrom(ReadFrom from) {
  if (from == ReadFrom::kPrimary || from == ReadFrom::kAnyReplica) [[likely]] return Status::Ok();
  return InvalidArgument("CallOptions.read_from is " + to_string(static_cast<int>(from)) +
                         ", expected ReadFrom::kPrimary or ReadFrom::kAnyReplica");
}

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
  m.zone = e.zone;
  m.backup_shards = e.backup_shards;
  m.syncing_shards = e.syncing_shards;
  m.draining = e.draining;
  return m;
}

}  // namespace

// Thread safety: every method may be called from any thread once Init*
// returned (Init* run in Connect, before the client is shared).
class Client::Impl {
 public:
  explicit Impl(const ClientOptions& options)
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

  ~Impl() {
    // The watch thread goes first: nothing may install maps while the
    // pools are torn down; the pools go before the transports they use.
    // The lease thread goes before the control client it calls.
    leases_.reset();
    control_.reset();
    {
      MutexLock lock(routes_mu_);
      routes_.reset();
    }
    MutexLock lock(pools_mu_);
    pools_.clear();
  }

  // ---- Setup (Connect).

  // A client of one server: installs the table of the server alone and
  // opens every connection of its pool now (retrying within the timeout
  // while the server is unreachable), so that Connect reports an
  // unreachable server, a refused token or an incompatible table.
  Status InitServer(transport::Kind kind, std::string reason) {
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

  // A client of a coordinator: fetches the first complete map (retrying
  // within the timeout while the coordinator is unreachable or the cluster
  // incomplete), then starts the watch. Servers are connected on first use.
  Status InitCluster(std::optional<transport::Kind> fixed_kind, std::string reason) {
    fixed_kind_ = fixed_kind;
    transport_reason_ = std::move(reason);
    control_ = std::make_unique<client::ControlClient>(options_.coordinator, options_.token, &holder_);
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
    client::ControlClient* const control = control_.get();
    leases_ = std::make_unique<client::LeaseKeeper>(
        [control](uint64_t version, Deadline d) { return control->RenewLease(version, d); },
        [control](Deadline d) {
          auto t = control->Fetch(d);
          return t.ok() ? Status::Ok() : t.status();
        },
        [this] {
          const auto table = holder_.Current();
          return table != nullptr ? table->version() : uint64_t{0};
        });
    // The first lease, so that the first calls need not wait for one; a
    // failure here is not Connect's: each call renews (or waits) on its own.
    const Status leased = leases_->Renew(deadline);
    if (!leased.ok()) VLOG(1) << "rkv: no lease at connect (calls will renew): " << leased;
    leases_->Start();
    return Status::Ok();
  }

  // ---- What a call needs.

  // Whether a coordinator feeds the routing table.
  bool cluster() const { return control_ != nullptr; }

  // The routes of the newest table: a call takes them once and routes by
  // them.
  std::shared_ptr<Routes> Routing() EXCLUDES(routes_mu_) {
    std::shared_ptr<Routes> routes;
    {
      MutexLock lock(routes_mu_);
      routes = routes_;
    }
    if (routes == nullptr || routes->generation() != holder_.generation()) [[unlikely]] return NewRoutes();
    return routes;
  }

  Deadline DeadlineOf(const CallOptions& call) const {
    return SteadyNow() + (call.timeout.count() > 0 ? call.timeout : options_.timeout);
  }

  // The limits every server of `table` accepts: the table's when it knows
  // them (a coordinator's map lists every server's), else the newest
  // connection's.
  uint32_t MaxKeyBytes(const RoutingTable& table) const {
    const uint32_t listed = table.min_max_key_bytes();
    return listed != 0 ? listed : max_key_bytes_.load(std::memory_order_relaxed);
  }
  uint32_t MaxValueBytes(const RoutingTable& table) const {
    const uint32_t listed = table.min_max_value_bytes();
    return listed != 0 ? listed : max_value_bytes_.load(std::memory_order_relaxed);
  }

  Status CheckKey(const RoutingTable& table, std::string_view key) const {
    const uint32_t max = MaxKeyBytes(table);
    if (!key.empty() && key.size() <= max) [[likely]] return Status::Ok();
    return BadKey(key, max);
  }
  Status CheckValue(const RoutingTable& table, std::string_view value) const {
    const uint32_t max = MaxValueBytes(table);
    if (value.size() > max) {
      return InvalidArgument("value of " + to_string(value.size()) + " bytes: values must be 0.." +
                             to_string(max) + " bytes (the server's max_value_bytes)");
    }
    return Status::Ok();
  }

  // Runs `fn(connection)` on a connection to the server that owns `key` in
  // the table of `routes` (WithServer).
  template <typename Fn>
  Status WithKey(std::shared_ptr<Routes> routes, std::string_view key, Deadline deadline, Fn&& fn) {
    const size_t owner = routes->table().OwnerIndexOf(key);
    return WithServer(std::move(routes), owner, deadline, fn, ConnectionPool::kAnySlot,
                      std::span<const std::string_view>(&key, 1));
  }

  // The server a read of `key` starts on: its owner (the shard's primary),
  // or for kAnyReplica the replica of turn `turn` (RoutingTable::
  // ReplicaIndexOf). Every retry goes to the owner (WithServer).
  static size_t ReadIndexOf(const RoutingTable& table, std::string_view key, ReadFrom from, uint64_t turn) {
    if (from == ReadFrom::kPrimary) [[likely]] return table.OwnerIndexOf(key);
    return table.ReplicaIndexOf(key, turn);
  }

  // Client::LocationCacheStats.
  LocationCacheStatsInfo LocationCacheStats() const {
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

  // How many attempts this client ran on `server_id`'s current incarnation
  // (Client::AttemptsOn).
  uint64_t AttemptsOn(std::string_view server_id) EXCLUDES(pools_mu_) {
    const auto routes = Routing();
    const ServerEntry* e = routes->table().Find(server_id);
    if (e == nullptr) return 0;
    MutexLock lock(pools_mu_);
    const auto it = pools_.find(e->server_id);
    if (it == pools_.end() || !Serves(*it->second, *e)) return 0;
    return it->second->attempts();
  }

  // Runs `fn(connection)` on a connection to server `index` of the table of
  // `routes`, from a slot of its pool (any free one, or slot `slot`). `fn`
  // returns a Status; a non-OK one with the connection intact is the call's
  // answer.
  //
  // A server marked DOWN, a failed connect, a broken connection or a
  // server epoch other than the one the table pins make the call retry,
  // with backoff, until `deadline`: a client of a coordinator refetches
  // the map first (rate-limited) and every attempt finds the server again,
  // by id, in the newest table (shards stay with their server id across
  // restarts, so the id is re-resolved; when `keys` are given, the
  // server that owns them in the newest table is, since a failover moves
  // shards to another server). `index` need not own the `keys` (a read of
  // any replica): the first attempt goes to `index`, every retry to their
  // owner. A client of a
  // coordinator prefixes errors with the server ("server ID (epoch E,
  // HOST:PORT): "); the errors of a client of one server name its address.
  //
  // A client of a coordinator uses a server only under a lease (§8.4) on
  // the table the call routes by that does not exclude it (LeaseKeeper::
  // Check, before connecting and again after a fresh connect): without
  // one the call waits and retries like the above. A write refused with a
  // reason that says nothing was applied is retried after a refetch of at
  // least the map version the refusal names (MayResend).
  template <typename Fn>
  Status WithServer(std::shared_ptr<Routes> routes, size_t index, Deadline deadline, Fn&& fn,
                    size_t slot = ConnectionPool::kAnySlot, std::span<const std::string_view> keys = {}) {
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
          s = fn(lease.conn());
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
            a.last = std::move(s);
            a.last_from_op = true;
          }
        } else if (s.code() != StatusCode::kDeadlineExceeded || a.last.ok()) {
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

  // ---- PUT and DELETE.

  // One PUT or DELETE call's request, as its attempts send it.
  struct PendingWrite {
    protocol::Op op = protocol::Op::kPut;
    uint64_t request_id = 0;  // drawn at the first attempt, kept by every resend
    bool sent = false;        // some attempt posted it
    uint64_t sent_epoch = 0;  // the server incarnation it was posted to
    std::string sent_address;  // and that server's data address
    bool outcome_reported = false;  // the call's error already says the outcome is unknown
  };

  // One attempt of `w` on `conn`: resends it, with its request id, while
  // `conn` reaches the incarnation it was sent to (whose replay cache
  // answers a request it applied with the original reply); refuses to send
  // it to any other incarnation once it was sent, since a restarted server
  // remembers nothing: UNAVAILABLE, outcome unknown. Nor is it sent to
  // another server (the key's shard moved there in a failover) once sent.
  //
  // A write refused with a reason that says nothing was applied
  // (DecideOnRefusal, client/refusal.h) is marked unsent, so that the call
  // may send it to the new primary; docs/design.md §5.6 gives the argument
  // for why that resend is safe.
  Status WriteAttempt(ServerConnection& conn, PendingWrite& w, std::string_view key, std::string_view value,
                      Deadline deadline, client::WriteResult* result) {
    const uint64_t epoch = conn.accept().epoch;
    RKV_RETURN_IF_ERROR(CheckResend(conn, w));
    if (w.request_id == 0) w.request_id = next_request_id_.fetch_add(1, std::memory_order_relaxed);
    bool posted = false;
    auto r = conn.Write(w.op, key, value, w.request_id, deadline, &posted);
    if (posted && !w.sent) {
      w.sent = true;
      w.sent_epoch = epoch;
      w.sent_address = conn.address();
    }
    if (!r.ok()) return r.status();
    uint64_t named_version = 0;
    if (cluster() && MayResend(r->status, &named_version)) [[unlikely]] {
      w.sent = false;  // applied nowhere (see above)
      return r->status;  // WithServer refetches and retries
    }
    *result = std::move(*r);
    return Status::Ok();
  }

  // The error of a write call `w` that got no reply: says so when the
  // request was sent (it may or may not have been applied).
  static Status WriteFailed(const PendingWrite& w, Status s) {
    if (!w.sent || w.outcome_reported) return s;
    return Status(s.code(), s.message() + " (the request was sent and its reply lost: outcome unknown)",
                  Reason::kOutcomeUnknown, s.map_version());
  }

  // Whether `w` may be sent on `conn` (WriteAttempt's rule): not once sent
  // elsewhere or to another incarnation (UNAVAILABLE, outcome unknown).
  static Status CheckResend(const ServerConnection& conn, PendingWrite& w) {
    if (w.sent && conn.address() != w.sent_address) [[unlikely]] {
      w.outcome_reported = true;
      return Status(StatusCode::kUnavailable,
                    std::string(w.op == protocol::Op::kDelete ? "DELETE" : "PUT") + " outcome unknown: its reply from " +
                        w.sent_address + " was lost and its shard is now served elsewhere; not resent",
                    Reason::kOutcomeUnknown);
    }
    if (w.sent && conn.accept().epoch != w.sent_epoch) [[unlikely]] {
      w.outcome_reported = true;
      return Status(StatusCode::kUnavailable,
                    std::string(w.op == protocol::Op::kDelete ? "DELETE" : "PUT") +
                        " outcome unknown: its reply was lost and the server restarted (epoch " +
                        to_string(w.sent_epoch) + " -> " + to_string(conn.accept().epoch) +
                        "), so it cannot tell whether it applied the request; not resent",
                    Reason::kOutcomeUnknown);
    }
    return Status::Ok();
  }

  // ---- MultiPut and MultiDelete.

  // One item of a MultiPut or MultiDelete, as the call's attempts send it.
  struct BatchItem {
    PendingWrite write;
    std::string_view key;
    std::string_view value;
    bool done = false;
    Status error;                // when done: the item's failure, else OK
    client::WriteResult result;  // when done without error: the reply
  };

  // One attempt of the items of `items` not done yet, as one batch on
  // `conn` (ServerConnection::WriteBatch), each under WriteAttempt's
  // rules: an item that may not be resent here, or is over this
  // connection's limits, is done with its error; one answered is done with
  // the reply. Returns OK when every item is done; the connection's error
  // when it broke (WithServer retries the rest); a refusal that lets the
  // items be resent when one came (MayResend: those items are marked
  // unsent, and WithServer refetches and retries).
  Status BatchAttempt(ServerConnection& conn, std::span<BatchItem* const> items, Deadline deadline) {
    const uint64_t epoch = conn.accept().epoch;
    std::vector<client::WriteOp> ops;
    std::vector<BatchItem*> sent_items;
    ops.reserve(items.size());
    sent_items.reserve(items.size());
    for (BatchItem* item : items) {
      if (item->done) continue;
      if (item->key.size() > conn.accept().max_key_bytes || item->value.size() > conn.accept().max_value_bytes) {
        item->done = true;
        item->error = InvalidArgument("key of " + to_string(item->key.size()) + " bytes or value of " +
                                      to_string(item->value.size()) + " bytes over the server's limits (" +
                                      to_string(conn.accept().max_key_bytes) + ", " +
                                      to_string(conn.accept().max_value_bytes) + ")");
        continue;
      }
      if (Status resend = CheckResend(conn, item->write); !resend.ok()) {
        item->done = true;
        item->error = std::move(resend);
        continue;
      }
      PendingWrite& w = item->write;
      if (w.request_id == 0) w.request_id = next_request_id_.fetch_add(1, std::memory_order_relaxed);
      ops.push_back(client::WriteOp{w.op, item->key, item->value, w.request_id});
      sent_items.push_back(item);
    }
    if (ops.empty()) return Status::Ok();
    std::vector<client::WriteOutcome> outcomes(ops.size());
    const Status s = conn.WriteBatch(ops, outcomes, deadline);
    Status refused;
    for (size_t j = 0; j < ops.size(); ++j) {
      BatchItem& item = *sent_items[j];
      client::WriteOutcome& o = outcomes[j];
      if (o.sent && !item.write.sent) {
        item.write.sent = true;
        item.write.sent_epoch = epoch;
        item.write.sent_address = conn.address();
      }
      if (!o.replied) continue;
      uint64_t named_version = 0;
      if (cluster() && MayResend(o.result.status, &named_version)) [[unlikely]] {
        item.write.sent = false;  // applied nowhere (WriteAttempt)
        if (refused.ok()) refused = o.result.status;
        continue;
      }
      item.done = true;
      item.result = std::move(o.result);
    }
    if (!s.ok()) return s;
    return refused;
  }

  // Runs the items of `items` not done yet, grouped by the server that
  // owns them, one WithServer call per group; a group whose keys a new map
  // spreads over several servers (a failover) is grouped again by the
  // newest map, within the deadline. The items a group could not finish
  // get its error (WriteFailed).
  void RunBatches(std::span<BatchItem> items, Deadline deadline) {
    std::vector<std::string_view> keys;
    std::vector<BatchItem*> group;
    bool regroup = true;
    while (regroup) {
      regroup = false;
      const auto routes = Routing();
      std::map<size_t, std::vector<size_t>> groups;  // owner -> item positions
      for (size_t i = 0; i < items.size(); ++i) {
        if (!items[i].done) groups[routes->table().OwnerIndexOf(items[i].key)].push_back(i);
      }
      for (const auto& [owner, positions] : groups) {
        keys.clear();
        group.clear();
        for (size_t p : positions) {
          keys.push_back(items[p].key);
          group.push_back(&items[p]);
        }
        const Status s = WithServer(
            routes, owner, deadline, [&](ServerConnection& conn) { return BatchAttempt(conn, group, deadline); },
            ConnectionPool::kAnySlot, keys);
        if (client::KeysMoved(s) && Clock::now() < deadline) {
          regroup = true;  // its items stay to be grouped by the newest map
          continue;
        }
        for (BatchItem* item : group) {
          if (item->done) continue;
          item->done = true;
          item->error = WriteFailed(item->write, s.ok() ? Internal("write left unanswered") : s);
        }
      }
    }
  }

  // ---- What the public accessors report.

  void NoteConnection(const ServerConnection& conn) {
    const protocol::AcceptData& a = conn.accept();
    // Relaxed: independent values, read only to check sizes (the server
    // rechecks) and for reporting.
    max_key_bytes_.store(a.max_key_bytes, std::memory_order_relaxed);
    max_value_bytes_.store(a.max_value_bytes, std::memory_order_relaxed);
    epoch_.store(a.epoch, std::memory_order_relaxed);
  }

  uint64_t ServerEpoch() const { return epoch_.load(std::memory_order_relaxed); }

  std::string TransportName() const {
    if (fixed_kind_) return transport::KindName(*fixed_kind_);
    const int k = last_kind_.load(std::memory_order_relaxed);
    return k < 0 ? "auto" : transport::KindName(static_cast<transport::Kind>(k));
  }
  const std::string& TransportReason() const { return transport_reason_; }

  // ---- Cluster only (callers check cluster()).

  Status RefreshClusterMap(Deadline deadline) {
    auto t = control_->Fetch(deadline);
    return t.ok() ? Status::Ok() : t.status();
  }

  // The cached map's entry of `server_id` (a copy: the map may change),
  // or NOT_FOUND.
  StatusOr<ServerEntry> AdminOf(std::string_view server_id) {
    const auto routes = Routing();
    const ServerEntry* e = routes->table().Find(server_id);
    if (e == nullptr) {
      return NotFound("no server '" + control::Printable(server_id) + "' in cluster map version " +
                      to_string(routes->table().version()));
    }
    return *e;
  }

  StatusOr<ServerStatsInfo> ServerStats(std::string_view server_id, Deadline deadline) {
    const auto routes = Routing();
    const ServerEntry* e = routes->table().Find(server_id);
    if (e == nullptr) {
      return NotFound("no server '" + control::Printable(server_id) + "' in cluster map version " +
                      to_string(routes->table().version()));
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
    out.catchup_records_listed = r->catchup_records_listed();
    out.catchup_values_fetched = r->catchup_values_fetched();
    out.syncing_shards = r->syncing_shards();
    out.catchup_records_served = r->catchup_records_served();
    out.polling_threads = r->polling_threads();
    out.bytes_per_connection = r->bytes_per_connection();
    out.store_unwritten_writes = r->store_unwritten_writes();
    out.store_unwritten_bytes = r->store_unwritten_bytes();
    return out;
  }

  // ---- Cluster operations (kvctl verify and drain).

  StatusOr<ServerShardChecksums> ShardChecksums(std::string_view server_id, std::span<const uint32_t> shards,
                                                Deadline deadline) {
    RKV_ASSIGN_OR_RETURN(const ServerEntry entry, AdminOf(server_id));
    auto r = control_->ShardChecksums(entry.admin_address, std::vector<uint32_t>(shards.begin(), shards.end()),
                                      deadline);
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

  StatusOr<ShardListingInfo> ListShard(std::string_view server_id, uint32_t shard, Deadline deadline) {
    RKV_ASSIGN_OR_RETURN(const ServerEntry entry, AdminOf(server_id));
    auto r = control_->ListShard(entry.admin_address, shard, deadline);
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

  StatusOr<DrainInfo> Drain(std::string_view server_id, Deadline deadline) {
    auto r = control_->Drain(std::string(server_id), deadline);
    if (!r.ok()) return r.status();
    return DrainInfo{r->map_version(), r->roles_to_move()};
  }

 private:
  // What a call has seen over its attempts on one server.
  struct Attempts {
    Attempts(std::shared_ptr<Routes> r, size_t i, std::span<const std::string_view> k)
        : routes(std::move(r)), index(i), server(&routes->table().servers()[i]), keys(k) {}
    std::shared_ptr<Routes> routes;  // the newest the call has routed by
    size_t index;                    // of the server in routes->table()
    const ServerEntry* server;       // routes->table().servers()[index]
    // The keys the call is for (all owned by one server when it began:
    // `server`, or the primary of their shard when `server` is another
    // replica of it), or none: then the server is found again by id.
    std::span<const std::string_view> keys;
    uint64_t min_version = 0;  // a server named this map version: wait for it
    std::chrono::milliseconds backoff{1};
    Status last;                // what failed last
    bool last_from_op = false;  // `last` came from fn, not from reaching the server
    bool refetch_now = false;   // the server is newer than the table: refetch without waiting
  };

  [[gnu::cold, gnu::noinline]] static Status BadKey(std::string_view key, uint32_t max) {
    return InvalidArgument("key of " + to_string(key.size()) + " bytes: keys must be 1.." + to_string(max) +
                           " bytes (the server's max_key_bytes)");
  }

  // `s` as a call reports it: a client of a coordinator names the server.
  Status Named(const ServerEntry& e, Status s) const {
    if (!cluster()) return s;
    return s.WithContext(e.Describe());
  }

  // A new connection of `lease` answered for a.server: kept (and its limits
  // and epoch noted) when it is the incarnation the table pins, or the
  // table pins none; otherwise closed, with UNAVAILABLE saying which epoch
  // answered (and, when the server is newer than the table, a refetch
  // requested).
  [[gnu::noinline]] Status AcceptIncarnation(Attempts& a, SlotLease& lease) {
    const ServerEntry& e = *a.server;
    const uint64_t server_epoch = lease.conn().accept().epoch;
    const client::EpochRelation relation =
        e.pins_epoch() ? client::CompareEpoch(e.epoch, server_epoch) : client::EpochRelation::kMatch;
    switch (relation) {
      case client::EpochRelation::kMatch:
        NoteConnection(lease.conn());
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

  // Between two attempts: refetches the map (a client of a coordinator),
  // returns the call's error once `deadline` passed (GiveUp), else waits
  // the backoff (not when a newer map arrived) and finds the server in the
  // newest table (UNAVAILABLE when it is no longer listed).
  [[gnu::noinline]] Status NextAttempt(Attempts& a, Deadline deadline) {
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
    return Status::Ok();
  }

  // Whether the call of `a` may use a.server now (LeaseKeeper::Check on the
  // table it routes by); always for a client of one server.
  Status CheckLease(Attempts& a, Deadline deadline) {
    if (leases_ == nullptr) return Status::Ok();
    return leases_->Check(a.routes->table().version(), a.server->server_id, deadline);
  }

  // Whether `s`, a server's answer to a write, lets the call resend it
  // (client::DecideOnRefusal); raises *min_version to the map version it
  // names.
  static bool MayResend(const Status& s, uint64_t* min_version) {
    const client::RefusalDecision d = client::DecideOnRefusal(s);
    if (!d.resend) return false;
    *min_version = std::max(*min_version, d.min_map_version);
    return true;
  }

  // The error of a call whose deadline passed while its attempts on `e`
  // kept failing; `last` is the last failure, from the operation itself
  // when `from_op`, else from reaching the server.
  Status GiveUp(const ServerEntry& e, Status last, bool from_op) const {
    if (from_op && last.code() == StatusCode::kDeadlineExceeded) return Named(e, std::move(last));
    if (cluster()) return Unavailable(e.Describe() + ": " + last.ToString());
    if (from_op) {
      return Unavailable("connection to " + e.data_address + " broke and the deadline passed: " + last.ToString());
    }
    return Unavailable("cannot connect to " + e.data_address + " within the deadline; last error: " +
                       last.ToString());
  }

  // The newest table's routes, made when a table came since the current
  // ones were (or at the first call).
  [[gnu::noinline]] std::shared_ptr<Routes> NewRoutes() EXCLUDES(routes_mu_) {
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

  // Attaches to a.routes the pool of a.server's incarnation (PoolFor).
  [[gnu::noinline]] StatusOr<ConnectionPool*> AttachPool(const Attempts& a) {
    RKV_ASSIGN_OR_RETURN(std::shared_ptr<ConnectionPool> pool, PoolFor(*a.server));
    return a.routes->Attach(a.index, std::move(pool));
  }

  // The pool for the incarnation `e` describes: the existing one while the
  // table lists the same epoch, address and transport, else a new one
  // (calls that still hold the old one finish on it).
  StatusOr<std::shared_ptr<ConnectionPool>> PoolFor(const ServerEntry& e) EXCLUDES(pools_mu_) {
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

  // The transport to reach a server that announces `e.transport` (made on
  // first use; FAILED_PRECONDITION when ClientOptions.transport names the
  // other one).
  StatusOr<transport::Transport*> TransportFor(const ServerEntry& e) EXCLUDES(transports_mu_) {
    const transport::Kind wanted = KindOf(e);
    if (fixed_kind_ && *fixed_kind_ != wanted) {
      return FailedPrecondition("the server speaks " + e.transport + " but ClientOptions.transport is " +
                                options_.transport);
    }
    MutexLock lock(transports_mu_);
    auto& t = transports_[wanted];
    if (!t) {
      RKV_ASSIGN_OR_RETURN(t, transport::CreateTransport(wanted, transport::Options{}));
    }
    last_kind_.store(static_cast<int>(wanted), std::memory_order_relaxed);
    return t.get();
  }

  const ClientOptions options_;
  // Null when ClientOptions::location_cache_bytes is 0. Declared before
  // the pools, whose connections use it: destroyed after them.
  const std::unique_ptr<client::LocationCache> location_cache_;
  protocol::ConnectRequestData request_;
  // Request ids of PUTs and DELETEs: unique for request_.client_id across
  // every connection, as the servers' replay caches need.
  std::atomic<uint64_t> next_request_id_{1};

  // Set by Init* and read-only afterwards.
  std::optional<transport::Kind> fixed_kind_;  // the transport of every server, unless "auto" with a coordinator
  std::string transport_reason_;

  // What the newest connection announced, and the transport last used.
  std::atomic<uint32_t> max_key_bytes_{0};
  std::atomic<uint32_t> max_value_bytes_{0};
  std::atomic<uint64_t> epoch_{0};
  std::atomic<int> last_kind_{-1};

  client::MapHolder holder_;
  std::unique_ptr<client::ControlClient> control_;  // null for a client of one server
  std::unique_ptr<client::LeaseKeeper> leases_;     // null for a client of one server

  // Declaration order matters: the pools (whose connections use the
  // transports) are destroyed before transports_.
  Mutex transports_mu_;
  std::map<transport::Kind, std::unique_ptr<transport::Transport>> transports_ GUARDED_BY(transports_mu_);
  // One pool per server id: its newest incarnation's.
  Mutex pools_mu_;
  std::map<std::string, std::shared_ptr<ConnectionPool>> pools_ GUARDED_BY(pools_mu_);
  // The routes calls take (Routing).
  Mutex routes_mu_;
  std::shared_ptr<Routes> routes_ GUARDED_BY(routes_mu_);
};

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
  auto impl = std::make_unique<Impl>(effective);
  RKV_RETURN_IF_ERROR(impl->InitServer(kind, std::move(why)));
  return std::unique_ptr<Client>(new Client(std::move(impl)));
}

Client::Client(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Client::~Client() = default;

Status Client::Get(std::string_view key, std::string* value, uint64_t* version,
                   const CallOptions& call) {
  if (value == nullptr) return InvalidArgument("Get: no string to put the value in (value is null)");
  value->clear();
  auto routes = impl_->Routing();
  RKV_RETURN_IF_ERROR(impl_->CheckKey(routes->table(), key));
  RKV_RETURN_IF_ERROR(CheckReadFrom(call.read_from));
  const Deadline deadline = impl_->DeadlineOf(call);
  client::LookupResult result;
  result.value.swap(*value);  // the lookup copies the value into the caller's memory
  const size_t reader = Impl::ReadIndexOf(routes->table(), key, call.read_from,
                                          call.read_from == ReadFrom::kPrimary ? 0 : NextReadTurn());
  Status s = impl_->WithServer(
      std::move(routes), reader, deadline,
      [&](ServerConnection& conn) {
        return conn.Lookup(std::span<const std::string_view>(&key, 1),
                           std::span<client::LookupResult>(&result, 1), deadline);
      },
      ConnectionPool::kAnySlot, std::span<const std::string_view>(&key, 1));
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
  auto routes = impl_->Routing();
  RKV_RETURN_IF_ERROR(impl_->CheckKey(routes->table(), key));
  RKV_RETURN_IF_ERROR(impl_->CheckValue(routes->table(), value));
  const Deadline deadline = impl_->DeadlineOf(call);
  client::WriteResult result;
  Impl::PendingWrite write;
  write.op = protocol::Op::kPut;
  const Status s = impl_->WithKey(std::move(routes), key, deadline, [&](ServerConnection& conn) -> Status {
    // The limits may differ on a restarted server; the check above used the
    // newest connection's (or the map's), this one uses this connection's.
    if (key.size() > conn.accept().max_key_bytes || value.size() > conn.accept().max_value_bytes) {
      return InvalidArgument("key of " + to_string(key.size()) + " bytes or value of " +
                             to_string(value.size()) + " bytes over the server's limits (" +
                             to_string(conn.accept().max_key_bytes) + ", " +
                             to_string(conn.accept().max_value_bytes) + ")");
    }
    return impl_->WriteAttempt(conn, write, key, value, deadline, &result);
  });
  if (!s.ok()) return Impl::WriteFailed(write, s);
  if (!result.status.ok()) return result.status;
  return result.version;
}

Status Client::Delete(std::string_view key, const CallOptions& call) {
  auto routes = impl_->Routing();
  RKV_RETURN_IF_ERROR(impl_->CheckKey(routes->table(), key));
  const Deadline deadline = impl_->DeadlineOf(call);
  client::WriteResult result;
  Impl::PendingWrite write;
  write.op = protocol::Op::kDelete;
  const Status s = impl_->WithKey(std::move(routes), key, deadline, [&](ServerConnection& conn) -> Status {
    if (key.size() > conn.accept().max_key_bytes) {
      return InvalidArgument("key of " + to_string(key.size()) + " bytes: over the server's max_key_bytes " +
                             to_string(conn.accept().max_key_bytes));
    }
    return impl_->WriteAttempt(conn, write, key, {}, deadline, &result);
  });
  if (!s.ok()) return Impl::WriteFailed(write, s);
  return result.status;
}

std::vector<StatusOr<std::string>> Client::MultiGet(std::span<const std::string> keys,
                                                    const CallOptions& call) {
  const Deadline deadline = impl_->DeadlineOf(call);
  const auto routes = impl_->Routing();
  const RoutingTable& table = routes->table();
  std::vector<client::LookupResult> results(keys.size());
  std::vector<Status> group_status(keys.size());  // per key: its group's call status
  const Status read_from = CheckReadFrom(call.read_from);
  for (size_t i = 0; i < keys.size(); ++i) {
    Status s = read_from.ok() ? impl_->CheckKey(table, keys[i]) : read_from;
    if (!s.ok()) {
      results[i].done = true;
      results[i].status = std::move(s);
    }
  }
  // Group the keys by the server read and their owner (one table for
  // all), run each group on the server read, results land back at the
  // keys' positions. A group's keys share an owner, so that a retry (on the
  // owner) is one call. With kAnyReplica, one turn for the call: each
  // shard's keys go to one replica.
  const uint64_t turn = call.read_from == ReadFrom::kPrimary ? 0 : NextReadTurn();
  // (server read, owner) -> key positions
  std::map<std::pair<size_t, size_t>, std::vector<size_t>> groups;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (results[i].done) continue;
    groups[{Impl::ReadIndexOf(table, keys[i], call.read_from, turn), table.OwnerIndexOf(keys[i])}].push_back(i);
  }
  for (const auto& [servers, positions] : groups) {
    const size_t server = servers.first;
    std::vector<std::string_view> views;
    std::vector<client::LookupResult> group(positions.size());
    views.reserve(positions.size());
    for (size_t p : positions) views.push_back(keys[p]);
    const Status s = impl_->WithServer(
        routes, server, deadline, [&](ServerConnection& conn) { return conn.Lookup(views, group, deadline); },
        ConnectionPool::kAnySlot, views);
    for (size_t j = 0; j < positions.size(); ++j) {
      results[positions[j]] = std::move(group[j]);
      group_status[positions[j]] = s;
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

std::vector<StatusOr<uint64_t>> Client::MultiPut(std::span<const KeyValueView> items, const CallOptions& call) {
  const Deadline deadline = impl_->DeadlineOf(call);
  std::vector<Impl::BatchItem> batch(items.size());
  {
    const auto routes = impl_->Routing();
    for (size_t i = 0; i < items.size(); ++i) {
      Impl::BatchItem& b = batch[i];
      b.write.op = protocol::Op::kPut;
      b.key = items[i].key;
      b.value = items[i].value;
      b.error = impl_->CheckKey(routes->table(), b.key);
      if (b.error.ok()) b.error = impl_->CheckValue(routes->table(), b.value);
      b.done = !b.error.ok();
    }
  }
  impl_->RunBatches(batch, deadline);
  std::vector<StatusOr<uint64_t>> out;
  out.reserve(items.size());
  for (Impl::BatchItem& b : batch) {
    if (!b.error.ok()) {
      out.emplace_back(std::move(b.error));
    } else if (!b.result.status.ok()) {
      out.emplace_back(std::move(b.result.status));
    } else {
      out.emplace_back(b.result.version);
    }
  }
  return out;
}

std::vector<Status> Client::MultiDelete(std::span<const std::string> keys, const CallOptions& call) {
  const Deadline deadline = impl_->DeadlineOf(call);
  std::vector<Impl::BatchItem> batch(keys.size());
  {
    const auto routes = impl_->Routing();
    for (size_t i = 0; i < keys.size(); ++i) {
      Impl::BatchItem& b = batch[i];
      b.write.op = protocol::Op::kDelete;
      b.key = keys[i];
      b.error = impl_->CheckKey(routes->table(), b.key);
      b.done = !b.error.ok();
    }
  }
  impl_->RunBatches(batch, deadline);
  std::vector<Status> out;
  out.reserve(keys.size());
  for (Impl::BatchItem& b : batch) out.push_back(!b.error.ok() ? std::move(b.error) : std::move(b.result.status));
  return out;
}

uint64_t Client::AttemptsOn(std::string_view server_id) const { return impl_->AttemptsOn(server_id); }
LocationCacheStatsInfo Client::LocationCacheStats() const { return impl_->LocationCacheStats(); }

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

StatusOr<std::vector<MemberInfo>> Client::Members() const {
  if (!impl_->cluster()) return FailedPrecondition("Members needs a client connected through a coordinator");
  const auto routes = impl_->Routing();
  std::vector<MemberInfo> out;
  out.reserve(routes->table().servers().size());
  for (const ServerEntry& e : routes->table().servers()) out.push_back(ToMember(e));
  return out;
}

StatusOr<ClusterInfo> Client::Cluster() const {
  if (!impl_->cluster()) return FailedPrecondition("Cluster needs a client connected through a coordinator");
  const auto routes = impl_->Routing();
  const RoutingTable& table = routes->table();
  ClusterInfo out;
  out.map_version = table.version();
  out.replication_factor = table.replication_factor();
  out.members.reserve(table.servers().size());
  for (const ServerEntry& e : table.servers()) out.members.push_back(ToMember(e));
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
  return ShardOf(key, impl_->Routing()->table().shard_count());
}

StatusOr<ServerStatsInfo> Client::ServerStats(std::string_view server_id, const CallOptions& call) {
  if (!impl_->cluster()) return FailedPrecondition("ServerStats needs a client connected through a coordinator");
  return impl_->ServerStats(server_id, impl_->DeadlineOf(call));
}

Status Client::RefreshClusterMap(const CallOptions& call) {
  if (!impl_->cluster()) return FailedPrecondition("RefreshClusterMap needs a client connected through a coordinator");
  return impl_->RefreshClusterMap(impl_->DeadlineOf(call));
}

StatusOr<ServerShardChecksums> Client::ShardChecksums(std::string_view server_id, std::span<const uint32_t> shards,
                                                      const CallOptions& call) {
  if (!impl_->cluster()) return FailedPrecondition("ShardChecksums needs a client connected through a coordinator");
  return impl_->ShardChecksums(server_id, shards, impl_->DeadlineOf(call));
}

StatusOr<ShardListingInfo> Client::ListShard(std::string_view server_id, uint32_t shard, const CallOptions& call) {
  if (!impl_->cluster()) return FailedPrecondition("ListShard needs a client connected through a coordinator");
  return impl_->ListShard(server_id, shard, impl_->DeadlineOf(call));
}

StatusOr<DrainInfo> Client::Drain(std::string_view server_id, const CallOptions& call) {
  if (!impl_->cluster()) return FailedPrecondition("Drain needs a client connected through a coordinator");
  return impl_->Drain(server_id, impl_->DeadlineOf(call));
}

}  // namespace rkv
