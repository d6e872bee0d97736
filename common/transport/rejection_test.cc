#include "common/transport/rejection.h"

#include <gtest/gtest.h>

#include <cstring>

namespace rkv::transport {
namespace {

TEST(RejectionTest, RoundTripsCodeAndText) {
  const std::vector<uint8_t> wire = EncodeRejection({StatusCode::kUnauthenticated, "token digest does not match"});
  EXPECT_LE(wire.size(), kMaxRejectionBytes);
  const Rejection r = DecodeRejection(wire);
  EXPECT_EQ(r.code, StatusCode::kUnauthenticated);
  EXPECT_EQ(r.text, "token digest does not match");
  EXPECT_EQ(DescribeRejection(r), "token digest does not match (UNAUTHENTICATED)");
}

TEST(RejectionTest, TheWireFormatIsFixed) {
  const std::vector<uint8_t> wire = EncodeRejection({StatusCode::kResourceExhausted, "full"});
  ASSERT_EQ(wire.size(), kRejectionHeaderBytes + kRejectionTextBytes);
  const uint8_t head[] = {'R', 'K', 'V', 'R', static_cast<uint8_t>(StatusCode::kResourceExhausted), 0, 0, 0,
                          'f', 'u', 'l', 'l', 0};
  EXPECT_EQ(std::memcmp(wire.data(), head, sizeof head), 0);
}

TEST(RejectionTest, LongAndUnprintableTextIsCutAndMasked) {
  std::string text(500, 'x');
  text[3] = '\n';
  const Rejection r = DecodeRejection(EncodeRejection({StatusCode::kInternal, text}));
  EXPECT_EQ(r.text.size(), kRejectionTextBytes - 1);
  EXPECT_EQ(r.text.substr(0, 5), "xxx?x");
}

TEST(RejectionTest, PaddingFromTheConnectionManagerIsAccepted) {
  std::vector<uint8_t> wire = EncodeRejection({StatusCode::kPermissionDenied, "no"});
  wire.resize(kMaxRejectionBytes, 0);
  const Rejection r = DecodeRejection(wire);
  EXPECT_EQ(r.code, StatusCode::kPermissionDenied);
  EXPECT_EQ(r.text, "no");
}

TEST(RejectionTest, ForeignBytesAreDescribedNeverTrusted) {
  EXPECT_EQ(DecodeRejection({}).text, "no reason given");
  EXPECT_EQ(DecodeRejection(std::vector<uint8_t>(56, 0)).text, "no reason given");
  const std::string plain = "server is draining";
  std::vector<uint8_t> bytes(plain.begin(), plain.end());
  bytes.resize(40, 0);
  Rejection r = DecodeRejection(bytes);
  EXPECT_EQ(r.code, StatusCode::kOk);
  EXPECT_EQ(r.text, plain);
  r = DecodeRejection(std::vector<uint8_t>{1, 2, 3, 0xff});
  EXPECT_EQ(r.code, StatusCode::kOk);
  EXPECT_EQ(r.text, "4 bytes of reject data");
  // The magic with a code that is no StatusCode keeps the text, not the code.
  std::vector<uint8_t> odd = EncodeRejection({StatusCode::kInternal, "why"});
  odd[4] = 0x7f;
  r = DecodeRejection(odd);
  EXPECT_EQ(r.code, StatusCode::kOk);
  EXPECT_EQ(r.text, "why");
}

TEST(RejectionTest, ADetailRoundTripsAfterTheText) {
  const std::vector<uint8_t> detail = {1, 0, 2, 0xff, 0, 0, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
  ASSERT_EQ(detail.size(), kMaxRejectionDetailBytes);
  std::vector<uint8_t> wire = EncodeRejection({StatusCode::kUnauthenticated, "challenge", detail});
  ASSERT_EQ(wire.size(), kRejectionHeaderBytes + kRejectionTextBytes + 1 + detail.size());
  EXPECT_LE(wire.size(), kMaxRejectionBytes);
  EXPECT_EQ(wire[kRejectionHeaderBytes + kRejectionTextBytes], detail.size());
  Rejection r = DecodeRejection(wire);
  EXPECT_EQ(r.code, StatusCode::kUnauthenticated);
  EXPECT_EQ(r.text, "challenge");
  EXPECT_EQ(r.detail, detail);
  // rdma_cm's zero padding after it changes nothing.
  wire.resize(kMaxRejectionBytes, 0);
  EXPECT_EQ(DecodeRejection(wire).detail, detail);
  // A short one.
  EXPECT_EQ(DecodeRejection(EncodeRejection({StatusCode::kInternal, "x", {42}})).detail, std::vector<uint8_t>{42});
}

TEST(RejectionTest, NoDetailOrABadOneDecodesAsNone) {
  // The older format, padded or not.
  std::vector<uint8_t> wire = EncodeRejection({StatusCode::kPermissionDenied, "no"});
  EXPECT_TRUE(DecodeRejection(wire).detail.empty());
  wire.resize(kMaxRejectionBytes, 0);
  EXPECT_TRUE(DecodeRejection(wire).detail.empty());
  // A length past the limit, or past the data.
  wire[kRejectionHeaderBytes + kRejectionTextBytes] = kMaxRejectionDetailBytes + 1;
  EXPECT_TRUE(DecodeRejection(wire).detail.empty());
  wire.resize(kRejectionHeaderBytes + kRejectionTextBytes + 3);
  wire[kRejectionHeaderBytes + kRejectionTextBytes] = 5;
  const Rejection r = DecodeRejection(wire);
  EXPECT_TRUE(r.detail.empty());
  EXPECT_EQ(r.text, "no");
  // An oversized detail is not sent.
  EXPECT_EQ(EncodeRejection({StatusCode::kInternal, "x", std::vector<uint8_t>(kMaxRejectionDetailBytes + 1, 1)}).size(),
            kRejectionHeaderBytes + kRejectionTextBytes);
}

TEST(RejectionTest, OnlyUnavailableIsTransient) {
  EXPECT_EQ(RejectedStatus("x", {StatusCode::kUnavailable, "busy"}).code(), StatusCode::kUnavailable);
  // "too many connections" is not a refused token (kvctl once said so).
  EXPECT_EQ(RejectedStatus("x", {StatusCode::kResourceExhausted, "full"}).code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(RejectedStatus("x", {StatusCode::kUnauthenticated, "invalid token"}).code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(RejectedStatus("x", {StatusCode::kOk, "?"}).code(), StatusCode::kPermissionDenied);
  EXPECT_NE(RejectedStatus("connect to h:1", {StatusCode::kUnavailable, "busy"}).message().find("connect to h:1"),
            std::string::npos);
}

}  // namespace
}  // namespace rkv::transport
