// rkv-gateway's RESP2 request parser (gateway/resp_parser.h) on any bytes a
// Redis client may send.
//
// Input: a limits byte (Redis's limits, or small ones so that every bound
// is reached; the low bit: authenticated), a split byte, then the bytes of
// the connection.
//
// Properties: the parser always makes progress or waits (a command or a
// skip consumes 1..size bytes; kIncomplete consumes none and its hint asks
// for more than it has; an error consumes none); it waits only while the
// input could still become a request within the limits (so a connection's
// buffered input stays bounded); a command has 1..max arguments, each
// within the bulk limit, and a multibulk command's bytes within the
// request limit; an error is one of Redis's protocol errors; a multibulk
// command written again as multibulk parses to the same arguments; and
// parsing the whole input gives the same commands as parsing it delivered
// in two parts split anywhere (the event loop splits wherever the socket
// did).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz/fuzz_input.h"
#include "gateway/resp_parser.h"

namespace {

using namespace rkv::gateway;
using Kind = RespParse::Kind;

std::string Multibulk(const std::vector<std::string>& args) {
  std::string s = "*" + std::to_string(args.size()) + "\r\n";
  for (const auto& a : args) s += "$" + std::to_string(a.size()) + "\r\n" + a + "\r\n";
  return s;
}

// Parses `delivery` to the end or the first error as a loop would; one
// line per result.
std::vector<std::string> ParseAll(rkv::fuzz::SplitDelivery& delivery, const RespParser& parser, bool authenticated) {
  const RespLimits& limits = parser.limits();
  std::vector<std::string> seen;
  std::string& buffer = delivery.buffer();
  size_t hint = 0;  // the last wait's hint for the request at the front
  while (true) {
    const RespParse r = parser.Parse(buffer, authenticated);
    if (r.kind == Kind::kIncomplete) {
      RKV_FUZZ_CHECK(r.consumed == 0 && r.args.empty());
      RKV_FUZZ_CHECK(r.needed > buffer.size());
      hint = r.needed;
      RKV_FUZZ_CHECK(buffer.size() <= limits.max_request_bytes + limits.max_inline_bytes);
      if (!delivery.DeliverMore()) break;
      continue;
    }
    if (r.kind == Kind::kError) {
      RKV_FUZZ_CHECK(r.error.rfind("ERR Protocol error: ", 0) == 0);
      RKV_FUZZ_CHECK(r.error.find_first_of("\r\n") == std::string::npos);
      seen.push_back("error " + r.error);
      break;
    }
    RKV_FUZZ_CHECK(r.consumed >= 1 && r.consumed <= buffer.size());
    // The hint was a lower bound: the request took at least that much.
    RKV_FUZZ_CHECK(r.consumed >= hint);
    hint = 0;
    std::string line = r.kind == Kind::kSkip ? "skip" : "command";
    if (r.kind == Kind::kCommand) {
      RKV_FUZZ_CHECK(!r.args.empty());
      const bool multibulk = buffer[0] == '*';
      if (multibulk) {
        RKV_FUZZ_CHECK(static_cast<int64_t>(r.args.size()) <= limits.max_multibulk_length);
        RKV_FUZZ_CHECK(r.consumed <= limits.max_request_bytes);
      } else {
        RKV_FUZZ_CHECK(r.consumed <= limits.max_inline_bytes + 1);
      }
      for (const std::string& arg : r.args) {
        if (multibulk) RKV_FUZZ_CHECK(static_cast<int64_t>(arg.size()) <= limits.max_bulk_bytes);
        line += " " + std::to_string(arg.size()) + ":" + arg;
      }
      if (multibulk) {
        // Written again, the command parses to itself.
        const std::string again = Multibulk(r.args);
        const RespParse twice = RespParser().Parse(again);
        RKV_FUZZ_CHECK(twice.kind == Kind::kCommand && twice.consumed == again.size() && twice.args == r.args);
      }
    }
    seen.push_back(std::move(line));
    buffer.erase(0, r.consumed);
  }
  return seen;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  rkv::fuzz::FuzzInput input(data, size);
  const uint8_t limits_byte = input.Take<uint8_t>();
  const uint8_t split_byte = input.Take<uint8_t>();
  RespLimits limits;
  if (limits_byte & 0x02) {
    // Small: every bound within reach of a short input.
    limits.max_inline_bytes = 8 + ((limits_byte >> 2) & 0x0f);
    limits.max_multibulk_length = 1 + ((limits_byte >> 6) & 0x03) * 3;
    limits.max_bulk_bytes = 4 + ((limits_byte >> 2) & 0x07) * 5;
    limits.max_request_bytes = 24 + ((limits_byte >> 5) & 0x07) * 16;
    limits.unauthenticated_multibulk_length = 2;
    limits.unauthenticated_bulk_bytes = 6;
  }
  const bool authenticated = (limits_byte & 0x01) == 0;
  const RespParser parser(limits);
  const std::span<const uint8_t> rest = input.Rest();
  const std::string_view in(reinterpret_cast<const char*>(rest.data()), rest.size());
  rkv::fuzz::CheckSameRequestsWhateverTheSplit(
      in, split_byte, [&](rkv::fuzz::SplitDelivery& delivery) { return ParseAll(delivery, parser, authenticated); });
  return 0;
}
