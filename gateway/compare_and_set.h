// One key's read-modify-write as a compare-and-set loop on rkv::Client,
// shared by both protocols: Redis's INCR, APPEND, SET's options, EXPIRE...
// (ReadModifyWrite, resp_commands.h) and memcached's add, replace, append,
// prepend, incr, decr, touch, gat, delete and flush_all
// (memcache_session.cc).
//
// The loop reads the key with its version (GetVersioned), lets the
// caller's step decide what to write, and writes only if the key still
// holds the version read (PutCondition::VersionIs, or Absent for a key
// that was absent; DeleteIfVersion for a removal). A write that finds the
// key changed starts again from the read, so the result is as if the read
// and the write were one step, however many gateways write the key.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

#include "rkv/client.h"
#include "rkv/status.h"

namespace rkv::gateway {

// True for a status saying a conditional write (Put with a PutCondition,
// DeleteIfVersion) found the key otherwise: nothing was written.
inline bool ConditionFailed(const rkv::Status& status) {
  return status.code() == rkv::StatusCode::kFailedPrecondition && status.reason() == rkv::Reason::kConditionFailed;
}

// One read of a key for a read-modify-write: absent (found false), or its
// value, version and expiry.
struct KeyState {
  bool found = false;
  rkv::VersionedValue current;
};

// What a read-modify-write step decides, having seen the key.
enum class RmwAction : uint8_t {
  kWrite,   // write `next_value` with `next_expiry`
  kDelete,  // remove the key (nothing to do when it is absent)
  kDone,    // write nothing
};

// How a compare-and-set loop ended.
struct CasOutcome {
  // OK once the step returned kDone or its write applied; otherwise the
  // rkv error of a read or a write, or ABORTED when the loop gave up.
  rkv::Status status;
  // True when `status` is the loop's own ABORTED: max_attempts writes in a
  // row found the key changed (a key written without pause by others).
  bool gave_up = false;
  // True when a write or a removal applied (status OK, the step's last
  // action kWrite or kDelete on a present key).
  bool wrote = false;
  // The key's version after the write (0 after a removal); 0 unless wrote.
  uint64_t version = 0;
};

// The compare-and-set loop on `key`: reads it, calls
// step(state, &next_value, &next_expiry) with `state` a KeyState& and
// next_expiry starting as the key's current expiry (kNoExpiry when
// absent), so a step that does not set it keeps the TTL; the step may
// move the value out of state.current (the loop needs only found and
// version). It runs once per attempt, so it sets its outputs afresh each
// time. At most `max_attempts` attempts. The caller's thread runs
// everything; the client must be usable from it.
template <typename Step>
CasOutcome CompareAndSet(rkv::Client& client, std::string_view key, int max_attempts, Step&& step) {
  CasOutcome outcome;
  for (int attempt = 0; attempt < max_attempts; ++attempt) {
    KeyState state;
    auto read = client.GetVersioned(key);
    if (read.ok()) {
      state.found = true;
      state.current = std::move(*read);
    } else if (read.status().code() != rkv::StatusCode::kNotFound) {
      outcome.status = read.status();
      return outcome;
    }
    std::string next_value;
    int64_t next_expiry = state.found ? state.current.expires_at_unix_ms : rkv::kNoExpiry;
    const RmwAction action = step(state, &next_value, &next_expiry);
    if (action == RmwAction::kDone) return outcome;
    if (action == RmwAction::kDelete) {
      if (!state.found) return outcome;
      rkv::Status deleted = client.DeleteIfVersion(key, state.current.version);
      if (ConditionFailed(deleted) || deleted.code() == rkv::StatusCode::kNotFound) continue;
      outcome.wrote = deleted.ok();
      outcome.status = std::move(deleted);
      return outcome;
    }
    rkv::PutOptions put;
    put.condition = state.found ? rkv::PutCondition::VersionIs(state.current.version) : rkv::PutCondition::Absent();
    put.expires_at_unix_ms = next_expiry;
    auto written = client.Put(key, next_value, put);
    if (written.ok()) {
      outcome.wrote = true;
      outcome.version = *written;
      return outcome;
    }
    if (!ConditionFailed(written.status())) {
      outcome.status = written.status();
      return outcome;
    }
  }
  outcome.gave_up = true;
  outcome.status = rkv::Status(rkv::StatusCode::kAborted, "the key kept changing during " +
                                                              std::to_string(max_attempts) +
                                                              " compare-and-set attempts");
  return outcome;
}

}  // namespace rkv::gateway
