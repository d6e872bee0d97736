// Client::Impl: the state behind a Client (rkv/client.h) and a ClusterAdmin
// (rkv/admin.h), split by concern over several files as RocksDB splits
// DBImpl:
//   client.cc         Connect, setup (Init*) and the public accessors;
//   client_call.cc    the call loop: routes, WithServer's attempts and
//                     retries, leases, pools and transports;
//   client_read.cc    Get and MultiGet;
//   client_write.cc   Put, Delete, MultiPut and MultiDelete: request ids,
//                     the resend rules, batches;
//   cluster_admin.cc  ClusterAdmin, over the same map and coordinator.
// Internal to librkv: no public header includes it.
//
// A client of a coordinator routes by the cluster map that ControlClient
// keeps current; a client of one server (ClientOptions::server) routes by a
// table of that server alone (RoutingTable::ForServer), which owns every
// shard. Both go through the same routing (Routes), pools and retries
// (WithServer); a client of a coordinator also holds a lease on its map
// (LeaseKeeper, shared by the process's clients of the same coordinators:
// LeaseShare) and uses a server only under one that covers it
// (docs/design.md §8.4, §8.8).
//
// Thread safety: every method may be called from any thread once Init*
// returned (Init* run in Connect, before the client is shared).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "client/buffer_registry.h"
#include "client/cluster_map.h"
#include "client/connection_pool.h"
#include "client/control_client.h"
#include "client/unresponsive_reporter.h"
#include "client/lease_keeper.h"
#include "client/location_cache.h"
#include "client/routes.h"
#include "client/server_connection.h"
#include "common/clock.h"
#include "common/hash.h"
#include "common/mutex.h"
#include "common/protocol.h"
#include "common/status.h"
#include "common/thread_annotations.h"
#include "common/transport/transport.h"
#include "rkv/client.h"

namespace rkv {
namespace client {

// A reference to a callable, valid while the callable lives (the caller's
// lambda for the length of one call): how WithServer, defined in its own
// file, runs a call's operation without a template or an allocation.
template <typename Signature>
class FunctionRef;

template <typename R, typename... Args>
class FunctionRef<R(Args...)> {
 public:
  template <typename F>
    requires(!std::is_same_v<std::remove_cvref_t<F>, FunctionRef> && std::is_invocable_r_v<R, F&, Args...>)
  FunctionRef(F&& f)  // NOLINT(google-explicit-constructor): passed as a lambda
      : object_(const_cast<void*>(static_cast<const void*>(std::addressof(f)))),
        call_([](void* object, Args... args) -> R {
          return (*static_cast<std::remove_reference_t<F>*>(object))(std::forward<Args>(args)...);
        }) {}

  R operator()(Args... args) const { return call_(object_, std::forward<Args>(args)...); }

 private:
  void* object_;
  R (*call_)(void*, Args...);
};

}  // namespace client

// Hidden: a nested class takes its enclosing class's visibility, and
// Client's is librkv's API; none of Impl is.
class [[gnu::visibility("hidden")]] Client::Impl {
 public:
  // What a call does on a connection to its server (WithServer): a non-OK
  // Status with the connection intact is the call's answer.
  using Operation = client::FunctionRef<Status(client::ServerConnection&)>;

  explicit Impl(const ClientOptions& options);
  ~Impl();
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;

  // ---- Setup (Connect; client.cc).

  // A client of one server: installs the table of the server alone and
  // opens every connection of its pool now (retrying within the timeout
  // while the server is unreachable), so that Connect reports an
  // unreachable server, a refused token or an incompatible table.
  Status InitServer(transport::Kind kind, std::string reason);
  // A client of a coordinator: fetches the first complete map (retrying
  // within the timeout while the coordinator is unreachable or the cluster
  // incomplete), then starts the watch. Servers are connected on first use.
  Status InitCluster(std::optional<transport::Kind> fixed_kind, std::string reason);

