// The server against the layout and protocol contracts, through the tcp
// transport, independently of the client library: a hand-made client
// connects, WRITEs records into its staging ring with a SEND naming them,
// and READs the table header, buckets and blocks back.
#include "server/server.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <deque>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <unistd.h>

#include "common/connect_handshake.h"
#include "common/hash.h"
#include "common/layout.h"
#include "common/protocol.h"
#include "common/record.h"
#include "common/token.h"
#include "common/transport/factory.h"
#include "common/transport/transport.h"
#include "tests/wait_for.h"

namespace rkv::server {
namespace {

using namespace std::chrono_literals;
using transport::Completion;
using transport::LocalBuf;
using transport::OpType;
using transport::ReadOp;
using transport::RemoteBuf;

constexpr char kToken[] = "e2e-token";
constexpr size_t kStage = 0;                 // local: record to WRITE
constexpr size_t kSendBuf = 1 << 20;         // local: RequestMsg
constexpr size_t kRecvBufs = kSendBuf + 4096;  // local: reply receive buffers
constexpr size_t kReadBuf = kRecvBufs + 64 * 1024;  // local: READ destination
constexpr size_t kLocalBytes = kReadBuf + (1 << 20);
constexpr uint32_t kRecvCount = 8;

// A minimal client on one connection.
class RawClient {
 public:
  static StatusOr<std::unique_ptr<RawClient>> Connect(transport::Transport* t, const std::string& address,
                                                      std::string_view token) {
    auto c = std::unique_ptr<RawClient>(new RawClient());
    c->local_.assign(kLocalBytes, 0);
    RKV_ASSIGN_OR_RETURN(c->mr_, t->Register(c->local_.data(), c->local_.size(), transport::kLocalWrite));
    c->landing_.assign(4096, 0);
    RKV_ASSIGN_OR_RETURN(c->landing_mr_, t->Register(c->landing_.data(), c->landing_.size(),
                                                     transport::kLocalWrite | transport::kRemoteWrite));
    // Request ids count per RawClient, so each is a client of its own.
    static std::atomic<uint64_t> next_client{0xC11E};
    RKV_ASSIGN_OR_RETURN(c->conn_, protocol::ConnectAsClient(*t, address,
                                                             protocol::MakeClientParams(next_client++, token), 5000ms));
    const auto pd = c->conn_->peer_private_data();
    if (pd.size() < sizeof(protocol::AcceptData)) return Internal("short accept data");
    std::memcpy(&c->accept_, pd.data(), sizeof(c->accept_));
    for (uint32_t i = 0; i < kRecvCount; ++i) {
      RKV_RETURN_IF_ERROR(c->conn_->PostRecv(LocalBuf{c->mr_.get(), kRecvBufs + i * 128, 128}, 100 + i));
    }
    return c;
  }

  const protocol::AcceptData& accept() const { return accept_; }
  transport::Connection& conn() { return *conn_; }

  // Stages a record at ring offset `ring_offset` and sends a request for
  // it; returns the reply.
  StatusOr<protocol::ReplyMsg> Request(protocol::Op op, std::string_view key, std::string_view value,
                                       uint64_t ring_offset = 0, bool corrupt = false) {
    RKV_RETURN_IF_ERROR(Post(op, key, value, ring_offset, corrupt));
    RKV_ASSIGN_OR_RETURN(std::vector<protocol::ReplyMsg> replies, Replies(1));
    return replies[0];
  }

  // A lookup of `key` (protocol::Op::kGet) naming the landing slot at
  // offset 0 of the landing region, `edit` applied to its message last.
  StatusOr<protocol::ReplyMsg> Lookup(std::string_view key,
                                      const std::function<void(protocol::RequestMsg&)>& edit = nullptr) {
    RKV_RETURN_IF_ERROR(Post(protocol::Op::kGet, key, "", 0, false, edit));
    RKV_ASSIGN_OR_RETURN(std::vector<protocol::ReplyMsg> replies, Replies(1));
    return replies[0];
  }
  // The landing region's bytes (what the server WROTE there).
  std::span<const uint8_t> landing() const { return landing_; }
  void ClearLanding() { std::fill(landing_.begin(), landing_.end(), 0); }

