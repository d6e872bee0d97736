// The crash suite: a coordinator and three servers under a mixed
// PUT/GET/DELETE load from several clients, one of the four processes
// killed with SIGKILL and restarted on its data dir per cycle. After each
// cycle every key must hold its last acknowledged value (or be absent after
// an acknowledged delete), or the value of a write issued after that whose
// outcome the client could not know (the call failed or timed out: it may
// or may not have been applied). Once per --durability mode that survives a
// process crash. Runs over the transport named by $RKV_TEST_TRANSPORT.
//
// $RKV_CRASH_CYCLES sets the cycles per mode (default 30, times
// $RKV_TEST_SCALE, at least 5).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "rkv/client.h"
#include "tests/test_cluster.h"

namespace rkv::testing {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kServers = 3;
constexpr int kLoadThreads = 4;
constexpr int kKeysPerThread = 32;
// Before a kill, each thread completes this many operations of the cycle;
// after the restart, it gets this many writes acknowledged before the
// cycle ends (so the load is never idle and clients are seen to recover).
constexpr int kOpsBeforeKill = 20;
constexpr int kAckedAfterRestart = 10;
// Deadline of a load call: short enough that calls caught by a kill often
// fail and leave ambiguous writes (the case worth checking); a call that
// fails on a slow machine is one more ambiguous write, so only the figures,
// never the verdict, depend on the machine's speed. Longer where
// $RKV_TEST_SCALE says the CPU is slow.
std::chrono::milliseconds LoadCallTimeout() {
  return std::chrono::milliseconds(std::lround(2000 / std::min(1.0, TestScale())));
}

using Value = std::optional<std::string>;  // nullopt: absent

std::string Show(const Value& v) {
  if (!v) return "absent";
  return "\"" + v->substr(0, 60) + (v->size() > 60 ? "...\"" : "\"");
}

// What one key may hold. Each key is written by one thread only, so its
// writes are ordered by that thread.
struct KeyModel {
  Value acked;                   // after the last acknowledged write (absent before any)
  std::vector<Value> ambiguous;  // later writes of unknown outcome, in issue order

  // Whether `seen` is possible; if so, forgets what `seen` rules out: the
  // value is now `seen`, and only ambiguous writes issued after the
  // earliest one that explains it may still land.
  bool Observe(const Value& seen) {
    if (seen == acked) return true;
    for (size_t i = 0; i < ambiguous.size(); ++i) {
      if (ambiguous[i] == seen) {
        acked = seen;
        ambiguous.erase(ambiguous.begin(), ambiguous.begin() + static_cast<std::ptrdiff_t>(i) + 1);
        return true;
      }
    }
    return false;
  }

