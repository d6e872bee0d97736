// kvctl: command-line client of an rkv server or cluster (get / put / del,
// and members / shards / where / stats / verify / drain / forget through
// the coordinator).
#include <gflags/gflags.h>
#include <glog/logging.h>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "client/kvctl/kvctl_util.h"
#include "common/layout.h"
#include "common/token.h"
#include "rkv/admin.h"
#include "rkv/client.h"

DEFINE_string(server, "127.0.0.1:7700", "HOST:PORT of the rkv server's data plane (default 127.0.0.1:7700)");
DEFINE_string(coordinator, "",
              "HOST:PORT of the rkv-coordinator, or a comma-separated list of the cluster's coordinators "
              "(A,B,C: kvctl finds the leader): cluster mode (instead of --server; needed by members, shards, "
              "where, verify, drain, forget and stats)");
DEFINE_string(token_file, "", "file holding the access token (required)");
DEFINE_string(tls_ca, "", "cluster mode: PEM CA bundle the coordinators' and servers' certificates are verified "
              "against; turns TLS on for the control plane (default empty: plain gRPC)");
DEFINE_string(tls_cert, "", "cluster mode: PEM client certificate, with --tls_key and --tls_ca, for a cluster that "
              "checks clients' certificates (default empty: none)");
DEFINE_string(tls_key, "", "cluster mode: PEM private key of --tls_cert (default empty: none)");
DEFINE_bool(data_plane_tls, false, "TLS on the data plane too (tcp; servers started with --data_plane_tls): "
            "server certificates verified against --tls_ca, which it needs (default false)");
DEFINE_string(transport, "auto", "data-plane transport: auto, tcp or verbs (default auto)");
DEFINE_int32(timeout, 5000,
             "deadline of the whole command, in milliseconds (default 5000); verify: of each request; "
             "drain: of the whole wait (default there 600000)");
DEFINE_string(output, "text", "output format: text (raw value bytes) or json (default text)");
DEFINE_bool(key_hex, false, "KEY is given as hex digits, for binary keys (default false)");
DEFINE_string(value_file, "", "put: read the value from this file instead of VALUE (binary-safe)");
DEFINE_uint64(if_version, 0,
              "put, del: write or delete only if the key's version is this one (a compare-and-set or "
              "-delete; 0: no condition; the version from put or get --versioned); exit 1 when it is not "
              "(default 0)");
DEFINE_int64(ttl, 0,
             "put: the key expires (reads as absent) this many seconds after the put, by this machine's clock; "
             "0: never (default 0)");
DEFINE_bool(if_absent, false, "put: write only if the key does not exist; exit 1 when it does (default false)");
DEFINE_bool(versioned, false,
            "get: print the key's version on a line of its own before the value, the version put "
            "--if_version takes (default false)");
DEFINE_string(shards, "", "verify: the shards to check, e.g. 0,5,10-19 (default every shard)");
DEFINE_int32(rounds, 5,
             "verify: how many times a shard whose replicas disagree is asked, 1..100 (default 5; writes in "
             "flight make replicas differ for a moment)");
DEFINE_bool(keys, false, "verify: list the keys whose versions differ between the replicas of a disagreeing shard");
DEFINE_bool(wait, true, "drain: follow the map until the server holds no shard (default true; --nowait returns "
                        "once the coordinator accepted the drain)");

DECLARE_bool(help);
DECLARE_bool(helpshort);

// gflags reports a bad flag by calling this hook (exit by default); kvctl
// routes it to its own exit status for errors.
namespace GFLAGS_NAMESPACE {
extern void (*gflags_exitfunc)(int);
}  // namespace GFLAGS_NAMESPACE

