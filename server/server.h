// One rkv server: owns the index and heap regions, the table over them,
// the durable store and the data-plane connections.
//
// Start:
//   1. opens the store (a new epoch; FAILED_PRECONDITION if another process
//      holds the data directory);
//   2. maps the index and heap (zeroed), initializes the table header with
//      the epoch and a fresh random hash seed, rebuilds the table from the
//      store (logs how many keys in how long);
//   3. registers index and heap with the transport, REMOTE_READ only;
//   4. listens and starts the accept thread.
// Accept thread: for each connection request, before the transport makes
//   anything for it (the listener's Screen, ScreenRequest), validates the
//   ConnectRequestData (size, magic, versions; ParseConnectRequest),
//   answers a hello with a refusal that carries a challenge
//   (ConnectChallenges: nothing stored), checks a proof (its nonce, its
//   MAC against the credentials, the nonce used once), and refuses a bad
//   one with a transport Rejection before accepting; refuses with
//   RESOURCE_EXHAUSTED beyond max_connections. A replication connection
//   (PeerConnectData, from another server) is accepted only when the
//   replication policy names a server of the current map with its
//   fingerprint and epoch (PERMISSION_DENIED otherwise, and always on a
//   server without a policy). A request let on is placed in a poller's
//   group (ChooseGroup), handed out pending, and the server maps the
//   connection's staging ring (REMOTE_WRITE for that connection only) and
//   message buffers, posts request_credits receives, and accepts with an
//   AcceptData that names the regions.
// Polling threads (docs/design.md, "Connection scale"): a fixed set,
//   whatever the number of connections. Each owns a transport PollGroup
//   and serves the connections in it: it waits on the group, polls each
//   connection the group reports, applies its requests in order
//   (server/apply/apply.h), re-posts each receive buffer before replying, and
//   replies with a SEND. options.threads of them in all: they serve clients
//   (the accept thread puts a new client in the group with the fewest
//   connections), but for one, in a server with a replication policy, that
//   serves the replication connections of other servers (so such a server
//   runs two with threads = 1), so that a poller waiting on its backups
//   (holding the Applier's writes_gate_, shared, and its key's stripe)
//   never holds up the backup writes another server forwards here, which
//   could otherwise wait on each other across two servers. A client's
//   requests go to Applier::Apply, a peer's to Applier::ApplyReplica. A broken connection (Poll error or an error
//   completion) is logged and destroyed by its poller, which releases its
//   queue pair, registrations and ring. A connection that completed
//   nothing for options.probe_idle_ms gets a probe
//   (transport::Connection::PostProbe); one whose probe fails, or stays
//   unanswered for options.probe_timeout_ms, is released as dead: a peer
//   gone without a disconnect holds its resources for at most
//   probe_idle_ms + probe_timeout_ms and a polling round.
//
// A GET over verbs never reaches this process: clients read the index and
// heap with one-sided READs. Over tcp, a client asks a key its location
// cache does not hold with a lookup (protocol::Op::kGet; docs/design.md
// §4.1), one request and one reply that carries the block, answered by the
// polling thread that read it after its round's writes; those are what
// ServerStats::gets_served_by_cpu counts (0 on verbs).
//
// Thread safety: the accessors and Stats are thread-safe. Shutdown may be
// called from any thread, also concurrently (the calls are serialized); the
// destructor calls it.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "common/client_credentials.h"
#include "common/latency_histogram.h"
#include "common/log_throttle.h"
#include "common/mutex.h"
#include "common/protocol.h"
#include "common/status.h"
#include "common/transport/transport.h"
#include "server/apply/apply.h"
#include "server/connect_challenge.h"
#include "server/connect_request.h"
#include "server/table/heap.h"
#include "server/table/mapped_memory.h"
#include "server/options.h"
#include "server/replication/replication.h"
#include "server/replication/replicator.h"
#include "server/store/store.h"
#include "server/table/table.h"

