// ServerConnection against an in-process fake transport whose "remote"
// memory is this process's memory: exercises the GET and PUT/DELETE
// protocol steps without a server.
#include "client/server_connection.h"

#include <gtest/gtest.h>

#include <cstring>
#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "common/hash.h"
#include "common/record.h"

namespace rkv::client {
namespace {

using transport::Completion;
using transport::LocalBuf;
using transport::OpType;
using transport::ReadOp;
using transport::RemoteBuf;

class FakeRegion : public transport::MemoryRegion {
 public:
  FakeRegion(void* addr, size_t len) : MemoryRegion(static_cast<uint8_t*>(addr), len, 1, 1) {}
};

// What the fake server does with one request: given the record bytes in
// the ring and the request, fills the reply.
using RequestHandler = std::function<void(std::span<const uint8_t> record,
                                          const protocol::RequestMsg& req, protocol::ReplyMsg* reply)>;

struct FakeServer {
  protocol::AcceptData accept{};
  std::vector<layout::Bucket> index;  // [0] holds the TableHeader
  std::vector<layout::Bucket> heap;
  std::vector<layout::Bucket> ring;
  RequestHandler handler;
  // Called before each READ list is served (to change memory between
  // rounds); gets the number of lists served so far.
  std::function<void(int)> before_reads;
  int read_lists = 0;
  std::vector<protocol::RequestMsg> requests;

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

    accept.magic = protocol::kAcceptMagic;
    accept.protocol_version = protocol::kProtocolVersion;
    accept.layout_version = layout::kLayoutVersion;
    accept.epoch = 3;
    accept.index = {reinterpret_cast<uint64_t>(index.data()), index.size() * sizeof(layout::Bucket), 1, 0};
    accept.heap = {reinterpret_cast<uint64_t>(heap.data()), h.heap_size, 1, 0};
    accept.max_key_bytes = 64;
    accept.max_value_bytes = 1024;
    ring.resize(2 * layout::BlockBytes(64, 1024) / sizeof(layout::Bucket));
    accept.ring = {reinterpret_cast<uint64_t>(ring.data()), ring.size() * sizeof(layout::Bucket), 1, 0};
    accept.request_credits = 4;
    accept.grace_period_us = 60'000'000;  // a lease no test run can outlast
  }

  layout::TableHeader& header() { return *reinterpret_cast<layout::TableHeader*>(index.data()); }
  uint8_t* heap_bytes() { return reinterpret_cast<uint8_t*>(heap.data()); }

  // Writes a block for key/value at heap offset `offset` and publishes it
  // in the key's home bucket, slot `slot`.
  uint64_t Store(std::string_view key, std::string_view value, uint64_t version, uint64_t offset,
                 size_t slot = 0) {
    const uint64_t bytes = EncodeRecord(std::span<uint8_t>(heap_bytes() + offset, layout::BlockBytes(key.size(), value.size())),
                                        key, value, version, 0);
    const Neighborhood nb = Choice(key);
    const uint64_t word = layout::MakeSlot(nb.fingerprint, offset, bytes);
    index[1 + nb.first].slots[slot] = word;
    return word;
  }
  Neighborhood Choice(std::string_view key) {
    return NeighborhoodOf(TableHash(key, header().hash_seed), header().bucket_count_log2);
  }
};

class FakeConnection : public transport::Connection {
 public:
  explicit FakeConnection(FakeServer* server) : server_(server) {
    private_.resize(sizeof(protocol::AcceptData));
    std::memcpy(private_.data(), &server->accept, sizeof(server->accept));
  }
  std::span<const uint8_t> peer_private_data() const override { return private_; }
  std::string peer_address() const override { return "fake:1"; }
  StatusOr<transport::MemoryRegion*> RegisterPrivate(void*, size_t, uint32_t) override {
    return Unimplemented("client side");
  }
  Status Accept(std::span<const uint8_t>) override { return Unimplemented("client side"); }
  void Reject(const transport::Rejection&) override {}

