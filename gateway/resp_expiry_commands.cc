// Expiry: SETEX, PSETEX, EXPIRE, PEXPIRE, EXPIREAT, PEXPIREAT (with Redis
// 7's NX, XX, GT, LT), TTL, PTTL, PERSIST. rkv keeps a key's expiry as an
// absolute Unix time in milliseconds with its record (PutOptions,
// VersionedValue::expires_at_unix_ms); changing it is a compare-and-set
// of the key's value with the new expiry, so a concurrent write is never
// undone.
#include <string>

#include "gateway/resp_commands.h"
#include "gateway/resp_parser.h"
#include "gateway/resp_reply.h"

namespace rkv::gateway {
namespace {

void SetWithExpiry(CommandContext& ctx, const Args& args, bool milliseconds, std::string_view command) {
  auto amount = ParseRedisInteger(args[2]);
  if (!amount) return ReplyNotInteger(ctx.out);
  std::optional<int64_t> at;
  if (*amount > 0) at = ExpiryFromNow(*amount, milliseconds, false, rkv::Client::NowUnixMs());
  if (!at) return AppendError(ctx.out, "ERR invalid expire time in '" + std::string(command) + "' command");
  if (!CheckKey(ctx, args[1]) || !CheckValue(ctx, args[3])) return;
  rkv::PutOptions put;
  put.expires_at_unix_ms = *at;
  auto written = ctx.client->Put(args[1], args[3], put);
  if (!written.ok()) return ReplyRkvError(ctx, written.status());
  AppendOk(ctx.out);
}

// EXPIRE and its three siblings (Redis's expireGenericCommand).
void ExpireGeneric(CommandContext& ctx, const Args& args, bool milliseconds, bool absolute,
                   std::string_view command) {
  bool nx = false, xx = false, gt = false, lt = false;
  for (size_t j = 3; j < args.size(); ++j) {
    if (EqualsIgnoreCase(args[j], "nx")) {
      nx = true;
    } else if (EqualsIgnoreCase(args[j], "xx")) {
      xx = true;
    } else if (EqualsIgnoreCase(args[j], "gt")) {
      gt = true;
    } else if (EqualsIgnoreCase(args[j], "lt")) {
      lt = true;
    } else {
      return AppendError(ctx.out, "ERR Unsupported option " + args[j]);
    }
  }
  if (nx && (xx || gt || lt)) {
    return AppendError(ctx.out, "ERR NX and XX, GT or LT options at the same time are not compatible");
  }
  if (gt && lt) return AppendError(ctx.out, "ERR GT and LT options at the same time are not compatible");
  auto amount = ParseRedisInteger(args[2]);
  if (!amount) return ReplyNotInteger(ctx.out);
  const int64_t now = rkv::Client::NowUnixMs();
  auto at = ExpiryFromNow(*amount, milliseconds, absolute, now);
  if (!at) return AppendError(ctx.out, "ERR invalid expire time in '" + std::string(command) + "' command");
  if (!CheckKey(ctx, args[1])) return;
  bool applied = false;
  rkv::Status status = ReadModifyWrite(ctx, args[1], [&](const KeyState& state, std::string* next, int64_t* expiry) {
    applied = false;
    if (!state.found) return RmwAction::kDone;
    const int64_t current = state.current.expires_at_unix_ms;
    const bool persistent = current == rkv::kNoExpiry;
    // A key without expiry counts as expiring never: GT never holds for
    // it, LT always does (Redis 7's rule).
    if ((nx && !persistent) || (xx && persistent) || (gt && (persistent || *at <= current)) ||
        (lt && !persistent && *at >= current)) {
      return RmwAction::kDone;
    }
    applied = true;
    if (*at <= now) return RmwAction::kDelete;
    *next = state.current.value;
    *expiry = *at;
    return RmwAction::kWrite;
  });
  if (!status.ok()) return ReplyRkvError(ctx, status);
  AppendInteger(ctx.out, applied ? 1 : 0);
}

void TimeToLive(CommandContext& ctx, const Args& args, bool milliseconds) {
  if (!CheckKey(ctx, args[1])) return;
  auto read = ctx.client->GetVersioned(args[1]);
  if (!read.ok()) {
    if (read.status().code() == rkv::StatusCode::kNotFound) return AppendInteger(ctx.out, -2);
    return ReplyRkvError(ctx, read.status());
  }
  if (read->expires_at_unix_ms == rkv::kNoExpiry) return AppendInteger(ctx.out, -1);
  int64_t left = read->expires_at_unix_ms - rkv::Client::NowUnixMs();
  if (left < 0) left = 0;
  AppendInteger(ctx.out, milliseconds ? left : (left + 500) / 1000);
}

}  // namespace

void CmdSetEx(CommandContext& ctx, const Args& args) { SetWithExpiry(ctx, args, false, "setex"); }
void CmdPSetEx(CommandContext& ctx, const Args& args) { SetWithExpiry(ctx, args, true, "psetex"); }
void CmdExpire(CommandContext& ctx, const Args& args) { ExpireGeneric(ctx, args, false, false, "expire"); }
void CmdPExpire(CommandContext& ctx, const Args& args) { ExpireGeneric(ctx, args, true, false, "pexpire"); }
void CmdExpireAt(CommandContext& ctx, const Args& args) { ExpireGeneric(ctx, args, false, true, "expireat"); }
void CmdPExpireAt(CommandContext& ctx, const Args& args) { ExpireGeneric(ctx, args, true, true, "pexpireat"); }
void CmdTtl(CommandContext& ctx, const Args& args) { TimeToLive(ctx, args, false); }
void CmdPTtl(CommandContext& ctx, const Args& args) { TimeToLive(ctx, args, true); }

void CmdPersist(CommandContext& ctx, const Args& args) {
  if (!CheckKey(ctx, args[1])) return;
  bool removed = false;
  rkv::Status status = ReadModifyWrite(ctx, args[1], [&](const KeyState& state, std::string* next, int64_t* expiry) {
    removed = false;
    if (!state.found || state.current.expires_at_unix_ms == rkv::kNoExpiry) return RmwAction::kDone;
    removed = true;
    *next = state.current.value;
    *expiry = rkv::kNoExpiry;
    return RmwAction::kWrite;
  });
  if (!status.ok()) return ReplyRkvError(ctx, status);
  AppendInteger(ctx.out, removed ? 1 : 0);
}

}  // namespace rkv::gateway
