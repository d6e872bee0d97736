#include "server/table/rebuild.h"

#include <filesystem>
#include <map>
#include <memory>
#include <random>
#include <string>

#include <gtest/gtest.h>
#include <rocksdb/db.h>
#include <unistd.h>

#include "common/layout.h"
#include "server/table/heap.h"
#include "server/table/mapped_memory.h"

namespace rkv::server {
namespace {

constexpr RebuildLimits kLimits{1024, 1 << 20};

// A table over its own index and heap, as the server maps them.
struct TestTable {
  TestTable(uint64_t max_keys, uint64_t heap_bytes) {
    const uint32_t log2 = *Table::BucketCountLog2ForKeys(max_keys);
    index = std::move(MappedMemory::Allocate(layout::IndexBytes(uint64_t{1} << log2))).value();
    heap_memory = std::move(MappedMemory::Allocate(heap_bytes)).value();
    heap = std::make_unique<Heap>(heap_bytes, std::chrono::milliseconds(100));
    table = std::make_unique<Table>(index.span(), heap_memory.span(), heap.get());
    EXPECT_TRUE(table->Init(log2, /*epoch=*/1, /*hash_seed=*/0xABCDEF).ok());
  }
  MappedMemory index;
  MappedMemory heap_memory;
  std::unique_ptr<Heap> heap;
  std::unique_ptr<Table> table;
};

class RebuildTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::path(::testing::TempDir()) /
           ("rkv_rebuild_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::unique_ptr<Store> Open() {
    auto s = Store::Open(dir_.string(), Durability::kNone);
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? std::move(s).value() : nullptr;
  }

  // Fills the store with `n` keys of assorted sizes (binary ones too), some
  // overwritten and some deleted; returns what it holds.
  std::map<std::string, std::pair<uint64_t, std::string>> Fill(Store& store, int n) {
    std::map<std::string, std::pair<uint64_t, std::string>> want;
    std::mt19937_64 rng(42);
    for (int i = 0; i < n; ++i) {
      std::string key = "k" + std::to_string(rng());
      if (i % 7 == 0) key.push_back('\0');
      std::string value(rng() % 300, static_cast<char>('a' + i % 26));
      const uint64_t v = store.NextVersion();
      EXPECT_TRUE(store.Put(key, value, v).ok());
      want[key] = {v, value};
      if (i % 5 == 0) {  // overwrite an earlier key
        auto it = want.begin();
        std::advance(it, static_cast<long>(rng() % want.size()));
        const uint64_t v2 = store.NextVersion();
        EXPECT_TRUE(store.Put(it->first, "again", v2).ok());
        it->second = {v2, "again"};
      }
      if (i % 11 == 0) {  // delete one
        auto it = want.begin();
        std::advance(it, static_cast<long>(rng() % want.size()));
        EXPECT_TRUE(store.Delete(it->first).ok());
        want.erase(it);
      }
    }
    return want;
  }

  std::filesystem::path dir_;
};

TEST_F(RebuildTest, RebuiltTableHoldsExactlyWhatTheStoreHolds) {
  std::map<std::string, std::pair<uint64_t, std::string>> want;
  {
    auto store = Open();
    want = Fill(*store, 12000);  // many batches between the two threads
  }
  auto store = Open();
  TestTable t(30000, 64 << 20);
  StatusOr<uint64_t> n = RebuildTable(*store, *t.table, kLimits);
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(*n, want.size());
  EXPECT_EQ(t.table->size(), want.size());

  // The same lookups as a table built one Upsert at a time.
  TestTable reference(30000, 64 << 20);
  ASSERT_TRUE(store
                  ->Scan([&](std::string_view key, uint64_t version, std::string_view value) {
                    return reference.table->Upsert(key, value, version, Heap::Clock::now()).status();
                  })
                  .ok());
  for (const auto& [key, vv] : want) {
    const std::optional<Table::Entry> e = t.table->Lookup(key);
    ASSERT_TRUE(e.has_value()) << PrintableKey(key);
    const Table::Record r = t.table->RecordAt(e->slot);
    EXPECT_EQ(r.version, vv.first);
    EXPECT_EQ(r.value, vv.second);
    const std::optional<Table::Entry> ref = reference.table->Lookup(key);
    ASSERT_TRUE(ref.has_value());
    EXPECT_EQ(ref->version, e->version);
    EXPECT_EQ(reference.table->RecordAt(ref->slot).value, r.value);
  }
  // Nothing else: every used slot names one of those keys, once.
  uint64_t used = 0;
  const auto* buckets = reinterpret_cast<const layout::Bucket*>(t.index.data() + layout::kIndexHeaderBytes);
  for (uint64_t b = 0; b < t.table->bucket_count(); ++b) {
    for (uint32_t i = 0; i < layout::kSlotsPerBucket; ++i) {
      const uint64_t slot = buckets[b].slots[i];
      if (slot == layout::kEmptySlot) continue;
      ++used;
      EXPECT_EQ(want.count(std::string(t.table->RecordAt(slot).key)), 1u);
    }
  }
  EXPECT_EQ(used, want.size());
}

TEST_F(RebuildTest, EmptyStoreRebuildsAnEmptyTable) {
  auto store = Open();
  TestTable t(100, 1 << 20);
  StatusOr<uint64_t> n = RebuildTable(*store, *t.table, kLimits);
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(*n, 0u);
}

TEST_F(RebuildTest, TooSmallAHeapFailsNamingTheFlags) {
  {
    auto store = Open();
    Fill(*store, 12000);
  }
  auto store = Open();
  // Room for a few thousand blocks: the insert fails while the scanner is
  // still ahead of it, and must be stopped.
  TestTable t(30000, 256 << 10);
  StatusOr<uint64_t> n = RebuildTable(*store, *t.table, kLimits);
  ASSERT_FALSE(n.ok());
  EXPECT_EQ(n.status().code(), StatusCode::kResourceExhausted) << n.status();
  EXPECT_NE(n.status().message().find("--memory"), std::string::npos) << n.status();
}

TEST_F(RebuildTest, RecordOverTheLimitsIsFailedPrecondition) {
  {
    auto store = Open();
    Fill(*store, 3000);
    ASSERT_TRUE(store->Put("big", std::string(2000, 'x'), store->NextVersion()).ok());
  }
  auto store = Open();
  TestTable t(5000, 16 << 20);
  StatusOr<uint64_t> n = RebuildTable(*store, *t.table, RebuildLimits{1024, 1000});
  ASSERT_FALSE(n.ok());
  EXPECT_EQ(n.status().code(), StatusCode::kFailedPrecondition) << n.status();
  EXPECT_NE(n.status().message().find("'big'"), std::string::npos) << n.status();
}

TEST_F(RebuildTest, CorruptRecordIsDataLoss) {
  {
    auto store = Open();
    Fill(*store, 3000);
  }
  {
    rocksdb::DB* db = nullptr;
    ASSERT_TRUE(rocksdb::DB::Open(rocksdb::Options(), dir_.string(), &db).ok());
    ASSERT_TRUE(db->Put(rocksdb::WriteOptions(), "dzzz-corrupt", std::string("\x01short", 6)).ok());
    delete db;
  }
  auto store = Open();
  TestTable t(5000, 16 << 20);
  StatusOr<uint64_t> n = RebuildTable(*store, *t.table, kLimits);
  ASSERT_FALSE(n.ok());
  EXPECT_EQ(n.status().code(), StatusCode::kDataLoss) << n.status();
  EXPECT_NE(n.status().message().find("zzz-corrupt"), std::string::npos) << n.status();
}

}  // namespace
}  // namespace rkv::server
