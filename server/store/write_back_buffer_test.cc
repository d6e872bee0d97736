#include "server/store/write_back_buffer.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <vector>

namespace rkv::server {
namespace {

WriteBackBuffer::Entry& Put(WriteBackBuffer& buffer, std::string_view key, std::string_view value, uint64_t version,
                            bool* existed) {
  WriteBackBuffer::Entry& e = buffer.Upsert(key, existed);
  e.put = true;
  e.value.assign(value);
  e.version = version;
  return e;
}

TEST(WriteBackBufferTest, AKeyWrittenAgainKeepsItsEntryAndItsPlace) {
  WriteBackBuffer buffer;
  bool existed = true;
  Put(buffer, "a", "1", 1, &existed);
  EXPECT_FALSE(existed);
  Put(buffer, "b", "2", 2, &existed);
  EXPECT_FALSE(existed);
  WriteBackBuffer::Entry& again = buffer.Upsert("a", &existed);
  EXPECT_TRUE(existed);
  EXPECT_EQ(again.value, "1");  // the last write's fields, for the caller to replace
  EXPECT_EQ(again.version, 1u);
  again.value = "3";
  again.version = 3;
  ASSERT_EQ(buffer.size(), 2u);
  EXPECT_EQ(buffer[0].key, "a");
  EXPECT_EQ(buffer[0].value, "3");
  EXPECT_EQ(buffer[1].key, "b");
  ASSERT_NE(buffer.Find("b"), nullptr);
  EXPECT_EQ(buffer.Find("b")->version, 2u);
  EXPECT_EQ(buffer.Find("c"), nullptr);
}

// Binary keys, the empty key, keys that differ in one byte or only in
// length, many of them (the index doubles several times): every key is
// found with its last write, and entries come back in first-write order.
TEST(WriteBackBufferTest, MatchesAMapOverRandomWritesOfBinaryKeys) {
  std::mt19937_64 rng(7);
  std::vector<std::string> keys = {"", std::string(1, '\0'), std::string(2, '\0'), "k", "k\0"};
  while (keys.size() < 20000) {
    std::string k(1 + rng() % 40, '\0');
    for (char& c : k) c = static_cast<char>(rng() % 4);  // few symbols: many shared prefixes
    keys.push_back(std::move(k));
  }
  WriteBackBuffer buffer;
  std::map<std::string, uint64_t> last;
  std::vector<std::string> order;
  for (uint64_t op = 1; op <= 60000; ++op) {
    const std::string& key = keys[rng() % keys.size()];
    bool existed = false;
    Put(buffer, key, std::to_string(op), op, &existed);
    const bool known = last.count(key) > 0;
    ASSERT_EQ(existed, known) << "op " << op;
    if (!known) order.push_back(key);
    last[key] = op;
  }
  ASSERT_EQ(buffer.size(), last.size());
  for (size_t i = 0; i < order.size(); ++i) {
    ASSERT_EQ(buffer[i].key, order[i]);
    ASSERT_EQ(buffer[i].version, last[order[i]]);
    ASSERT_EQ(buffer[i].value, std::to_string(last[order[i]]));
    ASSERT_EQ(buffer[i].hash, BufferKeyHash(order[i]));
  }
  for (const std::string& key : keys) {
    const WriteBackBuffer::Entry* e = buffer.Find(key);
    if (last.count(key) == 0) {
      ASSERT_EQ(e, nullptr);
    } else {
      ASSERT_NE(e, nullptr);
      ASSERT_EQ(e->version, last[key]);
    }
  }
}

TEST(WriteBackBufferTest, ClearEmptiesItAndAWarmBufferGrowsNoFurther) {
  WriteBackBuffer buffer;
  const std::string value(1024, 'v');
  bool existed = false;
  for (int i = 0; i < 1000; ++i) Put(buffer, "first:" + std::to_string(i), value, 1, &existed);
  buffer.Clear();
  EXPECT_TRUE(buffer.empty());
  EXPECT_EQ(buffer.Find("first:1"), nullptr);
  const uint64_t warm = buffer.MemoryBytes();
  for (int i = 0; i < 1000; ++i) {
    Put(buffer, "other:" + std::to_string(i), value, 2, &existed);
    ASSERT_FALSE(existed);  // nothing of before the Clear is found
  }
  EXPECT_EQ(buffer.size(), 1000u);
  EXPECT_EQ(buffer.MemoryBytes(), warm);  // every buffer reused
}

TEST(WriteBackBufferTest, ClearKeepsAtMostTheSpareBudget) {
  WriteBackBuffer buffer;
  bool existed = false;
  Put(buffer, "huge", std::string(WriteBackBuffer::kKeptEntryBytes + 1, 'h'), 1, &existed);
  const std::string value(1024, 'v');
  const int count = 3 * static_cast<int>(WriteBackBuffer::kSpareBytes / value.size());
  for (int i = 0; i < count; ++i) Put(buffer, "key:" + std::to_string(i), value, 1, &existed);
  EXPECT_GT(buffer.MemoryBytes(), 3 * WriteBackBuffer::kSpareBytes);
  buffer.Clear();
  // The index and the entry array stay (sized by the most entries held,
  // which Store bounds: here 0.5 and about 3 MiB); of the entries' buffers
  // no more than the budget stays, the huge one freed.
  EXPECT_LE(buffer.MemoryBytes(), WriteBackBuffer::kSpareBytes + (6ULL << 20));
  Put(buffer, "again", "x", 2, &existed);
  EXPECT_FALSE(existed);
  EXPECT_EQ(buffer[0].key, "again");
}

TEST(WriteBackBufferTest, SwapExchangesContents) {
  WriteBackBuffer a;
  WriteBackBuffer b;
  bool existed = false;
  Put(a, "in-a", "1", 1, &existed);
  Put(b, "in-b", "2", 2, &existed);
  Put(b, "also-in-b", "3", 3, &existed);
  a.swap(b);
  ASSERT_EQ(a.size(), 2u);
  ASSERT_EQ(b.size(), 1u);
  EXPECT_NE(a.Find("also-in-b"), nullptr);
  EXPECT_EQ(a.Find("in-a"), nullptr);
  EXPECT_NE(b.Find("in-a"), nullptr);
  Put(a, "in-b", "4", 4, &existed);
  EXPECT_TRUE(existed);
}

}  // namespace
}  // namespace rkv::server
