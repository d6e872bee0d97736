// Client writes applied on several threads at once (the server's client
// pollers): writes of different keys forward to their backups in parallel,
// writes of one key stay one at a time, a retry of a request being applied
// waits for its reply, a shard snapshot waits for the writes in flight, and
// no two writes share a version. A forwarder made by the test holds a
// write in its forward until the test lets it go.
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <gtest/gtest.h>
#include <unistd.h>

#include "common/mutex.h"
#include "common/record.h"
#include "server/apply/apply.h"
#include "server/apply/local_table_test_util.h"
#include "server/replication/replication_test_util.h"

namespace rkv::server {
namespace {

using namespace std::chrono_literals;
using testing::FakePolicy;

// How long a test waits for something that must happen before it calls
// the code wrong: a hang guard, never a measure of speed.
constexpr auto kHangGuard = 30s;
constexpr size_t kRingBytes = 64 * 1024;

// A flag one thread sets and others wait for (bounded by kHangGuard).
class Event {
 public:
  void Set() {
    {
      MutexLock lock(mu_);
      set_ = true;
    }
    cv_.NotifyAll();
  }
  bool IsSet() {
    MutexLock lock(mu_);
    return set_;
  }
  // True when set within the hang guard.
  bool Wait() {
    MutexLock lock(mu_);
    return cv_.WaitFor(mu_, kHangGuard, [&] {
      mu_.AssertHeld();
      return set_;
    });
  }

 private:
  Mutex mu_;
  bool set_ GUARDED_BY(mu_) = false;
  CondVar cv_;
};

// Answers every forward with what `hook` (set before any write starts)
// returns for the record's key and version, OK without a hook; remembers
// what it forwarded.
class HookedForwarder final : public Forwarder {
 public:
  std::function<Status(const std::string& key, uint64_t version)> hook;

  std::vector<Status> Forward(const std::vector<ReplicaPeer>& backups, uint64_t, protocol::Op,
                              std::span<const uint8_t> record) override {
    StatusOr<RecordView> r = DecodeRecord(record);
    if (!r.ok()) return std::vector<Status>(backups.size(), r.status());
    const std::string key(r->key);
    const Status answer = hook ? hook(key, r->version) : Status::Ok();
    MutexLock lock(mu_);
    forwarded_.emplace_back(key, r->version);
    return std::vector<Status>(backups.size(), answer);
  }
  // As the base class (one Forward per item), remembering the keys of each
  // call.
  std::vector<std::vector<Status>> ForwardMany(std::span<const Item> items) override {
    std::vector<std::string> keys;
    for (const Item& item : items) {
      StatusOr<RecordView> r = DecodeRecord(item.record);
      keys.push_back(r.ok() ? std::string(r->key) : "?");
    }
    {
      MutexLock lock(mu_);
      groups_.push_back(keys);
    }
    return Forwarder::ForwardMany(items);
  }
  std::vector<std::pair<std::string, uint64_t>> forwarded() {
    MutexLock lock(mu_);
    return forwarded_;
  }
  // The keys of each ForwardMany call, in call order.
  std::vector<std::vector<std::string>> groups() {
    MutexLock lock(mu_);
    return groups_;
  }

 private:
  Mutex mu_;
  std::vector<std::pair<std::string, uint64_t>> forwarded_ GUARDED_BY(mu_);
  std::vector<std::vector<std::string>> groups_ GUARDED_BY(mu_);
};

// A client write of a batch, as a poller's round holds it.
struct BatchedWrite {
  protocol::Op op = protocol::Op::kPut;
  uint64_t client = 0;
  uint64_t request_id = 0;
  std::string key;
  std::string value;
  bool resent = false;
};

// A primary with one backup (played by the forwarder) over a real store,
// table and heap.
class ApplyParallelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const Status opened = local_.Open("rkv_apply_parallel", /*log2=*/10, /*heap_bytes=*/4 << 20, 100ms);
    ASSERT_TRUE(opened.ok()) << opened;
    WriteRoute route;
    route.map_version = 3;
    route.shard = 0;
    route.backups.push_back(ReplicaPeer{"s-backup", 1, "127.0.0.1:1"});
    policy_.SetRoute(route);
    applier_ = std::make_unique<Applier>(local_.store.get(), local_.table.get(), local_.heap.get(),
                                         ApplyLimits{64, 8192}, RequestCacheLimits{},
                                         ApplyReplication{&policy_, &forwarder_});
  }
  void TearDown() override {
    applier_.reset();
    local_.Close();
  }

