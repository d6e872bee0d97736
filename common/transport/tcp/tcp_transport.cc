// The tcp transport: Register, Listen and Connect. The parts it is made of:
//   region_registry.h   rkey -> registered region; checks every remote access.
//   tcp_listener.h      accepts sockets and reads their CONNECT frames.
//   tcp_connection.h    one socket: an emulated RC queue pair.
//   tcp_poll_group.h    one thread serving many accepted connections.
//   socket_io.h         non-blocking sockets, deadlines and wake-ups.
//   socket_stream.h     a socket's bytes, plain or through TLS.
//   tls_session.h       TLS on the data plane (Options::tls).
//   tcp_frame.h         the wire format.
#include "common/transport/tcp/tcp_transport.h"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "common/net_address.h"
#include "common/transport/tcp/byte_buffer.h"
#include "common/transport/tcp/region_registry.h"
#include "common/transport/tcp/socket_io.h"
#include "common/transport/tcp/socket_stream.h"
#include "common/transport/tcp/tcp_connection.h"
#include "common/transport/tcp/tcp_frame.h"
#include "common/transport/tcp/tcp_listener.h"
#include "common/transport/tcp/tcp_poll_group.h"
#include "common/transport/tcp/tls_session.h"

namespace rkv::transport {
namespace tcp {
namespace {

struct AddrInfoDeleter {
  void operator()(addrinfo* ai) const { ::freeaddrinfo(ai); }
};

StatusOr<std::unique_ptr<addrinfo, AddrInfoDeleter>> Resolve(const std::string& host, uint16_t port, int flags) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = flags | AI_NUMERICSERV;
  addrinfo* result = nullptr;
  const int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &result);
  if (rc != 0) return Unavailable("cannot resolve '" + host + "': " + ::gai_strerror(rc));
  return std::unique_ptr<addrinfo, AddrInfoDeleter>(result);
}

class TcpTransport final : public Transport {
 public:
  TcpTransport(const Options& options, std::shared_ptr<TlsContext> tls)
      : options_(options), registry_(std::make_shared<Registry>()), tls_(std::move(tls)) {}

  Kind kind() const override { return Kind::kTcp; }
  bool one_sided_uses_target_cpu() const override { return true; }

  StatusOr<std::unique_ptr<MemoryRegion>> Register(void* addr, size_t length, uint32_t access) override {
    return RegisterRegion(registry_, addr, length, access, /*owner=*/0);
  }

