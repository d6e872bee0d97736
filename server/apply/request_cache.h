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
// clients without a live connection: a client with a connection open
// (Pin) is never forgotten, and when the bound is reached the least
// recently active client *without* one is forgotten (with all its replies)
// first. So one client's burst of fresh ids can evict only clients that
// are not connected, never the entry a connected client's retry needs, and
// the cache holds at most max_clients + (live client connections) clients.
// Each remembered reply costs kBytesPerReply bytes; with the defaults (256
// replies, 1024 clients) the clients without a connection hold at most 34
// MiB of replies (MaxMemoryBytes), plus kBytesPerReply * 256 per live
// connection at most. A client's per-client storage grows with use up to
// its bound, so a server whose clients make few requests holds far less.
//
// Forgetting a client is made safe by what the client says and what the
// cache keeps of it: every request carries whether it was sent to this
// server incarnation before (protocol::kRequestResent), and the ids of the
// last `max_evicted` forgotten clients are kept (8 bytes each) with a mark
// once an older one had to be dropped. A client whose entry was forgotten
// (or may have been: its id dropped from that list) is "reborn" when it
// comes back, and a resent request that a reborn client's entry does not
// remember may have been applied under the entry that was forgotten: it
// is kForgotten, never kNew.
//
// What a lookup can say (Check):
//   kNew        the request is not remembered and may be applied;
//   kReplay     it was answered before: *reply is the original reply;
//   kForgotten  not remembered, and it may be a retry whose reply was
//               dropped to respect a bound, so it must not be applied (the
//               caller refuses it): a resent request whose id is not above
//               the largest id this client has had forgotten, or a resent
//               request of a reborn client (above). A first attempt (not
//               resent) is never kForgotten: it never reached this
//               incarnation before, so however many newer requests of its
//               client overtook it, it cannot have been applied. A resent
//               one whose first attempt never arrived lands here when at
//               least `requests_per_client` newer requests of its client
//               were answered before it, or its client is reborn (the price
//               of the safety: an "outcome unknown" refusal instead of a
//               second apply). The client marks a request resent whenever
//               it may have reached the server (a post that failed part of
//               the way included).
// (The exactly-once guarantee these bounds give: docs/design.md §5.6.)
//
// Thread safety: none; the owner serializes every call (the Applier: under
// cache_mu_, server/apply/apply.h, where a request is also marked in flight
// from its check to its insert).
//
// Invariants: lru_ and index_ hold the same clients; every client's ids and
// replies have the same size, at most requests_per_client; ids[i] ==
// replies[i].request_id; the clients with no pin number at most
// max_clients; pinned_remembered_ counts the clients of index_ with a pin;
// evicted_ and evicted_order_ hold the same ids, each once, at most
// max_evicted (an id there may be remembered again: its entry is reborn).
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <list>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "common/protocol.h"

namespace rkv::server {

struct RequestCacheLimits {
  size_t max_clients = 1024;         // clients remembered, >= 1
  size_t requests_per_client = 256;  // replies remembered per client, >= 1
  size_t max_evicted = 65536;        // ids of forgotten clients kept, >= 1
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

  // What the cache knows of request `request_id` of `client_id`, `resent`
  // when the client says it sent this request to this incarnation before
  // (see the file comment). On kReplay *reply is the original reply. Marks
  // the client as the most recently active one when it is known.
  Verdict Check(uint64_t client_id, uint64_t request_id, bool resent, protocol::ReplyMsg* reply);

  // Remembers `reply` (its request_id names the request) as the answer to a
  // request of `client_id` that Check called kNew; forgets the client's
  // oldest reply, or the least recently active client, when a bound is
  // reached.
  void Insert(uint64_t client_id, const protocol::ReplyMsg& reply);

  // A connection of `client_id` opened / closed: a client with a
  // connection open is never forgotten by the client bound. Every Pin is
  // matched by one Unpin.
  void Pin(uint64_t client_id);
  void Unpin(uint64_t client_id);

  // Clients remembered, replies remembered over all of them, and clients
  // forgotten by the client bound so far.
  size_t clients() const { return lru_.size(); }
  size_t replies() const { return replies_; }
  uint64_t evictions() const { return evictions_; }

  // The most memory the replies of the clients without a connection can
  // take with `limits` (each live connection may add one client's bound).
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
    bool reborn = false;      // an earlier entry of this client may have been forgotten
  };

  // The client, made most recently active; null when unknown.
  Client* Touch(uint64_t client_id);
  // Whether an entry of `client_id` may have been forgotten.
  bool MayHaveBeenForgotten(uint64_t client_id) const;
  // Forgets the least recently active client without a connection, if the
  // clients without one are at the bound.
  void EvictIfFull();

  const RequestCacheLimits limits_;
  std::list<Client> lru_;  // most recently active first
  std::unordered_map<uint64_t, std::list<Client>::iterator> index_;
  std::unordered_map<uint64_t, uint32_t> pins_;  // live connections per client, > 0
  size_t pinned_remembered_ = 0;                 // clients in index_ with a pin
  std::unordered_set<uint64_t> evicted_;         // ids of forgotten clients
  std::deque<uint64_t> evicted_order_;           // the same, oldest first
  bool evicted_dropped_ = false;                 // an id left evicted_ for the bound
  uint64_t evictions_ = 0;
  size_t replies_ = 0;
};

}  // namespace rkv::server
