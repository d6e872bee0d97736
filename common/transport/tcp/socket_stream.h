// The byte stream of one tcp-transport socket: the socket itself, or a TLS
// session over it (tls_session.h). Every read and write of a connection's
// bytes, in setup and on the data path, goes through one, so the rest of
// the transport is the same with and without TLS. Internal to
// common/transport/tcp/.
//
// Errors follow recv(2) and send(2) (socket_io.h's conventions): Error()
// turns a -1 into a Status that keeps the call and errno, or the TLS
// error behind an EPROTO.
//
// Thread safety: as the socket's: one thread may read while another
// writes (a TLS session serializes them itself); not two readers or two
// writers at once.
#pragma once

#include <sys/socket.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "common/status.h"
#include "common/transport/tcp/byte_buffer.h"
#include "common/transport/tcp/socket_io.h"
#include "common/transport/tcp/tcp_frame.h"
#include "common/transport/tcp/tls_session.h"

namespace rkv::transport::tcp {

class SocketStream {
 public:
  SocketStream() = default;
  // `fd` stays its owner's; `tls` (may be null: plain tcp) runs over it.
  explicit SocketStream(int fd, std::unique_ptr<TlsSession> tls = nullptr) : fd_(fd), tls_(std::move(tls)) {}

  int fd() const { return fd_; }
  bool tls() const { return tls_ != nullptr; }
  TlsSession* session() const { return tls_.get(); }
  // Hands the session to the stream that goes on with the socket.
  std::unique_ptr<TlsSession> TakeSession() { return std::move(tls_); }

  // recv(2)/send(2) with MSG_DONTWAIT (and MSG_NOSIGNAL), in plaintext.
  ssize_t Recv(uint8_t* p, size_t n) {
    return tls_ ? tls_->Recv(p, n) : ::recv(fd_, p, n, MSG_DONTWAIT);
  }
  ssize_t Send(const uint8_t* p, size_t n) {
    return tls_ ? tls_->Send(p, n) : ::send(fd_, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
  }
  // Bytes already read from the socket wait in the stream: Recv returns
  // them though the socket need not be readable.
  bool HasPending() const { return tls_ != nullptr && tls_->HasPending(); }
  // Ends this side's sending: close_notify (TLS), then SHUT_WR.
  void ShutdownWrite() {
    if (tls_) tls_->Close();
    ::shutdown(fd_, SHUT_WR);
  }
  // The Status of a failed `call` ("recv from X") that left `err`.
  Status Error(const std::string& call, int err) const {
    if (tls_ != nullptr && err == EPROTO) return Unavailable(call + ": TLS: " + tls_->error());
    return PosixError(call, err);
  }

 private:
  int fd_ = -1;
  std::unique_ptr<TlsSession> tls_;
};

// Sends all of [p, p+n) on `stream` by `deadline`.
Status SendAllBy(SocketStream& stream, const uint8_t* p, size_t n, Clock::time_point deadline,
                 const std::string& what);

// Reads from `stream` until `rx` holds one whole frame, by `deadline`, and
// returns its header; the frame stays at the head of `rx`. UNAVAILABLE when
// the peer closes the connection first, INVALID_ARGUMENT for a bad header.
StatusOr<FrameHeader> ReadFrameBy(SocketStream& stream, ByteBuffer& rx, Clock::time_point deadline,
                                  const std::string& what);

// Runs `session`'s handshake on `fd` to its end by `deadline`.
Status HandshakeBy(TlsSession& session, int fd, Clock::time_point deadline, const std::string& what);

}  // namespace rkv::transport::tcp
