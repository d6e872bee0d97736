// TLS on the control plane (docs/design.md §10): the certificate, key and
// CA files one process is given, their validation, and the gRPC
// credentials every control-plane server and channel of the process is
// built with. The data plane (RDMA, tcp) is not covered.
//
// Files are PEM. A server role (rkv-coordinator, rkv-server's Admin and
// Replica services) needs all three: its certificate chain and key, which
// it presents, and the CA bundle it verifies peers against; it requests a
// client certificate and verifies one when it is presented, so a client
// holding only the CA still connects (server-authenticated TLS), and a
// server or coordinator presenting its own certificate gets mutual TLS. A
// client role (librkv, kvctl, a server's or coordinator's own channels)
// needs the CA; its certificate and key are optional, both or neither.
// The peer's certificate must name the host a channel dials (a SAN of
// the IP or DNS name in "HOST:PORT").
//
// Rotation: the credentials watch the files (gRPC's
// FileWatcherCertificateProvider) and pick up replaced contents within
// kTlsRefreshInterval; connections already open keep their session, new
// handshakes use the new files. Replace each file by a rename so that it
// is never read half written; a new certificate for the same key can be
// swapped alone, a new key and certificate only together (a pair read
// while they disagree is not used). To move to a new CA, first give
// every process a bundle holding both CAs, then the new certificates.
//
// Thread safety: the functions are thread-safe; the credentials they
// return may be shared by any number of channels or servers.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include <grpcpp/security/credentials.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server_context.h>

#include "common/status.h"

namespace rkv::control {

// How often the credentials look at their files for a rotation.
inline constexpr std::chrono::seconds kTlsRefreshInterval{5};
// The most bytes one PEM file may hold.
inline constexpr size_t kMaxTlsFileBytes = size_t{1} << 20;

// The PEM files of one process; all empty: plain gRPC.
struct TlsFiles {
  std::string cert;  // certificate chain, leaf first
  std::string key;   // the leaf's private key
  std::string ca;    // CA bundle peers are verified against

  bool empty() const { return cert.empty() && key.empty() && ca.empty(); }
};

// The names errors give the three files: the flags by default, librkv's
// ClientOptions fields for a library user.
struct TlsFileNames {
  std::string cert = "--tls_cert";
  std::string key = "--tls_key";
  std::string ca = "--tls_ca";
};

// The names ClientOptions gives the files (client/include/rkv/client.h).
TlsFileNames ClientOptionsTlsNames();

// A server role's files: all three or none. Each given file must be a
// readable regular file of at most kMaxTlsFileBytes holding PEM: `cert`
// one or more certificates, `key` a private key matching the first of
// them, `ca` one or more certificates. INVALID_ARGUMENT naming the flag
// and the file otherwise.
Status CheckServerTlsFiles(const TlsFiles& files, const TlsFileNames& names = {});
// A client role's files: none, or `ca` with `cert` and `key` both or
// neither; each given one checked as above.
Status CheckClientTlsFiles(const TlsFiles& files, const TlsFileNames& names = {});

// The credentials of a gRPC server: insecure when `files` is empty, else
// TLS (CheckServerTlsFiles first) requesting and verifying a client
// certificate when one is presented.
StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(const TlsFiles& files,
                                                                         const TlsFileNames& names = {});
// The credentials of channels: insecure when `files` is empty, else TLS
// (CheckClientTlsFiles first) verifying the server's certificate against
// `ca` and its name against the dialled host, presenting `cert` when
// given.
StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeChannelCredentials(const TlsFiles& files,
                                                                           const TlsFileNames& names = {});

// Whether the caller of `context` presented a certificate that verified
// against the server's CA (mutual TLS); false on plain gRPC.
bool PeerHasCertificate(const grpc::ServerContextBase& context);

// True for a host no other machine reaches: "localhost", 127.0.0.0/8,
// "::1".
bool IsLoopbackHost(const std::string& host);

// What a channel that could not connect to `address` ("HOST:PORT") adds
// to its error: "" when nothing accepts a TCP connection there within
// `timeout` (the peer is down); else, since the TCP connection works but
// gRPC's did not, the likely TLS cause: for a plain channel (`tls`
// false) that the peer requires TLS and its CA must be given, for a TLS
// one that the certificates do not verify (wrong CA, a name the
// certificate does not hold) or the peer speaks plain gRPC. Blocks for
// `timeout` at most.
std::string ConnectFailureHint(const std::string& address, bool tls,
                               std::chrono::milliseconds timeout = std::chrono::milliseconds(200));

}  // namespace rkv::control
