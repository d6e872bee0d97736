#include "common/record.h"

#include <cstddef>
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace rkv {
namespace {

std::vector<uint8_t> Encode(std::string_view key, std::string_view value, uint64_t version,
                            uint16_t flags = 0) {
  std::vector<uint8_t> buf(layout::BlockBytes(key.size(), value.size()));
  EXPECT_EQ(EncodeRecord(buf, key, value, version, flags), buf.size());
  return buf;
}

TEST(RecordTest, RoundTripBinary) {
  const std::string key("k\0\xff", 3);
  std::string value(1000, '\0');
  for (size_t i = 0; i < value.size(); ++i) value[i] = static_cast<char>(i * 7);
  auto buf = Encode(key, value, 9);
  EXPECT_EQ(buf.size() % layout::kBlockAlign, 0u);
  auto v = DecodeRecord(buf);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->key, key);
  EXPECT_EQ(v->value, value);
  EXPECT_EQ(v->version, 9u);
}

TEST(RecordTest, ExpiryRoundTripsAndIsCoveredByTheChecksum) {
  std::vector<uint8_t> buf(layout::BlockBytes(1, 2));
  EncodeRecord(buf, "k", "vv", 4, 0, 1'700'000'000'123);
  auto v = DecodeRecord(buf);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->expires_at_ms, 1'700'000'000'123);
  EXPECT_EQ(DecodeRecord(Encode("k", "vv", 4))->expires_at_ms, 0);
  // The expiry is inside the checksummed bytes.
  buf[offsetof(layout::BlockHeader, expires_at_ms)] ^= 1;
  EXPECT_EQ(DecodeRecord(buf).status().code(), StatusCode::kDataLoss);
  // A negative expiry is refused, even with a good checksum.
  EncodeRecord(buf, "k", "vv", 4, 0, -5);
  EXPECT_EQ(DecodeRecord(buf).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(DecodeHeapBlock(buf).status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Expired(100, 100));
  EXPECT_TRUE(Expired(100, 101));
  EXPECT_FALSE(Expired(100, 99));
  EXPECT_FALSE(Expired(0, 1'000'000));
}

TEST(RecordTest, EmptyValue) {
  auto buf = Encode("key", "", 1, layout::kBlockFlagTombstone);
  auto v = DecodeRecord(buf);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->value.size(), 0u);
  EXPECT_EQ(v->flags, layout::kBlockFlagTombstone);
}

// The block format is a contract with every client (common/layout.h): pin
// its bytes, checksum included, so that no change to it goes unnoticed.
TEST(RecordTest, BlockBytesAreTheLayoutContract) {
  auto buf = Encode("key", "value", 7);
  ASSERT_EQ(buf.size(), 64u);
  std::vector<uint8_t> expected(64, 0);
  const uint64_t checksum = 0x1342219497574421ULL;  // XXH64, seed 0, of bytes [8, 40)
  std::memcpy(expected.data(), &checksum, 8);
  expected[8] = 3;   // key_length
  expected[12] = 5;  // value_length
  expected[16] = 7;  // version
                     // [24, 32): expires_at_ms, 0
  std::memcpy(expected.data() + 32, "keyvalue", 8);
  EXPECT_EQ(buf, expected);
}

TEST(RecordTest, EveryFlippedBitIsDetected) {
  auto good = Encode("some-key", "some value bytes", 3);
  const size_t used = layout::RecordBytes(8, 16);
  for (size_t byte = 0; byte < used; ++byte) {
    for (int bit = 0; bit < 8; ++bit) {
      auto bad = good;
      bad[byte] ^= static_cast<uint8_t>(1 << bit);
      EXPECT_FALSE(DecodeRecord(bad).ok()) << "byte " << byte << " bit " << bit;
    }
  }
}

// The superseded form (common/layout.h): the complement of the checksum.
// A heap reader accepts it and is told; a staging-ring decoder refuses it;
// a word torn between the two forms is neither.
TEST(RecordTest, SupersededFormIsAcceptedOnlyFromTheHeapAndReported) {
  auto buf = Encode("key", "value", 7);
  auto valid = DecodeHeapBlock(buf);
  ASSERT_TRUE(valid.ok()) << valid.status();
  EXPECT_FALSE(valid->superseded);

  uint64_t checksum;
  std::memcpy(&checksum, buf.data(), 8);
  const uint64_t superseded = layout::SupersededChecksum(checksum);
  EXPECT_EQ(superseded, ~checksum);
  std::memcpy(buf.data(), &superseded, 8);
  auto heap = DecodeHeapBlock(buf);
  ASSERT_TRUE(heap.ok()) << heap.status();
  EXPECT_TRUE(heap->superseded);
  EXPECT_EQ(heap->key, "key");
  EXPECT_EQ(heap->value, "value");
  EXPECT_EQ(heap->version, 7u);
  EXPECT_EQ(DecodeRecord(buf).status().code(), StatusCode::kDataLoss);

  // Low half valid, high half superseded: neither form.
  const uint64_t torn = (checksum & 0xFFFF'FFFFULL) | (superseded & ~0xFFFF'FFFFULL);
  std::memcpy(buf.data(), &torn, 8);
  EXPECT_EQ(DecodeHeapBlock(buf).status().code(), StatusCode::kDataLoss);
  EXPECT_EQ(DecodeRecord(buf).status().code(), StatusCode::kDataLoss);
}