  // ---- What a call needs.

  // Whether a coordinator feeds the routing table.
  bool cluster() const { return control_ != nullptr; }
  // The coordinator's client; only when cluster().
  client::ControlClient& control() const { return *control_; }

  // The routes of the newest table: a call takes them once and routes by
  // them.
  std::shared_ptr<client::Routes> Routing() EXCLUDES(routes_mu_) {
    std::shared_ptr<client::Routes> routes;
    {
      MutexLock lock(routes_mu_);
      routes = routes_;
    }
    if (routes == nullptr || routes->generation() != holder_.generation()) [[unlikely]] return NewRoutes();
    return routes;
  }

  client::Deadline DeadlineOf(const CallOptions& call) const {
    return SteadyNow() + (call.timeout.count() > 0 ? call.timeout : options_.timeout);
  }

  // The limits every server of `table` accepts: the table's when it knows
  // them (a coordinator's map lists every server's), else the newest
  // connection's.
  uint32_t MaxKeyBytes(const client::RoutingTable& table) const {
    const uint32_t listed = table.min_max_key_bytes();
    return listed != 0 ? listed : max_key_bytes_.load(std::memory_order_relaxed);
  }
  uint32_t MaxValueBytes(const client::RoutingTable& table) const {
    const uint32_t listed = table.min_max_value_bytes();
    return listed != 0 ? listed : max_value_bytes_.load(std::memory_order_relaxed);
  }

  Status CheckKey(const client::RoutingTable& table, std::string_view key) const {
    const uint32_t max = MaxKeyBytes(table);
    if (!key.empty() && key.size() <= max) [[likely]] return Status::Ok();
    return BadKey(key, max);
  }
  Status CheckValue(const client::RoutingTable& table, std::string_view value) const;

  // Runs `op(connection)` on a connection to server `index` of the table of
  // `routes`, from a slot of its pool (any free one, or slot `slot`). `op`
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
  // owner. A client of a coordinator prefixes errors with the server
  // ("server ID (epoch E, HOST:PORT): "); the errors of a client of one
  // server name its address.
  //
  // A client of a coordinator uses a server only under a lease (§8.4) on
  // the table the call routes by that does not exclude it (LeaseKeeper::
  // Check, before connecting and again after a fresh connect): without
  // one the call waits and retries like the above. A write refused with a
  // reason that says nothing was applied is retried after a refetch of at
  // least the map version the refusal names (MayResend).
  Status WithServer(std::shared_ptr<client::Routes> routes, size_t index, client::Deadline deadline, Operation op,
                    size_t slot = client::ConnectionPool::kAnySlot, std::span<const std::string_view> keys = {});

  // Runs `op(connection)` on a connection to the server that owns `key` in
  // the table of `routes` (WithServer); `key_hash` is ShardHash(key).
  Status WithKey(std::shared_ptr<client::Routes> routes, std::string_view key, uint64_t key_hash,
                 client::Deadline deadline, Operation op) {
    const size_t owner = routes->table().OwnerIndexOfHash(key_hash);
    return WithServer(std::move(routes), owner, deadline, op, client::ConnectionPool::kAnySlot,
                      std::span<const std::string_view>(&key, 1));
  }

  // The server a read of `key` starts on: its owner (the shard's primary),
  // or for kAnyReplica the replica of turn `turn` (RoutingTable::
  // ReplicaIndexOf). Every retry goes to the owner (WithServer).
  // `key_hash`: the key's ShardHash.
  static size_t ReadIndexOf(const client::RoutingTable& table, uint64_t key_hash, ReadFrom from, uint64_t turn) {
    if (from == ReadFrom::kPrimary) [[likely]] return table.OwnerIndexOfHash(key_hash);
    return table.ReplicaIndexOfHash(key_hash, turn);
  }

  // ---- GETs (client_read.cc).

