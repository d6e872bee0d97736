// Reads and writes of whole values: GET, SET and its options, GETSET,
// SETNX, MGET, MSET, MSETNX, DEL/UNLINK, EXISTS, STRLEN, GETRANGE.
#include <algorithm>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "gateway/resp_commands.h"
#include "gateway/resp_parser.h"
#include "gateway/resp_reply.h"

namespace rkv::gateway {
namespace {

// SET's options as Redis 7 parses them (parseExtendedStringArgumentsOrReply).
struct SetOptions {
  bool nx = false;
  bool xx = false;
  bool get = false;
  bool keepttl = false;
  enum class Unit : uint8_t { kNone, kEx, kPx, kExAt, kPxAt } unit = Unit::kNone;
  int64_t amount = 0;
};

// Parses argv[first..]; on an error appends it and returns false.
bool ParseSetOptions(const Args& args, size_t first, SetOptions* o, std::string* out) {
  using Unit = SetOptions::Unit;
  std::string_view amount_text;
  for (size_t j = first; j < args.size(); ++j) {
    std::string_view opt = args[j];
    bool has_next = j + 1 < args.size();
    if (EqualsIgnoreCase(opt, "nx") && !o->xx) {
      o->nx = true;
    } else if (EqualsIgnoreCase(opt, "xx") && !o->nx) {
      o->xx = true;
    } else if (EqualsIgnoreCase(opt, "get")) {
      o->get = true;
    } else if (EqualsIgnoreCase(opt, "keepttl") && o->unit == Unit::kNone) {
      o->keepttl = true;
    } else if (!o->keepttl && has_next &&
               ((EqualsIgnoreCase(opt, "ex") && (o->unit == Unit::kNone || o->unit == Unit::kEx)) ||
                (EqualsIgnoreCase(opt, "px") && (o->unit == Unit::kNone || o->unit == Unit::kPx)) ||
                (EqualsIgnoreCase(opt, "exat") && (o->unit == Unit::kNone || o->unit == Unit::kExAt)) ||
                (EqualsIgnoreCase(opt, "pxat") && (o->unit == Unit::kNone || o->unit == Unit::kPxAt)))) {
      o->unit = EqualsIgnoreCase(opt, "ex")     ? Unit::kEx
                : EqualsIgnoreCase(opt, "px")   ? Unit::kPx
                : EqualsIgnoreCase(opt, "exat") ? Unit::kExAt
                                                : Unit::kPxAt;
      amount_text = args[++j];
    } else {
      ReplySyntaxError(out);
      return false;
    }
  }
  if (o->unit != Unit::kNone) {
    auto amount = ParseRedisInteger(amount_text);
    if (!amount) {
      ReplyNotInteger(out);
      return false;
    }
    o->amount = *amount;
  }
  return true;
}

// The absolute expiry SET's options ask for: kNoExpiry without one;
// nullopt after appending Redis's error for a bad one.
std::optional<int64_t> SetExpiry(const SetOptions& o, std::string_view command, std::string* out) {
  using Unit = SetOptions::Unit;
  if (o.unit == Unit::kNone) return rkv::kNoExpiry;
  bool ms = o.unit == Unit::kPx || o.unit == Unit::kPxAt;
  bool absolute = o.unit == Unit::kExAt || o.unit == Unit::kPxAt;
  std::optional<int64_t> at;
  if (o.amount > 0) at = ExpiryFromNow(o.amount, ms, absolute, rkv::Client::NowUnixMs());
  if (!at || *at <= 0) {
    AppendError(out, "ERR invalid expire time in '" + std::string(command) + "' command");
    return std::nullopt;
  }
  return *at;
}

// SET with parsed options (SET, GETSET).
void ExecuteSet(CommandContext& ctx, const std::string& key, const std::string& value, const SetOptions& o,
                int64_t expiry) {
  if (!o.nx && !o.xx && !o.get && !o.keepttl) {
    rkv::PutOptions put;
    put.expires_at_unix_ms = expiry;
    auto written = ctx.client->Put(key, value, put);
    if (!written.ok()) return ReplyRkvError(ctx, written.status());
    return AppendOk(ctx.out);
  }
  if (o.nx && !o.get && !o.keepttl) {
    rkv::PutOptions put;
    put.condition = rkv::PutCondition::Absent();
    put.expires_at_unix_ms = expiry;
    auto written = ctx.client->Put(key, value, put);
    if (ConditionFailed(written.status())) return AppendNull(ctx.out);
    if (!written.ok()) return ReplyRkvError(ctx, written.status());
    return AppendOk(ctx.out);
  }
  // The rest reads the key first: a compare-and-set loop.
  std::string reply;
  rkv::Status status = ReadModifyWrite(
      ctx, key, [&](const KeyState& state, std::string* next, int64_t* next_expiry) {
        reply.clear();
        if (o.get) {
          if (state.found) {
            AppendBulk(&reply, state.current.value);
          } else {
            AppendNull(&reply);
          }
        }
        if ((o.nx && state.found) || (o.xx && !state.found)) {
          if (!o.get) AppendNull(&reply);
          return RmwAction::kDone;
        }
        if (!o.get) AppendOk(&reply);
        *next = value;
        if (!o.keepttl) *next_expiry = expiry;
        return RmwAction::kWrite;
      });
  if (!status.ok()) return ReplyRkvError(ctx, status);
  ctx.out->append(reply);
}

}  // namespace

void CmdGet(CommandContext& ctx, const Args& args) {
  if (!CheckKey(ctx, args[1])) return;
  auto value = ctx.client->Get(args[1]);
  if (value.ok()) return AppendBulk(ctx.out, *value);
  if (value.status().code() == rkv::StatusCode::kNotFound) return AppendNull(ctx.out);
  ReplyRkvError(ctx, value.status());
}

void CmdSet(CommandContext& ctx, const Args& args) {
  SetOptions o;
  if (!ParseSetOptions(args, 3, &o, ctx.out)) return;
  auto expiry = SetExpiry(o, "set", ctx.out);
  if (!expiry) return;
  if (!CheckKey(ctx, args[1]) || !CheckValue(ctx, args[2])) return;
  ExecuteSet(ctx, args[1], args[2], o, *expiry);
}

void CmdGetSet(CommandContext& ctx, const Args& args) {
  if (!CheckKey(ctx, args[1]) || !CheckValue(ctx, args[2])) return;
  SetOptions o;
  o.get = true;
  ExecuteSet(ctx, args[1], args[2], o, rkv::kNoExpiry);
}

void CmdSetNx(CommandContext& ctx, const Args& args) {
  if (!CheckKey(ctx, args[1]) || !CheckValue(ctx, args[2])) return;
  auto written = ctx.client->Put(args[1], args[2], rkv::PutCondition::Absent());
  if (ConditionFailed(written.status())) return AppendInteger(ctx.out, 0);
  if (!written.ok()) return ReplyRkvError(ctx, written.status());
  AppendInteger(ctx.out, 1);
}

void CmdMGet(CommandContext& ctx, const Args& args) {
  // The arguments themselves, not copies.
  const std::span<const std::string> keys(args.data() + 1, args.size() - 1);
  for (const std::string& key : keys) {
    if (!CheckKey(ctx, key)) return;
  }
  auto values = ctx.client->MultiGet(keys);
  for (const auto& value : values) {
    if (!value.ok() && value.status().code() != rkv::StatusCode::kNotFound) {
      return ReplyRkvError(ctx, value.status());
    }
  }
  AppendArrayHeader(ctx.out, values.size());
  for (const auto& value : values) {
    if (value.ok()) {
      AppendBulk(ctx.out, *value);
    } else {
      AppendNull(ctx.out);
    }
  }
}

void CmdMSet(CommandContext& ctx, const Args& args) {
  if (args.size() % 2 != 1) {
    return AppendError(ctx.out, "ERR wrong number of arguments for 'mset' command");
  }
  std::vector<rkv::KeyValueView> items;
  items.reserve(args.size() / 2);
  for (size_t i = 1; i + 1 < args.size(); i += 2) {
    if (!CheckKey(ctx, args[i]) || !CheckValue(ctx, args[i + 1])) return;
    items.push_back({args[i], args[i + 1]});
  }
  auto results = ctx.client->MultiPut(items);
  for (const auto& result : results) {
    if (!result.ok()) return ReplyRkvError(ctx, result.status());
  }
  AppendOk(ctx.out);
}

void CmdMSetNx(CommandContext& ctx, const Args& args) {
  if (args.size() % 2 != 1) return AppendError(ctx.out, "ERR wrong number of arguments for 'msetnx' command");
  std::vector<std::string_view> keys;
  std::vector<rkv::KeyValueView> items;
  for (size_t i = 1; i + 1 < args.size(); i += 2) {
    if (!CheckKey(ctx, args[i]) || !CheckValue(ctx, args[i + 1])) return;
    keys.push_back(args[i]);
    rkv::KeyValueView item;
    item.key = args[i];
    item.value = args[i + 1];
    item.condition = rkv::PutCondition::Absent();
    items.push_back(item);
  }
  // Redis sets all keys or none. rkv has no multi-key transaction: every
  // key is first checked absent, then written only if still absent; should
  // another client create one of them in between, the keys this call
  // wrote are removed again (each only at the version it wrote) and the
  // reply is 0.
  auto present = ctx.client->MultiGet(keys);
  for (const auto& value : present) {
    if (value.ok()) return AppendInteger(ctx.out, 0);
    if (value.status().code() != rkv::StatusCode::kNotFound) return ReplyRkvError(ctx, value.status());
  }
  // A key named twice: the second item finds it written by the first.
  std::vector<std::string_view> sorted = keys;
  std::sort(sorted.begin(), sorted.end());
  if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end()) {
    // Redis writes the last value of a repeated key; so does this, by
    // writing each key once with its last value.
    std::vector<rkv::KeyValueView> last;
    for (size_t i = 0; i < items.size(); ++i) {
      bool later = false;
      for (size_t j = i + 1; j < items.size(); ++j) later = later || items[j].key == items[i].key;
      if (!later) last.push_back(items[i]);
    }
    items = std::move(last);
  }
  auto results = ctx.client->MultiPut(items);
  bool all = true;
  rkv::Status failure;
  for (const auto& result : results) {
    if (result.ok()) continue;
    all = false;
    if (!ConditionFailed(result.status()) && failure.ok()) failure = result.status();
  }
  if (all) return AppendInteger(ctx.out, 1);
  for (size_t i = 0; i < items.size(); ++i) {
    if (results[i].ok()) ctx.client->DeleteIfVersion(items[i].key, *results[i]).IgnoreError();
  }
  if (!failure.ok()) return ReplyRkvError(ctx, failure);
  AppendInteger(ctx.out, 0);
}

