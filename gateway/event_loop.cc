#include "gateway/event_loop.h"

#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <unordered_map>

#include <glog/logging.h>

#include "common/transport/spin_window.h"

namespace rkv::gateway {
namespace {

constexpr size_t kReadChunk = 64 * 1024;
// Reads of one connection per wake-up, so one busy client cannot hold its
// thread while others wait (level-triggered: the rest comes next round).
constexpr int kReadsPerWake = 16;
constexpr int kMaxEvents = 256;
// After accept fails for want of descriptors, the listener is left alone
// this long (it would stay readable and spin the loop).
constexpr auto kAcceptPause = std::chrono::milliseconds(100);
// Buffers that grew past this are given back once empty.
constexpr size_t kKeepCapacity = 256 * 1024;

rkv::Status SystemError(const char* call) {
  return rkv::Status(rkv::StatusCode::kInternal, std::string(call) + ": " + std::strerror(errno));
}

void RaisePeak(std::atomic<uint64_t>& peak, uint64_t value) {
  uint64_t seen = peak.load(std::memory_order_relaxed);
  while (value > seen && !peak.compare_exchange_weak(seen, value, std::memory_order_relaxed)) {
  }
}

}  // namespace

// A client connection of a loop thread. Named (not in the anonymous
// namespace): EventLoop::Thread, a class of the header's, holds them.
namespace event_loop_internal {

struct Connection {
  int fd = -1;
  std::unique_ptr<Session> session;
  std::string in;
  size_t in_start = 0;  // bytes of `in` already consumed
  std::string out;
  size_t out_sent = 0;  // bytes of `out` already sent
  bool closing = false;      // the session asked to close: send `out`, then close
  bool peer_closed = false;  // recv returned 0: serve what is in, send, close
  bool deferred = false;     // the session waits for the thread's round (session.h)
  uint32_t events = 0;       // the interest registered with epoll

  size_t pending_out() const { return out.size() - out_sent; }
  size_t pending_in() const { return in.size() - in_start; }
};

}  // namespace event_loop_internal

class EventLoop::Thread {
 public:
  using Connection = event_loop_internal::Connection;
  using Clock = std::chrono::steady_clock;

  Thread(Shared* shared, int index)
      : shared_(shared),
        index_(index),
        round_(shared->options.rounds.empty() ? nullptr : shared->options.rounds[static_cast<size_t>(index)]),
        read_buffer_(new char[kReadChunk]),
        max_spin_(std::chrono::microseconds(shared->options.spin_us)),
        spin_window_(max_spin_) {}
  ~Thread() {
    if (epoll_fd_ >= 0) close(epoll_fd_);
    if (wake_fd_ >= 0) close(wake_fd_);
  }

