// The load rkv-failover-bench runs across a server's failure (and
// rkv-leader-failover-bench across leader changes): a
// YCSB-A-like mix (a share of GETs, the rest PUTs of fixed-size values, keys
// of a preloaded record set chosen by bench/ycsb/key_chooser.h) from
// long-lived clients, one thread each, closed loop. Every call is recorded
// with its key and its status code, so that what one key or the whole load
// saw can be measured after the fact over any window
// (bench/failover/figures.h, bench/leader_failover/window.h: both benches
// run this load).
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

struct KeyCall {
  enum class Op : uint8_t { kGet, kPut };
  Clock::time_point start;
  Clock::time_point end;
  uint32_t record = 0;  // the key is RecordKey(record)
  Op op = Op::kGet;
  StatusCode code = StatusCode::kOk;
  bool ok() const { return code == StatusCode::kOk; }
};

struct KeyLoadOptions {
  int clients = 4;
  uint64_t records = 300;
  size_t value_bytes = 1024;
  int read_percent = 50;
  KeyDistribution distribution = KeyDistribution::kUniform;
  uint64_t seed = 1;
};

class KeyLoad {
 public:
  // Connects options.clients clients with `client_options` (each retried
  // until `connect_wait` passes: a cluster that has just started may not
  // have assigned its shards yet). The first error when one never connects.
  static StatusOr<std::unique_ptr<KeyLoad>> Connect(const ClientOptions& client_options,
                                                    const KeyLoadOptions& options,
                                                    std::chrono::seconds connect_wait);
  ~KeyLoad();  // Stop()
  KeyLoad(const KeyLoad&) = delete;
  KeyLoad& operator=(const KeyLoad&) = delete;

  // Writes every record once, the clients in parallel, each PUT retried
  // until `wait` passes. Before Start only.
  Status Preload(std::chrono::seconds wait);

  // Starts one thread per client; Stop joins them. Once each.
  void Start();
  void Stop();

  // Every call that ended since the last Take, per client, in the order
  // they ended (a client makes one call at a time).
  std::vector<std::vector<KeyCall>> Take();
  // The first failed call's operation, key and status (empty when none).
  std::string first_failure() const;

 private:
  struct Worker {
    std::unique_ptr<Client> client;
    Mutex mu;
    std::vector<KeyCall> calls GUARDED_BY(mu);
  };

  explicit KeyLoad(const KeyLoadOptions& options);
  void Run(size_t w);
  void NoteFailure(const std::string& what, const Status& s);

  KeyLoadOptions options_;
  KeyChooser chooser_;
  std::vector<std::unique_ptr<Worker>> workers_;
  std::vector<std::thread> threads_;
  std::atomic<bool> stop_{false};
  mutable Mutex failure_mu_;
  std::string first_failure_ GUARDED_BY(failure_mu_);
};

}  // namespace rkv::bench
