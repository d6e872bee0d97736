#include "client/server_connection.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <thread>
#include <vector>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "client/wire_checks.h"
#include "common/clock.h"
#include "common/hash.h"
#include "common/record.h"

namespace rkv::client {
namespace {

using std::chrono::duration_cast;
using std::chrono::microseconds;
using std::chrono::milliseconds;
using std::to_string;

// Receive completions carry this bit plus the receive buffer's index;
// READ and SEND wr_ids come from a counter that never reaches it.
constexpr uint64_t kRecvTag = uint64_t{1} << 63;

constexpr size_t kNeighborhoodBytes = layout::kNeighborhoodBuckets * sizeof(layout::Bucket);
constexpr size_t kBucketAreaBytes = kMaxBatchKeys * kNeighborhoodBytes;

constexpr size_t RoundUp(size_t v, size_t to) { return (v + to - 1) / to * to; }

// Calls fn(slot) for every used slot word among words[0, count) (count a
// multiple of 4) whose fingerprint is `fingerprint`. A neighbourhood has 64
// slots and usually one match: with SSE2 (every x86-64) four slots are
// compared per step (29 ns for 64 slots on this host, 75 ns slot by slot;
// under QEMU TCG, which emulates SSE2 with helper calls, 0.7 us against
// 0.3 us: the native figure decides).
template <typename Fn>
[[gnu::always_inline]] inline void ForEachFingerprintMatch(const uint8_t* words, size_t count, uint16_t fingerprint,
                                                           Fn&& fn) {
  static_assert(layout::kFingerprintShift == 48, "the fingerprint is the top 16-bit lane of a slot word");
  const auto match = [&](size_t s) {
    uint64_t slot;
    std::memcpy(&slot, words + s * sizeof(uint64_t), sizeof(slot));
    if (slot != layout::kEmptySlot) fn(slot);
  };
#if defined(__SSE2__)
  const __m128i want = _mm_set1_epi16(static_cast<short>(fingerprint));
  for (size_t s = 0; s < count; s += 4) {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(words + s * sizeof(uint64_t)));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(words + (s + 2) * sizeof(uint64_t)));
    // One bit per byte; bit 7 of each 8-byte half is its fingerprint lane.
    const uint32_t hits = (static_cast<uint32_t>(_mm_movemask_epi8(_mm_cmpeq_epi16(a, want))) |
                           static_cast<uint32_t>(_mm_movemask_epi8(_mm_cmpeq_epi16(b, want))) << 16) &
                          0x80808080u;
    if (hits == 0) continue;
    for (size_t k = 0; k < 4; ++k) {
      if (hits & (0x80u << (8 * k))) match(s + k);
    }
  }
#else
  for (size_t s = 0; s < count; ++s) {
    uint64_t slot;
    std::memcpy(&slot, words + s * sizeof(uint64_t), sizeof(slot));
    if (layout::SlotFingerprint(slot) == fingerprint) match(s);
  }
#endif
}

microseconds Remaining(Deadline deadline) {
  const auto left = deadline - Clock::now();
  return left <= Clock::duration::zero() ? microseconds(0) : duration_cast<microseconds>(left);
}

}  // namespace

StatusOr<std::unique_ptr<ServerConnection>> ServerConnection::Open(
    transport::Transport& transport, const std::string& address,
    const protocol::ConnectRequestData& request, Deadline deadline) {
  const microseconds left = Remaining(deadline);
  if (left.count() == 0) return DeadlineExceeded("no time left to connect to " + address);
  const auto timeout = std::max(milliseconds(1), duration_cast<milliseconds>(left));
  RKV_ASSIGN_OR_RETURN(
      std::unique_ptr<transport::Connection> conn,
      transport.Connect(address,
                        std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(&request),
                                                 sizeof(request)),
                        timeout));
  auto accept = ParseAcceptData(conn->peer_private_data());
  if (!accept.ok()) {
    conn->Disconnect();
    return accept.status().WithContext("server " + address);
  }
  std::unique_ptr<ServerConnection> c(new ServerConnection(std::move(conn), *accept, address));
  RKV_RETURN_IF_ERROR(c->Init(transport, deadline));
  return c;
}

