// TcpConnection: setup, the application thread's side (posting and
// polling), the error state and the outgoing byte queue. The reader
// thread's side is in tcp_connection_reader.cc.
#include "common/transport/tcp/tcp_connection.h"

#include <glog/logging.h>
#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <utility>

#include "common/transport/spin_window.h"
#include "common/transport/tcp/region_registry.h"
#include "common/transport/tcp/shared_copy.h"
#include "common/transport/tcp/tcp_poll_group.h"

namespace rkv::transport::tcp {
namespace {

std::atomic<uint64_t> g_next_connection_id{1};

}  // namespace

TcpConnection::TcpConnection(std::shared_ptr<Registry> registry, const Options& options, UniqueFd fd,
                             UniqueFd wake_fd, std::vector<uint8_t> peer_private_data, ByteBuffer rx,
                             bool established, TcpPollGroup* group, std::unique_ptr<TlsSession> tls)
    : registry_(std::move(registry)),
      id_(g_next_connection_id.fetch_add(1, std::memory_order_relaxed)),
      fd_(std::move(fd)),
      io_(fd_.get(), std::move(tls)),
      wake_fd_(std::move(wake_fd)),
      peer_address_(PeerName(fd_.get())),
      peer_private_data_(std::move(peer_private_data)),
      max_send_wr_(std::clamp<uint32_t>(options.max_send_wr, 1, kMaxQueueDepth)),
      max_recv_wr_(std::clamp<uint32_t>(options.max_recv_wr, 1, kMaxQueueDepth)),
      idle_timeout_(established ? std::chrono::milliseconds(0) : std::max(options.idle_timeout, {})),
      frame_timeout_(established ? std::chrono::milliseconds(0) : std::max(options.frame_timeout, {})),
      group_(established ? nullptr : group),
      state_(established ? State::kActive : State::kPending),
      max_spin_(std::clamp(options.poll_spin_us, 0, kMaxPollSpinUs)),
      spin_window_us_(max_spin_.count()),
      rx_(std::move(rx)) {}

TcpConnection::~TcpConnection() {
  // Out of the group before the socket closes: epoll_ctl(DEL) needs the
  // descriptor open, and no later event may name this member's record.
  if (member_ != nullptr) TcpPollGroup::Leave(member_);
  LingerIfRefused();
  stop_.store(true, std::memory_order_release);
  ::shutdown(fd_.get(), SHUT_RDWR);
  SignalEventFd(wake_fd_.get());
  if (reader_.joinable()) reader_.join();
}

void TcpConnection::Start() { reader_ = std::thread([this] { ReaderLoop(); }); }

StatusOr<MemoryRegion*> TcpConnection::RegisterPrivate(void* addr, size_t length, uint32_t access) {
  if (state_.load(std::memory_order_acquire) != State::kPending) {
    return FailedPrecondition("RegisterPrivate is only for a pending connection");
  }
  RKV_ASSIGN_OR_RETURN(std::unique_ptr<MemoryRegion> mr, RegisterRegion(registry_, addr, length, access, id_));
  private_regions_.push_back(std::move(mr));
  return private_regions_.back().get();
}

Status TcpConnection::Accept(std::span<const uint8_t> reply) {
  if (reply.size() > kMaxAcceptData) {
    return InvalidArgument("accept data of " + std::to_string(reply.size()) + " bytes exceeds " +
                           std::to_string(kMaxAcceptData));
  }
  if (state_.load(std::memory_order_acquire) != State::kPending) {
    return FailedPrecondition("connection is not pending");
  }
  {
    MutexLock lock(mu_);
    if (failed_) return error_;
  }
  FrameHeader h = MakeHeader(FrameType::kAccept, 0);
  h.payload_len = static_cast<uint32_t>(reply.size());
  Status sent;
  {
    MutexLock lock(out_mu_);
    out_.Append(&h, kHeaderBytes);
    out_.Append(reply.data(), reply.size());
    sent = FlushLocked();
  }
  if (!sent.ok()) {
    Break(sent.message());
    return sent;
  }
  // What did not fit the socket buffer is sent by the reader, or the group.
  state_.store(State::kActive, std::memory_order_release);
  if (group_ != nullptr) {
    group_->Join(this);
  } else {
    Start();
  }
  return Status::Ok();
}

void TcpConnection::Reject(const Rejection& why) {
  if (state_.load(std::memory_order_acquire) != State::kPending) return;
  state_.store(State::kClosed, std::memory_order_release);
  const std::vector<uint8_t> encoded = EncodeRejection(why);
  const std::span<const uint8_t> reply(encoded);
  static_assert(kMaxRejectionBytes <= kMaxRejectData);
  std::vector<uint8_t> frame(kHeaderBytes + reply.size());
  FrameHeader h = MakeHeader(FrameType::kReject, 0);
  h.payload_len = static_cast<uint32_t>(reply.size());
  std::memcpy(frame.data(), &h, kHeaderBytes);
  if (!reply.empty()) std::memcpy(frame.data() + kHeaderBytes, reply.data(), reply.size());
  const Status sent =
      SendAllBy(io_, frame.data(), frame.size(), DeadlineAfter(std::chrono::seconds(1)), peer_address_);
  if (!sent.ok()) LOG(WARNING) << "tcp transport: rejecting " << peer_address_ << ": " << sent;
  // SHUT_WR, not close: the reject reaches the peer before the EOF.
  io_.ShutdownWrite();
  Fail("connection rejected");
}

Status TcpConnection::PostReads(std::span<const ReadOp> ops) {
  if (ops.empty()) return Status::Ok();
  read_wrs_.clear();
  for (const ReadOp& op : ops) {
    RKV_ASSIGN_OR_RETURN(uint8_t* dst, ResolveLocal(op.local, /*needs_local_write=*/true, "READ destination"));
    const std::optional<uint32_t> length = ReadLength(op);
    if (!length) return InvalidArgument("READ of more than 4 GiB in its pieces");
    SendWr& wr = read_wrs_.emplace_back(SendWr{0, op.wr_id, OpType::kRead, op.signaled, dst, *length});
    for (size_t p = 0; p < op.more.size() && op.more[p].length != 0; ++p) {
      RKV_ASSIGN_OR_RETURN(wr.more_dst[p],
                           ResolveLocal(op.more[p], /*needs_local_write=*/true, "READ destination piece"));
      wr.more_len[p] = op.more[p].length;
    }
  }
  uint64_t first_seq = 0;
  {
    MutexLock lock(mu_);
    RKV_RETURN_IF_ERROR(CheckPostableLocked(ops.size()));
    first_seq = next_seq_;
    next_seq_ += ops.size();
    for (size_t i = 0; i < ops.size(); ++i) {
      read_wrs_[i].seq = first_seq + i;
      send_queue_.push_back(read_wrs_[i]);
    }
  }
  // One send for the whole chain: the peer serves it in one batch.
  SendFrames([&](ByteBuffer& out) {
    for (size_t i = 0; i < ops.size(); ++i) {
      FrameHeader h = MakeHeader(FrameType::kReadReq, first_seq + i);
      h.addr = ops[i].remote.addr;
      h.rkey = ops[i].remote.rkey;
      h.op_len = read_wrs_[i].length;
      out.Append(&h, kHeaderBytes);
    }
  });
  return Status::Ok();
}

Status TcpConnection::PostWriteSend(LocalBuf write_src, RemoteBuf write_dst, LocalBuf send, uint64_t wr_id) {
  const WriteSendOp op{write_src, write_dst, send, wr_id, /*signaled=*/true};
  return PostWriteSends(std::span<const WriteSendOp>(&op, 1));
}

Status TcpConnection::PostWriteSends(std::span<const WriteSendOp> ops) {
  if (ops.empty()) return Status::Ok();
  if (ops.size() > kMaxWriteSendsPerPost) {
    return InvalidArgument(std::to_string(ops.size()) + " WRITE+SEND pairs in one post (at most " +
                           std::to_string(kMaxWriteSendsPerPost) + ")");
  }
  // Resolved before anything is queued: a bad buffer posts nothing.
  std::array<const uint8_t*, 2 * kMaxWriteSendsPerPost> src;
  // A WRITE source that peers may READ (a server's heap block, sent to a
  // client's lookup) is memory its owner's other threads store to as well
  // (a block's superseded mark): copied as a served READ is, word by word.
  std::array<bool, kMaxWriteSendsPerPost> shared{};
  for (size_t i = 0; i < ops.size(); ++i) {
    RKV_ASSIGN_OR_RETURN(src[2 * i], ResolveLocal(ops[i].write_src, false, "WRITE source"));
    RKV_ASSIGN_OR_RETURN(src[2 * i + 1], ResolveLocal(ops[i].send, false, "SEND buffer"));
    // ResolveLocal checked the region is the tcp transport's.
    shared[i] = (static_cast<const TcpMemoryRegion*>(ops[i].write_src.mr)->access() & kRemoteRead) != 0;
  }
  uint64_t seq = 0;
  {
    MutexLock lock(mu_);
    RKV_RETURN_IF_ERROR(CheckPostableLocked(2 * ops.size()));
    seq = next_seq_;
    next_seq_ += 2 * ops.size();
    for (size_t i = 0; i < ops.size(); ++i) {
      // Both carry the caller's wr_id: a failed WRITE reports it too.
      const WriteSendOp& op = ops[i];
      send_queue_.push_back(SendWr{seq + 2 * i, op.wr_id, OpType::kWrite, false, nullptr, op.write_src.length});
      send_queue_.push_back(SendWr{seq + 2 * i + 1, op.wr_id, OpType::kSend, op.signaled, nullptr, op.send.length});
    }
  }
  // One send for the whole list: the peer serves it in one batch.
  SendFrames([&](ByteBuffer& out) {
    for (size_t i = 0; i < ops.size(); ++i) {
      const WriteSendOp& op = ops[i];
      FrameHeader w = MakeHeader(FrameType::kWrite, seq + 2 * i);
      w.addr = op.write_dst.addr;
      w.rkey = op.write_dst.rkey;
      w.payload_len = op.write_src.length;
      out.Append(&w, kHeaderBytes);
      if (shared[i]) {
        CopyFromShared(out.Append(op.write_src.length), src[2 * i], op.write_src.length);
      } else {
        out.Append(src[2 * i], op.write_src.length);
      }
      FrameHeader s = MakeHeader(FrameType::kSend, seq + 2 * i + 1);
      s.payload_len = op.send.length;
      out.Append(&s, kHeaderBytes);
      out.Append(src[2 * i + 1], op.send.length);
    }
  });
  return Status::Ok();
}

Status TcpConnection::PostSend(LocalBuf send, uint64_t wr_id) {
  RKV_ASSIGN_OR_RETURN(const uint8_t* msg, ResolveLocal(send, false, "SEND buffer"));
  uint64_t seq = 0;
  {
    MutexLock lock(mu_);
    RKV_RETURN_IF_ERROR(CheckPostableLocked(1));
    seq = next_seq_++;
    send_queue_.push_back(SendWr{seq, wr_id, OpType::kSend, true, nullptr, send.length});
  }
  SendFrames([&](ByteBuffer& out) {
    FrameHeader s = MakeHeader(FrameType::kSend, seq);
    s.payload_len = send.length;
    out.Append(&s, kHeaderBytes);
    out.Append(msg, send.length);
  });
  return Status::Ok();
}

Status TcpConnection::PostProbe(uint64_t wr_id) {
  uint64_t seq = 0;
  {
    MutexLock lock(mu_);
    RKV_RETURN_IF_ERROR(CheckPostableLocked(1));
    seq = next_seq_++;
    send_queue_.push_back(SendWr{seq, wr_id, OpType::kRead, true, nullptr, 0});
  }
  SendFrames([&](ByteBuffer& out) {
    const FrameHeader h = MakeHeader(FrameType::kReadReq, seq);
    out.Append(&h, kHeaderBytes);
  });
  return Status::Ok();
}

Status TcpConnection::PostRecv(LocalBuf buf, uint64_t wr_id) {
  RKV_ASSIGN_OR_RETURN(uint8_t* dst, ResolveLocal(buf, /*needs_local_write=*/true, "receive buffer"));
  bool broke = false;
  {
    MutexLock lock(mu_);
    if (failed_) return error_;
    largest_recv_ = std::max(largest_recv_, buf.length);
    if (!unmatched_sends_.empty()) {
      // A SEND that arrived before any receive was posted.
      std::vector<uint8_t> msg = std::move(unmatched_sends_.front());
      unmatched_sends_.pop_front();
      unmatched_bytes_ -= msg.size();
      if (msg.size() > buf.length) {
        completions_.push_back(Completion{wr_id, OpType::kRecv, TooLong(msg.size(), buf.length), 0});
        FailLocked("a received message did not fit its receive buffer");
        broke = true;
      } else {
        if (!msg.empty()) std::memcpy(dst, msg.data(), msg.size());
        completions_.push_back(Completion{wr_id, OpType::kRecv, Status::Ok(), static_cast<uint32_t>(msg.size())});
        NotifyPollersLocked();
      }
    } else {
      if (recv_queue_.size() >= max_recv_wr_) {
        return ResourceExhausted("receive queue full (" + std::to_string(max_recv_wr_) + ")");
      }
      recv_queue_.push_back(RecvWr{wr_id, dst, buf.length});
    }
  }
  if (broke) ::shutdown(fd_.get(), SHUT_RDWR);
  return Status::Ok();
}

void TcpConnection::NotifyPollersLocked() {
  const bool ready = !completions_.empty() || failed_;
  ready_.store(ready, std::memory_order_release);
  if (group_ != nullptr) {
    // A member's completions come on the group's thread (its Wait, or a
    // call on the member), the only thread that touches member_ after Join.
    if (ready && member_ != nullptr) TcpPollGroup::NoteReady(member_);
    return;
  }
  cv_.NotifyAll();
}

Status TcpConnection::PostReadsAndWait(std::span<const ReadOp> ops, std::chrono::microseconds timeout,
                                       std::vector<Completion>* others) {
  if (group_ != nullptr) {
    return FailedPrecondition("PostReadsAndWait on a connection of a poll group: post the READs and wait "
                              "through the group");
  }
  return Connection::PostReadsAndWait(ops, timeout, others);
}

StatusOr<size_t> TcpConnection::Poll(std::span<Completion> out, std::chrono::microseconds timeout) {
  // A group member's Poll never waits: the group's Wait collects its
  // completions, on this same thread.
  if (group_ != nullptr) timeout = std::chrono::microseconds(0);
  const std::chrono::microseconds asked = timeout;
  Clock::time_point start{};
  bool slept = false;
  if (group_ == nullptr && !out.empty() && timeout.count() > 0 && !ready_.load(std::memory_order_acquire) &&
      state_.load(std::memory_order_acquire) == State::kActive && !reader_done_.load(std::memory_order_acquire)) {
    // Wait by serving the socket here: this thread reads its completions
    // itself, and takes what it queued below without waiting.
    start = Clock::now();
    slept = ServeWhilePolling(timeout);
    timeout = std::chrono::microseconds(0);
  }
  // Not served here (a connection not active, or already failed): what
  // completes comes from elsewhere, and the wait below sleeps for it.
  MutexLock lock(mu_);
  if (out.empty()) return failed_ && completions_.empty() ? StatusOr<size_t>(error_) : StatusOr<size_t>(0);
  if (completions_.empty() && !failed_ && timeout.count() > 0) {
    // The reader pushes completions under mu_ and then notifies: waking
    // here with the lock held sees everything it copied (READ data,
    // received messages, remote WRITEs that preceded a SEND).
    if (start == Clock::time_point{}) start = Clock::now();
    const Clock::time_point deadline = DeadlineAfter(timeout);
    slept = true;
    while (completions_.empty() && !failed_) {
      if (!cv_.WaitUntil(mu_, deadline)) break;
    }
  }
  size_t n = 0;
  while (n < out.size() && !completions_.empty()) {
    out[n++] = std::move(completions_.front());
    completions_.pop_front();
  }
  ready_.store(!completions_.empty() || failed_, std::memory_order_release);
  if (slept && max_spin_.count() > 0 && !spin_cooldown_.Active(Clock::now())) {
    // Adapt the window to a wait that outlasted it (nothing to learn from
    // one that ended within it, or from a timeout no longer than any spin;
    // none while spinning cools down).
    if (n > 0 || asked > max_spin_) {
      const auto window = NextSpinWindow(std::chrono::microseconds(spin_window_us_.load(std::memory_order_relaxed)),
                                         Clock::now() - start, max_spin_);
      spin_window_us_.store(std::chrono::duration_cast<std::chrono::microseconds>(window).count(),
                            std::memory_order_relaxed);
    }
  }
  if (n == 0 && failed_ && completions_.empty()) return error_;
  return n;
}

void TcpConnection::Disconnect() {
  LingerIfRefused();
  Fail("disconnected locally");
  stop_.store(true, std::memory_order_release);
  ::shutdown(fd_.get(), SHUT_RDWR);
  SignalEventFd(wake_fd_.get());
}

Status TcpConnection::TooLong(size_t got, size_t room) {
  return Internal("received message of " + std::to_string(got) + " bytes exceeds the receive buffer of " +
                  std::to_string(room) + " bytes");
}

Status TcpConnection::CheckPostableLocked(size_t n) const {
  if (failed_) return error_;
  if (state_.load(std::memory_order_acquire) != State::kActive) {
    return FailedPrecondition("connection to " + peer_address_ + " is not established");
  }
  if (send_queue_.size() + n > max_send_wr_) {
    return ResourceExhausted("send queue full (" + std::to_string(max_send_wr_) + " outstanding)");
  }
  return Status::Ok();
}

void TcpConnection::FailLocked(const std::string& why) {
  if (failed_) return;
  failed_ = true;
  error_ = Unavailable("connection to " + peer_address_ + " failed: " + why);
  for (const SendWr& wr : send_queue_) {
    completions_.push_back(Completion{wr.wr_id, wr.op, Unavailable("flushed: " + why), 0});
  }
  send_queue_.clear();
  for (const RecvWr& wr : recv_queue_) {
    completions_.push_back(Completion{wr.wr_id, OpType::kRecv, Unavailable("flushed: " + why), 0});
  }
  recv_queue_.clear();
  unmatched_sends_.clear();
  unmatched_bytes_ = 0;
  NotifyPollersLocked();
}

void TcpConnection::Fail(const std::string& why) {
  MutexLock lock(mu_);
  FailLocked(why);
}

void TcpConnection::Break(const std::string& why) {
  Fail(why);
  ::shutdown(fd_.get(), SHUT_RDWR);
}

void TcpConnection::LingerIfRefused() {
  if (!lingering_.load(std::memory_order_acquire)) return;
  const auto until = std::chrono::steady_clock::now() + kLingerOnError;
  if (group_ != nullptr) {
    // No reader thread: serve the socket here (this is the group's thread,
    // outside Wait) until the peer closes, or the linger ends.
    if (state_.load(std::memory_order_acquire) == State::kActive && !reader_done_.load(std::memory_order_acquire)) {
      ServeOnThisThread(until, /*begin=*/false);
      reader_done_.store(true, std::memory_order_release);
    }
    return;
  }
  while (!reader_done_.load(std::memory_order_acquire) && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

Status TcpConnection::FlushLocked() {
  while (!out_.empty()) {
    const ssize_t r = io_.Send(out_.head(), out_.size());
    if (r > 0) {
      out_.Consume(static_cast<size_t>(r));
      sent_total_ += static_cast<uint64_t>(r);
      while (!read_ends_.empty() && read_ends_.front() <= sent_total_) read_ends_.pop_front();
      continue;
    }
    if (r < 0 && errno == EINTR) continue;
    if (r == 0 || errno == EAGAIN || errno == EWOULDBLOCK) {
      // The rest waits for the peer. What the kernel takes from here on is
      // no sign that the peer reads; what the peer acknowledges is.
      if (frame_timeout_.count() > 0 && !out_stall_.running()) out_stall_.Start(Clock::now(), PeerAckedLocked());
      return Status::Ok();
    }
    return io_.Error("send to " + peer_address_, errno);
  }
  out_.TrimIfIdle(kIdleBufferKeep);
  // Stalled from the next wait on, not from the last byte sent.
  out_stall_.Stop();
  return Status::Ok();
}

uint64_t TcpConnection::PeerAckedLocked() const {
  const StatusOr<size_t> unacked = UnacknowledgedBytes(fd_.get());
  // A socket that cannot tell counts as a peer that took nothing. Modulo
  // 2^64 (the setup frames are not in sent_total_): only changes matter.
  return unacked.ok() ? sent_total_ - *unacked : out_stall_.acked();
}

template <typename Fill>
void TcpConnection::SendFrames(Fill&& fill) {
  Status sent;
  bool leftover = false;
  // A member posting on the group's thread while the group holds sends:
  // the frames wait in out_ for the group's ReleaseSends.
  const bool held = member_ != nullptr && group_->holding();
  {
    MutexLock lock(out_mu_);
    if (out_closed_) return;
    if (out_streaming_) {
      // The reader moves them to out_ after the READ response it streams.
      fill(deferred_);
      return;
    }
    fill(out_);
    if (held) {
      group_->DeferFlush(member_);
      return;
    }
    sent = FlushLocked();
    leftover = !out_.empty();
  }
  if (!sent.ok()) {
    // The work requests are queued: they complete with the error.
    Break(sent.message());
  } else if (leftover) {
    SignalEventFd(wake_fd_.get());
  }
}

TcpConnection::Backlog TcpConnection::OutBacklog() {
  MutexLock lock(out_mu_);
  if (out_closed_) return Backlog{0, 0};
  return Backlog{out_.size(), read_ends_.size()};
}

void TcpConnection::AppendResponse(FrameType type, uint64_t seq, StatusCode code, std::string_view text) {
  text = text.substr(0, kMaxErrorText);
  FrameHeader h = MakeHeader(type, seq);
  h.status = static_cast<int32_t>(code);
  h.payload_len = static_cast<uint32_t>(text.size());
  MutexLock lock(out_mu_);
  if (out_closed_) return;
  out_.Append(&h, kHeaderBytes);
  out_.Append(text.data(), text.size());
}

}  // namespace rkv::transport::tcp