  // A client write as its connection's poller applies it: the record is
  // staged in a ring of the caller's own.
  protocol::ReplyMsg Write(protocol::Op op, uint64_t client, uint64_t request_id, std::string_view key,
                           std::string_view value = {}) {
    std::vector<uint8_t> ring(kRingBytes, 0);
    const bool tombstone = op == protocol::Op::kDelete;
    const uint64_t len =
        EncodeRecord(std::span<uint8_t>(ring), key, value, 0, tombstone ? layout::kBlockFlagTombstone : 0);
    protocol::RequestMsg m{};
    m.op = static_cast<uint8_t>(op);
    m.length = static_cast<uint32_t>(len);
    m.request_id = request_id;
    m.ring_offset = 0;
    std::vector<uint8_t> msg(sizeof(m));
    std::memcpy(msg.data(), &m, sizeof(m));
    return applier_->Apply(client, msg, ring);
  }
  protocol::ReplyMsg Put(uint64_t client, uint64_t request_id, std::string_view key, std::string_view value) {
    return Write(protocol::Op::kPut, client, request_id, key, value);
  }

  // The writes applied as one poller round's batch (ApplyBatch), each
  // staged in a ring of its own; their replies in order. A write with an
  // empty key is sent as a malformed message.
  std::vector<protocol::ReplyMsg> Batch(const std::vector<BatchedWrite>& writes) {
    std::vector<std::vector<uint8_t>> rings;
    std::vector<std::vector<uint8_t>> msgs;
    for (const BatchedWrite& w : writes) {
      rings.emplace_back(kRingBytes, 0);
      const bool tombstone = w.op == protocol::Op::kDelete;
      const uint64_t len = EncodeRecord(std::span<uint8_t>(rings.back()), w.key, w.value, 0,
                                        tombstone ? layout::kBlockFlagTombstone : 0);
      protocol::RequestMsg m{};
      m.op = static_cast<uint8_t>(w.op);
      m.length = static_cast<uint32_t>(len);
      m.request_id = w.request_id;
      m.flags = w.resent ? protocol::kRequestResent : 0;
      msgs.emplace_back(sizeof(m));
      std::memcpy(msgs.back().data(), &m, sizeof(m));
      if (w.key.empty()) msgs.back().resize(sizeof(m) - 1);
    }
    std::vector<Applier::BatchWrite> batch;
    for (size_t i = 0; i < writes.size(); ++i) {
      batch.push_back(Applier::BatchWrite{writes[i].client, msgs[i], rings[i], {}});
    }
    applier_->ApplyBatch(batch);
    std::vector<protocol::ReplyMsg> replies;
    for (const Applier::BatchWrite& b : batch) replies.push_back(b.reply);
    return replies;
  }

  // The PUT of "r" (client 7, request 42, value "once") on a thread of its
  // own, held in its forward until `release` is set (the forwarder's hook
  // is set for it); the caller joins `thread`.
  struct HeldPut {
    Event forwarding;
    Event release;
    protocol::ReplyMsg reply{};
    std::thread thread;
  };
  void StartHeldPut(HeldPut* held) {
    forwarder_.hook = [held](const std::string& key, uint64_t) {
      if (key != "r") return Status::Ok();
      held->forwarding.Set();
      (void)held->release.Wait();
      return Status::Ok();
    };
    held->thread = std::thread([this, held] { held->reply = Put(/*client=*/7, 42, "r", "once"); });
  }

  std::optional<std::pair<std::string, uint64_t>> TableRecord(std::string_view key) {
    const auto e = local_.table->Lookup(key);
    if (!e) return std::nullopt;
    const Table::Record r = local_.table->RecordAt(e->slot);
    return std::pair(std::string(r.value), r.version);
  }

