// PollGroupCore: the verbs PollGroup's queues, dispatch and wait (see
// verbs_poll_group.h for the design).
#include "common/transport/verbs/verbs_poll_group.h"

#include <poll.h>
#include <sched.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <string>
#include <utility>

#include <glog/logging.h>

#include "common/transport/spin_window.h"

namespace rkv::transport::verbs {
namespace {

// Each CQ starts with room for this many members; it grows as they join.
constexpr uint32_t kInitialMembers = 4;
constexpr int kPollBatch = 16;
// One poll takes at most this many batches from each CQ, so that a CQ that
// keeps filling cannot hold the caller.
constexpr int kMaxBatchesPerPoll = 8;
// While spinning, Wait reads the clock and yields the CPU once every this
// many empty rounds (as VerbsConnection::Poll).
constexpr uint32_t kSpinRoundsPerYield = 8;
// A Wait that did not sleep looks at the members' cm channels once every
// this many Waits (see "Waiting" in the header).
constexpr uint32_t kCmCheckInterval = 64;
constexpr int kMaxEpollEvents = 64;

// epoll_event.data tags: the low 32 bits carry a member's qp_num.
constexpr uint64_t kWakeTag = uint64_t{1} << 40;
constexpr uint64_t kChannelTag = uint64_t{2} << 40;
constexpr uint64_t kMemberTag = uint64_t{3} << 40;
constexpr uint64_t kTagMask = uint64_t{0xff} << 40;

timespec TimespecUntil(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::nanoseconds>(
      std::max(deadline - Clock::now(), Clock::duration::zero()));
  timespec ts{};
  ts.tv_sec = static_cast<time_t>(left.count() / 1'000'000'000);
  ts.tv_nsec = static_cast<long>(left.count() % 1'000'000'000);
  return ts;
}

}  // namespace

StatusOr<std::shared_ptr<PollGroupCore>> PollGroupCore::Create(const ConnectionConfig& config) {
  const std::shared_ptr<Device>& device = config.pd->device();
  RKV_ASSIGN_OR_RETURN(std::shared_ptr<CompletionChannel> channel, CompletionChannel::Create(device));
  const auto max_cqe = static_cast<uint32_t>(std::max(1, device->attr().max_cqe));
  const uint32_t send_entries = std::min<uint64_t>(max_cqe, uint64_t{kInitialMembers} * config.send_depth);
  const uint32_t recv_entries = std::min<uint64_t>(max_cqe, uint64_t{kInitialMembers} * config.recv_depth);
  RKV_ASSIGN_OR_RETURN(std::shared_ptr<CompletionQueue> send_cq,
                       CompletionQueue::Create(channel, static_cast<int>(send_entries)));
  RKV_ASSIGN_OR_RETURN(std::shared_ptr<CompletionQueue> recv_cq,
                       CompletionQueue::Create(channel, static_cast<int>(recv_entries)));
  const int epoll_fd = epoll_create1(EPOLL_CLOEXEC);
  if (epoll_fd < 0) return VerbsError("epoll_create1", errno);
  const int wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake_fd < 0) {
    const int err = errno;
    close(epoll_fd);
    return VerbsError("eventfd", err);
  }
  // From here the core owns both fds (its destructor closes them).
  std::shared_ptr<PollGroupCore> core(
      new PollGroupCore(config, std::move(channel), std::move(send_cq), std::move(recv_cq), epoll_fd, wake_fd));
  for (const auto& [fd, tag] : {std::pair{core->wake_fd_, kWakeTag}, std::pair{core->channel_->fd(), kChannelTag}}) {
    epoll_event event{};
    event.events = EPOLLIN;
    event.data.u64 = tag;
    if (epoll_ctl(epoll_fd, EPOLL_CTL_ADD, fd, &event) != 0) return VerbsError("epoll_ctl(ADD)", errno);
  }
  {
    MutexLock lock(core->mu_);
    core->send_capacity_ = static_cast<uint32_t>(core->send_cq_->get()->cqe);
    core->recv_capacity_ = static_cast<uint32_t>(core->recv_cq_->get()->cqe);
  }
  return core;
}

PollGroupCore::PollGroupCore(const ConnectionConfig& config, std::shared_ptr<CompletionChannel> channel,
                             std::shared_ptr<CompletionQueue> send_cq, std::shared_ptr<CompletionQueue> recv_cq,
                             int epoll_fd, int wake_fd)
    : max_spin_(config.max_spin),
      max_cqe_(static_cast<uint32_t>(std::max(1, config.pd->device()->attr().max_cqe))),
      channel_(std::move(channel)),
      send_cq_(std::move(send_cq)),
      recv_cq_(std::move(recv_cq)),
      epoll_fd_(epoll_fd),
      wake_fd_(wake_fd),
      spin_window_(config.max_spin) {}

PollGroupCore::~PollGroupCore() {
  // Every connection holds the core, so none is left: only the CQs' unread
  // events remain (ibv_destroy_cq waits for unacked ones).
  ConsumeCqEvents();
  close(epoll_fd_);
  close(wake_fd_);
  send_cq_.reset();
  recv_cq_.reset();
  channel_.reset();
}

size_t PollGroupCore::size() const {
  MutexLock lock(mu_);
  return members_.size();
}

uint32_t PollGroupCore::send_capacity() const {
  MutexLock lock(mu_);
  return send_capacity_;
}

uint32_t PollGroupCore::recv_capacity() const {
  MutexLock lock(mu_);
  return recv_capacity_;
}

// ------------------------------------------------------------------ capacity

Status PollGroupCore::Grow(CompletionQueue& cq, uint32_t* capacity, uint64_t needed, const char* which) {
  if (needed <= *capacity) return Status::Ok();
  if (needed > max_cqe_) {
    return ResourceExhausted(std::string("the poll group's ") + which + " completion queue would need " +
                             std::to_string(needed) + " entries; the device allows " + std::to_string(max_cqe_));
  }
  const auto wanted = static_cast<int>(std::clamp<uint64_t>(2 * uint64_t{*capacity}, needed, max_cqe_));
  if (const int ret = ibv_resize_cq(cq.get(), wanted); ret != 0) {
    return ResourceExhausted(VerbsError(std::string("ibv_resize_cq(") + which + ", " + std::to_string(wanted) + ")", ret)
                                 .ToString());
  }
  *capacity = static_cast<uint32_t>(cq.get()->cqe);
  VLOG(1) << "poll group: " << which << " completion queue grown to " << *capacity << " entries";
  return Status::Ok();
}

Status PollGroupCore::Reserve(uint32_t send_depth, uint32_t recv_depth) {
  MutexLock lock(mu_);
  RKV_RETURN_IF_ERROR(Grow(*send_cq_, &send_capacity_, send_reserved_ + send_depth, "send"));
  RKV_RETURN_IF_ERROR(Grow(*recv_cq_, &recv_capacity_, recv_reserved_ + recv_depth, "receive"));
  send_reserved_ += send_depth;
  recv_reserved_ += recv_depth;
  return Status::Ok();
}

void PollGroupCore::Release(uint32_t send_depth, uint32_t recv_depth) {
  MutexLock lock(mu_);
  // The destroyed QP's completions still in the CQs are dropped here (it is
  // in no map); others' are queued for the group's thread. Bounded: the
  // CQs hold at most their capacity, and others may keep completing.
  const uint32_t most_rounds = (send_capacity_ + recv_capacity_) / kPollBatch + 1;
  for (uint32_t round = 0; round < most_rounds; ++round) {
    const StatusOr<int> polled = PollLocked(Mode::kDefer);
    if (!polled.ok()) {
      LOG(WARNING) << "poll group: " << polled.status();
      break;
    }
    if (*polled == 0) break;
  }
  send_reserved_ -= std::min<uint64_t>(send_reserved_, send_depth);
  recv_reserved_ -= std::min<uint64_t>(recv_reserved_, recv_depth);
}

// ------------------------------------------------------------------ membership

void PollGroupCore::BeginSetup(uint32_t qp_num) {
  MutexLock lock(mu_);
  setup_[qp_num];
}

Status PollGroupCore::PollSetup(uint32_t qp_num, std::vector<GroupCompletion>* out) {
  MutexLock lock(mu_);
  RKV_RETURN_IF_ERROR(PollLocked(Mode::kDefer).status());
  auto it = setup_.find(qp_num);
  if (it != setup_.end()) {
    out->insert(out->end(), it->second.begin(), it->second.end());
    it->second.clear();
  }
  return Status::Ok();
}

void PollGroupCore::EndSetup(uint32_t qp_num) {
  MutexLock lock(mu_);
  setup_.erase(qp_num);
}

void PollGroupCore::Join(VerbsConnection* member, uint32_t qp_num) {
  MutexLock lock(mu_);
  setup_.erase(qp_num);
  members_[qp_num] = member;
}

Status PollGroupCore::WatchCm(uint32_t qp_num, int cm_fd) {
  epoll_event event{};
  event.events = EPOLLIN;
  event.data.u64 = kMemberTag | qp_num;
  if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, cm_fd, &event) != 0) return VerbsError("epoll_ctl(ADD cm channel)", errno);
  return Status::Ok();
}

