// ServerConnection against a fake server in this process, over the real
// tcp transport: the server registers its index, heap and a staging ring
// per connection, accepts with AcceptData and answers PUT/DELETE requests
// from a thread of its own, as rkv-server does, but with tables the tests
// write by hand. The client's transport is a FaultTransport
// (common/transport/fault/), which brings the failures: connections that
// go down, memory changed between rounds of READs (its hook), READs that
// come back late, replies of the wrong size.
#include "client/server_connection.h"
#include "common/connect_proof.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "common/hash.h"
#include "common/mutex.h"
#include "common/record.h"
#include "common/thread_annotations.h"
#include "common/transport/factory.h"
#include "common/transport/fault/fault_transport.h"

namespace rkv::client {
namespace {

using namespace std::chrono_literals;
using transport::Completion;
using transport::OpType;
using transport::fault::FaultOp;
using transport::fault::FaultPoint;
using transport::fault::FaultTransport;

// What the fake server does with one request: given the record bytes in
// the ring and the request, fills the reply (whose request_id and credits
// are already set). Runs on the server's thread.
using RequestHandler = std::function<void(std::span<const uint8_t> record, const protocol::RequestMsg& req,
                                          protocol::ReplyMsg* reply)>;

// What the fake server does with a lookup (protocol::Op::kGet), when the
// test sets one: given the key and the request, fills the reply and, to
// land a block in the request's landing slot before it, sets *land to the
// block's heap range {offset, bytes} (bytes 0: the reply alone).
struct Landing {
  uint64_t heap_offset = 0;
  uint32_t bytes = 0;
};
using LookupHandler = std::function<void(std::string_view key, const protocol::RequestMsg& req,
                                         protocol::ReplyMsg* reply, Landing* land)>;
constexpr uint32_t kCredits = 4;
constexpr uint64_t kReplyTag = uint64_t{1} << 32;

// Thread safety: the tables (index, heap) are written by the test thread
// between operations and read by the transport; everything the serving
// threads share with the test is under mu_.
class FakeServer {
 public:
  FakeServer(uint32_t log2_buckets, size_t heap_blocks) {
    index.resize(1 + (size_t{1} << log2_buckets));
    heap.resize(heap_blocks);
    layout::TableHeader h{};
    h.magic = layout::kTableMagic;
    h.layout_version = layout::kLayoutVersion;
    h.bucket_count_log2 = log2_buckets;
    h.bucket_count = uint64_t{1} << log2_buckets;
    h.epoch = 3;
    h.hash_seed = 0x5eed;
    h.heap_size = heap.size() * sizeof(layout::Bucket);
    std::memcpy(index.data(), &h, sizeof(h));

    StatusOr<std::unique_ptr<transport::Transport>> t = transport::CreateTransport(transport::Kind::kTcp, {});
    EXPECT_TRUE(t.ok()) << t.status();
    transport_ = std::move(*t);
    index_mr_ = Register(index.data(), index.size() * sizeof(layout::Bucket), transport::kRemoteRead);
    heap_mr_ = Register(heap.data(), heap.size() * sizeof(layout::Bucket), transport::kRemoteRead);
    StatusOr<std::unique_ptr<transport::Listener>> listener = transport_->Listen("127.0.0.1:0");
    EXPECT_TRUE(listener.ok()) << listener.status();
    listener_ = std::move(*listener);
    acceptor_ = std::thread([this] { AcceptLoop(); });
  }

  ~FakeServer() {
    stop_.store(true);
    listener_->Shutdown();
    acceptor_.join();
    for (std::thread& t : servers_) t.join();
  }

  std::string address() const { return listener_->address(); }
  layout::TableHeader& header() { return *reinterpret_cast<layout::TableHeader*>(index.data()); }
  uint8_t* heap_bytes() { return reinterpret_cast<uint8_t*>(heap.data()); }

  // Writes a block for key/value at heap offset `offset` and publishes it
  // in the key's home bucket, slot `slot`.
  uint64_t Store(std::string_view key, std::string_view value, uint64_t version, uint64_t offset,
                 size_t slot = 0) {
    const uint64_t bytes =
        EncodeRecord(std::span<uint8_t>(heap_bytes() + offset, layout::BlockBytes(key.size(), value.size())), key,
                     value, version, 0);
    const Neighborhood nb = Choice(key);
    const uint64_t word = layout::MakeSlot(nb.fingerprint, offset, bytes);
    index[1 + nb.first].slots[slot] = word;
    return word;
  }
  // Marks the block at `offset` superseded, as the server does before the
  // slot store that replaces or deletes its key (common/layout.h).
  void Supersede(uint64_t offset) {
    uint64_t checksum;
    std::memcpy(&checksum, heap_bytes() + offset, sizeof(checksum));
    checksum = layout::SupersededChecksum(checksum);
    std::memcpy(heap_bytes() + offset, &checksum, sizeof(checksum));
  }
  // Empties every slot of `key`'s home bucket.
  void ClearHome(std::string_view key) { index[1 + Choice(key).first] = layout::Bucket{}; }
  Neighborhood Choice(std::string_view key) {
    return NeighborhoodOf(TableHash(key, header().hash_seed), header().bucket_count_log2);
  }

  // For the connections accepted from now on.
  void set_grace_period_us(uint32_t us) EXCLUDES(mu_) {
    MutexLock lock(mu_);
    grace_period_us_ = us;
  }
  void set_lookup_handler(LookupHandler handler) EXCLUDES(mu_) {
    MutexLock lock(mu_);
    lookup_handler_ = std::move(handler);
  }
  void set_handler(RequestHandler handler) EXCLUDES(mu_) {
    MutexLock lock(mu_);
    handler_ = std::move(handler);
  }
  // The PUT and DELETE requests received (lookups are only counted).
  std::vector<protocol::RequestMsg> requests() const EXCLUDES(mu_) {
    MutexLock lock(mu_);
    return requests_;
  }
  int lookups() const EXCLUDES(mu_) {
    MutexLock lock(mu_);
    return lookups_;
  }
  // Waits until `n` connections have ended because their client went
  // away; false if that does not happen within a limit no test reaches.
  bool WaitForEndedConnections(int n) EXCLUDES(mu_) {
    MutexLock lock(mu_);
    const auto deadline = Clock::now() + 30s;
    while (ended_ < n) {
      if (!ended_cv_.WaitUntil(mu_, deadline)) return ended_ >= n;
    }
    return true;
  }

  std::vector<layout::Bucket> index;  // [0] holds the TableHeader
  std::vector<layout::Bucket> heap;

 private:
  std::unique_ptr<transport::MemoryRegion> Register(void* p, size_t n, uint32_t access) {
    StatusOr<std::unique_ptr<transport::MemoryRegion>> mr = transport_->Register(p, n, access);
    EXPECT_TRUE(mr.ok()) << mr.status();
    return mr.ok() ? std::move(*mr) : nullptr;
  }

