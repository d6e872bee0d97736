// FaultInjector: the rules and hooks of one fault-injecting transport
// (fault_transport.h), shared by that transport, its listeners and its
// connections. It decides, operation by operation, which fault (if any)
// hits; the transport's wrappers carry the fault out.
//
// Counting: every operation of a kind that passes through the transport
// gets the next number of that kind (1, 2, ...), whether or not a rule
// exists; a rule counts the operations of its kind from the moment it was
// added, so "nth=3" is the third one after Add. When several rules select
// the same operation, the first one added wins (each still counts it).
//
// Thread safety: every method may be called from any thread, also while
// the transport is in use: rules added mid-run apply to the operations that
// come after. Hooks run on the thread of the operation, without the
// injector's lock held (a hook may call the injector).
//
// Invariants: rules_ holds only rules that ValidateFaultRule accepted;
// counts_[k] is the number of operations of kind k seen so far.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <random>
#include <span>
#include <string_view>
#include <vector>

#include "common/mutex.h"
#include "common/status.h"
#include "common/thread_annotations.h"
#include "common/transport/fault/fault_spec.h"

namespace rkv::transport::fault {

// What a hook sees of the operation it runs before.
struct FaultPoint {
  FaultOp op = FaultOp::kRead;
  // The operation's number among those of its kind (1, 2, ...).
  uint64_t index = 0;
  // kRecv only: the received message, which the hook may change, bytes
  // and length alike (byte_len <= buffer.size()), before it is reported.
  std::span<uint8_t> buffer;
  uint32_t byte_len = 0;
};

// Runs before an operation of its kind: for kRead, kWrite and kSend before
// the operation is posted; for kRecv before a received message is reported;
// for kConnect before Connect starts; for kAccept when Listener::Next hands
// out a connection request. Tests use it to change memory between rounds
// of READs, or to reshape a received message.
using FaultHook = std::function<void(FaultPoint&)>;

class FaultInjector {
 public:
  FaultInjector() = default;
  FaultInjector(const FaultInjector&) = delete;
  FaultInjector& operator=(const FaultInjector&) = delete;

  // Adds a rule; INVALID_ARGUMENT (ValidateFaultRule) leaves the rules as
  // they were.
  Status Add(const FaultRule& rule) EXCLUDES(mu_);
  // Adds every rule of `spec` (ParseFaultSpec), or none when it is bad.
  Status AddSpec(std::string_view spec) EXCLUDES(mu_);
  // Removes every rule (hooks stay).
  void ClearRules() EXCLUDES(mu_);
  // Sets the hook of `op`'s kind; an empty function removes it.
  void SetHook(FaultOp op, FaultHook hook) EXCLUDES(mu_);

  // Operations of `op`'s kind seen so far.
  uint64_t count(FaultOp op) const EXCLUDES(mu_);

  // For the transport's wrappers. Counts one operation of `op`'s kind, runs
  // its hook (with `point`, whose op and index are filled in here) and
  // returns the rule that hits it, or nullopt.
  std::optional<FaultRule> Next(FaultOp op, FaultPoint& point) EXCLUDES(mu_);
  // Counts `n` operations of `op`'s kind and returns true when no rule and
  // no hook could touch them (they may then bypass the wrapper); counts
  // nothing and returns false otherwise.
  bool PassThrough(FaultOp op, uint64_t n) EXCLUDES(mu_);

 private:
  struct ActiveRule {
    FaultRule rule;
    uint64_t seen = 0;  // operations of its kind since it was added
    std::mt19937_64 random;
  };
  // Whether `r` selects the operation it has just counted.
  static bool Selects(ActiveRule& r);

  mutable Mutex mu_;
  std::vector<ActiveRule> rules_ GUARDED_BY(mu_);
  std::array<FaultHook, kFaultOpCount> hooks_ GUARDED_BY(mu_);
  std::array<uint64_t, kFaultOpCount> counts_ GUARDED_BY(mu_){};
  // Rules per kind, so that PassThrough need not scan rules_.
  std::array<uint32_t, kFaultOpCount> rules_per_op_ GUARDED_BY(mu_){};
};

}  // namespace rkv::transport::fault