void PollGroupCore::Leave(VerbsConnection* member, uint32_t qp_num, int cm_fd) {
  // Before the channel is closed, or epoll would keep watching it. (ENOENT:
  // Accept failed before WatchCm.)
  if (epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, cm_fd, nullptr) != 0 && errno != ENOENT) {
    LOG(WARNING) << VerbsError("epoll_ctl(DEL cm channel)", errno);
  }
  MutexLock lock(mu_);
  members_.erase(qp_num);
  std::erase(ready_, member);
  // Queued completions of this QP must not reach a later QP of that number.
  std::erase_if(deferred_, [qp_num](const GroupCompletion& c) { return c.wc.qp_num == qp_num; });
}

// ------------------------------------------------------------------ dispatch

void PollGroupCore::ListLocked(VerbsConnection* member) {
  if (member->group_listed_) return;
  member->group_listed_ = true;
  ready_.push_back(member);
}

void PollGroupCore::FeedLocked(VerbsConnection* member, const GroupCompletion& c) {
  if (c.send) {
    member->OnSendCompletion(c.wc);
  } else {
    member->OnRecvCompletion(c.wc);
  }
  if (member->GroupReady()) ListLocked(member);
}

void PollGroupCore::RouteLocked(const GroupCompletion& c, Mode mode) {
  if (auto it = members_.find(c.wc.qp_num); it != members_.end()) {
    if (mode == Mode::kDispatch) {
      FeedLocked(it->second, c);
    } else {
      deferred_.push_back(c);
    }
    return;
  }
  if (auto it = setup_.find(c.wc.qp_num); it != setup_.end()) it->second.push_back(c);
  // Else: a QP not (or no longer) in the group: dropped.
}

