#include "server/table/table.h"

#include <cstdlib>
#include <cstring>
#include <iostream>
#include <map>
#include <random>
#include <memory>
#include <string>
#include <thread>
#include <atomic>
#include <unordered_map>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "common/hash.h"
#include "common/record.h"

namespace rkv::server {

// Test access to the raw slot words.
class TableTestPeer {
 public:
  static uint64_t Slot(const Table& t, uint64_t bucket, uint32_t index) {
    return t.bucket(bucket)->slots[index];
  }
};

namespace {

using namespace std::chrono_literals;
using Clock = Heap::Clock;

struct FreeDeleter {
  void operator()(uint8_t* p) const { std::free(p); }
};

// A table over its own index and heap memory.
class TableFixture {
 public:
  TableFixture(uint32_t log2, uint64_t heap_bytes, uint64_t seed = 0x5eed,
               Heap::Clock::duration grace_period = 100ms)
      : index_bytes_(layout::IndexBytes(uint64_t{1} << log2)),
        index_(static_cast<uint8_t*>(std::aligned_alloc(64, index_bytes_))),
        heap_mem_(static_cast<uint8_t*>(std::aligned_alloc(64, heap_bytes))),
        heap_(heap_bytes, grace_period),
        table_(std::span<uint8_t>(index_.get(), index_bytes_), std::span<uint8_t>(heap_mem_.get(), heap_bytes),
               &heap_) {
    std::memset(index_.get(), 0xAB, index_bytes_);  // Init must clear it
    EXPECT_TRUE(table_.Init(log2, /*epoch=*/7, seed).ok());
  }
  Table& table() { return table_; }
  Heap& heap() { return heap_; }
  std::span<const uint8_t> Block(uint64_t slot) const {
    return std::span<const uint8_t>(heap_mem_.get() + layout::SlotBlockOffset(slot), layout::SlotBlockBytes(slot));
  }