  testing::LocalTable local_;
  FakePolicy policy_;
  HookedForwarder forwarder_;
  std::unique_ptr<Applier> applier_;
};

int32_t Ok() { return static_cast<int32_t>(StatusCode::kOk); }

TEST_F(ApplyParallelTest, AWriteOfAnotherKeyIsAcknowledgedWhileOneWaitsForItsBackups) {
  // The forward of "a" returns only once a write of "b", from another
  // client on another thread, was acknowledged: were client writes applied
  // one at a time, "b" would wait for "a" and "a" for "b".
  Event a_forwarding;
  Event b_acknowledged;
  bool b_seen_in_time = false;
  forwarder_.hook = [&](const std::string& key, uint64_t) {
    if (key != "a") return Status::Ok();
    a_forwarding.Set();
    b_seen_in_time = b_acknowledged.Wait();
    return Status::Ok();
  };
  protocol::ReplyMsg a_reply{};
  std::thread a([&] { a_reply = Put(/*client=*/1, 1, "a", "va"); });
  ASSERT_TRUE(a_forwarding.Wait()) << "the write of a never reached its forward";
  const protocol::ReplyMsg b_reply = Put(/*client=*/2, 1, "b", "vb");
  b_acknowledged.Set();
  a.join();
  EXPECT_TRUE(b_seen_in_time) << "the write of b was acknowledged only after the write of a, which was waiting for "
                                 "its backups: writes of different keys are serialized";
  EXPECT_EQ(b_reply.status_code, Ok()) << b_reply.message;
  EXPECT_EQ(a_reply.status_code, Ok()) << a_reply.message;
  EXPECT_NE(a_reply.version, b_reply.version);
  EXPECT_EQ(TableRecord("a"), std::pair(std::string("va"), a_reply.version));
  EXPECT_EQ(TableRecord("b"), std::pair(std::string("vb"), b_reply.version));
}

TEST_F(ApplyParallelTest, WritesOfOneKeyForwardOneAfterTheOther) {
  // The first write of "k" is held in its forward while a second write of
  // "k" (another client, another thread) is sent; the second's forward must
  // start only once the first is published, with a higher version.
  Event first_forwarding;
  Event release_first;
  Event second_sent;
  bool first_released_in_time = false;
  Mutex hook_mu;
  int forwards_of_k = 0;        // under hook_mu
  uint64_t first_version = 0;   // under hook_mu
  uint64_t held_at_second = 0;  // under hook_mu: the version of k published when the second forwarded
  forwarder_.hook = [&](const std::string& key, uint64_t version) {
    if (key != "k") return Status::Ok();
    int n;
    {
      MutexLock lock(hook_mu);
      n = ++forwards_of_k;
      if (n == 1) first_version = version;
    }
    if (n == 1) {
      first_forwarding.Set();
      first_released_in_time = release_first.Wait();
    } else {
      const uint64_t held = applier_->HeldVersion("k");
      MutexLock lock(hook_mu);
      held_at_second = held;
    }
    return Status::Ok();
  };
  protocol::ReplyMsg first{};
  protocol::ReplyMsg second{};
  std::thread one([&] { first = Put(/*client=*/1, 1, "k", "v1"); });
  ASSERT_TRUE(first_forwarding.Wait()) << "the first write never reached its forward";
  std::thread two([&] {
    second_sent.Set();
    second = Put(/*client=*/2, 1, "k", "v2");
  });
  ASSERT_TRUE(second_sent.Wait());
  // Give the second write the chance to overtake (were the key not locked
  // it would forward now). The pause only lets the check catch more; it
  // cannot make a correct apply path fail.
  std::this_thread::sleep_for(50ms);
  release_first.Set();
  one.join();
  two.join();
  EXPECT_TRUE(first_released_in_time);
  ASSERT_EQ(first.status_code, Ok()) << first.message;
  {
    MutexLock lock(hook_mu);
    EXPECT_EQ(first_version, first.version);
    EXPECT_EQ(held_at_second, first.version)
        << "a second write of the key was forwarded before the first, waiting for its backups, was published";
  }
  ASSERT_EQ(second.status_code, Ok()) << second.message;
  EXPECT_GT(second.version, first.version);
  EXPECT_EQ(TableRecord("k"), std::pair(std::string("v2"), second.version));
  // The backups saw the key's versions in the order they were published.
  const auto sent = forwarder_.forwarded();
  ASSERT_EQ(sent.size(), 2u);
  EXPECT_EQ(sent[0].second, first.version);
  EXPECT_EQ(sent[1].second, second.version);
}

