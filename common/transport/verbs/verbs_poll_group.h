// The verbs PollGroup: one thread serves many accepted connections through
// shared completion queues. Internal to common/transport/verbs/; users see
// the PollGroup interface of common/transport/transport.h.
//
// Queues. A group owns one completion channel and two CQs, one for the send
// queues and one for the receive queues of every member's QP. Two, not one:
// a work completion's opcode is undefined when it failed (a flush), so only
// the CQ it came from says whether it belongs to a member's send ring (whose
// wr_ids are the transport's sequence numbers) or to its receives (whose
// wr_ids are the caller's); the member's existing bookkeeping needs to know.
// Both CQs report to the one channel, so the group still sleeps on one fd
// for completions.
//
// Capacity. A CQ must hold every work request that may complete into it, so
// the send CQ holds the sum of the members' send depths and the receive CQ
// the sum of their receive depths. A connection is counted from the moment
// its QP is created on the group's CQs (Listener::Next, before Accept: a
// pending connection's flushes land there too) until its QP is destroyed.
// When a new QP would not fit, the CQ is grown with ibv_resize_cq (at least
// doubling, at most the device's max_cqe); when the device cannot hold it,
// the connection request is refused with RESOURCE_EXHAUSTED and the members
// already there are unaffected. (rxe's max_cqe is 32767: at the default
// depth of 256 a group holds 127 members there; NICs allow millions.)
//
// What a member costs: send_depth + recv_depth entries of the group's CQs
// (device memory, 32 or 64 bytes each), one fd (its own rdma_cm event
// channel, watched through the group's epoll fd: disconnects arrive there),
// its QP, and its rings: 16 bytes per send slot, an ibv_send_wr and ibv_sge
// per send slot, and one Completion per send and receive slot. It has no
// completion channel or CQ of its own (a standalone connection has two CQs
// and two fds).
//
// Dispatch. Wait polls both CQs and looks each work completion's qp_num up
// in the member map: a member's completions feed its own bookkeeping
// (VerbsConnection::OnSendCompletion / OnRecvCompletion), so they wait in
// its completion ring for its Poll; completions of QPs not in the map (the
// flushes of a pending connection being torn down, or of a member after it
// left) are dropped. A connection enters the map at Accept, before the
// reply leaves (so its peer's first SEND finds it there), has its cm
// channel watched once Accept is done with it, and leaves both in its
// destructor before its QP is destroyed.
//
// Threads. Wait, and the members' calls after Accept, run on the group's
// thread; they touch the members' rings without locks. Accept runs on the
// server's accept thread while Wait runs: the map, the capacity account and
// the CQs themselves (polling, arming, resizing) are guarded by mu_, held
// across one poll-and-dispatch batch. A thread other than the group's that
// must poll the CQs (an Accept waiting for its memory window binds, a
// pending connection's teardown) never touches members: it takes the
// completions of its own QP, and queues the others (deferred_) for the
// group's thread, which dispatches them, in order, before anything it polls
// itself. (Their CQ events woke, or will wake, the group's thread anyway.)
//
// Readiness (level-triggered). A member is ready when its ring holds
// completions or when it is broken (its Poll would report the error).
// Each member keeps its own cm event channel, watched by the group's epoll
// fd: when it is readable, Wait reads the member's events itself
// (VerbsConnection::HandleCmEvents, on the group's thread), so that a
// disconnect breaks the member (and flushes its QP) and makes it ready,
// while the events that change nothing (ESTABLISHED, TIMEWAIT_EXIT) report
// nothing. (Only when reading them failed is the member reported for its
// Poll to read them and fail.) Members found ready are kept in a list;
// each Wait first drops the members of that list that are no longer ready,
// then reports the rest, so a member not polled empty is reported again.
//
// Waiting. As VerbsConnection::Poll: Wait busy-polls the CQs (no system
// call) within an adaptive window below the transport's max_spin (the same
// rule: a wait that ended within max_spin but after the window doubles it,
// one that outlasted max_spin halves it, down to no spin), then arms both
// CQs, polls once more (a completion that arrived before the arm raises no
// event) and sleeps in epoll_wait on the completion channel, every member's
// cm channel and an eventfd for Wake. A busy group may never sleep, so it
// also looks at the cm channels (epoll_wait with no wait) every
// kCmCheckInterval Waits.
#pragma once

