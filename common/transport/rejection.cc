#include "common/transport/rejection.h"

#include <algorithm>
#include <cstring>

namespace rkv::transport {
namespace {

bool Printable(uint8_t b) { return b >= 0x20 && b < 0x7f; }

// Printable text of untrusted bytes: stops at the first NUL, replaces
// anything unprintable.
std::string PrintableText(const uint8_t* p, size_t n) {
  std::string out;
  for (size_t i = 0; i < n && p[i] != 0; ++i) out.push_back(Printable(p[i]) ? static_cast<char>(p[i]) : '?');
  return out;
}

}  // namespace

std::vector<uint8_t> EncodeRejection(const Rejection& r) {
  const bool with_detail = !r.detail.empty() && r.detail.size() <= kMaxRejectionDetailBytes;
  std::vector<uint8_t> out(kRejectionHeaderBytes + kRejectionTextBytes + (with_detail ? 1 + r.detail.size() : 0), 0);
  const uint32_t magic = kRejectionMagic;
  const int32_t code = static_cast<int32_t>(r.code);
  std::memcpy(out.data(), &magic, sizeof magic);
  std::memcpy(out.data() + sizeof magic, &code, sizeof code);
  const size_t n = std::min(r.text.size(), kRejectionTextBytes - 1);
  for (size_t i = 0; i < n; ++i) {
    const auto b = static_cast<uint8_t>(r.text[i]);
    out[kRejectionHeaderBytes + i] = Printable(b) ? b : '?';
  }
  if (with_detail) {
    constexpr size_t kAt = kRejectionHeaderBytes + kRejectionTextBytes;
    out[kAt] = static_cast<uint8_t>(r.detail.size());
    std::memcpy(out.data() + kAt + 1, r.detail.data(), r.detail.size());
  }
  return out;
}

Rejection DecodeRejection(std::span<const uint8_t> data) {
  const auto all_zero = [](std::span<const uint8_t> s) {
    return std::all_of(s.begin(), s.end(), [](uint8_t b) { return b == 0; });
  };
  if (data.empty() || all_zero(data)) return {StatusCode::kOk, "no reason given"};
  if (data.size() >= kRejectionHeaderBytes) {
    uint32_t magic = 0;
    int32_t code = 0;
    std::memcpy(&magic, data.data(), sizeof magic);
    std::memcpy(&code, data.data() + sizeof magic, sizeof code);
    if (magic == kRejectionMagic) {
      const size_t n = std::min(data.size() - kRejectionHeaderBytes, kRejectionTextBytes);
      Rejection r;
      r.code = IsValidStatusCode(code) ? static_cast<StatusCode>(code) : StatusCode::kOk;
      r.text = PrintableText(data.data() + kRejectionHeaderBytes, n);
      if (r.text.empty()) r.text = "no reason given";
      constexpr size_t kAt = kRejectionHeaderBytes + kRejectionTextBytes;
      if (data.size() > kAt) {
        const size_t len = data[kAt];
        if (len > 0 && len <= kMaxRejectionDetailBytes && data.size() >= kAt + 1 + len) {
          r.detail.assign(data.begin() + kAt + 1, data.begin() + kAt + 1 + len);
        }
      }
      return r;
    }
  }
  size_t text_len = 0;
  while (text_len < data.size() && Printable(data[text_len])) ++text_len;
  if (text_len > 0 && all_zero(data.subspan(text_len))) {
    return {StatusCode::kOk, PrintableText(data.data(), text_len)};
  }
  return {StatusCode::kOk, std::to_string(data.size()) + " bytes of reject data"};
}

std::string DescribeRejection(const Rejection& r) {
  if (r.code == StatusCode::kOk) return r.text;
  return r.text + " (" + std::string(StatusCodeName(r.code)) + ")";
}

Status RejectedStatus(const std::string& where, const Rejection& r) {
  const std::string message = where + ": rejected by the server: " + DescribeRejection(r);
  if (r.code == StatusCode::kUnavailable) return Unavailable(message);
  if (r.code == StatusCode::kResourceExhausted) return ResourceExhausted(message);
  return PermissionDenied(message);
}

}  // namespace rkv::transport
