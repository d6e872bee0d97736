// kvctl's expiry commands (put --ttl, ttl, expire, persist): their
// arguments and what they print (kvctl_util.h).
#include <cstdint>
#include <string>
#include <string_view>

#include "client/kvctl/kvctl_util.h"

namespace rkv::kvctl {

StatusOr<int64_t> ParseSeconds(std::string_view text, std::string_view what) {
  const auto bad = [&] {
    return InvalidArgument(std::string(what) + ": '" + std::string(text) + "' is not a whole number of seconds");
  };
  if (text.empty() || text.size() > 19) return bad();
  size_t i = text[0] == '-' ? 1 : 0;
  if (i == text.size()) return bad();
  int64_t v = 0;
  for (; i < text.size(); ++i) {
    if (text[i] < '0' || text[i] > '9') return bad();
    v = v * 10 + (text[i] - '0');
  }
  // Ten years bounds a deadline far inside int64 milliseconds.
  constexpr int64_t kMaxSeconds = int64_t{10} * 366 * 24 * 3600;
  if (v > kMaxSeconds) {
    return InvalidArgument(std::string(what) + ": " + std::string(text) + " seconds is more than ten years");
  }
  return text[0] == '-' ? -v : v;
}

int64_t DeadlineAfter(int64_t now_ms, int64_t seconds) { return now_ms + seconds * 1000; }

std::string FormatTtl(int64_t expires_at_ms, int64_t now_ms) {
  if (expires_at_ms == 0) return "none";
  const int64_t left = expires_at_ms - now_ms;
  return std::to_string(left <= 0 ? 0 : (left + 999) / 1000);
}

std::string FormatTtlJson(std::string_view key, int64_t expires_at_ms, int64_t now_ms) {
  return "{" + JsonBytesField("key", key) + ",\"expires_at_ms\":" + std::to_string(expires_at_ms) +
         ",\"ttl_seconds\":" + (expires_at_ms == 0 ? std::string("null") : FormatTtl(expires_at_ms, now_ms)) + "}\n";
}

std::string FormatExpiryJson(std::string_view key, uint64_t version, int64_t expires_at_ms) {
  return "{" + JsonBytesField("key", key) + ",\"version\":" + std::to_string(version) +
         ",\"expires_at_ms\":" + std::to_string(expires_at_ms) + "}\n";
}

}  // namespace rkv::kvctl
