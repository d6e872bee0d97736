// Each fault of FaultTransport (fault_transport.h), over the tcp transport.
// Both sides are FaultTransports with faults of their own: the client's
// for what it posts, connects and receives, the server's for what it
// accepts and receives. With no fault set the wrapper is covered by the
// transport conformance suite (instance "fault(tcp)").
//
// Delays are checked from below only (a held-back completion comes no
// earlier than its delay), never for how soon anything happens.
#include "common/transport/fault/fault_transport.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <future>
#include <string>
#include <vector>

#include "common/transport/factory.h"
#include "common/transport/transport_test_util.h"

namespace rkv::transport::fault {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using testing::Buffer;
using testing::kWait;
using testing::MakeBuffer;
using testing::PollOne;
using testing::PollUntilFailed;

std::unique_ptr<FaultTransport> MakeFaultTransport() {
  StatusOr<std::unique_ptr<Transport>> tcp = CreateTransport(Kind::kTcp, Options{});
  EXPECT_TRUE(tcp.ok()) << tcp.status();
  return tcp.ok() ? std::make_unique<FaultTransport>(std::move(*tcp)) : nullptr;
}

class FaultTransportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = MakeFaultTransport();
    client_ = MakeFaultTransport();
    ASSERT_NE(server_, nullptr);
    ASSERT_NE(client_, nullptr);
    StatusOr<std::unique_ptr<Listener>> listener = server_->Listen("127.0.0.1:0");
    ASSERT_TRUE(listener.ok()) << listener.status();
    listener_ = std::move(*listener);
    table_ = MakeBuffer(*server_, 4096, kRemoteRead);
    for (size_t i = 0; i < table_.bytes.size(); ++i) table_.bytes[i] = static_cast<uint8_t>(i * 3 + 1);
    inbox_ = MakeBuffer(*server_, 512, kLocalWrite);  // [0, 256): receives; then sends
    local_ = MakeBuffer(*client_, 4096, kLocalWrite);
  }

  std::unique_ptr<Connection> NextPending() { return testing::NextPending(*listener_); }

  // Connects and accepts; the server side gets a private ring and four
  // receives (inbox_ slots 0..3, wr_ids 0..3) before Accept.
  void Connect(std::span<const uint8_t> hello = {}, std::span<const uint8_t> reply = {}) {
    auto connecting =
        std::async(std::launch::async, [&] { return client_->Connect(listener_->address(), hello, kWait); });
    server_conn_ = NextPending();
    ASSERT_NE(server_conn_, nullptr);
    StatusOr<MemoryRegion*> ring = server_conn_->RegisterPrivate(ring_.data(), ring_.size(), kRemoteWrite | kLocalWrite);
    ASSERT_TRUE(ring.ok()) << ring.status();
    ring_remote_ = RemoteBuf{(*ring)->remote_addr(), (*ring)->rkey()};
    for (uint32_t i = 0; i < 4; ++i) ASSERT_TRUE(server_conn_->PostRecv(inbox_.At(i * 64, 64), i).ok());
    ASSERT_TRUE(server_conn_->Accept(reply).ok());
    StatusOr<std::unique_ptr<Connection>> connected = connecting.get();
    ASSERT_TRUE(connected.ok()) << connected.status();
    client_conn_ = std::move(*connected);
  }

  ReadOp Read(size_t local_offset, size_t remote_offset, uint32_t length, uint64_t wr_id, bool signaled) const {
    return ReadOp{local_.At(local_offset, length), table_.Remote(remote_offset), wr_id, signaled};
  }

  // Declared before the connections, so that they go first.
  std::vector<uint8_t> ring_ = std::vector<uint8_t>(1024, 0);
  RemoteBuf ring_remote_;
  std::unique_ptr<FaultTransport> server_;
  std::unique_ptr<FaultTransport> client_;
  std::unique_ptr<Listener> listener_;
  Buffer table_;
  Buffer inbox_;
  Buffer local_;
  std::unique_ptr<Connection> server_conn_;
  std::unique_ptr<Connection> client_conn_;
};

TEST(FaultTransportSetupTest, WrapsAnyTransportAndRefusesABadSpec) {
  StatusOr<std::unique_ptr<Transport>> tcp = CreateTransport(Kind::kTcp, Options{});
  ASSERT_TRUE(tcp.ok());
  StatusOr<std::unique_ptr<FaultTransport>> bad = CreateFaultTransport(std::move(*tcp), "read:explode");
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  tcp = CreateTransport(Kind::kTcp, Options{});
  ASSERT_TRUE(tcp.ok());
  StatusOr<std::unique_ptr<FaultTransport>> good = CreateFaultTransport(std::move(*tcp), "read:drop:nth=2");
  ASSERT_TRUE(good.ok()) << good.status();
  EXPECT_EQ((*good)->kind(), Kind::kTcp);
  EXPECT_EQ((*good)->inner().kind(), Kind::kTcp);
}

