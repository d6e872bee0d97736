#include "bench/ycsb/op_runner.h"

#include <glog/logging.h>

#include <algorithm>
#include <cmath>

namespace rkv::bench {
namespace {

using TimePoint = RunClock::TimePoint;

uint64_t NanosSince(TimePoint start, TimePoint end) {
  if (end <= start) return 0;
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(end - start).count());
}

// Records one succeeded operation.
void Record(ThreadResult& result, LiveCounters* live, OpType op, uint64_t latency_ns) {
  result.Of(op).Record(latency_ns);
  if (live != nullptr) live->Record(latency_ns);
}

// A GET's outcome into the errors; true when it succeeded with the right
// length (a wrong length is an error, but the GET's latency still counts,
// as it always did).
bool NoteGet(const StatusOr<size_t>& length, const std::string& key, uint64_t value_bytes, Errors& errors,
             bool* answered) {
  *answered = length.ok();
  if (!length.ok()) {
    if (length.status().code() == StatusCode::kNotFound) {
      ++errors.get_not_found;
    } else {
      ++errors.get_failed;
    }
    errors.Sample("GET " + key + ": " + length.status().ToString());
    return false;
  }
  if (*length != value_bytes) {
    ++errors.get_wrong_length;
    errors.Sample("GET " + key + ": value of " + std::to_string(*length) + " bytes, want " +
                  std::to_string(value_bytes));
    return false;
  }
  return true;
}

bool IsMixed(const Workload& w) {
  int kinds = 0;
  for (OpType op : kAllOpTypes) kinds += w.Has(op) ? 1 : 0;
  return kinds > 1;
}

OpType OnlyKind(const Workload& w) {
  for (OpType op : kAllOpTypes) {
    if (w.Has(op)) return op;
  }
  return OpType::kRead;
}

// One operation at a time, closed or open loop.
void RunSingles(const RunSettings& s, KvTarget& target, const std::string& pool, const KeyChooser& chooser,
                InsertCounter* inserts, RunClock& clock, LiveCounters* live, ThreadResult& result) {
  std::mt19937_64 rng(s.seed);
  std::uniform_real_distribution<double> coin(0.0, 1.0);
  const bool mixed = IsMixed(s.workload);
  const OpType only = OnlyKind(s.workload);
  const bool open_loop = s.ops_per_s > 0;
  const std::optional<OpenLoopSchedule> schedule =
      open_loop ? std::optional<OpenLoopSchedule>(OpenLoopSchedule(s.start, s.ops_per_s, s.phase)) : std::nullopt;
  // Keys and operation kinds are drawn kDrawBatch operations ahead, so the
  // operations run back to back, as perftest posts its work requests: no
  // key formatting between two of them. (Under emulation the code run
  // between two operations slows the next one measurably.) An insert's key
  // is taken when it runs: the insert counter hands out its index.
  constexpr uint64_t kDrawBatch = 256;
  std::vector<std::string> keys(kDrawBatch);
  std::vector<OpType> kinds(kDrawBatch);
  std::string insert_key;
  TimePoint end = s.start;
  uint64_t n = 0;
  for (; n < s.budget; ++n) {
    if (n % kDrawBatch == 0) {
      const uint64_t ahead = std::min(kDrawBatch, s.budget - n);
      for (uint64_t k = 0; k < ahead; ++k) {
        kinds[k] = mixed ? s.workload.Pick(coin(rng)) : only;
        if (kinds[k] != OpType::kInsert) keys[k] = RecordKey(chooser.Next(rng));
      }
    }
    TimePoint due{};
    if (schedule) {
      due = schedule->At(n);
      if (s.deadline && due >= *s.deadline) break;
      clock.SleepUntil(due);
    }
    const OpType kind = kinds[n % kDrawBatch];
    const std::string& key = keys[n % kDrawBatch];
    bool ok = false;
    TimePoint start{};
    switch (kind) {
      case OpType::kRead: {
        start = clock.Now();
        StatusOr<size_t> length = target.Get(key);
        end = clock.Now();
        bool answered = false;
        NoteGet(length, key, s.value_bytes, result.errors, &answered);
        ok = answered;
        break;
      }
      case OpType::kUpdate: {
        const std::string_view value = ValueFor(pool, n + s.value_offset, s.value_bytes);
        start = clock.Now();
        Status st = target.Put(key, value);
        end = clock.Now();
        ok = st.ok();
        if (!ok) {
          ++result.errors.put_failed;
          result.errors.Sample("PUT " + key + ": " + st.ToString());
        }
        break;
      }
      case OpType::kInsert: {
        CHECK(inserts != nullptr) << "a workload with inserts needs an InsertCounter";
        const uint64_t index = inserts->Issue();
        insert_key = RecordKey(index);
        const std::string_view value = ValueFor(pool, n + s.value_offset, s.value_bytes);
        start = clock.Now();
        Status st = target.Put(insert_key, value);
        end = clock.Now();
        inserts->Acknowledge(index);
        ok = st.ok();
        if (!ok) {
          ++result.errors.insert_failed;
          result.errors.Sample("insert PUT " + insert_key + ": " + st.ToString());
        }
        break;
      }
      case OpType::kReadModifyWrite: {
        // The new value differs from the one the last PUT of this thread
        // wrote (another offset in the pool). One operation, one latency,
        // however many conflicts it retried.
        const std::string_view value = ValueFor(pool, n + s.value_offset + 1, s.value_bytes);
        start = clock.Now();
        ReadModifyWriteResult rmw = target.ReadModifyWrite(key, value);
        end = clock.Now();
        result.rmw_conflicts += rmw.conflicts;
        bool answered = false;
        NoteGet(rmw.read, key, s.value_bytes, result.errors, &answered);
        if (answered) {
          ok = rmw.write.ok();
          if (!ok) {
            ++result.errors.put_failed;
            result.errors.Sample("RMW PUT " + key + ": " + rmw.write.ToString());
          }
        }
        break;
      }
      case OpType::kBatch:
        LOG(FATAL) << "not an operation";
    }
    if (ok) Record(result, live, kind, NanosSince(schedule ? due : start, end));
    ++result.ops;
    // Closed loop: stop at the deadline. Open loop: operations due before
    // it are still sent, late, for up to kOpenLoopDrain after it, so that
    // the backlog of a slow store shows in the latencies.
    if (s.deadline && end >= *s.deadline + (schedule ? kOpenLoopDrain : RunClock::TimePoint::duration::zero())) {
      ++n;
      break;
    }
  }
  if (schedule) {
    // Due before the deadline (or by the end of the last call) and never
    // sent.
    const TimePoint horizon = s.deadline ? std::min(end, *s.deadline - std::chrono::nanoseconds(1)) : end;
    const uint64_t due_by_end = std::min(s.budget, schedule->DueBy(horizon));
    result.unsent += due_by_end > n ? due_by_end - n : 0;
  }
}

// --batch > 1: the same draws as RunSingles, s.batch at a time, the GETs
// as one MultiGet and the PUTs as one MultiPut. Reads and updates only.
void RunBatches(const RunSettings& s, KvTarget& target, const std::string& pool, const KeyChooser& chooser,
                RunClock& clock, LiveCounters* live, ThreadResult& result) {
  std::mt19937_64 rng(s.seed);
  std::uniform_real_distribution<double> coin(0.0, 1.0);
  const bool mixed = IsMixed(s.workload);
  const OpType only = OnlyKind(s.workload);
  std::vector<std::string> get_keys;
  std::vector<std::string> put_keys;
  std::vector<std::string_view> put_values;
  for (uint64_t n = 0; n < s.budget;) {
    const uint64_t size = std::min<uint64_t>(static_cast<uint64_t>(s.batch), s.budget - n);
    get_keys.clear();
    put_keys.clear();
    put_values.clear();
    for (uint64_t k = 0; k < size; ++k) {
      std::string key = RecordKey(chooser.Next(rng));
      const OpType kind = mixed ? s.workload.Pick(coin(rng)) : only;
      CHECK(kind == OpType::kRead || kind == OpType::kUpdate) << "--batch runs reads and updates only";
      if (kind == OpType::kRead) {
        get_keys.push_back(std::move(key));
      } else {
        put_keys.push_back(std::move(key));
        put_values.push_back(ValueFor(pool, n + k + s.value_offset, s.value_bytes));
      }
    }
    const TimePoint start = clock.Now();
    TimePoint end = start;
    if (!get_keys.empty()) {
      const std::vector<StatusOr<size_t>> lengths = target.MultiGet(get_keys);
      end = clock.Now();
      for (size_t i = 0; i < get_keys.size(); ++i) {
        bool answered = false;
        NoteGet(lengths[i], get_keys[i], s.value_bytes, result.errors, &answered);
        if (answered) Record(result, live, OpType::kRead, NanosSince(start, end));
      }
    }
    if (!put_keys.empty()) {
      const TimePoint put_start = end;
      const std::vector<Status> put = target.MultiPut(put_keys, put_values);
      end = clock.Now();
      for (size_t i = 0; i < put_keys.size(); ++i) {
        if (!put[i].ok()) {
          ++result.errors.put_failed;
          result.errors.Sample("PUT " + put_keys[i] + ": " + put[i].ToString());
        } else {
          Record(result, live, OpType::kUpdate, NanosSince(put_start, end));
        }
      }
    }
    result.Of(OpType::kBatch).Record(NanosSince(start, end));
    result.ops += size;
    n += size;
    if (s.deadline && end >= *s.deadline) break;
  }
}

}  // namespace

