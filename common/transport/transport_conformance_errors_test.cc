// The transport contract (transport_conformance_test_fixture.h): the error
// state (disconnect, a peer gone) and access rights (remote READs and
// WRITEs the target refuses).
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <tuple>
#include <vector>

#include "common/transport/transport_conformance_test_fixture.h"

namespace rkv::transport {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using testing::Buffer;
using testing::kWait;
using testing::MakeBuffer;
using testing::NamePart;
using testing::PollOne;
using testing::PollUntilFailed;
using testing::TransportsUnderTest;

// -------------------------------------------------------- the error state

TEST_P(TransportTest, DisconnectIsIdempotentAndFailsLaterWork) {
  Buffer table = MakeBuffer(*server_, 64, kRemoteRead);
  Pair pair = ConnectPair();
  ASSERT_NE(pair.client, nullptr);
  pair.client->Disconnect();
  pair.client->Disconnect();
  Buffer local = MakeBuffer(*client_, 64, kLocalWrite);
  const ReadOp read{local.At(0, 8), table.Remote(), 1, true};
  EXPECT_EQ(pair.client->PostReads({&read, 1}).code(), StatusCode::kUnavailable);
  EXPECT_EQ(pair.client->PostSend(local.At(0, 8), 2).code(), StatusCode::kUnavailable);
  EXPECT_EQ(pair.client->PostWriteSend(local.At(0, 8), table.Remote(), local.At(8, 8), 3).code(),
            StatusCode::kUnavailable);
  EXPECT_EQ(pair.client->PostRecv(local.At(0, 64), 4).code(), StatusCode::kUnavailable);
  Completion out[1];
  EXPECT_EQ(pair.client->Poll(out, kWait).status().code(), StatusCode::kUnavailable);
}

enum class PeerGone { kDisconnected, kDestroyed };

class PeerGoneTest : public ConformanceTest,
                     public ::testing::WithParamInterface<std::tuple<std::string, PeerGone>> {
 protected:
  void SetUp() override { Start(std::get<0>(GetParam())); }
};

TEST_P(PeerGoneTest, ThePeerFlushesItsReceivesAndFailsLaterWork) {
  constexpr int kRecvs = 4;
  Buffer msgs = MakeBuffer(*server_, kRecvs * 64, kLocalWrite);
  Pair pair = ConnectPair([&](Connection& c) {
    for (int i = 0; i < kRecvs; ++i) ASSERT_TRUE(c.PostRecv(msgs.At(i * 64, 64), i).ok());
  });
  ASSERT_NE(pair.client, nullptr);
  if (std::get<1>(GetParam()) == PeerGone::kDestroyed) {
    pair.client.reset();
  } else {
    pair.client->Disconnect();
  }
  std::vector<Completion> seen;
  const Status end = PollUntilFailed(*pair.server, &seen);
  EXPECT_EQ(end.code(), StatusCode::kUnavailable) << end;
  // Every posted receive completes, flushed: none succeeds, none is lost.
  ASSERT_EQ(seen.size(), static_cast<size_t>(kRecvs));
  for (const Completion& c : seen) {
    EXPECT_EQ(c.op, OpType::kRecv);
    EXPECT_EQ(c.status.code(), StatusCode::kUnavailable) << c.status;
  }
  EXPECT_EQ(pair.server->PostSend(msgs.At(0, 8), 9).code(), StatusCode::kUnavailable);
  EXPECT_EQ(pair.server->PostRecv(msgs.At(0, 64), 10).code(), StatusCode::kUnavailable);
  if (pair.client != nullptr) {
    std::vector<Completion> client_seen;
    EXPECT_EQ(PollUntilFailed(*pair.client, &client_seen).code(), StatusCode::kUnavailable);
    EXPECT_TRUE(client_seen.empty());
  }
}

std::string PeerGoneTestName(const ::testing::TestParamInfo<std::tuple<std::string, PeerGone>>& info) {
  return NamePart(std::get<0>(info.param)) +
         (std::get<1>(info.param) == PeerGone::kDestroyed ? "_Destroyed" : "_Disconnected");
}

INSTANTIATE_TEST_SUITE_P(Transports, PeerGoneTest,
                         ::testing::Combine(::testing::ValuesIn(TransportsUnderTest()),
                                            ::testing::Values(PeerGone::kDisconnected, PeerGone::kDestroyed)),
                         PeerGoneTestName);

TEST_P(TransportTest, ADestroyedPeerFailsOutstandingWork) {
  Buffer table = MakeBuffer(*server_, 4096, kRemoteRead);
  Pair pair = ConnectPair();
  ASSERT_NE(pair.client, nullptr);
  pair.server.reset();
  Buffer local = MakeBuffer(*client_, 64, kLocalWrite);
  // Posted before or after the client noticed: refused, or flushed.
  const ReadOp op{local.At(0, 64), table.Remote(), 1, true};
  const Status posted = pair.client->PostReads({&op, 1});
  std::vector<Completion> seen;
  EXPECT_EQ(PollUntilFailed(*pair.client, &seen).code(), StatusCode::kUnavailable);
  if (posted.ok()) {
    ASSERT_EQ(seen.size(), 1u);
    EXPECT_EQ(seen[0].wr_id, 1u);
    EXPECT_EQ(seen[0].status.code(), StatusCode::kUnavailable) << seen[0].status;
  } else {
    EXPECT_EQ(posted.code(), StatusCode::kUnavailable) << posted;
    EXPECT_TRUE(seen.empty());
  }
}

// ------------------------------------------------------------ access rights

enum class BadRead { kOutOfBounds, kStraddlesTheEnd, kWrongRkey, kNoRemoteRead, kOtherConnectionsPrivate };

class BadRemoteReadTest : public ConformanceTest,
                          public ::testing::WithParamInterface<std::tuple<std::string, BadRead>> {
 protected:
  void SetUp() override { Start(std::get<0>(GetParam())); }
};

TEST_P(BadRemoteReadTest, FailsWithPermissionDeniedAndTheServerServesTheOthers) {
  const BadRead bad = std::get<1>(GetParam());
  Buffer table = MakeBuffer(*server_, 4096, kRemoteRead, 0x5a);
  Buffer hidden = MakeBuffer(*server_, 4096, kLocalWrite, 0x77);
  Private mine{std::vector<uint8_t>(1024, 0x33)};
  Pair other = ConnectPair([&](Connection& c) { mine.Register(c, kRemoteRead); });
  ASSERT_NE(other.client, nullptr);
  if (bad == BadRead::kOtherConnectionsPrivate && !PrivateRegionsAreEnforced(*other.server)) {
    GTEST_SKIP() << "this RDMA device has no type 2 memory windows: private regions are plain MRs";
  }
  Buffer recv = MakeBuffer(*server_, 64, kLocalWrite);
  Pair pair = ConnectPair([&](Connection& c) { ASSERT_TRUE(c.PostRecv(recv.At(0, 64), 42).ok()); });
  ASSERT_NE(pair.client, nullptr);
  Buffer local = MakeBuffer(*client_, 8192, kLocalWrite);

  RemoteBuf target = table.Remote();
  switch (bad) {
    case BadRead::kOutOfBounds: target.addr += 8192; break;
    case BadRead::kStraddlesTheEnd: target.addr += 4096 - 32; break;
    case BadRead::kWrongRkey: target.rkey ^= 0x5a5a00u; break;
    case BadRead::kNoRemoteRead: target = hidden.Remote(); break;
    case BadRead::kOtherConnectionsPrivate: target = mine.Remote(); break;
  }
  // The refused READ is unsignaled, between two others: it reports its
  // failure anyway, and the READ after it is flushed.
  const ReadOp ops[] = {
      {local.At(0, 64), table.Remote(), 1, false},
      {local.At(64, 64), target, 2, false},
      {local.At(128, 64), table.Remote(), 3, true},
  };
  ASSERT_TRUE(pair.client->PostReads(ops).ok());
  std::vector<Completion> seen;
  const Status end = PollUntilFailed(*pair.client, &seen);
  EXPECT_EQ(end.code(), StatusCode::kUnavailable) << end;
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0].wr_id, 2u);
  EXPECT_EQ(seen[0].op, OpType::kRead);
  EXPECT_EQ(seen[0].status.code(), StatusCode::kPermissionDenied) << seen[0].status;
  EXPECT_EQ(seen[1].wr_id, 3u);
  EXPECT_EQ(seen[1].status.code(), StatusCode::kUnavailable) << seen[1].status;
  EXPECT_EQ(local.bytes[64], 0) << "nothing of the refused READ arrived";
  // A connection in the error state refuses later work.
  EXPECT_FALSE(pair.client->PostReads({&ops[0], 1}).ok());

  // The other connection, and new ones, are served as before.
  const ReadOp again{local.At(0, 64), mine.Remote(), 5, true};
  ASSERT_TRUE(other.client->PostReads({&again, 1}).ok());
  EXPECT_TRUE(PollOne(*other.client).status.ok());
  EXPECT_EQ(local.bytes[0], 0x33);
  Pair fresh = ConnectPair();
  ASSERT_NE(fresh.client, nullptr);
  const ReadOp read{local.At(256, 64), table.Remote(), 6, true};
  ASSERT_TRUE(fresh.client->PostReads({&read, 1}).ok());
  EXPECT_TRUE(PollOne(*fresh.client).status.ok());
  EXPECT_EQ(local.bytes[256], 0x5a);
}

