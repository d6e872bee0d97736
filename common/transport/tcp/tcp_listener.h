// The listening side of the tcp transport. Internal to
// common/transport/tcp/; users see the Listener interface of
// common/transport/transport.h.
//
// Next() accepts sockets and reads their CONNECT frames itself, on the
// caller's thread: no thread of the listener's own. A socket stays in setup
// until its CONNECT frame is whole (then Next returns it as a pending
// TcpConnection), its peer breaks the protocol or leaves, or
// Options::handshake_timeout passes since it was accepted; the last three
// drop it with a warning in the log.
//
// Sockets that never speak cannot lock clients out: at most
// Options::max_pending_handshakes sockets are in setup at once, and at most
// Options::max_handshakes_per_source from one source address. A new socket
// beyond a limit is always taken; it evicts the oldest socket in setup from
// its own address, or (the table full) the oldest from the address with
// the most sockets in setup. A client sends its CONNECT frame right after
// connecting, so it is read within one round of Next unless a whole table
// of newer sockets arrived meanwhile; the accept path itself never waits
// on a socket.
//
// A whole CONNECT frame is first screened: a source over
// Options::max_refusals_per_source refusals within the second is refused
// UNAVAILABLE unscreened, and the caller's Screen may refuse the request.
// Either way the REJECT frame is written on the socket in setup and the
// socket closed: no TcpConnection, event fd or buffer beyond the socket's
// setup bytes is made for it (ListenerCounters says how many).
//
// TLS (a listener given a TlsContext: Options::tls has a certificate): a
// socket in setup first completes its TLS handshake, non-blocking like the
// rest, within the same handshake_timeout; its CONNECT frame and everything
// after it then go through the session. A socket whose first byte is not a
// TLS record is a plain client: it gets a REJECT frame, in plain tcp,
// saying that this server takes TLS only. A listener without TLS drops a
// socket whose first byte is one, saying so in the log.
//
// A connection for which Next's chooser picks a poll group (one of this
// transport's TcpPollGroups; another transport's drops the socket as a
// failed setup, with a warning) joins it on Accept instead of starting a
// reader thread.
//
// Thread safety: Next may be called from one thread at a time (calls are
// serialized by mu_); Shutdown and address from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/mutex.h"
#include "common/status.h"
#include "common/thread_annotations.h"
#include "common/transport/source_refusals.h"
#include "common/transport/tcp/byte_buffer.h"
#include "common/transport/tcp/region_registry.h"
#include "common/transport/tcp/socket_io.h"
#include "common/transport/tcp/socket_stream.h"
#include "common/transport/tcp/tls_session.h"
#include "common/transport/transport.h"

namespace rkv::transport::tcp {

class TcpPollGroup;

class TcpListener final : public Listener {
 public:
  // Takes over `fd`, a bound, listening, non-blocking socket whose local
  // name is `address`. `wake_fd` is an eventfd for this listener alone.
  // `tls` (may be null: plain tcp) must serve().
  TcpListener(std::shared_ptr<Registry> registry, const Options& options, UniqueFd fd, UniqueFd wake_fd,
              std::string address, std::shared_ptr<TlsContext> tls = nullptr);

  std::string address() const override { return address_; }
  using Listener::Next;
  StatusOr<std::unique_ptr<Connection>> Next(std::chrono::milliseconds timeout, const Screen& screen,
                                             const GroupChooser& choose) override EXCLUDES(mu_);
  ListenerCounters counters() const override;
  void Shutdown() override;

 private:
  static constexpr auto kAcceptPauseOnNoFds = std::chrono::milliseconds(10);

  // A socket in setup.
  struct Handshake {
    UniqueFd fd;
    std::string peer;    // "host:port", for logs
    std::string source;  // the peer's address without the port
    ByteBuffer rx;
    Clock::time_point deadline;
    // The socket's bytes; through TLS once its session is made.
    SocketStream stream;
    bool tls_done = false;    // the TLS handshake is complete
    bool want_write = false;  // the TLS handshake waits for room to send
  };

  // Accepts every socket waiting on fd_ into handshakes_.
  void AcceptSockets() REQUIRES(mu_);

  // Makes room in handshakes_ for a new socket from `source` (the class
  // comment says which socket goes).
  void EvictFor(const std::string& source) REQUIRES(mu_);

  // Reads what a socket in setup has sent: a pending connection (which
  // joins the group `choose` picks, if any, on Accept) once its CONNECT
  // frame is whole,
  // nullptr while incomplete, an error when the peer does not speak the
  // protocol or left.
  // A request refused (by the source limit or `screen`) gets its REJECT
  // frame and sets `*refused`; the caller drops the socket.
  StatusOr<std::unique_ptr<Connection>> Progress(Handshake& hs, const Screen& screen, const GroupChooser& choose,
                                                 bool* refused) REQUIRES(mu_);
  // Moves a socket in setup through its TLS handshake (tls_ set): true
  // once it is complete, false while it waits for the socket (or, with
  // `*refused` set, when the peer is a plain client and was refused), an
  // error when the handshake failed.
  StatusOr<bool> AdvanceTls(Handshake& hs, bool* refused) REQUIRES(mu_);
  // Writes the REJECT frame of `why` on a socket in setup and shuts its
  // sending side (the socket is closed when the handshake is dropped).
  static void RefuseInSetup(Handshake& hs, const Rejection& why);

  const std::shared_ptr<Registry> registry_;
  const Options options_;
  const UniqueFd fd_;
  const UniqueFd wake_fd_;  // ends Next's poll: Shutdown
  const std::string address_;
  const std::shared_ptr<TlsContext> tls_;  // null: plain tcp
  std::atomic<bool> shutdown_{false};

  Mutex mu_;  // serializes Next
  // In order of acceptance: the oldest first.
  std::vector<std::unique_ptr<Handshake>> handshakes_ GUARDED_BY(mu_);
  // handshakes_ per source address (no zero counts).
  std::unordered_map<std::string, uint32_t> per_source_ GUARDED_BY(mu_);
  uint64_t evicted_ GUARDED_BY(mu_) = 0;
  SourceRefusals source_refusals_ GUARDED_BY(mu_);
  // ListenerCounters, read from any thread.
  std::atomic<uint64_t> screened_out_{0};
  std::atomic<uint64_t> source_limited_{0};
  std::atomic<uint64_t> created_{0};
  // accept(2) ran out of descriptors with no socket in setup to close: the
  // listening socket is not polled before this.
  Clock::time_point accept_paused_until_ GUARDED_BY(mu_);
};

}  // namespace rkv::transport::tcp
