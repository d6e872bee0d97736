#include "common/transport/tcp/tcp_listener.h"

#include <glog/logging.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>
#include <utility>

#include "common/transport/rejection.h"
#include "common/transport/tcp/tcp_connection.h"
#include "common/transport/tcp/tcp_frame.h"
#include "common/transport/tcp/tcp_poll_group.h"

namespace rkv::transport::tcp {
namespace {

Status Cancelled(std::string m) { return Status(StatusCode::kCancelled, std::move(m)); }

// Takes one socket of `source` off the count.
void ForgetSource(std::unordered_map<std::string, uint32_t>& counts, const std::string& source) {
  const auto it = counts.find(source);
  if (it == counts.end()) return;
  if (--it->second == 0) counts.erase(it);
}

}  // namespace

TcpListener::TcpListener(std::shared_ptr<Registry> registry, const Options& options, UniqueFd fd,
                         UniqueFd wake_fd, std::string address, std::shared_ptr<TlsContext> tls)
    : registry_(std::move(registry)),
      options_(options),
      fd_(std::move(fd)),
      wake_fd_(std::move(wake_fd)),
      address_(std::move(address)),
      tls_(std::move(tls)),
      source_refusals_(options.max_refusals_per_source) {}

ListenerCounters TcpListener::counters() const {
  ListenerCounters c;
  c.screened_out = screened_out_.load(std::memory_order_relaxed);
  c.source_limited = source_limited_.load(std::memory_order_relaxed);
  c.created = created_.load(std::memory_order_relaxed);
  return c;
}

StatusOr<std::unique_ptr<Connection>> TcpListener::Next(std::chrono::milliseconds timeout, const Screen& screen,
                                                        const GroupChooser& choose) {
  MutexLock lock(mu_);
  const auto deadline = DeadlineAfter(timeout);
  std::vector<pollfd> fds;
  for (;;) {
    if (shutdown_.load(std::memory_order_acquire)) return Cancelled("listener " + address_ + " shut down");
    Clock::time_point wake_at = deadline;
    fds.clear();
    const bool accepting = Clock::now() >= accept_paused_until_;
    if (!accepting) wake_at = std::min(wake_at, accept_paused_until_);
    fds.push_back({fd_.get(), static_cast<short>(accepting ? POLLIN : 0), 0});
    fds.push_back({wake_fd_.get(), POLLIN, 0});
    for (const auto& hs : handshakes_) {
      fds.push_back({hs->fd.get(), static_cast<short>(POLLIN | (hs->want_write ? POLLOUT : 0)), 0});
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
        bool refused = false;
        StatusOr<std::unique_ptr<Connection>> conn = Progress(*hs, screen, choose, &refused);
        if (refused) {
          drop = true;
        } else if (!conn.ok()) {
          LOG(WARNING) << "tcp transport: dropped connection from " << hs->peer << " during setup: "
                       << conn.status();
          drop = true;
        } else if (*conn != nullptr) {
          ready = std::move(*conn);
          drop = true;
        }
      }
      if (!drop && now >= hs->deadline) {
        LOG(WARNING) << "tcp transport: dropped connection from " << hs->peer << ": no whole CONNECT frame within "
                     << options_.handshake_timeout.count() << " ms" << (tls_ != nullptr && !hs->tls_done ? " (in the TLS handshake)" : "");
        drop = true;
      }
      if (drop) {
        ForgetSource(per_source_, hs->source);
      } else {
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
      if (errno == EMFILE || errno == ENFILE) {
        // Out of descriptors: a socket in setup makes way (the oldest), or,
        // with none, accepting pauses a moment rather than spin on poll.
        LOG_EVERY_N(WARNING, 100) << "tcp transport: accept on " << address_ << ": " << std::strerror(errno)
                                  << " (" << handshakes_.size() << " sockets in setup; logged every 100th)";
        if (handshakes_.empty()) {
          accept_paused_until_ = Clock::now() + kAcceptPauseOnNoFds;
          return;
        }
        ForgetSource(per_source_, handshakes_.front()->source);
        handshakes_.erase(handshakes_.begin());
        continue;
      }
      if (errno != EAGAIN && errno != EWOULDBLOCK) {
        LOG(WARNING) << "tcp transport: accept on " << address_ << ": " << std::strerror(errno);
      }
      return;
    }
    const auto* sa = reinterpret_cast<const sockaddr*>(&ss);
    auto hs = std::make_unique<Handshake>();
    hs->peer = SockaddrToString(sa);
    hs->source = SockaddrHost(sa);
    const Status nodelay = SetNoDelay(fd.get());
    if (!nodelay.ok()) {
      LOG(WARNING) << "tcp transport: " << hs->peer << ": " << nodelay;
      continue;
    }
    EvictFor(hs->source);
    hs->fd = std::move(fd);
    hs->stream = SocketStream(hs->fd.get());
    hs->deadline = Clock::now() + options_.handshake_timeout;
    ++per_source_[hs->source];
    handshakes_.push_back(std::move(hs));
  }
}

void TcpListener::EvictFor(const std::string& source) {
  const size_t max_total = std::max<uint32_t>(options_.max_pending_handshakes, 1);
  const uint32_t max_per_source = std::max<uint32_t>(options_.max_handshakes_per_source, 1);
  const auto own = per_source_.find(source);
  // Which sockets in setup may go: those of `source`, or those of the
  // addresses with the most (then the oldest of them goes).
  uint32_t most = 0;
  const char* why = nullptr;
  if (own != per_source_.end() && own->second >= max_per_source) {
    why = "sockets in setup from one address";
  } else if (handshakes_.size() >= max_total) {
    for (const auto& [addr, n] : per_source_) most = std::max(most, n);
    why = "sockets in setup";
  } else {
    return;
  }
  // handshakes_ is in order of acceptance: the first match is the oldest.
  const auto victim = std::find_if(handshakes_.begin(), handshakes_.end(), [&](const auto& hs) {
    mu_.AssertHeld();
    return most == 0 ? hs->source == source : per_source_[hs->source] == most;
  });
  if (victim == handshakes_.end()) return;
  ++evicted_;
  LOG_EVERY_N(WARNING, 100) << "tcp transport: too many " << why << " (" << handshakes_.size() << " in all, "
                            << per_source_[(*victim)->source] << " from " << (*victim)->source << "); closed "
                            << (*victim)->peer << ", the oldest of them, for a new socket (" << evicted_
                            << " closed so since start; logged every 100th)";
  ForgetSource(per_source_, (*victim)->source);
  handshakes_.erase(victim);
}

void TcpListener::RefuseInSetup(Handshake& hs, const Rejection& why) {
  const std::vector<uint8_t> encoded = EncodeRejection(why);
  std::vector<uint8_t> frame(kHeaderBytes + encoded.size());
  FrameHeader h = MakeHeader(FrameType::kReject, 0);
  h.payload_len = static_cast<uint32_t>(encoded.size());
  std::memcpy(frame.data(), &h, kHeaderBytes);
  std::memcpy(frame.data() + kHeaderBytes, encoded.data(), encoded.size());
  // A new socket's send buffer takes a frame this small at once: the
  // deadline only bounds a peer that shrank its window to nothing.
  const Status sent = SendAllBy(hs.stream, frame.data(), frame.size(),
                                DeadlineAfter(std::chrono::milliseconds(100)), hs.peer);
  if (!sent.ok()) VLOG(1) << "tcp transport: refusing " << hs.peer << ": " << sent;
  // SHUT_WR first, and nothing left unread when the socket is closed, so
  // the close sends no reset that could overtake the REJECT.
  hs.stream.ShutdownWrite();
  uint8_t sink[256];
  while (::recv(hs.fd.get(), sink, sizeof sink, MSG_DONTWAIT) > 0) {
  }
}

StatusOr<std::unique_ptr<Connection>> TcpListener::Progress(Handshake& hs, const Screen& screen,
                                                            const GroupChooser& choose, bool* refused) {
  if (tls_ != nullptr && !hs.tls_done) {
    RKV_ASSIGN_OR_RETURN(const bool done, AdvanceTls(hs, refused));
    if (!done) return std::unique_ptr<Connection>();
  }
  FrameHeader h;
  for (;;) {
    StatusOr<bool> complete = TryParseFrame(hs.rx, &h);
    if (!complete.ok()) {
      if (tls_ == nullptr && hs.rx.head()[0] == kTlsHandshakeRecordType) {
        return InvalidArgument("the peer speaks TLS, and this listener's data plane is plain tcp (a server "
                               "takes TLS with --data_plane_tls)");
      }
      return complete.status();
    }
    if (*complete) break;
    hs.rx.Reserve(512);
    const ssize_t r = hs.stream.Recv(hs.rx.tail(), hs.rx.tail_space());
    if (r > 0) {
      hs.rx.Commit(static_cast<size_t>(r));
      continue;
    }
    if (r == 0) return Unavailable("peer closed the connection");
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return std::unique_ptr<Connection>();
    return hs.stream.Error("recv", errno);
  }
  if (static_cast<FrameType>(h.type) != FrameType::kConnect) {
    return InvalidArgument(std::string("expected a CONNECT frame, got ") + FrameTypeName(h.type));
  }
  if (h.seq != 0 || h.rkey != 0 || h.op_len != 0) {
    return InvalidArgument("CONNECT frame with nonzero seq, rkey or op_len (" + std::to_string(h.seq) + ", " +
                           std::to_string(h.rkey) + ", " + std::to_string(h.op_len) + "); they must be 0");
  }
  const uint8_t* payload = hs.rx.head() + kHeaderBytes;
  std::vector<uint8_t> private_data(payload, payload + h.payload_len);
  hs.rx.Consume(kHeaderBytes + h.payload_len);
  const auto now = Clock::now();
  if (source_refusals_.OverLimit(hs.source, now)) {
    source_limited_.fetch_add(1, std::memory_order_relaxed);
    RefuseInSetup(hs, {StatusCode::kUnavailable, "too many refused connection requests from " + hs.source +
                                                     " within a second; retry later"});
    *refused = true;
    return std::unique_ptr<Connection>();
  }
  if (screen) {
    if (std::optional<Rejection> why = screen(private_data, hs.peer)) {
      screened_out_.fetch_add(1, std::memory_order_relaxed);
      source_refusals_.Refused(hs.source, now);
      RefuseInSetup(hs, *why);
      *refused = true;
      return std::unique_ptr<Connection>();
    }
    source_refusals_.Admitted(hs.source, now);
  }
  TcpPollGroup* group = nullptr;
  if (choose) {
    PollGroup* chosen = choose(private_data);
    if (chosen != nullptr) {
      group = dynamic_cast<TcpPollGroup*>(chosen);
      if (group == nullptr) return InvalidArgument("the group chosen is not one of the tcp transport's");
    }
  }
  RKV_ASSIGN_OR_RETURN(UniqueFd wake, MakeEventFd());
  created_.fetch_add(1, std::memory_order_relaxed);
  return std::unique_ptr<Connection>(std::make_unique<TcpConnection>(
      registry_, options_, std::move(hs.fd), std::move(wake), std::move(private_data), std::move(hs.rx),
      /*established=*/false, group, hs.stream.TakeSession()));
}

StatusOr<bool> TcpListener::AdvanceTls(Handshake& hs, bool* refused) {
  if (hs.stream.session() == nullptr) {
    uint8_t first = 0;
    const ssize_t r = ::recv(hs.fd.get(), &first, 1, MSG_PEEK | MSG_DONTWAIT);
    if (r == 0) return Unavailable("peer closed the connection");
    if (r < 0) {
      if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) return false;
      return PosixError("recv", errno);
    }
    if (first != kTlsHandshakeRecordType) {
      // A plain client: its hello is on the way; the answer is in its
      // protocol, so that it can say what is wrong.
      screened_out_.fetch_add(1, std::memory_order_relaxed);
      RefuseInSetup(hs, {StatusCode::kFailedPrecondition,
                         "the data plane at " + address_ + " takes TLS only: connect with data_plane_tls and a CA"});
      *refused = true;
      return false;
    }
    RKV_ASSIGN_OR_RETURN(std::unique_ptr<TlsSession> session, tls_->NewServerSession(hs.fd.get(), hs.peer));
    hs.stream = SocketStream(hs.fd.get(), std::move(session));
  }
  RKV_ASSIGN_OR_RETURN(const TlsSession::Step step, hs.stream.session()->Handshake());
  hs.want_write = step == TlsSession::Step::kWantWrite;
  hs.tls_done = step == TlsSession::Step::kDone;
  return hs.tls_done;
}

}  // namespace rkv::transport::tcp