  // Posts one request (at most kRecvCount before Replies): its record
  // staged at `ring_offset`, `edit` applied to its message last. A
  // lookup's names the landing region's first slot.
  Status Post(protocol::Op op, std::string_view key, std::string_view value, uint64_t ring_offset = 0,
              bool corrupt = false, const std::function<void(protocol::RequestMsg&)>& edit = nullptr) {
    const uint16_t flags = op == protocol::Op::kDelete ? layout::kBlockFlagTombstone : 0;
    const size_t stage = kStage + ring_offset;
    const uint64_t len = EncodeRecord(std::span(local_).subspan(stage), key, value, 0, flags);
    if (corrupt) local_[stage + layout::RecordBytes(key.size(), value.size()) - 1] ^= 0xFF;
    protocol::RequestMsg m{};
    m.op = static_cast<uint8_t>(op);
    m.length = static_cast<uint32_t>(len);
    m.request_id = ++next_id_;
    m.ring_offset = ring_offset;
    if (op == protocol::Op::kGet) {
      m.landing_addr = landing_mr_->remote_addr();
      m.landing_rkey = landing_mr_->rkey();
      m.landing_bytes = static_cast<uint32_t>(landing_.size());
    }
    if (edit) edit(m);
    const size_t send = kSendBuf + (next_id_ % kRecvCount) * 64;
    std::memcpy(local_.data() + send, &m, sizeof(m));
    expected_.push_back(m.request_id);
    return conn_->PostWriteSend(LocalBuf{mr_.get(), stage, static_cast<uint32_t>(len)},
                                RemoteBuf{accept_.ring.addr + ring_offset, accept_.ring.rkey},
                                LocalBuf{mr_.get(), send, sizeof(m)}, 1);
  }

  // The replies to the next `n` requests posted, in order, once their
  // SENDs completed too.
  StatusOr<std::vector<protocol::ReplyMsg>> Replies(size_t n) {
    size_t sent = 0;
    std::vector<protocol::ReplyMsg> replies;
    while (sent < n || replies.size() < n) {
      RKV_ASSIGN_OR_RETURN(const Completion c, Next());
      if (c.op == OpType::kSend) {
        ++sent;
      } else if (c.op == OpType::kRecv) {
        if (c.byte_len != sizeof(protocol::ReplyMsg)) return Internal("reply of " + std::to_string(c.byte_len));
        protocol::ReplyMsg r;
        std::memcpy(&r, local_.data() + kRecvBufs + (c.wr_id - 100) * 128, sizeof(r));
        RKV_RETURN_IF_ERROR(conn_->PostRecv(LocalBuf{mr_.get(), kRecvBufs + (c.wr_id - 100) * 128, 128}, c.wr_id));
        if (expected_.empty() || r.request_id != expected_.front()) return Internal("reply for another request");
        expected_.pop_front();
        replies.push_back(r);
      }
    }
    return replies;
  }

  // READs `len` bytes at remote `addr` with `rkey`.
  StatusOr<std::vector<uint8_t>> Read(uint64_t addr, uint32_t rkey, uint32_t len) {
    ReadOp op;
    op.local = LocalBuf{mr_.get(), kReadBuf, len};
    op.remote = RemoteBuf{addr, rkey};
    op.wr_id = 7;
    op.signaled = true;
    RKV_RETURN_IF_ERROR(conn_->PostReads(std::span(&op, 1)));
    RKV_ASSIGN_OR_RETURN(const Completion c, Next());
    if (c.op != OpType::kRead || c.wr_id != 7) return Internal("unexpected completion");
    return std::vector<uint8_t>(local_.begin() + kReadBuf, local_.begin() + kReadBuf + len);
  }

  layout::TableHeader Header() {
    auto bytes = Read(accept_.index.addr, accept_.index.rkey, sizeof(layout::TableHeader));
    EXPECT_TRUE(bytes.ok()) << bytes.status();
    layout::TableHeader h{};
    if (bytes.ok()) std::memcpy(&h, bytes->data(), sizeof(h));
    return h;
  }