StatusOr<int> PollGroupCore::PollLocked(Mode mode) {
  int total = 0;
  if (mode == Mode::kDispatch && !deferred_.empty()) [[unlikely]] {
    // Polled by another thread before anything this poll finds: first.
    std::vector<GroupCompletion> queued = std::move(deferred_);
    deferred_.clear();
    for (const GroupCompletion& c : queued) RouteLocked(c, mode);
    total += static_cast<int>(queued.size());
  }
  ibv_wc wcs[kPollBatch];
  for (const bool send : {true, false}) {
    ibv_cq* cq = send ? send_cq_->get() : recv_cq_->get();
    for (int batch = 0; batch < kMaxBatchesPerPoll; ++batch) {
      const int n = ibv_poll_cq(cq, kPollBatch, wcs);
      if (n < 0) return Internal("ibv_poll_cq on the poll group's CQ failed (" + std::to_string(n) + ")");
      for (int i = 0; i < n; ++i) RouteLocked(GroupCompletion{wcs[i], send}, mode);
      total += n;
      if (n < kPollBatch) break;
    }
  }
  return total;
}

size_t PollGroupCore::CollectLocked(std::span<Connection*> out) {
  size_t kept = 0;
  for (VerbsConnection* member : ready_) {
    if (member->GroupReady()) {
      ready_[kept++] = member;
    } else {
      member->group_listed_ = false;
    }
  }
  ready_.resize(kept);
  const size_t n = std::min(out.size(), ready_.size());
  for (size_t i = 0; i < n; ++i) out[i] = ready_[i];
  // The reported ones go to the back: with more ready members than `out`
  // holds, the next Wait reports the others first.
  if (n < ready_.size()) std::rotate(ready_.begin(), ready_.begin() + static_cast<ptrdiff_t>(n), ready_.end());
  return n;
}

