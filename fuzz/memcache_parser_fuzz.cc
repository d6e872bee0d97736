// rkv-gateway's memcached text-protocol parser (gateway/memcache_parser.h)
// on any bytes a client may send.
//
// Input: a limits byte (the key and data limits, small ones included),
// then the bytes of the connection.
//
// Properties: the parser never reads past its input and always makes
// progress or waits (a complete request consumes 1..size bytes; kIncomplete
// and kClose consume none); a partial line is never kept past the line
// limits (kIncomplete only while the line could still be valid); every
// request's views lie inside the input, its keys within the key limit and
// free of spaces and control characters, a storage block within the data
// limit and followed by "\r\n"; every reply is one of the protocol's lines
// ending "\r\n"; and parsing the whole input gives the same requests as
// parsing it delivered in two parts split anywhere (the event loop splits
// wherever the socket did).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz/fuzz_input.h"
#include "gateway/memcache_parser.h"

namespace {

using namespace rkv::gateway;

bool Inside(std::string_view part, std::string_view whole) {
  return part.empty() || (part.data() >= whole.data() && part.data() + part.size() <= whole.data() + whole.size());
}

void CheckKey(std::string_view key, const ParserLimits& limits) {
  RKV_FUZZ_CHECK(!key.empty() && key.size() <= limits.max_key_bytes && key.size() <= kMemcachedMaxKeyBytes);
  for (unsigned char c : key) RKV_FUZZ_CHECK(c > 0x20 && c != 0x7f);
}

// Parses `delivery` to the end as a loop would; returns one line per
// result.
std::vector<std::string> ParseAll(rkv::fuzz::SplitDelivery& delivery, const ParserLimits& limits) {
  std::vector<std::string> seen;
  std::string& buffer = delivery.buffer();
  uint64_t swallow = 0;
  while (true) {
    if (swallow > 0) {
      const size_t take = static_cast<size_t>(std::min<uint64_t>(swallow, buffer.size()));
      buffer.erase(0, take);
      swallow -= take;
    }
    const ParseResult r = swallow > 0 ? ParseResult{} : ParseMemcacheRequest(buffer, limits);
    if (r.kind == ParseKind::kIncomplete) {
      RKV_FUZZ_CHECK(r.consumed == 0);
      // Never waiting on a line the limits already rule out.
      if (swallow == 0 && buffer.find('\n') == std::string::npos) {
        RKV_FUZZ_CHECK(buffer.size() <= kMaxRetrievalLineBytes);
      }
      if (!delivery.DeliverMore()) break;
      continue;
    }
    if (r.kind == ParseKind::kClose) {
      RKV_FUZZ_CHECK(r.consumed == 0);
      seen.push_back("close");
      break;
    }
    RKV_FUZZ_CHECK(r.consumed >= 1 && r.consumed <= buffer.size());
    std::string line = std::to_string(static_cast<int>(r.kind)) + " " + std::to_string(r.consumed) + " ";
    if (!r.reply.empty()) {
      RKV_FUZZ_CHECK(r.reply.size() >= 2 && r.reply.substr(r.reply.size() - 2) == "\r\n");
      RKV_FUZZ_CHECK(r.reply.find('\n') == r.reply.size() - 1);
      line += std::string(r.reply);
    }
    const std::string_view whole(buffer);
    if (r.kind == ParseKind::kRequest || r.kind == ParseKind::kTooLarge) {
      const MemcacheRequest& q = r.request;
      line += std::to_string(static_cast<int>(q.command)) + " " + std::string(q.key) + " " + std::to_string(q.flags) +
              " " + std::to_string(q.exptime) + " " + std::to_string(q.noreply) + " " + std::to_string(q.delta) + " " +
              std::to_string(q.cas_unique) + " " + std::to_string(q.data.size());
      RKV_FUZZ_CHECK(Inside(q.key, whole) && Inside(q.data, whole) && Inside(q.stats_arg, whole));
      if (!q.key.empty() || IsStorageCommand(q.command)) CheckKey(q.key, limits);
      for (std::string_view k : q.keys) {
        RKV_FUZZ_CHECK(Inside(k, whole));
        CheckKey(k, limits);
        line += " " + std::string(k);
      }
      if (r.kind == ParseKind::kRequest && IsStorageCommand(q.command)) {
        RKV_FUZZ_CHECK(q.data.size() <= limits.max_data_bytes);
        const size_t end = static_cast<size_t>(q.data.data() - whole.data()) + q.data.size();
        RKV_FUZZ_CHECK(end + 2 == r.consumed && whole.substr(end, 2) == "\r\n");
      }
      if (r.kind == ParseKind::kTooLarge) {
        RKV_FUZZ_CHECK(IsStorageCommand(q.command) && r.swallow >= limits.max_data_bytes + 3);
        swallow = r.swallow;
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
  ParserLimits limits;
  limits.max_key_bytes = (limits_byte & 0x0f) == 0 ? 250 : (limits_byte & 0x0f) * 4;
  limits.max_data_bytes = (limits_byte >> 4) == 0 ? uint64_t{1} << 20 : (limits_byte >> 4) * 3;
  const std::span<const uint8_t> rest = input.Rest();
  const std::string_view in(reinterpret_cast<const char*>(rest.data()), rest.size());
  rkv::fuzz::CheckSameRequestsWhateverTheSplit(
      in, split_byte, [&](rkv::fuzz::SplitDelivery& delivery) { return ParseAll(delivery, limits); });
  return 0;
}
