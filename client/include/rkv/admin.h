// librkv's administration of an rkv cluster: what `kvctl members`,
// `stats`, `verify`, `drain` and `forget` do, for programs that do the
// same.
//
// A ClusterAdmin works through a Client connected to the coordinator
// (ClientOptions::coordinator): it reads that client's cached cluster map
// (Client::Cluster, kept current by its watch) to find each server's Admin
// service, and uses its coordinator connection. One connection serves both
// a program's data calls and its administration:
//   auto client = rkv::Client::Connect(options);   // options.coordinator set
//   if (!client.ok()) return client.status();
//   rkv::ClusterAdmin admin(**client);
//   auto members = admin.Members();
//   auto stats = admin.ServerStats((*members)[0].server_id);
// or, for a program that only administers, ClusterAdmin::Connect(options).
//
// Errors: FAILED_PRECONDITION for a client of one server (no map, no
// coordinator); NOT_FOUND for a server the cached map does not list;
// otherwise the RPC's error, prefixed with the server ("server ID (epoch
// E, HOST:PORT): ") or with the coordinator.
//
// Thread safety: a ClusterAdmin is thread-safe, as its Client is.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "rkv/client.h"
#include "rkv/status.h"

namespace rkv {

// One counter of a server (ClusterAdmin::ServerStats). `name` is stable:
// snake_case, listed once per server, and its meaning never changes once
// released (a server may add counters; an older server lacks the newer
// ones). The list is the server's (ServerCounters in rkv-server's Admin
// service); `kvctl --output=json stats` prints every counter by name.
// Among them: keys, puts, deletes, request_errors, connections,
// gets_served_by_cpu (GET lookups the server CPU answered: a tcp client's
// keys not in its location cache; 0 on verbs, where GETs are one-sided
// reads), heap_bytes,
// heap_bytes_used, heap_bytes_quarantined, polling_threads,
// bytes_per_connection, store_unwritten_writes and store_unwritten_bytes
// (--durability=none's exposure), store_write_stall_micros and
// store_wal_bytes (RocksDB's own work), the catch-up and replication
// counters.
struct StatCounter {
  std::string name;
  uint64_t value = 0;
  std::string help;  // one line for people: what it counts, its unit
};

// A server's counters, from its Admin service.
struct ServerStatsInfo {
  std::string server_id;
  uint64_t epoch = 0;
  std::vector<StatCounter> counters;  // in the server's order

  // The value of the counter named `name`; nullopt when the server has no
  // counter of that name.
  std::optional<uint64_t> Find(std::string_view name) const {
    for (const StatCounter& c : counters) {
      if (c.name == name) return c.value;
    }
    return std::nullopt;
  }
};

// One shard's digest on one server (ClusterAdmin::ShardChecksums): its
// records' count, the sum mod 2^64 of XXH64(key || version as 8
// little-endian bytes || value) over them, and their highest version (0
// when none).
struct ShardChecksumInfo {
  uint32_t shard = 0;
  uint64_t keys = 0;
  uint64_t checksum = 0;
  uint64_t max_version = 0;
};

// A server's answer to ClusterAdmin::ShardChecksums.
struct ServerShardChecksums {
  std::string server_id;
  uint64_t map_version = 0;  // the cluster map the server held when it answered
  std::vector<ShardChecksumInfo> shards;  // ascending
};

// One shard's keys and versions on one server (ClusterAdmin::ListShard).
struct ShardKeyVersion {
  std::string key;
  uint64_t version = 0;
};
struct ShardListingInfo {
  std::string server_id;
  std::vector<ShardKeyVersion> records;  // in the server's table order
  uint64_t snapshot_version = 0;  // the server's highest version when it listed
};

// The coordinator's answer to ClusterAdmin::Drain.
struct DrainInfo {
  uint64_t map_version = 0;
  uint32_t roles_to_move = 0;  // primaries + backups + syncing still on the server
};

// The coordinator's answer to ClusterAdmin::Forget.
struct ForgetInfo {
  uint64_t map_version = 0;  // the first map version that no longer lists the server
};

// One etcd endpoint as a coordinator sees it (CoordinatorInfo::etcd).
struct EtcdEndpointInfo {
  std::string endpoint;
  bool healthy = false;
  std::string version;  // etcd's version, when healthy
  std::string error;    // why not, when not
  bool leads_etcd = false;
};

// One coordinator of the list the client was given (ClusterAdmin::
// Coordinators), as it describes itself.
struct CoordinatorInfo {
  std::string address;  // as listed
  bool reachable = false;
  std::string error;    // when not reachable
  std::string role;     // "leader", "standby" or "single" (the only one, on a data dir)
  std::string leader;   // the leader it knows ("" when none)
  std::string why_not_leader;
  uint64_t map_version = 0;
  int64_t state_revision = 0;  // etcd revision of the state it holds (0 without etcd)
  std::string etcd_prefix;
  std::vector<EtcdEndpointInfo> etcd;
};

class RKV_EXPORT ClusterAdmin {
 public:
  // Connects a Client for administration only (Client::Connect's errors;
  // INVALID_ARGUMENT when options.coordinator is empty) and owns it.
  static StatusOr<std::unique_ptr<ClusterAdmin>> Connect(const ClientOptions& options);

