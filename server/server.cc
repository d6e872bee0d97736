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
#include "server/table/rebuild.h"

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
// The wr_id of a probe (Connection::PostProbe): above every receive's and
// send's.
constexpr uint64_t kProbeTag = uint64_t{2} << 32;
constexpr auto kPollTimeout = std::chrono::milliseconds(50);
constexpr auto kAcceptTimeout = std::chrono::milliseconds(100);
// The most connections one Wait of a poller reports.
constexpr size_t kReadyPerWait = 256;

// A connection's message buffers, kMaxMessageBytes each: `credits`
// receive buffers, then `credits` reply buffers.
size_t ReceiveOffset(uint32_t buf) { return size_t{buf} * protocol::kMaxMessageBytes; }
size_t ReplyOffset(uint32_t credits, uint32_t reply) {
  return (size_t{credits} + reply) * protocol::kMaxMessageBytes;
}
LocalBuf ReceiveBuf(const transport::MemoryRegion* messages, uint32_t buf) {
  return LocalBuf{messages, ReceiveOffset(buf), static_cast<uint32_t>(protocol::kMaxMessageBytes)};
}

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

// One accepted connection, owned by its poller. Members are destroyed
// bottom-up: the connection (its registrations) before the memory those
// registrations cover.
struct Server::Served {
  // A client connection's hold on its client's entry in the request cache
  // (Applier::ClientConnected), for as long as the connection is served.
  class ClientPin {
   public:
    ClientPin(Applier* applier, uint64_t client_id) : applier_(applier), client_id_(client_id) {
      applier_->ClientConnected(client_id_);
    }
    ~ClientPin() { applier_->ClientDisconnected(client_id_); }
    ClientPin(const ClientPin&) = delete;
    ClientPin& operator=(const ClientPin&) = delete;

   private:
    Applier* const applier_;
    const uint64_t client_id_;
  };

  MappedMemory ring;
  MappedMemory messages;  // credits receive buffers, then credits reply buffers
  transport::MemoryRegion* ring_mr = nullptr;
  transport::MemoryRegion* messages_mr = nullptr;
  uint64_t client_id = 0;
  // A client's credential (its name and digest); empty for a peer.
  std::string credential;
  Sha256Digest credential_digest{};
  std::optional<ClientPin> pin;  // a client's, once accepted
  std::string peer_id;  // a replication connection: the sending server's id; empty for a client
  std::string peer;
  std::unique_ptr<transport::Connection> conn;
  // Receives not yet applied, in arrival order: a ring of `credits`
  // entries (each holds a receive buffer, so there are never more), and
  // the free reply buffers; neither allocates per request.
  struct Received {
    uint32_t buf = 0;
    uint32_t len = 0;
  };
  std::vector<Received> pending;
  size_t pending_head = 0;
  size_t pending_count = 0;
  std::vector<uint32_t> free_replies;
  // Set when posting a reply failed: closed after the round.
  Status broken;
  // Dead peers (ProbeSilent): when the poller last saw a completion of
  // this connection (or accepted it), and the probe in flight, if any.
  std::chrono::steady_clock::time_point last_heard;
  std::chrono::steady_clock::time_point probe_sent;
  bool probing = false;
  bool can_probe = true;  // false once the transport said it has no probe
};

// A reply written into its reply buffer by a round's apply and sent once
// the round is committed (Server::SendReplies).
struct Server::OwedReply {
  Served* served;
  uint32_t buf;    // the request's receive buffer, re-posted first
  uint32_t reply;  // the reply buffer
  std::chrono::steady_clock::time_point start;  // when its apply began
};

// A polling thread and the group it serves. The accept thread hands it
// new connections through the inbox; everything else is its own.
struct Server::Poller {
  std::unique_ptr<transport::PollGroup> group;
  std::thread thread;
  // Connections handed to this poller and not closed (the accept thread's
  // measure of load when it chooses a group).
  std::atomic<uint64_t> load{0};
  Mutex inbox_mu;
  std::vector<std::unique_ptr<Served>> inbox GUARDED_BY(inbox_mu);
  // The polling thread only.
  std::unordered_map<transport::Connection*, std::unique_ptr<Served>> served;
  // The client credentials' generation its connections were last checked
  // against (CloseRevoked).
  uint64_t credentials_checked = 0;
  // The polling thread's clock, read once a round, and when ProbeSilent
  // runs next.
  std::chrono::steady_clock::time_point round_now;
  std::chrono::steady_clock::time_point next_probe_sweep;
};