  // A GET done the way the layout says: header, the key's neighbourhood in
  // one READ, matching blocks. nullopt when absent (no key moves in these
  // tests, so a miss needs no confirmation).
  std::optional<RecordView> Get(std::string_view key, uint64_t* slot_out = nullptr) {
    const layout::TableHeader h = Header();
    const Neighborhood nb = NeighborhoodOf(TableHash(key, h.hash_seed), h.bucket_count_log2);
    auto bytes = Read(accept_.index.addr + layout::BucketOffset(nb.first), accept_.index.rkey,
                      nb.count * sizeof(layout::Bucket));
    EXPECT_TRUE(bytes.ok()) << bytes.status();
    if (!bytes.ok()) return std::nullopt;
    for (size_t s = 0; s < nb.count * layout::kSlotsPerBucket; ++s) {
      uint64_t slot;
      std::memcpy(&slot, bytes->data() + s * sizeof(slot), sizeof(slot));
      if (slot == layout::kEmptySlot || layout::SlotFingerprint(slot) != nb.fingerprint) continue;
      const uint32_t len = static_cast<uint32_t>(layout::SlotBlockBytes(slot));
      auto block = Read(accept_.heap.addr + layout::SlotBlockOffset(slot), accept_.heap.rkey, len);
      EXPECT_TRUE(block.ok()) << block.status();
      if (!block.ok()) return std::nullopt;
      block_ = std::move(*block);
      auto rec = DecodeRecord(block_);
      EXPECT_TRUE(rec.ok()) << rec.status();
      if (rec.ok() && rec->key == key) {
        if (slot_out) *slot_out = slot;
        return *rec;
      }
    }
    return std::nullopt;
  }

  // The next completion; fails on an error completion or after 10 s.
  StatusOr<Completion> Next() {
    for (int i = 0; i < 100; ++i) {
      Completion c;
      RKV_ASSIGN_OR_RETURN(const size_t n, conn_->Poll(std::span(&c, 1), 100ms));
      if (n == 1) {
        if (!c.status.ok()) return c.status;
        return c;
      }
    }
    return DeadlineExceeded("no completion");
  }

 private:
  RawClient() = default;
  std::vector<uint8_t> local_;
  std::vector<uint8_t> block_;
  std::vector<uint8_t> landing_;
  std::unique_ptr<transport::MemoryRegion> mr_;
  std::unique_ptr<transport::MemoryRegion> landing_mr_;
  std::unique_ptr<transport::Connection> conn_;
  protocol::AcceptData accept_{};
  uint64_t next_id_ = 0;
  std::deque<uint64_t> expected_;  // request ids posted and not yet answered
};

class ServerE2ETest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::path(::testing::TempDir()) /
           ("rkv_server_e2e_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    options_.listen = "127.0.0.1:0";
    options_.data_dir = dir_.string();
    options_.memory_bytes = 16 << 20;
    options_.max_keys = 1000;
    options_.token = kToken;
    options_.grace_period_ms = 100;
    auto t = transport::CreateTransport(transport::Kind::kTcp, transport::Options());
    ASSERT_TRUE(t.ok()) << t.status();
    server_transport_ = std::move(t).value();
    t = transport::CreateTransport(transport::Kind::kTcp, transport::Options());
    ASSERT_TRUE(t.ok()) << t.status();
    client_transport_ = std::move(t).value();
  }
  void TearDown() override {
    server_.reset();
    std::filesystem::remove_all(dir_);
  }

  void StartServer() {
    server_.reset();
    auto s = Server::Start(options_, server_transport_.get());
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = std::move(s).value();
  }

  std::unique_ptr<RawClient> MustConnect() {
    auto c = RawClient::Connect(client_transport_.get(), server_->address(), kToken);
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? std::move(c).value() : nullptr;
  }

  std::filesystem::path dir_;
  ServerOptions options_;
  std::unique_ptr<transport::Transport> server_transport_;
  std::unique_ptr<transport::Transport> client_transport_;
  std::unique_ptr<Server> server_;
};

TEST_F(ServerE2ETest, AcceptDataAndTableHeaderFollowTheContract) {
  StartServer();
  auto c = MustConnect();
  ASSERT_NE(c, nullptr);
  const protocol::AcceptData& a = c->accept();
  EXPECT_EQ(a.magic, protocol::kAcceptMagic);
  EXPECT_EQ(a.protocol_version, protocol::kProtocolVersion);
  EXPECT_EQ(a.layout_version, layout::kLayoutVersion);
  EXPECT_EQ(a.epoch, server_->epoch());
  EXPECT_EQ(a.request_credits, options_.request_credits);
  EXPECT_EQ(a.max_key_bytes, options_.max_key_bytes);
  EXPECT_EQ(a.max_value_bytes, options_.max_value_bytes);
  EXPECT_EQ(a.grace_period_us, 100'000u);
  EXPECT_EQ(a.ring.length, options_.ring_bytes);
  EXPECT_EQ(a.heap.length, options_.memory_bytes);
  const layout::TableHeader h = c->Header();
  EXPECT_EQ(h.magic, layout::kTableMagic);
  EXPECT_EQ(h.layout_version, layout::kLayoutVersion);
  EXPECT_EQ(h.epoch, server_->epoch());
  EXPECT_EQ(h.bucket_count, uint64_t{1} << h.bucket_count_log2);
  EXPECT_EQ(a.index.length, layout::IndexBytes(h.bucket_count));
  EXPECT_EQ(h.heap_size, a.heap.length);
  EXPECT_EQ(server_->Stats().connections, 1u);
}

TEST_F(ServerE2ETest, PutReplaceDeleteAreVisibleToOneSidedReads) {
  StartServer();
  auto c = MustConnect();
  ASSERT_NE(c, nullptr);
  auto r = c->Request(protocol::Op::kPut, "hello", "world");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status_code, 0) << r->message;
  EXPECT_EQ(r->credits, 1u);
  EXPECT_EQ(r->version, 1u);
  uint64_t slot1 = 0;
  auto got = c->Get("hello", &slot1);
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->value, "world");
  EXPECT_EQ(got->version, 1u);