namespace {

constexpr int kExitOk = 0;
constexpr int kExitNotFound = 1;
constexpr int kExitDisagree = 1;  // verify: replicas differ; drain: timed out
constexpr int kExitConditionFailed = 1;  // put --if_version / --if_absent: nothing written
constexpr int kExitError = 2;

constexpr char kUsage[] =
    "command-line client of an rkv server or cluster.\n"
    "\n"
    "Usage:\n"
    "  kvctl [flags] get KEY          print KEY's value: piped, the raw bytes alone; on a\n"
    "                                 terminal, followed by a newline\n"
    "                                 (--output=json: {\"key\":..,\"value\":..,\"version\":..});\n"
    "                                 --versioned: the version's number on a line first\n"
    "  kvctl [flags] put KEY [VALUE]  store a value and print its new version ('version 3' on\n"
    "                                 a terminal, '3' piped); the value is\n"
    "                                 VALUE, or the contents of --value_file, or stdin when\n"
    "                                 VALUE is '-' or absent and stdin is not a terminal\n"
    "                                 (--if_version=V or --if_absent: only if the key is at\n"
    "                                 version V, or absent; exit 1, naming the key's version,\n"
    "                                 when it is not: nothing written)\n"
    "  kvctl [flags] del KEY          delete KEY (--if_version=V: only if the key is at version\n"
    "                                 V; exit 1, naming its version, when it is not)\n"
    "  kvctl [flags] put --ttl=S KEY VALUE\n"
    "                                 store a value that expires (reads as absent) S seconds\n"
    "                                 from now, by this machine's clock\n"
    "  kvctl [flags] ttl KEY          the seconds KEY has left, rounded up, or 'none' when it\n"
    "                                 does not expire (--output=json: {\"key\",\"expires_at_ms\",\n"
    "                                 \"ttl_seconds\"})\n"
    "  kvctl [flags] expire KEY S     KEY expires S seconds from now (its value kept; S <= 0\n"
    "                                 removes it); prints the new version\n"
    "  kvctl [flags] persist KEY      KEY no longer expires; prints the new version\n"
    "  kvctl --coordinator=H:P [flags] members\n"
    "                                 the cluster's servers: id, epoch, state (UP or DOWN;\n"
    "                                 ',DRAINING' while drained; 'DOWN for 3m12s': since the\n"
    "                                 coordinator marked it DOWN), address, zone, shards as\n"
    "                                 primary, as backup and being caught up on (SYNCING),\n"
    "                                 keys, memory used/total, then which coordinator leads\n"
    "                                 (--output=json: a JSON array of the servers, with\n"
    "                                 down_for_ms)\n"
    "  kvctl --coordinator=H:P [flags] coordinators\n"
    "                                 every listed coordinator: its role (leader, standby, or\n"
    "                                 single: the only one, on a data dir), the leader it\n"
    "                                 knows, its map version and the etcd revision of its\n"
    "                                 state, then each etcd endpoint's health; exit 2 when a\n"
    "                                 coordinator does not answer (--output=json: an array)\n"
    "  kvctl --coordinator=H:P [flags] shards\n"
    "                                 one line per shard: its primary ('ID (from OLD)' while\n"
    "                                 the role passes from OLD), backups and servers catching\n"
    "                                 up on it; then a summary: shards, R (copies per shard),\n"
    "                                 how many shards have fewer than R and how many are being\n"
    "                                 caught up on (--output=json: one JSON object)\n"
    "  kvctl --coordinator=H:P [flags] where KEY\n"
    "                                 KEY's shard and every server holding it: role (primary,\n"
    "                                 which serves KEY's calls, or backup), state, address, zone\n"
    "                                 (--output=json: one JSON object)\n"
    "  kvctl --coordinator=H:P [flags] verify [--shards=LIST] [--rounds=N] [--keys]\n"
    "                                 asks every replica of each shard (primary and backups;\n"
    "                                 not servers still catching up) for a checksum of the\n"
    "                                 records it holds, and compares them; a shard whose\n"
    "                                 replicas differ is asked again (up to --rounds, from a\n"
    "                                 fresh map) since writes in flight differ for a moment;\n"
    "                                 what still differs is shown per replica (keys, highest\n"
    "                                 version, checksum) and, with --keys, the keys whose\n"
    "                                 versions differ. Exit status 0 when every shard agrees,\n"
    "                                 1 when some disagree. Progress goes to stderr\n"
    "                                 (--output=json: one JSON object)\n"
    "  kvctl --coordinator=H:P [flags] drain SERVER_ID [--nowait]\n"
    "                                 retires a server with nothing lost: the coordinator\n"
    "                                 moves each of its roles (primary, backup, syncing) to\n"
    "                                 other servers; prints how many roles must move, then\n"
    "                                 follows the map until the server holds none ('drained:\n"
    "                                 ... it can be stopped', exit 0) or --timeout (default\n"
    "                                 here 10 minutes) runs out (what is left, exit 1). An\n"
    "                                 unknown server or roles no other server can take: the\n"
    "                                 coordinator's error, exit 2 (--output=json: one object)\n"
    "  kvctl --coordinator=H:P [flags] forget SERVER_ID\n"
    "                                 removes a server gone for good from the cluster: it must\n"
    "                                 be DOWN and hold no shard (its roles moved by failover\n"
    "                                 and re-replication, or by drain). The map no longer\n"
    "                                 lists it, and a server joining later under that id is a\n"
    "                                 new one. Refused (the coordinator says why, exit 2) for\n"
    "                                 an unknown id, an UP server, one still holding shards,\n"
    "                                 or when the cluster would keep fewer servers than the\n"
    "                                 coordinator's --servers (--output=json: one object)\n"
    "  kvctl --coordinator=H:P [flags] stats [SERVER_ID]\n"
    "                                 each server's counters from its admin service (keys,\n"
    "                                 puts, deletes, errors, connections, gets served by CPU,\n"
    "                                 heap used/quarantined/total); SERVER_ID limits it to one\n"
    "                                 (--output=json: a JSON array); an unreachable server\n"
    "                                 gets an error line on stderr and exit status 2\n"
    "\n"
    "Flags of every command: --server or --coordinator (not both; default\n"
    "--server=127.0.0.1:7700), --token_file (required), --transport, --timeout, --output,\n"
    "--key_hex; put also takes --value_file. members, coordinators, shards, where, stats,\n"
    "verify, drain and forget need --coordinator. --coordinator takes one HOST:PORT or the\n"
    "cluster's coordinators as a list, H:P,H:P,H:P: kvctl reads the map from any of them\n"
    "and sends drain and forget to the leader, following it when it changes.\n"
    "--v=1 logs connection details to stderr. When KEY or VALUE starts with '-', end the\n"
    "flags with '--' before the command: kvctl --token_file=T -- put KEY -5\n"
    "\n"
    "Exit status: 0 done (found), 1 key not found (verify: replicas disagree; drain: timed\n"
    "out; put or del --if_version, put --if_absent: the key was not as asked; ttl, expire,\n"
    "persist: key not found), 2 any other error (one line on stderr; a usage error adds a second: run\n"
    "'kvctl --help' for usage).\n";

void PrintHelp() {
  std::cout << "kvctl: " << kUsage << "\nFlags:\n";
  std::vector<gflags::CommandLineFlagInfo> flags;
  gflags::GetAllFlags(&flags);
  for (const auto& f : flags) {
    if (f.filename == __FILE__) std::cout << gflags::DescribeOneFlag(f);
  }
}

constexpr char kUsageHint[] = "run 'kvctl --help' for usage";

// A command line kvctl cannot run: what is wrong, then where to look; not
// the whole usage. Returns the exit status for it.
int UsageError(const std::string& message) {
  std::cerr << "kvctl: " << message << "\n" << kUsageHint << "\n";
  return kExitError;
}

// Prints the one-line error; returns the exit status for it.
int Fail(const std::string& command, const rkv::Status& s) {
  std::cerr << "kvctl: " << command << ": " << s.ToString() << "\n";
  return kExitError;
}

// Same, for the result of a get or del: NOT_FOUND is the key's absence.
int FailKey(const std::string& command, const rkv::Status& s) {
  const int code = Fail(command, s);
  return s.code() == rkv::StatusCode::kNotFound ? kExitNotFound : code;
}

// Reads all of `fd` (binary-safe), refusing more than `limit` bytes.
rkv::StatusOr<std::string> ReadAll(int fd, size_t limit, const std::string& what) {
  std::string out;
  char buf[1 << 16];
  while (true) {
    const ssize_t n = read(fd, buf, sizeof(buf));
    if (n < 0) {
      if (errno == EINTR) continue;
      return rkv::PosixError("read(" + what + ")", errno);
    }
    if (n == 0) return out;
    if (out.size() + static_cast<size_t>(n) > limit) {
      return rkv::InvalidArgument(what + " holds more than " + std::to_string(limit) +
                                  " bytes, over any rkv value limit");
    }
    out.append(buf, static_cast<size_t>(n));
  }
}

rkv::StatusOr<std::string> ReadValue(const rkv::kvctl::Invocation& inv, rkv::kvctl::ValueSource source) {
  switch (source) {
    case rkv::kvctl::ValueSource::kArgument:
      return inv.value_arg;
    case rkv::kvctl::ValueSource::kStdin:
      return ReadAll(STDIN_FILENO, rkv::layout::kMaxValueBytesLimit, "stdin");
    case rkv::kvctl::ValueSource::kFile: {
      const int fd = ::open(FLAGS_value_file.c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0) return rkv::PosixError("open(" + FLAGS_value_file + ")", errno);
      auto value = ReadAll(fd, rkv::layout::kMaxValueBytesLimit, FLAGS_value_file);
      ::close(fd);
      return value;
    }
  }
  return rkv::Internal("unreachable value source");
}

bool WriteAll(const std::string& bytes) {
  return std::fwrite(bytes.data(), 1, bytes.size(), stdout) == bytes.size() && std::fflush(stdout) == 0;
}

// Progress lines for long runs, on stderr: the first once `quiet_for` has
// passed, then at most one a second.
class Progress {
 public:
  explicit Progress(std::chrono::milliseconds quiet_for)
      : next_(std::chrono::steady_clock::now() + quiet_for) {}
  void operator()(const std::string& line) {
    const auto now = std::chrono::steady_clock::now();
    if (now < next_) return;
    std::cerr << "kvctl: " << line << std::endl;
    next_ = now + std::chrono::seconds(1);
  }

