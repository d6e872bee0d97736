#include "common/transport/tcp/tcp_poll_group.h"

#include <glog/logging.h>
#include <sys/epoll.h>

#include <algorithm>
#include <cerrno>
#include <string>
#include <utility>

#include "common/transport/spin_window.h"
#include "common/transport/tcp/tcp_connection.h"

namespace rkv::transport::tcp {

StatusOr<std::unique_ptr<TcpPollGroup>> TcpPollGroup::Create(const Options& options) {
  UniqueFd epoll_fd(::epoll_create1(EPOLL_CLOEXEC));
  if (!epoll_fd.valid()) return PosixError("epoll_create1", errno);
  RKV_ASSIGN_OR_RETURN(UniqueFd wake_fd, MakeEventFd());
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = kGroupWakeData;
  if (::epoll_ctl(epoll_fd.get(), EPOLL_CTL_ADD, wake_fd.get(), &ev) != 0) {
    return PosixError("epoll_ctl(ADD, group wake fd)", errno);
  }
  return std::unique_ptr<TcpPollGroup>(new TcpPollGroup(options, std::move(epoll_fd), std::move(wake_fd)));
}

TcpPollGroup::TcpPollGroup(const Options& options, UniqueFd epoll_fd, UniqueFd wake_fd)
    : epoll_fd_(std::move(epoll_fd)),
      wake_fd_(std::move(wake_fd)),
      max_spin_(std::clamp(options.poll_spin_us, 0, kMaxPollSpinUs)),
      spin_window_us_(max_spin_.count()) {}

TcpPollGroup::~TcpPollGroup() {
  // Members should be gone by now. Any left are broken, so that their
  // Polls report it instead of waiting for a server that no longer runs.
  std::vector<std::unique_ptr<GroupMember>> left;
  {
    MutexLock lock(mu_);
    left = std::move(joining_);
  }
  for (auto& m : members_) left.push_back(std::move(m));
  if (!left.empty()) {
    LOG(ERROR) << "tcp transport: a poll group destroyed before its " << left.size()
               << " members; they are broken";
  }
  for (auto& m : left) {
    TcpConnection* c = m->connection;
    c->member_ = nullptr;
    c->Break("its poll group was destroyed");
    c->reader_done_.store(true, std::memory_order_release);
  }
}

void TcpPollGroup::Join(TcpConnection* connection) {
  auto member = std::make_unique<GroupMember>(connection, this);
  {
    MutexLock lock(mu_);
    connection->member_ = member.get();
    joining_.push_back(std::move(member));
    size_.fetch_add(1, std::memory_order_release);
  }
  SignalEventFd(wake_fd_.get());
}

void TcpPollGroup::Leave(GroupMember* member) { member->group->Remove(member); }

void TcpPollGroup::Remove(GroupMember* member) {
  TcpConnection* const c = member->connection;
  {
    MutexLock lock(mu_);
    c->member_ = nullptr;
    const auto it = std::find_if(joining_.begin(), joining_.end(), [&](const auto& m) { return m.get() == member; });
    if (it != joining_.end()) {
      joining_.erase(it);
      size_.fetch_sub(1, std::memory_order_release);
      return;
    }
  }
  if (member->in_epoll) {
    ::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_DEL, c->fd_.get(), nullptr);
    ::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_DEL, c->wake_fd_.get(), nullptr);
  }
  if (member->listed) listed_.erase(std::find(listed_.begin(), listed_.end(), member));
  if (member->deferred) deferred_.erase(std::find(deferred_.begin(), deferred_.end(), member));
  const size_t i = member->index;
  if (i + 1 != members_.size()) {
    members_[i] = std::move(members_.back());
    members_[i]->index = i;
  }
  members_.pop_back();  // frees `member`
  size_.fetch_sub(1, std::memory_order_release);
}

void TcpPollGroup::NoteReady(GroupMember* member) {
  if (member->listed) return;
  member->listed = true;
  member->group->listed_.push_back(member);
}

void TcpPollGroup::Wake() {
  wake_requested_.store(true, std::memory_order_release);
  SignalEventFd(wake_fd_.get());
}

