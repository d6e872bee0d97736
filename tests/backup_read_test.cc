// Reads of any replica (rkv::ReadFrom::kAnyReplica) against a real
// rkv-coordinator with --replicas=3 and three rkv-servers, so that every
// server holds every shard: such reads return the acknowledged values,
// spread over the primary and the backups, and a backup that dies is read
// around (the call retries on the primary). Runs over the transport named
// by $RKV_TEST_TRANSPORT, like the replication suite.
//
// GETs are one-sided READs that never reach a server's CPU, so the servers
// cannot say who read them; the client counts the attempts it ran on each
// server (ClientTestPeer::AttemptsOn: this suite links librkv's internals,
// rkv_client_internal, which it then uses in place of librkv).
#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "client/client_test_peer.h"
#include "rkv/admin.h"
#include "rkv/client.h"
#include "tests/test_cluster.h"

namespace rkv::testing {
namespace {

constexpr int kServers = 3;

std::string ValueOf(const std::string& key) { return key + "=" + std::string(key.size() % 61, 'v'); }

CallOptions AnyReplica() {
  CallOptions call;
  call.read_from = ReadFrom::kAnyReplica;
  return call;
}

class BackupReadTest : public TestClusterTest {
 protected:
  void SetUp() override {
    TestClusterOptions o;
    o.servers = kServers;
    o.shards = 64;
    o.replicas = 3;
    ASSERT_NO_FATAL_FAILURE(StartCluster(o));
    client_ = cluster().ClusterClient();
    ASSERT_NE(client_, nullptr);
    auto cluster_info = client_->Cluster();
    ASSERT_TRUE(cluster_info.ok()) << cluster_info.status();
    ASSERT_EQ(cluster_info->members.size(), static_cast<size_t>(kServers));
    for (const MemberInfo& m : cluster_info->members) ids_.push_back(m.server_id);
    for (const ShardInfo& s : cluster_info->shards) {
      // R = 3 on three servers: every server is a replica of every shard.
      ASSERT_EQ(s.replicas.size(), static_cast<size_t>(kServers)) << "shard " << s.shard;
      primary_of_shard_.push_back(s.replicas.front());
    }
  }

  // Puts keys "<prefix>-0".. and returns each key's version.
  std::map<std::string, uint64_t> PutKeys(const std::string& prefix, int n) {
    std::map<std::string, uint64_t> versions;
    for (int i = 0; i < n; ++i) {
      const std::string key = prefix + "-" + std::to_string(i);
      auto v = client_->Put(key, ValueOf(key));
      EXPECT_TRUE(v.ok()) << key << ": " << v.status();
      if (v.ok()) versions[key] = *v;
    }
    return versions;
  }

  std::string PrimaryOf(const std::string& key) {
    auto shard = client_->ShardOfKey(key);
    EXPECT_TRUE(shard.ok()) << shard.status();
    return shard.ok() ? primary_of_shard_[*shard] : "";
  }

  std::map<std::string, uint64_t> Attempts() const {
    std::map<std::string, uint64_t> out;
    for (const std::string& id : ids_) out[id] = ClientTestPeer::AttemptsOn(*client_, id);
    return out;
  }

