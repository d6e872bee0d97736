#include "proto/tls.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>

#include <grpcpp/security/tls_certificate_provider.h>
#include <grpcpp/security/tls_credentials_options.h>

#include "common/net_address.h"

namespace rkv::control {
namespace {

struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};
struct KeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
using Bio = std::unique_ptr<BIO, BioFree>;
using Cert = std::unique_ptr<X509, X509Free>;
using Key = std::unique_ptr<EVP_PKEY, KeyFree>;

// "FLAG 'PATH'", as errors name a file.
std::string Named(const std::string& flag, const std::string& path) { return flag + " '" + path + "'"; }

// OpenSSL's reason for the last failure on this thread (and clears the
// queue), or "" when it has none.
std::string OpenSslReason() {
  unsigned long last = 0;
  while (const unsigned long e = ERR_get_error()) last = e;
  if (last == 0) return "";
  char text[256];
  ERR_error_string_n(last, text, sizeof(text));
  return std::string(": ") + text;
}

StatusOr<std::string> ReadPem(const std::string& flag, const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    return InvalidArgument(Named(flag, path) + ": cannot read it: " + std::strerror(errno));
  }
  if (!S_ISREG(st.st_mode)) return InvalidArgument(Named(flag, path) + " is not a regular file");
  if (static_cast<uint64_t>(st.st_size) > kMaxTlsFileBytes) {
    return InvalidArgument(Named(flag, path) + " holds " + std::to_string(st.st_size) + " bytes, more than " +
                           std::to_string(kMaxTlsFileBytes) + " (not a PEM file?)");
  }
  errno = 0;
  std::ifstream in(path, std::ios::binary);
  if (!in) return InvalidArgument(Named(flag, path) + ": cannot read it: " + std::strerror(errno));
  std::string text;
  text.resize(kMaxTlsFileBytes + 1);
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  if (in.bad()) return InvalidArgument(Named(flag, path) + ": read failed");
  text.resize(static_cast<size_t>(in.gcount()));
  if (text.size() > kMaxTlsFileBytes) {
    return InvalidArgument(Named(flag, path) + " holds more than " + std::to_string(kMaxTlsFileBytes) + " bytes");
  }
  if (text.empty()) return InvalidArgument(Named(flag, path) + " is empty");
  return text;
}

Bio MemoryBio(const std::string& text) { return Bio(BIO_new_mem_buf(text.data(), static_cast<int>(text.size()))); }

// Every certificate of a PEM bundle, in order; INVALID_ARGUMENT when it
// holds none, or a certificate block that does not parse.
StatusOr<std::vector<Cert>> ParseCertificates(const std::string& flag, const std::string& path,
                                              const std::string& text) {
  ERR_clear_error();
  Bio bio = MemoryBio(text);
  if (bio == nullptr) return Internal("BIO_new_mem_buf failed" + OpenSslReason());
  std::vector<Cert> certs;
  while (true) {
    Cert cert(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
    if (cert == nullptr) break;
    certs.push_back(std::move(cert));
  }
  // The loop ends at the end of the input (PEM_R_NO_START_LINE) or at a
  // block that does not parse.
  const unsigned long last = ERR_peek_last_error();
  const bool at_end = ERR_GET_LIB(last) == ERR_LIB_PEM && ERR_GET_REASON(last) == PEM_R_NO_START_LINE;
  if (last != 0 && !at_end) {
    return InvalidArgument(Named(flag, path) + ": a certificate does not parse" + OpenSslReason());
  }
  ERR_clear_error();
  if (certs.empty()) {
    return InvalidArgument(Named(flag, path) + " holds no PEM certificate (\"-----BEGIN CERTIFICATE-----\")");
  }
  return certs;
}

Status CheckFiles(const TlsFiles& files, const TlsFileNames& names) {
  if (!files.ca.empty()) {
    RKV_ASSIGN_OR_RETURN(const std::string ca, ReadPem(names.ca, files.ca));
    RKV_RETURN_IF_ERROR(ParseCertificates(names.ca, files.ca, ca).status());
  }
  if (files.cert.empty()) return Status::Ok();
  RKV_ASSIGN_OR_RETURN(const std::string cert_text, ReadPem(names.cert, files.cert));
  RKV_ASSIGN_OR_RETURN(const std::vector<Cert> certs, ParseCertificates(names.cert, files.cert, cert_text));
  RKV_ASSIGN_OR_RETURN(const std::string key_text, ReadPem(names.key, files.key));
  ERR_clear_error();
  Bio bio = MemoryBio(key_text);
  if (bio == nullptr) return Internal("BIO_new_mem_buf failed" + OpenSslReason());
  Key key(PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr));
  if (key == nullptr) {
    return InvalidArgument(Named(names.key, files.key) +
                           " holds no usable PEM private key (an encrypted key is not supported)" + OpenSslReason());
  }
  if (X509_check_private_key(certs.front().get(), key.get()) != 1) {
    ERR_clear_error();
    return InvalidArgument(Named(names.key, files.key) + " is not the key of the certificate in " +
                           Named(names.cert, files.cert));
  }
  return Status::Ok();
}

}  // namespace

