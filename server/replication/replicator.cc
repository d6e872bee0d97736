#include "server/replication/replicator.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <optional>
#include <utility>

#include <glog/logging.h>

#include "common/layout.h"
#include "common/connect_handshake.h"
#include "common/token.h"

namespace rkv::server {
namespace {

using std::to_string;

// The connection's buffer: the request message, then the reply's receive
// buffer.
constexpr size_t kRequestOffset = 0;
constexpr size_t kReplyOffset = protocol::kMaxMessageBytes;
constexpr size_t kPeerBufferBytes = 2 * protocol::kMaxMessageBytes;
constexpr uint64_t kRecvWr = uint64_t{1} << 63;
constexpr auto kPollSlice = std::chrono::milliseconds(50);

std::string Name(const ReplicaPeer& p) {
  return "backup " + p.server_id + " (epoch " + to_string(p.epoch) + ", " + p.data_address + ")";
}

// The accept data of a backup, checked before any byte of it is used.
Status CheckAccept(const protocol::AcceptData& a, const ReplicaPeer& backup) {
  if (a.magic != protocol::kAcceptMagic) return InvalidArgument("accept data has bad magic " + to_string(a.magic));
  if (a.protocol_version != protocol::kProtocolVersion || a.layout_version != layout::kLayoutVersion) {
    return FailedPrecondition("backup speaks protocol/layout version " + to_string(a.protocol_version) + "/" +
                              to_string(a.layout_version) + ", this server " +
                              to_string(protocol::kProtocolVersion) + "/" + to_string(layout::kLayoutVersion));
  }
  if (a.epoch != backup.epoch) {
    return FailedPrecondition("backup answered with epoch " + to_string(a.epoch) + ", the map names epoch " +
                              to_string(backup.epoch));
  }
  if (a.request_credits == 0) return InvalidArgument("accept data grants no request credits");
  if (a.ring.length < layout::kBlockHeaderBytes ||
      a.ring.addr > std::numeric_limits<uint64_t>::max() - a.ring.length) {
    return InvalidArgument("accept data has a staging ring of " + to_string(a.ring.length) + " bytes at " +
                           to_string(a.ring.addr));
  }
  return Status::Ok();
}

}  // namespace

// One connection to a backup. Members go bottom-up: the connection (which
// may still use the buffer) before the registration, and that before the
// buffer it covers.
struct Replicator::Peer {
  ReplicaPeer backup;
  std::vector<uint8_t> buffer;
  std::unique_ptr<transport::MemoryRegion> mr;
  std::unique_ptr<transport::Connection> conn;
  protocol::AcceptData accept{};
  Clock::time_point last_used{};
  bool reused = false;  // a request completed on it before
  uint64_t next_wr = 1;
  uint64_t next_request_id = 1;  // this connection's request sequence
  // The request in flight.
  uint64_t send_wr = 0;
  uint64_t request_id = 0;
  bool sent = false;
  std::optional<protocol::ReplyMsg> reply;

