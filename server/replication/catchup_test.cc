// Catch-up end to end inside one process: a primary and a server catching
// up on its shards, each a real store, table and applier; the primary's
// forwards reach the other's apply path directly; the Replica service runs
// on a real gRPC server; the map and the coordinator's ReportCaughtUp are
// played by the test.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>

#include "common/hash.h"
#include "common/layout.h"
#include "common/mutex.h"
#include "common/record.h"
#include "proto/auth.h"
#include "proto/grpc_server.h"
#include "proto/grpc_status.h"
#include "proto/rkv.grpc.pb.h"
#include "server/apply/apply.h"
#include "server/replication/catchup.h"
#include "server/replication/map_board_test_util.h"
#include "server/apply/local_table_test_util.h"
#include "server/replication/map_policy.h"
#include "server/replication/replica_service.h"
#include "tests/wait_for.h"

namespace rkv::server {
namespace {

using namespace std::chrono_literals;
using testing::BoardSource;
using testing::MapBoard;

constexpr uint32_t kShards = 4;
constexpr char kToken[] = "catch-up-test-token";
// Generous: a loaded machine may be slow, and every wait is on a
// condition.
constexpr auto kDeadline = 120s;

// One server's data: store, heap, table, applier, its map source and
// replication policy.
struct Node;

// Delivers forwards to the apply path of the named node.
class DirectForwarder final : public Forwarder {
 public:
  DirectForwarder(std::string self, std::map<std::string, Node*>* nodes) : self_(std::move(self)), nodes_(nodes) {}
  std::vector<Status> Forward(const std::vector<ReplicaPeer>& backups, uint64_t map_version, protocol::Op op,
                              std::span<const uint8_t> record) override;

 private:
  const std::string self_;
  std::map<std::string, Node*>* const nodes_;
};

struct Node {
  Node(const std::string& id, uint64_t epoch, MapBoard* board, std::map<std::string, Node*>* nodes)
      : source(id, epoch, board), policy(&source), forwarder(id, nodes) {
    const Status opened = local.Open("rkv_catchup_test_" + id, /*log2=*/10, /*heap_bytes=*/8 << 20, 10ms,
                                     Durability::kNone);
    EXPECT_TRUE(opened.ok()) << opened;
    applier = std::make_unique<Applier>(local.store.get(), local.table.get(), local.heap.get(), ApplyLimits{64, 4096},
                                        RequestCacheLimits{}, ApplyReplication{&policy, &forwarder});
    (*nodes)[id] = this;
  }
  ~Node() {
    applier.reset();
    local.Close();
  }

  // A client's PUT / DELETE; the reply.
  protocol::ReplyMsg Write(protocol::Op op, std::string_view key, std::string_view value) {
    std::vector<uint8_t> ring(8192, 0);
    const uint16_t flags = op == protocol::Op::kDelete ? layout::kBlockFlagTombstone : 0;
    const uint64_t len = EncodeRecord(ring, key, value, 0, flags);
    protocol::RequestMsg m{};
    m.op = static_cast<uint8_t>(op);
    m.length = static_cast<uint32_t>(len);
    m.request_id = next_request.fetch_add(1);
    m.ring_offset = 0;
    std::vector<uint8_t> msg(sizeof(m));
    std::memcpy(msg.data(), &m, sizeof(m));
    return applier->Apply(/*client_id=*/7, msg, ring);
  }
  protocol::ReplyMsg Put(std::string_view key, std::string_view value) {
    return Write(protocol::Op::kPut, key, value);
  }
  protocol::ReplyMsg Del(std::string_view key) { return Write(protocol::Op::kDelete, key, ""); }

  // Every record held, with values: key -> (version, value).
  std::map<std::string, std::pair<uint64_t, std::string>> Contents() {
    std::map<std::string, std::pair<uint64_t, std::string>> all;
    std::vector<uint32_t> shards(kShards);
    for (uint32_t shard = 0; shard < kShards; ++shard) shards[shard] = shard;
    std::vector<Applier::ShardRecord> records;
    uint64_t unused = 0;
    const Status s = applier->ListShards(shards, kShards, [] { return Status::Ok(); }, &records, &unused);
    EXPECT_TRUE(s.ok()) << s;
    std::vector<std::string> keys;
    for (const Applier::ShardRecord& r : records) keys.push_back(r.key);
    for (Applier::ShardRecord& r : applier->ReadKeys(keys)) all[r.key] = {r.version, std::move(r.value)};
    return all;
  }

