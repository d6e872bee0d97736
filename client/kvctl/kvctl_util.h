// The testable parts of kvctl: command-line parsing, value-source choice
// and output formatting. No I/O here.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "rkv/admin.h"
#include "rkv/client.h"

namespace rkv::kvctl {

enum class Command {
  kGet, kPut, kDel, kMembers, kStats, kShards, kWhere, kVerify, kDrain, kCoordinators, kForget,
  kTtl, kExpire, kPersist,
};

// A parsed command line (after flags): get|del|where|ttl|persist KEY, put
// KEY [VALUE], expire KEY SECONDS (in value_arg),
// members, shards, verify, stats [SERVER_ID], drain SERVER_ID or forget
// SERVER_ID.
struct Invocation {
  Command command = Command::kGet;
  std::string command_name;
  std::string key;            // raw bytes (decoded when --key_hex)
  bool has_value_arg = false; // put only: VALUE was given (may be "-")
  std::string value_arg;
  std::string server_id;      // stats: empty for every server; drain, forget: the server
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

// A time to live in seconds as put --ttl and expire take it: a decimal
// integer, 0 <= seconds <= 10 years for put --ttl (0: none), any integer
// for expire (0 or less: the key is removed, as Redis's EXPIRE does).
// INVALID_ARGUMENT naming `what` otherwise.
StatusOr<int64_t> ParseSeconds(std::string_view text, std::string_view what);
// The Unix time in milliseconds `seconds` after `now_ms`.
int64_t DeadlineAfter(int64_t now_ms, int64_t seconds);
// kvctl ttl's answer: "none" for kNoExpiry, else the whole seconds left
// (rounded up, at least 0) e.g. "42".
std::string FormatTtl(int64_t expires_at_ms, int64_t now_ms);

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
// ttl: {"key", "expires_at_ms" (0: none), "ttl_seconds" (FormatTtl's, or
// null for none)}.
std::string FormatTtlJson(std::string_view key, int64_t expires_at_ms, int64_t now_ms);
// expire, persist: {"key", "version" (0: the key was removed), "expires_at_ms"}.
std::string FormatExpiryJson(std::string_view key, uint64_t version, int64_t expires_at_ms);

// "512 B", "1.5 KiB", "3.0 GiB".
std::string FormatBytes(uint64_t bytes);

// `kvctl members`: a table with a header row (server, epoch, state,
// address, zone ("-" when unlabelled), primaries, backups, syncing, keys,
// memory used / total), or a JSON array of objects (one per server, all
// MemberInfo fields, then "down_for_ms"), each with a trailing newline.
// The state of a draining server reads "UP,DRAINING" (or
// "DOWN,DRAINING"); a DOWN server whose down_since_unix_ms is known adds
// how long it has been DOWN at `now_unix_ms` (the caller's wall clock):
// "DOWN for 3m12s" (FormatElapsed; 0s when the clocks disagree and the
// time is in the future), and its "down_for_ms" is that many
// milliseconds (null when UP or not known).
std::string FormatMembersText(const std::vector<MemberInfo>& members, uint64_t now_unix_ms);
std::string FormatMembersJson(const std::vector<MemberInfo>& members, uint64_t now_unix_ms);

// A duration for people, in its two largest units: "42s", "3m12s",
// "2h05m", "3d04h" (rounded down).
std::string FormatElapsed(uint64_t ms);

// `kvctl coordinators`: one row per listed coordinator (address, role,
// the leader it knows, map version, etcd revision of its state; an
// unreachable one with its error), then the etcd endpoints' health as the
// first coordinator that answered sees them. `kvctl members` ends with
// FormatCoordinatorsLine: "coordinators: A leader, B standby, C
// unreachable".
std::string FormatCoordinatorsText(const std::vector<CoordinatorInfo>& coordinators);
std::string FormatCoordinatorsJson(const std::vector<CoordinatorInfo>& coordinators);
std::string FormatCoordinatorsLine(const std::vector<CoordinatorInfo>& coordinators);

// `kvctl shards`: a table (shard, primary, backups joined by ',', syncing
// servers likewise, "-" for none; a primary taking over from another
// reads "ID (from OLD)"), one row per shard, then the summary line "N
// shards, R=R, K with fewer than R replicas" (and ", S catching up" when
// any shard has syncing servers); or one JSON object {"map_version",
// "shard_count", "replication_factor", "under_replicated", "shards":
// [{"shard", "primary", "backups": [...], "syncing": [...],
// "handover_from"}]}. A trailing newline either way.
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

// `kvctl stats`. Text: a table of the counters an operator watches
// (SERVER, EPOCH, KEYS, PUTS, DELETES, ERRORS, CONNECTIONS, GETS_BY_CPU,
// HEAP_USED, HEAP_QUARANTINED, HEAP_TOTAL, THREADS, PER_CONNECTION,
// UNWRITTEN; byte counts in FormatBytes' units, "-" for a counter the
// server lacks). JSON: one object per server, {"server_id", "epoch", then
// every counter the server sent, by its name, in its order}, so a new
// counter of the server shows here with no change to kvctl.
std::string FormatStatsText(const std::vector<ServerStatsInfo>& stats);
std::string FormatStatsJson(const std::vector<ServerStatsInfo>& stats);

// `--shards=LIST` of verify: comma-separated shard numbers and ranges
// ("0,3,10-12"), returned ascending without repeats. INVALID_ARGUMENT for
// an empty list or item, a non-number, a reversed range, or a number over
// 2^32 - 1.
StatusOr<std::vector<uint32_t>> ParseShardList(std::string_view list);

// ---- kvctl verify: do the replicas of each shard hold the same records?

// One replica's digest of a shard.
struct ReplicaDigest {
  std::string server_id;
  uint64_t map_version = 0;  // the map the server held when it answered
  ShardChecksumInfo digest;
};

// Whether every replica has the same keys, checksum and max_version.
bool DigestsAgree(const std::vector<ReplicaDigest>& replicas);

// A key whose versions differ between the replicas: versions[i] is its
// version on replica i (0: the replica lacks it).
struct KeyDiff {
  std::string key;
  std::vector<uint64_t> versions;
};

// The keys not held at one version by every listing, ascending by key.
// Listings hold distinct keys each.
std::vector<KeyDiff> DiffListings(const std::vector<std::vector<ShardKeyVersion>>& listings);

// A shard whose replicas still disagreed after the last round.
struct ShardDisagreement {
  uint32_t shard = 0;
  std::vector<ReplicaDigest> replicas;  // the map's order: primary first
  // The replicas answered from different map versions in the last round
  // (the shard may have been moving): a second run may agree.
  bool map_changed = false;
  bool keys_listed = false;       // --keys: key_diffs is filled
  std::vector<KeyDiff> key_diffs;  // versions in `replicas` order
};

struct VerifyReport {
  uint64_t map_version = 0;   // of the client's map in the last round
  uint32_t shards_checked = 0;
  uint32_t single_copy = 0;   // checked shards with one replica: nothing to compare
  int rounds = 0;             // rounds run
  std::vector<ShardDisagreement> disagreeing;  // ascending by shard
};

struct VerifyOptions {
  std::vector<uint32_t> shards;  // ascending; empty: every shard
  int rounds = 5;                // >= 1
  bool list_keys = false;        // --keys
};

// How RunVerify reaches the cluster (kvctl passes a Client's calls).
struct VerifyIo {
  // The cluster map, refreshed from the coordinator.
  std::function<StatusOr<ClusterInfo>()> cluster;
  std::function<StatusOr<ServerShardChecksums>(const std::string& server_id, const std::vector<uint32_t>& shards)>
      checksums;
  std::function<StatusOr<ShardListingInfo>(const std::string& server_id, uint32_t shard)> list;
  std::function<void(int round)> pause;  // before round `round` (2, 3, ...)
  std::function<void(const std::string& line)> progress;  // may be empty
};

// Round 1 asks every replica (ShardInfo::replicas, never syncing servers)
// of every selected shard for its digest (one call per server). A shard
// whose replicas disagree is asked again, after io.pause, in the next
// round, from a freshly fetched map (writes in flight make replicas differ
// for a moment), up to opts.rounds rounds; what disagrees in the last
// round is reported, with its key differences when opts.list_keys.
// INVALID_ARGUMENT for a selected shard not below the shard count; the
// first failed call's error otherwise.
StatusOr<VerifyReport> RunVerify(const VerifyOptions& opts, const VerifyIo& io);

// Text: "verify: all N shards agree (map version V)" or a table (shard,
// server, keys, max version, checksum in hex) of each disagreeing shard,
// its key differences (at most kMaxKeyDiffsShown per shard, then "... and
// K more"), and "verify: K of N shards disagree (map version V)". JSON:
// one object {"map_version", "shards_checked", "single_copy", "rounds",
// "agree", "disagreeing": [{"shard", "map_changed", "replicas":
// [{"server_id", "map_version", "keys", "checksum", "max_version"}],
// "key_diffs": [{"key" (as JsonBytesField), "versions": [...]}]}]}.
inline constexpr size_t kMaxKeyDiffsShown = 20;
std::string FormatVerifyText(const VerifyReport& report);
std::string FormatVerifyJson(const VerifyReport& report);

// ---- kvctl drain

// The roles `server_id` still holds in `cluster`'s shard lists.
struct RolesLeft {
  uint32_t primaries = 0;
  uint32_t backups = 0;
  uint32_t syncing = 0;
  uint32_t total() const { return primaries + backups + syncing; }
};
RolesLeft RolesOf(const ClusterInfo& cluster, std::string_view server_id);
// "P primaries, B backups, S syncing".
std::string FormatRolesLeft(const RolesLeft& left);

// How FollowDrain reaches the cluster and the clock (kvctl passes a
// Client's calls, its deadline and stdout/stderr).
struct DrainIo {
  // The cluster map, refreshed from the coordinator. An error (the
  // coordinator restarting) is reported through `warn` and retried.
  std::function<StatusOr<ClusterInfo>()> cluster;
  std::function<bool()> expired;  // the wait's deadline has passed
  std::function<void()> pause;    // between two looks at the map
  std::function<void(const std::string& line)> log;  // progress
  std::function<void(const Status& error)> warn;     // once per distinct error in a row
};

struct DrainOutcome {
  bool drained = false;      // the server holds no role in the last map seen
  uint64_t map_version = 0;  // of that map (the accepted version when none was seen)
  RolesLeft left;            // what it still held then
};

// Follows the map until `server_id` holds no role (drained) or io.expired()
// after a look (not drained); logs "map version V: ID still holds P
// primaries, B backups, S syncing" on the first look and whenever that
// changes.
DrainOutcome FollowDrain(std::string_view server_id, uint64_t accepted_version, const DrainIo& io);

// One JSON line: {"server_id", "map_version", "roles_to_move", "drained",
// "left": {"primaries", "backups", "syncing"}} (left: what the server held
// in the last map looked at; zeros when none was, as with --nowait).
std::string FormatDrainJson(std::string_view server_id, uint64_t map_version, uint32_t roles_to_move,
                            bool drained, const RolesLeft& left);

// ---- kvctl forget

// Text: "forgot ID: no longer listed (map version V)". JSON: one line
// {"server_id", "map_version"}. A trailing newline either way.
std::string FormatForgetText(std::string_view server_id, uint64_t map_version);
std::string FormatForgetJson(std::string_view server_id, uint64_t map_version);

}  // namespace rkv::kvctl
