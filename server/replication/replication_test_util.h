// Test support for the replication path: a ReplicationPolicy whose answers
// a test sets, and a hand-made data-plane client (RawConnection) that can
// also act as a peer server, independently of the client library.
#pragma once

#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/connect_handshake.h"
#include "common/hash.h"
#include "common/layout.h"
#include "common/mutex.h"
#include "common/protocol.h"
#include "common/record.h"
#include "common/token.h"
#include "common/transport/transport.h"
#include "server/replication/replication.h"

namespace rkv::server::testing {

// A policy with settable answers; records what it was told. Thread-safe.
class FakePolicy final : public ReplicationPolicy {
 public:
  struct Report {
    uint32_t shard = 0;
    ReplicaPeer backup;
    std::string reason;
  };

  void SetRoute(WriteRoute route) {
    MutexLock lock(mu_);
    route_ = std::move(route);
  }
  void SetRouteStatus(Status s) {
    MutexLock lock(mu_);
    route_status_ = std::move(s);
  }
  void SetReportStatus(Status s) {
    MutexLock lock(mu_);
    report_status_ = std::move(s);
  }
  // The route (or the route error) RouteWrite gives from the next
  // ReportFailedBackup on, as if the coordinator had committed another map
  // meanwhile.
  void SetRouteAfterReport(StatusOr<WriteRoute> route) {
    MutexLock lock(mu_);
    route_after_report_ = std::move(route);
  }
  // What CheckLease answers (OK until set); with `ok_checks` > 0, the
  // next that many checks answer OK first (a lease that runs out in the
  // middle of a write: valid when it is routed, expired at its publish).
  void SetLeaseStatus(Status s, int ok_checks = 0) {
    MutexLock lock(mu_);
    lease_status_ = std::move(s);
    lease_ok_checks_ = ok_checks;
  }
  void SetAcceptStatus(Status s) {
    MutexLock lock(mu_);
    accept_status_ = std::move(s);
  }
  // Run by AcceptReplica (on the backup's peer poller) with the key, before
  // anything else and without the policy's mutex; set before any forward.
  void SetAcceptHook(std::function<void(std::string_view key)> hook) {
    MutexLock lock(mu_);
    accept_hook_ = std::move(hook);
  }
  // How many replication handshakes FindPeer has judged.
  int peers_looked_up() const {
    MutexLock lock(mu_);
    return peers_looked_up_;
  }
  // A server of the "current map", for FindPeer.
  void AddPeer(const std::string& id, uint64_t epoch) {
    MutexLock lock(mu_);
    peers_[{PeerFingerprint(id), epoch}] = id;
  }
  std::vector<Report> reports() const {
    MutexLock lock(mu_);
    return reports_;
  }
  // (sender, key, sender map version) of every AcceptReplica call.
  std::vector<std::pair<std::string, uint64_t>> accepted() const {
    MutexLock lock(mu_);
    return accepted_;
  }

  StatusOr<WriteRoute> RouteWrite(std::string_view) override {
    MutexLock lock(mu_);
    if (!route_status_.ok()) return route_status_;
    return route_;
  }
  Status ReportFailedBackup(uint32_t shard, const ReplicaPeer& backup, std::string_view reason) override {
    MutexLock lock(mu_);
    reports_.push_back(Report{shard, backup, std::string(reason)});
    if (route_after_report_) {
      if (route_after_report_->ok()) {
        route_ = **route_after_report_;
      } else {
        route_status_ = route_after_report_->status();
      }
      route_after_report_.reset();
    } else if (report_status_.ok()) {
      // The coordinator took it out: later routes lack it.
      std::erase_if(route_.backups, [&](const ReplicaPeer& p) { return p.server_id == backup.server_id; });
    }
    return report_status_;
  }
  std::optional<std::string> FindPeer(uint64_t fingerprint, uint64_t epoch) override {
    MutexLock lock(mu_);
    ++peers_looked_up_;
    const auto it = peers_.find({fingerprint, epoch});
    if (it == peers_.end()) return std::nullopt;
    return it->second;
  }
  Status AcceptReplica(std::string_view sender_id, std::string_view key, uint64_t sender_map_version) override {
    std::function<void(std::string_view)> hook;
    {
      MutexLock lock(mu_);
      hook = accept_hook_;
    }
    if (hook) hook(key);
    MutexLock lock(mu_);
    accepted_.emplace_back(std::string(sender_id), sender_map_version);
    return accept_status_;
  }
  Status CheckLease() override {
    MutexLock lock(mu_);
    if (lease_ok_checks_ > 0) {
      --lease_ok_checks_;
      return Status::Ok();
    }
    return lease_status_;
  }