StatusOr<size_t> PollGroupCore::PollAndCollect(std::span<Connection*> out) {
  MutexLock lock(mu_);
  RKV_RETURN_IF_ERROR(PollLocked(Mode::kDispatch).status());
  return CollectLocked(out);
}

StatusOr<int> PollGroupCore::Drain() {
  MutexLock lock(mu_);
  return PollLocked(Mode::kDispatch);
}

// ------------------------------------------------------------------ waiting

Status PollGroupCore::ArmLocked() {
  for (ibv_cq* cq : {send_cq_->get(), recv_cq_->get()}) {
    if (const int ret = ibv_req_notify_cq(cq, 0); ret != 0) return VerbsError("ibv_req_notify_cq", ret);
  }
  return Status::Ok();
}

void PollGroupCore::ConsumeCqEvents() {
  ibv_cq* cq = nullptr;
  void* context = nullptr;
  // The fd is non-blocking: read every queued event and ack each at once
  // (ibv_destroy_cq waits for unacked events).
  while (ibv_get_cq_event(channel_->get(), &cq, &context) == 0) ibv_ack_cq_events(cq, 1);
}

void PollGroupCore::Wake() {
  wake_requested_.store(true, std::memory_order_release);
  const uint64_t one = 1;
  if (write(wake_fd_, &one, sizeof one) < 0 && errno != EAGAIN) {
    LOG(WARNING) << VerbsError("write(poll group wake eventfd)", errno);
  }
}

bool PollGroupCore::TakeWake() {
  if (!wake_requested_.load(std::memory_order_relaxed)) [[likely]] return false;
  if (!wake_requested_.exchange(false, std::memory_order_acquire)) return false;
  // Empties the eventfd so that a later sleep is not cut short by this Wake
  // (if Wake has not written it yet, the sleep that sees it drains it).
  DrainWakeFd();
  return true;
}

void PollGroupCore::DrainWakeFd() {
  uint64_t count = 0;
  while (read(wake_fd_, &count, sizeof count) > 0) {
  }
}

StatusOr<bool> PollGroupCore::WaitEpoll(Clock::time_point deadline, bool no_wait) {
  epoll_event events[kMaxEpollEvents];
  const timespec ts = no_wait ? timespec{} : TimespecUntil(deadline);
  int n = epoll_pwait2(epoll_fd_, events, kMaxEpollEvents, &ts, nullptr);
  if (n < 0 && errno == ENOSYS) {
    // Kernels before 5.11: millisecond resolution, rounded up.
    const auto ms = std::chrono::ceil<std::chrono::milliseconds>(std::chrono::seconds(ts.tv_sec) +
                                                                 std::chrono::nanoseconds(ts.tv_nsec));
    n = epoll_wait(epoll_fd_, events, kMaxEpollEvents, static_cast<int>(std::min<int64_t>(ms.count(), 1 << 30)));
  }
  if (n < 0) {
    if (errno == EINTR) return false;
    return VerbsError("epoll_wait(poll group)", errno);
  }
  bool woken = false;
  bool cm_ready = false;
  for (int i = 0; i < n; ++i) {
    const uint64_t tag = events[i].data.u64 & kTagMask;
    if (tag == kWakeTag) {
      // Drained whether or not the flag is still set: a Wake that a spin
      // already took leaves its eventfd write behind.
      DrainWakeFd();
      woken = wake_requested_.exchange(false, std::memory_order_acquire) || woken;
    } else if (tag == kChannelTag) {
      ConsumeCqEvents();
    } else {
      cm_ready = true;
    }
  }
  if (cm_ready) {
    MutexLock lock(mu_);
    for (int i = 0; i < n; ++i) {
      if ((events[i].data.u64 & kTagMask) != kMemberTag) continue;
      const auto qp_num = static_cast<uint32_t>(events[i].data.u64);
      auto it = members_.find(qp_num);
      if (it == members_.end()) continue;  // left meanwhile
      VerbsConnection* member = it->second;
      // Read here, on the group's thread, rather than by reporting the
      // member: most events (ESTABLISHED, TIMEWAIT_EXIT) change nothing,
      // and Wait reports only members whose Poll has something to say. A
      // disconnect breaks the member (and flushes its QP): that it says.
      if (const Status read = member->HandleCmEvents(); !read.ok()) {
        // Its Poll reads again and reports the failure.
        LOG(WARNING) << "poll group: reading the cm events of " << member->peer_address() << ": " << read;
        member->group_cm_readable_ = true;
      }
      if (member->GroupReady()) ListLocked(member);
    }
  }
  return woken;
}