  // Administers through `client`, which must outlive this object. Every
  // call fails with FAILED_PRECONDITION when `client` is a client of one
  // server.
  explicit ClusterAdmin(Client& client);

  ~ClusterAdmin();
  ClusterAdmin(const ClusterAdmin&) = delete;
  ClusterAdmin& operator=(const ClusterAdmin&) = delete;

  // The client it works through (its own after Connect).
  Client& client() const { return *client_; }

  // The servers of the client's cached map, in join order.
  StatusOr<std::vector<MemberInfo>> Members() const;

  // Every coordinator of ClientOptions::coordinator, asked at once what it
  // is (a coordinator that does not answer is listed unreachable, with
  // why). FAILED_PRECONDITION for a client of one server.
  StatusOr<std::vector<CoordinatorInfo>> Coordinators(const CallOptions& call = {});

  // The Admin Stats of server `server_id`: its counters, as it lists
  // them. FAILED_PRECONDITION when the service at its admin address
  // answers as another server; INVALID_ARGUMENT for an answer with a
  // counter whose name is empty or listed twice.
  StatusOr<ServerStatsInfo> ServerStats(std::string_view server_id, const CallOptions& call = {});

  // ---- kvctl verify. Both read one consistent state of the server's
  // table each.
  // The digests of `shards` (empty: every shard the server holds a role
  // in) over the records the server holds. INVALID_ARGUMENT for a shard
  // not below the shard count.
  StatusOr<ServerShardChecksums> ShardChecksums(std::string_view server_id, std::span<const uint32_t> shards,
                                                const CallOptions& call = {});
  // Every key of `shard` the server holds, with its version (no values).
  StatusOr<ShardListingInfo> ListShard(std::string_view server_id, uint32_t shard, const CallOptions& call = {});

  // ---- kvctl drain.
  // Asks the leading coordinator to drain `server_id`: it takes no new role and
  // each of its roles moves to another server (the map shows the
  // progress). The coordinator's error otherwise (NOT_FOUND for a server
  // it does not know, FAILED_PRECONDITION when no other server can take
  // its roles), prefixed with the coordinator.
  StatusOr<DrainInfo> Drain(std::string_view server_id, const CallOptions& call = {});

  // ---- kvctl forget.
  // Asks the leading coordinator to forget `server_id`, a server gone for
  // good: it must be DOWN and hold no role in any shard (failover and
  // re-replication, or a drain, took them). The map then no longer lists
  // it, and a server joining under that id later is a new one.
  // INVALID_ARGUMENT for a malformed id (checked before any call);
  // otherwise the coordinator's error, prefixed with the coordinator:
  // NOT_FOUND for a server it does not know, FAILED_PRECONDITION saying
  // why not (UP, still holding roles, or the cluster would shrink below
  // the coordinator's --servers).
  StatusOr<ForgetInfo> Forget(std::string_view server_id, const CallOptions& call = {});

 private:
  explicit ClusterAdmin(std::unique_ptr<Client> owned);

  std::unique_ptr<Client> owned_;  // set by Connect
  Client* const client_;
};

}  // namespace rkv
