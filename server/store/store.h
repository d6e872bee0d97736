// The durable copy of a server's table, in RocksDB. The in-memory table
// (server/table/table.h) is rebuilt from it at every start.
//
// RocksDB keys and values (one keyspace, split by a one-byte prefix):
//   'd' + key        -> StoredRecord: format byte (1), version (8, LE),
//                       CRC32C (4, LE) of format, version, key and value;
//                       then the value bytes. A record with an expiry
//                       (docs/design.md §5.11) is format 2: format byte
//                       (2), version (8, LE), expiry (8, LE: Unix ms,
//                       > 0), CRC32C (4, LE) of format, version, expiry,
//                       key and value; then the value bytes. A record
//                       without one is written as format 1, so stores
//                       written before expiry existed read unchanged.
//   'm' + "version"  -> the version high-water mark (8, LE): every version
//                       ever assigned is <= it. Written in the same
//                       WriteBatch as each Put, so versions stay monotonic
//                       per key across deletes and restarts.
//   'm' + "epoch"    -> the server epoch (8, LE): incremented and synced
//                       once per Open.
//
// Durability (what an OK from Put/Delete means):
//   kNone: survives a clean shutdown (memtables are flushed on Close).
//          With background writes (below; the server's kNone) the writer
//          writes the WAL without fsync, so a process crash loses what the
//          write-back buffer holds and nothing it wrote; without them,
//          WriteOptions::disableWAL: a crash loses the memtables too.
//   kWal:  written to the WAL without fsync: survives a process crash.
//   kSync: WAL fsynced before returning: survives power loss; or, with
//          StoreOptions::deferred_sync, fsynced by the next SyncWrites
//          (group commit, below).
//
// Group commit (StoreOptions::deferred_sync, kSync only; the server uses it,
// docs/design.md "Durability modes"): Put and Delete write the WAL without
// an fsync and return; SyncWrites() then makes every write that returned
// before it durable with one DB::SyncWAL, whoever made them. Concurrent
// callers share an fsync: a caller waits for the one in progress and needs
// none of its own when that one covered its writes. A write is durable
// against power loss only once a SyncWrites that began after it returned
// has returned OK, so the caller acknowledges it only then. Readers of the
// database (and of the table the caller publishes) may see it before.
//
// Full disk and other write errors: RocksDB stops accepting writes after a
// failed WAL append or flush (a "background error"; paranoid_checks). Its
// own automatic recovery is turned off: it waits for write_buffer_size
// (64 MiB) of free space, polls every 5 s, and refuses DB::Resume() (Busy)
// meanwhile. Instead the store enters its error state on the first failed
// write (logged once), fails every later write at once with the same status
// (RESOURCE_EXHAUSTED for a full disk), and calls DB::Resume() from the next
// write after a backoff (StoreOptions::resume_backoff_*). Resume flushes the
// memtables to new SST files and switches the WAL; when it cannot (the WAL
// failed while the memtable was empty, see EnterErrorState) the database is
// closed and opened again. The store leaves the error state (logged once)
// when a write succeeds. A failed
// write was never applied (RocksDB inserts into the memtable only after the
// WAL append succeeded), and every acknowledged write stays in the memtable
// and the WAL until a flush makes it durable in SST files. Reads (Get, Scan)
// are never refused by the error state.
//
// Background writes (StoreOptions::background_queue > 0; the server uses
// them with kNone, docs/design.md "Durability modes"): Put and Delete check
// their arguments, advance the version high-water mark in memory, put the
// write into a write-back buffer that holds one entry per key
// (WriteBackBuffer, write_back_buffer.h: a key written again replaces its
// entry, reusing its buffer; written entries are kept for new keys, up to
// 8 MiB of buffers) and return OK. One
// writer thread owned by the Store writes the buffer to RocksDB, durable per
// the durability, once it holds half of background_queue keys or of
// background_queue_bytes of keys and values, when Flush (or Get, Scan) or a
// producer without room waits for it, and at close; it takes the whole
// buffer and writes it in WriteBatches of at most 256 writes or 4 MiB, each
// with the high-water mark, while new writes fill a new buffer. Per key the
// last write lands last; across keys a buffer lands in the order its keys
// were first written to it, which only a crash could show (a crash keeps a
// subset of it: kNone promises nothing then).
// Put or Delete waits for room while buffer and the part not yet written
// hold background_queue keys or background_queue_bytes (back-pressure). A
// failed background write enters the error state described above: the
// writes stay buffered and the writer retries them after the backoff, while
// every Put and Delete is refused at once with the error; nothing buffered
// is dropped. Flush() waits until everything buffered is written; Get and
// Scan flush first and return the error when it cannot be written (a read
// sees every write that returned OK). The destructor writes what is
// buffered (in the error state after one last recovery attempt; what still
// fails is logged as lost) before it flushes the memtables and closes.
//
// Everything read back is validated: a malformed stored record or meta
// value is DATA_LOSS naming the key, and the server refuses to start rather
// than serve wrong data.
//
// Thread safety: not thread-safe but for SyncWrites. Put, Delete,
// NextVersion, Get, Scan and Flush are called under one external lock (the
// Applier's table_mu_), or before writes start (the rebuild's Scan); SyncWrites
// from any thread, also while a write runs. The background writer is
// internal. Recovery may close and reopen the database inside a Put or
// Delete; Get and Scan are UNAVAILABLE while a reopen has failed.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "common/mutex.h"
#include "common/status.h"
#include "server/store/write_back_buffer.h"

