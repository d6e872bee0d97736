#include "common/connect_handshake.h"

#include <algorithm>

namespace rkv::protocol {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

template <typename T>
std::span<const uint8_t> BytesOf(const T& v) {
  return std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(&v), sizeof v);
}

// The time left until `deadline`, at least 1 ms (a transport's Connect
// takes a positive timeout; the deadline check is the caller's).
milliseconds Left(Clock::time_point deadline) {
  return std::max(milliseconds(1), std::chrono::duration_cast<milliseconds>(deadline - Clock::now()));
}

template <typename Request, typename Make>
StatusOr<std::unique_ptr<transport::Connection>> Handshake(transport::Transport& transport,
                                                           const std::string& address, Make make,
                                                           milliseconds timeout) {
  const Clock::time_point start = Clock::now();
  const Clock::time_point deadline = start + timeout;
  const Request hello = make(nullptr);
  RKV_ASSIGN_OR_RETURN(const Nonce nonce, RequestChallenge(transport, address, BytesOf(hello), timeout));
  // The proof gets what is left of the timeout, and at least as long as
  // the hello took: a server that answered the hello in that time answers
  // its proof in about the same, and a slow connect (rdma_cm under a
  // loaded or emulated machine) must not fail for having been asked twice.
  const milliseconds hello_took = std::chrono::duration_cast<milliseconds>(Clock::now() - start);
  const Request proof = make(&nonce);
  return transport.Connect(address, BytesOf(proof), std::max(Left(deadline), hello_took));
}

}  // namespace

StatusOr<Nonce> RequestChallenge(transport::Transport& transport, const std::string& address,
                                 std::span<const uint8_t> hello, milliseconds timeout) {
  transport::Rejection refused;
  StatusOr<std::unique_ptr<transport::Connection>> conn = transport.Connect(address, hello, timeout, &refused);
  if (conn.ok()) {
    (*conn)->Disconnect();
    return Unavailable("connect to " + address +
                       ": the server accepted a connection without a proof (not an rkv server of protocol version " +
                       std::to_string(kProtocolVersion) + ")");
  }
  Nonce nonce{};
  if (!ChallengeOf(refused.code == StatusCode::kUnauthenticated, refused.detail, &nonce)) return conn.status();
  return nonce;
}

StatusOr<std::unique_ptr<transport::Connection>> ConnectAsClient(transport::Transport& transport,
                                                                 const std::string& address,
                                                                 const ClientConnectParams& params,
                                                                 milliseconds timeout) {
  return Handshake<ConnectRequestData>(
      transport, address, [&](const Nonce* nonce) { return MakeClientRequest(params, nonce); }, timeout);
}

StatusOr<std::unique_ptr<transport::Connection>> ConnectAsPeer(transport::Transport& transport,
                                                               const std::string& address,
                                                               const PeerConnectParams& params,
                                                               milliseconds timeout) {
  return Handshake<PeerConnectData>(
      transport, address, [&](const Nonce* nonce) { return MakePeerRequest(params, nonce); }, timeout);
}

}  // namespace rkv::protocol
