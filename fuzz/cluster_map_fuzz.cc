// Cluster maps (client/cluster_map.h, proto/validation.h
// ValidateClusterMap): what a client or server receives from the
// coordinator and routes every request by, as the bytes of a serialized
// rkv.v1.ClusterMap.
//
// Properties: a table is built only from a map that validates; in a built
// table every shard has an owner among the servers, every key routes to
// one, each server is found by its id, and the smallest limits are those of
// some server; every shard's replica set holds distinct listed servers,
// the owner first as the only primary, and with its syncing servers (none
// of them a replica) at most 2R (R copies plus up to R roles in flight);
// a handover comes from one of its backups; a key's set is its shard's,
// led by the server its data calls go to.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <set>
#include <string>

#include "client/cluster_map.h"
#include "fuzz/fuzz_input.h"
#include "fuzz/quiet_protobuf.h"
#include "proto/rkv.pb.h"
#include "proto/validation.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  rkv::fuzz::QuietProtobuf();
  using namespace rkv;
  v1::ClusterMap map;
  if (!map.ParseFromArray(data, static_cast<int>(size))) return 0;
  const Status valid = control::ValidateClusterMap(map);
  const auto built = client::RoutingTable::Build(map);
  if (!built.ok()) {
    const StatusCode code = built.status().code();
    RKV_FUZZ_CHECK(code == StatusCode::kInvalidArgument || code == StatusCode::kUnavailable);
    RKV_FUZZ_CHECK(valid.ok() == (code == StatusCode::kUnavailable));
    return 0;
  }
  RKV_FUZZ_CHECK(valid.ok());
  const client::RoutingTable& t = **built;
  RKV_FUZZ_CHECK(t.version() == map.version());
  RKV_FUZZ_CHECK(t.shard_count() == map.shard_count() && t.shard_count() >= 1);
  RKV_FUZZ_CHECK(t.servers().size() == static_cast<size_t>(map.servers_size()) && !t.servers().empty());
  RKV_FUZZ_CHECK(t.replication_factor() >= 1 && t.replication_factor() <= control::kMaxReplicationFactor);
  RKV_FUZZ_CHECK(t.replication_factor() == control::EffectiveReplicationFactor(map));
  for (uint32_t s = 0; s < t.shard_count(); ++s) {
    const client::ServerEntry& owner = t.OwnerOfShard(s);
    RKV_FUZZ_CHECK(owner.server_id == map.shard_owner(static_cast<int>(s)));
    RKV_FUZZ_CHECK(t.Find(owner.server_id) == &owner);
    const std::vector<client::ReplicaEntry> replicas = t.ReplicasOfShard(s);
    const std::vector<std::string>& syncing = t.SyncingOfShard(s);
    RKV_FUZZ_CHECK(!replicas.empty() && replicas.size() + syncing.size() <= control::MaxShardMembers(t.replication_factor()));
    RKV_FUZZ_CHECK(replicas[0].server == &owner && replicas[0].role == client::ReplicaRole::kPrimary);
    std::set<const client::ServerEntry*> distinct;
    for (size_t k = 0; k < replicas.size(); ++k) {
      RKV_FUZZ_CHECK(replicas[k].server != nullptr && t.Find(replicas[k].server->server_id) == replicas[k].server);
      RKV_FUZZ_CHECK(k == 0 || replicas[k].role == client::ReplicaRole::kBackup);
      distinct.insert(replicas[k].server);
    }
    RKV_FUZZ_CHECK(distinct.size() == replicas.size());
    for (const std::string& id : syncing) {
      const client::ServerEntry* e = t.Find(id);
      RKV_FUZZ_CHECK(e != nullptr && distinct.insert(e).second);
    }
    const std::string& handover = t.HandoverFromOfShard(s);
    RKV_FUZZ_CHECK(handover.empty() || std::any_of(replicas.begin() + 1, replicas.end(), [&](const client::ReplicaEntry& r) {
                     return r.server->server_id == handover;
                   }));
  }
  for (const client::ServerEntry& e : t.servers()) {
    RKV_FUZZ_CHECK(t.Find(e.server_id) == &e);
    RKV_FUZZ_CHECK(t.min_max_key_bytes() <= e.max_key_bytes && t.min_max_value_bytes() <= e.max_value_bytes);
    RKV_FUZZ_CHECK(control::ValidateServerId(e.server_id).ok());
  }
  RKV_FUZZ_CHECK(std::any_of(t.servers().begin(), t.servers().end(), [&](const client::ServerEntry& e) {
    return e.max_key_bytes == t.min_max_key_bytes();
  }));
  // Keys route to a listed server, the same one by index and by entry.
  for (const std::string& key : {std::string("k"), map.SerializeAsString().substr(0, 16), std::string()}) {
    const size_t i = t.OwnerIndexOf(key);
    RKV_FUZZ_CHECK(i < t.servers().size());
    RKV_FUZZ_CHECK(&t.OwnerOf(key) == &t.servers()[i]);
    const std::vector<client::ReplicaEntry> replicas = t.ReplicasOf(key);
    RKV_FUZZ_CHECK(!replicas.empty() && replicas[0].server == &t.OwnerOf(key));
  }
  return 0;
}
