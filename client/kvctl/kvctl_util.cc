#include "client/kvctl/kvctl_util.h"

#include <algorithm>
#include <cstdio>
#include <iterator>

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
  } else if (args[0] == "members" || args[0] == "shards") {
    inv.command = args[0] == "members" ? Command::kMembers : Command::kShards;
    if (args.size() > 1) {
      return InvalidArgument(args[0] + ": takes no arguments (" + std::to_string(args.size() - 1) + " given)");
    }
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

}  // namespace

std::string FormatMembersText(const std::vector<MemberInfo>& members) {
  std::vector<std::vector<std::string>> rows;
  rows.push_back({"SERVER", "EPOCH", "STATE", "ADDRESS", "ZONE", "PRIMARIES", "BACKUPS", "KEYS",
                  "MEMORY (USED/TOTAL)"});
  for (const MemberInfo& m : members) {
    rows.push_back({m.server_id, U(m.epoch), m.state, m.data_address, ZoneCell(m.zone), U(m.shards),
                    U(m.backup_shards), U(m.keys), FormatBytes(m.heap_bytes_used) + " / " + FormatBytes(m.heap_bytes)});
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
  rows.push_back({"SHARD", "PRIMARY", "BACKUPS"});
  for (const ShardInfo& s : cluster.shards) {
    std::string backups;
    for (size_t i = 1; i < s.replicas.size(); ++i) backups += (i > 1 ? "," : "") + s.replicas[i];
    rows.push_back({U(s.shard), s.replicas.empty() ? "-" : s.replicas[0], backups.empty() ? "-" : backups});
  }
  return Columns(rows) + U(cluster.shards.size()) + " shards, R=" + U(cluster.replication_factor) + ", " +
         U(UnderReplicatedShards(cluster)) + " with fewer than " + U(cluster.replication_factor) + " replicas\n";
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
    out += "]}";
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

std::string FormatMembersJson(const std::vector<MemberInfo>& members) {
  std::string out = "[";
  for (size_t i = 0; i < members.size(); ++i) {
    const MemberInfo& m = members[i];
    if (i > 0) out += ",";
    out += "{\"server_id\":" + JsonQuote(m.server_id) + ",\"epoch\":" + U(m.epoch) +
           ",\"state\":" + JsonQuote(m.state) + ",\"data_address\":" + JsonQuote(m.data_address) +
           ",\"admin_address\":" + JsonQuote(m.admin_address) + ",\"transport\":" + JsonQuote(m.transport) +
           ",\"shards\":" + U(m.shards) + ",\"keys\":" + U(m.keys) + ",\"heap_bytes_used\":" +
           U(m.heap_bytes_used) + ",\"heap_bytes\":" + U(m.heap_bytes) + ",\"zone\":" + JsonQuote(m.zone) +
           ",\"backup_shards\":" + U(m.backup_shards) + "}";
  }
  return out + "]\n";
}

std::string FormatStatsText(const std::vector<ServerStatsInfo>& stats) {
  std::vector<std::vector<std::string>> rows;
  rows.push_back({"SERVER", "EPOCH", "KEYS", "PUTS", "DELETES", "ERRORS", "CONNECTIONS", "GETS_BY_CPU",
                  "HEAP_USED", "HEAP_QUARANTINED", "HEAP_TOTAL"});
  for (const ServerStatsInfo& s : stats) {
    rows.push_back({s.server_id, U(s.epoch), U(s.keys), U(s.puts), U(s.deletes), U(s.request_errors),
                    U(s.connections), U(s.gets_served_by_cpu), FormatBytes(s.heap_bytes_used),
                    FormatBytes(s.heap_bytes_quarantined), FormatBytes(s.heap_bytes)});
  }
  return Columns(rows);
}

std::string FormatStatsJson(const std::vector<ServerStatsInfo>& stats) {
  std::string out = "[";
  for (size_t i = 0; i < stats.size(); ++i) {
    const ServerStatsInfo& s = stats[i];
    if (i > 0) out += ",";
    out += "{\"server_id\":" + JsonQuote(s.server_id) + ",\"epoch\":" + U(s.epoch) + ",\"keys\":" + U(s.keys) +
           ",\"puts\":" + U(s.puts) + ",\"deletes\":" + U(s.deletes) + ",\"request_errors\":" +
           U(s.request_errors) + ",\"connections\":" + U(s.connections) + ",\"gets_served_by_cpu\":" +
           U(s.gets_served_by_cpu) + ",\"heap_bytes_used\":" + U(s.heap_bytes_used) +
           ",\"heap_bytes_quarantined\":" + U(s.heap_bytes_quarantined) + ",\"heap_bytes\":" + U(s.heap_bytes) +
           "}";
  }
  return out + "]\n";
}

}  // namespace rkv::kvctl
