#include "common/transport/tcp/tls_session.h"

#include <arpa/inet.h>
#include <glog/logging.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <mutex>
#include <utility>

namespace rkv::transport::tcp {
namespace {

// ---------------------------------------------------------------------------
// The sessions' BIO: the socket, read and written with MSG_DONTWAIT, and
// written with MSG_NOSIGNAL (tls_session.h says why).

struct BioSocket {
  int fd;
  bool eof = false;  // the last read found the peer's end
};

BioSocket* SocketOf(BIO* bio) { return static_cast<BioSocket*>(BIO_get_data(bio)); }

int BioWrite(BIO* bio, const char* data, size_t len, size_t* written) {
  BIO_clear_retry_flags(bio);
  for (;;) {
    const ssize_t r = ::send(SocketOf(bio)->fd, data, len, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (r >= 0) {
      *written = static_cast<size_t>(r);
      return 1;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) BIO_set_retry_write(bio);
    return 0;
  }
}

int BioRead(BIO* bio, char* data, size_t len, size_t* read_bytes) {
  BIO_clear_retry_flags(bio);
  BioSocket* s = SocketOf(bio);
  for (;;) {
    const ssize_t r = ::recv(s->fd, data, len, MSG_DONTWAIT);
    if (r > 0) {
      *read_bytes = static_cast<size_t>(r);
      return 1;
    }
    if (r == 0) {
      s->eof = len > 0;
      return 0;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) BIO_set_retry_read(bio);
    return 0;
  }
}

long BioCtrl(BIO* bio, int cmd, long /*num*/, void* /*ptr*/) {
  switch (cmd) {
    case BIO_CTRL_FLUSH: return 1;
    case BIO_CTRL_EOF: return SocketOf(bio)->eof ? 1 : 0;
    default: return 0;
  }
}

int BioCreate(BIO* bio) {
  BIO_set_data(bio, nullptr);
  BIO_set_init(bio, 0);
  return 1;
}

int BioDestroy(BIO* bio) {
  delete SocketOf(bio);
  BIO_set_data(bio, nullptr);
  return 1;
}

const BIO_METHOD* SocketMethod() {
  static const BIO_METHOD* const method = [] {
    BIO_METHOD* m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK | BIO_TYPE_DESCRIPTOR, "rkv tcp socket");
    CHECK(m != nullptr) << "BIO_meth_new failed";
    BIO_meth_set_write_ex(m, BioWrite);
    BIO_meth_set_read_ex(m, BioRead);
    BIO_meth_set_ctrl(m, BioCtrl);
    BIO_meth_set_create(m, BioCreate);
    BIO_meth_set_destroy(m, BioDestroy);
    return m;
  }();
  return method;
}

// ---------------------------------------------------------------------------
// Files.

std::string OpenSslErrors() {
  std::string out;
  while (const unsigned long e = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof buf);
    if (!out.empty()) out += "; ";
    out += buf;
  }
  return out.empty() ? "no detail from OpenSSL" : out;
}

// A readable regular file of at most kMaxFileBytes.
Status CheckFile(const std::string& what, const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    return InvalidArgument("TLS " + what + " '" + path + "': " + std::strerror(errno));
  }
  if (!S_ISREG(st.st_mode)) return InvalidArgument("TLS " + what + " '" + path + "' is not a regular file");
  if (static_cast<uint64_t>(st.st_size) > TlsContext::kMaxFileBytes) {
    return InvalidArgument("TLS " + what + " '" + path + "' holds " + std::to_string(st.st_size) +
                           " bytes; at most " + std::to_string(TlsContext::kMaxFileBytes) + " are read");
  }
  if (::access(path.c_str(), R_OK) != 0) {
    return InvalidArgument("TLS " + what + " '" + path + "': " + std::strerror(errno));
  }
  return Status::Ok();
}

// What every context of the data plane has: TLS 1.3 alone, no session
// tickets (a server would send them after the handshake, a write the
// reading side would have to make), no session cache, an unexpected EOF
// read as the end of the connection (frames delimit themselves, so a
// truncation cannot pass for a whole frame), writes that return once a
// record is out and may be retried from a moved buffer.
Status Configure(SSL_CTX* ctx) {
  if (SSL_CTX_set_min_proto_version(ctx, TLS1_3_VERSION) != 1) {
    return Internal("SSL_CTX_set_min_proto_version: " + OpenSslErrors());
  }
  SSL_CTX_set_options(ctx, SSL_OP_NO_TICKET | SSL_OP_IGNORE_UNEXPECTED_EOF);
  SSL_CTX_set_num_tickets(ctx, 0);
  SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
  SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  return Status::Ok();
}