TEST_F(FaultTransportTest, WrappedConnectionReachesTheInnerOne) {
  Connect();
  ASSERT_NE(client_conn_, nullptr);
  Connection* inner = WrappedConnection(*client_conn_);
  ASSERT_NE(inner, nullptr);
  EXPECT_EQ(WrappedConnection(*inner), nullptr);
  EXPECT_EQ(inner->peer_address(), client_conn_->peer_address());
}

// ---------------------------------------------------------------- READ

TEST_F(FaultTransportTest, ADroppedReadNeverCompletesAndWritesNothing) {
  Connect();
  ASSERT_NE(client_conn_, nullptr);
  ASSERT_TRUE(client_->faults().AddSpec("read:drop:nth=1").ok());
  const ReadOp lost = Read(0, 0, 64, 1, true);
  std::vector<Completion> others;
  EXPECT_EQ(client_conn_->PostReadsAndWait({&lost, 1}, 50ms, &others).code(), StatusCode::kDeadlineExceeded);
  EXPECT_EQ(local_.bytes[0], 0);
  // In a list, only the dropped READ is missing.
  ASSERT_TRUE(client_->faults().AddSpec("read:drop:nth=1").ok());
  const ReadOp list[] = {Read(100, 100, 50, 2, false), Read(200, 200, 50, 3, true)};
  ASSERT_TRUE(client_conn_->PostReads(list).ok());
  const Completion done = PollOne(*client_conn_);
  ASSERT_TRUE(done.status.ok()) << done.status;
  EXPECT_EQ(done.wr_id, 3u);
  EXPECT_EQ(local_.bytes[100], 0);
  EXPECT_EQ(std::memcmp(local_.bytes.data() + 200, table_.bytes.data() + 200, 50), 0);
}

TEST_F(FaultTransportTest, ADelayedReadCompletesNoSoonerThanItsDelay) {
  Connect();
  ASSERT_NE(client_conn_, nullptr);
  ASSERT_TRUE(client_->faults().AddSpec("read:delay:ms=40").ok());
  const ReadOp op = Read(0, 0, 64, 1, true);
  const auto posted = Clock::now();
  ASSERT_TRUE(client_conn_->PostReads({&op, 1}).ok());
  const Completion done = PollOne(*client_conn_);
  EXPECT_GE(Clock::now() - posted, 40ms);
  ASSERT_TRUE(done.status.ok()) << done.status;
  EXPECT_EQ(std::memcmp(local_.bytes.data(), table_.bytes.data(), 64), 0);
  // A wait shorter than the delay gives up.
  client_->faults().ClearRules();
  ASSERT_TRUE(client_->faults().AddSpec("read:delay:ms=60000").ok());
  std::vector<Completion> others;
  const ReadOp held = Read(64, 64, 64, 2, true);
  EXPECT_EQ(client_conn_->PostReadsAndWait({&held, 1}, 50ms, &others).code(), StatusCode::kDeadlineExceeded);
}

TEST_F(FaultTransportTest, ACorruptedReadFlipsBytesOfItsDestination) {
  Connect();
  ASSERT_NE(client_conn_, nullptr);
  // The second READ of the list: bytes 3 and 4 of what it returns.
  ASSERT_TRUE(client_->faults().AddSpec("read:corrupt:nth=2,at=3,bytes=2").ok());
  const ReadOp list[] = {Read(0, 0, 64, 1, false), Read(64, 512, 64, 2, true)};
  std::vector<Completion> others;
  ASSERT_TRUE(client_conn_->PostReadsAndWait(list, kWait, &others).ok());
  EXPECT_EQ(std::memcmp(local_.bytes.data(), table_.bytes.data(), 64), 0);
  for (size_t i = 0; i < 64; ++i) {
    const uint8_t want = table_.bytes[512 + i] ^ (i == 3 || i == 4 ? 0xff : 0);
    EXPECT_EQ(local_.bytes[64 + i], want) << i;
  }
  // An unsignaled READ's corruption shows once the READ covering it
  // completes.
  ASSERT_TRUE(client_->faults().AddSpec("read:corrupt:nth=1").ok());
  const ReadOp again[] = {Read(1024, 1024, 8, 3, false), Read(2048, 2048, 8, 4, true)};
  ASSERT_TRUE(client_conn_->PostReads(again).ok());
  EXPECT_EQ(PollOne(*client_conn_).wr_id, 4u);
  EXPECT_EQ(local_.bytes[1024], table_.bytes[1024] ^ 0xff);
  EXPECT_EQ(local_.bytes[1025], table_.bytes[1025]);
  EXPECT_EQ(local_.bytes[2048], table_.bytes[2048]);
}

