#include "server/store/store.h"

#include <algorithm>
#include <cctype>
#include <cstdarg>
#include <cstdio>
#include <cstring>

#include <glog/logging.h>
#include <rocksdb/db.h>
#include <rocksdb/memtablerep.h>
#include <rocksdb/env.h>
#include <rocksdb/file_system.h>
#include <rocksdb/iterator.h>
#include <rocksdb/listener.h>
#include <rocksdb/options.h>
#include <rocksdb/statistics.h>
#include <rocksdb/write_batch.h>

#include "common/crc32c.h"

namespace rkv::server {
namespace {

constexpr char kDataPrefix = 'd';
constexpr char kMetaPrefix = 'm';
constexpr std::string_view kVersionKey = "mversion";
constexpr std::string_view kEpochKey = "mepoch";
static_assert(kVersionKey[0] == kMetaPrefix && kEpochKey[0] == kMetaPrefix);

constexpr uint8_t kRecordFormat = 1;         // no expiry
constexpr uint8_t kRecordFormatExpiry = 2;   // with an expiry
constexpr size_t kRecordHeaderBytes = 1 + 8 + 4;
constexpr size_t kRecordExpiryHeaderBytes = 1 + 8 + 8 + 4;

rocksdb::Slice ToSlice(std::string_view s) { return rocksdb::Slice(s.data(), s.size()); }

void PutU64(std::string* out, uint64_t v) {
  char b[8];
  for (int i = 0; i < 8; ++i) b[i] = static_cast<char>(v >> (8 * i));
  out->append(b, 8);
}
uint64_t GetU64(const char* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= uint64_t{static_cast<uint8_t>(p[i])} << (8 * i);
  return v;
}
uint32_t GetU32(const char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= uint32_t{static_cast<uint8_t>(p[i])} << (8 * i);
  return v;
}

uint32_t RecordCrc(uint8_t format, uint64_t version, int64_t expires_at_ms, std::string_view key,
                   std::string_view value) {
  std::string head;
  head.push_back(static_cast<char>(format));
  PutU64(&head, version);
  if (format == kRecordFormatExpiry) PutU64(&head, static_cast<uint64_t>(expires_at_ms));
  uint32_t crc = Crc32c(head.data(), head.size());
  crc = Crc32cExtend(crc, key.data(), key.size());
  return Crc32cExtend(crc, value.data(), value.size());
}

struct Decoded {
  uint64_t version;
  std::string_view value;
  int64_t expires_at_ms;
};

StatusOr<Decoded> DecodeStored(std::string_view key, std::string_view stored) {
  // Built only on failure: the rebuild decodes every record.
  const auto where = [&] { return "stored record of key '" + PrintableKey(key) + "'"; };
  if (key.empty()) return DataLoss("stored record with an empty key");
  if (stored.size() < kRecordHeaderBytes) {
    return DataLoss(where() + " is " + std::to_string(stored.size()) + " bytes, shorter than its header");
  }
  const uint8_t format = static_cast<uint8_t>(stored[0]);
  if (format != kRecordFormat && format != kRecordFormatExpiry) {
    return DataLoss(where() + " has unknown format " + std::to_string(format));
  }
  const uint64_t version = GetU64(stored.data() + 1);
  int64_t expires_at_ms = 0;
  size_t header = kRecordHeaderBytes;
  if (format == kRecordFormatExpiry) {
    if (stored.size() < kRecordExpiryHeaderBytes) {
      return DataLoss(where() + " is " + std::to_string(stored.size()) + " bytes, shorter than its header");
    }
    expires_at_ms = static_cast<int64_t>(GetU64(stored.data() + 9));
    if (expires_at_ms <= 0) return DataLoss(where() + " has the expiry " + std::to_string(expires_at_ms));
    header = kRecordExpiryHeaderBytes;
  }
  const uint32_t crc = GetU32(stored.data() + header - 4);
  const std::string_view value = stored.substr(header);
  if (version == 0) return DataLoss(where() + " has version 0");
  if (RecordCrc(format, version, expires_at_ms, key, value) != crc) return DataLoss(where() + " fails its checksum");
  return Decoded{version, value, expires_at_ms};
}

StatusOr<uint64_t> ReadMeta(rocksdb::DB* db, std::string_view key, const std::string& dir) {
  std::string v;
  const rocksdb::Status s = db->Get(rocksdb::ReadOptions(), ToSlice(key), &v);
  if (s.IsNotFound()) return uint64_t{0};
  if (!s.ok()) return Internal("rocksdb get " + std::string(key) + " in " + dir + ": " + s.ToString());
  if (v.size() != 8) {
    return DataLoss("meta key '" + std::string(key.substr(1)) + "' in " + dir + " is " +
                    std::to_string(v.size()) + " bytes, expected 8");
  }
  return GetU64(v.data());
}

Status FromRocks(const rocksdb::Status& s, std::string_view context) {
  if (s.ok()) return Status::Ok();
  if (s.IsCorruption()) return DataLoss(std::string(context) + ": " + s.ToString());
  if (s.IsNoSpace()) return ResourceExhausted(std::string(context) + ": " + s.ToString());
  return Internal(std::string(context) + ": " + s.ToString());
}

// RocksDB's own log, at warning level and above, into the server's log. Its
// default, a LOG file in the data dir, fails on a full disk like the rest,
// and this RocksDB build then aborts on its next line (an assertion on the
// writer that saw the error).
class GlogLogger : public rocksdb::Logger {
 public:
  GlogLogger() : Logger(rocksdb::InfoLogLevel::WARN_LEVEL) {}
  using Logger::Logv;
  void Logv(const rocksdb::InfoLogLevel level, const char* format, va_list ap) override {
    if (level < GetInfoLogLevel()) return;
    char text[1024];
    std::vsnprintf(text, sizeof(text), format, ap);
    if (level >= rocksdb::InfoLogLevel::ERROR_LEVEL) {
      LOG(ERROR) << "rocksdb: " << text;
    } else {
      LOG(WARNING) << "rocksdb: " << text;
    }
  }
};

// Turns off RocksDB's automatic recovery from background errors, so that
// Store::Recover is the only path out of the error state (see store.h).
class ManualRecoveryOnly : public rocksdb::EventListener {
 public:
  const char* Name() const override { return "rkv.ManualRecoveryOnly"; }
  void OnErrorRecoveryBegin(rocksdb::BackgroundErrorReason /*reason*/, rocksdb::Status bg_error,
                            bool* auto_recovery) override {
    bg_error.PermitUncheckedError();
    *auto_recovery = false;
  }
};

}  // namespace

StatusOr<Durability> ParseDurability(std::string_view name) {
  if (name == "none") return Durability::kNone;
  if (name == "wal") return Durability::kWal;
  if (name == "sync") return Durability::kSync;
  return InvalidArgument("unknown durability '" + std::string(name) + "': expected none, wal or sync");
}

const char* DurabilityName(Durability d) {
  switch (d) {
    case Durability::kNone: return "none";
    case Durability::kWal: return "wal";
    case Durability::kSync: return "sync";
  }
  return "?";
}

std::string PrintableKey(std::string_view key) {
  constexpr size_t kMax = 64;
  std::string out;
  for (size_t i = 0; i < key.size() && i < kMax; ++i) {
    const unsigned char c = static_cast<unsigned char>(key[i]);
    if (std::isprint(c) && c != '\\' && c != '\'') {
      out.push_back(static_cast<char>(c));
    } else {
      static constexpr char kHex[] = "0123456789abcdef";
      out += "\\x";
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    }
  }
  if (key.size() > kMax) out += "...";
  return out;
}

Store::Store(std::string dir, const StoreOptions& options) : dir_(std::move(dir)), options_(options) {}

Store::~Store() {
  if (writer_.joinable()) {
    {
      MutexLock lock(queue_mu_);
      stopping_ = true;
    }
    work_cv_.NotifyAll();
    writer_.join();
  }
  if (!db_) return;
  if (options_.durability == Durability::kNone) {
    const rocksdb::Status s = db_->Flush(rocksdb::FlushOptions());
    if (!s.ok()) LOG(ERROR) << "rocksdb flush of " << dir_ << " failed: " << s.ToString();
  }
  const rocksdb::Status s = db_->Close();
  if (!s.ok()) LOG(ERROR) << "rocksdb close of " << dir_ << " failed: " << s.ToString();
}

StatusOr<std::unique_ptr<Store>> Store::Open(const std::string& dir, const StoreOptions& store_options) {
  if (store_options.resume_backoff_initial.count() <= 0 ||
      store_options.resume_backoff_max < store_options.resume_backoff_initial) {
    return InvalidArgument("store resume backoff: initial " +
                           std::to_string(store_options.resume_backoff_initial.count()) + " ms, max " +
                           std::to_string(store_options.resume_backoff_max.count()) +
                           " ms; need 0 < initial <= max");
  }
  if (store_options.background_queue > (1U << 20) || store_options.background_queue_bytes == 0) {
    return InvalidArgument("store background queue: " + std::to_string(store_options.background_queue) +
                           " writes, " + std::to_string(store_options.background_queue_bytes) +
                           " bytes; need at most 1048576 writes and more than 0 bytes");
  }
  if (store_options.deferred_sync &&
      (store_options.durability != Durability::kSync || store_options.background_queue > 0)) {
    return InvalidArgument("store: deferred syncs (group commit) need durability sync and no background writes");
  }
  std::unique_ptr<Store> store(new Store(dir, store_options));
  rocksdb::Options options;
  options.create_if_missing = true;
  // A failed WAL append stops writes instead of being skipped over: a WAL
  // with a torn record in its middle would stop replay there and lose the
  // acknowledged writes after it.
  options.paranoid_checks = true;
  options.keep_log_file_num = 4;
  // rkv writes RocksDB and reads it back only when it starts (one scan,
  // server/table/rebuild.cc): its GETs are served from the in-memory
  // table. A vector memtable appends each write (a skiplist insert walks
  // and splices the list: most of RocksDB's share of a write's CPU) and
  // sorts once, when the memtable is flushed or first read. It takes one
  // writer at a time, as rkv's writes already are (table_mu_).
  options.memtable_factory = std::make_shared<rocksdb::VectorRepFactory>();
  options.allow_concurrent_memtable_write = false;
  if (store_options.file_system) {
    store->env_ = rocksdb::NewCompositeEnv(store_options.file_system);
    options.env = store->env_.get();
  }
  options.info_log = std::make_shared<GlogLogger>();
  // Tickers only (activity()): no histogram or timer on the write path.
  store->statistics_ = rocksdb::CreateDBStatistics();
  store->statistics_->set_stats_level(rocksdb::StatsLevel::kExceptHistogramOrTimers);
  options.statistics = store->statistics_;
  store->listener_ = std::make_shared<ManualRecoveryOnly>();
  options.listeners.push_back(store->listener_);
  store->db_options_ = std::make_unique<rocksdb::Options>(options);
  rocksdb::DB* raw = nullptr;
  const rocksdb::Status s = rocksdb::DB::Open(options, dir, &raw);
  if (!s.ok()) {
    std::string text = s.ToString();
    std::string lower = text;
    std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
    if (s.IsIOError() && lower.find("lock") != std::string::npos) {
      return FailedPrecondition("data_dir " + dir + " is in use by another process (RocksDB LOCK held): " + text);
    }
    return FromRocks(s, "opening RocksDB in " + dir);
  }
  store->db_.reset(raw);
  RKV_ASSIGN_OR_RETURN(const uint64_t old_epoch, ReadMeta(raw, kEpochKey, dir));
  RKV_ASSIGN_OR_RETURN(store->version_hw_, ReadMeta(raw, kVersionKey, dir));
  store->epoch_ = old_epoch + 1;
  std::string v;
  PutU64(&v, store->epoch_);
  rocksdb::WriteOptions wo;
  wo.sync = true;  // a new epoch must never be handed out twice
  RKV_RETURN_IF_ERROR(FromRocks(raw->Put(wo, ToSlice(kEpochKey), v), "writing the epoch in " + dir));
  if (store_options.background_queue > 0) {
    Store* const s = store.get();
    {
      MutexLock lock(s->queue_mu_);
    }
    s->writer_ = std::thread([s] { s->WriterLoop(); });
  }
  return store;
}

Status Store::AddToBatch(rocksdb::WriteBatch* batch, bool put, std::string_view key, std::string_view value,
                         uint64_t version, int64_t expires_at_ms, uint64_t hw, bool mark) {
  // One buffer per calling thread for the prefixed key and the encoded
  // record: WriteBatch copies them.
  thread_local std::string dkey;
  thread_local std::string stored;
  dkey.assign(1, kDataPrefix);
  dkey.append(key);
  if (!put) return FromRocks(batch->Delete(dkey), "batch");
  stored.clear();
  const uint8_t format = expires_at_ms == 0 ? kRecordFormat : kRecordFormatExpiry;
  stored.push_back(static_cast<char>(format));
  PutU64(&stored, version);
  if (format == kRecordFormatExpiry) PutU64(&stored, static_cast<uint64_t>(expires_at_ms));
  const uint32_t crc = RecordCrc(format, version, expires_at_ms, key, value);
  for (int i = 0; i < 4; ++i) stored.push_back(static_cast<char>(crc >> (8 * i)));
  stored.append(value);
  RKV_RETURN_IF_ERROR(FromRocks(batch->Put(dkey, stored), "batch"));
  return mark ? AddMark(batch, hw) : Status::Ok();
}

Status Store::AddMark(rocksdb::WriteBatch* batch, uint64_t hw) {
  std::string mark;  // 8 bytes: held inline, no allocation
  PutU64(&mark, hw);
  return FromRocks(batch->Put(ToSlice(kVersionKey), mark), "batch");
}

Status Store::Commit(rocksdb::WriteBatch* batch, const std::function<std::string()>& describe) {
  if (error_) RKV_RETURN_IF_ERROR(Recover());
  rocksdb::WriteOptions wo;
  // kNone's writer writes the WAL too (no fsync): a write it has written
  // then survives a process crash, so what a crash loses is what the
  // write-back buffer holds, which background_queue and _bytes bound (and
  // unwritten() shows). Without the WAL the memtables would lose it too,
  // up to two of RocksDB's 64 MiB write buffers whatever the bound.
  wo.disableWAL = !writes_wal();
  wo.sync = options_.durability == Durability::kSync && !options_.deferred_sync;
  const rocksdb::Status written = db_->Write(wo, batch);
  if (!written.ok()) {
    const Status s = FromRocks(written, describe());
    EnterErrorState(s);
    return s;
  }
  if (options_.deferred_sync) writes_made_.fetch_add(1, std::memory_order_release);
  if (error_) {
    LOG(INFO) << "store in " << dir_ << " accepts writes again (" << error_->refused
              << " writes refused since: " << error_->status << ")";
    error_.reset();
  }
  return Status::Ok();
}

Status Store::Write(std::string_view what, std::string_view key, bool put, std::string_view value,
                    uint64_t version, int64_t expires_at_ms) {
  const uint64_t new_hw = std::max(version_hw_, version);
  if (background()) {
    RKV_RETURN_IF_ERROR(Enqueue(put, key, value, version, expires_at_ms, new_hw));
    version_hw_ = new_hw;
    return Status::Ok();
  }
  thread_local rocksdb::WriteBatch batch;
  batch.Clear();
  RKV_RETURN_IF_ERROR(AddToBatch(&batch, put, key, value, version, expires_at_ms, new_hw));
  RKV_RETURN_IF_ERROR(
      Commit(&batch, [&] { return "rocksdb " + std::string(what) + " of key '" + PrintableKey(key) + "'"; }));
  version_hw_ = new_hw;
  return Status::Ok();
}

Status Store::Enqueue(bool put, std::string_view key, std::string_view value, uint64_t version,
                      int64_t expires_at_ms, uint64_t hw) {
  const uint64_t bytes = key.size() + value.size();
  MutexLock lock(queue_mu_);
  // A write of a key already pending replaces it in place (no new entry);
  // room is still checked as for a new one, which only errs on waiting.
  const auto has_room = [&] {
    queue_mu_.AssertHeld();
    const size_t held = pending_.size() + writing_count_;
    return queue_error_.has_value() ||
           (held < options_.background_queue &&
            (held == 0 || pending_bytes_ + writing_bytes_ + bytes <= options_.background_queue_bytes));
  };
  if (!has_room()) {
    // Back-pressure: the writer writes while anyone waits for it.
    ++waiters_;
    work_cv_.NotifyOne();
    progress_cv_.Wait(queue_mu_, has_room);
    --waiters_;
  }
  if (queue_error_) {
    return Status(queue_error_->code(), "writes are refused until the store recovers from: " +
                                            queue_error_->message());
  }
  // A key already buffered keeps its entry; a new one reuses the buffers of
  // an entry written before when there is one: a warm buffer allocates
  // nothing.
  bool existed = false;
  WriteBackBuffer::Entry& w = pending_.Upsert(key, &existed);
  if (existed) pending_bytes_ -= key.size() + w.value.size();
  w.put = put;
  w.value.assign(value);
  w.version = version;
  w.expires_at_ms = expires_at_ms;
  pending_bytes_ += bytes;
  pending_hw_ = std::max(pending_hw_, hw);
  // Below the trigger a write wakes nobody; past it, a notify while the
  // writer writes finds no waiter and costs no system call.
  if (WriteDue()) work_cv_.NotifyOne();
  return Status::Ok();
}

bool Store::WriteDue() const {
  if (pending_.empty()) return false;
  if (stopping_ || waiters_ > 0) return true;
  // Half the limits: the rest is room for the writes that arrive while the
  // writer writes.
  const size_t trigger_writes = std::max<size_t>(1, options_.background_queue / 2);
  const uint64_t trigger_bytes = std::max<uint64_t>(1, options_.background_queue_bytes / 2);
  return pending_.size() >= trigger_writes || pending_bytes_ >= trigger_bytes;
}

void Store::WriterLoop() {
  // One WriteBatch holds at most this many writes or bytes of keys and
  // values (a single larger write goes alone), so a large buffer is written
  // in steps that each free room for producers.
  constexpr size_t kChunkWrites = 256;
  constexpr uint64_t kChunkBytes = 4ULL << 20;
  // Without a recovery backoff (an error outside the error state), the
  // next attempt waits this long.
  constexpr auto kRetryTick = std::chrono::milliseconds(1);
  rocksdb::WriteBatch batch;
  bool last_attempt = false;
  for (;;) {
    if (!writing_.empty() && writing_next_ == writing_.size()) {
      // All written: empty it (keeping buffers for reuse) outside the
      // mutex; the next swap hands it to producers.
      writing_.Clear();
      writing_next_ = 0;
    }
    {
      MutexLock lock(queue_mu_);
      if (writing_.empty()) {
        work_cv_.Wait(queue_mu_, [&] {
          queue_mu_.AssertHeld();
          return WriteDue() || (stopping_ && pending_.empty());
        });
        if (pending_.empty()) return;  // stopping, everything written
        // Take the whole buffer: producers start a new one meanwhile, and
        // a key written again lands after this one's write (per-key order).
        writing_.swap(pending_);
        writing_count_ = writing_.size();
        writing_bytes_ = pending_bytes_;
        writing_hw_ = pending_hw_;
        pending_bytes_ = 0;
      }
      if (stopping_ && queue_error_) {
        if (last_attempt) {
          LOG(ERROR) << "store in " << dir_ << " is closing with " << writing_count_ + pending_.size()
                     << " acknowledged writes it could not write: they are lost (" << *queue_error_ << ")";
          writing_.Clear();
          writing_next_ = 0;
          pending_.Clear();
          writing_count_ = 0;
          writing_bytes_ = 0;
          pending_bytes_ = 0;
          progress_cv_.NotifyAll();
          return;
        }
        last_attempt = true;
        if (error_) error_->next_recovery = std::chrono::steady_clock::now();
      }
    }
    // writing_ is the writer's alone until it is empty (producers only read
    // its counters, under queue_mu_). Each batch carries the buffer's
    // high-water mark, above every version in it.
    batch.Clear();
    Status s;
    size_t n = 0;
    uint64_t bytes = 0;
    for (size_t i = writing_next_; i < writing_.size() && s.ok() && n < kChunkWrites && (n == 0 || bytes < kChunkBytes);
         ++i, ++n) {
      const WriteBackBuffer::Entry& e = writing_[i];
      bytes += e.key.size() + e.value.size();
      s = AddToBatch(&batch, e.put, e.key, e.value, e.version, e.expires_at_ms, writing_hw_, /*mark=*/false);
    }
    if (s.ok()) s = AddMark(&batch, writing_hw_);
    if (s.ok()) s = Commit(&batch, [n] { return "rocksdb write of " + std::to_string(n) + " buffered writes"; });
    MutexLock lock(queue_mu_);
    if (s.ok()) {
      writing_next_ += n;
      writing_count_ -= n;
      writing_bytes_ -= bytes;
      if (queue_error_) queue_error_.reset();
      progress_cv_.NotifyAll();
      continue;
    }
    // The error state: refuse new writes with the error that started it,
    // retry these once the backoff allows.
    queue_error_ = error_ ? error_->status : s;
    progress_cv_.NotifyAll();
    const auto retry = error_ ? error_->next_recovery : std::chrono::steady_clock::now() + kRetryTick;
    work_cv_.WaitUntil(queue_mu_, retry, [&] {
      queue_mu_.AssertHeld();
      return stopping_;
    });
  }
}

Store::Unwritten Store::unwritten() const {
  if (!background()) return {};
  MutexLock lock(queue_mu_);
  return Unwritten{pending_.size() + writing_count_, pending_bytes_ + writing_bytes_};
}

Store::Activity Store::activity() const {
  return Activity{statistics_->getTickerCount(rocksdb::STALL_MICROS),
                  statistics_->getTickerCount(rocksdb::WAL_FILE_BYTES)};
}

bool Store::in_error_state() const {
  if (!background()) return error_.has_value();
  MutexLock lock(queue_mu_);
  return queue_error_.has_value();
}

Status Store::Flush() const {
  if (!background()) return Status::Ok();
  MutexLock lock(queue_mu_);
  const auto written = [&] {
    queue_mu_.AssertHeld();
    return pending_.empty() && writing_count_ == 0;
  };
  if (written()) return Status::Ok();
  ++waiters_;
  work_cv_.NotifyOne();
  progress_cv_.Wait(queue_mu_, [&] {
    queue_mu_.AssertHeld();
    return written() || queue_error_.has_value();
  });
  --waiters_;
  if (written()) return Status::Ok();
  return Status(queue_error_->code(), "buffered writes cannot be written until the store recovers from: " +
                                          queue_error_->message());
}

void Store::EnterErrorState(const Status& failed) {
  // RocksDB refuses every write from now until a Resume (paranoid_checks).
  // Resume replaces the WAL only when the active memtable holds something
  // to flush; a WAL whose append failed while it was empty would stay in
  // use, its writer failing every later append (a fatal error). Then the
  // database is reopened instead, which replays the WAL up to the torn
  // append and starts a new one.
  uint64_t entries = 1;
  const bool wal_stuck = writes_wal() &&
                         db_->GetIntProperty("rocksdb.num-entries-active-mem-table", &entries) && entries == 0;
  const auto now = std::chrono::steady_clock::now();
  if (!error_) {
    LOG(ERROR) << "store in " << dir_ << " refuses writes until it recovers: " << failed;
    error_ = ErrorState{failed, now + options_.resume_backoff_initial, options_.resume_backoff_initial};
  } else {
    Backoff(now);
  }
  error_->reopen = error_->reopen || wal_stuck;
  ++error_->refused;
}

void Store::Backoff(std::chrono::steady_clock::time_point now) {
  error_->backoff = std::min(2 * error_->backoff, options_.resume_backoff_max);
  error_->next_recovery = now + error_->backoff;
}

Status Store::Recover() {
  const auto now = std::chrono::steady_clock::now();
  if (now >= error_->next_recovery) {
    Status s;
    if (error_->reopen) {
      s = Reopen();
    } else {
      const rocksdb::Status r = db_->Resume();
      // Resume refuses a fatal error (anything but a full disk, e.g. a WAL
      // writer that saw an error): reopening is the way out of those.
      if (!r.ok() && !r.IsNoSpace()) error_->reopen = true;
      s = FromRocks(r, "resuming RocksDB in " + dir_);
    }
    if (s.ok()) {
      error_->reopen = false;
      return Status::Ok();  // the write goes ahead; the state ends when it succeeds
    }
    VLOG(1) << "store recovery failed: " << s;
    Backoff(now);
  }
  ++error_->refused;
  return Status(error_->status.code(),
                "writes are refused until the store recovers from: " + error_->status.message());
}

Status Store::Reopen() {
  MutexLock sync_lock(sync_mu_);
  if (db_ && options_.deferred_sync && writes_synced_ < writes_made_.load(std::memory_order_acquire)) {
    // Writes not yet synced would be acknowledged by a later SyncWrites
    // that syncs the new WAL only.
    if (const rocksdb::Status s = db_->SyncWAL(); !s.ok()) unsynced_reopen_ = true;
  }
  if (db_) {
    const rocksdb::Status s = db_->Close();
    if (!s.ok()) LOG(WARNING) << "closing RocksDB in " << dir_ << " to reopen it: " << s.ToString();
    db_.reset();
  }
  rocksdb::DB* raw = nullptr;
  RKV_RETURN_IF_ERROR(FromRocks(rocksdb::DB::Open(*db_options_, dir_, &raw), "reopening RocksDB in " + dir_));
  db_.reset(raw);
  // A write reported as failed may still have reached the WAL whole (a
  // failed sync): keep versions above anything the store now holds.
  RKV_ASSIGN_OR_RETURN(const uint64_t hw, ReadMeta(raw, kVersionKey, dir_));
  // With background writes (this runs on the writer) the mark in memory
  // was advanced when each write was queued, so it is above `hw` already.
  if (!background()) version_hw_ = std::max(version_hw_, hw);
  if (!error_->reopened) {
    LOG(WARNING) << "reopened RocksDB in " << dir_ << " to recover: its WAL failed while the memtable was empty";
    error_->reopened = true;
  }
  return Status::Ok();
}

Status Store::SyncWrites() {
  if (!options_.deferred_sync) return Status::Ok();
  const uint64_t target = writes_made_.load(std::memory_order_acquire);
  MutexLock lock(sync_mu_);
  if (unsynced_reopen_) {
    unsynced_reopen_ = false;
    writes_synced_ = writes_made_.load(std::memory_order_acquire);
    return Unavailable("the store in " + dir_ + " was reopened to recover before its WAL could be synced: "
                       "writes since the last sync may be lost on power loss");
  }
  if (writes_synced_ >= target) return Status::Ok();  // an fsync since covered them
  if (db_ == nullptr) return Unavailable("the store in " + dir_ + " is closed after a failed reopen");
  // Everything written so far rides on this fsync, not just `target`.
  const uint64_t covered = writes_made_.load(std::memory_order_acquire);
  if (const rocksdb::Status s = db_->SyncWAL(); !s.ok()) {
    return FromRocks(s, "syncing the WAL in " + dir_);
  }
  synced_writes_.fetch_add(covered - writes_synced_, std::memory_order_relaxed);
  wal_syncs_.fetch_add(1, std::memory_order_relaxed);
  writes_synced_ = covered;
  return Status::Ok();
}

Status Store::Put(std::string_view key, std::string_view value, uint64_t version, int64_t expires_at_ms) {
  if (key.empty()) return InvalidArgument("empty key");
  if (version == 0) return InvalidArgument("version 0 is reserved");
  if (expires_at_ms < 0) return InvalidArgument("negative expiry");
  return Write("put", key, /*put=*/true, value, version, expires_at_ms);
}

Status Store::PutMany(std::span<const PutItem> items, size_t* written) {
  *written = 0;
  uint64_t new_hw = version_hw_;
  for (const PutItem& item : items) {
    if (item.key.empty()) return InvalidArgument("empty key");
    if (item.version == 0) return InvalidArgument("version 0 is reserved");
    if (item.expires_at_ms < 0) return InvalidArgument("negative expiry");
    new_hw = std::max(new_hw, item.version);
  }
  if (items.empty()) return Status::Ok();
  if (background()) {
    for (const PutItem& item : items) {
      RKV_RETURN_IF_ERROR(Enqueue(/*put=*/true, item.key, item.value, item.version, item.expires_at_ms, new_hw));
      version_hw_ = std::max(version_hw_, item.version);
      ++*written;
    }
    return Status::Ok();
  }
  thread_local rocksdb::WriteBatch batch;
  batch.Clear();
  for (const PutItem& item : items) {
    RKV_RETURN_IF_ERROR(AddToBatch(&batch, /*put=*/true, item.key, item.value, item.version, item.expires_at_ms,
                                   new_hw, /*mark=*/false));
  }
  RKV_RETURN_IF_ERROR(AddMark(&batch, new_hw));
  RKV_RETURN_IF_ERROR(Commit(&batch, [&] {
    return "rocksdb put of " + std::to_string(items.size()) + " keys (the first '" + PrintableKey(items.front().key) +
           "')";
  }));
  version_hw_ = new_hw;
  *written = items.size();
  return Status::Ok();
}

Status Store::Delete(std::string_view key) {
  if (key.empty()) return InvalidArgument("empty key");
  // Versions come from one counter for all keys, so a delete need not
  // advance the high-water mark: the key's next PUT still gets a higher one.
  return Write("delete", key, /*put=*/false, {}, 0, 0);
}

StatusOr<std::optional<Store::Value>> Store::Get(std::string_view key) const {
  RKV_RETURN_IF_ERROR(Flush());
  if (!db_) return Unavailable("store in " + dir_ + " is being reopened: " + error_->status.message());
  std::string dkey(1, kDataPrefix);
  dkey.append(key);
  std::string stored;
  const rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), dkey, &stored);
  if (s.IsNotFound()) return std::optional<Value>();
  RKV_RETURN_IF_ERROR(FromRocks(s, "rocksdb get of key '" + PrintableKey(key) + "'"));
  RKV_ASSIGN_OR_RETURN(const Decoded d, DecodeStored(key, stored));
  return std::optional<Value>(Value{d.version, std::string(d.value), d.expires_at_ms});
}

