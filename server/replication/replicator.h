// The primary's side of replication: sends a write it applies to the
// backups of the key's shard over the data plane, the way a client writes
// (a WRITE of the record into the backup's staging ring, then a SEND of the
// request naming it; on tcp the transport's emulation of both), and waits
// for their replies. docs/design.md, "Replication".
//
// Lanes: ReplicatorOptions::lanes forwards may be in flight at once, each
// on its own lane: a record buffer (and its registration) and one
// connection per backup server. A Forward takes the first free lane, in
// lane order (or, when all are busy, waits for one), so that a lane beyond
// the concurrency the writes need never opens a connection, and writes of several client pollers
// overlap their round trips, while each connection carries one request at a
// time. A backup serves each lane's connection as an ordinary replication
// connection from this server; it needs nothing else.
//
// Connections: per lane, one per backup server, opened on first use with a
// protocol::PeerConnectData that names this server (PeerFingerprint of its
// id, and its epoch) and kept for that lane's later writes. A connection to
// another epoch or address of the same server id is replaced; one that
// broke, timed out or sent something malformed is dropped; one unused for
// ReplicatorOptions::idle_close is closed before its lane's next use. One
// request is in flight per connection (a lane serves one Forward at a
// time), so the record always goes to ring offset 0 and one receive buffer
// is enough.
//
// Each accept is validated (magic, versions, the epoch the map names, a
// ring that holds the record, at least one credit) and so is every reply
// (exact size, the request id echoed, a known status code, a NUL-terminated
// message). Forwarding is idempotent (a backup installs a version only when
// it is newer), so a request that failed on a connection that had been
// idle, which the peer may have closed meanwhile, is resent once on a new
// connection within the same deadline.
//
// Thread safety: Forward, connections() and the destructor are
// thread-safe; up to `lanes` calls of Forward run at once, each holding its
// lane's mutex, and more wait for a lane. The destructor disconnects every
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
};

struct ReplicatorOptions {
  std::string self_id;      // this server's id in the cluster map
  uint64_t self_epoch = 0;  // this server's epoch (>= 1)
  std::string token;        // the cluster's token (its digest is sent)
  // The longest a Forward waits, connecting included.
  std::chrono::milliseconds timeout{1000};
  // A connection unused this long is closed before its next use.
  std::chrono::milliseconds idle_close{std::chrono::seconds(60)};
  uint64_t max_record_bytes = 0;  // the largest block forwarded (> 0)
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

  // Connections open now, over every lane (a backup in use by k lanes
  // counts k times).
  size_t connections() const;

 private:
  struct Peer;
  // One forward's worth of state: what Forward used before lanes, once per
  // lane. Members go bottom-up: the connections (which read the record
  // buffer) before its registration, and that before the buffer.
  struct Lane {
    mutable Mutex mu;
    // The record being forwarded, read by every connection's WRITE.
    std::vector<uint8_t> record_buffer GUARDED_BY(mu);
    std::unique_ptr<transport::MemoryRegion> record_mr GUARDED_BY(mu);
    std::map<std::string, std::unique_ptr<Peer>> peers GUARDED_BY(mu);  // by server id
  };
  using Clock = std::chrono::steady_clock;

  Replicator(transport::Transport* transport, ReplicatorOptions options);
  // Forward, on `lane`.
  std::vector<Status> ForwardOn(Lane& lane, const std::vector<ReplicaPeer>& backups, uint64_t map_version,
                                protocol::Op op, std::span<const uint8_t> record) REQUIRES(lane.mu);
  // The open connection of `lane` to `backup`, opened (or replaced) if need
  // be.
  StatusOr<Peer*> Connection(Lane& lane, const ReplicaPeer& backup, Clock::time_point deadline) REQUIRES(lane.mu);
  StatusOr<std::unique_ptr<Peer>> Open(const ReplicaPeer& backup, Clock::time_point deadline);
  // Posts the record in `lane`'s buffer and the request on `peer`.
  Status Post(Lane& lane, Peer& peer, uint64_t map_version, protocol::Op op, uint32_t length) REQUIRES(lane.mu);
  // Post on `lane`'s connection to `backup`, opened if need be; on failure
  // the connection is dropped.
  StatusOr<Peer*> PostTo(Lane& lane, const ReplicaPeer& backup, uint64_t map_version, protocol::Op op,
                         uint32_t length, Clock::time_point deadline) REQUIRES(lane.mu);
  // Waits for the send completion and the reply of the request posted on
  // `peer`; OK when the backup acknowledged it. The caller holds the lane
  // that owns `peer`.
  Status Wait(Peer& peer, Clock::time_point deadline);

  transport::Transport* const transport_;
  const ReplicatorOptions options_;
  // options_.lanes of them, made by Create and never resized.
  std::vector<std::unique_ptr<Lane>> lanes_;
  // Which lane a Forward that found none free waits for (in turn, so the
  // waiters spread over the lanes).
  std::atomic<size_t> next_wait_{0};
};

}  // namespace rkv::server