namespace rocksdb {
class DB;
class Env;
class EventListener;
class FileSystem;
struct Options;
class Statistics;
class WriteBatch;
}

namespace rkv::server {

enum class Durability { kNone, kWal, kSync };

// "none" | "wal" | "sync"; INVALID_ARGUMENT otherwise.
StatusOr<Durability> ParseDurability(std::string_view name);
const char* DurabilityName(Durability d);

struct StoreOptions {
  Durability durability = Durability::kWal;
  // After a failed write, the next write waits this long before it tries
  // DB::Resume(); each failed Resume doubles the wait, up to the maximum.
  std::chrono::milliseconds resume_backoff_initial{10};
  std::chrono::milliseconds resume_backoff_max{1000};
  // The file system RocksDB uses; null is the operating system's. Tests
  // inject faults through a rocksdb::FileSystemWrapper.
  std::shared_ptr<rocksdb::FileSystem> file_system;
  // Background writes (see above): at most this many buffered keys; 0
  // writes RocksDB inside Put and Delete. At most 1 << 20.
  uint32_t background_queue = 0;
  // ... and at most this many bytes of buffered keys and values (a single
  // larger write is buffered alone). Above 0.
  uint64_t background_queue_bytes = 16ULL << 20;
  // kSync only: group commit (see above). Not with background writes.
  bool deferred_sync = false;
};

class Store {
 public:
  struct Value {
    uint64_t version = 0;
    std::string value;
    int64_t expires_at_ms = 0;  // 0: never
  };

  // Opens (creating if missing) the database in `dir`, increments and
  // syncs the epoch. FAILED_PRECONDITION when another process holds the
  // database (RocksDB's LOCK file), DATA_LOSS when the meta keys are
  // malformed, INTERNAL/PERMISSION_DENIED etc. for other failures, always
  // naming the directory.
  static StatusOr<std::unique_ptr<Store>> Open(const std::string& dir, const StoreOptions& options);
  static StatusOr<std::unique_ptr<Store>> Open(const std::string& dir, Durability durability) {
    StoreOptions options;
    options.durability = durability;
    return Open(dir, options);
  }

  ~Store();  // writes the buffer, flushes (for kNone) and closes the database
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  // The epoch of this open (>= 1).
  uint64_t epoch() const { return epoch_; }
  // Highest version ever assigned (0 for a new store).
  uint64_t version_high_water() const { return version_hw_; }
  // The version the next write should carry: version_high_water() + 1. It
  // becomes the high-water mark when a Put carrying it succeeds.
  uint64_t NextVersion() const { return version_hw_ + 1; }

  // Writes `key` -> {version, value} and the high-water mark max(hw,
  // version) in one batch, durable per the store's durability. On error
  // nothing was written; RESOURCE_EXHAUSTED for a full disk, also while the
  // store waits to retry recovery (see "Full disk" above).
  // `expires_at_ms`: the record's expiry (0: none; never negative).
  Status Put(std::string_view key, std::string_view value, uint64_t version, int64_t expires_at_ms = 0);
  // Removes `key` (not an error if absent), durable per the durability.
  // Errors as for Put.
  Status Delete(std::string_view key);
  // One write of PutMany.
  struct PutItem {
    std::string_view key;
    std::string_view value;
    uint64_t version = 0;
    int64_t expires_at_ms = 0;
  };
  // Writes every item as Put would, in one WriteBatch with one high-water
  // mark (the highest of theirs): one WAL append for all of them, which is
  // what a catch-up of many records needs. Every item is checked first
  // (INVALID_ARGUMENT for an empty key or version 0: nothing written).
  // *written is how many items were written, from the first: all or none,
  // but with background writes the items before one refused by the error
  // state are buffered (and will be written).
  Status PutMany(std::span<const PutItem> items, size_t* written);

