#include "client/kvctl/kvctl_util.h"

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <iterator>
#include <map>
#include <optional>

namespace rkv::kvctl {

StatusOr<Invocation> ParseInvocation(const std::vector<std::string>& args, bool key_hex) {
  if (args.empty()) return InvalidArgument("no command given");
  Invocation inv;
  inv.command_name = args[0];
  size_t max_args;
  if (args[0] == "get") {
    inv.command = Command::kGet;
    max_args = 2;
  } else if (args[0] == "put") {
    inv.command = Command::kPut;
    max_args = 3;
  } else if (args[0] == "del") {
    inv.command = Command::kDel;
    max_args = 2;
  } else if (args[0] == "where") {
    inv.command = Command::kWhere;
    max_args = 2;
  } else if (args[0] == "ttl" || args[0] == "persist") {
    inv.command = args[0] == "ttl" ? Command::kTtl : Command::kPersist;
    max_args = 2;
  } else if (args[0] == "expire") {
    inv.command = Command::kExpire;
    max_args = 3;
    if (args.size() == 2) return InvalidArgument("expire: missing SECONDS");
  } else if (args[0] == "members" || args[0] == "shards" || args[0] == "coordinators") {
    inv.command = args[0] == "members" ? Command::kMembers
                  : args[0] == "shards" ? Command::kShards
                                        : Command::kCoordinators;
    if (args.size() > 1) {
      return InvalidArgument(args[0] + ": takes no arguments (" + std::to_string(args.size() - 1) + " given)");
    }
    return inv;
  } else if (args[0] == "verify") {
    inv.command = Command::kVerify;
    if (args.size() > 1) {
      return InvalidArgument("verify: takes no arguments (" + std::to_string(args.size() - 1) +
                             " given; shards are chosen with --shards=LIST)");
    }
    return inv;
  } else if (args[0] == "drain") {
    inv.command = Command::kDrain;
    if (args.size() < 2) return InvalidArgument("drain: missing SERVER_ID");
    if (args.size() > 2) {
      return InvalidArgument("drain: too many arguments (" + std::to_string(args.size() - 1) + ")");
    }
    if (args[1].empty()) return InvalidArgument("drain: SERVER_ID is empty");
    inv.server_id = args[1];
    return inv;
  } else if (args[0] == "forget") {
    inv.command = Command::kForget;
    if (args.size() < 2) return InvalidArgument("forget: missing SERVER_ID");
    if (args.size() > 2) {
      return InvalidArgument("forget: too many arguments (" + std::to_string(args.size() - 1) + ")");
    }
    // The id's form (length, characters) is checked by librkv before the
    // call (ClusterAdmin::Forget), as the coordinator checks it.
    if (args[1].empty()) return InvalidArgument("forget: SERVER_ID is empty");
    inv.server_id = args[1];
    return inv;
  } else if (args[0] == "stats") {
    inv.command = Command::kStats;
    if (args.size() > 2) {
      return InvalidArgument("stats: too many arguments (" + std::to_string(args.size() - 1) + ")");
    }
    if (args.size() == 2) {
      if (args[1].empty()) return InvalidArgument("stats: SERVER_ID is empty");
      inv.server_id = args[1];
    }
    return inv;
  } else {
    return InvalidArgument("unknown command '" + args[0] + "'");
  }
  if (args.size() < 2) return InvalidArgument(args[0] + ": missing KEY");
  if (args.size() > max_args) {
    return InvalidArgument(args[0] + ": too many arguments (" + std::to_string(args.size() - 1) + ")");
  }
  if (key_hex) {
    auto key = DecodeHex(args[1]);
    if (!key.ok()) return key.status().WithContext(args[0] + ": KEY");
    inv.key = std::move(*key);
  } else {
    inv.key = args[1];
  }
  if (args.size() == 3) {
    inv.has_value_arg = true;
    inv.value_arg = args[2];
  }
  return inv;
}

StatusOr<ValueSource> ChooseValueSource(const Invocation& inv, bool has_value_file,
                                        bool stdin_is_tty) {
  const bool stdin_asked = inv.has_value_arg && inv.value_arg == "-";
  if (inv.has_value_arg && !stdin_asked) {
    if (has_value_file) return InvalidArgument("put: give either VALUE or --value_file, not both");
    return ValueSource::kArgument;
  }
  if (has_value_file) {
    if (stdin_asked) return InvalidArgument("put: give either '-' (stdin) or --value_file, not both");
    return ValueSource::kFile;
  }
  if (stdin_asked || !stdin_is_tty) return ValueSource::kStdin;
  return InvalidArgument("put: no value: give VALUE, --value_file=FILE, or pipe it to stdin");
}

StatusOr<std::string> DecodeHex(std::string_view hex) {
  if (hex.size() % 2 != 0) return InvalidArgument("hex string of odd length " + std::to_string(hex.size()));
  auto digit = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  std::string out;
  out.reserve(hex.size() / 2);
  for (size_t i = 0; i < hex.size(); i += 2) {
    const int hi = digit(hex[i]);
    const int lo = digit(hex[i + 1]);
    if (hi < 0 || lo < 0) return InvalidArgument("not a hex digit at position " + std::to_string(hi < 0 ? i : i + 1));
    out.push_back(static_cast<char>(hi << 4 | lo));
  }
  return out;
}

bool IsValidUtf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t n;
    uint32_t cp;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      n = 1;
      cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      n = 2;
      cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      n = 3;
      cp = c & 0x07;
    } else {
      return false;
    }
    if (i + n >= s.size()) return false;  // truncated sequence
    for (size_t k = 1; k <= n; ++k) {
      const auto cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xC0) != 0x80) return false;
      cp = cp << 6 | (cc & 0x3F);
    }
    static constexpr uint32_t kMinForLength[] = {0, 0x80, 0x800, 0x10000};
    if (cp < kMinForLength[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += n + 1;
  }
  return true;
}

