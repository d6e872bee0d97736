// The cross-process suite: a real rkv-server process on this machine,
// driven through librkv and kvctl. Runs over the transport named by
// $RKV_TEST_TRANSPORT (tcp on the host; verbs in the SoftRoCE guest, where
// $RKV_TEST_SCALE shrinks the loads for the emulated CPU).
#include <sys/wait.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "rkv/client.h"
#include "tests/run_command.h"
#include "tests/server_process.h"
#include "tests/wait_for.h"

namespace rkv::testing {
namespace {

constexpr uint32_t kMaxValue = 1 << 20;
constexpr uint32_t kMaxKey = 1024;

int Scaled(int n, int minimum = 1) {
  return std::max(minimum, static_cast<int>(std::lround(n * TestScale())));
}

class ServerTest : public ::testing::Test {
 protected:
  void SetUp() override { StartServer({"--memory=536870912"}); }

  void StartServer(std::vector<std::string> flags) {
    token_file_ = dir_.path() + "/token";
    WriteFile(token_file_, "integration-token\n");
    server_ = std::make_unique<ServerProcess>(dir_.path() + "/data", token_file_, std::move(flags));
    const Status s = server_->Start();
    ASSERT_TRUE(s.ok()) << s;
  }

  std::unique_ptr<Client> NewClient(std::string token = "integration-token", int connections = 1) {
    ClientOptions o;
    o.server = server_->address();
    o.token = std::move(token);
    o.transport = TestTransport();
    o.timeout = std::chrono::milliseconds(30000);
    o.connections = connections;
    auto c = Client::Connect(o);
    EXPECT_TRUE(c.ok()) << c.status() << "\nserver log:\n" << server_->Log();
    return c.ok() ? std::move(c).value() : nullptr;
  }

  CommandResult Kvctl(std::vector<std::string> args, const std::string& input = "",
                      const std::string& token_file = "") {
    std::vector<std::string> argv = {RKV_KVCTL_BIN, "--server=" + server_->address(),
                                     "--token_file=" + (token_file.empty() ? token_file_ : token_file),
                                     "--transport=" + TestTransport(), "--timeout=30000"};
    argv.insert(argv.end(), args.begin(), args.end());
    return RunCommand(argv, input);
  }

