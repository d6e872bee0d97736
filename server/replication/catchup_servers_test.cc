// Catch-up between two real servers in one process, over the tcp
// transport: the primary forwards to the syncing server through its
// Replicator while the syncing server fetches the shard over the Replica
// service; a client keeps writing throughout. The map and the
// coordinator's ReportCaughtUp are played by the test.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/transport/factory.h"
#include "proto/grpc_server.h"
#include "server/replication/catchup.h"
#include "server/replication/map_board_test_util.h"
#include "server/replication/map_policy.h"
#include "server/replication/replica_service.h"
#include "server/replication/replication_test_util.h"
#include "server/server.h"
#include "tests/wait_for.h"

namespace rkv::server {
namespace {

using namespace std::chrono_literals;
using testing::BoardSource;
using testing::MapBoard;
using testing::RawConnection;

constexpr uint32_t kShards = 4;
constexpr char kToken[] = "catch-up-servers-token";
constexpr auto kDeadline = 120s;

struct Node {
  std::string id;
  std::filesystem::path dir;
  MapPolicy policy;
  std::unique_ptr<BoardSource> source;
  std::unique_ptr<Server> server;
};

class CatchUpServersTest : public ::testing::Test {
 protected:
  void SetUp() override {
    base_ = std::filesystem::path(::testing::TempDir()) / ("rkv_catchup_servers_" + std::to_string(::getpid()));
    std::filesystem::remove_all(base_);
    std::filesystem::create_directories(base_);
    auto t = transport::CreateTransport(transport::Kind::kTcp, transport::Options());
    ASSERT_TRUE(t.ok()) << t.status();
    transport_ = std::move(t).value();
    p_.id = "s-primary";
    s_.id = "s-syncing";
    for (Node* n : {&p_, &s_}) {
      n->dir = base_ / n->id;
      ServerOptions o;
      o.listen = "127.0.0.1:0";
      o.data_dir = n->dir.string();
      o.memory_bytes = 8 << 20;
      o.max_keys = 2000;
      o.token = kToken;
      o.ring_bytes = 4 << 20;
      o.replication_timeout_ms = 30'000;  // generous: a slow machine must not fail the test
      auto started = Server::Start(o, transport_.get(), &n->policy, n->id);
      ASSERT_TRUE(started.ok()) << started.status();
      n->server = std::move(started).value();
      n->source = std::make_unique<BoardSource>(n->id, n->server->epoch(), &board_);
      n->policy.Attach(n->source.get());
    }
    auto service = ReplicaService::Create(kToken, p_.server->applier(), 1024);
    ASSERT_TRUE(service.ok()) << service.status();
    service_ = std::move(*service);
    service_->Attach(p_.source.get());
    auto grpc = control::StartGrpcServer("127.0.0.1:0", service_.get(), "replica: ");
    ASSERT_TRUE(grpc.ok()) << grpc.status();
    grpc_ = std::move(grpc->server);
    p_admin_ = grpc->address;
  }
  void TearDown() override {
    if (catch_up_) catch_up_->Stop();
    if (grpc_) grpc_->Shutdown(std::chrono::system_clock::now() + 1s);
    for (Node* n : {&s_, &p_}) {
      if (n->server) n->server->Shutdown();
      // No backup fails here: a report would mean a forward went wrong.
      if (n->source) {
        EXPECT_EQ(n->source->reports(), 0) << n->id << " reported a replica failure";
      }
    }
    std::filesystem::remove_all(base_);
  }

  // p is the primary of every shard; s syncs `syncing` shards and is a
  // backup of the others when `backup_rest`.
  v1::ClusterMap Map(uint64_t version, bool syncing) {
    v1::ClusterMap m;
    m.set_version(version);
    m.set_shard_count(kShards);
    m.set_expected_servers(2);
    m.set_replication_factor(2);
    for (Node* n : {&p_, &s_}) {
      v1::ServerInfo* info = m.add_servers();
      info->set_server_id(n->id);
      info->set_epoch(n->server->epoch());
      info->set_state(v1::UP);
      info->set_data_address(n->server->address());
      info->set_admin_address(n == &p_ ? p_admin_ : "127.0.0.1:1");
    }
    for (uint32_t shard = 0; shard < kShards; ++shard) {
      m.add_shard_owner(p_.id);
      v1::ShardReplicas* r = m.add_shard_replicas();
      r->add_server_ids(p_.id);
      if (syncing) r->add_syncing_ids(s_.id);
    }
    return m;
  }