 private:
  mutable Mutex mu_;
  WriteRoute route_ GUARDED_BY(mu_);
  Status route_status_ GUARDED_BY(mu_);
  Status report_status_ GUARDED_BY(mu_);
  Status accept_status_ GUARDED_BY(mu_);
  Status lease_status_ GUARDED_BY(mu_);
  int lease_ok_checks_ GUARDED_BY(mu_) = 0;
  std::optional<StatusOr<WriteRoute>> route_after_report_ GUARDED_BY(mu_);
  std::map<std::pair<uint64_t, uint64_t>, std::string> peers_ GUARDED_BY(mu_);
  std::vector<Report> reports_ GUARDED_BY(mu_);
  std::vector<std::pair<std::string, uint64_t>> accepted_ GUARDED_BY(mu_);
  std::function<void(std::string_view)> accept_hook_ GUARDED_BY(mu_);
  int peers_looked_up_ GUARDED_BY(mu_) = 0;
};

// One data-plane connection made by hand: as a client (Connect) or as the
// peer server `id` of epoch `epoch` (ConnectAsPeer). Sends any op with any
// record, and GETs with one-sided READs as the layout says.
class RawConnection {
 public:
  static StatusOr<std::unique_ptr<RawConnection>> Connect(transport::Transport* t, const std::string& address,
                                                          std::string_view token) {
    static std::atomic<uint64_t> next_client{0x7E57};
    const protocol::ClientConnectParams params = protocol::MakeClientParams(next_client++, token);
    return Open(t, [&](std::chrono::milliseconds timeout) {
      return protocol::ConnectAsClient(*t, address, params, timeout);
    });
  }
  static StatusOr<std::unique_ptr<RawConnection>> ConnectAsPeer(transport::Transport* t, const std::string& address,
                                                                std::string_view token, const std::string& id,
                                                                uint64_t epoch) {
    const protocol::PeerConnectParams params = protocol::MakePeerParams(PeerFingerprint(id), epoch, token);
    return Open(t, [&](std::chrono::milliseconds timeout) {
      return protocol::ConnectAsPeer(*t, address, params, timeout);
    });
  }

  const protocol::AcceptData& accept() const { return accept_; }

  // Sends `op` for the record {key, value, version} (a tombstone for the
  // delete ops) with `id`: the request id of a client op, the sender's map
  // version of a replica op (which also numbers it); `corrupt` flips a
  // byte after the checksum was computed. Returns the reply.
  StatusOr<protocol::ReplyMsg> Send(protocol::Op op, std::string_view key, std::string_view value, uint64_t version,
                                    uint64_t id, bool corrupt = false) {
    const bool tombstone = op == protocol::Op::kDelete || op == protocol::Op::kReplicateDelete;
    const uint64_t len =
        EncodeRecord(std::span(local_).subspan(kStage, kStageBytes), key, value, version,
                     tombstone ? layout::kBlockFlagTombstone : 0);
    if (corrupt) local_[kStage + layout::RecordBytes(key.size(), value.size()) - 1] ^= 0xFF;
    protocol::RequestMsg m{};
    m.op = static_cast<uint8_t>(op);
    m.length = static_cast<uint32_t>(len);
    m.request_id = id;
    m.ring_offset = 0;
    if (op == protocol::Op::kReplicatePut || op == protocol::Op::kReplicateDelete) m.map_version = id;
    std::memcpy(local_.data() + kSendBuf, &m, sizeof(m));
    RKV_RETURN_IF_ERROR(conn_->PostWriteSend(transport::LocalBuf{mr_.get(), kStage, static_cast<uint32_t>(len)},
                                             transport::RemoteBuf{accept_.ring.addr, accept_.ring.rkey},
                                             transport::LocalBuf{mr_.get(), kSendBuf, sizeof(m)}, 1));
    bool sent = false;
    std::optional<protocol::ReplyMsg> reply;
    while (!sent || !reply) {
      RKV_ASSIGN_OR_RETURN(const transport::Completion c, Next());
      if (c.op == transport::OpType::kSend) {
        sent = true;
      } else if (c.op == transport::OpType::kRecv) {
        if (c.byte_len != sizeof(protocol::ReplyMsg)) return Internal("reply of " + std::to_string(c.byte_len));
        protocol::ReplyMsg r;
        std::memcpy(&r, local_.data() + kRecvBuf, sizeof(r));
        RKV_RETURN_IF_ERROR(conn_->PostRecv(transport::LocalBuf{mr_.get(), kRecvBuf, 128}, kRecvWr));
        if (r.request_id != id) return Internal("reply for another request");
        reply = r;
      }
    }
    return *reply;
  }