  void AcceptLoop() {
    while (true) {
      StatusOr<std::unique_ptr<transport::Connection>> next = listener_->Next(std::chrono::hours(1));
      if (!next.ok()) return;  // shut down
      if (*next == nullptr) continue;
      // A hello gets a challenge, as from a real server; the proof that
      // follows is accepted whatever its MAC (server/connect_request.h
      // checks it; its tests are there).
      const std::span<const uint8_t> hello = (*next)->peer_private_data();
      if (hello.size() >= sizeof(protocol::ConnectRequestData) &&
          protocol::IsHelloNonce(hello.data() + offsetof(protocol::ConnectRequestData, nonce))) {
        (*next)->Reject({StatusCode::kUnauthenticated, "challenge",
                         std::vector<uint8_t>(protocol::kNonceBytes, 0x5a)});
        continue;
      }
      servers_.emplace_back([this, conn = std::move(*next)]() mutable { Serve(std::move(conn)); });
    }
  }

  // One connection: its ring, receives and replies, the handshake, then
  // requests until the client goes or the server stops.
  void Serve(std::unique_ptr<transport::Connection> conn) {
    std::vector<layout::Bucket> ring(2 * layout::BlockBytes(64, 1024) / sizeof(layout::Bucket));
    auto* ring_bytes = reinterpret_cast<uint8_t*>(ring.data());
    const size_t ring_size = ring.size() * sizeof(layout::Bucket);
    // kCredits receive buffers, then kCredits reply buffers.
    std::vector<uint8_t> msgs(2 * kCredits * protocol::kMaxMessageBytes);
    std::unique_ptr<transport::MemoryRegion> msgs_mr = Register(msgs.data(), msgs.size(), transport::kLocalWrite);
    StatusOr<transport::MemoryRegion*> ring_mr =
        conn->RegisterPrivate(ring.data(), ring_size, transport::kRemoteWrite | transport::kLocalWrite);
    if (!ring_mr.ok() || msgs_mr == nullptr) {
      ADD_FAILURE() << ring_mr.status();
      return;
    }
    const auto buffer = [&](size_t slot) {
      return transport::LocalBuf{msgs_mr.get(), slot * protocol::kMaxMessageBytes,
                                 static_cast<uint32_t>(protocol::kMaxMessageBytes)};
    };
    for (uint32_t i = 0; i < kCredits; ++i) {
      if (!conn->PostRecv(buffer(i), i).ok()) return;
    }
    protocol::AcceptData accept{};
    accept.magic = protocol::kAcceptMagic;
    accept.protocol_version = protocol::kProtocolVersion;
    accept.layout_version = layout::kLayoutVersion;
    accept.epoch = 3;
    accept.index = {index_mr_->remote_addr(), index_mr_->size(), index_mr_->rkey(), 0};
    accept.heap = {heap_mr_->remote_addr(), heap_mr_->size(), heap_mr_->rkey(), 0};
    accept.ring = {(*ring_mr)->remote_addr(), ring_size, (*ring_mr)->rkey(), 0};
    accept.request_credits = kCredits;
    accept.max_key_bytes = 64;
    accept.max_value_bytes = 1024;
    {
      MutexLock lock(mu_);
      accept.grace_period_us = grace_period_us_;
    }
    if (!conn->Accept(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(&accept), sizeof(accept))).ok()) {
      return;
    }

    // A request waits for a free reply buffer (its previous SEND done).
    std::deque<uint64_t> waiting;
    std::vector<bool> reply_busy(kCredits, false);
    Completion out[8];
    while (!stop_.load()) {
      StatusOr<size_t> n = conn->Poll(out, 50ms);
      if (!n.ok()) {
        MutexLock lock(mu_);
        ++ended_;
        ended_cv_.NotifyAll();
        return;
      }
      for (size_t i = 0; i < *n; ++i) {
        const Completion& c = out[i];
        if (!c.status.ok()) continue;  // flushed: Poll fails next
        if (c.op == OpType::kSend) reply_busy[c.wr_id - kReplyTag] = false;
        if (c.op == OpType::kRecv) waiting.push_back(c.wr_id);
      }
      while (!waiting.empty()) {
        size_t r = 0;
        while (r < kCredits && reply_busy[r]) ++r;
        if (r == kCredits) break;
        const uint64_t slot = waiting.front();
        waiting.pop_front();
        protocol::RequestMsg req;
        std::memcpy(&req, msgs.data() + slot * protocol::kMaxMessageBytes, sizeof(req));
        const bool in_ring = req.ring_offset <= ring_size && req.length <= ring_size - req.ring_offset;
        const std::span<const uint8_t> record(ring_bytes + (in_ring ? req.ring_offset : 0), in_ring ? req.length : 0);
        protocol::ReplyMsg reply{};
        reply.request_id = req.request_id;
        reply.credits = 1;
        Landing land;
        if (req.op == static_cast<uint8_t>(protocol::Op::kGet)) {
          // A lookup (a GET of a key not in the location cache, on tcp):
          // without a lookup handler this server says it has no table to
          // look in, and the client READs, which most tests are about.
          const auto key = DecodeRecord(record);
          MutexLock lock(mu_);
          ++lookups_;
          if (lookup_handler_ && key.ok()) {
            lookup_handler_(key->key, req, &reply, &land);
          } else {
            reply.status_code = static_cast<int32_t>(StatusCode::kFailedPrecondition);
            std::strncpy(reply.message, "the fake server answers no lookup", sizeof(reply.message) - 1);
          }
        } else {
          MutexLock lock(mu_);
          requests_.push_back(req);
          if (handler_) handler_(record, req, &reply);
        }
        std::memcpy(msgs.data() + (kCredits + r) * protocol::kMaxMessageBytes, &reply, sizeof(reply));
        if (!conn->PostRecv(buffer(slot), slot).ok()) break;
        transport::LocalBuf send = buffer(kCredits + r);
        send.length = sizeof(reply);
        if (land.bytes > 0) {
          if (!conn->PostWriteSend(transport::LocalBuf{heap_mr_.get(), land.heap_offset, land.bytes},
                                   transport::RemoteBuf{req.landing_addr, req.landing_rkey}, send, kReplyTag + r)
                   .ok()) {
            break;
          }
        } else if (!conn->PostSend(send, kReplyTag + r).ok()) {
          break;
        }
        reply_busy[r] = true;
      }
    }
  }

  std::unique_ptr<transport::Transport> transport_;
  std::unique_ptr<transport::MemoryRegion> index_mr_;
  std::unique_ptr<transport::MemoryRegion> heap_mr_;
  std::unique_ptr<transport::Listener> listener_;
  std::atomic<bool> stop_{false};
  std::thread acceptor_;
  std::vector<std::thread> servers_;  // the acceptor's until it is joined