TEST_F(FaultTransportTest, AFailedReadFailsTheRestOfItsListAndTheConnection) {
  Connect();
  ASSERT_NE(client_conn_, nullptr);
  ASSERT_TRUE(client_->faults().AddSpec("read:fail:nth=2").ok());
  const ReadOp list[] = {Read(0, 0, 8, 1, false), Read(8, 8, 8, 2, false), Read(16, 16, 8, 3, true)};
  ASSERT_TRUE(client_conn_->PostReads(list).ok());
  std::vector<Completion> seen;
  EXPECT_EQ(PollUntilFailed(*client_conn_, &seen).code(), StatusCode::kUnavailable);
  ASSERT_GE(seen.size(), 2u);
  EXPECT_EQ(seen[0].wr_id, 2u);
  EXPECT_EQ(seen[0].status.code(), StatusCode::kUnavailable);
  EXPECT_NE(seen[0].status.message().find("injected"), std::string::npos) << seen[0].status;
  EXPECT_EQ(seen[1].wr_id, 3u);
  EXPECT_EQ(seen[1].status.code(), StatusCode::kUnavailable);
  for (size_t i = 2; i < seen.size(); ++i) {
    EXPECT_EQ(seen[i].wr_id, 1u) << "only the READ posted before it may be flushed";
    EXPECT_FALSE(seen[i].status.ok());
  }
  EXPECT_EQ(local_.bytes[16], 0);
  EXPECT_EQ(client_conn_->PostReads({&list[0], 1}).code(), StatusCode::kUnavailable);
  EXPECT_EQ(client_conn_->PostRecv(local_.At(0, 64), 9).code(), StatusCode::kUnavailable);
  // The peer sees the connection fail, as with a real error.
  std::vector<Completion> server_seen;
  EXPECT_EQ(PollUntilFailed(*server_conn_, &server_seen).code(), StatusCode::kUnavailable);
  EXPECT_EQ(server_seen.size(), 4u) << "its four receives, flushed";
}

TEST_F(FaultTransportTest, AReadHookRunsBeforeEachReadIsPosted) {
  Connect();
  ASSERT_NE(client_conn_, nullptr);
  std::vector<uint64_t> seen;
  client_->faults().SetHook(FaultOp::kRead, [&](FaultPoint& p) {
    seen.push_back(p.index);
    if (p.index == 3) table_.bytes[0] = 0xab;  // between rounds, as a server would
  });
  std::vector<Completion> others;
  for (uint64_t round = 1; round <= 3; ++round) {
    const ReadOp op = Read(round * 8, 0, 1, round, true);
    ASSERT_TRUE(client_conn_->PostReadsAndWait({&op, 1}, kWait, &others).ok());
  }
  EXPECT_EQ(seen, (std::vector<uint64_t>{1, 2, 3}));
  EXPECT_EQ(local_.bytes[8], 1);
  EXPECT_EQ(local_.bytes[16], 1);
  EXPECT_EQ(local_.bytes[24], 0xab);
  EXPECT_EQ(client_->faults().count(FaultOp::kRead), 3u);
}

// ---------------------------------------------------------------- WRITE

TEST_F(FaultTransportTest, ADroppedWriteLeavesTheRingButItsSendArrives) {
  Connect();
  ASSERT_NE(client_conn_, nullptr);
  ASSERT_TRUE(client_->faults().AddSpec("write:drop").ok());
  std::fill(local_.bytes.begin(), local_.bytes.begin() + 128, 0xee);
  ASSERT_TRUE(client_conn_->PostWriteSend(local_.At(0, 128), ring_remote_, local_.At(128, 8), 7).ok());
  const Completion received = PollOne(*server_conn_);
  ASSERT_TRUE(received.status.ok()) << received.status;
  EXPECT_EQ(received.byte_len, 8u);
  EXPECT_EQ(ring_, std::vector<uint8_t>(1024, 0));
  const Completion sent = PollOne(*client_conn_);
  EXPECT_TRUE(sent.status.ok()) << sent.status;
  EXPECT_EQ(sent.op, OpType::kSend);
  EXPECT_EQ(sent.wr_id, 7u);
}

