#include "server/admin_service.h"

#include <gtest/gtest.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <set>

#include <xxhash.h>

#include "common/hash.h"
#include "common/mutex.h"
#include "proto/auth.h"
#include "proto/rkv.grpc.pb.h"
#include "server/apply/apply.h"
#include "server/apply/local_table_test_util.h"

namespace rkv::server {
namespace {

constexpr char kToken[] = "admin-test-token";

TEST(AdminServiceTest, ServesHealthAndStatsOnlyWithTheToken) {
  std::atomic<uint64_t> puts{5};
  auto admin = AdminServer::Start("127.0.0.1:0", kToken, [&] {
    AdminStats s;
    s.server_id = "s-0000abcd";
    s.epoch = 12;
    s.serving = true;
    s.counters = {{"keys", 3, "records"}, {"puts", puts.load(), "PUTs"}, {"store_unwritten_bytes", 7168, "bytes"}};
    return s;
  });
  ASSERT_TRUE(admin.ok()) << admin.status();
  auto stub = v1::Admin::NewStub(grpc::CreateChannel((*admin)->address(), grpc::InsecureChannelCredentials()));
  auto ctx = [](const std::string& token) {
    auto c = std::make_unique<grpc::ClientContext>();
    if (!token.empty()) control::AttachToken(c.get(), token);
    c->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
    return c;
  };

  for (const std::string token : {"", "not-the-token"}) {
    v1::HealthResponse health;
    EXPECT_EQ(stub->Health(ctx(token).get(), v1::HealthRequest(), &health).error_code(),
              grpc::StatusCode::UNAUTHENTICATED);
    v1::StatsResponse stats;
    EXPECT_EQ(stub->Stats(ctx(token).get(), v1::StatsRequest(), &stats).error_code(),
              grpc::StatusCode::UNAUTHENTICATED);
    EXPECT_EQ(stats.server_id(), "");
  }

  v1::HealthResponse health;
  ASSERT_TRUE(stub->Health(ctx(kToken).get(), v1::HealthRequest(), &health).ok());
  EXPECT_EQ(health.server_id(), "s-0000abcd");
  EXPECT_EQ(health.epoch(), 12u);
  EXPECT_TRUE(health.serving());

  puts = 6;  // read at call time
  v1::StatsResponse stats;
  ASSERT_TRUE(stub->Stats(ctx(kToken).get(), v1::StatsRequest(), &stats).ok());
  EXPECT_EQ(stats.server_id(), "s-0000abcd");
  EXPECT_EQ(stats.epoch(), 12u);
  // The counters as listed, in order, with their help.
  ASSERT_EQ(stats.counters_size(), 3);
  EXPECT_EQ(stats.counters(0).name(), "keys");
  EXPECT_EQ(stats.counters(0).value(), 3u);
  EXPECT_EQ(stats.counters(0).help(), "records");
  EXPECT_EQ(stats.counters(1).name(), "puts");
  EXPECT_EQ(stats.counters(1).value(), 6u);
  EXPECT_EQ(stats.counters(2).name(), "store_unwritten_bytes");
  EXPECT_EQ(stats.counters(2).value(), 7168u);

  (*admin)->Shutdown();
  (*admin)->Shutdown();  // idempotent
}

// The one list of a server's counters: every name snake_case and listed
// once, every counter with its help, each value read from its source.
TEST(AdminServiceTest, ServerCountersNameEachSourceOnce) {
  CounterSources sources;
  sources.server.keys = 11;
  sources.server.puts = 12;
  sources.server.connection_cost.ring_bytes = 4096;
  sources.server.connection_cost.message_bytes = 512;
  sources.server.lease_refusals = 13;
  sources.server.store_unwritten_bytes = 14;
  sources.heap_bytes = 15;
  sources.catch_up.values_fetched = 16;
  sources.catch_up.bytes_fetched = 17;
  sources.catchup_records_served = 17;
  sources.server.auth_failures = 18;
  sources.admin_auth_failures = 2;
  const std::vector<AdminCounter> counters = ServerCounters(sources);
  std::map<std::string, uint64_t> values;
  for (const AdminCounter& c : counters) {
    EXPECT_FALSE(c.name.empty());
    EXPECT_TRUE(std::all_of(c.name.begin(), c.name.end(),
                            [](char ch) { return (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '_'; }))
        << c.name;
    EXPECT_FALSE(c.help.empty()) << c.name;
    EXPECT_TRUE(values.emplace(std::string(c.name), c.value).second) << c.name << " is listed twice";
  }
  EXPECT_EQ(values["keys"], 11u);
  EXPECT_EQ(values["puts"], 12u);
  EXPECT_EQ(values["bytes_per_connection"], 4608u);
  EXPECT_EQ(values["lease_refusals"], 13u);
  EXPECT_EQ(values["store_unwritten_bytes"], 14u);
  EXPECT_EQ(values["heap_bytes"], 15u);
  EXPECT_EQ(values["catchup_values_fetched"], 16u);
  EXPECT_EQ(values["catchup_bytes_fetched"], 17u);
  EXPECT_EQ(values["catchup_records_served"], 17u);
  EXPECT_EQ(values["gets_served_by_cpu"], 0u);
  EXPECT_EQ(values["auth_failures"], 20u);  // the data plane's and the Admin service's
  // The names kvctl's text table shows (client/kvctl/kvctl_util.cc) are all
  // there, first and in kvctl --output=json's order of old.
  const std::vector<std::string> first = {"keys", "puts", "deletes", "request_errors", "connections",
                                          "gets_served_by_cpu", "heap_bytes_used", "heap_bytes_quarantined",
                                          "heap_bytes", "polling_threads", "bytes_per_connection",
                                          "store_unwritten_writes", "store_unwritten_bytes"};
  ASSERT_GE(counters.size(), first.size());
  for (size_t i = 0; i < first.size(); ++i) EXPECT_EQ(counters[i].name, first[i]);
}

TEST(AdminServiceTest, BadStartArgumentsAreRefused) {
  auto stats = [] { return AdminStats(); };
  EXPECT_EQ(AdminServer::Start("nowhere", kToken, stats).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(AdminServer::Start("127.0.0.1:0", "", stats).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(AdminServer::Start("127.0.0.1:0", kToken, nullptr).status().code(), StatusCode::kInvalidArgument);
  auto first = AdminServer::Start("127.0.0.1:0", kToken, stats);
  ASSERT_TRUE(first.ok()) << first.status();
  // The same port twice cannot be bound.
  EXPECT_EQ(AdminServer::Start((*first)->address(), kToken, stats).status().code(), StatusCode::kUnavailable);
}

// A server's table with the records a test puts into it, and an Admin
// service reading it through an Applier and a map the test sets.
class ShardHost {
 public:
  ShardHost(const std::string& name, std::string server_id, const std::string& operator_token = "")
      : server_id_(std::move(server_id)) {
    const Status opened = local_.Open("rkv_admin_test_" + name, /*log2=*/8, /*heap_bytes=*/1 << 20,
                                      std::chrono::milliseconds(100));
    EXPECT_TRUE(opened.ok()) << opened;
    applier_ = std::make_unique<Applier>(local_.store.get(), local_.table.get(), local_.heap.get(),
                                         ApplyLimits{64, 4096});
    AdminShards shards;
    shards.server_id = server_id_;
    shards.applier = applier_.get();
    shards.map = [this] {
      MutexLock lock(mu_);
      return map_;
    };
    auto admin =
        AdminServer::Start("127.0.0.1:0", kToken, [] { return AdminStats(); }, std::move(shards), {}, operator_token);
    EXPECT_TRUE(admin.ok()) << admin.status();
    admin_ = std::move(admin).value();
    stub_ = v1::Admin::NewStub(grpc::CreateChannel(admin_->address(), grpc::InsecureChannelCredentials()));
  }
  ~ShardHost() {
    admin_.reset();
    applier_.reset();
    local_.Close();
  }

  // Through the apply path, under its table_mu_, as a server writes
  // (the Admin service's threads read the table under that mutex).
  void Put(const std::string& key, const std::string& value, uint64_t version) {
    Applier::ShardRecord record;
    record.key = key;
    record.version = version;
    record.has_value = true;
    record.value = value;
    StatusOr<Applier::FetchedOutcome> installed = applier_->InstallFetched(record);
    ASSERT_TRUE(installed.ok()) << key << ": " << installed.status();
    ASSERT_EQ(*installed, Applier::FetchedOutcome::kInstalled) << key;
  }
  void SetMap(std::shared_ptr<const v1::ClusterMap> map) {
    MutexLock lock(mu_);
    map_ = std::move(map);
  }

  v1::Admin::Stub& stub() { return *stub_; }

 private:
  const std::string server_id_;
  testing::LocalTable local_;
  std::unique_ptr<Applier> applier_;
  Mutex mu_;
  std::shared_ptr<const v1::ClusterMap> map_ GUARDED_BY(mu_);
  std::unique_ptr<AdminServer> admin_;
  std::unique_ptr<v1::Admin::Stub> stub_;
};

std::unique_ptr<grpc::ClientContext> Context(const std::string& token = kToken) {
  auto c = std::make_unique<grpc::ClientContext>();
  if (!token.empty()) control::AttachToken(c.get(), token);
  c->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  return c;
}

constexpr uint32_t kShards = 8;

// A map of kShards shards over servers a, b and c (R = 2): shard s has
// primary servers[s % 3] and backup servers[(s + 1) % 3]; c syncs shard 0.
std::shared_ptr<const v1::ClusterMap> TestMap(uint64_t version) {
  auto map = std::make_shared<v1::ClusterMap>();
  map->set_version(version);
  map->set_shard_count(kShards);
  map->set_expected_servers(3);
  map->set_replication_factor(2);
  const std::string ids[] = {"s-a", "s-b", "s-c"};
  for (const std::string& id : ids) map->add_servers()->set_server_id(id);
  for (uint32_t s = 0; s < kShards; ++s) {
    map->add_shard_owner(ids[s % 3]);
    v1::ShardReplicas* r = map->add_shard_replicas();
    r->add_server_ids(ids[s % 3]);
    r->add_server_ids(ids[(s + 1) % 3]);
    if (s == 0) r->add_syncing_ids("s-c");
  }
  return map;
}

std::string Key(int i) { return "key-" + std::to_string(i); }

// The contract's checksum, computed independently of the server's code.
uint64_t ExpectedChecksum(const std::map<std::string, std::pair<std::string, uint64_t>>& records, uint32_t shard) {
  uint64_t sum = 0;
  for (const auto& [key, vv] : records) {
    if (ShardOf(key, kShards) != shard) continue;
    std::string bytes = key;
    for (int i = 0; i < 8; ++i) bytes.push_back(static_cast<char>(vv.second >> (8 * i)));
    bytes += vv.first;
    sum += XXH64(bytes.data(), bytes.size(), 0);
  }
  return sum;
}

v1::ShardChecksumsResponse Checksums(ShardHost& host, std::initializer_list<uint32_t> shards = {}) {
  v1::ShardChecksumsRequest request;
  for (uint32_t s : shards) request.add_shards(s);
  v1::ShardChecksumsResponse response;
  const grpc::Status status = host.stub().ShardChecksums(Context().get(), request, &response);
  EXPECT_TRUE(status.ok()) << status.error_message();
  return response;
}

TEST(AdminServiceTest, ShardsHeldCountEveryRole) {
  const auto map = TestMap(4);
  // a: primary of 0, 3, 6; backup of 2, 5.
  EXPECT_EQ(AdminServer::ShardsHeldBy(*map, "s-a"), (std::vector<uint32_t>{0, 2, 3, 5, 6}));
  // c: primary of 2, 5; backup of 1, 4, 7; syncing 0.
  EXPECT_EQ(AdminServer::ShardsHeldBy(*map, "s-c"), (std::vector<uint32_t>{0, 1, 2, 4, 5, 7}));
  EXPECT_TRUE(AdminServer::ShardsHeldBy(*map, "s-x").empty());
  v1::ClusterMap old_map = *map;  // a map from before replica lists
  old_map.clear_shard_replicas();
  EXPECT_EQ(AdminServer::ShardsHeldBy(old_map, "s-c"), (std::vector<uint32_t>{2, 5}));
}

TEST(AdminServiceTest, ChecksumsDependOnTheRecordsNotOnTheirOrder) {
  std::map<std::string, std::pair<std::string, uint64_t>> records;
  for (int i = 0; i < 300; ++i) records[Key(i)] = {"value-" + std::to_string(i * 7), uint64_t(1000 + i)};
  ShardHost first("first", "s-a");
  ShardHost second("second", "s-a");
  for (const auto& [key, vv] : records) first.Put(key, vv.first, vv.second);
  for (auto it = records.rbegin(); it != records.rend(); ++it) second.Put(it->first, it->second.first, it->second.second);
  first.SetMap(TestMap(9));
  second.SetMap(TestMap(9));

  // Every shard asked for, in any order and repeated: each once, ascending.
  const auto a = Checksums(first, {7, 0, 1, 2, 3, 4, 5, 6, 0});
  const auto b = Checksums(second, {0, 1, 2, 3, 4, 5, 6, 7});
  EXPECT_EQ(a.map_version(), 9u);
  ASSERT_EQ(a.shards_size(), static_cast<int>(kShards));
  ASSERT_EQ(b.shards_size(), static_cast<int>(kShards));
  uint64_t keys = 0;
  for (uint32_t s = 0; s < kShards; ++s) {
    SCOPED_TRACE("shard " + std::to_string(s));
    EXPECT_EQ(a.shards(s).shard(), s);
    EXPECT_EQ(a.shards(s).checksum(), ExpectedChecksum(records, s));
    EXPECT_EQ(a.shards(s).checksum(), b.shards(s).checksum());
    EXPECT_EQ(a.shards(s).keys(), b.shards(s).keys());
    EXPECT_EQ(a.shards(s).max_version(), b.shards(s).max_version());
    uint64_t max_version = 0;
    for (const auto& [key, vv] : records) {
      if (ShardOf(key, kShards) == s) max_version = std::max(max_version, vv.second);
    }
    EXPECT_EQ(a.shards(s).max_version(), max_version);
    keys += a.shards(s).keys();
  }
  EXPECT_EQ(keys, records.size());

  // No shard asked for: the shards the server holds a role in.
  const auto held = Checksums(first);
  std::vector<uint32_t> held_shards;
  for (const auto& c : held.shards()) held_shards.push_back(c.shard());
  EXPECT_EQ(held_shards, AdminServer::ShardsHeldBy(*TestMap(9), "s-a"));

  // One record at another version (same value) changes its shard's
  // checksum and max_version, and no other shard's.
  const std::string changed = Key(42);
  const uint32_t changed_shard = ShardOf(changed, kShards);
  second.Put(changed, records[changed].first, 5000);
  const auto c = Checksums(second, {0, 1, 2, 3, 4, 5, 6, 7});
  for (uint32_t s = 0; s < kShards; ++s) {
    SCOPED_TRACE("shard " + std::to_string(s));
    if (s == changed_shard) {
      EXPECT_NE(c.shards(s).checksum(), a.shards(s).checksum());
      EXPECT_EQ(c.shards(s).max_version(), 5000u);
      EXPECT_EQ(c.shards(s).keys(), a.shards(s).keys());
    } else {
      EXPECT_EQ(c.shards(s).checksum(), a.shards(s).checksum());
    }
  }
}

TEST(AdminServiceTest, ListShardStreamsTheShardsKeysAndVersions) {
  ShardHost host("list", "s-b");
  std::map<std::string, uint64_t> expected;
  for (int i = 0; i < 400; ++i) {
    host.Put(Key(i), std::string(i % 50, 'v'), uint64_t(10 + i));
    if (ShardOf(Key(i), kShards) == 3) expected[Key(i)] = uint64_t(10 + i);
  }
  host.SetMap(TestMap(2));
  v1::ListShardRequest request;
  request.set_shard(3);
  auto ctx = Context();
  auto reader = host.stub().ListShard(ctx.get(), request);
  std::map<std::string, uint64_t> listed;
  v1::ShardChunk chunk;
  int done_chunks = 0;
  while (reader->Read(&chunk)) {
    EXPECT_EQ(done_chunks, 0) << "a chunk after the done chunk";
    for (const v1::ShardRecord& r : chunk.records()) {
      EXPECT_FALSE(r.has_value());
      EXPECT_TRUE(listed.emplace(r.key(), r.version()).second) << "listed twice: " << r.key();
    }
    if (chunk.done()) ++done_chunks;
  }
  ASSERT_TRUE(reader->Finish().ok());
  EXPECT_EQ(done_chunks, 1);
  EXPECT_EQ(listed, expected);
}

TEST(AdminServiceTest, ShardRpcsRefuseBadShardsNoMapAndNoToken) {
  ShardHost host("refuse", "s-a");
  host.Put("k", "v", 1);
  v1::ShardChecksumsRequest request;
  v1::ShardChecksumsResponse response;
  // No map yet.
  EXPECT_EQ(host.stub().ShardChecksums(Context().get(), request, &response).error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
  v1::ListShardRequest list;
  v1::ShardChunk chunk;
  {
    auto ctx = Context();
    auto reader = host.stub().ListShard(ctx.get(), list);
    EXPECT_FALSE(reader->Read(&chunk));
    EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  }
  host.SetMap(TestMap(3));
  // A shard not below shard_count.
  request.add_shards(1);
  request.add_shards(kShards);
  const grpc::Status bad = host.stub().ShardChecksums(Context().get(), request, &response);
  EXPECT_EQ(bad.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(bad.error_message().find("shard 8 is not below the shard count 8"), std::string::npos)
      << bad.error_message();
  list.set_shard(kShards);
  {
    auto ctx = Context();
    auto reader = host.stub().ListShard(ctx.get(), list);
    EXPECT_FALSE(reader->Read(&chunk));
    EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  }
  // Without the token.
  request.clear_shards();
  for (const std::string token : {"", "not-the-token"}) {
    EXPECT_EQ(host.stub().ShardChecksums(Context(token).get(), request, &response).error_code(),
              grpc::StatusCode::UNAUTHENTICATED);
    list.set_shard(0);
    auto ctx = Context(token);
    auto reader = host.stub().ListShard(ctx.get(), list);
    EXPECT_FALSE(reader->Read(&chunk));
    EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::UNAUTHENTICATED);
  }
  // A server without a map function (no coordinator) refuses too.
  auto standalone = AdminServer::Start("127.0.0.1:0", kToken, [] { return AdminStats(); });
  ASSERT_TRUE(standalone.ok()) << standalone.status();
  auto stub = v1::Admin::NewStub(grpc::CreateChannel((*standalone)->address(), grpc::InsecureChannelCredentials()));
  EXPECT_EQ(stub->ShardChecksums(Context().get(), request, &response).error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
}

// With an operator credential the replica verification and listings take
// it alone (the client token is refused naming it); Health and Stats take
// either, so kvctl works with the operator's credential alone.
TEST(AdminServiceTest, ShardRpcsTakeOnlyTheOperatorCredentialWhenOneIsSet) {
  const std::string operator_token = "admin-test-operator-credential";
  ShardHost host("operator", "s-a", operator_token);
  host.Put("k", "v", 1);
  host.SetMap(TestMap(3));
  v1::ShardChecksumsRequest request;
  v1::ShardChecksumsResponse response;
  const grpc::Status client = host.stub().ShardChecksums(Context().get(), request, &response);
  EXPECT_EQ(client.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(client.error_message(),
            "ShardChecksums needs the operator credential (the server's --operator_token_file); this credential is "
            "a client's");
  v1::ListShardRequest list;
  v1::ShardChunk chunk;
  {
    auto ctx = Context();
    auto reader = host.stub().ListShard(ctx.get(), list);
    EXPECT_FALSE(reader->Read(&chunk));
    EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::PERMISSION_DENIED);
  }
  EXPECT_EQ(host.stub().ShardChecksums(Context("not-the-token").get(), request, &response).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  const grpc::Status ok = host.stub().ShardChecksums(Context(operator_token).get(), request, &response);
  EXPECT_TRUE(ok.ok()) << ok.error_message();
  {
    auto ctx = Context(operator_token);
    auto reader = host.stub().ListShard(ctx.get(), list);
    while (reader->Read(&chunk)) {
    }
    EXPECT_TRUE(reader->Finish().ok());
  }
  v1::StatsResponse stats;
  EXPECT_TRUE(host.stub().Stats(Context(operator_token).get(), v1::StatsRequest(), &stats).ok());
  EXPECT_TRUE(host.stub().Stats(Context().get(), v1::StatsRequest(), &stats).ok());
  // One equal to the client token is refused at start.
  EXPECT_EQ(AdminServer::Start("127.0.0.1:0", kToken, [] { return AdminStats(); }, {}, {}, kToken).status().code(),
            StatusCode::kInvalidArgument);
}

// Named client credentials (a LiveClientCredentials the server reloads):
// each in force serves Health and Stats; a removed one is refused from the
// next call on, naming it, and counted; the file's credentials never serve
// the listings, which without an operator credential only --token_file's
// ("token") takes.
TEST(AdminServiceTest, ClientCredentialsAreCheckedPerCallAndARemovedOneIsRefused) {
  ClientCredentials initial;
  ASSERT_TRUE(initial.Add("token", kToken).ok());
  ASSERT_TRUE(initial.Add("alice", "alice-secret").ok());
  ASSERT_TRUE(initial.Add("bob", "bob-secret").ok());
  auto live = std::make_shared<LiveClientCredentials>(initial);
  auto admin = AdminServer::Start("127.0.0.1:0", live, [] { return AdminStats(); });
  ASSERT_TRUE(admin.ok()) << admin.status();
  auto stub = v1::Admin::NewStub(grpc::CreateChannel((*admin)->address(), grpc::InsecureChannelCredentials()));
  v1::StatsResponse stats;
  for (const char* token : {kToken, "alice-secret", "bob-secret"}) {
    EXPECT_TRUE(stub->Stats(Context(token).get(), v1::StatsRequest(), &stats).ok()) << token;
  }
  v1::ShardChecksumsRequest request;
  v1::ShardChecksumsResponse response;
  const grpc::Status listing = stub->ShardChecksums(Context("alice-secret").get(), request, &response);
  EXPECT_EQ(listing.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(listing.error_message(),
            "ShardChecksums needs the operator credential (the server's --operator_token_file) or --token_file's; "
            "this credential is client credential alice");
  EXPECT_EQ((*admin)->auth_failures(), 0u);

  ClientCredentials without_bob;
  ASSERT_TRUE(without_bob.Add("token", kToken).ok());
  ASSERT_TRUE(without_bob.Add("alice", "alice-secret").ok());
  const ClientCredentials::Change change = live->Replace(without_bob);
  EXPECT_EQ(change.removed, std::vector<std::string>{"bob"});
  const grpc::Status revoked = stub->Stats(Context("bob-secret").get(), v1::StatsRequest(), &stats);
  EXPECT_EQ(revoked.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(revoked.error_message(), "client credential bob was revoked");
  v1::HealthResponse health;
  EXPECT_EQ(stub->Health(Context("nobody").get(), v1::HealthRequest(), &health).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ((*admin)->auth_failures(), 2u);
  EXPECT_TRUE(stub->Stats(Context("alice-secret").get(), v1::StatsRequest(), &stats).ok());
  // An operator credential that is a client credential is refused at start.
  EXPECT_EQ(AdminServer::Start("127.0.0.1:0", live, [] { return AdminStats(); }, {}, {}, "alice-secret")
                .status()
                .code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace rkv::server