  // Replace, from another ring offset: same key, new block, same bucket slot.
  r = c->Request(protocol::Op::kPut, "hello", std::string(5000, 'z'), 4096);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status_code, 0) << r->message;
  EXPECT_EQ(r->version, 2u);
  uint64_t slot2 = 0;
  got = c->Get("hello", &slot2);
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->value, std::string(5000, 'z'));
  EXPECT_EQ(got->version, 2u);
  EXPECT_NE(slot1, slot2);
  EXPECT_EQ(layout::SlotFingerprint(slot1), layout::SlotFingerprint(slot2));

  r = c->Request(protocol::Op::kDelete, "hello", "");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status_code, 0) << r->message;
  EXPECT_EQ(r->version, 2u);
  EXPECT_FALSE(c->Get("hello").has_value());

  r = c->Request(protocol::Op::kDelete, "hello", "");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->status_code, static_cast<int32_t>(StatusCode::kNotFound));

  const ServerStats s = server_->Stats();
  EXPECT_EQ(s.puts, 2u);
  EXPECT_EQ(s.deletes, 1u);
  EXPECT_EQ(s.keys, 0u);
  EXPECT_EQ(s.gets_served_by_cpu, 0u) << "READs only: no lookup";
}

TEST_F(ServerE2ETest, BadRequestsGetErrorRepliesAndTheConnectionLives) {
  StartServer();
  auto c = MustConnect();
  ASSERT_NE(c, nullptr);
  auto r = c->Request(protocol::Op::kPut, "k", "v", 0, /*corrupt=*/true);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status_code, static_cast<int32_t>(StatusCode::kDataLoss)) << r->message;
  EXPECT_EQ(r->credits, 1u);
  r = c->Request(protocol::Op::kPut, std::string(options_.max_key_bytes + 1, 'k'), "v");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status_code, static_cast<int32_t>(StatusCode::kInvalidArgument)) << r->message;
  r = c->Request(protocol::Op::kPut, "k", "v");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status_code, 0) << r->message;
  EXPECT_EQ(server_->Stats().request_errors, 2u);
}

