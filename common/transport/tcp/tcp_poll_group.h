// The tcp transport's PollGroup: one thread (the one in Wait) serves the
// sockets of every member, so a server runs no thread per connection.
// Internal to common/transport/tcp/; users see the PollGroup interface of
// common/transport/transport.h.
//
// The group owns an epoll instance. A member's socket and its wake eventfd
// are registered there from its Accept until it is destroyed or breaks;
// each readiness runs one TcpConnection::ServeStep for that member (the
// same step its reader thread would run), and the watch it returns keeps
// the socket's interest right: EPOLLIN unless the peer's requests are
// paused, EPOLLOUT while responses wait to be sent (epoll_ctl only when
// that changes). The members' peer deadlines (idle_timeout,
// frame_timeout) are checked every kDeadlineCheckInterval at most, and
// only once the earliest of them is due.
//
// Deferred sends. A step that queued completions for the application
// leaves what it queued for the peer (acknowledgements) in the member's
// out_ for the application's replies to carry (TcpConnection::ServeStep);
// the member goes on deferred_, and the next Wait steps each member there,
// which sends whatever no post took. Between HoldSends and ReleaseSends a
// post on a member from the group's thread appends its frames and puts the
// member on deferred_ too (TcpConnection::SendFrames); ReleaseSends steps
// them at once, so a member's replies of a round leave in one write.
//
// Readiness. A member becomes a candidate when a completion is queued or
// it fails (TcpConnection::NotifyPollersLocked calls NoteReady); Wait
// reports the candidates that Poll would still return something for and
// keeps them listed, so a member not polled empty is reported again, and
// drops the others.
//
// Thread safety: Wait, and every call on a member after Accept, run on one
// thread at a time (the group's thread; the interface rule), and so do
// ServeStep, NoteReady and Leave. Accept runs on the server's accept
// thread, concurrently with Wait: Join only queues the new member under
// `mu_` and wakes the group, whose thread registers it. Wake and size may
// be called from any thread.
//
// Invariants:
//   - A member is in exactly one of joining_ (accepted, not yet
//     registered) and members_ (registered, or broken and out of epoll).
//   - in_epoll: both of the member's descriptors are in the epoll set;
//     its connection is open and served only by this group.
//   - listed_ holds each member at most once, those with `listed` set;
//     deferred_ likewise, those with `deferred` set.
//   - The group outlives its members; destroying it first breaks them.
#pragma once

#include <sys/epoll.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <thread>
#include <vector>

#include "common/mutex.h"
#include "common/status.h"
#include "common/thread_annotations.h"
#include "common/transport/spin_window.h"
#include "common/transport/tcp/socket_io.h"
#include "common/transport/transport.h"

namespace rkv::transport::tcp {

class TcpConnection;
class TcpPollGroup;

// A member's record: created by Join, destroyed by Leave. After Join every
// field but the two constants is touched only on the group's thread.
struct GroupMember {
  GroupMember(TcpConnection* c, TcpPollGroup* g) : connection(c), group(g) {}

  TcpConnection* const connection;
  TcpPollGroup* const group;
  size_t index = 0;        // in members_
  bool in_epoll = false;   // the socket and wake fd are registered
  uint32_t events = 0;     // the socket's registered interest
  bool listed = false;     // in listed_
  bool deferred = false;   // in deferred_
  Clock::time_point give_up = Clock::time_point::max();  // the peer's deadline, as of the last step
};

class TcpPollGroup final : public PollGroup {
 public:
  static StatusOr<std::unique_ptr<TcpPollGroup>> Create(const Options& options);
  ~TcpPollGroup() override EXCLUDES(mu_);

  StatusOr<size_t> Wait(std::span<Connection*> ready, std::chrono::microseconds timeout) override EXCLUDES(mu_);
  void Wake() override;
  size_t size() const override { return size_.load(std::memory_order_acquire); }
  void HoldSends() override;
  void ReleaseSends() override;
  // Whether sends posted now on this thread are held (HoldSends).
  bool holding() const { return holding_.load(std::memory_order_relaxed) && std::this_thread::get_id() == holder_; }
  // A member whose post was held: sent at ReleaseSends (the group's thread).
  void DeferFlush(GroupMember* member);