std::string BadReadName(BadRead b) {
  switch (b) {
    case BadRead::kOutOfBounds: return "OutOfBounds";
    case BadRead::kStraddlesTheEnd: return "StraddlesTheEnd";
    case BadRead::kWrongRkey: return "WrongRkey";
    case BadRead::kNoRemoteRead: return "NoRemoteRead";
    case BadRead::kOtherConnectionsPrivate: return "OtherConnectionsPrivate";
  }
  return "Unknown";
}

INSTANTIATE_TEST_SUITE_P(
    Transports, BadRemoteReadTest,
    ::testing::Combine(::testing::ValuesIn(TransportsUnderTest()),
                       ::testing::Values(BadRead::kOutOfBounds, BadRead::kStraddlesTheEnd, BadRead::kWrongRkey,
                                         BadRead::kNoRemoteRead, BadRead::kOtherConnectionsPrivate)),
    [](const ::testing::TestParamInfo<std::tuple<std::string, BadRead>>& info) {
      return NamePart(std::get<0>(info.param)) + "_" + BadReadName(std::get<1>(info.param));
    });

enum class BadWrite { kNoRemoteWrite, kOutOfBounds, kWrongRkey, kOtherConnectionsPrivate };

class BadRemoteWriteTest : public ConformanceTest,
                           public ::testing::WithParamInterface<std::tuple<std::string, BadWrite>> {
 protected:
  void SetUp() override { Start(std::get<0>(GetParam())); }
};

