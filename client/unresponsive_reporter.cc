#include "client/unresponsive_reporter.h"

#include <glog/logging.h>

#include <utility>

namespace rkv::client {

namespace {

// What ReportUnresponsiveRequest.reason may hold: printable ASCII, at most
// 200 bytes (proto/validation.h).
std::string ReasonForTheWire(std::string_view reason) {
  std::string out;
  for (char c : reason.substr(0, 200)) out.push_back(c >= 0x20 && c < 0x7f ? c : '?');
  return out;
}

}  // namespace

UnresponsiveReporter::UnresponsiveReporter(SendFn send) : send_(std::move(send)) {}

UnresponsiveReporter::~UnresponsiveReporter() {
  std::thread thread;
  {
    MutexLock lock(mu_);
    stopping_ = true;
    thread = std::move(thread_);
  }
  cv_.NotifyAll();
  if (thread.joinable()) thread.join();
}

bool UnresponsiveReporter::Report(std::string_view server_id, uint64_t epoch, std::string_view reason) {
  {
    MutexLock lock(mu_);
    if (stopping_ || queue_.size() >= kMaxQueued) return false;
    const Clock::time_point now = Clock::now();
    auto [last, fresh] = last_.try_emplace(std::string(server_id), now);
    if (!fresh) {
      if (now - last->second < kMinInterval) return false;
      last->second = now;
    }
    v1::ReportUnresponsiveRequest& r = queue_.emplace_back();
    r.set_server_id(std::string(server_id));
    r.set_epoch(epoch);
    r.set_reason(ReasonForTheWire(reason));
    ++stats_.queued;
    if (!thread_.joinable()) thread_ = std::thread([this] { Loop(); });
    cv_.NotifyAll();
  }
  return true;
}

UnresponsiveReporter::Stats UnresponsiveReporter::stats() const {
  MutexLock lock(mu_);
  return stats_;
}

void UnresponsiveReporter::Loop() {
  for (;;) {
    v1::ReportUnresponsiveRequest next;
    {
      MutexLock lock(mu_);
      while (!stopping_ && queue_.empty()) cv_.Wait(mu_);
      if (stopping_) return;
      next = std::move(queue_.front());
      queue_.pop_front();
    }
    const Status s = send_(next, Clock::now() + kSendTimeout);
    if (!s.ok()) VLOG(1) << "rkv: could not report server " << next.server_id() << " as unresponsive: " << s;
    MutexLock lock(mu_);
    ++(s.ok() ? stats_.sent : stats_.failed);
  }
}

}  // namespace rkv::client
