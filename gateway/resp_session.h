// RESP2, Redis's protocol, on rkv: one Session per client connection of
// rkv-gateway's --redis_listen (gateway/session.h says how the event loop
// drives it). Requests are split by resp_parser.h and executed on the
// gateway's rkv::Client; replies are redis-server's, error texts included,
// for the commands it serves (docs/design.md, the gateway's section, maps
// each to rkv's calls); every other command gets Redis's unknown-command
// error.
//
// Keys and values are stored in rkv as they are: a key SET through the
// gateway is the same key kvctl or librkv reads.
//
// Thread safety: a session is used by one thread at a time (session.h);
// the Client and the RespShared are shared by all sessions.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "gateway/session.h"

namespace rkv::gateway {

class RkvRound;

// What the gateway's RESP sessions share: counters for INFO and the client
// ids of CLIENT ID. Relaxed atomics: each is a count read for reporting.
struct RespShared {
  std::atomic<uint64_t> next_client_id{1};
  std::atomic<uint64_t> connected_clients{0};       // sessions alive
  std::atomic<uint64_t> total_connections{0};       // sessions made
  std::atomic<uint64_t> total_commands{0};          // commands executed
  std::atomic<uint64_t> backend_errors{0};          // rkv calls that failed (ERR rkv ... replies)
  int64_t started_unix_s = 0;                       // INFO's uptime
  int tcp_port = 0;                                 // INFO's tcp_port
};

struct RespOptions {
  Limits limits;
  // AUTH: clients must authenticate before any other command when either
  // is set. `requirepass`: the password AUTH takes (redis-server's
  // requirepass). `token`: when not empty, AUTH also takes the rkv token
  // the gateway itself presents to rkv.
  std::string requirepass;
  std::string token;
  // Consecutive pipelined GETs (and plain SETs) of one connection are
  // executed as one MultiGet (MultiPut) of at most this many keys, or
  // deferred to the round as one run of at most this many (>= 1).
  size_t max_batch = 32;
  // Largest request in bytes, framing included (>= the largest value plus
  // its framing); a larger one is a protocol error and closes.
  size_t max_request_bytes = size_t{64} << 20;
  // Shared by every session; must outlive them. Never null.
  RespShared* shared = nullptr;
};

// A session of RESP2 executing on `client`, which must outlive it. Never
// null. With `round` (its loop thread's, executing on the same client;
// must outlive it), a run of pipelined GETs or plain SETs is deferred to
// the round (gateway/session.h), so that one MultiGet or MultiPut serves
// the runs of all the thread's connections; without, each run is one
// MultiGet or MultiPut of its own, made in Serve.
std::unique_ptr<Session> NewRespSession(rkv::Client* client, const RespOptions& options, RkvRound* round = nullptr);

}  // namespace rkv::gateway
