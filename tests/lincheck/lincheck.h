// A linearizability checker for histories of Get/Put/Delete on a key-value
// store: the model is one register per key (absent, or a value), and a
// history is linearizable when every key's operations are (Herlihy & Wing:
// linearizability is local, so keys are checked one at a time).
//
// A key is checked with the search of Wing & Gong as Lowe refined it (the
// "just-in-time" linearization Porcupine also uses): walk the operations in
// order of invocation; any operation invoked before the earliest completion
// of those not yet placed may go next; place one whose result the register
// allows, backtrack when none fits, and remember each (set of placed
// operations, register value) already explored so that no configuration is
// searched twice.
//
// An operation whose outcome the client does not know (the call failed or
// timed out) has no completion: it may have taken effect at any point after
// its invocation, or never (placing it after everything else is "never").
// A Get with an unknown outcome says nothing and is ignored.
//
// Example:
//   lincheck::History h;
//   h.operations.push_back({.client = 0, .kind = lincheck::OpKind::kPut, .key = "k",
//                           .value = "a", .outcome = lincheck::Outcome::kOk,
//                           .invoke = t0, .complete = t1});
//   const lincheck::CheckResult r = lincheck::Check(h);
//   if (r.verdict != lincheck::Verdict::kLinearizable) print r.explanation;
//
// Thread safety: Check is a pure function; call it from any thread.
#pragma once

#include <chrono>
#include <cstddef>
#include <map>
#include <string>
#include <vector>

namespace rkv::lincheck {

using Time = std::chrono::steady_clock::time_point;

enum class OpKind { kGet, kPut, kDelete };

enum class Outcome {
  // Get: found the key with `value`. Put: stored `value`. Delete: removed a
  // key that was present.
  kOk,
  // Get or Delete: the key was absent. (Not valid for a Put.)
  kNotFound,
  // The call failed or timed out: the write may or may not have happened;
  // `complete` is ignored.
  kUnknown,
};

struct Operation {
  int client = 0;  // names the caller in explanations only
  OpKind kind = OpKind::kGet;
  std::string key;
  // Put: the value written. Get with kOk: the value read. Otherwise unused.
  std::string value;
  Outcome outcome = Outcome::kUnknown;
  Time invoke{};    // before the call was made
  Time complete{};  // after it returned; at or after `invoke`
};

struct History {
  std::vector<Operation> operations;  // any order
  // The value of each key before the history began; keys not listed start
  // absent.
  std::map<std::string, std::string> initial;
};

enum class Verdict {
  kLinearizable,
  kNotLinearizable,  // `failing_keys` lists the keys, `explanation` says why
  kInvalidHistory,   // an operation is malformed; `explanation` names it
  kGaveUp,           // a key needed more than CheckOptions::max_states
};

struct CheckResult {
  Verdict verdict = Verdict::kLinearizable;
  std::vector<std::string> failing_keys;
  // Empty when linearizable. Otherwise, per failing key (at most
  // CheckOptions::max_explained of them): its operations in invocation
  // order with times relative to the history's first invocation, the
  // longest prefix that could be linearized, the register value after it,
  // and why no remaining operation can come next.
  std::string explanation;
};

struct CheckOptions {
  // Bound on the configurations memoized per key (each costs a few dozen
  // bytes): the search is exponential in the worst case, and a caller gets
  // kGaveUp rather than a run without end.
  size_t max_states = 4'000'000;
  size_t max_explained = 3;
};

CheckResult Check(const History& history, const CheckOptions& options = {});

// "linearizable", "NOT linearizable", "invalid history", "gave up".
const char* VerdictName(Verdict verdict);

}  // namespace rkv::lincheck
