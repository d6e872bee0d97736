#include "client/location_cache.h"

#include <atomic>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "common/hash.h"

namespace rkv::client {
namespace {

CachedLocation At(uint64_t offset, uint64_t version = 1, uint64_t epoch = 1) {
  return CachedLocation{epoch, offset, 64, version};
}

// The hash the client names a key by.
uint64_t H(std::string_view key) { return ShardHash(key); }

TEST(LocationCacheTest, RemembersPerServerAndKey) {
  LocationCache cache(1 << 20);
  const uint32_t a = cache.ServerTag("s-aaaa");
  const uint32_t b = cache.ServerTag("s-bbbb");
  EXPECT_NE(a, b);
  EXPECT_EQ(cache.ServerTag("s-aaaa"), a);

  EXPECT_FALSE(cache.Find(a, "k", H("k"), 1).has_value());
  cache.Insert(a, "k", H("k"), At(640, 7));
  const auto found = cache.Find(a, "k", H("k"), 1);
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->heap_offset, 640u);
  EXPECT_EQ(found->version, 7u);
  EXPECT_FALSE(cache.Find(b, "k", H("k"), 1).has_value());  // another server
  EXPECT_FALSE(cache.Find(a, "k2", H("k2"), 1).has_value());

  cache.Insert(a, "k", H("k"), At(1280, 8));  // replaces
  EXPECT_EQ(cache.Find(a, "k", H("k"), 1)->heap_offset, 1280u);
  EXPECT_EQ(cache.counters().entries, 1u);

