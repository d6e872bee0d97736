// ServerConnection's PUT/DELETE path: each record is built in the local
// staging area at the offset it gets in this connection's staging ring on
// the server, WRITTEN there, and the request that names it SENT (one
// WRITE+SEND pair per record; the pairs of a batch go out as one posted
// list). Replies arrive in order; each returns request credits, and once
// its SEND has completed too the oldest record's ring space and send slot
// are free again. A GET's lookups over tcp (AskServer) take the same way,
// each record a key alone.
#include "client/server_connection.h"

#include <algorithm>
#include <cstring>

#include "client/wire_checks.h"
#include "common/clock.h"
#include "common/hash.h"
#include "common/record.h"

namespace rkv::client {
namespace {

using std::chrono::microseconds;
using std::to_string;

}  // namespace

StatusOr<WriteResult> ServerConnection::Write(protocol::Op op, std::string_view key, std::string_view value,
                                              uint64_t request_id, Deadline deadline, bool* sent, bool resent) {
  return Write(WriteOp{op, key, value, request_id, resent}, deadline, sent);
}

StatusOr<WriteResult> ServerConnection::Write(const WriteOp& one, Deadline deadline, bool* sent,
                                              std::span<const uint64_t> key_hash) {
  WriteOutcome outcome;
  const Status s =
      WriteBatch(std::span<const WriteOp>(&one, 1), std::span<WriteOutcome>(&outcome, 1), deadline, key_hash);
  if (sent != nullptr) *sent = outcome.sent;
  // A reply holds even when the connection broke after it.
  if (!s.ok() && !outcome.replied) return s;
  return std::move(outcome.result);
}

Status ServerConnection::CheckWriteOps(std::span<const WriteOp> ops) const {
  for (const WriteOp& op : ops) {
    if (op.key.empty() || op.key.size() > accept_.max_key_bytes || op.value.size() > accept_.max_value_bytes ||
        (op.op == protocol::Op::kDelete && !op.value.empty()) ||
        (op.op != protocol::Op::kPut && op.op != protocol::Op::kDelete) ||
        (op.condition != protocol::Condition::kNone && op.op != protocol::Op::kPut &&
         !(op.op == protocol::Op::kDelete && op.condition == protocol::Condition::kVersionIs)) ||
        ((op.condition == protocol::Condition::kVersionIs) != (op.expected_version != 0))) {
      return InvalidArgument("a write of a " + to_string(op.key.size()) + "-byte key and a " +
                             to_string(op.value.size()) + "-byte value (op " +
                             to_string(static_cast<int>(op.op)) + ") is not a PUT or DELETE server " + address_ +
                             " accepts (keys 1.." + to_string(accept_.max_key_bytes) + " bytes, values 0.." +
                             to_string(accept_.max_value_bytes) + ")");
    }
  }
  return Status::Ok();
}

Status ServerConnection::WriteBatch(std::span<const WriteOp> ops, std::span<WriteOutcome> outcomes,
                                    Deadline deadline, std::span<const uint64_t> key_hashes) {
  if (outcomes.size() != ops.size()) {
    return InvalidArgument(to_string(outcomes.size()) + " outcomes for " + to_string(ops.size()) + " writes");
  }
  for (WriteOutcome& o : outcomes) o = WriteOutcome{};
  if (broken_) return broken_status_;
  RKV_RETURN_IF_ERROR(CheckWriteOps(ops));
  // A written key's cached location is stale from the server's apply on:
  // dropped now, and replaced below by the block a PUT's reply names, so
  // that the next GET reads that block alone (docs/design.md §4.4). A
  // write without such a reply leaves the key to the two-READ way.
  const bool hashed = key_hashes.size() == ops.size();
  if (cache_ != nullptr) {
    for (size_t i = 0; i < ops.size(); ++i) {
      cache_->Erase(cache_server_, ops[i].key, hashed ? key_hashes[i] : ShardHash(ops[i].key));
    }
  }
  const Status s = RunBatch(ops, outcomes, deadline);
  if (cache_ != nullptr) {
    for (size_t i = 0; i < ops.size(); ++i) {
      const WriteOutcome& o = outcomes[i];
      if (ops[i].op != protocol::Op::kPut || !o.replied || !o.result.status.ok() || o.block == 0) continue;
      // Checked again before any READ of it (ReadCachedBlocks), as
      // nothing remote is trusted; the entry is believed only while the
      // block holds this key at this version.
      cache_->Insert(cache_server_, ops[i].key, hashed ? key_hashes[i] : ShardHash(ops[i].key),
                     CachedLocation{accept_.epoch, layout::SlotBlockOffset(o.block), layout::SlotBlockBytes(o.block),
                                    o.result.version});
    }
  }
  return s;
}

Status ServerConnection::RunBatch(std::span<const WriteOp> ops, std::span<WriteOutcome> outcomes,
                                  Deadline deadline) {
  batch_ = outcomes;
  batch_replied_ = 0;
  size_t next = 0;
  Status s;
  while (true) {
    s = PostWrites(ops, &next);
    if (!s.ok() || batch_replied_ == ops.size()) break;
    if (next < ops.size() && in_flight_.empty()) {
      // Nothing in flight will free room: the server granted no credits.
      s = MarkBroken(Unavailable("server " + address_ + " left no request credits"));
      break;
    }
    // A reply (credits, or the batch's end) or a retirement (ring space).
    const uint64_t seen = progress_;
    s = WaitFor([&] { return progress_ != seen; }, deadline, Clock::now(), "replies");
    if (!s.ok()) break;
  }
  // The last SEND's completion, which (RC order) retires every record:
  // it normally came before the reply, and waiting for it leaves no
  // completion behind for the next call (a GET's READs) to meet.
  if (s.ok()) s = WaitFor([&] { return in_flight_.empty(); }, deadline, Clock::now(), "the send completions");
  batch_ = {};
  return s;
}

Status ServerConnection::AskServer(std::span<const std::string_view> keys, std::span<LookupResult> results,
                                   std::span<const size_t> batch, Deadline deadline) {
  // batch.size() <= kMaxBatchKeys: a landing slot each.
  lookups_.clear();
  asked_.clear();
  for (const size_t k : batch) {
    const ValueTarget* into = results[k].into;
    if (into != nullptr && into->mr != nullptr) continue;  // its READ lands in place
    if (keys[k].empty() || keys[k].size() > accept_.max_key_bytes) continue;  // the READs answer it
    WriteOp& op = lookups_.emplace_back();
    op.op = protocol::Op::kGet;
    op.key = keys[k];
    op.request_id = next_lookup_id_++;
    op.landing_slot = static_cast<uint32_t>(asked_.size());
    asked_.push_back(k);
  }
  if (lookups_.empty()) return Status::Ok();
  const std::span<WriteOutcome> outcomes(looked_up_.data(), lookups_.size());
  for (WriteOutcome& o : outcomes) o = WriteOutcome{};
  const Clock::time_point posted = SteadyNow();
  RKV_RETURN_IF_ERROR(RunBatch(lookups_, outcomes, deadline));
  // Every reply came before this reading: within the lease of the post if
  // it is.
  const bool in_lease = SteadyNow() - posted < lease_;
  for (size_t i = 0; i < asked_.size(); ++i) {
    const size_t k = asked_[i];
    const uint64_t hash = cache_ != nullptr ? key_hashes_[k] : 0;
    Answer(keys[k], hash, results[k], i, in_lease);
  }
  return Status::Ok();
}

Status ServerConnection::PostWrites(std::span<const WriteOp> ops, size_t* next) {
  write_ops_.clear();
  const size_t first = in_flight_.size();
  while (*next < ops.size() && credits_ > 0 && !free_send_slots_.empty() &&
         write_ops_.size() < transport::kMaxWriteSendsPerPost) {
    const WriteOp& op = ops[*next];
    const uint64_t bytes = layout::BlockBytes(op.key.size(), op.value.size());
    const std::optional<uint64_t> at = ring_.Allocate(bytes);
    if (!at) {
      if (ring_.live() > 0) break;  // the oldest records free room as they retire
      return MarkBroken(Internal("no room for a " + to_string(bytes) + "-byte record in the " +
                                 to_string(ring_.capacity()) + "-byte staging ring"));
    }
    const size_t local = staging_offset_ + *at;
    const uint16_t flags = op.op == protocol::Op::kDelete ? layout::kBlockFlagTombstone : 0;
    // A lookup's record is its key alone (value empty).
    const uint64_t block = EncodeRecord(std::span<uint8_t>(buffer_.get() + local, bytes), op.key, op.value,
                                        /*version=*/0, flags, op.expires_at_ms);
    const uint32_t slot = free_send_slots_.back();
    free_send_slots_.pop_back();
    protocol::RequestMsg request{};
    request.op = static_cast<uint8_t>(op.op);
    request.flags = op.resent ? protocol::kRequestResent : 0;
    request.length = static_cast<uint32_t>(block);
    request.request_id = op.request_id;
    request.ring_offset = *at;
    request.condition = static_cast<uint8_t>(op.condition);
    request.expected_version = op.expected_version;
    if (op.op == protocol::Op::kGet) {
      request.landing_addr = landing_mr_->remote_addr() + size_t{op.landing_slot} * landing_slot_bytes_;
      request.landing_rkey = landing_mr_->rkey();
      request.landing_bytes = static_cast<uint32_t>(landing_slot_bytes_);
    }
    const size_t msg = send_offset_ + size_t{slot} * kSendSlotBytes;
    std::memcpy(buffer_.get() + msg, &request, sizeof(request));

    const uint64_t wr = NextWrId();
    write_ops_.push_back(transport::WriteSendOp{
        {mr_.get(), local, static_cast<uint32_t>(block)},
        {accept_.ring.addr + *at, accept_.ring.rkey},
        {mr_.get(), msg, static_cast<uint32_t>(sizeof(request))},
        wr,
        /*signaled=*/false});
    in_flight_.push_back(InFlight{op.request_id, wr, slot, *next, false});
    --credits_;
    ++*next;
  }
  if (write_ops_.empty()) return Status::Ok();
  // Only the list's last SEND is signaled: its completion says every
  // earlier work request of the list completed too (RC order).
  write_ops_.back().signaled = true;
  const Status posted = conn_->PostWriteSends(write_ops_);
  // Sent even when posting failed: the transport may have posted the
  // list's first pairs before it failed (ibv_post_send stops at its bad
  // work request), so the server may see them, and a retry must say so
  // (kRequestResent: the server's replay check relies on it, §5.6).
  for (size_t i = first; i < in_flight_.size(); ++i) batch_[in_flight_[i].item].sent = true;
  if (!posted.ok()) return MarkBroken(posted.WithContext("posting requests"));
  return Status::Ok();
}

void ServerConnection::Retire() {
  while (!in_flight_.empty() && in_flight_.front().replied && in_flight_.front().send_wr <= completed_send_wr_) {
    ring_.ReleaseOldest();  // FIFO: the oldest record's space
    free_send_slots_.push_back(in_flight_.front().send_slot);
    in_flight_.pop_front();
    --awaiting_reply_;
    ++progress_;
  }
}

template <typename Done>
Status ServerConnection::WaitFor(Done done, Deadline deadline, Clock::time_point now,
                                 std::string_view what) {
  const Clock::time_point started = now;
  while (!done()) {
    if (broken_) return broken_status_;
    const microseconds left = Left(deadline, now);
    if (left.count() == 0) {
      return MarkBroken(DeadlineExceeded("timed out waiting for " + std::string(what) + " from " +
                                         address_));
    }
    if (abandon_check_ && now - started >= kAbandonCheckAfter) [[unlikely]] {
      if (Status give_up = abandon_check_(now - started); !give_up.ok()) {
        return MarkBroken(give_up.WithContext("gave up waiting for " + std::string(what) + " from " + address_));
      }
    }
    RKV_RETURN_IF_ERROR(PollOnce(std::min(left, microseconds(50'000))));
    // Only a wait that needs another round reads the clock again.
    if (!done()) now = Clock::now();
  }
  return Status::Ok();
}

void ServerConnection::HandleReceive(uint64_t index, uint32_t byte_len) {
  if (broken_) return;
  const size_t offset = recv_offset_ + index * protocol::kMaxMessageBytes;
  if (byte_len > protocol::kMaxMessageBytes) {
    MarkBroken(Internal("server sent a " + to_string(byte_len) + "-byte message")).IgnoreError();
    return;
  }
  auto reply = ParseReply(std::span<const uint8_t>(buffer_.get() + offset, byte_len));
  if (!reply.ok()) {
    MarkBroken(reply.status().WithContext("bad reply from " + address_)).IgnoreError();
    return;
  }
  if (awaiting_reply_ >= in_flight_.size() || reply->request_id != in_flight_[awaiting_reply_].request_id) {
    MarkBroken(Internal("server " + address_ + " replied to request " + to_string(reply->request_id) +
                        ", which is not the oldest outstanding one"))
        .IgnoreError();
    return;
  }
  // The reply is recorded first: it holds even if the connection fails
  // right after (the receive cannot be re-posted).
  InFlight& request = in_flight_[awaiting_reply_++];
  request.replied = true;
  if (request.item < batch_.size()) {
    WriteOutcome& outcome = batch_[request.item];
    outcome.replied = true;
    outcome.result.version = reply->version;
    outcome.block = reply->status_code == 0 ? reply->block : 0;
    if (reply->status_code != 0) outcome.result.status = ReplyStatus(*reply);
    ++batch_replied_;
  }
  credits_ = std::min<uint64_t>(uint64_t{credits_} + reply->credits, max_credits_);
  ++progress_;
  // The reply was copied out: the buffer can take the next message.
  const Status posted = conn_->PostRecv(
      {mr_.get(), offset, static_cast<uint32_t>(protocol::kMaxMessageBytes)}, kRecvTag | index);
  if (!posted.ok()) {
    MarkBroken(posted.WithContext("re-posting a receive")).IgnoreError();
    return;
  }
  Retire();
}

}  // namespace rkv::client