  // Reads `key`; nullopt when absent; DATA_LOSS when malformed.
  StatusOr<std::optional<Value>> Get(std::string_view key) const;

  // deferred_sync: makes every Put and Delete that returned before this
  // call durable (see "Group commit"); OK at once without deferred_sync.
  // An error means those writes may be lost on power loss (they are in
  // the WAL, not synced): the caller must not acknowledge them.
  Status SyncWrites() EXCLUDES(sync_mu_);
  // Fsyncs SyncWrites made, and the writes they covered, since Open.
  uint64_t wal_syncs() const { return wal_syncs_.load(std::memory_order_relaxed); }
  uint64_t synced_writes() const { return synced_writes_.load(std::memory_order_relaxed); }

  // Background writes: acknowledged writes not yet in RocksDB (a crash
  // loses them), counted by key, and their keys' and values' bytes. Zero
  // without background writes. Callable from any thread.
  struct Unwritten {
    uint64_t writes = 0;
    uint64_t bytes = 0;
  };
  Unwritten unwritten() const EXCLUDES(queue_mu_);

  // What RocksDB reports of its own work since the store was opened
  // (its statistics tickers, kept across a reopen): the time writes were
  // delayed or stopped by its write controller (too many memtables or L0
  // files, pending compaction), and the bytes appended to its write-ahead
  // log. Lock-free reads of RocksDB's per-core counters.
  struct Activity {
    uint64_t write_stall_micros = 0;
    uint64_t wal_bytes = 0;
  };
  Activity activity() const;

  // Whether writes are refused until a DB::Resume() succeeds.
  bool in_error_state() const;

  // Background writes: waits until every buffered write is in RocksDB; the
  // error-state status when they cannot be written now. Without them: OK.
  Status Flush() const;

  // Calls `fn` for every stored record in key order; stops at the first
  // non-OK status from `fn` and returns it. DATA_LOSS (naming the key) for a
  // malformed record. The views are valid during the call only.
  using ScanFn = std::function<Status(std::string_view key, uint64_t version, std::string_view value)>;
  Status Scan(const ScanFn& fn) const;
  // As Scan, with each record's expiry (0: none).
  using ScanRecordsFn =
      std::function<Status(std::string_view key, uint64_t version, std::string_view value, int64_t expires_at_ms)>;
  Status ScanRecords(const ScanRecordsFn& fn) const;

 private:
  Store(std::string dir, const StoreOptions& options);
  Status Write(std::string_view what, std::string_view key, bool put, std::string_view value, uint64_t version,
               int64_t expires_at_ms);
  bool background() const { return options_.background_queue > 0; }
  // Whether writes go through RocksDB's WAL: every durability's do, and
  // kNone's writer's (Commit); only kNone without background writes skips
  // it.
  bool writes_wal() const { return options_.durability != Durability::kNone || background(); }
  // Adds one write (a put carries the new high-water mark `hw`) to `batch`.
  // With mark false a put's mark is left out: the caller adds one for the
  // whole batch (AddMark, the highest), as the background writer does.
  static Status AddToBatch(rocksdb::WriteBatch* batch, bool put, std::string_view key, std::string_view value,
                           uint64_t version, int64_t expires_at_ms, uint64_t hw, bool mark = true);
  // Adds the version high-water mark `hw` to `batch`.
  static Status AddMark(rocksdb::WriteBatch* batch, uint64_t hw);
  // Writes `batch` durable per the durability, through the error state;
  // `describe` names the write in an error (called only on one).
  Status Commit(rocksdb::WriteBatch* batch, const std::function<std::string()>& describe);
  // Background writes: buffers one write, waiting for room.
  Status Enqueue(bool put, std::string_view key, std::string_view value, uint64_t version, int64_t expires_at_ms,
                 uint64_t hw);
  // The writer thread's loop; returns once stopping with the buffer written.
  void WriterLoop();
  // Enters the error state after a failed write, or backs off further.
  void EnterErrorState(const Status& failed);
  void Backoff(std::chrono::steady_clock::time_point now);
  // In the error state: OK once the database accepts writes again (the
  // state ends when a write succeeds), else the error that started it.
  Status Recover();
  // Closes and opens the database again (the way out of a stuck WAL).
  Status Reopen();