TEST_F(FaultTransportTest, ACorruptedWriteLandsWithFlippedBytes) {
  Connect();
  ASSERT_NE(client_conn_, nullptr);
  ASSERT_TRUE(client_->faults().AddSpec("write:corrupt:at=10,bytes=3").ok());
  std::fill(local_.bytes.begin(), local_.bytes.begin() + 128, 0x11);
  ASSERT_TRUE(client_conn_->PostWriteSend(local_.At(0, 64), ring_remote_, local_.At(128, 8), 7).ok());
  ASSERT_TRUE(PollOne(*server_conn_).status.ok());
  for (size_t i = 0; i < 64; ++i) EXPECT_EQ(ring_[i], i >= 10 && i < 13 ? 0xee : 0x11) << i;
  EXPECT_EQ(local_.bytes[10], 0x11) << "the caller's buffer is untouched";
  EXPECT_TRUE(PollOne(*client_conn_).status.ok());
}

TEST_F(FaultTransportTest, AFailedWriteFailsItsSendAndTheConnection) {
  Connect();
  ASSERT_NE(client_conn_, nullptr);
  ASSERT_TRUE(client_->faults().AddSpec("write:fail").ok());
  ASSERT_TRUE(client_conn_->PostWriteSend(local_.At(0, 64), ring_remote_, local_.At(128, 8), 7).ok());
  std::vector<Completion> seen;
  EXPECT_EQ(PollUntilFailed(*client_conn_, &seen).code(), StatusCode::kUnavailable);
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0].op, OpType::kWrite);
  EXPECT_EQ(seen[0].wr_id, 7u);
  EXPECT_EQ(seen[0].status.code(), StatusCode::kUnavailable);
  EXPECT_EQ(seen[1].op, OpType::kSend);
  EXPECT_EQ(seen[1].wr_id, 7u);
  EXPECT_EQ(seen[1].status.code(), StatusCode::kUnavailable);
  std::vector<Completion> server_seen;
  EXPECT_EQ(PollUntilFailed(*server_conn_, &server_seen).code(), StatusCode::kUnavailable);
  for (const Completion& c : server_seen) EXPECT_FALSE(c.status.ok()) << "nothing reached the server";
  EXPECT_EQ(ring_, std::vector<uint8_t>(1024, 0));
}

// ------------------------------------------------------ WRITE+SEND lists

// Three pairs: record i (64 bytes of i + 1) into ring slot i, message "m<i>".
std::vector<WriteSendOp> ThreePairs(Buffer& local, RemoteBuf ring, bool signal_all) {
  std::vector<WriteSendOp> ops;
  for (uint32_t i = 0; i < 3; ++i) {
    std::fill(local.bytes.begin() + i * 64, local.bytes.begin() + (i + 1) * 64, static_cast<uint8_t>(i + 1));
    local.bytes[1024 + i * 8] = 'm';
    local.bytes[1024 + i * 8 + 1] = static_cast<uint8_t>('0' + i);
    ops.push_back(WriteSendOp{local.At(i * 64, 64), RemoteBuf{ring.addr + i * 64, ring.rkey},
                              local.At(1024 + i * 8, 2), 10 + i, signal_all || i == 2});
  }
  return ops;
}

TEST_F(FaultTransportTest, EachPairOfAListMeetsItsOwnRules) {
  Connect();
  ASSERT_NE(client_conn_, nullptr);
  ASSERT_TRUE(client_->faults().AddSpec("send:drop:nth=2").ok());
  const std::vector<WriteSendOp> ops = ThreePairs(local_, ring_remote_, /*signal_all=*/true);
  ASSERT_TRUE(client_conn_->PostWriteSends(ops).ok());
  // The second pair never arrived (nor its WRITE); the others did, in order.
  const Completion first = PollOne(*server_conn_);
  const Completion second = PollOne(*server_conn_);
  ASSERT_TRUE(first.status.ok() && second.status.ok());
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(inbox_.bytes.data()), 2), "m0");
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(inbox_.bytes.data() + 64), 2), "m2");
  EXPECT_EQ(ring_[0], 1);
  EXPECT_EQ(ring_[64], 0);
  EXPECT_EQ(ring_[128], 3);
  EXPECT_EQ(PollOne(*client_conn_).wr_id, 10u);
  EXPECT_EQ(PollOne(*client_conn_).wr_id, 12u) << "the dropped SEND reports nothing";
  EXPECT_EQ(client_->faults().count(FaultOp::kSend), 3u);
}

TEST_F(FaultTransportTest, AFailedPairFlushesTheRestOfItsList) {
  Connect();
  ASSERT_NE(client_conn_, nullptr);
  ASSERT_TRUE(client_->faults().AddSpec("write:fail:nth=2").ok());
  const std::vector<WriteSendOp> ops = ThreePairs(local_, ring_remote_, /*signal_all=*/true);
  ASSERT_TRUE(client_conn_->PostWriteSends(ops).ok());
  std::vector<Completion> seen;
  EXPECT_EQ(PollUntilFailed(*client_conn_, &seen).code(), StatusCode::kUnavailable);
  bool write_failed = false;
  int later_sends_failed = 0;
  for (const Completion& c : seen) {
    if (c.wr_id == 11 && c.op == OpType::kWrite) write_failed = !c.status.ok();
    if (c.wr_id >= 11 && c.op == OpType::kSend && !c.status.ok()) ++later_sends_failed;
    if (c.wr_id >= 11) {
      EXPECT_FALSE(c.status.ok()) << "pair " << c.wr_id << " completed well";
    }
  }
  EXPECT_TRUE(write_failed);
  EXPECT_EQ(later_sends_failed, 2) << "the failed pair's SEND and the next pair's, flushed";
  EXPECT_EQ(ring_[64], 0);
  EXPECT_EQ(ring_[128], 0);
}

