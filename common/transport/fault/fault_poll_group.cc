#include "common/transport/fault/fault_poll_group.h"

#include <algorithm>

#include "common/transport/fault/fault_connection.h"

namespace rkv::transport::fault {

using Clock = std::chrono::steady_clock;
using std::chrono::microseconds;

size_t FaultPollGroup::size() const {
  MutexLock lock(mu_);
  return members_.size();
}

void FaultPollGroup::Join(Connection* inner, FaultConnection* member) {
  MutexLock lock(mu_);
  members_[inner] = member;
}

void FaultPollGroup::Leave(Connection* inner, FaultConnection* member) {
  {
    MutexLock lock(mu_);
    members_.erase(inner);
  }
  // Members are destroyed on the group's thread or while no Wait runs.
  std::erase(backlog_, member);
}

void FaultPollGroup::NoteBacklog(FaultConnection* member) {
  if (member->in_backlog_) return;
  member->in_backlog_ = true;
  backlog_.push_back(member);
}

StatusOr<size_t> FaultPollGroup::Wait(std::span<Connection*> ready, microseconds timeout) {
  if (ready.empty()) return size_t{0};
  const uint64_t round = ++wait_round_;
  size_t n = 0;
  const auto report = [&](FaultConnection* member) {
    if (member->reported_round_ == round || n == ready.size()) return;
    member->reported_round_ = round;
    ready[n++] = member;
  };
  // Members with completions of their own: ready now, or the first due.
  const Clock::time_point now = Clock::now();
  Clock::time_point first_due = Clock::time_point::max();
  std::erase_if(backlog_, [&](FaultConnection* member) {
    const Clock::time_point due = member->NextDue();
    if (due == Clock::time_point::max()) {
      member->in_backlog_ = false;
      return true;
    }
    if (due <= now) {
      report(member);
    } else {
      first_due = std::min(first_due, due);
    }
    return false;
  });
  microseconds wait = timeout;
  if (n > 0) {
    wait = microseconds(0);
  } else if (first_due != Clock::time_point::max()) {
    wait = std::min(wait, std::chrono::ceil<microseconds>(first_due - now));
  }
  inner_ready_.resize(ready.size());
  RKV_ASSIGN_OR_RETURN(const size_t m, inner_->Wait(inner_ready_, wait));
  MutexLock lock(mu_);
  for (size_t i = 0; i < m; ++i) {
    const auto it = members_.find(inner_ready_[i]);
    if (it != members_.end()) report(it->second);
  }
  return n;
}

}  // namespace rkv::transport::fault