std::string JsonQuote(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 2);
  out.push_back('"');
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20 || c == 0x7F) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          out += buf;
        } else {
          out.push_back(ch);
        }
    }
  }
  out.push_back('"');
  return out;
}

std::string Base64Encode(std::string_view bytes) {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 3 <= bytes.size(); i += 3) {
    const uint32_t v = static_cast<uint8_t>(bytes[i]) << 16 | static_cast<uint8_t>(bytes[i + 1]) << 8 |
                       static_cast<uint8_t>(bytes[i + 2]);
    out.push_back(kAlphabet[v >> 18 & 63]);
    out.push_back(kAlphabet[v >> 12 & 63]);
    out.push_back(kAlphabet[v >> 6 & 63]);
    out.push_back(kAlphabet[v & 63]);
  }
  const size_t rest = bytes.size() - i;
  if (rest > 0) {
    uint32_t v = static_cast<uint8_t>(bytes[i]) << 16;
    if (rest == 2) v |= static_cast<uint8_t>(bytes[i + 1]) << 8;
    out.push_back(kAlphabet[v >> 18 & 63]);
    out.push_back(kAlphabet[v >> 12 & 63]);
    out.push_back(rest == 2 ? kAlphabet[v >> 6 & 63] : '=');
    out.push_back('=');
  }
  return out;
}

std::string JsonBytesField(std::string_view name, std::string_view bytes) {
  if (IsValidUtf8(bytes)) return JsonQuote(name) + ":" + JsonQuote(bytes);
  return JsonQuote(std::string(name) + "_base64") + ":" + JsonQuote(Base64Encode(bytes));
}

std::string FormatGetJson(std::string_view key, std::string_view value, uint64_t version) {
  return "{" + JsonBytesField("key", key) + "," + JsonBytesField("value", value) +
         ",\"version\":" + std::to_string(version) + "}\n";
}

std::string FormatPutJson(std::string_view key, uint64_t version) {
  return "{" + JsonBytesField("key", key) + ",\"version\":" + std::to_string(version) + "}\n";
}

std::string FormatDelJson(std::string_view key) {
  return "{" + JsonBytesField("key", key) + ",\"deleted\":true}\n";
}

namespace {

// Pads `cells` (rows of equal length) into left-aligned columns two spaces
// apart, one line per row.
std::string Columns(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width;
  for (const auto& row : rows) {
    width.resize(std::max(width.size(), row.size()), 0);
    for (size_t i = 0; i < row.size(); ++i) width[i] = std::max(width[i], row[i].size());
  }
  std::string out;
  for (const auto& row : rows) {
    std::string line;
    for (size_t i = 0; i < row.size(); ++i) {
      line += row[i];
      if (i + 1 < row.size()) line.append(width[i] - row[i].size() + 2, ' ');
    }
    out += line + "\n";
  }
  return out;
}

std::string U(uint64_t v) { return std::to_string(v); }

}  // namespace