std::string RandomPool(size_t bytes, std::mt19937_64& rng) {
  static constexpr std::string_view kAlphabet =
      "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  std::string pool(bytes, '\0');
  std::uniform_int_distribution<size_t> pick(0, kAlphabet.size() - 1);
  for (char& ch : pool) ch = kAlphabet[pick(rng)];
  return pool;
}

std::string_view ValueFor(const std::string& pool, uint64_t n, uint64_t value_bytes) {
  return std::string_view(pool).substr(n % kValueSlack, value_bytes);
}

void Errors::Merge(const Errors& other) {
  load_failed += other.load_failed;
  get_failed += other.get_failed;
  get_not_found += other.get_not_found;
  get_wrong_length += other.get_wrong_length;
  put_failed += other.put_failed;
  insert_failed += other.insert_failed;
  for (const std::string& s : other.samples) Sample(s);
}

void ThreadResult::Merge(const ThreadResult& other) {
  for (size_t i = 0; i < kOpTypeCount; ++i) latency_ns[i].Merge(other.latency_ns[i]);
  ops += other.ops;
  unsent += other.unsent;
  rmw_conflicts += other.rmw_conflicts;
  errors.Merge(other.errors);
}

OpenLoopSchedule::OpenLoopSchedule(TimePoint start, double ops_per_s, double phase)
    : start_(start), interval_ns_(1e9 / ops_per_s), phase_(phase) {
  CHECK(ops_per_s > 0) << "an open loop needs a rate";
}

