#include "server/store/store.h"

#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>

#include <gtest/gtest.h>
#include <rocksdb/db.h>
#include <rocksdb/file_system.h>
#include <unistd.h>

#include "common/mutex.h"
#include "tests/wait_for.h"

namespace rkv::server {
namespace {

// A fresh directory per test, removed afterwards.
class StoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::replace(name.begin(), name.end(), '/', '_');  // parameterized tests
    dir_ = std::filesystem::path(::testing::TempDir()) /
           ("rkv_store_test_" + std::to_string(::getpid()) + "_" + name);
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

// A file system whose WAL (*.log) and SST (*.sst) appends fail with
// ENOSPC while the flag for their kind is set, as on a full disk.
class FullDiskFileSystem : public rocksdb::FileSystemWrapper {
 public:
  FullDiskFileSystem() : FileSystemWrapper(rocksdb::FileSystem::Default()) {}
  const char* Name() const override { return "FullDiskFileSystem"; }

  std::atomic<bool> wal_full{false};
  std::atomic<bool> sst_full{false};
  std::atomic<uint64_t> refused{0};

  rocksdb::IOStatus NewWritableFile(const std::string& name, const rocksdb::FileOptions& options,
                                    std::unique_ptr<rocksdb::FSWritableFile>* result,
                                    rocksdb::IODebugContext* dbg) override {
    rocksdb::IOStatus s = target()->NewWritableFile(name, options, result, dbg);
    if (s.ok()) Wrap(name, result);
    return s;
  }
  rocksdb::IOStatus ReopenWritableFile(const std::string& name, const rocksdb::FileOptions& options,
                                       std::unique_ptr<rocksdb::FSWritableFile>* result,
                                       rocksdb::IODebugContext* dbg) override {
    rocksdb::IOStatus s = target()->ReopenWritableFile(name, options, result, dbg);
    if (s.ok()) Wrap(name, result);
    return s;
  }

 private:
  class File : public rocksdb::FSWritableFileOwnerWrapper {
   public:
    File(std::unique_ptr<rocksdb::FSWritableFile> file, std::atomic<bool>* full, std::atomic<uint64_t>* refused)
        : FSWritableFileOwnerWrapper(std::move(file)), full_(full), refused_(refused) {}
    rocksdb::IOStatus Append(const rocksdb::Slice& data, const rocksdb::IOOptions& options,
                             rocksdb::IODebugContext* dbg) override {
      if (Full()) return rocksdb::IOStatus::NoSpace("injected: no space left on device");
      return target()->Append(data, options, dbg);
    }
    rocksdb::IOStatus Append(const rocksdb::Slice& data, const rocksdb::IOOptions& options,
                             const rocksdb::DataVerificationInfo& info, rocksdb::IODebugContext* dbg) override {
      if (Full()) return rocksdb::IOStatus::NoSpace("injected: no space left on device");
      return target()->Append(data, options, info, dbg);
    }
    rocksdb::IOStatus PositionedAppend(const rocksdb::Slice& data, uint64_t offset,
                                       const rocksdb::IOOptions& options, rocksdb::IODebugContext* dbg) override {
      if (Full()) return rocksdb::IOStatus::NoSpace("injected: no space left on device");
      return target()->PositionedAppend(data, offset, options, dbg);
    }
    rocksdb::IOStatus PositionedAppend(const rocksdb::Slice& data, uint64_t offset,
                                       const rocksdb::IOOptions& options, const rocksdb::DataVerificationInfo& info,
                                       rocksdb::IODebugContext* dbg) override {
      if (Full()) return rocksdb::IOStatus::NoSpace("injected: no space left on device");
      return target()->PositionedAppend(data, offset, options, info, dbg);
    }

   private:
    bool Full() {
      if (!full_->load()) return false;
      refused_->fetch_add(1);
      return true;
    }
    std::atomic<bool>* full_;
    std::atomic<uint64_t>* refused_;
  };

