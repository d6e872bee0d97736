// What a fault-injecting transport (fault_transport.h) injects: one rule per
// kind of operation and fault, and the spec string that names rules in a
// flag or an environment variable.
//
// Spec grammar: rules separated by ';', each
//   OP:ACTION[:PARAM=VALUE[,PARAM=VALUE]...]
// OP      read | write | send | recv | connect | accept
// ACTION  drop | delay | corrupt | fail
// PARAM   which operations of OP the rule selects (at most one; none
//         selects every one):
//           nth=N     the Nth one (N >= 1) after the rule was set
//           every=N   the Nth, 2Nth, 3Nth, ... (N >= 1)
//           p=P       each one with probability P (0 <= P <= 1), drawn from
//                     a generator seeded with seed=S (default 1), so a run
//                     can be repeated
//         and what the action needs:
//           ms=N | us=N   delay: how long the completion is held back
//                         (required, one of the two)
//           at=K          corrupt: the first byte flipped (default 0)
//           bytes=N       corrupt: how many bytes are flipped (default 1)
// Example: "read:corrupt:nth=3;send:drop:every=10;write:fail:p=0.01,seed=7".
// Spaces around names and values are ignored; an empty spec has no rules.
//
// What each action does to each kind of operation (the semantics live in
// fault_transport.h): write:delay is refused, since a WRITE has no
// completion of its own to hold back; every other pair is supported.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace rkv::transport::fault {

// The operations a fault can hit. kRecv is a message received (a receive
// completion), kConnect a Transport::Connect, kAccept the server side of a
// handshake (a connection request handed out by Listener::Next, then its
// Accept).
enum class FaultOp : uint8_t { kRead, kWrite, kSend, kRecv, kConnect, kAccept };
inline constexpr size_t kFaultOpCount = 6;

enum class FaultAction : uint8_t { kDrop, kDelay, kCorrupt, kFail };

// How a rule picks the operations it hits.
enum class FaultSelect : uint8_t { kAll, kNth, kEvery, kProbability };

// "read", "write", ...; "drop", "delay", ...
const char* FaultOpName(FaultOp op);
const char* FaultActionName(FaultAction action);

struct FaultRule {
  FaultOp op = FaultOp::kRead;
  FaultAction action = FaultAction::kFail;
  FaultSelect select = FaultSelect::kAll;
  uint64_t n = 0;            // kNth, kEvery: N >= 1
  double probability = 0;    // kProbability: 0 <= p <= 1
  uint64_t seed = 1;         // kProbability: the generator's seed
  std::chrono::microseconds delay{0};  // kDelay: > 0
  size_t corrupt_at = 0;     // kCorrupt: first byte flipped
  size_t corrupt_bytes = 1;  // kCorrupt: bytes flipped, >= 1
};

// The rule as a spec would name it, e.g. "read:corrupt:nth=3,at=0,bytes=1".
std::string FormatFaultRule(const FaultRule& rule);

// OK when `rule` is consistent: N >= 1 for nth/every, 0 <= p <= 1, a
// positive delay for kDelay, at least one byte for kCorrupt, and an action
// its operation supports. INVALID_ARGUMENT saying what is wrong otherwise.
Status ValidateFaultRule(const FaultRule& rule);

// Parses a spec (grammar above) into its rules, in order. INVALID_ARGUMENT
// naming the rule (its position and text) and what is wrong with it: an
// unknown operation, action or parameter, a parameter given twice or that
// the action does not take, more than one selector, a value that is not a
// number or out of range.
StatusOr<std::vector<FaultRule>> ParseFaultSpec(std::string_view spec);

}  // namespace rkv::transport::fault
