#include "common/net_address.h"

#include <charconv>

namespace rkv {

Status ParseHostPort(const std::string& address, std::string* host, uint16_t* port) {
  std::string h;
  std::string p;
  if (!address.empty() && address.front() == '[') {
    const size_t close = address.find(']');
    if (close == std::string::npos || close + 1 >= address.size() || address[close + 1] != ':') {
      return InvalidArgument("address '" + address + "' is not [HOST]:PORT");
    }
    h = address.substr(1, close - 1);
    p = address.substr(close + 2);
  } else {
    const size_t colon = address.rfind(':');
    if (colon == std::string::npos) return InvalidArgument("address '" + address + "' is not HOST:PORT");
    h = address.substr(0, colon);
    p = address.substr(colon + 1);
  }
  if (h.empty()) return InvalidArgument("address '" + address + "' has no host");
  unsigned value = 0;
  const auto [end, ec] = std::from_chars(p.data(), p.data() + p.size(), value);
  if (p.empty() || ec != std::errc() || end != p.data() + p.size() || value > 65535) {
    return InvalidArgument("address '" + address + "' has no valid port (0-65535)");
  }
  *host = h;
  *port = static_cast<uint16_t>(value);
  return Status::Ok();
}

}  // namespace rkv