  void Wrap(const std::string& name, std::unique_ptr<rocksdb::FSWritableFile>* file) {
    auto ends_with = [&](std::string_view suffix) {
      return name.size() >= suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
    };
    std::atomic<bool>* flag = ends_with(".log") ? &wal_full : ends_with(".sst") ? &sst_full : nullptr;
    if (flag != nullptr) *file = std::make_unique<File>(std::move(*file), flag, &refused);
  }
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

TEST_F(StoreTest, ExpiryIsStoredAndRecordsWithoutOneKeepTheFirstFormat) {
  {
    auto s = MustOpen();
    ASSERT_TRUE(s->Put("timed", "v", 1, 1'700'000'000'000).ok());
    ASSERT_TRUE(s->Put("plain", "w", 2).ok());
    size_t written = 0;
    const Store::PutItem items[] = {{"batch", "x", 3, 1'800'000'000'000}};
    ASSERT_TRUE(s->PutMany(items, &written).ok());
    EXPECT_EQ(s->Put("bad", "v", 4, -1).code(), StatusCode::kInvalidArgument);
    auto timed = s->Get("timed");
    ASSERT_TRUE(timed.ok() && timed->has_value());
    EXPECT_EQ((*timed)->expires_at_ms, 1'700'000'000'000);
    EXPECT_EQ((*s->Get("plain"))->expires_at_ms, 0);
  }
  // After a reopen, ScanRecords gives every record's expiry.
  auto s = MustOpen();
  std::map<std::string, int64_t> expiry;
  ASSERT_TRUE(s->ScanRecords([&](std::string_view k, uint64_t, std::string_view, int64_t e) {
                 expiry[std::string(k)] = e;
                 return Status::Ok();
               }).ok());
  EXPECT_EQ(expiry, (std::map<std::string, int64_t>{
                        {"batch", 1'800'000'000'000}, {"plain", 0}, {"timed", 1'700'000'000'000}}));
  s.reset();
  // A record without an expiry is format 1 on disk, as before expiry
  // existed; one with an expiry is format 2.
  rocksdb::DB* db = nullptr;
  rocksdb::Options o;
  ASSERT_TRUE(rocksdb::DB::OpenForReadOnly(o, dir_.string(), &db).ok());
  std::string raw;
  ASSERT_TRUE(db->Get(rocksdb::ReadOptions(), "dplain", &raw).ok());
  EXPECT_EQ(raw[0], 1);
  ASSERT_TRUE(db->Get(rocksdb::ReadOptions(), "dtimed", &raw).ok());
  EXPECT_EQ(raw[0], 2);
  delete db;
  // A format-2 record with a zero expiry is refused as corrupt.
  raw[9] = raw[10] = raw[11] = raw[12] = raw[13] = raw[14] = raw[15] = raw[16] = 0;
  RawPut("dtimed", raw);
  auto again = MustOpen();
  EXPECT_EQ(again->Get("timed").status().code(), StatusCode::kDataLoss);
}

TEST_F(StoreTest, PutManyWritesEveryItemWithOneHighWaterMark) {
  for (Durability d : {Durability::kNone, Durability::kWal, Durability::kSync}) {
    SCOPED_TRACE(DurabilityName(d));
    uint64_t hw = 0;
    {
      auto s = MustOpen(d);
      hw = s->version_high_water();
      const std::vector<Store::PutItem> items = {{"a", "1", hw + 3}, {"b", "2", hw + 7}, {"c", "3", hw + 5}};
      size_t written = 99;
      ASSERT_TRUE(s->PutMany(items, &written).ok());
      EXPECT_EQ(written, 3u);
      EXPECT_EQ(s->version_high_water(), hw + 7);
      // An item no write could have made refuses the whole call.
      const std::vector<Store::PutItem> bad = {{"d", "4", hw + 8}, {"", "5", hw + 9}};
      EXPECT_EQ(s->PutMany(bad, &written).code(), StatusCode::kInvalidArgument);
      EXPECT_EQ(written, 0u);
      const std::vector<Store::PutItem> zero = {{"d", "4", 0}};
      EXPECT_EQ(s->PutMany(zero, &written).code(), StatusCode::kInvalidArgument);
      EXPECT_FALSE(s->Get("d")->has_value());
      EXPECT_TRUE(s->PutMany({}, &written).ok());
      EXPECT_EQ(written, 0u);
    }
    // Everything survives a reopen, with the highest version as the mark.
    auto s = MustOpen(d);
    EXPECT_EQ(s->version_high_water(), hw + 7);
    auto all = ScanAll(*s);
    EXPECT_EQ(all["a"], std::make_pair(hw + 3, std::string("1")));
    EXPECT_EQ(all["b"], std::make_pair(hw + 7, std::string("2")));
    EXPECT_EQ(all["c"], std::make_pair(hw + 5, std::string("3")));
    EXPECT_EQ(all.count("d"), 0u);
  }
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

// The memtable holds every write of a key (a vector, sorted when it is
// read or flushed: Store::Open): a scan, open or after a reopen, sees the
// last write of each key and no deleted one, whatever their order.
TEST_F(StoreTest, TheLastWriteOfEachKeyWinsInAScanAndAfterAReopen) {
  std::map<std::string, std::pair<uint64_t, std::string>> want;
  {
    auto s = MustOpen(Durability::kWal);
    for (int round = 0; round < 3; ++round) {
      // Keys in a different order each round, each written once a round.
      for (int i = 0; i < 2000; ++i) {
        const int k = (i * (round * 2 + 7)) % 2000;
        const std::string key = "key" + std::to_string(k);
        const std::string value = "r" + std::to_string(round) + "-" + std::to_string(k);
        const uint64_t version = s->NextVersion();
        ASSERT_TRUE(s->Put(key, value, version).ok());
        want[key] = {version, value};
      }
      for (int k = round; k < 2000; k += 7) {
        const std::string key = "key" + std::to_string(k);
        ASSERT_TRUE(s->Delete(key).ok());
        want.erase(key);
      }
    }
    EXPECT_EQ(ScanAll(*s), want);
  }
  auto s = MustOpen(Durability::kWal);
  EXPECT_EQ(ScanAll(*s), want);
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

TEST_F(StoreTest, BadResumeBackoffIsRefused) {
  StoreOptions o;
  o.resume_backoff_initial = std::chrono::milliseconds(0);
  EXPECT_EQ(Store::Open(dir_.string(), o).status().code(), StatusCode::kInvalidArgument);
  o.resume_backoff_initial = std::chrono::milliseconds(20);
  o.resume_backoff_max = std::chrono::milliseconds(10);
  EXPECT_EQ(Store::Open(dir_.string(), o).status().code(), StatusCode::kInvalidArgument);
}

// What fills up: the WAL and SST files alike (a full disk), or only the WAL
// (the flush that recovery makes still fits, the next WAL append does not).
enum class FullKind { kWalAndSst, kWalOnly };

class StoreFullDiskTest : public StoreTest,
                          public ::testing::WithParamInterface<std::tuple<Durability, FullKind>> {};

TEST_P(StoreFullDiskTest, WritesFailWhileFullAndRecoverWithoutLosingAcknowledgedOnes) {
  const auto [durability, kind] = GetParam();
  auto fs = std::make_shared<FullDiskFileSystem>();
  StoreOptions options;
  options.durability = durability;
  options.resume_backoff_initial = std::chrono::milliseconds(1);
  options.resume_backoff_max = std::chrono::milliseconds(4);
  options.file_system = fs;
  auto opened = Store::Open(dir_.string(), options);
  ASSERT_TRUE(opened.ok()) << opened.status();
  std::unique_ptr<Store> store = std::move(opened).value();

  std::map<std::string, std::pair<uint64_t, std::string>> acked;
  int next_key = 0;
  auto put = [&]() -> Status {
    const std::string key = "key" + std::to_string(next_key++);
    const std::string value = "value of " + key;
    const uint64_t version = store->NextVersion();
    Status s = store->Put(key, value, version);
    if (s.ok()) acked[key] = {version, value};
    return s;
  };
  for (int i = 0; i < 50; ++i) ASSERT_TRUE(put().ok());

  // Two rounds: the second starts from the state the first recovery left
  // (flushed memtable, new WAL).
  for (int round = 0; round < 2; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    fs->wal_full = true;
    fs->sst_full = kind == FullKind::kWalAndSst;
    Status s = put();
    EXPECT_EQ(s.code(), StatusCode::kResourceExhausted) << s;
    EXPECT_TRUE(store->in_error_state());
    // Stays failing while the disk is full, also once recovery is retried
    // (each sleep outlasts the longest backoff).
    for (int i = 0; i < 5; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      s = put();
      EXPECT_EQ(s.code(), StatusCode::kResourceExhausted) << s;
    }
    const uint64_t refused_before = fs->refused;
    EXPECT_GT(refused_before, 0u);
    // Deletes are refused too, and change nothing.
    EXPECT_EQ(store->Delete("key0").code(), StatusCode::kResourceExhausted);

    fs->wal_full = false;
    fs->sst_full = false;
    // Writes succeed again once recovery has been retried.
    rkv::testing::WaitFor(
        "a write after the recovery",
        [&] {
          s = put();
          return s.ok();
        },
        std::chrono::seconds(60), std::chrono::milliseconds(1));
    ASSERT_TRUE(s.ok()) << s;
    EXPECT_FALSE(store->in_error_state());
    for (int i = 0; i < 20; ++i) ASSERT_TRUE(put().ok());
  }

  // Everything acknowledged is there, with its version, after a reopen on
  // the plain file system; nothing refused is.
  const uint64_t hw = store->version_high_water();
  store.reset();
  auto reopened = MustOpen(durability);
  ASSERT_NE(reopened, nullptr);
  EXPECT_EQ(reopened->version_high_water(), hw);
  EXPECT_EQ(ScanAll(*reopened), acked);
}

INSTANTIATE_TEST_SUITE_P(
    Modes, StoreFullDiskTest,
    ::testing::Combine(::testing::Values(Durability::kWal, Durability::kSync),
                       ::testing::Values(FullKind::kWalAndSst, FullKind::kWalOnly)),
    [](const ::testing::TestParamInfo<StoreFullDiskTest::ParamType>& info) {
      return std::string(DurabilityName(std::get<0>(info.param))) +
             (std::get<1>(info.param) == FullKind::kWalOnly ? "WalOnly" : "WalAndSst");
    });


// ---- Background writes (StoreOptions::background_queue) ----

// A file system that wraps each new WAL file (*.log) with WalFile.
template <typename Self, typename WalFile>
class WalWrappingFileSystem : public rocksdb::FileSystemWrapper {
 public:
  WalWrappingFileSystem() : FileSystemWrapper(rocksdb::FileSystem::Default()) {}

  rocksdb::IOStatus NewWritableFile(const std::string& name, const rocksdb::FileOptions& options,
                                    std::unique_ptr<rocksdb::FSWritableFile>* result,
                                    rocksdb::IODebugContext* dbg) override {
    rocksdb::IOStatus s = target()->NewWritableFile(name, options, result, dbg);
    if (s.ok() && name.size() > 4 && name.compare(name.size() - 4, 4, ".log") == 0) {
      *result = std::make_unique<WalFile>(std::move(*result), static_cast<Self*>(this));
    }
    return s;
  }
};

class GatedWalFile;

// A file system whose WAL appends wait while the gate is closed: the
// background writer stops inside its RocksDB write.
class GatedWalFileSystem : public WalWrappingFileSystem<GatedWalFileSystem, GatedWalFile> {
 public:
  const char* Name() const override { return "GatedWalFileSystem"; }

  std::atomic<bool> closed{false};
  std::atomic<uint64_t> waiting{0};  // appends held at the gate
};

class GatedWalFile : public rocksdb::FSWritableFileOwnerWrapper {
 public:
  GatedWalFile(std::unique_ptr<rocksdb::FSWritableFile> file, GatedWalFileSystem* fs)
      : FSWritableFileOwnerWrapper(std::move(file)), fs_(fs) {}
  rocksdb::IOStatus Append(const rocksdb::Slice& data, const rocksdb::IOOptions& options,
                           rocksdb::IODebugContext* dbg) override {
    Pass();
    return target()->Append(data, options, dbg);
  }
  rocksdb::IOStatus Append(const rocksdb::Slice& data, const rocksdb::IOOptions& options,
                           const rocksdb::DataVerificationInfo& info, rocksdb::IODebugContext* dbg) override {
    Pass();
    return target()->Append(data, options, info, dbg);
  }

 private:
  void Pass() {
    if (!fs_->closed.load()) return;
    fs_->waiting.fetch_add(1);
    rkv::testing::WaitFor("the WAL's gate to open", [&] { return !fs_->closed.load(); });
    fs_->waiting.fetch_sub(1);
  }
  GatedWalFileSystem* fs_;
};

class StoreBackgroundTest : public StoreTest {
 protected:
  std::unique_ptr<Store> OpenBackground(StoreOptions options) {
    auto s = Store::Open(dir_.string(), options);
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? std::move(s).value() : nullptr;
  }
};

TEST_F(StoreBackgroundTest, BadQueueLimitsAreRefused) {
  StoreOptions o;
  o.background_queue = (1U << 20) + 1;
  EXPECT_EQ(Store::Open(dir_.string(), o).status().code(), StatusCode::kInvalidArgument);
  o.background_queue = 8;
  o.background_queue_bytes = 0;
  EXPECT_EQ(Store::Open(dir_.string(), o).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(StoreBackgroundTest, PutManyBuffersEveryItem) {
  StoreOptions o;
  o.durability = Durability::kNone;
  o.background_queue = 4;  // fewer than the items: PutMany waits for room
  uint64_t hw = 0;
  std::map<std::string, std::pair<uint64_t, std::string>> expected;
  {
    auto store = OpenBackground(o);
    ASSERT_NE(store, nullptr);
    std::vector<std::string> keys, values;
    for (int i = 0; i < 10; ++i) {
      keys.push_back("k" + std::to_string(i));
      values.push_back(std::string(static_cast<size_t>(10 + i), static_cast<char>('a' + i)));
    }
    std::vector<Store::PutItem> items;
    for (int i = 0; i < 10; ++i) {
      items.push_back({keys[i], values[i], static_cast<uint64_t>(20 - i)});
      expected[keys[i]] = {static_cast<uint64_t>(20 - i), values[i]};
    }
    size_t written = 0;
    ASSERT_TRUE(store->PutMany(items, &written).ok());
    EXPECT_EQ(written, 10u);
    hw = store->version_high_water();
    EXPECT_EQ(hw, 20u);
    EXPECT_EQ(ScanAll(*store), expected);
  }
  auto store = OpenBackground(o);
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->version_high_water(), hw);
  EXPECT_EQ(ScanAll(*store), expected);
}

TEST_F(StoreBackgroundTest, WritesLandInTheOrderTheyWereMade) {
  StoreOptions o;
  o.durability = Durability::kNone;
  o.background_queue = 4;  // far fewer than the writes: the queue wraps and fills
  auto store = OpenBackground(o);
  ASSERT_NE(store, nullptr);
  std::map<std::string, std::pair<uint64_t, std::string>> expected;
  for (int i = 0; i < 500; ++i) {
    const std::string key = "k" + std::to_string(i % 7);
    if (i % 5 == 4) {
      ASSERT_TRUE(store->Delete(key).ok());
      expected.erase(key);
    } else {
      const uint64_t version = store->NextVersion();
      const std::string value(static_cast<size_t>(i % 300), static_cast<char>('a' + i % 26));
      ASSERT_TRUE(store->Put(key, value, version).ok());
      expected[key] = {version, value};
    }
  }
  // The mark moves when a write is queued, not when it is written.
  EXPECT_EQ(store->version_high_water(), 400u);
  // Reads see every write that returned OK.
  EXPECT_EQ(ScanAll(*store), expected);
  auto k1 = store->Get("k1");
  ASSERT_TRUE(k1.ok());
  EXPECT_EQ(k1->has_value(), expected.count("k1") == 1);
  EXPECT_TRUE(store->Flush().ok());
}

TEST_F(StoreBackgroundTest, CleanCloseWritesEverythingQueued) {
  StoreOptions o;
  o.durability = Durability::kNone;
  o.background_queue = 1024;
  std::map<std::string, std::pair<uint64_t, std::string>> expected;
  uint64_t hw = 0;
  {
    auto store = OpenBackground(o);
    ASSERT_NE(store, nullptr);
    for (int i = 0; i < 1000; ++i) {
      const std::string key = "key" + std::to_string(i);
      const uint64_t version = store->NextVersion();
      ASSERT_TRUE(store->Put(key, "value " + key, version).ok());
      expected[key] = {version, "value " + key};
    }
    ASSERT_TRUE(store->Delete("key7").ok());
    expected.erase("key7");
    hw = store->version_high_water();
    // Closed at once: whatever is still queued is written by the close.
  }
  auto reopened = MustOpen(Durability::kNone);
  ASSERT_NE(reopened, nullptr);
  EXPECT_EQ(reopened->version_high_water(), hw);
  EXPECT_EQ(ScanAll(*reopened), expected);
}

TEST_F(StoreBackgroundTest, FullQueueHoldsTheWriterBack) {
  auto fs = std::make_shared<GatedWalFileSystem>();
  StoreOptions o;
  o.durability = Durability::kWal;  // the gate is on the WAL
  o.background_queue = 2;
  o.file_system = fs;
  auto store = OpenBackground(o);
  ASSERT_NE(store, nullptr);
  fs->closed = true;
  ASSERT_TRUE(store->Put("a", "1", store->NextVersion()).ok());
  // The writer is now held inside its write of "a" (alone, or with "b").
  ASSERT_TRUE(rkv::testing::WaitFor("the writer held at the gate", [&] { return fs->waiting.load() > 0; }));
  ASSERT_TRUE(store->Put("b", "2", store->NextVersion()).ok());
  // Two writes are queued (one being written counts until it is): the
  // third waits for room while the writer cannot make progress.
  std::atomic<bool> third_returned{false};
  Status third;
  std::thread t([&] {
    third = store->Put("c", "3", 3);
    third_returned = true;
  });
  // Time for a wrong third write to return; it cannot make a correct store fail.
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_FALSE(third_returned.load()) << "a write was queued beyond background_queue";
  fs->closed = false;
  t.join();
  EXPECT_TRUE(third.ok()) << third;
  const auto all = ScanAll(*store);
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all.at("c").second, "3");
}

TEST_F(StoreBackgroundTest, FailedWritesAreRefusedRetriedAndNeverLost) {
  auto fs = std::make_shared<FullDiskFileSystem>();
  StoreOptions o;
  o.durability = Durability::kWal;  // the injected fault is on the WAL
  o.background_queue = 64;
  o.resume_backoff_initial = std::chrono::milliseconds(1);
  o.resume_backoff_max = std::chrono::milliseconds(4);
  o.file_system = fs;
  auto store = OpenBackground(o);
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(store->Put("before", "x", store->NextVersion()).ok());
  ASSERT_TRUE(store->Flush().ok());

  fs->wal_full = true;
  // Queued: OK now; its failure shows at the next Flush and refuses later
  // writes until the store recovers.
  ASSERT_TRUE(store->Put("queued", "y", store->NextVersion()).ok());
  Status flushed = store->Flush();
  EXPECT_EQ(flushed.code(), StatusCode::kResourceExhausted) << flushed;
  EXPECT_TRUE(store->in_error_state());
  EXPECT_EQ(store->Put("refused", "z", store->NextVersion()).code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(store->Delete("before").code(), StatusCode::kResourceExhausted);
  // A read cannot see the queued write, so it is refused rather than wrong.
  EXPECT_EQ(store->Get("queued").status().code(), StatusCode::kResourceExhausted);

  fs->wal_full = false;
  ASSERT_TRUE(rkv::testing::WaitFor("a flush after the disk has room", [&] { return store->Flush().ok(); }));
  EXPECT_FALSE(store->in_error_state());
  auto queued = store->Get("queued");
  ASSERT_TRUE(queued.ok() && queued->has_value()) << queued.status();
  EXPECT_EQ((*queued)->value, "y");
  EXPECT_FALSE(store->Get("refused")->has_value());
  ASSERT_TRUE(store->Put("after", "w", store->NextVersion()).ok());
  EXPECT_EQ(ScanAll(*store).size(), 3u);
}

TEST_F(StoreBackgroundTest, CloseGivesUpOnWritesThatStillFail) {
  auto fs = std::make_shared<FullDiskFileSystem>();
  StoreOptions o;
  o.durability = Durability::kWal;
  o.background_queue = 8;
  o.resume_backoff_initial = std::chrono::milliseconds(1);
  o.resume_backoff_max = std::chrono::milliseconds(4);
  o.file_system = fs;
  {
    auto store = OpenBackground(o);
    ASSERT_NE(store, nullptr);
    ASSERT_TRUE(store->Put("kept", "x", store->NextVersion()).ok());
    ASSERT_TRUE(store->Flush().ok());
    fs->wal_full = true;
    fs->sst_full = true;
    ASSERT_TRUE(store->Put("lost", "y", store->NextVersion()).ok());
    // The close must return (logging the loss), not wait for free space.
  }
  auto reopened = MustOpen();
  ASSERT_NE(reopened, nullptr);
  const auto all = ScanAll(*reopened);
  EXPECT_EQ(all.count("kept"), 1u);
  EXPECT_EQ(all.count("lost"), 0u);
}

// ---- Group commit (StoreOptions::deferred_sync) ----

class SyncTrackingWalFile;

// A file system that tracks, for the WAL files, how many bytes were
// appended and how many of them a Sync or Fsync has covered: what survives
// a power loss is what was synced.
class SyncTrackingFileSystem : public WalWrappingFileSystem<SyncTrackingFileSystem, SyncTrackingWalFile> {
 public:
  const char* Name() const override { return "SyncTrackingFileSystem"; }

  std::atomic<uint64_t> appended{0};
  std::atomic<uint64_t> synced{0};
  std::atomic<uint64_t> syncs{0};
  uint64_t unsynced() const { return appended.load() - synced.load(); }
};

class SyncTrackingWalFile : public rocksdb::FSWritableFileOwnerWrapper {
 public:
  SyncTrackingWalFile(std::unique_ptr<rocksdb::FSWritableFile> file, SyncTrackingFileSystem* fs)
      : FSWritableFileOwnerWrapper(std::move(file)), fs_(fs) {}
  rocksdb::IOStatus Append(const rocksdb::Slice& data, const rocksdb::IOOptions& options,
                           rocksdb::IODebugContext* dbg) override {
    Count(data.size());
    return target()->Append(data, options, dbg);
  }
  rocksdb::IOStatus Append(const rocksdb::Slice& data, const rocksdb::IOOptions& options,
                           const rocksdb::DataVerificationInfo& info, rocksdb::IODebugContext* dbg) override {
    Count(data.size());
    return target()->Append(data, options, info, dbg);
  }
  rocksdb::IOStatus Sync(const rocksdb::IOOptions& options, rocksdb::IODebugContext* dbg) override {
    const uint64_t upto = mine_;
    rocksdb::IOStatus s = target()->Sync(options, dbg);
    if (s.ok()) Synced(upto);
    return s;
  }
  rocksdb::IOStatus Fsync(const rocksdb::IOOptions& options, rocksdb::IODebugContext* dbg) override {
    const uint64_t upto = mine_;
    rocksdb::IOStatus s = target()->Fsync(options, dbg);
    if (s.ok()) Synced(upto);
    return s;
  }

 private:
  void Count(size_t n) {
    mine_ += n;
    fs_->appended.fetch_add(n);
  }
  void Synced(uint64_t upto) {
    fs_->syncs.fetch_add(1);
    if (upto > synced_mine_) {
      fs_->synced.fetch_add(upto - synced_mine_);
      synced_mine_ = upto;
    }
  }
  SyncTrackingFileSystem* fs_;
  uint64_t mine_ = 0;
  uint64_t synced_mine_ = 0;
};

class StoreGroupCommitTest : public StoreTest {
 protected:
  std::unique_ptr<Store> OpenTracked(bool deferred) {
    StoreOptions o;
    o.durability = Durability::kSync;
    o.deferred_sync = deferred;
    o.file_system = fs_;
    auto s = Store::Open(dir_.string(), o);
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? std::move(s).value() : nullptr;
  }
  std::shared_ptr<SyncTrackingFileSystem> fs_ = std::make_shared<SyncTrackingFileSystem>();
};

TEST_F(StoreGroupCommitTest, DeferredSyncNeedsSyncDurabilityAndNoBackgroundWrites) {
  StoreOptions o;
  o.deferred_sync = true;
  o.durability = Durability::kWal;
  EXPECT_EQ(Store::Open(dir_.string(), o).status().code(), StatusCode::kInvalidArgument);
  o.durability = Durability::kSync;
  o.background_queue = 8;
  EXPECT_EQ(Store::Open(dir_.string(), o).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(StoreGroupCommitTest, WritesAreDurableOnlyAfterSyncWritesAndOneFsyncCoversThemAll) {
  auto store = OpenTracked(/*deferred=*/true);
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(store->SyncWrites().ok());
  const uint64_t syncs_before = store->wal_syncs();
  for (int i = 0; i < 10; ++i) {
    ASSERT_TRUE(store->Put("k" + std::to_string(i), "v", store->NextVersion()).ok());
  }
  ASSERT_TRUE(store->Delete("k3").ok());
  EXPECT_GT(fs_->unsynced(), 0u) << "a deferred write was synced on its own";
  ASSERT_TRUE(store->SyncWrites().ok());
  EXPECT_EQ(fs_->unsynced(), 0u) << "SyncWrites returned with WAL bytes not synced";
  EXPECT_EQ(store->wal_syncs(), syncs_before + 1);
  EXPECT_EQ(store->synced_writes(), 11u);
  // Nothing written since: no fsync.
  ASSERT_TRUE(store->SyncWrites().ok());
  EXPECT_EQ(store->wal_syncs(), syncs_before + 1);
  store.reset();
  auto reopened = Store::Open(dir_.string(), Durability::kSync);
  ASSERT_TRUE(reopened.ok()) << reopened.status();
  const auto all = ScanAll(**reopened);
  EXPECT_EQ(all.size(), 9u);
  EXPECT_EQ(all.count("k3"), 0u);
}

TEST_F(StoreGroupCommitTest, WithoutDeferredSyncEveryWriteIsSyncedAsItReturns) {
  auto store = OpenTracked(/*deferred=*/false);
  ASSERT_NE(store, nullptr);
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(store->Put("k" + std::to_string(i), "v", store->NextVersion()).ok());
    EXPECT_EQ(fs_->unsynced(), 0u) << "write " << i;
  }
  EXPECT_TRUE(store->SyncWrites().ok());
  EXPECT_EQ(store->wal_syncs(), 0u);
}

TEST_F(StoreGroupCommitTest, ConcurrentCallersEachFindTheirWritesSynced) {
  auto store = OpenTracked(/*deferred=*/true);
  ASSERT_NE(store, nullptr);
  // As the server's pollers do: write under Applier::table_mu_, sync outside
  // it, and only then count the write acknowledged.
  Mutex apply_mu;
  constexpr int kThreads = 4;
  constexpr int kWrites = 50;
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kWrites; ++i) {
        {
          MutexLock lock(apply_mu);
          if (!store->Put("t" + std::to_string(t) + "-" + std::to_string(i), "v", store->NextVersion()).ok()) {
            failures.fetch_add(1);
          }
        }
        if (!store->SyncWrites().ok()) failures.fetch_add(1);
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(fs_->unsynced(), 0u);
  EXPECT_EQ(store->synced_writes(), uint64_t{kThreads} * kWrites);
  EXPECT_LE(store->wal_syncs(), uint64_t{kThreads} * kWrites);
  EXPECT_EQ(ScanAll(*store).size(), size_t{kThreads} * kWrites);
}

// ---- The write-back buffer of background writes ----

class StoreWriteBackTest : public StoreBackgroundTest {
 protected:
  std::unique_ptr<Store> OpenTracked(uint32_t keys) {
    StoreOptions o;
    o.durability = Durability::kWal;  // the WAL shows what was written
    o.background_queue = keys;
    o.background_queue_bytes = 1ULL << 30;
    o.file_system = fs_;
    return OpenBackground(o);
  }
  std::shared_ptr<SyncTrackingFileSystem> fs_ = std::make_shared<SyncTrackingFileSystem>();
};

TEST_F(StoreWriteBackTest, AKeyWrittenAgainReachesRocksDbOnlyWithItsLastWrite) {
  auto store = OpenTracked(64);
  ASSERT_NE(store, nullptr);
  const uint64_t at_open = fs_->appended.load();
  uint64_t last = 0;
  for (int i = 0; i < 1000; ++i) {
    last = store->NextVersion();
    ASSERT_TRUE(store->Put("hot", std::string(1024, static_cast<char>('a' + i % 26)), last).ok());
  }
  // One key is far below the writer's trigger (half of 64 keys): nothing
  // is written yet, whatever the number of writes.
  EXPECT_EQ(fs_->appended.load(), at_open);
  EXPECT_EQ(store->unwritten().writes, 1u);
  EXPECT_EQ(store->unwritten().bytes, 3u + 1024u);
  ASSERT_TRUE(store->Flush().ok());
  EXPECT_EQ(store->unwritten().writes, 0u);
  EXPECT_EQ(store->unwritten().bytes, 0u);
  const uint64_t written = fs_->appended.load() - at_open;
  EXPECT_GT(written, 1024u);
  EXPECT_LT(written, 2 * 1024u) << "more than the last of 1000 writes of one key reached the WAL";
  auto got = store->Get("hot");
  ASSERT_TRUE(got.ok() && got->has_value()) << got.status();
  EXPECT_EQ((*got)->version, last);
  EXPECT_EQ((*got)->value, std::string(1024, static_cast<char>('a' + 999 % 26)));
  // A delete replaces the buffered put of its key just the same.
  ASSERT_TRUE(store->Put("gone", "x", store->NextVersion()).ok());
  ASSERT_TRUE(store->Delete("gone").ok());
  EXPECT_FALSE(store->Get("gone")->has_value());
}

TEST_F(StoreWriteBackTest, TheWriterStartsAtHalfTheBufferWithoutAFlush) {
  auto store = OpenTracked(8);
  ASSERT_NE(store, nullptr);
  const uint64_t at_open = fs_->appended.load();
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(store->Put("k" + std::to_string(i), "v", store->NextVersion()).ok());
  // Time for a wrong write below the trigger to land; it cannot make a correct store fail.
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(fs_->appended.load(), at_open) << "written below the trigger";
  ASSERT_TRUE(store->Put("k3", "v", store->NextVersion()).ok());  // 4 of 8 keys
  EXPECT_TRUE(rkv::testing::WaitFor("the writer's first write", [&] { return fs_->appended.load() > at_open; }));
  EXPECT_EQ(ScanAll(*store).size(), 4u);
}

TEST_F(StoreWriteBackTest, ManyKeysPastTheLimitAllLandAndSurviveACleanClose) {
  std::map<std::string, std::pair<uint64_t, std::string>> expected;
  uint64_t hw = 0;
  {
    auto store = OpenTracked(16);  // far fewer than the keys: the buffer fills, waits and swaps
    ASSERT_NE(store, nullptr);
    for (int i = 0; i < 3000; ++i) {
      const std::string key = "key" + std::to_string(i % 700);
      const uint64_t version = store->NextVersion();
      ASSERT_TRUE(store->Put(key, "value " + std::to_string(i), version).ok());
      expected[key] = {version, "value " + std::to_string(i)};
    }
    hw = store->version_high_water();
  }
  auto reopened = MustOpen();
  ASSERT_NE(reopened, nullptr);
  EXPECT_EQ(reopened->version_high_water(), hw);
  EXPECT_EQ(ScanAll(*reopened), expected);
}

// activity() reports RocksDB's WAL appends as they happen (what
// rkv_server_store_wal_written_bytes_total exports); no write stalls on a
// store this small.
TEST_F(StoreTest, ActivityCountsTheWriteAheadLogAsItGrows) {
  auto store = MustOpen(Durability::kWal);
  ASSERT_NE(store, nullptr);
  const Store::Activity before = store->activity();
  for (int i = 0; i < 50; ++i) {
    ASSERT_TRUE(store->Put("wal-" + std::to_string(i), std::string(1000, 'w'), store->NextVersion()).ok());
  }
  const Store::Activity after = store->activity();
  EXPECT_GE(after.wal_bytes - before.wal_bytes, 50u * 1000u) << "every write's bytes went through the WAL";
  EXPECT_EQ(after.write_stall_micros, 0u);
}

}  // namespace
}  // namespace rkv::server