  struct ErrorState {
    Status status;  // of the write that failed first
    std::chrono::steady_clock::time_point next_recovery;
    std::chrono::milliseconds backoff;
    uint64_t refused = 0;  // writes failed while in the state
    bool reopen = false;   // recover by reopening rather than DB::Resume()
    bool reopened = false;  // logged once per error state
  };

  std::string dir_;
  StoreOptions options_;
  // Declared before db_: the database uses them until it is closed.
  std::unique_ptr<rocksdb::Env> env_;
  std::shared_ptr<rocksdb::EventListener> listener_;
  std::unique_ptr<rocksdb::Options> db_options_;  // to reopen with
  std::shared_ptr<rocksdb::Statistics> statistics_;  // db_options_'s, read by activity()
  std::unique_ptr<rocksdb::DB> db_;  // null only while a reopen failed
  std::optional<ErrorState> error_;
  uint64_t epoch_ = 0;
  uint64_t version_hw_ = 0;

  // Background writes: a write-back buffer, one entry per key (a key
  // written again replaces its entry: only its last write reaches RocksDB).
  // pending_ collects writes; the writer swaps it into writing_, which is
  // then its own until written (in order, writing_next_ on), while pending_
  // starts anew; the writer empties writing_ once all of it is written, and
  // the swap hands its kept buffers to the next pending_. A key in both is
  // written in that order, so per key the last write lands last.
  // Invariants: writing_count_/writing_bytes_ count what of writing_ is not
  // yet written (producers read them for room); queue_error_ is set while
  // writing_ cannot be written.
  // Whether the writer should write now: the buffer is past half its
  // limits, or someone waits (Flush, a producer without room), or stopping.
  bool WriteDue() const REQUIRES(queue_mu_);
  mutable Mutex queue_mu_;
  mutable CondVar work_cv_;      // the writer: work to do, or stopping
  mutable CondVar progress_cv_;  // producers and Flush: room, drained, or an error
  WriteBackBuffer pending_ GUARDED_BY(queue_mu_);
  uint64_t pending_bytes_ GUARDED_BY(queue_mu_) = 0;
  uint64_t pending_hw_ GUARDED_BY(queue_mu_) = 0;  // >= every version pending
  WriteBackBuffer writing_;   // the writer's
  size_t writing_next_ = 0;   // the writer's: writing_[0, writing_next_) is written
  uint64_t writing_hw_ = 0;   // the writer's
  size_t writing_count_ GUARDED_BY(queue_mu_) = 0;
  uint64_t writing_bytes_ GUARDED_BY(queue_mu_) = 0;
  std::optional<Status> queue_error_ GUARDED_BY(queue_mu_);
  // Threads waiting for the writer: Flush, producers without room.
  mutable int waiters_ GUARDED_BY(queue_mu_) = 0;
  bool stopping_ GUARDED_BY(queue_mu_) = false;
  std::thread writer_;

  // Group commit. writes_made_ counts the deferred writes that returned
  // (stored after each, release), writes_synced_ those an fsync covered.
  // sync_mu_ is held across each fsync, and by Reopen across the swap of
  // db_ (SyncWrites uses db_ without Applier::table_mu_).
  std::atomic<uint64_t> writes_made_{0};
  Mutex sync_mu_;
  uint64_t writes_synced_ GUARDED_BY(sync_mu_) = 0;
  // Set by a Reopen whose WAL could not be synced before the close: the
  // writes not yet synced then may be lost; the next SyncWrites says so.
  bool unsynced_reopen_ GUARDED_BY(sync_mu_) = false;
  std::atomic<uint64_t> wal_syncs_{0};
  std::atomic<uint64_t> synced_writes_{0};
};

// Printable form of a binary key for messages: printable ASCII as is,
// anything else as \xNN; cut to 64 bytes with "...".
std::string PrintableKey(std::string_view key);

}  // namespace rkv::server
