// The transport contract (transport_conformance_test_fixture.h): the data
// path (READ lists, completions and their order, WRITE+SEND lists, sends
// and receives, PostReadsAndWait) and one transport used from many
// threads.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "common/transport/transport_conformance_test_fixture.h"

namespace rkv::transport {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using testing::Buffer;
using testing::kWait;
using testing::MakeBuffer;
using testing::MakeTransport;
using testing::NamePart;
using testing::PollOne;
using testing::PollUntilFailed;
using testing::TransportsUnderTest;

// ---------------------------------------------------------------- data path

TEST_P(TransportTest, AReadListReportsOnlyItsSignaledReads) {
  Buffer table = MakeBuffer(*server_, 64 * 1024, kRemoteRead);
  for (size_t i = 0; i < table.bytes.size(); ++i) table.bytes[i] = static_cast<uint8_t>(i * 7 + i / 256);
  Pair pair = ConnectPair();
  ASSERT_NE(pair.client, nullptr);
  Buffer local = MakeBuffer(*client_, 16 * 1024, kLocalWrite);
  // Eight READs of different sizes and offsets, up to the region's last
  // byte; only the last is signaled.
  const size_t sizes[] = {1, 63, 64, 100, 1000, 1024, 2048, 3000};
  const size_t offsets[] = {0, 7, 4096, 333, 60000, 12345, 20000, 64 * 1024 - 3000};
  std::vector<ReadOp> ops;
  size_t at = 0;
  for (size_t i = 0; i < 8; ++i) {
    ops.push_back(ReadOp{local.At(at, static_cast<uint32_t>(sizes[i])), table.Remote(offsets[i]), 100 + i, i == 7});
    at += sizes[i];
  }
  ASSERT_TRUE(pair.client->PostReads(ops).ok());
  const Completion done = PollOne(*pair.client);
  ASSERT_TRUE(done.status.ok()) << done.status;
  EXPECT_EQ(done.wr_id, 107u);
  EXPECT_EQ(done.op, OpType::kRead);
  at = 0;
  for (size_t i = 0; i < 8; ++i) {
    EXPECT_EQ(std::memcmp(local.bytes.data() + at, table.bytes.data() + offsets[i], sizes[i]), 0) << "READ " << i;
    at += sizes[i];
  }
  Completion more[4];
  StatusOr<size_t> n = pair.client->Poll(more, 0us);
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(*n, 0u) << "the unsignaled READs make no completion";
}

// A READ scattered over three pieces in two regions (ReadOp::more): the
// remote bytes land in order across the pieces, and nothing around them is
// touched. A piece outside its region is refused at post time.
TEST_P(TransportTest, AReadScattersOverItsPiecesInOrder) {
  Buffer table = MakeBuffer(*server_, 4096, kRemoteRead);
  for (size_t i = 0; i < table.bytes.size(); ++i) table.bytes[i] = static_cast<uint8_t>(i * 13 + 5);
  Pair pair = ConnectPair();
  ASSERT_NE(pair.client, nullptr);
  Buffer own = MakeBuffer(*client_, 1024, kLocalWrite, 0xAA);
  Buffer callers = MakeBuffer(*client_, 2048, kLocalWrite, 0xBB);
  // 40 bytes into own[100..140), 1000 into callers[8..1008), 24 into
  // own[500..524): 1064 bytes from table[300..1364).
  ReadOp op{own.At(100, 40), table.Remote(300), 7, true};
  op.more[0] = callers.At(8, 1000);
  op.more[1] = own.At(500, 24);
  ASSERT_TRUE(pair.client->PostReads({&op, 1}).ok());
  const Completion done = PollOne(*pair.client);
  ASSERT_TRUE(done.status.ok()) << done.status;
  EXPECT_EQ(done.wr_id, 7u);
  EXPECT_EQ(std::memcmp(own.bytes.data() + 100, table.bytes.data() + 300, 40), 0);
  EXPECT_EQ(std::memcmp(callers.bytes.data() + 8, table.bytes.data() + 340, 1000), 0);
  EXPECT_EQ(std::memcmp(own.bytes.data() + 500, table.bytes.data() + 1340, 24), 0);
  for (size_t i : {size_t{99}, size_t{140}, size_t{499}, size_t{524}}) EXPECT_EQ(own.bytes[i], 0xAA) << i;
  EXPECT_EQ(callers.bytes[7], 0xBB);
  EXPECT_EQ(callers.bytes[1008], 0xBB);

  // Two pieces only (more[1] unused), waited for with PostReadsAndWait.
  ReadOp two{own.At(0, 8), table.Remote(0), 8, true};
  two.more[0] = callers.At(1500, 100);
  std::vector<Completion> others;
  ASSERT_TRUE(pair.client->PostReadsAndWait({&two, 1}, kWait, &others).ok());
  EXPECT_EQ(std::memcmp(own.bytes.data(), table.bytes.data(), 8), 0);
  EXPECT_EQ(std::memcmp(callers.bytes.data() + 1500, table.bytes.data() + 8, 100), 0);

  ReadOp outside{own.At(0, 8), table.Remote(0), 9, true};
  outside.more[0] = callers.At(2000, 100);  // past the region's 2048 bytes
  EXPECT_EQ(pair.client->PostReads({&outside, 1}).code(), StatusCode::kInvalidArgument);
}

// A probe is a signaled zero-length READ that names no memory: it
// completes (op kRead, 0 bytes, its wr_id) once the peer's side answered,
// either way round, and the peer's application sees nothing of it. Once
// the peer is gone, a probe fails: refused at post or completed in error.
TEST_P(TransportTest, AProbeIsAnsweredUnseenAndFailsOnceThePeerIsGone) {
  Pair pair = ConnectPair();
  ASSERT_NE(pair.server, nullptr);
  ASSERT_NE(pair.client, nullptr);
  ASSERT_TRUE(pair.server->PostProbe(41).ok());
  const Completion c = PollOne(*pair.server);
  EXPECT_TRUE(c.status.ok()) << c.status;
  EXPECT_EQ(c.wr_id, 41u);
  EXPECT_EQ(c.op, OpType::kRead);
  EXPECT_EQ(c.byte_len, 0u);
  ASSERT_TRUE(pair.client->PostProbe(42).ok());
  const Completion back = PollOne(*pair.client);
  EXPECT_TRUE(back.status.ok()) << back.status;
  EXPECT_EQ(back.wr_id, 42u);
  // Neither application saw the other's probe.
  Completion none[4];
  StatusOr<size_t> seen = pair.server->Poll(none, 20ms);
  ASSERT_TRUE(seen.ok()) << seen.status();
  EXPECT_EQ(*seen, 0u);
  seen = pair.client->Poll(none, 20ms);
  ASSERT_TRUE(seen.ok()) << seen.status();
  EXPECT_EQ(*seen, 0u);

  pair.client.reset();
  const auto deadline = Clock::now() + kWait;
  bool failed = false;
  while (!failed && Clock::now() < deadline) {
    if (!pair.server->PostProbe(43).ok()) {
      failed = true;
      break;
    }
    StatusOr<size_t> n = pair.server->Poll(none, 100ms);
    if (!n.ok()) {
      failed = true;
      break;
    }
    for (size_t i = 0; i < *n; ++i) failed = failed || !none[i].status.ok();
  }
  EXPECT_TRUE(failed) << "probes of a peer that is gone kept completing";
}

TEST_P(TransportTest, CompletionsComeInPostOrder) {
  Buffer table = MakeBuffer(*server_, 4096, kRemoteRead, 3);
  Buffer inbox = MakeBuffer(*server_, 256, kLocalWrite);
  Private ring{std::vector<uint8_t>(1024)};
  Pair pair = ConnectPair([&](Connection& c) {
    ring.Register(c, kLocalWrite | kRemoteWrite);
    ASSERT_TRUE(c.PostRecv(inbox.At(0, 64), 50).ok());
    ASSERT_TRUE(c.PostRecv(inbox.At(64, 64), 51).ok());
  });
  ASSERT_NE(pair.client, nullptr);
  Buffer local = MakeBuffer(*client_, 4096, kLocalWrite, 9);
  ASSERT_TRUE(pair.client->PostSend(local.At(0, 16), 1).ok());
  const ReadOp first{local.At(1024, 512), table.Remote(0), 2, true};
  ASSERT_TRUE(pair.client->PostReads({&first, 1}).ok());
  const ReadOp list[] = {{local.At(2048, 512), table.Remote(512), 3, false},
                         {local.At(2560, 512), table.Remote(1024), 4, true}};
  ASSERT_TRUE(pair.client->PostReads(list).ok());
  ASSERT_TRUE(pair.client->PostWriteSend(local.At(0, 256), ring.Remote(), local.At(256, 8), 5).ok());

  // Poll fills its span from the front and says how many it filled.
  std::vector<Completion> got;
  const auto deadline = Clock::now() + kWait;
  while (got.size() < 4 && Clock::now() < deadline) {
    Completion out[2];
    StatusOr<size_t> n = pair.client->Poll(out, 100ms);
    ASSERT_TRUE(n.ok()) << n.status();
    ASSERT_LE(*n, 2u);
    got.insert(got.end(), out, out + *n);
  }
  ASSERT_EQ(got.size(), 4u);
  const std::pair<uint64_t, OpType> want[] = {
      {1, OpType::kSend}, {2, OpType::kRead}, {4, OpType::kRead}, {5, OpType::kSend}};
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_TRUE(got[i].status.ok()) << got[i].status;
    EXPECT_EQ(got[i].wr_id, want[i].first) << i;
    EXPECT_EQ(got[i].op, want[i].second) << i;
  }
}

