// Sockets and file descriptors for the tcp transport: an fd owner,
// deadlines, eventfd wake-ups, socket names and options, and reading and
// writing whole frames (tcp_frame.h) on a non-blocking socket by a
// deadline. Internal to common/transport/tcp/.
//
// Every socket of the transport is non-blocking. The data path
// (TcpConnection) never blocks on one; only connection setup (Connect,
// Reject) waits, always with a deadline, through the *By functions here.
//
// Errors: a failing system call becomes PosixError(call, errno); a
// deadline that passes becomes DEADLINE_EXCEEDED with the caller's text.
//
// Thread safety: the functions keep no state; UniqueFd is not thread-safe.
#pragma once

#include <sys/socket.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

#include "common/status.h"
#include "common/transport/tcp/byte_buffer.h"
#include "common/transport/tcp/tcp_frame.h"

namespace rkv::transport::tcp {

// ---------------------------------------------------------------------------
// File descriptors.

// Owns one file descriptor and closes it when destroyed or reset.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept {
    if (this != &other) {
      Reset();
      fd_ = std::exchange(other.fd_, -1);
    }
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() { Reset(); }

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  void Reset();

 private:
  int fd_ = -1;
};

// ---------------------------------------------------------------------------
// Deadlines.

using Clock = std::chrono::steady_clock;

// Longer waits are clamped so that deadlines never overflow.
inline constexpr auto kMaxWait = std::chrono::hours(24 * 365);

// Now plus `timeout`, which is clamped into [0, kMaxWait].
template <typename Duration>
Clock::time_point DeadlineAfter(Duration timeout) {
  const auto wait = std::clamp<std::chrono::microseconds>(
      std::chrono::duration_cast<std::chrono::microseconds>(timeout), std::chrono::microseconds(0),
      std::chrono::duration_cast<std::chrono::microseconds>(kMaxWait));
  return Clock::now() + wait;
}

// Milliseconds until `deadline`, rounded up, for poll(2): 0 once it passed.
int MillisUntil(Clock::time_point deadline);

// ---------------------------------------------------------------------------
// Wake-ups: an eventfd that one thread signals to end another's poll(2).

// A non-blocking, close-on-exec eventfd.
StatusOr<UniqueFd> MakeEventFd();
// Makes `fd` readable. Never fails: a saturated counter is readable too.
void SignalEventFd(int fd);
// Resets the counter of `fd` (readable no more until signalled again).
void DrainEventFd(int fd);

// ---------------------------------------------------------------------------
// Socket names and options.

// "host:port", "[v6 host]:port", or "unknown" for another family.
std::string SockaddrToString(const sockaddr* sa);
// The host part alone ("10.0.0.1", "::1"), or "unknown" for another family.
std::string SockaddrHost(const sockaddr* sa);
// The peer address of a connected socket, or "unknown".
std::string PeerName(int fd);
// Turns Nagle's algorithm off: every frame is sent when it is complete.
Status SetNoDelay(int fd);
// Bytes written to the connected TCP socket `fd` that its peer has not
// acknowledged yet, sent or not (SIOCOUTQ).
StatusOr<size_t> UnacknowledgedBytes(int fd);

// ---------------------------------------------------------------------------
// Frames on a non-blocking socket. `what` names the peer in error texts.

// Waits until `fd` has `events` or `deadline` passes (DEADLINE_EXCEEDED
// with `what`).
Status WaitFd(int fd, short events, Clock::time_point deadline, const std::string& what);

// Parses the frame at the head of `rx` into *header: false while the frame
// is incomplete (*header is valid once kHeaderBytes are in), true when it
// is whole, INVALID_ARGUMENT when the header fails ValidateHeader.
StatusOr<bool> TryParseFrame(ByteBuffer& rx, FrameHeader* header);

}  // namespace rkv::transport::tcp
