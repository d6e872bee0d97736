#include "server/server.h"

#include <cstring>
#include <random>
#include <vector>

#include <glog/logging.h>

#include "common/layout.h"
#include "common/protocol.h"
#include "common/token.h"
#include "common/transport/transport.h"
#include "server/connect_request.h"
#include "server/rebuild.h"

namespace rkv::server {

// The connection setup messages fit what every transport carries.
static_assert(protocol::kMaxConnectPrivateData <= transport::kMaxConnectPrivateData);
static_assert(protocol::kMaxAcceptPrivateData <= transport::kMaxAcceptPrivateData);
namespace {

using transport::Completion;
using transport::LocalBuf;
using transport::OpType;

// wr_id tags: receives carry their buffer index, sends kSendTag | index.
constexpr uint64_t kSendTag = uint64_t{1} << 32;
constexpr auto kPollTimeout = std::chrono::milliseconds(50);
// --durability=none: writes queued for the store's background writer
// (server/store.h) before a PUT waits for room.
constexpr uint32_t kStoreQueueWrites = 4096;
constexpr uint64_t kStoreQueueBytes = 32ULL << 20;
constexpr auto kAcceptTimeout = std::chrono::milliseconds(100);

protocol::RegionDescriptor Describe(const transport::MemoryRegion& mr) {
  protocol::RegionDescriptor d{};
  d.addr = mr.remote_addr();
  d.length = mr.size();
  d.rkey = mr.rkey();
  return d;
}

uint64_t RandomSeed() {
  std::random_device rd;
  return (uint64_t{rd()} << 32) ^ rd();
}

}  // namespace

// One accepted connection. Members are destroyed bottom-up: the thread is
// joined before, then the connection (its registrations), then the memory
// those registrations cover.
struct Server::Worker {
  MappedMemory ring;
  MappedMemory messages;  // credits receive buffers, then credits reply buffers
  transport::MemoryRegion* ring_mr = nullptr;
  transport::MemoryRegion* messages_mr = nullptr;
  uint64_t client_id = 0;
  std::string peer_id;  // a replication connection: the sending server's id; empty for a client
  std::string peer;
  std::unique_ptr<transport::Connection> conn;
  std::thread thread;
  std::atomic<bool> finished{false};
};

Server::Server(const ServerOptions& options, transport::Transport* transport, ReplicationPolicy* replication,
               std::string_view server_id)
    : options_(options), transport_(transport), replication_(replication), server_id_(server_id) {}

StatusOr<std::unique_ptr<Server>> Server::Start(const ServerOptions& options, transport::Transport* transport,
                                                ReplicationPolicy* replication, std::string_view server_id) {
  RKV_RETURN_IF_ERROR(ValidateOptions(options));
  if (replication != nullptr && server_id.empty()) {
    return InvalidArgument("a replicating server needs its server id");
  }
  std::unique_ptr<Server> server(new Server(options, transport, replication, server_id));
  RKV_RETURN_IF_ERROR(server->Init());
  return server;
}

Status Server::Init() {
  StoreOptions store_options;
  store_options.durability = options_.durability;
  if (options_.durability == Durability::kNone) {
    // The mode promises a clean shutdown only, so the RocksDB write leaves
    // the request path: a background writer, drained before any scan of
    // the store and on close (docs/design.md, "Durability modes").
    store_options.background_queue = kStoreQueueWrites;
    store_options.background_queue_bytes = kStoreQueueBytes;
  }
  RKV_ASSIGN_OR_RETURN(store_, Store::Open(options_.data_dir, store_options));
  epoch_ = store_->epoch();

  RKV_ASSIGN_OR_RETURN(const uint32_t log2, Table::BucketCountLog2ForKeys(options_.max_keys));
  const uint64_t index_bytes = layout::IndexBytes(uint64_t{1} << log2);
  const uint64_t heap_bytes = options_.memory_bytes / layout::kBlockAlign * layout::kBlockAlign;
  RKV_ASSIGN_OR_RETURN(index_mem_, MappedMemory::Allocate(index_bytes));
  RKV_ASSIGN_OR_RETURN(heap_mem_, MappedMemory::Allocate(heap_bytes));
  heap_ = std::make_unique<Heap>(heap_bytes, std::chrono::milliseconds(options_.grace_period_ms));
  table_ = std::make_unique<Table>(index_mem_.span(), heap_mem_.span(), heap_.get());
  bucket_count_log2_ = log2;
  hash_seed_ = RandomSeed();
  RKV_RETURN_IF_ERROR(table_->Init(log2, epoch_, hash_seed_));
  RKV_RETURN_IF_ERROR(Rebuild());
  table_->ServeReaders();  // from here on, clients may be reading
  ApplyReplication replication;
  if (replication_ != nullptr) {
    ReplicatorOptions r;
    r.self_id = server_id_;
    r.self_epoch = epoch_;
    r.token = options_.token;
    r.timeout = std::chrono::milliseconds(options_.replication_timeout_ms);
    r.max_record_bytes = MaxBlockBytes(options_);
    RKV_ASSIGN_OR_RETURN(replicator_, Replicator::Create(transport_, std::move(r)));
    replication = ApplyReplication{replication_, replicator_.get()};
  }
  applier_ = std::make_unique<Applier>(store_.get(), table_.get(), heap_.get(),
                                       ApplyLimits{options_.max_key_bytes, options_.max_value_bytes},
                                       RequestCacheLimits{}, replication);

  // Remote peers may only read the table; kLocalWrite is not needed by the
  // server itself (it writes with the CPU) and is not granted.
  RKV_ASSIGN_OR_RETURN(index_mr_, transport_->Register(index_mem_.data(), index_bytes, transport::kRemoteRead));
  RKV_ASSIGN_OR_RETURN(heap_mr_, transport_->Register(heap_mem_.data(), heap_bytes, transport::kRemoteRead));
  index_region_ = Describe(*index_mr_);
  heap_region_ = Describe(*heap_mr_);

  RKV_ASSIGN_OR_RETURN(listener_, transport_->Listen(options_.listen));
  address_ = listener_->address();
  LOG(INFO) << "listening on " << address_ << " (epoch " << epoch_ << ", " << (uint64_t{1} << log2)
            << " buckets, " << heap_bytes << "-byte heap, durability " << DurabilityName(options_.durability)
            << ", poll " << PollModeName(options_.poll) << ")";
  accept_thread_ = std::thread([this] { AcceptLoop(); });
  return Status::Ok();
}

Status Server::Rebuild() {
  const auto start = std::chrono::steady_clock::now();
  RKV_ASSIGN_OR_RETURN(keys_at_start_,
                       RebuildTable(*store_, *table_, RebuildLimits{options_.max_key_bytes, options_.max_value_bytes}));
  const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start);
  LOG(INFO) << "rebuilt the table from " << options_.data_dir << ": " << keys_at_start_ << " keys in "
            << took.count() << " ms (load " << table_->load_factor() << ", heap " << heap_->stats().used_bytes
            << " bytes used)";
  return Status::Ok();
}

