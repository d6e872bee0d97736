#include "client/location_cache.h"

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace rkv::client {
namespace {

CachedLocation At(uint64_t offset, uint64_t version = 1, uint64_t epoch = 1) {
  return CachedLocation{epoch, offset, 64, version};
}

TEST(LocationCacheTest, RemembersPerServerAndKey) {
  LocationCache cache(1 << 20);
  const uint32_t a = cache.ServerTag("s-aaaa");
  const uint32_t b = cache.ServerTag("s-bbbb");
  EXPECT_NE(a, b);
  EXPECT_EQ(cache.ServerTag("s-aaaa"), a);

  EXPECT_FALSE(cache.Find(a, "k", 1).has_value());
  cache.Insert(a, "k", At(640, 7));
  const auto found = cache.Find(a, "k", 1);
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->heap_offset, 640u);
  EXPECT_EQ(found->version, 7u);
  EXPECT_FALSE(cache.Find(b, "k", 1).has_value());  // another server
  EXPECT_FALSE(cache.Find(a, "k2", 1).has_value());

  cache.Insert(a, "k", At(1280, 8));  // replaces
  EXPECT_EQ(cache.Find(a, "k", 1)->heap_offset, 1280u);
  EXPECT_EQ(cache.counters().entries, 1u);

  cache.Erase(a, "k");
  EXPECT_FALSE(cache.Find(a, "k", 1).has_value());
  cache.Erase(a, "never there");
  const LocationCacheCounters c = cache.counters();
  EXPECT_EQ(c.entries, 0u);
  EXPECT_EQ(c.bytes, 0u);
  EXPECT_EQ(c.misses, 4u);
}

TEST(LocationCacheTest, AnEntryOfAnotherEpochIsDropped) {
  LocationCache cache(1 << 20);
  cache.Insert(0, "k", At(64, 1, /*epoch=*/3));
  EXPECT_FALSE(cache.Find(0, "k", 4).has_value());
  EXPECT_EQ(cache.counters().entries, 0u);
  EXPECT_FALSE(cache.Find(0, "k", 3).has_value());  // gone, not just hidden
}

TEST(LocationCacheTest, BinaryKeysAreDistinct) {
  LocationCache cache(1 << 20);
  const std::string k1("a\0b", 3);
  const std::string k2("a\0c", 3);
  cache.Insert(0, k1, At(64));
  cache.Insert(0, k2, At(128));
  EXPECT_EQ(cache.Find(0, k1, 1)->heap_offset, 64u);
  EXPECT_EQ(cache.Find(0, k2, 1)->heap_offset, 128u);
  EXPECT_FALSE(cache.Find(0, std::string_view("a"), 1).has_value());
}

// The byte bound holds whatever is inserted, and what it counts is the
// sum of the entries' charges.
TEST(LocationCacheTest, StaysWithinItsCapacityAndCountsHonestly) {
  const uint64_t capacity = 64 * 1024;
  LocationCache cache(capacity);
  uint64_t charged_max = 0;
  for (int i = 0; i < 20'000; ++i) {
    const std::string key = "key-" + std::to_string(i) + std::string(i % 100, 'x');
    cache.Insert(0, key, At(64 * i));
    const LocationCacheCounters c = cache.counters();
    ASSERT_LE(c.bytes, capacity);
    charged_max = std::max(charged_max, c.bytes);
  }
  const LocationCacheCounters c = cache.counters();
  EXPECT_GT(c.evictions, 0u);
  EXPECT_GT(c.entries, 0u);
  EXPECT_GT(charged_max, capacity / 2);  // it does fill
  EXPECT_EQ(c.capacity_bytes, capacity);
  // Entries of keys of the same length cost the same; the sum matches.
  LocationCache even(capacity);
  for (int i = 0; i < 10; ++i) even.Insert(0, "k" + std::to_string(i), At(64));
  EXPECT_EQ(even.counters().bytes, 10 * LocationCache::EntryBytes(2));
  EXPECT_GT(LocationCache::EntryBytes(2), 2u + 64u);
}

TEST(LocationCacheTest, AnEntryLargerThanAShardIsNotKept) {
  LocationCache cache(LocationCache::kShards * LocationCache::EntryBytes(10));
  cache.Insert(0, std::string(11, 'k'), At(64));
  EXPECT_EQ(cache.counters().entries, 0u);
  cache.Insert(0, std::string(10, 'k'), At(64));
  EXPECT_EQ(cache.counters().entries, 1u);
}

// CLOCK: an entry looked up since the hand last passed survives an
// eviction that takes an entry nobody looked up.
TEST(LocationCacheTest, ClockKeepsWhatIsUsed) {
  // Room for exactly 4 entries of 5-byte keys per shard: an insert
  // evicts at most one.
  const uint64_t per_shard = 4 * LocationCache::EntryBytes(5);
  // Fill the cache far past capacity while looking one key up before
  // every insert: it must survive every eviction.
  LocationCache hot(per_shard * LocationCache::kShards);
  hot.Insert(0, "hotty", At(64));
  for (int i = 0; i < 5000; ++i) {
    ASSERT_TRUE(hot.Find(0, "hotty", 1).has_value()) << "evicted after " << i << " inserts";
    hot.Insert(0, "k" + std::to_string(1000 + i), At(64));
  }
  EXPECT_GT(hot.counters().evictions, 1000u);
}

TEST(LocationCacheTest, CountsHitsAndFallbacks) {
  LocationCache cache(1 << 20);
  cache.NoteHit();
  cache.NoteHit();
  cache.NoteFallback();
  const LocationCacheCounters c = cache.counters();
  EXPECT_EQ(c.hits, 2u);
  EXPECT_EQ(c.fallbacks, 1u);
}

// Many threads inserting, finding and erasing overlapping keys: the byte
// bound and the count invariants hold, and every found entry is one that
// was inserted for that key (run under TSan in CI).
TEST(LocationCacheTest, ConcurrentUseKeepsTheInvariants) {
  const uint64_t capacity = 32 * 1024;
  LocationCache cache(capacity);
  std::atomic<uint64_t> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 20'000; ++i) {
        const int k = (i * 7 + t) % 1000;
        const std::string key = "key-" + std::to_string(1000 + k);  // all 8 bytes
        switch (i % 3) {
          case 0:
            cache.Insert(static_cast<uint32_t>(k % 2), key, At(64 * k, k));
            break;
          case 1:
            if (auto f = cache.Find(static_cast<uint32_t>(k % 2), key, 1);
                f && (f->heap_offset != uint64_t(64 * k) || f->version != uint64_t(k))) {
              wrong.fetch_add(1);
            }
            break;
          default:
            if (i % 30 == 2) cache.Erase(static_cast<uint32_t>(k % 2), key);
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(wrong.load(), 0u);
  const LocationCacheCounters c = cache.counters();
  EXPECT_LE(c.bytes, capacity);
  EXPECT_EQ(c.bytes, c.entries * LocationCache::EntryBytes(8));
}

}  // namespace
}  // namespace rkv::client