TEST_F(ApplyParallelTest, ARetryOfARequestBeingAppliedWaitsAndGetsTheOriginalReply) {
  HeldPut held;
  StartHeldPut(&held);
  protocol::ReplyMsg retry{};
  ASSERT_TRUE(held.forwarding.Wait()) << "the original never reached its forward";
  Event retry_sent;
  // The same client and request id, on another connection (thread).
  std::thread again([&] {
    retry_sent.Set();
    retry = Put(/*client=*/7, 42, "r", "once");
  });
  ASSERT_TRUE(retry_sent.Wait());
  std::this_thread::sleep_for(50ms);  // lets the retry arrive while the original is in flight
  held.release.Set();
  held.thread.join();
  again.join();
  ASSERT_EQ(held.reply.status_code, Ok()) << held.reply.message;
  EXPECT_EQ(std::memcmp(&held.reply, &retry, sizeof(held.reply)), 0)
      << "the retry got another reply: " << retry.message;
  EXPECT_EQ(forwarder_.forwarded().size(), 1u) << "the request was forwarded twice";
  EXPECT_EQ(applier_->snapshot().puts, 1u);
  EXPECT_EQ(applier_->snapshot().replays, 1u);
}

TEST_F(ApplyParallelTest, ARetryWaitingForAnOriginalThatWasNotRememberedIsAppliedAfresh) {
  // The original fails before anything is published (its backup failed and
  // the coordinator could not be told): the retry that waited for it is
  // applied afresh rather than given that failure.
  Event original_forwarding;
  Event release;
  Mutex calls_mu;
  int calls = 0;
  forwarder_.hook = [&](const std::string&, uint64_t) -> Status {
    {
      MutexLock lock(calls_mu);
      if (++calls != 1) return Status::Ok();
    }
    original_forwarding.Set();
    (void)release.Wait();
    return Unavailable("backup unreachable");
  };
  policy_.SetReportStatus(Unavailable("coordinator away"));
  protocol::ReplyMsg original{};
  protocol::ReplyMsg retry{};
  std::thread first([&] { original = Put(/*client=*/7, 43, "f", "v"); });
  ASSERT_TRUE(original_forwarding.Wait()) << "the original never reached its forward";
  Event retry_sent;
  std::thread again([&] {
    retry_sent.Set();
    retry = Put(/*client=*/7, 43, "f", "v");
  });
  ASSERT_TRUE(retry_sent.Wait());
  std::this_thread::sleep_for(50ms);  // lets the retry arrive while the original is in flight
  release.Set();
  first.join();
  again.join();
  EXPECT_EQ(original.status_code, static_cast<int32_t>(StatusCode::kUnavailable)) << original.message;
  ASSERT_EQ(retry.status_code, Ok()) << retry.message;
  EXPECT_EQ(TableRecord("f"), std::pair(std::string("v"), retry.version));
  EXPECT_EQ(forwarder_.forwarded().size(), 2u);
  EXPECT_EQ(applier_->snapshot().puts, 1u);
}