  StatusOr<std::unique_ptr<PollGroup>> NewPollGroup() override {
    RKV_ASSIGN_OR_RETURN(std::unique_ptr<TcpPollGroup> group, TcpPollGroup::Create(options_));
    return std::unique_ptr<PollGroup>(std::move(group));
  }
  StatusOr<std::unique_ptr<Listener>> Listen(const std::string& address) override {
    std::string host;
    uint16_t port = 0;
    RKV_RETURN_IF_ERROR(ParseHostPort(address, &host, &port));
    RKV_ASSIGN_OR_RETURN(auto addrs, Resolve(host, port, AI_PASSIVE));
    Status last = Unavailable("no address to listen on for '" + address + "'");
    for (const addrinfo* ai = addrs.get(); ai != nullptr; ai = ai->ai_next) {
      UniqueFd fd(::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol));
      if (!fd.valid()) {
        last = PosixError("socket", errno);
        continue;
      }
      const int one = 1;
      if (::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0) {
        last = PosixError("setsockopt(SO_REUSEADDR)", errno);
        continue;
      }
      if (::bind(fd.get(), ai->ai_addr, ai->ai_addrlen) != 0) {
        last = PosixError("bind(" + address + ")", errno);
        continue;
      }
      if (::listen(fd.get(), SOMAXCONN) != 0) {
        last = PosixError("listen(" + address + ")", errno);
        continue;
      }
      sockaddr_storage ss{};
      socklen_t len = sizeof ss;
      if (::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&ss), &len) != 0) {
        return PosixError("getsockname", errno);
      }
      RKV_ASSIGN_OR_RETURN(UniqueFd wake, MakeEventFd());
      return std::unique_ptr<Listener>(std::make_unique<TcpListener>(
          registry_, options_, std::move(fd), std::move(wake), SockaddrToString(reinterpret_cast<sockaddr*>(&ss)),
          tls_ != nullptr && tls_->serves() ? tls_ : nullptr));
    }
    return last;
  }

  using Transport::Connect;
  StatusOr<std::unique_ptr<Connection>> Connect(const std::string& address, std::span<const uint8_t> private_data,
                                                std::chrono::milliseconds timeout, Rejection* rejected) override {
    if (private_data.size() > kMaxConnectData) {
      return InvalidArgument("connect private data of " + std::to_string(private_data.size()) +
                             " bytes exceeds " + std::to_string(kMaxConnectData));
    }
    std::string host;
    uint16_t port = 0;
    RKV_RETURN_IF_ERROR(ParseHostPort(address, &host, &port));
    if (port == 0) return InvalidArgument("cannot connect to port 0 ('" + address + "')");
    const auto deadline = DeadlineAfter(timeout);
    RKV_ASSIGN_OR_RETURN(UniqueFd fd, Dial(host, port, address, deadline));
    RKV_RETURN_IF_ERROR(SetNoDelay(fd.get()));
    SocketStream stream(fd.get());
    if (tls_ != nullptr && tls_->connects()) {
      RKV_ASSIGN_OR_RETURN(std::unique_ptr<TlsSession> session, tls_->NewClientSession(fd.get(), host));
      RKV_RETURN_IF_ERROR(HandshakeBy(*session, fd.get(), deadline, address));
      stream = SocketStream(fd.get(), std::move(session));
    }

    std::vector<uint8_t> hello(kHeaderBytes + private_data.size());
    FrameHeader h = MakeHeader(FrameType::kConnect, 0);
    h.addr = kHelloMagic;
    h.payload_len = static_cast<uint32_t>(private_data.size());
    std::memcpy(hello.data(), &h, kHeaderBytes);
    if (!private_data.empty()) std::memcpy(hello.data() + kHeaderBytes, private_data.data(), private_data.size());
    RKV_RETURN_IF_ERROR(SendAllBy(stream, hello.data(), hello.size(), deadline, address));

    ByteBuffer rx;
    StatusOr<FrameHeader> reply = ReadFrameBy(stream, rx, deadline, address);
    if (!reply.ok()) {
      if (reply.status().code() == StatusCode::kInvalidArgument) {
        return Unavailable("bad reply from " + address + ": " + reply.status().message());
      }
      return reply.status();
    }
    const uint8_t* payload = rx.head() + kHeaderBytes;
    const FrameType type = static_cast<FrameType>(reply->type);
    if (type == FrameType::kReject) {
      Rejection why = DecodeRejection(std::span<const uint8_t>(payload, reply->payload_len));
      Status status = RejectedStatus("connection to " + address, why);
      if (rejected != nullptr) *rejected = std::move(why);
      return status;
    }
    if (type != FrameType::kAccept) {
      return Unavailable(std::string("bad reply from ") + address + ": " + FrameTypeName(reply->type) +
                         " frame during setup");
    }
    std::vector<uint8_t> accept_data(payload, payload + reply->payload_len);
    rx.Consume(kHeaderBytes + reply->payload_len);  // what follows is data-path traffic
    RKV_ASSIGN_OR_RETURN(UniqueFd wake, MakeEventFd());
    auto conn = std::make_unique<TcpConnection>(registry_, options_, std::move(fd), std::move(wake),
                                                std::move(accept_data), std::move(rx), /*established=*/true,
                                                /*group=*/nullptr, stream.TakeSession());
    conn->Start();
    return std::unique_ptr<Connection>(std::move(conn));
  }

 private:
  // A connected non-blocking socket to host:port, by `deadline`.
  static StatusOr<UniqueFd> Dial(const std::string& host, uint16_t port, const std::string& address,
                                 Clock::time_point deadline) {
    RKV_ASSIGN_OR_RETURN(auto addrs, Resolve(host, port, 0));
    Status last = Unavailable("no address for '" + address + "'");
    for (const addrinfo* ai = addrs.get(); ai != nullptr; ai = ai->ai_next) {
      UniqueFd fd(::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol));
      if (!fd.valid()) {
        last = PosixError("socket", errno);
        continue;
      }
      if (::connect(fd.get(), ai->ai_addr, ai->ai_addrlen) != 0) {
        // EINTR: the connect goes on asynchronously, as with EINPROGRESS.
        if (errno != EINPROGRESS && errno != EINTR) {
          last = PosixError("connect(" + address + ")", errno);
          continue;
        }
        RKV_RETURN_IF_ERROR(WaitFd(fd.get(), POLLOUT, deadline, "timed out connecting to " + address));
        int err = 0;
        socklen_t len = sizeof err;
        if (::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
        if (err != 0) {
          last = PosixError("connect(" + address + ")", err);
          continue;
        }
      }
      return fd;
    }
    return last;
  }

  const Options options_;
  const std::shared_ptr<Registry> registry_;
  // TLS on the data plane (Options::tls), or null.
  const std::shared_ptr<TlsContext> tls_;
};

}  // namespace
}  // namespace tcp

StatusOr<std::unique_ptr<Transport>> CreateTcpTransport(const Options& options) {
  if (options.poll_spin_us < 0 || options.poll_spin_us > 1'000'000) {
    return InvalidArgument("poll_spin_us " + std::to_string(options.poll_spin_us) + " is outside [0, 1000000]");
  }
  RKV_ASSIGN_OR_RETURN(std::shared_ptr<tcp::TlsContext> tls, tcp::TlsContext::Load(options.tls));
  return std::unique_ptr<Transport>(std::make_unique<tcp::TcpTransport>(options, std::move(tls)));
}

}  // namespace rkv::transport