  Status PostReads(std::span<const ReadOp> ops) override {
    if (down) return Unavailable("down");
    if (server_->before_reads) server_->before_reads(server_->read_lists);
    ++server_->read_lists;
    for (const ReadOp& op : ops) {
      std::memcpy(op.local.mr->data() + op.local.offset, reinterpret_cast<const void*>(op.remote.addr),
                  op.local.length);
      if (op.signaled) completions_.push_back(Completion{op.wr_id, OpType::kRead, Status::Ok(), 0});
    }
    return Status::Ok();
  }
  Status PostWriteSend(LocalBuf src, RemoteBuf dst, LocalBuf send, uint64_t wr_id) override {
    if (down) return Unavailable("down");
    std::memcpy(reinterpret_cast<void*>(dst.addr), src.mr->data() + src.offset, src.length);
    protocol::RequestMsg req;
    std::memcpy(&req, send.mr->data() + send.offset, sizeof(req));
    server_->requests.push_back(req);
    completions_.push_back(Completion{wr_id, OpType::kSend, Status::Ok(), 0});
    protocol::ReplyMsg reply{};
    reply.request_id = req.request_id;
    reply.credits = 1;
    server_->handler(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(dst.addr), req.length), req,
                     &reply);
    EXPECT_FALSE(recvs_.empty());
    const auto [buf, id] = recvs_.front();
    recvs_.pop_front();
    std::memcpy(buf.mr->data() + buf.offset, &reply, sizeof(reply));
    completions_.push_back(Completion{id, OpType::kRecv, Status::Ok(), reply_bytes});
    return Status::Ok();
  }
  Status PostSend(LocalBuf, uint64_t) override { return Unimplemented("unused"); }
  Status PostRecv(LocalBuf buf, uint64_t wr_id) override {
    recvs_.emplace_back(buf, wr_id);
    return Status::Ok();
  }
  StatusOr<size_t> Poll(std::span<Completion> out, std::chrono::microseconds) override {
    if (down) return Unavailable("peer gone");
    size_t n = 0;
    while (n < out.size() && !completions_.empty()) {
      out[n++] = completions_.front();
      completions_.pop_front();
    }
    return n;
  }
  void Disconnect() override { ++disconnects; }

  bool down = false;
  int disconnects = 0;
  uint32_t reply_bytes = sizeof(protocol::ReplyMsg);

 private:
  FakeServer* server_;
  std::vector<uint8_t> private_;
  std::deque<Completion> completions_;
  std::deque<std::pair<LocalBuf, uint64_t>> recvs_;
};

class FakeTransport : public transport::Transport {
 public:
  explicit FakeTransport(FakeServer* server) : server_(server) {}
  transport::Kind kind() const override { return transport::Kind::kTcp; }
  StatusOr<std::unique_ptr<transport::MemoryRegion>> Register(void* addr, size_t length, uint32_t) override {
    return std::unique_ptr<transport::MemoryRegion>(new FakeRegion(addr, length));
  }
  StatusOr<std::unique_ptr<transport::Listener>> Listen(const std::string&) override {
    return Unimplemented("client side");
  }
  StatusOr<std::unique_ptr<transport::Connection>> Connect(const std::string&, std::span<const uint8_t>,
                                                           std::chrono::milliseconds) override {
    auto c = std::make_unique<FakeConnection>(server_);
    last = c.get();
    return std::unique_ptr<transport::Connection>(std::move(c));
  }
  FakeConnection* last = nullptr;

 private:
  FakeServer* server_;
};

Deadline Soon() { return Clock::now() + std::chrono::seconds(30); }

std::unique_ptr<ServerConnection> OpenOrDie(FakeTransport& t) {
  auto c = ServerConnection::Open(t, "fake:1", protocol::ConnectRequestData{}, Soon());
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? std::move(*c) : nullptr;
}

LookupResult LookupOne(ServerConnection& c, std::string_view key, Deadline deadline = Soon()) {
  LookupResult r;
  EXPECT_TRUE(c.Lookup(std::span<const std::string_view>(&key, 1), std::span<LookupResult>(&r, 1), deadline).ok());
  EXPECT_TRUE(r.done);
  return r;
}

TEST(ServerConnectionTest, OpenChecksTheTableHeader) {
  FakeServer server(4, 64);
  FakeTransport t(&server);
  EXPECT_NE(OpenOrDie(t), nullptr);

  server.header().epoch = 4;  // restarted after accepting
  auto c = ServerConnection::Open(t, "fake:1", protocol::ConnectRequestData{}, Soon());
  EXPECT_EQ(c.status().code(), StatusCode::kUnavailable);

  server.header().epoch = 3;
  server.header().heap_size = 128;
  c = ServerConnection::Open(t, "fake:1", protocol::ConnectRequestData{}, Soon());
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
}

