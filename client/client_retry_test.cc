// Client retries of PUT and DELETE against an in-process server whose
// transport loses replies (the fault-injecting transport): a request whose
// reply was lost is resent with its request id and applied once; after a
// server restart it is not resent and the call reports that its outcome is
// unknown.
#include <atomic>
#include <chrono>
#include <filesystem>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <unistd.h>

#include "common/transport/factory.h"
#include "common/transport/fault/fault_transport.h"
#include "client/client_test_peer.h"
#include "rkv/admin.h"
#include "rkv/client.h"
#include "server/server.h"
#include "tests/wait_for.h"

namespace rkv {
namespace {

using namespace std::chrono_literals;
using transport::fault::FaultTransport;

constexpr char kToken[] = "retry-token";

// The version a PUT returned, or 0 (and a test failure) on an error.
uint64_t VersionOf(const StatusOr<uint64_t>& v) {
  EXPECT_TRUE(v.ok()) << v.status();
  return v.ok() ? *v : 0;
}

class ClientRetryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::path(::testing::TempDir()) /
           ("rkv_client_retry_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    options_.listen = "127.0.0.1:0";
    options_.data_dir = dir_.string();
    options_.memory_bytes = 16 << 20;
    options_.max_keys = 1000;
    options_.token = kToken;
    StartServer();
  }
  void TearDown() override {
    client_.reset();
    server_.reset();
    std::filesystem::remove_all(dir_);
  }

  // A server on a fresh fault-injecting transport (no faults yet), at the
  // address of the previous one, if any.
  void StartServer() {
    if (server_) {
      options_.listen = server_->address();
      server_->Shutdown();
      server_.reset();
    }
    auto tcp = transport::CreateTransport(transport::Kind::kTcp, transport::Options());
    ASSERT_TRUE(tcp.ok()) << tcp.status();
    transport_ = std::make_unique<FaultTransport>(std::move(tcp).value());
    auto s = server::Server::Start(options_, transport_.get());
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = std::move(s).value();
  }

  void Connect() {
    ClientOptions o;
    o.server = server_->address();
    o.token = kToken;
    o.transport = "tcp";
    // Generous: it only bounds a hang; nothing here waits for it to pass.
    o.timeout = 60s;
    auto c = Client::Connect(o);
    ASSERT_TRUE(c.ok()) << c.status();
    client_ = std::move(c).value();
  }

  // The server's next reply is lost: its SEND fails and the connection
  // breaks, after the request was applied.
  void LoseTheNextReply() { ASSERT_TRUE(transport_->faults().AddSpec("send:fail:nth=1").ok()); }

  std::filesystem::path dir_;
  server::ServerOptions options_;
  // The server goes before the transport it uses.
  std::unique_ptr<FaultTransport> transport_;
  std::unique_ptr<server::Server> server_;
  std::unique_ptr<Client> client_;
};

TEST_F(ClientRetryTest, APutWhoseReplyWasLostIsResentAndAppliedOnce) {
  Connect();
  ASSERT_EQ(VersionOf(client_->Put("k", "v1")), 1u);
  EXPECT_EQ(client_->Counters().retries, 0u);
  LoseTheNextReply();
  auto v = client_->Put("k", "v2");
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(*v, 2u) << "the resent PUT must get the original reply";
  EXPECT_GE(client_->Counters().retries, 1u) << "the resend is a retry the client counts";
  EXPECT_EQ(server_->Stats().puts, 2u) << "the resent PUT must not be applied again";
  EXPECT_EQ(server_->Stats().connections_accepted, 2u) << "resent on a new connection";
  EXPECT_EQ(server_->applier()->snapshot().resent, 1u) << "marked as resent (protocol::kRequestResent)";
  EXPECT_EQ(server_->applier()->snapshot().replays, 1u);
  auto got = client_->GetVersioned("k");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->value, "v2");
  EXPECT_EQ(got->version, 2u);
  // The next PUT takes the next version: nothing was applied twice.
  EXPECT_EQ(VersionOf(client_->Put("k", "v3")), 3u);
}

