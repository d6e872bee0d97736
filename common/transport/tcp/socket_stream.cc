#include "common/transport/tcp/socket_stream.h"

#include <poll.h>

#include <cerrno>

namespace rkv::transport::tcp {

Status SendAllBy(SocketStream& stream, const uint8_t* p, size_t n, Clock::time_point deadline,
                 const std::string& what) {
  while (n > 0) {
    const ssize_t r = stream.Send(p, n);
    if (r > 0) {
      p += r;
      n -= static_cast<size_t>(r);
      continue;
    }
    if (r < 0 && errno == EINTR) continue;
    if (r == 0 || errno == EAGAIN || errno == EWOULDBLOCK) {
      RKV_RETURN_IF_ERROR(WaitFd(stream.fd(), POLLOUT, deadline, "timed out sending to " + what));
      continue;
    }
    return stream.Error("send to " + what, errno);
  }
  return Status::Ok();
}

StatusOr<FrameHeader> ReadFrameBy(SocketStream& stream, ByteBuffer& rx, Clock::time_point deadline,
                                  const std::string& what) {
  FrameHeader h;
  for (;;) {
    RKV_ASSIGN_OR_RETURN(const bool complete, TryParseFrame(rx, &h));
    if (complete) return h;
    rx.Reserve(4096);
    const ssize_t r = stream.Recv(rx.tail(), rx.tail_space());
    if (r > 0) {
      rx.Commit(static_cast<size_t>(r));
      continue;
    }
    if (r == 0) return Unavailable(what + " closed the connection during setup");
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      RKV_RETURN_IF_ERROR(WaitFd(stream.fd(), POLLIN, deadline, "timed out waiting for " + what));
      continue;
    }
    return stream.Error("recv from " + what, errno);
  }
}

Status HandshakeBy(TlsSession& session, int fd, Clock::time_point deadline, const std::string& what) {
  for (;;) {
    RKV_ASSIGN_OR_RETURN(const TlsSession::Step step, session.Handshake());
    if (step == TlsSession::Step::kDone) return Status::Ok();
    const short events = step == TlsSession::Step::kWantRead ? POLLIN : POLLOUT;
    RKV_RETURN_IF_ERROR(WaitFd(fd, events, deadline, "timed out in the TLS handshake with " + what));
  }
}

}  // namespace rkv::transport::tcp
