// RespSession: the request loop of one RESP connection (parse, check,
// batch, execute, reply) and the commands that need the connection's
// state (AUTH, HELLO, SELECT, CLIENT, QUIT) or the gateway's (INFO,
// DBSIZE, COMMAND).
#include "gateway/resp_session.h"

#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "gateway/resp_commands.h"
#include "gateway/resp_parser.h"
#include "gateway/resp_reply.h"
#include "gateway/rkv_round.h"
#include "rkv/admin.h"
#include "rkv/client.h"

namespace rkv::gateway {
namespace {

// What HELLO and INFO report as the Redis version: the command set and
// replies follow Redis 7.0's for the commands served.
constexpr std::string_view kRedisVersion = "7.0.0";

std::string Lower(std::string_view s) {
  std::string lower(s);
  for (char& c : lower) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return lower;
}

// Constant-time comparison of a password with a secret.
bool SecretEqual(std::string_view given, std::string_view secret) {
  unsigned char diff = given.size() == secret.size() ? 0 : 1;
  for (size_t i = 0; i < given.size(); ++i) {
    diff |= static_cast<unsigned char>(given[i] ^ (secret.empty() ? 0 : secret[i % secret.size()]));
  }
  return diff == 0;
}

RespLimits ParserLimits(const RespOptions& options) {
  RespLimits limits;
  limits.max_request_bytes = options.max_request_bytes;
  // A bulk larger than any value rkv stores, by a margin that lets a
  // slightly-too-large value be answered with a clean error rather than a
  // protocol error.
  int64_t largest = static_cast<int64_t>(std::max(options.limits.max_value_bytes, options.limits.max_key_bytes));
  limits.max_bulk_bytes = std::min<int64_t>(static_cast<int64_t>(options.max_request_bytes), largest + (int64_t{1} << 20));
  return limits;
}

class RespSession final : public Session {
 public:
  RespSession(rkv::Client* client, RkvRound* round, const RespOptions& options)
      : client_(client),
        round_(round),
        options_(options),
        parser_(ParserLimits(options)),
        auth_required_(!options.requirepass.empty() || !options.token.empty()),
        authenticated_(!auth_required_),
        id_(options.shared->next_client_id.fetch_add(1, std::memory_order_relaxed)) {
    options_.shared->connected_clients.fetch_add(1, std::memory_order_relaxed);
    options_.shared->total_connections.fetch_add(1, std::memory_order_relaxed);
    if (options_.max_batch == 0) options_.max_batch = 1;
  }
  ~RespSession() override { options_.shared->connected_clients.fetch_sub(1, std::memory_order_relaxed); }

  ServeResult Serve(std::string_view in, std::string* out, size_t out_limit) override;

 private:
  enum class BatchKind : uint8_t { kNone, kGet, kSet };

  // A GET or plain SET that can join a batch (checked, not yet run).
  BatchKind Batchable(const Args& args) const;
  void FlushBatch(std::string* out);
  // With a round: queues the batch in it and waits (true); false without
  // a round, with an empty batch, or when the round is full (the caller
  // runs the batch itself).
  bool Defer();
  // Appends the replies of the deferred batch once the round ran it
  // (true); false while it has not run.
  bool CollectRound(std::string* out);
  void Execute(Args& args, std::string* out);
  void ExecuteConnectionCommand(const std::string& name, const Args& args, std::string* out);

  void Auth(const Args& args, std::string* out);
  void Hello(const Args& args, std::string* out);
  void ClientCommand(const Args& args, std::string* out);
  void CommandCommand(const Args& args, std::string* out);
  void Info(const Args& args, std::string* out);
  void DbSize(std::string* out);
  // The approximate key count (cluster mode), or a sentence saying why
  // there is none.
  bool ApproximateKeys(uint64_t* keys, std::string* why) const;
  bool PasswordMatches(std::string_view user, std::string_view password) const;

