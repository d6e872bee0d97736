#include "gateway/resp_parser.h"

#include <cstring>
#include <limits>

namespace rkv::gateway {
namespace {

RespParse Error(std::string text) {
  RespParse r;
  r.kind = RespParse::Kind::kError;
  r.error = std::move(text);
  return r;
}

RespParse Incomplete(size_t needed) {
  RespParse r;
  r.kind = RespParse::Kind::kIncomplete;
  r.needed = needed;
  return r;
}

bool IsSpace(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t' || c == '\v' || c == '\f'; }

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// A header line ("*<n>" or "$<len>") that starts at `pos`: Redis looks
// for its '\r' and takes what is before; the '\n' after it is required
// for the line to be complete.
struct HeaderLine {
  bool complete = false;
  bool too_long = false;
  std::string_view text;  // between the type byte and the '\r'
  size_t next = 0;        // the position after "\r\n"
};

HeaderLine ReadHeaderLine(std::string_view in, size_t pos, size_t max_line) {
  HeaderLine line;
  size_t cr = in.find('\r', pos);
  if (cr == std::string_view::npos) {
    // Redis refuses a header that has not ended within its inline limit.
    line.too_long = in.size() - pos > max_line;
    return line;
  }
  if (cr - pos > max_line) {
    line.too_long = true;
    return line;
  }
  if (cr + 1 >= in.size()) return line;  // the '\n' is still to come
  line.complete = true;
  line.text = in.substr(pos + 1, cr - pos - 1);
  line.next = cr + 2;
  return line;
}

}  // namespace

std::optional<int64_t> ParseRedisInteger(std::string_view text) {
  if (text.empty() || text.size() > 20) return std::nullopt;
  if (text.size() == 1 && text[0] == '0') return 0;
  size_t i = 0;
  bool negative = false;
  if (text[0] == '-') {
    negative = true;
    i = 1;
    if (text.size() == 1) return std::nullopt;
  }
  if (text[i] < '1' || text[i] > '9') return std::nullopt;
  uint64_t magnitude = 0;
  for (; i < text.size(); ++i) {
    char c = text[i];
    if (c < '0' || c > '9') return std::nullopt;
    uint64_t digit = static_cast<uint64_t>(c - '0');
    if (magnitude > (std::numeric_limits<uint64_t>::max() - digit) / 10) return std::nullopt;
    magnitude = magnitude * 10 + digit;
  }
  constexpr uint64_t kMaxPositive = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  if (negative) {
    if (magnitude > kMaxPositive + 1) return std::nullopt;
    if (magnitude == kMaxPositive + 1) return std::numeric_limits<int64_t>::min();
    return -static_cast<int64_t>(magnitude);
  }
  if (magnitude > kMaxPositive) return std::nullopt;
  return static_cast<int64_t>(magnitude);
}

std::optional<std::vector<std::string>> SplitInlineArgs(std::string_view line) {
  // Redis splits a C string: nothing after a NUL byte counts.
  line = line.substr(0, line.find('\0'));
  std::vector<std::string> args;
  size_t p = 0;
  const size_t n = line.size();
  while (true) {
    while (p < n && IsSpace(line[p])) ++p;
    if (p >= n) return args;
    std::string current;
    bool in_double = false;
    bool in_single = false;
    bool done = false;
    while (!done) {
      if (in_double) {
        if (p >= n) return std::nullopt;
        if (line[p] == '\\' && p + 3 < n && line[p + 1] == 'x' && HexValue(line[p + 2]) >= 0 &&
            HexValue(line[p + 3]) >= 0) {
          current.push_back(static_cast<char>(HexValue(line[p + 2]) * 16 + HexValue(line[p + 3])));
          p += 3;
        } else if (line[p] == '\\' && p + 1 < n) {
          ++p;
          char c = line[p];
          switch (c) {
            case 'n': c = '\n'; break;
            case 'r': c = '\r'; break;
            case 't': c = '\t'; break;
            case 'b': c = '\b'; break;
            case 'a': c = '\a'; break;
            default: break;
          }
          current.push_back(c);
        } else if (line[p] == '"') {
          // A closing quote must be followed by a space or the end.
          if (p + 1 < n && !IsSpace(line[p + 1])) return std::nullopt;
          done = true;
        } else {
          current.push_back(line[p]);
        }
      } else if (in_single) {
        if (p >= n) return std::nullopt;
        if (line[p] == '\\' && p + 1 < n && line[p + 1] == '\'') {
          ++p;
          current.push_back('\'');
        } else if (line[p] == '\'') {
          if (p + 1 < n && !IsSpace(line[p + 1])) return std::nullopt;
          done = true;
        } else {
          current.push_back(line[p]);
        }
      } else {
        if (p >= n) {
          done = true;
          break;
        }
        switch (line[p]) {
          case ' ': case '\n': case '\r': case '\t':
            done = true;
            break;
          case '"':
            in_double = true;
            break;
          case '\'':
            in_single = true;
            break;
          default:
            current.push_back(line[p]);
            break;
        }
      }
      if (p < n) ++p;
    }
    args.push_back(std::move(current));
  }
}

RespParse RespParser::Parse(std::string_view in, bool authenticated) const {
  if (in.empty()) return Incomplete(1);
  if (in[0] == '*') return ParseMultibulk(in, authenticated);
  return ParseInline(in);
}

RespParse RespParser::ParseInline(std::string_view in) const {
  size_t newline = in.find('\n');
  if (newline == std::string_view::npos) {
    if (in.size() > limits_.max_inline_bytes) return Error("ERR Protocol error: too big inline request");
    return Incomplete(in.size() + 1);
  }
  if (newline > limits_.max_inline_bytes) return Error("ERR Protocol error: too big inline request");
  std::string_view line = in.substr(0, newline);
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  auto args = SplitInlineArgs(line);
  if (!args) return Error("ERR Protocol error: unbalanced quotes in request");
  RespParse r;
  r.consumed = newline + 1;
  if (args->empty()) {
    r.kind = RespParse::Kind::kSkip;
    return r;
  }
  r.kind = RespParse::Kind::kCommand;
  r.args = std::move(*args);
  return r;
}

RespParse RespParser::ParseMultibulk(std::string_view in, bool authenticated) const {
  HeaderLine count_line = ReadHeaderLine(in, 0, limits_.max_inline_bytes);
  if (count_line.too_long) return Error("ERR Protocol error: too big mbulk count string");
  if (!count_line.complete) return Incomplete(in.size() + 1);
  auto count = ParseRedisInteger(count_line.text);
  if (!count || *count > limits_.max_multibulk_length) return Error("ERR Protocol error: invalid multibulk length");
  if (!authenticated && *count > limits_.unauthenticated_multibulk_length) {
    return Error("ERR Protocol error: unauthenticated multibulk length");
  }
  if (*count <= 0) {
    RespParse r;
    r.kind = RespParse::Kind::kSkip;
    r.consumed = count_line.next;
    return r;
  }
  // The arguments are collected only once the whole request is known to
  // be here, so an incomplete request costs a scan of its headers, no copy.
  size_t pos = count_line.next;
  size_t declared = count_line.next;  // the request's bytes up to the end of the bulk at hand
  std::vector<std::pair<size_t, size_t>> spans;
  spans.reserve(static_cast<size_t>(std::min<int64_t>(*count, 1024)));
  // Every bulk still to come takes at least "$0\r\n\r\n": a lower bound
  // on the request's size that spares a client sending many small
  // arguments a scan of its headers on every read.
  constexpr size_t kMinBulkBytes = 6;
  const auto still = [&](int64_t from) { return static_cast<size_t>(*count - from) * kMinBulkBytes; };
  for (int64_t i = 0; i < *count; ++i) {
    if (pos >= in.size()) return Incomplete(pos + still(i));
    if (in[pos] != '$') {
      // Redis's reply shows a line break as a space.
      char got = in[pos] == '\r' || in[pos] == '\n' ? ' ' : in[pos];
      return Error(std::string("ERR Protocol error: expected '$', got '") + got + "'");
    }
    HeaderLine len_line = ReadHeaderLine(in, pos, limits_.max_inline_bytes);
    if (len_line.too_long) return Error("ERR Protocol error: too big bulk count string");
    if (!len_line.complete) return Incomplete(std::max(in.size() + 1, pos + still(i)));
    auto len = ParseRedisInteger(len_line.text);
    if (!len || *len < 0 || *len > limits_.max_bulk_bytes) return Error("ERR Protocol error: invalid bulk length");
    if (!authenticated && *len > limits_.unauthenticated_bulk_bytes) {
      return Error("ERR Protocol error: unauthenticated bulk length");
    }
    size_t bulk = static_cast<size_t>(*len);
    declared = len_line.next + bulk + 2;
    if (declared > limits_.max_request_bytes) {
      return Error("ERR Protocol error: request too large (over " + std::to_string(limits_.max_request_bytes) +
                   " bytes)");
    }
    // Redis skips the two bytes after a bulk without looking at them.
    if (in.size() < declared) return Incomplete(declared + still(i + 1));
    spans.emplace_back(len_line.next, bulk);
    pos = declared;
  }
  RespParse r;
  r.kind = RespParse::Kind::kCommand;
  r.consumed = pos;
  r.args.reserve(spans.size());
  for (const auto& [start, size] : spans) r.args.emplace_back(in.substr(start, size));
  return r;
}

}  // namespace rkv::gateway
