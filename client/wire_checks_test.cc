#include "client/wire_checks.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

namespace rkv::client {
namespace {

protocol::AcceptData GoodAccept() {
  protocol::AcceptData a{};
  a.magic = protocol::kAcceptMagic;
  a.protocol_version = protocol::kProtocolVersion;
  a.layout_version = layout::kLayoutVersion;
  a.epoch = 7;
  a.index = {0x10000, layout::IndexBytes(1024), 11, 0};
  a.heap = {0x200000, 1 << 20, 12, 0};
  a.max_key_bytes = 1024;
  a.max_value_bytes = 64 * 1024;
  a.ring = {0x900000, 2 * layout::BlockBytes(1024, 64 * 1024), 13, 0};
  a.request_credits = 16;
  a.grace_period_us = 100000;
  return a;
}

std::vector<uint8_t> Bytes(const protocol::AcceptData& a, size_t pad = 0) {
  std::vector<uint8_t> v(sizeof(a) + pad, 0);
  std::memcpy(v.data(), &a, sizeof(a));
  return v;
}

layout::TableHeader GoodHeader(const protocol::AcceptData& a) {
  layout::TableHeader h{};
  h.magic = layout::kTableMagic;
  h.layout_version = layout::kLayoutVersion;
  h.bucket_count_log2 = 10;
  h.bucket_count = 1024;
  h.epoch = a.epoch;
  h.hash_seed = 99;
  h.heap_size = a.heap.length;
  return h;
}

TEST(ParseAcceptDataTest, AcceptsAValidOneAndPadding) {
  auto a = ParseAcceptData(Bytes(GoodAccept()));
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->epoch, 7u);
  // rdma_cm delivers the accept private data padded to its maximum size.
  auto padded = ParseAcceptData(Bytes(GoodAccept(), protocol::kMaxAcceptPrivateData - sizeof(protocol::AcceptData)));
  EXPECT_TRUE(padded.ok()) << padded.status();
}

TEST(ParseAcceptDataTest, RejectsShortData) {
  auto v = Bytes(GoodAccept());
  v.pop_back();
  EXPECT_EQ(ParseAcceptData(v).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseAcceptData({}).status().code(), StatusCode::kInvalidArgument);
}

TEST(ParseAcceptDataTest, RejectsEachBadField) {
  struct Case {
    const char* name;
    void (*mutate)(protocol::AcceptData&);
    StatusCode code;
  };
  const Case cases[] = {
      {"magic", [](protocol::AcceptData& a) { a.magic = protocol::kConnectMagic; }, StatusCode::kInvalidArgument},
      {"protocol", [](protocol::AcceptData& a) { a.protocol_version = protocol::kProtocolVersion + 1; }, StatusCode::kFailedPrecondition},
      {"layout", [](protocol::AcceptData& a) { a.layout_version = 9; }, StatusCode::kFailedPrecondition},
      {"no credits", [](protocol::AcceptData& a) { a.request_credits = 0; }, StatusCode::kInvalidArgument},
      {"many credits", [](protocol::AcceptData& a) { a.request_credits = 1u << 30; }, StatusCode::kInvalidArgument},
      {"zero key", [](protocol::AcceptData& a) { a.max_key_bytes = 0; }, StatusCode::kInvalidArgument},
      {"huge key", [](protocol::AcceptData& a) { a.max_key_bytes = 70000; }, StatusCode::kInvalidArgument},
      {"huge value", [](protocol::AcceptData& a) { a.max_value_bytes = 8u << 20; }, StatusCode::kInvalidArgument},
      {"no grace", [](protocol::AcceptData& a) { a.grace_period_us = 1; }, StatusCode::kInvalidArgument},
      {"index short", [](protocol::AcceptData& a) { a.index.length = 64; }, StatusCode::kInvalidArgument},
      {"index partial bucket", [](protocol::AcceptData& a) { a.index.length += 8; }, StatusCode::kInvalidArgument},
      {"index not pow2", [](protocol::AcceptData& a) { a.index.length = layout::IndexBytes(3); }, StatusCode::kInvalidArgument},
      {"index wraps", [](protocol::AcceptData& a) { a.index.addr = ~uint64_t{0} - 100; }, StatusCode::kInvalidArgument},
      {"heap empty", [](protocol::AcceptData& a) { a.heap.length = 0; }, StatusCode::kInvalidArgument},
      {"heap unaligned", [](protocol::AcceptData& a) { a.heap.length = 1000; }, StatusCode::kInvalidArgument},
      {"heap huge", [](protocol::AcceptData& a) { a.heap.length = layout::kMaxHeapBytes + 64; }, StatusCode::kInvalidArgument},
      {"ring small", [](protocol::AcceptData& a) { a.ring.length = 64; }, StatusCode::kInvalidArgument},
      {"ring unaligned", [](protocol::AcceptData& a) { a.ring.length += 1; }, StatusCode::kInvalidArgument},
      {"ring wraps", [](protocol::AcceptData& a) { a.ring.addr = ~uint64_t{0}; }, StatusCode::kInvalidArgument},
  };
  for (const Case& c : cases) {
    protocol::AcceptData a = GoodAccept();
    c.mutate(a);
    EXPECT_EQ(ParseAcceptData(Bytes(a)).status().code(), c.code) << c.name;
  }
}

TEST(ParseAcceptDataTest, RandomGarbageNeverPasses) {
  std::mt19937_64 rng(42);
  for (int i = 0; i < 10000; ++i) {
    std::vector<uint8_t> v(rng() % (protocol::kMaxAcceptPrivateData + 1));
    for (auto& b : v) b = static_cast<uint8_t>(rng());
    EXPECT_FALSE(ParseAcceptData(v).ok());
  }
}

TEST(CheckTableHeaderTest, AcceptsAMatchingHeader) {
  const protocol::AcceptData a = GoodAccept();
  EXPECT_TRUE(CheckTableHeader(GoodHeader(a), a).ok());
}

TEST(CheckTableHeaderTest, RejectsEachMismatch) {
  const protocol::AcceptData a = GoodAccept();
  layout::TableHeader h = GoodHeader(a);
  h.magic = 1;
  EXPECT_EQ(CheckTableHeader(h, a).code(), StatusCode::kInvalidArgument);
  h = GoodHeader(a);
  h.layout_version = layout::kLayoutVersion + 1;
  EXPECT_EQ(CheckTableHeader(h, a).code(), StatusCode::kFailedPrecondition);
  h = GoodHeader(a);
  h.bucket_count = 1000;
  EXPECT_EQ(CheckTableHeader(h, a).code(), StatusCode::kInvalidArgument);
  h = GoodHeader(a);
  h.bucket_count_log2 = 11;
  h.bucket_count = 2048;  // consistent, but not the index region's size
  EXPECT_EQ(CheckTableHeader(h, a).code(), StatusCode::kInvalidArgument);
  h = GoodHeader(a);
  h.bucket_count_log2 = 200;
  EXPECT_EQ(CheckTableHeader(h, a).code(), StatusCode::kInvalidArgument);
  h = GoodHeader(a);
  h.heap_size = a.heap.length * 2;
  EXPECT_EQ(CheckTableHeader(h, a).code(), StatusCode::kInvalidArgument);
  h = GoodHeader(a);
  h.epoch = a.epoch + 1;
  // A restart between accept and READ: reconnecting fixes it.
  EXPECT_EQ(CheckTableHeader(h, a).code(), StatusCode::kUnavailable);
}

std::vector<uint8_t> ReplyBytes(const protocol::ReplyMsg& r) {
  std::vector<uint8_t> v(sizeof(r));
  std::memcpy(v.data(), &r, sizeof(r));
  return v;
}

TEST(ParseReplyTest, AcceptsOkAndErrorReplies) {
  protocol::ReplyMsg r{};
  r.request_id = 5;
  r.credits = 1;
  r.version = 3;
  auto ok = ParseReply(ReplyBytes(r));
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->request_id, 5u);
  EXPECT_EQ(ok->version, 3u);