TEST_F(ServerE2ETest, ALookupIsAnsweredWithItsBlockAndBadLookupsAreRefused) {
  StartServer();
  auto c = MustConnect();
  ASSERT_NE(c, nullptr);
  auto r = c->Request(protocol::Op::kPut, "hello", "world");
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->status_code, 0) << r->message;
  const uint64_t version = r->version;

  // Found: the reply names the block and its version, and the block itself
  // landed in the slot before the reply came.
  r = c->Lookup("hello");
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->status_code, 0) << r->message;
  EXPECT_EQ(r->version, version);
  uint64_t slot = 0;
  ASSERT_TRUE(c->Get("hello", &slot).has_value());
  EXPECT_EQ(r->block, slot);
  auto landed = DecodeHeapBlock(c->landing().first(layout::SlotBlockBytes(r->block)));
  ASSERT_TRUE(landed.ok()) << landed.status();
  EXPECT_EQ(landed->key, "hello");
  EXPECT_EQ(landed->value, "world");
  EXPECT_EQ(landed->version, version);

  // Absent: NOT_FOUND, nothing written.
  c->ClearLanding();
  r = c->Lookup("nobody");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status_code, static_cast<int32_t>(StatusCode::kNotFound));
  EXPECT_EQ(r->block, 0u);
  // A slot too small for the block: the reply alone.
  r = c->Lookup("hello", [](protocol::RequestMsg& m) { m.landing_bytes = layout::kBlockHeaderBytes; });
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status_code, 0) << r->message;
  EXPECT_EQ(r->block, slot);
  EXPECT_EQ(std::count(c->landing().begin(), c->landing().end(), 0), static_cast<ptrdiff_t>(c->landing().size()));
  EXPECT_EQ(server_->Stats().gets_served_by_cpu, 3u);

  // Malformed lookups: INVALID_ARGUMENT each, nothing written, and the
  // connection goes on.
  const std::vector<std::function<void(protocol::RequestMsg&)>> bad = {
      [](protocol::RequestMsg& m) { m.flags = protocol::kRequestResent; },
      [](protocol::RequestMsg& m) { m.condition = static_cast<uint8_t>(protocol::Condition::kAbsent); },
      [](protocol::RequestMsg& m) { m.reserved = 1; },
      [](protocol::RequestMsg& m) { m.map_version = 3; },
      [](protocol::RequestMsg& m) { m.expected_version = 1; },
      [](protocol::RequestMsg& m) { m.ring_offset = 8; },
      [&](protocol::RequestMsg& m) { m.ring_offset = c->accept().ring.length; },
      [](protocol::RequestMsg& m) { m.length = 8; },
      [](protocol::RequestMsg& m) { m.landing_bytes = 8; },
      [](protocol::RequestMsg& m) { m.length += 64; },
  };
  for (size_t i = 0; i < bad.size(); ++i) {
    r = c->Lookup("hello", bad[i]);
    ASSERT_TRUE(r.ok()) << i << ": " << r.status();
    EXPECT_EQ(r->status_code, static_cast<int32_t>(StatusCode::kInvalidArgument)) << i << ": " << r->message;
  }
  // A lookup record with a value, and one with a corrupt checksum.
  ASSERT_TRUE(c->Post(protocol::Op::kGet, "hello", "a value").ok());
  auto replies = c->Replies(1);
  ASSERT_TRUE(replies.ok()) << replies.status();
  EXPECT_EQ((*replies)[0].status_code, static_cast<int32_t>(StatusCode::kInvalidArgument)) << (*replies)[0].message;
  ASSERT_TRUE(c->Post(protocol::Op::kGet, "hello", "", 0, /*corrupt=*/true).ok());
  replies = c->Replies(1);
  ASSERT_TRUE(replies.ok()) << replies.status();
  EXPECT_EQ((*replies)[0].status_code, static_cast<int32_t>(StatusCode::kDataLoss)) << (*replies)[0].message;
  EXPECT_EQ(std::count(c->landing().begin(), c->landing().end(), 0), static_cast<ptrdiff_t>(c->landing().size()));
  r = c->Lookup("hello");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status_code, 0) << r->message;
  // Lookups change nothing and are not writes.
  const ServerStats s = server_->Stats();
  EXPECT_EQ(s.puts, 1u);
  EXPECT_EQ(s.connections, 1u);
}

TEST_F(ServerE2ETest, ALookupPipelinedBehindAPutOfItsKeyFindsThePut) {
  StartServer();
  auto c = MustConnect();
  ASSERT_NE(c, nullptr);
  uint64_t last = 0;
  for (int i = 0; i < 20; ++i) {
    // Both posted before either is answered: the server may take them in
    // one round.
    ASSERT_TRUE(c->Post(protocol::Op::kPut, "k", "v" + std::to_string(i), 0).ok());
    ASSERT_TRUE(c->Post(protocol::Op::kGet, "k", "", 1024).ok());
    auto replies = c->Replies(2);
    ASSERT_TRUE(replies.ok()) << replies.status();
    ASSERT_EQ((*replies)[0].status_code, 0) << (*replies)[0].message;
    ASSERT_EQ((*replies)[1].status_code, 0) << (*replies)[1].message;
    EXPECT_GT((*replies)[0].version, last);
    last = (*replies)[0].version;
    EXPECT_EQ((*replies)[1].version, (*replies)[0].version) << i;
  }
}