ServerConnection::ServerConnection(std::unique_ptr<transport::Connection> conn,
                                   const protocol::AcceptData& accept, std::string address)
    : conn_(std::move(conn)),
      address_(std::move(address)),
      accept_(accept),
      lease_(accept.grace_period_us / 2),
      max_block_(MaxBlockBytes(accept)),
      ring_(accept.ring.length) {}

ServerConnection::~ServerConnection() {
  if (conn_) conn_->Disconnect();
}

Status ServerConnection::Init(transport::Transport& transport, Deadline deadline) {
  posted_recvs_ = std::min(accept_.request_credits, kMaxPostedRecvs);
  credits_ = posted_recvs_;
  max_credits_ = posted_recvs_;

  block_area_offset_ = kBucketAreaBytes;
  block_area_bytes_ = RoundUp(std::max<size_t>(max_block_, kMinBlockArea), layout::kBlockAlign);
  build_offset_ = block_area_offset_ + block_area_bytes_;
  send_offset_ = build_offset_ + RoundUp(max_block_, layout::kBlockAlign);
  recv_offset_ = send_offset_ + protocol::kMaxMessageBytes;
  const size_t total =
      RoundUp(recv_offset_ + size_t{posted_recvs_} * protocol::kMaxMessageBytes, 4096);

  buffer_.reset(static_cast<uint8_t*>(std::aligned_alloc(4096, total)));
  if (!buffer_) return ResourceExhausted("cannot allocate a " + to_string(total) + "-byte client buffer");
  std::memset(buffer_.get(), 0, total);
  RKV_ASSIGN_OR_RETURN(mr_, transport.Register(buffer_.get(), total, transport::kLocalWrite));

  for (uint32_t i = 0; i < posted_recvs_; ++i) {
    const transport::LocalBuf buf{mr_.get(), recv_offset_ + size_t{i} * protocol::kMaxMessageBytes,
                                  static_cast<uint32_t>(protocol::kMaxMessageBytes)};
    const Status s = conn_->PostRecv(buf, kRecvTag | i);
    if (!s.ok()) return MarkBroken(s.WithContext("posting receives"));
  }

  // Lookup scratch, sized once: no GET allocates it again.
  pending_.reserve(kMaxBatchKeys);
  key_state_.resize(kMaxBatchKeys);
  todo_.reserve(kMaxBatchKeys);
  next_todo_.reserve(kMaxBatchKeys);
  outcome_.resize(kMaxBatchKeys);
  candidates_.reserve(kMaxBatchKeys * 2 * layout::kSlotsPerBucket);
  ops_.reserve(kMaxReadsPerList);

  ops_.resize(1);
  ops_[0].local = {mr_.get(), 0, static_cast<uint32_t>(sizeof(layout::TableHeader))};
  ops_[0].remote = {accept_.index.addr, accept_.index.rkey};
  RKV_RETURN_IF_ERROR(PostReadsAndWait(ops_, deadline, Clock::now(), "the table header READ"));
  std::memcpy(&table_, buffer_.get(), sizeof(table_));
  const Status s = CheckTableHeader(table_, accept_);
  if (!s.ok()) {
    MarkBroken(s).IgnoreError();
    return s.WithContext("server " + address_);
  }
  return Status::Ok();
}

Status ServerConnection::MarkBroken(Status why) {
  if (!broken_) {
    broken_ = true;
    broken_status_ = why.ok() ? Internal("connection marked broken") : std::move(why);
    conn_->Disconnect();
  }
  return broken_status_;
}

Status ServerConnection::PollOnce(microseconds wait) {
  auto n = conn_->Poll(completions_, wait);
  if (!n.ok()) return MarkBroken(n.status().WithContext("connection to " + address_));
  for (size_t i = 0; i < *n; ++i) HandleCompletion(completions_[i]);
  return broken_ ? broken_status_ : Status::Ok();
}

