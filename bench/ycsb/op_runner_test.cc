#include "bench/ycsb/op_runner.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace rkv::bench {
namespace {

using std::chrono::microseconds;
using std::chrono::milliseconds;
using std::chrono::nanoseconds;
using TimePoint = RunClock::TimePoint;

constexpr uint64_t kValueBytes = 16;

// Time moves only when the runner sleeps or the fake store serves a call.
class FakeClock final : public RunClock {
 public:
  TimePoint Now() override { return now_; }
  void SleepUntil(TimePoint t) override {
    ++sleeps_;
    now_ = std::max(now_, t);
  }
  void Advance(nanoseconds d) { now_ += d; }
  int sleeps() const { return sleeps_; }

 private:
  TimePoint now_{std::chrono::seconds(1000)};
  int sleeps_ = 0;
};

// A store in memory whose every call takes `service` of fake time, and
// call number `stall_at` (0-based) `stall` more. A read-modify-write makes
// two calls per try, a GET and a compare-and-set on the key's version.
class FakeTarget final : public KvTarget {
 public:
  FakeTarget(FakeClock& clock, nanoseconds service) : clock_(clock), service_(service) {}

  void StallOnce(uint64_t call, nanoseconds stall) {
    stall_at_ = call;
    stall_ = stall;
  }
  // The next `n` compare-and-sets meet a conflict: another writer writes
  // the key between their read and them.
  void Conflicts(uint64_t n) { conflicts_left_ = n; }
  void Load(uint64_t records) {
    for (uint64_t i = 0; i < records; ++i) Store(RecordKey(i), kValueBytes);
  }

  Status Put(std::string_view key, std::string_view value) override {
    Serve(false);
    Store(std::string(key), value.size());
    ++puts_;
    return Status::Ok();
  }
  ReadModifyWriteResult ReadModifyWrite(std::string_view key, std::string_view value) override {
    return RetryConflicts(key, [&]() -> ReadModifyWriteTry {
      ReadModifyWriteTry t;
      t.read = Get(key);
      if (!t.read.ok()) return t;
      const std::string k(key);
      const uint64_t read_version = versions_[k];
      if (conflicts_left_ > 0) {
        --conflicts_left_;
        Store(k, kValueBytes);  // the other writer
      }
      Serve(false);
      ++puts_;
      if (versions_[k] != read_version) {
        t.conflict = true;
        t.write = FailedPrecondition("version changed");
        return t;
      }
      Store(k, value.size());
      return t;
    });
  }
  StatusOr<size_t> Get(std::string_view key) override {
    Serve(true);
    ++gets_;
    const auto it = values_.find(std::string(key));
    if (it == values_.end()) return NotFound(std::string(key));
    return it->second;
  }
  bool SupportsBatch() const override { return true; }
  std::vector<StatusOr<size_t>> MultiGet(std::span<const std::string> keys) override {
    Serve(true);
    std::vector<StatusOr<size_t>> out;
    for (const std::string& k : keys) {
      const auto it = values_.find(k);
      out.push_back(it == values_.end() ? StatusOr<size_t>(NotFound(k)) : StatusOr<size_t>(it->second));
    }
    return out;
  }
  std::vector<Status> MultiPut(std::span<const std::string> keys, std::span<const std::string_view> values) override {
    Serve(false);
    for (size_t i = 0; i < keys.size(); ++i) Store(keys[i], values[i].size());
    return std::vector<Status>(keys.size(), Status::Ok());
  }

  const std::vector<TimePoint>& call_starts() const { return call_starts_; }
  uint64_t gets() const { return gets_; }
  uint64_t puts() const { return puts_; }
  bool Has(const std::string& key) const { return values_.count(key) != 0; }

 private:
  void Store(const std::string& key, size_t value_bytes) {
    values_[key] = value_bytes;
    ++versions_[key];
  }
  void Serve(bool /*read*/) {
    call_starts_.push_back(clock_.Now());
    clock_.Advance(service_);
    if (calls_++ == stall_at_) clock_.Advance(stall_);
  }

  FakeClock& clock_;
  nanoseconds service_;
  uint64_t stall_at_ = UINT64_MAX;
  nanoseconds stall_{0};
  uint64_t calls_ = 0;
  uint64_t gets_ = 0;
  uint64_t puts_ = 0;
  uint64_t conflicts_left_ = 0;
  std::vector<TimePoint> call_starts_;
  std::map<std::string, size_t> values_;
  std::map<std::string, uint64_t> versions_;
};

struct FakeRun {
  FakeClock clock;
  FakeTarget target{clock, microseconds(10)};
  InsertCounter inserts{100};
  KeyChooser chooser{KeyDistribution::kUniform, 100, &inserts};
  std::string pool = std::string(kValueBytes + kValueSlack, 'v');
  LiveCounters live;
  ThreadResult result;
  RunSettings settings;

