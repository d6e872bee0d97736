#include "server/server.h"

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <optional>
#include <random>
#include <unordered_map>
#include <vector>

#include <glog/logging.h>

#include "common/clock.h"
#include "common/layout.h"
#include "common/protocol.h"
#include "common/token.h"
#include "common/transport/transport.h"
#include "server/connect_request.h"
#include "server/server_served.h"
#include "server/table/rebuild.h"

namespace rkv::server {

// The connection setup messages fit what every transport carries.
static_assert(protocol::kMaxConnectPrivateData <= transport::kMaxConnectPrivateData);
static_assert(protocol::kMaxAcceptPrivateData <= transport::kMaxAcceptPrivateData);
namespace {

using serving::ReceiveBuf;

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

std::shared_ptr<LiveClientCredentials> TokenCredentials(const std::string& token) {
  ClientCredentials one;
  // ValidateOptions checked the token (non-empty, bounded).
  if (Status s = one.Add(kTokenFileCredentialName, token); !s.ok()) LOG(ERROR) << "the server's token: " << s;
  return std::make_shared<LiveClientCredentials>(std::move(one));
}

}  // namespace

Server::Server(const ServerOptions& options, transport::Transport* transport, ReplicationPolicy* replication,
               std::string_view server_id, std::shared_ptr<LiveClientCredentials> client_credentials)
    : options_(options),
      transport_(transport),
      replication_(replication),
      server_id_(server_id),
      client_credentials_(client_credentials != nullptr ? std::move(client_credentials)
                                                        : TokenCredentials(options.token)),
      peer_credentials_(PeerCredentials(options)) {}

StatusOr<std::unique_ptr<Server>> Server::Start(const ServerOptions& options, transport::Transport* transport,
                                                ReplicationPolicy* replication, std::string_view server_id,
                                                std::shared_ptr<LiveClientCredentials> client_credentials) {
  RKV_RETURN_IF_ERROR(ValidateOptions(options));
  if (replication != nullptr && server_id.empty()) {
    return InvalidArgument("a replicating server needs its server id");
  }
  std::unique_ptr<Server> server(new Server(options, transport, replication, server_id, std::move(client_credentials)));
  RKV_RETURN_IF_ERROR(server->Init());
  return server;
}

Status Server::Init() {
  RKV_ASSIGN_OR_RETURN(challenges_, ConnectChallenges::Create());
  StoreOptions store_options;
  store_options.durability = options_.durability;
  if (options_.durability == Durability::kNone) {
    // The mode promises a clean shutdown only, so the RocksDB write leaves
    // the request path: a write-back buffer and its writer, written before
    // any scan of the store and on close (docs/design.md, "Durability
    // modes").
    store_options.background_queue = WriteBackKeys(options_);
    store_options.background_queue_bytes = WriteBackBytes(options_);
  }
  // With sync, the pollers commit in groups: one fsync for every write a
  // round applied, across connections (and across pollers that sync at
  // the same time), before any of them is acknowledged.
  store_options.deferred_sync = options_.durability == Durability::kSync;
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
    r.token = ClusterToken(options_);
    r.timeout = std::chrono::milliseconds(options_.replication_timeout_ms);
    r.max_record_bytes = MaxBlockBytes(options_);
    r.request_credits = options_.request_credits;
    // One lane per client poller (StartPollers gives the peers one of the
    // threads): each poller's write can forward while the others' do.
    r.lanes = std::max<uint32_t>(1, options_.threads - 1);
    r.is_down = [policy = replication_](const std::string& id, uint64_t epoch) { return policy->IsDown(id, epoch); };
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
            << (options_.durability == Durability::kNone
                    ? " with a " + std::to_string(WriteBackBytes(options_)) + "-byte write-back buffer"
                    : std::string())
            << ", poll " << PollModeName(options_.poll) << ")";
  RKV_RETURN_IF_ERROR(StartPollers());
  polling_threads_ = pollers_.size();
  LOG(INFO) << polling_threads_ << " polling threads (" << client_pollers_ << " for clients); a connection costs "
            << Cost().total() << " bytes of the server's memory beside the transport's";
  accept_thread_ = std::thread([this] { AcceptLoop(); });
  expiry_thread_ = std::thread([this] { ExpiryLoop(); });
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

Status Server::StartPollers() {
  // A replicating server gives one of its threads to the peers' poller
  // (two threads even with --threads=1: the peers' must never wait behind
  // a client write).
  client_pollers_ = replication_ != nullptr ? std::max<uint32_t>(1, options_.threads - 1) : options_.threads;
  const size_t total = client_pollers_ + (replication_ != nullptr ? 1 : 0);
  for (size_t i = 0; i < total; ++i) {
    auto p = std::make_unique<Poller>();
    RKV_ASSIGN_OR_RETURN(p->group, transport_->NewPollGroup());
    pollers_.push_back(std::move(p));
  }
  for (auto& p : pollers_) {
    Poller* raw = p.get();
    p->thread = std::thread([this, raw] { PollLoop(raw); });
  }
  return Status::Ok();
}

transport::PollGroup* Server::ChooseGroup(std::span<const uint8_t> private_data) {
  // Only the role is read here; HandlePending validates the request.
  if (pollers_.size() > client_pollers_ && IsPeerConnectRequest(private_data)) {
    chosen_ = pollers_.back().get();
  } else {
    chosen_ = pollers_.front().get();
    for (size_t i = 1; i < client_pollers_; ++i) {
      if (pollers_[i]->load.load(std::memory_order_relaxed) < chosen_->load.load(std::memory_order_relaxed)) {
        chosen_ = pollers_[i].get();
      }
    }
  }
  return chosen_->group.get();
}

void Server::AcceptLoop() {
  const transport::Listener::GroupChooser choose = [this](std::span<const uint8_t> data) {
    return ChooseGroup(data);
  };
  const transport::Listener::Screen screen = [this](std::span<const uint8_t> data, const std::string& peer) {
    return ScreenRequest(data, peer);
  };
  while (!stopping_.load(std::memory_order_acquire)) {
    chosen_ = nullptr;
    screened_.reset();
    StatusOr<std::unique_ptr<transport::Connection>> next = listener_->Next(kAcceptTimeout, screen, choose);
    // The listener's counts, for Stats (which may run while Shutdown
    // destroys the listener): at most one Next behind.
    const transport::ListenerCounters counted = listener_->counters();
    requests_screened_out_.store(counted.screened_out, std::memory_order_relaxed);
    requests_source_limited_.store(counted.source_limited, std::memory_order_relaxed);
    if (!next.ok()) {
      if (next.status().code() == StatusCode::kCancelled) break;
      LOG(WARNING) << "accepting a connection failed: " << next.status();
      std::this_thread::sleep_for(kAcceptTimeout);
      continue;
    }
    if (*next) HandlePending(std::move(*next));
  }
}

transport::Rejection Server::Refusal(const std::string& peer_address, StatusCode code, const std::string& message,
                                     const std::string& credential) {
  // At most one line a second: a flood of bad requests cannot flood the
  // log, and the line says how many refusals it stands for.
  if (const uint64_t unlogged = refusal_log_.Note(); unlogged > 0) {
    LOG(WARNING) << "refusing connection from " << peer_address
                 << (credential.empty() ? "" : " (credential " + credential + ")") << ": " << StatusCodeName(code)
                 << ": " << message << " [" << unlogged
                 << " refused connection(s) since the last such line, this one included]";
  }
  // Counted before the peer can see the refusal.
  if (code == StatusCode::kUnauthenticated) auth_failures_.fetch_add(1, std::memory_order_relaxed);
  connections_rejected_.fetch_add(1, std::memory_order_relaxed);
  return {code, message};
}

void Server::Refuse(transport::Connection& conn, StatusCode code, const std::string& message,
                    const std::string& credential) {
  conn.Reject(Refusal(conn.peer_address(), code, message, credential));
}

std::optional<transport::Rejection> Server::ScreenRequest(std::span<const uint8_t> private_data,
                                                          const std::string& peer_address) {
  screened_.reset();
  // The connect request is checked before the transport makes anything
  // for it (on verbs: no queue pair, completion queue or channel).
  std::string refused_credential;
  StatusOr<ConnectRequest> parsed = ParseConnectRequest(private_data, *client_credentials_->current(),
                                                        peer_credentials_, *challenges_, &refused_credential);
  if (!parsed.ok()) {
    return Refusal(peer_address, parsed.status().code(), parsed.status().message(), refused_credential);
  }
  if (parsed->hello) {
    // The first step of every connect: not a failure, so neither logged
    // nor counted as a refusal. The nonce is made, not stored.
    const protocol::Nonce nonce = challenges_->Issue();
    return transport::Rejection{StatusCode::kUnauthenticated, "connect again with the proof for this challenge",
                                std::vector<uint8_t>(nonce.begin(), nonce.end())};
  }
  std::string peer_id;
  if (parsed->role == ConnectRequest::Role::kPeer) {
    if (replication_ == nullptr) {
      return Refusal(peer_address, StatusCode::kPermissionDenied,
                     "this server is not in a cluster: it accepts no replication connections");
    }
    // May refetch the map (bounded, about a second) for a peer that just
    // restarted: the accept thread waits that long at most.
    std::optional<std::string> id = replication_->FindPeer(parsed->peer_fingerprint, parsed->peer_epoch);
    if (!id) return Refusal(peer_address, StatusCode::kPermissionDenied, "not a server of the current cluster map");
    // With per-server credentials a server's id is bound to its own: a
    // peer credential of another server cannot forward (or pose) as it.
    if (const std::string bound = replication_->BoundCredential(*id);
        !bound.empty() && bound != parsed->credential) {
      LOG(WARNING) << "replication connection from " << peer_address << " refused: credential "
                   << parsed->credential << " claimed to be server " << *id << ", which is bound to credential "
                   << bound;
      return Refusal(peer_address, StatusCode::kPermissionDenied,
                     "credential " + parsed->credential + " cannot act as server " + *id + " (bound to another)");
    }
    peer_id = std::move(*id);
  }
  if (connections_open_.load(std::memory_order_relaxed) >= options_.max_connections) {
    return Refusal(peer_address, StatusCode::kResourceExhausted,
                   "too many connections (max " + std::to_string(options_.max_connections) + ")");
  }
  screened_.emplace(Screened{std::move(*parsed), std::move(peer_id)});
  return std::nullopt;
}

void Server::HandlePending(std::unique_ptr<transport::Connection> conn) {
  // ScreenRequest checked the request and let it on; a listener that
  // screens after making the connection has run it too.
  if (!screened_) {
    return Refuse(*conn, StatusCode::kInternal, "the transport handed out a connection it did not screen");
  }
  const ConnectRequest req = std::move(screened_->request);
  std::string peer_id = std::move(screened_->peer_id);
  screened_.reset();

  Poller* const poller = chosen_;
  if (poller == nullptr) {
    return Refuse(*conn, StatusCode::kInternal, "the transport placed the connection in no poll group");
  }

  // From here `w` owns the connection, so that on every path the
  // connection (and its registrations) goes before the memory it covers.
  auto w = std::make_unique<Served>();
  w->client_id = req.client_id;
  w->credential = req.credential;
  w->credential_digest = req.credential_digest;
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
    for (uint32_t i = 0; i < credits; ++i) RKV_RETURN_IF_ERROR(c.PostRecv(ReceiveBuf(w->messages_mr, i), i));
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
    w->pin.emplace(applier_.get(), w->client_id);
    LOG(INFO) << "accepted client " << std::hex << w->client_id << std::dec << " from " << w->peer
              << " (credential " << w->credential << ")";
    MutexLock lock(accepted_by_credential_mu_);
    auto it = accepted_by_credential_.find(w->credential);
    if (it == accepted_by_credential_.end() && accepted_by_credential_.size() >= kMaxCredentialSeries) {
      it = accepted_by_credential_.try_emplace(std::string(kOtherCredentials), 0).first;
    } else if (it == accepted_by_credential_.end()) {
      it = accepted_by_credential_.emplace(w->credential, 0).first;
    }
    ++it->second;
  } else {
    LOG(INFO) << "accepted replication from server " << w->peer_id << " (epoch " << req.peer_epoch << ") at "
              << w->peer;
  }
  // The poller takes it from the inbox; the group may report it before
  // (level-triggered: it is reported again until polled).
  w->pending.resize(credits);
  w->free_replies.reserve(credits);
  for (uint32_t i = 0; i < credits; ++i) w->free_replies.push_back(i);
  w->last_heard = std::chrono::steady_clock::now();
  poller->load.fetch_add(1, std::memory_order_relaxed);
  {
    MutexLock lock(poller->inbox_mu);
    poller->inbox.push_back(std::move(w));
  }
  poller->group->Wake();
}

void Server::Shutdown() {
  MutexLock lock(shutdown_mu_);
  if (shut_down_) return;
  shut_down_ = true;
  const bool started = listener_ != nullptr;
  stopping_.store(true, std::memory_order_release);
  if (listener_) listener_->Shutdown();
  if (accept_thread_.joinable()) accept_thread_.join();
  {
    MutexLock wake(expiry_mu_);
    expiry_cv_.NotifyAll();
  }
  // Before the pollers and the replicator: a reclaim forwards like a write.
  if (expiry_thread_.joinable()) expiry_thread_.join();
  // Each poller closes its connections on its way out.
  for (auto& p : pollers_) p->group->Wake();
  for (auto& p : pollers_) {
    if (p->thread.joinable()) p->thread.join();
  }
  pollers_.clear();
  listener_.reset();
  replicator_.reset();  // no Apply runs any more: its connections go before the transport
  index_mr_.reset();
  heap_mr_.reset();
  if (store_ && store_->wal_syncs() > 0) {
    LOG(INFO) << "group commit: " << store_->synced_writes() << " writes synced in " << store_->wal_syncs()
              << " fsyncs";
  }
  store_.reset();  // closes RocksDB; the applier stays for Stats()
  if (started) LOG(INFO) << "server stopped";
}

Server::~Server() { Shutdown(); }

ConnectionCost Server::Cost() const {
  ConnectionCost c;
  c.ring_bytes = options_.ring_bytes;
  c.message_bytes = 2 * uint64_t{options_.request_credits} * protocol::kMaxMessageBytes;
  c.state_bytes = sizeof(Served) + uint64_t{options_.request_credits} * (sizeof(Served::Received) + sizeof(uint32_t));
  return c;
}

ServerStats Server::Stats() const {
  ServerStats s;
  s.connections = connections_open_.load(std::memory_order_relaxed);
  s.connections_accepted = connections_accepted_.load(std::memory_order_relaxed);
  s.connections_rejected = connections_rejected_.load(std::memory_order_relaxed);
  s.auth_failures = auth_failures_.load(std::memory_order_relaxed);
  s.connections_probing = connections_probing_.load(std::memory_order_relaxed);
  s.connections_released_dead = connections_released_dead_.load(std::memory_order_relaxed);
  s.connect_requests_screened_out = requests_screened_out_.load(std::memory_order_relaxed);
  s.connect_requests_source_limited = requests_source_limited_.load(std::memory_order_relaxed);
  {
    std::map<std::string, uint64_t, std::less<>> by_name;
    for (const ClientCredentials::Credential& c : client_credentials_->current()->credentials()) {
      by_name.emplace(c.name, 0);
    }
    MutexLock lock(accepted_by_credential_mu_);
    for (const auto& [name, count] : accepted_by_credential_) by_name[name] = count;
    s.connections_by_credential.assign(by_name.begin(), by_name.end());
  }
  s.polling_threads = polling_threads_;
  s.connection_cost = Cost();
  if (store_ != nullptr) {
    const Store::Unwritten u = store_->unwritten();
    s.store_unwritten_writes = u.writes;
    s.store_unwritten_bytes = u.bytes;
    const Store::Activity a = store_->activity();
    s.store_write_stall_micros = a.write_stall_micros;
    s.store_wal_bytes = a.wal_bytes;
  }
  for (size_t code = 1; code < kStatusCodeCount; ++code) {
    s.error_replies[code] = error_replies_[code].load(std::memory_order_relaxed);
  }
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
  s.conditions_failed = a.conditions_failed;
  s.expired_reclaimed = a.expired_reclaimed;
  s.gets_served_by_cpu = a.lookups;
  return s;
}

}  // namespace rkv::server