Status Store::Scan(const ScanFn& fn) const {
  return ScanRecords([&](std::string_view key, uint64_t version, std::string_view value, int64_t) {
    return fn(key, version, value);
  });
}

Status Store::ScanRecords(const ScanRecordsFn& fn) const {
  RKV_RETURN_IF_ERROR(Flush());
  if (!db_) return Unavailable("store in " + dir_ + " is being reopened: " + error_->status.message());
  rocksdb::ReadOptions ro;
  ro.verify_checksums = true;
  ro.fill_cache = false;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ro));
  const std::string prefix(1, kDataPrefix);
  for (it->Seek(prefix); it->Valid(); it->Next()) {
    const rocksdb::Slice k = it->key();
    if (k.size() == 0 || k[0] != kDataPrefix) break;
    const std::string_view key(k.data() + 1, k.size() - 1);
    const rocksdb::Slice v = it->value();
    RKV_ASSIGN_OR_RETURN(const Decoded d, DecodeStored(key, std::string_view(v.data(), v.size())));
    if (d.version > version_hw_) {
      return DataLoss("stored record of key '" + PrintableKey(key) + "' has version " +
                      std::to_string(d.version) + " above the high-water mark " + std::to_string(version_hw_));
    }
    RKV_RETURN_IF_ERROR(fn(key, d.version, d.value, d.expires_at_ms));
  }
  return FromRocks(it->status(), "rocksdb scan of " + dir_);
}

}  // namespace rkv::server
