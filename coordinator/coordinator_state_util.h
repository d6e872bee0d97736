// Small helpers shared by the files that implement CoordinatorState
// (coordinator_state.h); not part of its interface.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

#include <google/protobuf/repeated_field.h>

namespace rkv::coordinator {

// True when `value` is in `ascending` (a server's sorted shard list).
inline bool Contains(const google::protobuf::RepeatedField<uint32_t>& ascending, uint32_t value) {
  return std::binary_search(ascending.begin(), ascending.end(), value);
}

// "2.5 s": a duration for the log.
inline std::string Seconds(std::chrono::steady_clock::duration d) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f s", std::chrono::duration<double>(d).count());
  return buf;
}

}  // namespace rkv::coordinator