TEST(ServerConnectionTest, FindsStoredKeysAndMissesAbsentOnes) {
  FakeServer server(4, 64);
  server.Store("alpha", "one", 7, 0);
  server.Store("beta", std::string("\0two\xff", 5), 9, 128, 3);
  FakeTransport t(&server);
  auto c = OpenOrDie(t);
  ASSERT_NE(c, nullptr);

  LookupResult a = LookupOne(*c, "alpha");
  ASSERT_TRUE(a.status.ok()) << a.status;
  EXPECT_EQ(a.value, "one");
  EXPECT_EQ(a.version, 7u);
  LookupResult b = LookupOne(*c, "beta");
  ASSERT_TRUE(b.status.ok()) << b.status;
  EXPECT_EQ(b.value, std::string("\0two\xff", 5));
  EXPECT_EQ(LookupOne(*c, "gamma").status.code(), StatusCode::kNotFound);
}

TEST(ServerConnectionTest, AMissIsConfirmedByASecondNeighbourhoodRead) {
  FakeServer server(4, 64);
  FakeTransport t(&server);
  auto c = OpenOrDie(t);  // list 0: the header
  // Absent: two neighbourhood READs, no block READ, then NOT_FOUND.
  EXPECT_EQ(LookupOne(*c, "moving").status.code(), StatusCode::kNotFound);
  EXPECT_EQ(server.read_lists, 3);
  // A key the first READ misses (the server was moving it) and the second
  // sees is found.
  server.before_reads = [&](int lists) {
    if (lists == 4) server.Store("moving", "here", 3, 0, 7);
  };
  LookupResult r = LookupOne(*c, "moving");
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_EQ(r.value, "here");
  EXPECT_EQ(server.read_lists, 6);  // READ, confirming READ, block READ
  // A present key costs two READs: neighbourhood, block.
  EXPECT_TRUE(LookupOne(*c, "moving").status.ok());
  EXPECT_EQ(server.read_lists, 8);
}

TEST(ServerConnectionTest, AConfirmationOutsideTheLeaseIsNotBelieved) {
  FakeServer server(4, 64);
  server.accept.grace_period_us = 20'000;  // a 10 ms lease
  FakeTransport t(&server);
  auto c = OpenOrDie(t);
  // The confirming READ (list 2) ends after the lease: the miss is not
  // trusted, and the lookup starts over (lists 3 and 4) before NOT_FOUND.
  server.before_reads = [&](int lists) {
    if (lists == 2) std::this_thread::sleep_for(std::chrono::milliseconds(15));
  };
  EXPECT_EQ(LookupOne(*c, "absent").status.code(), StatusCode::kNotFound);
  EXPECT_EQ(server.read_lists, 5);
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
  FakeTransport t(&server);
  auto c = OpenOrDie(t);
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
  FakeTransport t(&server);
  auto c = OpenOrDie(t);
  EXPECT_EQ(LookupOne(*c, "other").status.code(), StatusCode::kNotFound);
}

TEST(ServerConnectionTest, SlotOutsideTheHeapIsDataLoss) {
  FakeServer server(4, 64);
  const Neighborhood ch = server.Choice("k");
  server.index[1 + ch.first].slots[0] = layout::MakeSlot(ch.fingerprint, 64 * 64, 64);
  FakeTransport t(&server);
  auto c = OpenOrDie(t);
  LookupResult r = LookupOne(*c, "k");
  EXPECT_EQ(r.status.code(), StatusCode::kDataLoss) << r.status;
  EXPECT_FALSE(c->broken());
}

TEST(ServerConnectionTest, TornBlockIsRetriedUntilItHolds) {
  FakeServer server(4, 64);
  server.Store("k", "value", 2, 0);
  server.heap_bytes()[27] ^= 1;  // a value byte: the checksum fails
  // Repair the block before the third READ list (the second round's
  // neighbourhood READ).
  server.before_reads = [&](int lists) {
    if (lists == 3) server.heap_bytes()[27] ^= 1;
  };
  FakeTransport t(&server);
  auto c = OpenOrDie(t);  // list 0: the header
  LookupResult r = LookupOne(*c, "k");
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_EQ(r.value, "value");
}