  rkv::Status Init() {
    epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
    if (epoll_fd_ < 0) return SystemError("epoll_create1");
    wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (wake_fd_ < 0) return SystemError("eventfd");
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = kWakeTag;
    if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &ev) != 0) return SystemError("epoll_ctl(eventfd)");
    for (size_t i = 0; i < shared_->listeners.size(); ++i) {
      rkv::Status added = WatchListener(i);
      if (!added.ok()) return added;
    }
    return rkv::Status::Ok();
  }

  void Run() { thread_ = std::thread([this] { Loop(); }); }

  void RequestStop() {
    stop_.store(true, std::memory_order_release);
    uint64_t one = 1;
    ssize_t n = write(wake_fd_, &one, sizeof(one));
    (void)n;  // a full eventfd already wakes the thread
  }

  void Join() {
    if (thread_.joinable()) thread_.join();
  }

 private:
  // epoll data: a listener's index, the wake-up eventfd, or a connection's
  // descriptor (>= 0, below these tags).
  static constexpr uint64_t kWakeTag = uint64_t{1} << 62;
  static constexpr uint64_t kListenerTag = uint64_t{1} << 61;

  rkv::Status WatchListener(size_t index) {
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLEXCLUSIVE;
    ev.data.u64 = kListenerTag | index;
    if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, shared_->listeners[index].fd, &ev) != 0) {
      return SystemError("epoll_ctl(listener)");
    }
    return rkv::Status::Ok();
  }

  void Loop() {
    epoll_event events[kMaxEvents];
    while (!stop_.load(std::memory_order_acquire)) {
      int timeout_ms = paused_listeners_.empty() ? -1 : static_cast<int>(kAcceptPause.count());
      int n = Wait(events, timeout_ms);
      if (n < 0) {
        if (errno == EINTR) continue;
        LOG(ERROR) << "epoll_wait: " << std::strerror(errno);
        break;
      }
      ResumeListeners();
      for (int i = 0; i < n && !stop_.load(std::memory_order_acquire); ++i) {
        uint64_t tag = events[i].data.u64;
        if (tag == kWakeTag) continue;
        if (tag & kListenerTag) {
          Accept(static_cast<size_t>(tag & ~kListenerTag));
          continue;
        }
        auto it = connections_.find(static_cast<int>(tag));
        if (it == connections_.end()) continue;
        Connection& c = *it->second;
        if (events[i].events & EPOLLOUT) Write(c);
        if (events[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) Read(c);
        if (c.fd >= 0) ServeAndWrite(c);
        Update(c);
      }
      RunRound();
    }
    // Stop: the deferred work runs, then a last non-blocking send of what
    // each connection holds.
    RunRound();
    for (auto& [fd, c] : connections_) {
      Write(*c);
      CloseFd(*c);
    }
    connections_.clear();
  }

  // epoll_wait on the thread's set: first without blocking for up to the
  // spin window (SpinPause between polls), then blocking for `timeout_ms`.
  // The window then adapts as a transport's wait does (TcpPollGroup::Wait):
  // a sleep that ended with work within max_spin_ grows it, one that
  // outlasted max_spin_ shrinks it, toward none.
  int Wait(epoll_event* events, int timeout_ms) {
    const Clock::time_point start = Clock::now();
    if (spin_window_.count() > 0 && !spin_cooldown_.Active(start)) {
      const Clock::time_point spin_until = start + spin_window_;
      Clock::time_point last = start;
      for (;;) {
        const int n = epoll_wait(epoll_fd_, events, kMaxEvents, 0);
        if (n != 0) {
          if (n > 0) shared_->spun_waits.fetch_add(1, std::memory_order_relaxed);
          return n;
        }
        const Clock::time_point now = Clock::now();
        if (now >= spin_until) break;
        // This thread lost its CPU while spinning (spin_window.h).
        if (spin_cooldown_.LostCpu(now, &last)) break;
        rkv::transport::SpinPause();
      }
    }
    const int n = epoll_wait(epoll_fd_, events, kMaxEvents, timeout_ms);
    shared_->slept_waits.fetch_add(1, std::memory_order_relaxed);
    const Clock::time_point now = Clock::now();
    if (n > 0 && max_spin_.count() > 0 && !spin_cooldown_.Active(now)) {
      spin_window_ = rkv::transport::NextSpinWindow(spin_window_, now - start, max_spin_);
    }
    return n;
  }

  void Accept(size_t index) {
    const ListenerSpec& listener = shared_->listeners[index];
    for (int i = 0; i < 64; ++i) {
      int fd = accept4(listener.fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR || errno == ECONNABORTED) return;
        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
          LOG_EVERY_N(ERROR, 100) << listener.protocol << " listener: accept: " << std::strerror(errno)
                                  << " (pausing it " << kAcceptPause.count() << " ms; raise the descriptor limit, "
                                  << "ulimit -n, or lower --max_clients)";
          epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, listener.fd, nullptr);
          paused_listeners_.push_back({index, std::chrono::steady_clock::now() + kAcceptPause});
          return;
        }
        LOG(ERROR) << listener.protocol << " listener: accept: " << std::strerror(errno);
        return;
      }
      uint64_t open = shared_->connections.fetch_add(1, std::memory_order_relaxed) + 1;
      if (open > shared_->options.max_clients) {
        shared_->connections.fetch_sub(1, std::memory_order_relaxed);
        shared_->refused.fetch_add(1, std::memory_order_relaxed);
        ssize_t sent = send(fd, listener.refusal.data(), listener.refusal.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
        (void)sent;  // best effort: the connection is closed either way
        close(fd);
        continue;
      }
      shared_->accepted.fetch_add(1, std::memory_order_relaxed);
      auto c = std::make_unique<Connection>();
      c->fd = fd;
      c->session = listener.make_session(index_);
      epoll_event ev{};
      ev.events = EPOLLIN;
      ev.data.u64 = static_cast<uint64_t>(fd);
      if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev) != 0) {
        LOG(ERROR) << "epoll_ctl(connection): " << std::strerror(errno);
        close(fd);
        shared_->connections.fetch_sub(1, std::memory_order_relaxed);
        continue;
      }
      c->events = EPOLLIN;
      connections_[fd] = std::move(c);
    }
  }

  void ResumeListeners() {
    auto now = std::chrono::steady_clock::now();
    for (size_t i = 0; i < paused_listeners_.size();) {
      if (paused_listeners_[i].until <= now) {
        WatchListener(paused_listeners_[i].index).IgnoreError();
        paused_listeners_.erase(paused_listeners_.begin() + static_cast<long>(i));
      } else {
        ++i;
      }
    }
  }

  // Reads into the thread's buffer and appends what came: growing the
  // input by a whole chunk to recv into it would zero 64 KiB per read.
  void Read(Connection& c) {
    const size_t limit = shared_->options.output_limit_bytes;
    for (int round = 0; round < kReadsPerWake && c.fd >= 0; ++round) {
      if (c.closing || c.peer_closed || c.deferred || c.pending_out() >= limit) return;
      ssize_t n = recv(c.fd, read_buffer_.get(), kReadChunk, 0);
      if (n > 0) {
        c.in.append(read_buffer_.get(), static_cast<size_t>(n));
        RaisePeak(shared_->peak_input_bytes, c.pending_in());
        ServeAndWrite(c);
        if (static_cast<size_t>(n) < kReadChunk) return;
        continue;
      }
      if (n == 0) {
        c.peer_closed = true;
        return;
      }
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) Drop(c);
      return;
    }
  }

  // Runs the session over the input while its output is under the limit
  // and it does not wait for the round, then sends what it can. `resume`:
  // the round ran; the session is served once even with no input (it
  // appends the deferred replies first).
  void ServeAndWrite(Connection& c, bool resume = false) {
    const size_t limit = shared_->options.output_limit_bytes;
    while (c.fd >= 0 && !c.deferred && (resume || (!c.closing && c.pending_in() > 0 && c.pending_out() < limit))) {
      resume = false;
      if (c.out_sent > 0) {
        c.out.erase(0, c.out_sent);
        c.out_sent = 0;
      }
      std::string_view in(c.in.data() + c.in_start, c.pending_in());
      ServeResult r = c.session->Serve(in, &c.out, limit);
      c.in_start += std::min(r.consumed, in.size());
      RaisePeak(shared_->peak_output_bytes, c.pending_out());
      if (r.close) c.closing = true;
      if (r.deferred) {
        if (round_ == nullptr) {
          LOG(ERROR) << "a session deferred its work on a loop thread without a round; closing its connection";
          Drop(c);
          break;
        }
        c.deferred = true;
        deferred_.push_back(c.fd);
        break;
      }
      if (r.consumed == 0) break;
      Write(c);
    }
    if (c.in_start == c.in.size()) {
      c.in.clear();
      c.in_start = 0;
      if (c.in.capacity() > kKeepCapacity) c.in.shrink_to_fit();
    } else if (c.in_start > c.in.size() / 2) {
      c.in.erase(0, c.in_start);
      c.in_start = 0;
    }
    Write(c);
  }

  void Write(Connection& c) {
    while (c.fd >= 0 && c.pending_out() > 0) {
      ssize_t n = send(c.fd, c.out.data() + c.out_sent, c.pending_out(), MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n > 0) {
        c.out_sent += static_cast<size_t>(n);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
      Drop(c);  // the peer is gone (EPIPE, ECONNRESET)
      return;
    }
    if (c.fd >= 0 && c.pending_out() == 0) {
      c.out.clear();
      c.out_sent = 0;
      if (c.out.capacity() > kKeepCapacity) c.out.shrink_to_fit();
    }
  }

  // Registers the interest the connection's state calls for, or closes it
  // once nothing is left to send after the session or the peer ended it
  // (input left then is an incomplete request: complete ones were served).
  void Update(Connection& c) {
    if (c.fd >= 0 && !c.deferred && (c.closing || c.peer_closed) && c.pending_out() == 0) Drop(c);
    if (c.fd < 0) return ForgetClosed();
    const size_t limit = shared_->options.output_limit_bytes;
    uint32_t want = 0;
    if (!c.closing && !c.peer_closed && c.pending_out() < limit) want |= EPOLLIN;
    if (c.pending_out() > 0) want |= EPOLLOUT;
    if (want != c.events) {
      epoll_event ev{};
      ev.events = want;
      ev.data.u64 = static_cast<uint64_t>(c.fd);
      if (epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, c.fd, &ev) != 0) {
        Drop(c);
        return ForgetClosed();
      }
      c.events = want;
    }
  }

  // Runs the work the connections deferred in this pass and serves each of
  // them on, until none waits: a connection's input already read is
  // served before the thread waits on epoll again (epoll would not report
  // it). A connection closed meanwhile is skipped (its descriptor, reused
  // by a newer connection, finds one that is not deferred).
  void RunRound() {
    while (round_ != nullptr && round_->pending()) {
      round_->Execute();
      resuming_.swap(deferred_);
      deferred_.clear();
      for (int fd : resuming_) {
        auto it = connections_.find(fd);
        if (it == connections_.end()) continue;
        Connection& c = *it->second;
        if (c.fd < 0 || !c.deferred) continue;
        c.deferred = false;
        ServeAndWrite(c, /*resume=*/true);
        Update(c);
      }
      resuming_.clear();
    }
  }

  void CloseFd(Connection& c) {
    if (c.fd < 0) return;
    close(c.fd);
    c.fd = -1;
    shared_->connections.fetch_sub(1, std::memory_order_relaxed);
  }

  // Closes the socket (epoll forgets a closed descriptor by itself); the
  // connection's memory goes in ForgetClosed, once no reference to it is
  // left.
  void Drop(Connection& c) {
    if (c.fd < 0) return;
    closed_fds_.push_back(c.fd);
    CloseFd(c);
  }

  void ForgetClosed() {
    for (int fd : closed_fds_) connections_.erase(fd);
    closed_fds_.clear();
  }

  struct PausedListener {
    size_t index;
    std::chrono::steady_clock::time_point until;
  };

  Shared* shared_;
  const int index_;
  Round* const round_;  // null: sessions never defer
  std::unique_ptr<char[]> read_buffer_;  // kReadChunk bytes
  // Adaptive spinning (Wait): the bound, the window now (the bound at
  // first), and the cooldown after a spin lost its CPU.
  const std::chrono::nanoseconds max_spin_;
  std::chrono::nanoseconds spin_window_;
  rkv::transport::SpinCooldown spin_cooldown_;
  std::vector<int> deferred_;   // connections waiting for round_
  std::vector<int> resuming_;   // RunRound's copy of deferred_
  int epoll_fd_ = -1;
  int wake_fd_ = -1;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  std::unordered_map<int, std::unique_ptr<Connection>> connections_;
  std::vector<int> closed_fds_;
  std::vector<PausedListener> paused_listeners_;
};

