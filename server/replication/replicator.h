// The primary's side of replication: sends a write it applies to the
// backups of the key's shard over the data plane, the way a client writes
// (a WRITE of the record into the backup's staging ring, then a SEND of the
// request naming it; on tcp the transport's emulation of both), and waits
// for their replies. docs/design.md, "Replication".
//
// Lanes: ReplicatorOptions::lanes forwards may be in flight at once, each
// on its own lane: a record buffer (and its registration) and one
// connection per backup server. A Forward or ForwardMany takes the first
// free lane, in lane order (or, when all are busy, waits for one), so that
// a lane beyond the concurrency the writes need never opens a connection,
// and writes of several client pollers overlap their round trips. A lane
// serves one call at a time, and pipelines it: a Forward is a ForwardMany
// of one item. The items go in chunks, in order; a chunk takes items while
// their records fit the lane's buffer (each copied at its own 64-byte
// aligned offset) and, for every backup of the chunk, its requests fit the
// connection's window (kMaxInFlight and the backup's request credits) and
// its records, packed from offset 0 at 64-byte aligned offsets, its
// staging ring. Each item's record is written to every backup of it and
// its request sent, then every reply of the chunk is awaited (the waits
// overlap), then the next chunk goes, with a deadline of its own: a chunk
// costs one round trip per backup, not one per item. A backup serves each
// lane's connection as an ordinary replication connection from this
// server; it needs nothing else.
//
// Connections: per lane, one per backup server, opened on first use (while
// a chunk is built: its accept bounds the chunk) with a
// protocol::PeerConnectData that names this server (PeerFingerprint of its
// id, and its epoch) and kept for that lane's later writes. A connection to
// another epoch or address of the same server id is replaced (an item
// naming one ends the chunk, so a connection in use is never replaced); one
// that broke, timed out or sent something malformed is dropped, and each
// of its requests without a reply fails with that status; one unused for
// ReplicatorOptions::idle_close is closed before its lane's next chunk. Up
// to its window of requests are in flight on a connection, each with its
// own request id (the connection's sequence), request message slot, and
// receive slot (as many receives as the window are posted, each posted
// again once its reply is taken); a reply is matched to its request by
// request id alone, whatever the order or slot it came in. A chunk ends
// with no request in flight on any connection, so the next one reuses the
// slots and the ring from offset 0.
//
// Each accept is validated (magic, versions, the epoch the map names, a
// ring that holds the record, at least one credit) and so is every reply
// (exact size, the id of a request in flight on that connection and not
// yet answered, a known status code and reason, a NUL-terminated
// message). Forwarding is idempotent (a backup installs a version only when
// it is newer), so the requests of a chunk that failed on a connection
// that had been idle, which the peer may have closed meanwhile, before any
// of their replies came, are resent once on a new connection within the
// same deadline.
//
// Thread safety: Forward, ForwardMany, connections() and the destructor
// are thread-safe; up to `lanes` calls run at once, each holding its lane's
// mutex, and more wait for a lane. The destructor disconnects every
// connection; it must run before the transport is destroyed.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/mutex.h"
#include "common/protocol.h"
#include "common/status.h"
#include "common/transport/transport.h"
#include "server/replication/replication.h"

namespace rkv::server {

// What the apply path forwards through (Replicator; a fake in tests).
class Forwarder {
 public:
  virtual ~Forwarder() = default;

  // Sends `record` (an encoded record, common/record.h, carrying the
  // primary's version) as `op` (kReplicatePut or kReplicateDelete), with
  // `map_version` as the request id, to every peer of `backups`, all at
  // once, and waits for their replies within the forwarder's timeout (Replicator: up to twice
  // that for a backup its map shows UP, ReplicatorOptions::is_down).
  // Returns one status per backup, in the order of `backups`: OK when it
  // acknowledged the write, else why not, naming the backup.
  virtual std::vector<Status> Forward(const std::vector<ReplicaPeer>& backups, uint64_t map_version,
                                      protocol::Op op, std::span<const uint8_t> record) = 0;