TEST(RecordTest, EveryFlippedBitIsDetectedInTheHeapToo) {
  auto good = Encode("some-key", "some value bytes", 3);
  const size_t used = layout::RecordBytes(8, 16);
  for (size_t byte = 0; byte < used; ++byte) {
    for (int bit = 0; bit < 8; ++bit) {
      auto bad = good;
      bad[byte] ^= static_cast<uint8_t>(1 << bit);
      EXPECT_FALSE(DecodeHeapBlock(bad).ok()) << "byte " << byte << " bit " << bit;
    }
  }
}

TEST(RecordTest, MalformedHeadersAreRejectedNotRead) {
  auto buf = Encode("key", "value", 1);
  EXPECT_EQ(DecodeRecord(std::span<const uint8_t>(buf.data(), 10)).status().code(),
            StatusCode::kInvalidArgument);
  auto huge = buf;
  const uint32_t big = 1u << 30;
  std::memcpy(huge.data() + offsetof(layout::BlockHeader, value_length), &big, 4);
  EXPECT_EQ(DecodeRecord(huge).status().code(), StatusCode::kInvalidArgument);
  auto nokey = buf;
  nokey[offsetof(layout::BlockHeader, key_length)] = 0;
  nokey[offsetof(layout::BlockHeader, key_length) + 1] = 0;
  EXPECT_EQ(DecodeRecord(nokey).status().code(), StatusCode::kInvalidArgument);
  auto flags = buf;
  flags[offsetof(layout::BlockHeader, flags)] = 0x80;
  EXPECT_EQ(DecodeRecord(flags).status().code(), StatusCode::kInvalidArgument);
  auto value_byte = buf;
  value_byte[layout::kBlockHeaderBytes + 3 + 1] ^= 1;
  EXPECT_EQ(DecodeRecord(value_byte).status().code(), StatusCode::kDataLoss);
  auto checksum_byte = buf;
  checksum_byte[0] ^= 1;
  EXPECT_EQ(DecodeRecord(checksum_byte).status().code(), StatusCode::kDataLoss);
}

TEST(RecordTest, ResealAfterVersionChange) {
  auto buf = Encode("key", "value", 0);
  const uint64_t version = 77;
  std::memcpy(buf.data() + offsetof(layout::BlockHeader, version), &version, 8);
  EXPECT_EQ(DecodeRecord(buf).status().code(), StatusCode::kDataLoss);
  ResealRecord(buf);
  auto v = DecodeRecord(buf);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->version, 77u);
}


namespace scattered_test {

// The block cut at `cuts` into consecutive pieces.
std::vector<std::span<const uint8_t>> Cut(const std::vector<uint8_t>& block, std::vector<size_t> cuts) {
  std::vector<std::span<const uint8_t>> pieces;
  size_t from = 0;
  cuts.push_back(block.size());
  for (size_t to : cuts) {
    pieces.push_back(std::span<const uint8_t>(block).subspan(from, to - from));
    from = to;
  }
  return pieces;
}

TEST(ScatteredRecordTest, ChecksumHoldsWhereverTheBlockIsCut) {
  const std::string key = "user:42";
  std::string value(300, '\0');
  for (size_t i = 0; i < value.size(); ++i) value[i] = static_cast<char>(i * 31 + 1);
  const std::vector<uint8_t> block = Encode(key, value, 77);
  const size_t head = layout::kBlockHeaderBytes + key.size();
  for (const std::vector<size_t>& cuts : std::vector<std::vector<size_t>>{
           {}, {head}, {head, head + 300}, {head, head + 100}, {layout::kBlockHeaderBytes, head + 5}}) {
    const auto pieces = Cut(block, cuts);
    StatusOr<ScatteredRecord> r = DecodeScatteredHeapBlock(pieces);
    ASSERT_TRUE(r.ok()) << r.status() << " with " << cuts.size() << " cuts";
    EXPECT_EQ(r->version, 77u);
    EXPECT_EQ(r->key_length, key.size());
    EXPECT_EQ(r->value_length, value.size());
    EXPECT_FALSE(r->superseded);
  }
}

TEST(ScatteredRecordTest, RefusesWhatDecodeHeapBlockRefuses) {
  const std::string key = "k";
  std::vector<uint8_t> block = Encode(key, std::string(100, 'v'), 3);
  const size_t head = layout::kBlockHeaderBytes + key.size();
  // A flipped value byte in the second piece: the checksum no longer holds.
  block[head + 50] ^= 1;
  EXPECT_EQ(DecodeScatteredHeapBlock(Cut(block, {head})).status().code(), StatusCode::kDataLoss);
  block[head + 50] ^= 1;
  // A header that does not fit the first piece.
  EXPECT_EQ(DecodeScatteredHeapBlock(Cut(block, {10})).status().code(), StatusCode::kInvalidArgument);
  // A record longer than the pieces hold.
  const std::vector<uint8_t> shorter(block.begin(), block.begin() + static_cast<ptrdiff_t>(head + 20));
  EXPECT_EQ(DecodeScatteredHeapBlock(Cut(shorter, {head})).status().code(), StatusCode::kInvalidArgument);
  // The superseded form is read as such.
  layout::BlockHeader h;
  std::memcpy(&h, block.data(), sizeof(h));
  h.checksum = layout::SupersededChecksum(h.checksum);
  std::memcpy(block.data(), &h, sizeof(h));
  StatusOr<ScatteredRecord> r = DecodeScatteredHeapBlock(Cut(block, {head, head + 100}));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->superseded);
}

}  // namespace scattered_test

}  // namespace
}  // namespace rkv