#include <infiniband/verbs.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "common/mutex.h"
#include "common/thread_annotations.h"
#include "common/transport/transport.h"
#include "common/transport/verbs/verbs_connection.h"
#include "common/transport/verbs/verbs_resources.h"

namespace rkv::transport::verbs {

// A work completion polled from one of the group's CQs.
struct GroupCompletion {
  ibv_wc wc;
  bool send;  // from the send CQ
};

// The shared part of a group: its queues, member map and readiness list.
// Held by the VerbsPollGroup handle and by every connection created for the
// group, so that either may go first.
//
// Thread safety: see "Threads" above; each method says who may call it.
class PollGroupCore {
 public:
  static StatusOr<std::shared_ptr<PollGroupCore>> Create(const ConnectionConfig& config);
  PollGroupCore(const PollGroupCore&) = delete;
  PollGroupCore& operator=(const PollGroupCore&) = delete;
  ~PollGroupCore();

  // PollGroup's, on the group's thread (Wake: any thread).
  StatusOr<size_t> Wait(std::span<Connection*> ready, std::chrono::microseconds timeout) EXCLUDES(mu_);
  void Wake();
  size_t size() const EXCLUDES(mu_);

  // The CQs a connection of the group creates its QP on.
  const std::shared_ptr<CompletionQueue>& send_cq() const { return send_cq_; }
  const std::shared_ptr<CompletionQueue>& recv_cq() const { return recv_cq_; }
  // Current CQ sizes (entries), for tests and logs.
  uint32_t send_capacity() const EXCLUDES(mu_);
  uint32_t recv_capacity() const EXCLUDES(mu_);

  // Any thread, before a QP with these depths is created on the CQs:
  // counts it, growing the CQs when needed. RESOURCE_EXHAUSTED when the
  // device cannot hold it (nothing counted then).
  Status Reserve(uint32_t send_depth, uint32_t recv_depth) EXCLUDES(mu_);
  // Any thread, once that QP is destroyed: uncounts it. Completions it left
  // in the CQs are taken out first (and dropped), so that they cannot
  // overflow the room given to the next QP.
  void Release(uint32_t send_depth, uint32_t recv_depth) EXCLUDES(mu_);

  // Accept's setup, on the accept thread: between BeginSetup and EndSetup
  // (or Join) the completions of QP `qp_num` are kept for PollSetup, which
  // polls the CQs (queueing other QPs' completions for the group's thread)
  // and appends that QP's completions to `*out`.
  void BeginSetup(uint32_t qp_num) EXCLUDES(mu_);
  Status PollSetup(uint32_t qp_num, std::vector<GroupCompletion>* out) EXCLUDES(mu_);
  void EndSetup(uint32_t qp_num) EXCLUDES(mu_);

  // Accept, on the accept thread, before the reply leaves: enters `member`
  // into the map (ending its setup), so its completions are fed to it.
  void Join(VerbsConnection* member, uint32_t qp_num) EXCLUDES(mu_);
  // Accept, once it has written the member's state for the last time:
  // watches its cm channel `cm_fd` (Wait then reads its events on the
  // group's thread).
  Status WatchCm(uint32_t qp_num, int cm_fd);
  // The member's destructor, before its QP is destroyed (on the group's
  // thread, or when no Wait runs): it is never reported or fed again.
  void Leave(VerbsConnection* member, uint32_t qp_num, int cm_fd) EXCLUDES(mu_);

  // A member's data path, on the group's thread: polls both CQs once
  // (bounded), dispatching to every member. Returns how many work
  // completions were handled.
  StatusOr<int> Drain() EXCLUDES(mu_);
  // A member's bounded wait for its own completions (send queue room), on
  // the group's thread: arms the CQs, drains once more, and sleeps on the
  // completion channel and `cm_fd` until something is ready or `deadline`.
  Status Sleep(Clock::time_point deadline, int cm_fd) EXCLUDES(mu_);

 private:
  PollGroupCore(const ConnectionConfig& config, std::shared_ptr<CompletionChannel> channel,
                std::shared_ptr<CompletionQueue> send_cq, std::shared_ptr<CompletionQueue> recv_cq,
                int epoll_fd, int wake_fd);