TEST_F(ClientRetryTest, ADeleteWhoseReplyWasLostIsResentAndReportsOk) {
  Connect();
  ASSERT_TRUE(client_->Put("k", "v").ok());
  LoseTheNextReply();
  const Status s = client_->Delete("k");
  EXPECT_TRUE(s.ok()) << s << " (a resent DELETE must not report NOT_FOUND)";
  EXPECT_EQ(server_->Stats().deletes, 1u);
  EXPECT_EQ(client_->Get("k").status().code(), StatusCode::kNotFound);
}

TEST_F(ClientRetryTest, AMultiPutWhoseRepliesWereLostResendsThemAndAppliesEachItemOnce) {
  Connect();
  ASSERT_EQ(VersionOf(client_->Put("warm", "up")), 1u);
  // The third reply of the batch is lost and the connection breaks with
  // up to the credits' worth of later requests applied or not.
  ASSERT_TRUE(transport_->faults().AddSpec("send:fail:nth=3").ok());
  std::vector<std::string> keys;
  std::vector<std::string> values;
  for (int i = 0; i < 40; ++i) {
    keys.push_back("k" + std::to_string(i));
    values.push_back("v" + std::to_string(i));
  }
  std::vector<KeyValueView> items;
  for (size_t i = 0; i < keys.size(); ++i) items.push_back(KeyValueView{keys[i], values[i]});
  const std::vector<StatusOr<uint64_t>> got = client_->MultiPut(items);
  ASSERT_EQ(got.size(), items.size());
  // One connection applies its requests in order, and so does the one
  // the rest were resent on: versions follow the items.
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_TRUE(got[i].ok()) << keys[i] << ": " << got[i].status();
    EXPECT_EQ(*got[i], 2 + i) << keys[i] << " must get its original reply";
  }
  EXPECT_EQ(server_->Stats().puts, 1 + items.size()) << "no item may be applied twice";
  EXPECT_EQ(server_->Stats().connections_accepted, 2u) << "resent on a new connection";
  for (size_t i = 0; i < keys.size(); ++i) {
    auto v = client_->GetVersioned(keys[i]);
    ASSERT_TRUE(v.ok()) << v.status();
    EXPECT_EQ(v->value, values[i]);
    EXPECT_EQ(v->version, 2 + i);
  }
  // MultiDelete retries the same way: every delete reports OK once.
  ASSERT_TRUE(transport_->faults().AddSpec("send:fail:nth=2").ok());
  const std::vector<Status> deleted = client_->MultiDelete(keys);
  ASSERT_EQ(deleted.size(), keys.size());
  for (size_t i = 0; i < deleted.size(); ++i) EXPECT_TRUE(deleted[i].ok()) << keys[i] << ": " << deleted[i];
  EXPECT_EQ(server_->Stats().deletes, keys.size());
  EXPECT_EQ(client_->Get("k0").status().code(), StatusCode::kNotFound);
}

TEST_F(ClientRetryTest, AfterAServerRestartTheOutcomeIsUnknownAndNothingIsResent) {
  Connect();
  ASSERT_EQ(VersionOf(client_->Put("k", "v1")), 1u);
  // The reply is lost and the server takes no new connection, so the
  // client keeps retrying its connect until the restarted server answers.
  ASSERT_TRUE(transport_->faults().AddSpec("send:fail:nth=1;accept:fail").ok());
  auto put = std::async(std::launch::async, [&] { return client_->Put("k", "v2"); });
  // Restart once the PUT was applied.
  ASSERT_TRUE(testing::WaitFor("the PUT applied", [&] { return server_->Stats().puts >= 2; }));
  ASSERT_EQ(server_->Stats().puts, 2u);
  const uint64_t old_epoch = server_->epoch();
  StartServer();
  ASSERT_NE(server_->epoch(), old_epoch);

  const StatusOr<uint64_t> v = put.get();
  ASSERT_FALSE(v.ok()) << "got version " << *v;
  EXPECT_EQ(v.status().code(), StatusCode::kUnavailable) << v.status();
  EXPECT_NE(v.status().message().find("outcome unknown"), std::string::npos) << v.status();
  EXPECT_NE(v.status().message().find("restarted"), std::string::npos) << v.status();
  EXPECT_EQ(server_->Stats().puts, 0u) << "the PUT was resent to the restarted server";
  // It was applied once, by the first incarnation, and is durable.
  auto got = client_->GetVersioned("k");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->value, "v2");
  EXPECT_EQ(got->version, 2u);
}

