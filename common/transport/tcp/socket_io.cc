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

Status SendAllBy(int fd, const uint8_t* p, size_t n, Clock::time_point deadline, const std::string& what) {
  while (n > 0) {
    const ssize_t r = ::send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (r > 0) {
      p += r;
      n -= static_cast<size_t>(r);
      continue;
    }
    if (r < 0 && errno == EINTR) continue;
    if (r == 0 || errno == EAGAIN || errno == EWOULDBLOCK) {
      RKV_RETURN_IF_ERROR(WaitFd(fd, POLLOUT, deadline, "timed out sending to " + what));
      continue;
    }
    return PosixError("send to " + what, errno);
  }
  return Status::Ok();
}

StatusOr<bool> TryParseFrame(ByteBuffer& rx, FrameHeader* header) {
  if (rx.size() < kHeaderBytes) return false;
  std::memcpy(header, rx.head(), kHeaderBytes);
  RKV_RETURN_IF_ERROR(ValidateHeader(*header));
  return rx.size() >= kHeaderBytes + header->payload_len;
}

StatusOr<FrameHeader> ReadFrameBy(int fd, ByteBuffer& rx, Clock::time_point deadline, const std::string& what) {
  FrameHeader h;
  for (;;) {
    RKV_ASSIGN_OR_RETURN(const bool complete, TryParseFrame(rx, &h));
    if (complete) return h;
    rx.Reserve(4096);
    const ssize_t r = ::recv(fd, rx.tail(), rx.tail_space(), MSG_DONTWAIT);
    if (r > 0) {
      rx.Commit(static_cast<size_t>(r));
      continue;
    }
    if (r == 0) return Unavailable(what + " closed the connection during setup");
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      RKV_RETURN_IF_ERROR(WaitFd(fd, POLLIN, deadline, "timed out waiting for " + what));
      continue;
    }
    return PosixError("recv from " + what, errno);
  }
}

}  // namespace rkv::transport::tcp
