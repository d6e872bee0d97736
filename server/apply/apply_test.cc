#include "server/apply/apply.h"

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/record.h"
#include "server/apply/local_table_test_util.h"

namespace rkv::server {
namespace {

using namespace std::chrono_literals;

constexpr size_t kRingBytes = 64 * 1024;

// An applier over a real store, table and heap, with one staging ring.
class ApplyTest : public ::testing::Test {
 protected:
  void SetUp() override { Build(/*log2=*/6, /*heap_bytes=*/1 << 20, 100ms, ApplyLimits{64, 8192}); }
  void TearDown() override {
    applier_.reset();
    local_.Close();
  }

  void Build(uint32_t log2, uint64_t heap_bytes, std::chrono::milliseconds grace, ApplyLimits limits,
             RequestCacheLimits replies = {}) {
    applier_.reset();
    const Status opened = local_.Open("rkv_apply_test", log2, heap_bytes, grace);
    ASSERT_TRUE(opened.ok()) << opened;
    applier_ = std::make_unique<Applier>(local_.store.get(), local_.table.get(), local_.heap.get(), limits, replies);
    ring_.assign(kRingBytes, 0);
  }

  // Writes a record at `offset` of the ring; returns its block length.
  uint32_t Stage(uint64_t offset, std::string_view key, std::string_view value, uint16_t flags = 0,
                 uint64_t version = 0) {
    return static_cast<uint32_t>(EncodeRecord(std::span<uint8_t>(ring_).subspan(offset), key, value, version, flags));
  }

  static std::vector<uint8_t> Msg(protocol::Op op, uint64_t offset, uint32_t length, uint64_t id,
                                  uint8_t flags = 0) {
    protocol::RequestMsg m{};
    m.op = static_cast<uint8_t>(op);
    m.flags = flags;
    m.length = length;
    m.request_id = id;
    m.ring_offset = offset;
    std::vector<uint8_t> out(sizeof(m));
    std::memcpy(out.data(), &m, sizeof(m));
    return out;
  }

  // Applies the request message `msg` (its record staged in the ring) as
  // a request of client `client`.
  protocol::ReplyMsg Apply(const std::vector<uint8_t>& msg, uint64_t client = kClient) {
    return applier_->Apply(client, msg, ring_);
  }

  // Request id 0 picks a fresh one: every request of a client needs its own.
  protocol::ReplyMsg Put(std::string_view key, std::string_view value, uint64_t id = 0, uint64_t offset = 0) {
    const uint32_t len = Stage(offset, key, value);
    return Apply(Msg(protocol::Op::kPut, offset, len, id != 0 ? id : next_id_++));
  }
  protocol::ReplyMsg Del(std::string_view key, uint64_t id = 0, uint64_t offset = 0) {
    const uint32_t len = Stage(offset, key, "", layout::kBlockFlagTombstone);
    return Apply(Msg(protocol::Op::kDelete, offset, len, id != 0 ? id : next_id_++));
  }

  std::optional<std::string> TableValue(std::string_view key) {
    auto e = local_.table->Lookup(key);
    if (!e) return std::nullopt;
    return std::string(local_.table->RecordAt(e->slot).value);
  }
  std::optional<std::string> StoreValue(std::string_view key) {
    auto v = local_.store->Get(key);
    EXPECT_TRUE(v.ok()) << v.status();
    if (!v.ok() || !v->has_value()) return std::nullopt;
    return (*v)->value;
  }

  // The reply is an error with `code`, echoes `id`, returns a credit and
  // says why; and nothing was stored.
  void ExpectError(const protocol::ReplyMsg& r, StatusCode code, uint64_t id) {
    EXPECT_EQ(r.status_code, static_cast<int32_t>(code)) << r.message;
    EXPECT_EQ(r.request_id, id);
    EXPECT_EQ(r.credits, 1u);
    EXPECT_EQ(r.version, 0u);
    EXPECT_EQ(r.block, 0u);
    const size_t len = strnlen(r.message, sizeof(r.message));
    EXPECT_LT(len, sizeof(r.message));
    EXPECT_GT(len, 0u);
  }