 private:
  uint64_t index_bytes_;
  std::unique_ptr<uint8_t, FreeDeleter> index_;
  std::unique_ptr<uint8_t, FreeDeleter> heap_mem_;
  Heap heap_;
  Table table_;
};

TEST(TableTest, InitWritesTheHeaderAndEmptiesBuckets) {
  TableFixture f(4, 1 << 16, 0x1234);
  const layout::TableHeader& h = f.table().header();
  EXPECT_EQ(h.magic, layout::kTableMagic);
  EXPECT_EQ(h.layout_version, layout::kLayoutVersion);
  EXPECT_EQ(h.bucket_count_log2, 4u);
  EXPECT_EQ(h.bucket_count, 16u);
  EXPECT_EQ(h.epoch, 7u);
  EXPECT_EQ(h.hash_seed, 0x1234u);
  EXPECT_EQ(h.heap_size, uint64_t{1} << 16);
  for (uint64_t b = 0; b < 16; ++b) {
    for (uint32_t i = 0; i < layout::kSlotsPerBucket; ++i) EXPECT_EQ(TableTestPeer::Slot(f.table(), b, i), 0u);
  }
  f.table().SetEpoch(8);
  EXPECT_EQ(f.table().header().epoch, 8u);
}

TEST(TableTest, InitRejectsAMismatchedIndexSize) {
  Heap heap(4096, 1ms);
  std::unique_ptr<uint8_t, FreeDeleter> index(static_cast<uint8_t*>(std::aligned_alloc(64, 64 * 5)));
  std::vector<uint8_t> heap_mem(4096);
  Table t(std::span<uint8_t>(index.get(), 64 * 5), heap_mem, &heap);
  EXPECT_EQ(t.Init(3, 1, 1).code(), StatusCode::kInvalidArgument);  // needs 64 * 9
  EXPECT_TRUE(t.Init(2, 1, 1).ok());
}

TEST(TableTest, InsertPublishesASlotThatDecodes) {
  TableFixture f(4, 1 << 16);
  auto e = f.table().Upsert("alpha", "one", 5, Clock::now());
  ASSERT_TRUE(e.ok()) << e.status();
  const Neighborhood c = NeighborhoodOf(TableHash("alpha", f.table().hash_seed()), 4);
  EXPECT_TRUE(c.Contains(e->bucket));
  const uint64_t slot = TableTestPeer::Slot(f.table(), e->bucket, e->slot_index);
  EXPECT_EQ(slot, e->slot);
  EXPECT_EQ(layout::SlotFingerprint(slot), c.fingerprint);
  EXPECT_EQ(layout::SlotBlockBytes(slot), layout::BlockBytes(5, 3));
  auto rec = DecodeRecord(f.Block(slot));
  ASSERT_TRUE(rec.ok()) << rec.status();
  EXPECT_EQ(rec->key, "alpha");
  EXPECT_EQ(rec->value, "one");
  EXPECT_EQ(rec->version, 5u);
  EXPECT_EQ(rec->flags, 0);
  EXPECT_EQ(f.table().size(), 1u);

  auto found = f.table().Lookup("alpha");
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->slot, slot);
  EXPECT_EQ(found->version, 5u);
  EXPECT_FALSE(f.table().Lookup("alphb").has_value());
}

TEST(TableTest, ReplaceRewritesTheSameSlotWord) {
  TableFixture f(4, 1 << 16);
  const Clock::time_point t0 = Clock::now();
  auto first = f.table().Upsert("k", "v1", 1, t0);
  ASSERT_TRUE(first.ok());
  auto second = f.table().Upsert("k", std::string(300, 'x'), 2, t0);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(second->bucket, first->bucket);
  EXPECT_EQ(second->slot_index, first->slot_index);
  EXPECT_NE(second->slot, first->slot);
  EXPECT_EQ(TableTestPeer::Slot(f.table(), first->bucket, first->slot_index), second->slot);
  EXPECT_EQ(layout::SlotFingerprint(second->slot), layout::SlotFingerprint(first->slot));
  EXPECT_NE(layout::SlotBlockOffset(second->slot), layout::SlotBlockOffset(first->slot));
  auto rec = DecodeRecord(f.Block(second->slot));
  ASSERT_TRUE(rec.ok());
  EXPECT_EQ(rec->value, std::string(300, 'x'));
  EXPECT_EQ(rec->version, 2u);
  EXPECT_FALSE(rec->superseded);
  // The old block is quarantined and marked superseded, its record intact:
  // a reader holding the old slot word still decodes the old record within
  // the grace period, and is told it is no longer current.
  EXPECT_EQ(f.heap().stats().quarantined_bytes, 64u);
  auto old = DecodeHeapBlock(f.Block(first->slot));
  ASSERT_TRUE(old.ok()) << old.status();
  EXPECT_EQ(old->value, "v1");
  EXPECT_EQ(old->version, 1u);
  EXPECT_TRUE(old->superseded);
  EXPECT_EQ(f.table().size(), 1u);
}

TEST(TableTest, DeleteMarksTheBlockSuperseded) {
  TableFixture f(4, 1 << 16);
  auto e = f.table().Upsert("gone", "soon", 9, Clock::now());
  ASSERT_TRUE(e.ok());
  ASSERT_FALSE(DecodeHeapBlock(f.Block(e->slot))->superseded);
  ASSERT_TRUE(f.table().Delete("gone", Clock::now()).ok());
  auto old = DecodeHeapBlock(f.Block(e->slot));
  ASSERT_TRUE(old.ok()) << old.status();
  EXPECT_TRUE(old->superseded);
  EXPECT_EQ(old->value, "soon");
}

// A replace the heap refuses leaves the old block current: not marked.
TEST(TableTest, ARefusedReplaceDoesNotMarkTheOldBlock) {
  TableFixture f(4, 1024);
  auto e = f.table().Upsert("key", std::string(500, 'a'), 1, Clock::now());
  ASSERT_TRUE(e.ok());
  ASSERT_EQ(f.table().Upsert("key", std::string(1000, 'b'), 2, Clock::now()).status().code(),
            StatusCode::kResourceExhausted);
  auto rec = DecodeHeapBlock(f.Block(e->slot));
  ASSERT_TRUE(rec.ok()) << rec.status();
  EXPECT_FALSE(rec->superseded);
}

// A relocation move keeps the block: it stays current, and unmarked.
TEST(TableTest, ARelocatedKeyKeepsItsBlockUnmarked) {
  constexpr uint32_t kLog2 = 6;
  const uint64_t slots = (uint64_t{1} << kLog2) * layout::kSlotsPerBucket;
  TableFixture f(kLog2, 2 * slots * 64);
  std::vector<std::string> keys;
  for (uint64_t i = 0;; ++i) {
    std::string key = "key-" + std::to_string(i);
    if (!f.table().Upsert(key, "v", i + 1, Clock::now()).ok()) break;
    keys.push_back(std::move(key));
  }
  ASSERT_GT(f.table().relocations(), 0u);
  for (const std::string& key : keys) {
    const auto e = f.table().Lookup(key);
    ASSERT_TRUE(e.has_value()) << key;
    auto rec = DecodeHeapBlock(f.Block(e->slot));
    ASSERT_TRUE(rec.ok()) << key << ": " << rec.status();
    EXPECT_FALSE(rec->superseded) << key;
  }
}

// What a reader of a remembered location relies on: once the slot word no
// longer names a block (replace or delete), the block already carries the
// superseded mark. A reader thread watches the key's slot word; whenever it
// sees it change, the block the old word named must read superseded. The
// grace period is long enough that no block is reused meanwhile.
TEST(TableTest, TheMarkIsVisibleBeforeTheSlotThatSupersedesTheBlock) {
  TableFixture f(4, 1 << 26, 0x5eed, 1h);
  f.table().ServeReaders();
  auto first = f.table().Upsert("k", "v0", 1, Clock::now());
  ASSERT_TRUE(first.ok());
  const auto* word = reinterpret_cast<const uint64_t*>(reinterpret_cast<const uint8_t*>(&f.table().header()) +
                                                       layout::BucketOffset(first->bucket)) +
                     first->slot_index;
  std::atomic<bool> started{false};
  std::atomic<bool> done{false};
  std::atomic<uint64_t> changes{0};
  std::atomic<uint64_t> unmarked{0};
  std::thread reader([&] {
    uint64_t seen = std::atomic_ref<const uint64_t>(*word).load(std::memory_order_acquire);
    started.store(true, std::memory_order_release);
    while (!done.load(std::memory_order_acquire)) {
      const uint64_t now = std::atomic_ref<const uint64_t>(*word).load(std::memory_order_acquire);
      if (now == seen) continue;
      if (seen != layout::kEmptySlot) {
        const auto& checksum = *reinterpret_cast<const uint64_t*>(f.Block(seen).data());
        const uint64_t c = std::atomic_ref<const uint64_t>(checksum).load(std::memory_order_acquire);
        if (c != layout::SupersededChecksum(BlockChecksum(f.Block(seen).data(),
                                                          layout::RecordBytes(1, 2)))) {
          unmarked.fetch_add(1);
        }
        changes.fetch_add(1);
      }
      seen = now;
    }
  });
  while (!started.load(std::memory_order_acquire)) std::this_thread::yield();
  // Values of 2 bytes: every record is RecordBytes(1, 2) long. Until the
  // reader saw enough changes (a loaded machine may starve it), within what
  // the heap holds without reuse.
  for (uint64_t v = 2; v < 500'000 && changes.load(std::memory_order_relaxed) < 2000; ++v) {
    if (v % 7 == 0) {
      ASSERT_TRUE(f.table().Delete("k", Clock::now()).ok());
    }
    ASSERT_TRUE(f.table().Upsert("k", "v" + std::to_string(v % 10), v, Clock::now()).ok());
  }
  done.store(true, std::memory_order_release);
  reader.join();
  std::cout << changes.load() << " slot changes seen\n";
  EXPECT_GT(changes.load(), 0u);
  EXPECT_EQ(unmarked.load(), 0u);
}

TEST(TableTest, DeleteEmptiesTheSlotAndRetiresTheBlock) {
  TableFixture f(4, 1 << 16);
  auto e = f.table().Upsert("gone", "soon", 9, Clock::now());
  ASSERT_TRUE(e.ok());
  auto v = f.table().Delete("gone", Clock::now());
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(*v, 9u);
  EXPECT_EQ(TableTestPeer::Slot(f.table(), e->bucket, e->slot_index), layout::kEmptySlot);
  EXPECT_FALSE(f.table().Lookup("gone").has_value());
  EXPECT_EQ(f.table().size(), 0u);
  EXPECT_EQ(f.heap().stats().quarantined_bytes, 64u);
  EXPECT_EQ(f.table().Delete("gone", Clock::now()).status().code(), StatusCode::kNotFound);
}

TEST(TableTest, BinaryKeys) {
  TableFixture f(4, 1 << 16);
  const std::string a("a\0b", 3);
  const std::string b("a\0c", 3);
  const std::string c("\xff\x00\x80", 3);
  ASSERT_TRUE(f.table().Upsert(a, "A", 1, Clock::now()).ok());
  ASSERT_TRUE(f.table().Upsert(b, "B", 2, Clock::now()).ok());
  ASSERT_TRUE(f.table().Upsert(c, std::string("\0\1", 2), 3, Clock::now()).ok());
  EXPECT_EQ(f.table().RecordAt(f.table().Lookup(a)->slot).value, "A");
  EXPECT_EQ(f.table().RecordAt(f.table().Lookup(b)->slot).value, "B");
  EXPECT_EQ(f.table().RecordAt(f.table().Lookup(c)->slot).value, std::string("\0\1", 2));
  EXPECT_FALSE(f.table().Lookup("a").has_value());
  EXPECT_EQ(f.table().size(), 3u);
}

TEST(TableTest, KeysSharingAFingerprintAreToldApart) {
  constexpr uint64_t kSeed = 0x5eed;
  // Two keys with one fingerprint; in a 2-bucket table they share buckets.
  std::unordered_map<uint16_t, std::string> seen;
  std::string k1, k2;
  for (int i = 0; k1.empty(); ++i) {
    std::string k = "key" + std::to_string(i);
    const uint16_t fp = layout::FingerprintOf(TableHash(k, kSeed));
    auto [it, inserted] = seen.emplace(fp, k);
    if (!inserted) {
      k1 = it->second;
      k2 = k;
    }
  }
  TableFixture f(1, 1 << 16, kSeed);
  ASSERT_TRUE(f.table().Upsert(k1, "first", 1, Clock::now()).ok());
  ASSERT_TRUE(f.table().Upsert(k2, "second", 2, Clock::now()).ok());
  EXPECT_EQ(f.table().RecordAt(f.table().Lookup(k1)->slot).value, "first");
  EXPECT_EQ(f.table().RecordAt(f.table().Lookup(k2)->slot).value, "second");
  ASSERT_TRUE(f.table().Delete(k1, Clock::now()).ok());
  EXPECT_FALSE(f.table().Lookup(k1).has_value());
  EXPECT_EQ(f.table().RecordAt(f.table().Lookup(k2)->slot).value, "second");
}

TEST(TableTest, FullTableRefusesAnInsertAndChangesNothing) {
  TableFixture f(3, 1 << 20);
  std::map<std::string, std::string> inserted;
  Status refusal;
  for (int i = 0; refusal.ok(); ++i) {
    const std::string k = "k" + std::to_string(i);
    const std::string v = "v" + std::to_string(i);
    auto e = f.table().Upsert(k, v, i + 1, Clock::now());
    if (e.ok()) {
      inserted[k] = v;
    } else {
      refusal = e.status();
      EXPECT_FALSE(f.table().PrepareInsert(k, Clock::now()));
      EXPECT_FALSE(f.table().Lookup(k).has_value());
    }
  }
  EXPECT_EQ(refusal.code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(f.table().size(), inserted.size());
  const uint64_t used = f.heap().stats().used_bytes;
  EXPECT_EQ(used, inserted.size() * 64);  // no block leaked by the refusal
  for (const auto& [k, v] : inserted) {
    auto e = f.table().Lookup(k);
    ASSERT_TRUE(e.has_value()) << k;
    EXPECT_EQ(f.table().RecordAt(e->slot).value, v);
  }
  // A full table still replaces a present key in place.
  const std::string some = inserted.begin()->first;
  EXPECT_TRUE(f.table().PrepareInsert(some, Clock::now()));
  auto r = f.table().Upsert(some, "replaced", 1000, Clock::now());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(f.table().RecordAt(f.table().Lookup(some)->slot).value, "replaced");
}

TEST(TableTest, FullHeapLeavesTheOldValueReadable) {
  TableFixture f(4, 1024);
  auto e = f.table().Upsert("key", std::string(500, 'a'), 1, Clock::now());
  ASSERT_TRUE(e.ok());
  // 1000 more bytes do not fit next to the live 512-byte block.
  auto r = f.table().Upsert("key", std::string(1000, 'b'), 2, Clock::now());
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted);
  auto now = f.table().Lookup("key");
  ASSERT_TRUE(now.has_value());
  EXPECT_EQ(now->slot, e->slot);
  auto rec = DecodeRecord(f.Block(now->slot));
  ASSERT_TRUE(rec.ok());
  EXPECT_EQ(rec->value, std::string(500, 'a'));
  EXPECT_EQ(rec->version, 1u);
  EXPECT_EQ(f.heap().stats().quarantined_bytes, 0u);
  // Nor does a new key get a slot.
  EXPECT_EQ(f.table().Upsert("other", std::string(1000, 'c'), 3, Clock::now()).status().code(),
            StatusCode::kResourceExhausted);
  EXPECT_FALSE(f.table().Lookup("other").has_value());
  EXPECT_EQ(f.table().size(), 1u);
}

TEST(TableTest, SizingFitsMaxKeys) {
  EXPECT_EQ(Table::BucketCountLog2ForKeys(0).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(*Table::BucketCountLog2ForKeys(1), 1u);
  EXPECT_EQ(*Table::BucketCountLog2ForKeys(13), 1u);  // 16 slots at 0.85 -> 2 buckets
  EXPECT_EQ(*Table::BucketCountLog2ForKeys(14), 2u);  // 17 slots -> 3 buckets -> 4
  EXPECT_EQ(*Table::BucketCountLog2ForKeys(1'048'576), 18u);
  EXPECT_EQ(Table::BucketCountLog2ForKeys(uint64_t{1} << 40).status().code(), StatusCode::kInvalidArgument);
  for (uint64_t keys : {1ULL, 100ULL, 1000ULL, 1'000'000ULL}) {
    const uint32_t log2 = *Table::BucketCountLog2ForKeys(keys);
    const double slots = static_cast<double>((uint64_t{1} << log2) * layout::kSlotsPerBucket);
    EXPECT_LE(static_cast<double>(keys) / slots, Table::kTargetLoad);
    if (log2 > 1) {
      EXPECT_GT(static_cast<double>(keys) / (slots / 2), Table::kTargetLoad) << "not the smallest";
    }
  }
}

// Fills a table sized for `max_keys` until the first refused insert: all
// max_keys must fit, and the load reached must be at least 0.85, the
// design target (docs/design.md) (relocation makes it ~0.95; without it ~0.6).
void FillUntilRefused(uint64_t max_keys) {
  const uint32_t log2 = *Table::BucketCountLog2ForKeys(max_keys);
  const uint64_t slots = (uint64_t{1} << log2) * layout::kSlotsPerBucket;
  TableFixture f(log2, slots * 64, /*seed=*/max_keys);
  uint64_t n = 0;
  for (;; ++n) {
    auto e = f.table().Upsert("key-" + std::to_string(n), "", n + 1, Clock::now());
    if (!e.ok()) {
      ASSERT_EQ(e.status().code(), StatusCode::kResourceExhausted) << e.status();
      break;
    }
  }
  const double load = static_cast<double>(n) / static_cast<double>(slots);
  ::testing::Test::RecordProperty("load_at_first_refusal", std::to_string(load));
  std::cout << "2^" << log2 << " buckets: first refusal at load " << load << "\n";
  EXPECT_GE(n, max_keys);
  EXPECT_GE(load, 0.85);
  EXPECT_GT(f.table().relocations(), 0u);
  // Every key is still found, with its own value, after all the moves.
  for (uint64_t i = 0; i < n; ++i) {
    auto e = f.table().Lookup("key-" + std::to_string(i));
    ASSERT_TRUE(e.has_value()) << i;
    ASSERT_EQ(e->version, i + 1);
    ASSERT_TRUE(NeighborhoodOf(TableHash("key-" + std::to_string(i), max_keys), log2).Contains(e->bucket));
  }
  EXPECT_DOUBLE_EQ(f.table().load_factor(), load);
}

TEST(TableTest, LoadFactorAtFirstRefusalSmall) { FillUntilRefused(1000); }
TEST(TableTest, LoadFactorAtFirstRefusalLarge) { FillUntilRefused(300'000); }

}  // namespace
}  // namespace rkv::server

namespace rkv::server {
namespace {

// A reader that does what a remote GET does: one pass over the key's whole
// neighbourhood (not atomic: slot by slot, in either direction), and on a
// miss a second pass, before answering "absent". While inserts relocate
// keys around it, the second pass never misses a present key.
TEST(TableTest, ConfirmedMissNeverHidesAMovingKey) {
  constexpr uint32_t kLog2 = 9;
  const uint64_t slots = (uint64_t{1} << kLog2) * layout::kSlotsPerBucket;
  // The table fills before the heap; retired blocks are never reused during
  // the test (a long grace period), so a slow reader never reads a block
  // that is being rewritten.
  constexpr uint64_t kChurnRounds = 200'000;
  TableFixture f(kLog2, 2 * slots * 64 + kChurnRounds * 64, /*seed=*/77, 1h);
  f.table().ServeReaders();
  const uint64_t seed = f.table().hash_seed();
  const uint8_t* index = reinterpret_cast<const uint8_t*>(&f.table().header());
  std::atomic<uint64_t> inserted{0};
  std::atomic<bool> done{false};
  std::atomic<uint64_t> first_pass_misses{0};
  std::atomic<uint64_t> misses{0};
  std::thread reader([&] {
    bool descending = false;
    const auto pass = [&](const std::string& key, const Neighborhood& nb) {
      descending = !descending;
      for (uint64_t n = 0; n < nb.count; ++n) {
        const uint64_t b = descending ? nb.first + nb.count - 1 - n : nb.first + n;
        const auto* words = reinterpret_cast<const uint64_t*>(index + layout::BucketOffset(b));
        for (size_t s = 0; s < layout::kSlotsPerBucket; ++s) {
          const uint64_t w = std::atomic_ref<const uint64_t>(words[s]).load(std::memory_order_acquire);
          if (w != layout::kEmptySlot && layout::SlotFingerprint(w) == nb.fingerprint &&
              f.table().RecordAt(w).key == key) {
            return true;
          }
        }
      }
      return false;
    };
    while (!done.load(std::memory_order_acquire)) {
      const uint64_t n = inserted.load(std::memory_order_acquire);
      for (uint64_t i = 0; i < n; i += 2) {  // even keys are never deleted
        const std::string key = "key-" + std::to_string(i);
        const Neighborhood nb = NeighborhoodOf(TableHash(key, seed), kLog2);
        const Clock::time_point posted = Clock::now();
        if (pass(key, nb)) continue;
        first_pass_misses.fetch_add(1);
        // Like the client, a confirmation counts only within the lease.
        if (!pass(key, nb) && Clock::now() - posted < f.heap().grace_period() / 2) misses.fetch_add(1);
      }
    }
  });
  // Fill to the first refusal, then churn at that load: delete an odd key,
  // insert a new one, which often needs keys moved.
  uint64_t next = 0;
  std::vector<uint64_t> odd_present;
  const auto insert_next = [&] {
    if (!f.table().Upsert("key-" + std::to_string(next), "v", next + 1, Clock::now()).ok()) return false;
    if (next % 2 == 1) odd_present.push_back(next);
    inserted.store(++next, std::memory_order_release);
    return true;
  };
  while (insert_next()) {
  }
  const double load = f.table().load_factor();
  std::mt19937_64 rng(3);
  for (uint64_t round = 0; round < kChurnRounds && f.table().relocations() < 5000 && !odd_present.empty();
       ++round) {
    const size_t j = rng() % odd_present.size();
    ASSERT_TRUE(f.table().Delete("key-" + std::to_string(odd_present[j]), Clock::now()).ok());
    odd_present[j] = odd_present.back();
    odd_present.pop_back();
    insert_next();
  }
  done.store(true, std::memory_order_release);
  reader.join();
  EXPECT_GT(f.table().relocations(), 100u);
  EXPECT_GE(load, 0.85);
  std::cout << f.table().relocations() << " moves; " << first_pass_misses.load()
            << " first-pass misses, all confirmed present\n";
  EXPECT_EQ(misses.load(), 0u);
}

// Once readers are present, a key that moved stays put for a grace period:
// the rule that makes a confirmed miss true (see table.h).
TEST(TableTest, AMovedKeyDoesNotMoveAgainWithinTheGracePeriod) {
  constexpr uint32_t kLog2 = 6;
  const uint64_t slots = (uint64_t{1} << kLog2) * layout::kSlotsPerBucket;
  TableFixture f(kLog2, slots * 64, 0x5eed, 1h);  // the whole fill is within one grace period
  f.table().ServeReaders();
  std::vector<std::string> keys;
  std::vector<std::pair<uint64_t, uint32_t>> where;  // per key: bucket, slot
  std::vector<int> moves;
  uint64_t relocations_seen = 0;
  for (int i = 0;; ++i) {
    const std::string key = "key-" + std::to_string(i);
    if (!f.table().Upsert(key, "v", i + 1, Clock::now()).ok()) break;
    keys.push_back(key);
    where.emplace_back(~uint64_t{0}, 0);
    moves.push_back(-1);  // the insert itself counts as the first change
    for (size_t k = 0; k < keys.size(); ++k) {
      if (k + 1 < keys.size() && f.table().relocations() == relocations_seen) continue;
      const auto e = f.table().Lookup(keys[k]);
      ASSERT_TRUE(e.has_value()) << keys[k];
      if (where[k] != std::make_pair(e->bucket, e->slot_index)) {
        where[k] = {e->bucket, e->slot_index};
        ++moves[k];
      }
    }
    relocations_seen = f.table().relocations();
  }
  EXPECT_GT(f.table().relocations(), 0u);
  for (size_t k = 0; k < keys.size(); ++k) EXPECT_LE(moves[k], 1) << keys[k];
}

}  // namespace
}  // namespace rkv::server
