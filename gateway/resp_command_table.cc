// The table of the commands RESP sessions serve, and COMMAND's entries.
#include <string>

#include "gateway/resp_commands.h"
#include "gateway/resp_reply.h"

namespace rkv::gateway {
namespace {

// Redis 7's arities, flags and key positions for the same commands.
const CommandSpec kCommands[] = {
    {"get", 2, "readonly fast", 1, 1, 1, CmdGet},
    {"set", -3, "write denyoom", 1, 1, 1, CmdSet},
    {"getset", 3, "write denyoom fast", 1, 1, 1, CmdGetSet},
    {"setnx", 3, "write denyoom fast", 1, 1, 1, CmdSetNx},
    {"setex", 4, "write denyoom", 1, 1, 1, CmdSetEx},
    {"psetex", 4, "write denyoom", 1, 1, 1, CmdPSetEx},
    {"mget", -2, "readonly fast", 1, -1, 1, CmdMGet},
    {"mset", -3, "write denyoom", 1, -1, 2, CmdMSet},
    {"msetnx", -3, "write denyoom", 1, -1, 2, CmdMSetNx},
    {"del", -2, "write", 1, -1, 1, CmdDel},
    {"unlink", -2, "write fast", 1, -1, 1, CmdDel},
    {"exists", -2, "readonly fast", 1, -1, 1, CmdExists},
    {"incr", 2, "write denyoom fast", 1, 1, 1, CmdIncr},
    {"decr", 2, "write denyoom fast", 1, 1, 1, CmdDecr},
    {"incrby", 3, "write denyoom fast", 1, 1, 1, CmdIncrBy},
    {"decrby", 3, "write denyoom fast", 1, 1, 1, CmdDecrBy},
    {"incrbyfloat", 3, "write denyoom fast", 1, 1, 1, CmdIncrByFloat},
    {"append", 3, "write denyoom fast", 1, 1, 1, CmdAppend},
    {"strlen", 2, "readonly fast", 1, 1, 1, CmdStrlen},
    {"getrange", 4, "readonly", 1, 1, 1, CmdGetRange},
    {"substr", 4, "readonly", 1, 1, 1, CmdGetRange},
    {"setrange", 4, "write denyoom", 1, 1, 1, CmdSetRange},
    {"expire", -3, "write fast", 1, 1, 1, CmdExpire},
    {"pexpire", -3, "write fast", 1, 1, 1, CmdPExpire},
    {"expireat", -3, "write fast", 1, 1, 1, CmdExpireAt},
    {"pexpireat", -3, "write fast", 1, 1, 1, CmdPExpireAt},
    {"ttl", 2, "readonly fast", 1, 1, 1, CmdTtl},
    {"pttl", 2, "readonly fast", 1, 1, 1, CmdPTtl},
    {"persist", 2, "write fast", 1, 1, 1, CmdPersist},
    {"keys", 2, "readonly", 0, 0, 0, CmdKeys},
    {"scan", -2, "readonly", 0, 0, 0, CmdKeys},
    {"flushall", -1, "write", 0, 0, 0, CmdFlush},
    {"flushdb", -1, "write", 0, 0, 0, CmdFlush},
    // Connection and server commands: the session executes them.
    {"ping", -1, "fast", 0, 0, 0, nullptr},
    {"echo", 2, "fast", 0, 0, 0, nullptr},
    {"auth", -2, "noscript loading stale fast no_auth", 0, 0, 0, nullptr},
    {"hello", -1, "noscript loading stale fast no_auth", 0, 0, 0, nullptr},
    {"select", 2, "loading stale fast", 0, 0, 0, nullptr},
    {"quit", -1, "noscript loading stale fast no_auth", 0, 0, 0, nullptr},
    {"client", -2, "noscript loading stale", 0, 0, 0, nullptr},
    {"command", -1, "loading stale", 0, 0, 0, nullptr},
    {"info", -1, "loading stale", 0, 0, 0, nullptr},
    {"dbsize", 1, "readonly fast", 0, 0, 0, nullptr},
    {"time", 1, "loading stale fast", 0, 0, 0, nullptr},
};

}  // namespace

const CommandSpec* FindCommand(std::string_view lower_name) {
  for (const CommandSpec& spec : kCommands) {
    if (spec.name == lower_name) return &spec;
  }
  return nullptr;
}

std::span<const CommandSpec> AllCommands() { return kCommands; }

void AppendCommandInfo(std::string* out, const CommandSpec& spec) {
  // Redis 7's shape: name, arity, flags, first key, last key, step, ACL
  // categories, tips, key specs, subcommands (the last four empty).
  AppendArrayHeader(out, 10);
  AppendBulk(out, spec.name);
  AppendInteger(out, spec.arity);
  std::vector<std::string_view> flags;
  std::string_view rest = spec.flags;
  while (!rest.empty()) {
    size_t space = rest.find(' ');
    flags.push_back(rest.substr(0, space));
    rest = space == std::string_view::npos ? std::string_view() : rest.substr(space + 1);
  }
  AppendArrayHeader(out, flags.size());
  for (std::string_view flag : flags) AppendSimple(out, flag);
  AppendInteger(out, spec.first_key);
  AppendInteger(out, spec.last_key);
  AppendInteger(out, spec.key_step);
  for (int i = 0; i < 4; ++i) AppendArrayHeader(out, 0);
}

}  // namespace rkv::gateway
