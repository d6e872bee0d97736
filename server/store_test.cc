#include "server/store.h"

#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <rocksdb/db.h>
#include <unistd.h>

namespace rkv::server {
namespace {

// A fresh directory per test, removed afterwards.
class StoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::path(::testing::TempDir()) /
           ("rkv_store_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::unique_ptr<Store> MustOpen(Durability d = Durability::kWal) {
    auto s = Store::Open(dir_.string(), d);
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? std::move(s).value() : nullptr;
  }

  // Writes a raw RocksDB entry, bypassing the Store's encoding.
  void RawPut(const std::string& k, const std::string& v) {
    rocksdb::DB* db = nullptr;
    rocksdb::Options o;
    ASSERT_TRUE(rocksdb::DB::Open(o, dir_.string(), &db).ok());
    ASSERT_TRUE(db->Put(rocksdb::WriteOptions(), k, v).ok());
    delete db;
  }

  std::map<std::string, std::pair<uint64_t, std::string>> ScanAll(const Store& s) {
    std::map<std::string, std::pair<uint64_t, std::string>> out;
    Status st = s.Scan([&](std::string_view k, uint64_t v, std::string_view val) {
      out[std::string(k)] = {v, std::string(val)};
      return Status::Ok();
    });
    EXPECT_TRUE(st.ok()) << st;
    return out;
  }

  std::filesystem::path dir_;
};

TEST(DurabilityTest, Parses) {
  EXPECT_EQ(*ParseDurability("none"), Durability::kNone);
  EXPECT_EQ(*ParseDurability("wal"), Durability::kWal);
  EXPECT_EQ(*ParseDurability("sync"), Durability::kSync);
  EXPECT_EQ(ParseDurability("fsync").status().code(), StatusCode::kInvalidArgument);
  EXPECT_STREQ(DurabilityName(Durability::kSync), "sync");
}

TEST(PrintableKeyTest, EscapesBinary) {
  EXPECT_EQ(PrintableKey("abc"), "abc");
  EXPECT_EQ(PrintableKey(std::string("a\0\xff", 3)), "a\\x00\\xff");
  EXPECT_EQ(PrintableKey(std::string(100, 'x')), std::string(64, 'x') + "...");
}

TEST_F(StoreTest, EpochGrowsOnEveryOpen) {
  EXPECT_EQ(MustOpen()->epoch(), 1u);
  EXPECT_EQ(MustOpen()->epoch(), 2u);
  EXPECT_EQ(MustOpen(Durability::kNone)->epoch(), 3u);
}

TEST_F(StoreTest, PutGetDeleteAndVersions) {
  auto s = MustOpen();
  EXPECT_EQ(s->version_high_water(), 0u);
  EXPECT_EQ(s->NextVersion(), 1u);
  ASSERT_TRUE(s->Put("a", "1", s->NextVersion()).ok());
  ASSERT_TRUE(s->Put("b", "2", s->NextVersion()).ok());
  ASSERT_TRUE(s->Put("a", "3", s->NextVersion()).ok());
  EXPECT_EQ(s->version_high_water(), 3u);
  auto a = s->Get("a");
  ASSERT_TRUE(a.ok() && a->has_value());
  EXPECT_EQ((*a)->value, "3");
  EXPECT_EQ((*a)->version, 3u);
  ASSERT_TRUE(s->Delete("a").ok());
  EXPECT_FALSE(s->Get("a")->has_value());
  EXPECT_TRUE(s->Delete("never").ok());
  // A lower version (an undo restoring an old value) keeps the high-water mark.
  ASSERT_TRUE(s->Put("b", "2", 2).ok());
  EXPECT_EQ(s->version_high_water(), 3u);
  EXPECT_EQ(s->Put("", "x", 9).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s->Put("x", "x", 0).code(), StatusCode::kInvalidArgument);
}

TEST_F(StoreTest, SurvivesReopenInEveryDurabilityMode) {
  uint64_t next = 0;
  for (Durability d : {Durability::kNone, Durability::kWal, Durability::kSync}) {
    {
      auto s = MustOpen(d);
      EXPECT_EQ(s->NextVersion(), next + 1) << "versions must stay monotonic across restarts";
      ASSERT_TRUE(s->Put(DurabilityName(d), "value", s->NextVersion()).ok());
      ASSERT_TRUE(s->Put("gone", "x", s->NextVersion()).ok());
      ASSERT_TRUE(s->Delete("gone").ok());
      next = s->version_high_water();
    }
    auto s = MustOpen(d);
    EXPECT_EQ(s->version_high_water(), next);
    auto all = ScanAll(*s);
    EXPECT_EQ(all.count("gone"), 0u);
    ASSERT_EQ(all.count(DurabilityName(d)), 1u);
    EXPECT_EQ(all[DurabilityName(d)].second, "value");
  }
}

TEST_F(StoreTest, ScanReturnsEveryRecordWithBinaryKeys) {
  auto s = MustOpen();
  const std::string k1("\0\0", 2), k2("\xff", 1);
  ASSERT_TRUE(s->Put(k1, std::string("v\0", 2), 1).ok());
  ASSERT_TRUE(s->Put(k2, "", 2).ok());
  ASSERT_TRUE(s->Put("m", "meta-looking key", 3).ok());
  auto all = ScanAll(*s);
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all[k1], std::make_pair(uint64_t{1}, std::string("v\0", 2)));
  EXPECT_EQ(all[k2], std::make_pair(uint64_t{2}, std::string()));
  EXPECT_EQ(all["m"].second, "meta-looking key");
  // Scan stops at the callback's error.
  int calls = 0;
  Status st = s->Scan([&](std::string_view, uint64_t, std::string_view) {
    ++calls;
    return Aborted("stop");
  });
  EXPECT_EQ(st.code(), StatusCode::kAborted);
  EXPECT_EQ(calls, 1);
}

