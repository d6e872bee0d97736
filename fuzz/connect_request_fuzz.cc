// The connect private data a server receives (rdmacm's CONNECT, or the tcp
// transport's CONNECT frame) from anyone who reaches its port:
// server/connect_request.h ParseConnectRequest.
//
// Properties: only data at least sizeof(ConnectRequestData) long with the
// magic, this protocol's and layout's versions and the token's digest is
// accepted; every refusal has a code and a reason, never a crash.
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "common/layout.h"
#include "common/token.h"
#include "fuzz/fuzz_input.h"
#include "server/connect_request.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace rkv;
  static const Sha256Digest kDigest = TokenDigest("fuzz-token");
  const StatusOr<protocol::ConnectRequestData> r =
      server::ParseConnectRequest(std::span<const uint8_t>(data, size), kDigest);
  if (!r.ok()) {
    const StatusCode code = r.status().code();
    RKV_FUZZ_CHECK(code == StatusCode::kInvalidArgument || code == StatusCode::kFailedPrecondition ||
                   code == StatusCode::kUnauthenticated);
    RKV_FUZZ_CHECK(!r.status().message().empty());
    return 0;
  }
  RKV_FUZZ_CHECK(size >= sizeof(protocol::ConnectRequestData));
  RKV_FUZZ_CHECK(r->magic == protocol::kConnectMagic);
  RKV_FUZZ_CHECK(r->protocol_version == protocol::kProtocolVersion);
  RKV_FUZZ_CHECK(r->layout_version == layout::kLayoutVersion);
  RKV_FUZZ_CHECK(std::memcmp(r->token_digest, kDigest.data(), kDigest.size()) == 0);
  return 0;
}