TlsFileNames ClientOptionsTlsNames() {
  return TlsFileNames{"ClientOptions.tls_cert_file (kvctl --tls_cert)", "ClientOptions.tls_key_file (kvctl --tls_key)",
                      "ClientOptions.tls_ca_file (kvctl --tls_ca)"};
}

Status CheckServerTlsFiles(const TlsFiles& files, const TlsFileNames& names) {
  if (files.empty()) return Status::Ok();
  for (const auto& [path, flag] : {std::pair{&files.cert, &names.cert}, std::pair{&files.key, &names.key},
                                   std::pair{&files.ca, &names.ca}}) {
    if (path->empty()) {
      return InvalidArgument(*flag + " is missing: TLS needs " + names.cert + ", " + names.key + " and " + names.ca +
                             " together (or none of them, for plain gRPC)");
    }
  }
  return CheckFiles(files, names);
}

Status CheckClientTlsFiles(const TlsFiles& files, const TlsFileNames& names) {
  if (files.empty()) return Status::Ok();
  if (files.ca.empty()) {
    return InvalidArgument(names.ca + " is missing: " + (files.cert.empty() ? names.key : names.cert) +
                           " needs the CA that verifies the server (" + names.ca + ")");
  }
  if (files.cert.empty() != files.key.empty()) {
    return InvalidArgument((files.cert.empty() ? names.cert : names.key) + " is missing: " + names.cert + " and " +
                           names.key + " go together (a client certificate is optional)");
  }
  return CheckFiles(files, names);
}

StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(const TlsFiles& files,
                                                                         const TlsFileNames& names) {
  if (files.empty()) return grpc::InsecureServerCredentials();
  RKV_RETURN_IF_ERROR(CheckServerTlsFiles(files, names));
  auto provider = std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
      files.key, files.cert, files.ca, static_cast<unsigned>(kTlsRefreshInterval.count()));
  grpc::experimental::TlsServerCredentialsOptions options(provider);
  options.watch_root_certs();
  options.watch_identity_key_cert_pairs();
  // A client without a certificate (kvctl with the CA alone) is let in;
  // one that presents a certificate must chain to the CA.
  options.set_cert_request_type(GRPC_SSL_REQUEST_CLIENT_CERTIFICATE_AND_VERIFY);
  std::shared_ptr<grpc::ServerCredentials> credentials = grpc::experimental::TlsServerCredentials(options);
  if (credentials == nullptr) return Internal("gRPC refused the TLS server credentials of " + names.cert);
  return credentials;
}

StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeChannelCredentials(const TlsFiles& files,
                                                                           const TlsFileNames& names) {
  if (files.empty()) return grpc::InsecureChannelCredentials();
  RKV_RETURN_IF_ERROR(CheckClientTlsFiles(files, names));
  grpc::experimental::TlsChannelCredentialsOptions options;
  const unsigned refresh = static_cast<unsigned>(kTlsRefreshInterval.count());
  if (files.cert.empty()) {
    options.set_certificate_provider(
        std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(files.ca, refresh));
  } else {
    options.set_certificate_provider(
        std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(files.key, files.cert, files.ca, refresh));
    options.watch_identity_key_cert_pairs();
  }
  options.watch_root_certs();
  options.set_verify_server_certs(true);
  std::shared_ptr<grpc::ChannelCredentials> credentials = grpc::experimental::TlsCredentials(options);
  if (credentials == nullptr) return Internal("gRPC refused the TLS channel credentials of " + names.ca);
  return credentials;
}

bool PeerHasCertificate(const grpc::ServerContextBase& context) {
  const std::shared_ptr<const grpc::AuthContext> auth = context.auth_context();
  return auth != nullptr && auth->IsPeerAuthenticated();
}

bool IsLoopbackHost(const std::string& host) {
  if (host == "localhost" || host == "::1") return true;
  return host.rfind("127.", 0) == 0;
}

std::string ConnectFailureHint(const std::string& address, bool tls, std::chrono::milliseconds timeout) {
  std::string host;
  uint16_t port = 0;
  if (!ParseHostPort(address, &host, &port).ok() || port == 0) return "";
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found) != 0 || found == nullptr) return "";
  bool accepts = false;
  for (addrinfo* a = found; a != nullptr && !accepts; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    if (::connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
      accepts = true;
    } else if (errno == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      int error = 0;
      socklen_t length = sizeof(error);
      accepts = ::poll(&p, 1, static_cast<int>(timeout.count())) == 1 &&
                ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length) == 0 && error == 0;
    }
    ::close(fd);
  }
  ::freeaddrinfo(found);
  if (!accepts) return "";
  if (tls) {
    return "TLS handshake failed? the port accepts TCP connections but no gRPC connection was made: check that "
           "the peer's certificate is signed by the CA given (--tls_ca / tls_ca_file) and names the host dialled, "
           "that the peer accepts this certificate, and that the peer serves TLS at all";
  }
  return "TLS required? the port accepts TCP connections but no gRPC connection was made: if the peer serves "
         "TLS, give its CA certificate (--tls_ca / tls_ca_file)";
}

}  // namespace rkv::control