std::string Server::address() const { return address_; }

void Server::AcceptLoop() {
  while (!stopping_.load(std::memory_order_acquire)) {
    StatusOr<std::unique_ptr<transport::Connection>> next = listener_->Next(kAcceptTimeout);
    ReapFinished();
    if (!next.ok()) {
      if (next.status().code() == StatusCode::kCancelled) break;
      LOG(WARNING) << "accepting a connection failed: " << next.status();
      std::this_thread::sleep_for(kAcceptTimeout);
      continue;
    }
    if (*next) HandlePending(std::move(*next));
  }
}

void Server::Refuse(transport::Connection& conn, StatusCode code, const std::string& message) {
  LOG(WARNING) << "refusing connection from " << conn.peer_address() << ": " << StatusCodeName(code) << ": "
               << message;
  // Counted before the peer can see the refusal.
  connections_rejected_.fetch_add(1, std::memory_order_relaxed);
  conn.Reject({code, message});
}

void Server::HandlePending(std::unique_ptr<transport::Connection> conn) {
  // Validate the connect request before anything is allocated for it.
  const StatusOr<ConnectRequest> parsed = ParseConnectRequest(conn->peer_private_data(), TokenDigest(options_.token));
  if (!parsed.ok()) return Refuse(*conn, parsed.status().code(), parsed.status().message());
  const ConnectRequest& req = *parsed;
  std::string peer_id;
  if (req.role == ConnectRequest::Role::kPeer) {
    if (replication_ == nullptr) {
      return Refuse(*conn, StatusCode::kPermissionDenied,
                    "this server is not in a cluster: it accepts no replication connections");
    }
    // May refetch the map (bounded, about a second) for a peer that just
    // restarted: the accept thread waits that long at most.
    std::optional<std::string> id = replication_->FindPeer(req.client_id, req.peer_epoch);
    if (!id) return Refuse(*conn, StatusCode::kPermissionDenied, "not a server of the current cluster map");
    peer_id = std::move(*id);
  }
  if (connections_open_.load(std::memory_order_relaxed) >= options_.max_connections) {
    return Refuse(*conn, StatusCode::kResourceExhausted,
                  "too many connections (max " + std::to_string(options_.max_connections) + ")");
  }

  // From here the worker owns the connection, so that on every path the
  // connection (and its registrations) goes before the memory it covers.
  auto w = std::make_unique<Worker>();
  w->client_id = req.client_id;
  w->peer_id = std::move(peer_id);
  w->peer = conn->peer_address();
  w->conn = std::move(conn);
  transport::Connection& c = *w->conn;
  const uint32_t credits = options_.request_credits;
  const auto setup = [&]() -> Status {
    RKV_ASSIGN_OR_RETURN(w->ring, MappedMemory::Allocate(options_.ring_bytes));
    RKV_ASSIGN_OR_RETURN(w->messages, MappedMemory::Allocate(2 * credits * protocol::kMaxMessageBytes));
    RKV_ASSIGN_OR_RETURN(w->ring_mr, c.RegisterPrivate(w->ring.data(), w->ring.size(),
                                                           transport::kRemoteWrite | transport::kLocalWrite));
    RKV_ASSIGN_OR_RETURN(w->messages_mr,
                         c.RegisterPrivate(w->messages.data(), w->messages.size(), transport::kLocalWrite));
    for (uint32_t i = 0; i < credits; ++i) {
      RKV_RETURN_IF_ERROR(c.PostRecv(
          LocalBuf{w->messages_mr, i * protocol::kMaxMessageBytes, static_cast<uint32_t>(protocol::kMaxMessageBytes)},
          i));
    }
    return Status::Ok();
  };
  if (Status s = setup(); !s.ok()) {
    return Refuse(c, s.code() == StatusCode::kResourceExhausted ? s.code() : StatusCode::kUnavailable,
                  "server could not set up the connection: " + s.message());
  }

  protocol::AcceptData a{};
  a.magic = protocol::kAcceptMagic;
  a.protocol_version = protocol::kProtocolVersion;
  a.layout_version = layout::kLayoutVersion;
  a.epoch = epoch_;
  a.index = index_region_;
  a.heap = heap_region_;
  a.ring = Describe(*w->ring_mr);
  a.request_credits = credits;
  a.max_key_bytes = options_.max_key_bytes;
  a.max_value_bytes = options_.max_value_bytes;
  a.grace_period_us = options_.grace_period_ms * 1000;
  // Counted before the peer can see the accept.
  connections_open_.fetch_add(1, std::memory_order_relaxed);
  connections_accepted_.fetch_add(1, std::memory_order_relaxed);
  if (Status s = c.Accept(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(&a), sizeof(a)));
      !s.ok()) {
    LOG(WARNING) << "accepting connection from " << w->peer << " failed: " << s;
    connections_open_.fetch_sub(1, std::memory_order_relaxed);
    connections_accepted_.fetch_sub(1, std::memory_order_relaxed);
    return;
  }
  if (w->peer_id.empty()) {
    LOG(INFO) << "accepted client " << std::hex << w->client_id << std::dec << " from " << w->peer;
  } else {
    LOG(INFO) << "accepted replication from server " << w->peer_id << " (epoch " << req.peer_epoch << ") at "
              << w->peer;
  }
  Worker* raw = w.get();
  {
    MutexLock lock(workers_mu_);
    workers_.push_back(std::move(w));
  }
  raw->thread = std::thread([this, raw] { ServeConnection(raw); });
}