TEST_P(BadRemoteWriteTest, FailsWithPermissionDeniedAndChangesNothing) {
  const BadWrite bad = std::get<1>(GetParam());
  Buffer table = MakeBuffer(*server_, 4096, kRemoteRead, 0x5a);
  Private others_ring{std::vector<uint8_t>(1024, 0)};
  Pair other = ConnectPair([&](Connection& c) { others_ring.Register(c, kRemoteWrite | kLocalWrite); });
  ASSERT_NE(other.client, nullptr);
  if (bad == BadWrite::kOtherConnectionsPrivate && !PrivateRegionsAreEnforced(*other.server)) {
    GTEST_SKIP() << "this RDMA device has no type 2 memory windows: private regions are plain MRs";
  }
  Private ring{std::vector<uint8_t>(1024, 0)};
  Buffer recv = MakeBuffer(*server_, 64, kLocalWrite);
  Pair pair = ConnectPair([&](Connection& c) {
    ring.Register(c, kRemoteWrite | kLocalWrite);
    ASSERT_TRUE(c.PostRecv(recv.At(0, 64), 42).ok());
  });
  ASSERT_NE(pair.client, nullptr);
  Buffer local = MakeBuffer(*client_, 256, kLocalWrite, 0xee);

  RemoteBuf target;
  switch (bad) {
    case BadWrite::kNoRemoteWrite: target = table.Remote(64); break;
    case BadWrite::kOutOfBounds: target = ring.Remote(1024 - 64); break;
    case BadWrite::kWrongRkey: target = ring.Remote(); target.rkey ^= 0x5a5a00u; break;
    case BadWrite::kOtherConnectionsPrivate: target = others_ring.Remote(); break;
  }
  ASSERT_TRUE(pair.client->PostWriteSend(local.At(0, 128), target, local.At(128, 16), 7).ok());
  std::vector<Completion> seen;
  EXPECT_EQ(PollUntilFailed(*pair.client, &seen).code(), StatusCode::kUnavailable);
  ASSERT_FALSE(seen.empty());
  EXPECT_EQ(seen[0].op, OpType::kWrite);
  EXPECT_EQ(seen[0].wr_id, 7u);
  EXPECT_EQ(seen[0].status.code(), StatusCode::kPermissionDenied) << seen[0].status;
  for (size_t i = 1; i < seen.size(); ++i) EXPECT_FALSE(seen[i].status.ok()) << "the SEND after it";
  EXPECT_EQ(table.bytes, std::vector<uint8_t>(4096, 0x5a));
  EXPECT_EQ(ring.bytes, std::vector<uint8_t>(1024, 0));
  EXPECT_EQ(others_ring.bytes, std::vector<uint8_t>(1024, 0));
  // The SEND behind the refused WRITE never reaches the server's receive.
  Completion out[4];
  StatusOr<size_t> n = pair.server->Poll(out, 0us);
  for (size_t i = 0; n.ok() && i < *n; ++i) EXPECT_FALSE(out[i].status.ok()) << "the receive completed";

  // The other connection writes its own ring, as new connections do theirs.
  Buffer other_recv = MakeBuffer(*server_, 64, kLocalWrite);
  ASSERT_TRUE(other.server->PostRecv(other_recv.At(0, 64), 1).ok());
  ASSERT_TRUE(other.client->PostWriteSend(local.At(0, 128), others_ring.Remote(), local.At(128, 16), 8).ok());
  const Completion arrived = PollOne(*other.server);
  EXPECT_TRUE(arrived.status.ok()) << arrived.status;
  EXPECT_EQ(others_ring.bytes[0], 0xee);
  EXPECT_EQ(others_ring.bytes[127], 0xee);
  EXPECT_EQ(others_ring.bytes[128], 0);
  EXPECT_TRUE(PollOne(*other.client).status.ok());
}

std::string BadWriteName(BadWrite b) {
  switch (b) {
    case BadWrite::kNoRemoteWrite: return "NoRemoteWrite";
    case BadWrite::kOutOfBounds: return "OutOfBounds";
    case BadWrite::kWrongRkey: return "WrongRkey";
    case BadWrite::kOtherConnectionsPrivate: return "OtherConnectionsPrivate";
  }
  return "Unknown";
}

INSTANTIATE_TEST_SUITE_P(
    Transports, BadRemoteWriteTest,
    ::testing::Combine(::testing::ValuesIn(TransportsUnderTest()),
                       ::testing::Values(BadWrite::kNoRemoteWrite, BadWrite::kOutOfBounds, BadWrite::kWrongRkey,
                                         BadWrite::kOtherConnectionsPrivate)),
    [](const ::testing::TestParamInfo<std::tuple<std::string, BadWrite>>& info) {
      return NamePart(std::get<0>(info.param)) + "_" + BadWriteName(std::get<1>(info.param));
    });

}  // namespace
}  // namespace rkv::transport