void ServerConnection::HandleCompletion(const transport::Completion& c) {
  if (!c.status.ok()) {
    MarkBroken(c.status.WithContext("connection to " + address_)).IgnoreError();
    return;
  }
  switch (c.op) {
    case transport::OpType::kRead:
      break;  // READs are waited for by PostReadsAndWait; a stray one is harmless
    case transport::OpType::kSend:
      completed_send_wr_ = std::max(completed_send_wr_, c.wr_id);
      break;
    case transport::OpType::kRecv:
      if ((c.wr_id & kRecvTag) == 0 || (c.wr_id & ~kRecvTag) >= posted_recvs_) {
        MarkBroken(Internal("receive completion with unknown wr_id " + to_string(c.wr_id))).IgnoreError();
        break;
      }
      HandleReceive(c.wr_id & ~kRecvTag, c.byte_len);
      break;
    case transport::OpType::kWrite:
      break;  // WRITEs are posted unsignaled; nothing to track
  }
}

void ServerConnection::HandleReceive(uint64_t index, uint32_t byte_len) {
  if (broken_) return;
  const size_t offset = recv_offset_ + index * protocol::kMaxMessageBytes;
  if (byte_len > protocol::kMaxMessageBytes) {
    MarkBroken(Internal("server sent a " + to_string(byte_len) + "-byte message")).IgnoreError();
    return;
  }
  auto reply = ParseReply(std::span<const uint8_t>(buffer_.get() + offset, byte_len));
  // The reply is copied out: the buffer can take the next message.
  const Status posted = conn_->PostRecv(
      {mr_.get(), offset, static_cast<uint32_t>(protocol::kMaxMessageBytes)}, kRecvTag | index);
  if (!posted.ok()) {
    MarkBroken(posted.WithContext("re-posting a receive")).IgnoreError();
    return;
  }
  if (!reply.ok()) {
    MarkBroken(reply.status().WithContext("bad reply from " + address_)).IgnoreError();
    return;
  }
  if (outstanding_.empty() || reply->request_id != outstanding_.front()) {
    MarkBroken(Internal("server " + address_ + " replied to request " + to_string(reply->request_id) +
                        ", which is not the oldest outstanding one"))
        .IgnoreError();
    return;
  }
  outstanding_.pop_front();
  ring_.ReleaseOldest();  // FIFO: the server is done with the oldest record
  credits_ = std::min<uint64_t>(uint64_t{credits_} + reply->credits, max_credits_);
  last_reply_ = *reply;
}

