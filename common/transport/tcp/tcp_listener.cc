#include "common/transport/tcp/tcp_listener.h"

#include <glog/logging.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "common/transport/tcp/tcp_connection.h"
#include "common/transport/tcp/tcp_frame.h"

namespace rkv::transport::tcp {
namespace {

Status Cancelled(std::string m) { return Status(StatusCode::kCancelled, std::move(m)); }

}  // namespace

TcpListener::TcpListener(std::shared_ptr<Registry> registry, const Options& options, UniqueFd fd,
                         UniqueFd wake_fd, std::string address)
    : registry_(std::move(registry)),
      options_(options),
      fd_(std::move(fd)),
      wake_fd_(std::move(wake_fd)),
      address_(std::move(address)) {}

StatusOr<std::unique_ptr<Connection>> TcpListener::Next(std::chrono::milliseconds timeout) {
  MutexLock lock(mu_);
  const auto deadline = DeadlineAfter(timeout);
  std::vector<pollfd> fds;
  for (;;) {
    if (shutdown_.load(std::memory_order_acquire)) return Cancelled("listener " + address_ + " shut down");
    Clock::time_point wake_at = deadline;
    fds.clear();
    fds.push_back({fd_.get(), POLLIN, 0});
    fds.push_back({wake_fd_.get(), POLLIN, 0});
    for (const auto& hs : handshakes_) {
      fds.push_back({hs->fd.get(), POLLIN, 0});
      wake_at = std::min(wake_at, hs->deadline);
    }
    if (::poll(fds.data(), fds.size(), MillisUntil(wake_at)) < 0 && errno != EINTR) {
      return PosixError("poll", errno);
    }
    if ((fds[1].revents & POLLIN) != 0) DrainEventFd(wake_fd_.get());
    // Handshakes first (their fds are in `fds` by index), then new sockets.
    std::unique_ptr<Connection> ready;
    const auto now = Clock::now();
    size_t keep = 0;
    for (size_t i = 0; i < handshakes_.size(); ++i) {
      auto& hs = handshakes_[i];
      bool drop = false;
      if (ready == nullptr && fds[2 + i].revents != 0) {
        StatusOr<std::unique_ptr<Connection>> conn = Progress(*hs);
        if (!conn.ok()) {
          LOG(WARNING) << "tcp transport: dropped connection from " << hs->peer << " during setup: "
                       << conn.status();
          drop = true;
        } else if (*conn != nullptr) {
          ready = std::move(*conn);
          drop = true;
        }
      }
      if (!drop && now >= hs->deadline) {
        LOG(WARNING) << "tcp transport: dropped connection from " << hs->peer << ": no CONNECT in time";
        drop = true;
      }
      if (!drop) {
        if (keep != i) handshakes_[keep] = std::move(hs);
        ++keep;
      }
    }
    handshakes_.resize(keep);
    if ((fds[0].revents & POLLIN) != 0) AcceptSockets();
    if (ready != nullptr) return ready;
    if (Clock::now() >= deadline) return std::unique_ptr<Connection>();
  }
}

void TcpListener::Shutdown() {
  shutdown_.store(true, std::memory_order_release);
  SignalEventFd(wake_fd_.get());
}

void TcpListener::AcceptSockets() {
  for (;;) {
    sockaddr_storage ss{};
    socklen_t len = sizeof ss;
    UniqueFd fd(::accept4(fd_.get(), reinterpret_cast<sockaddr*>(&ss), &len, SOCK_NONBLOCK | SOCK_CLOEXEC));
    if (!fd.valid()) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) {
        LOG(WARNING) << "tcp transport: accept on " << address_ << ": " << std::strerror(errno);
      }
      return;
    }
    const std::string peer = SockaddrToString(reinterpret_cast<sockaddr*>(&ss));
    if (handshakes_.size() >= kMaxPendingHandshakes) {
      LOG(WARNING) << "tcp transport: " << handshakes_.size() << " connections in setup; dropping " << peer;
      continue;
    }
    const Status nodelay = SetNoDelay(fd.get());
    if (!nodelay.ok()) {
      LOG(WARNING) << "tcp transport: " << peer << ": " << nodelay;
      continue;
    }
    auto hs = std::make_unique<Handshake>();
    hs->fd = std::move(fd);
    hs->peer = peer;
    hs->deadline = Clock::now() + kHandshakeTimeout;
    handshakes_.push_back(std::move(hs));
  }
}

StatusOr<std::unique_ptr<Connection>> TcpListener::Progress(Handshake& hs) {
  FrameHeader h;
  for (;;) {
    RKV_ASSIGN_OR_RETURN(const bool complete, TryParseFrame(hs.rx, &h));
    if (complete) break;
    hs.rx.Reserve(512);
    const ssize_t r = ::recv(hs.fd.get(), hs.rx.tail(), hs.rx.tail_space(), MSG_DONTWAIT);
    if (r > 0) {
      hs.rx.Commit(static_cast<size_t>(r));
      continue;
    }
    if (r == 0) return Unavailable("peer closed the connection");
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return std::unique_ptr<Connection>();
    return PosixError("recv", errno);
  }
  if (static_cast<FrameType>(h.type) != FrameType::kConnect || h.seq != 0 || h.rkey != 0 || h.op_len != 0) {
    return InvalidArgument(std::string("expected a CONNECT frame, got ") + FrameTypeName(h.type));
  }
  const uint8_t* payload = hs.rx.head() + kHeaderBytes;
  std::vector<uint8_t> private_data(payload, payload + h.payload_len);
  hs.rx.Consume(kHeaderBytes + h.payload_len);
  RKV_ASSIGN_OR_RETURN(UniqueFd wake, MakeEventFd());
  return std::unique_ptr<Connection>(std::make_unique<TcpConnection>(
      registry_, options_, std::move(hs.fd), std::move(wake), std::move(private_data), std::move(hs.rx),
      /*established=*/false));
}

}  // namespace rkv::transport::tcp