void TcpPollGroup::TakeJoiners() {
  std::vector<std::unique_ptr<GroupMember>> joined;
  {
    MutexLock lock(mu_);
    if (joining_.empty()) return;
    joined.swap(joining_);
  }
  for (auto& owned : joined) {
    GroupMember* const m = owned.get();
    TcpConnection* const c = m->connection;
    m->index = members_.size();
    members_.push_back(std::move(owned));
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.ptr = m;
    if (::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_ADD, c->fd_.get(), &ev) != 0) {
      Retire(m, PosixError("epoll_ctl(ADD, socket)", errno));
      continue;
    }
    m->in_epoll = true;
    m->events = EPOLLIN;
    ev.data.u64 = reinterpret_cast<uintptr_t>(m) | kWakeTag;
    if (::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_ADD, c->wake_fd_.get(), &ev) != 0) {
      const Status failed = PosixError("epoll_ctl(ADD, wake fd)", errno);
      ::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_DEL, c->fd_.get(), nullptr);
      m->in_epoll = false;
      Retire(m, failed);
      continue;
    }
    const Status begun = c->BeginServing();
    if (!begun.ok()) {
      Retire(m, begun);
      continue;
    }
    Step(m, /*readable=*/false, /*woken=*/false);
  }
}

void TcpPollGroup::Step(GroupMember* member, bool readable, bool woken) {
  StatusOr<TcpConnection::Watch> watch = member->connection->ServeStep(readable, woken);
  if (!watch.ok()) {
    Retire(member, watch.status());
    return;
  }
  const uint32_t want = (watch->read ? EPOLLIN : 0u) | (watch->write ? EPOLLOUT : 0u);
  if (want != member->events) {
    epoll_event ev{};
    ev.events = want;
    ev.data.ptr = member;
    if (::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_MOD, member->connection->fd_.get(), &ev) != 0) {
      Retire(member, PosixError("epoll_ctl(MOD, socket)", errno));
      return;
    }
    member->events = want;
  }
  member->give_up = watch->give_up;
  earliest_give_up_ = std::min(earliest_give_up_, watch->give_up);
  if (watch->flush_deferred && !member->deferred) {
    member->deferred = true;
    deferred_.push_back(member);
  }
}

void TcpPollGroup::HoldSends() {
  holder_ = std::this_thread::get_id();
  holding_.store(true, std::memory_order_relaxed);
}

void TcpPollGroup::ReleaseSends() {
  holding_.store(false, std::memory_order_relaxed);
  FlushDeferred();
}

void TcpPollGroup::DeferFlush(GroupMember* member) {
  if (member->deferred) return;
  member->deferred = true;
  deferred_.push_back(member);
}

void TcpPollGroup::FlushDeferred() {
  if (deferred_.empty()) return;
  deferred_scratch_.swap(deferred_);
  for (GroupMember* m : deferred_scratch_) {
    m->deferred = false;
    if (m->in_epoll) Step(m, /*readable=*/false, /*woken=*/false);
  }
  deferred_scratch_.clear();
}

void TcpPollGroup::Retire(GroupMember* member, const Status& why) {
  TcpConnection* const c = member->connection;
  if (member->in_epoll) {
    // Before the Break: a shut socket would report EPOLLHUP on every wait.
    ::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_DEL, c->fd_.get(), nullptr);
    ::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_DEL, c->wake_fd_.get(), nullptr);
    member->in_epoll = false;
  }
  member->give_up = Clock::time_point::max();
  c->Break(why.message());
  c->reader_done_.store(true, std::memory_order_release);
}