  std::string Expected() const {
    std::string s = "last acknowledged " + Show(acked);
    for (const Value& v : ambiguous) s += ", or ambiguous " + Show(v);
    return s;
  }
};

// One load thread's client, keys and model. The thread owns it while it
// runs; the test reads it only between cycles, after joining the thread.
struct Loader {
  std::unique_ptr<Client> client;
  std::vector<KeyModel> keys = std::vector<KeyModel>(kKeysPerThread);
  std::mt19937_64 rng;
  uint64_t written = 0;  // values issued: makes each value unique
  uint64_t acknowledged_writes = 0;
  uint64_t ambiguous_writes = 0;
  uint64_t reads = 0;
  uint64_t bad_reads = 0;  // GETs that returned an impossible value
  std::vector<std::string> first_bad_reads;
  // Read by the test while the thread runs.
  std::atomic<int> ops_this_cycle{0};
  std::atomic<int> acked_since_mark{0};
};

std::string KeyName(int thread, int k) { return "crash-t" + std::to_string(thread) + "-k" + std::to_string(k); }

// One operation of the load on a random key of `l`.
void LoadOne(Loader& l, int thread) {
  const int k = static_cast<int>(l.rng() % kKeysPerThread);
  const std::string key = KeyName(thread, k);
  KeyModel& m = l.keys[static_cast<size_t>(k)];
  const CallOptions call{LoadCallTimeout()};
  const int pick = static_cast<int>(l.rng() % 100);
  if (pick < 40) {
    std::string value;
    const Status s = l.client->Get(key, &value, nullptr, call);
    if (!s.ok() && s.code() != StatusCode::kNotFound) return;  // a failed read says nothing
    ++l.reads;
    const Value seen = s.ok() ? Value(value) : std::nullopt;
    const std::string expected = m.Expected();
    if (!m.Observe(seen)) {
      ++l.bad_reads;
      if (l.first_bad_reads.size() < 5)
        l.first_bad_reads.push_back(key + ": read " + Show(seen) + ", expected " + expected);
    }
    return;
  }
  Value written;
  bool acked = false;
  if (pick < 85) {
    // Unique, with sizes from a few bytes to ~4 KB.
    std::string value = key + "#" + std::to_string(++l.written) + "#";
    value.append(l.rng() % 4096, static_cast<char>('a' + l.rng() % 26));
    acked = l.client->Put(key, value, call).ok();
    written = std::move(value);
  } else {
    // NOT_FOUND also leaves the key absent (a delete retried after a lost
    // reply reports it, too).
    const Status s = l.client->Delete(key, call);
    acked = s.ok() || s.code() == StatusCode::kNotFound;
  }
  if (acked) {
    m.acked = std::move(written);
    m.ambiguous.clear();
    ++l.acknowledged_writes;
    l.acked_since_mark.fetch_add(1, std::memory_order_relaxed);
  } else {
    m.ambiguous.push_back(std::move(written));
    ++l.ambiguous_writes;
  }
  l.ops_this_cycle.fetch_add(1, std::memory_order_relaxed);
}

class CrashTest : public TestClusterTest, public ::testing::WithParamInterface<std::string> {
 protected:
  void SetUp() override {
    TestClusterOptions o;
    o.servers = kServers;
    o.shards = 256;
    o.durability = GetParam();
    o.max_keys = 4096;
    ASSERT_NO_FATAL_FAILURE(StartCluster(o));
  }

  std::unique_ptr<Client> NewClient() {
    // Connect and the verifier have the default deadline (kCallTimeout);
    // load calls set their own.
    return cluster().ClusterClient();
  }

  // Waits until every loader's counter reaches `n`; false after
  // kConditionDeadline (a hang).
  static bool WaitForEach(std::vector<std::unique_ptr<Loader>>& loaders, std::atomic<int> Loader::*counter, int n) {
    return WaitFor(
        "every load thread",
        [&] {
          for (auto& l : loaders) {
            if (((*l).*counter).load(std::memory_order_relaxed) < n) return false;
          }
          return true;
        },
        kConditionDeadline, std::chrono::milliseconds(2));
  }
};

TEST_P(CrashTest, KillNineOfServersAndCoordinatorUnderLoadLosesNoAcknowledgedWrite) {
  const int cycles = SuiteCount("RKV_CRASH_CYCLES", 30, 5);
  const uint64_t seed = std::random_device()();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);

  std::vector<std::unique_ptr<Loader>> loaders;
  for (int t = 0; t < kLoadThreads; ++t) {
    loaders.push_back(std::make_unique<Loader>());
    loaders.back()->client = NewClient();
    ASSERT_NE(loaders.back()->client, nullptr);
    loaders.back()->rng.seed(seed + static_cast<uint64_t>(t));
  }
  auto verifier = NewClient();
  ASSERT_NE(verifier, nullptr);

  // Victims: every four cycles kill each server and the coordinator once,
  // in random order.
  std::vector<int> victims;  // 0..kServers-1: a server; kServers: the coordinator
  while (static_cast<int>(victims.size()) < cycles) {
    std::vector<int> round = {0, 1, 2, kServers};
    std::shuffle(round.begin(), round.end(), rng);
    victims.insert(victims.end(), round.begin(), round.end());
  }
  victims.resize(static_cast<size_t>(cycles));

