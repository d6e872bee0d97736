// TcpConnection's serving side: it reads the peer's frames, serves its
// READs, WRITEs and SENDs (the target side of the emulated queue pair),
// completes local work requests from the peer's responses, and sends what
// the application thread left in the outgoing queue; on the connection's
// reader thread, or on its group's thread (tcp_poll_group.cc), which calls
// ServeStep. Setup and the application thread's side are in
// tcp_connection.cc.
#include <glog/logging.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <string>

#include "common/clock.h"
#include "common/transport/spin_window.h"
#include "common/transport/tcp/shared_copy.h"
#include "common/transport/tcp/tcp_connection.h"

namespace rkv::transport::tcp {
namespace {

// Printable text of untrusted bytes: stops at the first NUL, replaces
// anything unprintable.
std::string PrintableText(const uint8_t* p, size_t n) {
  std::string out;
  for (size_t i = 0; i < n && p[i] != 0; ++i) {
    out.push_back(p[i] >= 0x20 && p[i] < 0x7f ? static_cast<char>(p[i]) : '?');
  }
  return out;
}

}  // namespace

void TcpConnection::ReaderLoop() {
  ServeOnThisThread(Clock::time_point::max(), /*begin=*/true);
  reader_done_.store(true, std::memory_order_release);
}

void TcpConnection::ServeOnThisThread(Clock::time_point until, bool begin) {
  Status end = Status::Ok();
  if (begin) {
    MutexLock serve(serve_mu_);
    end = BeginServing();
  }
  bool readable = false;
  bool woken = false;
  // The last wait ended on the hand-back timer alone, the socket a polling
  // thread's: the step it calls for is only a look.
  bool look_only = false;
  StatusOr<Watch> watch = Watch{false, false, Clock::time_point::max()};
  while (end.ok()) {
    if (!look_only) {
      MutexLock serve(serve_mu_);
      watch = ServeStep(readable, woken);
    } else if (serve_mu_.TryLock()) {
      watch = ServeStep(readable, woken);
      serve_mu_.Unlock();
    }
    // Otherwise a thread in Poll holds serve_mu_, and serves the socket
    // itself: the reader looks again within kHandBack, with the watch of
    // its last step. Queueing behind it instead made the reader a waiter
    // on a mutex the poller takes and drops once per wait, so that nearly
    // every one of its waits paid a futex wake for the reader until the
    // reader got in (milliseconds of them, each hand-back).
    if (!watch.ok()) {
      end = watch.status();
      break;
    }
    Clock::time_point wake_at = std::min(watch->give_up, until);
    if (until != Clock::time_point::max() && Clock::now() >= until) return;
    // Stored before ReaderEvents reads poller_serves_, both sequentially
    // consistent, against ServeWhilePolling's store of poller_serves_ and
    // load of this: a poller that began after the read (so this reader
    // watches the socket) sees the flag and wakes the reader when it
    // leaves bytes behind.
    reader_watches_socket_.store(true);
    const short events = ReaderEvents(*watch);
    if ((events & POLLIN) == 0) reader_watches_socket_.store(false);
    // The socket is a polling thread's for now: look again within
    // kHandBack whether it still is.
    const bool handed_over = watch->read && (events & POLLIN) == 0;
    if (handed_over) wake_at = std::min(wake_at, Clock::now() + kHandBack);
    pollfd fds[2] = {{events != 0 ? fd_.get() : -1, events, 0}, {wake_fd_.get(), POLLIN, 0}};
    if (::poll(fds, 2, wake_at == Clock::time_point::max() ? -1 : MillisUntil(wake_at)) < 0) {
      readable = woken = false;
      if (errno == EINTR) continue;
      end = PosixError("poll", errno);
      break;
    }
    if ((fds[0].revents & POLLNVAL) != 0) {
      end = Internal("socket closed under the reader");
      break;
    }
    woken = (fds[1].revents & POLLIN) != 0;
    readable = (fds[0].revents & (POLLIN | POLLHUP | POLLERR)) != 0;
    look_only = handed_over && fds[0].revents == 0 && fds[1].revents == 0;
    if (handed_over && !polling_.load(std::memory_order_acquire)) {
      const int64_t now_ns = SteadyNanos(Clock::now());
      const int64_t away_ns = now_ns - poll_left_at_ns_.load(std::memory_order_acquire);
      if (away_ns >= std::chrono::duration_cast<std::chrono::nanoseconds>(kHandBack).count()) {
        // Nobody polled for kHandBack: serve the socket here again, from
        // whatever came meanwhile.
        poller_serves_.store(false, std::memory_order_release);
        readable = true;
        look_only = false;
      }
    }
  }
  Break(end.message());
}

short TcpConnection::ReaderEvents(const Watch& watch) const {
  short events = 0;
  if (watch.read && !poller_serves_.load()) events |= POLLIN;
  if (watch.write) events |= POLLOUT;
  return events;
}

bool TcpConnection::ServeWhilePolling(std::chrono::microseconds timeout) {
  const Clock::time_point start = Clock::now();
  const Clock::time_point deadline = DeadlineAfter(timeout);
  // Busy polling (the largest bound) spins whatever the machine does.
  const bool busy = max_spin_.count() >= kMaxPollSpinUs;
  const auto window = !busy && spin_cooldown_.Active(start)
                          ? std::chrono::microseconds(0)
                          : std::chrono::microseconds(spin_window_us_.load(std::memory_order_relaxed));
  polling_.store(true, std::memory_order_release);
  // Sequentially consistent, as is the reader's store of
  // reader_watches_socket_ before it reads this (ServeOnThisThread).
  poller_serves_.store(true);
  bool slept = false;
  bool left_for_post = false;
  {
    MutexLock serve(serve_mu_);
    // What the last wait left for a post (ServeStep) goes now: the
    // application is waiting again without having posted.
    if (poll_flush_deferred_) {
      poll_flush_deferred_ = false;
      const Status sent = FlushFromReader();
      if (!sent.ok()) Break(sent.message());
    }
    bool spinning = window.count() > 0;
    // Without a spin the first look at the socket is the ppoll below, which
    // returns at once when the reply is already there: a read before it
    // finds nothing on most waits (the request has only just left), a
    // system call per wait for an EAGAIN. A wait that ends before any
    // ppoll still reads once (read_once).
    bool readable = spinning;
    bool read_once = false;
    bool woken = false;
    Clock::time_point last = start;
    for (;;) {
      StatusOr<Watch> watch = ServeStep(readable, woken, /*from_poll=*/true);
      if (!watch.ok()) {
        Break(watch.status().message());
        break;
      }
      read_once = read_once || readable;
      if (ready_.load(std::memory_order_acquire) || reader_done_.load(std::memory_order_acquire)) break;
      const Clock::time_point now = Clock::now();
      if (now >= deadline && read_once) break;
      readable = true;
      woken = false;
      if (now >= deadline) continue;  // the one read before giving up
      // LostCpu moves `last` on; it matters only while spinning (and busy
      // never changes), so the other rounds need not.
      if (spinning && !busy && spin_cooldown_.LostCpu(now, &last)) spinning = false;
      if (spinning && now - start < window) {
        // Spin: each step tries a non-blocking read.
        SpinPause();
        continue;
      }
      short events = watch->read ? POLLIN : 0;
      if (watch->write) events |= POLLOUT;
      pollfd fds[2] = {{fd_.get(), events, 0}, {wake_fd_.get(), POLLIN, 0}};
      const auto wait = std::max(std::chrono::nanoseconds(0), std::chrono::duration_cast<std::chrono::nanoseconds>(
                                                                   std::min(deadline, watch->give_up) - now));
      const timespec ts{static_cast<time_t>(wait.count() / 1'000'000'000), static_cast<long>(wait.count() % 1'000'000'000)};
      slept = true;
      if (::ppoll(fds, 2, &ts, nullptr) < 0) {
        readable = false;
        if (errno == EINTR) continue;
        Break(PosixError("ppoll", errno).message());
        break;
      }
      if ((fds[0].revents & POLLNVAL) != 0) {
        Break("socket closed under the poller");
        break;
      }
      woken = (fds[1].revents & POLLIN) != 0;
      readable = (fds[0].revents & (POLLIN | POLLHUP | POLLERR)) != 0;
    }
    left_for_post = poll_flush_deferred_;
  }
  poll_left_at_ns_.store(SteadyNanos(Clock::now()), std::memory_order_release);
  polling_.store(false, std::memory_order_release);
  if (left_for_post && reader_watches_socket_.load()) {
    SignalEventFd(wake_fd_.get());
  }
  return slept;
}

Status TcpConnection::BeginServing() {
  last_frame_at_ = Clock::now();
  partial_since_ = last_frame_at_;
  RKV_RETURN_IF_ERROR(ProcessFrames());
  return FlushFromReader();
}

StatusOr<TcpConnection::Watch> TcpConnection::ServeStep(bool readable, bool woken, bool from_poll) {
  if (stop_.load(std::memory_order_acquire)) return Unavailable("disconnected locally");
  if (woken) DrainEventFd(wake_fd_.get());
  const bool was_ready = ready_.load(std::memory_order_acquire);
  // Bytes a TLS session read from the socket but this side has not taken
  // leave the socket unreadable: they are read as if it were.
  if ((readable || io_.HasPending()) && !paused_) RKV_RETURN_IF_ERROR(ReadAvailable());
  // A step that gave the application completions (a request or a reply
  // came), on a thread that hands them over as soon as it returns: a group
  // member's (the group's Wait returns them) or the thread in Poll. The
  // application usually posts next (its replies, or its next request),
  // and that write carries what this step queued (the SENDs'
  // acknowledgements) in the same segment, so the peer wakes once for
  // both, not once for the acknowledgement and again for the frame after
  // it. What no post took is sent by the group's next Wait (which steps
  // the member again; that step reads nothing, so it defers nothing), by
  // the next wait in Poll, or by the reader within kHandBack.
  const bool defer_flush = (group_ != nullptr || from_poll) && !was_ready &&
                           ready_.load(std::memory_order_acquire) && !close_after_flush_;
  if (!defer_flush) RKV_RETURN_IF_ERROR(FlushFromReader());
  Backlog backlog = OutBacklog();
  for (;;) {
    const bool can_stream = streaming_.has_value() && backlog.bytes <= kOutLowWater;
    const bool can_resume =
        paused_ && !streaming_ && backlog.bytes <= kOutLowWater && backlog.reads < kMaxReadsInFlight;
    if (!can_stream && !can_resume) break;
    paused_ = false;
    RKV_RETURN_IF_ERROR(ProcessFrames());
    RKV_RETURN_IF_ERROR(FlushFromReader());
    backlog = OutBacklog();
  }
  PeerLimit limit = PeerLimit::kNone;
  // No limits (a connection we made): no clock read on the data path.
  const bool limited = frame_timeout_.count() > 0 || idle_timeout_.count() > 0;
  const Clock::time_point now = limited ? Clock::now() : Clock::time_point();
  const bool deferred = defer_flush && backlog.bytes > 0;
  // Only bytes actually left: a GET's READ response queues nothing, and
  // then neither the next wait nor the reader has anything to send.
  poll_flush_deferred_ = from_poll && deferred;
  const Watch watch{!paused_, backlog.bytes > 0 && !deferred, PeerDeadline(backlog, now, &limit), deferred};
  // Plaintext left in a TLS session (a step's read limit, a pause) is
  // served at the next step: no wait on the socket would show it.
  if (watch.read && io_.HasPending()) SignalEventFd(wake_fd_.get());
  if (limit != PeerLimit::kNone && now >= watch.give_up) {
    const std::string why = DescribePeerLimit(limit, backlog);
    LOG(WARNING) << "tcp transport: closing the connection of " << peer_address_ << ": it " << why;
    return Unavailable("peer " + peer_address_ + " " + why);
  }
  return watch;
}

Clock::time_point TcpConnection::PeerDeadline(const Backlog& backlog, Clock::time_point now, PeerLimit* limit) {
  Clock::time_point at = Clock::time_point::max();
  const auto consider = [&](Clock::time_point t, PeerLimit which) {
    if (t < at) {
      at = t;
      *limit = which;
    }
  };
  if (frame_timeout_.count() > 0) {
    if (backlog.bytes > 0) {
      MutexLock lock(out_mu_);
      const bool reached = now >= out_stall_.next_check() && out_stall_.Check(now, PeerAckedLocked());
      // Short of the limit, the next look at what the peer acknowledged
      // is a wake-up (after now), not a limit.
      if (reached) {
        consider(now, PeerLimit::kUnreadResponses);
      } else {
        consider(out_stall_.next_check(), PeerLimit::kNone);
      }
    }
    if (!paused_ && !rx_.empty()) consider(partial_since_ + frame_timeout_, PeerLimit::kIncompleteFrame);
  }
  if (idle_timeout_.count() > 0 && backlog.bytes == 0 && rx_.empty() && !streaming_) {
    consider(last_frame_at_ + idle_timeout_, PeerLimit::kIdle);
  }
  return at;
}

std::string TcpConnection::DescribePeerLimit(PeerLimit limit, const Backlog& backlog) const {
  const std::string frame_limit = std::to_string(frame_timeout_.count()) + " ms";
  switch (limit) {
    case PeerLimit::kUnreadResponses:
      return "read none of the " + std::to_string(backlog.bytes) + " bytes of responses waiting for it for " +
             frame_limit;
    case PeerLimit::kIncompleteFrame: return "left a frame incomplete for " + frame_limit;
    case PeerLimit::kIdle: return "sent no frame for " + std::to_string(idle_timeout_.count()) + " ms (idle limit)";
    case PeerLimit::kNone: break;
  }
  return "reached no limit";
}

Status TcpConnection::FlushFromReader() {
  MutexLock lock(out_mu_);
  if (out_closed_) return Status::Ok();
  RKV_RETURN_IF_ERROR(FlushLocked());
  if (close_after_flush_ && out_.empty()) {
    // Our last words (an access error) are out: EOF follows them.
    io_.ShutdownWrite();
    out_closed_ = true;
  }
  return Status::Ok();
}

Status TcpConnection::ReadAvailable() {
  size_t taken = 0;
  for (;;) {
    rx_.Reserve(kMinRecvSpace);
    const size_t space = rx_.tail_space();
    const ssize_t r = io_.Recv(rx_.tail(), space);
    if (r > 0) {
      if (rx_.empty()) partial_since_ = Clock::now();
      rx_.Commit(static_cast<size_t>(r));
      RKV_RETURN_IF_ERROR(ProcessFrames());
      taken += static_cast<size_t>(r);
      if (paused_ || static_cast<size_t>(r) < space || taken >= kReadBytesPerStep) break;
      continue;
    }
    if (r == 0) return Unavailable("peer " + peer_address_ + " closed the connection");
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) break;
    return io_.Error("recv from " + peer_address_, errno);
  }
  rx_.TrimIfIdle(kIdleBufferKeep);
  return Status::Ok();
}