StatusOr<bool> TcpPollGroup::Serve(int timeout_ms) {
  const int n = ::epoll_wait(epoll_fd_.get(), events_.data(), static_cast<int>(events_.size()), timeout_ms);
  if (n < 0 && errno != EINTR) return PosixError("epoll_wait", errno);
  bool woke = false;
  for (int i = 0; i < n; ++i) {
    const uint64_t data = events_[i].data.u64;
    if (data == kGroupWakeData) {
      DrainEventFd(wake_fd_.get());
      TakeJoiners();
      woke = TakeWake() || woke;
      continue;
    }
    auto* const m = reinterpret_cast<GroupMember*>(data & ~kWakeTag);
    // Retired earlier in this batch: its descriptors are out of epoll.
    if (!m->in_epoll) continue;
    if ((data & kWakeTag) != 0) {
      Step(m, /*readable=*/false, /*woken=*/true);
    } else {
      Step(m, (events_[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) != 0, /*woken=*/false);
    }
  }
  CheckDeadlines(Clock::now());
  return woke;
}

void TcpPollGroup::CheckDeadlines(Clock::time_point now) {
  if (now < earliest_give_up_ || now < next_deadline_check_) return;
  next_deadline_check_ = now + kDeadlineCheckInterval;
  earliest_give_up_ = Clock::time_point::max();
  // Step keeps earliest_give_up_ for the members it runs; the rest are
  // taken as they are.
  for (size_t i = 0; i < members_.size(); ++i) {
    GroupMember* const m = members_[i].get();
    if (!m->in_epoll) continue;
    if (m->give_up <= now) {
      Step(m, /*readable=*/false, /*woken=*/false);
    } else {
      earliest_give_up_ = std::min(earliest_give_up_, m->give_up);
    }
  }
}

size_t TcpPollGroup::Collect(std::span<Connection*> ready) {
  size_t n = 0;
  size_t keep = 0;
  for (GroupMember* m : listed_) {
    // Written on this thread (Poll, or a step); acquire for form's sake.
    if (!m->connection->ready_.load(std::memory_order_acquire)) {
      m->listed = false;
      continue;
    }
    if (n < ready.size()) ready[n++] = m->connection;
    listed_[keep++] = m;
  }
  listed_.resize(keep);
  return n;
}

StatusOr<size_t> TcpPollGroup::Wait(std::span<Connection*> ready, std::chrono::microseconds timeout) {
  const Clock::time_point start = Clock::now();
  const Clock::time_point deadline = DeadlineAfter(timeout);
  TakeJoiners();
  FlushDeferred();
  // Serve the sockets even when listed members make this Wait return at
  // once: a server that always has completions must still serve every
  // member's peer (its READs, WRITEs, SENDs).
  RKV_ASSIGN_OR_RETURN(const bool woken, Serve(0));
  size_t n = Collect(ready);
  if (n > 0 || ready.empty() || woken || TakeWake()) return n;

  // Spin first: readiness that comes within the window is served without
  // the kernel having to wake this thread.
  // Busy polling (the largest bound) spins whatever the machine does.
  const bool busy = max_spin_.count() >= kMaxPollSpinUs;
  const auto window = !busy && spin_cooldown_.Active(start) ? std::chrono::microseconds(0)
                                                             : std::chrono::microseconds(spin_window_us_);
  if (window.count() > 0 && timeout.count() > 0) {
    const Clock::time_point spin_until = start + std::min(timeout, window);
    Clock::time_point last = start;
    for (;;) {
      RKV_ASSIGN_OR_RETURN(const bool woke, Serve(0));
      n = Collect(ready);
      if (n > 0 || woke) return n;
      const Clock::time_point now = Clock::now();
      if (now >= spin_until) break;
      // This thread lost its CPU while spinning (spin_window.h).
      if (!busy && spin_cooldown_.LostCpu(now, &last)) break;
      SpinPause();
    }
  }

  bool slept = false;
  bool woke = false;
  for (;;) {
    const Clock::time_point now = Clock::now();
    if (now >= deadline) break;
    slept = true;
    const Clock::time_point wake_at = std::min(deadline, std::max(earliest_give_up_, next_deadline_check_));
    RKV_ASSIGN_OR_RETURN(woke, Serve(MillisUntil(wake_at)));
    n = Collect(ready);
    if (n > 0 || woke) break;
  }
  if (slept && !woke && max_spin_.count() > 0 && !spin_cooldown_.Active(Clock::now())) {
    // The rule of TcpConnection::Poll: a wait that ended within max_spin_
    // after the window grows it, one that outlasted max_spin_ shrinks it.
    // (A Wake says nothing of the members' traffic.)
    if (n > 0 || timeout > max_spin_) {
      const auto window =
          NextSpinWindow(std::chrono::microseconds(spin_window_us_), Clock::now() - start, max_spin_);
      spin_window_us_ = std::chrono::duration_cast<std::chrono::microseconds>(window).count();
    }
  }
  return n;
}

}  // namespace rkv::transport::tcp