rkv::StatusOr<std::unique_ptr<EventLoop>> EventLoop::Start(std::vector<ListenerSpec> listeners,
                                                           const LoopOptions& options) {
  if (options.threads < 1) return rkv::Status(rkv::StatusCode::kInvalidArgument, "threads must be at least 1");
  if (options.spin_us < 0 || options.spin_us > 1000000) {
    return rkv::Status(rkv::StatusCode::kInvalidArgument, "spin_us must be within 0..1000000");
  }
  if (options.max_clients < 1) return rkv::Status(rkv::StatusCode::kInvalidArgument, "max_clients must be at least 1");
  if (options.output_limit_bytes < 1) {
    return rkv::Status(rkv::StatusCode::kInvalidArgument, "output_limit_bytes must be at least 1");
  }
  if (!options.rounds.empty() && options.rounds.size() != static_cast<size_t>(options.threads)) {
    return rkv::Status(rkv::StatusCode::kInvalidArgument, "rounds must be empty or one per thread");
  }
  std::unique_ptr<EventLoop> loop(new EventLoop());
  loop->shared_ = std::make_unique<Shared>();
  loop->shared_->listeners = std::move(listeners);
  loop->shared_->options = options;
  for (int i = 0; i < options.threads; ++i) {
    auto thread = std::make_unique<Thread>(loop->shared_.get(), i);
    rkv::Status init = thread->Init();
    if (!init.ok()) return init;
    loop->threads_.push_back(std::move(thread));
  }
  for (auto& thread : loop->threads_) thread->Run();
  return loop;
}

EventLoop::~EventLoop() { Stop(); }

void EventLoop::Stop() {
  if (stopped_) return;
  stopped_ = true;
  for (auto& thread : threads_) thread->RequestStop();
  for (auto& thread : threads_) thread->Join();
}

LoopStats EventLoop::Stats() const {
  LoopStats stats;
  stats.connections = shared_->connections.load(std::memory_order_relaxed);
  stats.accepted = shared_->accepted.load(std::memory_order_relaxed);
  stats.refused = shared_->refused.load(std::memory_order_relaxed);
  stats.peak_output_bytes = shared_->peak_output_bytes.load(std::memory_order_relaxed);
  stats.peak_input_bytes = shared_->peak_input_bytes.load(std::memory_order_relaxed);
  stats.spun_waits = shared_->spun_waits.load(std::memory_order_relaxed);
  stats.slept_waits = shared_->slept_waits.load(std::memory_order_relaxed);
  return stats;
}

}  // namespace rkv::gateway