TEST_F(StoreTest, SecondOpenOfTheSameDirectoryFailsClearly) {
  auto first = MustOpen();
  ASSERT_TRUE(first->Put("k", "v", 1).ok());
  auto second = Store::Open(dir_.string(), Durability::kWal);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kFailedPrecondition) << second.status();
  EXPECT_NE(second.status().message().find("in use"), std::string::npos);
  // The first is unharmed.
  EXPECT_EQ((*first->Get("k"))->value, "v");
}

TEST_F(StoreTest, CorruptRecordIsDataLossNamingTheKey) {
  { MustOpen()->Put("good", "v", 1).IgnoreError(); }
  RawPut("dbadkey", std::string("\x01short", 6));
  auto s = MustOpen();
  Status st = s->Scan([](std::string_view, uint64_t, std::string_view) { return Status::Ok(); });
  EXPECT_EQ(st.code(), StatusCode::kDataLoss);
  EXPECT_NE(st.message().find("badkey"), std::string::npos) << st;
  EXPECT_EQ(s->Get("badkey").status().code(), StatusCode::kDataLoss);
}

TEST_F(StoreTest, FlippedValueByteFailsTheChecksum) {
  { ASSERT_TRUE(MustOpen()->Put("k", "hello", 1).ok()); }
  std::string raw;
  {
    rocksdb::DB* db = nullptr;
    ASSERT_TRUE(rocksdb::DB::Open(rocksdb::Options(), dir_.string(), &db).ok());
    ASSERT_TRUE(db->Get(rocksdb::ReadOptions(), "dk", &raw).ok());
    delete db;
  }
  raw.back() ^= 1;
  RawPut("dk", raw);
  auto s = MustOpen();
  EXPECT_EQ(s->Get("k").status().code(), StatusCode::kDataLoss);
  // The same bytes under another key fail too: the key is in the checksum.
  raw.back() ^= 1;
  s.reset();
  RawPut("dother", raw);
  s = MustOpen();
  EXPECT_EQ(s->Get("other").status().code(), StatusCode::kDataLoss);
}

TEST_F(StoreTest, VersionAboveTheHighWaterMarkIsDataLoss) {
  { ASSERT_TRUE(MustOpen()->Put("k", "v", 5).ok()); }
  std::string raw;
  {
    rocksdb::DB* db = nullptr;
    ASSERT_TRUE(rocksdb::DB::Open(rocksdb::Options(), dir_.string(), &db).ok());
    ASSERT_TRUE(db->Get(rocksdb::ReadOptions(), "dk", &raw).ok());
    delete db;
  }
  RawPut("mversion", std::string("\x02\0\0\0\0\0\0\0", 8));
  auto s = MustOpen();
  EXPECT_EQ(s->version_high_water(), 2u);
  Status st = s->Scan([](std::string_view, uint64_t, std::string_view) { return Status::Ok(); });
  EXPECT_EQ(st.code(), StatusCode::kDataLoss) << st;
}

TEST_F(StoreTest, MalformedMetaRefusesToOpen) {
  { MustOpen(); }
  RawPut("mepoch", "xyz");
  auto s = Store::Open(dir_.string(), Durability::kWal);
  EXPECT_EQ(s.status().code(), StatusCode::kDataLoss) << s.status();
}

TEST_F(StoreTest, UnusableDirectoryIsAnError) {
  std::filesystem::create_directories(dir_);
  const std::string file = (dir_ / "plain_file").string();
  std::ofstream(file) << "x";
  auto s = Store::Open(file, Durability::kWal);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find(file), std::string::npos) << s.status();
}

}  // namespace
}  // namespace rkv::server
