// The primary's side of replication: sends a write it applies to the
// backups of the key's shard over the data plane, the way a client writes
// (a WRITE of the record into the backup's staging ring, then a SEND of the
// request naming it; on tcp the transport's emulation of both), and waits
// for their replies. docs/design.md, "Replication".
//
// Connections: one per backup server, opened on first use with a
// protocol::PeerConnectData that names this server (PeerFingerprint of its
// id, and its epoch) and kept for later writes. A connection to another
// epoch or address of the same server id is replaced; one that broke,
// timed out or sent something malformed is dropped; one unused for
// ReplicatorOptions::idle_close is closed before its next use. One request
// is in flight per connection (Forward is serialized), so the record always
// goes to ring offset 0 and one receive buffer is enough.
//
// Each accept is validated (magic, versions, the epoch the map names, a
// ring that holds the record, at least one credit) and so is every reply
// (exact size, the request id echoed, a known status code, a NUL-terminated
// message). Forwarding is idempotent (a backup installs a version only when
// it is newer), so a request that failed on a connection that had been
// idle, which the peer may have closed meanwhile, is resent once on a new
// connection within the same deadline.
//
// Thread safety: Forward and the destructor are thread-safe; calls of
// Forward are serialized by an internal mutex. The destructor disconnects
// every connection; it must run before the transport is destroyed.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/mutex.h"
#include "common/protocol.h"
#include "common/status.h"
#include "common/transport/transport.h"
#include "server/replication.h"

namespace rkv::server {

// What the apply path forwards through (Replicator; a fake in tests).
class Forwarder {
 public:
  virtual ~Forwarder() = default;

  // Sends `record` (an encoded record, common/record.h, carrying the
  // primary's version) as `op` (kReplicatePut or kReplicateDelete), with
  // `map_version` as the request id, to every peer of `backups`, all at
  // once, and waits for their replies within the forwarder's timeout.
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
                              std::span<const uint8_t> record) override EXCLUDES(mu_);

  // Connections open now.
  size_t connections() const EXCLUDES(mu_);

 private:
  struct Peer;
  using Clock = std::chrono::steady_clock;

  Replicator(transport::Transport* transport, ReplicatorOptions options);
  // The open connection to `backup`, opened (or replaced) if need be.
  StatusOr<Peer*> Connection(const ReplicaPeer& backup, Clock::time_point deadline) REQUIRES(mu_);
  StatusOr<std::unique_ptr<Peer>> Open(const ReplicaPeer& backup, Clock::time_point deadline) REQUIRES(mu_);
  // Posts the record and request on `peer`.
  Status Post(Peer& peer, uint64_t map_version, protocol::Op op, uint32_t length) REQUIRES(mu_);
  // Post on the connection to `backup`, opened if need be; on failure the
  // connection is dropped.
  StatusOr<Peer*> PostTo(const ReplicaPeer& backup, uint64_t map_version, protocol::Op op, uint32_t length,
                         Clock::time_point deadline) REQUIRES(mu_);
  // Waits for the send completion and the reply of the request posted on
  // `peer`; OK when the backup acknowledged it.
  Status Wait(Peer& peer, uint64_t map_version, Clock::time_point deadline) REQUIRES(mu_);

  transport::Transport* const transport_;
  const ReplicatorOptions options_;
  mutable Mutex mu_;
  // The record being forwarded, read by every connection's WRITE.
  std::vector<uint8_t> record_buffer_ GUARDED_BY(mu_);
  std::unique_ptr<transport::MemoryRegion> record_mr_ GUARDED_BY(mu_);
  std::map<std::string, std::unique_ptr<Peer>> peers_ GUARDED_BY(mu_);  // by server id
};

}  // namespace rkv::server
