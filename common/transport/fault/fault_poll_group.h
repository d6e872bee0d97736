// FaultPollGroup: a poll group of a FaultTransport (fault_transport.h).
// Internal to common/transport/fault/.
//
// It wraps a group of the inner transport, whose members are the inner
// connections of its own members: a FaultConnection joins at its Accept
// (when the inner connection was really accepted: a dropped ACCEPT never
// joins, so nothing of it is ever reported, as nothing of it ever
// completes) and leaves in its destructor. Wait reports
//   - the members whose inner connection the inner group reports, and
//   - the members that hold completions of their own: ready ones, or
//     delayed ones that are due (Wait sleeps no longer than the first is
//     due), which FaultConnection's Poll notes here (NoteBacklog) when it
//     leaves any behind.
// A member's Poll takes what its inner connection has without waiting and
// runs it through the same fault rules as an ungrouped connection's.
//
// Thread safety: as PollGroup. Join and Leave may run on any thread (the
// members map is locked); NoteBacklog and Wait on the group's thread.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "common/mutex.h"
#include "common/status.h"
#include "common/thread_annotations.h"
#include "common/transport/transport.h"

namespace rkv::transport::fault {

class FaultConnection;

class FaultPollGroup final : public PollGroup {
 public:
  explicit FaultPollGroup(std::unique_ptr<PollGroup> inner) : inner_(std::move(inner)) {}

  PollGroup* inner() const { return inner_.get(); }

  StatusOr<size_t> Wait(std::span<Connection*> ready, std::chrono::microseconds timeout) override
      EXCLUDES(mu_);
  void Wake() override { inner_->Wake(); }
  void HoldSends() override { inner_->HoldSends(); }
  void ReleaseSends() override { inner_->ReleaseSends(); }
  size_t size() const override EXCLUDES(mu_);

  // FaultConnection's side.
  void Join(Connection* inner, FaultConnection* member) EXCLUDES(mu_);
  void Leave(Connection* inner, FaultConnection* member) EXCLUDES(mu_);
  void NoteBacklog(FaultConnection* member);

 private:
  std::unique_ptr<PollGroup> inner_;
  mutable Mutex mu_;
  std::unordered_map<Connection*, FaultConnection*> members_ GUARDED_BY(mu_);
  // The group's thread only: members that may hold completions of their
  // own, and Wait's scratch.
  std::vector<FaultConnection*> backlog_;
  std::vector<Connection*> inner_ready_;
  uint64_t wait_round_ = 0;
};

}  // namespace rkv::transport::fault
