// The listening side of the tcp transport. Internal to
// common/transport/tcp/; users see the Listener interface of
// common/transport/transport.h.
//
// Next() accepts sockets and reads their CONNECT frames itself, on the
// caller's thread: no thread of the listener's own. A socket stays in setup
// until its CONNECT frame is whole (then Next returns it as a pending
// TcpConnection), its peer breaks the protocol or leaves, or
// kHandshakeTimeout passes; the last three drop it with a warning in the
// log. At most kMaxPendingHandshakes sockets are in setup at once; more are
// closed as they arrive, so a flood of idle sockets costs bounded memory.
//
// Thread safety: Next may be called from one thread at a time (calls are
// serialized by mu_); Shutdown and address from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "common/mutex.h"
#include "common/status.h"
#include "common/thread_annotations.h"
#include "common/transport/tcp/byte_buffer.h"
#include "common/transport/tcp/region_registry.h"
#include "common/transport/tcp/socket_io.h"
#include "common/transport/transport.h"

namespace rkv::transport::tcp {

class TcpListener final : public Listener {
 public:
  // A peer that opens a socket and sends no CONNECT frame is dropped after this.
  static constexpr auto kHandshakeTimeout = std::chrono::seconds(10);
  // Sockets in setup at once; more are closed at once.
  static constexpr size_t kMaxPendingHandshakes = 256;

  // Takes over `fd`, a bound, listening, non-blocking socket whose local
  // name is `address`. `wake_fd` is an eventfd for this listener alone.
  TcpListener(std::shared_ptr<Registry> registry, const Options& options, UniqueFd fd, UniqueFd wake_fd,
              std::string address);

  std::string address() const override { return address_; }
  StatusOr<std::unique_ptr<Connection>> Next(std::chrono::milliseconds timeout) override EXCLUDES(mu_);
  void Shutdown() override;

 private:
  // A socket in setup.
  struct Handshake {
    UniqueFd fd;
    std::string peer;
    ByteBuffer rx;
    Clock::time_point deadline;
  };

  // Accepts every socket waiting on fd_ into handshakes_.
  void AcceptSockets() REQUIRES(mu_);

  // Reads what a socket in setup has sent: a pending connection once its
  // CONNECT frame is whole, nullptr while incomplete, an error when the
  // peer does not speak the protocol or left.
  StatusOr<std::unique_ptr<Connection>> Progress(Handshake& hs);

  const std::shared_ptr<Registry> registry_;
  const Options options_;
  const UniqueFd fd_;
  const UniqueFd wake_fd_;  // ends Next's poll: Shutdown
  const std::string address_;
  std::atomic<bool> shutdown_{false};

  Mutex mu_;  // serializes Next
  std::vector<std::unique_ptr<Handshake>> handshakes_ GUARDED_BY(mu_);
};

}  // namespace rkv::transport::tcp