void Server::ServeConnection(Worker* w) {
  transport::Connection& conn = *w->conn;
  const uint32_t credits = options_.request_credits;
  const size_t reply_base = size_t{credits} * protocol::kMaxMessageBytes;
  const std::span<const uint8_t> ring(w->ring.data(), w->ring.size());
  // Receives not yet applied, in arrival order: a ring of `credits`
  // entries (each holds a receive buffer, so there are never more), and
  // the free reply buffers; neither allocates per request.
  struct Received {
    uint32_t buf = 0;
    uint32_t len = 0;
  };
  std::vector<Received> pending(credits);
  size_t pending_head = 0;
  size_t pending_count = 0;
  std::vector<uint32_t> free_replies;
  free_replies.reserve(credits);
  for (uint32_t i = 0; i < credits; ++i) free_replies.push_back(i);
  std::vector<Completion> completions(2 * credits);
  Status ended;

  while (ended.ok() && !stopping_.load(std::memory_order_acquire)) {
    StatusOr<size_t> n = conn.Poll(completions, kPollTimeout);
    if (!n.ok()) {
      ended = n.status();
      break;
    }
    for (size_t i = 0; i < *n && ended.ok(); ++i) {
      const Completion& c = completions[i];
      if (!c.status.ok()) {
        ended = c.status;
      } else if (c.op == OpType::kRecv && c.wr_id < credits && pending_count < credits) {
        pending[(pending_head + pending_count) % credits] = Received{static_cast<uint32_t>(c.wr_id), c.byte_len};
        ++pending_count;
      } else if (c.op == OpType::kSend && (c.wr_id & ~(kSendTag - 1)) == kSendTag &&
                 (c.wr_id & (kSendTag - 1)) < credits) {
        free_replies.push_back(static_cast<uint32_t>(c.wr_id & (kSendTag - 1)));
      } else {
        ended = Internal("unexpected completion (wr_id " + std::to_string(c.wr_id) + ")");
      }
    }
    // Requests are applied in arrival order; one waits only for a free
    // reply buffer (a send completion), never for another connection.
    while (ended.ok() && pending_count > 0 && !free_replies.empty()) {
      const auto [buf, len] = pending[pending_head];
      pending_head = (pending_head + 1) % credits;
      --pending_count;
      const size_t offset = size_t{buf} * protocol::kMaxMessageBytes;
      const size_t msg_len = std::min<size_t>(len, protocol::kMaxMessageBytes);
      const std::span<const uint8_t> msg(w->messages.data() + offset, msg_len);
      const protocol::ReplyMsg reply = w->peer_id.empty() ? applier_->Apply(w->client_id, msg, ring)
                                                          : applier_->ApplyReplica(w->peer_id, msg, ring);
      // Re-post the receive before replying: the reply returns the credit,
      // and the client may send its next request as soon as it sees it.
      if (Status s = conn.PostRecv(
              LocalBuf{w->messages_mr, offset, static_cast<uint32_t>(protocol::kMaxMessageBytes)}, buf);
          !s.ok()) {
        ended = s;
        break;
      }
      const uint32_t r = free_replies.back();
      free_replies.pop_back();
      const size_t reply_offset = reply_base + size_t{r} * protocol::kMaxMessageBytes;
      std::memcpy(w->messages.data() + reply_offset, &reply, sizeof(reply));
      if (Status s = conn.PostSend(LocalBuf{w->messages_mr, reply_offset, sizeof(reply)}, kSendTag | r); !s.ok()) {
        ended = s;
      }
    }
  }
  if (ended.ok()) {
    LOG(INFO) << "disconnecting client " << std::hex << w->client_id << std::dec << " from " << w->peer
              << " (server shutting down)";
  } else {
    LOG(INFO) << "connection of client " << std::hex << w->client_id << std::dec << " from " << w->peer
              << " closed: " << ended;
  }
  conn.Disconnect();
  // Torn down here, not by the reaper on the accept thread: a slow teardown
  // must never hold up new connections. The ring outlives it (reaped later).
  w->conn.reset();
  connections_open_.fetch_sub(1, std::memory_order_relaxed);
  w->finished.store(true, std::memory_order_release);
}

