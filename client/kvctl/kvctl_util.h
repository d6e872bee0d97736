// The testable parts of kvctl: command-line parsing, value-source choice
// and output formatting. No I/O here.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "rkv/client.h"

namespace rkv::kvctl {

enum class Command { kGet, kPut, kDel, kMembers, kStats, kShards, kWhere };

// A parsed command line (after flags): get|del|where KEY, put KEY [VALUE],
// members, shards, or stats [SERVER_ID].
struct Invocation {
  Command command = Command::kGet;
  std::string command_name;
  std::string key;            // raw bytes (decoded when --key_hex)
  bool has_value_arg = false; // put only: VALUE was given (may be "-")
  std::string value_arg;
  std::string server_id;      // stats only: empty for every server
};

// Parses the positional arguments. INVALID_ARGUMENT for a missing or
// unknown command, a wrong number of arguments, or (with key_hex) a key
// that is not hex.
StatusOr<Invocation> ParseInvocation(const std::vector<std::string>& args, bool key_hex);

// Where put takes its value from.
enum class ValueSource { kArgument, kFile, kStdin };

// VALUE given (and not "-") -> argument; --value_file -> file; VALUE "-",
// or absent with stdin not a terminal -> stdin. INVALID_ARGUMENT for VALUE
// together with --value_file, or no value at all.
StatusOr<ValueSource> ChooseValueSource(const Invocation& inv, bool has_value_file,
                                        bool stdin_is_tty);

// "0a1B" -> "\x0a\x1b". INVALID_ARGUMENT for an odd length or a non-hex
// digit.
StatusOr<std::string> DecodeHex(std::string_view hex);

// True when `s` is well-formed UTF-8 (no overlongs, surrogates or code
// points over U+10FFFF).
bool IsValidUtf8(std::string_view s);

// `s` (valid UTF-8) as a JSON string literal, quotes included: escapes '"',
// '\\' and every control character.
std::string JsonQuote(std::string_view s);

// Standard base64 with padding.
std::string Base64Encode(std::string_view bytes);

// `"name":"..."` for valid UTF-8, else `"name_base64":"..."`.
std::string JsonBytesField(std::string_view name, std::string_view bytes);

// One-line JSON objects (with a trailing newline) for each command.
std::string FormatGetJson(std::string_view key, std::string_view value, uint64_t version);
std::string FormatPutJson(std::string_view key, uint64_t version);
std::string FormatDelJson(std::string_view key);

// "512 B", "1.5 KiB", "3.0 GiB".
std::string FormatBytes(uint64_t bytes);

// `kvctl members`: a table with a header row (server, epoch, state,
// address, zone ("-" when unlabelled), primaries, backups, keys, memory
// used / total), or a JSON array of objects (one per server, all
// MemberInfo fields), each with a trailing newline.
std::string FormatMembersText(const std::vector<MemberInfo>& members);
std::string FormatMembersJson(const std::vector<MemberInfo>& members);

// `kvctl shards`: a table (shard, primary, backups joined by ',', "-" for
// none), one row per shard, then the summary line "N shards, R=R, K with
// fewer than R replicas"; or one JSON object {"map_version", "shard_count",
// "replication_factor", "under_replicated", "shards": [{"shard",
// "primary", "backups": [...]}]}. A trailing newline either way.
std::string FormatShardsText(const ClusterInfo& cluster);
std::string FormatShardsJson(const ClusterInfo& cluster);

// Shards with fewer than R replicas.
uint32_t UnderReplicatedShards(const ClusterInfo& cluster);

// `kvctl where KEY`: "shard S of N, map version V", then a table (server,
// role "primary" or "backup", state, address, zone) of the shard's
// replicas; or one JSON object {"key" (as JsonBytesField), "shard",
// "map_version", "replicas": [{"server_id", "role", "state",
// "data_address", "zone"}]}. `shard` < cluster.shards.size().
std::string FormatWhereText(const ClusterInfo& cluster, uint32_t shard);
std::string FormatWhereJson(const ClusterInfo& cluster, std::string_view key, uint32_t shard);

// `kvctl stats`: same shapes, with the ServerStatsInfo fields.
std::string FormatStatsText(const std::vector<ServerStatsInfo>& stats);
std::string FormatStatsJson(const std::vector<ServerStatsInfo>& stats);

}  // namespace rkv::kvctl