TEST_F(FaultTransportTest, AnUnsignaledSendPostedAloneStillReportsNothing) {
  Connect();
  ASSERT_NE(client_conn_, nullptr);
  // The first pair's WRITE is dropped: its SEND goes alone, and the
  // caller did not ask for its completion.
  ASSERT_TRUE(client_->faults().AddSpec("write:drop:nth=1").ok());
  const std::vector<WriteSendOp> ops = ThreePairs(local_, ring_remote_, /*signal_all=*/false);
  ASSERT_TRUE(client_conn_->PostWriteSends(ops).ok());
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(PollOne(*server_conn_).status.ok());
  EXPECT_EQ(ring_[0], 0);
  EXPECT_EQ(ring_[64], 2);
  const Completion only = PollOne(*client_conn_);
  EXPECT_TRUE(only.status.ok()) << only.status;
  EXPECT_EQ(only.wr_id, 12u);
  Completion none[4];
  StatusOr<size_t> more = client_conn_->Poll(none, 20ms);
  ASSERT_TRUE(more.ok()) << more.status();
  EXPECT_EQ(*more, 0u);
}

// ---------------------------------------------------------------- SEND

TEST_F(FaultTransportTest, ADroppedSendDeliversNothingAndNeverCompletes) {
  Connect();
  ASSERT_NE(client_conn_, nullptr);
  ASSERT_TRUE(client_->faults().AddSpec("send:drop:nth=1").ok());
  std::memcpy(local_.bytes.data(), "lost", 4);
  std::memcpy(local_.bytes.data() + 64, "kept", 4);
  ASSERT_TRUE(client_conn_->PostSend(local_.At(0, 4), 1).ok());
  ASSERT_TRUE(client_conn_->PostSend(local_.At(64, 4), 2).ok());
  // The first receive gets the second message: the first never arrived.
  const Completion received = PollOne(*server_conn_);
  ASSERT_TRUE(received.status.ok()) << received.status;
  EXPECT_EQ(received.wr_id, 0u);
  EXPECT_EQ(std::memcmp(inbox_.bytes.data(), "kept", 4), 0);
  const Completion sent = PollOne(*client_conn_);
  EXPECT_EQ(sent.wr_id, 2u) << "the dropped SEND reports nothing";
  // A dropped SEND of PostWriteSend takes its WRITE along.
  ASSERT_TRUE(client_->faults().AddSpec("send:drop:nth=1").ok());
  ASSERT_TRUE(client_conn_->PostWriteSend(local_.At(0, 64), ring_remote_, local_.At(64, 4), 3).ok());
  ASSERT_TRUE(client_conn_->PostSend(local_.At(0, 4), 4).ok());
  EXPECT_EQ(PollOne(*client_conn_).wr_id, 4u);
  EXPECT_EQ(PollOne(*server_conn_).wr_id, 1u);
  EXPECT_EQ(ring_, std::vector<uint8_t>(1024, 0));
}

TEST_F(FaultTransportTest, ADelayedSendCompletesNoSoonerThanItsDelay) {
  Connect();
  ASSERT_NE(client_conn_, nullptr);
  ASSERT_TRUE(client_->faults().AddSpec("send:delay:ms=40").ok());
  const auto posted = Clock::now();
  ASSERT_TRUE(client_conn_->PostSend(local_.At(0, 16), 5).ok());
  EXPECT_TRUE(PollOne(*server_conn_).status.ok()) << "delivered: only the completion is held back";
  const Completion sent = PollOne(*client_conn_);
  EXPECT_GE(Clock::now() - posted, 40ms);
  EXPECT_TRUE(sent.status.ok()) << sent.status;
  EXPECT_EQ(sent.wr_id, 5u);
}