Status UseCertificate(SSL_CTX* ctx, const TcpTlsFiles& files) {
  if (SSL_CTX_use_certificate_chain_file(ctx, files.cert_file.c_str()) != 1) {
    return InvalidArgument("TLS certificate '" + files.cert_file + "' holds no PEM certificate: " + OpenSslErrors());
  }
  if (SSL_CTX_use_PrivateKey_file(ctx, files.key_file.c_str(), SSL_FILETYPE_PEM) != 1) {
    return InvalidArgument("TLS key '" + files.key_file + "' is not a PEM private key that matches the certificate '" +
                           files.cert_file + "': " + OpenSslErrors());
  }
  if (SSL_CTX_check_private_key(ctx) != 1) {
    return InvalidArgument("TLS key '" + files.key_file + "' does not match the certificate '" + files.cert_file +
                           "': " + OpenSslErrors());
  }
  return Status::Ok();
}

bool IsIpAddress(const std::string& host) {
  in6_addr v6{};
  in_addr v4{};
  return ::inet_pton(AF_INET, host.c_str(), &v4) == 1 || ::inet_pton(AF_INET6, host.c_str(), &v6) == 1;
}

}  // namespace

// ---------------------------------------------------------------------------
// TlsContext

StatusOr<std::shared_ptr<TlsContext>> TlsContext::Load(const TcpTlsFiles& files) {
  if (files.empty()) return std::shared_ptr<TlsContext>();
  if (files.cert_file.empty() != files.key_file.empty()) {
    return InvalidArgument("TLS needs a certificate and its key together: " +
                           std::string(files.cert_file.empty() ? "a key file without a certificate file"
                                                               : "a certificate file without a key file"));
  }
  RKV_ASSIGN_OR_RETURN(Contexts contexts, Build(files));
  return std::shared_ptr<TlsContext>(new TlsContext(files, contexts));
}

TlsContext::TlsContext(const TcpTlsFiles& files, Contexts contexts)
    : files_(files), serves_(contexts.server != nullptr), connects_(contexts.client != nullptr) {
  MutexLock lock(mu_);
  contexts_ = contexts;
  stamps_[0] = StampOf(files_.cert_file);
  stamps_[1] = StampOf(files_.key_file);
  stamps_[2] = StampOf(files_.ca_file);
  next_check_ = std::chrono::steady_clock::now() + kRefreshInterval;
}

TlsContext::~TlsContext() {
  MutexLock lock(mu_);
  Free(contexts_);
}

void TlsContext::Free(Contexts& c) {
  SSL_CTX_free(c.server);  // sessions hold their own references
  SSL_CTX_free(c.client);
  c = Contexts{};
}

StatusOr<TlsContext::Contexts> TlsContext::Build(const TcpTlsFiles& files) {
  if (!files.cert_file.empty()) {
    RKV_RETURN_IF_ERROR(CheckFile("certificate", files.cert_file));
    RKV_RETURN_IF_ERROR(CheckFile("key", files.key_file));
  }
  if (!files.ca_file.empty()) RKV_RETURN_IF_ERROR(CheckFile("CA bundle", files.ca_file));
  ERR_clear_error();
  Contexts c;
  Status built = Status::Ok();
  if (!files.cert_file.empty()) {
    c.server = SSL_CTX_new(TLS_server_method());
    if (c.server == nullptr) {
      built = Internal("SSL_CTX_new: " + OpenSslErrors());
    } else {
      built = Configure(c.server);
      if (built.ok()) built = UseCertificate(c.server, files);
    }
  }
  if (built.ok() && !files.ca_file.empty()) {
    c.client = SSL_CTX_new(TLS_client_method());
    if (c.client == nullptr) {
      built = Internal("SSL_CTX_new: " + OpenSslErrors());
    } else {
      built = Configure(c.client);
      if (built.ok() && SSL_CTX_load_verify_locations(c.client, files.ca_file.c_str(), nullptr) != 1) {
        built = InvalidArgument("TLS CA bundle '" + files.ca_file + "' holds no PEM certificate: " + OpenSslErrors());
      }
      SSL_CTX_set_verify(c.client, SSL_VERIFY_PEER, nullptr);
      // A server's certificate presented to the servers it connects to:
      // not asked for today, ready for a peer that asks.
      if (built.ok() && !files.cert_file.empty()) built = UseCertificate(c.client, files);
    }
  }
  if (!built.ok()) {
    Free(c);
    return built;
  }
  return c;
}