  ~Peer() {
    if (conn) conn->Disconnect();
  }
};

Replicator::Replicator(transport::Transport* transport, ReplicatorOptions options)
    : transport_(transport), options_(std::move(options)) {}

Replicator::~Replicator() {
  for (auto& lane : lanes_) {
    MutexLock lock(lane->mu);
    lane->peers.clear();  // disconnects every connection before the record buffer goes
  }
}

StatusOr<std::unique_ptr<Replicator>> Replicator::Create(transport::Transport* transport,
                                                         ReplicatorOptions options) {
  if (transport == nullptr) return InvalidArgument("replicator: no transport");
  if (options.self_id.empty()) return InvalidArgument("replicator: this server's id is empty");
  if (options.self_epoch == 0) return InvalidArgument("replicator: this server's epoch is 0");
  if (options.max_record_bytes < layout::kBlockHeaderBytes ||
      options.max_record_bytes > std::numeric_limits<uint32_t>::max()) {
    return InvalidArgument("replicator: largest record of " + to_string(options.max_record_bytes) + " bytes");
  }
  if (options.timeout.count() <= 0) return InvalidArgument("replicator: the timeout must be positive");
  if (options.lanes == 0) return InvalidArgument("replicator: no lanes (at least one is needed)");
  std::unique_ptr<Replicator> r(new Replicator(transport, std::move(options)));
  for (uint32_t i = 0; i < r->options_.lanes; ++i) {
    auto lane = std::make_unique<Lane>();
    MutexLock lock(lane->mu);
    lane->record_buffer.assign(r->options_.max_record_bytes, 0);
    RKV_ASSIGN_OR_RETURN(lane->record_mr, transport->Register(lane->record_buffer.data(),
                                                              lane->record_buffer.size(), transport::kLocalWrite));
    r->lanes_.push_back(std::move(lane));
  }
  return r;
}

size_t Replicator::connections() const {
  size_t open = 0;
  for (const auto& lane : lanes_) {
    MutexLock lock(lane->mu);
    open += lane->peers.size();
  }
  return open;
}

StatusOr<std::unique_ptr<Replicator::Peer>> Replicator::Open(const ReplicaPeer& backup, Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  if (left.count() <= 0) return DeadlineExceeded("no time left to connect");
  const protocol::PeerConnectParams self =
      protocol::MakePeerParams(PeerFingerprint(options_.self_id), options_.self_epoch, options_.token);

  auto peer = std::make_unique<Peer>();
  peer->backup = backup;
  peer->last_used = Clock::now();
  // A hello, the backup's challenge, then the proof (docs/design.md §7.2).
  RKV_ASSIGN_OR_RETURN(peer->conn, protocol::ConnectAsPeer(*transport_, backup.data_address, self, left));
  const std::span<const uint8_t> pd = peer->conn->peer_private_data();
  if (pd.size() < sizeof(protocol::AcceptData)) {
    return InvalidArgument("accept data of " + to_string(pd.size()) + " bytes, expected at least " +
                           to_string(sizeof(protocol::AcceptData)));
  }
  std::memcpy(&peer->accept, pd.data(), sizeof(peer->accept));
  RKV_RETURN_IF_ERROR(CheckAccept(peer->accept, backup));
  peer->buffer.assign(kPeerBufferBytes, 0);
  RKV_ASSIGN_OR_RETURN(peer->mr, transport_->Register(peer->buffer.data(), peer->buffer.size(),
                                                      transport::kLocalWrite));
  RKV_RETURN_IF_ERROR(peer->conn->PostRecv(
      transport::LocalBuf{peer->mr.get(), kReplyOffset, static_cast<uint32_t>(protocol::kMaxMessageBytes)},
      kRecvWr));
  LOG(INFO) << "replication connection to " << Name(backup) << " open";
  return peer;
}

StatusOr<Replicator::Peer*> Replicator::Connection(Lane& lane, const ReplicaPeer& backup,
                                                   Clock::time_point deadline) {
  auto it = lane.peers.find(backup.server_id);
  if (it != lane.peers.end()) {
    const ReplicaPeer& had = it->second->backup;
    if (had.epoch == backup.epoch && had.data_address == backup.data_address) return it->second.get();
    // Another incarnation or address of the server: the old connection
    // names a ring that no longer is its.
    lane.peers.erase(it);
  }
  RKV_ASSIGN_OR_RETURN(std::unique_ptr<Peer> opened, Open(backup, deadline));
  Peer* raw = opened.get();
  lane.peers[backup.server_id] = std::move(opened);
  return raw;
}

Status Replicator::Post(Lane& lane, Peer& peer, uint64_t map_version, protocol::Op op, uint32_t length) {
  if (length > peer.accept.ring.length) {
    return FailedPrecondition("a " + to_string(length) + "-byte record does not fit the backup's " +
                              to_string(peer.accept.ring.length) + "-byte staging ring");
  }
  protocol::RequestMsg m{};
  m.op = static_cast<uint8_t>(op);
  m.length = length;
  m.request_id = peer.next_request_id++;
  m.ring_offset = 0;  // one request in flight: the whole ring is free
  m.map_version = map_version;
  peer.request_id = m.request_id;
  std::memcpy(peer.buffer.data() + kRequestOffset, &m, sizeof(m));
  peer.send_wr = peer.next_wr++;
  peer.sent = false;
  peer.reply.reset();
  return peer.conn->PostWriteSend(transport::LocalBuf{lane.record_mr.get(), 0, length},
                                  transport::RemoteBuf{peer.accept.ring.addr, peer.accept.ring.rkey},
                                  transport::LocalBuf{peer.mr.get(), kRequestOffset, sizeof(m)}, peer.send_wr);
}

StatusOr<Replicator::Peer*> Replicator::PostTo(Lane& lane, const ReplicaPeer& backup, uint64_t map_version,
                                               protocol::Op op, uint32_t length, Clock::time_point deadline) {
  RKV_ASSIGN_OR_RETURN(Peer * peer, Connection(lane, backup, deadline));
  if (Status s = Post(lane, *peer, map_version, op, length); !s.ok()) {
    lane.peers.erase(backup.server_id);
    return s;
  }
  return peer;
}

Status Replicator::Wait(Peer& peer, Clock::time_point deadline) {
  transport::Completion completions[4];
  // Past the timeout, a backup the map still shows UP gets up to another
  // timeout (ReplicatorOptions::is_down).
  const Clock::time_point last_chance = options_.is_down ? deadline + options_.timeout : deadline;
  const Clock::time_point ask_from = Clock::now() + kPollSlice;
  while (!peer.sent || !peer.reply) {
    const Clock::time_point now = Clock::now();
    // From one slice on, a backup the map shows DOWN ends the wait at
    // once: it will not answer, and the coordinator fences it.
    const bool down = now >= ask_from && options_.is_down &&
                      options_.is_down(peer.backup.server_id, peer.backup.epoch);
    if (down) return DeadlineExceeded("no reply, and the map shows it DOWN");
    if (now >= last_chance) {
      return DeadlineExceeded(last_chance > deadline ? "no reply within twice the replication timeout"
                                                     : "no reply within the replication timeout");
    }
    const auto wait = std::min<Clock::duration>((now < deadline ? deadline : last_chance) - now, kPollSlice);
    StatusOr<size_t> n =
        peer.conn->Poll(completions, std::chrono::duration_cast<std::chrono::microseconds>(wait));
    if (!n.ok()) return n.status();
    for (size_t i = 0; i < *n; ++i) {
      const transport::Completion& c = completions[i];
      if (!c.status.ok()) return c.status;
      if (c.op == transport::OpType::kSend && c.wr_id == peer.send_wr) {
        peer.sent = true;
      } else if (c.op == transport::OpType::kRecv && c.wr_id == kRecvWr && !peer.reply) {
        if (c.byte_len != sizeof(protocol::ReplyMsg)) {
          return InvalidArgument("reply of " + to_string(c.byte_len) + " bytes, expected " +
                                 to_string(sizeof(protocol::ReplyMsg)));
        }
        protocol::ReplyMsg r;
        std::memcpy(&r, peer.buffer.data() + kReplyOffset, sizeof(r));
        if (r.request_id != peer.request_id) {
          return InvalidArgument("reply to request " + to_string(r.request_id) + ", expected " +
                                 to_string(peer.request_id));
        }
        if (!IsValidStatusCode(r.status_code)) {
          return InvalidArgument("reply has unknown status code " + to_string(r.status_code));
        }
        if (!IsValidReason(r.reason)) {
          return InvalidArgument("reply has unknown reason " + to_string(r.reason));
        }
        if (std::memchr(r.message, '\0', sizeof(r.message)) == nullptr) {
          return InvalidArgument("reply message is not NUL-terminated");
        }
        RKV_RETURN_IF_ERROR(peer.conn->PostRecv(
            transport::LocalBuf{peer.mr.get(), kReplyOffset, static_cast<uint32_t>(protocol::kMaxMessageBytes)},
            kRecvWr));
        peer.reply = r;
      } else {
        return Internal("unexpected completion (wr_id " + to_string(c.wr_id) + ")");
      }
    }
  }
  if (peer.reply->status_code != static_cast<int32_t>(StatusCode::kOk)) {
    return Status(static_cast<StatusCode>(peer.reply->status_code),
                  "refused the write: " + std::string(peer.reply->message), static_cast<Reason>(peer.reply->reason),
                  peer.reply->map_version);
  }
  return Status::Ok();
}

std::vector<Status> Replicator::Forward(const std::vector<ReplicaPeer>& backups, uint64_t map_version,
                                        protocol::Op op, std::span<const uint8_t> record) {
  // The first free lane, in order; when all are busy, wait for one.
  for (auto& lane : lanes_) {
    if (lane->mu.TryLock()) {
      std::vector<Status> results = ForwardOn(*lane, backups, map_version, op, record);
      lane->mu.Unlock();
      return results;
    }
  }
  Lane& lane = *lanes_[next_wait_.fetch_add(1, std::memory_order_relaxed) % lanes_.size()];
  MutexLock lock(lane.mu);
  return ForwardOn(lane, backups, map_version, op, record);
}

std::vector<Status> Replicator::ForwardOn(Lane& lane, const std::vector<ReplicaPeer>& backups, uint64_t map_version,
                                          protocol::Op op, std::span<const uint8_t> record) {
  std::vector<Status> results(backups.size());
  if (op != protocol::Op::kReplicatePut && op != protocol::Op::kReplicateDelete) {
    for (Status& s : results) s = InvalidArgument("only replica ops are forwarded");
    return results;
  }
  const Clock::time_point start = Clock::now();
  const Clock::time_point deadline = start + options_.timeout;
  if (record.size() < layout::kBlockHeaderBytes || record.size() > lane.record_buffer.size()) {
    for (Status& s : results) {
      s = InvalidArgument("a record of " + to_string(record.size()) + " bytes cannot be forwarded (at most " +
                          to_string(lane.record_buffer.size()) + ")");
    }
    return results;
  }
  std::memcpy(lane.record_buffer.data(), record.data(), record.size());
  const auto length = static_cast<uint32_t>(record.size());
  for (auto it = lane.peers.begin(); it != lane.peers.end();) {
    if (start - it->second->last_used > options_.idle_close) {
      it = lane.peers.erase(it);
    } else {
      ++it;
    }
  }

