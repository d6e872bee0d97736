// RequestCache: the replies a server gave to each client's recent PUT and
// DELETE requests, so that a request retried after its reply was lost is
// answered with the original reply instead of being applied again.
//
// A request is named by (client id, request id): the client id comes from
// the connection's authenticated handshake (ConnectRequestData::client_id,
// random per client instance) and request ids are unique per client id
// across all of its connections (common/protocol.h). The cache lives in
// memory only: a restarted server (new epoch) remembers nothing (what the
// client does about that: docs/design.md §5.6).
//
// Bounds (RequestCacheLimits): at most `requests_per_client` replies per
// client, the oldest inserted forgotten first, and at most `max_clients`
// clients, the least recently active one forgotten (with all its replies)
// first. Each remembered reply costs kBytesPerReply bytes; with the
// defaults (256 replies, 1024 clients) the cache holds at most 32 MiB of
// replies plus a few hundred bytes of bookkeeping per client
// (MaxMemoryBytes). A client's per-client storage grows with use up to its
// bound, so a server whose clients make few requests holds far less.
//
// What a lookup can say (Check):
//   kNew        the request is not remembered and may be applied;
//   kReplay     it was answered before: *reply is the original reply;
//   kForgotten  its id is not above the largest id this client has had
//               forgotten, and it is not remembered: it may be a retry
//               whose reply was dropped to respect the bound, so it must
//               not be applied (the caller refuses it). A fresh request can
//               land here only when at least `requests_per_client` newer
//               requests of the same client were answered before it
//               arrived.
// A client forgotten by the LRU bound is forgotten entirely: its next
// request is kNew whatever its id. (The exactly-once guarantee these bounds
// give: docs/design.md §5.6.)
//
// Thread safety: none; the owner serializes every call (the Applier: under
// cache_mu_, server/apply/apply.h, where a request is also marked in flight
// from its check to its insert).
//
// Invariants: lru_ and index_ hold the same clients; every client's ids and
// replies have the same size, at most requests_per_client; ids[i] ==
// replies[i].request_id; size() <= max_clients.
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <unordered_map>
#include <vector>

#include "common/protocol.h"

namespace rkv::server {

struct RequestCacheLimits {
  size_t max_clients = 1024;         // clients remembered, >= 1
  size_t requests_per_client = 256;  // replies remembered per client, >= 1
};

class RequestCache {
 public:
  // Memory of one remembered reply: the reply and its id in the scan array.
  static constexpr size_t kBytesPerReply = sizeof(protocol::ReplyMsg) + sizeof(uint64_t);

  // Limits below 1 are raised to 1.
  explicit RequestCache(RequestCacheLimits limits);

  RequestCache(const RequestCache&) = delete;
  RequestCache& operator=(const RequestCache&) = delete;

  enum class Verdict { kNew, kReplay, kForgotten };

  // What the cache knows of request `request_id` of `client_id` (see the
  // file comment). On kReplay *reply is the original reply. Marks the client
  // as the most recently active one when it is known.
  Verdict Check(uint64_t client_id, uint64_t request_id, protocol::ReplyMsg* reply);

  // Remembers `reply` (its request_id names the request) as the answer to a
  // request of `client_id` that Check called kNew; forgets the client's
  // oldest reply, or the least recently active client, when a bound is
  // reached.
  void Insert(uint64_t client_id, const protocol::ReplyMsg& reply);

  // Clients remembered, and replies remembered over all of them.
  size_t clients() const { return lru_.size(); }
  size_t replies() const { return replies_; }

  // The most memory the replies of a cache with `limits` can take.
  static size_t MaxMemoryBytes(RequestCacheLimits limits);

 private:
  struct Client {
    uint64_t client_id = 0;
    // Ring of the remembered replies, in insertion order from `next`; ids
    // is scanned on a lookup (contiguous, 8 bytes per reply).
    std::vector<uint64_t> ids;
    std::vector<protocol::ReplyMsg> replies;
    size_t next = 0;          // ring slot of the next insert once full
    uint64_t max_id = 0;      // largest request id remembered so far
    uint64_t forgotten = 0;   // largest request id forgotten (0: none)
  };

  // The client, made most recently active; null when unknown.
  Client* Touch(uint64_t client_id);

  const RequestCacheLimits limits_;
  std::list<Client> lru_;  // most recently active first
  std::unordered_map<uint64_t, std::list<Client>::iterator> index_;
  size_t replies_ = 0;
};

}  // namespace rkv::server
