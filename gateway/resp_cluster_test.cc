// RESP sessions on a cluster (a coordinator and two servers, R = 2): keys
// spread over both servers through MSET/MGET batches, CAS increments, and
// DBSIZE / INFO's approximate key count from the servers' heartbeats.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "gateway/resp_session.h"
#include "rkv/client.h"
#include "tests/test_cluster.h"
#include "gateway/resp_test_util.h"

namespace rkv::gateway {
namespace {

using testing::Multibulk;

std::string Serve(Session& session, const std::vector<std::string>& args) {
  std::string in = Multibulk(args);
  std::string out;
  ServeResult r = session.Serve(in, &out, size_t{1} << 30);
  EXPECT_EQ(r.consumed, in.size());
  return out;
}

TEST(RespClusterTest, KeysSpreadOverServersAndDbsizeCountsEachOnce) {
  ::rkv::testing::TestClusterOptions options;
  options.servers = 2;
  options.replicas = 2;
  ::rkv::testing::TestCluster cluster(options);
  rkv::Status started = cluster.Start();
  ASSERT_TRUE(started.ok()) << started;
  auto client = cluster.ClusterClient();
  ASSERT_NE(client, nullptr);
  RespShared shared;
  RespOptions o;
  o.limits.max_key_bytes = client->max_key_bytes();
  o.limits.max_value_bytes = client->max_value_bytes();
  o.shared = &shared;
  auto session = NewRespSession(client.get(), o);

  // 100 keys: one MSET, then pipelined GETs (one MultiGet batch per 32).
  constexpr int kKeys = 100;
  std::vector<std::string> mset = {"MSET"};
  std::string gets;
  std::string expected;
  for (int i = 0; i < kKeys; ++i) {
    mset.push_back("key:" + std::to_string(i));
    mset.push_back("value:" + std::to_string(i));
    gets += Multibulk({"GET", "key:" + std::to_string(i)});
    std::string v = "value:" + std::to_string(i);
    expected += "$" + std::to_string(v.size()) + "\r\n" + v + "\r\n";
  }
  EXPECT_EQ(Serve(*session, mset), "+OK\r\n");
  std::string out;
  ServeResult r = session->Serve(gets, &out, size_t{1} << 30);
  EXPECT_EQ(r.consumed, gets.size());
  EXPECT_EQ(out, expected);
  EXPECT_EQ(Serve(*session, {"INCR", "key:counter"}), ":1\r\n");
  EXPECT_EQ(Serve(*session, {"INCRBY", "key:counter", "9"}), ":10\r\n");

  // The servers report their keys in heartbeats; each key is held twice.
  std::string dbsize;
  const std::string want = ":" + std::to_string(kKeys + 1) + "\r\n";
  for (int i = 0; i < 6000 && dbsize != want; ++i) {
    dbsize = Serve(*session, {"DBSIZE"});
    if (dbsize != want) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(dbsize, want);
  std::string info = Serve(*session, {"INFO", "keyspace"});
  EXPECT_NE(info.find("# approximate"), std::string::npos) << info;
  EXPECT_NE(info.find("db0:keys=" + std::to_string(kKeys + 1)), std::string::npos) << info;
}

}  // namespace
}  // namespace rkv::gateway