TEST_F(FaultTransportTest, ACorruptedSendArrivesWithFlippedBytes) {
  Connect();
  ASSERT_NE(client_conn_, nullptr);
  ASSERT_TRUE(client_->faults().AddSpec("send:corrupt:at=1,bytes=2").ok());
  std::memcpy(local_.bytes.data(), "abcdef", 6);
  ASSERT_TRUE(client_conn_->PostSend(local_.At(0, 6), 5).ok());
  const Completion received = PollOne(*server_conn_);
  ASSERT_TRUE(received.status.ok()) << received.status;
  EXPECT_EQ(received.byte_len, 6u);
  const uint8_t want[] = {'a', 'b' ^ 0xff, 'c' ^ 0xff, 'd', 'e', 'f'};
  EXPECT_EQ(std::memcmp(inbox_.bytes.data(), want, 6), 0);
  EXPECT_EQ(std::memcmp(local_.bytes.data(), "abcdef", 6), 0);
  EXPECT_TRUE(PollOne(*client_conn_).status.ok());
}

TEST_F(FaultTransportTest, AFailedSendFailsTheConnection) {
  Connect();
  ASSERT_NE(client_conn_, nullptr);
  ASSERT_TRUE(client_->faults().AddSpec("send:fail:nth=2").ok());
  ASSERT_TRUE(client_conn_->PostSend(local_.At(0, 8), 1).ok());
  ASSERT_TRUE(client_conn_->PostSend(local_.At(0, 8), 2).ok());
  std::vector<Completion> seen;
  EXPECT_EQ(PollUntilFailed(*client_conn_, &seen).code(), StatusCode::kUnavailable);
  bool injected = false;
  for (const Completion& c : seen) {
    if (c.wr_id == 2) {
      injected = true;
      EXPECT_EQ(c.status.code(), StatusCode::kUnavailable);
    }
  }
  EXPECT_TRUE(injected);
  EXPECT_EQ(client_conn_->PostSend(local_.At(0, 8), 3).code(), StatusCode::kUnavailable);
  std::vector<Completion> server_seen;
  EXPECT_EQ(PollUntilFailed(*server_conn_, &server_seen).code(), StatusCode::kUnavailable);
  size_t delivered = 0;
  for (const Completion& c : server_seen) delivered += c.status.ok() ? 1 : 0;
  EXPECT_LE(delivered, 1u) << "the failed SEND never arrived";
}

// ---------------------------------------------------------------- RECV

TEST_F(FaultTransportTest, ADroppedMessageUsesItsReceiveButIsNeverReported) {
  Connect();
  ASSERT_NE(server_conn_, nullptr);
  ASSERT_TRUE(server_->faults().AddSpec("recv:drop:nth=1").ok());
  std::memcpy(local_.bytes.data(), "one", 3);
  std::memcpy(local_.bytes.data() + 64, "two", 3);
  ASSERT_TRUE(client_conn_->PostSend(local_.At(0, 3), 1).ok());
  ASSERT_TRUE(client_conn_->PostSend(local_.At(64, 3), 2).ok());
  const Completion received = PollOne(*server_conn_);
  ASSERT_TRUE(received.status.ok()) << received.status;
  EXPECT_EQ(received.wr_id, 1u) << "the second receive";
  EXPECT_EQ(std::memcmp(inbox_.bytes.data() + 64, "two", 3), 0);
  EXPECT_EQ(PollOne(*client_conn_).wr_id, 1u);
  EXPECT_EQ(PollOne(*client_conn_).wr_id, 2u);
}

TEST_F(FaultTransportTest, ADelayedMessageIsReportedNoSoonerThanItsDelay) {
  Connect();
  ASSERT_NE(server_conn_, nullptr);
  ASSERT_TRUE(server_->faults().AddSpec("recv:delay:us=40000").ok());
  const auto sent = Clock::now();
  ASSERT_TRUE(client_conn_->PostSend(local_.At(0, 16), 1).ok());
  const Completion received = PollOne(*server_conn_);
  EXPECT_GE(Clock::now() - sent, 40ms);
  EXPECT_TRUE(received.status.ok()) << received.status;
  EXPECT_EQ(received.byte_len, 16u);
}

TEST_F(FaultTransportTest, ACorruptedMessageHasFlippedBytes) {
  Connect();
  ASSERT_NE(server_conn_, nullptr);
  ASSERT_TRUE(server_->faults().AddSpec("recv:corrupt:at=2,bytes=100").ok());
  std::memcpy(local_.bytes.data(), "hello", 5);
  ASSERT_TRUE(client_conn_->PostSend(local_.At(0, 5), 1).ok());
  const Completion received = PollOne(*server_conn_);
  ASSERT_TRUE(received.status.ok()) << received.status;
  EXPECT_EQ(received.byte_len, 5u);
  const uint8_t want[] = {'h', 'e', 'l' ^ 0xff, 'l' ^ 0xff, 'o' ^ 0xff, 0};
  EXPECT_EQ(std::memcmp(inbox_.bytes.data(), want, 6), 0) << "only the message's bytes";
}

