// Silences protobuf's own log lines (e.g. "invalid UTF-8 data when
// parsing"), which a fuzzer would otherwise print for most inputs; a
// failed parse is still seen by its return value.
#pragma once

#include <google/protobuf/stubs/logging.h>

namespace rkv::fuzz {

inline void QuietProtobuf() {
  static const bool once = [] {
    google::protobuf::SetLogHandler([](google::protobuf::LogLevel, const char*, int, const std::string&) {});
    return true;
  }();
  (void)once;
}

}  // namespace rkv::fuzz