void PollGroupCore::AdaptSpin(Clock::duration waited) {
  spin_window_ = NextSpinWindow(spin_window_, waited, max_spin_);
}

StatusOr<size_t> PollGroupCore::Wait(std::span<Connection*> ready, std::chrono::microseconds timeout) {
  if (ready.empty()) return size_t{0};
  // Fast path: what is listed or already in the CQs, no clock, no syscall
  // (but a look at the cm channels now and then: a busy group never sleeps).
  if (++waits_since_cm_check_ >= kCmCheckInterval) {
    waits_since_cm_check_ = 0;
    RKV_ASSIGN_OR_RETURN(const bool woken, WaitEpoll(Clock::time_point{}, /*no_wait=*/true));
    if (woken) return size_t{0};
  }
  RKV_ASSIGN_OR_RETURN(size_t n, PollAndCollect(ready));
  if (n > 0) return n;
  if (TakeWake()) return size_t{0};
  if (timeout.count() <= 0) {
    RKV_ASSIGN_OR_RETURN(const bool woken, WaitEpoll(Clock::time_point{}, /*no_wait=*/true));
    if (woken) return size_t{0};
    return PollAndCollect(ready);
  }

  const auto start = Clock::now();
  const auto deadline = start + timeout;
  if (spin_window_ > Clock::duration::zero()) {
    const auto until = std::min(deadline, start + spin_window_);
    uint32_t rounds = 0;
    while (true) {
      RKV_ASSIGN_OR_RETURN(n, PollAndCollect(ready));
      // Caught while spinning: the window is right, nothing to adapt.
      if (n > 0) return n;
      if (TakeWake()) return size_t{0};
      if (++rounds % kSpinRoundsPerYield == 0) {
        if (Clock::now() >= until) break;
        // Lets another runnable thread on this CPU go first (on a loopback
        // device that may be the peer whose request this Wait waits for).
        sched_yield();
      }
    }
  }
  waits_since_cm_check_ = 0;
  while (true) {
    {
      MutexLock lock(mu_);
      RKV_RETURN_IF_ERROR(ArmLocked());
      // A completion that arrived before the CQs were armed raises no
      // event: look once more before sleeping.
      RKV_RETURN_IF_ERROR(PollLocked(Mode::kDispatch).status());
      n = CollectLocked(ready);
    }
    if (n > 0) break;
    RKV_ASSIGN_OR_RETURN(const bool woken, WaitEpoll(deadline, /*no_wait=*/false));
    RKV_ASSIGN_OR_RETURN(n, PollAndCollect(ready));
    if (n > 0) break;
    if (woken) return size_t{0};
    if (Clock::now() >= deadline) {
      // Nothing came: that says something only when the wait outlasted
      // any spin (then spin less).
      if (timeout > max_spin_) AdaptSpin(Clock::now() - start);
      return size_t{0};
    }
  }
  AdaptSpin(Clock::now() - start);
  return n;
}

Status PollGroupCore::Sleep(Clock::time_point deadline, int cm_fd) {
  {
    MutexLock lock(mu_);
    RKV_RETURN_IF_ERROR(ArmLocked());
    RKV_ASSIGN_OR_RETURN(const int polled, PollLocked(Mode::kDispatch));
    if (polled > 0) return Status::Ok();
  }
  timespec ts = TimespecUntil(deadline);
  pollfd fds[2] = {{channel_->fd(), POLLIN, 0}, {cm_fd, POLLIN, 0}};
  if (ppoll(fds, 2, &ts, nullptr) < 0 && errno != EINTR) return VerbsError("ppoll(poll group channel)", errno);
  if ((fds[0].revents & POLLIN) != 0) ConsumeCqEvents();
  return Status::Ok();
}

}  // namespace rkv::transport::verbs
