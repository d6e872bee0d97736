// What a call does after a server refused one of its writes, or after its
// own routing found the keys of one call spread over several servers: the
// decisions docs/design.md §5.6 argues, made from a Status's typed reason
// and map version (rkv::Reason, common/status.h) alone. A refusal's message
// is for people: rewording one changes no decision here
// (refusal_test.cc checks that for every refusal the server sends).
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>

#include "common/status.h"

namespace rkv::client {

// The decision on a write's non-OK answer from a server.
struct RefusalDecision {
  // The server wrote nothing for the request (Reason::kNotPrimary,
  // kHandover, kNoLease): the call marks it unsent and may send it again,
  // to the primary of the newest map, within its deadline.
  bool resend = false;
  // The map version the refusal names: the call fetches a map at least this
  // new before it resends (0: the refusal names none, or "no map yet").
  uint64_t min_map_version = 0;
};

// Decides on `answer`, a server's non-OK reply to a PUT or DELETE (an OK
// answer, and every reason other than the three above, is the call's
// answer: resend is false).
RefusalDecision DecideOnRefusal(const Status& answer);

// Whether a call's error says that its keys now belong to several servers
// (Reason::kKeysMoved): a batch call groups them again by the newest map.
bool KeysMoved(const Status& s);

}  // namespace rkv::client