namespace {

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

void Server::PollLoop(Poller* p) {
  const uint32_t credits = options_.request_credits;
  std::vector<Completion> completions(2 * size_t{credits});
  std::vector<transport::Connection*> ready(kReadyPerWait);
  std::vector<std::unique_ptr<Served>> arrived;
  std::vector<transport::Connection*> arrived_keys;
  std::vector<OwedReply> owed;
  // The round's client writes, applied together after every connection
  // was served (Applier::ApplyBatch), and the entry of `owed` of each.
  std::vector<Applier::BatchWrite> writes;
  std::vector<size_t> writes_owed;
  while (!stopping_.load(std::memory_order_acquire)) {
    StatusOr<size_t> n = p->group->Wait(ready, kPollTimeout);
    p->round_now = std::chrono::steady_clock::now();
    if (!n.ok()) {
      // The group failed and so did every connection in it: close them.
      // Connections that arrive later are closed by their first Poll.
      LOG(ERROR) << "a polling thread's group failed: " << n.status();
      for (auto& [conn, s] : p->served) Close(*s, n.status());
      p->load.fetch_sub(p->served.size(), std::memory_order_relaxed);
      p->served.clear();
      std::this_thread::sleep_for(kPollTimeout);
      continue;
    }
    {
      MutexLock lock(p->inbox_mu);
      arrived.swap(p->inbox);
    }
    for (auto& s : arrived) {
      transport::Connection* key = s->conn.get();
      arrived_keys.push_back(key);
      p->served.emplace(key, std::move(s));
    }
    arrived.clear();
    // After a reload every connection is checked against the set in force;
    // otherwise only those just taken, which the accept thread may have
    // checked against the set before (the generation is read first: a
    // reload after this read is seen by the next round).
    if (const uint64_t generation = client_credentials_->generation(); generation != p->credentials_checked) {
      p->credentials_checked = generation;
      CloseRevoked(p, nullptr);
    } else if (!arrived_keys.empty()) {
      CloseRevoked(p, &arrived_keys);
    }
    arrived_keys.clear();
    // One round: apply what every reported connection has, then commit
    // the round (one fsync with --durability=sync) and reply.
    for (size_t i = 0; i < *n; ++i) {
      const auto it = p->served.find(ready[i]);
      if (it == p->served.end()) continue;  // not yet taken from the inbox
      const size_t owed_before = owed.size();
      const size_t writes_before = writes.size();
      if (!Serve(*it->second, completions, &owed, &writes, &writes_owed, p->round_now)) {
        // Its requests applied this round stay applied (and are synced
        // with the others); their replies have nowhere to go.
        owed.resize(owed_before);
        writes.resize(writes_before);
        writes_owed.resize(writes_before);
        Forget(p, ready[i]);
      }
    }
    if (!writes.empty()) {
      // The round's client writes, in arrival order per connection: a
      // primary forwards those of different keys together.
      applier_->ApplyBatch(writes);
      for (size_t i = 0; i < writes.size(); ++i) {
        const OwedReply& o = owed[writes_owed[i]];
        std::memcpy(o.served->messages.data() + ReplyOffset(credits, o.reply), &writes[i].reply,
                    sizeof(protocol::ReplyMsg));
      }
      writes.clear();
      writes_owed.clear();
    }
    if (!owed.empty()) SendReplies(p, &owed);
    if (options_.probe_idle_ms != 0 && p->round_now >= p->next_probe_sweep) {
      ProbeSilent(p, p->round_now);
      // A sweep every quarter of the shorter limit, at most every second.
      const uint32_t shorter = std::min(options_.probe_idle_ms, options_.probe_timeout_ms);
      p->next_probe_sweep =
          p->round_now + std::chrono::milliseconds(std::clamp<uint32_t>(shorter / 4, 10, 1000));
    }
  }
  {
    MutexLock lock(p->inbox_mu);
    for (auto& s : p->inbox) p->served.emplace(s->conn.get(), std::move(s));
    p->inbox.clear();
  }
  for (auto& [conn, s] : p->served) Close(*s, Status::Ok());
  p->load.store(0, std::memory_order_relaxed);
  p->served.clear();
}

bool Server::Serve(Served& s, std::span<Completion> completions, std::vector<OwedReply>* owed,
                   std::vector<Applier::BatchWrite>* writes, std::vector<size_t>* writes_owed,
                   std::chrono::steady_clock::time_point now) {
  transport::Connection& conn = *s.conn;
  const uint32_t credits = options_.request_credits;
  const std::span<const uint8_t> ring(s.ring.data(), s.ring.size());
  StatusOr<size_t> n = conn.Poll(completions, std::chrono::microseconds(0));
  if (!n.ok()) {
    Close(s, n.status());
    return false;
  }
  if (*n > 0) s.last_heard = now;
  Status ended;
  for (size_t i = 0; i < *n && ended.ok(); ++i) {
    const Completion& c = completions[i];
    if (!c.status.ok()) {
      ended = c.status;
    } else if (c.op == OpType::kRead && c.wr_id == kProbeTag && s.probing) {
      // The peer answered: it is there.
      s.probing = false;
      connections_probing_.fetch_sub(1, std::memory_order_relaxed);
    } else if (c.op == OpType::kRecv && c.wr_id < credits && s.pending_count < credits) {
      s.pending[(s.pending_head + s.pending_count) % credits] =
          Served::Received{static_cast<uint32_t>(c.wr_id), c.byte_len};
      ++s.pending_count;
    } else if (c.op == OpType::kSend && (c.wr_id & ~(kSendTag - 1)) == kSendTag &&
               (c.wr_id & (kSendTag - 1)) < credits) {
      s.free_replies.push_back(static_cast<uint32_t>(c.wr_id & (kSendTag - 1)));
    } else {
      ended = Internal("unexpected completion (wr_id " + std::to_string(c.wr_id) + ")");
    }
  }
  if (!ended.ok()) {
    // An error while a probe was out: the probe's failure, or what it
    // found (the peer gone) reported first by an earlier request.
    Close(s, ended, /*dead=*/s.probing);
    return false;
  }
  // Requests are applied in arrival order; one waits only for a free
  // reply buffer (a send completion), never for another connection.
  while (s.pending_count > 0 && !s.free_replies.empty()) {
    const auto [buf, len] = s.pending[s.pending_head];
    s.pending_head = (s.pending_head + 1) % credits;
    --s.pending_count;
    const size_t msg_len = std::min<size_t>(len, protocol::kMaxMessageBytes);
    const std::span<const uint8_t> msg(s.messages.data() + ReceiveOffset(buf), msg_len);
    const auto start = std::chrono::steady_clock::now();
    const uint32_t r = s.free_replies.back();
    s.free_replies.pop_back();
    if (s.peer_id.empty()) {
      // Applied with the round's other client writes, its reply written
      // into buffer r then (PollLoop).
      writes->push_back(Applier::BatchWrite{s.client_id, msg, ring, {}});
      writes_owed->push_back(owed->size());
    } else {
      const protocol::ReplyMsg reply = applier_->ApplyReplica(s.peer_id, msg, ring);
      std::memcpy(s.messages.data() + ReplyOffset(credits, r), &reply, sizeof(reply));
    }
    owed->push_back(OwedReply{&s, buf, r, start});
  }
  return true;
}

void Server::SendReplies(Poller* p, std::vector<OwedReply>* owed) {
  const uint32_t credits = options_.request_credits;
  // Acknowledged means durable: with group commit, the round's writes
  // (and whatever else was written meanwhile) are synced here, once.
  const Status synced = store_->SyncWrites();
  if (!synced.ok()) LOG(ERROR) << "group commit: " << synced;
  // One clock read for the round: its replies are posted next, together,
  // and held by the group so that each connection's replies leave in one
  // write (PollGroup::HoldSends; nothing below blocks).
  const auto answered = std::chrono::steady_clock::now();
  std::vector<Served*> broken;
  p->group->HoldSends();
  for (const OwedReply& o : *owed) {
    Served& s = *o.served;
    if (!s.broken.ok()) continue;
    const size_t reply_offset = ReplyOffset(credits, o.reply);
    uint8_t* const reply_bytes = s.messages.data() + reply_offset;
    if (!synced.ok()) {
      protocol::ReplyMsg reply;
      std::memcpy(&reply, reply_bytes, sizeof(reply));
      if (reply.status_code == static_cast<int32_t>(StatusCode::kOk)) {
        // Applied and visible, but not known to be durable.
        reply = MakeReply(reply.request_id, StatusCode::kUnavailable, 0,
                          "written but not synced (outcome unknown): " + synced.message(), Reason::kOutcomeUnknown);
        std::memcpy(reply_bytes, &reply, sizeof(reply));
      }
    }
    // Counted before the reply goes out: a client that reads the counters
    // once it has its reply finds the reply counted.
    (s.peer_id.empty() ? client_apply_latency_ : replica_apply_latency_).Record(answered - o.start);
    int32_t code = 0;
    std::memcpy(&code, reply_bytes + offsetof(protocol::ReplyMsg, status_code), sizeof(code));
    if (code != 0 && static_cast<uint32_t>(code) < kStatusCodeCount) [[unlikely]] {
      error_replies_[static_cast<size_t>(code)].fetch_add(1, std::memory_order_relaxed);
    }
    // Re-post the receive before replying: the reply returns the credit,
    // and the client may send its next request as soon as it sees it.
    Status st = s.conn->PostRecv(ReceiveBuf(s.messages_mr, o.buf), o.buf);
    if (st.ok()) {
      st = s.conn->PostSend(LocalBuf{s.messages_mr, reply_offset, sizeof(protocol::ReplyMsg)}, kSendTag | o.reply);
    }
    if (!st.ok()) {
      s.broken = st;
      broken.push_back(&s);
      continue;
    }
  }
  p->group->ReleaseSends();
  owed->clear();
  for (Served* s : broken) {
    transport::Connection* key = s->conn.get();
    Close(*s, s->broken);
    Forget(p, key);
  }
}

void Server::CloseRevoked(Poller* p, const std::vector<transport::Connection*>* only) {
  const std::shared_ptr<const ClientCredentials> now = client_credentials_->current();
  std::vector<transport::Connection*> revoked;
  const auto check = [&](transport::Connection* conn, const Served& s) {
    if (s.peer_id.empty() && !now->Contains(s.credential, s.credential_digest)) revoked.push_back(conn);
  };
  if (only == nullptr) {
    for (auto& [conn, s] : p->served) check(conn, *s);
  } else {
    for (transport::Connection* conn : *only) check(conn, *p->served.at(conn));
  }
  for (transport::Connection* conn : revoked) {
    Served& s = *p->served.at(conn);
    Close(s, Unauthenticated("client credential " + s.credential + " was revoked"));
    Forget(p, conn);
  }
}

void Server::Forget(Poller* p, transport::Connection* conn) {
  if (p->served.erase(conn) > 0) p->load.fetch_sub(1, std::memory_order_relaxed);
}

void Server::ProbeSilent(Poller* p, std::chrono::steady_clock::time_point now) {
  const auto idle = std::chrono::milliseconds(options_.probe_idle_ms);
  const auto timeout = std::chrono::milliseconds(options_.probe_timeout_ms);
  std::vector<transport::Connection*> dead;
  for (auto& [conn, served] : p->served) {
    Served& s = *served;
    if (s.probing) {
      if (now - s.probe_sent >= timeout) dead.push_back(conn);
      continue;
    }
    if (!s.can_probe || now - s.last_heard < idle) continue;
    const Status posted = s.conn->PostProbe(kProbeTag);
    if (posted.code() == StatusCode::kUnimplemented) {
      s.can_probe = false;  // the transport's own limits bound its peers
      continue;
    }
    if (!posted.ok()) {
      s.broken = posted;
      dead.push_back(conn);
      continue;
    }
    s.probing = true;
    s.probe_sent = now;
    connections_probing_.fetch_add(1, std::memory_order_relaxed);
  }
  for (transport::Connection* conn : dead) {
    Served& s = *p->served.at(conn);
    const Status why = s.broken.ok() ? DeadlineExceeded("the peer answered no probe within " +
                                                        std::to_string(options_.probe_timeout_ms) + " ms (after " +
                                                        std::to_string(options_.probe_idle_ms) + " ms of silence)")
                                     : s.broken;
    Close(s, why, /*dead=*/true);
    Forget(p, conn);
  }
}

void Server::Close(Served& s, const Status& why, bool dead) {
  if (s.probing) {
    s.probing = false;
    connections_probing_.fetch_sub(1, std::memory_order_relaxed);
  }
  if (dead) connections_released_dead_.fetch_add(1, std::memory_order_relaxed);
  if (why.ok()) {
    LOG(INFO) << "disconnecting client " << std::hex << s.client_id << std::dec << " from " << s.peer
              << " (server shutting down)";
  } else {
    LOG(INFO) << "connection of client " << std::hex << s.client_id << std::dec << " from " << s.peer
              << (s.credential.empty() ? "" : " (credential " + s.credential + ")") << " closed: " << why;
  }
  s.conn->Disconnect();
  s.conn.reset();
  connections_open_.fetch_sub(1, std::memory_order_relaxed);
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
  s.gets_served_by_cpu = 0;
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
  return s;
}

}  // namespace rkv::server
