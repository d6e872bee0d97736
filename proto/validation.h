// Validation of everything the control plane receives from outside: join
// requests, heartbeats and cluster maps. A peer must never be able to make
// the coordinator, a server or a client store or act on a malformed field.
//
// Every function returns OK or INVALID_ARGUMENT with a one-line reason that
// names the field. Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"
#include "proto/rkv.pb.h"

namespace rkv::control {

inline constexpr size_t kMaxServerIdBytes = 64;
inline constexpr size_t kMaxAddressBytes = 262;  // 255-byte host name, ':' and port
inline constexpr uint32_t kMaxShardCount = 65536;
inline constexpr uint32_t kMaxExpectedServers = 4096;
inline constexpr uint32_t kMaxBucketCountLog2 = 40;
inline constexpr uint64_t kMaxGracePeriodUs = 60'000'000;
inline constexpr uint32_t kMaxReplicationFactor = 5;
inline constexpr size_t kMaxZoneBytes = 64;
inline constexpr size_t kMaxReasonBytes = 200;

// 1..64 characters of [A-Za-z0-9._-], starting with a letter or digit.
Status ValidateServerId(std::string_view id);

// "HOST:PORT" or "[V6]:PORT"; HOST of [A-Za-z0-9.-] (or hex digits, ':' and
// '.' inside brackets); PORT 1..65535, or 0 as well when allow_port_zero
// (a listen address).
Status ValidateHostPort(std::string_view address, bool allow_port_zero = false);

// "tcp" or "verbs".
Status ValidateTransportName(std::string_view transport);

// Non-zero length, and addr + length does not wrap around.
Status ValidateRegion(std::string_view field, const v1::RegionDescriptor& region);

// bucket_count_log2 <= 40, heap_size a non-zero multiple of 64 no larger
// than the layout's maximum, max_key_bytes in [1, 65535], max_value_bytes no
// larger than the layout's maximum, grace_period_us in [1, 60 s].
Status ValidateTableParams(const v1::TableParams& table);

// A failure domain label: at most 64 bytes of printable ASCII (0x20..0x7E);
// may be empty (unlabelled).
Status ValidateZone(std::string_view zone);

// Every field of a JoinRequest, and that the regions hold the table: the
// index region at least layout::IndexBytes(1 << bucket_count_log2) bytes,
// the heap region at least heap_size bytes; the zone as ValidateZone.
Status ValidateJoinRequest(const v1::JoinRequest& request);

// The form of a ReportReplicaFailureRequest: reporter id and non-zero
// epoch, a valid backup_id, 1..kMaxShardCount shards (each below
// kMaxShardCount; the coordinator checks them against its shard count),
// and a reason of printable ASCII of at most 200 bytes.
Status ValidateReportReplicaFailure(const v1::ReportReplicaFailureRequest& request);

// The form of a ReportUnresponsiveRequest: server id and non-zero epoch,
// and a reason of printable ASCII of at most 200 bytes.
Status ValidateReportUnresponsive(const v1::ReportUnresponsiveRequest& request);

// The form of a ReportCaughtUpRequest: server id and non-zero epoch,
// 1..kMaxShardCount entries, each with a shard below kMaxShardCount (the
// coordinator checks them against its shard count, and their number
// against it) and a valid primary_id.
Status ValidateReportCaughtUp(const v1::ReportCaughtUpRequest& request);

// The form of a DrainRequest: a valid server id.
Status ValidateDrain(const v1::DrainRequest& request);

// The form of a ForgetRequest: a valid server id.
Status ValidateForget(const v1::ForgetRequest& request);

// A server id and a non-zero epoch.
Status ValidateServerAndEpoch(std::string_view server_id, uint64_t epoch);

// A whole cluster map as a client receives it: shard_count in [1, 65536];
// every server valid (as a JoinRequest would be) with a distinct id and a
// state of UP or DOWN; shard_owner either empty or shard_count ids of
// listed servers, and each server's `shards` exactly the shards naming it.
// Replica sets: replication_factor in [0, 5] and at most expected_servers
// (0: a map from a coordinator older than replication, read as 1, which
// must then carry no shard_replicas, backup_shards nor syncing_shards).
// With R >= 1 and shards assigned, shard_replicas has
// shard_count entries, entry s holding 1..2R distinct listed servers in
// server_ids with shard_owner[s] first, and syncing_ids of listed servers
// distinct from each other and from server_ids, at most 2R members in all
// (R, plus up to R roles in flight: a server catching up before the one
// it replaces leaves); handover_from, when set, is in server_ids and not
// its first. Each server's `backup_shards` is exactly, ascending, the
// shards whose entry lists it in server_ids after the first, and its
// `syncing_shards` exactly the shards whose syncing_ids list it.
// Unassigned: no shard_replicas, backup_shards nor syncing_shards.
Status ValidateClusterMap(const v1::ClusterMap& map);

// The replication factor a valid map means: replication_factor, or 1 for a
// map that predates it (0).
inline uint32_t EffectiveReplicationFactor(const v1::ClusterMap& map) {
  return map.replication_factor() == 0 ? 1 : map.replication_factor();
}

// The most servers one shard may list, replicas and syncing servers
// together, under replication factor `r` (0 read as 1): R copies plus up to
// R roles in flight (a server catching up, or caught up and not yet
// replacing the one it moves from). The one rule ValidateClusterMap,
// Membership and the cluster_map fuzz properties share.
inline uint32_t MaxShardMembers(uint32_t r) { return 2 * (r == 0 ? 1 : r); }

// `text` cut to `max` bytes with non-printable bytes replaced by '?', for
// error messages and logs that quote untrusted input.
std::string Printable(std::string_view text, size_t max = 80);

}  // namespace rkv::control