TEST_F(ApplyParallelTest, ASnapshotWaitsForTheWriteInFlightAndIncludesIt) {
  ASSERT_EQ(Put(/*client=*/1, 1, "before", "b").status_code, Ok());
  Event forwarding;
  Event release;
  forwarder_.hook = [&](const std::string& key, uint64_t) {
    if (key != "during") return Status::Ok();
    forwarding.Set();
    (void)release.Wait();
    return Status::Ok();
  };
  protocol::ReplyMsg during{};
  std::thread writer([&] { during = Put(/*client=*/1, 2, "during", "d"); });
  ASSERT_TRUE(forwarding.Wait());
  Event snapshot_checked;
  Event snapshot_started;
  std::vector<Applier::ShardRecord> records;
  uint64_t snapshot_version = 0;
  Status taken;
  std::thread snapshot([&] {
    snapshot_started.Set();
    taken = applier_->ListShards(
        {0}, 1,
        [&] {
          snapshot_checked.Set();
          return Status::Ok();
        },
        &records, &snapshot_version);
  });
  ASSERT_TRUE(snapshot_started.Wait());
  std::this_thread::sleep_for(50ms);  // lets a wrong snapshot run ahead, to be caught below
  EXPECT_FALSE(snapshot_checked.IsSet()) << "the snapshot was taken while a client write was in flight";
  release.Set();
  writer.join();
  snapshot.join();
  ASSERT_TRUE(taken.ok()) << taken;
  ASSERT_EQ(during.status_code, Ok()) << during.message;
  std::map<std::string, uint64_t> listed;
  for (const auto& r : records) listed[r.key] = r.version;
  EXPECT_EQ(listed.size(), 2u);
  EXPECT_EQ(listed["during"], during.version);
  EXPECT_GE(snapshot_version, during.version);
  // A write after the snapshot gets a version above it (the fetcher deletes
  // unlisted keys at or below it).
  const protocol::ReplyMsg after = Put(/*client=*/1, 3, "after", "a");
  ASSERT_EQ(after.status_code, Ok()) << after.message;
  EXPECT_GT(after.version, snapshot_version);
}

TEST_F(ApplyParallelTest, ConcurrentWritesGetDistinctVersions) {
  // Several threads write their own keys and one shared key at once; every
  // acknowledged PUT has its own version, each key holds its latest, and
  // the backups were sent the same versions.
  constexpr int kThreads = 4;
  constexpr int kWrites = 60;
  // Each forward takes a moment, as a backup's round trip would, so that
  // writes overlap between their version and their publish.
  forwarder_.hook = [](const std::string&, uint64_t) {
    std::this_thread::sleep_for(200us);
    return Status::Ok();
  };
  std::vector<std::vector<protocol::ReplyMsg>> replies(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kWrites; ++i) {
        const std::string key = i % 3 == 0 ? "shared" : "t" + std::to_string(t) + "-" + std::to_string(i);
        replies[t].push_back(Put(/*client=*/100 + t, i + 1, key, "v" + std::to_string(i)));
      }
    });
  }
  for (auto& th : threads) th.join();
  std::set<uint64_t> versions;
  uint64_t highest = 0;
  for (const auto& per_thread : replies) {
    for (const auto& r : per_thread) {
      ASSERT_EQ(r.status_code, Ok()) << r.message;
      EXPECT_TRUE(versions.insert(r.version).second) << "version " << r.version << " given twice";
      highest = std::max(highest, r.version);
    }
  }
  EXPECT_EQ(versions.size(), size_t{kThreads * kWrites});
  EXPECT_EQ(local_.store->version_high_water(), highest);
  std::set<uint64_t> forwarded;
  for (const auto& [key, version] : forwarder_.forwarded()) forwarded.insert(version);
  EXPECT_EQ(forwarded, versions);
  // The shared key holds the highest version written to it.
  uint64_t shared_highest = 0;
  for (int t = 0; t < kThreads; ++t) {
    for (int i = 0; i < kWrites; i += 3) shared_highest = std::max(shared_highest, replies[t][i].version);
  }
  const auto shared = TableRecord("shared");
  ASSERT_TRUE(shared.has_value());
  EXPECT_EQ(shared->second, shared_highest);
}