TEST_P(TransportTest, PollWaitsAtMostItsTimeoutAndReportsNothingIdle) {
  Pair pair = ConnectPair();
  ASSERT_NE(pair.client, nullptr);
  for (Connection* c : {pair.client.get(), pair.server.get()}) {
    Completion out[4];
    StatusOr<size_t> n = c->Poll(out, 0us);
    ASSERT_TRUE(n.ok()) << n.status();
    EXPECT_EQ(*n, 0u);
    n = c->Poll(out, 20ms);
    ASSERT_TRUE(n.ok()) << n.status();
    EXPECT_EQ(*n, 0u);
  }
}

TEST_P(TransportTest, ASideThatStoppedPollingStillServesItsPeer) {
  // A side serves its peer's READs of its memory and takes its SENDs
  // whether or not anything polls it: after the client waited in Poll once
  // (on tcp the polling thread then serves the socket itself), and while it
  // polls no more, the server's READ of the client's memory completes with
  // the data, and its SEND completes and lands in the receive the client
  // posted, which the client's next Poll reports.
  Buffer exposed = MakeBuffer(*client_, 4096, kRemoteRead);
  for (size_t i = 0; i < exposed.bytes.size(); ++i) exposed.bytes[i] = static_cast<uint8_t>(i * 13 + 1);
  Buffer inbox = MakeBuffer(*client_, 256, kLocalWrite);
  Pair pair = ConnectPair();
  ASSERT_NE(pair.client, nullptr);
  ASSERT_TRUE(pair.client->PostRecv(inbox.At(0, 64), 70).ok());
  Completion idle[2];
  StatusOr<size_t> n = pair.client->Poll(idle, 20ms);
  ASSERT_TRUE(n.ok()) << n.status();
  ASSERT_EQ(*n, 0u);

  Buffer local = MakeBuffer(*server_, 4096, kLocalWrite, 0);
  const ReadOp read{local.At(0, 1024), exposed.Remote(512), 71, true};
  ASSERT_TRUE(pair.server->PostReads({&read, 1}).ok());
  Completion c = PollOne(*pair.server);
  EXPECT_TRUE(c.status.ok()) << c.status;
  EXPECT_EQ(c.wr_id, 71u);
  EXPECT_EQ(std::memcmp(local.bytes.data(), exposed.bytes.data() + 512, 1024), 0);

  Buffer message = MakeBuffer(*server_, 64, kLocalWrite, 5);
  ASSERT_TRUE(pair.server->PostSend(message.At(0, 64), 72).ok());
  c = PollOne(*pair.server);
  EXPECT_TRUE(c.status.ok()) << c.status;
  EXPECT_EQ(c.wr_id, 72u);

  c = PollOne(*pair.client);
  EXPECT_TRUE(c.status.ok()) << c.status;
  EXPECT_EQ(c.wr_id, 70u);
  EXPECT_EQ(c.op, OpType::kRecv);
  EXPECT_EQ(std::memcmp(inbox.bytes.data(), message.bytes.data(), 64), 0);
}

