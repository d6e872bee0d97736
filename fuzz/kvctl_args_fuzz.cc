// kvctl's handling of what a user types and what it prints from servers
// (client/kvctl/kvctl_util.h): command lines, hex keys, value sources, and
// the JSON and text it writes for keys, values, members, shards, where,
// stats, verify, drain and forget (fields that come from servers and the
// coordinator, any bytes), and verify's --shards lists.
//
// Input: a mode byte (low bits: --key_hex, --value_file given, stdin a
// terminal), then NUL-separated strings.
//   mode 0: the strings are the positional arguments;
//   mode 1: the first string is a key or value to print;
//   mode 2: the strings fill MemberInfo and ServerStatsInfo records (those
//           that are valid UTF-8, as protobuf strings are), and shards whose
//           replicas are those servers.
//
// Properties: a parsed command line is one of the documented shapes; hex
// decoding inverts hex encoding; IsValidUtf8 agrees with a reference
// decoder (Unicode's table of well-formed byte sequences); JSON output is
// one line with no raw control character, and its strings are valid UTF-8.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "client/kvctl/kvctl_util.h"
#include "fuzz/fuzz_input.h"

namespace {

using namespace rkv;
using namespace rkv::kvctl;

std::vector<std::string> SplitNul(std::string_view s) {
  std::vector<std::string> out;
  size_t start = 0;
  for (size_t i = 0; i <= s.size(); ++i) {
    if (i == s.size() || s[i] == '\0') {
      out.emplace_back(s.substr(start, i - start));
      start = i + 1;
    }
  }
  return out;
}

// Unicode 15, table 3-7: the well-formed UTF-8 byte sequences.
bool ReferenceUtf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto b = [&](size_t k) { return static_cast<uint8_t>(s[i + k]); };
    const auto in = [](uint8_t v, uint8_t lo, uint8_t hi) { return v >= lo && v <= hi; };
    const uint8_t c = b(0);
    const size_t left = s.size() - i;
    if (c <= 0x7F) {
      i += 1;
    } else if (in(c, 0xC2, 0xDF)) {
      if (left < 2 || !in(b(1), 0x80, 0xBF)) return false;
      i += 2;
    } else if (in(c, 0xE0, 0xEF)) {
      const uint8_t lo = c == 0xE0 ? 0xA0 : 0x80;
      const uint8_t hi = c == 0xED ? 0x9F : 0xBF;
      if (left < 3 || !in(b(1), lo, hi) || !in(b(2), 0x80, 0xBF)) return false;
      i += 3;
    } else if (in(c, 0xF0, 0xF4)) {
      const uint8_t lo = c == 0xF0 ? 0x90 : 0x80;
      const uint8_t hi = c == 0xF4 ? 0x8F : 0xBF;
      if (left < 4 || !in(b(1), lo, hi) || !in(b(2), 0x80, 0xBF) || !in(b(3), 0x80, 0xBF)) return false;
      i += 4;
    } else {
      return false;
    }
  }
  return true;
}

std::string Hex(std::string_view bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  for (const char ch : bytes) {
    const auto c = static_cast<uint8_t>(ch);
    out.push_back(kDigits[c >> 4]);
    out.push_back(kDigits[c & 15]);
  }
  return out;
}

// No raw control character but line ends, valid UTF-8 throughout.
void CheckJsonLines(const std::string& json) {
  RKV_FUZZ_CHECK(ReferenceUtf8(json));
  for (size_t i = 0; i < json.size(); ++i) {
    const auto c = static_cast<uint8_t>(json[i]);
    if (c == '\n') continue;
    RKV_FUZZ_CHECK(c >= 0x20 && c != 0x7F);
  }
}

// `--shards=LIST`: accepted lists come back ascending, without repeats,
// and every number written in the list is in them.
void CheckShardList(const std::string& list) {
  const StatusOr<std::vector<uint32_t>> shards = ParseShardList(list);
  if (!shards.ok()) {
    RKV_FUZZ_CHECK(shards.status().code() == StatusCode::kInvalidArgument);
    return;
  }
  RKV_FUZZ_CHECK(!shards->empty());
  for (size_t i = 1; i < shards->size(); ++i) RKV_FUZZ_CHECK((*shards)[i - 1] < (*shards)[i]);
  for (const char c : list) RKV_FUZZ_CHECK((c >= '0' && c <= '9') || c == ',' || c == '-');
}