  // A GetInto's memory: the target a lookup writes to and, when the
  // memory lies in a registered buffer, that buffer's registration.
  struct IntoTarget {
    client::ValueTarget target;
    std::shared_ptr<client::BufferRegistry::Registration> registration;
  };
  // The target of `out` (its registration found in buffers_).
  IntoTarget TargetOf(std::span<std::byte> out) const;
  // Points t.target.mr at its registration's region on conn's transport
  // (null, so that the value is copied, when it has none or the transport
  // refuses the memory: logged once).
  static void AimAt(IntoTarget& t, client::ServerConnection& conn);
  // Looks up every key whose result is not done, grouped by the server
  // read and the key's owner, one WithServer call per group (MultiGet's
  // and MultiGetInto's way). A key checked and refused is done with its
  // error; a key a group could not finish gets the group's error in
  // group_status. `targets`: empty, or one per key (GetInto's memory).
  void LookupMany(std::span<const std::string_view> keys, std::span<client::LookupResult> results,
                  std::span<Status> group_status, std::span<IntoTarget> targets, const CallOptions& call);
  // GetInto's answer from its lookup's result (and counts the value).
  Status FinishGetInto(client::LookupResult& r, GetIntoResult* result);
  // Client::Get's work, with the record's expiry (`expires_at_ms` may be
  // null).
  Status GetOne(std::string_view key, std::string* value, uint64_t* version, int64_t* expires_at_ms,
                const CallOptions& call);
  // Counts one value GetInto delivered (ClientCounters).
  void NoteGetInto(bool in_place) {
    (in_place ? get_into_in_place_ : get_into_copied_).fetch_add(1, std::memory_order_relaxed);
  }
  // Client::RegisterBuffer: registers with every transport made so far.
  StatusOr<BufferHandle> RegisterBuffer(std::span<std::byte> memory) EXCLUDES(transports_mu_);
  Status UnregisterBuffer(BufferHandle handle) { return buffers_.Remove(handle.id); }

  // ---- PUT and DELETE (client_write.cc).

  // Client::Delete and DeleteIfVersion (`if_version` 0: no condition).
  Status Delete(std::string_view key, uint64_t if_version, const CallOptions& call);

  // One PUT or DELETE call's request, as its attempts send it.
  struct PendingWrite {
    protocol::Op op = protocol::Op::kPut;
    uint64_t request_id = 0;  // drawn at the first attempt, kept by every resend
    bool sent = false;        // some attempt posted it
    uint64_t sent_epoch = 0;  // the server incarnation it was posted to
    std::string sent_address;  // and that server's data address
    bool outcome_reported = false;  // the call's error already says the outcome is unknown
    protocol::Condition condition = protocol::Condition::kNone;  // a PUT's (PutCondition)
    uint64_t expected_version = 0;
    int64_t expires_at_ms = 0;  // a PUT's (PutOptions::expires_at_unix_ms)
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
  // `key_hash` is ShardHash(key).
  Status WriteAttempt(client::ServerConnection& conn, PendingWrite& w, std::string_view key, uint64_t key_hash,
                      std::string_view value, client::Deadline deadline, client::WriteResult* result);

  // The error of a write call `w` that got no reply: says so when the
  // request was sent (it may or may not have been applied).
  static Status WriteFailed(const PendingWrite& w, Status s);

  // ---- MultiPut and MultiDelete (client_write.cc).

  // One item of a MultiPut or MultiDelete, as the call's attempts send it.
  struct BatchItem {
    PendingWrite write;
    std::string_view key;
    uint64_t key_hash = 0;  // ShardHash(key), set by RunBatches
    std::string_view value;
    bool done = false;
    Status error;                // when done: the item's failure, else OK
    client::WriteResult result;  // when done without error: the reply
  };

  // Runs the items of `items` not done yet, grouped by the server that
  // owns them, one WithServer call per group; a group whose keys a new map
  // spreads over several servers (a failover) is grouped again by the
  // newest map, within the deadline. The items a group could not finish
  // get its error (WriteFailed).
  void RunBatches(std::span<BatchItem> items, client::Deadline deadline);