TEST_F(ServerE2ETest, APeerCannotSendALookupAndAWriteIsNoLookup) {
  // A write path handed a lookup refuses it (Serve routes lookups to
  // Locate; Apply and ApplyReplica never answer one).
  StartServer();
  Applier* applier = server_->applier();
  protocol::RequestMsg m{};
  m.op = static_cast<uint8_t>(protocol::Op::kGet);
  m.request_id = 5;
  const std::span<const uint8_t> msg(reinterpret_cast<const uint8_t*>(&m), sizeof(m));
  std::vector<uint8_t> ring(4096, 0);
  const protocol::ReplyMsg as_write = applier->Apply(1, msg, ring);
  EXPECT_EQ(as_write.status_code, static_cast<int32_t>(StatusCode::kInvalidArgument)) << as_write.message;
  const protocol::ReplyMsg as_replica = applier->ApplyReplica("peer", msg, ring);
  EXPECT_EQ(as_replica.status_code, static_cast<int32_t>(StatusCode::kPermissionDenied)) << as_replica.message;
}

TEST_F(ServerE2ETest, TableAndHeapAreNotRemotelyWritable) {
  StartServer();
  auto c = MustConnect();
  ASSERT_NE(c, nullptr);
  // A WRITE aimed at the heap with the heap's rkey fails the connection.
  auto r = c->Request(protocol::Op::kPut, "k", "v");
  ASSERT_TRUE(r.ok());
  std::vector<uint8_t> junk(64, 0xEE);
  auto mr = client_transport_->Register(junk.data(), junk.size(), transport::kLocalWrite);
  ASSERT_TRUE(mr.ok());
  std::vector<uint8_t> msg(sizeof(protocol::RequestMsg), 0);
  auto msg_mr = client_transport_->Register(msg.data(), msg.size(), transport::kLocalWrite);
  ASSERT_TRUE(msg_mr.ok());
  Status posted = c->conn().PostWriteSend(LocalBuf{mr->get(), 0, 64}, RemoteBuf{c->accept().heap.addr, c->accept().heap.rkey},
                                          LocalBuf{msg_mr->get(), 0, static_cast<uint32_t>(msg.size())}, 9);
  if (posted.ok()) {
    auto done = c->Next();
    EXPECT_FALSE(done.ok());
  }
  // The heap is unchanged: a fresh client still reads the value.
  auto c2 = MustConnect();
  ASSERT_NE(c2, nullptr);
  auto got = c2->Get("k");
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->value, "v");
}

TEST_F(ServerE2ETest, WrongTokenIsRejectedBeforeAccept) {
  StartServer();
  auto c = RawClient::Connect(client_transport_.get(), server_->address(), "not-the-token");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kPermissionDenied) << c.status();
  EXPECT_NE(c.status().message().find("invalid token"), std::string::npos) << c.status();
  EXPECT_EQ(server_->Stats().connections_rejected, 1u);
  EXPECT_EQ(server_->Stats().connections_accepted, 0u);
}

TEST_F(ServerE2ETest, MalformedConnectRequestIsRejected) {
  StartServer();
  const uint8_t junk[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  auto c = client_transport_->Connect(server_->address(), junk, 5000ms);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kPermissionDenied) << c.status();
  EXPECT_NE(c.status().message().find("malformed"), std::string::npos) << c.status();
}

TEST_F(ServerE2ETest, AClientOfAnOlderProtocolIsRefused) {
  // Version 1 clients numbered requests per connection, which the replay
  // cache would take for retries: they must not get in.
  StartServer();
  protocol::ClientConnectParams params = protocol::MakeClientParams(0xC0FFEE, kToken);
  params.protocol_version = 1;
  auto c = protocol::ConnectAsClient(*client_transport_, server_->address(), params, 5000ms);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("unsupported protocol/layout version 1/"), std::string::npos) << c.status();
  EXPECT_EQ(server_->Stats().connections_accepted, 0u);
}

TEST_F(ServerE2ETest, ConnectionsBeyondTheLimitAreRefused) {
  options_.max_connections = 1;
  StartServer();
  auto first = MustConnect();
  ASSERT_NE(first, nullptr);
  auto second = RawClient::Connect(client_transport_.get(), server_->address(), kToken);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kResourceExhausted) << second.status();
  EXPECT_NE(second.status().message().find("too many connections"), std::string::npos) << second.status();
  // Once the first leaves, its slot is reclaimed.
  first->conn().Disconnect();
  first.reset();
  ASSERT_TRUE(rkv::testing::WaitFor("no connection left", [&] { return server_->Stats().connections == 0; }));
  auto third = MustConnect();
  EXPECT_NE(third, nullptr);
}

