// Read-modify-writes: INCR, DECR, INCRBY, DECRBY, INCRBYFLOAT, APPEND,
// SETRANGE. Each is a compare-and-set loop (ReadModifyWrite): the new
// value is written only if the key still holds the version that was read,
// so concurrent increments through any number of gateways lose none. The
// key's expiry is kept, as Redis keeps it.
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>

#include "gateway/resp_commands.h"
#include "gateway/resp_parser.h"
#include "gateway/resp_reply.h"

namespace rkv::gateway {
namespace {

void IncrementBy(CommandContext& ctx, const std::string& key, int64_t delta) {
  if (!CheckKey(ctx, key)) return;
  int64_t result = 0;
  std::string error;
  rkv::Status status = ReadModifyWrite(ctx, key, [&](const KeyState& state, std::string* next, int64_t*) {
    int64_t current = 0;
    if (state.found) {
      auto parsed = ParseRedisInteger(state.current.value);
      if (!parsed) {
        error = "ERR value is not an integer or out of range";
        return RmwAction::kDone;
      }
      current = *parsed;
    }
    if ((delta < 0 && current < std::numeric_limits<int64_t>::min() - delta) ||
        (delta > 0 && current > std::numeric_limits<int64_t>::max() - delta)) {
      error = "ERR increment or decrement would overflow";
      return RmwAction::kDone;
    }
    error.clear();
    result = current + delta;
    *next = std::to_string(result);
    return RmwAction::kWrite;
  });
  if (!status.ok()) return ReplyRkvError(ctx, status);
  if (!error.empty()) return AppendError(ctx.out, error);
  AppendInteger(ctx.out, result);
}

// Redis's string2ld: the whole text a finite long double, no spaces.
std::optional<long double> ParseRedisFloat(std::string_view text) {
  if (text.empty() || text.size() >= 5 * 1024) return std::nullopt;
  std::string s(text);
  if (std::isspace(static_cast<unsigned char>(s[0]))) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  long double v = std::strtold(s.c_str(), &end);
  if (end != s.c_str() + s.size() || errno == ERANGE || std::isnan(v)) return std::nullopt;
  return v;
}

// Redis's ld2string(LD_STR_HUMAN): 17 decimals, trailing zeros (and a
// trailing '.') dropped, "-0" as "0".
std::string FormatRedisFloat(long double v) {
  char buf[5 * 1024];
  int n = std::snprintf(buf, sizeof(buf), "%.17Lf", v);
  if (n <= 0 || static_cast<size_t>(n) >= sizeof(buf)) return std::to_string(static_cast<double>(v));
  std::string s(buf, static_cast<size_t>(n));
  if (s.find('.') != std::string::npos) {
    while (!s.empty() && s.back() == '0') s.pop_back();
    if (!s.empty() && s.back() == '.') s.pop_back();
  }
  if (s == "-0") s = "0";
  return s;
}

}  // namespace

void CmdIncr(CommandContext& ctx, const Args& args) { IncrementBy(ctx, args[1], 1); }

void CmdDecr(CommandContext& ctx, const Args& args) { IncrementBy(ctx, args[1], -1); }

void CmdIncrBy(CommandContext& ctx, const Args& args) {
  auto delta = ParseRedisInteger(args[2]);
  if (!delta) return ReplyNotInteger(ctx.out);
  IncrementBy(ctx, args[1], *delta);
}

void CmdDecrBy(CommandContext& ctx, const Args& args) {
  auto delta = ParseRedisInteger(args[2]);
  if (!delta) return ReplyNotInteger(ctx.out);
  if (*delta == std::numeric_limits<int64_t>::min()) return AppendError(ctx.out, "ERR decrement would overflow");
  IncrementBy(ctx, args[1], -*delta);
}

void CmdIncrByFloat(CommandContext& ctx, const Args& args) {
  auto delta = ParseRedisFloat(args[2]);
  if (!delta) return AppendError(ctx.out, "ERR value is not a valid float");
  if (!CheckKey(ctx, args[1])) return;
  std::string result;
  std::string error;
  rkv::Status status = ReadModifyWrite(ctx, args[1], [&](const KeyState& state, std::string* next, int64_t*) {
    long double current = 0;
    if (state.found) {
      auto parsed = ParseRedisFloat(state.current.value);
      if (!parsed) {
        error = "ERR value is not a valid float";
        return RmwAction::kDone;
      }
      current = *parsed;
    }
    long double sum = current + *delta;
    if (std::isnan(sum) || std::isinf(sum)) {
      error = "ERR increment would produce NaN or Infinity";
      return RmwAction::kDone;
    }
    error.clear();
    result = FormatRedisFloat(sum);
    *next = result;
    return RmwAction::kWrite;
  });
  if (!status.ok()) return ReplyRkvError(ctx, status);
  if (!error.empty()) return AppendError(ctx.out, error);
  AppendBulk(ctx.out, result);
}

void CmdAppend(CommandContext& ctx, const Args& args) {
  if (!CheckKey(ctx, args[1])) return;
  const size_t max = ctx.options->limits.max_value_bytes;
  size_t length = 0;
  bool too_large = false;
  rkv::Status status = ReadModifyWrite(ctx, args[1], [&](const KeyState& state, std::string* next, int64_t*) {
    size_t current = state.found ? state.current.value.size() : 0;
    too_large = current + args[2].size() > max;
    if (too_large) return RmwAction::kDone;
    if (state.found) *next = state.current.value;
    next->append(args[2]);
    length = next->size();
    return RmwAction::kWrite;
  });
  if (!status.ok()) return ReplyRkvError(ctx, status);
  if (too_large) {
    return AppendError(ctx.out, "ERR string exceeds maximum allowed size (rkv's max_value_bytes, " +
                                    std::to_string(max) + ")");
  }
  AppendInteger(ctx.out, static_cast<int64_t>(length));
}

void CmdSetRange(CommandContext& ctx, const Args& args) {
  auto offset = ParseRedisInteger(args[2]);
  if (!offset) return ReplyNotInteger(ctx.out);
  if (*offset < 0) return AppendError(ctx.out, "ERR offset is out of range");
  if (!CheckKey(ctx, args[1])) return;
  const std::string& piece = args[3];
  const size_t max = ctx.options->limits.max_value_bytes;
  if (!piece.empty() && (static_cast<uint64_t>(*offset) > max || static_cast<uint64_t>(*offset) + piece.size() > max)) {
    return AppendError(ctx.out, "ERR string exceeds maximum allowed size (rkv's max_value_bytes, " +
                                    std::to_string(max) + ")");
  }
  size_t length = 0;
  rkv::Status status = ReadModifyWrite(ctx, args[1], [&](const KeyState& state, std::string* next, int64_t*) {
    length = state.found ? state.current.value.size() : 0;
    // Nothing to write: Redis answers the current length and creates no key.
    if (piece.empty()) return RmwAction::kDone;
    if (state.found) *next = state.current.value;
    size_t at = static_cast<size_t>(*offset);
    if (next->size() < at + piece.size()) next->resize(at + piece.size(), '\0');
    next->replace(at, piece.size(), piece);
    length = next->size();
    return RmwAction::kWrite;
  });
  if (!status.ok()) return ReplyRkvError(ctx, status);
  AppendInteger(ctx.out, static_cast<int64_t>(length));
}

}  // namespace rkv::gateway