  // Every record in the store (what a restart rebuilds the table from).
  std::map<std::string, std::pair<uint64_t, std::string>> StoredContents() {
    std::map<std::string, std::pair<uint64_t, std::string>> all;
    const Status s = local.store->Scan([&](std::string_view key, uint64_t version, std::string_view value) {
      all[std::string(key)] = {version, std::string(value)};
      return Status::Ok();
    });
    EXPECT_TRUE(s.ok()) << s;
    return all;
  }

  BoardSource source;
  MapPolicy policy;
  DirectForwarder forwarder;
  testing::LocalTable local;
  std::unique_ptr<Applier> applier;
  std::atomic<uint64_t> next_request{1};
};

std::vector<Status> DirectForwarder::Forward(const std::vector<ReplicaPeer>& backups, uint64_t map_version,
                                             protocol::Op op, std::span<const uint8_t> record) {
  std::vector<Status> acks;
  for (const ReplicaPeer& b : backups) {
    const auto it = nodes_->find(b.server_id);
    if (it == nodes_->end()) {
      acks.push_back(Unavailable("no server " + b.server_id));
      continue;
    }
    std::vector<uint8_t> ring(record.begin(), record.end());
    ring.resize(layout::BlockBytes(layout::kMaxKeyBytesLimit, 0) + record.size());
    protocol::RequestMsg m{};
    m.op = static_cast<uint8_t>(op);
    m.length = static_cast<uint32_t>(record.size());
    m.request_id = 1;
    m.map_version = map_version;
    std::vector<uint8_t> msg(sizeof(m));
    std::memcpy(msg.data(), &m, sizeof(m));
    const protocol::ReplyMsg r = it->second->applier->ApplyReplica(self_, msg, ring);
    acks.push_back(r.status_code == 0 ? Status::Ok()
                                      : Status(static_cast<StatusCode>(r.status_code), r.message,
                                               static_cast<Reason>(r.reason), r.map_version));
  }
  return acks;
}

// A map of servers p (epoch 1) and s (epoch 2), R = 1: p is the primary of
// every shard; s is in `syncing` shards' syncing_ids, a backup of
// `backup` shards.
v1::ClusterMap MakeMap(uint64_t version, const std::string& p_admin, const std::set<uint32_t>& syncing,
                       const std::set<uint32_t>& backup = {}) {
  v1::ClusterMap m;
  m.set_version(version);
  m.set_shard_count(kShards);
  m.set_expected_servers(2);
  m.set_replication_factor(2);
  for (const auto& [id, epoch] : std::vector<std::pair<std::string, uint64_t>>{{"p", 1}, {"s", 2}}) {
    v1::ServerInfo* s = m.add_servers();
    s->set_server_id(id);
    s->set_epoch(epoch);
    s->set_state(v1::UP);
    s->set_data_address(id + ":1");
    s->set_admin_address(id == "p" ? p_admin : "127.0.0.1:1");
  }
  for (uint32_t shard = 0; shard < kShards; ++shard) {
    m.add_shard_owner("p");
    m.mutable_servers(0)->add_shards(shard);
    v1::ShardReplicas* r = m.add_shard_replicas();
    r->add_server_ids("p");
    if (backup.count(shard) != 0) {
      r->add_server_ids("s");
      m.mutable_servers(1)->add_backup_shards(shard);
    }
    if (syncing.count(shard) != 0) {
      r->add_syncing_ids("s");
      m.mutable_servers(1)->add_syncing_shards(shard);
    }
  }
  return m;
}

std::set<uint32_t> AllShards() { return {0, 1, 2, 3}; }

class CatchUpTest : public ::testing::Test {
 protected:
  void SetUp() override {
    p_ = std::make_unique<Node>("p", 1, &board_, &nodes_);
    s_ = std::make_unique<Node>("s", 2, &board_, &nodes_);
    auto created = ReplicaService::Create(kToken, p_->applier.get(), 64);
    ASSERT_TRUE(created.ok()) << created.status();
    service_ = std::move(*created);
    auto started = control::StartGrpcServer("127.0.0.1:0", service_.get(), "replica service: ");
    ASSERT_TRUE(started.ok()) << started.status();
    grpc_ = std::move(started->server);
    p_admin_ = started->address;
  }
  void TearDown() override {
    if (catch_up_) catch_up_->Stop();
    grpc_->Shutdown(std::chrono::system_clock::now() + 1s);
    grpc_->Wait();
  }