  // From Accept (any thread): `connection`, now active, becomes a member;
  // the group's thread starts serving it in its next (or current) Wait.
  // Sets connection->member_.
  void Join(TcpConnection* connection) EXCLUDES(mu_);
  // From the member's destructor (the group's thread, or while no Wait
  // runs): the group forgets the member and stops watching its
  // descriptors; `member` is freed and connection->member_ cleared.
  static void Leave(GroupMember* member);
  // The member has completions queued or has failed (the group's thread).
  static void NoteReady(GroupMember* member);

 private:
  // How often the members' peer deadlines are checked, at most.
  static constexpr auto kDeadlineCheckInterval = std::chrono::milliseconds(2);
  // Readiness events taken from the kernel per epoll_wait.
  static constexpr size_t kEventsPerWait = 256;
  // The spin window's bounds (as TcpConnection's).
  static constexpr int kMaxPollSpinUs = 1'000'000;
  // epoll data of the group's own eventfd; members' are their records
  // (the socket), or the record's address with kWakeTag set (the wake fd).
  static constexpr uint64_t kGroupWakeData = 0;
  static constexpr uint64_t kWakeTag = 1;
  static_assert(alignof(GroupMember) > kWakeTag);

  TcpPollGroup(const Options& options, UniqueFd epoll_fd, UniqueFd wake_fd);

  void Remove(GroupMember* member) EXCLUDES(mu_);
  // Registers the members that joined since the last call and starts
  // serving them.
  void TakeJoiners() EXCLUDES(mu_);
  // Runs one step for `member` and applies the watch it returns.
  void Step(GroupMember* member, bool readable, bool woken);
  // Steps every member on deferred_ (see "Deferred sends").
  void FlushDeferred();
  // The member's connection ended with `why`: out of epoll, and broken.
  void Retire(GroupMember* member, const Status& why);
  // Waits up to `timeout_ms` (0: not at all; -1: without limit) for
  // readiness and serves what it reports, then the due peer deadlines.
  // Returns whether Wake was called.
  StatusOr<bool> Serve(int timeout_ms) EXCLUDES(mu_);
  // Steps the members whose peer deadline is due, when a check is due.
  void CheckDeadlines(Clock::time_point now);
  // Writes the listed members that Poll would return something for to
  // `ready` (as many as fit), keeps them listed and drops the rest.
  size_t Collect(std::span<Connection*> ready);
  bool TakeWake() { return wake_requested_.exchange(false, std::memory_order_acq_rel); }

  // HoldSends to ReleaseSends: the holding thread (the group's) posts on
  // members without writing. holder_ is written before holding_ is set,
  // by that thread, and only read there with holding_ set.
  std::atomic<bool> holding_{false};
  std::thread::id holder_;

  const UniqueFd epoll_fd_;
  const UniqueFd wake_fd_;  // ends epoll_wait: Wake, or a member joined
  const std::chrono::microseconds max_spin_;
  std::atomic<bool> wake_requested_{false};
  std::atomic<size_t> size_{0};

  Mutex mu_;
  std::vector<std::unique_ptr<GroupMember>> joining_ GUARDED_BY(mu_);

  // The group's thread only (see the class comment).
  std::vector<std::unique_ptr<GroupMember>> members_;
  std::vector<GroupMember*> listed_;
  std::vector<GroupMember*> deferred_;
  std::vector<GroupMember*> deferred_scratch_;
  std::array<epoll_event, kEventsPerWait> events_{};
  // Adaptive spinning, as TcpConnection::Poll's (Options::poll_spin_us).
  int64_t spin_window_us_;
  // No spinning for a while after a spin lost its CPU.
  SpinCooldown spin_cooldown_;
  // No member's peer deadline is before this (max(): none has one).
  Clock::time_point earliest_give_up_ = Clock::time_point::max();
  Clock::time_point next_deadline_check_{};
};

}  // namespace rkv::transport::tcp