namespace rkv::server {

// What one connection costs the server, in bytes (ServerStats).
struct ConnectionCost {
  uint64_t ring_bytes = 0;     // the staging ring (pinned on verbs)
  uint64_t message_bytes = 0;  // request and reply buffers
  uint64_t state_bytes = 0;    // the poller's bookkeeping
  uint64_t total() const { return ring_bytes + message_bytes + state_bytes; }
};

// StatusCode's values are 0..kStatusCodeCount - 1.
inline constexpr size_t kStatusCodeCount = static_cast<size_t>(StatusCode::kUnauthenticated) + 1;

struct ServerStats {
  uint64_t puts = 0;
  uint64_t deletes = 0;
  uint64_t request_errors = 0;        // error replies (NOT_FOUND excluded)
  uint64_t connections = 0;           // open now
  uint64_t connections_accepted = 0;  // since start
  uint64_t connections_rejected = 0;  // since start
  // Connections by state (docs/design.md §7.7, "Dead peers"): of the open
  // ones, those with a probe in flight now (silent for
  // ServerOptions::probe_idle_ms, not yet answered); since start, those
  // released as dead (a probe failed or went unanswered for
  // probe_timeout_ms); and the connection requests the listener refused
  // before anything was made for them: screened out (the connect checks,
  // hellos answered with a challenge included) and refused unscreened for
  // their source's refusal rate (transport::ListenerCounters).
  uint64_t connections_probing = 0;
  uint64_t connections_released_dead = 0;
  uint64_t connect_requests_screened_out = 0;
  uint64_t connect_requests_source_limited = 0;
  // Connection requests refused for their credential (none, unknown or
  // revoked; a client's or a peer server's) since start.
  uint64_t auth_failures = 0;
  // Client connections accepted since start, by the name of the client
  // credential they presented: every credential in force (0 when none
  // yet) and those counted before a reload removed them, at most
  // kMaxCredentialSeries names (the rest under kOtherCredentials).
  std::vector<std::pair<std::string, uint64_t>> connections_by_credential;
  uint64_t keys = 0;
  uint64_t heap_bytes_used = 0;
  uint64_t heap_bytes_quarantined = 0;
  uint64_t gets_served_by_cpu = 0;    // lookups answered (tcp clients' uncached keys; 0 on verbs)
  // Replication (Applier::Snapshot).
  uint64_t forwarded_writes = 0;
  uint64_t backup_failures = 0;
  uint64_t replica_writes = 0;
  uint64_t replica_stale = 0;
  uint64_t replica_refused = 0;
  uint64_t lease_refusals = 0;  // client writes refused because the lease had expired
  uint64_t conditions_failed = 0;  // conditional PUTs whose condition did not hold
  uint64_t expired_reclaimed = 0;  // expired records this server removed as their primary
  // Connection scale: the polling threads, and what each open connection
  // costs (the transport's own share is in docs/design.md).
  uint64_t polling_threads = 0;
  ConnectionCost connection_cost;
  // --durability=none: acknowledged writes still in the store's write-back
  // buffer (a crash loses them; docs/design.md "Durability modes").
  uint64_t store_unwritten_writes = 0;
  uint64_t store_unwritten_bytes = 0;
  // RocksDB's own work (Store::Activity).
  uint64_t store_write_stall_micros = 0;
  uint64_t store_wal_bytes = 0;
  // Replies sent, by status code (indexed by StatusCode; [0], OK, is not
  // counted): clients' and forwarded writes alike.
  std::array<uint64_t, kStatusCodeCount> error_replies{};
};

class Server {
 public:
  // ServerStats::connections_by_credential: the most names it keeps apart,
  // and the name the others are counted under (no credential name has
  // parentheses).
  static constexpr size_t kMaxCredentialSeries = 2 * ClientCredentials::kMaxCredentials;
  static constexpr std::string_view kOtherCredentials = "(other)";

  // Starts a server with validated `options` (see ValidateOptions) on
  // `transport`, which must outlive the server. Errors name what failed.
  //
  // `replication`: null for a standalone server (no forwarding; every
  // replication connection refused). Otherwise the server replicates
  // client writes as that policy says (server/apply/apply.h, "Replication") and
  // accepts replicas from the servers it names; `server_id` is then this
  // server's id in the cluster map (required: INVALID_ARGUMENT when empty),
  // which it presents to its backups. The policy must outlive the server.
  //
  // `client_credentials`: the client credentials a client's connection
  // request must present one of (null: one, named "token", of
  // options.token). A reload (LiveClientCredentials::Replace) takes
  // effect for the next request; the pollers then close, within about
  // their poll timeout (50 ms), every client connection opened with a
  // credential no longer in force, and other connections go on.
  static StatusOr<std::unique_ptr<Server>> Start(const ServerOptions& options, transport::Transport* transport,
                                                 ReplicationPolicy* replication = nullptr,
                                                 std::string_view server_id = {},
                                                 std::shared_ptr<LiveClientCredentials> client_credentials = nullptr);

  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Stops accepting, disconnects every client, joins all threads and closes
  // the store. Idempotent.
  void Shutdown() EXCLUDES(shutdown_mu_);

