// The replication suite: a real rkv-coordinator with --replicas=R and three
// rkv-servers. Every acknowledged write must be on every replica of its
// shard, with the version the primary gave it; a backup that dies is taken
// out of the replica sets and writes go on without it; losing a server and
// its disk loses nothing that was acknowledged. Runs over the transport
// named by $RKV_TEST_TRANSPORT, like the cluster suite.
//
// Each server is also read directly, by a client of that one server: GETs
// are one-sided reads of the server's own table, so they show exactly what
// that replica holds.
#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <cstring>
#include <span>

#include <gtest/gtest.h>

#include "common/connect_handshake.h"
#include "common/layout.h"
#include "common/protocol.h"
#include "common/token.h"
#include "common/transport/factory.h"
#include "common/transport/transport.h"
#include "rkv/client.h"
#include "server/replication/replication.h"
#include "tests/test_cluster.h"
#include "tests/wait_for.h"

namespace rkv::testing {
namespace {

constexpr int kServers = 3;

std::string ValueFor(const std::string& key, uint64_t generation) {
  return key + "#" + std::to_string(generation) + "#" + std::string(generation % 97, 'v');
}

class ReplicationTest : public TestClusterTest {
 protected:
  void StartCluster(int replicas) {
    TestClusterOptions o;
    o.servers = kServers;
    o.shards = 256;
    o.replicas = replicas;
    ASSERT_NO_FATAL_FAILURE(TestClusterTest::StartCluster(o));
  }