  // The coordinator's side of ReportCaughtUp: moves s from syncing to the
  // end of server_ids of each listed shard whose primary p still is and
  // that s still syncs, all in one new map version; refuses the others.
  StatusOr<v1::ReportCaughtUpResponse> Report(const std::vector<v1::CaughtUpShard>& shards) {
    std::lock_guard lock(report_mu_);
    v1::ClusterMap m = *board_.map();
    v1::ReportCaughtUpResponse answer;
    bool moved = false;
    for (const v1::CaughtUpShard& c : shards) {
      EXPECT_GT(c.sync_map_version(), 0u);
      EXPECT_LE(c.sync_map_version(), board_.map()->version());
      v1::ShardReplicas* r = m.mutable_shard_replicas(static_cast<int>(c.shard()));
      const bool syncing = r->syncing_ids_size() == 1 && r->syncing_ids(0) == "s";
      if (r->server_ids(0) != c.primary_id() || !syncing || refusals_left_ > 0) {
        --refusals_left_;
        answer.add_refused_shards(c.shard());
        continue;
      }
      r->clear_syncing_ids();
      r->add_server_ids("s");
      reported_.push_back(c.shard());
      moved = true;
    }
    if (moved) {
      m.set_version(m.version() + 1);
      answer.set_map_version(m.version());
      board_.Install(std::move(m));
      ++reports_moving_;
    } else {
      answer.set_map_version(m.version());
    }
    return answer;
  }

  // rate_bytes_per_s: CatchUpOptions' (0: no limit).
  void StartCatchUp(uint64_t rate_bytes_per_s = 0) {
    CatchUpOptions options;
    options.token = kToken;
    options.rate_bytes_per_s = rate_bytes_per_s;
    options.initial_backoff = 10ms;
    options.max_backoff = 200ms;
    auto created = CatchUp::Create(
        &s_->source, s_->applier.get(),
        [this](const std::vector<v1::CaughtUpShard>& shards) { return Report(shards); },
        options);
    ASSERT_TRUE(created.ok()) << created.status();
    catch_up_ = std::move(*created);
    catch_up_->Start();
  }

  size_t Reported() {
    std::lock_guard lock(report_mu_);
    return reported_.size();
  }
  // Waits (generously) until every shard has been reported caught up and
  // the catch-up has taken in the answers (it counts a sync completed
  // after the report call returns, so the report alone is not the end).
  void WaitAllCaughtUp() {
    ASSERT_TRUE(rkv::testing::WaitFor("every shard reported caught up", [&] { return Reported() >= kShards; }, kDeadline));
    ASSERT_EQ(Reported(), kShards);
    ASSERT_TRUE(rkv::testing::WaitFor("every report's answer taken in",
                                      [&] { return catch_up_->stats().syncs_completed >= kShards; }, kDeadline));
  }