  std::unique_ptr<Client> client_;
  std::vector<std::string> ids_;               // in join order
  std::vector<std::string> primary_of_shard_;  // by shard
};

TEST_F(BackupReadTest, AnyReplicaReadsReturnAcknowledgedValuesAndSpreadOverEveryReplica) {
  const int n = Scaled(200, 30);
  const std::map<std::string, uint64_t> versions = PutKeys("spread", n);
  ASSERT_EQ(versions.size(), static_cast<size_t>(n));

  // Three reads of a key in a row, from one thread, take the three
  // replicas of its shard in turn: each server serves each key once. (A
  // retry would only add attempts, on the primary.)
  const std::map<std::string, uint64_t> before = Attempts();
  for (const auto& [key, version] : versions) {
    for (int r = 0; r < kServers; ++r) {
      auto got = client_->GetVersioned(key, AnyReplica());
      ASSERT_TRUE(got.ok()) << key << ": " << got.status();
      // Acknowledged before the read, and no backup left the set: every
      // replica has it.
      EXPECT_EQ(got->value, ValueOf(key)) << key;
      EXPECT_EQ(got->version, version) << key;
    }
  }
  const std::map<std::string, uint64_t> after = Attempts();
  for (const std::string& id : ids_) {
    EXPECT_GE(after.at(id) - before.at(id), static_cast<uint64_t>(n)) << "server " << id;
  }
  auto absent = client_->Get("spread-never-written", AnyReplica());
  EXPECT_EQ(absent.status().code(), StatusCode::kNotFound) << absent.status();

  // MultiGet reads each shard's keys from one replica, with the same
  // results as Get.
  std::vector<std::string> keys;
  for (const auto& [key, version] : versions) keys.push_back(key);
  keys.push_back("spread-never-written");
  for (int r = 0; r < kServers; ++r) {
    const auto results = client_->MultiGet(keys, AnyReplica());
    ASSERT_EQ(results.size(), keys.size());
    for (size_t i = 0; i + 1 < keys.size(); ++i) {
      ASSERT_TRUE(results[i].ok()) << keys[i] << ": " << results[i].status();
      EXPECT_EQ(*results[i], ValueOf(keys[i])) << keys[i];
    }
    EXPECT_EQ(results.back().status().code(), StatusCode::kNotFound) << results.back().status();
  }
}

TEST_F(BackupReadTest, PrimaryReadsGoToThePrimaryOnly) {
  // Keys of one server's shards: reads of the primary never touch the
  // other two.
  const std::string owner = ids_[0];
  std::vector<std::string> keys;
  for (int i = 0; static_cast<int>(keys.size()) < Scaled(60, 10); ++i) {
    const std::string key = "primary-" + std::to_string(i);
    if (PrimaryOf(key) == owner) keys.push_back(key);
  }
  for (const std::string& key : keys) ASSERT_TRUE(client_->Put(key, ValueOf(key)).ok()) << key;
  const std::map<std::string, uint64_t> before = Attempts();
  for (const std::string& key : keys) {
    auto got = client_->Get(key);
    ASSERT_TRUE(got.ok()) << key << ": " << got.status();
    EXPECT_EQ(*got, ValueOf(key));
  }
  for (const auto& r : client_->MultiGet(keys)) EXPECT_TRUE(r.ok()) << r.status();
  const std::map<std::string, uint64_t> after = Attempts();
  EXPECT_GE(after.at(owner) - before.at(owner), keys.size() + 1);
  for (const std::string& id : ids_) {
    if (id == owner) continue;
    EXPECT_EQ(after.at(id), before.at(id)) << "server " << id << " was read";
  }
  // A read_from that names no ReadFrom is refused before anything is read.
  CallOptions bad;
  bad.read_from = static_cast<ReadFrom>(7);
  EXPECT_EQ(client_->Get(keys[0], bad).status().code(), StatusCode::kInvalidArgument);
  const auto refused = client_->MultiGet(keys, bad);
  ASSERT_EQ(refused.size(), keys.size());
  EXPECT_EQ(refused[0].status().code(), StatusCode::kInvalidArgument) << refused[0].status();
}

TEST_F(BackupReadTest, ABackupThatDiesIsReadAroundOnThePrimary) {
  const int n = Scaled(120, 30);
  const std::map<std::string, uint64_t> versions = PutKeys("dies", n);
  ASSERT_EQ(versions.size(), static_cast<size_t>(n));
  // The victim: server 2. Its own shards become unavailable until a
  // backup is promoted; the keys read here are those of the other shards,
  // for which it is one backup of two.
  std::string victim;
  auto members = ClusterAdmin(*client_).Members();
  ASSERT_TRUE(members.ok()) << members.status();
  for (const MemberInfo& m : *members) {
    if (m.data_address == cluster().server(2).address()) victim = m.server_id;
  }
  ASSERT_FALSE(victim.empty()) << "server 2 (" << cluster().server(2).address() << ") is not in the map";
  std::vector<std::string> keys;
  for (const auto& [key, version] : versions) {
    if (PrimaryOf(key) != victim) keys.push_back(key);
  }
  ASSERT_FALSE(keys.empty());
  // Connect to every replica first, so that reads meet broken connections
  // as well as refused ones.
  for (const std::string& key : keys) {
    for (int r = 0; r < kServers; ++r) ASSERT_TRUE(client_->Get(key, AnyReplica()).ok()) << key;
  }
  ASSERT_GT(ClientTestPeer::AttemptsOn(*client_, victim), 0u);

  cluster().server(2).Kill9();
  // Every read still returns the acknowledged value: a turn that lands on
  // the victim fails there (broken or refused connection, then DOWN in the
  // map and skipped) and is retried on the key's primary.
  for (const std::string& key : keys) {
    for (int r = 0; r < kServers; ++r) {
      auto got = client_->GetVersioned(key, AnyReplica());
      ASSERT_TRUE(got.ok()) << key << ": " << got.status();
      EXPECT_EQ(got->value, ValueOf(key)) << key;
      EXPECT_EQ(got->version, versions.at(key)) << key;
    }
  }
  const auto results = client_->MultiGet(keys, AnyReplica());
  for (size_t i = 0; i < keys.size(); ++i) {
    ASSERT_TRUE(results[i].ok()) << keys[i] << ": " << results[i].status();
    EXPECT_EQ(*results[i], ValueOf(keys[i])) << keys[i];
  }
}

}  // namespace
}  // namespace rkv::testing