std::string FormatBytes(uint64_t bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  if (bytes < 1024) return std::to_string(bytes) + " B";
  double v = static_cast<double>(bytes);
  size_t unit = 0;
  while (v >= 1024 && unit + 1 < std::size(kUnits)) {
    v /= 1024;
    ++unit;
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f %s", v, kUnits[unit]);
  return buf;
}

namespace {

std::string ZoneCell(const std::string& zone) { return zone.empty() ? "-" : zone; }

const MemberInfo* FindMember(const ClusterInfo& cluster, const std::string& id) {
  for (const MemberInfo& m : cluster.members) {
    if (m.server_id == id) return &m;
  }
  return nullptr;
}

// How long `m` has been DOWN at `now_unix_ms`; nullopt when it is UP or
// the time is not known. 0 when `now_unix_ms` is earlier (clocks differ).
std::optional<uint64_t> DownFor(const MemberInfo& m, uint64_t now_unix_ms) {
  if (m.state != "DOWN" || m.down_since_unix_ms == 0) return std::nullopt;
  return now_unix_ms > m.down_since_unix_ms ? now_unix_ms - m.down_since_unix_ms : 0;
}

}  // namespace

std::string FormatElapsed(uint64_t ms) {
  const uint64_t s = ms / 1000;
  char buf[48];
  if (s < 60) {
    std::snprintf(buf, sizeof(buf), "%llus", static_cast<unsigned long long>(s));
  } else if (s < 3600) {
    std::snprintf(buf, sizeof(buf), "%llum%02llus", static_cast<unsigned long long>(s / 60),
                  static_cast<unsigned long long>(s % 60));
  } else if (s < 86400) {
    std::snprintf(buf, sizeof(buf), "%lluh%02llum", static_cast<unsigned long long>(s / 3600),
                  static_cast<unsigned long long>(s / 60 % 60));
  } else {
    std::snprintf(buf, sizeof(buf), "%llud%02lluh", static_cast<unsigned long long>(s / 86400),
                  static_cast<unsigned long long>(s / 3600 % 24));
  }
  return buf;
}

std::string FormatMembersText(const std::vector<MemberInfo>& members, uint64_t now_unix_ms) {
  std::vector<std::vector<std::string>> rows;
  rows.push_back({"SERVER", "EPOCH", "STATE", "ADDRESS", "ZONE", "PRIMARIES", "BACKUPS", "SYNCING", "KEYS",
                  "MEMORY (USED/TOTAL)"});
  for (const MemberInfo& m : members) {
    std::string state = m.draining ? m.state + ",DRAINING" : m.state;
    if (const std::optional<uint64_t> down = DownFor(m, now_unix_ms)) state += " for " + FormatElapsed(*down);
    rows.push_back({m.server_id, U(m.epoch), state, m.data_address,
                    ZoneCell(m.zone), U(m.shards), U(m.backup_shards), U(m.syncing_shards), U(m.keys),
                    FormatBytes(m.heap_bytes_used) + " / " + FormatBytes(m.heap_bytes)});
  }
  return Columns(rows);
}

uint32_t UnderReplicatedShards(const ClusterInfo& cluster) {
  uint32_t n = 0;
  for (const ShardInfo& s : cluster.shards) {
    if (s.replicas.size() < cluster.replication_factor) ++n;
  }
  return n;
}

std::string FormatShardsText(const ClusterInfo& cluster) {
  std::vector<std::vector<std::string>> rows;
  rows.push_back({"SHARD", "PRIMARY", "BACKUPS", "SYNCING"});
  uint32_t catching_up = 0;
  for (const ShardInfo& s : cluster.shards) {
    std::string backups;
    for (size_t i = 1; i < s.replicas.size(); ++i) backups += (i > 1 ? "," : "") + s.replicas[i];
    std::string syncing;
    for (size_t i = 0; i < s.syncing.size(); ++i) syncing += (i > 0 ? "," : "") + s.syncing[i];
    if (!s.syncing.empty()) ++catching_up;
    std::string primary = s.replicas.empty() ? "-" : s.replicas[0];
    if (!s.handover_from.empty()) primary += " (from " + s.handover_from + ")";
    rows.push_back({U(s.shard), primary, backups.empty() ? "-" : backups, syncing.empty() ? "-" : syncing});
  }
  return Columns(rows) + U(cluster.shards.size()) + " shards, R=" + U(cluster.replication_factor) + ", " +
         U(UnderReplicatedShards(cluster)) + " with fewer than " + U(cluster.replication_factor) + " replicas" +
         (catching_up > 0 ? ", " + U(catching_up) + " catching up" : std::string()) + "\n";
}

std::string FormatShardsJson(const ClusterInfo& cluster) {
  std::string out = "{\"map_version\":" + U(cluster.map_version) + ",\"shard_count\":" + U(cluster.shards.size()) +
                    ",\"replication_factor\":" + U(cluster.replication_factor) +
                    ",\"under_replicated\":" + U(UnderReplicatedShards(cluster)) + ",\"shards\":[";
  for (size_t i = 0; i < cluster.shards.size(); ++i) {
    const ShardInfo& s = cluster.shards[i];
    if (i > 0) out += ",";
    out += "{\"shard\":" + U(s.shard) + ",\"primary\":" + JsonQuote(s.replicas.empty() ? "" : s.replicas[0]) +
           ",\"backups\":[";
    for (size_t k = 1; k < s.replicas.size(); ++k) out += (k > 1 ? "," : "") + JsonQuote(s.replicas[k]);
    out += "],\"syncing\":[";
    for (size_t k = 0; k < s.syncing.size(); ++k) out += (k > 0 ? "," : "") + JsonQuote(s.syncing[k]);
    out += "],\"handover_from\":" + JsonQuote(s.handover_from) + "}";
  }
  return out + "]}\n";
}

std::string FormatWhereText(const ClusterInfo& cluster, uint32_t shard) {
  const ShardInfo& s = cluster.shards[shard];
  std::vector<std::vector<std::string>> rows;
  rows.push_back({"SERVER", "ROLE", "STATE", "ADDRESS", "ZONE"});
  for (size_t k = 0; k < s.replicas.size(); ++k) {
    const MemberInfo* m = FindMember(cluster, s.replicas[k]);
    rows.push_back({s.replicas[k], k == 0 ? "primary" : "backup", m != nullptr ? m->state : "?",
                    m != nullptr ? m->data_address : "?", m != nullptr ? ZoneCell(m->zone) : "?"});
  }
  return "shard " + U(shard) + " of " + U(cluster.shards.size()) + ", map version " + U(cluster.map_version) + "\n" +
         Columns(rows);
}

std::string FormatWhereJson(const ClusterInfo& cluster, std::string_view key, uint32_t shard) {
  const ShardInfo& s = cluster.shards[shard];
  std::string out = "{" + JsonBytesField("key", key) + ",\"shard\":" + U(shard) +
                    ",\"map_version\":" + U(cluster.map_version) + ",\"replicas\":[";
  for (size_t k = 0; k < s.replicas.size(); ++k) {
    const MemberInfo* m = FindMember(cluster, s.replicas[k]);
    if (k > 0) out += ",";
    out += "{\"server_id\":" + JsonQuote(s.replicas[k]) + ",\"role\":" + (k == 0 ? "\"primary\"" : "\"backup\"") +
           ",\"state\":" + JsonQuote(m != nullptr ? m->state : "") +
           ",\"data_address\":" + JsonQuote(m != nullptr ? m->data_address : "") +
           ",\"zone\":" + JsonQuote(m != nullptr ? m->zone : "") + "}";
  }
  return out + "]}\n";
}

std::string FormatMembersJson(const std::vector<MemberInfo>& members, uint64_t now_unix_ms) {
  std::string out = "[";
  for (size_t i = 0; i < members.size(); ++i) {
    const MemberInfo& m = members[i];
    if (i > 0) out += ",";
    out += "{\"server_id\":" + JsonQuote(m.server_id) + ",\"epoch\":" + U(m.epoch) +
           ",\"state\":" + JsonQuote(m.state) + ",\"data_address\":" + JsonQuote(m.data_address) +
           ",\"admin_address\":" + JsonQuote(m.admin_address) + ",\"transport\":" + JsonQuote(m.transport) +
           ",\"shards\":" + U(m.shards) + ",\"keys\":" + U(m.keys) + ",\"heap_bytes_used\":" +
           U(m.heap_bytes_used) + ",\"heap_bytes\":" + U(m.heap_bytes) + ",\"zone\":" + JsonQuote(m.zone) +
           ",\"backup_shards\":" + U(m.backup_shards) + ",\"syncing_shards\":" + U(m.syncing_shards) +
           ",\"draining\":" + (m.draining ? "true" : "false") +
           ",\"down_since_unix_ms\":" + U(m.down_since_unix_ms);
    const std::optional<uint64_t> down = DownFor(m, now_unix_ms);
    out += ",\"down_for_ms\":" + (down ? U(*down) : std::string("null")) + "}";
  }
  return out + "]\n";
}

std::string FormatCoordinatorsText(const std::vector<CoordinatorInfo>& coordinators) {
  std::vector<std::vector<std::string>> rows;
  rows.push_back({"COORDINATOR", "ROLE", "LEADER", "MAP VERSION", "STATE REVISION"});
  std::string errors;
  const CoordinatorInfo* seen_etcd = nullptr;
  for (const CoordinatorInfo& c : coordinators) {
    if (!c.reachable) {
      rows.push_back({c.address, "unreachable", "-", "-", "-"});
      errors += c.address + ": " + c.error + "\n";
      continue;
    }
    rows.push_back({c.address, c.role, c.leader.empty() ? "none" : c.leader, U(c.map_version),
                    c.etcd_prefix.empty() ? "-" : std::to_string(c.state_revision)});
    if (seen_etcd == nullptr && !c.etcd.empty()) seen_etcd = &c;
  }
  std::string out = Columns(rows) + errors;
  if (seen_etcd != nullptr) {
    out += "etcd (prefix " + seen_etcd->etcd_prefix + ", as " + seen_etcd->address + " sees it):\n";
    for (const EtcdEndpointInfo& e : seen_etcd->etcd) {
      out += "  " + e.endpoint + ": " +
             (e.healthy ? "healthy, etcd " + e.version + (e.leads_etcd ? ", leads etcd" : "") : "UNHEALTHY: " + e.error) +
             "\n";
    }
  }
  return out;
}

std::string FormatCoordinatorsJson(const std::vector<CoordinatorInfo>& coordinators) {
  std::string out = "[";
  for (size_t i = 0; i < coordinators.size(); ++i) {
    const CoordinatorInfo& c = coordinators[i];
    if (i > 0) out += ",";
    out += "{\"address\":" + JsonQuote(c.address) + ",\"reachable\":" + (c.reachable ? "true" : "false");
    if (!c.reachable) {
      out += ",\"error\":" + JsonQuote(c.error) + "}";
      continue;
    }
    out += ",\"role\":" + JsonQuote(c.role) + ",\"leader\":" + JsonQuote(c.leader) +
           ",\"why_not_leader\":" + JsonQuote(c.why_not_leader) + ",\"map_version\":" + U(c.map_version) +
           ",\"state_revision\":" + std::to_string(c.state_revision) + ",\"etcd_prefix\":" +
           JsonQuote(c.etcd_prefix) + ",\"etcd\":[";
    for (size_t k = 0; k < c.etcd.size(); ++k) {
      const EtcdEndpointInfo& e = c.etcd[k];
      if (k > 0) out += ",";
      out += "{\"endpoint\":" + JsonQuote(e.endpoint) + ",\"healthy\":" + (e.healthy ? "true" : "false") +
             ",\"version\":" + JsonQuote(e.version) + ",\"error\":" + JsonQuote(e.error) +
             ",\"leads_etcd\":" + (e.leads_etcd ? "true" : "false") + "}";
    }
    out += "]}";
  }
  return out + "]\n";
}

std::string FormatCoordinatorsLine(const std::vector<CoordinatorInfo>& coordinators) {
  std::string out = "coordinators:";
  for (size_t i = 0; i < coordinators.size(); ++i) {
    const CoordinatorInfo& c = coordinators[i];
    out += std::string(i > 0 ? "," : "") + " " + c.address + " " + (c.reachable ? c.role : "unreachable");
  }
  return out + "\n";
}

namespace {

// The text table's columns after SERVER and EPOCH: a label and the
// counter it shows (ServerStatsInfo::counters, by name).
struct StatsColumn {
  const char* label;
  const char* counter;
  bool bytes;  // shown with FormatBytes
};
constexpr StatsColumn kStatsColumns[] = {
    {"KEYS", "keys", false},
    {"PUTS", "puts", false},
    {"DELETES", "deletes", false},
    {"ERRORS", "request_errors", false},
    {"CONNECTIONS", "connections", false},
    {"GETS_BY_CPU", "gets_served_by_cpu", false},
    {"HEAP_USED", "heap_bytes_used", true},
    {"HEAP_QUARANTINED", "heap_bytes_quarantined", true},
    {"HEAP_TOTAL", "heap_bytes", true},
    {"THREADS", "polling_threads", false},
    {"PER_CONNECTION", "bytes_per_connection", true},
    {"UNWRITTEN", "store_unwritten_bytes", true},
    // Connections by state beside CONNECTIONS (open now): probing now,
    // released dead since start, requests refused by the listener's check
    // and unchecked for their source's rate since start.
    {"PROBING", "connections_probing", false},
    {"RELEASED_DEAD", "connections_released_dead", false},
    {"SCREENED_OUT", "connect_requests_screened_out", false},
    {"SOURCE_LIMITED", "connect_requests_source_limited", false},
};

}  // namespace

std::string FormatStatsText(const std::vector<ServerStatsInfo>& stats) {
  std::vector<std::vector<std::string>> rows;
  rows.push_back({"SERVER", "EPOCH"});
  for (const StatsColumn& c : kStatsColumns) rows[0].push_back(c.label);
  for (const ServerStatsInfo& s : stats) {
    std::vector<std::string> row = {s.server_id, U(s.epoch)};
    for (const StatsColumn& c : kStatsColumns) {
      const std::optional<uint64_t> v = s.Find(c.counter);
      row.push_back(!v ? "-" : c.bytes ? FormatBytes(*v) : U(*v));
    }
    rows.push_back(std::move(row));
  }
  return Columns(rows);
}

std::string FormatStatsJson(const std::vector<ServerStatsInfo>& stats) {
  std::string out = "[";
  for (size_t i = 0; i < stats.size(); ++i) {
    const ServerStatsInfo& s = stats[i];
    if (i > 0) out += ",";
    out += "{\"server_id\":" + JsonQuote(s.server_id) + ",\"epoch\":" + U(s.epoch);
    for (const StatCounter& c : s.counters) out += "," + JsonQuote(c.name) + ":" + U(c.value);
    out += "}";
  }
  return out + "]\n";
}

StatusOr<std::vector<uint32_t>> ParseShardList(std::string_view list) {
  if (list.empty()) return InvalidArgument("--shards: empty list");
  const auto number = [](std::string_view text, uint32_t* out) {
    if (text.empty() || text.size() > 10) return false;
    uint64_t v = 0;
    for (const char c : text) {
      if (c < '0' || c > '9') return false;
      v = v * 10 + static_cast<uint64_t>(c - '0');
    }
    if (v > UINT32_MAX) return false;
    *out = static_cast<uint32_t>(v);
    return true;
  };
  std::vector<uint32_t> out;
  size_t start = 0;
  while (start <= list.size()) {
    size_t end = list.find(',', start);
    if (end == std::string_view::npos) end = list.size();
    const std::string_view item = list.substr(start, end - start);
    const std::string shown(item);
    if (item.empty()) return InvalidArgument("--shards: empty item in '" + std::string(list) + "'");
    const size_t dash = item.find('-');
    uint32_t first = 0;
    uint32_t last = 0;
    if (dash == std::string_view::npos) {
      if (!number(item, &first)) return InvalidArgument("--shards: '" + shown + "' is not a shard number");
      last = first;
    } else {
      if (!number(item.substr(0, dash), &first) || !number(item.substr(dash + 1), &last)) {
        return InvalidArgument("--shards: '" + shown + "' is not a range FIRST-LAST of shard numbers");
      }
      if (last < first) return InvalidArgument("--shards: range '" + shown + "' ends before it starts");
      if (last - first >= (1u << 20)) return InvalidArgument("--shards: range '" + shown + "' is too long");
    }
    for (uint64_t v = first; v <= last; ++v) out.push_back(static_cast<uint32_t>(v));
    start = end + 1;
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

bool DigestsAgree(const std::vector<ReplicaDigest>& replicas) {
  for (const ReplicaDigest& r : replicas) {
    const ShardChecksumInfo& a = replicas.front().digest;
    if (r.digest.keys != a.keys || r.digest.checksum != a.checksum || r.digest.max_version != a.max_version) {
      return false;
    }
  }
  return true;
}

std::vector<KeyDiff> DiffListings(const std::vector<std::vector<ShardKeyVersion>>& listings) {
  // key -> its version on each listing (0: absent).
  std::map<std::string_view, std::vector<uint64_t>> versions;
  for (size_t i = 0; i < listings.size(); ++i) {
    for (const ShardKeyVersion& r : listings[i]) {
      std::vector<uint64_t>& v = versions[r.key];
      v.resize(listings.size(), 0);
      v[i] = r.version;
    }
  }
  std::vector<KeyDiff> out;
  for (auto& [key, v] : versions) {
    if (std::adjacent_find(v.begin(), v.end(), std::not_equal_to<>()) == v.end()) continue;
    out.push_back(KeyDiff{std::string(key), std::move(v)});
  }
  return out;
}

namespace {

// One round: the digests of `shards` from each of their replicas in
// `cluster`, one call per server. *report gets the shards that disagree.
Status VerifyRound(const ClusterInfo& cluster, const std::vector<uint32_t>& shards, const VerifyIo& io,
                   std::vector<ShardDisagreement>* disagreeing, uint32_t* single_copy) {
  // server -> the shards it is asked about; shard -> its replicas' digests.
  std::map<std::string, std::vector<uint32_t>> asks;
  std::map<uint32_t, std::vector<ReplicaDigest>> digests;
  for (const uint32_t shard : shards) {
    const ShardInfo& info = cluster.shards[shard];
    std::vector<ReplicaDigest>& d = digests[shard];
    for (const std::string& id : info.replicas) {
      asks[id].push_back(shard);
      d.push_back(ReplicaDigest{id, 0, ShardChecksumInfo{shard, 0, 0, 0}});
    }
  }
  size_t asked = 0;
  for (const auto& [server_id, wanted] : asks) {
    auto answer = io.checksums(server_id, wanted);
    if (!answer.ok()) return answer.status();
    std::map<uint32_t, const ShardChecksumInfo*> by_shard;
    for (const ShardChecksumInfo& c : answer->shards) by_shard[c.shard] = &c;
    for (const uint32_t shard : wanted) {
      const auto it = by_shard.find(shard);
      if (it == by_shard.end()) {
        return Internal("server " + server_id + " did not answer for shard " + std::to_string(shard));
      }
      for (ReplicaDigest& d : digests[shard]) {
        if (d.server_id != server_id) continue;
        d.map_version = answer->map_version;
        d.digest = *it->second;
      }
    }
    ++asked;
    if (io.progress) {
      io.progress("verify: " + std::to_string(asked) + " of " + std::to_string(asks.size()) + " servers answered");
    }
  }
  *single_copy = 0;
  for (auto& [shard, d] : digests) {
    if (d.size() <= 1) ++*single_copy;
    if (DigestsAgree(d)) continue;
    ShardDisagreement x;
    x.shard = shard;
    for (const ReplicaDigest& r : d) x.map_changed = x.map_changed || r.map_version != cluster.map_version;
    x.replicas = std::move(d);
    disagreeing->push_back(std::move(x));
  }
  return Status::Ok();
}

std::string Hex64(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

// A key in text output: quoted when it is valid UTF-8 (escapes keep
// control characters off the terminal), else "hex:" and its bytes in hex.
std::string KeyCell(const std::string& key) {
  if (IsValidUtf8(key)) return JsonQuote(key);
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out = "hex:";
  for (const char ch : key) {
    out.push_back(kDigits[static_cast<uint8_t>(ch) >> 4]);
    out.push_back(kDigits[static_cast<uint8_t>(ch) & 15]);
  }
  return out;
}

}  // namespace

StatusOr<VerifyReport> RunVerify(const VerifyOptions& opts, const VerifyIo& io) {
  VerifyReport report;
  std::vector<uint32_t> pending = opts.shards;
  for (int round = 1; round <= std::max(opts.rounds, 1); ++round) {
    if (round > 1 && io.pause) io.pause(round);
    RKV_ASSIGN_OR_RETURN(const ClusterInfo cluster, io.cluster());
    const uint32_t count = static_cast<uint32_t>(cluster.shards.size());
    if (round == 1) {
      if (pending.empty()) {
        for (uint32_t s = 0; s < count; ++s) pending.push_back(s);
      }
      for (const uint32_t s : pending) {
        if (s >= count) {
          return InvalidArgument("--shards: shard " + std::to_string(s) + " is not below the shard count " +
                                 std::to_string(count));
        }
      }
      report.shards_checked = static_cast<uint32_t>(pending.size());
    }
    report.map_version = cluster.map_version;
    report.rounds = round;
    std::vector<ShardDisagreement> disagreeing;
    uint32_t single_copy = 0;
    RKV_RETURN_IF_ERROR(VerifyRound(cluster, pending, io, &disagreeing, &single_copy));
    if (round == 1) report.single_copy = single_copy;
    report.disagreeing = std::move(disagreeing);
    if (report.disagreeing.empty()) break;
    pending.clear();
    for (const ShardDisagreement& d : report.disagreeing) pending.push_back(d.shard);
    if (io.progress && round < opts.rounds) {
      io.progress("verify: round " + std::to_string(round) + ": " + std::to_string(pending.size()) +
                  " shards disagree; asking again");
    }
  }
  if (!opts.list_keys) return report;
  for (ShardDisagreement& d : report.disagreeing) {
    std::vector<std::vector<ShardKeyVersion>> listings;
    for (const ReplicaDigest& r : d.replicas) {
      RKV_ASSIGN_OR_RETURN(ShardListingInfo listing, io.list(r.server_id, d.shard));
      listings.push_back(std::move(listing.records));
    }
    d.key_diffs = DiffListings(listings);
    d.keys_listed = true;
  }
  return report;
}

std::string FormatVerifyText(const VerifyReport& report) {
  const std::string of = " (map version " + U(report.map_version) + ", " + U(report.rounds) +
                         (report.rounds == 1 ? " round" : " rounds") + ")\n";
  if (report.disagreeing.empty()) {
    std::string out = "verify: all " + U(report.shards_checked) + " shards agree" + of;
    if (report.single_copy > 0) out += "(" + U(report.single_copy) + " of them have a single copy)\n";
    return out;
  }
  std::vector<std::vector<std::string>> rows;
  rows.push_back({"SHARD", "SERVER", "MAP", "KEYS", "MAX_VERSION", "CHECKSUM"});
  for (const ShardDisagreement& d : report.disagreeing) {
    for (const ReplicaDigest& r : d.replicas) {
      rows.push_back({U(d.shard), r.server_id, U(r.map_version), U(r.digest.keys), U(r.digest.max_version),
                      Hex64(r.digest.checksum)});
    }
  }
  std::string out = Columns(rows);
  for (const ShardDisagreement& d : report.disagreeing) {
    if (d.map_changed) {
      out += "shard " + U(d.shard) + ": the replicas answered from different map versions (it may be moving)\n";
    }
    if (!d.keys_listed) continue;
    out += "shard " + U(d.shard) + ": " + U(d.key_diffs.size()) +
           (d.key_diffs.size() == 1 ? " key differs" : " keys differ") + " (version on";
    for (const ReplicaDigest& r : d.replicas) out += " " + r.server_id;
    out += "; 0: absent)\n";
    for (size_t i = 0; i < d.key_diffs.size() && i < kMaxKeyDiffsShown; ++i) {
      const KeyDiff& k = d.key_diffs[i];
      out += "  " + KeyCell(k.key);
      for (const uint64_t v : k.versions) out += " " + U(v);
      out += "\n";
    }
    if (d.key_diffs.size() > kMaxKeyDiffsShown) {
      out += "  ... and " + U(d.key_diffs.size() - kMaxKeyDiffsShown) + " more\n";
    }
  }
  return out + "verify: " + U(report.disagreeing.size()) + " of " + U(report.shards_checked) +
         " shards disagree" + of;
}

std::string FormatVerifyJson(const VerifyReport& report) {
  std::string out = "{\"map_version\":" + U(report.map_version) + ",\"shards_checked\":" +
                    U(report.shards_checked) + ",\"single_copy\":" + U(report.single_copy) +
                    ",\"rounds\":" + U(static_cast<uint64_t>(report.rounds)) +
                    ",\"agree\":" + (report.disagreeing.empty() ? "true" : "false") + ",\"disagreeing\":[";
  for (size_t i = 0; i < report.disagreeing.size(); ++i) {
    const ShardDisagreement& d = report.disagreeing[i];
    if (i > 0) out += ",";
    out += "{\"shard\":" + U(d.shard) + ",\"map_changed\":" + (d.map_changed ? "true" : "false") +
           ",\"replicas\":[";
    for (size_t k = 0; k < d.replicas.size(); ++k) {
      const ReplicaDigest& r = d.replicas[k];
      if (k > 0) out += ",";
      out += "{\"server_id\":" + JsonQuote(r.server_id) + ",\"map_version\":" + U(r.map_version) +
             ",\"keys\":" + U(r.digest.keys) + ",\"checksum\":" + U(r.digest.checksum) +
             ",\"max_version\":" + U(r.digest.max_version) + "}";
    }
    out += "]";
    if (d.keys_listed) {
      out += ",\"key_diffs\":[";
      for (size_t k = 0; k < d.key_diffs.size(); ++k) {
        if (k > 0) out += ",";
        out += "{" + JsonBytesField("key", d.key_diffs[k].key) + ",\"versions\":[";
        for (size_t v = 0; v < d.key_diffs[k].versions.size(); ++v) {
          out += (v > 0 ? "," : "") + U(d.key_diffs[k].versions[v]);
        }
        out += "]}";
      }
      out += "]";
    }
    out += "}";
  }
  return out + "]}\n";
}

RolesLeft RolesOf(const ClusterInfo& cluster, std::string_view server_id) {
  RolesLeft left;
  for (const ShardInfo& s : cluster.shards) {
    for (size_t k = 0; k < s.replicas.size(); ++k) {
      if (s.replicas[k] != server_id) continue;
      if (k == 0) {
        ++left.primaries;
      } else {
        ++left.backups;
      }
    }
    for (const std::string& id : s.syncing) {
      if (id == server_id) ++left.syncing;
    }
  }
  return left;
}

std::string FormatRolesLeft(const RolesLeft& left) {
  return U(left.primaries) + (left.primaries == 1 ? " primary, " : " primaries, ") + U(left.backups) +
         (left.backups == 1 ? " backup, " : " backups, ") + U(left.syncing) + " syncing";
}

DrainOutcome FollowDrain(std::string_view server_id, uint64_t accepted_version, const DrainIo& io) {
  DrainOutcome out;
  out.map_version = accepted_version;
  bool shown_any = false;
  RolesLeft shown;
  std::string last_error;
  for (;;) {
    auto info = io.cluster();
    if (info.ok()) {
      last_error.clear();
      out.map_version = info->map_version;
      out.left = RolesOf(*info, server_id);
      if (out.left.total() == 0) {
        out.drained = true;
        return out;
      }
      if (!shown_any || out.left.primaries != shown.primaries || out.left.backups != shown.backups ||
          out.left.syncing != shown.syncing) {
        io.log("map version " + U(out.map_version) + ": " + std::string(server_id) + " still holds " +
               FormatRolesLeft(out.left));
        shown = out.left;
        shown_any = true;
      }
    } else if (info.status().ToString() != last_error) {
      last_error = info.status().ToString();
      io.warn(info.status());
    }
    if (io.expired()) return out;
    io.pause();
  }
}

std::string FormatDrainJson(std::string_view server_id, uint64_t map_version, uint32_t roles_to_move, bool drained,
                            const RolesLeft& left) {
  return "{\"server_id\":" + JsonQuote(server_id) + ",\"map_version\":" + U(map_version) +
         ",\"roles_to_move\":" + U(roles_to_move) + ",\"drained\":" + (drained ? "true" : "false") +
         ",\"left\":{\"primaries\":" + U(left.primaries) + ",\"backups\":" + U(left.backups) +
         ",\"syncing\":" + U(left.syncing) + "}}\n";
}

std::string FormatForgetText(std::string_view server_id, uint64_t map_version) {
  return "forgot " + std::string(server_id) + ": no longer listed (map version " + U(map_version) + ")\n";
}

std::string FormatForgetJson(std::string_view server_id, uint64_t map_version) {
  return "{\"server_id\":" + JsonQuote(server_id) + ",\"map_version\":" + U(map_version) + "}\n";
}

}  // namespace rkv::kvctl
