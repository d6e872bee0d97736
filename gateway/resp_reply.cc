#include "gateway/resp_reply.h"

#include <charconv>

namespace rkv::gateway {
namespace {

void AppendLine(std::string* out, char type, std::string_view text) {
  out->push_back(type);
  size_t start = out->size();
  out->append(text);
  for (size_t i = start; i < out->size(); ++i) {
    if ((*out)[i] == '\r' || (*out)[i] == '\n') (*out)[i] = ' ';
  }
  out->append("\r\n");
}

void AppendNumberLine(std::string* out, char type, int64_t n) {
  char buf[24];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), n);
  (void)ec;  // 24 bytes hold any int64
  out->push_back(type);
  out->append(buf, end);
  out->append("\r\n");
}

}  // namespace

void AppendSimple(std::string* out, std::string_view text) { AppendLine(out, '+', text); }

void AppendError(std::string* out, std::string_view text) { AppendLine(out, '-', text); }

void AppendInteger(std::string* out, int64_t n) { AppendNumberLine(out, ':', n); }

void AppendBulk(std::string* out, std::string_view bytes) {
  AppendNumberLine(out, '$', static_cast<int64_t>(bytes.size()));
  out->append(bytes);
  out->append("\r\n");
}

void AppendNull(std::string* out) { out->append("$-1\r\n"); }

void AppendArrayHeader(std::string* out, size_t n) { AppendNumberLine(out, '*', static_cast<int64_t>(n)); }

}  // namespace rkv::gateway
