// ServerConnection's setup (Open: connect, accept checks, buffer layout,
// receives, table header) and the plumbing both data paths share
// (completion dispatch, breaking). The GET path is in
// server_connection_get.cc, the PUT/DELETE path in
// server_connection_put.cc.
#include "client/server_connection.h"

#include <algorithm>
#include <cstring>

#include "client/wire_checks.h"
#include "common/connect_handshake.h"

namespace rkv::client {
namespace {

using std::chrono::duration_cast;
using std::chrono::microseconds;
using std::chrono::milliseconds;
using std::to_string;

constexpr size_t RoundUp(size_t v, size_t to) { return (v + to - 1) / to * to; }

}  // namespace

StatusOr<std::unique_ptr<ServerConnection>> ServerConnection::Open(
    transport::Transport& transport, const std::string& address,
    const protocol::ClientConnectParams& request, Deadline deadline) {
  const microseconds left = Left(deadline, Clock::now());
  if (left.count() == 0) return DeadlineExceeded("no time left to connect to " + address);
  const auto timeout = std::max(milliseconds(1), duration_cast<milliseconds>(left));
  RKV_ASSIGN_OR_RETURN(std::unique_ptr<transport::Connection> conn,
                       protocol::ConnectAsClient(transport, address, request, timeout));
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
      ring_(StagingBytes(accept)) {}

uint64_t ServerConnection::StagingBytes(const protocol::AcceptData& accept) {
  // The server's ring holds at least the largest block (ParseAcceptData
  // checks); so does the part used.
  const uint64_t two_blocks = 2 * RoundUp(MaxBlockBytes(accept), layout::kBlockAlign);
  return std::min<uint64_t>(accept.ring.length, std::max<uint64_t>(kMaxStagingBytes, two_blocks));
}

ServerConnection::~ServerConnection() {
  if (conn_) conn_->Disconnect();
}

Status ServerConnection::Init(transport::Transport& transport, Deadline deadline) {
  transport_ = &transport;
  posted_recvs_ = std::min(accept_.request_credits, kMaxPostedRecvs);
  credits_ = posted_recvs_;
  max_credits_ = posted_recvs_;

  block_area_offset_ = kBucketAreaBytes;
  block_area_bytes_ = RoundUp(std::max<size_t>(max_block_, kMinBlockArea), layout::kBlockAlign);
  staging_offset_ = block_area_offset_ + block_area_bytes_;
  send_offset_ = staging_offset_ + RoundUp(ring_.capacity(), layout::kBlockAlign);
  recv_offset_ = send_offset_ + kSendSlots * kSendSlotBytes;
  const size_t total =
      RoundUp(recv_offset_ + size_t{posted_recvs_} * protocol::kMaxMessageBytes, 4096);

  buffer_.reset(static_cast<uint8_t*>(std::aligned_alloc(4096, total)));
  if (!buffer_) return ResourceExhausted("cannot allocate a " + to_string(total) + "-byte client buffer");
  std::memset(buffer_.get(), 0, total);
  RKV_ASSIGN_OR_RETURN(mr_, transport.Register(buffer_.get(), total, transport::kLocalWrite));
  if (transport.one_sided_uses_target_cpu()) {
    // A lookup's block lands here (AskServer): slots of the common block
    // sizes, up to a page; a larger block is READ instead.
    landing_slot_bytes_ = std::min<size_t>(RoundUp(max_block_, layout::kBlockAlign), 4096);
    const size_t landing_bytes = RoundUp(kMaxBatchKeys * landing_slot_bytes_, 4096);
    landing_.reset(static_cast<uint8_t*>(std::aligned_alloc(4096, landing_bytes)));
    if (!landing_) return ResourceExhausted("cannot allocate " + to_string(landing_bytes) + " bytes of landing slots");
    std::memset(landing_.get(), 0, landing_bytes);
    RKV_ASSIGN_OR_RETURN(landing_mr_, transport.Register(landing_.get(), landing_bytes,
                                                         transport::kLocalWrite | transport::kRemoteWrite));
    lookups_.reserve(kMaxBatchKeys);
    looked_up_.resize(kMaxBatchKeys);
    asked_.reserve(kMaxBatchKeys);
  }

  for (uint32_t i = 0; i < posted_recvs_; ++i) {
    const transport::LocalBuf buf{mr_.get(), recv_offset_ + size_t{i} * protocol::kMaxMessageBytes,
                                  static_cast<uint32_t>(protocol::kMaxMessageBytes)};
    const Status s = conn_->PostRecv(buf, kRecvTag | i);
    if (!s.ok()) return MarkBroken(s.WithContext("posting receives"));
  }

  free_send_slots_.reserve(kSendSlots);
  for (uint32_t i = kSendSlots; i > 0; --i) free_send_slots_.push_back(i - 1);
  write_ops_.reserve(transport::kMaxWriteSendsPerPost);

  // Lookup scratch, sized once: no GET allocates it again.
  pending_.reserve(kMaxBatchKeys);
  key_state_.resize(kMaxBatchKeys);
  todo_.reserve(kMaxBatchKeys);
  next_todo_.reserve(kMaxBatchKeys);
  outcome_.resize(kMaxBatchKeys);
  candidates_.reserve(kMaxBatchKeys * 2 * layout::kSlotsPerBucket);
  ops_.reserve(kMaxReadsPerList);

  RKV_RETURN_IF_ERROR(ReadTableHeader(deadline));
  const Status s = CheckTableHeader(table_header_, accept_);
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
      Retire();
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

}  // namespace rkv::client