  StatusOr<v1::ReportCaughtUpResponse> Report(const std::vector<v1::CaughtUpShard>& shards) {
    std::lock_guard lock(report_mu_);
    v1::ClusterMap m = *board_.map();
    v1::ReportCaughtUpResponse answer;
    int moved = 0;
    for (const v1::CaughtUpShard& c : shards) {
      v1::ShardReplicas* r = m.mutable_shard_replicas(static_cast<int>(c.shard()));
      if (r->server_ids(0) != c.primary_id() || r->syncing_ids_size() != 1) {
        answer.add_refused_shards(c.shard());
        continue;
      }
      r->clear_syncing_ids();
      r->add_server_ids(s_.id);
      ++moved;
    }
    if (moved > 0) m.set_version(m.version() + 1);
    answer.set_map_version(m.version());
    if (moved > 0) board_.Install(std::move(m));
    reported_ += moved;
    return answer;
  }

  std::filesystem::path base_;
  std::unique_ptr<transport::Transport> transport_;
  MapBoard board_;
  Node p_;
  Node s_;
  std::unique_ptr<ReplicaService> service_;
  std::unique_ptr<grpc::Server> grpc_;
  std::string p_admin_;
  std::unique_ptr<CatchUp> catch_up_;
  std::mutex report_mu_;
  int reported_ = 0;
};

TEST_F(CatchUpServersTest, TheSyncingServerEndsWithEveryAcknowledgedWrite) {
  board_.Install(Map(3, /*syncing=*/false));
  auto client = RawConnection::Connect(transport_.get(), p_.server->address(), kToken);
  ASSERT_TRUE(client.ok()) << client.status();
  // What the client was told: key -> {value, version}, nullopt once deleted.
  std::map<std::string, std::optional<std::pair<std::string, uint64_t>>> acked;
  uint64_t request = 1;
  const auto put = [&](const std::string& key, const std::string& value) {
    auto r = (*client)->Send(protocol::Op::kPut, key, value, 0, request++);
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_EQ(r->status_code, 0) << r->message;
    acked[key] = std::pair(value, r->version);
  };
  for (int i = 0; i < 300; ++i) put("key-" + std::to_string(i), "before-" + std::to_string(i));

  board_.Install(Map(4, /*syncing=*/true));
  CatchUpOptions options;
  options.token = kToken;
  options.initial_backoff = 10ms;
  auto created = CatchUp::Create(
      s_.source.get(), s_.server->applier(),
      [this](const std::vector<v1::CaughtUpShard>& shards) { return Report(shards); }, options);
  ASSERT_TRUE(created.ok()) << created.status();
  catch_up_ = std::move(*created);
  catch_up_->Start();
  // Writes and deletes go on during the catch-up, and a while after it.
  const auto until = std::chrono::steady_clock::now() + kDeadline;
  int after = 0;
  for (int round = 0; after < 50 && std::chrono::steady_clock::now() < until; ++round) {
    const std::string key = "key-" + std::to_string(round % 400);
    if (round % 5 == 2) {
      auto r = (*client)->Send(protocol::Op::kDelete, key, "", 0, request++);
      ASSERT_TRUE(r.ok()) << r.status();
      ASSERT_TRUE(r->status_code == 0 || r->status_code == static_cast<int32_t>(StatusCode::kNotFound)) << r->message;
      acked[key] = std::nullopt;
    } else {
      put(key, "during-" + std::to_string(round));
    }
    std::lock_guard lock(report_mu_);
    if (reported_ == static_cast<int>(kShards)) ++after;
  }
  ASSERT_EQ(after, 50) << "catch-up did not finish";

  for (const auto& [key, want] : acked) {
    const std::vector<Applier::ShardRecord> held = s_.server->applier()->ReadKeys({key});
    std::optional<std::pair<std::string, uint64_t>> got;
    if (!held.empty()) got = std::pair(held[0].value, held[0].version);
    EXPECT_EQ(got, want) << key;
  }
  EXPECT_EQ(s_.server->Stats().keys, p_.server->Stats().keys);
  // The catch-up counts a sync completed after the report call returns.
  EXPECT_TRUE(rkv::testing::WaitFor("every report's answer taken in",
                                    [&] { return catch_up_->stats().syncs_completed >= kShards; }, kDeadline));
  EXPECT_EQ(catch_up_->stats().syncs_completed, kShards);
}

}  // namespace
}  // namespace rkv::server
