#include "server/replication/replicator.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <limits>
#include <optional>
#include <string_view>
#include <utility>

#include <glog/logging.h>

#include "common/layout.h"
#include "common/connect_handshake.h"
#include "common/token.h"

namespace rkv::server {
namespace {

using std::to_string;

// A connection's buffer: kMaxInFlight request message slots, then as many
// receive slots, each of kMaxMessageBytes. A request's slot is its index
// among the chunk's requests on the connection (a chunk ends with none in
// flight); a receive's wr_id is kRecvWr | its slot.
constexpr size_t kMessageSlots = Replicator::kMaxInFlight;
constexpr size_t kPeerBufferBytes = 2 * kMessageSlots * protocol::kMaxMessageBytes;
constexpr size_t RequestSlotOffset(size_t slot) { return slot * protocol::kMaxMessageBytes; }
constexpr size_t ReplySlotOffset(size_t slot) { return (kMessageSlots + slot) * protocol::kMaxMessageBytes; }
constexpr uint64_t kRecvWr = uint64_t{1} << 63;
constexpr auto kPollSlice = std::chrono::milliseconds(50);

// `bytes` rounded up to a block boundary: records sit at 64-byte aligned
// offsets in the lane's buffer and in the backup's ring.
constexpr uint64_t AlignUp(uint64_t bytes) {
  return (bytes + layout::kBlockAlign - 1) / layout::kBlockAlign * layout::kBlockAlign;
}

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

// For each backup of a list, the first earlier one of the same server, if
// any: a server is sent a write once, and answers for both.
std::vector<std::optional<size_t>> SameAs(const std::vector<ReplicaPeer>& backups) {
  std::vector<std::optional<size_t>> same_as(backups.size());
  for (size_t i = 0; i < backups.size(); ++i) {
    for (size_t j = 0; j < i; ++j) {
      if (backups[j].server_id == backups[i].server_id) {
        same_as[i] = j;
        break;
      }
    }
  }
  return same_as;
}

bool SameIncarnation(const ReplicaPeer& a, const ReplicaPeer& b) {
  return a.epoch == b.epoch && a.data_address == b.data_address;
}

// What a validated reply says of its request.
Status ReplyStatus(const protocol::ReplyMsg& r) {
  if (r.status_code == static_cast<int32_t>(StatusCode::kOk)) return Status::Ok();
  return Status(static_cast<StatusCode>(r.status_code), "refused the write: " + std::string(r.message),
                static_cast<Reason>(r.reason), r.map_version);
}

}  // namespace

// One connection to a backup. Members go bottom-up: the connection (which
// may still use the buffer) before the registration, and that before the
// buffer it covers.
struct Replicator::Peer {
  ReplicaPeer backup;
  std::vector<uint8_t> buffer;  // kPeerBufferBytes: the message slots
  std::unique_ptr<transport::MemoryRegion> mr;
  std::unique_ptr<transport::Connection> conn;
  protocol::AcceptData accept{};
  // Requests in flight at once at most: kMaxInFlight, or fewer when the
  // backup grants fewer credits or this server has fewer of its own; as
  // many receives are posted (no more: the receive queue is sized for this
  // server's own credits, the send queue for twice them, a WRITE and a
  // SEND a request).
  uint32_t window = 0;
  Clock::time_point last_used{};
  bool reused = false;  // a request completed on it before
  uint64_t next_wr = 1;
  uint64_t next_request_id = 1;  // this connection's request sequence

