// The PUT / DELETE apply path: turns one RequestMsg and the record it names
// in a connection's staging ring into a durable write, a published slot and
// a ReplyMsg.
//
// Validation (before any lock; a failure is an error reply, never a crash):
//   - the message is exactly sizeof(RequestMsg), op is known, reserved is 0;
//   - ring_offset is 64-byte aligned and [ring_offset, ring_offset + length)
//     lies inside the ring;
//   - length is at least a block header and at most the block of the
//     largest allowed record;
//   - the record is copied out of the ring first (the client may keep
//     writing its ring: what is checked must be what is stored), then
//     DecodeRecord must accept exactly those bytes, with
//     RecordBytes <= length <= BlockBytes and version 0;
//   - key 1..max_key_bytes, value <= max_value_bytes;
//   - DELETE carries the tombstone flag and an empty value, PUT no tombstone.
// Bad framing is INVALID_ARGUMENT; a record whose checksum fails is DATA_LOSS.
//
// Apply (under the apply mutex, so requests of all connections are applied
// one at a time, in arrival order per connection):
//   PUT:    version = store.NextVersion(); store.Put (durable per
//           --durability); table.Upsert (publishes the slot: the
//           linearization point); reply. If the table or heap refuses
//           after the store write, the store write is undone (the previous
//           value restored, or the key deleted) so store and table agree,
//           and the reply is RESOURCE_EXHAUSTED. When the heap is full only
//           because of quarantined blocks, the apply waits (holding the
//           mutex: every writer waits, which is the back-pressure) until the
//           oldest one is reusable — at most one grace period — and retries
//           once.
//   DELETE: NOT_FOUND if the table lacks the key; else store.Delete, then
//           table.Delete; the reply carries the deleted version.
// Acknowledged therefore means durable per --durability, and the slot is
// published only after the durable write.
//
// Replays (server/request_cache.h): under the same mutex, before applying,
// the request's (client id, request id) is looked up in the request cache.
// A request answered before gets its original reply again and changes
// nothing; one whose reply the cache had to forget is refused with ABORTED
// (never applied a second time); any other is applied and its reply
// remembered before the mutex is released. Check, apply and remember are
// therefore one step: a retry arriving on another connection while the
// original is being applied waits for the mutex and then finds the
// original's reply. Requests refused by validation are not remembered (a
// retry of one is validated, and refused, again).
//
// Thread safety: Apply and the accessors are thread-safe: one internal
// mutex guards every use of the Store, Table and Heap, which nobody else may
// use while the Applier exists. (The server closes the Store only once no
// Apply can run; snapshot() does not use it.)
#pragma once

#include <atomic>
#include <cstdint>
#include <span>

#include "common/mutex.h"
#include "common/protocol.h"
#include "common/status.h"
#include "server/heap.h"
#include "server/request_cache.h"
#include "server/store.h"
#include "server/table.h"

namespace rkv::server {

struct ApplyLimits {
  uint32_t max_key_bytes = 1024;
  uint32_t max_value_bytes = 1024 * 1024;
};

class Applier {
 public:
  // `replies`: what the request cache remembers (request_cache.h).
  Applier(Store* store, Table* table, Heap* heap, ApplyLimits limits, RequestCacheLimits replies = {});

  Applier(const Applier&) = delete;
  Applier& operator=(const Applier&) = delete;

  // Validates and applies the request in `msg` (the bytes received) whose
  // record lies in `ring` (the connection's staging ring), sent by the
  // client that identified itself as `client_id` in its handshake; a
  // replayed request gets its original reply (see Replays above). Always
  // returns a reply with credits = 1 and the request id (0 if the message
  // is too short to hold one).
  protocol::ReplyMsg Apply(uint64_t client_id, std::span<const uint8_t> msg, std::span<const uint8_t> ring)
      EXCLUDES(mu_);

  struct Snapshot {
    uint64_t puts = 0;            // PUTs applied
    uint64_t deletes = 0;         // DELETEs applied
    uint64_t replays = 0;         // requests answered with a remembered reply
    uint64_t request_errors = 0;  // replies other than OK and NOT_FOUND
    uint64_t keys = 0;
    Heap::Stats heap;
  };
  Snapshot snapshot() const EXCLUDES(mu_);

  // The largest block a valid request may name.
  uint64_t max_block_bytes() const;

 private:
  // Looks the request up in the cache, applies it when it is new and
  // remembers its reply: one step under mu_.
  protocol::ReplyMsg ApplyOnce(uint64_t client_id, uint64_t request_id, protocol::Op op, std::string_view key,
                               std::string_view value) EXCLUDES(mu_);
  protocol::ReplyMsg ApplyPut(uint64_t request_id, std::string_view key, std::string_view value) REQUIRES(mu_);
  protocol::ReplyMsg ApplyDelete(uint64_t request_id, std::string_view key) REQUIRES(mu_);
  protocol::ReplyMsg Error(uint64_t request_id, const Status& status);

  // Held for the whole of a write: requests of all connections are applied
  // one at a time.
  mutable Mutex mu_;
  Store* const store_ PT_GUARDED_BY(mu_);
  Table* const table_ PT_GUARDED_BY(mu_);
  Heap* const heap_ PT_GUARDED_BY(mu_);
  RequestCache cache_ GUARDED_BY(mu_);
  const ApplyLimits limits_;

  std::atomic<uint64_t> puts_{0};
  std::atomic<uint64_t> deletes_{0};
  std::atomic<uint64_t> replays_{0};
  std::atomic<uint64_t> errors_{0};
};

// Fills a reply; `message` is cut to fit and NUL-terminated.
protocol::ReplyMsg MakeReply(uint64_t request_id, StatusCode code, uint64_t version, std::string_view message);

}  // namespace rkv::server