  std::unique_ptr<Client> ClusterClient(std::chrono::milliseconds timeout = kCallTimeout) {
    return cluster().ClusterClient(TestClientOptions(timeout));
  }
  // A client of server i alone: its GETs read that server's table.
  std::unique_ptr<Client> DirectClient(int i) { return cluster().DirectClient(i); }
  CommandResult Kvctl(const std::vector<std::string>& args) { return cluster().Kvctl(args); }
};

TEST_F(ReplicationTest, EveryAcknowledgedWriteIsOnEveryReplicaWithItsVersion) {
  ASSERT_NO_FATAL_FAILURE(StartCluster(3));
  auto client = ClusterClient();
  ASSERT_NE(client, nullptr);
  const int n = Scaled(600, 60);
  std::map<std::string, VersionedValue> expected;
  for (int i = 0; i < n; ++i) {
    const std::string key = "r3-" + std::to_string(i);
    ASSERT_TRUE(client->Put(key, ValueFor(key, 1)).ok()) << key;
  }
  // Overwrite a third and delete another third: both travel to the backups.
  for (int i = 0; i < n; i += 3) {
    const std::string key = "r3-" + std::to_string(i);
    ASSERT_TRUE(client->Put(key, ValueFor(key, 2)).ok()) << key;
  }
  for (int i = 1; i < n; i += 3) {
    ASSERT_TRUE(client->Delete("r3-" + std::to_string(i)).ok());
  }
  for (int i = 0; i < n; ++i) {
    const std::string key = "r3-" + std::to_string(i);
    auto got = client->GetVersioned(key);
    if (i % 3 == 1) {
      EXPECT_EQ(got.status().code(), StatusCode::kNotFound) << key;
      continue;
    }
    ASSERT_TRUE(got.ok()) << key << ": " << got.status();
    expected[key] = *got;
  }
  // With R = 3 on three servers, every server holds every key.
  for (int s = 0; s < kServers; ++s) {
    auto direct = DirectClient(s);
    ASSERT_NE(direct, nullptr);
    for (int i = 0; i < n; ++i) {
      const std::string key = "r3-" + std::to_string(i);
      auto got = direct->GetVersioned(key);
      if (i % 3 == 1) {
        EXPECT_EQ(got.status().code(), StatusCode::kNotFound) << "server " << s << " still holds deleted " << key;
        continue;
      }
      ASSERT_TRUE(got.ok()) << "server " << s << ", " << key << ": " << got.status();
      EXPECT_EQ(got->value, expected[key].value) << "server " << s << ", " << key;
      EXPECT_EQ(got->version, expected[key].version) << "server " << s << ", " << key;
    }
  }
  auto r = Kvctl({"shards"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
}

// A client credential cannot open a replication connection: the forgery it
// once allowed (a primary's forward in its name, with a version of the
// forger's choosing, which the backup kept and a later failover served) is
// refused at the handshake, on the transport under test, and every replica
// keeps what the real primary wrote.
TEST_F(ReplicationTest, AClientCredentialCannotForgeAPrimarysForward) {
  ASSERT_NO_FATAL_FAILURE(StartCluster(3));
  auto client = ClusterClient();
  ASSERT_NE(client, nullptr);
  // A cluster that just started may still move roles (a slow machine's
  // late heartbeats): the write is repeated until acknowledged, as a user
  // would (the same value either way).
  StatusOr<uint64_t> written = Unavailable("not written yet");
  ASSERT_TRUE(WaitFor("the write acknowledged", [&] {
    written = client->Put("forged", "real");
    return written.ok();
  })) << written.status();

  auto kind = transport::ResolveKind(TestTransport(), nullptr);
  ASSERT_TRUE(kind.ok()) << kind.status();
  auto t = transport::CreateTransport(*kind, transport::Options{});
  ASSERT_TRUE(t.ok()) << t.status();
  const std::string primary_id = cluster().IdOf(*client, 0);
  ASSERT_FALSE(primary_id.empty());
  for (const std::string& token : {cluster().token(), std::string("a guess")}) {
    // Everything a forger can know: the primary's id (its fingerprint) from
    // the map, any epoch, and the client token.
    // The handshake a primary makes (a hello, the backup's challenge, a
    // proof keyed by the token's digest), with the client's token.
    const protocol::PeerConnectParams forger =
        protocol::MakePeerParams(server::PeerFingerprint(primary_id), 1, token);
    for (int s = 1; s < kServers; ++s) {
      auto conn = protocol::ConnectAsPeer(**t, cluster().server(s).address(), forger, std::chrono::milliseconds(30000));
      ASSERT_FALSE(conn.ok()) << "server " << s << " accepted a replication connection with a client's credential";
      // A refused connect is PERMISSION_DENIED, the server's reason in its
      // text (UNAUTHENTICATED: the credential, before any map lookup).
      EXPECT_EQ(conn.status().code(), StatusCode::kPermissionDenied) << conn.status();
      EXPECT_NE(conn.status().message().find("invalid cluster credential"), std::string::npos) << conn.status();
    }
  }
  auto read = client->GetVersioned("forged");
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->value, "real");
  EXPECT_EQ(read->version, *written);
  // Every replica holds the real write (one a slow machine took out of the
  // shard after the write may hold nothing), never another version.
  for (int s = 0; s < kServers; ++s) {
    auto direct = DirectClient(s);
    ASSERT_NE(direct, nullptr);
    auto got = direct->GetVersioned("forged");
    if (got.status().code() == StatusCode::kNotFound) continue;
    ASSERT_TRUE(got.ok()) << "server " << s << ": " << got.status();
    EXPECT_EQ(got->value, "real") << "server " << s;
    EXPECT_EQ(got->version, *written) << "server " << s;
  }
}

// With per-server credentials, a server's credential opens replication
// connections as that server only: server 2's credential posing as server
// 0 (its fingerprint and current epoch, both in the map) to server 1 is
// refused at the handshake, while as itself it is let through.
TEST_F(ReplicationTest, AServerCredentialCannotReplicateAsAnotherServer) {
  TestClusterOptions o;
  o.servers = kServers;
  o.shards = 64;
  o.replicas = 3;
  o.per_server_credentials = true;
  ASSERT_NO_FATAL_FAILURE(TestClusterTest::StartCluster(o));
  auto client = ClusterClient();
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(WaitFor("a write acknowledged", [&] { return client->Put("k", "v").ok(); }));
  auto members = client->Cluster();
  ASSERT_TRUE(members.ok()) << members.status();
  const std::string victim = cluster().IdOf(*client, 0);
  const std::string poser = cluster().IdOf(*client, 2);
  ASSERT_FALSE(victim.empty());
  ASSERT_FALSE(poser.empty());
  const auto epoch_of = [&](const std::string& id) -> uint64_t {
    for (const MemberInfo& m : members->members) {
      if (m.server_id == id) return m.epoch;
    }
    return 0;
  };
  auto kind = transport::ResolveKind(TestTransport(), nullptr);
  ASSERT_TRUE(kind.ok()) << kind.status();
  auto t = transport::CreateTransport(*kind, transport::Options{});
  ASSERT_TRUE(t.ok()) << t.status();
  const auto hello_as = [&](const std::string& id) {
    const protocol::PeerConnectParams params =
        protocol::MakePeerParams(server::PeerFingerprint(id), epoch_of(id), ServerCredential(2));
    return protocol::ConnectAsPeer(**t, cluster().server(1).address(), params, std::chrono::milliseconds(30000));
  };
  auto posed = hello_as(victim);
  ASSERT_FALSE(posed.ok()) << "server 1 accepted server 2's credential as server 0";
  EXPECT_EQ(posed.status().code(), StatusCode::kPermissionDenied) << posed.status();
  EXPECT_NE(posed.status().message().find("cannot act as server " + victim), std::string::npos) << posed.status();
  // As itself, the same credential is a server's own and is accepted.
  auto own = hello_as(poser);
  EXPECT_TRUE(own.ok()) << own.status();
}

TEST_F(ReplicationTest, WithTwoReplicasEveryKeyIsOnExactlyTwoServers) {
  ASSERT_NO_FATAL_FAILURE(StartCluster(2));
  auto client = ClusterClient();
  ASSERT_NE(client, nullptr);
  const int n = Scaled(600, 60);
  for (int i = 0; i < n; ++i) {
    const std::string key = "r2-" + std::to_string(i);
    ASSERT_TRUE(client->Put(key, ValueFor(key, 1)).ok()) << key;
  }
  std::vector<std::unique_ptr<Client>> direct;
  for (int s = 0; s < kServers; ++s) {
    direct.push_back(DirectClient(s));
    ASSERT_NE(direct.back(), nullptr);
  }
  std::vector<int> held(kServers, 0);
  for (int i = 0; i < n; ++i) {
    const std::string key = "r2-" + std::to_string(i);
    int copies = 0;
    for (int s = 0; s < kServers; ++s) {
      auto got = direct[s]->Get(key);
      if (got.ok()) {
        EXPECT_EQ(*got, ValueFor(key, 1)) << "server " << s << ", " << key;
        ++copies;
        ++held[s];
      } else {
        EXPECT_EQ(got.status().code(), StatusCode::kNotFound) << "server " << s << ", " << key << ": " << got.status();
      }
    }
    EXPECT_EQ(copies, 2) << key;
    // kvctl names the servers that hold it.
    if (i < 5) {
      auto r = Kvctl({"where", key});
      ASSERT_EQ(r.exit_code, 0) << r.err;
    }
  }
  // Backups spread: every server holds some of the keys.
  for (int s = 0; s < kServers; ++s) EXPECT_GT(held[s], 0) << "server " << s;
}

// Kill -9 one server for good and wipe its data dir, under a write load:
// writes of shards it backed up go on once the coordinator took it out of
// their replica sets, its own shards move to a backup, and every write
// acknowledged before or after is readable again and on every live replica
// of its shard.
TEST_F(ReplicationTest, LosingAServerAndItsDiskLosesNothingAcknowledged) {
  ASSERT_NO_FATAL_FAILURE(StartCluster(3));
  auto client = ClusterClient(std::chrono::milliseconds(5000));
  ASSERT_NE(client, nullptr);
  std::mutex mu;
  std::map<std::string, std::string> acked;    // key -> last acknowledged value
  // key -> values of the PUTs that failed since its last acknowledged one
  // (any of them may have been applied).
  std::map<std::string, std::set<std::string>> unknown;
  // The victim's id, and the shards it is the primary of: no failover yet,
  // so once it is dead their keys are unavailable and the writers leave
  // them alone (they write them before the kill, which puts those keys on
  // the backups too).
  auto map = client->Cluster();
  ASSERT_TRUE(map.ok()) << map.status();
  std::string victim;
  for (const MemberInfo& m : map->members) {
    if (m.data_address == cluster().server(2).address()) victim = m.server_id;
  }
  ASSERT_FALSE(victim.empty()) << "server 2 (" << cluster().server(2).address() << ") is not in the map";
  std::set<uint32_t> victim_shards;
  for (const ShardInfo& s : map->shards) {
    if (!s.replicas.empty() && s.replicas.front() == victim) victim_shards.insert(s.shard);
  }
  std::atomic<bool> stop{false};
  std::atomic<int> acked_writes{0};
  std::atomic<int> acked_after_kill{0};
  std::atomic<bool> killed{false};
  std::vector<std::thread> writers;
  for (int t = 0; t < 2; ++t) {
    writers.emplace_back([&, t] {
      for (uint64_t i = 0; !stop.load(); ++i) {
        const std::string key = "loss-" + std::to_string(t) + "-" + std::to_string(i % 400);
        const std::string value = ValueFor(key, i);
        if (killed.load()) {
          auto shard = client->ShardOfKey(key);
          if (shard.ok() && victim_shards.count(*shard) > 0) continue;
        }
        auto v = client->Put(key, value);
        std::lock_guard<std::mutex> l(mu);
        if (v.ok()) {
          acked[key] = value;
          unknown.erase(key);
          ++acked_writes;
          if (killed.load()) ++acked_after_kill;
        } else {
          // Shards whose primary died are unavailable (no failover yet);
          // any other failure leaves the outcome open.
          unknown[key].insert(value);
        }
      }
    });
  }
  // Writes of every shard, the victim's too, before the kill.
  WaitFor("writes acknowledged before the kill", [&] { return acked_writes.load() >= 200; });
  cluster().server(2).Kill9();
  killed = true;
  cluster().server(2).Wipe();
  // Until writes have gone on without it for a while (bounded by a generous
  // deadline, never by an assumption on speed).
  WaitFor("writes acknowledged after the kill", [&] { return acked_after_kill.load() >= 200; });
  stop = true;
  for (auto& w : writers) w.join();
  ASSERT_GE(acked_after_kill.load(), 200) << "writes did not go on without the dead backup";

  // Every acknowledged write is on every live replica its shard has in the
  // map now (a backup too slow to acknowledge, e.g. in the emulated guest,
  // may have been taken out of a set, and is then not asked), and there is
  // at least one: the shards the dead server was primary of have moved to
  // a backup (failover), which holds everything acknowledged before.
  std::vector<std::unique_ptr<Client>> direct;
  for (int s = 0; s < 2; ++s) {
    direct.push_back(DirectClient(s));
    ASSERT_NE(direct.back(), nullptr);
  }
  auto reader = ClusterClient();
  ASSERT_NE(reader, nullptr);
  for (const auto& [key, value] : acked) {
    const auto u = unknown.find(key);
    // Through the cluster client: waits out the promotion if it is not done.
    auto got = reader->Get(key);
    ASSERT_TRUE(got.ok()) << key << " is not readable again: " << got.status();
    EXPECT_TRUE(*got == value || (u != unknown.end() && u->second.count(*got) > 0))
        << key << " lost its last acknowledged value";
  }
  ASSERT_TRUE(reader->RefreshClusterMap().ok());
  auto after = reader->Cluster();
  ASSERT_TRUE(after.ok()) << after.status();
  std::map<std::string, int> index_of;  // server id -> 0 or 1 (the survivors)
  for (const MemberInfo& m : after->members) {
    for (int s = 0; s < 2; ++s) {
      if (m.data_address == cluster().server(s).address()) index_of[m.server_id] = s;
    }
  }
  for (const auto& [key, value] : acked) {
    auto shard = reader->ShardOfKey(key);
    ASSERT_TRUE(shard.ok()) << shard.status();
    const auto u = unknown.find(key);
    int live = 0;
    for (const std::string& id : after->shards[*shard].replicas) {
      const auto i = index_of.find(id);
      if (i == index_of.end()) continue;  // the dead server, still listed where nothing was written since
      ++live;
      auto got = direct[i->second]->Get(key);
      ASSERT_TRUE(got.ok()) << "server " << i->second << " lost " << key << ": " << got.status();
      EXPECT_TRUE(*got == value || (u != unknown.end() && u->second.count(*got) > 0))
          << "server " << i->second << ": " << key << " lost its last acknowledged value";
    }
    EXPECT_GE(live, 1) << key << " (shard " << *shard << ") has no live replica";
  }
  // The dead server is out of the replica sets that went on writing.
  auto r = Kvctl({"shards"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::printf("[ replication ] %zu keys acknowledged, %d after the server died; none lost on the live replicas\n",
              acked.size(), acked_after_kill.load());
}

}  // namespace
}  // namespace rkv::testing