  mutable Mutex mu_;
  CondVar ended_cv_;
  uint32_t grace_period_us_ GUARDED_BY(mu_) = 60'000'000;  // a lease no test run can outlast
  RequestHandler handler_ GUARDED_BY(mu_);
  LookupHandler lookup_handler_ GUARDED_BY(mu_);
  std::vector<protocol::RequestMsg> requests_ GUARDED_BY(mu_);
  int lookups_ GUARDED_BY(mu_) = 0;
  int ended_ GUARDED_BY(mu_) = 0;
};

std::unique_ptr<FaultTransport> ClientTransport() {
  StatusOr<std::unique_ptr<transport::Transport>> tcp = transport::CreateTransport(transport::Kind::kTcp, {});
  EXPECT_TRUE(tcp.ok()) << tcp.status();
  return std::make_unique<FaultTransport>(std::move(*tcp));
}

Deadline Soon() { return Clock::now() + std::chrono::seconds(30); }

// Request ids are the caller's: unique per client, as Client numbers them.
uint64_t NextRequestId() {
  static uint64_t next = 1;
  return next++;
}

StatusOr<std::unique_ptr<ServerConnection>> Open(FaultTransport& t, const FakeServer& server) {
  return ServerConnection::Open(t, server.address(), protocol::ClientConnectParams{}, Soon());
}

std::unique_ptr<ServerConnection> OpenOrDie(FaultTransport& t, const FakeServer& server) {
  auto c = Open(t, server);
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? std::move(*c) : nullptr;
}

LookupResult LookupOne(ServerConnection& c, std::string_view key, Deadline deadline = Soon()) {
  LookupResult r;
  EXPECT_TRUE(c.Lookup(std::span<const std::string_view>(&key, 1), std::span<LookupResult>(&r, 1), deadline).ok());
  EXPECT_TRUE(r.done);
  return r;
}

// READs the client has posted (one per list in these single-key tests).
uint64_t Reads(const FaultTransport& t) { return t.faults().count(FaultOp::kRead); }

// An OK lookup reply of `reply`'s request with `version` and slot word
// `block`.
protocol::ReplyMsg MakeOk(const protocol::ReplyMsg* reply, uint64_t version, uint64_t block) {
  protocol::ReplyMsg r = *reply;
  r.status_code = 0;
  r.version = version;
  r.block = block;
  return r;
}

TEST(ServerConnectionTest, OpenChecksTheTableHeader) {
  FakeServer server(4, 64);
  auto t = ClientTransport();
  EXPECT_NE(OpenOrDie(*t, server), nullptr);

  server.header().epoch = 4;  // restarted after accepting
  EXPECT_EQ(Open(*t, server).status().code(), StatusCode::kUnavailable);

  server.header().epoch = 3;
  server.header().heap_size = 128;
  EXPECT_EQ(Open(*t, server).status().code(), StatusCode::kInvalidArgument);
}

TEST(ServerConnectionTest, FindsStoredKeysAndMissesAbsentOnes) {
  FakeServer server(4, 64);
  server.Store("alpha", "one", 7, 0);
  server.Store("beta", std::string("\0two\xff", 5), 9, 128, 3);
  auto t = ClientTransport();
  auto c = OpenOrDie(*t, server);
  ASSERT_NE(c, nullptr);

  LookupResult a = LookupOne(*c, "alpha");
  ASSERT_TRUE(a.status.ok()) << a.status;
  EXPECT_EQ(a.value, "one");
  EXPECT_EQ(a.version, 7u);
  LookupResult b = LookupOne(*c, "beta");
  ASSERT_TRUE(b.status.ok()) << b.status;
  EXPECT_EQ(b.value, std::string("\0two\xff", 5));
  EXPECT_EQ(LookupOne(*c, "gamma").status.code(), StatusCode::kNotFound);
  // On tcp each key was asked of the server first (no location cache
  // here); its refusal left the key to the READs, and the connection lives.
  EXPECT_EQ(server.lookups(), 3);
  EXPECT_FALSE(c->broken());
}

// A lookup handler that answers as rkv-server does (Applier::Locate) from
// the fake server's table: the key's slot word, its version, and its block
// landed when it fits the slot; NOT_FOUND when absent.
LookupHandler HonestLookups(FakeServer& server) {
  return [&server](std::string_view key, const protocol::RequestMsg& req, protocol::ReplyMsg* reply,
                   Landing* land) {
    const Neighborhood nb = server.Choice(key);
    for (const uint64_t slot : server.index[1 + nb.first].slots) {
      if (slot == layout::kEmptySlot || layout::SlotFingerprint(slot) != nb.fingerprint) continue;
      const auto rec = DecodeHeapBlock(std::span<const uint8_t>(server.heap_bytes() + layout::SlotBlockOffset(slot),
                                                                layout::SlotBlockBytes(slot)));
      if (!rec.ok() || rec->key != key) continue;
      reply->version = rec->version;
      reply->block = slot;
      if (layout::SlotBlockBytes(slot) <= req.landing_bytes) {
        *land = Landing{layout::SlotBlockOffset(slot), static_cast<uint32_t>(layout::SlotBlockBytes(slot))};
      }
      return;
    }
    reply->status_code = static_cast<int32_t>(StatusCode::kNotFound);
  };
}

TEST(ServerConnectionTest, ALookupAnswersAKeyWithNoRead) {
  FakeServer server(4, 64);
  server.Store("alpha", "one", 7, 0);
  server.set_lookup_handler(HonestLookups(server));
  auto t = ClientTransport();
  auto c = OpenOrDie(*t, server);
  ASSERT_NE(c, nullptr);
  const uint64_t reads = Reads(*t);  // the header's
  LookupResult a = LookupOne(*c, "alpha");
  ASSERT_TRUE(a.status.ok()) << a.status;
  EXPECT_EQ(a.value, "one");
  EXPECT_EQ(a.version, 7u);
  EXPECT_EQ(LookupOne(*c, "gamma").status.code(), StatusCode::kNotFound);
  EXPECT_EQ(Reads(*t), reads) << "found and absent alike: one request, one reply";
  EXPECT_EQ(server.lookups(), 2);
}

// Nothing remote is trusted: a reply whose landed block does not prove the
// key's record at the reply's version leaves the key to the READs, which
// find the truth.
TEST(ServerConnectionTest, ALandedBlockThatProvesNothingIsReadInstead) {
  FakeServer server(4, 64);
  const uint64_t alpha = server.Store("alpha", "one", 7, 0);
  const uint64_t beta = server.Store("beta", "two", 9, 128, 3);
  const auto alpha_bytes = static_cast<uint32_t>(layout::SlotBlockBytes(alpha));
  const auto beta_bytes = static_cast<uint32_t>(layout::SlotBlockBytes(beta));
  struct Case {
    const char* what;
    std::function<void(protocol::ReplyMsg*, Landing*)> lie;
  };
  const std::vector<Case> cases = {
      {"another version",
       [&](protocol::ReplyMsg* r, Landing* l) {
         *r = MakeOk(r, 8, alpha);
         *l = {0, alpha_bytes};
       }},
      {"another key's block",
       [&](protocol::ReplyMsg* r, Landing* l) {
         *r = MakeOk(r, 9, alpha);
         *l = {128, beta_bytes};
       }},
      {"no block landed", [&](protocol::ReplyMsg* r, Landing*) { *r = MakeOk(r, 7, alpha); }},
      {"a block word outside the heap",
       [&](protocol::ReplyMsg* r, Landing* l) {
         *r = MakeOk(r, 7, layout::MakeSlot(layout::SlotFingerprint(alpha), 64 * 1024, alpha_bytes));
         *l = {0, alpha_bytes};
       }},
      {"a refusal", [&](protocol::ReplyMsg* r, Landing*) {
         r->status_code = static_cast<int32_t>(StatusCode::kInvalidArgument);
       }},
  };
  for (const Case& cs : cases) {
    server.set_lookup_handler([&](std::string_view, const protocol::RequestMsg&, protocol::ReplyMsg* reply,
                                  Landing* land) { cs.lie(reply, land); });
    auto t = ClientTransport();
    auto c = OpenOrDie(*t, server);
    ASSERT_NE(c, nullptr);
    const uint64_t reads = Reads(*t);
    LookupResult a = LookupOne(*c, "alpha");
    ASSERT_TRUE(a.status.ok()) << cs.what << ": " << a.status;
    EXPECT_EQ(a.value, "one") << cs.what;
    EXPECT_EQ(a.version, 7u) << cs.what;
    EXPECT_GE(Reads(*t), reads + 2) << cs.what << ": the neighbourhood and the block READ";
    EXPECT_FALSE(c->broken()) << cs.what;
  }
}

TEST(ServerConnectionTest, ALookupAnsweredAfterTheLeaseIsReadInstead) {
  FakeServer server(4, 64);
  server.Store("alpha", "one", 7, 0);
  server.set_grace_period_us(20'000);  // a 10 ms lease
  const LookupHandler honest = HonestLookups(server);
  server.set_lookup_handler([&](std::string_view key, const protocol::RequestMsg& req, protocol::ReplyMsg* reply,
                                Landing* land) {
    std::this_thread::sleep_for(30ms);
    honest(key, req, reply, land);
  });
  auto t = ClientTransport();
  auto c = OpenOrDie(*t, server);
  ASSERT_NE(c, nullptr);
  const uint64_t reads = Reads(*t);
  LookupResult a = LookupOne(*c, "alpha");
  ASSERT_TRUE(a.status.ok()) << a.status;
  EXPECT_EQ(a.value, "one");
  EXPECT_GE(Reads(*t), reads + 2) << "a late block may have been reused: READ";
}

TEST(ServerConnectionTest, AMissIsConfirmedByASecondNeighbourhoodRead) {
  FakeServer server(4, 64);
  auto t = ClientTransport();
  // READ 5 (the fourth of the lookups below) is the second lookup's
  // confirming READ: the key appears just before it.
  t->faults().SetHook(FaultOp::kRead, [&](FaultPoint& p) {
    if (p.index == 5) server.Store("moving", "here", 3, 0, 7);
  });
  auto c = OpenOrDie(*t, server);  // READ 1: the header
  ASSERT_NE(c, nullptr);
  // Absent: two neighbourhood READs, no block READ, then NOT_FOUND.
  EXPECT_EQ(LookupOne(*c, "moving").status.code(), StatusCode::kNotFound);
  EXPECT_EQ(Reads(*t), 3u);
  // A key the first READ misses (the server was moving it) and the second
  // sees is found.
  LookupResult r = LookupOne(*c, "moving");
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_EQ(r.value, "here");
  EXPECT_EQ(Reads(*t), 6u);  // READ, confirming READ, block READ
  // A present key costs two READs: neighbourhood, block.
  EXPECT_TRUE(LookupOne(*c, "moving").status.ok());
  EXPECT_EQ(Reads(*t), 8u);
}

TEST(ServerConnectionTest, AConfirmationOutsideTheLeaseIsNotBelieved) {
  FakeServer server(4, 64);
  server.set_grace_period_us(400'000);  // a 200 ms lease
  auto t = ClientTransport();
  auto c = OpenOrDie(*t, server);
  ASSERT_NE(c, nullptr);
  // The confirming READ (the lookup's second) comes back 250 ms late,
  // after the lease: the miss is not trusted, and the lookup starts over
  // (a neighbourhood READ and its confirmation at least once more) before
  // NOT_FOUND.
  ASSERT_TRUE(t->faults().AddSpec("read:delay:nth=2,ms=250").ok());
  EXPECT_EQ(LookupOne(*c, "absent").status.code(), StatusCode::kNotFound);
  EXPECT_GE(Reads(*t), 5u);
}

TEST(ServerConnectionTest, FingerprintZeroIsNotConfusedWithEmptySlots) {
  FakeServer server(4, 64);
  // Two keys whose fingerprint is 0, like every empty slot word's top bits.
  std::vector<std::string> zero;
  for (int i = 0; zero.size() < 2; ++i) {
    const std::string k = "z" + std::to_string(i);
    if (server.Choice(k).fingerprint == 0) zero.push_back(k);
  }
  server.Store(zero[0], "found", 4, 0, 6);
  auto t = ClientTransport();
  auto c = OpenOrDie(*t, server);
  ASSERT_NE(c, nullptr);
  LookupResult r = LookupOne(*c, zero[0]);
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_EQ(r.value, "found");
  EXPECT_EQ(LookupOne(*c, zero[1]).status.code(), StatusCode::kNotFound);
}

TEST(ServerConnectionTest, FingerprintCollisionIsNotAMatch) {
  FakeServer server(4, 64);
  server.Store("alpha", "one", 1, 0);
  // A slot in "other"'s bucket with "other"'s fingerprint, but pointing at
  // alpha's block.
  const Neighborhood ch = server.Choice("other");
  server.index[1 + ch.first + ch.count - 1].slots[5] = layout::MakeSlot(ch.fingerprint, 0, 64);
  auto t = ClientTransport();
  auto c = OpenOrDie(*t, server);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(LookupOne(*c, "other").status.code(), StatusCode::kNotFound);
}

TEST(ServerConnectionTest, SlotOutsideTheHeapIsDataLoss) {
  FakeServer server(4, 64);
  const Neighborhood ch = server.Choice("k");
  server.index[1 + ch.first].slots[0] = layout::MakeSlot(ch.fingerprint, 64 * 64, 64);
  auto t = ClientTransport();
  auto c = OpenOrDie(*t, server);
  ASSERT_NE(c, nullptr);
  LookupResult r = LookupOne(*c, "k");
  EXPECT_EQ(r.status.code(), StatusCode::kDataLoss) << r.status;
  EXPECT_FALSE(c->broken());
}

TEST(ServerConnectionTest, TornBlockIsRetriedUntilItHolds) {
  FakeServer server(4, 64);
  server.Store("k", "value", 2, 0);
  server.heap_bytes()[27] ^= 1;  // a value byte: the checksum fails
  auto t = ClientTransport();
  // Repair the block before READ 4 (the second round's neighbourhood READ).
  t->faults().SetHook(FaultOp::kRead, [&](FaultPoint& p) {
    if (p.index == 4) server.heap_bytes()[27] ^= 1;
  });
  auto c = OpenOrDie(*t, server);  // READ 1: the header
  ASSERT_NE(c, nullptr);
  LookupResult r = LookupOne(*c, "k");
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_EQ(r.value, "value");
}

TEST(ServerConnectionTest, PersistentlyTornBlockExceedsTheDeadline) {
  FakeServer server(4, 64);
  server.Store("k", "value", 2, 0);
  server.heap_bytes()[27] ^= 1;
  auto t = ClientTransport();
  auto c = OpenOrDie(*t, server);
  ASSERT_NE(c, nullptr);
  // The GET retries the torn block until its deadline and never returns a
  // value. Where the deadline falls is up to the machine's speed: between
  // two rounds (the result says DEADLINE_EXCEEDED and why: the checksum),
  // or while a retry's READ is in flight (the connection gives up with
  // DEADLINE_EXCEEDED, the result not done). Either is right.
  std::string_view key = "k";
  LookupResult r;
  const Status s = c->Lookup(std::span<const std::string_view>(&key, 1), std::span<LookupResult>(&r, 1),
                             Clock::now() + 1s);
  if (s.ok()) {
    ASSERT_TRUE(r.done);
    EXPECT_EQ(r.status.code(), StatusCode::kDeadlineExceeded) << r.status;
    EXPECT_NE(r.status.message().find("checksum"), std::string::npos) << r.status;
  } else {
    EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded) << s;
    EXPECT_FALSE(r.done);
    EXPECT_TRUE(c->broken());
  }
}

TEST(ServerConnectionTest, BatchesManyKeys) {
  FakeServer server(8, 1024);
  std::vector<std::string> keys;
  for (int i = 0; i < 150; ++i) keys.push_back("key" + std::to_string(i));
  // Every third key present, each in its own 64-byte block (slot index by
  // order to avoid clobbering within a bucket).
  std::vector<int> used(1 << 8, 0);
  for (int i = 0; i < 150; i += 3) {
    const Neighborhood ch = server.Choice(keys[i]);
    server.Store(keys[i], "v" + std::to_string(i), 1, 64 * i, used[ch.first]++);
  }
  auto t = ClientTransport();
  auto c = OpenOrDie(*t, server);
  ASSERT_NE(c, nullptr);
  std::vector<std::string_view> views(keys.begin(), keys.end());
  std::vector<LookupResult> results(keys.size());
  ASSERT_TRUE(c->Lookup(views, results, Soon()).ok());
  for (int i = 0; i < 150; ++i) {
    ASSERT_TRUE(results[i].done);
    if (i % 3 == 0) {
      ASSERT_TRUE(results[i].status.ok()) << keys[i] << ": " << results[i].status;
      EXPECT_EQ(results[i].value, "v" + std::to_string(i));
    } else {
      EXPECT_EQ(results[i].status.code(), StatusCode::kNotFound) << keys[i];
    }
  }
}

TEST(ServerConnectionTest, PutWritesARecordIntoTheRingAndReturnsTheVersion) {
  FakeServer server(4, 64);
  // Written by the server's thread in the handler; read here after the
  // server's lock was taken again (requests()).
  uint64_t next_version = 10;
  std::vector<std::string> seen;
  server.set_handler([&](std::span<const uint8_t> record, const protocol::RequestMsg& req,
                         protocol::ReplyMsg* reply) {
    auto rec = DecodeRecord(record);
    ASSERT_TRUE(rec.ok()) << rec.status();
    EXPECT_EQ(rec->version, 0u);
    EXPECT_EQ(req.op == static_cast<uint8_t>(protocol::Op::kDelete), (rec->flags & layout::kBlockFlagTombstone) != 0);
    seen.push_back(std::string(rec->key) + "=" + std::string(rec->value));
    reply->version = next_version++;
  });
  auto t = ClientTransport();
  auto c = OpenOrDie(*t, server);
  ASSERT_NE(c, nullptr);
  auto v1 = c->Write(protocol::Op::kPut, "k", "hello", NextRequestId(), Soon());
  ASSERT_TRUE(v1.ok()) << v1.status();
  EXPECT_TRUE(v1->status.ok());
  EXPECT_EQ(v1->version, 10u);
  auto v2 = c->Write(protocol::Op::kDelete, "k", "", NextRequestId(), Soon());
  ASSERT_TRUE(v2.ok()) << v2.status();
  EXPECT_EQ(v2->version, 11u);
  const std::vector<protocol::RequestMsg> requests = server.requests();
  EXPECT_EQ(seen, (std::vector<std::string>{"k=hello", "k="}));
  ASSERT_EQ(requests.size(), 2u);
  EXPECT_NE(requests[0].request_id, requests[1].request_id);
  for (const auto& r : requests) EXPECT_EQ(r.ring_offset % 64, 0u);
  // Many more requests than credits or ring space: replies free both.
  for (int i = 0; i < 100; ++i) {
    auto v = c->Write(protocol::Op::kPut, "k", std::string(1000, 'x'), NextRequestId(), Soon());
    ASSERT_TRUE(v.ok()) << v.status();
  }
}

// ---- WriteBatch

// `n` PUTs of key "b<i>" with values of 1 + (i * 37) % 1000 bytes of 'a' + i % 26.
struct BatchOps {
  explicit BatchOps(size_t n) {
    for (size_t i = 0; i < n; ++i) {
      keys.push_back("b" + std::to_string(i));
      values.push_back(std::string(1 + (i * 37) % 1000, static_cast<char>('a' + i % 26)));
    }
    for (size_t i = 0; i < n; ++i) ops.push_back(WriteOp{protocol::Op::kPut, keys[i], values[i], NextRequestId()});
  }
  std::vector<std::string> keys;
  std::vector<std::string> values;
  std::vector<WriteOp> ops;
};

TEST(ServerConnectionTest, WriteBatchKeepsManyRequestsInFlightAndMatchesEachReply) {
  FakeServer server(4, 64);
  auto t = ClientTransport();
  // Written by the server's thread in the handler; read here after the
  // server's lock was taken again (requests()).
  std::vector<std::string> seen;
  uint64_t posted_at_first_request = 0;
  server.set_handler([&](std::span<const uint8_t> record, const protocol::RequestMsg& req,
                         protocol::ReplyMsg* reply) {
    if (seen.empty()) posted_at_first_request = t->faults().count(FaultOp::kSend);
    auto rec = DecodeRecord(record);
    ASSERT_TRUE(rec.ok()) << rec.status();
    seen.push_back(std::string(rec->key) + "=" + std::string(rec->value));
    reply->version = 1000 + req.request_id;
  });
  auto c = OpenOrDie(*t, server);
  ASSERT_NE(c, nullptr);
  // Far more records than the server's kCredits credits, and more bytes
  // than its ring (two of the largest records): the ring wraps many times.
  BatchOps batch(60);
  std::vector<WriteOutcome> outcomes(batch.ops.size());
  const Status s = c->WriteBatch(batch.ops, outcomes, Soon());
  ASSERT_TRUE(s.ok()) << s;
  const std::vector<protocol::RequestMsg> requests = server.requests();
  ASSERT_EQ(requests.size(), batch.ops.size());
  EXPECT_EQ(posted_at_first_request, kCredits) << "every credit was used before the first reply";
  bool wrapped = false;
  const uint64_t ring_bytes = c->accept().ring.length;
  for (size_t i = 0; i < batch.ops.size(); ++i) {
    EXPECT_TRUE(outcomes[i].sent);
    EXPECT_TRUE(outcomes[i].replied);
    EXPECT_TRUE(outcomes[i].result.status.ok()) << outcomes[i].result.status;
    EXPECT_EQ(outcomes[i].result.version, 1000 + batch.ops[i].request_id) << "the reply to op " << i;
    EXPECT_EQ(requests[i].request_id, batch.ops[i].request_id) << "sent in order";
    EXPECT_EQ(seen[i], batch.keys[i] + "=" + batch.values[i]);
    EXPECT_EQ(requests[i].ring_offset % 64, 0u);
    EXPECT_LE(requests[i].ring_offset + requests[i].length, ring_bytes) << "a record never straddles the end";
    if (i > 0 && requests[i].ring_offset < requests[i - 1].ring_offset) wrapped = true;
  }
  EXPECT_TRUE(wrapped);
  // The connection carries on: a single write, then another batch.
  auto one = c->Write(protocol::Op::kDelete, "b1", "", NextRequestId(), Soon());
  ASSERT_TRUE(one.ok()) << one.status();
  BatchOps again(7);
  ASSERT_TRUE(c->WriteBatch(again.ops, std::span<WriteOutcome>(outcomes.data(), 7), Soon()).ok());
  EXPECT_EQ(server.requests().size(), batch.ops.size() + 1 + 7);
}

TEST(ServerConnectionTest, WriteBatchPassesEachErrorReplyToItsOp) {
  FakeServer server(4, 64);
  server.set_handler([](std::span<const uint8_t> record, const protocol::RequestMsg&, protocol::ReplyMsg* reply) {
    auto rec = DecodeRecord(record);
    if (rec.ok() && rec->key == "b3") {
      reply->status_code = static_cast<int32_t>(StatusCode::kResourceExhausted);
      std::strcpy(reply->message, "heap full");
    } else {
      reply->version = 5;
    }
  });
  auto t = ClientTransport();
  auto c = OpenOrDie(*t, server);
  ASSERT_NE(c, nullptr);
  BatchOps batch(9);
  std::vector<WriteOutcome> outcomes(batch.ops.size());
  ASSERT_TRUE(c->WriteBatch(batch.ops, outcomes, Soon()).ok());
  for (size_t i = 0; i < outcomes.size(); ++i) {
    ASSERT_TRUE(outcomes[i].replied) << i;
    if (i == 3) {
      EXPECT_EQ(outcomes[i].result.status.code(), StatusCode::kResourceExhausted);
      EXPECT_EQ(outcomes[i].result.status.message(), "heap full");
    } else {
      EXPECT_TRUE(outcomes[i].result.status.ok()) << i << ": " << outcomes[i].result.status;
      EXPECT_EQ(outcomes[i].result.version, 5u);
    }
  }
  EXPECT_FALSE(c->broken());
}

TEST(ServerConnectionTest, WriteBatchRefusesAnOpOverTheLimitsAndSendsNothing) {
  FakeServer server(4, 64);
  auto t = ClientTransport();
  auto c = OpenOrDie(*t, server);
  ASSERT_NE(c, nullptr);
  const std::string too_long(1025, 'v');  // the fake server's max_value_bytes is 1024
  const WriteOp ops[] = {{protocol::Op::kPut, "ok", "v", NextRequestId()},
                         {protocol::Op::kPut, "big", too_long, NextRequestId()}};
  WriteOutcome outcomes[2];
  EXPECT_EQ(c->WriteBatch(ops, outcomes, Soon()).code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(outcomes[0].sent);
  EXPECT_FALSE(outcomes[1].sent);
  const WriteOp empty_key[] = {{protocol::Op::kPut, "", "v", NextRequestId()}};
  EXPECT_EQ(c->WriteBatch(empty_key, std::span<WriteOutcome>(outcomes, 1), Soon()).code(),
            StatusCode::kInvalidArgument);
  EXPECT_FALSE(c->broken());
  EXPECT_TRUE(server.requests().empty());
  EXPECT_TRUE(c->Write(protocol::Op::kPut, "ok", "v", NextRequestId(), Soon()).ok());
}

TEST(ServerConnectionTest, AReplyOutOfOrderInABatchBreaksTheConnection) {
  FakeServer server(4, 64);
  // The third request is answered with the id of the fourth.
  server.set_handler([](std::span<const uint8_t> record, const protocol::RequestMsg&, protocol::ReplyMsg* reply) {
    auto rec = DecodeRecord(record);
    if (rec.ok() && rec->key == "b2") reply->request_id += 1;
  });
  auto t = ClientTransport();
  auto c = OpenOrDie(*t, server);
  ASSERT_NE(c, nullptr);
  BatchOps batch(8);
  for (size_t i = 1; i < batch.ops.size(); ++i) batch.ops[i].request_id = batch.ops[0].request_id + i;
  std::vector<WriteOutcome> outcomes(batch.ops.size());
  const Status s = c->WriteBatch(batch.ops, outcomes, Soon());
  EXPECT_EQ(s.code(), StatusCode::kInternal) << s;
  EXPECT_TRUE(c->broken());
  EXPECT_TRUE(outcomes[0].replied && outcomes[1].replied);
  EXPECT_TRUE(outcomes[2].sent);
  EXPECT_FALSE(outcomes[2].replied) << "a reply naming another request answers nothing";
  for (size_t i = 3; i < outcomes.size(); ++i) EXPECT_FALSE(outcomes[i].replied) << i;
  EXPECT_TRUE(server.WaitForEndedConnections(1));
}

TEST(ServerConnectionTest, AConnectionBrokenMidBatchSaysWhichOpsWereSent) {
  FakeServer server(4, 64);
  auto t = ClientTransport();
  auto c = OpenOrDie(*t, server);
  ASSERT_NE(c, nullptr);
  // The second reply fails and takes the connection down: by then the
  // first kCredits requests were posted, plus at most the one the first
  // reply's credit let go.
  ASSERT_TRUE(t->faults().AddSpec("recv:fail:nth=2").ok());
  BatchOps batch(12);
  std::vector<WriteOutcome> outcomes(batch.ops.size());
  const Status s = c->WriteBatch(batch.ops, outcomes, Soon());
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s;
  EXPECT_TRUE(c->broken());
  EXPECT_TRUE(outcomes[0].sent && outcomes[0].replied);
  for (size_t i = 1; i < kCredits; ++i) {
    EXPECT_TRUE(outcomes[i].sent) << i;
    EXPECT_FALSE(outcomes[i].replied) << i;
  }
  for (size_t i = kCredits + 1; i < outcomes.size(); ++i) {
    EXPECT_FALSE(outcomes[i].sent) << i << " was posted without a credit";
    EXPECT_FALSE(outcomes[i].replied) << i;
  }
  // A broken connection fails the next batch at once, sending nothing.
  EXPECT_EQ(c->WriteBatch(batch.ops, outcomes, Soon()).code(), StatusCode::kUnavailable);
  for (const WriteOutcome& o : outcomes) EXPECT_FALSE(o.sent);
}

TEST(ServerConnectionTest, ServerErrorsArePassedThrough) {
  FakeServer server(4, 64);
  server.set_handler([](std::span<const uint8_t>, const protocol::RequestMsg&, protocol::ReplyMsg* reply) {
    reply->status_code = static_cast<int32_t>(StatusCode::kResourceExhausted);
    std::strcpy(reply->message, "heap full");
  });
  auto t = ClientTransport();
  auto c = OpenOrDie(*t, server);
  ASSERT_NE(c, nullptr);
  auto r = c->Write(protocol::Op::kPut, "k", "v", NextRequestId(), Soon());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status.code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(r->status.message(), "heap full");
  EXPECT_FALSE(c->broken());
}

TEST(ServerConnectionTest, MalformedRepliesBreakTheConnection) {
  FakeServer server(4, 64);
  server.set_handler([](std::span<const uint8_t>, const protocol::RequestMsg&, protocol::ReplyMsg* reply) {
    reply->status_code = 99;
  });
  auto t = ClientTransport();
  auto c = OpenOrDie(*t, server);
  ASSERT_NE(c, nullptr);
  auto r = c->Write(protocol::Op::kPut, "k", "v", NextRequestId(), Soon());
  EXPECT_FALSE(r.ok());
  EXPECT_TRUE(c->broken());
  // A broken connection is disconnected: the server sees its client go.
  EXPECT_TRUE(server.WaitForEndedConnections(1));

  // A reply naming another request.
  server.set_handler([](std::span<const uint8_t>, const protocol::RequestMsg&, protocol::ReplyMsg* reply) {
    reply->request_id += 5;
  });
  c = OpenOrDie(*t, server);
  ASSERT_NE(c, nullptr);
  EXPECT_FALSE(c->Write(protocol::Op::kPut, "k", "v", NextRequestId(), Soon()).ok());
  EXPECT_TRUE(c->broken());
  EXPECT_TRUE(server.WaitForEndedConnections(2));

  // A short reply: the client sees only 16 bytes of it.
  server.set_handler({});
  c = OpenOrDie(*t, server);
  ASSERT_NE(c, nullptr);
  t->faults().SetHook(FaultOp::kRecv, [](FaultPoint& p) { p.byte_len = 16; });
  EXPECT_FALSE(c->Write(protocol::Op::kPut, "k", "v", NextRequestId(), Soon()).ok());
  EXPECT_TRUE(c->broken());
  EXPECT_TRUE(server.WaitForEndedConnections(3));
}

TEST(ServerConnectionTest, TransportFailureBreaksTheConnection) {
  FakeServer server(4, 64);
  auto t = ClientTransport();
  auto c = OpenOrDie(*t, server);
  ASSERT_NE(c, nullptr);
  // The connection goes down under the next READ.
  ASSERT_TRUE(t->faults().AddSpec("read:fail").ok());
  std::string_view key = "k";
  LookupResult r;
  const Status s = c->Lookup(std::span<const std::string_view>(&key, 1), std::span<LookupResult>(&r, 1), Soon());
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_FALSE(r.done);
  EXPECT_TRUE(c->broken());
  EXPECT_EQ(c->Write(protocol::Op::kPut, "k", "v", NextRequestId(), Soon()).status().code(), StatusCode::kUnavailable);
}

TEST(ServerConnectionTest, ASlowReadAsksTheAbandonCheckAndEndsWhenItSaysSo) {
  FakeServer server(4, 64);
  auto t = ClientTransport();
  auto c = OpenOrDie(*t, server);
  ASSERT_NE(c, nullptr);
  std::vector<Clock::duration> asked;
  bool excluded = false;
  c->set_abandon_check([&](Clock::duration waited) {
    asked.push_back(waited);
    return excluded ? Unavailable("server fake is being failed over") : Status::Ok();
  });
  // A READ that completes late, within kReadLimit: waited for in slices,
  // the check asked between them, and the lookup succeeds. 900 ms: the
  // slices come every 50 ms after the first 100, so even a process kept off
  // the CPU for most of that time is asked twice, and the READ still ends
  // over a second before kReadLimit.
  ASSERT_TRUE(t->faults().AddSpec("read:delay:nth=1,ms=900").ok());
  LookupResult found = LookupOne(*c, "k");
  EXPECT_EQ(found.status.code(), StatusCode::kNotFound) << found.status;
  ASSERT_GE(asked.size(), 2u);
  EXPECT_GE(asked.front(), ServerConnection::kAbandonCheckAfter);
  EXPECT_TRUE(std::is_sorted(asked.begin(), asked.end()));
  EXPECT_FALSE(c->broken());

  // The next slow READ meets a check that says stop: the connection breaks
  // with its error, long before the READ would have completed.
  asked.clear();
  excluded = true;
  t->faults().ClearRules();
  ASSERT_TRUE(t->faults().AddSpec("read:delay:nth=1,ms=20000").ok());
  std::string_view key = "k";
  LookupResult r;
  const auto started = Clock::now();
  const Status s = c->Lookup(std::span<const std::string_view>(&key, 1), std::span<LookupResult>(&r, 1), Soon());
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s;
  EXPECT_NE(s.message().find("being failed over"), std::string::npos) << s;
  EXPECT_LT(Clock::now() - started, std::chrono::seconds(20));  // not the READ's completion
  EXPECT_EQ(asked.size(), 1u);
  EXPECT_TRUE(c->broken());
}

}  // namespace
}  // namespace rkv::client

namespace rkv::client {
namespace {

// ---- The location cache (docs/design.md §4.4).

// A connection with a cache of its own, as Client gives each of its pools.
struct Cached {
  explicit Cached(FakeServer& server)
      : t(ClientTransport()), cache(1 << 20), c(OpenOrDie(*t, server)) {
    if (c) c->UseLocationCache(&cache, cache.ServerTag("fake"));
  }
  std::unique_ptr<FaultTransport> t;
  LocationCache cache;
  std::unique_ptr<ServerConnection> c;
};

TEST(ServerConnectionCacheTest, ACachedKeyCostsOneRead) {
  FakeServer server(4, 64);
  server.Store("k", "value", 5, 128);
  Cached f(server);
  ASSERT_NE(f.c, nullptr);  // READ 1: the header
  LookupResult r = LookupOne(*f.c, "k");
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_EQ(Reads(*f.t), 3u);  // neighbourhood, block: the entry is made
  r = LookupOne(*f.c, "k");
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_EQ(r.value, "value");
  EXPECT_EQ(r.version, 5u);
  EXPECT_EQ(Reads(*f.t), 4u);  // the cached block alone
  const LocationCacheCounters c = f.cache.counters();
  EXPECT_EQ(c.hits, 1u);
  EXPECT_EQ(c.misses, 1u);
  EXPECT_EQ(c.fallbacks, 0u);
  EXPECT_EQ(c.entries, 1u);
}

// Replaced: the old block carries the mark. The cached READ is refused,
// the ordinary path answers with the new value and refreshes the entry.
TEST(ServerConnectionCacheTest, ASupersededBlockFallsBackAndRefreshes) {
  FakeServer server(4, 64);
  server.Store("k", "old", 5, 128);
  Cached f(server);
  ASSERT_NE(f.c, nullptr);
  ASSERT_TRUE(LookupOne(*f.c, "k").status.ok());
  server.Supersede(128);
  server.Store("k", "new", 6, 256);
  LookupResult r = LookupOne(*f.c, "k");
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_EQ(r.value, "new");
  EXPECT_EQ(r.version, 6u);
  EXPECT_EQ(Reads(*f.t), 6u);  // cached block (refused), neighbourhood, block
  EXPECT_EQ(f.cache.counters().fallbacks, 1u);
  r = LookupOne(*f.c, "k");
  EXPECT_EQ(r.value, "new");
  EXPECT_EQ(Reads(*f.t), 7u);  // the new block alone
  EXPECT_EQ(f.cache.counters().hits, 1u);
}

// The block was reused, wholly and validly, for another record: another
// key, or the same key at another version. Neither is believed.
TEST(ServerConnectionCacheTest, AReusedBlockIsNotBelieved) {
  FakeServer server(4, 64);
  server.Store("k", "v1", 5, 128);
  Cached f(server);
  ASSERT_NE(f.c, nullptr);
  ASSERT_TRUE(LookupOne(*f.c, "k").status.ok());

  // k now lives at 256; block 128 holds another key.
  server.ClearHome("k");
  server.Store("k", "v2", 7, 256);
  EncodeRecord(std::span<uint8_t>(server.heap_bytes() + 128, 64), "x", "other", 6, 0);
  LookupResult r = LookupOne(*f.c, "k");
  EXPECT_EQ(r.value, "v2");
  EXPECT_EQ(r.version, 7u);

  // k now lives at 384; block 256 holds k again, at a newer version that is
  // not (or no longer) the slot's.
  server.ClearHome("k");
  server.Store("k", "v3", 8, 384);
  EncodeRecord(std::span<uint8_t>(server.heap_bytes() + 256, 64), "k", "stale", 9, 0);
  r = LookupOne(*f.c, "k");
  EXPECT_EQ(r.value, "v3");
  EXPECT_EQ(r.version, 8u);
  EXPECT_EQ(f.cache.counters().fallbacks, 2u);
  EXPECT_EQ(f.cache.counters().hits, 0u);
}

TEST(ServerConnectionCacheTest, ADeletedKeyIsNotFoundAndForgotten) {
  FakeServer server(4, 64);
  server.Store("k", "v", 5, 128);
  Cached f(server);
  ASSERT_NE(f.c, nullptr);
  ASSERT_TRUE(LookupOne(*f.c, "k").status.ok());
  server.Supersede(128);
  server.ClearHome("k");
  EXPECT_EQ(LookupOne(*f.c, "k").status.code(), StatusCode::kNotFound);
  EXPECT_EQ(f.cache.counters().fallbacks, 1u);
  EXPECT_EQ(f.cache.counters().entries, 0u);
}

// A cached READ that completes after the lease may have raced the block's
// reuse: refused, even though the block is intact.
TEST(ServerConnectionCacheTest, ACachedReadOutsideTheLeaseIsNotBelieved) {
  FakeServer server(4, 64);
  server.set_grace_period_us(400'000);  // a 200 ms lease
  server.Store("k", "v", 5, 128);
  Cached f(server);
  ASSERT_NE(f.c, nullptr);
  ASSERT_TRUE(LookupOne(*f.c, "k").status.ok());  // READs 2, 3
  ASSERT_TRUE(f.t->faults().AddSpec("read:delay:nth=1,ms=250").ok());  // the cached READ
  LookupResult r = LookupOne(*f.c, "k");
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_EQ(r.value, "v");
  EXPECT_EQ(f.cache.counters().fallbacks, 1u);
  EXPECT_EQ(f.cache.counters().hits, 0u);
}

// An entry of another server incarnation names another heap: never READ.
TEST(ServerConnectionCacheTest, AnEntryOfAnotherEpochIsNotUsed) {
  FakeServer server(4, 64);
  server.Store("k", "v", 5, 128);
  Cached f(server);
  ASSERT_NE(f.c, nullptr);
  f.cache.Insert(f.cache.ServerTag("fake"), "k", ShardHash("k"), CachedLocation{/*epoch=*/2, 128, 64, 5});
  ASSERT_TRUE(LookupOne(*f.c, "k").status.ok());
  EXPECT_EQ(Reads(*f.t), 3u);  // the ordinary two
  EXPECT_EQ(f.cache.counters().misses, 1u);
}

// A batch of cached keys: one READ per key, no neighbourhood READ.
TEST(ServerConnectionCacheTest, ABatchOfCachedKeysCostsOneReadEach) {
  FakeServer server(8, 1024);
  std::vector<std::string> keys;
  std::vector<int> used(1 << 8, 0);
  for (int i = 0; i < 100; ++i) {
    keys.push_back("key" + std::to_string(i));
    const Neighborhood ch = server.Choice(keys[i]);
    server.Store(keys[i], "v" + std::to_string(i), 1, 64 * i, used[ch.first]++);
  }
  Cached f(server);
  ASSERT_NE(f.c, nullptr);
  std::vector<std::string_view> views(keys.begin(), keys.end());
  std::vector<LookupResult> results(keys.size());
  ASSERT_TRUE(f.c->Lookup(views, results, Soon()).ok());
  const uint64_t before = Reads(*f.t);
  std::vector<LookupResult> again(keys.size());
  ASSERT_TRUE(f.c->Lookup(views, again, Soon()).ok());
  EXPECT_EQ(Reads(*f.t) - before, keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    ASSERT_TRUE(again[i].status.ok()) << keys[i];
    EXPECT_EQ(again[i].value, "v" + std::to_string(i));
  }
  EXPECT_EQ(f.cache.counters().hits, keys.size());
}

}  // namespace
}  // namespace rkv::client