  // How a poll treats completions of members: feed them (the group's
  // thread) or queue them in deferred_ (any other thread).
  enum class Mode { kDispatch, kDefer };
  // Polls both CQs (a bounded number of batches); returns the count.
  StatusOr<int> PollLocked(Mode mode) REQUIRES(mu_);
  void RouteLocked(const GroupCompletion& c, Mode mode) REQUIRES(mu_);
  void FeedLocked(VerbsConnection* member, const GroupCompletion& c) REQUIRES(mu_);
  void ListLocked(VerbsConnection* member) REQUIRES(mu_);
  // Drops members no longer ready from ready_, writes up to out.size() of
  // the rest to `out` (rotating the list so that none starves).
  size_t CollectLocked(std::span<Connection*> out) REQUIRES(mu_);
  // PollLocked(kDispatch) then CollectLocked.
  StatusOr<size_t> PollAndCollect(std::span<Connection*> out) EXCLUDES(mu_);
  Status ArmLocked() REQUIRES(mu_);
  // Reads the completion channel's events (acking each).
  void ConsumeCqEvents();
  // One epoll_wait up to `deadline` (now: no wait). Marks members whose cm
  // channel is readable; returns whether Wake's eventfd fired.
  StatusOr<bool> WaitEpoll(Clock::time_point deadline, bool no_wait) EXCLUDES(mu_);
  // Whether a Wake is pending (and then takes it).
  bool TakeWake();
  void DrainWakeFd();
  void AdaptSpin(Clock::duration waited);
  Status Grow(CompletionQueue& cq, uint32_t* capacity, uint64_t needed, const char* which) REQUIRES(mu_);

  const Clock::duration max_spin_;
  const uint32_t max_cqe_;
  std::shared_ptr<CompletionChannel> channel_;
  // Teardown order: CQs before their channel (both held here; QPs of
  // members hold the CQs too, so the CQs outlive every QP on them).
  std::shared_ptr<CompletionQueue> send_cq_;
  std::shared_ptr<CompletionQueue> recv_cq_;
  const int epoll_fd_;
  const int wake_fd_;
  // Set by Wake before it writes the eventfd, so a spinning Wait (which
  // makes no system call) sees it too; cleared by the Wait that returns for
  // it. Release/acquire: nothing else is published through it.
  std::atomic<bool> wake_requested_{false};

  mutable Mutex mu_;
  uint32_t send_capacity_ GUARDED_BY(mu_) = 0;
  uint32_t recv_capacity_ GUARDED_BY(mu_) = 0;
  uint64_t send_reserved_ GUARDED_BY(mu_) = 0;
  uint64_t recv_reserved_ GUARDED_BY(mu_) = 0;
  std::unordered_map<uint32_t, VerbsConnection*> members_ GUARDED_BY(mu_);
  // QPs in Accept's setup and the completions kept for them.
  std::unordered_map<uint32_t, std::vector<GroupCompletion>> setup_ GUARDED_BY(mu_);
  // Members' completions polled by other threads, oldest first.
  std::vector<GroupCompletion> deferred_ GUARDED_BY(mu_);
  // Members found ready and not yet seen idle (each once: its listed flag).
  std::vector<VerbsConnection*> ready_ GUARDED_BY(mu_);

  // The group's thread only.
  Clock::duration spin_window_;
  uint32_t waits_since_cm_check_ = 0;
};

// The PollGroup handle that VerbsTransport::NewPollGroup returns.
class VerbsPollGroup final : public PollGroup {
 public:
  explicit VerbsPollGroup(std::shared_ptr<PollGroupCore> core) : core_(std::move(core)) {}

  StatusOr<size_t> Wait(std::span<Connection*> ready, std::chrono::microseconds timeout) override {
    return core_->Wait(ready, timeout);
  }
  void Wake() override { core_->Wake(); }
  size_t size() const override { return core_->size(); }

  const std::shared_ptr<PollGroupCore>& core() const { return core_; }

 private:
  std::shared_ptr<PollGroupCore> core_;
};

}  // namespace rkv::transport::verbs
