// Every refusal a server sends, and every typed error the client makes for
// itself, decided on with its message as the server writes it and then
// reworded: the decision (resend or not, which map version to wait for,
// regroup or not) never changes, because it reads the typed reason and the
// map version alone (client/refusal.h).
#include "client/refusal.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "client/wire_checks.h"
#include "common/protocol.h"

namespace rkv::client {
namespace {

struct Refusal {
  const char* what;
  StatusCode code;
  Reason reason;
  uint64_t map_version;
  std::string message;  // as the server writes it today
  bool resend;          // what the client must decide
};

// What servers send (server/replication/map_policy.cc RouteWrite, server/apply/,
// server/server.cc), with their messages of today.
std::vector<Refusal> ServerRefusals() {
  return {
      {"no map yet", StatusCode::kFailedPrecondition, Reason::kNotPrimary, 0,
       "not the primary of shard (any) in map version 0: this server has no cluster map yet", true},
      {"not assigned", StatusCode::kFailedPrecondition, Reason::kNotPrimary, 12,
       "not the primary of shard (any) in cluster map version 12: cluster map version 12 assigns no shards yet", true},
      {"another primary", StatusCode::kFailedPrecondition, Reason::kNotPrimary, 40,
       "not the primary of shard 3 in cluster map version 40 (its primary is s2)", true},
      {"handover", StatusCode::kFailedPrecondition, Reason::kHandover, 41,
       "not the primary of shard 3 in cluster map version 41 (handover from s1); nothing applied", true},
      {"no lease", StatusCode::kFailedPrecondition, Reason::kNoLease, 42,
       "no lease on map version 42, nothing applied: not the primary of shard 3 (lease on the cluster map expired 5 "
       "ms ago)",
       true},
      {"lease lost during the write", StatusCode::kUnavailable, Reason::kOutcomeUnknown, 42,
       "lease expired: outcome unknown (lease on the cluster map expired 1 ms ago)", false},
      {"map changed during the write", StatusCode::kUnavailable, Reason::kOutcomeUnknown, 43,
       "map changed mid-write, outcome unknown: map version 43 added backup s4 to shard 3", false},
      {"backup failure not reported", StatusCode::kUnavailable, Reason::kOutcomeUnknown, 43,
       "outcome unknown: backup s2 failed and the coordinator could not be told (coordinator unreachable)", false},
      {"written but not synced", StatusCode::kUnavailable, Reason::kOutcomeUnknown, 0,
       "written but not synced (outcome unknown): fsync failed", false},
      {"replay window passed", StatusCode::kAborted, Reason::kOutcomeUnknown, 0,
       "request 7 is too old for the replay check: not applied; a retry's outcome is unknown", false},
      {"missing key", StatusCode::kNotFound, Reason::kNone, 0, "key not found", false},
      {"table full", StatusCode::kResourceExhausted, Reason::kNone, 0,
       "table full: no slot in the key's neighbourhood, even after moving keys (raise --max_keys)", false},
      {"bad request", StatusCode::kInvalidArgument, Reason::kNone, 0, "request reserved bytes are not zero", false},
  };
}

// Other words for every message: none, noise, and each other refusal's
// text (the words that once decided a retry, on a reply they do not
// describe).
std::vector<std::string> Rewordings() {
  std::vector<std::string> out = {"", "x", "\x01\x02 garbage \xff", "the keys of this call moved to several servers",
                                  "not the primary of shard 9 in map version 999999"};
  for (const Refusal& r : ServerRefusals()) out.push_back(r.message);
  return out;
}

// A reply as a server sends it, through the client's parse.
Status Received(const Refusal& r, const std::string& message) {
  protocol::ReplyMsg reply{};
  reply.request_id = 5;
  reply.credits = 1;
  reply.status_code = static_cast<int32_t>(r.code);
  reply.reason = static_cast<uint8_t>(r.reason);
  reply.map_version = r.map_version;
  const size_t n = std::min(message.size(), sizeof(reply.message) - 1);
  std::memcpy(reply.message, message.data(), n);
  std::vector<uint8_t> bytes(sizeof(reply));
  std::memcpy(bytes.data(), &reply, sizeof(reply));
  auto parsed = ParseReply(bytes);
  EXPECT_TRUE(parsed.ok()) << parsed.status();
  return parsed.ok() ? ReplyStatus(*parsed) : parsed.status();
}

TEST(RefusalTest, EveryServerRefusalDecidesTheSameWhateverItsWords) {
  for (const Refusal& r : ServerRefusals()) {
    const RefusalDecision original = DecideOnRefusal(Received(r, r.message));
    EXPECT_EQ(original.resend, r.resend) << r.what;
    EXPECT_EQ(original.min_map_version, r.resend ? r.map_version : 0) << r.what;
    EXPECT_EQ(Received(r, r.message).reason() == Reason::kOutcomeUnknown, r.reason == Reason::kOutcomeUnknown) << r.what;
    for (const std::string& words : Rewordings()) {
      const Status reworded = Received(r, words);
      const RefusalDecision d = DecideOnRefusal(reworded);
      EXPECT_EQ(d.resend, original.resend) << r.what << " reworded as '" << words << "'";
      EXPECT_EQ(d.min_map_version, original.min_map_version) << r.what << " reworded as '" << words << "'";
      EXPECT_EQ(reworded.reason() == Reason::kOutcomeUnknown, r.reason == Reason::kOutcomeUnknown) << r.what;
      EXPECT_FALSE(KeysMoved(reworded)) << r.what << " reworded as '" << words << "'";
      // Context added on the way up (the server's name) changes nothing.
      const RefusalDecision named = DecideOnRefusal(reworded.WithContext("server s1 (epoch 2, 10.0.0.1:7700)"));
      EXPECT_EQ(named.resend, original.resend) << r.what;
      EXPECT_EQ(named.min_map_version, original.min_map_version) << r.what;
    }
  }
}

TEST(RefusalTest, TheClientsOwnTypedErrorsDecideTheSameWhateverTheirWords) {
  for (const std::string& words : Rewordings()) {
    const Status moved(StatusCode::kUnavailable, words, Reason::kKeysMoved, 17);
    EXPECT_TRUE(KeysMoved(moved)) << words;
    EXPECT_FALSE(DecideOnRefusal(moved).resend) << words;
    const Status unknown(StatusCode::kUnavailable, words, Reason::kOutcomeUnknown);
    EXPECT_EQ(unknown.reason(), Reason::kOutcomeUnknown) << words;
    EXPECT_FALSE(DecideOnRefusal(unknown).resend) << words;
    // The same words without a reason decide nothing.
    EXPECT_FALSE(KeysMoved(Unavailable(words))) << words;
    EXPECT_FALSE(DecideOnRefusal(FailedPrecondition(words)).resend) << words;
  }
  EXPECT_FALSE(DecideOnRefusal(Status::Ok()).resend);
}

}  // namespace
}  // namespace rkv::client
