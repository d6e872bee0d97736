// What the connect_request fuzz target and its seed corpus (corpus_gen.cc)
// share: the server's challenge secret, its stopped clock, and the tokens,
// so that the corpus's proofs answer challenges the target accepts.
#pragma once

#include "server/connect_challenge.h"

namespace rkv::fuzz {

inline constexpr server::ConnectChallenges::Secret kChallengeSecret = {
    0x52, 0x4b, 0x56, 0x21, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12,
    13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28};
inline constexpr const char* kClientToken = "fuzz-token";
inline constexpr const char* kClusterToken = "fuzz-cluster-token";

// Challenges under kChallengeSecret whose clock never moves: every nonce
// they issue (at second 0) stays fresh.
inline server::ConnectChallenges StoppedChallenges() {
  return server::ConnectChallenges(kChallengeSecret, [] { return server::ConnectChallenges::Clock::time_point{}; });
}

}  // namespace rkv::fuzz
