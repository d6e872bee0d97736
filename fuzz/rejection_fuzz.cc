// Reject private data (common/transport/rejection.h): what a refusing
// server, or anything answering a connection request, sends back.
//
// Properties: decoding any bytes gives a non-empty, printable text of
// bounded length, a valid code and a detail of at most
// kMaxRejectionDetailBytes, present only after the full 128-byte header and
// text; a refusal re-encoded decodes to itself, detail included;
// the status a refused Connect returns is UNAVAILABLE or RESOURCE_EXHAUSTED
// when the server said so, PERMISSION_DENIED otherwise.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>

#include "common/transport/rejection.h"
#include "fuzz/fuzz_input.h"

using namespace rkv::transport;

namespace {

bool PrintableText(const std::string& s) {
  for (const char c : s) {
    if (c < 0x20 || c > 0x7e) return false;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const Rejection r = DecodeRejection(std::span<const uint8_t>(data, size));
  RKV_FUZZ_CHECK(rkv::IsValidStatusCode(static_cast<int>(r.code)));
  RKV_FUZZ_CHECK(!r.text.empty());
  RKV_FUZZ_CHECK(PrintableText(r.text));
  // The longest text is kRejectionTextBytes - 1 from the wire format, or
  // as much of printable data as the input held.
  RKV_FUZZ_CHECK(r.text.size() <= std::max<size_t>(size, 40));
  RKV_FUZZ_CHECK(r.detail.size() <= kMaxRejectionDetailBytes);
  RKV_FUZZ_CHECK(r.detail.empty() || size >= kRejectionHeaderBytes + kRejectionTextBytes + 1 + r.detail.size());

  const std::vector<uint8_t> encoded = EncodeRejection(r);
  RKV_FUZZ_CHECK(encoded.size() <= kMaxRejectionBytes);
  const Rejection back = DecodeRejection(encoded);
  RKV_FUZZ_CHECK(back.code == r.code);
  RKV_FUZZ_CHECK(back.text == r.text.substr(0, kRejectionTextBytes - 1));
  RKV_FUZZ_CHECK(back.detail == r.detail);

  const std::string described = DescribeRejection(r);
  RKV_FUZZ_CHECK(described.find(r.text) == 0);
  const rkv::Status s = RejectedStatus("server", r);
  RKV_FUZZ_CHECK(s.code() == rkv::StatusCode::kUnavailable || s.code() == rkv::StatusCode::kResourceExhausted ||
                 s.code() == rkv::StatusCode::kPermissionDenied);
  RKV_FUZZ_CHECK((s.code() == rkv::StatusCode::kUnavailable) == (r.code == rkv::StatusCode::kUnavailable));
  RKV_FUZZ_CHECK((s.code() == rkv::StatusCode::kResourceExhausted) == (r.code == rkv::StatusCode::kResourceExhausted));
  return 0;
}