TEST(ServerConnectionTest, PersistentlyTornBlockExceedsTheDeadline) {
  FakeServer server(4, 64);
  server.Store("k", "value", 2, 0);
  server.heap_bytes()[27] ^= 1;
  FakeTransport t(&server);
  auto c = OpenOrDie(t);
  LookupResult r = LookupOne(*c, "k", Clock::now() + std::chrono::milliseconds(500));
  EXPECT_EQ(r.status.code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(r.status.message().find("checksum"), std::string::npos) << r.status;
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
  FakeTransport t(&server);
  auto c = OpenOrDie(t);
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
  uint64_t next_version = 10;
  std::vector<std::string> seen;
  server.handler = [&](std::span<const uint8_t> record, const protocol::RequestMsg& req,
                       protocol::ReplyMsg* reply) {
    auto rec = DecodeRecord(record);
    ASSERT_TRUE(rec.ok()) << rec.status();
    EXPECT_EQ(rec->version, 0u);
    EXPECT_EQ(req.op == static_cast<uint8_t>(protocol::Op::kDelete),
              (rec->flags & layout::kBlockFlagTombstone) != 0);
    seen.push_back(std::string(rec->key) + "=" + std::string(rec->value));
    reply->version = next_version++;
  };
  FakeTransport t(&server);
  auto c = OpenOrDie(t);
  auto v1 = c->Apply(protocol::Op::kPut, "k", "hello", Soon());
  ASSERT_TRUE(v1.ok()) << v1.status();
  EXPECT_TRUE(v1->status.ok());
  EXPECT_EQ(v1->version, 10u);
  auto v2 = c->Apply(protocol::Op::kDelete, "k", "", Soon());
  ASSERT_TRUE(v2.ok()) << v2.status();
  EXPECT_EQ(v2->version, 11u);
  EXPECT_EQ(seen, (std::vector<std::string>{"k=hello", "k="}));
  ASSERT_EQ(server.requests.size(), 2u);
  EXPECT_NE(server.requests[0].request_id, server.requests[1].request_id);
  for (const auto& r : server.requests) EXPECT_EQ(r.ring_offset % 64, 0u);
  // Many more requests than credits or ring space: replies free both.
  for (int i = 0; i < 100; ++i) {
    auto v = c->Apply(protocol::Op::kPut, "k", std::string(1000, 'x'), Soon());
    ASSERT_TRUE(v.ok()) << v.status();
  }
}

TEST(ServerConnectionTest, ServerErrorsArePassedThrough) {
  FakeServer server(4, 64);
  server.handler = [](std::span<const uint8_t>, const protocol::RequestMsg&, protocol::ReplyMsg* reply) {
    reply->status_code = static_cast<int32_t>(StatusCode::kResourceExhausted);
    std::strcpy(reply->message, "heap full");
  };
  FakeTransport t(&server);
  auto c = OpenOrDie(t);
  auto r = c->Apply(protocol::Op::kPut, "k", "v", Soon());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status.code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(r->status.message(), "heap full");
  EXPECT_FALSE(c->broken());
}

TEST(ServerConnectionTest, MalformedRepliesBreakTheConnection) {
  FakeServer server(4, 64);
  server.handler = [](std::span<const uint8_t>, const protocol::RequestMsg&, protocol::ReplyMsg* reply) {
    reply->status_code = 99;
  };
  FakeTransport t(&server);
  auto c = OpenOrDie(t);
  auto r = c->Apply(protocol::Op::kPut, "k", "v", Soon());
  EXPECT_FALSE(r.ok());
  EXPECT_TRUE(c->broken());
  EXPECT_EQ(t.last->disconnects, 1);

  // A reply naming another request, and a short reply.
  server.handler = [](std::span<const uint8_t>, const protocol::RequestMsg&, protocol::ReplyMsg* reply) {
    reply->request_id += 5;
  };
  c = OpenOrDie(t);
  EXPECT_FALSE(c->Apply(protocol::Op::kPut, "k", "v", Soon()).ok());
  EXPECT_TRUE(c->broken());

  server.handler = [](std::span<const uint8_t>, const protocol::RequestMsg&, protocol::ReplyMsg*) {};
  c = OpenOrDie(t);
  t.last->reply_bytes = 16;
  EXPECT_FALSE(c->Apply(protocol::Op::kPut, "k", "v", Soon()).ok());
  EXPECT_TRUE(c->broken());
}

TEST(ServerConnectionTest, TransportFailureBreaksTheConnection) {
  FakeServer server(4, 64);
  FakeTransport t(&server);
  auto c = OpenOrDie(t);
  t.last->down = true;
  std::string_view key = "k";
  LookupResult r;
  const Status s = c->Lookup(std::span<const std::string_view>(&key, 1), std::span<LookupResult>(&r, 1), Soon());
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_FALSE(r.done);
  EXPECT_TRUE(c->broken());
  EXPECT_EQ(c->Apply(protocol::Op::kPut, "k", "v", Soon()).status().code(), StatusCode::kUnavailable);
}

}  // namespace
}  // namespace rkv::client