OpenLoopSchedule::TimePoint OpenLoopSchedule::At(uint64_t k) const {
  // From the start each time, not by adding intervals: no drift.
  const double offset = (static_cast<double>(k) + phase_) * interval_ns_;
  return start_ + std::chrono::duration_cast<TimePoint::duration>(
                      std::chrono::nanoseconds(static_cast<int64_t>(std::llround(offset))));
}

uint64_t OpenLoopSchedule::DueBy(TimePoint t) const {
  if (t < start_) return 0;
  const double elapsed = static_cast<double>(NanosSince(start_, t));
  const double due = std::floor(elapsed / interval_ns_ - phase_) + 1.0;
  if (due <= 0) return 0;
  uint64_t k = static_cast<uint64_t>(due);
  // Rounding in At() may put operation k - 1 just after t, or k at t.
  while (k > 0 && At(k - 1) > t) --k;
  while (At(k) <= t) ++k;
  return k;
}

void RunThread(const RunSettings& settings, KvTarget& target, const std::string& pool, const KeyChooser& chooser,
               InsertCounter* inserts, RunClock& clock, LiveCounters* live, ThreadResult& result) {
  if (settings.batch > 1) {
    CHECK(settings.ops_per_s == 0) << "the open loop runs one operation at a time";
    RunBatches(settings, target, pool, chooser, clock, live, result);
  } else {
    RunSingles(settings, target, pool, chooser, inserts, clock, live, result);
  }
}

}  // namespace rkv::bench