TlsContext::FileStamp TlsContext::StampOf(const std::string& path) {
  FileStamp stamp;
  struct stat st {};
  if (!path.empty() && ::stat(path.c_str(), &st) == 0) {
    stamp.size = st.st_size;
    stamp.mtime = st.st_mtim;
  }
  return stamp;
}

void TlsContext::MaybeReloadLocked() {
  const auto now = std::chrono::steady_clock::now();
  if (now < next_check_) return;
  next_check_ = now + kRefreshInterval;
  const FileStamp now_stamps[3] = {StampOf(files_.cert_file), StampOf(files_.key_file), StampOf(files_.ca_file)};
  bool changed = false;
  for (int i = 0; i < 3; ++i) changed |= !(now_stamps[i] == stamps_[i]);
  if (!changed) return;
  StatusOr<Contexts> fresh = Build(files_);
  if (!fresh.ok()) {
    // Not remembered as seen: the next look tries again (a file may have
    // been caught half replaced).
    LOG(WARNING) << "tcp transport: TLS files changed but cannot be loaded; keeping the previous ones: "
                 << fresh.status();
    return;
  }
  Free(contexts_);
  contexts_ = *fresh;
  for (int i = 0; i < 3; ++i) stamps_[i] = now_stamps[i];
  ++reloads_;
  LOG(INFO) << "tcp transport: reloaded the data plane's TLS files (" << reloads_ << " reloads)";
}

uint64_t TlsContext::reloads() const {
  MutexLock lock(mu_);
  return reloads_;
}

StatusOr<std::unique_ptr<TlsSession>> TlsContext::NewServerSession(int fd, const std::string& peer) {
  if (!serves_) return FailedPrecondition("this transport has no TLS certificate to serve with");
  SSL* ssl = nullptr;
  {
    MutexLock lock(mu_);
    MaybeReloadLocked();
    ssl = SSL_new(contexts_.server);
  }
  if (ssl == nullptr) return Internal("SSL_new: " + OpenSslErrors());
  BIO* bio = BIO_new(SocketMethod());
  if (bio == nullptr) {
    SSL_free(ssl);
    return Internal("BIO_new: " + OpenSslErrors());
  }
  BIO_set_data(bio, new BioSocket{fd});
  BIO_set_init(bio, 1);
  SSL_set_bio(ssl, bio, bio);
  SSL_set_accept_state(ssl);
  return std::unique_ptr<TlsSession>(new TlsSession(ssl, peer));
}

StatusOr<std::unique_ptr<TlsSession>> TlsContext::NewClientSession(int fd, const std::string& host) {
  if (!connects_) return FailedPrecondition("this transport has no TLS CA bundle to verify servers with");
  SSL* ssl = nullptr;
  {
    MutexLock lock(mu_);
    MaybeReloadLocked();
    ssl = SSL_new(contexts_.client);
  }
  if (ssl == nullptr) return Internal("SSL_new: " + OpenSslErrors());
  auto session = std::unique_ptr<TlsSession>(new TlsSession(ssl, host));
  // The certificate must name the dialled host: an IP address among its IP
  // SANs, a name among its DNS names (sent as SNI too).
  const bool named = IsIpAddress(host)
                         ? X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), host.c_str()) == 1
                         : SSL_set1_host(ssl, host.c_str()) == 1 && SSL_set_tlsext_host_name(ssl, host.c_str()) == 1;
  if (!named) return InvalidArgument("cannot check a TLS certificate against host '" + host + "': " + OpenSslErrors());
  BIO* bio = BIO_new(SocketMethod());
  if (bio == nullptr) return Internal("BIO_new: " + OpenSslErrors());
  BIO_set_data(bio, new BioSocket{fd});
  BIO_set_init(bio, 1);
  SSL_set_bio(ssl, bio, bio);
  SSL_set_connect_state(ssl);
  return session;
}