  rkv::Client* client_;
  RkvRound* const round_;  // null: batches run in Serve
  RespOptions options_;
  RespParser parser_;
  const bool auth_required_;
  bool authenticated_;
  bool close_ = false;
  const uint64_t id_;
  std::string name_;
  // The input must hold this many bytes before a parse can succeed (the
  // parser's hint for the request at the front).
  size_t needed_ = 0;
  BatchKind batch_kind_ = BatchKind::kNone;
  std::vector<Args> batch_;
  // The batch deferred to round_, while waiting_.
  struct Ticket {
    uint64_t generation = 0;
    bool get = false;
    size_t first = 0;
    size_t count = 0;
  };
  bool waiting_ = false;
  Ticket ticket_;
};

ServeResult RespSession::Serve(std::string_view in, std::string* out, size_t out_limit) {
  ServeResult result;
  if (waiting_ && !CollectRound(out)) {
    result.deferred = true;
    return result;
  }
  if (in.size() < needed_) return result;
  needed_ = 0;
  while (result.consumed < in.size() && !close_) {
    if (out->size() >= out_limit) break;
    RespParse parse = parser_.Parse(in.substr(result.consumed), authenticated_);
    if (parse.kind == RespParse::Kind::kIncomplete) {
      needed_ = parse.needed;
      break;
    }
    if (parse.kind == RespParse::Kind::kError) {
      // The batch's replies come first; with a round, the error is parsed
      // again (and answered) once they are in.
      if (Defer()) {
        result.deferred = true;
        return result;
      }
      FlushBatch(out);
      AppendError(out, parse.error);
      close_ = true;
      result.consumed = in.size();
      break;
    }
    if (parse.kind == RespParse::Kind::kSkip) {
      result.consumed += parse.consumed;
      continue;
    }
    BatchKind kind = Batchable(parse.args);
    if (!batch_.empty() && (kind == BatchKind::kNone || kind != batch_kind_ || batch_.size() >= options_.max_batch)) {
      // This request waits for the batch before it: with a round, until
      // the next Serve (it is parsed again then), otherwise until the
      // batch ran here.
      if (Defer()) {
        result.deferred = true;
        return result;
      }
      FlushBatch(out);
    }
    result.consumed += parse.consumed;
    if (kind != BatchKind::kNone) {
      batch_kind_ = kind;
      batch_.push_back(std::move(parse.args));
      continue;
    }
    Execute(parse.args, out);
  }
  if (Defer()) {
    result.deferred = true;
    return result;
  }
  FlushBatch(out);
  result.close = close_;
  return result;
}

bool RespSession::Defer() {
  if (round_ == nullptr || batch_.empty()) return false;
  const bool get = batch_kind_ == BatchKind::kGet;
  if (get) {
    if (!round_->HasGetRoom(batch_.size())) return false;
  } else {
    size_t value_bytes = 0;
    for (const Args& args : batch_) value_bytes += args[2].size();
    if (!round_->HasPutRoom(batch_.size(), value_bytes)) return false;
  }
  options_.shared->total_commands.fetch_add(batch_.size(), std::memory_order_relaxed);
  ticket_.generation = round_->generation();
  ticket_.get = get;
  ticket_.count = batch_.size();
  for (size_t i = 0; i < batch_.size(); ++i) {
    Args& args = batch_[i];
    size_t position = get ? round_->AddGet(std::move(args[1])) : round_->AddPut(std::move(args[1]), std::move(args[2]));
    if (i == 0) ticket_.first = position;
  }
  batch_.clear();
  batch_kind_ = BatchKind::kNone;
  waiting_ = true;
  return true;
}

bool RespSession::CollectRound(std::string* out) {
  CommandContext ctx{client_, &options_, out};
  if (!round_->executed(ticket_.generation)) {
    if (round_->generation() == ticket_.generation) return false;  // not run yet
    // The loop resumes every deferred session after each Execute, so
    // this is not reached; should it be, the client hears of it.
    for (size_t i = 0; i < ticket_.count; ++i) {
      ReplyRkvError(ctx, rkv::Status(rkv::StatusCode::kInternal, "rkv-gateway lost the batch of this request"));
    }
  } else if (ticket_.get) {
    for (size_t i = ticket_.first; i < ticket_.first + ticket_.count; ++i) {
      const auto& value = round_->get_result(i);
      if (value.ok()) {
        AppendBulk(out, *value);
      } else if (value.status().code() == rkv::StatusCode::kNotFound) {
        AppendNull(out);
      } else {
        ReplyRkvError(ctx, value.status());
      }
    }
  } else {
    for (size_t i = ticket_.first; i < ticket_.first + ticket_.count; ++i) {
      const auto& written = round_->put_result(i);
      if (written.ok()) {
        AppendOk(out);
      } else {
        ReplyRkvError(ctx, written.status());
      }
    }
  }
  waiting_ = false;
  return true;
}

RespSession::BatchKind RespSession::Batchable(const Args& args) const {
  if (!authenticated_) return BatchKind::kNone;
  if (args.size() != 2 && args.size() != 3) return BatchKind::kNone;
  if (args[0].size() != 3) return BatchKind::kNone;
  const std::string& key = args[1];
  if (key.empty() || key.size() > options_.limits.max_key_bytes) return BatchKind::kNone;
  if (args.size() == 2 && EqualsIgnoreCase(args[0], "get")) return BatchKind::kGet;
  if (args.size() == 3 && EqualsIgnoreCase(args[0], "set") && args[2].size() <= options_.limits.max_value_bytes) {
    return BatchKind::kSet;
  }
  return BatchKind::kNone;
}

void RespSession::FlushBatch(std::string* out) {
  if (batch_.empty()) return;
  options_.shared->total_commands.fetch_add(batch_.size(), std::memory_order_relaxed);
  CommandContext ctx{client_, &options_, out};
  if (batch_.size() == 1) {
    if (batch_kind_ == BatchKind::kGet) {
      CmdGet(ctx, batch_[0]);
    } else {
      CmdSet(ctx, batch_[0]);
    }
  } else if (batch_kind_ == BatchKind::kGet) {
    std::vector<std::string> keys;
    keys.reserve(batch_.size());
    for (Args& args : batch_) keys.push_back(std::move(args[1]));
    auto values = client_->MultiGet(keys);
    for (const auto& value : values) {
      if (value.ok()) {
        AppendBulk(out, *value);
      } else if (value.status().code() == rkv::StatusCode::kNotFound) {
        AppendNull(out);
      } else {
        ReplyRkvError(ctx, value.status());
      }
    }
  } else {
    // MultiPut applies one server's items in the order given, so a key set
    // twice in the batch keeps the later value, as in Redis.
    std::vector<rkv::KeyValueView> items;
    items.reserve(batch_.size());
    for (const Args& args : batch_) items.push_back({args[1], args[2]});
    auto results = client_->MultiPut(items);
    for (const auto& result : results) {
      if (result.ok()) {
        AppendOk(out);
      } else {
        ReplyRkvError(ctx, result.status());
      }
    }
  }
  batch_.clear();
  batch_kind_ = BatchKind::kNone;
}

void RespSession::Execute(Args& args, std::string* out) {
  options_.shared->total_commands.fetch_add(1, std::memory_order_relaxed);
  std::string name = Lower(args[0]);
  const CommandSpec* spec = FindCommand(name);
  if (spec == nullptr) {
    // Redis's text: each argument quoted, up to 128 bytes of them.
    std::string listed;
    for (size_t i = 1; i < args.size() && listed.size() < 128; ++i) {
      listed += "'" + args[i].substr(0, 128 - listed.size()) + "' ";
    }
    return AppendError(out, "ERR unknown command '" + args[0].substr(0, 128) + "', with args beginning with: " + listed);
  }
  const int argc = static_cast<int>(args.size());
  if ((spec->arity > 0 && argc != spec->arity) || (spec->arity < 0 && argc < -spec->arity)) {
    return AppendError(out, "ERR wrong number of arguments for '" + std::string(spec->name) + "' command");
  }
  if (!authenticated_ && name != "auth" && name != "hello" && name != "quit") {
    return AppendError(out, "NOAUTH Authentication required.");
  }
  if (spec->handler == nullptr) return ExecuteConnectionCommand(name, args, out);
  CommandContext ctx{client_, &options_, out};
  spec->handler(ctx, args);
}

void RespSession::ExecuteConnectionCommand(const std::string& name, const Args& args, std::string* out) {
  if (name == "ping") {
    if (args.size() > 2) return AppendError(out, "ERR wrong number of arguments for 'ping' command");
    if (args.size() == 2) return AppendBulk(out, args[1]);
    return AppendSimple(out, "PONG");
  }
  if (name == "echo") return AppendBulk(out, args[1]);
  if (name == "auth") return Auth(args, out);
  if (name == "hello") return Hello(args, out);
  if (name == "select") {
    auto db = ParseRedisInteger(args[1]);
    if (!db || *db < INT32_MIN || *db > INT32_MAX) return ReplyNotInteger(out);
    if (*db != 0) return AppendError(out, "ERR DB index is out of range");
    return AppendOk(out);
  }
  if (name == "quit") {
    close_ = true;
    return AppendOk(out);
  }
  if (name == "client") return ClientCommand(args, out);
  if (name == "command") return CommandCommand(args, out);
  if (name == "info") return Info(args, out);
  if (name == "dbsize") return DbSize(out);
  if (name == "time") {
    timespec now{};
    clock_gettime(CLOCK_REALTIME, &now);
    AppendArrayHeader(out, 2);
    AppendBulk(out, std::to_string(now.tv_sec));
    AppendBulk(out, std::to_string(now.tv_nsec / 1000));
    return;
  }
  AppendError(out, "ERR unknown command '" + args[0] + "'");
}

bool RespSession::PasswordMatches(std::string_view user, std::string_view password) const {
  if (user != "default") return false;
  bool ok = false;
  if (!options_.requirepass.empty() && SecretEqual(password, options_.requirepass)) ok = true;
  if (!options_.token.empty() && SecretEqual(password, options_.token)) ok = true;
  return ok;
}

void RespSession::Auth(const Args& args, std::string* out) {
  if (args.size() > 3) return ReplySyntaxError(out);
  if (!auth_required_ && args.size() == 2) {
    return AppendError(out,
                       "ERR AUTH <password> called without any password configured for the default user. "
                       "Are you sure your configuration is correct?");
  }
  std::string_view user = args.size() == 3 ? std::string_view(args[1]) : "default";
  std::string_view password = args.back();
  if (!auth_required_) {
    // No password configured: the default user takes any password.
    if (user == "default") return AppendOk(out);
  } else if (PasswordMatches(user, password)) {
    authenticated_ = true;
    return AppendOk(out);
  }
  AppendError(out, "WRONGPASS invalid username-password pair or user is disabled.");
}

void RespSession::Hello(const Args& args, std::string* out) {
  if (args.size() >= 2) {
    auto version = ParseRedisInteger(args[1]);
    if (!version) return AppendError(out, "ERR Protocol version is not an integer or out of range");
    // RESP3 is not spoken: a client that asks for it falls back to RESP2
    // on this error, as it does with a Redis 5 server.
    if (*version != 2) return AppendError(out, "NOPROTO unsupported protocol version");
  }
  std::string new_name;
  bool set_name = false;
  for (size_t j = 2; j < args.size(); ++j) {
    size_t more = args.size() - j - 1;
    std::string option = Lower(args[j]);
    if (option == "auth" && more >= 2) {
      if (!PasswordMatches(args[j + 1], args[j + 2]) && auth_required_) {
        return AppendError(out, "WRONGPASS invalid username-password pair or user is disabled.");
      }
      if (auth_required_) authenticated_ = true;
      j += 2;
    } else if (option == "setname" && more >= 1) {
      new_name = args[j + 1];
      set_name = true;
      j += 1;
    } else {
      return AppendError(out, "ERR Syntax error in HELLO option '" + args[j] + "'");
    }
  }
  if (!authenticated_) {
    return AppendError(out,
                       "NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO "
                       "<proto> AUTH <user> <pass> option can be used to authenticate the client and select the "
                       "RESP protocol version at the same time");
  }
  if (set_name) {
    for (char c : new_name) {
      if (c < '!' || c > '~') {
        return AppendError(out, "ERR Client names cannot contain spaces, newlines or special characters.");
      }
    }
    name_ = new_name;
  }
  AppendArrayHeader(out, 14);
  AppendBulk(out, "server");
  AppendBulk(out, "redis");
  AppendBulk(out, "version");
  AppendBulk(out, kRedisVersion);
  AppendBulk(out, "proto");
  AppendInteger(out, 2);
  AppendBulk(out, "id");
  AppendInteger(out, static_cast<int64_t>(id_));
  AppendBulk(out, "mode");
  AppendBulk(out, "standalone");
  AppendBulk(out, "role");
  AppendBulk(out, "master");
  AppendBulk(out, "modules");
  AppendArrayHeader(out, 0);
}

void RespSession::ClientCommand(const Args& args, std::string* out) {
  std::string sub = Lower(args[1]);
  if (sub == "id" && args.size() == 2) return AppendInteger(out, static_cast<int64_t>(id_));
  if (sub == "getname" && args.size() == 2) {
    if (name_.empty()) return AppendNull(out);
    return AppendBulk(out, name_);
  }
  if (sub == "setname" && args.size() == 3) {
    for (char c : args[2]) {
      if (c < '!' || c > '~') {
        return AppendError(out, "ERR Client names cannot contain spaces, newlines or special characters.");
      }
    }
    name_ = args[2];
    return AppendOk(out);
  }
  // Client libraries announce themselves with it; nothing is kept.
  if (sub == "setinfo" && args.size() == 4) return AppendOk(out);
  if (sub == "id" || sub == "getname" || sub == "setname" || sub == "setinfo") {
    return AppendError(out, "ERR wrong number of arguments for 'client|" + sub + "' command");
  }
  AppendError(out, "ERR unknown subcommand '" + args[1].substr(0, 128) + "'. Try CLIENT HELP.");
}

void RespSession::CommandCommand(const Args& args, std::string* out) {
  auto commands = AllCommands();
  if (args.size() == 1) {
    AppendArrayHeader(out, commands.size());
    for (const CommandSpec& spec : commands) AppendCommandInfo(out, spec);
    return;
  }
  std::string sub = Lower(args[1]);
  if (sub == "count" && args.size() == 2) return AppendInteger(out, static_cast<int64_t>(commands.size()));
  // redis-cli asks for the documentation of every command to build its
  // hints; an empty map (an empty array in RESP2) makes it use its own.
  if (sub == "docs") return AppendArrayHeader(out, 0);
  if (sub == "info") {
    if (args.size() == 2) {
      AppendArrayHeader(out, commands.size());
      for (const CommandSpec& spec : commands) AppendCommandInfo(out, spec);
      return;
    }
    AppendArrayHeader(out, args.size() - 2);
    for (size_t i = 2; i < args.size(); ++i) {
      const CommandSpec* spec = FindCommand(Lower(args[i]));
      if (spec == nullptr) {
        out->append("*-1\r\n");
      } else {
        AppendCommandInfo(out, *spec);
      }
    }
    return;
  }
  if (sub == "list" && args.size() == 2) {
    AppendArrayHeader(out, commands.size());
    for (const CommandSpec& spec : commands) AppendBulk(out, spec.name);
    return;
  }
  if (sub == "count" || sub == "list") {
    return AppendError(out, "ERR wrong number of arguments for 'command|" + sub + "' command");
  }
  AppendError(out, "ERR unknown subcommand '" + args[1].substr(0, 128) + "'. Try COMMAND HELP.");
}

bool RespSession::ApproximateKeys(uint64_t* keys, std::string* why) const {
  if (!client_->cluster_mode()) {
    *why = "a single rkv server's key count is not available through librkv (run the gateway on a cluster, "
           "--coordinator, for an approximate count)";
    return false;
  }
  auto cluster = client_->Cluster();
  if (!cluster.ok()) {
    *why = "the cluster map: " + cluster.status().ToString();
    return false;
  }
  // Each UP server's `keys` counter (its Admin Stats: the keys it holds,
  // as primary or backup, expired ones not yet reclaimed included): every
  // key is held R times. The map's MemberInfo::keys would do without a
  // call, but the cached map is refreshed only when its version changes.
  rkv::ClusterAdmin admin(*client_);
  rkv::CallOptions call;
  call.timeout = std::chrono::milliseconds(2000);
  uint64_t sum = 0;
  for (const rkv::MemberInfo& member : cluster->members) {
    if (member.state != "UP") continue;
    auto stats = admin.ServerStats(member.server_id, call);
    if (!stats.ok()) {
      *why = "server " + member.server_id + "'s counters: " + stats.status().ToString();
      return false;
    }
    sum += stats->Find("keys").value_or(0);
  }
  *keys = sum / std::max<uint32_t>(1, cluster->replication_factor);
  return true;
}

void RespSession::DbSize(std::string* out) {
  uint64_t keys = 0;
  std::string why;
  if (!ApproximateKeys(&keys, &why)) return AppendError(out, "ERR rkv-gateway cannot count keys: " + why);
  AppendInteger(out, static_cast<int64_t>(keys));
}

void RespSession::Info(const Args& args, std::string* out) {
  std::string section = args.size() >= 2 ? Lower(args[1]) : "default";
  bool all = section == "default" || section == "all" || section == "everything";
  std::string text;
  const RespShared& shared = *options_.shared;
  if (all || section == "server") {
    utsname uts{};
    uname(&uts);
    text += "# Server\r\n";
    text += "redis_version:" + std::string(kRedisVersion) + "\r\n";
    text += "redis_mode:standalone\r\n";
    text += "rkv_gateway:1\r\n";
    text += "os:" + std::string(uts.sysname) + " " + uts.release + " " + uts.machine + "\r\n";
    text += "arch_bits:64\r\n";
    text += "process_id:" + std::to_string(getpid()) + "\r\n";
    text += "tcp_port:" + std::to_string(shared.tcp_port) + "\r\n";
    int64_t uptime = time(nullptr) - shared.started_unix_s;
    text += "uptime_in_seconds:" + std::to_string(uptime) + "\r\n";
    text += "uptime_in_days:" + std::to_string(uptime / 86400) + "\r\n";
    text += "rkv_transport:" + client_->transport_name() + "\r\n";
    text += "rkv_cluster_mode:" + std::string(client_->cluster_mode() ? "1" : "0") + "\r\n";
    text += "rkv_max_key_bytes:" + std::to_string(options_.limits.max_key_bytes) + "\r\n";
    text += "rkv_max_value_bytes:" + std::to_string(options_.limits.max_value_bytes) + "\r\n\r\n";
  }
  if (all || section == "clients") {
    text += "# Clients\r\n";
    text += "connected_clients:" + std::to_string(shared.connected_clients.load(std::memory_order_relaxed)) + "\r\n\r\n";
  }
  if (all || section == "persistence") {
    // Client libraries wait while a server is loading its data set.
    text += "# Persistence\r\nloading:0\r\n\r\n";
  }
  if (all || section == "stats") {
    text += "# Stats\r\n";
    text += "total_connections_received:" +
            std::to_string(shared.total_connections.load(std::memory_order_relaxed)) + "\r\n";
    text += "total_commands_processed:" + std::to_string(shared.total_commands.load(std::memory_order_relaxed)) +
            "\r\n";
    text += "rkv_backend_errors:" + std::to_string(shared.backend_errors.load(std::memory_order_relaxed)) +
            "\r\n\r\n";
  }
  if (all || section == "replication") text += "# Replication\r\nrole:master\r\nconnected_slaves:0\r\n\r\n";
  if (all || section == "keyspace") {
    text += "# Keyspace\r\n";
    uint64_t keys = 0;
    std::string why;
    if (ApproximateKeys(&keys, &why)) {
      text += "# approximate: the UP servers' key counters, summed and divided by the replication factor\r\n";
      text += "db0:keys=" + std::to_string(keys) + ",expires=0,avg_ttl=0\r\n";
    } else {
      text += "# no key count: " + why + "\r\n";
    }
  }
  AppendBulk(out, text);
}

}  // namespace

std::unique_ptr<Session> NewRespSession(rkv::Client* client, const RespOptions& options, RkvRound* round) {
  return std::make_unique<RespSession>(client, round, options);
}

}  // namespace rkv::gateway