// A client of one server has no cluster to administer; its attempts are
// counted under the server's address.
TEST_F(ClientRetryTest, AConditionalPutIsACompareAndSetAndItsResendIsAnsweredAsTheFirst) {
  Connect();
  ASSERT_EQ(VersionOf(client_->Put("c", "v1", PutCondition::Absent())), 1u);
  auto again = client_->Put("c", "v2", PutCondition::Absent());
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(again.status().reason(), Reason::kConditionFailed);
  EXPECT_NE(again.status().message().find("version 1"), std::string::npos) << again.status();

  // The reply of a compare-and-set is lost after it was applied: its resend
  // gets the original OK, not a refusal from the version it wrote itself.
  LoseTheNextReply();
  ASSERT_EQ(VersionOf(client_->Put("c", "v2", PutCondition::VersionIs(1))), 2u);
  EXPECT_EQ(server_->Stats().puts, 2u) << "applied once";
  auto stale = client_->Put("c", "v3", PutCondition::VersionIs(1));
  ASSERT_FALSE(stale.ok());
  EXPECT_EQ(stale.status().reason(), Reason::kConditionFailed);
  auto got = client_->Get("c");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, "v2");
  EXPECT_EQ(client_->Put("c", "v", PutCondition::VersionIs(0)).status().code(), StatusCode::kInvalidArgument);
}

// MultiPut's items carry their own conditions, checked in the batch's
// order: an item may rely on an earlier item of its batch.
TEST_F(ClientRetryTest, MultiPutChecksEachItemsConditionInOrder) {
  Connect();
  ASSERT_EQ(VersionOf(client_->Put("m-old", "v1")), 1u);
  const KeyValueView items[] = {
      {"m-new", "a", PutCondition::Absent()},        // absent: stored
      {"m-new", "b", PutCondition::VersionIs(2)},    // the item before made version 2: stored
      {"m-old", "c", PutCondition::Absent()},        // exists: refused
      {"m-old", "d", PutCondition::VersionIs(1)},    // as asked: stored
      {"m-old", "e", PutCondition::VersionIs(1)},    // now version 4: refused
      {"m-free", "f"},                               // no condition
      {"m-bad", "g", PutCondition::VersionIs(0)},    // no key has version 0
  };
  const std::vector<StatusOr<uint64_t>> got = client_->MultiPut(items);
  ASSERT_EQ(got.size(), std::size(items));
  EXPECT_TRUE(got[0].ok()) << got[0].status();
  EXPECT_TRUE(got[1].ok()) << got[1].status();
  EXPECT_EQ(got[2].status().reason(), Reason::kConditionFailed) << got[2].status();
  EXPECT_TRUE(got[3].ok()) << got[3].status();
  EXPECT_EQ(got[4].status().reason(), Reason::kConditionFailed) << got[4].status();
  EXPECT_TRUE(got[5].ok()) << got[5].status();
  EXPECT_EQ(got[6].status().code(), StatusCode::kInvalidArgument) << got[6].status();
  EXPECT_EQ(*client_->Get("m-new"), "b");
  EXPECT_EQ(*client_->Get("m-old"), "d");
  EXPECT_EQ(client_->Get("m-bad").status().code(), StatusCode::kNotFound) << "a refused item is not sent";
}