TEST_P(TransportTest, AWriteIsVisibleWhenTheSendAfterItIsReceived) {
  // The PUT pattern: WRITE a record into the server's private ring and
  // SEND a message naming it, in one post; the server checks the ring when
  // the receive completes and replies, after which the client may reuse
  // that part of the ring. The WRITE itself reports nothing.
  constexpr uint32_t kSlots = 4;
  constexpr uint32_t kSlotBytes = 512;
  constexpr uint32_t kRounds = 300;
  Private ring{std::vector<uint8_t>(kSlots * kSlotBytes)};
  Buffer recv = MakeBuffer(*server_, kSlots * 64, kLocalWrite);
  Buffer reply = MakeBuffer(*server_, kSlots * 8, kLocalWrite);
  Pair pair = ConnectPair([&](Connection& c) {
    ring.Register(c, kRemoteWrite | kLocalWrite);
    for (uint32_t i = 0; i < kSlots; ++i) ASSERT_TRUE(c.PostRecv(recv.At(i * 64, 64), i).ok());
  });
  ASSERT_NE(pair.client, nullptr);
  Buffer staging = MakeBuffer(*client_, kSlots * kSlotBytes + kSlots * 8, kLocalWrite);
  Buffer replies = MakeBuffer(*client_, kSlots * 8, kLocalWrite);
  for (uint32_t i = 0; i < kSlots; ++i) ASSERT_TRUE(pair.client->PostRecv(replies.At(i * 8, 8), 100 + i).ok());

  std::atomic<int> mismatches{0};
  std::thread server([&] {
    uint32_t received = 0;
    while (received < kRounds * kSlots) {
      const Completion c = PollOne(*pair.server);
      if (!c.status.ok()) {
        ADD_FAILURE() << c.status;
        return;
      }
      if (c.op == OpType::kSend) continue;  // a reply went out
      ++received;
      uint32_t round = 0;
      uint32_t slot = 0;
      std::memcpy(&round, recv.bytes.data() + c.wr_id * 64, 4);
      std::memcpy(&slot, recv.bytes.data() + c.wr_id * 64 + 4, 4);
      for (uint32_t i = 0; i < kSlotBytes; ++i) {
        if (slot >= kSlots || ring.bytes[slot * kSlotBytes + i] != static_cast<uint8_t>(round * 5 + slot + 1)) {
          ++mismatches;
          break;
        }
      }
      ASSERT_TRUE(pair.server->PostRecv(recv.At(c.wr_id * 64, 64), c.wr_id).ok());
      ASSERT_TRUE(pair.server->PostSend(reply.At(c.wr_id * 8, 8), 1000 + c.wr_id).ok());
    }
  });
  for (uint32_t round = 0; round < kRounds && !HasFailure(); ++round) {
    for (uint32_t slot = 0; slot < kSlots; ++slot) {
      std::memset(staging.bytes.data() + slot * kSlotBytes, static_cast<uint8_t>(round * 5 + slot + 1), kSlotBytes);
      uint8_t* msg = staging.bytes.data() + kSlots * kSlotBytes + slot * 8;
      std::memcpy(msg, &round, 4);
      std::memcpy(msg + 4, &slot, 4);
      ASSERT_TRUE(pair.client
                      ->PostWriteSend(staging.At(slot * kSlotBytes, kSlotBytes), ring.Remote(slot * kSlotBytes),
                                      staging.At(kSlots * kSlotBytes + slot * 8, 8), slot)
                      .ok());
    }
    // The ring is reused only once the server has replied to the round.
    uint32_t sends = 0;
    uint32_t replies_seen = 0;
    while (sends < kSlots || replies_seen < kSlots) {
      const Completion c = PollOne(*pair.client);
      ASSERT_TRUE(c.status.ok()) << c.status;
      if (c.op == OpType::kSend) {
        EXPECT_LT(c.wr_id, kSlots);
        ++sends;
      } else {
        ASSERT_EQ(c.op, OpType::kRecv) << "a WRITE reports no completion of its own";
        ++replies_seen;
        ASSERT_TRUE(pair.client->PostRecv(replies.At((c.wr_id - 100) * 8, 8), c.wr_id).ok());
      }
    }
  }
  // A client that stopped early leaves the server waiting: end its wait.
  if (HasFailure()) pair.client->Disconnect();
  server.join();
  EXPECT_EQ(mismatches.load(), 0);
}