TEST_F(ApplyParallelTest, ABatchForwardsWritesOfDifferentKeysTogetherAndOneKeysWritesInTheirOrder) {
  const std::vector<protocol::ReplyMsg> r = Batch({
      {protocol::Op::kPut, 1, 1, "a", "a1"},
      {protocol::Op::kPut, 2, 1, "b", "b1"},
      {protocol::Op::kPut, 1, 2, "c", "c1"},
      {protocol::Op::kPut, 2, 2, "a", "a2"},  // a again: the next group, after the first is published
      {protocol::Op::kPut, 3, 1, "d", "d1"},
      {protocol::Op::kDelete, 3, 2, "b", ""},  // b again, as a DELETE: it joins the second group
  });
  ASSERT_EQ(r.size(), 6u);
  for (const auto& reply : r) ASSERT_EQ(reply.status_code, Ok()) << reply.message;
  const std::vector<std::vector<std::string>> groups = forwarder_.groups();
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_EQ(groups[0], (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(groups[1], (std::vector<std::string>{"a", "d", "b"}));
  EXPECT_GT(r[3].version, r[0].version);
  EXPECT_EQ(r[5].version, r[1].version) << "a DELETE answers the version it deleted";
  EXPECT_EQ(TableRecord("a"), std::pair(std::string("a2"), r[3].version));
  EXPECT_EQ(TableRecord("b"), std::nullopt);
  EXPECT_EQ(TableRecord("c"), std::pair(std::string("c1"), r[2].version));
  EXPECT_EQ(TableRecord("d"), std::pair(std::string("d1"), r[4].version));
  std::set<uint64_t> versions;
  for (size_t i = 0; i < 5; ++i) EXPECT_TRUE(versions.insert(r[i].version).second) << "version given twice";
  // The backups saw each key's versions in order.
  const auto sent = forwarder_.forwarded();
  ASSERT_EQ(sent.size(), 6u);
  EXPECT_EQ(sent[0], std::pair(std::string("a"), r[0].version));
  EXPECT_EQ(sent[3], std::pair(std::string("a"), r[3].version));
}

TEST_F(ApplyParallelTest, ABatchAnswersAResendOfOneOfItsWritesWithTheOriginalReply) {
  const std::vector<protocol::ReplyMsg> r = Batch({
      {protocol::Op::kPut, 5, 9, "x", "once"},
      {protocol::Op::kPut, 6, 1, "y", "y"},
      {protocol::Op::kPut, 5, 9, "x", "once", /*resent=*/true},
  });
  ASSERT_EQ(r[0].status_code, Ok()) << r[0].message;
  ASSERT_EQ(r[1].status_code, Ok()) << r[1].message;
  EXPECT_EQ(std::memcmp(&r[0], &r[2], sizeof(r[0])), 0) << "the resend got another reply: " << r[2].message;
  EXPECT_EQ(forwarder_.forwarded().size(), 2u) << "the resend was forwarded again";
  EXPECT_EQ(applier_->snapshot().replays, 1u);
  EXPECT_EQ(applier_->snapshot().puts, 2u);
}

TEST_F(ApplyParallelTest, AWriteOfABatchThatFailsFailsAloneAndAMalformedOneIsRefused) {
  // The backup fails "bad"'s forward and the coordinator cannot be told:
  // "bad" is refused (outcome unknown) and not published, its neighbours
  // in the group are acknowledged; a malformed message is refused by
  // validation and applies nothing.
  forwarder_.hook = [](const std::string& key, uint64_t) {
    return key == "bad" ? Unavailable("backup unreachable") : Status::Ok();
  };
  policy_.SetReportStatus(Unavailable("coordinator away"));
  const std::vector<protocol::ReplyMsg> r = Batch({
      {protocol::Op::kPut, 1, 1, "good1", "g1"},
      {protocol::Op::kPut, 1, 2, "", ""},  // malformed
      {protocol::Op::kPut, 1, 3, "bad", "b"},
      {protocol::Op::kPut, 1, 4, "good2", "g2"},
  });
  EXPECT_EQ(r[0].status_code, Ok()) << r[0].message;
  EXPECT_EQ(r[1].status_code, static_cast<int32_t>(StatusCode::kInvalidArgument)) << r[1].message;
  EXPECT_EQ(r[2].status_code, static_cast<int32_t>(StatusCode::kUnavailable)) << r[2].message;
  EXPECT_EQ(r[3].status_code, Ok()) << r[3].message;
  EXPECT_EQ(TableRecord("good1"), std::pair(std::string("g1"), r[0].version));
  EXPECT_EQ(TableRecord("bad"), std::nullopt);
  EXPECT_EQ(TableRecord("good2"), std::pair(std::string("g2"), r[3].version));
  // Not remembered: a resend of the failed write is applied afresh.
  policy_.SetReportStatus(Status::Ok());
  forwarder_.hook = nullptr;
  const std::vector<protocol::ReplyMsg> again = Batch({{protocol::Op::kPut, 1, 3, "bad", "b", /*resent=*/true}});
  EXPECT_EQ(again[0].status_code, Ok()) << again[0].message;
  EXPECT_EQ(TableRecord("bad"), std::pair(std::string("b"), again[0].version));
}

TEST_F(ApplyParallelTest, ABackupThatFailsSeveralWritesOfAGroupIsReportedOnce) {
  // One report takes the backup out of every shard this server leads that
  // lists it (ReplicationPolicy::ReportFailedBackup), so the group's other
  // writes it failed are acknowledged without reporting it again.
  forwarder_.hook = [](const std::string& key, uint64_t) {
    return key == "ok" ? Status::Ok() : Unavailable("backup unreachable");
  };
  const std::vector<protocol::ReplyMsg> r = Batch({
      {protocol::Op::kPut, 1, 1, "x", "vx"},
      {protocol::Op::kPut, 1, 2, "ok", "v"},
      {protocol::Op::kPut, 1, 3, "y", "vy"},
      {protocol::Op::kPut, 1, 4, "z", "vz"},
  });
  for (const auto& reply : r) EXPECT_EQ(reply.status_code, Ok()) << reply.message;
  ASSERT_EQ(policy_.reports().size(), 1u);
  EXPECT_EQ(policy_.reports()[0].backup.server_id, "s-backup");
  EXPECT_EQ(applier_->snapshot().backup_failures, 3u);
  EXPECT_EQ(TableRecord("z"), std::pair(std::string("vz"), r[3].version));
  // Another group reports it anew: here the map lists it again (a rejoin).
  WriteRoute relisted;
  relisted.map_version = 5;
  relisted.backups.push_back(ReplicaPeer{"s-backup", 1, "127.0.0.1:1"});
  policy_.SetRoute(relisted);
  const std::vector<protocol::ReplyMsg> again =
      Batch({{protocol::Op::kPut, 2, 1, "x", "vx2"}, {protocol::Op::kPut, 2, 2, "y", "vy2"}});
  for (const auto& reply : again) EXPECT_EQ(reply.status_code, Ok()) << reply.message;
  EXPECT_EQ(policy_.reports().size(), 2u);
}

TEST_F(ApplyParallelTest, ABatchHoldingTheResendOfAWriteInFlightElsewhereAppliesItsOthersFirst) {
  // The original of (7, 42) is held in its forward on another thread; a
  // batch holding its resend and a write of "z" publishes "z" without
  // waiting for the original, then waits for it and gets its reply.
  HeldPut held;
  StartHeldPut(&held);
  ASSERT_TRUE(held.forwarding.Wait()) << "the original never reached its forward";
  std::vector<protocol::ReplyMsg> r;
  std::thread batch([&] {
    r = Batch({{protocol::Op::kPut, 7, 42, "r", "once", /*resent=*/true}, {protocol::Op::kPut, 8, 1, "z", "vz"},
               {protocol::Op::kPut, 9, 1, "w", "vw"}});
  });
  bool z_published = false;
  const auto give_up = std::chrono::steady_clock::now() + kHangGuard;
  while (!z_published && std::chrono::steady_clock::now() < give_up) {
    z_published = applier_->HeldVersion("z") != 0 && applier_->HeldVersion("w") != 0;
    if (!z_published) std::this_thread::sleep_for(1ms);
  }
  held.release.Set();
  held.thread.join();
  batch.join();
  EXPECT_TRUE(z_published) << "the batch's other writes waited for the resend's original";
  ASSERT_EQ(held.reply.status_code, Ok()) << held.reply.message;
  ASSERT_EQ(r.size(), 3u);
  EXPECT_EQ(std::memcmp(&held.reply, &r[0], sizeof(held.reply)), 0) << "the resend got another reply: " << r[0].message;
  EXPECT_EQ(r[1].status_code, Ok()) << r[1].message;
  EXPECT_EQ(r[2].status_code, Ok()) << r[2].message;
  EXPECT_EQ(applier_->snapshot().puts, 3u);
}

}  // namespace
}  // namespace rkv::server