TEST_F(FaultTransportTest, AFailedMessageFailsTheConnection) {
  Connect();
  ASSERT_NE(server_conn_, nullptr);
  ASSERT_TRUE(server_->faults().AddSpec("recv:fail").ok());
  ASSERT_TRUE(client_conn_->PostSend(local_.At(0, 5), 1).ok());
  std::vector<Completion> seen;
  EXPECT_EQ(PollUntilFailed(*server_conn_, &seen).code(), StatusCode::kUnavailable);
  ASSERT_EQ(seen.size(), 4u) << "the failed message, then three receives flushed";
  EXPECT_EQ(seen[0].wr_id, 0u);
  EXPECT_EQ(seen[0].byte_len, 0u);
  EXPECT_NE(seen[0].status.message().find("injected"), std::string::npos) << seen[0].status;
  for (const Completion& c : seen) EXPECT_EQ(c.status.code(), StatusCode::kUnavailable);
  std::vector<Completion> client_seen;
  EXPECT_EQ(PollUntilFailed(*client_conn_, &client_seen).code(), StatusCode::kUnavailable);
}

TEST_F(FaultTransportTest, AReceiveHookMayReshapeTheMessage) {
  Connect();
  ASSERT_NE(client_conn_, nullptr);
  client_->faults().SetHook(FaultOp::kRecv, [](FaultPoint& p) {
    ASSERT_GE(p.buffer.size(), 2u);
    p.buffer[0] = 'X';
    p.byte_len = 2;
  });
  ASSERT_TRUE(client_conn_->PostRecv(local_.At(512, 64), 77).ok());
  std::memcpy(inbox_.bytes.data() + 300, "reply", 5);
  ASSERT_TRUE(server_conn_->PostSend(inbox_.At(300, 5), 1).ok());
  const Completion received = PollOne(*client_conn_);
  ASSERT_TRUE(received.status.ok()) << received.status;
  EXPECT_EQ(received.wr_id, 77u);
  EXPECT_EQ(received.byte_len, 2u);
  EXPECT_EQ(std::memcmp(local_.bytes.data() + 512, "Xe", 2), 0);
}

TEST_F(FaultTransportTest, MessagesHandedBackByPostReadsAndWaitCarryTheirFaults) {
  Connect();
  ASSERT_NE(client_conn_, nullptr);
  // No READ fault: PostReadsAndWait takes the inner transport's way, and
  // the message that arrives meanwhile still gets its fault.
  ASSERT_TRUE(client_->faults().AddSpec("recv:corrupt:bytes=1").ok());
  ASSERT_TRUE(client_conn_->PostRecv(local_.At(512, 64), 77).ok());
  std::memcpy(inbox_.bytes.data() + 300, "reply", 5);
  ASSERT_TRUE(server_conn_->PostSend(inbox_.At(300, 5), 1).ok());
  ASSERT_TRUE(PollOne(*server_conn_).status.ok());  // so the client has the message
  const ReadOp op = Read(0, 0, 64, 5, true);
  std::vector<Completion> others;
  ASSERT_TRUE(client_conn_->PostReadsAndWait({&op, 1}, kWait, &others).ok());
  if (others.empty()) others.push_back(PollOne(*client_conn_));
  ASSERT_EQ(others.size(), 1u);
  EXPECT_EQ(others[0].wr_id, 77u);
  EXPECT_EQ(local_.bytes[512], 'r' ^ 0xff);
  EXPECT_EQ(local_.bytes[513], 'e');
}

// -------------------------------------------------------------- CONNECT

TEST_F(FaultTransportTest, AFailedConnectIsUnavailableAndReachesNobody) {
  ASSERT_TRUE(client_->faults().AddSpec("connect:fail").ok());
  const Status refused = client_->Connect(listener_->address(), {}, kWait).status();
  EXPECT_EQ(refused.code(), StatusCode::kUnavailable) << refused;
  StatusOr<std::unique_ptr<Connection>> next = listener_->Next(50ms);
  ASSERT_TRUE(next.ok());
  EXPECT_EQ(*next, nullptr);
}

TEST_F(FaultTransportTest, ADroppedConnectRunsIntoItsTimeout) {
  ASSERT_TRUE(client_->faults().AddSpec("connect:drop").ok());
  const auto start = Clock::now();
  const Status lost = client_->Connect(listener_->address(), {}, 50ms).status();
  EXPECT_EQ(lost.code(), StatusCode::kDeadlineExceeded) << lost;
  EXPECT_GE(Clock::now() - start, 50ms);
}

