// TLS on the tcp data plane (Options::tls; docs/design.md §10): the
// contexts made from a process's PEM files, and one connection's session.
// Internal to common/transport/tcp/.
//
// A listener whose transport has a certificate and key takes TLS
// connections only; a connecting side whose transport has a CA bundle
// speaks TLS and verifies the server's certificate against it and against
// the host it dialled (an IP address must be one of the certificate's IP
// SANs, a name one of its DNS names). TLS 1.3 only. No client certificate
// is asked for: a data-plane peer proves its credential inside the
// connection (common/connect_proof.h), and TLS adds what that proof lacks,
// secrecy and the server's authenticity.
//
// Sockets. A session reads and writes its non-blocking socket itself,
// through a BIO of its own that sends with MSG_NOSIGNAL: a peer that
// resets the connection gives EPIPE, never a SIGPIPE that would end a
// library user's process. OpenSSL's own socket BIO, which kernel TLS
// (kTLS) needs, writes with write(2) and would raise one; rkv therefore
// encrypts in user space (docs/design.md §10 says what that costs).
//
// Rotation: a context looks at its files at most every kRefreshInterval,
// when a session is made; a file whose size or modification time changed
// makes it reload all of them. Sessions already made keep what they were
// made with; a reload that fails (a half-written file, a key that does not
// match its certificate) keeps the previous files and is logged.
//
// Thread safety: TlsContext is thread-safe. A TlsSession serializes its
// calls with its own mutex, so one thread may read while another writes
// (OpenSSL's SSL object allows neither alone); it takes no other lock.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <ctime>
#include <memory>
#include <string>

#include "common/mutex.h"
#include "common/status.h"
#include "common/thread_annotations.h"
#include "common/transport/transport.h"

// OpenSSL's types, declared here so that users of this header need not
// include OpenSSL's.
struct ssl_st;
struct ssl_ctx_st;

namespace rkv::transport::tcp {

class TlsSession;

// The first byte a TLS client sends (a handshake record's type), which no
// frame starts with (kFrameMagic's first byte is 'R'): a listener tells a
// TLS client from a plain one by it.
inline constexpr uint8_t kTlsHandshakeRecordType = 0x16;

class TlsContext {
 public:
  // How often a context looks at its files for a rotation.
  static constexpr std::chrono::seconds kRefreshInterval{5};
  // The most bytes one PEM file may hold.
  static constexpr size_t kMaxFileBytes = size_t{1} << 20;

  // Loads `files`: a serving side when cert_file and key_file are given
  // (both or neither), a connecting side when ca_file is. INVALID_ARGUMENT
  // naming the field and the file when one is missing, unreadable, not
  // PEM, or the key does not match the certificate; nullptr when all three
  // are empty (no TLS).
  static StatusOr<std::shared_ptr<TlsContext>> Load(const TcpTlsFiles& files);

  ~TlsContext();
  TlsContext(const TlsContext&) = delete;
  TlsContext& operator=(const TlsContext&) = delete;

  bool serves() const { return serves_; }
  bool connects() const { return connects_; }

  // A session for the socket `fd` accepted from `peer` (serves() only; the
  // name is for errors), or for `fd` connected to `host` (connects() only;
  // the certificate must name it). The session does not own `fd`.
  StatusOr<std::unique_ptr<TlsSession>> NewServerSession(int fd, const std::string& peer) EXCLUDES(mu_);
  StatusOr<std::unique_ptr<TlsSession>> NewClientSession(int fd, const std::string& host) EXCLUDES(mu_);

  // Times the files were reloaded since Load.
  uint64_t reloads() const EXCLUDES(mu_);

 private:
  struct FileStamp {
    off_t size = -1;
    timespec mtime{};
    bool operator==(const FileStamp& o) const {
      return size == o.size && mtime.tv_sec == o.mtime.tv_sec && mtime.tv_nsec == o.mtime.tv_nsec;
    }
  };
  // The two OpenSSL contexts one set of files makes (either may be null).
  struct Contexts {
    ssl_ctx_st* server = nullptr;
    ssl_ctx_st* client = nullptr;
  };

  TlsContext(const TcpTlsFiles& files, Contexts contexts);

  // Builds both contexts from the files as they are now.
  static StatusOr<Contexts> Build(const TcpTlsFiles& files);
  static void Free(Contexts& c);
  static FileStamp StampOf(const std::string& path);
  // Reloads the files when they changed and kRefreshInterval has passed.
  void MaybeReloadLocked() REQUIRES(mu_);

  const TcpTlsFiles files_;
  const bool serves_;
  const bool connects_;
  mutable Mutex mu_;
  Contexts contexts_ GUARDED_BY(mu_);
  FileStamp stamps_[3] GUARDED_BY(mu_);
  std::chrono::steady_clock::time_point next_check_ GUARDED_BY(mu_);
  uint64_t reloads_ GUARDED_BY(mu_) = 0;
};

// One TLS connection over a non-blocking socket it does not own.
class TlsSession {
 public:
  // Where a non-blocking step stands.
  enum class Step : uint8_t { kDone, kWantRead, kWantWrite };

  ~TlsSession();
  TlsSession(const TlsSession&) = delete;
  TlsSession& operator=(const TlsSession&) = delete;

  // One non-blocking step of the handshake: kDone once it is complete,
  // else what the socket must become before the next step. UNAVAILABLE
  // saying why when it failed (the peer's certificate does not verify,
  // the peer speaks no TLS, closed the connection).
  StatusOr<Step> Handshake() EXCLUDES(mu_);

  // Like recv(2) and send(2) with MSG_DONTWAIT on the socket, in plaintext
  // bytes: > 0 bytes moved, 0 (Recv) when the peer ended the connection,
  // -1 with errno: EAGAIN when nothing can move now, EPROTO for a TLS
  // error (error() says which), or the socket's error. Recv fills as much
  // of [p, p+n) as is there; Send sends records until all of [p, p+n) is
  // taken or the socket is full, and a Send that gave EAGAIN must be
  // repeated with at least the bytes it was given (they may move).
  ssize_t Recv(uint8_t* p, size_t n) EXCLUDES(mu_);
  ssize_t Send(const uint8_t* p, size_t n) EXCLUDES(mu_);
  // Whether plaintext (or a record) read from the socket waits in the
  // session: a Recv now returns it though the socket may not be readable.
  bool HasPending() const EXCLUDES(mu_);
  // Sends close_notify if the socket takes it now (no wait).
  void Close() EXCLUDES(mu_);
  // The last TLS error, for a -1/EPROTO.
  std::string error() const EXCLUDES(mu_);
  // The negotiated protocol and cipher, for logs ("TLSv1.3
  // TLS_AES_128_GCM_SHA256").
  std::string Describe() const EXCLUDES(mu_);

 private:
  friend class TlsContext;
  TlsSession(ssl_st* ssl, std::string peer);

  // Turns an SSL_* call's result into the ssize_t/errno form of Recv and
  // Send (or 0 at a clean end).
  ssize_t Result(int ret, bool reading) REQUIRES(mu_);
  // OpenSSL's queued errors as one text, and clears the queue.
  static std::string TakeErrors();

  const std::string peer_;  // the dialled host or the accepted peer, for errors
  mutable Mutex mu_;
  ssl_st* const ssl_ PT_GUARDED_BY(mu_);
  std::string error_ GUARDED_BY(mu_);
};

}  // namespace rkv::transport::tcp
