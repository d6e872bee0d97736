#include "bench/ycsb/kv_target.h"

#include <charconv>

namespace rkv::bench {

Status SplitHostPort(std::string_view address, std::string* host, int* port) {
  std::string_view h;
  std::string_view p;
  if (!address.empty() && address.front() == '[') {
    const size_t close = address.find(']');
    if (close == std::string_view::npos || close + 1 >= address.size() || address[close + 1] != ':') {
      return InvalidArgument("bad address '" + std::string(address) + "' (want [V6]:PORT)");
    }
    h = address.substr(1, close - 1);
    p = address.substr(close + 2);
  } else {
    const size_t colon = address.rfind(':');
    if (colon == std::string_view::npos || address.find(':') != colon) {
      return InvalidArgument("bad address '" + std::string(address) + "' (want HOST:PORT)");
    }
    h = address.substr(0, colon);
    p = address.substr(colon + 1);
  }
  int value = 0;
  const auto [end, ec] = std::from_chars(p.data(), p.data() + p.size(), value);
  if (h.empty() || p.empty() || ec != std::errc() || end != p.data() + p.size() || value < 1 ||
      value > 65535) {
    return InvalidArgument("bad address '" + std::string(address) +
                           "' (want HOST:PORT with a port in 1..65535)");
  }
  *host = std::string(h);
  *port = value;
  return Status::Ok();
}

std::vector<StatusOr<size_t>> KvTarget::MultiGet(std::span<const std::string> keys) {
  return std::vector<StatusOr<size_t>>(keys.size(), Status(StatusCode::kUnimplemented, "no batched GET"));
}

std::vector<Status> KvTarget::MultiPut(std::span<const std::string> keys, std::span<const std::string_view>) {
  return std::vector<Status>(keys.size(), Status(StatusCode::kUnimplemented, "no batched PUT"));
}

}  // namespace rkv::bench