// ---------------------------------------------------------------------------
// TlsSession

TlsSession::TlsSession(SSL* ssl, std::string peer) : peer_(std::move(peer)), ssl_(ssl) {}

TlsSession::~TlsSession() { SSL_free(ssl_); }

std::string TlsSession::TakeErrors() { return OpenSslErrors(); }

StatusOr<TlsSession::Step> TlsSession::Handshake() {
  MutexLock lock(mu_);
  ERR_clear_error();
  errno = 0;
  const int r = SSL_do_handshake(ssl_);
  if (r == 1) return Step::kDone;
  const int err = SSL_get_error(ssl_, r);
  if (err == SSL_ERROR_WANT_READ) return Step::kWantRead;
  if (err == SSL_ERROR_WANT_WRITE) return Step::kWantWrite;
  const long verify = SSL_get_verify_result(ssl_);
  if (verify != X509_V_OK) {
    return Unavailable("TLS handshake with " + peer_ + ": its certificate does not verify: " +
                       X509_verify_cert_error_string(verify));
  }
  if (err == SSL_ERROR_ZERO_RETURN || (err == SSL_ERROR_SYSCALL && errno == 0)) {
    return Unavailable("TLS handshake with " + peer_ +
                       ": the peer closed the connection (does it take TLS on its data plane?)");
  }
  if (err == SSL_ERROR_SYSCALL) {
    return Unavailable("TLS handshake with " + peer_ + ": " + std::strerror(errno));
  }
  return Unavailable("TLS handshake with " + peer_ + ": " + TakeErrors());
}

ssize_t TlsSession::Result(int ret, bool reading) {
  const int saved = errno;
  const int err = SSL_get_error(ssl_, ret);
  switch (err) {
    case SSL_ERROR_WANT_READ:
    case SSL_ERROR_WANT_WRITE: errno = EAGAIN; return -1;
    case SSL_ERROR_ZERO_RETURN:
      if (reading) return 0;
      errno = EPIPE;
      return -1;
    case SSL_ERROR_SYSCALL:
      if (saved == 0) {
        if (reading) return 0;
        errno = EPIPE;
        return -1;
      }
      ERR_clear_error();
      errno = saved;
      return -1;
    default:
      error_ = TakeErrors();
      errno = EPROTO;
      return -1;
  }
}

ssize_t TlsSession::Recv(uint8_t* p, size_t n) {
  size_t got = 0;
  ssize_t result = 0;
  int err = 0;
  {
    MutexLock lock(mu_);
    while (got < n) {
      size_t read = 0;
      ERR_clear_error();
      errno = 0;
      const int r = SSL_read_ex(ssl_, p + got, n - got, &read);
      if (r == 1) {
        got += read;
        continue;
      }
      result = Result(r, /*reading=*/true);
      err = errno;
      break;
    }
  }
  if (got > 0) return static_cast<ssize_t>(got);
  errno = err;
  return result;
}

ssize_t TlsSession::Send(const uint8_t* p, size_t n) {
  size_t sent = 0;
  ssize_t result = 0;
  int err = 0;
  {
    MutexLock lock(mu_);
    while (sent < n) {
      size_t written = 0;
      ERR_clear_error();
      errno = 0;
      const int r = SSL_write_ex(ssl_, p + sent, n - sent, &written);
      if (r == 1) {
        sent += written;
        continue;
      }
      result = Result(r, /*reading=*/false);
      err = errno;
      break;
    }
  }
  if (sent > 0 || n == 0) return static_cast<ssize_t>(sent);
  errno = err;
  return result;
}

bool TlsSession::HasPending() const {
  MutexLock lock(mu_);
  return SSL_pending(ssl_) > 0;
}

void TlsSession::Close() {
  MutexLock lock(mu_);
  ERR_clear_error();
  SSL_shutdown(ssl_);
  ERR_clear_error();
}

std::string TlsSession::error() const {
  MutexLock lock(mu_);
  return error_;
}

std::string TlsSession::Describe() const {
  MutexLock lock(mu_);
  return std::string(SSL_get_version(ssl_)) + " " + SSL_get_cipher_name(ssl_);
}

}  // namespace rkv::transport::tcp
