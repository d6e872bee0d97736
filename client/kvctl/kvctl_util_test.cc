#include "client/kvctl/kvctl_util.h"

#include <gtest/gtest.h>

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

TEST(ParseInvocationTest, ParsesClusterCommands) {
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
  c.shards = {{0, {"a", "b", "c"}}, {1, {"b", "c"}}, {2, {"c"}}};
  return c;
}

TEST(ClusterFormatTest, FormatsShards) {
  const ClusterInfo c = SmallCluster();
  EXPECT_EQ(UnderReplicatedShards(c), 2u);
  EXPECT_EQ(FormatShardsText(c),
            "SHARD  PRIMARY  BACKUPS\n"
            "0      a        b,c\n"
            "1      b        c\n"
            "2      c        -\n"
            "3 shards, R=3, 2 with fewer than 3 replicas\n");
  EXPECT_EQ(FormatShardsJson(c),
            "{\"map_version\":9,\"shard_count\":3,\"replication_factor\":3,\"under_replicated\":2,\"shards\":["
            "{\"shard\":0,\"primary\":\"a\",\"backups\":[\"b\",\"c\"]},"
            "{\"shard\":1,\"primary\":\"b\",\"backups\":[\"c\"]},"
            "{\"shard\":2,\"primary\":\"c\",\"backups\":[]}]}\n");
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
  const std::string text = FormatMembersText({a, b});
  EXPECT_EQ(text,
            "SERVER      EPOCH  STATE  ADDRESS         ZONE    PRIMARIES  BACKUPS  KEYS  MEMORY (USED/TOTAL)\n"
            "s-1         5      UP     127.0.0.1:7701  rack 1  342        684      10    2.0 KiB / 1.0 MiB\n"
            "server-two  5      DOWN   127.0.0.1:7701  -       342        684      10    2.0 KiB / 1.0 MiB\n");
  EXPECT_EQ(FormatMembersJson({a}),
            "[{\"server_id\":\"s-1\",\"epoch\":5,\"state\":\"UP\",\"data_address\":\"127.0.0.1:7701\","
            "\"admin_address\":\"127.0.0.1:8701\",\"transport\":\"tcp\",\"shards\":342,\"keys\":10,"
            "\"heap_bytes_used\":2048,\"heap_bytes\":1048576,\"zone\":\"rack 1\",\"backup_shards\":684}]\n");
  EXPECT_EQ(FormatMembersJson({}), "[]\n");
}

TEST(ClusterFormatTest, FormatsStats) {
  ServerStatsInfo s;
  s.server_id = "s-1";
  s.epoch = 2;
  s.keys = 3;
  s.puts = 4;
  s.deletes = 1;
  s.request_errors = 0;
  s.connections = 2;
  s.heap_bytes = 4096;
  s.heap_bytes_used = 128;
  s.heap_bytes_quarantined = 64;
  EXPECT_EQ(FormatStatsJson({s}),
            "[{\"server_id\":\"s-1\",\"epoch\":2,\"keys\":3,\"puts\":4,\"deletes\":1,\"request_errors\":0,"
            "\"connections\":2,\"gets_served_by_cpu\":0,\"heap_bytes_used\":128,\"heap_bytes_quarantined\":64,"
            "\"heap_bytes\":4096}]\n");
  const std::string text = FormatStatsText({s});
  EXPECT_EQ(text.substr(0, text.find('\n')),
            "SERVER  EPOCH  KEYS  PUTS  DELETES  ERRORS  CONNECTIONS  GETS_BY_CPU  HEAP_USED  HEAP_QUARANTINED  "
            "HEAP_TOTAL");
  EXPECT_NE(text.find("s-1     2      3     4     1        0       2            0            128 B      64 B"),
            std::string::npos)
      << text;
}

}  // namespace
}  // namespace rkv::kvctl
