// The event loop of rkv-gateway: N threads, each with its own epoll set,
// serving client connections of every protocol through gateway/session.h.
//
// Every loop thread watches every listening socket (EPOLLEXCLUSIVE, so one
// waiting thread wakes per new connection) and keeps the connections it
// accepted for their whole life: a connection's bytes are only ever
// touched by one thread, with no lock. Sockets are non-blocking and
// level-triggered. Per connection:
//   - input: what recv delivers is appended to an input buffer and the
//     session's Serve takes the complete requests from its front (a
//     pipeline split anywhere is served the same);
//   - output: replies are appended to an output buffer and sent as the
//     socket takes them;
//   - back-pressure: once the unsent output reaches `output_limit_bytes`
//     the loop stops reading the socket (and Serve stops before the next
//     request), and resumes only when the client has read enough; so a
//     client that pipelines without reading holds at most about the limit
//     (plus one batch of replies) and its unread requests stay in the
//     kernel's socket buffers, then in its own;
//   - input is bounded by the protocol (a request over its limits is an
//     error, and the session asks for close);
//   - a connection beyond `max_clients` is sent the protocol's refusal and
//     closed at once.
// Serve runs rkv calls synchronously on the loop thread: a thread serves
// one connection's batch at a time, so `threads` bounds the rkv calls in
// flight (with the Client's connection pool; docs/design.md). With a Round
// per thread (LoopOptions::rounds), sessions may defer their batches
// instead: after each pass over the connections that epoll_wait reported
// ready, the thread runs its round (one batch for all of them) and serves
// each deferred connection on, again until nothing is deferred.
// A thread with nothing ready spins briefly before it sleeps
// (LoopOptions::spin_us), so that a request arriving soon after the last
// is served without a wake-up.
//
// Thread safety: Start and Stop from one thread (the owner's); Stats from
// any thread.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "gateway/session.h"
#include "rkv/status.h"

namespace rkv::gateway {

struct ListenerSpec {
  std::string protocol;  // for logs: "redis", "memcached"
  int fd = -1;           // a listening, non-blocking socket (Listen); the loop does not own it
  // Makes the session of each connection accepted by loop thread `thread`
  // (0..threads-1), called on that thread: a factory may give each thread
  // its own rkv::Client.
  std::function<std::unique_ptr<Session>(int thread)> make_session;
  // Sent to a connection refused for max_clients before it is closed.
  std::string refusal;
};

struct LoopOptions {
  int threads = 2;                              // >= 1
  size_t max_clients = 10000;                   // connections of all listeners at once
  size_t output_limit_bytes = size_t{1} << 20;  // unsent output at which reading stops
  // Empty, or one per thread (index: the thread's, as make_session gets
  // it): the Round that thread's sessions defer to. Not owned; must
  // outlive the loop.
  std::vector<Round*> rounds;
  // Adaptive polling, as rkv's transports wait (common/transport/
  // spin_window.h, docs/design.md §8.14.1): before a thread sleeps in
  // epoll_wait it polls its epoll set without blocking for up to its spin
  // window, which adapts below this bound (a wait that ended within it
  // grows the window, one that outlasted it shrinks it to nothing, so an
  // idle thread sleeps at once). No spinning while the machine has more
  // runnable threads than CPUs, or for a while after a spin lost its CPU.
  // 0 never spins; at most 1,000,000.
  int64_t spin_us = 0;
};

struct LoopStats {
  uint64_t connections = 0;       // open now
  uint64_t accepted = 0;          // since Start
  uint64_t refused = 0;           // refused for max_clients
  uint64_t peak_output_bytes = 0; // the largest unsent output one connection held
  uint64_t peak_input_bytes = 0;  // the largest unserved input one connection held
  uint64_t spun_waits = 0;        // waits that found work while spinning (no sleep, no wake-up)
  uint64_t slept_waits = 0;       // waits that slept in epoll_wait
};

class EventLoop {
 public:
  // Starts the threads. INVALID_ARGUMENT for bad options; the system's
  // error (epoll_create1, eventfd) otherwise.
  static rkv::StatusOr<std::unique_ptr<EventLoop>> Start(std::vector<ListenerSpec> listeners,
                                                         const LoopOptions& options);
  // Stops (see Stop).
  ~EventLoop();
  EventLoop(const EventLoop&) = delete;
  EventLoop& operator=(const EventLoop&) = delete;

  // Stops accepting, lets each thread finish the request it is executing,
  // sends what each connection's output holds as far as its socket takes
  // it without waiting, closes every connection and joins the threads.
  // Idempotent.
  void Stop();

  LoopStats Stats() const;

 private:
  class Thread;
  struct Shared {
    std::vector<ListenerSpec> listeners;
    LoopOptions options;
    std::atomic<uint64_t> connections{0};
    std::atomic<uint64_t> accepted{0};
    std::atomic<uint64_t> refused{0};
    std::atomic<uint64_t> peak_output_bytes{0};
    std::atomic<uint64_t> peak_input_bytes{0};
    std::atomic<uint64_t> spun_waits{0};
    std::atomic<uint64_t> slept_waits{0};
  };
  EventLoop() = default;

  std::unique_ptr<Shared> shared_;
  std::vector<std::unique_ptr<Thread>> threads_;
  bool stopped_ = false;
};

}  // namespace rkv::gateway