  // Post to every backup first, then wait for each: the waits overlap.
  std::vector<Peer*> posted(backups.size(), nullptr);
  std::vector<bool> reused(backups.size(), false);
  std::vector<std::optional<size_t>> same_as(backups.size());
  for (size_t i = 0; i < backups.size(); ++i) {
    for (size_t j = 0; j < i; ++j) {
      if (backups[j].server_id == backups[i].server_id) {
        same_as[i] = j;
        break;
      }
    }
    if (same_as[i]) continue;
    const auto found = lane.peers.find(backups[i].server_id);
    reused[i] = found != lane.peers.end() && found->second->reused;
    StatusOr<Peer*> p = PostTo(lane, backups[i], map_version, op, length, deadline);
    if (!p.ok() && reused[i]) {
      reused[i] = false;
      p = PostTo(lane, backups[i], map_version, op, length, deadline);  // the idle one had gone stale: anew
    }
    if (p.ok()) {
      posted[i] = *p;
    } else {
      results[i] = p.status();
    }
  }
  for (size_t i = 0; i < backups.size(); ++i) {
    Peer* peer = posted[i];
    if (peer == nullptr) continue;
    Status s = Wait(*peer, deadline);
    if (!s.ok() && !peer->reply && reused[i] && s.code() == StatusCode::kUnavailable) {
      // A connection that broke while idle: forwards are idempotent, so
      // resend once on a new one.
      lane.peers.erase(backups[i].server_id);
      peer = nullptr;
      StatusOr<Peer*> p = PostTo(lane, backups[i], map_version, op, length, deadline);
      if (p.ok()) {
        peer = *p;
        s = Wait(*peer, deadline);
      } else {
        s = p.status();
      }
    }
    if (peer != nullptr) {
      if (peer->sent && peer->reply) {
        // A well-formed reply, OK or a refusal: the connection stays.
        peer->reused = true;
        peer->last_used = Clock::now();
      } else {
        // Timed out, broken or malformed: a late reply must never be
        // taken for a later request's.
        lane.peers.erase(backups[i].server_id);
      }
    }
    results[i] = s;
  }
  for (size_t i = 0; i < backups.size(); ++i) {
    if (same_as[i]) {
      results[i] = results[*same_as[i]];
    } else if (!results[i].ok()) {
      results[i] = results[i].WithContext(Name(backups[i]));
    }
  }
  return results;
}

}  // namespace rkv::server
