// The cluster suite: a real rkv-coordinator and three rkv-servers on this
// machine, driven through librkv in cluster mode and kvctl. Runs over the
// transport named by $RKV_TEST_TRANSPORT, like the single-server suite.
#include <signal.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <map>
#include <optional>
#include <mutex>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "rkv/admin.h"
#include "rkv/client.h"
#include "tests/temp_dir.h"
#include "tests/test_cluster.h"

namespace rkv::testing {
namespace {

constexpr int kServers = 3;
// 1024 shards (the coordinator's default) on the host; fewer at a smaller
// $RKV_TEST_SCALE, since a restarted server catches up shard by shard, a
// map change each, and each costs more on a slow CPU.
uint32_t Shards() { return static_cast<uint32_t>(Scaled(1024, 128)); }

std::string ValueFor(const std::string& key, uint64_t generation) {
  std::mt19937_64 rng(std::hash<std::string>()(key) ^ generation);
  std::string v = key + "#" + std::to_string(generation) + "#";
  const size_t extra = rng() % 200;
  for (size_t i = 0; i < extra; ++i) v += static_cast<char>('a' + rng() % 26);
  return v;
}

class ClusterTest : public TestClusterTest {
 protected:
  void SetUp() override { ASSERT_NO_FATAL_FAILURE(StartCluster(Options())); }

  virtual TestClusterOptions Options() const {
    TestClusterOptions o;
    o.servers = kServers;
    o.shards = Shards();
    // A slow CPU (sanitizers, the emulated guest) stretches every step;
    // the heartbeat and replication timeouts stretch with it, so that a
    // live server is not declared DOWN, nor a live backup failed, for
    // being slow: each such false failure changes the map and starts a
    // catch-up, which slows everything further.
    o.heartbeat_timeout_ms = SlowCpuMs(2000);
    o.server_flags.push_back("--replication_timeout_ms=" + std::to_string(SlowCpuMs(1000)));
    o.server_memory = uint64_t{128} << 20;
    o.max_keys = 131072;
    o.zone_prefix = "zone ";
    return o;
  }

  std::unique_ptr<Client> NewClient(int connections = 1) {
    TestClientOptions o;
    o.connections = connections;
    return cluster().ClusterClient(o);
  }

  CommandResult Kvctl(const std::vector<std::string>& args, const std::string& token_file = "") {
    return cluster().Kvctl(args, token_file);
  }

