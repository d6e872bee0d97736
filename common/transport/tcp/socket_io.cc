#include "common/transport/tcp/socket_io.h"

#include <arpa/inet.h>
#include <linux/sockios.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>

namespace rkv::transport::tcp {

void UniqueFd::Reset() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

int MillisUntil(Clock::time_point deadline) {
  const auto left = deadline - Clock::now();
  if (left <= Clock::duration::zero()) return 0;
  const auto ms = std::chrono::ceil<std::chrono::milliseconds>(left).count();
  return static_cast<int>(std::min<int64_t>(ms, INT_MAX));
}

StatusOr<UniqueFd> MakeEventFd() {
  UniqueFd fd(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!fd.valid()) return PosixError("eventfd", errno);
  return fd;
}

void SignalEventFd(int fd) {
  const uint64_t one = 1;
  // EAGAIN (counter saturated) still leaves the fd readable: nothing to do.
  while (::write(fd, &one, sizeof one) < 0 && errno == EINTR) {
  }
}

void DrainEventFd(int fd) {
  uint64_t value;
  while (::read(fd, &value, sizeof value) < 0 && errno == EINTR) {
  }
}

std::string SockaddrHost(const sockaddr* sa) {
  char host[INET6_ADDRSTRLEN] = {};
  if (sa->sa_family == AF_INET) {
    ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(sa)->sin_addr, host, sizeof host);
    return host;
  }
  if (sa->sa_family == AF_INET6) {
    ::inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(sa)->sin6_addr, host, sizeof host);
    return host;
  }
  return "unknown";
}

std::string SockaddrToString(const sockaddr* sa) {
  if (sa->sa_family == AF_INET) {
    return SockaddrHost(sa) + ":" + std::to_string(ntohs(reinterpret_cast<const sockaddr_in*>(sa)->sin_port));
  }
  if (sa->sa_family == AF_INET6) {
    return "[" + SockaddrHost(sa) + "]:" + std::to_string(ntohs(reinterpret_cast<const sockaddr_in6*>(sa)->sin6_port));
  }
  return "unknown";
}

std::string PeerName(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return "unknown";
  return SockaddrToString(reinterpret_cast<sockaddr*>(&ss));
}

Status SetNoDelay(int fd) {
  const int one = 1;
  if (::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) != 0) {
    return PosixError("setsockopt(TCP_NODELAY)", errno);
  }
  return Status::Ok();
}

StatusOr<size_t> UnacknowledgedBytes(int fd) {
  int queued = 0;
  if (::ioctl(fd, SIOCOUTQ, &queued) != 0) return PosixError("ioctl(SIOCOUTQ)", errno);
  return static_cast<size_t>(std::max(queued, 0));
}

Status WaitFd(int fd, short events, Clock::time_point deadline, const std::string& what) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int r = ::poll(&p, 1, MillisUntil(deadline));
    if (r > 0) return Status::Ok();
    if (r == 0) return DeadlineExceeded(what);
    if (errno != EINTR) return PosixError("poll", errno);
  }
}

StatusOr<bool> TryParseFrame(ByteBuffer& rx, FrameHeader* header) {
  if (rx.size() < kHeaderBytes) return false;
  std::memcpy(header, rx.head(), kHeaderBytes);
  RKV_RETURN_IF_ERROR(ValidateHeader(*header));
  return rx.size() >= kHeaderBytes + header->payload_len;
}

}  // namespace rkv::transport::tcp