TEST_F(FaultTransportTest, ADelayedConnectStartsLate) {
  ASSERT_TRUE(client_->faults().AddSpec("connect:delay:ms=40").ok());
  const auto start = Clock::now();
  Connect();
  ASSERT_NE(client_conn_, nullptr);
  EXPECT_GE(Clock::now() - start, 40ms);
  // A delay beyond the timeout is a timeout.
  client_->faults().ClearRules();
  ASSERT_TRUE(client_->faults().AddSpec("connect:delay:ms=60000").ok());
  EXPECT_EQ(client_->Connect(listener_->address(), {}, 20ms).status().code(), StatusCode::kDeadlineExceeded);
}

TEST_F(FaultTransportTest, ACorruptedConnectSeesFlippedAcceptData) {
  ASSERT_TRUE(client_->faults().AddSpec("connect:corrupt:at=1").ok());
  const std::vector<uint8_t> reply = {1, 2, 3, 4};
  Connect({}, reply);
  ASSERT_NE(client_conn_, nullptr);
  const std::span<const uint8_t> got = client_conn_->peer_private_data();
  ASSERT_GE(got.size(), 4u);
  EXPECT_EQ(got[0], 1);
  EXPECT_EQ(got[1], 2 ^ 0xff);
  EXPECT_EQ(got[2], 3);
}

// --------------------------------------------------------------- ACCEPT

TEST_F(FaultTransportTest, AFailedAcceptRefusesTheClientAsTransient) {
  ASSERT_TRUE(server_->faults().AddSpec("accept:fail").ok());
  auto connecting = std::async(std::launch::async, [&] { return client_->Connect(listener_->address(), {}, kWait); });
  std::unique_ptr<Connection> pending = NextPending();
  ASSERT_NE(pending, nullptr);
  EXPECT_EQ(pending->Accept({}).code(), StatusCode::kUnavailable);
  const Status refused = connecting.get().status();
  EXPECT_EQ(refused.code(), StatusCode::kUnavailable) << refused;
  EXPECT_NE(refused.message().find("injected"), std::string::npos) << refused;
  EXPECT_EQ(pending->PostRecv(inbox_.At(0, 64), 1).code(), StatusCode::kUnavailable);
}

TEST_F(FaultTransportTest, ADroppedAcceptLeavesTheClientWaiting) {
  ASSERT_TRUE(server_->faults().AddSpec("accept:drop").ok());
  auto connecting = std::async(std::launch::async, [&] { return client_->Connect(listener_->address(), {}, 100ms); });
  std::unique_ptr<Connection> pending = NextPending();
  ASSERT_NE(pending, nullptr);
  EXPECT_TRUE(pending->Accept({}).ok());
  EXPECT_EQ(connecting.get().status().code(), StatusCode::kDeadlineExceeded);
  // The server's side takes work and completes none of it.
  EXPECT_TRUE(pending->PostSend(inbox_.At(0, 8), 1).ok());
  Completion out[1];
  StatusOr<size_t> n = pending->Poll(out, 10ms);
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(*n, 0u);
  pending->Disconnect();
  EXPECT_EQ(pending->PostSend(inbox_.At(0, 8), 2).code(), StatusCode::kUnavailable);
  EXPECT_EQ(pending->Poll(out, 0us).status().code(), StatusCode::kUnavailable);
}

TEST_F(FaultTransportTest, ADelayedAcceptAnswersLate) {
  ASSERT_TRUE(server_->faults().AddSpec("accept:delay:ms=40").ok());
  auto connecting = std::async(std::launch::async, [&] { return client_->Connect(listener_->address(), {}, kWait); });
  std::unique_ptr<Connection> pending = NextPending();
  ASSERT_NE(pending, nullptr);
  const auto start = Clock::now();
  EXPECT_TRUE(pending->Accept({}).ok());
  EXPECT_GE(Clock::now() - start, 40ms);
  EXPECT_TRUE(connecting.get().ok());
}

TEST_F(FaultTransportTest, ACorruptedAcceptSeesFlippedRequestData) {
  ASSERT_TRUE(server_->faults().AddSpec("accept:corrupt:bytes=2").ok());
  const std::vector<uint8_t> hello = {10, 20, 30};
  auto connecting = std::async(std::launch::async, [&] { return client_->Connect(listener_->address(), hello, kWait); });
  std::unique_ptr<Connection> pending = NextPending();
  ASSERT_NE(pending, nullptr);
  const std::span<const uint8_t> got = pending->peer_private_data();
  ASSERT_GE(got.size(), 3u);
  EXPECT_EQ(got[0], 10 ^ 0xff);
  EXPECT_EQ(got[1], 20 ^ 0xff);
  EXPECT_EQ(got[2], 30);
  EXPECT_TRUE(pending->Accept({}).ok());
  EXPECT_TRUE(connecting.get().ok());
}

}  // namespace
}  // namespace rkv::transport::fault