  // Per-server key counts from each server's Admin service.
  std::map<std::string, uint64_t> KeysPerServer(Client& client) {
    std::map<std::string, uint64_t> out;
    ClusterAdmin admin(client);
    auto members = admin.Members();
    EXPECT_TRUE(members.ok()) << members.status();
    if (!members.ok()) return out;
    for (const MemberInfo& m : *members) {
      auto stats = admin.ServerStats(m.server_id);
      EXPECT_TRUE(stats.ok()) << m.server_id << ": " << stats.status();
      if (stats.ok()) out[m.server_id] = stats->Find("keys").value_or(0);
    }
    return out;
  }
};

TEST_F(ClusterTest, KeysSpreadOverEveryServer) {
  auto client = NewClient(2);
  ASSERT_NE(client, nullptr);
  auto members = ClusterAdmin(*client).Members();
  ASSERT_TRUE(members.ok()) << members.status();
  ASSERT_EQ(members->size(), static_cast<size_t>(kServers));
  uint32_t shards = 0;
  for (const MemberInfo& m : *members) {
    EXPECT_EQ(m.state, "UP") << m.server_id;
    EXPECT_EQ(m.transport, TestTransport());
    shards += m.shards;
  }
  EXPECT_EQ(shards, Shards());

  const int n = Scaled(20000, 2000);
  for (int i = 0; i < n; ++i) {
    const std::string key = "spread-" + std::to_string(i);
    auto v = client->Put(key, ValueFor(key, 1));
    ASSERT_TRUE(v.ok()) << key << ": " << v.status();
  }
  for (int start = 0; start < n; start += 100) {
    std::vector<std::string> batch;
    for (int i = start; i < std::min(n, start + 100); ++i) batch.push_back("spread-" + std::to_string(i));
    auto results = client->MultiGet(batch);
    for (size_t j = 0; j < batch.size(); ++j) {
      ASSERT_TRUE(results[j].ok()) << batch[j] << ": " << results[j].status();
      ASSERT_EQ(*results[j], ValueFor(batch[j], 1));
    }
  }
  // Each key is on every replica of its shard (R = 3 by default, so on all
  // three servers here); the primaries, which serve the calls, spread.
  auto cluster = client->Cluster();
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  std::map<std::string, uint64_t> held, primary_of;
  for (int i = 0; i < n; ++i) {
    auto shard = client->ShardOfKey("spread-" + std::to_string(i));
    ASSERT_TRUE(shard.ok()) << shard.status();
    const std::vector<std::string>& replicas = cluster->shards[*shard].replicas;
    ++primary_of[replicas[0]];
    for (const std::string& id : replicas) ++held[id];
  }
  const auto per_server = KeysPerServer(*client);
  ASSERT_EQ(per_server.size(), static_cast<size_t>(kServers));
  ASSERT_EQ(primary_of.size(), static_cast<size_t>(kServers));
  for (const auto& [id, keys] : per_server) EXPECT_EQ(keys, held[id]) << id;
  for (const auto& [id, keys] : primary_of) {
    const double share = static_cast<double>(keys) / static_cast<double>(n);
    EXPECT_GE(share, 0.25) << id << " is the primary of " << keys << " of " << n;
    EXPECT_LE(share, 0.42) << id << " is the primary of " << keys << " of " << n;
  }

  // kvctl sees the same cluster.
  auto r = Kvctl({"members"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const MemberInfo& m : *members) EXPECT_NE(r.out.find(m.server_id), std::string::npos) << r.out;
  r = Kvctl({"get", "spread-7"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, ValueFor("spread-7", 1));
}

// Lines of `text`, without their newlines.
std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    out.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

TEST_F(ClusterTest, KvctlShowsReplicaSetsAndWhereAKeyLives) {
  auto client = NewClient();
  ASSERT_NE(client, nullptr);
  auto cluster = client->Cluster();
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  // Three servers and the default R: every server holds every shard, one
  // third of them as the primary.
  EXPECT_EQ(cluster->replication_factor, 3u);
  ASSERT_EQ(cluster->shards.size(), Shards());
  for (const MemberInfo& m : cluster->members) {
    EXPECT_EQ(m.shards + m.backup_shards, Shards()) << m.server_id;
  }
  std::map<std::string, std::string> zone_of;
  for (const MemberInfo& m : cluster->members) {
    EXPECT_EQ(m.zone.rfind("zone ", 0), 0u) << m.server_id << " is in zone '" << m.zone << "'";
    zone_of[m.server_id] = m.zone;
  }
  for (const ShardInfo& s : cluster->shards) {
    ASSERT_EQ(s.replicas.size(), 3u) << "shard " << s.shard;
    EXPECT_EQ(s.replicas[0], cluster->members[s.shard % 3].server_id) << "shard " << s.shard;
    std::set<std::string> zones;
    for (const std::string& id : s.replicas) zones.insert(zone_of[id]);
    EXPECT_EQ(zones.size(), 3u) << "shard " << s.shard;  // one replica per zone
  }

  // shards: a header, one line per shard, the summary.
  auto r = Kvctl({"shards"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::vector<std::string> lines = Lines(r.out);
  ASSERT_EQ(lines.size(), Shards() + 2) << r.out.substr(0, 400);
  EXPECT_EQ(lines.back(), std::to_string(Shards()) + " shards, R=3, 0 with fewer than 3 replicas");
  const ShardInfo& s7 = cluster->shards[7];
  EXPECT_EQ(lines[1 + 7].substr(0, 1), "7");
  EXPECT_NE(lines[1 + 7].find(s7.replicas[0]), std::string::npos) << lines[1 + 7];
  EXPECT_NE(lines[1 + 7].find(s7.replicas[1] + "," + s7.replicas[2]), std::string::npos) << lines[1 + 7];
  r = Kvctl({"--output=json", "shards"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("\"shard_count\":" + std::to_string(Shards()) + ",\"replication_factor\":3,\"under_replicated\":0"),
            std::string::npos)
      << r.out.substr(0, 200);

  // where: the key's shard, its primary (which serves the key) and backups.
  ASSERT_TRUE(client->Put("where-am-i", "here").ok());
  auto shard = client->ShardOfKey("where-am-i");
  ASSERT_TRUE(shard.ok()) << shard.status();
  // On a slow machine the map may move on meanwhile (a slow backup taken
  // out of a set, then caught up again): kvctl is compared with the map of
  // the version it printed.
  std::vector<std::string> where;
  for (int attempt = 0; attempt < 50; ++attempt) {
    ASSERT_TRUE(client->RefreshClusterMap().ok());
    cluster = client->Cluster();
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    r = Kvctl({"where", "where-am-i"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    where = Lines(r.out);
    if (!where.empty() && where[0].find("map version " + std::to_string(cluster->map_version)) != std::string::npos) {
      break;
    }
  }
  const std::vector<std::string>& replicas = cluster->shards[*shard].replicas;
  ASSERT_EQ(where.size(), 2 + replicas.size()) << r.out;
  EXPECT_EQ(where[0].find("shard " + std::to_string(*shard) + " of " + std::to_string(Shards())), 0u) << r.out;
  for (size_t k = 0; k < replicas.size(); ++k) {
    const std::string& row = where[2 + k];
    EXPECT_EQ(row.find(replicas[k]), 0u) << r.out;
    EXPECT_NE(row.find(k == 0 ? "primary" : "backup"), std::string::npos) << row;
    EXPECT_NE(row.find("UP"), std::string::npos) << row;
    EXPECT_NE(row.find(zone_of[replicas[k]]), std::string::npos) << row;
    for (const MemberInfo& m : cluster->members) {
      if (m.server_id == replicas[k]) {
        EXPECT_NE(row.find(m.data_address), std::string::npos) << row;
      }
    }
  }
  r = Kvctl({"--output=json", "where", "where-am-i"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("{\"key\":\"where-am-i\",\"shard\":" + std::to_string(*shard)), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("{\"server_id\":\"" + replicas[0] + "\",\"role\":\"primary\""), std::string::npos) << r.out;

  // members: zone, shards as primary and as backup.
  r = Kvctl({"members"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.rfind("SERVER", 0), 0u) << r.out;
  EXPECT_NE(r.out.find("ZONE"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("PRIMARIES  BACKUPS"), std::string::npos) << r.out;
  // The last line names the coordinator and its role.
  std::vector<std::string> rows = Lines(r.out);
  ASSERT_FALSE(rows.empty());
  EXPECT_EQ(rows.back(), "coordinators: " + TestClusterTest::cluster().coordinator_address() + " single") << r.out;
  rows.pop_back();
  for (const std::string& row : rows) {
    std::istringstream in(row);
    std::vector<std::string> cells;
    for (std::string cell; in >> cell;) cells.push_back(cell);
    ASSERT_GE(cells.size(), 7u) << row;
    for (const MemberInfo& m : cluster->members) {
      if (cells[0] != m.server_id) continue;
      ASSERT_GE(cells.size(), 8u) << row;  // the zone is two words: "zone N"
      EXPECT_EQ(cells[4] + " " + cells[5], m.zone) << row;
      EXPECT_EQ(cells[6], std::to_string(m.shards)) << row;
      EXPECT_EQ(cells[7], std::to_string(m.backup_shards)) << row;
    }
  }
}

class CoordinatorFlagsTest : public TestClusterTest {
 protected:
  // `servers` small servers with the coordinator's own timings (no
  // heartbeat flags) and no shards asked for: each test adds the flags it
  // checks.
  static TestClusterOptions SmallCluster(int servers) {
    TestClusterOptions options;
    options.servers = servers;
    options.shards = 0;
    options.heartbeat_interval_ms = 0;
    options.heartbeat_timeout_ms = 0;
    options.server_memory = uint64_t{16} << 20;
    options.max_keys = 1024;
    return options;
  }

  // Writes `contents` to `credentials` and starts SmallCluster(2) with
  // every process reading it as --client_credentials_file; `*processes`:
  // the coordinator and the servers, to send SIGHUP to.
  void StartWithClientCredentials(const std::string& credentials, const std::string& contents,
                                  std::vector<ServerProcess*>* processes) {
    WriteFile(credentials, contents);
    TestClusterOptions options = SmallCluster(2);
    options.coordinator_flags = {"--client_credentials_file=" + credentials};
    options.server_flags = {"--client_credentials_file=" + credentials};
    ASSERT_NO_FATAL_FAILURE(StartCluster(options));
    *processes = {&cluster().coordinator()};
    for (int i = 0; i < cluster().server_count(); ++i) processes->push_back(&cluster().server(i));
  }

  // Sends SIGHUP to every one of `processes` and waits until each logged
  // the reload's outcome (its `count`-th line with `expected`).
  static void ReloadAll(const std::vector<ServerProcess*>& processes, const std::string& expected, size_t count) {
    for (ServerProcess* p : processes) ASSERT_EQ(::kill(p->pid(), SIGHUP), 0);
    for (ServerProcess* p : processes) {
      ASSERT_TRUE(WaitFor("the reload's log line \"" + expected + "\"", [&] {
        const std::string log = p->Log();
        size_t found = 0;
        for (size_t at = log.find(expected); at != std::string::npos; at = log.find(expected, at + 1)) ++found;
        return found >= count;
      })) << p->Log();
    }
  }
};

TEST_F(CoordinatorFlagsTest, ReplicasMustFitTheClusterAndStayFixedForTheDataDir) {
  // One coordinator data dir, three coordinators in turn, each with only
  // --servers and --replicas.
  TestClusterOptions options = SmallCluster(3);
  options.replicas = 4;
  cluster_ = std::make_unique<TestCluster>(options);
  {
    ServerProcess& too_many = cluster().coordinator();
    EXPECT_FALSE(too_many.Start().ok());
    EXPECT_NE(too_many.Log().find("--replicas 4 is above --servers 3"), std::string::npos) << too_many.Log();
  }
  {
    // The data dir keeps R from its first change on; here the cluster
    // completes, which a client's Connect waits for.
    cluster().options().servers = 2;
    cluster().options().replicas = 1;
    ServerProcess& one = cluster().RemakeCoordinator();
    const Status s = cluster().Start();
    ASSERT_TRUE(s.ok()) << s;
    auto client = cluster().ClusterClient();
    ASSERT_NE(client, nullptr);
    auto cluster_info = client->Cluster();
    ASSERT_TRUE(cluster_info.ok()) << cluster_info.status();
    EXPECT_EQ(cluster_info->replication_factor, 1u);
    for (const ShardInfo& shard : cluster_info->shards) EXPECT_EQ(shard.replicas.size(), 1u);
    client.reset();
    for (int i = 0; i < cluster().server_count(); ++i) cluster().server(i).Terminate();
    one.Terminate();
  }
  // The default (2 with two servers) is another R than the data dir's.
  cluster().options().replicas = 0;
  ServerProcess& other = cluster().RemakeCoordinator();
  EXPECT_FALSE(other.Start().ok());
  EXPECT_NE(other.Log().find("1 replicas per shard, not --replicas 2"), std::string::npos) << other.Log();
}

TEST_F(CoordinatorFlagsTest, SuspectAfterMustExceedTheHeartbeatPeriod) {
  TestClusterOptions options = SmallCluster(1);
  // Servers heartbeat every 333 ms with the defaults (lease 1000 / 3).
  options.coordinator_flags = {"--suspect_after_ms=300"};
  cluster_ = std::make_unique<TestCluster>(options);
  ServerProcess& coordinator = cluster().coordinator();
  EXPECT_FALSE(coordinator.Start().ok());
  EXPECT_NE(coordinator.Log().find("--suspect_after_ms 300 must be above the period servers heartbeat at (333 ms"),
            std::string::npos)
      << coordinator.Log();
  cluster().options().coordinator_flags = {"--probe_timeout_ms=5"};
  ServerProcess& fast = cluster().RemakeCoordinator();
  EXPECT_FALSE(fast.Start().ok());
  EXPECT_NE(fast.Log().find("--probe_timeout_ms 5 is outside [10, 10000]"), std::string::npos) << fast.Log();
}

TEST_F(CoordinatorFlagsTest, ClusterTokenFileMustBeReadableAndNoClientToken) {
  TestClusterOptions options = SmallCluster(1);
  cluster_ = std::make_unique<TestCluster>(options);
  // The client token's own file as the cluster credential: a bad flag.
  cluster().options().coordinator_flags = {"--cluster_token_file=" + cluster().dir() + "/token"};
  ServerProcess& same = cluster().coordinator();
  EXPECT_FALSE(same.Start().ok());
  EXPECT_NE(same.Log().find("--cluster_token_file holds the client token"), std::string::npos) << same.Log();
  cluster().options().coordinator_flags = {"--cluster_token_file=" + cluster().dir() + "/no-such-file"};
  ServerProcess& missing = cluster().RemakeCoordinator();
  EXPECT_FALSE(missing.Start().ok());
  EXPECT_NE(missing.Log().find("--cluster_token_file"), std::string::npos) << missing.Log();
}

// With an operator credential, kvctl drains, forgets and verifies with it
// alone: the cluster's client token is refused naming the credential
// needed, and the server is left as it was.
TEST_F(CoordinatorFlagsTest, DrainAndForgetNeedTheOperatorCredentialWhenOneIsSet) {
  TestClusterOptions options = SmallCluster(2);
  cluster_ = std::make_unique<TestCluster>(options);
  const std::string operator_file = cluster().dir() + "/operator_token";
  WriteFile(operator_file, "the-operators-own-credential\n");
  cluster().options().coordinator_flags = {"--operator_token_file=" + operator_file};
  cluster().options().server_flags = {"--operator_token_file=" + operator_file};
  ASSERT_TRUE(cluster().Start().ok()) << cluster().Logs();
  auto client = cluster().ClusterClient();
  ASSERT_NE(client, nullptr);
  const std::string id = cluster().IdOf(*client, 1);
  ASSERT_FALSE(id.empty());

  CommandResult r = cluster().Kvctl({"drain", id});
  EXPECT_NE(r.exit_code, 0) << r.out;
  EXPECT_NE(r.err.find("Drain needs the operator credential (the coordinator's --operator_token_file); this "
                       "credential is a client's"),
            std::string::npos)
      << r.err;
  r = cluster().Kvctl({"forget", id});
  EXPECT_NE(r.exit_code, 0) << r.out;
  EXPECT_NE(r.err.find("Forget needs the operator credential"), std::string::npos) << r.err;
  r = cluster().Kvctl({"members"});
  EXPECT_EQ(r.out.find("DRAINING"), std::string::npos) << r.out;
  // The servers' replica verification likewise.
  r = cluster().Kvctl({"verify", "--rounds=1"});
  EXPECT_NE(r.exit_code, 0) << r.out;
  EXPECT_NE(r.err.find("ShardChecksums needs the operator credential"), std::string::npos) << r.out << r.err;

  // The operator's credential reads the members, verifies and drains.
  r = cluster().Kvctl({"members"}, operator_file);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  r = cluster().Kvctl({"verify", "--rounds=1"}, operator_file);
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  r = cluster().Kvctl({"drain", id}, operator_file);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(cluster().WaitForMap(*client, [&](const ClusterInfo& map) {
    for (const MemberInfo& m : map.members) {
      if (m.server_id == id) return m.draining;
    }
    return false;
  }));
}

// A server that presents the client token where the coordinator holds a
// cluster credential is refused at its Join, and says what it lacks.
TEST_F(CoordinatorFlagsTest, AServerWithoutTheClusterCredentialCannotJoin) {
  TestClusterOptions options = SmallCluster(1);
  options.cluster_token = "";  // the servers get none
  cluster_ = std::make_unique<TestCluster>(options);
  const std::string credential = cluster().dir() + "/coordinator_cluster_token";
  WriteFile(credential, "only-the-coordinator-has-it\n");
  cluster().options().coordinator_flags = {"--cluster_token_file=" + credential};
  ASSERT_TRUE(cluster().coordinator().Start().ok()) << cluster().coordinator().Log();
  cluster().AddServer();
  ServerProcess& server = cluster().server(0);
  (void)server.Start();
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (server.Log().find("refused this server") == std::string::npos && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  const std::string log = server.Log();
  EXPECT_NE(log.find("Join needs the cluster credential (the servers' role); this credential is a client's"),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("give this server the coordinator's --cluster_token_file"), std::string::npos) << log;
}

// --server_credentials_file takes the place of --cluster_token_file (both
// refused), and a server must name its own credential, one of the file's.
TEST_F(CoordinatorFlagsTest, ServerCredentialsFlagsAreChecked) {
  TestClusterOptions options = SmallCluster(1);
  cluster_ = std::make_unique<TestCluster>(options);
  const std::string file = cluster().dir() + "/server_credentials";
  cluster().options().coordinator_flags = {"--server_credentials_file=" + file};
  ServerProcess& both = cluster().coordinator();
  EXPECT_FALSE(both.Start().ok());
  EXPECT_NE(both.Log().find("--server_credentials_file and --cluster_token_file are two ways"), std::string::npos)
      << both.Log();

  cluster().options().coordinator_flags = {};
  ASSERT_TRUE(cluster().RemakeCoordinator().Start().ok()) << cluster().coordinator().Log();
  cluster().options().cluster_token = "";
  cluster().options().server_flags = {"--server_credentials_file=" + file, "--server_credential_name=nobody"};
  cluster().AddServer();
  EXPECT_FALSE(cluster().server(0).Start().ok());
  EXPECT_NE(cluster().server(0).Log().find("holds no credential named \"nobody\""), std::string::npos)
      << cluster().server(0).Log();
}

// Per-server credentials (--server_credentials_file on the coordinator and
// every server, docs/design.md §10): each server presents its own to the
// coordinator and to its peers; the cluster replicates (R = 3) and serves,
// and a Heartbeat forged for server 1 with server 0's credential is
// refused, naming both, while server 1's own is accepted.
TEST_F(CoordinatorFlagsTest, PerServerCredentialsReplicateAndBindEachServersIdentity) {
  TestClusterOptions options = SmallCluster(3);
  options.shards = 64;
  options.replicas = 3;
  options.per_server_credentials = true;
  cluster_ = std::make_unique<TestCluster>(options);
  ASSERT_TRUE(cluster().Start().ok()) << cluster().Logs();
  auto client = cluster().ClusterClient();
  ASSERT_NE(client, nullptr);
  for (int k = 0; k < 50; ++k) {
    const std::string key = "per-server-" + std::to_string(k);
    ASSERT_TRUE(client->Put(key, ValueFor(key, 1)).ok()) << cluster().Logs();
  }
  for (int k = 0; k < 50; ++k) {
    const std::string key = "per-server-" + std::to_string(k);
    auto got = client->Get(key);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(*got, ValueFor(key, 1));
  }
  // Every copy agrees: the forwards crossed replication connections made
  // with the servers' own credentials.
  CommandResult r = cluster().Kvctl({"verify", "--rounds=1"});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;

  const std::string id1 = cluster().IdOf(*client, 1);
  ASSERT_FALSE(id1.empty());
  uint64_t epoch1 = 0;
  auto members = ClusterAdmin(*client).Members();
  ASSERT_TRUE(members.ok()) << members.status();
  for (const MemberInfo& m : *members) {
    if (m.server_id == id1) epoch1 = m.epoch;
  }
  ASSERT_NE(epoch1, 0u);
  const Status forged = cluster().CoordinatorHeartbeat(ServerCredential(0), id1, epoch1);
  EXPECT_EQ(forged.code(), StatusCode::kPermissionDenied) << forged;
  EXPECT_EQ(forged.message(), "Heartbeat refused: server credential server0 cannot act as server " + id1 +
                                  ", which is bound to credential server1");
  EXPECT_TRUE(cluster().CoordinatorHeartbeat(ServerCredential(1), id1, epoch1).ok());
  // The client token is no server's.
  EXPECT_EQ(cluster().CoordinatorHeartbeat(cluster().token(), id1, epoch1).code(), StatusCode::kPermissionDenied);
  const std::string log = cluster().coordinator().Log();
  EXPECT_NE(log.find("credential server0) refused (PERMISSION_DENIED)"), std::string::npos) << log;
  EXPECT_NE(cluster().server(2).Log().find("server credential server2 (one of 16"), std::string::npos)
      << cluster().server(2).Log();
}

// Named client credentials (--client_credentials_file on the coordinator
// and every server, docs/design.md §10): two clients with credentials of
// their own both work; the operator removes one from the file and sends
// SIGHUP; the revoked client's open connections are closed and its calls
// refused, while the other's go on; a bad file on SIGHUP keeps the set.
TEST_F(CoordinatorFlagsTest, ARevokedClientCredentialIsRefusedAndItsConnectionsClosedOnSighup) {
  TempDir files;
  const std::string credentials = files.path() + "/client_credentials";
  std::vector<ServerProcess*> processes;
  ASSERT_NO_FATAL_FAILURE(
      StartWithClientCredentials(credentials, "# NAME TOKEN\nalice alice-secret\nbob bob-secret\n", &processes));

  TestClientOptions alice_options(std::chrono::milliseconds(10000));
  alice_options.token = "alice-secret";
  TestClientOptions bob_options(std::chrono::milliseconds(10000));
  bob_options.token = "bob-secret";
  auto alice = cluster().ClusterClient(alice_options);
  ASSERT_NE(alice, nullptr);
  auto bob = cluster().ClusterClient(bob_options);
  ASSERT_NE(bob, nullptr);
  // Enough keys that each client holds a connection to every server.
  constexpr int kKeys = 32;
  for (int i = 0; i < kKeys; ++i) {
    ASSERT_TRUE(alice->Put("alice-" + std::to_string(i), "a").ok());
    ASSERT_TRUE(bob->Put("bob-" + std::to_string(i), "b").ok());
  }
  for (int i = 0; i < cluster().server_count(); ++i) {
    EXPECT_NE(cluster().server(i).Log().find("(credential bob)"), std::string::npos) << cluster().server(i).Log();
  }

  // bob revoked.
  WriteFile(credentials, "alice alice-secret\n");
  ASSERT_NO_FATAL_FAILURE(ReloadAll(processes, "client credentials reloaded from " + credentials + ": removed bob", 1));
  // Every server closes bob's open connection by itself, before bob calls.
  for (int i = 0; i < cluster().server_count(); ++i) {
    EXPECT_TRUE(WaitFor("bob's connection closed", [&] {
      return cluster().server(i).Log().find("(credential bob) closed: UNAUTHENTICATED: client credential bob was "
                                            "revoked") != std::string::npos;
    })) << cluster().server(i).Log();
  }
  // bob's next calls are refused, on every server and at the coordinator.
  for (int i = 0; i < kKeys; ++i) {
    const Status put = bob->Put("bob-" + std::to_string(i), "again").status();
    ASSERT_FALSE(put.ok());
    EXPECT_TRUE(put.code() == StatusCode::kUnauthenticated || put.code() == StatusCode::kPermissionDenied) << put;
  }
  auto bob_again = Client::Connect(cluster().ClusterClientOptions(bob_options));
  ASSERT_FALSE(bob_again.ok());
  EXPECT_EQ(bob_again.status().code(), StatusCode::kUnauthenticated) << bob_again.status();
  for (int i = 0; i < cluster().server_count(); ++i) {
    auto direct = Client::Connect(cluster().DirectClientOptions(i, bob_options));
    ASSERT_FALSE(direct.ok());
    // The client names a data-plane rejection PERMISSION_DENIED, the
    // server's code in its message.
    EXPECT_TRUE(direct.status().code() == StatusCode::kPermissionDenied ||
                direct.status().code() == StatusCode::kUnauthenticated)
        << direct.status();
    EXPECT_NE(direct.status().message().find("client credential bob was revoked"), std::string::npos)
        << direct.status();
  }
  // alice goes on, on the connections she had.
  for (int i = 0; i < kKeys; ++i) {
    ASSERT_TRUE(alice->Put("alice-" + std::to_string(i), "after").ok());
    auto got = alice->Get("bob-" + std::to_string(i));
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(*got, "b");
  }
  // The servers counted the refused connections.
  ClusterAdmin admin(*alice);
  auto members = admin.Members();
  ASSERT_TRUE(members.ok()) << members.status();
  uint64_t failures = 0;
  for (const MemberInfo& m : *members) {
    auto stats = admin.ServerStats(m.server_id);
    ASSERT_TRUE(stats.ok()) << stats.status();
    failures += stats->Find("auth_failures").value_or(0);
  }
  EXPECT_GE(failures, static_cast<uint64_t>(cluster().server_count()));

  // A bad file (a name given twice) keeps the set in force.
  WriteFile(credentials, "alice alice-secret\nalice other\nbob bob-secret\n");
  ASSERT_NO_FATAL_FAILURE(ReloadAll(processes, "refused, the client credentials in force stay", 1));
  EXPECT_NE(cluster().coordinator().Log().find(credentials + ":2: credential name alice is given twice"),
            std::string::npos);
  EXPECT_FALSE(Client::Connect(cluster().ClusterClientOptions(bob_options)).ok());
  auto alice_again = cluster().ClusterClient(alice_options);
  ASSERT_NE(alice_again, nullptr);
  ASSERT_TRUE(alice_again->Put("alice-new", "a").ok());
  ASSERT_TRUE(alice->Put("alice-0", "still").ok());

  // bob given back: valid again.
  WriteFile(credentials, "alice alice-secret\nbob bob-secret\n");
  ASSERT_NO_FATAL_FAILURE(ReloadAll(processes, "client credentials reloaded from " + credentials + ": added bob", 1));
  auto bob_back = cluster().ClusterClient(bob_options);
  ASSERT_NE(bob_back, nullptr);
  ASSERT_TRUE(bob_back->Put("bob-0", "back").ok());
}

// Whether process `pid` still runs (a child that died and was not
// reaped yet is a zombie: state Z in /proc/PID/stat).
bool ProcessRuns(pid_t pid) {
  const std::string stat = ReadWholeFile("/proc/" + std::to_string(pid) + "/stat");
  const size_t paren = stat.rfind(')');
  return paren != std::string::npos && paren + 2 < stat.size() && stat[paren + 2] != 'Z';
}

// An operator's reloads come as they come (a script, a log rotation, a
// second `systemctl reload`): SIGHUPs while the last one is still being
// handled. None may end a process (each one did, silently, when it reached
// a thread that gRPC started before the signals were blocked), and the
// last reload is the file in force.
TEST_F(CoordinatorFlagsTest, ABurstOfSighupsEndsNoProcessAndTheLastReloadCounts) {
  TempDir files;
  const std::string credentials = files.path() + "/client_credentials";
  std::vector<ServerProcess*> processes;
  ASSERT_NO_FATAL_FAILURE(StartWithClientCredentials(credentials, "alice alice-secret\n", &processes));

  for (int round = 0; round < 500; ++round) {
    for (ServerProcess* p : processes) ASSERT_EQ(::kill(p->pid(), SIGHUP), 0);
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  for (ServerProcess* p : processes) ASSERT_TRUE(ProcessRuns(p->pid())) << p->Log();

  WriteFile(credentials, "alice alice-secret\nbob bob-secret\n");
  ASSERT_NO_FATAL_FAILURE(
      ReloadAll(processes, "client credentials reloaded from " + credentials + ": added bob", 1));
  TestClientOptions bob_options(std::chrono::milliseconds(10000));
  bob_options.token = "bob-secret";
  auto bob = cluster().ClusterClient(bob_options);
  ASSERT_NE(bob, nullptr);
  ASSERT_TRUE(bob->Put("bob-after-the-burst", "b").ok());
  auto got = bob->Get("bob-after-the-burst");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, "b");
}

// Over verbs a GET never reaches a server CPU. Over tcp a key the client's
// location cache does not answer is asked of its server once (a lookup,
// design §4.1), and later GETs of it are cached READs: a fresh client's
// GET load makes exactly as many lookups as its cache missed or refused.
TEST_F(ClusterTest, GetsTakeNoServerCpuOverVerbsAndOneLookupPerUncachedKeyOverTcp) {
  auto writer = NewClient();
  ASSERT_NE(writer, nullptr);
  const int n = Scaled(2000, 200);
  for (int i = 0; i < n; ++i) {
    ASSERT_TRUE(writer->Put("cpu-" + std::to_string(i), ValueFor("cpu", i)).ok());
  }
  ClusterAdmin admin(*writer);
  auto members = admin.Members();
  ASSERT_TRUE(members.ok());
  std::map<std::string, ServerStatsInfo> before;
  for (const MemberInfo& m : *members) {
    auto s = admin.ServerStats(m.server_id);
    ASSERT_TRUE(s.ok()) << s.status();
    before[m.server_id] = *s;
  }
  // A GET-only load by a client that wrote nothing: every key, three times
  // over.
  auto client = NewClient();
  ASSERT_NE(client, nullptr);
  for (int round = 0; round < 3; ++round) {
    for (int i = 0; i < n; ++i) {
      auto got = client->Get("cpu-" + std::to_string(i));
      ASSERT_TRUE(got.ok()) << got.status();
      ASSERT_EQ(*got, ValueFor("cpu", i));
    }
  }
  uint64_t lookups = 0;
  for (const MemberInfo& m : *members) {
    auto s = admin.ServerStats(m.server_id);
    ASSERT_TRUE(s.ok()) << s.status();
    ASSERT_TRUE(s->Find("gets_served_by_cpu").has_value()) << m.server_id;
    lookups += *s->Find("gets_served_by_cpu") - before[m.server_id].Find("gets_served_by_cpu").value_or(0);
    // Nothing else reached the server CPU during the GET load.
    for (const char* name : {"puts", "deletes", "request_errors"}) {
      ASSERT_TRUE(s->Find(name).has_value()) << m.server_id << " has no counter " << name;
      EXPECT_EQ(s->Find(name), before[m.server_id].Find(name)) << m.server_id << " " << name;
    }
  }
  const LocationCacheStatsInfo cache = client->LocationCacheStats();
  if (TestTransport() == "verbs") {
    EXPECT_EQ(lookups, 0u) << "a one-sided GET reached a server CPU";
  } else {
    EXPECT_GE(cache.misses, static_cast<uint64_t>(n)) << "each key's first GET finds no entry";
    EXPECT_EQ(lookups, cache.misses + cache.fallbacks) << "one lookup per GET the cache did not answer";
    EXPECT_GE(cache.hits, static_cast<uint64_t>(n)) << "later GETs are cached READs";
  }
  auto r = Kvctl({"stats"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("GETS_BY_CPU"), std::string::npos) << r.out;
}

// Writers and readers run while `disrupt` does its damage; every PUT must
// be acknowledged in the end (calls retry within their deadline) and every
// acknowledged value must be readable afterwards.
// A PUT whose server died with the request in flight and came back under a
// new epoch is not resent (the restarted server cannot tell whether it
// applied it): the call fails saying its outcome is unknown. `unknown` gets
// such a key's value until a later PUT of the key is acknowledged; the key
// then holds either that value or its last acknowledged one.
bool OutcomeUnknown(const Status& s) {
  return s.code() == StatusCode::kUnavailable && s.reason() == Reason::kOutcomeUnknown;
}

struct UnknownPut {
  int thread;
  std::string key;
  std::string status;
};

// Why a PUT's outcome can be unknown while one server is killed and
// restarted (docs/design.md §5.6, §5.7, §8.8), and how often each cause
// can strike one load thread, whose PUTs are sequential:
//  - the PUT was on the server that died (its reply lost; the server back
//    under a new epoch, or its shard served elsewhere): once, since one
//    server dies once;
//  - the map changed under the PUT (the restarted server added back as a
//    backup, a primary role moved for balance): once per map version, which
//    the reply names;
//  - the primary's lease expired under the PUT (a heartbeat stalled on a
//    loaded machine): once per expiry; all of these together are bounded
//    by the number of map changes, since each expiry ends with a new grant;
//  - a backup failed under the PUT and the primary could not get the
//    coordinator to take it out of the shard (the report or the map that
//    answers it late on a loaded machine): counted with the expiries,
//    since each such failure ends with a map that drops the backup.
// Anything else is a failure. Adds a failure for each PUT past its bound.
void ExpectUnknownPutsExplained(const std::vector<UnknownPut>& unknown_puts, uint64_t map_changes) {
  std::map<int, int> died;
  std::set<std::pair<int, std::string>> map_versions;
  int lease = 0;
  for (const UnknownPut& u : unknown_puts) {
    std::printf("[ load ] thread %d: put %s: %s\n", u.thread, u.key.c_str(), u.status.c_str());
    if (u.status.find(" was lost and ") != std::string::npos || u.status.find("reply lost") != std::string::npos) {
      EXPECT_LE(++died[u.thread], 1) << "a second PUT of one thread was lost to the one server death: " << u.status;
    } else if (u.status.find("map changed mid-write") != std::string::npos) {
      const size_t at = u.status.find("map version ", u.status.find("outcome unknown"));
      ASSERT_NE(at, std::string::npos) << "the refusal names no map version: " << u.status;
      const size_t digits = at + std::strlen("map version ");
      const std::string version = u.status.substr(digits, u.status.find_first_not_of("0123456789", digits) - digits);
      EXPECT_TRUE(map_versions.insert({u.thread, version}).second)
          << "a second PUT of one thread was lost to map version " << version << ": " << u.status;
    } else if (u.status.find("lease expired") != std::string::npos ||
               u.status.find("the coordinator could not be told") != std::string::npos) {
      ++lease;
    } else {
      ADD_FAILURE() << "a PUT's outcome is unknown for no documented cause: " << u.status;
    }
  }
  EXPECT_LE(static_cast<uint64_t>(lease), 2 * map_changes) << "PUTs lost to lease expiries and unreported backups";
}

// Acknowledged PUTs the load gets before a disruption, and again after it.
constexpr int kLoadAcks = 200;

void RunLoadThrough(Client& client, const std::function<void()>& disrupt,
                    std::map<std::string, std::string>* acked_out, int* failures_out,
                    std::string* first_failure, std::map<std::string, std::string>* unknown_out = nullptr,
                    std::vector<UnknownPut>* unknown_puts_out = nullptr) {
  std::atomic<bool> stop{false};
  std::atomic<int> acks{0};
  std::mutex mu;
  std::map<std::string, std::string> acked;
  std::map<std::string, std::string> unknown;
  std::vector<UnknownPut> unknown_puts;
  int failures = 0;
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t) {
    threads.emplace_back([&, t] {
      for (uint64_t i = 0; !stop.load(); ++i) {
        const std::string key = "load-" + std::to_string(t) + "-" + std::to_string(i % 500);
        const std::string value = ValueFor(key, i);
        auto v = client.Put(key, value);
        {
          std::lock_guard<std::mutex> l(mu);
          if (v.ok()) {
            acked[key] = value;
            unknown.erase(key);
            acks.fetch_add(1);
          } else if (unknown_out != nullptr && OutcomeUnknown(v.status())) {
            unknown[key] = value;
            unknown_puts.push_back({t, key, v.status().ToString()});
          } else {
            if (first_failure->empty()) *first_failure = "put " + key + ": " + v.status().ToString();
            ++failures;
          }
        }
        // Each thread owns its keys, so a GET must return the PUT just acknowledged.
        if (i % 4 == 0 && v.ok()) {
          auto got = client.Get(key);
          std::lock_guard<std::mutex> l(mu);
          if (!got.ok()) {
            if (first_failure->empty()) *first_failure = "get " + key + ": " + got.status().ToString();
            ++failures;
          } else if (*got != value) {
            if (first_failure->empty()) *first_failure = "get " + key + " returned another value";
            ++failures;
          }
        }
      }
    });
  }
  // The load runs before the disruption and goes on after it (the clients
  // recovered) for kLoadAcks acknowledged PUTs on each side.
  EXPECT_TRUE(WaitFor("PUTs acknowledged before the disruption", [&] { return acks.load() >= kLoadAcks; }));
  disrupt();
  const int acks_at_disruption = acks.load();
  EXPECT_TRUE(WaitFor("PUTs acknowledged after the disruption",
                      [&] { return acks.load() >= acks_at_disruption + kLoadAcks; }));
  stop = true;
  for (auto& th : threads) th.join();
  *acked_out = std::move(acked);
  *failures_out = failures;
  if (unknown_out != nullptr) *unknown_out = std::move(unknown);
  if (unknown_puts_out != nullptr) *unknown_puts_out = std::move(unknown_puts);
}

// `got` is what `key` must hold: its last acknowledged value, or the value
// of a later PUT whose outcome is unknown.
void ExpectHeld(const std::map<std::string, std::string>& acked, const std::map<std::string, std::string>& unknown,
                const std::string& key, const std::string& got) {
  const auto a = acked.find(key);
  const auto u = unknown.find(key);
  const bool ok = (a != acked.end() && got == a->second) || (u != unknown.end() && got == u->second);
  EXPECT_TRUE(ok) << key << " lost its last acknowledged value";
}

TEST_F(ClusterTest, Kill9OfAServerUnderLoadLosesNothingAndClientsRecover) {
  auto client = NewClient(2);
  ASSERT_NE(client, nullptr);
  const uint64_t version_before = client->cluster_map_version();
  std::map<std::string, std::string> acked;
  std::map<std::string, std::string> unknown;
  std::vector<UnknownPut> unknown_puts;
  int failures = 0;
  std::string first_failure;
  RunLoadThrough(
      *client,
      [&] {
        // Away for a second (the outage itself, not a wait for anything).
        cluster().server(1).Kill9();
        std::this_thread::sleep_for(std::chrono::milliseconds(1000));
        const Status s = cluster().server(1).Start();
        ASSERT_TRUE(s.ok()) << s;
      },
      &acked, &failures, &first_failure, &unknown, &unknown_puts);
  EXPECT_EQ(failures, 0) << first_failure;
  ASSERT_TRUE(client->RefreshClusterMap().ok());
  const uint64_t map_changes = client->cluster_map_version() - version_before;
  std::printf("[ kill9 ] %zu keys acknowledged, %zu PUTs outcome unknown across %llu map changes\n", acked.size(),
              unknown_puts.size(), static_cast<unsigned long long>(map_changes));
  ExpectUnknownPutsExplained(unknown_puts, map_changes);
  ASSERT_FALSE(acked.empty());
  for (const auto& [key, value] : acked) {
    auto got = client->Get(key);
    ASSERT_TRUE(got.ok()) << key << ": " << got.status();
    ExpectHeld(acked, unknown, key, *got);
  }
  // The restart shows in the map (new epoch: the version moved on).
  ASSERT_TRUE(client->RefreshClusterMap().ok());
  EXPECT_GT(client->cluster_map_version(), version_before);
  // A fresh client sees everything too.
  auto fresh = NewClient();
  ASSERT_NE(fresh, nullptr);
  for (const auto& [key, value] : acked) {
    auto got = fresh->Get(key);
    ASSERT_TRUE(got.ok()) << key << ": " << got.status();
    ExpectHeld(acked, unknown, key, *got);
  }
}

// Servers and clients hold leases on the map (docs/design.md §8.8): with
// the coordinator away for longer than a lease, writes wait (the client
// retries the "not the primary" refusal) and one caught in the middle can
// end "outcome unknown". A restart is invisible when it is shorter than the
// lease, so this cluster runs with leases long enough to cover a restart
// on a loaded machine under sanitizers (1.5 s away, then start-up and the
// servers' reconnection).
class CoordinatorRestartTest : public ClusterTest {
 protected:
  TestClusterOptions Options() const override {
    TestClusterOptions o = ClusterTest::Options();
    o.heartbeat_timeout_ms = 10000;
    o.lease_ms = 10000;
    return o;
  }
};

TEST_F(CoordinatorRestartTest, ShorterThanTheLeaseUnderLoadIsInvisibleToTheDataPath) {
  auto client = NewClient(2);
  ASSERT_NE(client, nullptr);
  // Touch every server first so the data path needs nothing from the
  // coordinator while it is away.
  for (int i = 0; i < 64; ++i) ASSERT_TRUE(client->Put("warm-" + std::to_string(i), "w").ok());
  std::map<std::string, std::string> acked;
  int failures = 0;
  std::string first_failure;
  RunLoadThrough(
      *client,
      [&] {
        // Away for 1.5 s, shorter than a lease (the outage itself).
        cluster().coordinator().Kill9();
        std::this_thread::sleep_for(std::chrono::milliseconds(1500));
        const Status s = cluster().coordinator().Start();
        ASSERT_TRUE(s.ok()) << s;
      },
      &acked, &failures, &first_failure);
  EXPECT_EQ(failures, 0) << first_failure;
  for (const auto& [key, value] : acked) {
    auto got = client->Get(key);
    ASSERT_TRUE(got.ok()) << key << ": " << got.status();
    EXPECT_EQ(*got, value);
  }
  // The restarted coordinator recovered its map from RocksDB, and the
  // client reaches it again within seconds (its channel backs off <= 1 s).
  Status refreshed;
  ASSERT_TRUE(WaitFor(
      "the client to reach the restarted coordinator",
      [&] {
        refreshed = client->RefreshClusterMap();
        return refreshed.ok();
      },
      std::chrono::seconds(10), std::chrono::milliseconds(100)))
      << refreshed;
  auto members = ClusterAdmin(*client).Members();
  ASSERT_TRUE(members.ok());
  EXPECT_EQ(members->size(), static_cast<size_t>(kServers));
}

// With the default lease (1 s) a coordinator that is killed and restarts
// 2 s later outlasts every lease: servers stop acknowledging writes and
// clients' calls wait or fail meanwhile. Once it is back on its address
// and data dir, the clients that were running complete calls again by
// themselves, without a restart (docs/design.md §8.4: a call waiting for
// the coordinator drives its reconnection). How soon is printed, never
// asserted: the machine may be loaded.
class CoordinatorKillTest : public ClusterTest {
 protected:
  TestClusterOptions Options() const override {
    TestClusterOptions o = ClusterTest::Options();
    o.shards = 64;  // the restart, not the cluster's size, is under test
    return o;
  }
};

TEST_F(CoordinatorKillTest, RunningClientsResumeOnceTheCoordinatorReturns) {
  constexpr int kClients = 2;
  using SteadyClock = std::chrono::steady_clock;
  std::vector<std::unique_ptr<Client>> clients;
  for (int i = 0; i < kClients; ++i) {
    // Calls that fail within the outage, so that each client keeps trying
    // new ones across it.
    clients.push_back(cluster().ClusterClient(TestClientOptions(std::chrono::milliseconds(2000))));
    ASSERT_NE(clients.back(), nullptr);
  }
  std::atomic<bool> stop{false};
  // The steady time (ns) the coordinator was back (0 before), and per
  // client the time its first call after that succeeded (0 before) and how
  // many calls succeeded.
  std::atomic<int64_t> back{0};
  std::vector<std::atomic<int64_t>> resumed_at(kClients);
  std::vector<std::atomic<int>> oks(kClients);
  std::vector<std::thread> threads;
  for (int c = 0; c < kClients; ++c) {
    threads.emplace_back([&, c] {
      for (uint64_t i = 0; !stop.load(); ++i) {
        const std::string key = "resume-" + std::to_string(c) + "-" + std::to_string(i % 100);
        const bool put = clients[c]->Put(key, ValueFor(key, i)).ok();
        const bool get = put && clients[c]->Get(key).ok();
        if (put && get) {
          oks[c].fetch_add(1);
          const int64_t now = SteadyClock::now().time_since_epoch().count();
          const int64_t since = back.load();
          int64_t none = 0;
          if (since != 0 && now > since) resumed_at[c].compare_exchange_strong(none, now);
        }
      }
    });
  }
  const auto stop_load = [&] {
    stop.store(true);
    for (std::thread& t : threads) t.join();
  };
  for (int c = 0; c < kClients; ++c) {
    if (!WaitFor("client " + std::to_string(c) + " to complete calls", [&] { return oks[c].load() > 10; })) {
      stop_load();
      FAIL() << "the clients made no progress before the kill";
    }
  }
  cluster().coordinator().Kill9();
  // Away for 2 s, longer than a lease (the outage itself).
  std::this_thread::sleep_for(std::chrono::milliseconds(2000));
  const Status started = cluster().coordinator().Start();
  back.store(SteadyClock::now().time_since_epoch().count());
  if (!started.ok()) {
    stop_load();
    FAIL() << started;
  }
  bool resumed = true;
  for (int c = 0; c < kClients; ++c) {
    const bool ok = WaitFor("client " + std::to_string(c) + " to complete calls after the coordinator returned",
                            [&] { return resumed_at[c].load() != 0; }, std::chrono::seconds(60),
                            std::chrono::milliseconds(10));
    EXPECT_TRUE(ok);
    resumed = resumed && ok;
  }
  stop_load();
  if (resumed) {
    for (int c = 0; c < kClients; ++c) {
      std::printf("[ coordinator kill ] client %d completed a PUT and GET again %lld ms after the restart\n", c,
                  static_cast<long long>((resumed_at[c].load() - back.load()) / 1000000));
    }
  }
}

TEST_F(ClusterTest, BadTokenIsRefusedByTheCoordinatorAndEveryServer) {
  TestClientOptions wrong_token(std::chrono::milliseconds(10000));
  wrong_token.token = "wrong-token";
  auto bad = Client::Connect(cluster().ClusterClientOptions(wrong_token));
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kUnauthenticated) << bad.status();

  for (int i = 0; i < cluster().server_count(); ++i) {
    const std::string& address = cluster().server(i).address();
    auto d = Client::Connect(cluster().DirectClientOptions(i, wrong_token));
    ASSERT_FALSE(d.ok()) << address;
    EXPECT_TRUE(d.status().code() == StatusCode::kPermissionDenied ||
                d.status().code() == StatusCode::kUnauthenticated)
        << address << ": " << d.status();
  }
  const std::string wrong = cluster().dir() + "/wrong";
  WriteFile(wrong, "wrong-token\n");
  auto r = Kvctl({"members"}, wrong);
  EXPECT_EQ(r.exit_code, 2);
  // The good token still works everywhere.
  auto good = NewClient();
  ASSERT_NE(good, nullptr);
  ASSERT_TRUE(good->Put("still", "works").ok());
}

}  // namespace
}  // namespace rkv::testing
