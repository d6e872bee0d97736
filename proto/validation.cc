#include "proto/validation.h"

#include <algorithm>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/layout.h"
#include "common/net_address.h"

namespace rkv::control {
namespace {

bool IsAlnum(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'); }
bool IsHex(char c) { return (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F') || (c >= '0' && c <= '9'); }
bool IsPrintableAscii(std::string_view text) {
  for (char c : text) {
    if (c < 0x20 || c > 0x7E) return false;
  }
  return true;
}

}  // namespace

std::string Printable(std::string_view text, size_t max) {
  std::string out;
  const size_t n = text.size() < max ? text.size() : max;
  out.reserve(n + 3);
  for (size_t i = 0; i < n; ++i) {
    const char c = text[i];
    out.push_back(c >= 0x20 && c < 0x7F ? c : '?');
  }
  if (text.size() > max) out += "...";
  return out;
}

Status ValidateServerId(std::string_view id) {
  if (id.empty()) return InvalidArgument("server_id is empty");
  if (id.size() > kMaxServerIdBytes) {
    return InvalidArgument("server_id '" + Printable(id) + "' is longer than " + std::to_string(kMaxServerIdBytes) +
                           " bytes");
  }
  if (!IsAlnum(id.front())) return InvalidArgument("server_id '" + Printable(id) + "' must start with a letter or digit");
  for (char c : id) {
    if (!IsAlnum(c) && c != '.' && c != '_' && c != '-') {
      return InvalidArgument("server_id '" + Printable(id) + "' may hold only letters, digits, '.', '_' and '-'");
    }
  }
  return Status::Ok();
}

Status ValidateHostPort(std::string_view address, bool allow_port_zero) {
  if (address.empty()) return InvalidArgument("address is empty");
  if (address.size() > kMaxAddressBytes) {
    return InvalidArgument("address '" + Printable(address) + "' is longer than " +
                           std::to_string(kMaxAddressBytes) + " bytes");
  }
  const std::string text(address);
  std::string host;
  uint16_t port = 0;
  RKV_RETURN_IF_ERROR(ParseHostPort(text, &host, &port));
  const bool bracketed = text.front() == '[';
  for (char c : host) {
    const bool ok = bracketed ? (IsHex(c) || c == ':' || c == '.') : (IsAlnum(c) || c == '.' || c == '-');
    if (!ok) return InvalidArgument("address '" + Printable(address) + "' has an invalid host");
  }
  if (port == 0 && !allow_port_zero) return InvalidArgument("address '" + Printable(address) + "' has port 0");
  return Status::Ok();
}

Status ValidateTransportName(std::string_view transport) {
  if (transport == "tcp" || transport == "verbs") return Status::Ok();
  return InvalidArgument("transport '" + Printable(transport) + "' is not 'tcp' or 'verbs'");
}

Status ValidateRegion(std::string_view field, const v1::RegionDescriptor& region) {
  if (region.length() == 0) return InvalidArgument(std::string(field) + ".length is 0");
  if (region.addr() + region.length() < region.addr()) {
    return InvalidArgument(std::string(field) + ": addr " + std::to_string(region.addr()) + " + length " +
                           std::to_string(region.length()) + " wraps around");
  }
  return Status::Ok();
}

Status ValidateTableParams(const v1::TableParams& t) {
  if (t.bucket_count_log2() > kMaxBucketCountLog2) {
    return InvalidArgument("table.bucket_count_log2 " + std::to_string(t.bucket_count_log2()) + " is over " +
                           std::to_string(kMaxBucketCountLog2));
  }
  if (t.heap_size() == 0 || t.heap_size() % layout::kBlockAlign != 0 || t.heap_size() > layout::kMaxHeapBytes) {
    return InvalidArgument("table.heap_size " + std::to_string(t.heap_size()) + " is not a multiple of " +
                           std::to_string(layout::kBlockAlign) + " in [64, " + std::to_string(layout::kMaxHeapBytes) +
                           "]");
  }
  if (t.max_key_bytes() < 1 || t.max_key_bytes() > layout::kMaxKeyBytesLimit) {
    return InvalidArgument("table.max_key_bytes " + std::to_string(t.max_key_bytes()) + " is outside [1, " +
                           std::to_string(layout::kMaxKeyBytesLimit) + "]");
  }
  if (t.max_value_bytes() > layout::kMaxValueBytesLimit) {
    return InvalidArgument("table.max_value_bytes " + std::to_string(t.max_value_bytes()) + " is over " +
                           std::to_string(layout::kMaxValueBytesLimit));
  }
  if (t.grace_period_us() < 1 || t.grace_period_us() > kMaxGracePeriodUs) {
    return InvalidArgument("table.grace_period_us " + std::to_string(t.grace_period_us()) + " is outside [1, " +
                           std::to_string(kMaxGracePeriodUs) + "]");
  }
  return Status::Ok();
}

Status ValidateServerAndEpoch(std::string_view server_id, uint64_t epoch) {
  RKV_RETURN_IF_ERROR(ValidateServerId(server_id));
  if (epoch == 0) return InvalidArgument("epoch is 0");
  return Status::Ok();
}

namespace {

// The fields a JoinRequest and a ServerInfo share.
Status ValidateServerFields(std::string_view id, uint64_t epoch, std::string_view data_address,
                            std::string_view admin_address, std::string_view transport,
                            const v1::RegionDescriptor& index, const v1::RegionDescriptor& heap,
                            const v1::TableParams& table) {
  RKV_RETURN_IF_ERROR(ValidateServerAndEpoch(id, epoch));
  RKV_RETURN_IF_ERROR(ValidateHostPort(data_address).WithContext("data_address"));
  RKV_RETURN_IF_ERROR(ValidateHostPort(admin_address).WithContext("admin_address"));
  RKV_RETURN_IF_ERROR(ValidateTransportName(transport));
  RKV_RETURN_IF_ERROR(ValidateRegion("index", index));
  RKV_RETURN_IF_ERROR(ValidateRegion("heap", heap));
  RKV_RETURN_IF_ERROR(ValidateTableParams(table));
  const uint64_t index_bytes = layout::IndexBytes(uint64_t{1} << table.bucket_count_log2());
  if (index.length() < index_bytes) {
    return InvalidArgument("index.length " + std::to_string(index.length()) + " is below the " +
                           std::to_string(index_bytes) + " bytes of a table with 2^" +
                           std::to_string(table.bucket_count_log2()) + " buckets");
  }
  if (heap.length() < table.heap_size()) {
    return InvalidArgument("heap.length " + std::to_string(heap.length()) + " is below table.heap_size " +
                           std::to_string(table.heap_size()));
  }
  return Status::Ok();
}

}  // namespace

Status ValidateZone(std::string_view zone) {
  if (zone.size() > kMaxZoneBytes) {
    return InvalidArgument("zone '" + Printable(zone) + "' is longer than " + std::to_string(kMaxZoneBytes) + " bytes");
  }
  if (!IsPrintableAscii(zone)) {
    return InvalidArgument("zone '" + Printable(zone) + "' holds a byte that is not printable ASCII");
  }
  return Status::Ok();
}

Status ValidateJoinRequest(const v1::JoinRequest& r) {
  RKV_RETURN_IF_ERROR(ValidateServerFields(r.server_id(), r.epoch(), r.data_address(), r.admin_address(),
                                           r.transport(), r.index(), r.heap(), r.table()));
  return ValidateZone(r.zone());
}

namespace {

// A report's reason: printable ASCII, at most kMaxReasonBytes.
Status ValidateReason(const std::string& reason) {
  if (reason.size() > kMaxReasonBytes) {
    return InvalidArgument("reason is longer than " + std::to_string(kMaxReasonBytes) + " bytes");
  }
  if (!IsPrintableAscii(reason)) {
    return InvalidArgument("reason '" + Printable(reason) + "' holds a byte that is not printable ASCII");
  }
  return Status::Ok();
}

}  // namespace

Status ValidateReportReplicaFailure(const v1::ReportReplicaFailureRequest& r) {
  RKV_RETURN_IF_ERROR(ValidateServerAndEpoch(r.server_id(), r.epoch()));
  RKV_RETURN_IF_ERROR(ValidateServerId(r.backup_id()).WithContext("backup_id"));
  if (r.shards().empty()) return InvalidArgument("shards is empty: name the shards the backup failed");
  if (static_cast<uint32_t>(r.shards_size()) > kMaxShardCount) {
    return InvalidArgument("shards lists " + std::to_string(r.shards_size()) + " shards, more than " +
                           std::to_string(kMaxShardCount));
  }
  for (uint32_t shard : r.shards()) {
    if (shard >= kMaxShardCount) {
      return InvalidArgument("shard " + std::to_string(shard) + " is not below " + std::to_string(kMaxShardCount));
    }
  }
  return ValidateReason(r.reason());
}

Status ValidateReportUnresponsive(const v1::ReportUnresponsiveRequest& r) {
  RKV_RETURN_IF_ERROR(ValidateServerAndEpoch(r.server_id(), r.epoch()));
  return ValidateReason(r.reason());
}

Status ValidateReportCaughtUp(const v1::ReportCaughtUpRequest& r) {
  RKV_RETURN_IF_ERROR(ValidateServerAndEpoch(r.server_id(), r.epoch()));
  if (r.shards().empty()) return InvalidArgument("shards is empty: name the shards caught up on");
  if (static_cast<uint32_t>(r.shards_size()) > kMaxShardCount) {
    return InvalidArgument("shards lists " + std::to_string(r.shards_size()) + " entries, more than " +
                           std::to_string(kMaxShardCount));
  }
  for (const v1::CaughtUpShard& c : r.shards()) {
    if (c.shard() >= kMaxShardCount) {
      return InvalidArgument("shard " + std::to_string(c.shard()) + " is not below " + std::to_string(kMaxShardCount));
    }
    RKV_RETURN_IF_ERROR(
        ValidateServerId(c.primary_id()).WithContext("primary_id of shard " + std::to_string(c.shard())));
  }
  return Status::Ok();
}

Status ValidateDrain(const v1::DrainRequest& r) { return ValidateServerId(r.server_id()); }

Status ValidateForget(const v1::ForgetRequest& r) { return ValidateServerId(r.server_id()); }

namespace {

// The replica lists of a map whose servers and shard_owner are valid.
// `index_of` maps each server id to its index in map.servers().
Status ValidateReplicaSets(const v1::ClusterMap& map,
                           const std::unordered_map<std::string_view, int>& index_of) {
  if (map.replication_factor() > kMaxReplicationFactor) {
    return InvalidArgument("replication_factor " + std::to_string(map.replication_factor()) + " is over " +
                           std::to_string(kMaxReplicationFactor));
  }
  if (map.replication_factor() > map.expected_servers()) {
    return InvalidArgument("replication_factor " + std::to_string(map.replication_factor()) +
                           " is above expected_servers " + std::to_string(map.expected_servers()));
  }
  const bool assigned = map.shard_owner_size() != 0;
  if (map.replication_factor() == 0 || !assigned) {
    // A map older than replication, or one without shards yet: no replica
    // lists at all.
    const std::string kind = assigned ? "with replication_factor 0" : "without a shard assignment";
    if (map.shard_replicas_size() != 0) return InvalidArgument("shard_replicas is not empty in a map " + kind);
    for (const v1::ServerInfo& s : map.servers()) {
      if (s.backup_shards_size() != 0) {
        return InvalidArgument("server '" + s.server_id() + "' lists backup_shards in a map " + kind);
      }
      if (s.syncing_shards_size() != 0) {
        return InvalidArgument("server '" + s.server_id() + "' lists syncing_shards in a map " + kind);
      }
    }
    return Status::Ok();
  }
  if (static_cast<uint32_t>(map.shard_replicas_size()) != map.shard_count()) {
    return InvalidArgument("shard_replicas has " + std::to_string(map.shard_replicas_size()) +
                           " entries, not shard_count " + std::to_string(map.shard_count()));
  }
  // R replicas, and up to R more roles in flight (catching up, or caught up
  // and not yet replaced).
  const uint32_t max_members = MaxShardMembers(map.replication_factor());
  // Each server's backup_shards (syncing_shards) must be exactly, ascending,
  // the shards whose server_ids after the first (syncing_ids) name it.
  std::vector<int> next_backup(map.servers_size(), 0);
  std::vector<int> next_syncing(map.servers_size(), 0);
  std::vector<std::string_view> members;
  for (uint32_t shard = 0; shard < map.shard_count(); ++shard) {
    const v1::ShardReplicas& replicas = map.shard_replicas(static_cast<int>(shard));
    const std::string where = "shard_replicas[" + std::to_string(shard) + "]";
    if (replicas.server_ids_size() < 1 || static_cast<uint32_t>(replicas.server_ids_size()) > max_members) {
      return InvalidArgument(where + " lists " + std::to_string(replicas.server_ids_size()) +
                             " servers, not 1.." + std::to_string(max_members));
    }
    if (static_cast<uint32_t>(replicas.server_ids_size() + replicas.syncing_ids_size()) > max_members) {
      return InvalidArgument(where + " lists " + std::to_string(replicas.server_ids_size()) + " replicas and " +
                             std::to_string(replicas.syncing_ids_size()) + " syncing servers, more than " +
                             std::to_string(max_members) + " in all");
    }
    if (replicas.server_ids(0) != map.shard_owner(static_cast<int>(shard))) {
      return InvalidArgument(where + " starts with '" + Printable(replicas.server_ids(0)) + "', not the owner '" +
                             Printable(map.shard_owner(static_cast<int>(shard))) + "'");
    }
    members.clear();
    const int total = replicas.server_ids_size() + replicas.syncing_ids_size();
    for (int k = 0; k < total; ++k) {
      const bool syncing = k >= replicas.server_ids_size();
      const std::string& id =
          syncing ? replicas.syncing_ids(k - replicas.server_ids_size()) : replicas.server_ids(k);
      const char* list = syncing ? "syncing_ids" : "server_ids";
      if (std::find(members.begin(), members.end(), id) != members.end()) {
        return InvalidArgument(where + " lists '" + Printable(id) + "' twice in server_ids and syncing_ids");
      }
      members.push_back(id);
      const auto it = index_of.find(id);
      if (it == index_of.end()) {
        return InvalidArgument(where + " " + list + " lists '" + Printable(id) + "', not a listed server");
      }
      if (k == 0) continue;
      const v1::ServerInfo& s = map.servers(it->second);
      const auto& shards = syncing ? s.syncing_shards() : s.backup_shards();
      int& n = syncing ? next_syncing[it->second] : next_backup[it->second];
      if (n >= shards.size() || shards.Get(n) != shard) {
        return InvalidArgument("server '" + s.server_id() + "' " + (syncing ? "syncing_shards" : "backup_shards") +
                               " disagree with shard_replicas at shard " + std::to_string(shard));
      }
      ++n;
    }
    if (!replicas.handover_from().empty()) {
      const auto& ids = replicas.server_ids();
      if (std::find(ids.begin() + 1, ids.end(), replicas.handover_from()) == ids.end()) {
        return InvalidArgument(where + " handover_from '" + Printable(replicas.handover_from()) +
                               "' is not one of its backups in server_ids");
      }
    }
  }
  for (int i = 0; i < map.servers_size(); ++i) {
    if (next_backup[i] != map.servers(i).backup_shards_size()) {
      return InvalidArgument("server '" + map.servers(i).server_id() +
                             "' lists backup_shards that shard_replicas do not give it");
    }
    if (next_syncing[i] != map.servers(i).syncing_shards_size()) {
      return InvalidArgument("server '" + map.servers(i).server_id() +
                             "' lists syncing_shards that shard_replicas do not give it");
    }
  }
  return Status::Ok();
}

}  // namespace

Status ValidateClusterMap(const v1::ClusterMap& map) {
  if (map.shard_count() < 1 || map.shard_count() > kMaxShardCount) {
    return InvalidArgument("shard_count " + std::to_string(map.shard_count()) + " is outside [1, " +
                           std::to_string(kMaxShardCount) + "]");
  }
  if (map.expected_servers() < 1 || map.expected_servers() > kMaxExpectedServers) {
    return InvalidArgument("expected_servers " + std::to_string(map.expected_servers()) + " is outside [1, " +
                           std::to_string(kMaxExpectedServers) + "]");
  }
  if (static_cast<uint32_t>(map.servers_size()) > map.expected_servers()) {
    return InvalidArgument("the map lists " + std::to_string(map.servers_size()) + " servers, more than expected_servers " +
                           std::to_string(map.expected_servers()));
  }
  std::unordered_map<std::string_view, int> index_of;
  for (int i = 0; i < map.servers_size(); ++i) {
    const v1::ServerInfo& s = map.servers(i);
    Status st = ValidateServerFields(s.server_id(), s.epoch(), s.data_address(), s.admin_address(), s.transport(),
                                     s.index(), s.heap(), s.table());
    if (!st.ok()) return st.WithContext("servers[" + std::to_string(i) + "]");
    if (s.state() != v1::UP && s.state() != v1::DOWN) {
      return InvalidArgument("servers[" + std::to_string(i) + "] has state " + std::to_string(s.state()) +
                             ", not UP or DOWN");
    }
    if (Status z = ValidateZone(s.zone()); !z.ok()) return z.WithContext("servers[" + std::to_string(i) + "]");
    if (!index_of.emplace(s.server_id(), i).second) {
      return InvalidArgument("server_id '" + s.server_id() + "' is listed twice");
    }
  }
  if (map.shard_owner_size() == 0) {
    for (const v1::ServerInfo& s : map.servers()) {
      if (s.shards_size() != 0) return InvalidArgument("server '" + s.server_id() + "' owns shards of an unassigned map");
    }
    return ValidateReplicaSets(map, index_of);
  }
  if (static_cast<uint32_t>(map.shard_owner_size()) != map.shard_count()) {
    return InvalidArgument("shard_owner has " + std::to_string(map.shard_owner_size()) + " entries, not shard_count " +
                           std::to_string(map.shard_count()));
  }
  // Each server's `shards` must be exactly, in ascending order, the shards
  // whose owner names it.
  std::vector<int> next(map.servers_size(), 0);
  for (uint32_t shard = 0; shard < map.shard_count(); ++shard) {
    auto it = index_of.find(map.shard_owner(static_cast<int>(shard)));
    if (it == index_of.end()) {
      return InvalidArgument("shard " + std::to_string(shard) + " is owned by '" +
                             Printable(map.shard_owner(static_cast<int>(shard))) + "', not a listed server");
    }
    const v1::ServerInfo& s = map.servers(it->second);
    int& k = next[it->second];
    if (k >= s.shards_size() || s.shards(k) != shard) {
      return InvalidArgument("server '" + s.server_id() + "' shards disagree with shard_owner at shard " +
                             std::to_string(shard));
    }
    ++k;
  }
  for (int i = 0; i < map.servers_size(); ++i) {
    if (next[i] != map.servers(i).shards_size()) {
      return InvalidArgument("server '" + map.servers(i).server_id() + "' lists shards it does not own");
    }
  }
  return ValidateReplicaSets(map, index_of);
}

}  // namespace rkv::control
