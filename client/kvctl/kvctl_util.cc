#include "client/kvctl/kvctl_util.h"

#include <cstdio>

namespace rkv::kvctl {

StatusOr<Invocation> ParseInvocation(const std::vector<std::string>& args, bool key_hex) {
  if (args.empty()) return InvalidArgument("no command given");
  Invocation inv;
  inv.command_name = args[0];
  size_t max_args;
  if (args[0] == "get") {
    inv.command = Command::kGet;
    max_args = 2;
  } else if (args[0] == "put") {
    inv.command = Command::kPut;
    max_args = 3;
  } else if (args[0] == "del") {
    inv.command = Command::kDel;
    max_args = 2;
  } else {
    return InvalidArgument("unknown command '" + args[0] + "'");
  }
  if (args.size() < 2) return InvalidArgument(args[0] + ": missing KEY");
  if (args.size() > max_args) {
    return InvalidArgument(args[0] + ": too many arguments (" + std::to_string(args.size() - 1) + ")");
  }
  if (key_hex) {
    auto key = DecodeHex(args[1]);
    if (!key.ok()) return key.status().WithContext(args[0] + ": KEY");
    inv.key = std::move(*key);
  } else {
    inv.key = args[1];
  }
  if (args.size() == 3) {
    inv.has_value_arg = true;
    inv.value_arg = args[2];
  }
  return inv;
}

StatusOr<ValueSource> ChooseValueSource(const Invocation& inv, bool has_value_file,
                                        bool stdin_is_tty) {
  const bool stdin_asked = inv.has_value_arg && inv.value_arg == "-";
  if (inv.has_value_arg && !stdin_asked) {
    if (has_value_file) return InvalidArgument("put: give either VALUE or --value_file, not both");
    return ValueSource::kArgument;
  }
  if (has_value_file) {
    if (stdin_asked) return InvalidArgument("put: give either '-' (stdin) or --value_file, not both");
    return ValueSource::kFile;
  }
  if (stdin_asked || !stdin_is_tty) return ValueSource::kStdin;
  return InvalidArgument("put: no value: give VALUE, --value_file=FILE, or pipe it to stdin");
}

StatusOr<std::string> DecodeHex(std::string_view hex) {
  if (hex.size() % 2 != 0) return InvalidArgument("hex string of odd length " + std::to_string(hex.size()));
  auto digit = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  std::string out;
  out.reserve(hex.size() / 2);
  for (size_t i = 0; i < hex.size(); i += 2) {
    const int hi = digit(hex[i]);
    const int lo = digit(hex[i + 1]);
    if (hi < 0 || lo < 0) return InvalidArgument("not a hex digit at position " + std::to_string(hi < 0 ? i : i + 1));
    out.push_back(static_cast<char>(hi << 4 | lo));
  }
  return out;
}

bool IsValidUtf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t n;
    uint32_t cp;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      n = 1;
      cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      n = 2;
      cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      n = 3;
      cp = c & 0x07;
    } else {
      return false;
    }
    if (i + n >= s.size()) return false;  // truncated sequence
    for (size_t k = 1; k <= n; ++k) {
      const auto cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xC0) != 0x80) return false;
      cp = cp << 6 | (cc & 0x3F);
    }
    static constexpr uint32_t kMinForLength[] = {0, 0x80, 0x800, 0x10000};
    if (cp < kMinForLength[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += n + 1;
  }
  return true;
}

std::string JsonQuote(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 2);
  out.push_back('"');
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20 || c == 0x7F) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          out += buf;
        } else {
          out.push_back(ch);
        }
    }
  }
  out.push_back('"');
  return out;
}

std::string Base64Encode(std::string_view bytes) {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 3 <= bytes.size(); i += 3) {
    const uint32_t v = static_cast<uint8_t>(bytes[i]) << 16 | static_cast<uint8_t>(bytes[i + 1]) << 8 |
                       static_cast<uint8_t>(bytes[i + 2]);
    out.push_back(kAlphabet[v >> 18 & 63]);
    out.push_back(kAlphabet[v >> 12 & 63]);
    out.push_back(kAlphabet[v >> 6 & 63]);
    out.push_back(kAlphabet[v & 63]);
  }
  const size_t rest = bytes.size() - i;
  if (rest > 0) {
    uint32_t v = static_cast<uint8_t>(bytes[i]) << 16;
    if (rest == 2) v |= static_cast<uint8_t>(bytes[i + 1]) << 8;
    out.push_back(kAlphabet[v >> 18 & 63]);
    out.push_back(kAlphabet[v >> 12 & 63]);
    out.push_back(rest == 2 ? kAlphabet[v >> 6 & 63] : '=');
    out.push_back('=');
  }
  return out;
}

std::string JsonBytesField(std::string_view name, std::string_view bytes) {
  if (IsValidUtf8(bytes)) return JsonQuote(name) + ":" + JsonQuote(bytes);
  return JsonQuote(std::string(name) + "_base64") + ":" + JsonQuote(Base64Encode(bytes));
}

std::string FormatGetJson(std::string_view key, std::string_view value, uint64_t version) {
  return "{" + JsonBytesField("key", key) + "," + JsonBytesField("value", value) +
         ",\"version\":" + std::to_string(version) + "}\n";
}

std::string FormatPutJson(std::string_view key, uint64_t version) {
  return "{" + JsonBytesField("key", key) + ",\"version\":" + std::to_string(version) + "}\n";
}

std::string FormatDelJson(std::string_view key) {
  return "{" + JsonBytesField("key", key) + ",\"deleted\":true}\n";
}

}  // namespace rkv::kvctl