TEST_F(ServerE2ETest, RestartRebuildsTheTableUnderANewEpoch) {
  StartServer();
  const uint64_t epoch1 = server_->epoch();
  {
    auto c = MustConnect();
    ASSERT_NE(c, nullptr);
    for (int i = 0; i < 50; ++i) {
      auto r = c->Request(protocol::Op::kPut, "key" + std::to_string(i), "value" + std::to_string(i));
      ASSERT_TRUE(r.ok() && r->status_code == 0);
    }
    auto r = c->Request(protocol::Op::kDelete, "key7", "");
    ASSERT_TRUE(r.ok() && r->status_code == 0);
    r = c->Request(protocol::Op::kPut, "key8", "replaced");
    ASSERT_TRUE(r.ok() && r->status_code == 0);
  }
  server_->Shutdown();
  StartServer();
  EXPECT_EQ(server_->epoch(), epoch1 + 1);
  EXPECT_EQ(server_->keys_at_start(), 49u);
  auto c = MustConnect();
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->accept().epoch, epoch1 + 1);
  EXPECT_EQ(c->Header().epoch, epoch1 + 1);
  EXPECT_FALSE(c->Get("key7").has_value());
  auto got = c->Get("key8");
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->value, "replaced");
  EXPECT_EQ(got->version, 51u);  // 50 PUTs, a DELETE (no new version), a PUT
  got = c->Get("key42");
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->value, "value42");
  // Versions continue above every earlier one.
  auto r = c->Request(protocol::Op::kPut, "key42", "again");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->version, 52u);
}

// --durability=none: what the write-back buffer holds (what a crash could
// lose) stays within --write_back_bytes, and a clean shutdown loses none of
// it; the default buffer holds all of these writes unwritten.
TEST_F(ServerE2ETest, WriteBackBytesBoundsWhatANoneServerHoldsUnwritten) {
  options_.durability = Durability::kNone;
  const std::string value(1000, 'v');
  const auto put_all = [&](uint64_t* most_unwritten) {
    auto c = MustConnect();
    ASSERT_NE(c, nullptr);
    for (int i = 0; i < 300; ++i) {
      auto r = c->Request(protocol::Op::kPut, "key" + std::to_string(i), value);
      ASSERT_TRUE(r.ok() && r->status_code == 0) << i;
      const ServerStats s = server_->Stats();
      *most_unwritten = std::max(*most_unwritten, s.store_unwritten_bytes);
      EXPECT_LE(s.store_unwritten_writes, WriteBackKeys(options_));
    }
  };
  StartServer();
  uint64_t most = 0;
  put_all(&most);
  EXPECT_GT(most, 300u * 1000);  // 64 MiB by default: nothing written yet
  server_->Shutdown();

  options_.write_back_bytes = kMinWriteBackBytes;
  EXPECT_EQ(WriteBackKeys(options_), 64u);
  StartServer();
  EXPECT_EQ(server_->keys_at_start(), 300u);
  most = 0;
  put_all(&most);
  EXPECT_GT(most, 0u);
  EXPECT_LE(most, kMinWriteBackBytes);
  server_->Shutdown();
  StartServer();
  EXPECT_EQ(server_->keys_at_start(), 300u);
  auto c = MustConnect();
  ASSERT_NE(c, nullptr);
  auto got = c->Get("key299");
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->value, value);
}

TEST_F(ServerE2ETest, SecondServerOnTheSameDataDirFailsClearly) {
  StartServer();
  auto other = Server::Start(options_, server_transport_.get());
  ASSERT_FALSE(other.ok());
  EXPECT_EQ(other.status().code(), StatusCode::kFailedPrecondition) << other.status();
  EXPECT_NE(other.status().message().find("in use"), std::string::npos);
  // The first keeps serving.
  auto c = MustConnect();
  ASSERT_NE(c, nullptr);
  auto r = c->Request(protocol::Op::kPut, "still", "here");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->status_code, 0);
}

TEST_F(ServerE2ETest, ShutdownDisconnectsClients) {
  StartServer();
  auto c = MustConnect();
  ASSERT_NE(c, nullptr);
  server_->Shutdown();
  // The client sees its connection fail.
  auto r = c->Request(protocol::Op::kPut, "k", "v");
  EXPECT_FALSE(r.ok());
}

}  // namespace
}  // namespace rkv::server