  TempDir dir_;
  std::string token_file_;
  std::unique_ptr<ServerProcess> server_;
};

// Deterministic pseudo-random bytes for (key, generation).
std::string MakeValue(const std::string& key, uint64_t generation, size_t size) {
  std::string v(size, '\0');
  std::mt19937_64 rng(std::hash<std::string>()(key) ^ (generation * 0x9E3779B97F4A7C15ULL));
  size_t i = 0;
  while (i + 8 <= size) {
    const uint64_t r = rng();
    std::memcpy(v.data() + i, &r, 8);
    i += 8;
  }
  for (; i < size; ++i) v[i] = static_cast<char>(rng());
  return v;
}

// Value sizes from 0 B to the 1 MiB limit: always 0, 1 and exactly the
// limit; otherwise log-uniform over [1 B, 64 KiB] for 99% of keys and over
// [64 KiB, 1 MiB] for 1%. (Log-uniform over the whole range would average
// ~75 KB a key, 750 MB for 10,000 keys; this mix keeps most values small
// and the whole set well under 200 MB while every size band is covered.)
size_t ValueSize(int i, std::mt19937_64& rng) {
  if (i == 0) return 0;
  if (i == 1) return 1;
  if (i == 2) return kMaxValue;
  std::uniform_real_distribution<double> u(0.0, 1.0);
  const bool large = u(rng) < 0.01;
  const double lo = large ? std::log(65536.0) : 0.0;
  const double hi = large ? std::log(double(kMaxValue)) : std::log(65536.0);
  return static_cast<size_t>(std::exp(lo + (hi - lo) * u(rng)));
}

TEST_F(ServerTest, TenThousandKeysRoundTripAtEverySize) {
  auto client = NewClient();
  ASSERT_NE(client, nullptr);
  EXPECT_EQ(client->max_value_bytes(), kMaxValue);
  EXPECT_EQ(client->transport_name(), TestTransport());
  const int n = Scaled(10000, 50);
  std::mt19937_64 rng(1);
  std::vector<std::string> keys;
  std::vector<size_t> sizes;
  size_t total = 0;
  for (int i = 0; i < n; ++i) {
    keys.push_back("key-" + std::to_string(i));
    sizes.push_back(ValueSize(i, rng));
    total += sizes.back();
  }
  ASSERT_LT(total, 200u << 20) << "the value set must stay under 200 MB";
  for (int i = 0; i < n; ++i) {
    auto v = client->Put(keys[i], MakeValue(keys[i], 1, sizes[i]));
    ASSERT_TRUE(v.ok()) << keys[i] << " (" << sizes[i] << " B): " << v.status();
  }
  for (int i = 0; i < n; ++i) {
    auto got = client->Get(keys[i]);
    ASSERT_TRUE(got.ok()) << keys[i] << ": " << got.status();
    ASSERT_EQ(got->size(), sizes[i]) << keys[i];
    ASSERT_TRUE(*got == MakeValue(keys[i], 1, sizes[i])) << keys[i] << " has the wrong bytes";
  }
  // The same keys again through the pipelined MultiGet, with absent keys mixed in.
  for (int start = 0; start < n; start += 64) {
    std::vector<std::string> batch;
    for (int i = start; i < std::min(n, start + 64); ++i) {
      batch.push_back(keys[i]);
      if (i % 16 == 0) batch.push_back("absent-" + std::to_string(i));
    }
    auto results = client->MultiGet(batch);
    ASSERT_EQ(results.size(), batch.size());
    for (size_t j = 0; j < batch.size(); ++j) {
      if (batch[j].rfind("absent-", 0) == 0) {
        EXPECT_EQ(results[j].status().code(), StatusCode::kNotFound) << batch[j];
        continue;
      }
      const int i = std::stoi(batch[j].substr(4));
      ASSERT_TRUE(results[j].ok()) << batch[j] << ": " << results[j].status();
      ASSERT_TRUE(*results[j] == MakeValue(keys[i], 1, sizes[i])) << batch[j];
    }
  }
}

TEST_F(ServerTest, MultiPutAndMultiDeleteAnswerEachItemAndABadItemFailsAlone) {
  auto client = NewClient();
  ASSERT_NE(client, nullptr);
  // Values up to the 1 MiB limit: large ones fill the client's part of the
  // staging ring, which then wraps within one batch.
  const int n = Scaled(300, 40);
  std::vector<std::string> keys;
  std::vector<std::string> values;
  std::mt19937_64 rng(7);
  for (int i = 0; i < n; ++i) {
    keys.push_back("mp-" + std::to_string(i));
    values.push_back(MakeValue(keys.back(), 1, i % 50 == 0 ? kMaxValue : ValueSize(i + 3, rng)));
  }
  const std::string too_long(kMaxValue + 1, 'x');
  std::vector<KeyValueView> items;
  for (int i = 0; i < n; ++i) {
    items.push_back(KeyValueView{keys[i], values[i]});
    if (i == 5) items.push_back(KeyValueView{"", "empty key"});
    if (i == 9) items.push_back(KeyValueView{"too-long-value", too_long});
  }
  const std::vector<StatusOr<uint64_t>> put = client->MultiPut(items);
  ASSERT_EQ(put.size(), items.size());
  uint64_t last_version = 0;
  for (size_t j = 0; j < items.size(); ++j) {
    if (items[j].key.empty() || items[j].key == "too-long-value") {
      EXPECT_EQ(put[j].status().code(), StatusCode::kInvalidArgument) << j;
      continue;
    }
    ASSERT_TRUE(put[j].ok()) << items[j].key << ": " << put[j].status();
    EXPECT_GT(*put[j], last_version) << "one server applies a batch in order";
    last_version = *put[j];
  }
  EXPECT_EQ(client->Get("too-long-value").status().code(), StatusCode::kNotFound);
  for (int start = 0; start < n; start += 64) {
    std::vector<std::string> batch(keys.begin() + start, keys.begin() + std::min(n, start + 64));
    auto got = client->MultiGet(batch);
    for (size_t j = 0; j < batch.size(); ++j) {
      ASSERT_TRUE(got[j].ok()) << batch[j] << ": " << got[j].status();
      ASSERT_TRUE(*got[j] == values[start + j]) << batch[j] << " has the wrong bytes";
    }
  }
  // Two items of one key: the later one's value stays.
  const KeyValueView twice[] = {{"dup", "first"}, {"dup", "second"}};
  const auto dup = client->MultiPut(twice);
  ASSERT_TRUE(dup[0].ok() && dup[1].ok());
  EXPECT_LT(*dup[0], *dup[1]);
  const StatusOr<std::string> dup_value = client->Get("dup");
  ASSERT_TRUE(dup_value.ok()) << dup_value.status();
  EXPECT_EQ(*dup_value, "second");

  std::vector<std::string> doomed(keys.begin(), keys.begin() + 10);
  doomed.push_back("never-stored");
  const std::vector<Status> deleted = client->MultiDelete(doomed);
  ASSERT_EQ(deleted.size(), doomed.size());
  for (size_t j = 0; j + 1 < doomed.size(); ++j) EXPECT_TRUE(deleted[j].ok()) << doomed[j] << ": " << deleted[j];
  EXPECT_EQ(deleted.back().code(), StatusCode::kNotFound);
  EXPECT_EQ(client->Get(keys[0]).status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(client->Get(keys[10]).ok());
}

TEST_F(ServerTest, BinaryKeysAndValues) {
  auto client = NewClient();
  ASSERT_NE(client, nullptr);
  std::vector<std::string> keys;
  for (int b = 0; b < 256; ++b) keys.push_back(std::string(1, static_cast<char>(b)));
  keys.push_back(std::string("a\0b", 3));
  keys.push_back(std::string("a\0c", 3));
  keys.push_back(std::string(kMaxKey, '\xff'));
  std::string all_bytes;
  for (int b = 0; b < 256; ++b) all_bytes += static_cast<char>(b);
  for (size_t i = 0; i < keys.size(); ++i) {
    ASSERT_TRUE(client->Put(keys[i], all_bytes + keys[i]).ok()) << i;
  }
  for (size_t i = 0; i < keys.size(); ++i) {
    auto got = client->Get(keys[i]);
    ASSERT_TRUE(got.ok()) << i << ": " << got.status();
    EXPECT_EQ(*got, all_bytes + keys[i]) << i;
  }
}

// MultiGet over views of keys in one buffer of the caller's: the same
// answers as over strings, absent and refused keys included, and twice
// (the second time from the location cache).
TEST_F(ServerTest, MultiGetOverKeyViewsAnswersAsOverStrings) {
  auto client = NewClient();
  ASSERT_NE(client, nullptr);
  std::string buffer;
  std::vector<std::pair<size_t, size_t>> spans;  // offset, length into buffer
  for (int i = 0; i < 300; ++i) {
    const std::string key = (i % 3 == 0 ? std::string(40, 'L') : std::string()) + "view-" + std::to_string(i);
    if (i % 10 != 7) {  // every tenth absent
      ASSERT_TRUE(client->Put(key, "v" + key).ok()) << key;
    }
    spans.emplace_back(buffer.size(), key.size());
    buffer += key;
  }
  spans.emplace_back(buffer.size(), 0);  // an empty key: refused alone
  std::vector<std::string_view> views;
  for (const auto& [offset, length] : spans) views.emplace_back(buffer.data() + offset, length);
  const std::vector<std::string> strings(views.begin(), views.end());
  const auto expected = client->MultiGet(strings);
  for (int round = 0; round < 2; ++round) {
    const auto got = client->MultiGet(std::span<const std::string_view>(views));
    ASSERT_EQ(got.size(), views.size());
    for (size_t i = 0; i < views.size(); ++i) {
      ASSERT_EQ(got[i].status().code(), expected[i].status().code()) << views[i] << ": " << got[i].status();
      if (i + 1 == views.size()) {
        EXPECT_EQ(got[i].status().code(), StatusCode::kInvalidArgument);
      } else if (i % 10 == 7) {
        EXPECT_EQ(got[i].status().code(), StatusCode::kNotFound) << views[i];
      } else {
        ASSERT_TRUE(got[i].ok()) << views[i] << ": " << got[i].status();
        EXPECT_EQ(*got[i], "v" + std::string(views[i]));
      }
    }
  }
  EXPECT_GT(client->LocationCacheStats().hits, 0u);
}

// A PUT's reply names the block the write went to, which the writer
// caches: its next GET of the key reads that block alone (docs/design.md
// §4.4). Another client's write supersedes the block: the cached READ is
// refused and the ordinary path answers with the other value.
TEST_F(ServerTest, AGetAfterTheClientsOwnPutReadsTheNewBlockAlone) {
  auto client = NewClient();
  auto other = NewClient();
  ASSERT_NE(client, nullptr);
  ASSERT_NE(other, nullptr);
  auto v1 = client->Put("own", "first");
  ASSERT_TRUE(v1.ok()) << v1.status();
  auto got = client->GetVersioned("own");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->value, "first");
  EXPECT_EQ(got->version, *v1);
  LocationCacheStatsInfo s = client->LocationCacheStats();
  EXPECT_EQ(s.hits, 1u);
  EXPECT_EQ(s.misses, 0u);

  auto v2 = client->Put("own", std::string(3000, 's'));  // a block of another size
  ASSERT_TRUE(v2.ok()) << v2.status();
  got = client->GetVersioned("own");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->value, std::string(3000, 's'));
  EXPECT_EQ(got->version, *v2);
  s = client->LocationCacheStats();
  EXPECT_EQ(s.hits, 2u);
  EXPECT_EQ(s.misses, 0u);

