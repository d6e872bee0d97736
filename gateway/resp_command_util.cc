// What the RESP command handlers share: rkv errors as replies, the key and
// value bounds, expiry arithmetic.
#include <limits>
#include <string>

#include "gateway/resp_commands.h"
#include "gateway/resp_reply.h"

namespace rkv::gateway {

void ReplyRkvError(CommandContext& ctx, const rkv::Status& status) {
  ctx.options->shared->backend_errors.fetch_add(1, std::memory_order_relaxed);
  std::string text = status.code() == rkv::StatusCode::kResourceExhausted ? "OOM rkv " : "ERR rkv ";
  text += rkv::StatusCodeName(status.code());
  if (!status.message().empty()) {
    text += ": ";
    text += status.message();
  }
  AppendError(ctx.out, text);
}

bool CheckKey(CommandContext& ctx, std::string_view key) {
  if (key.empty()) {
    AppendError(ctx.out, "ERR rkv does not store the empty key (keys are 1 to " +
                             std::to_string(ctx.options->limits.max_key_bytes) + " bytes)");
    return false;
  }
  if (key.size() > ctx.options->limits.max_key_bytes) {
    AppendError(ctx.out, "ERR key of " + std::to_string(key.size()) + " bytes is over rkv's max_key_bytes (" +
                             std::to_string(ctx.options->limits.max_key_bytes) + ")");
    return false;
  }
  return true;
}

bool CheckValue(CommandContext& ctx, std::string_view value) {
  if (value.size() > ctx.options->limits.max_value_bytes) {
    AppendError(ctx.out, "ERR value of " + std::to_string(value.size()) +
                             " bytes is over rkv's max_value_bytes (" +
                             std::to_string(ctx.options->limits.max_value_bytes) + ")");
    return false;
  }
  return true;
}

void ReplyNotInteger(std::string* out) { AppendError(out, "ERR value is not an integer or out of range"); }

void ReplySyntaxError(std::string* out) { AppendError(out, "ERR syntax error"); }

std::optional<int64_t> ExpiryFromNow(int64_t amount, bool milliseconds, bool absolute, int64_t now_ms) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  int64_t ms = amount;
  if (!milliseconds) {
    if (amount > kMax / 1000 || amount < std::numeric_limits<int64_t>::min() / 1000) return std::nullopt;
    ms = amount * 1000;
  }
  if (absolute) return ms;
  if (ms > 0 && now_ms > kMax - ms) return std::nullopt;
  if (ms < 0 && now_ms < std::numeric_limits<int64_t>::min() - ms) return std::nullopt;
  return now_ms + ms;
}

void CmdKeys(CommandContext& ctx, const Args&) {
  AppendError(ctx.out,
              "ERR rkv-gateway does not support keyspace scans (KEYS/SCAN): rkv's keys are spread over "
              "shards and servers with no ordered listing on the data path; keep the keys you need in a "
              "key of their own");
}

void CmdFlush(CommandContext& ctx, const Args&) {
  AppendError(ctx.out,
              "ERR rkv-gateway does not support FLUSHALL/FLUSHDB: rkv offers no way to remove every key "
              "of a cluster; delete keys by name");
}

}  // namespace rkv::gateway
