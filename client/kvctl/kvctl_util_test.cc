#include "client/kvctl/kvctl_util.h"

#include <gtest/gtest.h>

#include <functional>
#include <map>

namespace rkv::kvctl {
namespace {

TEST(ParseInvocationTest, ParsesEachCommand) {
  auto get = ParseInvocation({"get", "k"}, false);
  ASSERT_TRUE(get.ok()) << get.status();
  EXPECT_EQ(get->command, Command::kGet);
  EXPECT_EQ(get->key, "k");

  auto put = ParseInvocation({"put", "k", "v"}, false);
  ASSERT_TRUE(put.ok()) << put.status();
  EXPECT_EQ(put->command, Command::kPut);
  EXPECT_TRUE(put->has_value_arg);
  EXPECT_EQ(put->value_arg, "v");

  auto put_stdin = ParseInvocation({"put", "k"}, false);
  ASSERT_TRUE(put_stdin.ok());
  EXPECT_FALSE(put_stdin->has_value_arg);

  auto del = ParseInvocation({"del", "k"}, false);
  ASSERT_TRUE(del.ok());
  EXPECT_EQ(del->command, Command::kDel);
}

TEST(ParseInvocationTest, ExpiryCommands) {
  auto ttl = ParseInvocation({"ttl", "k"}, false);
  ASSERT_TRUE(ttl.ok());
  EXPECT_EQ(ttl->command, Command::kTtl);
  auto persist = ParseInvocation({"persist", "k"}, false);
  ASSERT_TRUE(persist.ok());
  EXPECT_EQ(persist->command, Command::kPersist);
  auto expire = ParseInvocation({"expire", "k", "30"}, false);
  ASSERT_TRUE(expire.ok());
  EXPECT_EQ(expire->command, Command::kExpire);
  EXPECT_EQ(expire->value_arg, "30");
  EXPECT_FALSE(ParseInvocation({"expire", "k"}, false).ok());
  EXPECT_FALSE(ParseInvocation({"ttl", "k", "x"}, false).ok());
  EXPECT_FALSE(ParseInvocation({"persist"}, false).ok());
}

TEST(ParseSecondsTest, WholeSecondsWithinTenYears) {
  EXPECT_EQ(*ParseSeconds("0", "x"), 0);
  EXPECT_EQ(*ParseSeconds("600", "x"), 600);
  EXPECT_EQ(*ParseSeconds("-3", "x"), -3);
  for (const char* bad : {"", "-", "1.5", "10s", " 1", "99999999999999999999", "400000000"}) {
    EXPECT_EQ(ParseSeconds(bad, "x").status().code(), StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_EQ(DeadlineAfter(1'000, 2), 3'000);
}

TEST(FormatTtlTest, SecondsLeftRoundedUpOrNone) {
  EXPECT_EQ(FormatTtl(0, 5'000), "none");
  EXPECT_EQ(FormatTtl(10'000, 5'000), "5");
  EXPECT_EQ(FormatTtl(10'001, 5'000), "6");
  EXPECT_EQ(FormatTtl(4'000, 5'000), "0");
  EXPECT_EQ(FormatTtlJson("k", 0, 1), "{\"key\":\"k\",\"expires_at_ms\":0,\"ttl_seconds\":null}\n");
  EXPECT_EQ(FormatExpiryJson("k", 7, 9), "{\"key\":\"k\",\"version\":7,\"expires_at_ms\":9}\n");
}

TEST(ParseInvocationTest, RejectsBadCommandLines) {
  EXPECT_FALSE(ParseInvocation({}, false).ok());
  EXPECT_FALSE(ParseInvocation({"frob", "k"}, false).ok());
  EXPECT_FALSE(ParseInvocation({"get"}, false).ok());
  EXPECT_FALSE(ParseInvocation({"get", "k", "extra"}, false).ok());
  EXPECT_FALSE(ParseInvocation({"del", "k", "extra"}, false).ok());
  EXPECT_FALSE(ParseInvocation({"put", "k", "v", "extra"}, false).ok());
}

TEST(ParseInvocationTest, DecodesHexKeys) {
  auto inv = ParseInvocation({"get", "00ff41"}, true);
  ASSERT_TRUE(inv.ok()) << inv.status();
  EXPECT_EQ(inv->key, std::string("\x00\xff" "A", 3));
  EXPECT_FALSE(ParseInvocation({"get", "0g"}, true).ok());
  EXPECT_FALSE(ParseInvocation({"get", "abc"}, true).ok());
}

TEST(ParseInvocationTest, WhereTakesItsKeyAsGetDoes) {
  // Bad hex is refused here, alike; an empty or over-long key is refused
  // by the client (Client::ShardOfKey checks it as Get and Put do).
  for (const bool hex : {false, true}) {
    for (const std::string& key : {std::string("6b"), std::string(), std::string("0g"), std::string("abc"),
                                   std::string(70000, 'a')}) {
      const auto get = ParseInvocation({"get", key}, hex);
      const auto where = ParseInvocation({"where", key}, hex);
      ASSERT_EQ(where.ok(), get.ok()) << key.size() << " hex " << hex;
      if (get.ok()) {
        EXPECT_EQ(where->key, get->key);
      } else {
        EXPECT_EQ(where.status().code(), get.status().code());
        EXPECT_EQ(where.status().message(), "where" + get.status().message().substr(3));
      }
    }
  }
}

TEST(ChooseValueSourceTest, PicksTheSource) {
  Invocation inv;
  inv.command = Command::kPut;
  inv.has_value_arg = true;
  inv.value_arg = "v";
  EXPECT_EQ(ChooseValueSource(inv, false, true).value(), ValueSource::kArgument);
  EXPECT_FALSE(ChooseValueSource(inv, true, true).ok());

  inv.value_arg = "-";
  EXPECT_EQ(ChooseValueSource(inv, false, true).value(), ValueSource::kStdin);
  EXPECT_FALSE(ChooseValueSource(inv, true, false).ok());

  inv.has_value_arg = false;
  EXPECT_EQ(ChooseValueSource(inv, true, true).value(), ValueSource::kFile);
  EXPECT_EQ(ChooseValueSource(inv, false, false).value(), ValueSource::kStdin);
  EXPECT_FALSE(ChooseValueSource(inv, false, true).ok());  // terminal, no value
}

TEST(Utf8Test, ValidatesSequences) {
  EXPECT_TRUE(IsValidUtf8(""));
  EXPECT_TRUE(IsValidUtf8("plain ascii"));
  EXPECT_TRUE(IsValidUtf8("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"));
  EXPECT_FALSE(IsValidUtf8("\xff"));
  EXPECT_FALSE(IsValidUtf8("\xc3"));              // truncated
  EXPECT_FALSE(IsValidUtf8("\xe2\x82"));          // truncated
  EXPECT_FALSE(IsValidUtf8("\xc0\xaf"));          // overlong '/'
  EXPECT_FALSE(IsValidUtf8("\xed\xa0\x80"));      // surrogate
  EXPECT_FALSE(IsValidUtf8("\xf4\x90\x80\x80"));  // over U+10FFFF
  EXPECT_FALSE(IsValidUtf8("a\x80"));             // stray continuation
}

TEST(JsonTest, EscapesStrings) {
  EXPECT_EQ(JsonQuote("a\"b\\c"), "\"a\\\"b\\\\c\"");
  EXPECT_EQ(JsonQuote("\n\t\r\b\f"), "\"\\n\\t\\r\\b\\f\"");
  EXPECT_EQ(JsonQuote(std::string("\x00\x1f\x7f", 3)), "\"\\u0000\\u001f\\u007f\"");
  EXPECT_EQ(JsonQuote("caf\xc3\xa9"), "\"caf\xc3\xa9\"");
}

TEST(JsonTest, Base64) {
  EXPECT_EQ(Base64Encode(""), "");
  EXPECT_EQ(Base64Encode("f"), "Zg==");
  EXPECT_EQ(Base64Encode("fo"), "Zm8=");
  EXPECT_EQ(Base64Encode("foo"), "Zm9v");
  EXPECT_EQ(Base64Encode("foobar"), "Zm9vYmFy");
  EXPECT_EQ(Base64Encode(std::string("\xff\x00\xfe", 3)), "/wD+");
}

TEST(JsonTest, FormatsCommandOutput) {
  EXPECT_EQ(FormatGetJson("k", "v\"1", 3), "{\"key\":\"k\",\"value\":\"v\\\"1\",\"version\":3}\n");
  EXPECT_EQ(FormatGetJson("k", std::string("\xff\x00", 2), 4),
            "{\"key\":\"k\",\"value_base64\":\"/wA=\",\"version\":4}\n");
  EXPECT_EQ(FormatPutJson("\xff", 9), "{\"key_base64\":\"/w==\",\"version\":9}\n");
  EXPECT_EQ(FormatDelJson("k"), "{\"key\":\"k\",\"deleted\":true}\n");
}

}  // namespace
}  // namespace rkv::kvctl

namespace rkv::kvctl {
namespace {

TEST(FormatCoordinatorsTest, ShowsRolesLeaderAndEtcdHealth) {
  CoordinatorInfo a;
  a.address = "10.0.0.1:7600";
  a.reachable = true;
  a.role = "leader";
  a.leader = "10.0.0.1:7600";
  a.map_version = 42;
  a.state_revision = 97;
  a.etcd_prefix = "/rkv/prod/";
  a.etcd = {{"10.0.0.1:2379", true, "3.4.23", "", true}, {"10.0.0.2:2379", false, "", "UNAVAILABLE: down", false}};
  CoordinatorInfo b = a;
  b.address = "10.0.0.2:7600";
  b.role = "standby";
  CoordinatorInfo c;
  c.address = "10.0.0.3:7600";
  c.error = "UNAVAILABLE: not connected";
  EXPECT_EQ(FormatCoordinatorsText({a, b, c}),
            "COORDINATOR    ROLE         LEADER         MAP VERSION  STATE REVISION\n"
            "10.0.0.1:7600  leader       10.0.0.1:7600  42           97\n"
            "10.0.0.2:7600  standby      10.0.0.1:7600  42           97\n"
            "10.0.0.3:7600  unreachable  -              -            -\n"
            "10.0.0.3:7600: UNAVAILABLE: not connected\n"
            "etcd (prefix /rkv/prod/, as 10.0.0.1:7600 sees it):\n"
            "  10.0.0.1:2379: healthy, etcd 3.4.23, leads etcd\n"
            "  10.0.0.2:2379: UNHEALTHY: UNAVAILABLE: down\n");
  EXPECT_EQ(FormatCoordinatorsLine({a, b, c}),
            "coordinators: 10.0.0.1:7600 leader, 10.0.0.2:7600 standby, 10.0.0.3:7600 unreachable\n");
  EXPECT_EQ(FormatCoordinatorsJson({c}),
            "[{\"address\":\"10.0.0.3:7600\",\"reachable\":false,\"error\":\"UNAVAILABLE: not connected\"}]\n");
  const std::string json = FormatCoordinatorsJson({a});
  EXPECT_NE(json.find("\"role\":\"leader\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"leads_etcd\":true"), std::string::npos) << json;
}

TEST(ParseInvocationTest, ParsesClusterCommands) {
  auto coordinators = ParseInvocation({"coordinators"}, false);
  ASSERT_TRUE(coordinators.ok()) << coordinators.status();
  EXPECT_EQ(coordinators->command, Command::kCoordinators);
  EXPECT_FALSE(ParseInvocation({"coordinators", "x"}, false).ok());

  auto m = ParseInvocation({"members"}, false);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->command, Command::kMembers);
  EXPECT_FALSE(ParseInvocation({"members", "x"}, false).ok());

  auto all = ParseInvocation({"stats"}, false);
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(all->command, Command::kStats);
  EXPECT_EQ(all->server_id, "");
  auto one = ParseInvocation({"stats", "s-1"}, true);  // --key_hex does not touch SERVER_ID
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(one->server_id, "s-1");
  EXPECT_FALSE(ParseInvocation({"stats", "a", "b"}, false).ok());
  EXPECT_FALSE(ParseInvocation({"stats", ""}, false).ok());

  auto shards = ParseInvocation({"shards"}, false);
  ASSERT_TRUE(shards.ok()) << shards.status();
  EXPECT_EQ(shards->command, Command::kShards);
  EXPECT_EQ(ParseInvocation({"shards", "x"}, false).status().message(), "shards: takes no arguments (1 given)");

  auto where = ParseInvocation({"where", "6b"}, true);
  ASSERT_TRUE(where.ok()) << where.status();
  EXPECT_EQ(where->command, Command::kWhere);
  EXPECT_EQ(where->key, "k");
  EXPECT_EQ(ParseInvocation({"where"}, false).status().message(), "where: missing KEY");
  EXPECT_FALSE(ParseInvocation({"where", "k", "v"}, false).ok());
}

ClusterInfo SmallCluster() {
  ClusterInfo c;
  c.map_version = 9;
  c.replication_factor = 3;
  for (const char* id : {"a", "b", "c"}) {
    MemberInfo m;
    m.server_id = id;
    m.state = "UP";
    m.data_address = std::string("10.0.0.") + static_cast<char>('1' + (id[0] - 'a')) + ":7700";
    m.zone = std::string("z-") + id;
    c.members.push_back(m);
  }
  c.members[1].state = "DOWN";
  c.members[2].zone = "";
  c.shards.resize(3);
  c.shards[0].replicas = {"a", "b", "c"};
  c.shards[1].replicas = {"b", "c"};
  c.shards[2].replicas = {"c"};
  for (uint32_t s = 0; s < 3; ++s) c.shards[s].shard = s;
  return c;
}

TEST(ClusterFormatTest, FormatsShards) {
  const ClusterInfo c = SmallCluster();
  EXPECT_EQ(UnderReplicatedShards(c), 2u);
  EXPECT_EQ(FormatShardsText(c),
            "SHARD  PRIMARY  BACKUPS  SYNCING\n"
            "0      a        b,c      -\n"
            "1      b        c        -\n"
            "2      c        -        -\n"
            "3 shards, R=3, 2 with fewer than 3 replicas\n");
  EXPECT_EQ(FormatShardsJson(c),
            "{\"map_version\":9,\"shard_count\":3,\"replication_factor\":3,\"under_replicated\":2,\"shards\":["
            "{\"shard\":0,\"primary\":\"a\",\"backups\":[\"b\",\"c\"],\"syncing\":[],\"handover_from\":\"\"},"
            "{\"shard\":1,\"primary\":\"b\",\"backups\":[\"c\"],\"syncing\":[],\"handover_from\":\"\"},"
            "{\"shard\":2,\"primary\":\"c\",\"backups\":[],\"syncing\":[],\"handover_from\":\"\"}]}\n");
}

TEST(ClusterFormatTest, FormatsShardsCatchingUpAndHandingOver) {
  ClusterInfo c = SmallCluster();
  c.shards[1].syncing = {"a"};
  c.shards[2].syncing = {"a", "b"};
  c.shards[0].replicas = {"b", "a", "c"};
  c.shards[0].handover_from = "a";
  EXPECT_EQ(FormatShardsText(c),
            "SHARD  PRIMARY     BACKUPS  SYNCING\n"
            "0      b (from a)  a,c      -\n"
            "1      b           c        a\n"
            "2      c           -        a,b\n"
            "3 shards, R=3, 2 with fewer than 3 replicas, 2 catching up\n");
  const std::string json = FormatShardsJson(c);
  EXPECT_NE(json.find("{\"shard\":0,\"primary\":\"b\",\"backups\":[\"a\",\"c\"],\"syncing\":[],"
                      "\"handover_from\":\"a\"}"),
            std::string::npos)
      << json;
  EXPECT_NE(json.find("\"syncing\":[\"a\",\"b\"]"), std::string::npos) << json;
}

TEST(ClusterFormatTest, FormatsWhere) {
  const ClusterInfo c = SmallCluster();
  EXPECT_EQ(FormatWhereText(c, 0),
            "shard 0 of 3, map version 9\n"
            "SERVER  ROLE     STATE  ADDRESS        ZONE\n"
            "a       primary  UP     10.0.0.1:7700  z-a\n"
            "b       backup   DOWN   10.0.0.2:7700  z-b\n"
            "c       backup   UP     10.0.0.3:7700  -\n");
  EXPECT_EQ(FormatWhereJson(c, "k", 1),
            "{\"key\":\"k\",\"shard\":1,\"map_version\":9,\"replicas\":["
            "{\"server_id\":\"b\",\"role\":\"primary\",\"state\":\"DOWN\",\"data_address\":\"10.0.0.2:7700\","
            "\"zone\":\"z-b\"},"
            "{\"server_id\":\"c\",\"role\":\"backup\",\"state\":\"UP\",\"data_address\":\"10.0.0.3:7700\","
            "\"zone\":\"\"}]}\n");
  EXPECT_NE(FormatWhereJson(c, std::string("\xff", 1), 2).find("\"key_base64\":\"/w==\""), std::string::npos);
}

TEST(ClusterFormatTest, FormatsBytes) {
  EXPECT_EQ(FormatBytes(0), "0 B");
  EXPECT_EQ(FormatBytes(1023), "1023 B");
  EXPECT_EQ(FormatBytes(1536), "1.5 KiB");
  EXPECT_EQ(FormatBytes(uint64_t{3} << 30), "3.0 GiB");
}

TEST(ClusterFormatTest, FormatsMembers) {
  MemberInfo a;
  a.server_id = "s-1";
  a.epoch = 5;
  a.state = "UP";
  a.data_address = "127.0.0.1:7701";
  a.admin_address = "127.0.0.1:8701";
  a.transport = "tcp";
  a.shards = 342;
  a.keys = 10;
  a.heap_bytes_used = 2048;
  a.heap_bytes = 1 << 20;
  a.zone = "rack 1";
  a.backup_shards = 684;
  MemberInfo b = a;
  b.server_id = "server-two";
  b.state = "DOWN";
  b.zone = "";
  MemberInfo c = a;
  c.server_id = "s-3";
  c.draining = true;
  c.syncing_shards = 7;
  const std::string text = FormatMembersText({a, b, c}, 1'000'000);
  EXPECT_EQ(text,
            "SERVER      EPOCH  STATE        ADDRESS         ZONE    PRIMARIES  BACKUPS  SYNCING  KEYS  "
            "MEMORY (USED/TOTAL)\n"
            "s-1         5      UP           127.0.0.1:7701  rack 1  342        684      0        10    "
            "2.0 KiB / 1.0 MiB\n"
            "server-two  5      DOWN         127.0.0.1:7701  -       342        684      0        10    "
            "2.0 KiB / 1.0 MiB\n"
            "s-3         5      UP,DRAINING  127.0.0.1:7701  rack 1  342        684      7        10    "
            "2.0 KiB / 1.0 MiB\n");
  EXPECT_EQ(FormatMembersJson({a}, 1'000'000),
            "[{\"server_id\":\"s-1\",\"epoch\":5,\"state\":\"UP\",\"data_address\":\"127.0.0.1:7701\","
            "\"admin_address\":\"127.0.0.1:8701\",\"transport\":\"tcp\",\"shards\":342,\"keys\":10,"
            "\"heap_bytes_used\":2048,\"heap_bytes\":1048576,\"zone\":\"rack 1\",\"backup_shards\":684,"
            "\"syncing_shards\":0,\"draining\":false,\"down_since_unix_ms\":0,\"down_for_ms\":null}]\n");
  EXPECT_NE(FormatMembersJson({c}, 1'000'000).find("\"syncing_shards\":7,\"draining\":true,"), std::string::npos);
  EXPECT_EQ(FormatMembersJson({}, 1'000'000), "[]\n");
}

TEST(ClusterFormatTest, FormatsHowLongADownServerHasBeenDown) {
  const uint64_t now = 1'764'000'000'000;  // ms since the Unix epoch
  MemberInfo up;
  up.server_id = "s-1";
  up.state = "UP";
  up.data_address = "10.0.0.1:7700";
  MemberInfo down = up;
  down.server_id = "s-2";
  down.state = "DOWN";
  down.down_since_unix_ms = now - (3 * 60 + 12) * 1000 - 500;
  MemberInfo drained = down;
  drained.server_id = "s-3";
  drained.draining = true;
  drained.down_since_unix_ms = now - (26 * 3600 + 5 * 60) * 1000;
  MemberInfo unknown = down;  // marked DOWN by a coordinator that did not record when
  unknown.server_id = "s-4";
  unknown.down_since_unix_ms = 0;
  MemberInfo ahead = down;  // the coordinator's clock is ahead of ours
  ahead.server_id = "s-5";
  ahead.down_since_unix_ms = now + 4000;
  const std::string text = FormatMembersText({up, down, drained, unknown, ahead}, now);
  EXPECT_EQ(text,
            "SERVER  EPOCH  STATE                    ADDRESS        ZONE  PRIMARIES  BACKUPS  SYNCING  KEYS  "
            "MEMORY (USED/TOTAL)\n"
            "s-1     0      UP                       10.0.0.1:7700  -     0          0        0        0     "
            "0 B / 0 B\n"
            "s-2     0      DOWN for 3m12s           10.0.0.1:7700  -     0          0        0        0     "
            "0 B / 0 B\n"
            "s-3     0      DOWN,DRAINING for 1d02h  10.0.0.1:7700  -     0          0        0        0     "
            "0 B / 0 B\n"
            "s-4     0      DOWN                     10.0.0.1:7700  -     0          0        0        0     "
            "0 B / 0 B\n"
            "s-5     0      DOWN for 0s              10.0.0.1:7700  -     0          0        0        0     "
            "0 B / 0 B\n");
  const std::string json = FormatMembersJson({up, down, unknown, ahead}, now);
  EXPECT_NE(json.find("\"down_since_unix_ms\":0,\"down_for_ms\":null}"), std::string::npos) << json;
  EXPECT_NE(json.find("\"down_since_unix_ms\":" + std::to_string(down.down_since_unix_ms) +
                      ",\"down_for_ms\":192500}"),
            std::string::npos)
      << json;
  EXPECT_NE(json.find("\"down_for_ms\":0}"), std::string::npos) << json;
}

TEST(ClusterFormatTest, ElapsedTimesInTheirTwoLargestUnits) {
  EXPECT_EQ(FormatElapsed(0), "0s");
  EXPECT_EQ(FormatElapsed(999), "0s");
  EXPECT_EQ(FormatElapsed(59'999), "59s");
  EXPECT_EQ(FormatElapsed(60'000), "1m00s");
  EXPECT_EQ(FormatElapsed(192'500), "3m12s");
  EXPECT_EQ(FormatElapsed(3'599'999), "59m59s");
  EXPECT_EQ(FormatElapsed(3'600'000), "1h00m");
  EXPECT_EQ(FormatElapsed((2 * 3600 + 5 * 60 + 59) * 1000), "2h05m");
  EXPECT_EQ(FormatElapsed(86'400'000), "1d00h");
  EXPECT_EQ(FormatElapsed(uint64_t{400} * 86'400'000 + 3 * 3'600'000), "400d03h");
  EXPECT_EQ(FormatElapsed(UINT64_MAX), "213503982334d14h");
}

TEST(ClusterFormatTest, FormatsStats) {
  ServerStatsInfo s;
  s.server_id = "s-1";
  s.epoch = 2;
  s.counters = {{"keys", 3, "records"},
                {"puts", 4, ""},
                {"deletes", 1, ""},
                {"request_errors", 0, ""},
                {"connections", 2, ""},
                {"gets_served_by_cpu", 0, ""},
                {"heap_bytes_used", 128, ""},
                {"heap_bytes_quarantined", 64, ""},
                {"heap_bytes", 4096, ""},
                {"polling_threads", 3, ""},
                {"bytes_per_connection", 2048, ""},
                {"store_unwritten_writes", 5, ""},
                {"store_unwritten_bytes", 5120, ""},
                {"connections_probing", 1, ""},
                {"connections_released_dead", 6, ""},
                {"connect_requests_screened_out", 2000, ""},
                {"connect_requests_source_limited", 8, ""},
                {"a_new_counter", 9, "kvctl knows nothing of it"}};
  // JSON: every counter the server sent, by name, in its order.
  EXPECT_EQ(FormatStatsJson({s}),
            "[{\"server_id\":\"s-1\",\"epoch\":2,\"keys\":3,\"puts\":4,\"deletes\":1,\"request_errors\":0,"
            "\"connections\":2,\"gets_served_by_cpu\":0,\"heap_bytes_used\":128,\"heap_bytes_quarantined\":64,"
            "\"heap_bytes\":4096,\"polling_threads\":3,\"bytes_per_connection\":2048,"
            "\"store_unwritten_writes\":5,\"store_unwritten_bytes\":5120,\"connections_probing\":1,"
            "\"connections_released_dead\":6,\"connect_requests_screened_out\":2000,"
            "\"connect_requests_source_limited\":8,\"a_new_counter\":9}]\n");
  EXPECT_EQ(s.Find("a_new_counter"), std::optional<uint64_t>(9));
  EXPECT_EQ(s.Find("absent"), std::nullopt);
  const std::string text = FormatStatsText({s});
  EXPECT_EQ(text.substr(0, text.find('\n')),
            "SERVER  EPOCH  KEYS  PUTS  DELETES  ERRORS  CONNECTIONS  GETS_BY_CPU  HEAP_USED  HEAP_QUARANTINED  "
            "HEAP_TOTAL  THREADS  PER_CONNECTION  UNWRITTEN  PROBING  RELEASED_DEAD  SCREENED_OUT  SOURCE_LIMITED");
  // Connections by state: probing, released dead, screened out, source
  // limited.
  EXPECT_NE(text.find("5.0 KiB    1        6              2000          8"), std::string::npos) << text;
  EXPECT_NE(text.find("s-1     2      3     4     1        0       2            0            128 B      64 B"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("4.0 KiB     3        2.0 KiB         5.0 KiB"), std::string::npos) << text;
  // A server without some counter (an older one) shows "-" there.
  ServerStatsInfo old;
  old.server_id = "s-2";
  old.counters = {{"keys", 7, ""}};
  const std::string partial = FormatStatsText({old});
  EXPECT_NE(partial.find("s-2     0      7     -     -"), std::string::npos) << partial;
  EXPECT_EQ(FormatStatsJson({old}), "[{\"server_id\":\"s-2\",\"epoch\":0,\"keys\":7}]\n");
}

TEST(ParseInvocationTest, VerifyAndDrain) {
  auto v = ParseInvocation({"verify"}, false);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->command, Command::kVerify);
  EXPECT_EQ(ParseInvocation({"verify", "3"}, false).status().message(),
            "verify: takes no arguments (1 given; shards are chosen with --shards=LIST)");
  auto d = ParseInvocation({"drain", "s-00ab"}, false);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->command, Command::kDrain);
  EXPECT_EQ(d->server_id, "s-00ab");
  EXPECT_EQ(ParseInvocation({"drain"}, false).status().message(), "drain: missing SERVER_ID");
  EXPECT_EQ(ParseInvocation({"drain", ""}, false).status().message(), "drain: SERVER_ID is empty");
  EXPECT_EQ(ParseInvocation({"drain", "a", "b"}, false).status().message(), "drain: too many arguments (2)");
}

TEST(ParseInvocationTest, Forget) {
  auto f = ParseInvocation({"forget", "s-00ab"}, false);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->command, Command::kForget);
  EXPECT_EQ(f->command_name, "forget");
  EXPECT_EQ(f->server_id, "s-00ab");
  EXPECT_TRUE(f->key.empty());
  // --key_hex does not apply to a server id.
  auto hex = ParseInvocation({"forget", "s-1"}, true);
  ASSERT_TRUE(hex.ok()) << hex.status();
  EXPECT_EQ(hex->server_id, "s-1");
  EXPECT_EQ(ParseInvocation({"forget"}, false).status().message(), "forget: missing SERVER_ID");
  EXPECT_EQ(ParseInvocation({"forget", ""}, false).status().message(), "forget: SERVER_ID is empty");
  EXPECT_EQ(ParseInvocation({"forget", "a", "b"}, false).status().message(), "forget: too many arguments (2)");
  EXPECT_EQ(ParseInvocation({"forget", "a", "b"}, false).status().code(), StatusCode::kInvalidArgument);
}

TEST(ParseShardListTest, NumbersAndRanges) {
  auto l = ParseShardList("7,0,3-5,4");
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_EQ(*l, (std::vector<uint32_t>{0, 3, 4, 5, 7}));
  EXPECT_EQ(*ParseShardList("4294967295"), (std::vector<uint32_t>{4294967295u}));
  EXPECT_EQ(*ParseShardList("2-2"), (std::vector<uint32_t>{2}));
  for (const char* bad : {"", ",", "1,", ",1", "a", "1-", "-1", "5-3", "1--2", "4294967296", " 1", "1-2-3",
                          "0-99999999"}) {
    EXPECT_EQ(ParseShardList(bad).status().code(), StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_EQ(ParseShardList("5-3").status().message(), "--shards: range '5-3' ends before it starts");
}

ReplicaDigest Digest(std::string id, uint32_t shard, uint64_t keys, uint64_t checksum, uint64_t max_version,
                     uint64_t map_version = 4) {
  return ReplicaDigest{std::move(id), map_version, ShardChecksumInfo{shard, keys, checksum, max_version}};
}

TEST(VerifyTest, DigestsAgreeOnlyWhenEverythingMatches) {
  EXPECT_TRUE(DigestsAgree({}));
  EXPECT_TRUE(DigestsAgree({Digest("a", 0, 3, 99, 7)}));
  EXPECT_TRUE(DigestsAgree({Digest("a", 0, 3, 99, 7), Digest("b", 0, 3, 99, 7, /*map_version=*/5)}));
  EXPECT_FALSE(DigestsAgree({Digest("a", 0, 3, 99, 7), Digest("b", 0, 3, 98, 7)}));
  EXPECT_FALSE(DigestsAgree({Digest("a", 0, 3, 99, 7), Digest("b", 0, 4, 99, 7)}));
  EXPECT_FALSE(DigestsAgree({Digest("a", 0, 3, 99, 7), Digest("b", 0, 3, 99, 7), Digest("c", 0, 3, 99, 8)}));
}

TEST(VerifyTest, DiffListingsNamesKeysAtOtherVersionsOrMissing) {
  const std::vector<std::vector<ShardKeyVersion>> listings = {
      {{"k1", 5}, {"k2", 6}, {"k3", 7}, {"k5", 1}},
      {{"k3", 7}, {"k2", 9}, {"k1", 5}, {"k5", 1}},
      {{"k1", 5}, {"k2", 6}, {"k3", 7}, {"k4", 2}, {"k5", 1}},
  };
  const std::vector<KeyDiff> diffs = DiffListings(listings);
  ASSERT_EQ(diffs.size(), 2u);
  EXPECT_EQ(diffs[0].key, "k2");
  EXPECT_EQ(diffs[0].versions, (std::vector<uint64_t>{6, 9, 6}));
  EXPECT_EQ(diffs[1].key, "k4");
  EXPECT_EQ(diffs[1].versions, (std::vector<uint64_t>{0, 0, 2}));
  EXPECT_TRUE(DiffListings({listings[0], listings[0]}).empty());
  EXPECT_TRUE(DiffListings({}).empty());
}

// A cluster of `shards` shards over a, b and c (R=3), whose servers answer
// digests from `digest` (shard, server, round) -> checksum.
struct FakeCluster {
  uint32_t shards = 4;
  uint64_t map_version = 4;
  int round = 0;
  std::function<uint64_t(uint32_t shard, const std::string& server, int round)> checksum;
  std::map<std::string, std::vector<std::vector<uint32_t>>> asked;  // server -> each call's shards
  std::vector<std::string> progress;
  Status fail_server = Status::Ok();  // returned for server "b" when not OK

  VerifyIo Io() {
    VerifyIo io;
    io.cluster = [this]() -> StatusOr<ClusterInfo> {
      ++round;
      ClusterInfo c;
      c.map_version = map_version;
      c.replication_factor = 3;
      for (uint32_t s = 0; s < shards; ++s) {
        ShardInfo info;
        info.shard = s;
        info.replicas = {"a", "b", "c"};
        info.syncing = {"d"};  // never asked
        c.shards.push_back(info);
      }
      return c;
    };
    io.checksums = [this](const std::string& id, const std::vector<uint32_t>& wanted) -> StatusOr<ServerShardChecksums> {
      asked[id].push_back(wanted);
      if (id == "b" && !fail_server.ok()) return fail_server;
      ServerShardChecksums out;
      out.server_id = id;
      out.map_version = map_version;
      for (const uint32_t s : wanted) out.shards.push_back(ShardChecksumInfo{s, 10, checksum(s, id, round), 20});
      return out;
    };
    io.list = [](const std::string& id, uint32_t shard) -> StatusOr<ShardListingInfo> {
      ShardListingInfo l;
      l.server_id = id;
      l.records = {{"same", 1}, {"odd", id == "c" ? 3u : 2u}};
      if (shard == 1 && id == "a") l.records.push_back({"only-on-a", 9});
      return l;
    };
    io.pause = [](int) {};
    io.progress = [this](const std::string& line) { progress.push_back(line); };
    return io;
  }
};

TEST(VerifyTest, AllAgreeInOneRound) {
  FakeCluster fake;
  fake.checksum = [](uint32_t shard, const std::string&, int) { return 100 + shard; };
  auto report = RunVerify(VerifyOptions{}, fake.Io());
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_TRUE(report->disagreeing.empty());
  EXPECT_EQ(report->shards_checked, 4u);
  EXPECT_EQ(report->rounds, 1);
  EXPECT_EQ(fake.asked.size(), 3u);  // the syncing server is not asked
  for (const auto& [id, calls] : fake.asked) {
    ASSERT_EQ(calls.size(), 1u) << id;  // one call per server
    EXPECT_EQ(calls[0], (std::vector<uint32_t>{0, 1, 2, 3})) << id;
  }
  EXPECT_EQ(FormatVerifyText(*report), "verify: all 4 shards agree (map version 4, 1 round)\n");
  EXPECT_EQ(FormatVerifyJson(*report),
            "{\"map_version\":4,\"shards_checked\":4,\"single_copy\":0,\"rounds\":1,\"agree\":true,"
            "\"disagreeing\":[]}\n");
}

TEST(VerifyTest, AMomentaryDifferenceIsAskedAgainAndSettles) {
  FakeCluster fake;
  // Shard 2's backup c lags in round 1 only.
  fake.checksum = [](uint32_t shard, const std::string& id, int round) {
    return shard == 2 && id == "c" && round == 1 ? 1 : 100 + shard;
  };
  VerifyOptions opts;
  opts.shards = {1, 2};
  auto report = RunVerify(opts, fake.Io());
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_TRUE(report->disagreeing.empty());
  EXPECT_EQ(report->rounds, 2);
  EXPECT_EQ(report->shards_checked, 2u);
  ASSERT_EQ(fake.asked["a"].size(), 2u);
  EXPECT_EQ(fake.asked["a"][1], (std::vector<uint32_t>{2}));  // round 2 asks only the shard that differed
}

TEST(VerifyTest, APersistentDifferenceIsReportedWithItsKeys) {
  FakeCluster fake;
  fake.checksum = [](uint32_t shard, const std::string& id, int) {
    return shard == 1 && id == "c" ? 0xabcdef : 100 + shard;
  };
  VerifyOptions opts;
  opts.rounds = 3;
  opts.list_keys = true;
  auto report = RunVerify(opts, fake.Io());
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->rounds, 3);
  ASSERT_EQ(report->disagreeing.size(), 1u);
  const ShardDisagreement& d = report->disagreeing[0];
  EXPECT_EQ(d.shard, 1u);
  EXPECT_FALSE(d.map_changed);
  ASSERT_EQ(d.replicas.size(), 3u);
  EXPECT_EQ(d.replicas[2].server_id, "c");
  EXPECT_EQ(d.replicas[2].digest.checksum, 0xabcdefu);
  ASSERT_TRUE(d.keys_listed);
  ASSERT_EQ(d.key_diffs.size(), 2u);
  EXPECT_EQ(d.key_diffs[0].key, "odd");
  EXPECT_EQ(d.key_diffs[0].versions, (std::vector<uint64_t>{2, 2, 3}));
  EXPECT_EQ(d.key_diffs[1].key, "only-on-a");
  EXPECT_EQ(d.key_diffs[1].versions, (std::vector<uint64_t>{9, 0, 0}));
  EXPECT_EQ(FormatVerifyText(*report),
            "SHARD  SERVER  MAP  KEYS  MAX_VERSION  CHECKSUM\n"
            "1      a       4    10    20           0000000000000065\n"
            "1      b       4    10    20           0000000000000065\n"
            "1      c       4    10    20           0000000000abcdef\n"
            "shard 1: 2 keys differ (version on a b c; 0: absent)\n"
            "  \"odd\" 2 2 3\n"
            "  \"only-on-a\" 9 0 0\n"
            "verify: 1 of 4 shards disagree (map version 4, 3 rounds)\n");
  EXPECT_EQ(FormatVerifyJson(*report),
            "{\"map_version\":4,\"shards_checked\":4,\"single_copy\":0,\"rounds\":3,\"agree\":false,"
            "\"disagreeing\":[{\"shard\":1,\"map_changed\":false,\"replicas\":["
            "{\"server_id\":\"a\",\"map_version\":4,\"keys\":10,\"checksum\":101,\"max_version\":20},"
            "{\"server_id\":\"b\",\"map_version\":4,\"keys\":10,\"checksum\":101,\"max_version\":20},"
            "{\"server_id\":\"c\",\"map_version\":4,\"keys\":10,\"checksum\":11259375,\"max_version\":20}],"
            "\"key_diffs\":[{\"key\":\"odd\",\"versions\":[2,2,3]},{\"key\":\"only-on-a\",\"versions\":[9,0,0]}]}]}\n");
}

TEST(VerifyTest, ErrorsAndBadShardsStopIt) {
  FakeCluster fake;
  fake.checksum = [](uint32_t, const std::string&, int) { return 1; };
  VerifyOptions opts;
  opts.shards = {3, 4};
  auto report = RunVerify(opts, fake.Io());
  EXPECT_EQ(report.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(report.status().message(), "--shards: shard 4 is not below the shard count 4");
  EXPECT_TRUE(fake.asked.empty());
  fake.fail_server = Unavailable("server b: connection refused");
  report = RunVerify(VerifyOptions{}, fake.Io());
  EXPECT_EQ(report.status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(report.status().message(), "server b: connection refused");
}

TEST(DrainFormatTest, RolesLeftCountEveryRole) {
  ClusterInfo c = SmallCluster();
  c.shards[2].syncing = {"a"};
  RolesLeft a = RolesOf(c, "a");
  EXPECT_EQ(a.primaries, 1u);
  EXPECT_EQ(a.backups, 0u);
  EXPECT_EQ(a.syncing, 1u);
  EXPECT_EQ(a.total(), 2u);
  RolesLeft cc = RolesOf(c, "c");
  EXPECT_EQ(cc.primaries, 1u);
  EXPECT_EQ(cc.backups, 2u);
  EXPECT_EQ(RolesOf(c, "nobody").total(), 0u);
  EXPECT_EQ(FormatRolesLeft(a), "1 primary, 0 backups, 1 syncing");
  EXPECT_EQ(FormatRolesLeft(cc), "1 primary, 2 backups, 0 syncing");
  EXPECT_EQ(FormatDrainJson("s-1", 12, 3, false, a),
            "{\"server_id\":\"s-1\",\"map_version\":12,\"roles_to_move\":3,\"drained\":false,"
            "\"left\":{\"primaries\":1,\"backups\":0,\"syncing\":1}}\n");
}

TEST(ForgetFormatTest, TextAndJson) {
  EXPECT_EQ(FormatForgetText("s-1", 12), "forgot s-1: no longer listed (map version 12)\n");
  EXPECT_EQ(FormatForgetJson("s-1", 12), "{\"server_id\":\"s-1\",\"map_version\":12}\n");
}

TEST(DrainFollowTest, FollowsTheMapUntilTheServerHoldsNothing) {
  // What the coordinator's map says at each look: "a" loses its roles one
  // by one; one look fails (the coordinator restarting).
  std::vector<StatusOr<ClusterInfo>> looks;
  ClusterInfo c = SmallCluster();  // a: primary of 0
  c.shards[1].syncing = {"a"};
  c.map_version = 10;
  looks.push_back(c);
  c.map_version = 11;  // nothing changed for a: no line
  looks.push_back(c);
  looks.push_back(Unavailable("coordinator down"));
  looks.push_back(Unavailable("coordinator down"));  // the same error: one warning
  c.map_version = 12;
  c.shards[1].syncing.clear();
  c.shards[1].replicas = {"b", "c", "a"};
  looks.push_back(c);
  c.map_version = 13;
  c.shards[0].replicas = {"b", "a", "c"};
  c.shards[0].handover_from = "a";
  looks.push_back(c);
  c.map_version = 14;
  c.shards[0].replicas = {"b", "c"};
  c.shards[0].handover_from.clear();
  c.shards[1].replicas = {"b", "c"};
  looks.push_back(c);

  size_t next = 0;
  int pauses = 0;
  std::vector<std::string> lines;
  std::vector<std::string> warnings;
  DrainIo io;
  io.cluster = [&] { return looks.at(next++); };
  io.expired = [] { return false; };
  io.pause = [&] { ++pauses; };
  io.log = [&](const std::string& line) { lines.push_back(line); };
  io.warn = [&](const Status& s) { warnings.push_back(s.ToString()); };
  const DrainOutcome out = FollowDrain("a", 9, io);
  EXPECT_TRUE(out.drained);
  EXPECT_EQ(out.map_version, 14u);
  EXPECT_EQ(out.left.total(), 0u);
  EXPECT_EQ(next, looks.size());
  EXPECT_EQ(pauses, static_cast<int>(looks.size()) - 1);
  EXPECT_EQ(lines, (std::vector<std::string>{
                       "map version 10: a still holds 1 primary, 0 backups, 1 syncing",
                       "map version 12: a still holds 1 primary, 1 backup, 0 syncing",
                       "map version 13: a still holds 0 primaries, 2 backups, 0 syncing",
                   }));
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("coordinator down"), std::string::npos);
}

TEST(DrainFollowTest, StopsAtTheDeadlineWithWhatIsLeft) {
  ClusterInfo c = SmallCluster();
  c.map_version = 21;
  int looks = 0;
  DrainIo io;
  io.cluster = [&]() -> StatusOr<ClusterInfo> {
    ++looks;
    return c;
  };
  io.expired = [&] { return looks >= 3; };
  io.pause = [] {};
  std::vector<std::string> lines;
  io.log = [&](const std::string& line) { lines.push_back(line); };
  io.warn = [](const Status&) {};
  const DrainOutcome out = FollowDrain("c", 20, io);
  EXPECT_FALSE(out.drained);
  EXPECT_EQ(looks, 3);
  EXPECT_EQ(out.map_version, 21u);
  EXPECT_EQ(out.left.primaries, 1u);
  EXPECT_EQ(out.left.backups, 2u);
  EXPECT_EQ(lines.size(), 1u);  // nothing changed after the first look
  // A coordinator that never answers: the accepted version, nothing known.
  io.cluster = [&]() -> StatusOr<ClusterInfo> {
    ++looks;
    return Unavailable("down");
  };
  looks = 0;
  const DrainOutcome none = FollowDrain("c", 20, io);
  EXPECT_FALSE(none.drained);
  EXPECT_EQ(none.map_version, 20u);
  EXPECT_EQ(none.left.total(), 0u);
}

}  // namespace
}  // namespace rkv::kvctl
