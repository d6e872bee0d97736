#include "server/replication/map_policy.h"

#include <gtest/gtest.h>

#include <initializer_list>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/hash.h"
#include "common/layout.h"
#include "common/mutex.h"
#include "proto/validation.h"
#include "server/membership.h"

namespace rkv::server {
namespace {

constexpr uint32_t kShards = 4;

// A map source whose maps the test sets. What the coordinator would answer
// is scripted: `coordinator_map` is what RefreshNow fetches and what
// WaitForVersion learns, as a watch stream would, when asked for a version
// it holds; ReportReplicaFailure answers `report_result`.
class FakeMapSource final : public MapSource {
 public:
  FakeMapSource(std::string id, uint64_t epoch) : id_(std::move(id)), epoch_(epoch) {}

  const std::string& server_id() const override { return id_; }
  uint64_t epoch() const override { return epoch_; }

  std::shared_ptr<const v1::ClusterMap> map() const override EXCLUDES(mu_) {
    MutexLock lock(mu_);
    return map_;
  }

  Status WaitForVersion(uint64_t version, std::chrono::milliseconds timeout) override EXCLUDES(mu_) {
    MutexLock lock(mu_);
    ++waits_;
    if (coordinator_map_ != nullptr && coordinator_map_->version() >= version && deliver_on_wait_) {
      InstallLocked(coordinator_map_);
    }
    if (map_ != nullptr && map_->version() >= version) return Status::Ok();
    return DeadlineExceeded("map version " + std::to_string(version) + " not learned within " +
                            std::to_string(timeout.count()) + " ms");
  }

  Status RefreshNow(std::chrono::milliseconds) override EXCLUDES(mu_) {
    MutexLock lock(mu_);
    ++refreshes_;
    if (!refresh_error_.ok()) return refresh_error_;
    if (coordinator_map_ != nullptr) InstallLocked(coordinator_map_);
    return Status::Ok();
  }

  StatusOr<uint64_t> ReportReplicaFailure(std::string_view backup_id, const std::vector<uint32_t>& shards,
                                          std::string_view reason, std::chrono::milliseconds) override
      EXCLUDES(mu_) {
    MutexLock lock(mu_);
    reports_.push_back(Report{std::string(backup_id), shards, std::string(reason)});
    return report_result_;
  }

  ServerLease lease() const override EXCLUDES(mu_) {
    MutexLock lock(mu_);
    return lease_;
  }
  void SetLease(ServerLease lease) EXCLUDES(mu_) {
    MutexLock lock(mu_);
    lease_ = lease;
  }

  struct Report {
    std::string backup_id;
    std::vector<uint32_t> shards;
    std::string reason;
  };

  void Install(v1::ClusterMap map) EXCLUDES(mu_) {
    MutexLock lock(mu_);
    InstallLocked(std::make_shared<const v1::ClusterMap>(std::move(map)));
  }
  // What the coordinator holds; `deliver_on_wait`: whether a wait learns it
  // (false: only RefreshNow does, as when the watch stream is broken).
  void SetCoordinatorMap(v1::ClusterMap map, bool deliver_on_wait = true) EXCLUDES(mu_) {
    MutexLock lock(mu_);
    coordinator_map_ = std::make_shared<const v1::ClusterMap>(std::move(map));
    deliver_on_wait_ = deliver_on_wait;
  }
  void SetRefreshError(Status s) EXCLUDES(mu_) {
    MutexLock lock(mu_);
    refresh_error_ = std::move(s);
  }
  void SetReportResult(StatusOr<uint64_t> r) EXCLUDES(mu_) {
    MutexLock lock(mu_);
    report_result_ = std::move(r);
  }
  int waits() const EXCLUDES(mu_) {
    MutexLock lock(mu_);
    return waits_;
  }
  int refreshes() const EXCLUDES(mu_) {
    MutexLock lock(mu_);
    return refreshes_;
  }
  std::vector<Report> reports() const EXCLUDES(mu_) {
    MutexLock lock(mu_);
    return reports_;
  }

 private:
  void InstallLocked(std::shared_ptr<const v1::ClusterMap> map) REQUIRES(mu_) {
    if (map_ == nullptr || map->version() > map_->version()) map_ = std::move(map);
  }