  // "HOST:PORT" actually listened on (the real port when 0 was asked).
  std::string address() const;
  uint64_t epoch() const { return epoch_; }
  uint64_t keys_at_start() const { return keys_at_start_; }
  ServerStats Stats() const;

  // How long the server took over each write it answered, from the start
  // of its apply to its reply's post, the group commit's sync included:
  // clients' writes and the forwarded writes this server installed as a
  // backup apart (what GET /metrics exports as rkv_server_apply_seconds).
  struct ApplyLatency {
    LatencyHistogram::Counts client;
    LatencyHistogram::Counts replica;
  };
  ApplyLatency apply_latency() const {
    return {client_apply_latency_.Read(), replica_apply_latency_.Read()};
  }

  // The index (TableHeader + buckets) and heap regions as clients address
  // them, and the table's parameters, fixed at Start and unchanged
  // afterwards (also after Shutdown, when the regions no longer name live
  // registrations).
  const protocol::RegionDescriptor& index_region() const { return index_region_; }
  const protocol::RegionDescriptor& heap_region() const { return heap_region_; }
  uint32_t bucket_count_log2() const { return bucket_count_log2_; }
  uint64_t hash_seed() const { return hash_seed_; }
  uint64_t heap_bytes() const { return heap_region_.length; }

  // The apply path, for catch-up (server/replication/catchup.h, server/replication/replica_service.h):
  // valid from Start until Shutdown, whose callers must stop using it first.
  Applier* applier() const { return applier_.get(); }

 private:
  struct Served;
  struct Poller;
  struct OwedReply;
  struct Round;

  Server(const ServerOptions& options, transport::Transport* transport, ReplicationPolicy* replication,
         std::string_view server_id, std::shared_ptr<LiveClientCredentials> client_credentials);
  Status Init();
  Status Rebuild();
  Status StartPollers();
  void AcceptLoop();
  // The reclaimer of expired records (docs/design.md §5.11): while the
  // table holds records with an expiry, one slice of the index at a time
  // (Applier::ExpiredKeys, so writes wait for one slice at most), each
  // expired record removed by Applier::ReclaimExpired (on the primary of
  // its key; a backup's are removed by the primary's forwarded deletes);
  // a pass over the whole index at most every second. Sleeps while no
  // record has an expiry.
  void ExpiryLoop() EXCLUDES(expiry_mu_);
  // The group a connection request goes to: the peers' poller for a
  // replication request, else the client poller with the fewest.
  transport::PollGroup* ChooseGroup(std::span<const uint8_t> private_data);
  // The listener's Screen (transport::Listener::Screen), run before the
  // transport makes anything for a request: the connect checks
  // (ParseConnectRequest: a hello gets its challenge, a bad proof its
  // refusal), a replication request's peer, the connection limit. A
  // request let on leaves its checked form in screened_ for HandlePending.
  // Accept thread only.
  std::optional<transport::Rejection> ScreenRequest(std::span<const uint8_t> private_data,
                                                    const std::string& peer_address);
  void HandlePending(std::unique_ptr<transport::Connection> conn);
  // A refusal: logged as a WARNING at most once a second (the line says
  // how many refusals it stands for), naming `credential` when known, and
  // counted; returns the Rejection to send. Accept thread only.
  transport::Rejection Refusal(const std::string& peer_address, StatusCode code, const std::string& message,
                               const std::string& credential = "");
  // Refuses a pending connection with Refusal's Rejection.
  void Refuse(transport::Connection& conn, StatusCode code, const std::string& message,
              const std::string& credential = "");
  // Probes `p`'s connections silent for probe_idle_ms and releases those
  // whose probe went unanswered for probe_timeout_ms. Polling thread `p`
  // only.
  void ProbeSilent(Poller* p, std::chrono::steady_clock::time_point now);
  // Closes `p`'s client connections whose credential is not in force: all
  // of them (`only` null: after a reload), or those of `only`, just taken
  // from the inbox. Polling thread `p` only.
  void CloseRevoked(Poller* p, const std::vector<transport::Connection*>* only);
  void PollLoop(Poller* p);
  // Takes `s`'s completions and applies what it can, adding a reply for
  // each request to round->owed: a replication connection's requests at
  // once, a client's writes and lookups added to round->writes and
  // round->lookups, which PollLoop answers after serving every ready
  // connection (AnswerRound) and before SendReplies. False once the
  // connection has ended (then closed).
  bool Serve(Served& s, std::span<transport::Completion> completions, Round* round,
             std::chrono::steady_clock::time_point now);
  // Applies the round's client writes together, then answers its lookups,
  // writing each reply into its reply buffer.
  void AnswerRound(Round* round);
  // Commits a round (SyncWrites: one fsync for all its writes with
  // --durability=sync), then re-posts the requests' receives and sends
  // the replies (a found lookup's block WRITTEN before its reply); closes
  // the connections where that fails.
  void SendReplies(Poller* p, std::vector<OwedReply>* owed);
  // Closes `s`: counted as released dead when `dead` (a failed or
  // unanswered probe).
  void Close(Served& s, const Status& why, bool dead = false);
  // Takes a connection that Close ended out of its poller's set.
  static void Forget(Poller* p, transport::Connection* conn);
  ConnectionCost Cost() const;