 private:
  std::chrono::steady_clock::time_point next_;
};

// `kvctl verify`: exit 0 when every replica of every shard agrees, 1 when
// some disagree, 2 when a server or the coordinator could not be asked.
int Verify(rkv::ClusterAdmin& admin, const rkv::kvctl::VerifyOptions& opts, bool json) {
  rkv::Client& client = admin.client();
  rkv::CallOptions call;
  call.timeout = std::chrono::milliseconds(FLAGS_timeout);
  Progress progress(std::chrono::seconds(2));
  rkv::kvctl::VerifyIo io;
  io.cluster = [&]() -> rkv::StatusOr<rkv::ClusterInfo> {
    RKV_RETURN_IF_ERROR(client.RefreshClusterMap(call));
    return client.Cluster();
  };
  io.checksums = [&](const std::string& id, const std::vector<uint32_t>& shards) {
    return admin.ShardChecksums(id, shards, call);
  };
  io.list = [&](const std::string& id, uint32_t shard) { return admin.ListShard(id, shard, call); };
  // Writes in flight settle within milliseconds; later rounds wait longer.
  io.pause = [](int round) { std::this_thread::sleep_for(std::chrono::milliseconds(200) * (round - 1)); };
  io.progress = [&](const std::string& line) { progress(line); };
  auto report = rkv::kvctl::RunVerify(opts, io);
  if (!report.ok()) return Fail("verify", report.status());
  const std::string out = json ? rkv::kvctl::FormatVerifyJson(*report) : rkv::kvctl::FormatVerifyText(*report);
  if (!WriteAll(out)) return Fail("verify", rkv::PosixError("write(stdout)", errno));
  return report->disagreeing.empty() ? kExitOk : kExitDisagree;
}

// `kvctl drain SERVER_ID`: exit 0 once the server holds no role (or at
// once with --nowait), 1 when --timeout ran out first, 2 on errors.
int Drain(rkv::ClusterAdmin& admin, const std::string& server_id, bool json) {
  rkv::Client& client = admin.client();
  gflags::CommandLineFlagInfo timeout_flag;
  const bool timeout_given = gflags::GetCommandLineFlagInfo("timeout", &timeout_flag) && !timeout_flag.is_default;
  const auto start = std::chrono::steady_clock::now();
  const auto deadline = start + std::chrono::milliseconds(timeout_given ? FLAGS_timeout : 600'000);
  // Each request gets at most 5 s (or what is left).
  const auto call = [&] {
    rkv::CallOptions c;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    c.timeout = std::clamp(left, std::chrono::milliseconds(1), std::chrono::milliseconds(5000));
    return c;
  };
  auto accepted = admin.Drain(server_id, call());
  if (!accepted.ok()) return Fail("drain", accepted.status());
  // Text progress goes to stdout; with --output=json stdout gets the one
  // final object and progress goes to stderr.
  std::ostream& log = json ? std::cerr : std::cout;
  log << "drain " << server_id << ": " << accepted->roles_to_move << " roles to move (map version "
      << accepted->map_version << ")" << std::endl;
  rkv::kvctl::DrainOutcome outcome;
  outcome.map_version = accepted->map_version;
  outcome.drained = accepted->roles_to_move == 0;
  if (FLAGS_wait && !outcome.drained) {
    rkv::kvctl::DrainIo io;
    io.cluster = [&]() -> rkv::StatusOr<rkv::ClusterInfo> {
      RKV_RETURN_IF_ERROR(client.RefreshClusterMap(call()));
      return client.Cluster();
    };
    io.expired = [&] { return std::chrono::steady_clock::now() + std::chrono::milliseconds(500) >= deadline; };
    io.pause = [] { std::this_thread::sleep_for(std::chrono::milliseconds(500)); };
    io.log = [&](const std::string& line) { log << line << std::endl; };
    // The coordinator may be restarting: drain keeps following until the deadline.
    io.warn = [](const rkv::Status& s) { std::cerr << "kvctl: drain: " << s.ToString() << " (still waiting)" << std::endl; };
    outcome = rkv::kvctl::FollowDrain(server_id, accepted->map_version, io);
  }
  const bool drained = outcome.drained;
  const rkv::kvctl::RolesLeft& left = outcome.left;
  const uint64_t map_version = outcome.map_version;
  if (json) {
    if (!WriteAll(rkv::kvctl::FormatDrainJson(server_id, map_version, accepted->roles_to_move, drained, left))) {
      return Fail("drain", rkv::PosixError("write(stdout)", errno));
    }
  }
  if (drained) {
    if (!json) std::cout << "drained: " << server_id << " holds no shard; it can be stopped" << std::endl;
    return kExitOk;
  }
  if (!FLAGS_wait) return kExitOk;
  const auto waited = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::steady_clock::now() - start);
  log << "timed out after " << waited.count() << " s: " << server_id << " still holds "
      << rkv::kvctl::FormatRolesLeft(left) << " (map version " << map_version << ")" << std::endl;
  return kExitDisagree;
}

// `kvctl forget SERVER_ID`: exit 0 once the coordinator forgot it, 2 on
// any refusal or error.
int Forget(rkv::ClusterAdmin& admin, const std::string& server_id, bool json) {
  rkv::CallOptions call;
  call.timeout = std::chrono::milliseconds(FLAGS_timeout);
  auto forgot = admin.Forget(server_id, call);
  if (!forgot.ok()) return Fail("forget", forgot.status());
  const std::string out = json ? rkv::kvctl::FormatForgetJson(server_id, forgot->map_version)
                               : rkv::kvctl::FormatForgetText(server_id, forgot->map_version);
  if (!WriteAll(out)) return Fail("forget", rkv::PosixError("write(stdout)", errno));
  return kExitOk;
}

int Run(const rkv::kvctl::Invocation& inv) {
  const std::string& cmd = inv.command_name;
  if (FLAGS_output != "text" && FLAGS_output != "json") {
    return UsageError(cmd + ": --output must be text or json, not '" + FLAGS_output + "'");
  }
  if (FLAGS_timeout <= 0) return UsageError(cmd + ": --timeout must be positive (milliseconds)");
  if (FLAGS_token_file.empty()) return UsageError(cmd + ": --token_file is required");
  const bool json = FLAGS_output == "json";
  gflags::CommandLineFlagInfo server_flag;
  const bool server_given = gflags::GetCommandLineFlagInfo("server", &server_flag) && !server_flag.is_default;
  const bool cluster = !FLAGS_coordinator.empty();
  if (cluster && server_given) return UsageError(cmd + ": give either --server or --coordinator, not both");
  const bool needs_cluster = inv.command == rkv::kvctl::Command::kMembers ||
                             inv.command == rkv::kvctl::Command::kCoordinators ||
                             inv.command == rkv::kvctl::Command::kStats ||
                             inv.command == rkv::kvctl::Command::kShards || inv.command == rkv::kvctl::Command::kWhere ||
                             inv.command == rkv::kvctl::Command::kVerify ||
                             inv.command == rkv::kvctl::Command::kDrain || inv.command == rkv::kvctl::Command::kForget;
  if (!cluster && needs_cluster) {
    return UsageError(cmd + ": needs --coordinator=HOST:PORT (or a list HOST:PORT,HOST:PORT,...)");
  }
  rkv::kvctl::VerifyOptions verify;
  if (inv.command == rkv::kvctl::Command::kVerify) {
    if (FLAGS_rounds < 1 || FLAGS_rounds > 100) {
      return UsageError(cmd + ": --rounds must be 1..100, not " + std::to_string(FLAGS_rounds));
    }
    verify.rounds = FLAGS_rounds;
    verify.list_keys = FLAGS_keys;
    if (!FLAGS_shards.empty()) {
      auto shards = rkv::kvctl::ParseShardList(FLAGS_shards);
      if (!shards.ok()) return UsageError(cmd + ": " + shards.status().message());
      verify.shards = std::move(*shards);
    }
  }

  if (FLAGS_if_version != 0 && FLAGS_if_absent) {
    return UsageError(cmd + ": give --if_version or --if_absent, not both");
  }
  if (FLAGS_if_absent && inv.command != rkv::kvctl::Command::kPut) {
    return UsageError(cmd + ": --if_absent is put's");
  }
  if (FLAGS_if_version != 0 && inv.command != rkv::kvctl::Command::kPut && inv.command != rkv::kvctl::Command::kDel) {
    return UsageError(cmd + ": --if_version is put's and del's");
  }
  if (FLAGS_versioned && inv.command != rkv::kvctl::Command::kGet) {
    return UsageError(cmd + ": --versioned is get's");
  }
  if (FLAGS_ttl != 0 && inv.command != rkv::kvctl::Command::kPut) {
    return UsageError(cmd + ": --ttl is put's (expire KEY SECONDS changes a stored key's)");
  }
  int64_t ttl_seconds = 0;
  if (FLAGS_ttl != 0) {
    auto ttl = rkv::kvctl::ParseSeconds(std::to_string(FLAGS_ttl), "--ttl");
    if (!ttl.ok()) return UsageError(cmd + ": " + ttl.status().message());
    if (*ttl < 0) return UsageError(cmd + ": --ttl must not be negative");
    ttl_seconds = *ttl;
  }
  int64_t expire_seconds = 0;
  if (inv.command == rkv::kvctl::Command::kExpire) {
    auto seconds = rkv::kvctl::ParseSeconds(inv.value_arg, "expire SECONDS");
    if (!seconds.ok()) return UsageError(cmd + ": " + seconds.status().message());
    expire_seconds = *seconds;
  }
  std::string value;
  if (inv.command == rkv::kvctl::Command::kPut) {
    // No value, or two: a usage error.
    auto source = rkv::kvctl::ChooseValueSource(inv, !FLAGS_value_file.empty(), isatty(STDIN_FILENO) == 1);
    if (!source.ok()) return UsageError(source.status().message());
    auto v = ReadValue(inv, *source);
    if (!v.ok()) return Fail(cmd, v.status());
    value = std::move(*v);
  }
  auto token = rkv::ReadTokenFile(FLAGS_token_file);
  if (!token.ok()) return Fail(cmd, token.status().WithContext("--token_file"));
  // The files themselves are checked by Connect (its errors name the
  // flags too).
  if (!(FLAGS_tls_ca.empty() && FLAGS_tls_cert.empty() && FLAGS_tls_key.empty()) && !cluster &&
      !FLAGS_data_plane_tls) {
    return UsageError("--tls_ca, --tls_cert and --tls_key secure the control plane: they need --coordinator, or "
                      "--data_plane_tls for a server's data plane");
  }
  if (FLAGS_data_plane_tls && FLAGS_tls_ca.empty()) {
    return UsageError("--data_plane_tls needs --tls_ca, the CA bundle the servers' certificates are verified against");
  }

  rkv::ClientOptions options;
  if (cluster) {
    options.server.clear();
    options.coordinator = FLAGS_coordinator;
  } else {
    options.server = FLAGS_server;
  }
  options.token = std::move(*token);
  options.transport = FLAGS_transport;
  options.timeout = std::chrono::milliseconds(FLAGS_timeout);
  options.tls_ca_file = FLAGS_tls_ca;
  options.tls_cert_file = FLAGS_tls_cert;
  options.tls_key_file = FLAGS_tls_key;
  options.data_plane_tls = FLAGS_data_plane_tls;
  auto client = rkv::Client::Connect(options);
  if (!client.ok()) return Fail(cmd, client.status());
  // The administration commands work through the same connection.
  rkv::ClusterAdmin admin(**client);

  switch (inv.command) {
    case rkv::kvctl::Command::kGet: {
      auto got = (*client)->GetVersioned(inv.key);
      if (!got.ok()) return FailKey(cmd, got.status());
      // Piped, the value's bytes alone (scripts and binary values); on a
      // terminal a newline after it, so that the prompt starts on a line of
      // its own.
      std::string out = json ? rkv::kvctl::FormatGetJson(inv.key, got->value, got->version) : got->value;
      if (!json && isatty(STDOUT_FILENO) == 1) out += "\n";
      // The version first, on a line of its own (json has it already).
      if (!json && FLAGS_versioned) out = std::to_string(got->version) + "\n" + out;
      if (!WriteAll(out)) return Fail(cmd, rkv::PosixError("write(stdout)", errno));
      return kExitOk;
    }
    case rkv::kvctl::Command::kPut: {
      rkv::PutOptions put;
      if (FLAGS_if_absent) put.condition = rkv::PutCondition::Absent();
      if (FLAGS_if_version != 0) put.condition = rkv::PutCondition::VersionIs(FLAGS_if_version);
      if (ttl_seconds != 0) put.expires_at_unix_ms = rkv::kvctl::DeadlineAfter(rkv::Client::NowUnixMs(), ttl_seconds);
      auto version = (*client)->Put(inv.key, value, put);
      if (!version.ok() && version.status().reason() == rkv::Reason::kConditionFailed) {
        Fail(cmd, version.status());
        return kExitConditionFailed;
      }
      if (!version.ok()) return Fail(cmd, version.status());
      // Piped, the bare number that scripts parse; on a terminal it says
      // what the number is.
      const std::string number = std::to_string(*version) + "\n";
      std::string out = number;
      if (json) {
        out = rkv::kvctl::FormatPutJson(inv.key, *version);
      } else if (isatty(STDOUT_FILENO) == 1) {
        out = "version " + number;
      }
      if (!WriteAll(out)) return Fail(cmd, rkv::PosixError("write(stdout)", errno));
      return kExitOk;
    }
    case rkv::kvctl::Command::kDel: {
      const rkv::Status s =
          FLAGS_if_version != 0 ? (*client)->DeleteIfVersion(inv.key, FLAGS_if_version) : (*client)->Delete(inv.key);
      if (s.reason() == rkv::Reason::kConditionFailed) {
        Fail(cmd, s);
        return kExitConditionFailed;
      }
      if (!s.ok()) return FailKey(cmd, s);
      if (json && !WriteAll(rkv::kvctl::FormatDelJson(inv.key))) {
        return Fail(cmd, rkv::PosixError("write(stdout)", errno));
      }
      return kExitOk;
    }
    case rkv::kvctl::Command::kTtl: {
      auto got = (*client)->GetVersioned(inv.key);
      if (!got.ok()) return FailKey(cmd, got.status());
      const int64_t now = rkv::Client::NowUnixMs();
      const std::string out = json ? rkv::kvctl::FormatTtlJson(inv.key, got->expires_at_unix_ms, now)
                                   : rkv::kvctl::FormatTtl(got->expires_at_unix_ms, now) + "\n";
      if (!WriteAll(out)) return Fail(cmd, rkv::PosixError("write(stdout)", errno));
      return kExitOk;
    }
    case rkv::kvctl::Command::kExpire:
    case rkv::kvctl::Command::kPersist: {
      const int64_t expires_at = inv.command == rkv::kvctl::Command::kPersist
                                     ? rkv::kNoExpiry
                                     : rkv::kvctl::DeadlineAfter(rkv::Client::NowUnixMs(), expire_seconds);
      // expire with S <= 0 gives a deadline already reached: SetExpiry
      // removes the key.
      auto version = (*client)->SetExpiry(inv.key, expires_at);
      if (!version.ok()) return FailKey(cmd, version.status());
      std::string out = std::to_string(*version) + "\n";
      if (json) {
        out = rkv::kvctl::FormatExpiryJson(inv.key, *version, *version == 0 ? 0 : expires_at);
      } else if (*version == 0) {
        out = isatty(STDOUT_FILENO) == 1 ? "removed (expired)\n" : "0\n";
      } else if (isatty(STDOUT_FILENO) == 1) {
        out = "version " + out;
      }
      if (!WriteAll(out)) return Fail(cmd, rkv::PosixError("write(stdout)", errno));
      return kExitOk;
    }
    case rkv::kvctl::Command::kMembers: {
      auto members = admin.Members();
      if (!members.ok()) return Fail(cmd, members.status());
      // How long a DOWN server has been DOWN is counted on this machine's
      // wall clock from the coordinator's.
      const auto since_epoch = std::chrono::system_clock::now().time_since_epoch();
      const auto now_unix_ms =
          static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(since_epoch).count());
      std::string out = json ? rkv::kvctl::FormatMembersJson(*members, now_unix_ms)
                             : rkv::kvctl::FormatMembersText(*members, now_unix_ms);
      if (!json) {
        // Which coordinator leads, and whether each answers.
        auto coordinators = admin.Coordinators();
        if (coordinators.ok()) out += rkv::kvctl::FormatCoordinatorsLine(*coordinators);
      }
      if (!WriteAll(out)) return Fail(cmd, rkv::PosixError("write(stdout)", errno));
      return kExitOk;
    }
    case rkv::kvctl::Command::kCoordinators: {
      auto coordinators = admin.Coordinators();
      if (!coordinators.ok()) return Fail(cmd, coordinators.status());
      const std::string out = json ? rkv::kvctl::FormatCoordinatorsJson(*coordinators)
                                   : rkv::kvctl::FormatCoordinatorsText(*coordinators);
      if (!WriteAll(out)) return Fail(cmd, rkv::PosixError("write(stdout)", errno));
      bool all = true;
      for (const rkv::CoordinatorInfo& c : *coordinators) all = all && c.reachable;
      return all ? kExitOk : kExitError;
    }
    case rkv::kvctl::Command::kShards: {
      auto info = (*client)->Cluster();
      if (!info.ok()) return Fail(cmd, info.status());
      const std::string out = json ? rkv::kvctl::FormatShardsJson(*info) : rkv::kvctl::FormatShardsText(*info);
      if (!WriteAll(out)) return Fail(cmd, rkv::PosixError("write(stdout)", errno));
      return kExitOk;
    }
    case rkv::kvctl::Command::kWhere: {
      auto info = (*client)->Cluster();
      if (!info.ok()) return Fail(cmd, info.status());
      auto shard = (*client)->ShardOfKey(inv.key);
      if (!shard.ok()) return Fail(cmd, shard.status());
      if (*shard >= info->shards.size()) return Fail(cmd, rkv::Internal("shard out of the map's range"));
      const std::string out =
          json ? rkv::kvctl::FormatWhereJson(*info, inv.key, *shard) : rkv::kvctl::FormatWhereText(*info, *shard);
      if (!WriteAll(out)) return Fail(cmd, rkv::PosixError("write(stdout)", errno));
      return kExitOk;
    }
    case rkv::kvctl::Command::kVerify:
      return Verify(admin, verify, json);
    case rkv::kvctl::Command::kDrain:
      return Drain(admin, inv.server_id, json);
    case rkv::kvctl::Command::kForget:
      return Forget(admin, inv.server_id, json);
    case rkv::kvctl::Command::kStats: {
      std::vector<std::string> ids;
      if (!inv.server_id.empty()) {
        ids.push_back(inv.server_id);
      } else {
        auto members = admin.Members();
        if (!members.ok()) return Fail(cmd, members.status());
        for (const auto& m : *members) ids.push_back(m.server_id);
      }
      // One deadline for the whole command.
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(FLAGS_timeout);
      // Every reachable server is shown; each failure gets its own line on
      // stderr and makes the exit status 2.
      std::vector<rkv::ServerStatsInfo> stats;
      std::vector<rkv::Status> failures;
      for (const std::string& id : ids) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
        rkv::CallOptions call;
        call.timeout = std::max(left, std::chrono::milliseconds(1));
        auto s = admin.ServerStats(id, call);
        if (!s.ok()) {
          failures.push_back(s.status());
          continue;
        }
        stats.push_back(std::move(*s));
      }
      if (!stats.empty() || failures.empty()) {
        const std::string out = json ? rkv::kvctl::FormatStatsJson(stats) : rkv::kvctl::FormatStatsText(stats);
        if (!WriteAll(out)) return Fail(cmd, rkv::PosixError("write(stdout)", errno));
      }
      for (const rkv::Status& f : failures) Fail(cmd, f);
      return failures.empty() ? kExitOk : kExitError;
    }
  }
  return kExitError;
}

}  // namespace

int main(int argc, char** argv) {
  gflags::SetUsageMessage(kUsage);
  gflags::SetVersionString(RKV_VERSION);
  // gflags has printed its one line ("ERROR: illegal value ...") already.
  GFLAGS_NAMESPACE::gflags_exitfunc = [](int code) {
    if (code != 0) std::cerr << kUsageHint << "\n";
    std::exit(code == 0 ? kExitOk : kExitError);
  };
  gflags::ParseCommandLineNonHelpFlags(&argc, &argv, /*remove_flags=*/true);
  if (FLAGS_help || FLAGS_helpshort) {
    PrintHelp();
    return kExitOk;
  }
  // --helpfull, --version and friends keep gflags' behaviour.
  gflags::HandleCommandLineHelpFlags();

  // Quiet unless --v: no log files, and only fatal messages otherwise.
  FLAGS_logtostderr = true;
  if (FLAGS_v <= 0) FLAGS_minloglevel = google::GLOG_FATAL;
  google::InitGoogleLogging(argv[0]);

  std::vector<std::string> args(argv + 1, argv + argc);
  auto inv = rkv::kvctl::ParseInvocation(args, FLAGS_key_hex);
  if (!inv.ok()) return UsageError(inv.status().message());
  return Run(*inv);
}