  testing::LocalTable local_;
  std::unique_ptr<Applier> applier_;
  std::vector<uint8_t> ring_;
  uint64_t next_id_ = 1000;  // above the ids tests give explicitly
  static constexpr uint64_t kClient = 0xC1;
};

TEST_F(ApplyTest, PutReplaceDelete) {
  auto r = Put("key", "v1", 11);
  EXPECT_EQ(r.status_code, 0) << r.message;
  EXPECT_EQ(r.request_id, 11u);
  EXPECT_EQ(r.credits, 1u);
  EXPECT_EQ(r.version, 1u);
  EXPECT_EQ(r.message[0], '\0');
  EXPECT_EQ(TableValue("key"), "v1");
  EXPECT_EQ(StoreValue("key"), "v1");
  // The reply names the block the table publishes (the writer caches it).
  EXPECT_EQ(r.block, local_.table->Lookup("key")->slot);
  const uint64_t first_block = r.block;

  r = Put("key", "v2", 12, 128);
  EXPECT_EQ(r.status_code, 0) << r.message;
  EXPECT_EQ(r.version, 2u);
  EXPECT_EQ(TableValue("key"), "v2");
  EXPECT_EQ(StoreValue("key"), "v2");
  EXPECT_EQ(local_.table->Lookup("key")->version, 2u);
  EXPECT_EQ(r.block, local_.table->Lookup("key")->slot);
  EXPECT_NE(layout::SlotBlockOffset(r.block), layout::SlotBlockOffset(first_block)) << "a new block for a replace";

  r = Del("key", 13);
  EXPECT_EQ(r.status_code, 0) << r.message;
  EXPECT_EQ(r.version, 2u) << "a DELETE reply carries the deleted version";
  EXPECT_EQ(r.block, 0u) << "a DELETE names no block";
  EXPECT_FALSE(TableValue("key").has_value());
  EXPECT_FALSE(StoreValue("key").has_value());

  // Versions keep growing across the delete.
  r = Put("key", "v3", 14);
  EXPECT_EQ(r.version, 3u);

  const auto snap = applier_->snapshot();
  EXPECT_EQ(snap.puts, 3u);
  EXPECT_EQ(snap.deletes, 1u);
  EXPECT_EQ(snap.request_errors, 0u);
  EXPECT_EQ(snap.keys, 1u);
}

TEST_F(ApplyTest, APutWhenEveryVersionIsTakenIsRefusedAndChangesNothing) {
  ASSERT_EQ(Put("key", "v1", 11).status_code, 0);
  // A record at the top of the version space (as a replica may install
  // one): no version is left above it for a client PUT.
  ASSERT_TRUE(local_.store->Put("top", "t", std::numeric_limits<uint64_t>::max()).ok());
  for (int attempt = 0; attempt < 2; ++attempt) {
    // Refused, and not remembered: the same request again is refused the
    // same way rather than answered with a version it never got.
    const auto r = Put("key", "v2", 12);
    ExpectError(r, StatusCode::kResourceExhausted, 12);
    EXPECT_NE(std::string(r.message).find("exhausted"), std::string::npos) << r.message;
  }
  EXPECT_EQ(TableValue("key"), "v1");
  EXPECT_EQ(StoreValue("key"), "v1");
  EXPECT_EQ(local_.table->Lookup("key")->version, 1u);
  EXPECT_EQ(applier_->snapshot().puts, 1u);
}

// A conditional PUT: the request's condition and expected version.
std::vector<uint8_t> WithCondition(std::vector<uint8_t> msg, protocol::Condition condition, uint64_t expected) {
  protocol::RequestMsg m;
  std::memcpy(&m, msg.data(), sizeof(m));
  m.condition = static_cast<uint8_t>(condition);
  m.expected_version = expected;
  std::memcpy(msg.data(), &m, sizeof(m));
  return msg;
}

// Expiry (docs/design.md §5.11): the deadline is stored in the table and
// the store; an expired record is absent to a client's condition and
// DELETE, and only its reclaim removes it.
TEST_F(ApplyTest, AnExpiredRecordIsAbsentToWritesAndReclaimedByItsVersion) {
  const auto put_with = [&](std::string_view key, std::string_view value, int64_t expires, protocol::Condition c,
                            uint64_t expected) {
    const uint32_t len = static_cast<uint32_t>(EncodeRecord(ring_, key, value, 0, 0, expires));
    return Apply(WithCondition(Msg(protocol::Op::kPut, 0, len, next_id_++), c, expected));
  };
  const int64_t past = UnixNowMs() - 1000;
  const int64_t future = UnixNowMs() + 3'600'000;
  ASSERT_EQ(put_with("gone", "v", past, protocol::Condition::kNone, 0).status_code, 0);
  ASSERT_EQ(put_with("kept", "v", future, protocol::Condition::kNone, 0).status_code, 0);
  auto e = local_.table->Lookup("kept");
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(local_.table->RecordAt(e->slot).expires_at_ms, future);
  EXPECT_EQ((*local_.store->Get("kept"))->expires_at_ms, future);
  EXPECT_EQ(local_.table->expiring(), 2u);

  // Absent to a client: its DELETE, and a version condition on it.
  auto r = Del("gone");
  EXPECT_EQ(r.status_code, static_cast<int32_t>(StatusCode::kNotFound)) << r.message;
  r = put_with("gone", "w", 0, protocol::Condition::kVersionIs, 1);
  EXPECT_EQ(r.reason, static_cast<uint8_t>(Reason::kConditionFailed)) << r.message;
  EXPECT_EQ(r.version, 0u);
  EXPECT_EQ(TableValue("gone"), "v") << "a client's refusal removes nothing";

  // The reclaimer finds it (and not the live one), and removes it only at
  // the version it found.
  uint64_t cursor = 0;
  const auto expired = applier_->ExpiredKeys(&cursor, local_.table->bucket_count(), UnixNowMs());
  ASSERT_EQ(expired.size(), 1u);
  EXPECT_EQ(expired[0].key, "gone");
  EXPECT_EQ(cursor, 0u) << "one slice covered the table";
  EXPECT_EQ(applier_->ReclaimExpired("gone", expired[0].version + 1).reason(), Reason::kConditionFailed);
  ASSERT_TRUE(applier_->ReclaimExpired("gone", expired[0].version).ok());
  EXPECT_FALSE(TableValue("gone").has_value());
  EXPECT_FALSE(StoreValue("gone").has_value());
  EXPECT_EQ(applier_->snapshot().expired_reclaimed, 1u);
  EXPECT_EQ(local_.table->expiring(), 1u);

  // Absent holds for an expired key, and the new record has only its own
  // deadline.
  ASSERT_EQ(put_with("lease", "a", past, protocol::Condition::kNone, 0).status_code, 0);
  r = put_with("lease", "b", 0, protocol::Condition::kAbsent, 0);
  ASSERT_EQ(r.status_code, 0) << r.message;
  e = local_.table->Lookup("lease");
  EXPECT_EQ(local_.table->RecordAt(e->slot).expires_at_ms, 0);
  EXPECT_EQ(local_.table->expiring(), 1u);

  // A DELETE record carrying an expiry is malformed.
  const uint32_t len = static_cast<uint32_t>(EncodeRecord(ring_, "kept", "", 0, layout::kBlockFlagTombstone, future));
  r = Apply(Msg(protocol::Op::kDelete, 0, len, next_id_++));
  EXPECT_EQ(r.status_code, static_cast<int32_t>(StatusCode::kInvalidArgument)) << r.message;
}

TEST_F(ApplyTest, AConditionalPutWritesOnlyWhenTheKeyIsAsAskedAndNamesItsVersionOtherwise) {
  const auto put_if = [&](std::string_view key, std::string_view value, protocol::Condition c, uint64_t expected,
                          uint64_t id) {
    const uint32_t len = Stage(0, key, value);
    return Apply(WithCondition(Msg(protocol::Op::kPut, 0, len, id), c, expected));
  };
  // Absent: written once, refused after.
  auto r = put_if("k", "v1", protocol::Condition::kAbsent, 0, 21);
  ASSERT_EQ(r.status_code, 0) << r.message;
  EXPECT_EQ(r.version, 1u);
  r = put_if("k", "v2", protocol::Condition::kAbsent, 0, 22);
  EXPECT_EQ(r.status_code, static_cast<int32_t>(StatusCode::kFailedPrecondition)) << r.message;
  EXPECT_EQ(r.reason, static_cast<uint8_t>(Reason::kConditionFailed));
  EXPECT_EQ(r.version, 1u) << "the refusal names the key's version";
  EXPECT_NE(std::string(r.message).find("exists (version 1)"), std::string::npos) << r.message;
  EXPECT_EQ(TableValue("k"), "v1");

  // Version: the current one writes, a stale one is refused.
  r = put_if("k", "v2", protocol::Condition::kVersionIs, 1, 23);
  ASSERT_EQ(r.status_code, 0) << r.message;
  EXPECT_EQ(r.version, 2u);
  r = put_if("k", "v3", protocol::Condition::kVersionIs, 1, 24);
  EXPECT_EQ(r.status_code, static_cast<int32_t>(StatusCode::kFailedPrecondition)) << r.message;
  EXPECT_EQ(r.version, 2u);
  EXPECT_NE(std::string(r.message).find("version is 2, not 1"), std::string::npos) << r.message;
  EXPECT_EQ(TableValue("k"), "v2");
  EXPECT_EQ(StoreValue("k"), "v2");

  // A version condition on a missing key is refused with version 0.
  r = put_if("missing", "v", protocol::Condition::kVersionIs, 7, 25);
  EXPECT_EQ(r.status_code, static_cast<int32_t>(StatusCode::kFailedPrecondition)) << r.message;
  EXPECT_EQ(r.version, 0u);
  EXPECT_FALSE(TableValue("missing").has_value());

  // A refusal is remembered like any reply: the same request again (a
  // resend) gets it back even though the key has changed since.
  ASSERT_EQ(Put("k", "v4", 26).status_code, 0);
  r = put_if("k", "v5", protocol::Condition::kVersionIs, 1, 24);
  EXPECT_EQ(r.status_code, static_cast<int32_t>(StatusCode::kFailedPrecondition));
  EXPECT_EQ(r.version, 2u) << "the original refusal, replayed";
  EXPECT_EQ(TableValue("k"), "v4");

  const auto snap = applier_->snapshot();
  EXPECT_EQ(snap.conditions_failed, 3u);
  EXPECT_EQ(snap.request_errors, 0u) << "a condition that fails is an answer, not an error";
  EXPECT_EQ(snap.puts, 3u);
}

TEST_F(ApplyTest, AMalformedConditionIsRefused) {
  const uint32_t len = Stage(0, "k", "v");
  // Unknown condition, a version condition naming 0, an expected version
  // without a condition, an absence condition on a DELETE.
  ExpectError(Apply(WithCondition(Msg(protocol::Op::kPut, 0, len, 31), static_cast<protocol::Condition>(3), 0)),
              StatusCode::kInvalidArgument, 31);
  ExpectError(Apply(WithCondition(Msg(protocol::Op::kPut, 0, len, 32), protocol::Condition::kVersionIs, 0)),
              StatusCode::kInvalidArgument, 32);
  ExpectError(Apply(WithCondition(Msg(protocol::Op::kPut, 0, len, 33), protocol::Condition::kNone, 5)),
              StatusCode::kInvalidArgument, 33);
  const uint32_t del_len = Stage(0, "k", "", layout::kBlockFlagTombstone);
  ExpectError(Apply(WithCondition(Msg(protocol::Op::kDelete, 0, del_len, 34), protocol::Condition::kAbsent, 0)),
              StatusCode::kInvalidArgument, 34);
  EXPECT_FALSE(TableValue("k").has_value());
}

// A DELETE with a version condition removes the key only at that version
// (compare-and-delete): a stale one is refused naming the key's version,
// a missing key too, and nothing changes.
TEST_F(ApplyTest, AConditionalDeleteRemovesOnlyTheVersionAskedFor) {
  auto r = Put("k", "v1");
  ASSERT_EQ(r.status_code, 0) << r.message;
  const uint64_t v1 = r.version;
  r = Put("k", "v2");
  ASSERT_EQ(r.status_code, 0) << r.message;
  const uint64_t v2 = r.version;
  const auto del_if = [&](std::string_view key, uint64_t expected, uint64_t id) {
    const uint32_t len = Stage(0, key, "", layout::kBlockFlagTombstone);
    return Apply(WithCondition(Msg(protocol::Op::kDelete, 0, len, id), protocol::Condition::kVersionIs, expected));
  };
  r = del_if("k", v1, 41);
  EXPECT_EQ(r.status_code, static_cast<int32_t>(StatusCode::kFailedPrecondition)) << r.message;
  EXPECT_EQ(r.reason, static_cast<uint8_t>(Reason::kConditionFailed));
  EXPECT_EQ(r.version, v2) << "the refusal names the key's version";
  EXPECT_EQ(TableValue("k"), "v2");
  r = del_if("missing", 3, 42);
  EXPECT_EQ(r.status_code, static_cast<int32_t>(StatusCode::kFailedPrecondition)) << r.message;
  EXPECT_EQ(r.version, 0u);
  r = del_if("k", v2, 43);
  ASSERT_EQ(r.status_code, 0) << r.message;
  EXPECT_FALSE(TableValue("k").has_value());
  EXPECT_FALSE(StoreValue("k").has_value());
}

TEST_F(ApplyTest, DeleteOfAMissingKeyIsNotFound) {
  auto r = Del("nothing", 5);
  ExpectError(r, StatusCode::kNotFound, 5);
  EXPECT_EQ(applier_->snapshot().request_errors, 0u);
}

TEST_F(ApplyTest, EmptyValueAndBinaryKey) {
  const std::string key("\0k\xff", 3);
  auto r = Put(key, "");
  EXPECT_EQ(r.status_code, 0) << r.message;
  EXPECT_EQ(TableValue(key), "");
  EXPECT_EQ(StoreValue(key), "");
}

TEST_F(ApplyTest, MalformedMessagesGetClearErrors) {
  const uint32_t len = Stage(0, "key", "value");
  auto good = Msg(protocol::Op::kPut, 0, len, 77);

  auto shorter = good;
  shorter.resize(20);
  ExpectError(Apply(shorter), StatusCode::kInvalidArgument, 77);
  auto longer = good;
  longer.push_back(0);
  ExpectError(Apply(longer), StatusCode::kInvalidArgument, 77);
  ExpectError(Apply(std::vector<uint8_t>(3, 0)), StatusCode::kInvalidArgument, 0);

  auto m = good;
  m[0] = 9;  // op
  ExpectError(Apply(m), StatusCode::kInvalidArgument, 77);
  m = good;
  m[3] = 1;  // reserved
  ExpectError(Apply(m), StatusCode::kInvalidArgument, 77);
  m = good;
  m[1] = 4;  // an unknown flag
  ExpectError(Apply(m), StatusCode::kInvalidArgument, 77);

  ExpectError(Apply(Msg(protocol::Op::kPut, 32, len, 77)), StatusCode::kInvalidArgument, 77);  // unaligned
  ExpectError(Apply(Msg(protocol::Op::kPut, kRingBytes, 64, 77)), StatusCode::kInvalidArgument, 77);
  ExpectError(Apply(Msg(protocol::Op::kPut, kRingBytes - 64, 128, 77)), StatusCode::kInvalidArgument, 77);
  ExpectError(Apply(Msg(protocol::Op::kPut, ~uint64_t{63}, 128, 77)), StatusCode::kInvalidArgument, 77);
  ExpectError(Apply(Msg(protocol::Op::kPut, 0, 16, 77)), StatusCode::kInvalidArgument, 77);  // < header
  ExpectError(Apply(Msg(protocol::Op::kPut, 0, 0xFFFFFFFF, 77)), StatusCode::kInvalidArgument, 77);
  // Longer than the record's block (the next block's bytes would count).
  ExpectError(Apply(Msg(protocol::Op::kPut, 0, len + 64, 77)), StatusCode::kInvalidArgument, 77);
  // Shorter than the record.
  ExpectError(Apply(Msg(protocol::Op::kPut, 0, 24, 77)), StatusCode::kInvalidArgument, 77);

  EXPECT_FALSE(TableValue("key").has_value());
  EXPECT_FALSE(StoreValue("key").has_value());
  EXPECT_EQ(applier_->snapshot().request_errors, 14u);

  // And the good one still works afterwards.
  EXPECT_EQ(Apply(good).status_code, 0);
  EXPECT_EQ(TableValue("key"), "value");
}

TEST_F(ApplyTest, BadRecordsGetClearErrors) {
  // Checksum mismatch: DATA_LOSS.
  uint32_t len = Stage(0, "key", "value");
  ring_[30] ^= 0x40;
  ExpectError(Apply(Msg(protocol::Op::kPut, 0, len, 1)), StatusCode::kDataLoss, 1);
  // A record not yet (or half) written: zeros.
  std::memset(ring_.data(), 0, 256);
  ExpectError(Apply(Msg(protocol::Op::kPut, 0, 64, 2)), StatusCode::kInvalidArgument, 2);
  // Version set by the client.
  len = Stage(0, "key", "value", 0, 5);
  ExpectError(Apply(Msg(protocol::Op::kPut, 0, len, 3)), StatusCode::kInvalidArgument, 3);
  // Key and value limits (64 and 8192 in this fixture).
  len = Stage(0, std::string(65, 'k'), "v");
  ExpectError(Apply(Msg(protocol::Op::kPut, 0, len, 4)), StatusCode::kInvalidArgument, 4);
  len = Stage(0, "k", std::string(8193, 'v'));
  ExpectError(Apply(Msg(protocol::Op::kPut, 0, len, 5)), StatusCode::kInvalidArgument, 5);
  // Tombstone rules.
  len = Stage(0, "k", "v", layout::kBlockFlagTombstone);
  ExpectError(Apply(Msg(protocol::Op::kPut, 0, len, 6)), StatusCode::kInvalidArgument, 6);
  ExpectError(Apply(Msg(protocol::Op::kDelete, 0, len, 7)), StatusCode::kInvalidArgument, 7);  // has a value
  len = Stage(0, "k", "");
  ExpectError(Apply(Msg(protocol::Op::kDelete, 0, len, 8)), StatusCode::kInvalidArgument, 8);  // no tombstone
  EXPECT_EQ(local_.table->size(), 0u);

  // The largest allowed record is accepted.
  len = Stage(0, std::string(64, 'k'), std::string(8192, 'v'));
  EXPECT_EQ(Apply(Msg(protocol::Op::kPut, 0, len, 9)).status_code, 0);
}

TEST_F(ApplyTest, GarbageNeverCrashesOrChangesAnything) {
  std::mt19937_64 rng(1234);
  for (auto& b : ring_) b = static_cast<uint8_t>(rng());
  for (int i = 0; i < 20000; ++i) {
    protocol::RequestMsg m{};
    m.op = static_cast<uint8_t>(1 + rng() % 2);
    m.length = static_cast<uint32_t>(rng() % 4096);
    m.request_id = i;
    m.ring_offset = (rng() % (kRingBytes / 64 + 2)) * 64;
    std::vector<uint8_t> msg(sizeof(m));
    std::memcpy(msg.data(), &m, sizeof(m));
    const auto r = Apply(msg);
    ASSERT_NE(r.status_code, 0);
    ASSERT_EQ(r.request_id, static_cast<uint64_t>(i));
    ASSERT_EQ(r.credits, 1u);
  }
  EXPECT_EQ(local_.table->size(), 0u);
  EXPECT_EQ(local_.store->version_high_water(), 0u);
}

TEST_F(ApplyTest, TableFullIsRefusedWithoutAStoreWrite) {
  Build(/*log2=*/1, 1 << 20, 100ms, ApplyLimits{64, 8192});
  int accepted = 0;
  protocol::ReplyMsg r{};
  for (int i = 0; i < 100; ++i) {
    r = Put("k" + std::to_string(i), "v", i + 1);
    if (r.status_code != 0) {
      ExpectError(r, StatusCode::kResourceExhausted, i + 1);
      EXPECT_FALSE(StoreValue("k" + std::to_string(i)).has_value());
      break;
    }
    ++accepted;
  }
  EXPECT_EQ(r.status_code, static_cast<int32_t>(StatusCode::kResourceExhausted));
  EXPECT_EQ(local_.table->size(), static_cast<uint64_t>(accepted));
  EXPECT_EQ(local_.store->version_high_water(), static_cast<uint64_t>(accepted));
}

TEST_F(ApplyTest, HeapFullUndoesTheStoreWrite) {
  // 4 KiB of heap, and a grace period long enough that nothing comes back.
  Build(6, 4096, std::chrono::hours(1), ApplyLimits{64, 8192});
  ASSERT_EQ(Put("old", std::string(1000, 'a')).status_code, 0);  // 1088 -> 1280 class
  ASSERT_EQ(Put("other", std::string(1000, 'b')).status_code, 0);
  // Replace: no room for a 3 KiB block.
  auto r = Put("old", std::string(3000, 'c'), 3);
  ExpectError(r, StatusCode::kResourceExhausted, 3);
  EXPECT_EQ(TableValue("old"), std::string(1000, 'a'));
  EXPECT_EQ(StoreValue("old"), std::string(1000, 'a')) << "the store must be restored";
  EXPECT_EQ((*local_.store->Get("old"))->version, 1u);
  // New key: removed from the store again.
  r = Put("new", std::string(3000, 'd'), 4);
  ExpectError(r, StatusCode::kResourceExhausted, 4);
  EXPECT_FALSE(TableValue("new").has_value());
  EXPECT_FALSE(StoreValue("new").has_value());
  EXPECT_EQ(local_.table->size(), 2u);
}

TEST_F(ApplyTest, HeapFullOfQuarantineWaitsOneGracePeriod) {
  // Room for exactly one 1280-byte block, and a short grace period.
  Build(6, 1280, 20ms, ApplyLimits{64, 8192});
  ASSERT_EQ(Put("k", std::string(1000, 'a')).status_code, 0);
  ASSERT_EQ(Del("k").status_code, 0);  // the block goes into quarantine
  EXPECT_EQ(local_.heap->stats().quarantined_bytes, 1280u);
  // The next PUT finds the heap full, waits for the quarantine and succeeds.
  auto r = Put("k2", std::string(1000, 'b'));
  EXPECT_EQ(r.status_code, 0) << r.message;
  EXPECT_EQ(TableValue("k2"), std::string(1000, 'b'));
  EXPECT_EQ(local_.heap->stats().quarantined_bytes, 0u);
}

TEST_F(ApplyTest, AReplayedPutGetsTheOriginalReplyAndIsAppliedOnce) {
  const auto first = Put("key", "v1", 21);
  ASSERT_EQ(first.status_code, 0) << first.message;
  ASSERT_EQ(first.version, 1u);
  // The same request again (as a client resends it on a new connection,
  // staged at another ring offset): the original reply, nothing applied.
  const auto again = Put("key", "v1", 21, 256);
  EXPECT_EQ(again.status_code, 0) << again.message;
  EXPECT_EQ(again.request_id, 21u);
  EXPECT_EQ(again.version, 1u);
  EXPECT_EQ(again.credits, 1u);
  EXPECT_EQ(local_.store->version_high_water(), 1u);
  EXPECT_EQ((*local_.store->Get("key"))->version, 1u);
  EXPECT_EQ(applier_->snapshot().puts, 1u);
  EXPECT_EQ(applier_->snapshot().replays, 1u);
  // A newer PUT of the key, then the old request once more: still its own
  // reply, and the newer value stays.
  ASSERT_EQ(Put("key", "v2", 22).version, 2u);
  EXPECT_EQ(Put("key", "v1", 21).version, 1u);
  EXPECT_EQ(TableValue("key"), "v2");
  EXPECT_EQ(local_.store->version_high_water(), 2u);
}

TEST_F(ApplyTest, AReplayedDeleteGetsTheOriginalOk) {
  ASSERT_EQ(Put("key", "v").status_code, 0);
  const auto first = Del("key", 31);
  ASSERT_EQ(first.status_code, 0) << first.message;
  ASSERT_EQ(first.version, 1u);
  const auto again = Del("key", 31);
  EXPECT_EQ(again.status_code, 0) << again.message << " (a retried DELETE must not report NOT_FOUND)";
  EXPECT_EQ(again.version, 1u);
  EXPECT_EQ(applier_->snapshot().deletes, 1u);
  // A new DELETE of the absent key is NOT_FOUND, as before.
  EXPECT_EQ(Del("key", 32).status_code, static_cast<int32_t>(StatusCode::kNotFound));
}

TEST_F(ApplyTest, RequestIdsArePerClient) {
  // Two clients may use the same request id: both are applied.
  const uint32_t len = Stage(0, "key", "v");
  const auto a = Apply(Msg(protocol::Op::kPut, 0, len, 5), /*client=*/1);
  const auto b = Apply(Msg(protocol::Op::kPut, 0, len, 5), /*client=*/2);
  ASSERT_EQ(a.status_code, 0) << a.message;
  ASSERT_EQ(b.status_code, 0) << b.message;
  EXPECT_EQ(a.version, 1u);
  EXPECT_EQ(b.version, 2u);
  EXPECT_EQ(applier_->snapshot().replays, 0u);
}

TEST_F(ApplyTest, ARequestRefusedByValidationIsNotRemembered) {
  // A corrupt record is refused; the client's fixed resend of the same id
  // is applied.
  uint32_t len = Stage(0, "key", "value");
  ring_[layout::RecordBytes(3, 5) - 1] ^= 0xFF;
  ExpectError(Apply(Msg(protocol::Op::kPut, 0, len, 41)), StatusCode::kDataLoss, 41);
  len = Stage(0, "key", "value");
  const auto r = Apply(Msg(protocol::Op::kPut, 0, len, 41));
  EXPECT_EQ(r.status_code, 0) << r.message;
  EXPECT_EQ(r.version, 1u);
}

TEST_F(ApplyTest, AReplayWhoseReplyWasForgottenIsRefusedNotApplied) {
  Build(6, 1 << 20, 100ms, ApplyLimits{64, 8192}, {.max_clients = 4, .requests_per_client = 2});
  ASSERT_EQ(Put("a", "1", 1).version, 1u);
  ASSERT_EQ(Put("b", "1", 2).version, 2u);
  ASSERT_EQ(Put("c", "1", 3).version, 3u);  // forgets request 1
  // The client's resend of 1 (marked so: it may have been applied).
  const uint32_t len = Stage(0, "a", "1");
  ExpectError(Apply(Msg(protocol::Op::kPut, 0, len, 1, protocol::kRequestResent)), StatusCode::kAborted, 1);
  EXPECT_EQ(local_.store->version_high_water(), 3u);
  EXPECT_EQ(Put("b", "1", 2).version, 2u);  // still remembered
}

// One client's burst of fresh client ids cannot make another client's
// retry apply twice: connected, the victim's retry replays its reply;
// forgotten while away, its retry is refused with "outcome unknown".
TEST_F(ApplyTest, ABurstOfFreshClientsCannotMakeAnotherClientsRetryApplyTwice) {
  Build(6, 1 << 20, 100ms, ApplyLimits{64, 8192}, {.max_clients = 8, .requests_per_client = 4});
  const auto burst = [&](uint64_t first) {
    for (uint64_t c = first; c < first + 1100; ++c) {
      const uint32_t len = Stage(0, "noise", "x");
      ASSERT_EQ(Apply(Msg(protocol::Op::kPut, 0, len, 1), c).status_code, 0);
    }
  };
  applier_->ClientConnected(kClient);
  ASSERT_EQ(Put("counter", "1", 7).version, 1u);
  burst(1000);
  uint32_t len = Stage(0, "counter", "1");
  auto r = Apply(Msg(protocol::Op::kPut, 0, len, 7, protocol::kRequestResent));
  EXPECT_EQ(r.status_code, 0) << r.message;
  EXPECT_EQ(r.version, 1u);  // the original reply
  applier_->ClientDisconnected(kClient);
  burst(5000);
  const uint64_t high = local_.store->version_high_water();
  len = Stage(0, "counter", "1");
  ExpectError(Apply(Msg(protocol::Op::kPut, 0, len, 7, protocol::kRequestResent)), StatusCode::kAborted, 7);
  EXPECT_EQ(local_.store->version_high_water(), high);  // nothing applied
  EXPECT_EQ(*TableValue("counter"), "1");
  // Its next request is applied.
  EXPECT_EQ(Put("counter", "2", 8).status_code, 0);
}

TEST_F(ApplyTest, UnknownRequestFlagsAreRefused) {
  const uint32_t len = Stage(0, "key", "value");
  ExpectError(Apply(Msg(protocol::Op::kPut, 0, len, 61, 2)), StatusCode::kInvalidArgument, 61);
  ExpectError(Apply(Msg(protocol::Op::kPut, 0, len, 61, 0x80)), StatusCode::kInvalidArgument, 61);
  const auto r = Apply(Msg(protocol::Op::kPut, 0, len, 61, protocol::kRequestResent));
  EXPECT_EQ(r.status_code, 0) << r.message;
}

TEST_F(ApplyTest, ConcurrentReplaysOfOneRequestApplyItOnce) {
  // The same request from several connections at once (an original still
  // being applied and its retries): one apply, one version for all.
  constexpr int kThreads = 4;
  std::vector<std::vector<uint8_t>> rings(kThreads, std::vector<uint8_t>(kRingBytes, 0));
  std::vector<uint8_t> msg;
  for (auto& ring : rings) {
    const uint64_t len = EncodeRecord(std::span<uint8_t>(ring), "key", "v", 0, 0);
    msg = Msg(protocol::Op::kPut, 0, static_cast<uint32_t>(len), 51);
  }
  std::vector<protocol::ReplyMsg> replies(kThreads);
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] { replies[i] = applier_->Apply(kClient, msg, rings[i]); });
  }
  for (auto& t : threads) t.join();
  for (const auto& r : replies) {
    EXPECT_EQ(r.status_code, 0) << r.message;
    EXPECT_EQ(r.version, 1u);
  }
  EXPECT_EQ(applier_->snapshot().puts, 1u);
  EXPECT_EQ(applier_->snapshot().replays, static_cast<uint64_t>(kThreads - 1));
  EXPECT_EQ(local_.store->version_high_water(), 1u);
}

}  // namespace
}  // namespace rkv::server
