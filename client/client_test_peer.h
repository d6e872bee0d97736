// ClientTestPeer: what tests may read of a Client's internals, and nothing
// of librkv's API (a friend of Client, defined in rkv_client_internal and
// not exported from librkv: a test that uses it links
// rkv_client_internal).
#pragma once

#include <cstdint>
#include <string_view>

#include "rkv/client.h"

namespace rkv {

class ClientTestPeer {
 public:
  // Attempts `client` has run on server `server_id` (a client of one
  // server: its address): one per attempt of a Get, Put or Delete and per
  // attempt of a MultiGet group that had a connection to it (an attempt
  // that could not connect is not counted), since the client first used
  // that server's current incarnation (a restarted server counts from 0).
  // 0 for a server not used yet or not in the cached map. Shows how
  // ReadFrom::kAnyReplica spreads reads; thread-safe.
  static uint64_t AttemptsOn(const Client& client, std::string_view server_id);
};

}  // namespace rkv