Status TcpConnection::ProcessFrames() {
  FrameHeader h;
  bool took = false;
  // Whether a frame other than the answer to a probe came: the answer to
  // this side's own probe says the peer is there, not that it uses the
  // connection, so it does not hold off the idle limit.
  bool heard = false;
  Status result;
  for (;;) {
    if (streaming_) {
      result = ContinueRead();
      if (!result.ok()) break;
    }
    if (rx_.size() < kHeaderBytes) break;
    const StatusOr<bool> complete = TryParseFrame(rx_, &h);
    if (!complete.ok()) {
      result = ProtocolViolation(complete.status().message());
      break;
    }
    if (!discard_ && MustWaitToServe(static_cast<FrameType>(h.type))) {
      paused_ = true;
      break;
    }
    if (!*complete) {
      // Room for the whole frame, so it arrives in place.
      rx_.Reserve(kHeaderBytes + h.payload_len - rx_.size());
      break;
    }
    const uint8_t* payload = rx_.head() + kHeaderBytes;
    result = discard_ ? Status::Ok() : HandleFrame(h, payload);
    heard = heard || static_cast<FrameType>(h.type) != FrameType::kReadResp || h.payload_len != 0;
    rx_.Consume(kHeaderBytes + h.payload_len);
    took = true;
    if (!result.ok()) break;
  }
  if (took) {
    partial_since_ = Clock::now();
    if (heard) last_frame_at_ = partial_since_;
  }
  return result;
}