  auto v3 = other->Put("own", "theirs");
  ASSERT_TRUE(v3.ok()) << v3.status();
  got = client->GetVersioned("own");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->value, "theirs");
  EXPECT_EQ(got->version, *v3);
  s = client->LocationCacheStats();
  EXPECT_EQ(s.fallbacks, 1u);
  EXPECT_EQ(s.hits, 2u);

  // A DELETE leaves no entry: the key is not found the ordinary way.
  ASSERT_TRUE(client->Delete("own").ok());
  EXPECT_EQ(client->Get("own").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(client->LocationCacheStats().hits, 2u);
}

// A key the location cache does not hold is asked of the server over tcp
// (one request, the block in the reply; design §4.1) and READ over verbs:
// either way the answer is the current record, and the key is cached.
TEST_F(ServerTest, KeysTheCacheDoesNotHoldAreAnsweredAndThenCached) {
  auto writer = NewClient();
  auto reader = NewClient();
  ASSERT_NE(writer, nullptr);
  ASSERT_NE(reader, nullptr);
  const std::string big(10'000, 'b');  // a block over a lookup's 4 KiB landing slot
  auto v_small = writer->Put("small", "value");
  auto v_big = writer->Put("big", big);
  ASSERT_TRUE(v_small.ok()) << v_small.status();
  ASSERT_TRUE(v_big.ok()) << v_big.status();

  auto got = reader->GetVersioned("small");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->value, "value");
  EXPECT_EQ(got->version, *v_small);
  got = reader->GetVersioned("big");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->value, big);
  EXPECT_EQ(got->version, *v_big);
  EXPECT_EQ(reader->Get("absent").status().code(), StatusCode::kNotFound);
  LocationCacheStatsInfo s = reader->LocationCacheStats();
  EXPECT_EQ(s.misses, 3u);
  EXPECT_EQ(s.hits, 0u);

  // Now cached: one READ of the block each.
  got = reader->GetVersioned("small");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->value, "value");
  ASSERT_TRUE(reader->Get("big").ok());
  s = reader->LocationCacheStats();
  EXPECT_EQ(s.hits, 2u);

  // Rewritten by another client: the cached block is refused, and the
  // key's new record answers.
  auto v_new = writer->Put("small", "newer");
  ASSERT_TRUE(v_new.ok()) << v_new.status();
  got = reader->GetVersioned("small");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->value, "newer");
  EXPECT_EQ(got->version, *v_new);
  EXPECT_EQ(reader->LocationCacheStats().fallbacks, 1u);

  // A batch of new, cached and absent keys.
  std::vector<std::string> keys;
  for (int i = 0; i < 100; ++i) {
    keys.push_back("batch-" + std::to_string(i));
    if (i % 3 != 0) {
      ASSERT_TRUE(writer->Put(keys.back(), "v" + std::to_string(i)).ok());
    }
  }
  keys.push_back("small");
  auto fresh = NewClient();
  ASSERT_NE(fresh, nullptr);
  for (int pass = 0; pass < 2; ++pass) {
    std::vector<StatusOr<std::string>> values = fresh->MultiGet(keys);
    ASSERT_EQ(values.size(), keys.size());
    for (int i = 0; i < 100; ++i) {
      if (i % 3 == 0) {
        EXPECT_EQ(values[i].status().code(), StatusCode::kNotFound) << keys[i];
      } else {
        ASSERT_TRUE(values[i].ok()) << keys[i] << ": " << values[i].status();
        EXPECT_EQ(*values[i], "v" + std::to_string(i));
      }
    }
    ASSERT_TRUE(values[100].ok()) << values[100].status();
    EXPECT_EQ(*values[100], "newer");
  }
  EXPECT_GE(fresh->LocationCacheStats().hits, 67u) << "the second pass reads the cached blocks";
}

TEST_F(ServerTest, ReplaceAndDelete) {
  auto client = NewClient();
  ASSERT_NE(client, nullptr);
  auto v1 = client->Put("k", "one");
  ASSERT_TRUE(v1.ok()) << v1.status();
  auto v2 = client->Put("k", std::string(5000, 'x'));
  ASSERT_TRUE(v2.ok());
  EXPECT_GT(*v2, *v1) << "versions of a key grow";
  auto got = client->GetVersioned("k");
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->value, std::string(5000, 'x'));
  EXPECT_EQ(got->version, *v2);
  ASSERT_TRUE(client->Delete("k").ok());
  EXPECT_EQ(client->Get("k").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(client->Delete("k").code(), StatusCode::kNotFound);
  auto v3 = client->Put("k", "again");
  ASSERT_TRUE(v3.ok());
  EXPECT_GT(*v3, *v2) << "a key put after a delete still gets a higher version";
  EXPECT_EQ(client->Get("never-written").status().code(), StatusCode::kNotFound);
}