void CmdDel(CommandContext& ctx, const Args& args) {
  const std::span<const std::string> keys(args.data() + 1, args.size() - 1);
  for (const std::string& key : keys) {
    if (!CheckKey(ctx, key)) return;
  }
  auto results = ctx.client->MultiDelete(keys);
  int64_t removed = 0;
  for (const auto& status : results) {
    if (status.ok()) {
      ++removed;
    } else if (status.code() != rkv::StatusCode::kNotFound) {
      return ReplyRkvError(ctx, status);
    }
  }
  AppendInteger(ctx.out, removed);
}

void CmdExists(CommandContext& ctx, const Args& args) {
  const std::span<const std::string> keys(args.data() + 1, args.size() - 1);
  for (const std::string& key : keys) {
    if (!CheckKey(ctx, key)) return;
  }
  auto values = ctx.client->MultiGet(keys);
  int64_t found = 0;
  for (const auto& value : values) {
    if (value.ok()) {
      ++found;
    } else if (value.status().code() != rkv::StatusCode::kNotFound) {
      return ReplyRkvError(ctx, value.status());
    }
  }
  AppendInteger(ctx.out, found);
}

void CmdStrlen(CommandContext& ctx, const Args& args) {
  if (!CheckKey(ctx, args[1])) return;
  auto value = ctx.client->Get(args[1]);
  if (value.ok()) return AppendInteger(ctx.out, static_cast<int64_t>(value->size()));
  if (value.status().code() == rkv::StatusCode::kNotFound) return AppendInteger(ctx.out, 0);
  ReplyRkvError(ctx, value.status());
}

void CmdGetRange(CommandContext& ctx, const Args& args) {
  auto start = ParseRedisInteger(args[2]);
  auto end = ParseRedisInteger(args[3]);
  if (!start || !end) return ReplyNotInteger(ctx.out);
  if (!CheckKey(ctx, args[1])) return;
  auto value = ctx.client->Get(args[1]);
  if (!value.ok()) {
    if (value.status().code() == rkv::StatusCode::kNotFound) return AppendBulk(ctx.out, "");
    return ReplyRkvError(ctx, value.status());
  }
  // Redis's getrangeCommand, index for index.
  int64_t s = *start;
  int64_t e = *end;
  if (s < 0 && e < 0 && s > e) return AppendBulk(ctx.out, "");
  int64_t len = static_cast<int64_t>(value->size());
  if (s < 0) s = len + s;
  if (e < 0) e = len + e;
  if (s < 0) s = 0;
  if (e < 0) e = 0;
  if (e >= len) e = len - 1;
  if (s > e || len == 0) return AppendBulk(ctx.out, "");
  AppendBulk(ctx.out, std::string_view(*value).substr(static_cast<size_t>(s), static_cast<size_t>(e - s + 1)));
}

}  // namespace rkv::gateway