  int server_kills = 0;
  int coordinator_kills = 0;
  uint64_t lost = 0;
  std::vector<std::string> lost_keys;
  for (int cycle = 0; cycle < cycles; ++cycle) {
    SCOPED_TRACE("cycle " + std::to_string(cycle));
    std::atomic<bool> stop{false};
    std::vector<std::thread> threads;
    for (int t = 0; t < kLoadThreads; ++t) {
      Loader& l = *loaders[static_cast<size_t>(t)];
      l.ops_this_cycle = 0;
      threads.emplace_back([&l, &stop, t] {
        while (!stop.load(std::memory_order_relaxed)) LoadOne(l, t);
      });
    }
    const bool warmed = WaitForEach(loaders, &Loader::ops_this_cycle, kOpsBeforeKill);
    // A random moment of the load to kill at, and a random time away:
    // chosen delays, not waits for anything.
    std::this_thread::sleep_for(std::chrono::milliseconds(rng() % 100));

    const int victim = victims[static_cast<size_t>(cycle)];
    ServerProcess& process = victim == kServers ? cluster().coordinator() : cluster().server(victim);
    process.Kill9();
    (victim == kServers ? coordinator_kills : server_kills)++;
    std::this_thread::sleep_for(std::chrono::milliseconds(rng() % 300));
    const Status restarted = process.Start();
    for (auto& l : loaders) l->acked_since_mark = 0;
    const bool recovered = restarted.ok() && WaitForEach(loaders, &Loader::acked_since_mark, kAckedAfterRestart);
    stop = true;
    for (auto& t : threads) t.join();
    ASSERT_TRUE(warmed) << "the load made no progress in " << kConditionDeadline.count() << " s";
    ASSERT_TRUE(restarted.ok()) << restarted;
    ASSERT_TRUE(recovered) << "clients got no write acknowledged within " << kConditionDeadline.count()
                           << " s of restarting " << (victim == kServers ? "the coordinator" : "a server");

    // Every key, with the killed process back.
    for (int t = 0; t < kLoadThreads; ++t) {
      Loader& l = *loaders[static_cast<size_t>(t)];
      for (int k = 0; k < kKeysPerThread; ++k) {
        const std::string key = KeyName(t, k);
        std::string value;
        const Status s = verifier->Get(key, &value);
        ASSERT_TRUE(s.ok() || s.code() == StatusCode::kNotFound) << key << ": " << s;
        const Value seen = s.ok() ? Value(value) : std::nullopt;
        KeyModel& m = l.keys[static_cast<size_t>(k)];
        const std::string expected = m.Expected();
        if (!m.Observe(seen)) {
          ++lost;
          if (lost_keys.size() < 10) lost_keys.push_back(key + ": holds " + Show(seen) + ", expected " + expected);
          m.acked = seen;  // report each loss once
          m.ambiguous.clear();
        }
      }
    }
  }

  uint64_t acknowledged = 0, ambiguous = 0, reads = 0, bad_reads = 0;
  std::vector<std::string> first_bad_reads;
  for (auto& l : loaders) {
    acknowledged += l->acknowledged_writes;
    ambiguous += l->ambiguous_writes;
    reads += l->reads;
    bad_reads += l->bad_reads;
    first_bad_reads.insert(first_bad_reads.end(), l->first_bad_reads.begin(), l->first_bad_reads.end());
  }
  std::printf(
      "crash-suite: durability=%s cycles=%d server_kills=%d coordinator_kills=%d acknowledged_writes=%llu "
      "ambiguous=%llu reads=%llu lost=%llu bad_reads=%llu\n",
      GetParam().c_str(), cycles, server_kills, coordinator_kills, static_cast<unsigned long long>(acknowledged),
      static_cast<unsigned long long>(ambiguous), static_cast<unsigned long long>(reads),
      static_cast<unsigned long long>(lost), static_cast<unsigned long long>(bad_reads));
  std::fflush(stdout);
  EXPECT_EQ(lost, 0u) << "acknowledged writes lost:\n" << ::testing::PrintToString(lost_keys);
  EXPECT_EQ(bad_reads, 0u) << "reads of impossible values, the first of each thread:\n"
                           << ::testing::PrintToString(first_bad_reads);
  EXPECT_GT(acknowledged, 0u);
}

INSTANTIATE_TEST_SUITE_P(Durability, CrashTest, ::testing::Values("wal", "sync"),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

}  // namespace
}  // namespace rkv::testing