void CheckCommandLine(const std::vector<std::string>& args, uint8_t mode) {
  if (!args.empty()) CheckShardList(args[0]);
  const bool key_hex = (mode & 1) != 0;
  const StatusOr<Invocation> inv = ParseInvocation(args, key_hex);
  if (!inv.ok()) {
    RKV_FUZZ_CHECK(inv.status().code() == StatusCode::kInvalidArgument);
    return;
  }
  RKV_FUZZ_CHECK(!args.empty() && inv->command_name == args[0]);
  switch (inv->command) {
    case Command::kGet:
    case Command::kDel:
    case Command::kWhere:
    case Command::kTtl:
    case Command::kPersist:
      RKV_FUZZ_CHECK(args.size() == 2 && !inv->has_value_arg);
      break;
    case Command::kExpire:
      RKV_FUZZ_CHECK(args.size() == 3 && inv->has_value_arg && inv->value_arg == args[2]);
      // What kvctl then does with SECONDS: a number within ten years, or
      // INVALID_ARGUMENT.
      if (const StatusOr<int64_t> s = ParseSeconds(args[2], "SECONDS"); s.ok()) {
        RKV_FUZZ_CHECK(*s >= -int64_t{10} * 366 * 24 * 3600 && *s <= int64_t{10} * 366 * 24 * 3600);
      } else {
        RKV_FUZZ_CHECK(s.status().code() == StatusCode::kInvalidArgument);
      }
      break;
    case Command::kPut:
      RKV_FUZZ_CHECK(args.size() == 2 || args.size() == 3);
      RKV_FUZZ_CHECK(inv->has_value_arg == (args.size() == 3));
      if (inv->has_value_arg) RKV_FUZZ_CHECK(inv->value_arg == args[2]);
      break;
    case Command::kMembers:
    case Command::kShards:
    case Command::kCoordinators:
      RKV_FUZZ_CHECK(args.size() == 1);
      return;
    case Command::kStats:
      RKV_FUZZ_CHECK(args.size() <= 2 && inv->server_id == (args.size() == 2 ? args[1] : ""));
      return;
    case Command::kVerify:
      RKV_FUZZ_CHECK(args.size() == 1);
      return;
    case Command::kDrain:
    case Command::kForget:
      RKV_FUZZ_CHECK(args.size() == 2 && !args[1].empty() && inv->server_id == args[1]);
      return;
  }
  if (key_hex) {
    RKV_FUZZ_CHECK(args[1].size() == 2 * inv->key.size());
    const StatusOr<std::string> again = DecodeHex(args[1]);
    RKV_FUZZ_CHECK(again.ok() && *again == inv->key);
  } else {
    RKV_FUZZ_CHECK(inv->key == args[1]);
  }
  if (inv->command != Command::kPut) return;
  const StatusOr<ValueSource> source = ChooseValueSource(*inv, (mode & 2) != 0, (mode & 4) != 0);
  if (!source.ok()) {
    RKV_FUZZ_CHECK(source.status().code() == StatusCode::kInvalidArgument);
    return;
  }
  if (*source == ValueSource::kArgument) RKV_FUZZ_CHECK(inv->has_value_arg && inv->value_arg != "-");
  if (*source == ValueSource::kFile) RKV_FUZZ_CHECK((mode & 2) != 0 && !inv->has_value_arg);
}

void CheckPrinting(const std::string& bytes) {
  RKV_FUZZ_CHECK(IsValidUtf8(bytes) == ReferenceUtf8(bytes));
  const StatusOr<std::string> back = DecodeHex(Hex(bytes));
  RKV_FUZZ_CHECK(back.ok() && *back == bytes);
  const std::string b64 = Base64Encode(bytes);
  RKV_FUZZ_CHECK(b64.size() == (bytes.size() + 2) / 3 * 4);
  if (IsValidUtf8(bytes)) {
    const std::string q = JsonQuote(bytes);
    RKV_FUZZ_CHECK(q.size() >= 2 && q.front() == '"' && q.back() == '"');
    CheckJsonLines(q);
  }
  CheckJsonLines(FormatGetJson(bytes, bytes, 7));
  CheckJsonLines(FormatPutJson(bytes, 7));
  CheckJsonLines(FormatDelJson(bytes));
  (void)FormatBytes(bytes.size() * 0x9E3779B97F4A7C15ULL);
}

