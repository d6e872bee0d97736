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
// Accept thread: for each pending connection, validates the
//   ConnectRequestData (size, magic, versions, token digest) and refuses a
//   bad one with a transport Rejection before accepting; refuses with
//   RESOURCE_EXHAUSTED beyond max_connections. A replication connection
//   (PeerConnectData, from another server) is accepted only when the
//   replication policy names a server of the current map with its
//   fingerprint and epoch (PERMISSION_DENIED otherwise, and always on a
//   server without a policy). Otherwise maps the
//   connection's staging ring (REMOTE_WRITE for that connection only) and
//   message buffers, posts request_credits receives, and accepts with an
//   AcceptData that names the regions.
// One worker thread per connection: polls the connection, applies its
//   requests in order (server/apply.h), re-posts each receive buffer before
//   replying, and replies with a SEND. A client's requests go to
//   Applier::Apply, a peer's to Applier::ApplyReplica. A broken connection (Poll error or an
//   error completion) is logged and destroyed by its worker, which releases
//   its queue pair and registrations; the accept thread then reaps the
//   finished worker (joins it, frees its ring).
//
// No GET ever reaches this process: clients read the index and heap with
// one-sided READs (ServerStats::gets_served_by_cpu stays 0; there is no GET
// message in the protocol).
//
// Thread safety: the accessors and Stats are thread-safe. Shutdown may be
// called from any thread, also concurrently (the calls are serialized); the
// destructor calls it.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <list>
#include <memory>
#include <string>
#include <string_view>
#include <thread>

#include "common/mutex.h"
#include "common/protocol.h"
#include "common/status.h"
#include "common/transport/transport.h"
#include "server/apply.h"
#include "server/heap.h"
#include "server/mapped_memory.h"
#include "server/options.h"
#include "server/replication.h"
#include "server/replicator.h"
#include "server/store.h"
#include "server/table.h"

namespace rkv::server {

struct ServerStats {
  uint64_t puts = 0;
  uint64_t deletes = 0;
  uint64_t request_errors = 0;        // error replies (NOT_FOUND excluded)
  uint64_t connections = 0;           // open now
  uint64_t connections_accepted = 0;  // since start
  uint64_t connections_rejected = 0;  // since start
  uint64_t keys = 0;
  uint64_t heap_bytes_used = 0;
  uint64_t heap_bytes_quarantined = 0;
  uint64_t gets_served_by_cpu = 0;    // always 0: GETs are one-sided READs
  // Replication (Applier::Snapshot).
  uint64_t forwarded_writes = 0;
  uint64_t backup_failures = 0;
  uint64_t replica_writes = 0;
  uint64_t replica_stale = 0;
  uint64_t replica_refused = 0;
  uint64_t lease_refusals = 0;  // client writes refused because the lease had expired
};

class Server {
 public:
  // Starts a server with validated `options` (see ValidateOptions) on
  // `transport`, which must outlive the server. Errors name what failed.
  //
  // `replication`: null for a standalone server (no forwarding; every
  // replication connection refused). Otherwise the server replicates
  // client writes as that policy says (server/apply.h, "Replication") and
  // accepts replicas from the servers it names; `server_id` is then this
  // server's id in the cluster map (required: INVALID_ARGUMENT when empty),
  // which it presents to its backups. The policy must outlive the server.
  static StatusOr<std::unique_ptr<Server>> Start(const ServerOptions& options, transport::Transport* transport,
                                                 ReplicationPolicy* replication = nullptr,
                                                 std::string_view server_id = {});

  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Stops accepting, disconnects every client, joins all threads and closes
  // the store. Idempotent.
  void Shutdown() EXCLUDES(shutdown_mu_, workers_mu_);

  // "HOST:PORT" actually listened on (the real port when 0 was asked).
  std::string address() const;
  uint64_t epoch() const { return epoch_; }
  uint64_t keys_at_start() const { return keys_at_start_; }
  ServerStats Stats() const;

  // The index (TableHeader + buckets) and heap regions as clients address
  // them, and the table's parameters, fixed at Start and unchanged
  // afterwards (also after Shutdown, when the regions no longer name live
  // registrations).
  const protocol::RegionDescriptor& index_region() const { return index_region_; }
  const protocol::RegionDescriptor& heap_region() const { return heap_region_; }
  uint32_t bucket_count_log2() const { return bucket_count_log2_; }
  uint64_t hash_seed() const { return hash_seed_; }
  uint64_t heap_bytes() const { return heap_region_.length; }

  // The apply path, for read-only passes over the table (Admin's
  // ShardChecksums and ListShard); usable until Shutdown.
  const Applier& applier() const { return *applier_; }

 private:
  struct Worker;

  Server(const ServerOptions& options, transport::Transport* transport, ReplicationPolicy* replication,
         std::string_view server_id);
  Status Init();
  Status Rebuild();
  void AcceptLoop() EXCLUDES(workers_mu_);
  void HandlePending(std::unique_ptr<transport::Connection> conn) EXCLUDES(workers_mu_);
  void Refuse(transport::Connection& conn, StatusCode code, const std::string& message);
  void ServeConnection(Worker* w);
  // Joins and destroys the workers whose connection has ended.
  void ReapFinished() EXCLUDES(workers_mu_);

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

  // Declaration order is teardown order reversed: workers (connections,
  // then their rings), the listener, the index/heap registrations, then the
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
  Mutex workers_mu_;
  std::list<std::unique_ptr<Worker>> workers_ GUARDED_BY(workers_mu_);
  // Serializes Shutdown; taken before workers_mu_.
  Mutex shutdown_mu_ ACQUIRED_BEFORE(workers_mu_);
  bool shut_down_ GUARDED_BY(shutdown_mu_) = false;

  std::atomic<uint64_t> connections_open_{0};
  std::atomic<uint64_t> connections_accepted_{0};
  std::atomic<uint64_t> connections_rejected_{0};
};

}  // namespace rkv::server