  // ---- What the public accessors report.

  // Client::LocationCacheStats.
  LocationCacheStatsInfo LocationCacheStats() const;
  // Client::Counters.
  ClientCounters Counters() EXCLUDES(pools_mu_);
  // How many attempts this client ran on `server_id`'s current incarnation
  // (ClientTestPeer::AttemptsOn).
  uint64_t AttemptsOn(std::string_view server_id) EXCLUDES(pools_mu_);
  uint64_t ServerEpoch() const { return epoch_.load(std::memory_order_relaxed); }
  std::string TransportName() const;
  const std::string& TransportReason() const { return transport_reason_; }
  // A server of the cached map as the public API describes it.
  static MemberInfo ToMember(const client::ServerEntry& e);

  // ---- ClusterAdmin (cluster_admin.cc).

  // The cached map's entry of `server_id` (a copy: the map may change), or
  // NOT_FOUND.
  StatusOr<client::ServerEntry> AdminOf(std::string_view server_id);

 private:
  // What a call has seen over its attempts on one server.
  struct Attempts {
    Attempts(std::shared_ptr<client::Routes> r, size_t i, std::span<const std::string_view> k)
        : routes(std::move(r)), index(i), server(&routes->table().servers()[i]), keys(k) {}
    std::shared_ptr<client::Routes> routes;  // the newest the call has routed by
    size_t index;                            // of the server in routes->table()
    const client::ServerEntry* server;       // routes->table().servers()[index]
    // The keys the call is for (all owned by one server when it began:
    // `server`, or the primary of their shard when `server` is another
    // replica of it), or none: then the server is found again by id.
    std::span<const std::string_view> keys;
    uint64_t min_version = 0;  // a server named this map version: wait for it
    std::chrono::milliseconds backoff{1};
    Status last;                // what failed last
    bool last_from_op = false;  // `last` came from op, not from reaching the server
    bool refetch_now = false;   // the server is newer than the table: refetch without waiting
  };

  [[gnu::cold, gnu::noinline]] static Status BadKey(std::string_view key, uint32_t max);

  // ---- The call loop's steps (client_call.cc).

  // `s` as a call reports it: a client of a coordinator names the server.
  // Tells the coordinator (UnresponsiveReporter, at most once a second
  // per server) that `e` did not answer: a broken connection, a failed
  // connect. No-op for a client of one server.
  void ReportUnresponsive(const client::ServerEntry& e, std::string_view why);
  Status Named(const client::ServerEntry& e, Status s) const;
  // A new connection of `lease` answered for a.server: kept (and its limits
  // and epoch noted) when it is the incarnation the table pins, or the
  // table pins none; otherwise closed, with UNAVAILABLE saying which epoch
  // answered (and, when the server is newer than the table, a refetch
  // requested).
  [[gnu::noinline]] Status AcceptIncarnation(Attempts& a, client::SlotLease& lease);
  // Between two attempts: refetches the map (a client of a coordinator),
  // returns the call's error once `deadline` passed (GiveUp), else waits
  // the backoff (not when a newer map arrived) and finds the server in the
  // newest table (UNAVAILABLE when it is no longer listed).
  [[gnu::noinline]] Status NextAttempt(Attempts& a, client::Deadline deadline);
  // Whether the call of `a` may use a.server now (LeaseKeeper::Check on the
  // table it routes by); always for a client of one server.
  Status CheckLease(Attempts& a, client::Deadline deadline);
  // Whether `s`, a server's answer to a write, lets the call resend it
  // (client::DecideOnRefusal); raises *min_version to the map version it
  // names.
  static bool MayResend(const Status& s, uint64_t* min_version);
  // The error of a call whose deadline passed while its attempts on `e`
  // kept failing; `last` is the last failure, from the operation itself
  // when `from_op`, else from reaching the server.
  Status GiveUp(const client::ServerEntry& e, Status last, bool from_op) const;
  // The newest table's routes, made when a table came since the current
  // ones were (or at the first call).
  [[gnu::noinline]] std::shared_ptr<client::Routes> NewRoutes() EXCLUDES(routes_mu_);
  // Attaches to a.routes the pool of a.server's incarnation (PoolFor).
  [[gnu::noinline]] StatusOr<client::ConnectionPool*> AttachPool(const Attempts& a);
  // The pool for the incarnation `e` describes: the existing one while the
  // table lists the same epoch, address and transport, else a new one
  // (calls that still hold the old one finish on it).
  StatusOr<std::shared_ptr<client::ConnectionPool>> PoolFor(const client::ServerEntry& e) EXCLUDES(pools_mu_);
  // The transport to reach a server that announces `e.transport` (made on
  // first use; FAILED_PRECONDITION when ClientOptions.transport names the
  // other one).
  StatusOr<transport::Transport*> TransportFor(const client::ServerEntry& e) EXCLUDES(transports_mu_);
  // Notes what the newest connection announced (max_key_bytes() and the
  // others).
  void NoteConnection(const client::ServerConnection& conn);