bool TcpConnection::MustWaitToServe(FrameType type) {
  if (type != FrameType::kReadReq && type != FrameType::kWrite && type != FrameType::kSend) return false;
  if (streaming_) return true;
  const Backlog backlog = OutBacklog();
  if (backlog.bytes > kOutHighWater) return true;
  return type == FrameType::kReadReq && backlog.reads >= kMaxReadsInFlight;
}

Status TcpConnection::ProtocolViolation(const std::string& what) {
  LOG(ERROR) << "tcp transport: protocol violation by " << peer_address_ << ": " << what
             << "; dropping the connection";
  return Internal("protocol violation by " + peer_address_ + ": " + what);
}

Status TcpConnection::HandleFrame(const FrameHeader& h, const uint8_t* payload) {
  switch (static_cast<FrameType>(h.type)) {
    case FrameType::kReadReq: return ServeRead(h);
    case FrameType::kWrite: return ServeWrite(h, payload);
    case FrameType::kSend: return ServeSend(h, payload);
    case FrameType::kReadResp:
    case FrameType::kWriteNak:
    case FrameType::kSendAck: return HandleResponse(h, payload);
    default: break;
  }
  return ProtocolViolation(std::string(FrameTypeName(h.type)) + " frame after setup");
}

void TcpConnection::RefuseRemoteAccess(FrameType response, uint64_t seq, const Status& why, const char* op) {
  LOG(WARNING) << "tcp transport: remote " << op << " by " << peer_address_ << " refused: " << why.message();
  AppendResponse(response, seq, why.code(), why.message());
  discard_ = true;
  close_after_flush_ = true;
  lingering_.store(true, std::memory_order_release);
  Fail("peer made an invalid remote " + std::string(op) + " (" + why.message() + ")");
}