  const std::string id_;
  const uint64_t epoch_;
  mutable Mutex mu_;
  std::shared_ptr<const v1::ClusterMap> map_ GUARDED_BY(mu_);
  std::shared_ptr<const v1::ClusterMap> coordinator_map_ GUARDED_BY(mu_);
  bool deliver_on_wait_ GUARDED_BY(mu_) = true;
  Status refresh_error_ GUARDED_BY(mu_);
  StatusOr<uint64_t> report_result_ GUARDED_BY(mu_) = Internal("no report result set");
  int waits_ GUARDED_BY(mu_) = 0;
  int refreshes_ GUARDED_BY(mu_) = 0;
  std::vector<Report> reports_ GUARDED_BY(mu_);
  ServerLease lease_ GUARDED_BY(mu_);
};

struct ServerSpec {
  std::string id;
  uint64_t epoch;
  v1::ServerState state = v1::UP;
};

// A map of `servers` (data address 10.0.0.<i+1>:7700) with kShards shards
// whose replica lists are `replicas` (empty: a legacy map, shard s owned by
// servers[s mod N]; `assigned` false: no assignment yet). It passes the
// checks Membership applies before installing a map.
v1::ClusterMap MakeMap(uint64_t version, const std::vector<ServerSpec>& servers,
                       const std::vector<std::vector<std::string>>& replicas, bool assigned = true) {
  v1::ClusterMap m;
  m.set_version(version);
  m.set_shard_count(kShards);
  m.set_expected_servers(static_cast<uint32_t>(servers.size()));
  size_t r = 1;
  for (const auto& ids : replicas) r = std::max(r, ids.size());
  if (!replicas.empty()) m.set_replication_factor(static_cast<uint32_t>(r));
  for (size_t i = 0; i < servers.size(); ++i) {
    v1::ServerInfo* s = m.add_servers();
    s->set_server_id(servers[i].id);
    s->set_epoch(servers[i].epoch);
    s->set_state(servers[i].state);
    s->set_data_address("10.0.0." + std::to_string(i + 1) + ":7700");
    s->set_admin_address("10.0.0." + std::to_string(i + 1) + ":8700");
    s->set_transport("tcp");
    s->mutable_index()->set_addr(0x100000);
    s->mutable_index()->set_length(layout::IndexBytes(16));
    s->mutable_index()->set_rkey(1);
    s->mutable_heap()->set_addr(0x200000);
    s->mutable_heap()->set_length(1 << 20);
    s->mutable_heap()->set_rkey(2);
    v1::TableParams* t = s->mutable_table();
    t->set_bucket_count_log2(4);
    t->set_hash_seed(7);
    t->set_heap_size(1 << 20);
    t->set_max_key_bytes(1024);
    t->set_max_value_bytes(4096);
    t->set_grace_period_us(100'000);
  }
  if (!assigned) return m;
  for (uint32_t shard = 0; shard < kShards; ++shard) {
    const std::string owner = replicas.empty() ? servers[shard % servers.size()].id : replicas[shard][0];
    m.add_shard_owner(owner);
    for (v1::ServerInfo& s : *m.mutable_servers()) {
      if (s.server_id() == owner) s.add_shards(shard);
    }
    if (!replicas.empty()) {
      v1::ShardReplicas* list = m.add_shard_replicas();
      for (const std::string& id : replicas[shard]) list->add_server_ids(id);
      // Each backup lists the shard in its backup_shards (ValidateClusterMap).
      for (size_t k = 1; k < replicas[shard].size(); ++k) {
        for (v1::ServerInfo& s : *m.mutable_servers()) {
          if (s.server_id() == replicas[shard][k]) s.add_backup_shards(shard);
        }
      }
    }
  }
  return m;
}

// Three servers a, b, c; shard s has primary servers[s mod 3] and the
// other two as backups, in order.
const std::vector<ServerSpec> kThree = {{"a", 11}, {"b", 12}, {"c", 13}};
const std::vector<std::vector<std::string>> kR3 = {
    {"a", "b", "c"}, {"b", "c", "a"}, {"c", "a", "b"}, {"a", "b", "c"}};

// A key whose shard is `shard`.
std::string KeyOfShard(uint32_t shard) {
  for (int i = 0;; ++i) {
    std::string key = "key-" + std::to_string(i);
    if (ShardOf(key, kShards) == shard) return key;
  }
}

bool Contains(const Status& s, const std::string& text) { return s.message().find(text) != std::string::npos; }

TEST(MapPolicyTest, TheTestMapsPassTheMapChecks) {
  for (const v1::ClusterMap& m : {MakeMap(5, kThree, kR3), MakeMap(5, kThree, {}), MakeMap(5, kThree, {}, false)}) {
    EXPECT_TRUE(control::ValidateClusterMap(m).ok()) << control::ValidateClusterMap(m);
    EXPECT_TRUE(CheckReplicaLists(m).ok()) << CheckReplicaLists(m);
  }
}

TEST(MapPolicyTest, ReplicaListsThePolicyCannotUseAreRefused) {
  const auto refused = [](const v1::ClusterMap& m, const std::string& why) {
    const Status s = CheckReplicaLists(m);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << why;
    EXPECT_NE(s.message().find(why), std::string::npos) << s;
  };
  v1::ClusterMap m = MakeMap(5, kThree, kR3);
  m.mutable_shard_replicas()->RemoveLast();
  refused(m, "shard_replicas has 3 entries, not shard_count 4");
  m = MakeMap(5, kThree, kR3);
  m.mutable_shard_replicas(1)->clear_server_ids();
  refused(m, "shard_replicas[1] is empty");
  m = MakeMap(5, kThree, kR3);
  for (const char* id : {"d", "e", "f", "g"}) m.mutable_shard_replicas(1)->add_syncing_ids(id);
  refused(m, "shard_replicas[1] has 7 servers (replicas and syncing), more than twice replication_factor 3");
  m = MakeMap(5, kThree, kR3);
  m.mutable_shard_replicas(1)->add_syncing_ids("c");
  refused(m, "shard_replicas[1] names 'c' twice");
  m = MakeMap(5, kThree, kR3);
  m.mutable_shard_replicas(1)->add_syncing_ids("zz");
  refused(m, "shard_replicas[1] names 'zz', which is not a listed server");
  m = MakeMap(5, kThree, kR3);
  m.mutable_shard_replicas(1)->set_handover_from("b");
  refused(m, "shard_replicas[1] hands over from 'b', which is not one of its backups");
  m = MakeMap(5, kThree, kR3);
  m.mutable_shard_replicas(1)->set_server_ids(2, "zz");
  refused(m, "shard_replicas[1] names 'zz', which is not a listed server");
  m = MakeMap(5, kThree, kR3);
  m.mutable_shard_replicas(1)->set_server_ids(2, "b");
  refused(m, "shard_replicas[1] names 'b' twice");
  m = MakeMap(5, kThree, kR3);
  m.mutable_shard_replicas(1)->set_server_ids(0, "c");
  m.mutable_shard_replicas(1)->set_server_ids(1, "b");
  refused(m, "shard_replicas[1] starts with 'c', not shard_owner 'b'");
  m = MakeMap(5, kThree, kR3);
  m.clear_shard_owner();
  refused(m, "shard_replicas is set but shard_owner is empty");
  m = MakeMap(5, kThree, kR3);
  m.set_replication_factor(control::kMaxExpectedServers + 1);
  refused(m, "replication_factor 4097 is above 4096");
}

TEST(MapPolicyTest, NoSourceOrNoMapOrNoAssignmentIsRefusedForARetry) {
  MapPolicy unattached;
  EXPECT_EQ(unattached.RouteWrite("k").status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(unattached.FindPeer(PeerFingerprint("a"), 11), std::nullopt);
  EXPECT_EQ(unattached.AcceptReplica("a", "k", 0).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(unattached.ReportFailedBackup(0, ReplicaPeer{"b", 12, "10.0.0.2:7700"}, "timeout").code(),
            StatusCode::kUnavailable);

  FakeMapSource source("a", 11);
  MapPolicy policy(&source);
  const StatusOr<WriteRoute> none = policy.RouteWrite("k");
  // Refused as "not the primary", which the client retries.
  EXPECT_EQ(none.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(Contains(none.status(), "not the primary of shard")) << none.status();
  EXPECT_TRUE(Contains(none.status(), "no cluster map yet")) << none.status();
  EXPECT_EQ(none.status().reason(), Reason::kNotPrimary);
  EXPECT_EQ(none.status().map_version(), 0u);

  source.Install(MakeMap(2, {{"a", 11}}, {}, /*assigned=*/false));
  const StatusOr<WriteRoute> unassigned = policy.RouteWrite("k");
  EXPECT_EQ(unassigned.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(Contains(unassigned.status(), "map version 2 assigns no shards yet")) << unassigned.status();
  EXPECT_EQ(unassigned.status().reason(), Reason::kNotPrimary);
  EXPECT_EQ(unassigned.status().map_version(), 2u);
}

TEST(MapPolicyTest, AttachLateThenServes) {
  FakeMapSource source("a", 11);
  source.Install(MakeMap(5, kThree, kR3));
  MapPolicy policy;
  EXPECT_EQ(policy.RouteWrite(KeyOfShard(0)).status().code(), StatusCode::kFailedPrecondition);
  policy.Attach(&source);
  EXPECT_TRUE(policy.RouteWrite(KeyOfShard(0)).ok());
  FakeMapSource other("b", 12);
  policy.Attach(&other);  // ignored
  EXPECT_TRUE(policy.RouteWrite(KeyOfShard(0)).ok());
}

TEST(MapPolicyTest, ThePrimaryRoutesToEveryBackupWithEpochAndAddress) {
  FakeMapSource source("b", 12);
  source.Install(MakeMap(5, kThree, kR3));
  MapPolicy policy(&source);
  const StatusOr<WriteRoute> route = policy.RouteWrite(KeyOfShard(1));
  ASSERT_TRUE(route.ok()) << route.status();
  EXPECT_EQ(route->map_version, 5u);
  EXPECT_EQ(route->shard, 1u);
  ASSERT_EQ(route->backups.size(), 2u);
  EXPECT_EQ(route->backups[0].server_id, "c");
  EXPECT_EQ(route->backups[0].epoch, 13u);
  EXPECT_EQ(route->backups[0].data_address, "10.0.0.3:7700");
  EXPECT_EQ(route->backups[1].server_id, "a");
  EXPECT_EQ(route->backups[1].epoch, 11u);
  EXPECT_EQ(route->backups[1].data_address, "10.0.0.1:7700");
}

// Three servers with R = 2: shard s has primary servers[s mod 3], one
// backup, and the third server catching up on it (syncing).
v1::ClusterMap MakeSyncingMap(uint64_t version) {
  const std::vector<std::vector<std::string>> r2 = {{"a", "b"}, {"b", "c"}, {"c", "a"}, {"a", "b"}};
  v1::ClusterMap m = MakeMap(version, kThree, r2);
  const char* syncing[] = {"c", "a", "b", "c"};
  for (uint32_t shard = 0; shard < kShards; ++shard) {
    m.mutable_shard_replicas(static_cast<int>(shard))->add_syncing_ids(syncing[shard]);
    for (v1::ServerInfo& s : *m.mutable_servers()) {
      if (s.server_id() == syncing[shard]) s.add_syncing_shards(shard);
    }
  }
  return m;
}

TEST(MapPolicyTest, TheSyncingMapPassesTheMapChecks) {
  const v1::ClusterMap m = MakeSyncingMap(5);
  EXPECT_TRUE(CheckReplicaLists(m).ok()) << CheckReplicaLists(m);
}

TEST(MapPolicyTest, ThePrimaryRoutesToItsBackupsThenToTheSyncingServers) {
  FakeMapSource source("b", 12);
  source.Install(MakeSyncingMap(5));
  MapPolicy policy(&source);
  const StatusOr<WriteRoute> route = policy.RouteWrite(KeyOfShard(1));
  ASSERT_TRUE(route.ok()) << route.status();
  ASSERT_EQ(route->backups.size(), 2u);
  EXPECT_EQ(route->backups[0].server_id, "c");
  EXPECT_EQ(route->backups[1].server_id, "a");
  EXPECT_EQ(route->backups[1].epoch, 11u);
  EXPECT_EQ(route->backups[1].data_address, "10.0.0.1:7700");
}

TEST(MapPolicyTest, ASyncingServerAcceptsItsPrimarysForwardsButNoClientWrites) {
  FakeMapSource source("a", 11);
  source.Install(MakeSyncingMap(5));
  MapPolicy policy(&source);
  EXPECT_TRUE(policy.AcceptReplica("b", KeyOfShard(1), 5).ok()) << policy.AcceptReplica("b", KeyOfShard(1), 5);
  const Status wrong = policy.AcceptReplica("c", KeyOfShard(1), 5);
  EXPECT_EQ(wrong.code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(Contains(wrong, "is not the primary of shard 1")) << wrong;
  const Status client = policy.RouteWrite(KeyOfShard(1)).status();
  EXPECT_TRUE(Contains(client, "not the primary of shard 1 in map version 5")) << client;
}

TEST(MapPolicyTest, DuringAHandoverTheNewPrimaryTakesWritesAndForwardsThemToTheOldOne) {
  v1::ClusterMap m = MakeMap(7, kThree, kR3);
  // Shard 1 passes from c to b: b first, c kept as a backup.
  m.mutable_shard_replicas(1)->set_handover_from("c");
  ASSERT_TRUE(CheckReplicaLists(m).ok()) << CheckReplicaLists(m);
  {
    // c is no longer first: it refuses, and the client goes to b.
    FakeMapSource source("c", 13);
    source.Install(m);
    MapPolicy policy(&source);
    const Status s = policy.RouteWrite(KeyOfShard(1)).status();
    EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
    EXPECT_EQ(s.reason(), Reason::kNotPrimary);
    EXPECT_TRUE(Contains(s, "not the primary of shard 1 in map version 7 (its primary is b)")) << s;
    // And it refuses b's forwards only until it has learned the map
    // that makes b the primary: under it, b's forwards are accepted.
    EXPECT_TRUE(policy.AcceptReplica("b", KeyOfShard(1), 7).ok());
  }
  // b takes the write at once and forwards it to every other member, c
  // (the old primary, which clients holding an older lease may still read)
  // among them.
  FakeMapSource source("b", 12);
  source.Install(m);
  MapPolicy policy(&source);
  StatusOr<WriteRoute> route = policy.RouteWrite(KeyOfShard(1));
  ASSERT_TRUE(route.ok()) << route.status();
  std::vector<std::string> to;
  for (const ReplicaPeer& p : route->backups) to.push_back(p.server_id);
  EXPECT_NE(std::find(to.begin(), to.end(), "c"), to.end()) << "the old primary must get every write of the handover";
  // b, now first, refuses a forward from c (a write c took on an older
  // map cannot complete against b).
  const Status from_c = policy.AcceptReplica("c", KeyOfShard(1), 6);
  EXPECT_EQ(from_c.code(), StatusCode::kFailedPrecondition) << from_c;
  EXPECT_TRUE(Contains(from_c, "c is not the primary of shard 1")) << from_c;
}

TEST(MapPolicyTest, ABackupRefusesClientWritesNamingShardVersionAndPrimary) {
  FakeMapSource source("c", 13);
  source.Install(MakeMap(5, kThree, kR3));
  MapPolicy policy(&source);
  const StatusOr<WriteRoute> route = policy.RouteWrite(KeyOfShard(0));
  EXPECT_EQ(route.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(Contains(route.status(), "not the primary of shard 0 in map version 5 (its primary is a)"))
      << route.status();
  EXPECT_EQ(route.status().reason(), Reason::kNotPrimary);
  EXPECT_EQ(route.status().map_version(), 5u);
}

TEST(MapPolicyTest, ADownBackupIsStillRouted) {
  std::vector<ServerSpec> servers = kThree;
  servers[2].state = v1::DOWN;
  FakeMapSource source("a", 11);
  source.Install(MakeMap(6, servers, kR3));
  MapPolicy policy(&source);
  const StatusOr<WriteRoute> route = policy.RouteWrite(KeyOfShard(0));
  ASSERT_TRUE(route.ok()) << route.status();
  ASSERT_EQ(route->backups.size(), 2u);
  EXPECT_EQ(route->backups[1].server_id, "c");
}

TEST(MapPolicyTest, AShardWithItsBackupsTakenOutHasNone) {
  FakeMapSource source("a", 11);
  source.Install(MakeMap(7, kThree, {{"a"}, {"b", "c", "a"}, {"c", "a", "b"}, {"a", "b", "c"}}));
  MapPolicy policy(&source);
  const StatusOr<WriteRoute> route = policy.RouteWrite(KeyOfShard(0));
  ASSERT_TRUE(route.ok()) << route.status();
  EXPECT_TRUE(route->backups.empty());
}

TEST(MapPolicyTest, ALegacyMapMakesTheOwnerTheOnlyReplica) {
  FakeMapSource source("b", 12);
  source.Install(MakeMap(4, kThree, {}));  // shard s owned by kThree[s mod 3]
  MapPolicy policy(&source);
  const StatusOr<WriteRoute> mine = policy.RouteWrite(KeyOfShard(1));
  ASSERT_TRUE(mine.ok()) << mine.status();
  EXPECT_EQ(mine->shard, 1u);
  EXPECT_TRUE(mine->backups.empty());
  const StatusOr<WriteRoute> theirs = policy.RouteWrite(KeyOfShard(0));
  EXPECT_EQ(theirs.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(Contains(theirs.status(), "not the primary of shard 0 in map version 4")) << theirs.status();
  // Nobody is a backup under R = 1.
  EXPECT_EQ(policy.AcceptReplica("a", KeyOfShard(0), 4).code(), StatusCode::kFailedPrecondition);
}

TEST(MapPolicyTest, AMapThatDoesNotListThisIncarnationIsRefusedForARetry) {
  FakeMapSource restarted("a", 21);  // the map still shows epoch 11
  restarted.Install(MakeMap(5, kThree, kR3));
  MapPolicy policy(&restarted);
  const StatusOr<WriteRoute> route = policy.RouteWrite(KeyOfShard(0));
  EXPECT_EQ(route.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(Contains(route.status(), "at epoch 11, not its epoch 21")) << route.status();
  EXPECT_EQ(route.status().reason(), Reason::kNotPrimary);
  EXPECT_EQ(route.status().map_version(), 5u);
  const Status accept = policy.AcceptReplica("b", KeyOfShard(1), 5);
  EXPECT_EQ(accept.code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(Contains(accept, "map version 5")) << accept;

  FakeMapSource stranger("z", 1);
  stranger.Install(MakeMap(5, kThree, kR3));
  MapPolicy unlisted(&stranger);
  EXPECT_EQ(unlisted.RouteWrite(KeyOfShard(0)).status().code(), StatusCode::kFailedPrecondition);
}

TEST(MapPolicyTest, FindPeerAnswersFromTheMapWithoutRefetching) {
  FakeMapSource source("a", 11);
  source.Install(MakeMap(5, kThree, kR3));
  MapPolicy policy(&source);
  EXPECT_EQ(policy.FindPeer(PeerFingerprint("b"), 12), std::optional<std::string>("b"));
  EXPECT_EQ(policy.FindPeer(PeerFingerprint("c"), 13), std::optional<std::string>("c"));
  EXPECT_EQ(source.refreshes(), 0);
}

TEST(MapPolicyTest, FindPeerMissesAfterOneRefetch) {
  FakeMapSource source("a", 11);
  source.Install(MakeMap(5, kThree, kR3));
  source.SetCoordinatorMap(MakeMap(5, kThree, kR3));
  MapPolicy policy(&source);
  EXPECT_EQ(policy.FindPeer(PeerFingerprint("b"), 99), std::nullopt);  // wrong epoch
  EXPECT_EQ(source.refreshes(), 1);
  EXPECT_EQ(policy.FindPeer(PeerFingerprint("nobody"), 12), std::nullopt);
  EXPECT_EQ(source.refreshes(), 2);
  source.SetRefreshError(Unavailable("coordinator down"));
  EXPECT_EQ(policy.FindPeer(PeerFingerprint("b"), 99), std::nullopt);
  EXPECT_EQ(source.refreshes(), 3);
}

TEST(MapPolicyTest, FindPeerFindsARestartedPeerInTheRefetchedMap) {
  FakeMapSource source("a", 11);
  source.Install(MakeMap(5, kThree, kR3));
  // b restarted (epoch 22) and joined again; this server has not seen it.
  source.SetCoordinatorMap(MakeMap(6, {{"a", 11}, {"b", 22}, {"c", 13}}, kR3), /*deliver_on_wait=*/false);
  MapPolicy policy(&source);
  EXPECT_EQ(policy.FindPeer(PeerFingerprint("b"), 22), std::optional<std::string>("b"));
  EXPECT_EQ(source.refreshes(), 1);
  EXPECT_EQ(policy.FindPeer(PeerFingerprint("b"), 12), std::nullopt);  // the old incarnation is gone
}

TEST(MapPolicyTest, FindPeerBeforeAnyMapRefetches) {
  FakeMapSource source("a", 11);
  source.SetCoordinatorMap(MakeMap(5, kThree, kR3));
  MapPolicy policy(&source);
  EXPECT_EQ(policy.FindPeer(PeerFingerprint("c"), 13), std::optional<std::string>("c"));
}

TEST(MapPolicyTest, ABackupAcceptsItsPrimarysForwardsWithoutWaiting) {
  FakeMapSource source("c", 13);
  source.Install(MakeMap(5, kThree, kR3));
  MapPolicy policy(&source);
  EXPECT_TRUE(policy.AcceptReplica("a", KeyOfShard(0), 5).ok());
  EXPECT_TRUE(policy.AcceptReplica("b", KeyOfShard(1), 4).ok());  // an older sender map
  EXPECT_EQ(source.waits(), 0);
}

TEST(MapPolicyTest, ABackupWaitsForTheSendersNewerMapThenAccepts) {
  // In version 5 c is not a replica of shard 0; the coordinator then gave
  // shard 0 the backup c (version 6), and the primary saw it first.
  FakeMapSource source("c", 13);
  source.Install(MakeMap(5, kThree, {{"a", "b"}, {"b", "c", "a"}, {"c", "a", "b"}, {"a", "b", "c"}}));
  source.SetCoordinatorMap(MakeMap(6, kThree, kR3));
  MapPolicy policy(&source);
  const Status s = policy.AcceptReplica("a", KeyOfShard(0), 6);
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ(source.waits(), 1);
  EXPECT_EQ(source.map()->version(), 6u);
}

TEST(MapPolicyTest, ABackupThatNeverLearnsTheSendersMapJudgesByItsOwn) {
  FakeMapSource source("c", 13);
  source.Install(MakeMap(5, kThree, {{"a", "b"}, {"b", "c", "a"}, {"c", "a", "b"}, {"a", "b", "c"}}));
  MapPolicy policy(&source);
  const Status s = policy.AcceptReplica("a", KeyOfShard(0), 6);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(Contains(s, "map version 5: this server (c) is neither a backup of shard 0 nor syncing it")) << s;
  EXPECT_EQ(source.waits(), 1);
}

TEST(MapPolicyTest, ForwardsFromANonPrimaryAreRefusedNamingTheMapVersion) {
  FakeMapSource source("c", 13);
  source.Install(MakeMap(8, kThree, kR3));
  MapPolicy policy(&source);
  const Status from_backup = policy.AcceptReplica("b", KeyOfShard(0), 8);  // b is a backup of shard 0
  EXPECT_EQ(from_backup.code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(Contains(from_backup, "map version 8: b is not the primary of shard 0 (its primary is a)"))
      << from_backup;
  const Status to_primary = policy.AcceptReplica("a", KeyOfShard(2), 8);  // c is shard 2's primary
  EXPECT_EQ(to_primary.code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(Contains(to_primary, "map version 8: a is not the primary of shard 2")) << to_primary;
  const Status stranger = policy.AcceptReplica("x\x01y", KeyOfShard(0), 8);
  EXPECT_EQ(stranger.code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(Contains(stranger, "x?y is not the primary")) << stranger;  // printable
}

TEST(MapPolicyTest, AForwardWithoutAnyMapIsRefusedAsVersionZero) {
  FakeMapSource source("c", 13);
  MapPolicy policy(&source);
  const Status s = policy.AcceptReplica("a", KeyOfShard(0), 3);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(Contains(s, "map version 0")) << s;
  EXPECT_EQ(source.waits(), 1);
}

TEST(MapPolicyTest, AReportedBackupIsOutOnceTheMapWithoutItIsLearned) {
  FakeMapSource source("a", 11);
  source.Install(MakeMap(5, kThree, kR3));
  source.SetReportResult(uint64_t{6});
  source.SetCoordinatorMap(MakeMap(6, kThree, {{"a", "b"}, {"b", "c", "a"}, {"c", "a", "b"}, {"a", "b"}}));
  MapPolicy policy(&source);
  const Status s = policy.ReportFailedBackup(0, ReplicaPeer{"c", 13, "10.0.0.3:7700"}, "no ack in 500 ms");
  EXPECT_TRUE(s.ok()) << s;
  const std::vector<FakeMapSource::Report> reports = source.reports();
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_EQ(reports[0].backup_id, "c");
  // Every shard a leads that lists c, in one report: 0 and 3 (not 1 or 2,
  // which b and c lead).
  EXPECT_EQ(reports[0].shards, (std::vector<uint32_t>{0, 3}));
  EXPECT_EQ(reports[0].reason, "no ack in 500 ms");
  EXPECT_EQ(source.map()->version(), 6u);
  const StatusOr<WriteRoute> route = policy.RouteWrite(KeyOfShard(0));
  ASSERT_TRUE(route.ok()) << route.status();
  ASSERT_EQ(route->backups.size(), 1u);
  EXPECT_EQ(route->backups[0].server_id, "b");
  const StatusOr<WriteRoute> other = policy.RouteWrite(KeyOfShard(3));
  ASSERT_TRUE(other.ok()) << other.status();
  ASSERT_EQ(other->backups.size(), 1u);
  EXPECT_EQ(other->backups[0].server_id, "b");
}

TEST(MapPolicyTest, AReportedBackupIsOutOnceARefetchBringsTheMap) {
  FakeMapSource source("a", 11);
  source.Install(MakeMap(5, kThree, kR3));
  source.SetReportResult(uint64_t{6});
  source.SetCoordinatorMap(MakeMap(6, kThree, kR3), /*deliver_on_wait=*/false);  // the watch is broken
  MapPolicy policy(&source);
  const Status s = policy.ReportFailedBackup(0, ReplicaPeer{"c", 13, "10.0.0.3:7700"}, "refused");
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ(source.refreshes(), 1);
}

TEST(MapPolicyTest, AReportIsNotOkUntilTheMapIsLearned) {
  FakeMapSource source("a", 11);
  source.Install(MakeMap(5, kThree, kR3));
  source.SetReportResult(uint64_t{6});
  source.SetRefreshError(Unavailable("coordinator went away"));
  MapPolicy policy(&source);
  const Status s = policy.ReportFailedBackup(0, ReplicaPeer{"c", 13, "10.0.0.3:7700"}, "refused");
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s;
  EXPECT_TRUE(Contains(s, "map version 6")) << s;

  source.SetRefreshError(Status::Ok());  // the coordinator answers, but with an old map
  source.SetCoordinatorMap(MakeMap(5, kThree, kR3));
  const Status stale = policy.ReportFailedBackup(0, ReplicaPeer{"c", 13, "10.0.0.3:7700"}, "refused");
  EXPECT_EQ(stale.code(), StatusCode::kDeadlineExceeded) << stale;
}

TEST(MapPolicyTest, TheCoordinatorsRefusalOfAReportIsReturned) {
  FakeMapSource source("a", 11);
  source.Install(MakeMap(5, kThree, kR3));
  source.SetReportResult(FailedPrecondition("epoch 11 of a is not current"));
  MapPolicy policy(&source);
  const Status s = policy.ReportFailedBackup(0, ReplicaPeer{"c", 13, "10.0.0.3:7700"}, "refused");
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s;
  EXPECT_EQ(source.waits(), 0);
}

}  // namespace
}  // namespace rkv::server

namespace rkv::server {
namespace {

using std::chrono::steady_clock;

// An hour: far longer than any test runs, so "valid" and "expired" never
// depend on how fast the machine is.
constexpr auto kHour = std::chrono::hours(1);

TEST(MapPolicyLeaseTest, ALeaseIsCountedFromTheSendTimeShortenedByOnePercentAndTenMs) {
  const steady_clock::time_point sent = steady_clock::now() - kHour;
  const ServerLease lease = LeaseFrom(sent, 1000, 7);
  EXPECT_TRUE(lease.enabled);
  EXPECT_EQ(lease.until - sent, std::chrono::milliseconds(980));  // 1000 * 0.99 - 10
  EXPECT_EQ(lease.map_version, 7u);
  EXPECT_EQ(LeaseFrom(sent, 60'000, 7).until - sent, std::chrono::milliseconds(59'390));
  EXPECT_FALSE(LeaseFrom(sent, 0, 7).enabled);
}

TEST(MapPolicyLeaseTest, CheckLeaseIsOkOnlyWhileTheLeaseIsValidOrDisabled) {
  FakeMapSource source("a", 11);
  source.Install(MakeMap(5, kThree, kR3));
  MapPolicy policy(&source);
  // No grant yet.
  Status s = policy.CheckLease();
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_TRUE(Contains(s, "lease on the cluster map expired")) << s;

  source.SetLease(ServerLease{.enabled = true, .until = steady_clock::now() + kHour});
  EXPECT_TRUE(policy.CheckLease().ok());

  source.SetLease(ServerLease{.enabled = true, .until = steady_clock::now() - kHour});
  s = policy.CheckLease();
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_TRUE(Contains(s, "lease on the cluster map expired")) << s;

  // A grant that reported a map this server has not learned yet (it may
  // have been frozen while its shards moved) does not cover the map it
  // holds.
  source.SetLease(ServerLease{.enabled = true, .until = steady_clock::now() + kHour, .map_version = 6});
  s = policy.CheckLease();
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_TRUE(Contains(s, "granted with version 6")) << s;
  source.Install(MakeMap(6, kThree, kR3));
  EXPECT_TRUE(policy.CheckLease().ok());

  // When that map arrives while the check waits for it (the watch is a
  // little behind the heartbeat), the write is not refused.
  source.SetLease(ServerLease{.enabled = true, .until = steady_clock::now() + kHour, .map_version = 7});
  source.SetCoordinatorMap(MakeMap(7, kThree, kR3));
  EXPECT_TRUE(policy.CheckLease().ok());
  EXPECT_EQ(source.map()->version(), 7u);

  // A coordinator without leases: no check, as before leases.
  source.SetLease(ServerLease{.enabled = false, .until = {}});
  EXPECT_TRUE(policy.CheckLease().ok());
}

// A lease about to run out counts as run out for a check with a margin
// (the Applier's route and its wait for a renewal), never for the final
// check; the margin is at most a tenth of the grant.
TEST(MapPolicyLeaseTest, AMarginRefusesALeaseAboutToRunOutAndIsATenthOfTheGrantAtMost) {
  using std::chrono::milliseconds;
  FakeMapSource source("a", 11);
  source.Install(MakeMap(5, kThree, kR3));
  MapPolicy policy(&source);
  // 500 ms left of a 10 s grant: a margin of a second refuses it, one of
  // 10 ms does not, and the final check (no margin) never does.
  source.SetLease(ServerLease{.enabled = true, .until = steady_clock::now() + milliseconds(500),
                              .length = std::chrono::seconds(10)});
  EXPECT_TRUE(policy.CheckLease().ok());
  Status s = policy.CheckLeaseWithMargin(std::chrono::seconds(1));
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_TRUE(Contains(s, "lease on the cluster map runs out in")) << s;
  EXPECT_TRUE(policy.CheckLeaseWithMargin(milliseconds(10)).ok());

  // 500 ms left of a 2 s grant: the margin is 200 ms at most, whatever is
  // asked, so a lease renewed on time is never refused for it.
  source.SetLease(ServerLease{.enabled = true, .until = steady_clock::now() + milliseconds(500),
                              .length = std::chrono::seconds(2)});
  EXPECT_TRUE(policy.CheckLeaseWithMargin(std::chrono::seconds(1)).ok());
  // A grant of unknown length: no margin.
  source.SetLease(ServerLease{.enabled = true, .until = steady_clock::now() + milliseconds(500)});
  EXPECT_TRUE(policy.CheckLeaseWithMargin(std::chrono::seconds(1)).ok());

  // An expired lease is refused as before, margin or not.
  source.SetLease(
      ServerLease{.enabled = true, .until = steady_clock::now() - kHour, .length = std::chrono::seconds(10)});
  s = policy.CheckLeaseWithMargin(std::chrono::seconds(1));
  EXPECT_TRUE(Contains(s, "lease on the cluster map expired")) << s;
  // LeaseFrom records the length it granted.
  EXPECT_EQ(LeaseFrom(steady_clock::now(), 1000, 7).length, milliseconds(980));
}

TEST(MapPolicyLeaseTest, NoSourceMeansNoLease) {
  MapPolicy policy;
  const Status s = policy.CheckLease();
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_TRUE(Contains(s, "lease on the cluster map expired")) << s;
}

TEST(MapPolicyTest, ABackupPromotedByANewMapRoutesTheShardsWrites) {
  FakeMapSource source("b", 12);
  source.Install(MakeMap(5, kThree, kR3));
  MapPolicy policy(&source);
  // Shard 0: primary a, backups b and c.
  EXPECT_EQ(policy.RouteWrite(KeyOfShard(0)).status().code(), StatusCode::kFailedPrecondition);
  // a is DOWN and b promoted: shard 0's list is [b] alone, a keeps its
  // place in the map with none of it.
  std::vector<ServerSpec> servers = kThree;
  servers[0].state = v1::DOWN;
  std::vector<std::vector<std::string>> promoted = kR3;
  promoted[0] = {"b"};
  promoted[3] = {"b"};
  const v1::ClusterMap next = MakeMap(6, servers, promoted);
  ASSERT_TRUE(control::ValidateClusterMap(next).ok()) << control::ValidateClusterMap(next);
  ASSERT_TRUE(CheckReplicaLists(next).ok()) << CheckReplicaLists(next);
  source.Install(next);
  const StatusOr<WriteRoute> route = policy.RouteWrite(KeyOfShard(0));
  ASSERT_TRUE(route.ok()) << route.status();
  EXPECT_EQ(route->map_version, 6u);
  EXPECT_EQ(route->shard, 0u);
  EXPECT_TRUE(route->backups.empty());
  // Its forwards as a backup of shard 0 are no longer accepted from a.
  EXPECT_EQ(policy.AcceptReplica("a", KeyOfShard(0), 6).code(), StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace rkv::server