  ~Peer() {
    if (conn) conn->Disconnect();
  }
};

// One item's request to one backup: where its record is, and the state of
// its post in flight (a resend posts it anew).
struct Replicator::Request {
  size_t item = 0;    // in the batch
  size_t backup = 0;  // in the item's backups
  protocol::Op op = protocol::Op::kReplicatePut;
  uint64_t map_version = 0;
  uint64_t record_offset = 0;  // in the lane's record buffer
  uint32_t length = 0;
  uint64_t ring_offset = 0;  // in the backup's staging ring
  uint64_t request_id = 0;
  uint64_t send_wr = 0;
  bool sent = false;
  std::optional<protocol::ReplyMsg> reply;
};

// One backup server of a chunk: its connection and the chunk's requests to
// it, their records packed from ring offset 0.
struct Replicator::Target {
  const ReplicaPeer* backup = nullptr;  // as the chunk's first item with the server names it
  Peer* peer = nullptr;                 // null once it failed: then `status` says why
  Status status;
  bool reused = false;      // the connection had completed a request before the chunk
  uint64_t ring_bytes = 0;  // the end of the last record in its ring
  std::vector<Request> requests;  // at most peer->window
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
  if (options.request_credits == 0) return InvalidArgument("replicator: no request credits (at least one is needed)");
  std::unique_ptr<Replicator> r(new Replicator(transport, std::move(options)));
  for (uint32_t i = 0; i < r->options_.lanes; ++i) {
    auto lane = std::make_unique<Lane>();
    MutexLock lock(lane->mu);
    // Room for a chunk of several records, and for the largest alone.
    lane->record_buffer.assign(AlignUp(std::max(r->options_.max_record_bytes, kBatchBytes)), 0);
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
  peer->window = std::min({kMaxInFlight, peer->accept.request_credits, options_.request_credits});
  peer->buffer.assign(kPeerBufferBytes, 0);
  RKV_ASSIGN_OR_RETURN(peer->mr, transport_->Register(peer->buffer.data(), peer->buffer.size(),
                                                      transport::kLocalWrite));
  for (uint32_t slot = 0; slot < peer->window; ++slot) {
    RKV_RETURN_IF_ERROR(peer->conn->PostRecv(
        transport::LocalBuf{peer->mr.get(), ReplySlotOffset(slot), static_cast<uint32_t>(protocol::kMaxMessageBytes)},
        kRecvWr | slot));
  }
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

Status Replicator::Post(Lane& lane, Target& target) {
  Peer& peer = *target.peer;
  // Checked again for a resend: its connection is not the one the chunk
  // was built for.
  if (target.requests.size() > peer.window) {
    return FailedPrecondition(to_string(target.requests.size()) + " requests exceed the connection's window of " +
                              to_string(peer.window));
  }
  for (const Request& r : target.requests) {
    if (r.ring_offset > peer.accept.ring.length || r.length > peer.accept.ring.length - r.ring_offset) {
      return FailedPrecondition("a " + to_string(r.length) + "-byte record at offset " + to_string(r.ring_offset) +
                                " does not fit the backup's " + to_string(peer.accept.ring.length) +
                                "-byte staging ring");
    }
  }
  std::array<transport::WriteSendOp, kMaxInFlight> ops;
  for (size_t slot = 0; slot < target.requests.size(); ++slot) {
    Request& r = target.requests[slot];
    protocol::RequestMsg m{};
    m.op = static_cast<uint8_t>(r.op);
    m.length = r.length;
    m.request_id = peer.next_request_id++;
    m.ring_offset = r.ring_offset;
    m.map_version = r.map_version;
    std::memcpy(peer.buffer.data() + RequestSlotOffset(slot), &m, sizeof(m));
    r.request_id = m.request_id;
    r.send_wr = peer.next_wr++;
    r.sent = false;
    r.reply.reset();
    ops[slot] = transport::WriteSendOp{
        transport::LocalBuf{lane.record_mr.get(), r.record_offset, r.length},
        transport::RemoteBuf{peer.accept.ring.addr + r.ring_offset, peer.accept.ring.rkey},
        transport::LocalBuf{peer.mr.get(), RequestSlotOffset(slot), sizeof(m)}, r.send_wr, /*signaled=*/true};
  }
  // One list: the backup takes the chunk's requests in one batch.
  return peer.conn->PostWriteSends(std::span<const transport::WriteSendOp>(ops.data(), target.requests.size()));
}

Status Replicator::PostTo(Lane& lane, Target& target, Clock::time_point deadline) {
  StatusOr<Peer*> p = Connection(lane, *target.backup, deadline);
  if (!p.ok()) return p.status();
  target.peer = *p;
  if (Status s = Post(lane, target); !s.ok()) {
    lane.peers.erase(target.backup->server_id);
    target.peer = nullptr;
    return s;
  }
  return Status::Ok();
}

Status Replicator::Wait(Target& target, Clock::time_point deadline) {
  Peer& peer = *target.peer;
  std::vector<Request>& requests = target.requests;
  transport::Completion completions[2 * kMaxInFlight];
  // Past the timeout, a backup the map still shows UP gets up to another
  // timeout (ReplicatorOptions::is_down).
  const Clock::time_point last_chance = options_.is_down ? deadline + options_.timeout : deadline;
  const Clock::time_point ask_from = Clock::now() + kPollSlice;
  const auto done = [&] {
    return std::all_of(requests.begin(), requests.end(), [](const Request& r) { return r.sent && r.reply; });
  };
  while (!done()) {
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
      const uint64_t slot = c.wr_id & ~kRecvWr;
      if (c.op == transport::OpType::kSend) {
        const auto it = std::find_if(requests.begin(), requests.end(),
                                     [&](const Request& r) { return r.send_wr == c.wr_id && !r.sent; });
        if (it == requests.end()) return Internal("unexpected send completion (wr_id " + to_string(c.wr_id) + ")");
        it->sent = true;
      } else if (c.op == transport::OpType::kRecv && (c.wr_id & kRecvWr) != 0 && slot < peer.window) {
        if (c.byte_len != sizeof(protocol::ReplyMsg)) {
          return InvalidArgument("reply of " + to_string(c.byte_len) + " bytes, expected " +
                                 to_string(sizeof(protocol::ReplyMsg)));
        }
        protocol::ReplyMsg r;
        std::memcpy(&r, peer.buffer.data() + ReplySlotOffset(slot), sizeof(r));
        // By id alone: the slot a reply lands in says nothing of its
        // request.
        const auto it = std::find_if(requests.begin(), requests.end(), [&](const Request& q) {
          return q.request_id == r.request_id && !q.reply.has_value();
        });
        if (it == requests.end()) {
          return InvalidArgument("reply to request " + to_string(r.request_id) + ", which is not in flight");
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
        const transport::LocalBuf again{peer.mr.get(), ReplySlotOffset(slot),
                                        static_cast<uint32_t>(protocol::kMaxMessageBytes)};
        RKV_RETURN_IF_ERROR(peer.conn->PostRecv(again, c.wr_id));
        it->reply = r;
      } else {
        return Internal("unexpected completion (wr_id " + to_string(c.wr_id) + ")");
      }
    }
  }
  return Status::Ok();
}

std::vector<Status> Replicator::Forward(const std::vector<ReplicaPeer>& backups, uint64_t map_version,
                                        protocol::Op op, std::span<const uint8_t> record) {
  const Item item{&backups, map_version, op, record};
  return std::move(ForwardMany(std::span<const Item>(&item, 1)).front());
}

std::vector<std::vector<Status>> Replicator::ForwardMany(std::span<const Item> items) {
  if (items.empty()) return {};
  // The first free lane, in order; when all are busy, wait for one.
  for (auto& lane : lanes_) {
    if (lane->mu.TryLock()) {
      std::vector<std::vector<Status>> results = ForwardOn(*lane, items);
      lane->mu.Unlock();
      return results;
    }
  }
  Lane& lane = *lanes_[next_wait_.fetch_add(1, std::memory_order_relaxed) % lanes_.size()];
  MutexLock lock(lane.mu);
  return ForwardOn(lane, items);
}

std::vector<std::vector<Status>> Replicator::ForwardOn(Lane& lane, std::span<const Item> items) {
  std::vector<std::vector<Status>> results(items.size());
  for (size_t i = 0; i < items.size(); ++i) {
    if (items[i].backups != nullptr) results[i].resize(items[i].backups->size());
  }
  for (size_t first = 0; first < items.size();) {
    const size_t next = ForwardChunk(lane, items, first, results);
    CHECK_GT(next, first) << "a chunk took no item";
    first = next;
  }
  return results;
}

size_t Replicator::ForwardChunk(Lane& lane, std::span<const Item> items, size_t first,
                                std::vector<std::vector<Status>>& results) {
  const Clock::time_point start = Clock::now();
  const Clock::time_point deadline = start + options_.timeout;
  for (auto it = lane.peers.begin(); it != lane.peers.end();) {
    if (start - it->second->last_used > options_.idle_close) {
      it = lane.peers.erase(it);
    } else {
      ++it;
    }
  }

  // Build the chunk: items in order while they fit the lane's buffer and,
  // for each of their backups, the connection's window and staging ring.
  // An item that does not fit starts the next chunk. The chunk's first
  // item to be sent always fits (its record goes to offset 0 everywhere,
  // and one larger than a backup's ring fails for that backup alone), so
  // every chunk takes at least one item.
  std::vector<Target> targets;
  std::map<std::string_view, size_t> target_of;  // by server id
  std::vector<size_t> sent_items;                // the chunk's items that go out
  uint64_t lane_bytes = 0;
  constexpr size_t kNone = std::numeric_limits<size_t>::max();
  size_t next = first;
  for (; next < items.size(); ++next) {
    const Item& item = items[next];
    if (item.backups == nullptr || item.backups->empty()) continue;
    const std::vector<ReplicaPeer>& backups = *item.backups;
    std::vector<Status>& out = results[next];
    if (item.op != protocol::Op::kReplicatePut && item.op != protocol::Op::kReplicateDelete) {
      for (Status& s : out) s = InvalidArgument("only replica ops are forwarded");
      continue;
    }
    if (item.record.size() < layout::kBlockHeaderBytes || item.record.size() > options_.max_record_bytes) {
      for (Status& s : out) {
        s = InvalidArgument("a record of " + to_string(item.record.size()) + " bytes cannot be forwarded (at most " +
                            to_string(options_.max_record_bytes) + ")");
      }
      continue;
    }
    const auto length = static_cast<uint32_t>(item.record.size());
    const uint64_t record_offset = AlignUp(lane_bytes);
    if (record_offset + length > lane.record_buffer.size()) break;
    const std::vector<std::optional<size_t>> same_as = SameAs(backups);
    std::vector<size_t> target_index(backups.size(), kNone);
    bool fits = true;
    for (size_t k = 0; k < backups.size() && fits; ++k) {
      if (same_as[k]) continue;
      const auto [it, added] = target_of.try_emplace(backups[k].server_id, targets.size());
      if (added) {
        // Opened now: its accept bounds what the chunk may send it.
        Target& t = targets.emplace_back();
        t.backup = &backups[k];
        StatusOr<Peer*> p = Connection(lane, backups[k], deadline);
        if (p.ok()) {
          t.peer = *p;
          t.reused = t.peer->reused;
        } else {
          t.status = p.status();
        }
      } else if (!SameIncarnation(*targets[it->second].backup, backups[k])) {
        // Another incarnation of a server the chunk sends to: the next
        // chunk replaces the connection.
        fits = false;
        break;
      }
      target_index[k] = it->second;
      const Target& t = targets[it->second];
      if (t.peer == nullptr || t.requests.empty()) continue;
      fits = t.requests.size() < t.peer->window && AlignUp(t.ring_bytes) + length <= t.peer->accept.ring.length;
    }
    if (!fits) break;

    std::memcpy(lane.record_buffer.data() + record_offset, item.record.data(), length);
    lane_bytes = record_offset + length;
    for (size_t k = 0; k < backups.size(); ++k) {
      if (target_index[k] == kNone) continue;
      Target& t = targets[target_index[k]];
      if (t.peer == nullptr) {
        out[k] = t.status;
      } else if (length > t.peer->accept.ring.length) {
        out[k] = FailedPrecondition("a " + to_string(length) + "-byte record does not fit the backup's " +
                                    to_string(t.peer->accept.ring.length) + "-byte staging ring");
      } else {
        Request& r = t.requests.emplace_back();
        r.item = next;
        r.backup = k;
        r.op = item.op;
        r.map_version = item.map_version;
        r.record_offset = record_offset;
        r.length = length;
        r.ring_offset = AlignUp(t.ring_bytes);
        t.ring_bytes = r.ring_offset + length;
      }
    }
    sent_items.push_back(next);
  }

  // Post to every backup first, then wait for each: the waits overlap.
  for (Target& t : targets) {
    if (t.peer == nullptr || t.requests.empty()) continue;
    Status s = Post(lane, t);
    if (!s.ok()) {
      lane.peers.erase(t.backup->server_id);
      t.peer = nullptr;
      if (t.reused) {
        t.reused = false;
        s = PostTo(lane, t, deadline);  // the idle one had gone stale: anew
      }
    }
    if (!s.ok()) t.status = s;
  }
  for (Target& t : targets) {
    if (t.peer == nullptr || t.requests.empty()) continue;
    Status s = Wait(t, deadline);
    const bool answered =
        std::any_of(t.requests.begin(), t.requests.end(), [](const Request& r) { return r.reply.has_value(); });
    if (!s.ok() && !answered && t.reused && s.code() == StatusCode::kUnavailable) {
      // A connection that broke while idle: forwards are idempotent, so
      // resend the chunk's requests once on a new one.
      lane.peers.erase(t.backup->server_id);
      t.peer = nullptr;
      t.reused = false;
      s = PostTo(lane, t, deadline);
      if (s.ok()) s = Wait(t, deadline);
    }
    if (t.peer != nullptr) {
      if (s.ok()) {
        // Every request sent and answered, OK or a refusal: the
        // connection stays.
        t.peer->reused = true;
        t.peer->last_used = Clock::now();
      } else {
        // Timed out, broken or malformed: a late reply must never be
        // taken for a later request's.
        lane.peers.erase(t.backup->server_id);
        t.peer = nullptr;
      }
    }
    t.status = s;
  }

  for (const Target& t : targets) {
    for (const Request& r : t.requests) {
      // A reply that came keeps its status, whatever became of the
      // connection after it.
      results[r.item][r.backup] =
          r.reply ? ReplyStatus(*r.reply) : (t.status.ok() ? Internal("no reply") : t.status);
    }
  }
  for (const size_t i : sent_items) {
    const std::vector<ReplicaPeer>& backups = *items[i].backups;
    const std::vector<std::optional<size_t>> same_as = SameAs(backups);
    for (size_t k = 0; k < backups.size(); ++k) {
      if (same_as[k]) {
        results[i][k] = results[i][*same_as[k]];
      } else if (!results[i][k].ok()) {
        results[i][k] = results[i][k].WithContext(Name(backups[k]));
      }
    }
  }
  return next;
}

}  // namespace rkv::server