  r.status_code = static_cast<int32_t>(StatusCode::kResourceExhausted);
  std::strcpy(r.message, "heap full");
  auto err = ParseReply(ReplyBytes(r));
  ASSERT_TRUE(err.ok()) << err.status();
  EXPECT_STREQ(err->message, "heap full");
}

TEST(ParseReplyTest, RejectsBadReplies) {
  protocol::ReplyMsg r{};
  auto v = ReplyBytes(r);
  EXPECT_FALSE(ParseReply(std::span<const uint8_t>(v).first(v.size() - 1)).ok());
  v.push_back(0);
  EXPECT_FALSE(ParseReply(v).ok());

  r.status_code = 17;
  EXPECT_FALSE(ParseReply(ReplyBytes(r)).ok());
  r.status_code = -1;
  EXPECT_FALSE(ParseReply(ReplyBytes(r)).ok());

  r.status_code = 0;
  std::memset(r.message, 'x', sizeof(r.message));  // no NUL
  EXPECT_FALSE(ParseReply(ReplyBytes(r)).ok());
}

TEST(ParseReplyTest, ARefusalCarriesItsReasonAndMapVersion) {
  protocol::ReplyMsg r{};
  r.request_id = 9;
  r.status_code = static_cast<int32_t>(StatusCode::kFailedPrecondition);
  r.reason = static_cast<uint8_t>(Reason::kHandover);
  r.map_version = 77;
  std::strcpy(r.message, "any words");
  auto parsed = ParseReply(ReplyBytes(r));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  const Status s = ReplyStatus(*parsed);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.reason(), Reason::kHandover);
  EXPECT_EQ(s.map_version(), 77u);
  EXPECT_EQ(s.message(), "any words");
}

TEST(ParseReplyTest, RejectsAnUnknownReasonAReasonOnSuccessAndReservedBytes) {
  protocol::ReplyMsg r{};
  r.status_code = static_cast<int32_t>(StatusCode::kUnavailable);
  r.reason = kMaxReason + 1;
  EXPECT_FALSE(ParseReply(ReplyBytes(r)).ok());
  r.reason = 255;
  EXPECT_FALSE(ParseReply(ReplyBytes(r)).ok());
  r.reason = static_cast<uint8_t>(Reason::kOutcomeUnknown);
  EXPECT_TRUE(ParseReply(ReplyBytes(r)).ok());
  r.status_code = 0;  // an OK reply refuses nothing
  EXPECT_FALSE(ParseReply(ReplyBytes(r)).ok());
  r.reason = 0;
  EXPECT_TRUE(ParseReply(ReplyBytes(r)).ok());
  r.reserved = 1;
  EXPECT_FALSE(ParseReply(ReplyBytes(r)).ok());
}

}  // namespace
}  // namespace rkv::client
