// The clock of a peer's unread-responses limit (Options::frame_timeout):
// how long the peer has taken none of the bytes that wait for it. Internal
// to common/transport/tcp/; TcpConnection keeps one for its outgoing queue.
//
// Progress is what the peer's TCP acknowledged, never what the local
// kernel accepted: a send can succeed while the peer reads nothing (the
// socket's buffer grows, or had room all along but too little for epoll
// to report it writable, so the first send to find it is the limit's own
// check). Counted as progress, such a send restarted the clock at the
// check, and a peer that read nothing was closed after twice the limit.
//
// The peer's acknowledgements are looked at every limit / kChecksPerLimit
// (and at the limit), so the limit is reached no earlier than `limit`
// after the peer last took a byte, and at most limit / kChecksPerLimit
// later. Pure: the caller passes the time and the peer's acknowledged byte
// count, which makes the rule testable without a socket or a real clock.
//
// Thread safety: none; TcpConnection guards its clock with out_mu_.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>

#include "common/transport/tcp/socket_io.h"

namespace rkv::transport::tcp {

class StallClock {
 public:
  static constexpr int kChecksPerLimit = 16;

  // `limit` > 0.
  explicit StallClock(std::chrono::milliseconds limit)
      : limit_(limit), check_every_(std::max<Clock::duration>(limit / kChecksPerLimit, Clock::duration(1))) {}

  bool running() const { return since_ != Clock::time_point::max(); }

  // Bytes came to wait for the peer at `now`, when the peer had
  // acknowledged `acked` bytes in all: the clock runs from `now`. No
  // effect while it runs.
  void Start(Clock::time_point now, uint64_t acked) {
    if (running()) return;
    since_ = checked_ = now;
    acked_ = acked;
  }
  // Nothing waits for the peer.
  void Stop() { since_ = Clock::time_point::max(); }

  // When the next look at the peer's acknowledgements is due: the next
  // periodic one, or the limit if it comes first. max() when stopped.
  Clock::time_point next_check() const {
    if (!running()) return Clock::time_point::max();
    return std::min(since_ + limit_, checked_ + check_every_);
  }

  // A look at `now`, when the peer has acknowledged `acked` bytes in all:
  // more than at the last look restarts the clock. Returns whether the
  // peer has now taken nothing for the limit (false when stopped).
  bool Check(Clock::time_point now, uint64_t acked) {
    if (!running()) return false;
    if (acked != acked_) {
      acked_ = acked;
      since_ = now;
    }
    checked_ = now;
    return now - since_ >= limit_;
  }

  // When the peer last took a byte (or the clock started), as of the last
  // look; the peer's acknowledged byte count then.
  Clock::time_point since() const { return since_; }
  uint64_t acked() const { return acked_; }

 private:
  const std::chrono::milliseconds limit_;
  const Clock::duration check_every_;
  Clock::time_point since_ = Clock::time_point::max();  // max(): stopped
  Clock::time_point checked_{};
  uint64_t acked_ = 0;
};

}  // namespace rkv::transport::tcp