// ------------------------------------------------------------ PostWriteSends

TEST_P(TransportTest, AWriteSendListArrivesInOrderAndReportsOnlyItsSignaledSends) {
  // A client's batch of PUTs: kPairs records WRITTEN into the ring and
  // kPairs requests SENT, in one post; only the SENDs that ask for it
  // report a completion. Each record is in the ring when the SEND after
  // it is received. A client of the default send queue, which holds the
  // longest list.
  constexpr uint32_t kPairs = static_cast<uint32_t>(kMaxWriteSendsPerPost);
  constexpr uint32_t kSlotBytes = 128;
  StatusOr<std::unique_ptr<Transport>> deep = MakeTransport(GetParam(), Options{});
  ASSERT_TRUE(deep.ok()) << deep.status();
  Private ring{std::vector<uint8_t>(kPairs * kSlotBytes)};
  Buffer recv = MakeBuffer(*server_, kPairs * 64, kLocalWrite);
  Pair pair = ConnectPair(
      [&](Connection& c) {
        ring.Register(c, kRemoteWrite | kLocalWrite);
        for (uint32_t i = 0; i < kPairs; ++i) ASSERT_TRUE(c.PostRecv(recv.At(i * 64, 64), i).ok());
      },
      {}, {}, deep->get());
  ASSERT_NE(pair.client, nullptr);
  Buffer staging = MakeBuffer(**deep, kPairs * kSlotBytes + kPairs * 8, kLocalWrite);
  std::vector<WriteSendOp> ops;
  for (uint32_t i = 0; i < kPairs; ++i) {
    std::memset(staging.bytes.data() + i * kSlotBytes, static_cast<uint8_t>(i + 1), kSlotBytes);
    std::memcpy(staging.bytes.data() + kPairs * kSlotBytes + i * 8, &i, sizeof(i));
    ops.push_back(WriteSendOp{staging.At(i * kSlotBytes, kSlotBytes), ring.Remote(i * kSlotBytes),
                              staging.At(kPairs * kSlotBytes + i * 8, 8), 1000 + i,
                              /*signaled=*/i == 2 || i + 1 == kPairs});
  }
  ASSERT_TRUE(pair.client->PostWriteSends(ops).ok());

  for (uint32_t i = 0; i < kPairs; ++i) {
    const Completion c = PollOne(*pair.server);
    ASSERT_TRUE(c.status.ok()) << c.status;
    ASSERT_EQ(c.op, OpType::kRecv);
    EXPECT_EQ(c.wr_id, i) << "receives are consumed in order";
    uint32_t named = 0;
    std::memcpy(&named, recv.bytes.data() + c.wr_id * 64, sizeof(named));
    EXPECT_EQ(named, i) << "SENDs arrive in post order";
    for (uint32_t b = 0; b < kSlotBytes; ++b) {
      ASSERT_EQ(ring.bytes[named * kSlotBytes + b], static_cast<uint8_t>(named + 1))
          << "the WRITE of pair " << named << " is visible when its SEND is received";
    }
  }
  const Completion first = PollOne(*pair.client);
  const Completion last = PollOne(*pair.client);
  EXPECT_TRUE(first.status.ok()) << first.status;
  EXPECT_EQ(first.op, OpType::kSend);
  EXPECT_EQ(first.wr_id, 1002u);
  EXPECT_TRUE(last.status.ok()) << last.status;
  EXPECT_EQ(last.op, OpType::kSend);
  EXPECT_EQ(last.wr_id, 1000u + kPairs - 1);
  Completion none[4];
  StatusOr<size_t> more = pair.client->Poll(none, 20ms);
  ASSERT_TRUE(more.ok()) << more.status();
  EXPECT_EQ(*more, 0u) << "unsignaled SENDs and WRITEs report nothing";
}