Status TcpConnection::ServeRead(const FrameHeader& h) {
  if (h.op_len == 0) {
    // A zero-length READ (a probe, Connection::PostProbe) names no memory:
    // answered without an rkey or bounds check, as an IB responder does.
    const FrameHeader r = MakeHeader(FrameType::kReadResp, h.seq);
    MutexLock lock(out_mu_);
    if (out_closed_) return Status::Ok();
    std::memcpy(out_.Append(kHeaderBytes), &r, kHeaderBytes);
    read_ends_.push_back(sent_total_ + out_.size());
    return Status::Ok();
  }
  const uint32_t first = std::min(h.op_len, kReadChunkBytes);
  // The whole range is checked now; the rest is copied as the peer reads.
  const Status access = registry_->Access(h.rkey, h.addr, h.op_len, kRemoteRead, id_, [&](const uint8_t* src) {
    FrameHeader r = MakeHeader(FrameType::kReadResp, h.seq);
    r.payload_len = h.op_len;
    MutexLock lock(out_mu_);
    if (out_closed_) return;
    uint8_t* p = out_.Append(kHeaderBytes + first);
    std::memcpy(p, &r, kHeaderBytes);
    CopyFromShared(p + kHeaderBytes, src, first);
    read_ends_.push_back(sent_total_ + out_.size() + (h.op_len - first));
    out_streaming_ = first < h.op_len;
  });
  if (!access.ok()) {
    RefuseRemoteAccess(FrameType::kReadResp, h.seq, access, "READ");
  } else if (first < h.op_len) {
    streaming_ = StreamedRead{h.rkey, h.addr + first, h.op_len - first};
  }
  return Status::Ok();
}

