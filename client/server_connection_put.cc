// ServerConnection's PUT/DELETE path: Write builds the record in the
// local build area, WRITEs it into this connection's staging ring on the
// server and SENDs the request that names it (one posted pair), then waits
// for the reply. Replies arrive in order; each frees the oldest record's
// ring space and returns request credits.
#include "client/server_connection.h"

#include <algorithm>
#include <cstring>

#include "client/wire_checks.h"
#include "common/record.h"

namespace rkv::client {
namespace {

using std::chrono::microseconds;
using std::to_string;

}  // namespace

StatusOr<WriteResult> ServerConnection::Write(protocol::Op op, std::string_view key, std::string_view value,
                                              uint64_t request_id, Deadline deadline, bool* sent) {
  if (sent != nullptr) *sent = false;
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
  request.request_id = request_id;
  request.ring_offset = *ring_offset;
  std::memcpy(buffer_.get() + send_offset_, &request, sizeof(request));

  const uint64_t wr = NextWrId();
  const Status posted = conn_->PostWriteSend(
      {mr_.get(), build_offset_, static_cast<uint32_t>(block)},
      {accept_.ring.addr + *ring_offset, accept_.ring.rkey},
      {mr_.get(), send_offset_, static_cast<uint32_t>(sizeof(request))}, wr);
  if (!posted.ok()) return MarkBroken(posted.WithContext("posting a request"));
  if (sent != nullptr) *sent = true;
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
  WriteResult result;
  result.version = last_reply_->version;
  if (last_reply_->status_code != 0) {
    result.status = Status(static_cast<StatusCode>(last_reply_->status_code),
                           std::string(last_reply_->message));
  }
  return result;
}

template <typename Done>
Status ServerConnection::WaitFor(Done done, Deadline deadline, Clock::time_point now,
                                 std::string_view what) {
  while (!done()) {
    if (broken_) return broken_status_;
    const microseconds left = Left(deadline, now);
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

}  // namespace rkv::client