TEST_P(TransportTest, AWriteSendListThatCannotBePostedPostsNothing) {
  Private ring{std::vector<uint8_t>(4096)};
  Buffer recv = MakeBuffer(*server_, 256, kLocalWrite);
  Pair pair = ConnectPair([&](Connection& c) {
    ring.Register(c, kRemoteWrite | kLocalWrite);
    for (uint32_t i = 0; i < 4; ++i) ASSERT_TRUE(c.PostRecv(recv.At(i * 64, 64), i).ok());
  });
  ASSERT_NE(pair.client, nullptr);
  Buffer local = MakeBuffer(*client_, 256, kLocalWrite);
  std::memcpy(local.bytes.data() + 200, "good", 4);
  std::memcpy(local.bytes.data() + 208, "bad!", 4);
  const WriteSendOp good{local.At(0, 64), ring.Remote(0), local.At(200, 4), 1, true};
  const WriteSendOp bad_send{local.At(0, 64), ring.Remote(64), local.At(250, 8), 2, true};
  const WriteSendOp bad_write{local.At(200, 57), ring.Remote(128), local.At(208, 4), 3, true};
  EXPECT_TRUE(pair.client->PostWriteSends({}).ok()) << "an empty list posts nothing";
  const WriteSendOp mixed[] = {good, bad_send};
  EXPECT_EQ(pair.client->PostWriteSends(mixed).code(), StatusCode::kInvalidArgument);
  const WriteSendOp mixed2[] = {bad_write, good};
  EXPECT_EQ(pair.client->PostWriteSends(mixed2).code(), StatusCode::kInvalidArgument);
  // More pairs than this client's send queue (kClientSendDepth) holds.
  std::vector<WriteSendOp> too_many(kClientSendDepth / 2 + 1, good);
  const Status refused = pair.client->PostWriteSends(too_many);
  EXPECT_TRUE(refused.code() == StatusCode::kInvalidArgument || refused.code() == StatusCode::kResourceExhausted)
      << refused;
  // More than any list may hold.
  std::vector<WriteSendOp> over_limit(kMaxWriteSendsPerPost + 1, good);
  EXPECT_FALSE(pair.client->PostWriteSends(over_limit).ok());

  // None of it was posted: the server's first message is the good one.
  ASSERT_TRUE(pair.client->PostWriteSends({&good, 1}).ok());
  const Completion sent = PollOne(*pair.client);
  EXPECT_TRUE(sent.status.ok()) << sent.status;
  EXPECT_EQ(sent.wr_id, 1u);
  const Completion got = PollOne(*pair.server);
  ASSERT_TRUE(got.status.ok()) << got.status;
  EXPECT_EQ(got.wr_id, 0u);
  EXPECT_EQ(got.byte_len, 4u);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(recv.bytes.data()), 4), "good");
}