void CheckListings(const std::vector<std::string>& fields) {
  std::vector<MemberInfo> members;
  std::vector<ServerStatsInfo> stats;
  size_t next = 0;
  // These fields arrive as protobuf strings, which parse only as valid
  // UTF-8 (JsonQuote's precondition): other bytes never reach them.
  const auto field = [&]() -> std::string {
    if (next >= fields.size()) return "";
    const std::string& f = fields[next++];
    return ReferenceUtf8(f) ? f : "";
  };
  while (next < fields.size()) {
    MemberInfo m;
    m.server_id = field();
    m.state = field();
    m.data_address = field();
    m.admin_address = field();
    m.transport = field();
    m.zone = field();
    m.backup_shards = static_cast<uint32_t>(m.zone.size());
    m.epoch = m.server_id.size() * 0x123456789ULL;
    m.heap_bytes = m.state.size() * 0xFFFFFFFFFULL;
    // DOWN since before, at or after "now" below (clocks may disagree).
    m.down_since_unix_ms = m.data_address.size() * 0x3FFFFFFFFFFULL;
    members.push_back(m);
    ServerStatsInfo s;
    s.server_id = m.server_id;
    s.epoch = m.epoch;
    s.counters.push_back(StatCounter{"heap_bytes", m.heap_bytes, ""});
    s.counters.push_back(StatCounter{m.state, m.epoch, m.zone});  // a name kvctl does not know
    stats.push_back(s);
  }
  const uint64_t now_unix_ms = 0x3FFFFFFFFFFULL * 4;
  const std::string members_json = FormatMembersJson(members, now_unix_ms);
  const std::string stats_json = FormatStatsJson(stats);
  CheckJsonLines(members_json);
  CheckJsonLines(stats_json);
  (void)FormatMembersText(members, now_unix_ms);
  (void)FormatStatsText(stats);

  // Shard s held by members s, s+1, ... (up to three), in a cluster of R 3.
  ClusterInfo cluster;
  cluster.replication_factor = 3;
  cluster.members = members;
  for (size_t s = 0; s < members.size(); ++s) {
    ShardInfo shard;
    shard.shard = static_cast<uint32_t>(s);
    for (size_t k = 0; k < 3 && k < members.size(); ++k) {
      shard.replicas.push_back(members[(s + k) % members.size()].server_id);
    }
    cluster.shards.push_back(shard);
  }
  RKV_FUZZ_CHECK(UnderReplicatedShards(cluster) == (members.size() < 3 ? members.size() : 0));
  CheckJsonLines(FormatShardsJson(cluster));
  (void)FormatShardsText(cluster);
  for (size_t s = 0; s < cluster.shards.size() && s < 4; ++s) {
    CheckJsonLines(FormatWhereJson(cluster, members[s].server_id, static_cast<uint32_t>(s)));
    (void)FormatWhereText(cluster, static_cast<uint32_t>(s));
  }

  // Shards catching up and handing over, drain progress, and a verify
  // report whose disagreeing shards name these servers and any key bytes
  // (keys are not protobuf strings: they may be anything).
  VerifyReport report;
  report.shards_checked = static_cast<uint32_t>(cluster.shards.size());
  for (size_t s = 0; s < cluster.shards.size(); ++s) {
    ShardInfo& shard = cluster.shards[s];
    shard.syncing.push_back(members[(s + 1) % members.size()].server_id);
    if (s % 2 == 1) shard.handover_from = members[s].server_id;
    const RolesLeft left = RolesOf(cluster, members[s].server_id);
    RKV_FUZZ_CHECK(left.total() >= 1);
    CheckJsonLines(FormatDrainJson(members[s].server_id, s, left.total(), false, left));
    CheckJsonLines(FormatForgetJson(members[s].server_id, s));
    ShardDisagreement d;
    d.shard = shard.shard;
    std::vector<std::vector<ShardKeyVersion>> listings;
    for (const std::string& id : shard.replicas) {
      d.replicas.push_back(ReplicaDigest{id, s, ShardChecksumInfo{shard.shard, s, s * 0x9E3779B97F4A7C15ULL, s}});
      listings.push_back({ShardKeyVersion{fields[s % fields.size()], listings.size() + 1}});
    }
    d.key_diffs = DiffListings(listings);
    RKV_FUZZ_CHECK(d.key_diffs.size() == (listings.size() > 1 ? 1u : 0u));
    d.keys_listed = true;
    report.disagreeing.push_back(std::move(d));
  }
  CheckJsonLines(FormatShardsJson(cluster));
  (void)FormatShardsText(cluster);
  CheckJsonLines(FormatVerifyJson(report));
  (void)FormatVerifyText(report);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::FuzzInput in(data, size);
  const uint8_t mode = in.Take<uint8_t>();
  const std::vector<std::string> strings = SplitNul(fuzz::AsText(in.Rest()));
  switch ((mode >> 3) % 3) {
    case 0: CheckCommandLine(strings, mode); break;
    case 1: CheckPrinting(strings[0]); break;
    default: CheckListings(strings); break;
  }
  return 0;
}