Status TcpConnection::ContinueRead() {
  while (streaming_) {
    {
      MutexLock lock(out_mu_);
      if (out_closed_) {
        streaming_.reset();
        return Status::Ok();
      }
      if (out_.size() > kOutHighWater) return Status::Ok();
    }
    StreamedRead& s = *streaming_;
    const uint32_t n = std::min(s.left, kReadChunkBytes);
    const Status access = registry_->Access(s.rkey, s.addr, n, kRemoteRead, id_, [&](const uint8_t* src) {
      MutexLock lock(out_mu_);
      if (out_closed_) return;
      CopyFromShared(out_.Append(n), src, n);
      if (n == s.left) {
        // The response is whole: what the application sent meanwhile follows it.
        out_streaming_ = false;
        out_.Append(deferred_.head(), deferred_.size());
        deferred_.Consume(deferred_.size());
        deferred_.TrimIfIdle(kIdleBufferKeep);
      }
    });
    if (!access.ok()) {
      // Deregistered in the middle: the frame promised bytes it cannot have.
      return Internal("READ response to " + peer_address_ + " cut short: " + access.message());
    }
    s.addr += n;
    s.left -= n;
    if (s.left == 0) streaming_.reset();
  }
  return Status::Ok();
}

Status TcpConnection::ServeWrite(const FrameHeader& h, const uint8_t* payload) {
  const Status access = registry_->Access(h.rkey, h.addr, h.payload_len, kRemoteWrite, id_,
                                          [&](uint8_t* dst) { CopyToShared(dst, payload, h.payload_len); });
  if (!access.ok()) RefuseRemoteAccess(FrameType::kWriteNak, h.seq, access, "WRITE");
  return Status::Ok();
}