  const ServerOptions options_;
  transport::Transport* const transport_;
  ReplicationPolicy* const replication_;
  const std::string server_id_;
  uint64_t epoch_ = 0;
  uint64_t keys_at_start_ = 0;
  protocol::RegionDescriptor index_region_{};
  protocol::RegionDescriptor heap_region_{};
  uint32_t bucket_count_log2_ = 0;
  uint64_t hash_seed_ = 0;

  // Declaration order is teardown order reversed: the pollers (their
  // connections, then the rings, then the groups), the listener, the index/heap registrations, then the
  // applier, the replicator it forwards through, table, heap, store and
  // last the memory they point into.
  MappedMemory index_mem_;
  MappedMemory heap_mem_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<Heap> heap_;
  std::unique_ptr<Table> table_;
  std::unique_ptr<Replicator> replicator_;  // null when standalone
  std::unique_ptr<Applier> applier_;
  std::unique_ptr<transport::MemoryRegion> index_mr_;
  std::unique_ptr<transport::MemoryRegion> heap_mr_;
  std::unique_ptr<transport::Listener> listener_;
  std::string address_;

  std::atomic<bool> stopping_{false};
  std::thread accept_thread_;
  // Reclaims expired records (ExpiryLoop); woken by Shutdown.
  std::thread expiry_thread_;
  Mutex expiry_mu_;
  CondVar expiry_cv_;
  // The client pollers, then (replicating servers) the peers' poller.
  std::vector<std::unique_ptr<Poller>> pollers_;
  size_t client_pollers_ = 0;
  uint64_t polling_threads_ = 0;  // set before the accept thread starts
  Poller* chosen_ = nullptr;      // the accept thread's: ChooseGroup's last choice
  // The accept thread's: the request ScreenRequest let on last, and for a
  // replication request the peer's server id.
  struct Screened {
    ConnectRequest request;
    std::string peer_id;
  };
  std::optional<Screened> screened_;
  // Serializes Shutdown.
  Mutex shutdown_mu_;
  bool shut_down_ GUARDED_BY(shutdown_mu_) = false;

  std::atomic<uint64_t> connections_open_{0};
  std::atomic<uint64_t> connections_accepted_{0};
  std::atomic<uint64_t> connections_rejected_{0};
  std::atomic<uint64_t> auth_failures_{0};
  std::atomic<uint64_t> connections_probing_{0};
  std::atomic<uint64_t> connections_released_dead_{0};
  // The listener's counts as the accept thread last read them.
  std::atomic<uint64_t> requests_screened_out_{0};
  std::atomic<uint64_t> requests_source_limited_{0};
  const std::shared_ptr<LiveClientCredentials> client_credentials_;
  // What a peer server's replication connection must present
  // (PeerCredentials: the cluster credential, or any server's own).
  const ClientCredentials peer_credentials_;
  // The challenges of the connect handshake, under a secret of this
  // process (Init); used by the accept thread.
  std::unique_ptr<ConnectChallenges> challenges_;
  // Client connections accepted, by credential name (ServerStats).
  mutable Mutex accepted_by_credential_mu_;
  std::map<std::string, uint64_t, std::less<>> accepted_by_credential_ GUARDED_BY(accepted_by_credential_mu_);
  // Refusal's log line, at most one a second.
  LogThrottle refusal_log_;
  LatencyHistogram client_apply_latency_;
  LatencyHistogram replica_apply_latency_;
  // Replies other than OK, by status code (SendReplies).
  std::array<std::atomic<uint64_t>, kStatusCodeCount> error_replies_{};
};

}  // namespace rkv::server