  cache.Erase(a, "k", H("k"));
  EXPECT_FALSE(cache.Find(a, "k", H("k"), 1).has_value());
  cache.Erase(a, "never there", H("never there"));
  const LocationCacheCounters c = cache.counters();
  EXPECT_EQ(c.entries, 0u);
  EXPECT_EQ(c.bytes, 0u);
  EXPECT_EQ(c.misses, 4u);
}

TEST(LocationCacheTest, AnEntryOfAnotherEpochIsDropped) {
  LocationCache cache(1 << 20);
  cache.Insert(0, "k", H("k"), At(64, 1, /*epoch=*/3));
  EXPECT_FALSE(cache.Find(0, "k", H("k"), 4).has_value());
  EXPECT_EQ(cache.counters().entries, 0u);
  EXPECT_FALSE(cache.Find(0, "k", H("k"), 3).has_value());  // gone, not just hidden
}

TEST(LocationCacheTest, BinaryKeysAreDistinct) {
  LocationCache cache(1 << 20);
  const std::string k1("a\0b", 3);
  const std::string k2("a\0c", 3);
  cache.Insert(0, k1, H(k1), At(64));
  cache.Insert(0, k2, H(k2), At(128));
  EXPECT_EQ(cache.Find(0, k1, H(k1), 1)->heap_offset, 64u);
  EXPECT_EQ(cache.Find(0, k2, H(k2), 1)->heap_offset, 128u);
  EXPECT_FALSE(cache.Find(0, std::string_view("a"), H(std::string_view("a")), 1).has_value());
  // The empty key (a view with no data) is a key like another.
  EXPECT_FALSE(cache.Find(0, std::string_view(), H(std::string_view()), 1).has_value());
  cache.Insert(0, std::string_view(), H(std::string_view()), At(192));
  EXPECT_EQ(cache.Find(0, std::string_view(), H(std::string_view()), 1)->heap_offset, 192u);
  EXPECT_EQ(cache.Find(0, k1, H(k1), 1)->heap_offset, 64u);
}

// The byte bound holds whatever is inserted, and what it counts is the
// sum of the entries' charges.
TEST(LocationCacheTest, StaysWithinItsCapacityAndCountsHonestly) {
  const uint64_t capacity = 64 * 1024;
  LocationCache cache(capacity);
  uint64_t charged_max = 0;
  for (int i = 0; i < 20'000; ++i) {
    const std::string key = "key-" + std::to_string(i) + std::string(i % 100, 'x');
    cache.Insert(0, key, H(key), At(64 * i));
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
  for (int i = 0; i < 10; ++i) even.Insert(0, "k" + std::to_string(i), H("k" + std::to_string(i)), At(64));
  EXPECT_EQ(even.counters().bytes, 10 * LocationCache::EntryBytes(2));
  EXPECT_GT(LocationCache::EntryBytes(2), 2u + 64u);
}

TEST(LocationCacheTest, AnEntryLargerThanAShardIsNotKept) {
  LocationCache cache(LocationCache::kShards * LocationCache::EntryBytes(10));
  cache.Insert(0, std::string(11, 'k'), H(std::string(11, 'k')), At(64));
  EXPECT_EQ(cache.counters().entries, 0u);
  cache.Insert(0, std::string(10, 'k'), H(std::string(10, 'k')), At(64));
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
  hot.Insert(0, "hotty", H("hotty"), At(64));
  for (int i = 0; i < 5000; ++i) {
    ASSERT_TRUE(hot.Find(0, "hotty", H("hotty"), 1).has_value()) << "evicted after " << i << " inserts";
    hot.Insert(0, "k" + std::to_string(1000 + i), H("k" + std::to_string(1000 + i)), At(64));
  }
  EXPECT_GT(hot.counters().evictions, 1000u);
}

// Keys of one hash share a probe run and nothing else: each finds its own
// entry or none, never another key's, whatever their lengths (held in the
// slot or apart) and servers.
TEST(LocationCacheTest, KeysOfOneHashNeverSeeEachOthersEntry) {
  LocationCache cache(1 << 20);
  constexpr uint64_t kHash = 0x1234'5678'9ABC'DEF0ULL;
  const std::string long_a(LocationCache::kInlineKeyBytes + 10, 'a');
  std::string long_b = long_a;
  long_b.back() = 'b';  // differs in its last byte only
  const std::string at_limit(LocationCache::kInlineKeyBytes, 'x');
  const std::string past_limit(LocationCache::kInlineKeyBytes + 1, 'x');
  const std::vector<std::string> keys = {"k1", "k2", "k10", long_a, long_b, at_limit, past_limit};
  for (size_t i = 0; i < keys.size(); ++i) cache.Insert(0, keys[i], kHash, At(64 * (i + 1)));
  for (size_t i = 0; i < keys.size(); ++i) {
    const auto found = cache.Find(0, keys[i], kHash, 1);
    ASSERT_TRUE(found.has_value()) << keys[i];
    EXPECT_EQ(found->heap_offset, 64 * (i + 1)) << keys[i];
  }
  EXPECT_FALSE(cache.Find(0, "k3", kHash, 1).has_value());
  EXPECT_FALSE(cache.Find(0, "k", kHash, 1).has_value());  // a prefix of k1
  EXPECT_FALSE(cache.Find(0, std::string(LocationCache::kInlineKeyBytes + 10, 'c'), kHash, 1).has_value());
  EXPECT_FALSE(cache.Find(1, "k1", kHash, 1).has_value());  // another server, same key and hash
  // Erasing one leaves the others where a lookup finds them (the run
  // closes over the gap).
  cache.Erase(0, "k2", kHash);
  cache.Erase(0, long_a, kHash);
  EXPECT_FALSE(cache.Find(0, "k2", kHash, 1).has_value());
  EXPECT_FALSE(cache.Find(0, long_a, kHash, 1).has_value());
  for (const std::string& k : {std::string("k1"), std::string("k10"), long_b, at_limit, past_limit}) {
    EXPECT_TRUE(cache.Find(0, k, kHash, 1).has_value()) << k;
  }
  EXPECT_EQ(cache.counters().entries, keys.size() - 2);
  EXPECT_EQ(cache.counters().bytes, LocationCache::EntryBytes(2) + LocationCache::EntryBytes(3) +
                                        LocationCache::EntryBytes(at_limit.size()) +
                                        LocationCache::EntryBytes(long_b.size()) +
                                        LocationCache::EntryBytes(past_limit.size()));
}

// Against a model (a map), with hashes drawn from a handful so that runs
// collide and wrap, and room for every key: every key finds exactly what
// the model holds, after any mix of inserts, replacements, erases, epoch
// drops and table growth.
TEST(LocationCacheTest, AgreesWithAModelUnderCollidingHashes) {
  LocationCache cache(64 << 20);
  std::map<std::pair<uint32_t, std::string>, uint64_t> model;  // -> heap offset
  std::mt19937_64 rng(7);
  auto key_of = [](uint64_t n) {
    return (n % 3 == 0 ? std::string(LocationCache::kInlineKeyBytes, 'L') : std::string()) + "key-" +
           std::to_string(n);
  };
  auto hash_of = [](uint64_t n) { return n % 5; };  // five hashes for every key
  for (int step = 0; step < 50'000; ++step) {
    const uint64_t n = rng() % 600;
    const auto server = static_cast<uint32_t>(rng() % 2);
    const std::string key = key_of(n);
    switch (rng() % 4) {
      case 0:
      case 1: {
        const uint64_t offset = 64 * (rng() % 100'000);
        cache.Insert(server, key, hash_of(n), At(offset));
        model[{server, key}] = offset;
        break;
      }
      case 2:
        cache.Erase(server, key, hash_of(n));
        model.erase({server, key});
        break;
      default:
        if (rng() % 50 == 0) {
          EXPECT_FALSE(cache.Find(server, key, hash_of(n), /*epoch=*/2).has_value());
          model.erase({server, key});
        }
    }
    const auto it = model.find({server, key});
    const auto found = cache.Find(server, key, hash_of(n), 1);
    ASSERT_EQ(found.has_value(), it != model.end()) << "step " << step << " " << key;
    if (found) {
      ASSERT_EQ(found->heap_offset, it->second) << "step " << step << " " << key;
    }
  }
  for (uint64_t n = 0; n < 600; ++n) {
    for (uint32_t server = 0; server < 2; ++server) {
      const auto it = model.find({server, key_of(n)});
      const auto found = cache.Find(server, key_of(n), hash_of(n), 1);
      ASSERT_EQ(found.has_value(), it != model.end()) << key_of(n);
      if (found) {
        EXPECT_EQ(found->heap_offset, it->second);
      }
    }
  }
  EXPECT_EQ(cache.counters().entries, model.size());
  EXPECT_EQ(cache.counters().evictions, 0u);
}

// Eviction under colliding hashes keeps the count and the byte charge
// true and never mixes up two keys.
TEST(LocationCacheTest, EvictionUnderCollidingHashesKeepsKeysApart) {
  const uint64_t capacity = LocationCache::kShards * 8 * LocationCache::EntryBytes(40);
  LocationCache cache(capacity);
  for (int i = 0; i < 5'000; ++i) {
    const std::string key = (i % 2 == 0 ? "k" : std::string(40, 'x')) + std::to_string(i);
    cache.Insert(0, key, static_cast<uint64_t>(i % 3), At(64 * i));
    if (i % 7 == 0) cache.Find(0, key, static_cast<uint64_t>(i % 3), 1);
    const LocationCacheCounters c = cache.counters();
    ASSERT_LE(c.bytes, capacity);
  }
  for (int i = 0; i < 5'000; ++i) {
    const std::string key = (i % 2 == 0 ? "k" : std::string(40, 'x')) + std::to_string(i);
    const auto found = cache.Find(0, key, static_cast<uint64_t>(i % 3), 1);
    if (found) {
      ASSERT_EQ(found->heap_offset, uint64_t(64 * i)) << key;
    }
  }
  EXPECT_GT(cache.counters().evictions, 0u);
}

TEST(LocationCacheTest, CountsHitsAndFallbacks) {
  LocationCache cache(1 << 20);
  cache.NoteHit();
  cache.NoteHit();
  cache.NoteFallback();
  cache.NoteHits(3);
  cache.NoteFallbacks(0);
  const LocationCacheCounters c = cache.counters();
  EXPECT_EQ(c.hits, 5u);
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
            cache.Insert(static_cast<uint32_t>(k % 2), key, H(key), At(64 * k, k));
            break;
          case 1:
            if (auto f = cache.Find(static_cast<uint32_t>(k % 2), key, H(key), 1);
                f && (f->heap_offset != uint64_t(64 * k) || f->version != uint64_t(k))) {
              wrong.fetch_add(1);
            }
            break;
          default:
            if (i % 30 == 2) cache.Erase(static_cast<uint32_t>(k % 2), key, H(key));
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