  // ---- The write path's steps (client_write.cc).

  // Whether `w` may be sent on `conn` (WriteAttempt's rule): not once sent
  // elsewhere or to another incarnation (UNAVAILABLE, outcome unknown).
  static Status CheckResend(const client::ServerConnection& conn, PendingWrite& w);
  // One attempt of the items of `items` not done yet, as one batch on
  // `conn` (ServerConnection::WriteBatch), each under WriteAttempt's
  // rules: an item that may not be resent here, or is over this
  // connection's limits, is done with its error; one answered is done with
  // the reply. Returns OK when every item is done; the connection's error
  // when it broke (WithServer retries the rest); a refusal that lets the
  // items be resent when one came (MayResend: those items are marked
  // unsent, and WithServer refetches and retries).
  Status BatchAttempt(client::ServerConnection& conn, std::span<BatchItem* const> items, client::Deadline deadline);

  const ClientOptions options_;
  // Null when ClientOptions::location_cache_bytes is 0. Declared before
  // the pools, whose connections use it: destroyed after them.
  const std::unique_ptr<client::LocationCache> location_cache_;
  protocol::ClientConnectParams request_;  // what each connection proves (client.cc)
  // Request ids of PUTs and DELETEs: unique for request_.client_id across
  // every connection, as the servers' replay caches need.
  std::atomic<uint64_t> next_request_id_{1};
  std::atomic<uint64_t> retries_{0};  // NextAttempt's that led to another attempt
  std::atomic<uint64_t> get_into_in_place_{0};
  std::atomic<uint64_t> get_into_copied_{0};

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
  std::unique_ptr<client::LeaseShare> leases_;      // null for a client of one server
  // Sends through control_: destroyed before it (~Impl).
  std::unique_ptr<client::UnresponsiveReporter> reporter_;  // null for a client of one server

  // Declaration order matters: the pools (whose connections use the
  // transports) are destroyed before transports_.
  Mutex transports_mu_;
  std::map<transport::Kind, std::unique_ptr<transport::Transport>> transports_ GUARDED_BY(transports_mu_);
  // One pool per server id: its newest incarnation's.
  Mutex pools_mu_;
  std::map<std::string, std::shared_ptr<client::ConnectionPool>> pools_ GUARDED_BY(pools_mu_);
  // The routes calls take (Routing).
  Mutex routes_mu_;
  std::shared_ptr<client::Routes> routes_ GUARDED_BY(routes_mu_);
  // Caller memory registered with transports_: declared after them, so
  // its regions are deregistered before the transports go.
  client::BufferRegistry buffers_;
};

}  // namespace rkv
