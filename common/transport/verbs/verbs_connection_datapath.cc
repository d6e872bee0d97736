// VerbsConnection, data path: the posts (READ lists, WRITE+SEND, SEND,
// receives) and their checks, the send ring's bookkeeping, turning work
// completions into Completions, and waiting for them (Poll: the CQ drain,
// the adaptive spin and the sleep on the completion and cm channels).
// Setup, teardown and the rdma_cm events are in verbs_connection_setup.cc;
// the send ring's per-post steps that setup shares (ReserveSend, AddSend,
// PostSendChain) are inline in verbs_connection.h.
#include "common/transport/verbs/verbs_connection.h"

#include <poll.h>
#include <sched.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <utility>

#include <glog/logging.h>

#include "common/transport/spin_window.h"
#include "common/transport/verbs/verbs_poll_group.h"

namespace rkv::transport::verbs {
namespace {

// How long a Post waits for send queue room while the device completes
// earlier work requests (they complete without the caller's help).
constexpr auto kSendQueueWait = std::chrono::seconds(5);
constexpr int kPollBatch = 16;
// While spinning, Poll reads the clock and yields the CPU once every this
// many empty ibv_poll_cq rounds.
constexpr uint32_t kSpinRoundsPerYield = 8;

// The status of a work completion. A flush only says that the QP is in the
// error state; `close_status`, when set, says why (the connection closed).
Status WcStatus(const ibv_wc& wc, const Status& close_status) {
  if (wc.status == IBV_WC_SUCCESS) return Status::Ok();
  if (wc.status == IBV_WC_WR_FLUSH_ERR && !close_status.ok()) return close_status;
  std::string message = std::string("work request failed: ") + ibv_wc_status_str(wc.status) +
                        " (ibv_wc_status " + std::to_string(static_cast<int>(wc.status)) +
                        ", vendor_err " + std::to_string(wc.vendor_err) + ")";
  switch (wc.status) {
    case IBV_WC_REM_ACCESS_ERR:
      return PermissionDenied(std::move(message));
    case IBV_WC_WR_FLUSH_ERR:
    case IBV_WC_RETRY_EXC_ERR:
    case IBV_WC_RNR_RETRY_EXC_ERR:
      return Unavailable(std::move(message));
    default:
      return Internal(std::move(message));
  }
}

}  // namespace

// ------------------------------------------------------------------ checks and posts

inline bool VerbsConnection::Broken() const {
  return failed_ || remote_disconnected_ || local_disconnected_;
}

Status VerbsConnection::BrokenStatus() const {
  if (!close_status_.ok()) return close_status_;
  if (remote_disconnected_) return Unavailable("peer " + peer_address_ + " disconnected");
  if (local_disconnected_) return Unavailable("connection to " + peer_address_ + " was disconnected");
  return Unavailable("connection to " + peer_address_ +
                     " failed: a work request completed in error");
}

inline Status VerbsConnection::CheckSendable() const {
  if (state_ == State::kConnected && !Broken()) [[likely]] return Status::Ok();
  return NotSendable();
}

Status VerbsConnection::NotSendable() const {
  if (state_ != State::kConnected) return FailedPrecondition("the connection is not established");
  return BrokenStatus();
}

inline Status VerbsConnection::CheckLocal(const LocalBuf& buf, const char* what) const {
  if (buf.mr != nullptr && buf.offset <= buf.mr->size() && buf.length <= buf.mr->size() - buf.offset)
      [[likely]] {
    return Status::Ok();
  }
  return BadLocal(buf, what);
}

Status VerbsConnection::CheckScatter(const ReadOp& op) const {
  for (const LocalBuf& piece : op.more) {
    if (piece.length == 0) break;
    RKV_RETURN_IF_ERROR(CheckLocal(piece, "READ destination piece"));
  }
  if (!ReadLength(op)) return InvalidArgument("READ of more than 4 GiB in its pieces");
  return Status::Ok();
}

Status VerbsConnection::BadLocal(const LocalBuf& buf, const char* what) {
  if (buf.mr == nullptr) return InvalidArgument(std::string(what) + ": no memory region");
  return InvalidArgument(std::string(what) + ": [" + std::to_string(buf.offset) + ", +" +
                         std::to_string(buf.length) + ") is outside its region of " +
                         std::to_string(buf.mr->size()) + " bytes");
}

Status VerbsConnection::WaitForSendRoom(uint32_t n) {
  if (n > send_depth_) {
    return InvalidArgument(std::to_string(n) + " work requests exceed the send queue depth " +
                           std::to_string(send_depth_));
  }
  Clock::time_point deadline{};
  while (send_depth_ - SendOutstanding() < n) {
    RKV_ASSIGN_OR_RETURN(int polled, DrainCompletions());
    if (polled > 0) continue;
    if (Broken()) return BrokenStatus();
    if (deadline == Clock::time_point{}) deadline = Clock::now() + kSendQueueWait;
    if (Clock::now() >= deadline) {
      return ResourceExhausted("send queue full: " + std::to_string(SendOutstanding()) + " of " +
                               std::to_string(send_depth_) + " work requests outstanding");
    }
    RKV_RETURN_IF_ERROR(WaitEvents(deadline));
  }
  return Status::Ok();
}

Status VerbsConnection::PostFailed(uint32_t count, const ibv_send_wr* bad, int ret, const char* what) {
  // WRs before `bad` were posted and will complete (flushed, once the QP
  // is in error); the rest were not.
  const uint32_t posted = bad == nullptr ? 0 : static_cast<uint32_t>(bad - send_wrs_.data());
  next_seq_ -= count - posted;
  failed_ = true;
  MoveQpToError();
  return VerbsError(what, ret);
}

Status VerbsConnection::PostReads(std::span<const ReadOp> ops) { return PostReadList(ops); }

inline Status VerbsConnection::PostReadList(std::span<const ReadOp> ops) {
  RKV_RETURN_IF_ERROR(CheckSendable());
  if (ops.empty()) return Status::Ok();
  for (const ReadOp& op : ops) {
    RKV_RETURN_IF_ERROR(CheckLocal(op.local, "READ destination"));
    if (op.more[0].length != 0) [[unlikely]] RKV_RETURN_IF_ERROR(CheckScatter(op));
  }
  const auto n = static_cast<uint32_t>(std::min<size_t>(ops.size(), UINT32_MAX));
  if (n != ops.size()) return InvalidArgument("too many READs in one post");
  RKV_RETURN_IF_ERROR(ReserveSend(n));
  for (uint32_t i = 0; i < n; ++i) {
    const ReadOp& op = ops[i];
    // Each READ has kMaxReadPieces scatter entries of its own.
    ibv_sge* const sges = &send_sges_[size_t{i} * kMaxReadPieces];
    sges[0].addr = reinterpret_cast<uint64_t>(op.local.mr->data() + op.local.offset);
    sges[0].length = op.local.length;
    sges[0].lkey = op.local.mr->lkey();
    int num_sge = 1;
    for (const LocalBuf& piece : op.more) {
      if (piece.length == 0) break;
      ibv_sge& sge = sges[num_sge++];
      sge.addr = reinterpret_cast<uint64_t>(piece.mr->data() + piece.offset);
      sge.length = piece.length;
      sge.lkey = piece.mr->lkey();
    }
    ibv_send_wr& wr = send_wrs_[i];
    wr = ibv_send_wr{};
    wr.opcode = IBV_WR_RDMA_READ;
    wr.sg_list = sges;
    wr.num_sge = num_sge;
    wr.wr.rdma.remote_addr = op.remote.addr;
    wr.wr.rdma.rkey = op.remote.rkey;
    SendEntry entry;
    entry.user_wr_id = op.wr_id;
    entry.op = OpType::kRead;
    entry.report_success = op.signaled;
    AddSend(i, entry, op.signaled, i + 1 == n);
  }
  return PostSendChain(n, "ibv_post_send(RDMA_READ)");
}

Status VerbsConnection::PostReadsAndWait(std::span<const ReadOp> ops, std::chrono::microseconds timeout,
                                         std::vector<Completion>* others) {
  RKV_RETURN_IF_ERROR(CheckReadsToWaitFor(ops));
  RKV_RETURN_IF_ERROR(PostReadList(ops));
  // A member's send CQ is the group's: its next entry may be another
  // member's (WaitForRead's Polls go through the group instead).
  if (pending_count_ == 0 && group_ == nullptr) {
    const uint64_t last_seq = next_seq_ - 1;
    ibv_wc wc;
    const int n = ibv_poll_cq(send_cq_->get(), 1, &wc);
    if (n == 1 && wc.wr_id == last_seq && wc.status == IBV_WC_SUCCESS) {
      retired_seq_ = last_seq + 1;  // and every WR before it: in order
      return Status::Ok();
    }
    if (n == 1) OnSendCompletion(wc);
  }
  return WaitForRead(ops.back().wr_id, timeout, others);
}

Status VerbsConnection::PostWriteSend(LocalBuf write_src, RemoteBuf write_dst, LocalBuf send,
                                      uint64_t wr_id) {
  const WriteSendOp op{write_src, write_dst, send, wr_id, /*signaled=*/true};
  return PostWriteSends(std::span<const WriteSendOp>(&op, 1));
}

Status VerbsConnection::PostWriteSends(std::span<const WriteSendOp> ops) {
  RKV_RETURN_IF_ERROR(CheckSendable());
  if (ops.empty()) return Status::Ok();
  if (ops.size() > kMaxWriteSendsPerPost) {
    return InvalidArgument(std::to_string(ops.size()) + " WRITE+SEND pairs in one post (at most " +
                           std::to_string(kMaxWriteSendsPerPost) + ")");
  }
  for (const WriteSendOp& op : ops) {
    RKV_RETURN_IF_ERROR(CheckLocal(op.write_src, "WRITE source"));
    RKV_RETURN_IF_ERROR(CheckLocal(op.send, "SEND source"));
  }
  const auto n = static_cast<uint32_t>(ops.size()) * kWrsPerWriteSend;
  RKV_RETURN_IF_ERROR(ReserveSend(n));  // INVALID_ARGUMENT past the queue depth
  for (uint32_t i = 0; i < ops.size(); ++i) {
    const WriteSendOp& op = ops[i];
    AddWriteOf(2 * i, op.write_src, op.write_dst, op.wr_id);
    AddSendOf(2 * i + 1, op.send, op.wr_id, op.signaled, /*last=*/2 * i + 2 == n);
  }
  return PostSendChain(n, "ibv_post_send(RDMA_WRITE+SEND)");
}

void VerbsConnection::AddWriteOf(uint32_t index, LocalBuf src, RemoteBuf dst, uint64_t wr_id) {
  ibv_sge& sge = send_sges_[index];
  sge.addr = reinterpret_cast<uint64_t>(src.mr->data() + src.offset);
  sge.length = src.length;
  sge.lkey = src.mr->lkey();
  ibv_send_wr& wr = send_wrs_[index];
  wr = ibv_send_wr{};
  wr.opcode = IBV_WR_RDMA_WRITE;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.wr.rdma.remote_addr = dst.addr;
  wr.wr.rdma.rkey = dst.rkey;
  SendEntry entry;
  entry.user_wr_id = wr_id;
  entry.op = OpType::kWrite;
  AddSend(index, entry, /*want_signal=*/false, /*last=*/false);
}

void VerbsConnection::AddSendOf(uint32_t index, LocalBuf send, uint64_t wr_id, bool signaled, bool last) {
  ibv_sge& sge = send_sges_[index];
  sge.addr = reinterpret_cast<uint64_t>(send.mr->data() + send.offset);
  sge.length = send.length;
  sge.lkey = send.mr->lkey();
  ibv_send_wr& wr = send_wrs_[index];
  wr = ibv_send_wr{};
  wr.opcode = IBV_WR_SEND;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  // Inline only what the QP said it can carry (max_inline_data, read back
  // after creation); the buffer may be reused as soon as the post returns.
  if (send.length <= max_inline_) wr.send_flags |= IBV_SEND_INLINE;
  SendEntry entry;
  entry.user_wr_id = wr_id;
  entry.op = OpType::kSend;
  entry.report_success = signaled;
  AddSend(index, entry, /*want_signal=*/signaled, last);
}

Status VerbsConnection::PostSend(LocalBuf send, uint64_t wr_id) {
  RKV_RETURN_IF_ERROR(CheckSendable());
  RKV_RETURN_IF_ERROR(CheckLocal(send, "SEND source"));
  RKV_RETURN_IF_ERROR(ReserveSend(1));
  AddSendOf(0, send, wr_id, /*signaled=*/true, /*last=*/true);
  return PostSendChain(1, "ibv_post_send(SEND)");
}

Status VerbsConnection::PostProbe(uint64_t wr_id) {
  RKV_RETURN_IF_ERROR(CheckSendable());
  RKV_RETURN_IF_ERROR(ReserveSend(1));
  // No scatter entry, no address, no rkey: the responder checks nothing of
  // a zero-length READ (IB C9-88) and answers it from its RC state alone.
  ibv_send_wr& wr = send_wrs_[0];
  wr = ibv_send_wr{};
  wr.opcode = IBV_WR_RDMA_READ;
  wr.sg_list = nullptr;
  wr.num_sge = 0;
  SendEntry entry;
  entry.user_wr_id = wr_id;
  entry.op = OpType::kRead;
  entry.report_success = true;
  AddSend(0, entry, /*want_signal=*/true, /*last=*/true);
  return PostSendChain(1, "ibv_post_send(zero-length RDMA_READ probe)");
}

Status VerbsConnection::PostRecv(LocalBuf buf, uint64_t wr_id) {
  if (state_ != State::kPending && state_ != State::kConnected) {
    return FailedPrecondition("PostRecv on a connection that is neither pending nor established");
  }
  if (Broken()) return BrokenStatus();
  RKV_RETURN_IF_ERROR(CheckLocal(buf, "receive buffer"));
  if (recv_outstanding_ >= recv_depth_) {
    return ResourceExhausted("receive queue full: " + std::to_string(recv_outstanding_) +
                             " receives posted");
  }
  ibv_sge sge{};
  sge.addr = reinterpret_cast<uint64_t>(buf.mr->data() + buf.offset);
  sge.length = buf.length;
  sge.lkey = buf.mr->lkey();
  ibv_recv_wr wr{};
  wr.wr_id = wr_id;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  ibv_recv_wr* bad = nullptr;
  if (const int ret = ibv_post_recv(qp_.get(), &wr, &bad); ret != 0) {
    return VerbsError("ibv_post_recv", ret);
  }
  ++recv_outstanding_;
  return Status::Ok();
}

// ------------------------------------------------------------------ completions

void VerbsConnection::OnSendCompletion(const ibv_wc& wc) {
  const uint64_t seq = wc.wr_id;
  if (seq < retired_seq_ || seq >= next_seq_) {
    LOG(ERROR) << "send completion for unknown sequence " << seq << " on " << peer_address_;
    return;
  }
  const SendEntry& entry = send_ring_[seq & (send_ring_.size() - 1)];
  Status status = WcStatus(wc, close_status_);
  if (!status.ok()) {
    // The QP is in the error state now; every later WR flushes.
    failed_ = true;
    qp_in_error_ = true;
  }
  if (entry.internal) {
    if (!status.ok()) bind_status_ = status;
  } else if (!status.ok() || entry.report_success) {
    Completion c;
    c.wr_id = entry.user_wr_id;
    c.op = entry.op;
    c.status = std::move(status);
    PushPending(std::move(c));
  }
  // An RC send queue completes in order: every WR up to `seq` is done.
  retired_seq_ = seq + 1;
}

void VerbsConnection::OnRecvCompletion(const ibv_wc& wc) {
  if (recv_outstanding_ > 0) --recv_outstanding_;
  Completion c;
  c.wr_id = wc.wr_id;
  c.op = OpType::kRecv;
  c.status = WcStatus(wc, close_status_);
  if (c.status.ok()) {
    c.byte_len = wc.byte_len;
  } else {
    failed_ = true;
    qp_in_error_ = true;
  }
  PushPending(std::move(c));
}

StatusOr<int> VerbsConnection::DrainCompletions() {
  if (group_ != nullptr) return group_->Drain();
  return DrainCqs();
}

StatusOr<int> VerbsConnection::DrainCqs() {
  ibv_wc wcs[kPollBatch];
  int total = 0;
  for (const bool send : {true, false}) {
    ibv_cq* cq = send ? send_cq_->get() : recv_cq_->get();
    while (true) {
      const int n = ibv_poll_cq(cq, kPollBatch, wcs);
      if (n < 0) return Internal("ibv_poll_cq failed (" + std::to_string(n) + ")");
      for (int i = 0; i < n; ++i) {
        if (send) {
          OnSendCompletion(wcs[i]);
        } else {
          OnRecvCompletion(wcs[i]);
        }
      }
      total += n;
      if (n < kPollBatch) break;
    }
  }
  return total;
}

Status VerbsConnection::WaitEvents(Clock::time_point deadline) {
  if (group_ != nullptr) {
    RKV_RETURN_IF_ERROR(group_->Sleep(deadline, channel_->fd()));
    return HandleCmEvents();
  }
  for (ibv_cq* cq : {send_cq_->get(), recv_cq_->get()}) {
    if (const int ret = ibv_req_notify_cq(cq, 0); ret != 0) {
      return VerbsError("ibv_req_notify_cq", ret);
    }
  }
  // A completion that arrived before the CQ was armed raises no event:
  // look once more before sleeping.
  RKV_ASSIGN_OR_RETURN(int polled, DrainCqs());
  if (polled > 0) return Status::Ok();
  const auto now = Clock::now();
  const auto left =
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::max(deadline - now, Clock::duration::zero()));
  timespec ts{};
  ts.tv_sec = static_cast<time_t>(left.count() / 1'000'000'000);
  ts.tv_nsec = static_cast<long>(left.count() % 1'000'000'000);
  pollfd fds[2] = {{comp_channel_->fd(), POLLIN, 0}, {channel_->fd(), POLLIN, 0}};
  if (ppoll(fds, 2, &ts, nullptr) < 0 && errno != EINTR) {
    return VerbsError("ppoll(completion channel)", errno);
  }
  if ((fds[0].revents & POLLIN) != 0) {
    ibv_cq* cq = nullptr;
    void* context = nullptr;
    // The fd is non-blocking: read every queued event, ack each at once
    // (ibv_destroy_cq waits for unacked events).
    while (ibv_get_cq_event(comp_channel_->get(), &cq, &context) == 0) {
      ibv_ack_cq_events(cq, 1);
    }
  }
  if ((fds[1].revents & POLLIN) != 0) RKV_RETURN_IF_ERROR(HandleCmEvents());
  return Status::Ok();
}

void VerbsConnection::PushPending(Completion c) {
  if (pending_count_ == pending_.size()) {
    // Full: double, keeping the order (oldest first). Rare: only a caller
    // that posts without polling gets here.
    std::vector<Completion> bigger(std::max<size_t>(2 * pending_.size(), 8));
    for (size_t i = 0; i < pending_count_; ++i) {
      bigger[i] = std::move(pending_[(pending_head_ + i) & (pending_.size() - 1)]);
    }
    pending_ = std::move(bigger);
    pending_head_ = 0;
  }
  pending_[(pending_head_ + pending_count_) & (pending_.size() - 1)] = std::move(c);
  ++pending_count_;
}

size_t VerbsConnection::TakePending(std::span<Completion> out) {
  const size_t n = std::min(out.size(), pending_count_);
  for (size_t i = 0; i < n; ++i) {
    out[i] = std::move(pending_[pending_head_]);
    pending_head_ = (pending_head_ + 1) & (pending_.size() - 1);
  }
  pending_count_ -= n;
  return n;
}

Status VerbsConnection::Spin(Clock::time_point until) {
  uint32_t rounds = 0;
  while (pending_count_ == 0) {
    RKV_ASSIGN_OR_RETURN(int polled, DrainCqs());
    if (polled > 0) continue;  // e.g. only internal completions: go on
    if (++rounds % kSpinRoundsPerYield == 0) {
      if (Clock::now() >= until) break;
      // Lets another runnable thread on this CPU go first (on a loopback
      // device that may be the peer whose reply this Poll waits for).
      sched_yield();
    }
  }
  return Status::Ok();
}

void VerbsConnection::AdaptSpin(Clock::duration waited) {
  spin_window_ = NextSpinWindow(spin_window_, waited, config_.max_spin);
}

StatusOr<size_t> VerbsConnection::PollMember(std::span<Completion> out) {
  if (group_cm_readable_) {
    // Cleared before reading, so that an event arriving meanwhile marks it
    // again (epoll reports a readable channel on every Wait).
    group_cm_readable_ = false;
    RKV_RETURN_IF_ERROR(HandleCmEvents());
  }
  if (pending_count_ == 0) RKV_RETURN_IF_ERROR(group_->Drain().status());
  if (pending_count_ > 0) return TakePending(out);
  // As a standalone Poll whose wait ran out: flushes not yet in the CQ are
  // not waited for.
  if (Broken()) return BrokenStatus();
  return size_t{0};
}

bool VerbsConnection::GroupReady() const { return pending_count_ > 0 || Broken() || group_cm_readable_; }

StatusOr<size_t> VerbsConnection::Poll(std::span<Completion> out,
                                       std::chrono::microseconds timeout) {
  if (out.empty()) return size_t{0};
  if (state_ == State::kRejected || state_ == State::kClosed || qp_.get() == nullptr) {
    return FailedPrecondition("Poll on a connection that was rejected or never established");
  }
  if (group_ != nullptr) return PollMember(out);
  // Fast path: what is queued or already in the CQs, no clock, no syscall.
  if (pending_count_ == 0) RKV_RETURN_IF_ERROR(DrainCqs().status());
  if (pending_count_ > 0) return TakePending(out);

  const auto start = Clock::now();
  const auto deadline = start + timeout;
  if (!Broken() && spin_window_ > Clock::duration::zero() && timeout.count() > 0) {
    RKV_RETURN_IF_ERROR(Spin(std::min(deadline, start + spin_window_)));
    // Caught while spinning: the window is right, nothing to adapt (and no
    // clock read: under emulation each costs about a microsecond).
    if (pending_count_ > 0) return TakePending(out);
  }
  while (true) {
    // Disconnects arrive as cm events; they are read here, off the fast
    // path: a connection whose peer went away stops completing, so its
    // next Poll that finds nothing ready gets here.
    RKV_RETURN_IF_ERROR(HandleCmEvents());
    RKV_RETURN_IF_ERROR(DrainCqs().status());
    if (pending_count_ > 0) break;
    if (Broken() && SendOutstanding() == 0 && recv_outstanding_ == 0) return BrokenStatus();
    if (Clock::now() >= deadline) {
      // Nothing came: that says something only when the wait outlasted
      // any spin (then spin less).
      if (timeout > config_.max_spin) AdaptSpin(Clock::now() - start);
      if (Broken()) return BrokenStatus();
      return size_t{0};
    }
    RKV_RETURN_IF_ERROR(WaitEvents(deadline));
    if (pending_count_ > 0) break;
  }
  AdaptSpin(Clock::now() - start);
  return TakePending(out);
}

}  // namespace rkv::transport::verbs
