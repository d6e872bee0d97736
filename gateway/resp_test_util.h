// What the RESP tests of rkv-gateway share: a Redis request as a client
// sends it.
#pragma once

#include <string>
#include <vector>

namespace rkv::gateway::testing {

// `args` as one RESP2 multibulk request ("*N\r\n$len\r\narg\r\n"...).
inline std::string Multibulk(const std::vector<std::string>& args) {
  std::string s = "*" + std::to_string(args.size()) + "\r\n";
  for (const auto& a : args) s += "$" + std::to_string(a.size()) + "\r\n" + a + "\r\n";
  return s;
}

}  // namespace rkv::gateway::testing
