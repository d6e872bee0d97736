#include "server/table/rebuild.h"

#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/hash.h"
#include "common/mutex.h"
#include "server/table/heap.h"

namespace rkv::server {
namespace {

// Records travel from the scanning thread to the inserting one in batches:
// one copy into a contiguous buffer, one hand-over per kBatchRecords.
constexpr size_t kBatchRecords = 1024;
constexpr size_t kMaxBatchesQueued = 4;
// How many records ahead of the insert the table's buckets are prefetched.
constexpr size_t kPrefetchDistance = 16;

struct Batch {
  struct Record {
    size_t offset;  // of the key in `bytes`; the value follows it
    uint32_t key_bytes;
    uint32_t value_bytes;
    uint64_t version;
    int64_t expires_at_ms;  // 0: never
    uint64_t hash;          // TableHash(key, seed)
  };
  std::string bytes;
  std::vector<Record> records;
};

// A bounded queue of batches between the two threads, closed by either:
// the scanner when it is done (with its status), the inserter when it
// fails (the scanner then stops at its next batch).
class BatchQueue {
 public:
  // False when the consumer has failed: stop scanning.
  bool Push(std::unique_ptr<Batch> batch) EXCLUDES(mu_) {
    MutexLock lock(mu_);
    cv_.Wait(mu_, [&] {
      mu_.AssertHeld();
      return queue_.size() < kMaxBatchesQueued || consumer_failed_;
    });
    if (consumer_failed_) return false;
    queue_.push_back(std::move(batch));
    cv_.NotifyAll();
    return true;
  }
  void CloseProducer(Status status) EXCLUDES(mu_) {
    MutexLock lock(mu_);
    producer_done_ = true;
    producer_status_ = std::move(status);
    cv_.NotifyAll();
  }
  void FailConsumer() EXCLUDES(mu_) {
    MutexLock lock(mu_);
    consumer_failed_ = true;
    cv_.NotifyAll();
  }
  // The next batch; null at the end (then `status` is the producer's).
  std::unique_ptr<Batch> Pop(Status* status) EXCLUDES(mu_) {
    MutexLock lock(mu_);
    cv_.Wait(mu_, [&] {
      mu_.AssertHeld();
      return !queue_.empty() || producer_done_;
    });
    if (queue_.empty()) {
      *status = producer_status_;
      return nullptr;
    }
    std::unique_ptr<Batch> b = std::move(queue_.front());
    queue_.pop_front();
    cv_.NotifyAll();
    return b;
  }

 private:
  Mutex mu_;
  CondVar cv_;
  std::deque<std::unique_ptr<Batch>> queue_ GUARDED_BY(mu_);
  bool producer_done_ GUARDED_BY(mu_) = false;
  bool consumer_failed_ GUARDED_BY(mu_) = false;
  Status producer_status_ GUARDED_BY(mu_);
};

// The scanning thread: reads the store (RocksDB iteration, record checks
// and CRC32C in Store::Scan), checks limits, hashes keys.
Status ScanInto(const Store& store, uint64_t seed, const RebuildLimits& limits, BatchQueue& queue) {
  auto batch = std::make_unique<Batch>();
  bool stopped = false;
  // Expired records are loaded like any other: they read as absent, and
  // the primary's reclaimer deletes them (replicated) as it does at run
  // time, so replicas stay alike.
  Status s = store.ScanRecords([&](std::string_view key, uint64_t version, std::string_view value,
                                   int64_t expires_at_ms) -> Status {
    if (key.size() > limits.max_key_bytes || value.size() > limits.max_value_bytes) {
      return FailedPrecondition("stored key '" + PrintableKey(key) + "' (" + std::to_string(key.size()) +
                                "-byte key, " + std::to_string(value.size()) +
                                "-byte value) exceeds --max_key_bytes/--max_value_bytes; raise them");
    }
    batch->records.push_back(Batch::Record{batch->bytes.size(), static_cast<uint32_t>(key.size()),
                                           static_cast<uint32_t>(value.size()), version, expires_at_ms,
                                           TableHash(key, seed)});
    batch->bytes.append(key);
    batch->bytes.append(value);
    if (batch->records.size() == kBatchRecords) {
      if (!queue.Push(std::move(batch))) {
        stopped = true;
        return Aborted("the table refused a key");
      }
      batch = std::make_unique<Batch>();
      batch->records.reserve(kBatchRecords);
    }
    return Status::Ok();
  });
  if (stopped) return Status::Ok();  // the inserter's error is the one to report
  if (s.ok() && !batch->records.empty()) queue.Push(std::move(batch));
  return s;
}

}  // namespace

StatusOr<uint64_t> RebuildTable(const Store& store, Table& table, const RebuildLimits& limits) {
  const Heap::Clock::time_point now = Heap::Clock::now();
  BatchQueue queue;
  std::thread scanner([&] { queue.CloseProducer(ScanInto(store, table.hash_seed(), limits, queue)); });

  // This thread inserts: the table and heap are single-threaded.
  uint64_t n = 0;
  Status failed;
  Status scanned;
  while (std::unique_ptr<Batch> batch = queue.Pop(&scanned)) {
    const std::vector<Batch::Record>& records = batch->records;
    for (size_t i = 0; i < records.size() && i < kPrefetchDistance; ++i) table.Prefetch(records[i].hash);
    for (size_t i = 0; i < records.size(); ++i) {
      if (i + kPrefetchDistance < records.size()) table.Prefetch(records[i + kPrefetchDistance].hash);
      const Batch::Record& r = records[i];
      const std::string_view key(batch->bytes.data() + r.offset, r.key_bytes);
      const std::string_view value(batch->bytes.data() + r.offset + r.key_bytes, r.value_bytes);
      Status s = table.InsertAbsent(key, value, r.version, r.hash, now, r.expires_at_ms).status();
      if (!s.ok()) {
        failed = s.WithContext("rebuilding the table at key '" + PrintableKey(key) + "' after " +
                               std::to_string(n) + " keys (raise --max_keys or --memory)");
        break;
      }
      ++n;
    }
    if (!failed.ok()) {
      queue.FailConsumer();
      break;
    }
  }
  scanner.join();
  RKV_RETURN_IF_ERROR(failed);
  RKV_RETURN_IF_ERROR(scanned);
  return n;
}

}  // namespace rkv::server