// DeleteIfVersion removes the key only at the version asked for; its
// resend after a lost reply is answered as the first, not refused by the
// deletion it made itself.
TEST_F(ClientRetryTest, DeleteIfVersionRemovesOnlyThatVersion) {
  Connect();
  const uint64_t v1 = VersionOf(client_->Put("d", "v1"));
  const uint64_t v2 = VersionOf(client_->Put("d", "v2"));
  const Status stale = client_->DeleteIfVersion("d", v1);
  EXPECT_EQ(stale.code(), StatusCode::kFailedPrecondition) << stale;
  EXPECT_EQ(stale.reason(), Reason::kConditionFailed);
  EXPECT_NE(stale.message().find("version is " + std::to_string(v2)), std::string::npos) << stale;
  EXPECT_EQ(*client_->Get("d"), "v2");
  LoseTheNextReply();
  ASSERT_TRUE(client_->DeleteIfVersion("d", v2).ok());
  EXPECT_EQ(client_->Get("d").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(client_->DeleteIfVersion("d", v2).reason(), Reason::kConditionFailed) << "absent now";
  EXPECT_EQ(client_->DeleteIfVersion("d", 0).code(), StatusCode::kInvalidArgument);
}

TEST_F(ClientRetryTest, IncrementsByCompareAndSetLoopsLoseNone) {
  Connect();
  ASSERT_TRUE(client_->Put("counter", "0").ok());
  constexpr int kThreads = 4;
  constexpr int kEach = 50;
  std::atomic<int> conflicts{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < kEach; ++i) {
        while (true) {
          auto got = client_->GetVersioned("counter");
          ASSERT_TRUE(got.ok()) << got.status();
          const std::string next = std::to_string(std::stoi(got->value) + 1);
          auto put = client_->Put("counter", next, PutCondition::VersionIs(got->version));
          if (put.ok()) break;
          ASSERT_EQ(put.status().reason(), Reason::kConditionFailed) << put.status();
          conflicts.fetch_add(1);
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  auto final_value = client_->Get("counter");
  ASSERT_TRUE(final_value.ok()) << final_value.status();
  EXPECT_EQ(*final_value, std::to_string(kThreads * kEach));
  EXPECT_EQ(server_->Stats().conditions_failed, static_cast<uint64_t>(conflicts.load()));
}

TEST_F(ClientRetryTest, AClientOfOneServerHasNoAdminAndCountsItsAttemptsByAddress) {
  Connect();
  ClusterAdmin admin(*client_);
  EXPECT_EQ(admin.Members().status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(admin.ServerStats("s").status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(admin.ShardChecksums("s", {}).status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(admin.ListShard("s", 0).status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(admin.Drain("s").status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(admin.Forget("s").status().code(), StatusCode::kFailedPrecondition);

  const uint64_t before = ClientTestPeer::AttemptsOn(*client_, server_->address());
  ASSERT_EQ(VersionOf(client_->Put("k", "v")), 1u);
  ASSERT_TRUE(client_->Get("k").ok());
  EXPECT_EQ(ClientTestPeer::AttemptsOn(*client_, server_->address()), before + 2);
  EXPECT_EQ(ClientTestPeer::AttemptsOn(*client_, "127.0.0.1:1"), 0u);

  // The public counters tell the same, by the server's address.
  const ClientCounters counters = client_->Counters();
  ASSERT_EQ(counters.attempts_by_server.size(), 1u);
  EXPECT_EQ(counters.attempts_by_server.begin()->first, server_->address());
  EXPECT_EQ(counters.attempts_by_server.begin()->second, before + 2);
  EXPECT_EQ(counters.retries, 0u);
  EXPECT_EQ(counters.location_cache.hits + counters.location_cache.misses + counters.location_cache.fallbacks,
            counters.location_cache.enabled ? 1u : 0u);
}

}  // namespace
}  // namespace rkv
