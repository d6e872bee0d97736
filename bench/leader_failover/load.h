// The load rkv-leader-failover-bench runs across leader changes: a
// YCSB-A-like mix (a share of GETs, the rest PUTs of fixed-size values, keys
// of a preloaded record set chosen by bench/ycsb/key_chooser.h) from
// long-lived clients, one thread each, closed loop. Every call is recorded
// (start, end, GET or PUT, OK or not) so that a stall can be measured after
// the fact over any window (bench/leader_failover/window.h).
//
// Thread safety: Start, Stop, Take and the accessors are called by one
// controlling thread. The workers append to their own call logs under
// their own mutex, which Take holds only to swap the log out.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "bench/ycsb/key_chooser.h"
#include "common/mutex.h"
#include "rkv/client.h"
#include "rkv/status.h"

namespace rkv::bench {

using Clock = std::chrono::steady_clock;

struct CallRecord {
  enum class Op : uint8_t { kGet, kPut };
  Clock::time_point start;
  Clock::time_point end;
  Op op = Op::kGet;
  bool ok = false;
};

struct LoadOptions {
  int clients = 6;
  uint64_t records = 10000;
  size_t value_bytes = 1024;
  int read_percent = 50;
  KeyDistribution distribution = KeyDistribution::kZipfian;
  uint64_t seed = 1;
};

class Load {
 public:
  // Connects options.clients clients with `client_options` (each retried
  // until `connect_wait` passes: a cluster that has just started may not
  // have assigned its shards yet). The first error when one never connects.
  static StatusOr<std::unique_ptr<Load>> Connect(const ClientOptions& client_options, const LoadOptions& options,
                                                 std::chrono::seconds connect_wait);
  ~Load();  // Stop()
  Load(const Load&) = delete;
  Load& operator=(const Load&) = delete;

  // Writes every record once, the clients in parallel, each PUT retried
  // until `wait` passes. Before Start only.
  Status Preload(std::chrono::seconds wait);

  // Starts one thread per client; Stop joins them. Once each.
  void Start();
  void Stop();

  // Every call that ended since the last Take, per client, in the order
  // they ended (a client makes one call at a time).
  std::vector<std::vector<CallRecord>> Take();
  // The first failed call's operation, key and status (empty when none).
  std::string first_failure() const;
  int clients() const { return static_cast<int>(workers_.size()); }

 private:
  struct Worker {
    std::unique_ptr<Client> client;
    Mutex mu;
    std::vector<CallRecord> calls GUARDED_BY(mu);
  };

  explicit Load(const LoadOptions& options);
  void Run(size_t w);
  void NoteFailure(const std::string& what, const Status& s);

  LoadOptions options_;
  KeyChooser chooser_;
  std::vector<std::unique_ptr<Worker>> workers_;
  std::vector<std::thread> threads_;
  std::atomic<bool> stop_{false};
  mutable Mutex failure_mu_;
  std::string first_failure_ GUARDED_BY(failure_mu_);
};

}  // namespace rkv::bench