TEST_P(TransportTest, SendsConsumeReceivesInOrderAndWaitForOne) {
  Pair pair = ConnectPair();
  ASSERT_NE(pair.client, nullptr);
  Buffer msg = MakeBuffer(*client_, 64, 0);
  std::memcpy(msg.bytes.data(), "early message", 13);
  // No receive is posted yet: the SENDs wait for them.
  ASSERT_TRUE(pair.client->PostSend(msg.At(0, 13), 11).ok());
  ASSERT_TRUE(pair.client->PostSend(msg.At(0, 5), 12).ok());
  Completion none[1];
  StatusOr<size_t> n = pair.server->Poll(none, 0us);
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(*n, 0u);

  Buffer recv = MakeBuffer(*server_, 64, kLocalWrite);
  ASSERT_TRUE(pair.server->PostRecv(recv.At(0, 32), 21).ok());
  ASSERT_TRUE(pair.server->PostRecv(recv.At(32, 32), 22).ok());
  const Completion first = PollOne(*pair.server);
  ASSERT_TRUE(first.status.ok()) << first.status;
  EXPECT_EQ(first.op, OpType::kRecv);
  EXPECT_EQ(first.wr_id, 21u);
  EXPECT_EQ(first.byte_len, 13u);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(recv.bytes.data()), 13), "early message");
  const Completion second = PollOne(*pair.server);
  ASSERT_TRUE(second.status.ok()) << second.status;
  EXPECT_EQ(second.wr_id, 22u);
  EXPECT_EQ(second.byte_len, 5u);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(recv.bytes.data() + 32), 5), "early");
  for (const uint64_t wr_id : {11u, 12u}) {
    const Completion sent = PollOne(*pair.client);
    EXPECT_TRUE(sent.status.ok()) << sent.status;
    EXPECT_EQ(sent.op, OpType::kSend);
    EXPECT_EQ(sent.wr_id, wr_id);
  }
}

TEST_P(TransportTest, ASendLargerThanItsReceiveBufferFailsBothSides) {
  Buffer recv = MakeBuffer(*server_, 64, kLocalWrite);
  Pair pair = ConnectPair([&](Connection& c) { ASSERT_TRUE(c.PostRecv(recv.At(0, 16), 1).ok()); });
  ASSERT_NE(pair.client, nullptr);
  Buffer msg = MakeBuffer(*client_, 64, 0);
  ASSERT_TRUE(pair.client->PostSend(msg.At(0, 64), 2).ok());
  const Completion sent = PollOne(*pair.client);
  EXPECT_EQ(sent.wr_id, 2u);
  EXPECT_FALSE(sent.status.ok());
  const Completion received = PollOne(*pair.server);
  EXPECT_EQ(received.wr_id, 1u);
  EXPECT_FALSE(received.status.ok());
}