Status TcpConnection::ServeSend(const FrameHeader& h, const uint8_t* payload) {
  Status nak;
  {
    MutexLock lock(mu_);
    if (failed_) return Status::Ok();
    if (!unmatched_sends_.empty() || recv_queue_.empty()) {
      // No receive posted: keep it for the next PostRecv (verbs would
      // retry on RNR).
      if (largest_recv_ > 0 && h.payload_len > largest_recv_) {
        // No receive this side posts takes it: refused now, not held.
        nak = TooLong(h.payload_len, largest_recv_);
      } else if (unmatched_bytes_ + h.payload_len > kMaxUnmatchedBytes || unmatched_sends_.size() >= max_recv_wr_) {
        nak = Internal("receiver not ready: too many messages wait for a receive buffer");
      } else {
        unmatched_sends_.emplace_back(payload, payload + h.payload_len);
        unmatched_bytes_ += h.payload_len;
      }
    } else {
      const RecvWr wr = recv_queue_.front();
      recv_queue_.pop_front();
      if (h.payload_len > wr.length) {
        nak = TooLong(h.payload_len, wr.length);
        completions_.push_back(Completion{wr.wr_id, OpType::kRecv, nak, 0});
      } else {
        if (h.payload_len > 0) std::memcpy(wr.buf, payload, h.payload_len);
        completions_.push_back(Completion{wr.wr_id, OpType::kRecv, Status::Ok(), h.payload_len});
        NotifyPollersLocked();
      }
    }
  }
  if (!nak.ok()) {
    AppendResponse(FrameType::kSendAck, h.seq, nak.code(), nak.message());
    discard_ = true;
    close_after_flush_ = true;
    Fail(nak.message());
    return Status::Ok();
  }
  AppendResponse(FrameType::kSendAck, h.seq, StatusCode::kOk, {});
  return Status::Ok();
}

void TcpConnection::ScatterReadPayload(const SendWr& wr, const uint8_t* payload) {
  uint32_t rest = 0;
  for (size_t p = 0; p < wr.more_len.size() && wr.more_len[p] != 0; ++p) rest += wr.more_len[p];
  // PostReads made length the sum of the pieces.
  const uint32_t first = wr.length - rest;
  if (first > 0) std::memcpy(wr.dst, payload, first);
  payload += first;
  for (size_t p = 0; p < wr.more_len.size() && wr.more_len[p] != 0; ++p) {
    std::memcpy(wr.more_dst[p], payload, wr.more_len[p]);
    payload += wr.more_len[p];
  }
}

Status TcpConnection::HandleResponse(const FrameHeader& h, const uint8_t* payload) {
  MutexLock lock(mu_);
  if (failed_) return Status::Ok();  // already flushed
  // Unsignaled WRITEs before the answered request have executed.
  while (!send_queue_.empty() && send_queue_.front().seq < h.seq) {
    if (send_queue_.front().op != OpType::kWrite) {
      return ProtocolViolation("response for request " + std::to_string(h.seq) + " skips request " +
                               std::to_string(send_queue_.front().seq));
    }
    send_queue_.pop_front();
  }
  if (send_queue_.empty() || send_queue_.front().seq != h.seq) {
    return ProtocolViolation("response for unknown request " + std::to_string(h.seq));
  }
  const SendWr wr = send_queue_.front();
  const FrameType expected = wr.op == OpType::kRead    ? FrameType::kReadResp
                             : wr.op == OpType::kWrite ? FrameType::kWriteNak
                                                       : FrameType::kSendAck;
  if (static_cast<FrameType>(h.type) != expected) {
    return ProtocolViolation(std::string(FrameTypeName(h.type)) + " answers a " +
                             FrameTypeName(static_cast<uint8_t>(expected)) + " request");
  }
  if (h.status == 0) {
    if (wr.op == OpType::kRead ? h.payload_len != wr.length : h.payload_len != 0) {
      return ProtocolViolation("response of " + std::to_string(h.payload_len) + " bytes to request " +
                               std::to_string(h.seq));
    }
    if (wr.op == OpType::kRead && wr.length > 0) ScatterReadPayload(wr, payload);
    send_queue_.pop_front();
    if (wr.signaled) {
      completions_.push_back(Completion{wr.wr_id, wr.op, Status::Ok(), wr.length});
      NotifyPollersLocked();
    }
    return Status::Ok();
  }
  const char* op = wr.op == OpType::kRead ? "READ" : wr.op == OpType::kWrite ? "WRITE" : "SEND";
  const Status failed(static_cast<StatusCode>(h.status),
                      std::string("remote ") + op + " failed at " + peer_address_ + ": " +
                          PrintableText(payload, h.payload_len));
  send_queue_.pop_front();
  completions_.push_back(Completion{wr.wr_id, wr.op, failed, 0});
  FailLocked("a " + std::string(op) + " failed: " + failed.message());
  return failed;  // ends the reader; the socket is closed
}

}  // namespace rkv::transport::tcp