  // One write of a ForwardMany: Forward's arguments. The views must stay
  // valid for the call.
  struct Item {
    const std::vector<ReplicaPeer>* backups = nullptr;
    uint64_t map_version = 0;
    protocol::Op op = protocol::Op::kReplicatePut;
    std::span<const uint8_t> record;
  };
  // Forwards several writes at once: each item as Forward would, the
  // result of item i at index i (one status per backup of the item, in its
  // order). The items are writes of different keys; nothing orders them
  // against each other. This one forwards them one after the other;
  // Replicator overrides it to pipeline them (docs/design.md §5.7).
  virtual std::vector<std::vector<Status>> ForwardMany(std::span<const Item> items) {
    std::vector<std::vector<Status>> results;
    results.reserve(items.size());
    for (const Item& item : items) {
      results.push_back(Forward(*item.backups, item.map_version, item.op, item.record));
    }
    return results;
  }
};

// The most requests a connection to a backup has in flight at once
// (Replicator::kMaxInFlight), and ReplicatorOptions::request_credits'
// default.
inline constexpr uint32_t kMaxForwardsInFlight = 16;

struct ReplicatorOptions {
  std::string self_id;      // this server's id in the cluster map
  uint64_t self_epoch = 0;  // this server's epoch (>= 1)
  std::string token;        // the cluster's token (its digest is sent)
  // The longest a Forward waits, connecting included.
  std::chrono::milliseconds timeout{1000};
  // A connection unused this long is closed before its next use.
  std::chrono::milliseconds idle_close{std::chrono::seconds(60)};
  uint64_t max_record_bytes = 0;  // the largest block forwarded (> 0)
  // This server's own request credits (>= 1): its connections' queues are
  // sized for them (ServerSendDepth, ServerRecvDepth), so a connection to
  // a backup keeps no more requests in flight than this, whatever the
  // backup grants; a backup granting more would otherwise have the
  // replies' receives or a chunk's pairs refused by this side's queues.
  uint32_t request_credits = kMaxForwardsInFlight;
  // Forwards in flight at once (>= 1), each with its own record buffer and
  // connection per backup: the server gives one per client poller.
  uint32_t lanes = 1;
  // Whether the map this server holds shows the backup DOWN (or no longer
  // lists that incarnation), asked every 50 ms of a wait for its reply.
  // When set, a wait ends as soon as the backup is DOWN, and a backup
  // that has not answered within `timeout` but is not DOWN gets up to
  // another `timeout`: a live backup can be slow for a moment (its own
  // forward to a frozen server held it up), and taking it out of its sets
  // costs a catch-up; a frozen one is marked DOWN by the coordinator's
  // probe within about a second (docs/design.md §8.8), which ends the wait.
  std::function<bool(const std::string& server_id, uint64_t epoch)> is_down;
};

class Replicator final : public Forwarder {
 public:
  // `transport` must outlive the Replicator. INVALID_ARGUMENT for missing
  // options; an error of registering the send buffer otherwise.
  static StatusOr<std::unique_ptr<Replicator>> Create(transport::Transport* transport, ReplicatorOptions options);
  ~Replicator() override;
  Replicator(const Replicator&) = delete;
  Replicator& operator=(const Replicator&) = delete;

  std::vector<Status> Forward(const std::vector<ReplicaPeer>& backups, uint64_t map_version, protocol::Op op,
                              std::span<const uint8_t> record) override;
  // Pipelined: on one lane, every item's record is written to each of its
  // backups at its own offset of that backup's staging ring, and its
  // request sent, before any reply is awaited, so a batch costs one round
  // trip per backup, not one per item (up to kMaxInFlight requests per
  // connection at once; a larger batch goes in several such steps).
  std::vector<std::vector<Status>> ForwardMany(std::span<const Item> items) override;

  // Requests in flight on one connection at most (also bounded by the
  // backup's request credits, this server's own and the backup's staging
  // ring).
  static constexpr uint32_t kMaxInFlight = kMaxForwardsInFlight;

  // Connections open now, over every lane (a backup in use by k lanes
  // counts k times).
  size_t connections() const;

 private:
  struct Peer;
  struct Request;
  struct Target;
  // One forward's worth of state: what Forward used before lanes, once per
  // lane. Members go bottom-up: the connections (which read the record
  // buffer) before its registration, and that before the buffer.
  struct Lane {
    mutable Mutex mu;
    // The records of the chunk being forwarded, each at its own 64-byte
    // aligned offset, read by every connection's WRITEs.
    std::vector<uint8_t> record_buffer GUARDED_BY(mu);
    std::unique_ptr<transport::MemoryRegion> record_mr GUARDED_BY(mu);
    std::map<std::string, std::unique_ptr<Peer>> peers GUARDED_BY(mu);  // by server id
  };
  using Clock = std::chrono::steady_clock;

  // A lane's record buffer holds at least this much of a chunk's records
  // (and at least the largest record).
  static constexpr uint64_t kBatchBytes = uint64_t{256} << 10;

  Replicator(transport::Transport* transport, ReplicatorOptions options);
  // ForwardMany, on `lane`.
  std::vector<std::vector<Status>> ForwardOn(Lane& lane, std::span<const Item> items) REQUIRES(lane.mu);
  // Builds the chunk that starts at items[first], forwards it and fills
  // the results of its items; returns the index of the first item after it
  // (> first).
  size_t ForwardChunk(Lane& lane, std::span<const Item> items, size_t first,
                      std::vector<std::vector<Status>>& results) REQUIRES(lane.mu);
  // The open connection of `lane` to `backup`, opened (or replaced) if need
  // be.
  StatusOr<Peer*> Connection(Lane& lane, const ReplicaPeer& backup, Clock::time_point deadline) REQUIRES(lane.mu);
  StatusOr<std::unique_ptr<Peer>> Open(const ReplicaPeer& backup, Clock::time_point deadline);
  // Posts `target`'s requests (their records in `lane`'s buffer) on its
  // connection, as new requests.
  Status Post(Lane& lane, Target& target) REQUIRES(lane.mu);
  // Post on `lane`'s connection to `target`'s backup, opened if need be;
  // on failure the connection is dropped.
  Status PostTo(Lane& lane, Target& target, Clock::time_point deadline) REQUIRES(lane.mu);
  // Waits for the send completions and the replies of `target`'s requests,
  // posted on its connection; OK when every one was sent and answered (each
  // reply, an acknowledgement or a refusal, is in its request), else why the
  // connection failed. The caller holds the lane that owns the connection.
  Status Wait(Target& target, Clock::time_point deadline);

  transport::Transport* const transport_;
  const ReplicatorOptions options_;
  // options_.lanes of them, made by Create and never resized.
  std::vector<std::unique_ptr<Lane>> lanes_;
  // Which lane a Forward that found none free waits for (in turn, so the
  // waiters spread over the lanes).
  std::atomic<size_t> next_wait_{0};
};

}  // namespace rkv::server