TEST_F(ServerTest, GetIntoACallersStringReusesItsMemory) {
  auto client = NewClient();
  ASSERT_NE(client, nullptr);
  auto big = client->Put("big", std::string(3000, 'b'));
  ASSERT_TRUE(big.ok()) << big.status();
  ASSERT_TRUE(client->Put("small", "s").ok());
  std::string value = "left over";
  uint64_t version = 0;
  ASSERT_TRUE(client->Get("big", &value, &version).ok());
  EXPECT_EQ(value, std::string(3000, 'b'));
  EXPECT_EQ(version, *big);
  const char* memory = value.data();
  ASSERT_TRUE(client->Get("small", &value).ok());
  EXPECT_EQ(value, "s") << "a shorter value replaces the longer one entirely";
  EXPECT_EQ(value.data(), memory) << "the string's memory is reused";
  const Status missing = client->Get("absent", &value);
  EXPECT_EQ(missing.code(), StatusCode::kNotFound) << missing;
  EXPECT_TRUE(value.empty()) << "an error leaves no stale value behind";
  EXPECT_EQ(client->Get(std::string(), &value).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(value.empty());
  EXPECT_EQ(client->Get("big", nullptr).code(), StatusCode::kInvalidArgument);
}

// Values that say whose and which they are: "<key>|<generation>|" then
// bytes derived from both, so a torn value or another key's value fails.
std::string Tagged(const std::string& key, uint64_t gen, size_t size) {
  std::string head = key + "|" + std::to_string(gen) + "|";
  return head + MakeValue(key, gen, size);
}

bool CheckTagged(const std::string& key, const std::string& value, uint64_t* gen) {
  if (value.rfind(key + "|", 0) != 0) return false;
  const size_t bar = value.find('|', key.size() + 1);
  if (bar == std::string::npos) return false;
  *gen = std::stoull(value.substr(key.size() + 1, bar - key.size() - 1));
  const std::string body = value.substr(bar + 1);
  return body == MakeValue(key, *gen, body.size());
}

TEST_F(ServerTest, GetsRacingPutsNeverSeeTornOrForeignValues) {
  auto writer_client = NewClient("integration-token", 2);
  auto reader_client = NewClient("integration-token", 2);
  ASSERT_NE(writer_client, nullptr);
  ASSERT_NE(reader_client, nullptr);
  const std::vector<std::string> keys = {"race-a", "race-b"};
  for (const auto& k : keys) ASSERT_TRUE(writer_client->Put(k, Tagged(k, 0, 10)).ok());

  const int writes = Scaled(3000, 100);
  std::atomic<bool> done{false};
  std::atomic<int> bad{0};
  std::atomic<long> reads{0};
  std::string first_bad;
  std::mutex bad_mu;

  std::vector<std::thread> writers;
  for (const auto& k : keys) {
    writers.emplace_back([&, k] {
      std::mt19937_64 rng(std::hash<std::string>()(k));
      for (int g = 1; g <= writes; ++g) {
        // Sizes that cross size classes, so heap blocks are recycled.
        const size_t size = std::uniform_int_distribution<size_t>(0, 20000)(rng);
        auto v = writer_client->Put(k, Tagged(k, g, size));
        if (!v.ok()) {
          std::lock_guard<std::mutex> l(bad_mu);
          if (first_bad.empty()) first_bad = "put failed: " + v.status().ToString();
          bad++;
        }
      }
    });
  }
  std::vector<std::thread> readers;
  for (int r = 0; r < 2; ++r) {
    readers.emplace_back([&, r] {
      const std::string& k = keys[r];
      uint64_t last_gen = 0;
      uint64_t last_version = 0;
      while (!done.load()) {
        auto got = reader_client->GetVersioned(k);
        reads++;
        uint64_t gen = 0;
        std::string problem;
        if (!got.ok()) {
          problem = "get failed: " + got.status().ToString();
        } else if (!CheckTagged(k, got->value, &gen)) {
          problem = "torn or foreign value for " + k;
        } else if (gen < last_gen || got->version < last_version) {
          problem = "went back in time on " + k;
        }
        if (!problem.empty()) {
          std::lock_guard<std::mutex> l(bad_mu);
          if (first_bad.empty()) first_bad = problem;
          bad++;
          continue;
        }
        last_gen = gen;
        last_version = got->version;
      }
    });
  }
  for (auto& t : writers) t.join();
  done = true;
  for (auto& t : readers) t.join();
  EXPECT_EQ(bad.load(), 0) << first_bad;
  EXPECT_GT(reads.load(), 0);
  for (const auto& k : keys) {
    auto got = reader_client->Get(k);
    ASSERT_TRUE(got.ok());
    uint64_t gen = 0;
    ASSERT_TRUE(CheckTagged(k, *got, &gen));
    EXPECT_EQ(gen, static_cast<uint64_t>(writes)) << "the last acknowledged write wins";
  }
}

// ---- GET into the caller's memory (Client::RegisterBuffer, GetInto).

std::string ValueOf(std::span<const std::byte> memory) {
  return std::string(reinterpret_cast<const char*>(memory.data()), memory.size());
}

// A registered buffer gets the value by the READ itself, on a location
// cache miss and on a hit, whatever room the value leaves (the block's
// padding goes back to the client's buffer when it does not fit): the
// client copies nothing.
TEST_F(ServerTest, GetIntoARegisteredBufferReadsTheValueInPlace) {
  auto client = NewClient();
  ASSERT_NE(client, nullptr);
  const std::vector<size_t> sizes = {0, 1, 39, 40, 100, 1000, 5000, 70000};
  std::map<std::string, std::string> values;
  for (size_t size : sizes) {
    const std::string key = "into-" + std::to_string(size);
    values[key] = Tagged(key, 1, size);
    ASSERT_TRUE(client->Put(key, values[key]).ok());
  }
  std::vector<std::byte> memory(256 * 1024, std::byte{0x5A});
  StatusOr<BufferHandle> handle = client->RegisterBuffer(memory);
  ASSERT_TRUE(handle.ok()) << handle.status();
  const ClientCounters before = client->Counters();
  int calls = 0;
  for (const auto& [key, value] : values) {
    for (const size_t room : {value.size(), value.size() + 64, size_t{100000}}) {
      for (int pass = 0; pass < 2; ++pass) {  // a cache miss, then a hit
        const std::span<std::byte> out = std::span<std::byte>(memory).subspan(1000, room);
        GetIntoResult result;
        const Status s = client->GetInto(key, out, &result);
        ASSERT_TRUE(s.ok()) << key << " into " << room << " bytes: " << s;
        ++calls;
        EXPECT_EQ(result.value_bytes, value.size()) << key;
        EXPECT_EQ(ValueOf(out.first(result.value_bytes)), value) << key << " into " << room << " bytes";
        EXPECT_TRUE(result.in_place) << key << " into " << room << " bytes";
        EXPECT_GT(result.version, 0u);
      }
    }
  }
  EXPECT_EQ(memory[999], std::byte{0x5A}) << "nothing is written before the buffer";
  const ClientCounters after = client->Counters();
  EXPECT_EQ(after.get_into_in_place - before.get_into_in_place, static_cast<uint64_t>(calls));
  EXPECT_EQ(after.get_into_copied, before.get_into_copied) << "no value was copied";
  EXPECT_GT(after.location_cache.hits, before.location_cache.hits) << "the second pass hit the cache";
  ASSERT_TRUE(client->UnregisterBuffer(*handle).ok());
}

TEST_F(ServerTest, GetIntoRefusesWhatDoesNotFitAndCopiesIntoUnregisteredMemory) {
  auto client = NewClient();
  ASSERT_NE(client, nullptr);
  const std::string value = Tagged("fit", 1, 3000);
  ASSERT_TRUE(client->Put("fit", value).ok());
  std::vector<std::byte> memory(8192);
  // Unregistered: one copy.
  GetIntoResult result;
  ASSERT_TRUE(client->GetInto("fit", memory, &result).ok());
  EXPECT_EQ(ValueOf(std::span<std::byte>(memory).first(result.value_bytes)), value);
  EXPECT_FALSE(result.in_place);
  EXPECT_EQ(client->Counters().get_into_copied, 1u);
  // Too small, registered or not: RESOURCE_EXHAUSTED with the size needed.
  for (const bool registered : {false, true}) {
    std::optional<BufferHandle> handle;
    if (registered) {
      StatusOr<BufferHandle> h = client->RegisterBuffer(memory);
      ASSERT_TRUE(h.ok()) << h.status();
      handle = *h;
    }
    for (int pass = 0; pass < 2; ++pass) {
      GetIntoResult small;
      const Status s = client->GetInto("fit", std::span<std::byte>(memory).first(value.size() - 1), &small);
      EXPECT_EQ(s.code(), StatusCode::kResourceExhausted) << s;
      EXPECT_EQ(small.value_bytes, value.size()) << "the size the buffer needs";
      StatusOr<size_t> none = client->GetInto("fit", std::span<std::byte>());
      EXPECT_EQ(none.status().code(), StatusCode::kResourceExhausted) << none.status();
    }
    if (handle) {
      ASSERT_TRUE(client->UnregisterBuffer(*handle).ok());
    }
  }
  EXPECT_EQ(client->GetInto("absent", memory).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(client->GetInto("", memory).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(client->GetInto("fit", memory, nullptr).code(), StatusCode::kInvalidArgument);
  // After UnregisterBuffer the memory is ordinary memory again.
  ASSERT_TRUE(client->GetInto("fit", memory, &result).ok());
  EXPECT_FALSE(result.in_place);
}

TEST_F(ServerTest, RegisterBufferRefusesEmptyAndOverlappingMemory) {
  auto client = NewClient();
  ASSERT_NE(client, nullptr);
  std::vector<std::byte> memory(4096);
  const std::span<std::byte> all(memory);
  EXPECT_EQ(client->RegisterBuffer(std::span<std::byte>()).status().code(), StatusCode::kInvalidArgument);
  StatusOr<BufferHandle> middle = client->RegisterBuffer(all.subspan(1024, 1024));
  ASSERT_TRUE(middle.ok()) << middle.status();
  EXPECT_EQ(client->RegisterBuffer(all.subspan(0, 1025)).status().code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(client->RegisterBuffer(all.subspan(2047, 10)).status().code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(client->RegisterBuffer(all).status().code(), StatusCode::kAlreadyExists);
  StatusOr<BufferHandle> before = client->RegisterBuffer(all.subspan(0, 1024));
  StatusOr<BufferHandle> after = client->RegisterBuffer(all.subspan(2048));
  ASSERT_TRUE(before.ok()) << before.status();
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_TRUE(client->UnregisterBuffer(*middle).ok());
  EXPECT_EQ(client->UnregisterBuffer(*middle).code(), StatusCode::kNotFound);
  EXPECT_TRUE(client->RegisterBuffer(all.subspan(1024, 1024)).ok()) << "the freed range can be registered again";
}

TEST_F(ServerTest, MultiGetIntoFillsEachKeysBuffer) {
  auto client = NewClient("integration-token", 2);
  ASSERT_NE(client, nullptr);
  const int n = Scaled(200, 20);
  std::vector<std::string> keys;
  for (int i = 0; i < n; ++i) {
    keys.push_back("mgi-" + std::to_string(i));
    if (i % 7 != 3) {
      ASSERT_TRUE(client->Put(keys.back(), Tagged(keys.back(), 1, 10 * i)).ok());
    }
  }
  std::vector<std::byte> memory(static_cast<size_t>(n) * 4096);
  ASSERT_TRUE(client->RegisterBuffer(memory).ok());
  std::vector<std::span<std::byte>> outs;
  for (int i = 0; i < n; ++i) {
    // Key 5's buffer is one byte short.
    const size_t room = i == 5 ? 10 * 5 - 1 + keys[5].size() + 3 : 4096;
    outs.push_back(std::span<std::byte>(memory).subspan(static_cast<size_t>(i) * 4096, room));
  }
  std::vector<GetIntoResult> results(keys.size());
  const std::vector<Status> got = client->MultiGetInto(keys, outs, results);
  ASSERT_EQ(got.size(), keys.size());
  for (int i = 0; i < n; ++i) {
    const std::string want = Tagged(keys[i], 1, 10 * i);
    if (i % 7 == 3) {
      EXPECT_EQ(got[i].code(), StatusCode::kNotFound) << keys[i];
    } else if (outs[i].size() < want.size()) {
      EXPECT_EQ(got[i].code(), StatusCode::kResourceExhausted) << keys[i] << ": " << got[i];
      EXPECT_EQ(results[i].value_bytes, want.size());
    } else {
      ASSERT_TRUE(got[i].ok()) << keys[i] << ": " << got[i];
      EXPECT_EQ(ValueOf(outs[i].first(results[i].value_bytes)), want) << keys[i];
      EXPECT_TRUE(results[i].in_place) << keys[i];
    }
  }
  EXPECT_EQ(client->Counters().get_into_copied, 0u);
  // Overlapping buffers and mismatched sizes are refused for every key.
  outs[1] = std::span<std::byte>(memory).subspan(100, 4096);
  for (const Status& s : client->MultiGetInto(keys, outs, results)) {
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s;
  }
  for (const Status& s : client->MultiGetInto(keys, std::span<const std::span<std::byte>>(outs).first(1), results)) {
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s;
  }
}

// The checksum checked in place catches a block torn by a concurrent PUT,
// as it does in the client's own buffer: a GetInto racing PUTs of the key
// returns only whole values of that key, never going back in time.
TEST_F(ServerTest, GetIntoRacingPutsNeverSeesTornValues) {
  auto writer = NewClient();
  auto reader = NewClient();
  ASSERT_NE(writer, nullptr);
  ASSERT_NE(reader, nullptr);
  const std::string key = "into-race";
  ASSERT_TRUE(writer->Put(key, Tagged(key, 0, 10)).ok());
  std::vector<std::byte> memory(32768);
  ASSERT_TRUE(reader->RegisterBuffer(memory).ok());
  std::atomic<bool> done{false};
  std::thread writes([&] {
    std::mt19937_64 rng(11);
    const int n = Scaled(2000, 100);
    for (int g = 1; g <= n; ++g) {
      const size_t size = std::uniform_int_distribution<size_t>(0, 20000)(rng);
      EXPECT_TRUE(writer->Put(key, Tagged(key, g, size)).ok());
    }
    done = true;
  });
  uint64_t last_gen = 0;
  long reads = 0;
  std::string problem;
  while (!done.load() && problem.empty()) {
    GetIntoResult result;
    const Status s = reader->GetInto(key, memory, &result);
    ++reads;
    uint64_t gen = 0;
    if (!s.ok()) {
      problem = "GetInto failed: " + s.ToString();
    } else if (!CheckTagged(key, ValueOf(std::span<std::byte>(memory).first(result.value_bytes)), &gen)) {
      problem = "a torn or foreign value";
    } else if (gen < last_gen) {
      problem = "went back in time";
    }
    last_gen = std::max(last_gen, gen);
  }
  writes.join();
  EXPECT_TRUE(problem.empty()) << problem << " after " << reads << " reads";
  EXPECT_GT(reads, 0);
  EXPECT_EQ(reader->Counters().get_into_copied, 0u);
}

TEST_F(ServerTest, Kill9LosesNoAcknowledgedWrite) {
  std::map<std::string, std::optional<std::string>> acked;  // nullopt: deleted
  uint64_t epoch_before = 0;
  {
    auto client = NewClient();
    ASSERT_NE(client, nullptr);
    epoch_before = client->server_epoch();
    const int n = Scaled(2000, 100);
    std::mt19937_64 rng(3);
    for (int i = 0; i < n; ++i) {
      const std::string key = "durable-" + std::to_string(rng() % (n / 2));
      if (i % 10 == 9 && acked.count(key) && acked[key]) {
        ASSERT_TRUE(client->Delete(key).ok());
        acked[key] = std::nullopt;
        continue;
      }
      const std::string value = MakeValue(key, i, rng() % 3000);
      ASSERT_TRUE(client->Put(key, value).ok());
      acked[key] = value;
    }
  }
  server_->Kill9();
  ASSERT_TRUE(server_->Start().ok()) << server_->Log();
  auto client = NewClient();
  ASSERT_NE(client, nullptr);
  EXPECT_NE(client->server_epoch(), epoch_before) << "a restart is a new epoch";
  for (const auto& [key, value] : acked) {
    auto got = client->Get(key);
    if (!value) {
      EXPECT_EQ(got.status().code(), StatusCode::kNotFound) << key << " was deleted";
      continue;
    }
    ASSERT_TRUE(got.ok()) << key << ": " << got.status();
    EXPECT_TRUE(*got == *value) << key << " lost its last acknowledged value";
  }
}

TEST_F(ServerTest, Kill9UnderLoadKeepsEveryAcknowledgedPut) {
  auto client = NewClient();
  ASSERT_NE(client, nullptr);
  std::atomic<int> last_acked{-1};
  std::atomic<bool> stop{false};
  std::thread writer([&] {
    for (int i = 0; !stop.load(); ++i) {
      auto v = client->Put("load-" + std::to_string(i), MakeValue("load", i, 100 + i % 900),
                           CallOptions{std::chrono::milliseconds(2000)});
      if (!v.ok()) break;
      last_acked = i;
    }
  });
  // Load before the kill (the check below needs at least one acknowledged PUT).
  WaitFor("PUTs acknowledged before the kill", [&] { return last_acked.load() >= Scaled(500, 20); });
  server_->Kill9();
  stop = true;
  writer.join();
  const int acked = last_acked.load();
  ASSERT_GE(acked, 0);
  ASSERT_TRUE(server_->Start().ok()) << server_->Log();
  auto after = NewClient();
  ASSERT_NE(after, nullptr);
  for (int i = 0; i <= acked; ++i) {
    auto got = after->Get("load-" + std::to_string(i));
    ASSERT_TRUE(got.ok()) << "acknowledged put " << i << " of " << acked << " lost: " << got.status();
    ASSERT_TRUE(*got == MakeValue("load", i, 100 + i % 900)) << i;
  }
}

TEST_F(ServerTest, SigtermShutsDownCleanlyAndKeepsData) {
  {
    auto client = NewClient();
    ASSERT_NE(client, nullptr);
    ASSERT_TRUE(client->Put("kept", "value").ok());
  }
  const int wstatus = server_->Terminate();
  EXPECT_TRUE(WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0) << server_->Log();
  ASSERT_TRUE(server_->Start().ok());
  auto client = NewClient();
  ASSERT_NE(client, nullptr);
  auto got = client->Get("kept");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, "value");
}

TEST_F(ServerTest, OversizeKeyAndValueAreRejectedClearly) {
  auto client = NewClient();
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(client->Put("keep", "me").ok());
  auto big_key = client->Put(std::string(kMaxKey + 1, 'k'), "v");
  EXPECT_EQ(big_key.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(big_key.status().message().find("1024"), std::string::npos) << big_key.status();
  auto big_value = client->Put("k", std::string(kMaxValue + 1, 'v'));
  EXPECT_EQ(big_value.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(big_value.status().message().find("1048576"), std::string::npos) << big_value.status();
  EXPECT_EQ(client->Put("", "v").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(client->Get(std::string(kMaxKey + 1, 'k')).status().code(), StatusCode::kInvalidArgument);
  // Nothing was lost or changed.
  EXPECT_EQ(client->Get("k").status().code(), StatusCode::kNotFound);
  auto kept = client->Get("keep");
  ASSERT_TRUE(kept.ok());
  EXPECT_EQ(*kept, "me");

  auto r = Kvctl({"put", "k"}, std::string(kMaxValue + 1, 'v'));
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("INVALID_ARGUMENT"), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << "one-line error: " << r.err;
}

TEST_F(ServerTest, WrongTokenIsRefusedAndOthersAreServed) {
  ClientOptions o;
  o.server = server_->address();
  o.token = "not-the-token";
  o.transport = TestTransport();
  o.timeout = std::chrono::milliseconds(10000);
  auto bad = Client::Connect(o);
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(bad.status().code() == StatusCode::kPermissionDenied ||
              bad.status().code() == StatusCode::kUnauthenticated)
      << bad.status();

  const std::string wrong_file = dir_.path() + "/wrong-token";
  WriteFile(wrong_file, "wrong\n");
  auto r = Kvctl({"get", "x"}, "", wrong_file);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("token"), std::string::npos) << r.err;

  auto good = NewClient();
  ASSERT_NE(good, nullptr);
  ASSERT_TRUE(good->Put("after", "bad clients").ok());
}

TEST_F(ServerTest, KvctlCommandsAndExitCodes) {
  auto r = Kvctl({"put", "greeting", "hello world"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = Kvctl({"get", "greeting"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "hello world");
  r = Kvctl({"get", "missing"});
  EXPECT_EQ(r.exit_code, 1);
  r = Kvctl({"--output=json", "get", "greeting"});
  ASSERT_EQ(r.exit_code, 0);
  EXPECT_NE(r.out.find("\"value\":\"hello world\""), std::string::npos) << r.out;

  // Binary-safe through stdin.
  std::string binary;
  for (int i = 0; i < 70000; ++i) binary += static_cast<char>((i * 131) & 0xFF);
  r = Kvctl({"put", "blob", "-"}, binary);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = Kvctl({"get", "blob"});
  ASSERT_EQ(r.exit_code, 0);
  EXPECT_TRUE(r.out == binary) << "got " << r.out.size() << " bytes";

  const std::string file = dir_.path() + "/value.bin";
  WriteFile(file, binary.substr(0, 1234));
  r = Kvctl({"--value_file=" + file, "put", "fromfile"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = Kvctl({"get", "fromfile"});
  EXPECT_TRUE(r.out == binary.substr(0, 1234));

  r = Kvctl({"del", "greeting"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  r = Kvctl({"del", "greeting"});
  EXPECT_EQ(r.exit_code, 1);
  // A usage error: one line saying what is wrong, then where to look, not
  // the whole usage.
  const auto expect_usage_error = [&](std::vector<std::string> args, const std::string& what) {
    SCOPED_TRACE(what);
    const CommandResult u = Kvctl(std::move(args));
    EXPECT_EQ(u.exit_code, 2);
    const size_t first_newline = u.err.find('\n');
    ASSERT_NE(first_newline, std::string::npos) << u.err;
    EXPECT_NE(u.err.substr(0, first_newline).find(what), std::string::npos) << u.err;
    EXPECT_EQ(u.err.substr(first_newline + 1), "run 'kvctl --help' for usage\n") << u.err;
  };
  expect_usage_error({"frobnicate", "x"}, "unknown command 'frobnicate'");
  expect_usage_error({"get"}, "missing KEY");
  expect_usage_error({"--output=xml", "get", "k"}, "--output must be text or json");
  expect_usage_error({"--timeout=soon", "get", "k"}, "illegal value 'soon'");
  expect_usage_error({"--no_such_flag", "get", "k"}, "unknown command line flag 'no_such_flag'");
  expect_usage_error({"members"}, "needs --coordinator");
  expect_usage_error({"shards"}, "shards: needs --coordinator");
  expect_usage_error({"where", "k"}, "where: needs --coordinator");
  expect_usage_error({"where"}, "where: missing KEY");
  expect_usage_error({"shards", "extra"}, "shards: takes no arguments (1 given)");

  expect_usage_error({"--if_absent", "--if_version=3", "put", "k", "v"}, "--if_version or --if_absent, not both");
  expect_usage_error({"--if_absent", "get", "k"}, "--if_absent is put's");
  expect_usage_error({"--if_version=3", "get", "k"}, "--if_version is put's and del's");
  expect_usage_error({"--versioned", "put", "k", "v"}, "--versioned is get's");

  // Compare-and-set from the shell: get --versioned gives the version that
  // put --if_version takes; a condition that does not hold exits 1 and
  // writes nothing.
  r = Kvctl({"--if_absent", "put", "cas", "first"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string created = r.out.substr(0, r.out.find('\n'));
  r = Kvctl({"--if_absent", "put", "cas", "second"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("FAILED_PRECONDITION: the key exists (version " + created + ")"), std::string::npos) << r.err;
  r = Kvctl({"--versioned", "get", "cas"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, created + "\nfirst");
  r = Kvctl({"--if_version=" + created, "put", "cas", "second"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = Kvctl({"--if_version=" + created, "put", "cas", "third"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  r = Kvctl({"get", "cas"});
  EXPECT_EQ(r.out, "second");
  // Compare-and-delete likewise: a stale version exits 1 and keeps the key.
  r = Kvctl({"--if_version=" + created, "del", "cas"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  r = Kvctl({"--versioned", "get", "cas"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = Kvctl({"--if_version=" + r.out.substr(0, r.out.find('\n')), "del", "cas"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(Kvctl({"get", "cas"}).exit_code, 1) << "deleted";

  r = RunCommand({RKV_KVCTL_BIN, "--help"});
  EXPECT_EQ(r.exit_code, 0);
  const std::string help = r.out + r.err;
  for (const char* word : {"get", "put", "del", "members", "shards", "where KEY", "stats", "--server", "--token_file",
                           "--transport", "--timeout", "--output", "--value_file", "--if_version", "--if_absent",
                           "--versioned"}) {
    EXPECT_NE(help.find(word), std::string::npos) << "kvctl --help does not mention " << word;
  }
}

// A hung tool fails its test at the limit with what it printed, instead of
// holding the suite.
TEST(RunCommandTest, AProgramStillRunningAtTheLimitIsKilledAndSaysSo) {
  const CommandResult r = RunCommand({"/bin/sh", "-c", "echo started; exec sleep 60"}, "", std::chrono::seconds(1));
  EXPECT_EQ(r.exit_code, -1);
  EXPECT_EQ(r.out, "started\n");
  EXPECT_NE(r.err.find("still running after 1 s: killed with signal"), std::string::npos) << r.err;
}

class OneConnectionServerTest : public ServerTest {
 protected:
  void SetUp() override { StartServer({"--max_connections=1"}); }
};

TEST_F(OneConnectionServerTest, KvctlReportsAFullServerAsResourceExhausted) {
  auto holder = NewClient();  // takes the only connection slot
  ASSERT_NE(holder, nullptr);
  const CommandResult r = Kvctl({"get", "k"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("RESOURCE_EXHAUSTED"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("too many connections"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("PERMISSION_DENIED"), std::string::npos) << r.err;
}

// --durability=none with its smallest write-back buffer: 64 KiB of keys
// and values, and 64 keys.
class WriteBackServerTest : public ServerTest {
 protected:
  static constexpr int kBufferKeys = 64;
  void SetUp() override { StartServer({"--memory=536870912", "--durability=none", "--write_back_bytes=64K"}); }
};

// What a crash of a none server loses is what its write-back buffer holds,
// as --help and the README say (and kvctl stats shows as UNWRITTEN): every
// write the buffer's writer has written to RocksDB survives a kill -9. The
// buffer never holds more than 64 keys, so of distinct keys written one
// after the other only the last 64 can be lost. (Before the writer wrote RocksDB's WAL
// a kill -9 lost what RocksDB's memtables held as well: all 2,000 here.)
TEST_F(WriteBackServerTest, Kill9LosesAtMostWhatTheWriteBackBufferHolds) {
  const int n = Scaled(2000, 200);
  {
    auto client = NewClient();
    ASSERT_NE(client, nullptr);
    for (int i = 0; i < n; ++i) {
      ASSERT_TRUE(client->Put("wb-" + std::to_string(i), MakeValue("wb", i, 1000)).ok()) << i;
    }
  }
  server_->Kill9();
  ASSERT_TRUE(server_->Start().ok()) << server_->Log();
  auto client = NewClient();
  ASSERT_NE(client, nullptr);
  int lost = 0;
  for (int i = 0; i < n; ++i) {
    auto got = client->Get("wb-" + std::to_string(i));
    if (i < n - kBufferKeys) {
      ASSERT_TRUE(got.ok()) << "put " << i << " of " << n << ", written out of the buffer before the kill, lost: "
                            << got.status();
      ASSERT_TRUE(*got == MakeValue("wb", i, 1000)) << i;
    } else if (!got.ok()) {
      ASSERT_EQ(got.status().code(), StatusCode::kNotFound) << got.status();
      ++lost;
    }
  }
  std::printf("write-back kill -9: %d of the last %d puts lost\n", lost, kBufferKeys);
}

class SmallServerTest : public ServerTest {
 protected:
  void SetUp() override { StartServer({"--memory=8388608", "--grace_period_ms=100"}); }
};

TEST_F(SmallServerTest, FullHeapRefusesThePutAndKeepsWhatIsStored) {
  auto client = NewClient();
  ASSERT_NE(client, nullptr);
  const std::string big(512 * 1024, 'b');
  int stored = 0;
  Status refused;
  for (int i = 0; i < 64; ++i) {
    auto v = client->Put("big-" + std::to_string(i), big + std::to_string(i));
    if (!v.ok()) {
      refused = v.status();
      break;
    }
    ++stored;
  }
  ASSERT_EQ(refused.code(), StatusCode::kResourceExhausted) << refused;
  ASSERT_GT(stored, 0);
  for (int i = 0; i < stored; ++i) {
    auto got = client->Get("big-" + std::to_string(i));
    ASSERT_TRUE(got.ok()) << i << ": " << got.status();
    EXPECT_TRUE(*got == big + std::to_string(i)) << i;
  }
  // A refused replace leaves the old value readable.
  auto replace = client->Put("big-0", std::string(1 << 20, 'r'));
  EXPECT_FALSE(replace.ok());
  auto got = client->Get("big-0");
  ASSERT_TRUE(got.ok());
  EXPECT_TRUE(*got == big + "0");
  // Freed space comes back once its grace period has passed.
  for (int i = 0; i < stored; ++i) ASSERT_TRUE(client->Delete("big-" + std::to_string(i)).ok());
  EXPECT_TRUE(WaitFor("the freed space", [&] { return client->Put("after-free", big).ok(); }));
}

}  // namespace
}  // namespace rkv::testing
