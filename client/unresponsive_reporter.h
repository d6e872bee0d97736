// UnresponsiveReporter: tells the coordinator that a server did not answer
// a client in time (Coordinator.ReportUnresponsive), so that the leader
// probes it at once instead of waiting for its heartbeat timeout
// (docs/design.md §8.8, "Suspicion and probes"). A report is a hint: the
// coordinator's probe decides, and a live server costs one probe.
//
// Report is called from a connection's wait (ServerConnection's abandon
// check), so it never waits on the network: reports go out one at a time
// on the reporter's own thread, started by the first report. At most one
// report per server is queued or sent per kMinInterval, and at most
// kMaxQueued wait; more are dropped (the coordinator's heartbeat timeout
// still catches every dead server).
//
// Thread safety: Report and stats from any thread. The destructor stops
// the thread after the report in flight (bounded by kSendTimeout).
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>

#include "client/server_connection.h"
#include "common/mutex.h"
#include "common/status.h"
#include "proto/rkv.pb.h"

namespace rkv::client {

class UnresponsiveReporter {
 public:
  // Sends one report (ControlClient::ReportUnresponsive; a fake in tests).
  using SendFn = std::function<Status(const v1::ReportUnresponsiveRequest& request, Deadline deadline)>;

  // A wait for a server's answer this long is reported (a live server
  // under load answers a PUT or a READ well within it; the heartbeat
  // period is 333 ms with the defaults).
  static constexpr std::chrono::milliseconds kReportAfter{250};
  static constexpr std::chrono::milliseconds kMinInterval{1000};
  static constexpr std::chrono::milliseconds kSendTimeout{1000};
  static constexpr size_t kMaxQueued = 16;

  explicit UnresponsiveReporter(SendFn send);
  ~UnresponsiveReporter();
  UnresponsiveReporter(const UnresponsiveReporter&) = delete;
  UnresponsiveReporter& operator=(const UnresponsiveReporter&) = delete;

  // Queues a report that `server_id` at `epoch` did not answer (`reason`,
  // cut to what the coordinator accepts), unless one of that server was
  // queued less than kMinInterval ago or the queue is full. Returns
  // whether it queued one.
  bool Report(std::string_view server_id, uint64_t epoch, std::string_view reason) EXCLUDES(mu_);

  struct Stats {
    uint64_t queued = 0;  // reports queued
    uint64_t sent = 0;    // reports the coordinator answered
    uint64_t failed = 0;  // reports that got an error (logged at VLOG 1)
  };
  Stats stats() const EXCLUDES(mu_);

 private:
  void Loop() EXCLUDES(mu_);

  const SendFn send_;
  mutable Mutex mu_;
  CondVar cv_;  // a report queued, or stopping
  bool stopping_ GUARDED_BY(mu_) = false;
  std::deque<v1::ReportUnresponsiveRequest> queue_ GUARDED_BY(mu_);
  // When a report of each server was last queued.
  std::unordered_map<std::string, Clock::time_point> last_ GUARDED_BY(mu_);
  Stats stats_ GUARDED_BY(mu_);
  std::thread thread_ GUARDED_BY(mu_);  // started by the first Report
};

}  // namespace rkv::client