  explicit FakeRun(std::string_view workload, KeyDistribution distribution = KeyDistribution::kUniform)
      : chooser(distribution, 100, &inserts) {
    target.Load(100);
    settings.workload = *FindWorkload(workload);
    settings.value_bytes = kValueBytes;
    settings.start = clock.Now();
  }
  void Go() { RunThread(settings, target, pool, chooser, &inserts, clock, &live, result); }
};

// Latencies sorted, as the reference of a histogram.
void ExpectHistogramOf(const Histogram& h, std::vector<uint64_t> want) {
  std::sort(want.begin(), want.end());
  ASSERT_EQ(h.count(), want.size());
  for (double p : {50.0, 90.0, 95.0, 99.0, 99.9, 100.0}) {
    const double ref = static_cast<double>(want[PercentileRank(p, want.size()) - 1]);
    EXPECT_LE(std::abs(static_cast<double>(h.Percentile(p)) - ref), ref * Histogram::kMaxRelativeError) << "p" << p;
  }
  double sum = 0;
  for (uint64_t v : want) sum += static_cast<double>(v);
  EXPECT_DOUBLE_EQ(h.Mean(), sum / static_cast<double>(want.size()));
}

constexpr uint64_t kOps = 1000;
constexpr uint64_t kStallAt = 100;
constexpr int64_t kStallNs = 50'000'000;   // 50 ms
constexpr int64_t kServiceNs = 10'000;     // 10 us
constexpr int64_t kIntervalNs = 1'000'000; // 1000 ops/s

// The latencies an open loop must report: each operation from its due
// time k * interval to its end, the store serving one call at a time.
std::vector<uint64_t> OpenLoopReference() {
  std::vector<uint64_t> out;
  int64_t free_at = 0;  // when the store is next idle, from the start
  for (uint64_t k = 0; k < kOps; ++k) {
    const int64_t due = static_cast<int64_t>(k) * kIntervalNs;
    const int64_t start = std::max(due, free_at);
    const int64_t end = start + kServiceNs + (k == kStallAt ? kStallNs : 0);
    free_at = end;
    out.push_back(static_cast<uint64_t>(end - due));
  }
  return out;
}

TEST(OpRunnerTest, OpenLoopChargesAStallToEveryOperationDueDuringIt) {
  FakeRun run("get");
  run.settings.budget = kOps;
  run.settings.ops_per_s = 1e9 / kIntervalNs;
  run.target.StallOnce(kStallAt, nanoseconds(kStallNs));
  run.Go();

  const Histogram& reads = run.result.Of(OpType::kRead);
  EXPECT_EQ(run.result.ops, kOps);
  EXPECT_EQ(run.result.errors.Total(), 0u);
  EXPECT_EQ(run.result.unsent, 0u);
  ExpectHistogramOf(reads, OpenLoopReference());
  // The stalled call and the ~50 due during it: well over 1% of the
  // operations waited more than 30 ms.
  EXPECT_GT(reads.Percentile(99), 30'000'000u);
  EXPECT_GE(reads.max(), static_cast<uint64_t>(kStallNs));
  // The operations due during the stall were sent late, back to back,
  // right after it; before it, each was sent on time.
  const std::vector<TimePoint>& starts = run.target.call_starts();
  ASSERT_EQ(starts.size(), kOps);
  for (uint64_t k = 0; k <= kStallAt; ++k) {
    ASSERT_EQ(starts[k], run.settings.start + nanoseconds(static_cast<int64_t>(k) * kIntervalNs)) << k;
  }
  EXPECT_EQ(starts[kStallAt + 1], starts[kStallAt] + nanoseconds(kServiceNs + kStallNs));
  EXPECT_EQ(starts[kStallAt + 2], starts[kStallAt + 1] + nanoseconds(kServiceNs));
  // The live counters (the progress line) saw every operation.
  EXPECT_EQ(run.live.ops(), kOps);
}

TEST(OpRunnerTest, ClosedLoopHidesTheSameStallInOneOperation) {
  FakeRun run("get");
  run.settings.budget = kOps;
  run.target.StallOnce(kStallAt, nanoseconds(kStallNs));
  run.Go();
  const Histogram& reads = run.result.Of(OpType::kRead);
  ASSERT_EQ(reads.count(), kOps);
  // One operation saw the stall; the ones after it started after it.
  EXPECT_NEAR(static_cast<double>(reads.Percentile(99.9)), kServiceNs, kServiceNs * Histogram::kMaxRelativeError);
  EXPECT_EQ(reads.max(), static_cast<uint64_t>(kServiceNs + kStallNs));
  EXPECT_EQ(run.clock.sleeps(), 0);
}

TEST(OpRunnerTest, OpenLoopStaggersThreadsByPhase) {
  FakeRun run("get");
  run.settings.budget = 3;
  run.settings.ops_per_s = 1000;
  run.settings.phase = 0.5;
  run.Go();
  const std::vector<TimePoint>& starts = run.target.call_starts();
  ASSERT_EQ(starts.size(), 3u);
  for (int k = 0; k < 3; ++k) EXPECT_EQ(starts[k], run.settings.start + microseconds(500 + 1000 * k));
  // On time each time: latency is the service time alone.
  EXPECT_EQ(run.result.Of(OpType::kRead).max(), static_cast<uint64_t>(kServiceNs));
}

TEST(OpRunnerTest, OpenLoopSendsTheBacklogDueBeforeTheDeadline) {
  FakeRun run("get");
  run.settings.ops_per_s = 1000;
  run.settings.deadline = run.settings.start + milliseconds(200);
  run.target.StallOnce(0, milliseconds(500));
  run.Go();
  // Operations 0..199 were due before the deadline; the first call ended
  // at 500 ms, and the 199 others were still sent after it (operation 200,
  // due at the deadline, was not).
  EXPECT_EQ(run.result.ops, 200u);
  EXPECT_EQ(run.result.unsent, 0u);
  const Histogram& reads = run.result.Of(OpType::kRead);
  // Operation 199, due at 199 ms, ended at 500 ms + 200 calls of 10 us.
  EXPECT_EQ(reads.max(), 500'000'000u + 10'000u);
  EXPECT_GT(reads.Percentile(50), 300'000'000u);
}

TEST(OpRunnerTest, OpenLoopCountsOperationsDueButNeverSent) {
  FakeRun run("get");
  run.settings.ops_per_s = 1000;
  run.settings.deadline = run.settings.start + milliseconds(200);
  // The first call ends after the deadline and the drain.
  run.target.StallOnce(0, milliseconds(200) + kOpenLoopDrain);
  run.Go();
  EXPECT_EQ(run.result.ops, 1u);
  EXPECT_EQ(run.result.unsent, 199u);
}

TEST(OpenLoopScheduleTest, DueTimesAndCounts) {
  const TimePoint start{std::chrono::seconds(5)};
  const OpenLoopSchedule s(start, 3.0, 0.0);  // every 333333333.3 ns
  EXPECT_EQ(s.At(0), start);
  EXPECT_EQ(s.At(3), start + std::chrono::seconds(1));
  EXPECT_EQ(s.DueBy(start - nanoseconds(1)), 0u);
  EXPECT_EQ(s.DueBy(start), 1u);
  EXPECT_EQ(s.DueBy(start + std::chrono::seconds(1)), 4u);
  EXPECT_EQ(s.DueBy(start + std::chrono::seconds(1) - nanoseconds(1)), 3u);
  // No drift over many intervals.
  EXPECT_EQ(s.At(3'000'000), start + std::chrono::seconds(1'000'000));
}

TEST(OpRunnerTest, ReadModifyWriteIsItsOwnKindAndTimesBothCalls) {
  FakeRun run("f");
  run.settings.budget = 2000;
  run.Go();
  const uint64_t rmw = run.result.Of(OpType::kReadModifyWrite).count();
  const uint64_t reads = run.result.Of(OpType::kRead).count();
  EXPECT_EQ(rmw + reads, 2000u);
  EXPECT_NEAR(static_cast<double>(rmw), 1000.0, 120.0);
  EXPECT_EQ(run.result.Of(OpType::kUpdate).count(), 0u);
  // A GET for every read and every RMW, a PUT for every RMW.
  EXPECT_EQ(run.target.gets(), 2000u);
  EXPECT_EQ(run.target.puts(), rmw);
  EXPECT_EQ(run.result.Of(OpType::kReadModifyWrite).max(), static_cast<uint64_t>(2 * kServiceNs));
  EXPECT_EQ(run.result.Of(OpType::kReadModifyWrite).min(), static_cast<uint64_t>(2 * kServiceNs));
  EXPECT_EQ(run.result.errors.Total(), 0u);
  EXPECT_EQ(run.result.rmw_conflicts, 0u);
}

TEST(OpRunnerTest, ReadModifyWriteRetriesAConflictFromTheReadAndCountsIt) {
  FakeRun run("f");
  run.settings.budget = 200;
  run.target.Conflicts(1);
  run.Go();
  const Histogram& rmw = run.result.Of(OpType::kReadModifyWrite);
  ASSERT_GT(rmw.count(), 0u);
  EXPECT_EQ(run.result.rmw_conflicts, 1u);
  // The conflict is no error: every operation succeeded.
  EXPECT_EQ(run.result.errors.Total(), 0u);
  EXPECT_EQ(rmw.count() + run.result.Of(OpType::kRead).count(), 200u);
  // The refused compare-and-set was retried from the read: one GET and
  // one compare-and-set more.
  EXPECT_EQ(run.target.gets(), 200u + 1);
  EXPECT_EQ(run.target.puts(), rmw.count() + 1);
  // Timed as one operation: its two tries, four calls.
  EXPECT_EQ(rmw.max(), static_cast<uint64_t>(4 * kServiceNs));
  EXPECT_EQ(rmw.min(), static_cast<uint64_t>(2 * kServiceNs));
}

TEST(OpRunnerTest, ReadModifyWriteGivesUpAfterItsRetriesAsAFailedPut) {
  FakeRun run("f");
  run.settings.budget = 20;
  run.target.Conflicts(UINT64_MAX);
  run.Go();
  // Every read-modify-write met a conflict on each of its tries.
  const uint64_t failed = run.result.errors.put_failed;
  ASSERT_GT(failed, 0u);
  EXPECT_EQ(run.result.errors.Total(), failed);
  EXPECT_EQ(run.result.Of(OpType::kReadModifyWrite).count(), 0u);
  EXPECT_EQ(run.target.puts(), failed * (kReadModifyWriteRetries + 1));
  EXPECT_EQ(run.result.rmw_conflicts, failed * kReadModifyWriteRetries);
  ASSERT_FALSE(run.result.errors.samples.empty());
  EXPECT_NE(run.result.errors.samples[0].find("ABORTED"), std::string::npos) << run.result.errors.samples[0];
  EXPECT_NE(run.result.errors.samples[0].find("read-modify-write of user"), std::string::npos)
      << run.result.errors.samples[0];
}

TEST(OpRunnerTest, WorkloadDInsertsNewRecordsAndReadsOnlyExistingOnes) {
  FakeRun run("d", KeyDistribution::kLatest);
  run.settings.budget = 4000;
  run.Go();
  const uint64_t inserted = run.result.Of(OpType::kInsert).count();
  EXPECT_NEAR(static_cast<double>(inserted), 200.0, 60.0);
  EXPECT_EQ(run.result.Of(OpType::kRead).count() + inserted, 4000u);
  // Every read found its record: latest never picks one not yet inserted.
  EXPECT_EQ(run.result.errors.Total(), 0u);
  EXPECT_EQ(run.inserts.Last(), 100u + inserted - 1);
  EXPECT_TRUE(run.target.Has(RecordKey(100 + inserted - 1)));
  EXPECT_FALSE(run.target.Has(RecordKey(100 + inserted)));
}

TEST(OpRunnerTest, MissingRecordsAreCountedAsErrors) {
  FakeRun run("get");
  run.settings.budget = 10;
  InsertCounter more(1000);
  const KeyChooser wide(KeyDistribution::kUniform, 1'000'000);
  RunThread(run.settings, run.target, run.pool, wide, &more, run.clock, nullptr, run.result);
  EXPECT_GT(run.result.errors.get_not_found, 0u);
  EXPECT_FALSE(run.result.errors.samples.empty());
}

TEST(OpRunnerTest, BatchesRecordPerOperationAndPerBatch) {
  FakeRun run("a");
  run.settings.budget = 64;
  run.settings.batch = 16;
  run.Go();
  EXPECT_EQ(run.result.ops, 64u);
  EXPECT_EQ(run.result.Of(OpType::kBatch).count(), 4u);
  EXPECT_EQ(run.result.Of(OpType::kRead).count() + run.result.Of(OpType::kUpdate).count(), 64u);
  EXPECT_EQ(run.result.errors.Total(), 0u);
}

TEST(OpRunnerTest, MergeAddsThreads) {
  ThreadResult a;
  ThreadResult b;
  a.Of(OpType::kRead).Record(100);
  b.Of(OpType::kRead).Record(300);
  b.Of(OpType::kInsert).Record(50);
  a.ops = 1;
  b.ops = 2;
  b.unsent = 4;
  a.rmw_conflicts = 5;
  b.rmw_conflicts = 6;
  b.errors.insert_failed = 1;
  a.Merge(b);
  EXPECT_EQ(a.ops, 3u);
  EXPECT_EQ(a.unsent, 4u);
  EXPECT_EQ(a.rmw_conflicts, 11u);
  EXPECT_EQ(a.Of(OpType::kRead).count(), 2u);
  EXPECT_EQ(a.Of(OpType::kInsert).count(), 1u);
  EXPECT_EQ(a.errors.Total(), 1u);
}

}  // namespace
}  // namespace rkv::bench