TEST_P(TransportTest, LocalBuffersOutsideTheirRegionAreRefusedAndNothingIsPosted) {
  Buffer table = MakeBuffer(*server_, 4096, kRemoteRead, 6);
  Pair pair = ConnectPair();
  ASSERT_NE(pair.client, nullptr);
  Buffer local = MakeBuffer(*client_, 128, kLocalWrite);
  const ReadOp outside{local.At(100, 64), table.Remote(), 1, true};
  const ReadOp no_region{LocalBuf{nullptr, 0, 8}, table.Remote(), 2, true};
  const ReadOp good{local.At(0, 64), table.Remote(), 3, true};
  EXPECT_EQ(pair.client->PostReads({&outside, 1}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(pair.client->PostReads({&no_region, 1}).code(), StatusCode::kInvalidArgument);
  const ReadOp mixed[] = {good, outside};
  EXPECT_EQ(pair.client->PostReads(mixed).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(pair.client->PostSend(local.At(120, 16), 4).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(pair.client->PostRecv(local.At(0, 129), 5).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(pair.client->PostWriteSend(local.At(64, 65), table.Remote(), local.At(0, 8), 6).code(),
            StatusCode::kInvalidArgument);
  // Nothing was posted: the next completion is the good READ's.
  ASSERT_TRUE(pair.client->PostReads({&good, 1}).ok());
  const Completion done = PollOne(*pair.client);
  EXPECT_TRUE(done.status.ok()) << done.status;
  EXPECT_EQ(done.wr_id, 3u);
  EXPECT_EQ(local.bytes[63], 6);
}

// --------------------------------------------------------- PostReadsAndWait

TEST_P(TransportTest, PostReadsAndWaitReturnsWithTheDataAndHandsBackOtherCompletions) {
  Buffer table = MakeBuffer(*server_, 64 * 1024, kRemoteRead);
  for (size_t i = 0; i < table.bytes.size(); ++i) table.bytes[i] = static_cast<uint8_t>(i * 5 + 1);
  Buffer inbox = MakeBuffer(*server_, 64, kLocalWrite, 0x33);
  Pair pair = ConnectPair([&](Connection& c) { ASSERT_TRUE(c.PostRecv(inbox.At(0, 32), 900).ok()); });
  ASSERT_NE(pair.client, nullptr);
  Buffer local = MakeBuffer(*client_, 4096, kLocalWrite);
  // A message from the server (its SEND completed: the client's receive
  // has its data), then a SEND of the client's, then the READs.
  ASSERT_TRUE(pair.client->PostRecv(local.At(3072, 64), 800).ok());
  ASSERT_TRUE(pair.server->PostSend(inbox.At(32, 16), 8).ok());
  const Completion server_sent = PollOne(*pair.server);
  ASSERT_TRUE(server_sent.status.ok()) << server_sent.status;
  ASSERT_TRUE(pair.client->PostSend(local.At(2048, 16), 7).ok());
  const ReadOp ops[] = {{local.At(0, 100), table.Remote(300), 1, false},
                        {local.At(100, 900), table.Remote(9000), 2, true}};
  std::vector<Completion> others;
  const Status waited = pair.client->PostReadsAndWait(ops, 10s, &others);
  ASSERT_TRUE(waited.ok()) << waited;
  EXPECT_EQ(std::memcmp(local.bytes.data(), table.bytes.data() + 300, 100), 0);
  EXPECT_EQ(std::memcmp(local.bytes.data() + 100, table.bytes.data() + 9000, 900), 0);

  // The SEND completed before the READs (in post order), so it is among
  // `others`; the receive is there or comes from the next Poll; nothing is
  // reported twice, and the waited-for READ not at all.
  size_t sends = 0;
  size_t recvs = 0;
  const auto count = [&](const Completion& c) {
    EXPECT_TRUE(c.status.ok()) << c.status;
    EXPECT_NE(c.op, OpType::kRead);
    if (c.op == OpType::kSend && c.wr_id == 7) ++sends;
    if (c.op == OpType::kRecv && c.wr_id == 800) ++recvs;
  };
  for (const Completion& c : others) count(c);
  EXPECT_EQ(sends, 1u);
  if (recvs == 0) count(PollOne(*pair.client));
  EXPECT_EQ(recvs, 1u);
  Completion more[4];
  StatusOr<size_t> n = pair.client->Poll(more, 0us);
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(*n, 0u);
}

TEST_P(TransportTest, PostReadsAndWaitRefusesAListItCannotWaitFor) {
  Buffer table = MakeBuffer(*server_, 4096, kRemoteRead, 4);
  Pair pair = ConnectPair();
  ASSERT_NE(pair.client, nullptr);
  Buffer local = MakeBuffer(*client_, 64, kLocalWrite);
  std::vector<Completion> others;
  EXPECT_EQ(pair.client->PostReadsAndWait({}, 1s, &others).code(), StatusCode::kInvalidArgument);
  const ReadOp unsignaled{local.At(0, 8), table.Remote(), 1, false};
  EXPECT_EQ(pair.client->PostReadsAndWait({&unsignaled, 1}, 1s, &others).code(), StatusCode::kInvalidArgument);
  // Nothing was posted.
  const ReadOp signaled{local.At(0, 8), table.Remote(), 2, true};
  EXPECT_TRUE(pair.client->PostReadsAndWait({&signaled, 1}, kWait, &others).ok());
  EXPECT_TRUE(others.empty());
  EXPECT_EQ(local.bytes[0], 4);
}

TEST_P(TransportTest, PostReadsAndWaitReturnsTheReadsError) {
  Buffer table = MakeBuffer(*server_, 4096, kRemoteRead);
  Pair pair = ConnectPair();
  ASSERT_NE(pair.client, nullptr);
  Buffer local = MakeBuffer(*client_, 64, kLocalWrite);
  const ReadOp bad{local.At(0, 64), RemoteBuf{table.mr->remote_addr(), table.mr->rkey() ^ 0x5a5a00u}, 3, true};
  std::vector<Completion> others;
  const Status refused = pair.client->PostReadsAndWait({&bad, 1}, kWait, &others);
  EXPECT_EQ(refused.code(), StatusCode::kPermissionDenied) << refused;
}

TEST_P(TransportTest, PostReadsAndWaitGivesUpAtItsTimeout) {
  // No healthy transport leaves a READ uncompleted on demand: a
  // FaultTransport around this one drops it. The wait is the interface's
  // (transport.cc), which every implementation ends in.
  StatusOr<std::unique_ptr<Transport>> inner = MakeTransport(name_, ClientOptions());
  ASSERT_TRUE(inner.ok()) << inner.status();
  fault::FaultTransport lossy(std::move(*inner));
  ASSERT_TRUE(lossy.faults().AddSpec("read:drop").ok());
  Buffer table = MakeBuffer(*server_, 4096, kRemoteRead, 5);
  Pair pair = ConnectPair({}, {}, {}, &lossy);
  ASSERT_NE(pair.client, nullptr);
  Buffer local = MakeBuffer(lossy, 64, kLocalWrite);
  const ReadOp op{local.At(0, 64), table.Remote(), 1, true};
  std::vector<Completion> others;
  EXPECT_EQ(pair.client->PostReadsAndWait({&op, 1}, 50ms, &others).code(), StatusCode::kDeadlineExceeded);
  EXPECT_EQ(local.bytes[0], 0);
}

// ------------------------------------------------------------ thread safety

TEST_P(TransportTest, OneTransportServesConnectionsOnManyThreads) {
  constexpr int kClients = 4;
  Buffer table = MakeBuffer(*server_, 4096, kRemoteRead);
  for (size_t i = 0; i < table.bytes.size(); ++i) table.bytes[i] = static_cast<uint8_t>(i / 16);
  std::vector<std::unique_ptr<Connection>> accepted;
  std::thread acceptor([&] {
    for (int i = 0; i < kClients; ++i) {
      std::unique_ptr<Connection> c = NextPending();
      if (c == nullptr) return;
      EXPECT_TRUE(c->Accept({}).ok());
      accepted.push_back(std::move(c));
    }
  });
  std::vector<std::thread> clients;
  for (int i = 0; i < kClients; ++i) {
    clients.emplace_back([&, i] {
      // Each client thread registers and connects on the shared transport.
      Buffer local = MakeBuffer(*client_, 256, kLocalWrite);
      StatusOr<std::unique_ptr<Connection>> c = client_->Connect(listener_->address(), {}, kWait);
      ASSERT_TRUE(c.ok()) << c.status();
      const ReadOp op{local.At(0, 256), table.Remote(i * 256), static_cast<uint64_t>(i), true};
      ASSERT_TRUE((*c)->PostReads({&op, 1}).ok());
      const Completion done = PollOne(**c);
      EXPECT_TRUE(done.status.ok()) << done.status;
      EXPECT_EQ(std::memcmp(local.bytes.data(), table.bytes.data() + i * 256, 256), 0) << "client " << i;
    });
  }
  for (std::thread& t : clients) t.join();
  if (HasFailure()) listener_->Shutdown();
  acceptor.join();
}

}  // namespace
}  // namespace rkv::transport
