// The commands RESP sessions execute: the table (name, arity, flags, keys:
// what COMMAND reports and what the session checks before it runs one) and
// the data commands' handlers, grouped by file: plain reads and writes
// (resp_string_commands.cc), read-modify-writes as compare-and-set loops
// (resp_rmw_commands.cc), expiry (resp_expiry_commands.cc). Connection
// commands (AUTH, HELLO, CLIENT, ...) need the session's state and are
// executed by the session itself (handler null).
//
// A handler appends exactly one reply to ctx.out, an error included.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "gateway/compare_and_set.h"
#include "gateway/resp_session.h"
#include "rkv/client.h"
#include "rkv/status.h"

namespace rkv::gateway {

struct CommandContext {
  rkv::Client* client = nullptr;
  const RespOptions* options = nullptr;
  std::string* out = nullptr;
};

using Args = std::vector<std::string>;
using CommandHandler = void (*)(CommandContext& ctx, const Args& args);

struct CommandSpec {
  std::string_view name;  // lower case, as Redis reports it
  // Redis's arity: N exactly N arguments (the name included), -N at least N.
  int arity = 0;
  std::string_view flags;  // space-separated, as COMMAND lists them
  int first_key = 0;
  int last_key = 0;
  int key_step = 0;
  CommandHandler handler = nullptr;  // null: a connection command
};

// The spec of `lower_name` (lower case), or null.
const CommandSpec* FindCommand(std::string_view lower_name);
// Every command served, in the table's order.
std::span<const CommandSpec> AllCommands();
// Appends COMMAND's reply entry for one command.
void AppendCommandInfo(std::string* out, const CommandSpec& spec);

// ---- Helpers the handlers share (resp_command_util.cc).

// True when `arg` is `lower` (lower case) in any case.
inline bool EqualsIgnoreCase(std::string_view arg, std::string_view lower) {
  if (arg.size() != lower.size()) return false;
  for (size_t i = 0; i < arg.size(); ++i) {
    char c = arg[i] >= 'A' && arg[i] <= 'Z' ? static_cast<char>(arg[i] - 'A' + 'a') : arg[i];
    if (c != lower[i]) return false;
  }
  return true;
}

// Appends the error of an rkv call that failed ("ERR rkv CODE: message";
// RESOURCE_EXHAUSTED as "OOM rkv ...") and counts it.
void ReplyRkvError(CommandContext& ctx, const rkv::Status& status);
// True when `key` is a key rkv stores (1..max_key_bytes bytes); otherwise
// appends the error and returns false.
bool CheckKey(CommandContext& ctx, std::string_view key);
// True when `value` fits rkv (<= max_value_bytes); otherwise appends the
// error and returns false.
bool CheckValue(CommandContext& ctx, std::string_view value);
// Appends Redis's error for an argument that should be an integer.
void ReplyNotInteger(std::string* out);
void ReplySyntaxError(std::string* out);
// Most attempts of one read-modify-write before it gives up with
// ABORTED (a key written without pause by others).
inline constexpr int kMaxRmwAttempts = 10000;

// A compare-and-set loop on `key` (CompareAndSet, compare_and_set.h) of at
// most kMaxRmwAttempts attempts: step(state, &next_value, &next_expiry)
// sees the key as read and decides. The step appends no reply: it leaves
// what to reply in what it captured, for the caller once the loop is over.
// Returns OK once the step returned kDone or its write applied; otherwise
// the rkv error (ABORTED when the key kept changing), which the caller
// replies.
template <typename Step>
rkv::Status ReadModifyWrite(CommandContext& ctx, std::string_view key, Step&& step) {
  return CompareAndSet(*ctx.client, key, kMaxRmwAttempts, std::forward<Step>(step)).status;
}

// ---- Handlers (one per command; the table names them).
void CmdGet(CommandContext& ctx, const Args& args);
void CmdSet(CommandContext& ctx, const Args& args);
void CmdGetSet(CommandContext& ctx, const Args& args);
void CmdSetNx(CommandContext& ctx, const Args& args);
void CmdMGet(CommandContext& ctx, const Args& args);
void CmdMSet(CommandContext& ctx, const Args& args);
void CmdMSetNx(CommandContext& ctx, const Args& args);
void CmdDel(CommandContext& ctx, const Args& args);
void CmdExists(CommandContext& ctx, const Args& args);
void CmdStrlen(CommandContext& ctx, const Args& args);
void CmdGetRange(CommandContext& ctx, const Args& args);

void CmdIncr(CommandContext& ctx, const Args& args);
void CmdDecr(CommandContext& ctx, const Args& args);
void CmdIncrBy(CommandContext& ctx, const Args& args);
void CmdDecrBy(CommandContext& ctx, const Args& args);
void CmdIncrByFloat(CommandContext& ctx, const Args& args);
void CmdAppend(CommandContext& ctx, const Args& args);
void CmdSetRange(CommandContext& ctx, const Args& args);

void CmdSetEx(CommandContext& ctx, const Args& args);
void CmdPSetEx(CommandContext& ctx, const Args& args);
void CmdExpire(CommandContext& ctx, const Args& args);
void CmdPExpire(CommandContext& ctx, const Args& args);
void CmdExpireAt(CommandContext& ctx, const Args& args);
void CmdPExpireAt(CommandContext& ctx, const Args& args);
void CmdTtl(CommandContext& ctx, const Args& args);
void CmdPTtl(CommandContext& ctx, const Args& args);
void CmdPersist(CommandContext& ctx, const Args& args);

void CmdKeys(CommandContext& ctx, const Args& args);
void CmdFlush(CommandContext& ctx, const Args& args);

// ---- SET's options, shared by SET, SETEX and the batch path.

// An absolute expiry for "seconds or milliseconds from now / at": the
// Unix time in ms, or nullopt (the caller replies Redis's "invalid expire
// time in 'CMD' command").
std::optional<int64_t> ExpiryFromNow(int64_t amount, bool milliseconds, bool absolute, int64_t now_ms);

}  // namespace rkv::gateway