  MapBoard board_;
  std::map<std::string, Node*> nodes_;
  std::unique_ptr<Node> p_;
  std::unique_ptr<Node> s_;
  std::unique_ptr<ReplicaService> service_;
  std::unique_ptr<grpc::Server> grpc_;
  std::string p_admin_;
  std::unique_ptr<CatchUp> catch_up_;
  std::mutex report_mu_;
  std::vector<uint32_t> reported_;
  int reports_moving_ = 0;  // reports that moved at least one shard (map versions)
  int refusals_left_ = 0;  // reports refused before any is accepted
};

std::string Key(int i) { return "key-" + std::to_string(i); }

TEST_F(CatchUpTest, ASyncingServerReceivesEveryForwardedWrite) {
  service_->Attach(&p_->source);
  board_.Install(MakeMap(3, p_admin_, AllShards()));
  for (int i = 0; i < 20; ++i) ASSERT_EQ(p_->Put(Key(i), "v" + std::to_string(i)).status_code, 0);
  ASSERT_EQ(p_->Del(Key(3)).status_code, 0);
  const auto held = s_->Contents();
  EXPECT_EQ(held, p_->Contents());
  EXPECT_EQ(held.size(), 19u);
  EXPECT_EQ(p_->applier->snapshot().backup_failures, 0u);
}

TEST_F(CatchUpTest, AServerNotSyncingRefusesForwards) {
  service_->Attach(&p_->source);
  board_.Install(MakeMap(3, p_admin_, {}));
  ASSERT_EQ(p_->Put(Key(1), "v").status_code, 0);
  EXPECT_TRUE(s_->Contents().empty());
  // A forward that names s anyway (a stale route) is refused.
  std::vector<uint8_t> record(layout::BlockBytes(5, 1));
  const uint64_t n = EncodeRecord(record, Key(1), "x", 99, 0);
  const std::vector<Status> acks = p_->forwarder.Forward({ReplicaPeer{"s", 2, "s:1"}}, 3, protocol::Op::kReplicatePut,
                                                         std::span(record.data(), n));
  ASSERT_EQ(acks.size(), 1u);
  EXPECT_EQ(acks[0].code(), StatusCode::kFailedPrecondition) << acks[0];
  EXPECT_NE(acks[0].message().find("neither a backup of shard"), std::string::npos) << acks[0];
}

TEST_F(CatchUpTest, EveryAcknowledgedWriteEndsOnTheFetcherUnderConcurrentWrites) {
  service_->Attach(&p_->source);
  board_.Install(MakeMap(3, p_admin_, {}));
  for (int i = 0; i < 400; ++i) ASSERT_EQ(p_->Put(Key(i), std::string(100, 'a' + i % 26)).status_code, 0);
  // s starts catching up on every shard while clients keep writing.
  board_.Install(MakeMap(4, p_admin_, AllShards()));
  std::atomic<bool> stop{false};
  std::atomic<int> acked{0};
  std::thread writer([&] {
    for (int round = 0; !stop.load(); ++round) {
      const int i = round % 500;
      const protocol::ReplyMsg r = round % 7 == 3 ? p_->Del(Key(i)) : p_->Put(Key(i), "w" + std::to_string(round));
      ASSERT_TRUE(r.status_code == 0 || r.status_code == static_cast<int32_t>(StatusCode::kNotFound))
          << r.status_code << " " << r.message;
      acked.fetch_add(1);
    }
  });
  StartCatchUp();
  WaitAllCaughtUp();
  // Some writes after the last report: s is a backup now.
  const int before = acked.load();
  rkv::testing::WaitFor("writes after the last report", [&] { return acked.load() >= before + 50; }, kDeadline);
  stop = true;
  writer.join();
  const auto want = p_->Contents();
  EXPECT_FALSE(want.empty());
  EXPECT_EQ(s_->Contents(), want);
  const CatchUp::Stats st = catch_up_->stats();
  EXPECT_EQ(st.syncs_completed, kShards);
  EXPECT_GT(st.records_listed, 0u);
  // Served: every record listed, plus the holes sent by FetchKeys.
  EXPECT_GE(service_->records_served(), st.records_listed);
}

TEST_F(CatchUpTest, ARejoiningServerFetchesOnlyNewerValuesAndDropsWhatWasDeleted) {
  service_->Attach(&p_->source);
  // s is a backup of every shard and gets every write.
  board_.Install(MakeMap(3, p_admin_, {}, AllShards()));
  for (int i = 0; i < 100; ++i) ASSERT_EQ(p_->Put(Key(i), "old").status_code, 0);
  ASSERT_EQ(s_->Contents(), p_->Contents());
  // s is taken out; meanwhile 10 keys are added, 5 overwritten, 5 deleted.
  board_.Install(MakeMap(4, p_admin_, {}));
  for (int i = 100; i < 110; ++i) ASSERT_EQ(p_->Put(Key(i), "new").status_code, 0);
  for (int i = 0; i < 5; ++i) ASSERT_EQ(p_->Put(Key(i), "newer").status_code, 0);
  for (int i = 5; i < 10; ++i) ASSERT_EQ(p_->Del(Key(i)).status_code, 0);
  ASSERT_EQ(s_->Contents().size(), 100u);
  // s syncs again.
  board_.Install(MakeMap(5, p_admin_, AllShards()));
  StartCatchUp();
  WaitAllCaughtUp();
  EXPECT_EQ(s_->Contents(), p_->Contents());
  const CatchUp::Stats st = catch_up_->stats();
  EXPECT_EQ(st.records_listed, 105u);  // 100 - 5 deleted + 10 added
  EXPECT_EQ(st.values_fetched, 15u);   // only the versions above what s held
  EXPECT_EQ(service_->records_served(), 105u);
}

// The shards caught up in one pass are reported together: one map version
// moves them all, not one each.
TEST_F(CatchUpTest, ShardsCaughtUpTogetherAreReportedInOneCall) {
  service_->Attach(&p_->source);
  board_.Install(MakeMap(3, p_admin_, {}));
  for (int i = 0; i < 40; ++i) ASSERT_EQ(p_->Put(Key(i), "v").status_code, 0);
  board_.Install(MakeMap(4, p_admin_, AllShards()));
  StartCatchUp();
  WaitAllCaughtUp();
  EXPECT_EQ(s_->Contents(), p_->Contents());
  std::lock_guard lock(report_mu_);
  // Every shard is fetched in the one stream from p and reported in one
  // call (two when that attempt failed on a loaded machine and was
  // retried; one per shard is what this guards against).
  EXPECT_LE(reports_moving_, 2) << "reports that moved shards, for " << kShards << " shards";
  EXPECT_EQ(catch_up_->stats().syncs_completed, kShards);
}

// The fetch is paced to rate_bytes_per_s: its keys and values take at
// least their size over the rate (less the pacing's burst).
TEST_F(CatchUpTest, ACatchUpIsPacedToItsRate) {
  service_->Attach(&p_->source);
  board_.Install(MakeMap(3, p_admin_, {}));
  constexpr int kKeys = 40;
  const std::string value(2000, 'v');
  for (int i = 0; i < kKeys; ++i) ASSERT_EQ(p_->Put(Key(i), value).status_code, 0);
  board_.Install(MakeMap(4, p_admin_, AllShards()));
  constexpr uint64_t kRate = 40'000;  // bytes per second: about 2 s for 80 KB
  const auto start = std::chrono::steady_clock::now();
  StartCatchUp(kRate);
  WaitAllCaughtUp();
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(s_->Contents(), p_->Contents());
  const uint64_t bytes = catch_up_->stats().bytes_fetched;
  EXPECT_GE(bytes, uint64_t{kKeys} * value.size());
  // A lower bound only: the pacing sleeps at least this long; a loaded
  // machine only makes it longer.
  const auto least = std::chrono::milliseconds(bytes * 1000 / kRate) - CatchUp::kPaceBurst;
  EXPECT_GE(took, least) << "fetched " << bytes << " bytes at " << kRate << " bytes/s";
}

// A slow catch-up stream (paced far below what the link allows, as a
// loaded network would hold it) does not hold the primary's writes: client
// PUTs and DELETEs to the primary complete while the stream is still
// running, and the fetcher ends with every one of them.
TEST_F(CatchUpTest, ClientWritesKeepCompletingWhileACatchUpStreamIsSlow) {
  service_->Attach(&p_->source);
  board_.Install(MakeMap(3, p_admin_, {}));
  constexpr int kKeys = 200;
  const std::string value(2000, 'v');
  for (int i = 0; i < kKeys; ++i) ASSERT_EQ(p_->Put(Key(i), value).status_code, 0);
  board_.Install(MakeMap(4, p_admin_, AllShards()));
  // 400 KB at 80 KB/s, in chunks of at most ReplicaService::kChunkBytes:
  // about 5 s.
  StartCatchUp(/*rate_bytes_per_s=*/80'000);
  ASSERT_TRUE(rkv::testing::WaitFor("the stream started", [&] { return catch_up_->stats().records_listed > 0; },
                                    kDeadline));
  for (int i = 0; i < 2 * kKeys; ++i) {
    const protocol::ReplyMsg r = i % 10 == 9 ? p_->Del(Key(i / 2)) : p_->Put(Key(i), "during-" + std::to_string(i));
    ASSERT_EQ(r.status_code, 0) << r.message;
  }
  // Every write completed while no shard had been reported caught up yet:
  // none waited for the stream.
  EXPECT_EQ(Reported(), 0u) << "the writes waited for the catch-up to end";
  WaitAllCaughtUp();
  EXPECT_EQ(s_->Contents(), p_->Contents());
}

TEST_F(CatchUpTest, AFailedAttemptIsRetriedAndItsHolesAreFetchedByKey) {
  // The primary refuses every fetch until it has a map (not attached).
  board_.Install(MakeMap(3, p_admin_, {}));
  for (int i = 0; i < 50; ++i) ASSERT_EQ(p_->Put(Key(i), "early").status_code, 0);
  board_.Install(MakeMap(4, p_admin_, AllShards()));
  StartCatchUp();
  ASSERT_TRUE(rkv::testing::WaitFor("a failed attempt", [&] { return catch_up_->stats().sync_failures > 0; }, kDeadline));
  EXPECT_EQ(Reported(), 0u);
  // A write forwarded now gives s a version above every one it lacks: its
  // next attempt asks values only above it, and fetches the rest as holes.
  for (uint32_t shard = 0; shard < kShards; ++shard) {
    std::string key;
    for (int i = 1000;; ++i) {
      if (ShardOf(Key(i), kShards) == shard) {
        key = Key(i);
        break;
      }
    }
    ASSERT_EQ(p_->Put(key, "late").status_code, 0);
  }
  service_->Attach(&p_->source);
  WaitAllCaughtUp();
  EXPECT_EQ(s_->Contents(), p_->Contents());
  EXPECT_EQ(catch_up_->stats().values_fetched, 50u);  // every early key, as a hole
}

TEST_F(CatchUpTest, AReportTheCoordinatorRefusesIsSyncedAgainWhileStillSyncing) {
  service_->Attach(&p_->source);
  board_.Install(MakeMap(3, p_admin_, {}));
  for (int i = 0; i < 40; ++i) ASSERT_EQ(p_->Put(Key(i), "v").status_code, 0);
  board_.Install(MakeMap(4, p_admin_, AllShards()));
  refusals_left_ = 2;
  StartCatchUp();
  WaitAllCaughtUp();
  EXPECT_EQ(s_->Contents(), p_->Contents());
  const CatchUp::Stats st = catch_up_->stats();
  EXPECT_EQ(st.syncs_completed, kShards);
  EXPECT_EQ(st.sync_failures, 2u);
  // The gauge follows the map: no shard is left to sync.
  EXPECT_TRUE(rkv::testing::WaitFor("no shard left to sync", [&] { return catch_up_->stats().syncing_shards == 0; },
                               kDeadline));
}

TEST_F(CatchUpTest, AForwardedDeleteIsNotUndoneByAnOlderSnapshotRecord) {
  board_.Install(MakeMap(3, p_admin_, {}));
  ASSERT_EQ(p_->Put(Key(1), "v").status_code, 0);
  const uint64_t version = p_->Contents().at(Key(1)).first;
  board_.Install(MakeMap(4, p_admin_, AllShards()));
  const uint32_t shard = ShardOf(Key(1), kShards);
  s_->applier->BeginSync(shard, kShards);
  // The delete reaches s (forwarded) before the snapshot record that still
  // lists the key.
  ASSERT_EQ(p_->Del(Key(1)).status_code, 0);
  auto out = s_->applier->InstallFetched({Key(1), version, true, "v"});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out, Applier::FetchedOutcome::kDeletedMeanwhile);
  EXPECT_EQ(s_->applier->HeldVersion(Key(1)), 0u);
  // A later write of the key (a higher version) is not held back.
  out = s_->applier->InstallFetched({Key(1), version + 1, true, "again"});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out, Applier::FetchedOutcome::kInstalled);
  s_->applier->EndSync(shard);
}

TEST_F(CatchUpTest, AFetchedRecordThatFailsValidationIsNeverInstalled) {
  const auto refused = [&](Applier::ShardRecord r, const std::string& why) {
    const auto out = s_->applier->InstallFetched(r);
    EXPECT_EQ(out.status().code(), StatusCode::kInvalidArgument) << why;
    EXPECT_NE(out.status().message().find(why), std::string::npos) << out.status();
    EXPECT_EQ(s_->applier->HeldVersion(r.key), 0u);
  };
  refused({"k", 0, true, "v"}, "carries version 0");
  refused({std::string(65, 'k'), 3, true, "v"}, "key of 65 bytes");
  refused({"k", 3, true, std::string(4097, 'v')}, "above max_value_bytes 4096");
  refused({"k", 3, false, ""}, "carries no value");
  refused({"", 3, true, "v"}, "key of 0 bytes");
}

TEST_F(CatchUpTest, ABatchOfFetchedRecordsIsInstalledByTheReplicaRule) {
  board_.Install(MakeMap(3, p_admin_, {}));
  for (int i = 1; i <= 3; ++i) ASSERT_EQ(p_->Put(Key(i), "old" + std::to_string(i)).status_code, 0);
  const auto before = p_->Contents();
  // s syncs every shard: writes from now on are forwarded to it.
  board_.Install(MakeMap(4, p_admin_, AllShards()));
  for (uint32_t shard = 0; shard < kShards; ++shard) s_->applier->BeginSync(shard, kShards);
  // Key 2 reaches s at a newer version, key 3 is deleted: the batch (taken
  // before either) must undo neither.
  ASSERT_EQ(p_->Put(Key(2), "newer").status_code, 0);
  ASSERT_EQ(p_->Del(Key(3)).status_code, 0);
  std::vector<Applier::ShardRecord> batch;
  for (int i = 1; i <= 3; ++i) batch.push_back({Key(i), before.at(Key(i)).first, true, before.at(Key(i)).second});
  batch.push_back({Key(4), 1, true, "v4"});
  StatusOr<size_t> installed = s_->applier->InstallFetchedBatch(batch);
  ASSERT_TRUE(installed.ok()) << installed.status();
  EXPECT_EQ(*installed, 2u);  // keys 1 and 4
  for (uint32_t shard = 0; shard < kShards; ++shard) s_->applier->EndSync(shard);
  const auto held = s_->Contents();
  EXPECT_EQ(held.at(Key(1)), before.at(Key(1)));
  EXPECT_EQ(held.at(Key(2)), p_->Contents().at(Key(2)));
  EXPECT_EQ(held.at(Key(2)).second, "newer");
  EXPECT_EQ(held.count(Key(3)), 0u);
  EXPECT_EQ(held.at(Key(4)), std::make_pair(uint64_t{1}, std::string("v4")));
  // The store holds what the table publishes: a restart finds the same.
  EXPECT_EQ(s_->StoredContents(), held);
}

TEST_F(CatchUpTest, ABatchWithOneBadRecordInstallsNothing) {
  const auto refused = [&](std::vector<Applier::ShardRecord> batch, const std::string& why) {
    const auto out = s_->applier->InstallFetchedBatch(batch);
    EXPECT_EQ(out.status().code(), StatusCode::kInvalidArgument) << why;
    EXPECT_NE(out.status().message().find(why), std::string::npos) << out.status();
    for (const Applier::ShardRecord& r : batch) EXPECT_EQ(s_->applier->HeldVersion(r.key), 0u) << r.key;
  };
  refused({{"a", 3, true, "v"}, {"k", 0, true, "v"}}, "carries version 0");
  refused({{"a", 3, true, "v"}, {"k", 3, true, std::string(4097, 'v')}}, "above max_value_bytes 4096");
  refused({{"a", 3, true, "v"}, {"k", 3, false, ""}}, "carries no value");
  refused({{"a", 3, true, "v"}, {"a", 4, true, "w"}}, "listed twice in one chunk");
  EXPECT_TRUE(s_->StoredContents().empty());
}

// With per-server credentials the map binds each server id to its
// credential (ServerInfo.credential): a fetch naming s is refused unless
// it presents s's own.
TEST_F(CatchUpTest, AFetchAsAServerBoundToAnotherCredentialIsRefused) {
  service_->Attach(&p_->source);
  const auto fetch = [&] {
    grpc::ClientContext ctx;
    control::AttachToken(&ctx, kToken);  // the service's one peer credential, named "cluster"
    ctx.set_deadline(std::chrono::system_clock::now() + kDeadline);
    v1::FetchShardRequest req;
    req.set_server_id("s");
    req.set_epoch(2);
    req.add_shards()->set_shard(1);
    req.set_map_version(board_.map() != nullptr ? board_.map()->version() : 0);
    const auto stub = v1::Replica::NewStub(grpc::CreateChannel(p_admin_, grpc::InsecureChannelCredentials()));
    auto reader = stub->FetchShard(&ctx, req);
    v1::ShardChunk chunk;
    while (reader->Read(&chunk)) {
    }
    return control::FromGrpc(reader->Finish());
  };
  v1::ClusterMap bound = MakeMap(3, p_admin_, {1});
  bound.mutable_servers(1)->set_credential("srv-s");
  board_.Install(bound);
  const Status refused = fetch();
  EXPECT_EQ(refused.code(), StatusCode::kPermissionDenied) << refused;
  EXPECT_NE(refused.message().find("cannot fetch as server s, which is bound to credential srv-s"), std::string::npos)
      << refused;
  bound.set_version(4);
  bound.mutable_servers(1)->set_credential("cluster");
  board_.Install(bound);
  EXPECT_TRUE(fetch().ok());
}

TEST_F(CatchUpTest, FetchesFromServersThatAreNotSyncingOrWithoutTheTokenAreRefused) {
  service_->Attach(&p_->source);
  board_.Install(MakeMap(3, p_admin_, {1}));
  const auto channel = grpc::CreateChannel(p_admin_, grpc::InsecureChannelCredentials());
  const auto stub = v1::Replica::NewStub(channel);
  const auto fetch_shards = [&](const std::string& token, const std::string& id, uint64_t epoch,
                                const std::vector<uint32_t>& shards) {
    grpc::ClientContext ctx;
    if (!token.empty()) control::AttachToken(&ctx, token);
    ctx.set_deadline(std::chrono::system_clock::now() + kDeadline);
    v1::FetchShardRequest req;
    req.set_server_id(id);
    req.set_epoch(epoch);
    for (uint32_t shard : shards) req.add_shards()->set_shard(shard);
    req.set_map_version(3);
    auto reader = stub->FetchShard(&ctx, req);
    v1::ShardChunk chunk;
    while (reader->Read(&chunk)) {
    }
    return control::FromGrpc(reader->Finish());
  };
  const auto fetch = [&](const std::string& token, const std::string& id, uint64_t epoch, uint32_t shard) {
    return fetch_shards(token, id, epoch, {shard});
  };
  EXPECT_EQ(fetch("", "s", 2, 1).code(), StatusCode::kUnauthenticated);
  EXPECT_EQ(fetch("wrong token", "s", 2, 1).code(), StatusCode::kUnauthenticated);
  Status s = fetch(kToken, "s", 2, 0);  // not syncing shard 0
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("server s is not syncing shard 0 in map version 3"), std::string::npos) << s;
  s = fetch(kToken, "s", 9, 1);  // another incarnation
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("listed at epoch 2, not 9"), std::string::npos) << s;
  s = fetch(kToken, "x", 2, 1);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s;
  s = fetch(kToken, "s", 2, kShards);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s;
  EXPECT_TRUE(fetch(kToken, "s", 2, 1).ok());
  // A stream of several shards: each must be one the fetcher syncs, once.
  s = fetch_shards(kToken, "s", 2, {});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("asks for 0 shards"), std::string::npos) << s;
  s = fetch_shards(kToken, "s", 2, {1, 1});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("shard 1 asked for twice"), std::string::npos) << s;
  s = fetch_shards(kToken, "s", 2, {1, 0});
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(s.message().find("not syncing shard 0"), std::string::npos) << s;
  // FetchKeys: the same checks.
  {
    grpc::ClientContext ctx;
    control::AttachToken(&ctx, kToken);
    v1::FetchKeysRequest req;
    req.set_server_id("s");
    req.set_epoch(2);
    req.set_shard(0);
    v1::FetchKeysResponse resp;
    s = control::FromGrpc(stub->FetchKeys(&ctx, req, &resp));
    EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s;
  }
  {
    grpc::ClientContext ctx;
    v1::FetchKeysRequest req;
    req.set_server_id("s");
    req.set_epoch(2);
    req.set_shard(1);
    v1::FetchKeysResponse resp;
    EXPECT_EQ(control::FromGrpc(stub->FetchKeys(&ctx, req, &resp)).code(), StatusCode::kUnauthenticated);
  }
  // A server that is not the shard's primary refuses too.
  BoardSource not_primary("s", 2, &board_);
  auto other = ReplicaService::Create(kToken, s_->applier.get(), 64);
  ASSERT_TRUE(other.ok());
  (*other)->Attach(&not_primary);
  auto started = control::StartGrpcServer("127.0.0.1:0", other->get(), "");
  ASSERT_TRUE(started.ok()) << started.status();
  const auto stub2 = v1::Replica::NewStub(grpc::CreateChannel(started->address, grpc::InsecureChannelCredentials()));
  {
    grpc::ClientContext ctx;
    control::AttachToken(&ctx, kToken);
    v1::FetchKeysRequest req;
    req.set_server_id("s");
    req.set_epoch(2);
    req.set_shard(1);
    v1::FetchKeysResponse resp;
    s = control::FromGrpc(stub2->FetchKeys(&ctx, req, &resp));
    EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s;
    EXPECT_NE(s.message().find("is not the primary of shard 1"), std::string::npos) << s;
  }
  started->server->Shutdown();
}

}  // namespace
}  // namespace rkv::server