template <typename Done>
Status ServerConnection::WaitFor(Done done, Deadline deadline, Clock::time_point now,
                                 std::string_view what) {
  while (!done()) {
    if (broken_) return broken_status_;
    const microseconds left =
        now >= deadline ? microseconds(0) : duration_cast<microseconds>(deadline - now);
    if (left.count() == 0) {
      return MarkBroken(DeadlineExceeded("timed out waiting for " + std::string(what) + " from " +
                                         address_));
    }
    RKV_RETURN_IF_ERROR(PollOnce(std::min(left, microseconds(50'000))));
    // Only a wait that needs another round reads the clock again.
    if (!done()) now = Clock::now();
  }
  return Status::Ok();
}

[[gnu::always_inline]] inline Status ServerConnection::PostReadsAndWait(std::span<transport::ReadOp> ops,
                                                                        Deadline deadline, Clock::time_point now,
                                                                        std::string_view what) {
  if (broken_) [[unlikely]] return broken_status_;
  for (auto& op : ops) {
    op.signaled = false;
    op.wr_id = NextWrId();
  }
  ops.back().signaled = true;
  const microseconds left =
      now >= deadline ? microseconds(0) : duration_cast<microseconds>(deadline - now);
  others_.clear();
  Status s = conn_->PostReadsAndWait(ops, left, &others_);
  if (!s.ok() || !others_.empty()) [[unlikely]] return AfterReads(std::move(s), what);
  return Status::Ok();
}

Status ServerConnection::AfterReads(Status s, std::string_view what) {
  // Replies and SEND completions that came meanwhile: handled as Poll's.
  for (const transport::Completion& c : others_) HandleCompletion(c);
  if (broken_) return broken_status_;
  if (s.code() == StatusCode::kDeadlineExceeded) {
    return MarkBroken(DeadlineExceeded("timed out waiting for " + std::string(what) + " from " + address_));
  }
  if (!s.ok()) return MarkBroken(s.WithContext(std::string(what) + " on the connection to " + address_));
  return Status::Ok();
}

void ServerConnection::MarkCorrupt(Outcome& o, uint64_t slot) const {
  o.corrupt = true;
  o.why = "slot " + to_string(slot) + " names block [" + to_string(layout::SlotBlockOffset(slot)) + ", +" +
          to_string(layout::SlotBlockBytes(slot)) + ") outside the " + to_string(accept_.heap.length) +
          "-byte heap or over the largest block";
}

Status ServerConnection::Lookup(std::span<const std::string_view> keys,
                                std::span<LookupResult> results, Deadline deadline) {
  if (broken_) return broken_status_;
  // Batches of at most kMaxBatchKeys not-done keys, gathered into the
  // reused pending_ list (no allocation).
  size_t i = 0;
  while (i < keys.size()) {
    pending_.clear();
    for (; i < keys.size() && pending_.size() < kMaxBatchKeys; ++i) {
      if (!results[i].done) pending_.push_back(i);
    }
    if (pending_.empty()) break;
    RKV_RETURN_IF_ERROR(LookupBatch(keys, results, pending_, deadline));
  }
  return Status::Ok();
}

Status ServerConnection::LookupBatch(std::span<const std::string_view> keys,
                                     std::span<LookupResult> results,
                                     std::span<const size_t> batch, Deadline deadline) {
  // batch.size() <= kMaxBatchKeys: key_state_ and outcome_ hold that many.
  for (size_t j = 0; j < batch.size(); ++j) {
    KeyState& ks = key_state_[j];
    ks.nb = NeighborhoodOf(TableHash(keys[batch[j]], table_.hash_seed), table_.bucket_count_log2);
    ks.attempts = 0;
    ks.corrupt_rounds = 0;
    ks.confirming = false;
    ks.last_failure.clear();
  }
  todo_.clear();
  for (size_t j = 0; j < batch.size(); ++j) todo_.push_back(j);
  microseconds backoff(20);

  while (!todo_.empty()) {
    // 1. Every key's neighbourhood, one READ each, all in one list; the
    //    lease starts when they are posted.
    ops_.clear();
    bool confirming = false;
    for (size_t t = 0; t < todo_.size(); ++t) {
      const KeyState& ks = key_state_[todo_[t]];
      confirming |= ks.confirming;
      transport::ReadOp& op = ops_.emplace_back();
      op.local = {mr_.get(), t * kNeighborhoodBytes,
                  static_cast<uint32_t>(ks.nb.count * sizeof(layout::Bucket))};
      op.remote = {accept_.index.addr + layout::BucketOffset(ks.nb.first), accept_.index.rkey};
    }
    const Clock::time_point posted = SteadyNow();
    RKV_RETURN_IF_ERROR(PostReadsAndWait(ops_, deadline, posted, "neighbourhood READs"));
    // Only a confirmation (see step 4) needs to know when its READ ended.
    const Clock::time_point read_done = confirming ? SteadyNow() : posted;

    // 2. Slots whose fingerprint matches.
    for (size_t t = 0; t < todo_.size(); ++t) {
      Outcome& o = outcome_[t];
      o.found = o.lease_expired = o.unreadable = o.corrupt = false;
      o.version = 0;
    }
    candidates_.clear();
    for (size_t t = 0; t < todo_.size(); ++t) {
      const Neighborhood& nb = key_state_[todo_[t]].nb;
      const uint8_t* words = buffer_.get() + t * kNeighborhoodBytes;
      ForEachFingerprintMatch(words, nb.count * layout::kSlotsPerBucket, nb.fingerprint, [&](uint64_t slot) {
        const uint64_t offset = layout::SlotBlockOffset(slot);
        const uint64_t bytes = layout::SlotBlockBytes(slot);
        if (bytes == 0 || bytes > max_block_ || offset > accept_.heap.length ||
            bytes > accept_.heap.length - offset) [[unlikely]] {
          MarkCorrupt(outcome_[t], slot);
          return;
        }
        candidates_.push_back(Candidate{t, offset, bytes});
      });
    }

    // 3. Candidate blocks, as many per list as the block area holds. A
    //    match's value goes straight into the key's result (a result that
    //    does not end up found is never marked done, so a stale value
    //    there is never reported).
    for (size_t c = 0; c < candidates_.size();) {
      ops_.clear();
      size_t used = 0;
      const size_t first = c;
      while (c < candidates_.size() && ops_.size() < kMaxReadsPerList &&
             used + candidates_[c].bytes <= block_area_bytes_) {
        Candidate& cand = candidates_[c];
        cand.local_offset = block_area_offset_ + used;
        transport::ReadOp& op = ops_.emplace_back();
        op.local = {mr_.get(), cand.local_offset, static_cast<uint32_t>(cand.bytes)};
        op.remote = {accept_.heap.addr + cand.heap_offset, accept_.heap.rkey};
        used += cand.bytes;
        ++c;
      }
      // The clock is read for the lease only: the wait's first round takes
      // its time left from the lease start (later rounds read the clock).
      RKV_RETURN_IF_ERROR(PostReadsAndWait(ops_, deadline, posted, "block READs"));
      const auto elapsed = SteadyNow() - posted;
      const bool in_lease = elapsed < lease_;
      for (size_t k = first; k < c; ++k) {
        const Candidate& cand = candidates_[k];
        Outcome& o = outcome_[cand.t];
        if (!in_lease) {
          // The block may have been freed and reused since the bucket READ.
          o.lease_expired = true;
          o.why = "reads took " + to_string(duration_cast<microseconds>(elapsed).count()) +
                  " us, over the " + to_string(lease_.count()) + " us lease";
          continue;
        }
        auto record = DecodeRecord(
            std::span<const uint8_t>(buffer_.get() + cand.local_offset, cand.bytes));
        if (!record.ok()) {
          o.unreadable = true;
          o.why = "block at heap offset " + to_string(cand.heap_offset) + ": " +
                  record.status().ToString();
          continue;
        }
        const size_t key_index = batch[todo_[cand.t]];
        if (record->key != keys[key_index]) continue;                      // fingerprint collision
        if ((record->flags & layout::kBlockFlagTombstone) != 0) continue;  // never live in a heap
        if (!o.found || record->version > o.version) {
          o.found = true;
          o.version = record->version;
          results[key_index].value.assign(record->value);
        }
      }
    }

    // 4. Answers, or another round. A clean miss is confirmed by a second
    //    READ of the neighbourhood, posted after the first completed and
    //    done within the lease from the first one's post: one READ of a
    //    neighbourhood is not atomic, and a key the server moved between
    //    two of its buckets while it ran can be missed; the server does not
    //    move a key again within a grace period (server/table.h), so the
    //    second READ sees it.
    next_todo_.clear();
    bool failed = false;
    for (size_t t = 0; t < todo_.size(); ++t) {
      KeyState& ks = key_state_[todo_[t]];
      LookupResult& r = results[batch[todo_[t]]];
      Outcome& o = outcome_[t];
      if (o.found) {
        r.done = true;
        r.status = Status::Ok();
        r.version = o.version;
        continue;
      }
      if (!o.lease_expired && !o.unreadable && !o.corrupt) {
        if (!ks.confirming) {
          ks.confirming = true;
          ks.first_posted = posted;
          next_todo_.push_back(todo_[t]);
          continue;
        }
        const auto elapsed = read_done - ks.first_posted;
        if (elapsed < lease_) {
          r.done = true;
          r.status = NotFound("key not found");
          r.value.clear();
          continue;
        }
        o.lease_expired = true;
        o.why = "confirming a miss took " + to_string(duration_cast<microseconds>(elapsed).count()) +
                " us, over the " + to_string(lease_.count()) + " us lease";
      }
      ks.confirming = false;
      failed = true;
      ++ks.attempts;
      ks.last_failure.swap(o.why);
      ks.corrupt_rounds = o.corrupt ? ks.corrupt_rounds + 1 : 0;
      if (ks.corrupt_rounds >= kCorruptRounds) {
        r.done = true;
        r.status = DataLoss("corrupt table on " + address_ + ": " + ks.last_failure);
        r.value.clear();
        continue;
      }
      next_todo_.push_back(todo_[t]);
    }
    todo_.swap(next_todo_);
    if (todo_.empty()) break;
    if (!failed) continue;  // confirmations only: no reason to wait

    if (Remaining(deadline) <= backoff) {
      for (size_t j : todo_) {
        LookupResult& r = results[batch[j]];
        r.done = true;
        r.status = DeadlineExceeded("GET gave up after " + to_string(key_state_[j].attempts) +
                                    " attempts; last: " + key_state_[j].last_failure);
        r.value.clear();
      }
      break;
    }
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, microseconds(5000));
  }
  return Status::Ok();
}

StatusOr<ApplyResult> ServerConnection::Apply(protocol::Op op, std::string_view key,
                                              std::string_view value, Deadline deadline) {
  if (broken_) return broken_status_;
  if (credits_ == 0) return MarkBroken(Unavailable("server " + address_ + " left no request credits"));
  const uint16_t flags = op == protocol::Op::kDelete ? layout::kBlockFlagTombstone : 0;
  const uint64_t block = EncodeRecord(std::span<uint8_t>(buffer_.get() + build_offset_, max_block_),
                                      key, value, /*version=*/0, flags);
  const std::optional<uint64_t> ring_offset = ring_.Allocate(block);
  if (!ring_offset) {
    return MarkBroken(Internal("no room for a " + to_string(block) + "-byte record in the " +
                               to_string(ring_.capacity()) + "-byte staging ring"));
  }
  protocol::RequestMsg request{};
  request.op = static_cast<uint8_t>(op);
  request.length = static_cast<uint32_t>(block);
  request.request_id = next_request_id_++;
  request.ring_offset = *ring_offset;
  std::memcpy(buffer_.get() + send_offset_, &request, sizeof(request));

  const uint64_t wr = NextWrId();
  const Status posted = conn_->PostWriteSend(
      {mr_.get(), build_offset_, static_cast<uint32_t>(block)},
      {accept_.ring.addr + *ring_offset, accept_.ring.rkey},
      {mr_.get(), send_offset_, static_cast<uint32_t>(sizeof(request))}, wr);
  if (!posted.ok()) return MarkBroken(posted.WithContext("posting a request"));
  --credits_;
  outstanding_.push_back(request.request_id);
  last_reply_.reset();

  // The SEND completion frees the send and build areas; the reply frees
  // the ring space and the credit.
  RKV_RETURN_IF_ERROR(WaitFor(
      [&] {
        return completed_send_wr_ >= wr && last_reply_.has_value() &&
               last_reply_->request_id == request.request_id;
      },
      deadline, Clock::now(), "the reply"));
  ApplyResult result;
  result.version = last_reply_->version;
  if (last_reply_->status_code != 0) {
    result.status = Status(static_cast<StatusCode>(last_reply_->status_code),
                           std::string(last_reply_->message));
  }
  return result;
}

}  // namespace rkv::client