  // A GET by one-sided READs: {value, version}, or nullopt when absent (no
  // key moves in these tests, so a miss needs no confirmation).
  StatusOr<std::optional<std::pair<std::string, uint64_t>>> Get(std::string_view key) {
    RKV_ASSIGN_OR_RETURN(std::vector<uint8_t> hb,
                         Read(accept_.index.addr, accept_.index.rkey, sizeof(layout::TableHeader)));
    layout::TableHeader h{};
    std::memcpy(&h, hb.data(), sizeof(h));
    const Neighborhood nb = NeighborhoodOf(TableHash(key, h.hash_seed), h.bucket_count_log2);
    RKV_ASSIGN_OR_RETURN(std::vector<uint8_t> buckets,
                         Read(accept_.index.addr + layout::BucketOffset(nb.first), accept_.index.rkey,
                              static_cast<uint32_t>(nb.count * sizeof(layout::Bucket))));
    for (size_t s = 0; s < nb.count * layout::kSlotsPerBucket; ++s) {
      uint64_t slot;
      std::memcpy(&slot, buckets.data() + s * sizeof(slot), sizeof(slot));
      if (slot == layout::kEmptySlot || layout::SlotFingerprint(slot) != nb.fingerprint) continue;
      RKV_ASSIGN_OR_RETURN(std::vector<uint8_t> block,
                           Read(accept_.heap.addr + layout::SlotBlockOffset(slot), accept_.heap.rkey,
                                static_cast<uint32_t>(layout::SlotBlockBytes(slot))));
      RKV_ASSIGN_OR_RETURN(const RecordView rec, DecodeRecord(block));
      if (rec.key == key) return std::optional(std::pair(std::string(rec.value), rec.version));
    }
    return std::optional<std::pair<std::string, uint64_t>>();
  }

 private:
  static constexpr size_t kStage = 0;
  static constexpr size_t kStageBytes = 64 * 1024;
  static constexpr size_t kSendBuf = kStage + kStageBytes;
  static constexpr size_t kRecvBuf = kSendBuf + 128;
  static constexpr size_t kReadBuf = kRecvBuf + 128;
  static constexpr size_t kLocalBytes = kReadBuf + 64 * 1024;
  static constexpr uint64_t kRecvWr = 100;

  // Opens the connection `connect` makes (a handshake within its timeout).
  static StatusOr<std::unique_ptr<RawConnection>> Open(
      transport::Transport* t,
      const std::function<StatusOr<std::unique_ptr<transport::Connection>>(std::chrono::milliseconds)>& connect) {
    std::unique_ptr<RawConnection> c(new RawConnection());
    c->local_.assign(kLocalBytes, 0);
    RKV_ASSIGN_OR_RETURN(c->mr_, t->Register(c->local_.data(), c->local_.size(), transport::kLocalWrite));
    RKV_ASSIGN_OR_RETURN(c->conn_, connect(std::chrono::milliseconds(10'000)));
    const auto pd = c->conn_->peer_private_data();
    if (pd.size() < sizeof(protocol::AcceptData)) return Internal("short accept data");
    std::memcpy(&c->accept_, pd.data(), sizeof(c->accept_));
    RKV_RETURN_IF_ERROR(c->conn_->PostRecv(transport::LocalBuf{c->mr_.get(), kRecvBuf, 128}, kRecvWr));
    return c;
  }

  StatusOr<std::vector<uint8_t>> Read(uint64_t addr, uint32_t rkey, uint32_t len) {
    if (len > kLocalBytes - kReadBuf) return Internal("read too large for the test buffer");
    transport::ReadOp op;
    op.local = transport::LocalBuf{mr_.get(), kReadBuf, len};
    op.remote = transport::RemoteBuf{addr, rkey};
    op.wr_id = 7;
    op.signaled = true;
    RKV_RETURN_IF_ERROR(conn_->PostReads(std::span(&op, 1)));
    RKV_ASSIGN_OR_RETURN(const transport::Completion c, Next());
    if (c.op != transport::OpType::kRead || c.wr_id != 7) return Internal("unexpected completion");
    return std::vector<uint8_t>(local_.begin() + kReadBuf, local_.begin() + kReadBuf + len);
  }

  // The next completion; fails on an error completion or after 30 s.
  StatusOr<transport::Completion> Next() {
    for (int i = 0; i < 300; ++i) {
      transport::Completion c;
      RKV_ASSIGN_OR_RETURN(const size_t n, conn_->Poll(std::span(&c, 1), std::chrono::milliseconds(100)));
      if (n == 1) {
        if (!c.status.ok()) return c.status;
        return c;
      }
    }
    return DeadlineExceeded("no completion within 30 s");
  }

  RawConnection() = default;
  std::vector<uint8_t> local_;
  std::unique_ptr<transport::MemoryRegion> mr_;
  std::unique_ptr<transport::Connection> conn_;
  protocol::AcceptData accept_{};
};

}  // namespace rkv::server::testing