void Server::ReapFinished() {
  std::list<std::unique_ptr<Worker>> done;
  {
    MutexLock lock(workers_mu_);
    for (auto it = workers_.begin(); it != workers_.end();) {
      if ((*it)->finished.load(std::memory_order_acquire)) {
        done.splice(done.end(), workers_, it++);
      } else {
        ++it;
      }
    }
  }
  // Join, then destroy: the connection (QP, registrations) before its ring.
  for (auto& w : done) {
    if (w->thread.joinable()) w->thread.join();
  }
}

void Server::Shutdown() {
  MutexLock lock(shutdown_mu_);
  if (shut_down_) return;
  shut_down_ = true;
  const bool started = listener_ != nullptr;
  stopping_.store(true, std::memory_order_release);
  if (listener_) listener_->Shutdown();
  if (accept_thread_.joinable()) accept_thread_.join();
  std::list<std::unique_ptr<Worker>> all;
  {
    MutexLock wl(workers_mu_);
    all.swap(workers_);
  }
  for (auto& w : all) {
    if (w->thread.joinable()) w->thread.join();
  }
  all.clear();
  listener_.reset();
  replicator_.reset();  // no Apply runs any more: its connections go before the transport
  index_mr_.reset();
  heap_mr_.reset();
  store_.reset();  // closes RocksDB; the applier stays for Stats()
  if (started) LOG(INFO) << "server stopped";
}

Server::~Server() { Shutdown(); }

ServerStats Server::Stats() const {
  ServerStats s;
  s.connections = connections_open_.load(std::memory_order_relaxed);
  s.connections_accepted = connections_accepted_.load(std::memory_order_relaxed);
  s.connections_rejected = connections_rejected_.load(std::memory_order_relaxed);
  s.gets_served_by_cpu = 0;
  if (applier_ == nullptr) return s;
  const Applier::Snapshot a = applier_->snapshot();
  s.puts = a.puts;
  s.deletes = a.deletes;
  s.request_errors = a.request_errors;
  s.keys = a.keys;
  s.heap_bytes_used = a.heap.used_bytes;
  s.heap_bytes_quarantined = a.heap.quarantined_bytes;
  s.forwarded_writes = a.forwarded_writes;
  s.backup_failures = a.backup_failures;
  s.replica_writes = a.replica_writes;
  s.replica_stale = a.replica_stale;
  s.replica_refused = a.replica_refused;
  s.lease_refusals = a.lease_refusals;
  return s;
}

}  // namespace rkv::server
