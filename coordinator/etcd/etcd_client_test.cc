// EtcdClient against real etcd processes on loopback (tests/etcd_process.h):
// one member for the calls and the watch, three for failover. Waits are
// bounded conditions (tests/wait_for.h), never claims on speed.
#include "coordinator/etcd/etcd_client.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "tests/etcd_process.h"
#include "tests/wait_for.h"

namespace rkv::etcd {
namespace {

using ::rkv::testing::EtcdCluster;
using ::rkv::testing::WaitFor;
using std::chrono::seconds;

// The deadline of one call: generous, a bound on a hang only.
Deadline Soon(seconds s = seconds(30)) { return std::chrono::steady_clock::now() + s; }

// A loopback port nothing listens on (bound, never listening, for as long
// as the test holds it, so connecting to it is refused).
class DeadPort {
 public:
  DeadPort() {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    EXPECT_EQ(::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    EXPECT_EQ(::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len), 0);
    endpoint_ = "127.0.0.1:" + std::to_string(ntohs(addr.sin_port));
  }
  ~DeadPort() { ::close(fd_); }
  const std::string& endpoint() const { return endpoint_; }

 private:
  int fd_ = -1;
  std::string endpoint_;
};

std::unique_ptr<EtcdClient> NewClient(std::vector<std::string> endpoints) {
  StatusOr<std::unique_ptr<EtcdClient>> client = EtcdClient::Create(std::move(endpoints));
  EXPECT_TRUE(client.ok()) << client.status();
  return client.ok() ? std::move(client).value() : nullptr;
}

StatusOr<TxnResult> Put(EtcdClient& client, const std::string& key, const std::string& value, int64_t lease = 0) {
  return client.Txn({}, {Op::Put(key, value, lease)}, {}, Soon());
}

// What a watch delivered, for the test thread to wait on.
class Collector {
 public:
  void OnEvents(const std::vector<WatchEvent>& events, int64_t revision) {
    std::lock_guard<std::mutex> lock(mu_);
    for (const WatchEvent& event : events) events_.push_back(event);
    revisions_.push_back(revision);
  }
  void OnError(const Status& status) {
    std::lock_guard<std::mutex> lock(mu_);
    errors_.push_back(status);
  }
  std::unique_ptr<EtcdClient::Watch> Watch(EtcdClient& client, const std::string& prefix, int64_t from) {
    return client.WatchPrefix(
        prefix, from, [this](const std::vector<WatchEvent>& events, int64_t revision) { OnEvents(events, revision); },
        [this](const Status& status) { OnError(status); });
  }
  std::vector<WatchEvent> events() {
    std::lock_guard<std::mutex> lock(mu_);
    return events_;
  }
  std::vector<Status> errors() {
    std::lock_guard<std::mutex> lock(mu_);
    return errors_;
  }
  size_t event_count() {
    std::lock_guard<std::mutex> lock(mu_);
    return events_.size();
  }

 private:
  std::mutex mu_;
  std::vector<WatchEvent> events_;
  std::vector<int64_t> revisions_;
  std::vector<Status> errors_;
};

// ---- No etcd needed -------------------------------------------------------

TEST(EtcdClientCreateTest, RejectsBadEndpointsNamingThem) {
  for (const std::string bad : {"localhost", "127.0.0.1:", "127.0.0.1:99999", ":2379", "127.0.0.1:0"}) {
    StatusOr<std::unique_ptr<EtcdClient>> client = EtcdClient::Create({"127.0.0.1:2379", bad});
    ASSERT_FALSE(client.ok()) << bad;
    EXPECT_EQ(client.status().code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(client.status().message().find("\"" + bad + "\""), std::string::npos) << client.status();
  }
  EXPECT_EQ(EtcdClient::Create({}).status().code(), StatusCode::kInvalidArgument);
  StatusOr<std::unique_ptr<EtcdClient>> ok = EtcdClient::Create({"127.0.0.1:2379", "[::1]:2380", "etcd-0:2379"});
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ((*ok)->endpoints().size(), 3u);
}

TEST(PrefixEndTest, IncrementsTheLastByteBelow0xff) {
  EXPECT_EQ(PrefixEnd("a"), "b");
  EXPECT_EQ(PrefixEnd("/rkv/"), "/rkv0");
  EXPECT_EQ(PrefixEnd(std::string("a\xff", 2)), "b");
  EXPECT_EQ(PrefixEnd(std::string("a\xfe\xff", 3)), std::string("a\xff", 2));
  EXPECT_EQ(PrefixEnd(std::string("\xff\xff", 2)), std::string(1, '\0'));
  EXPECT_EQ(PrefixEnd(""), std::string(1, '\0'));
}

// ---- One member ---------------------------------------------------------

class EtcdSingleTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    StatusOr<std::unique_ptr<EtcdCluster>> cluster = EtcdCluster::Start(1);
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    etcd_ = std::move(cluster).value().release();
  }
  static void TearDownTestSuite() {
    delete etcd_;
    etcd_ = nullptr;
  }
  void SetUp() override {
    ASSERT_NE(etcd_, nullptr) << "etcd did not start";
    client_ = NewClient({etcd_->endpoint(0)});
    ASSERT_NE(client_, nullptr);
    prefix_ = std::string("/test/") + ::testing::UnitTest::GetInstance()->current_test_info()->name() + "/";
  }

  static EtcdCluster* etcd_;
  std::unique_ptr<EtcdClient> client_;
  std::string prefix_;  // this test's keys
};
EtcdCluster* EtcdSingleTest::etcd_ = nullptr;

TEST_F(EtcdSingleTest, PutThroughTxnThenGet) {
  StatusOr<RangeResult> missing = client_->Get(prefix_ + "k", Soon());
  ASSERT_TRUE(missing.ok()) << missing.status();
  EXPECT_TRUE(missing->kvs.empty());
  EXPECT_GT(missing->revision, 0);

  StatusOr<TxnResult> put = Put(*client_, prefix_ + "k", "v1");
  ASSERT_TRUE(put.ok()) << put.status();
  EXPECT_TRUE(put->succeeded);
  EXPECT_TRUE(put->gets.empty());
  StatusOr<RangeResult> got = client_->Get(prefix_ + "k", Soon());
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->kvs.size(), 1u);
  EXPECT_EQ(got->kvs[0].key, prefix_ + "k");
  EXPECT_EQ(got->kvs[0].value, "v1");
  EXPECT_EQ(got->kvs[0].create_revision, put->revision);
  EXPECT_EQ(got->kvs[0].mod_revision, put->revision);
  EXPECT_EQ(got->kvs[0].version, 1);
  EXPECT_EQ(got->kvs[0].lease, 0);
  EXPECT_GE(got->revision, put->revision);

  StatusOr<TxnResult> again = Put(*client_, prefix_ + "k", std::string("v\0 2", 4));
  ASSERT_TRUE(again.ok()) << again.status();
  got = client_->Get(prefix_ + "k", Soon());
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->kvs.size(), 1u);
  EXPECT_EQ(got->kvs[0].value, std::string("v\0 2", 4));
  EXPECT_EQ(got->kvs[0].create_revision, put->revision);
  EXPECT_EQ(got->kvs[0].mod_revision, again->revision);
  EXPECT_EQ(got->kvs[0].version, 2);
}

TEST_F(EtcdSingleTest, CompareAndSwapSucceedsOnceThenFails) {
  const std::string key = prefix_ + "leader";
  const Compare absent{key, Compare::Target::kCreateRevision, Compare::Result::kEqual, 0, ""};
  StatusOr<TxnResult> first = client_->Txn({absent}, {Op::Put(key, "a")}, {Op::Get(key)}, Soon());
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_TRUE(first->succeeded);
  EXPECT_TRUE(first->gets.empty());

  StatusOr<TxnResult> second = client_->Txn({absent}, {Op::Put(key, "b")}, {Op::Get(key)}, Soon());
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_FALSE(second->succeeded);
  ASSERT_EQ(second->gets.size(), 1u);
  ASSERT_EQ(second->gets[0].kvs.size(), 1u);
  EXPECT_EQ(second->gets[0].kvs[0].value, "a");
  EXPECT_EQ(second->gets[0].kvs[0].create_revision, first->revision);

  // Guarded by the value, by the mod revision, by the version.
  const Compare is_a{key, Compare::Target::kValue, Compare::Result::kEqual, 0, "a"};
  StatusOr<TxnResult> swap = client_->Txn({is_a}, {Op::Put(key, "c")}, {}, Soon());
  ASSERT_TRUE(swap.ok()) << swap.status();
  EXPECT_TRUE(swap->succeeded);
  const Compare stale{key, Compare::Target::kModRevision, Compare::Result::kEqual, first->revision, ""};
  StatusOr<TxnResult> lost = client_->Txn({stale}, {Op::Put(key, "d")}, {}, Soon());
  ASSERT_TRUE(lost.ok()) << lost.status();
  EXPECT_FALSE(lost->succeeded);
  const Compare version2{key, Compare::Target::kVersion, Compare::Result::kEqual, 2, ""};
  const Compare newer{key, Compare::Target::kModRevision, Compare::Result::kGreater, first->revision, ""};
  const Compare not_d{key, Compare::Target::kValue, Compare::Result::kNotEqual, 0, "d"};
  StatusOr<TxnResult> all = client_->Txn({version2, newer, not_d}, {Op::Put(key, "e"), Op::Get(key)}, {}, Soon());
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_TRUE(all->succeeded);
  ASSERT_EQ(all->gets.size(), 1u);
  ASSERT_EQ(all->gets[0].kvs.size(), 1u);
  EXPECT_EQ(all->gets[0].kvs[0].value, "e");
  EXPECT_EQ(all->gets[0].revision, all->revision);
  const Compare older{key, Compare::Target::kModRevision, Compare::Result::kLess, first->revision, ""};
  StatusOr<TxnResult> none = client_->Txn({older}, {Op::Delete(key)}, {}, Soon());
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_FALSE(none->succeeded);
}

TEST_F(EtcdSingleTest, PrefixGetIsSortedAndPrefixDeleteRemovesOnlyThePrefix) {
  for (const char* k : {"b", "a", "c/1", "c"}) ASSERT_TRUE(Put(*client_, prefix_ + "p/" + k, k).ok());
  ASSERT_TRUE(Put(*client_, prefix_ + "q", "outside").ok());
  ASSERT_TRUE(Put(*client_, prefix_ + "p", "the prefix itself").ok());

  StatusOr<RangeResult> all = client_->GetPrefix(prefix_ + "p/", Soon());
  ASSERT_TRUE(all.ok()) << all.status();
  std::vector<std::string> keys;
  for (const KeyValue& kv : all->kvs) keys.push_back(kv.key.substr(prefix_.size()));
  EXPECT_EQ(keys, (std::vector<std::string>{"p/a", "p/b", "p/c", "p/c/1"}));

  StatusOr<TxnResult> del =
      client_->Txn({}, {Op::Delete(prefix_ + "p/", /*prefix=*/true), Op::Get(prefix_, /*prefix=*/true)}, {}, Soon());
  ASSERT_TRUE(del.ok()) << del.status();
  ASSERT_EQ(del->gets.size(), 1u);
  keys.clear();
  for (const KeyValue& kv : del->gets[0].kvs) keys.push_back(kv.key.substr(prefix_.size()));
  EXPECT_EQ(keys, (std::vector<std::string>{"p", "q"}));
  StatusOr<RangeResult> gone = client_->GetPrefix(prefix_ + "p/", Soon());
  ASSERT_TRUE(gone.ok()) << gone.status();
  EXPECT_TRUE(gone->kvs.empty());
}

TEST_F(EtcdSingleTest, TxnGetsFollowTheBranchTakenInOrder) {
  ASSERT_TRUE(Put(*client_, prefix_ + "x", "1").ok());
  ASSERT_TRUE(Put(*client_, prefix_ + "y", "2").ok());
  const Compare never{prefix_ + "x", Compare::Target::kValue, Compare::Result::kEqual, 0, "no"};
  StatusOr<TxnResult> txn = client_->Txn({never}, {Op::Get(prefix_ + "x")},
                                         {Op::Get(prefix_ + "y"), Op::Put(prefix_ + "z", "3"), Op::Get(prefix_ + "x"),
                                          Op::Get(prefix_ + "missing")},
                                         Soon());
  ASSERT_TRUE(txn.ok()) << txn.status();
  EXPECT_FALSE(txn->succeeded);
  ASSERT_EQ(txn->gets.size(), 3u);
  ASSERT_EQ(txn->gets[0].kvs.size(), 1u);
  EXPECT_EQ(txn->gets[0].kvs[0].value, "2");
  ASSERT_EQ(txn->gets[1].kvs.size(), 1u);
  EXPECT_EQ(txn->gets[1].kvs[0].value, "1");
  EXPECT_TRUE(txn->gets[2].kvs.empty());
}

TEST_F(EtcdSingleTest, RefusedTxnIsFinalAndNamesTheEndpoint) {
  // etcd refuses two puts of one key in a branch: INVALID_ARGUMENT, at once.
  StatusOr<TxnResult> txn = client_->Txn({}, {Op::Put(prefix_ + "k", "1"), Op::Put(prefix_ + "k", "2")}, {}, Soon());
  ASSERT_FALSE(txn.ok());
  EXPECT_EQ(txn.status().code(), StatusCode::kInvalidArgument) << txn.status();
  EXPECT_NE(txn.status().message().find("etcd " + etcd_->endpoint(0) + ": "), std::string::npos) << txn.status();
  EXPECT_EQ(txn.status().reason(), Reason::kNone);
}

TEST_F(EtcdSingleTest, LeaseKeepsItsKeyUntilItExpires) {
  StatusOr<LeaseGrant> lease = client_->GrantLease(2, Soon());
  ASSERT_TRUE(lease.ok()) << lease.status();
  EXPECT_NE(lease->id, 0);
  EXPECT_GE(lease->ttl_s, 2);
  ASSERT_TRUE(Put(*client_, prefix_ + "owned", "x", lease->id).ok());
  StatusOr<RangeResult> got = client_->Get(prefix_ + "owned", Soon());
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->kvs.size(), 1u);
  EXPECT_EQ(got->kvs[0].lease, lease->id);

  StatusOr<int64_t> left = client_->KeepAliveOnce(lease->id, Soon());
  ASSERT_TRUE(left.ok()) << left.status();
  EXPECT_GT(*left, 0);

  // No more keepalives: the key goes with the lease.
  EXPECT_TRUE(WaitFor("the leased key to expire", [&] {
    StatusOr<RangeResult> now = client_->Get(prefix_ + "owned", Soon());
    return now.ok() && now->kvs.empty();
  }, std::chrono::seconds(60)));
  StatusOr<int64_t> expired = client_->KeepAliveOnce(lease->id, Soon());
  ASSERT_FALSE(expired.ok());
  EXPECT_EQ(expired.status().code(), StatusCode::kNotFound) << expired.status();
}

TEST_F(EtcdSingleTest, RevokeDeletesTheLeasesKeys) {
  StatusOr<LeaseGrant> lease = client_->GrantLease(60, Soon());
  ASSERT_TRUE(lease.ok()) << lease.status();
  ASSERT_TRUE(Put(*client_, prefix_ + "a", "1", lease->id).ok());
  ASSERT_TRUE(Put(*client_, prefix_ + "b", "2", lease->id).ok());
  ASSERT_TRUE(Put(*client_, prefix_ + "c", "3").ok());
  ASSERT_TRUE(client_->RevokeLease(lease->id, Soon()).ok());
  StatusOr<RangeResult> left = client_->GetPrefix(prefix_, Soon());
  ASSERT_TRUE(left.ok()) << left.status();
  ASSERT_EQ(left->kvs.size(), 1u);
  EXPECT_EQ(left->kvs[0].key, prefix_ + "c");
  EXPECT_EQ(client_->KeepAliveOnce(lease->id, Soon()).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(client_->RevokeLease(lease->id, Soon()).code(), StatusCode::kNotFound);
  // A put under a lease that is gone is refused.
  StatusOr<TxnResult> orphan = Put(*client_, prefix_ + "d", "4", lease->id);
  ASSERT_FALSE(orphan.ok());
  EXPECT_EQ(orphan.status().code(), StatusCode::kNotFound) << orphan.status();
}

TEST_F(EtcdSingleTest, WatchSeesPutsAndDeletesInOrder) {
  Collector seen;
  auto watch = seen.Watch(*client_, prefix_, 0);
  // The watch begins when etcd has created it; markers (put until one is
  // seen, then left out) tell when.
  const std::string marker = prefix_ + "marker";
  ASSERT_TRUE(WaitFor("the watch to start", [&] {
    EXPECT_TRUE(Put(*client_, marker, "m").ok());
    return seen.event_count() > 0;
  }, std::chrono::seconds(60)));
  auto watched = [&] {
    std::vector<WatchEvent> out;
    for (const WatchEvent& e : seen.events()) {
      if (e.kv.key != marker) out.push_back(e);
    }
    return out;
  };
  ASSERT_TRUE(Put(*client_, prefix_ + "a", "1").ok());
  ASSERT_TRUE(Put(*client_, prefix_ + "b", "2").ok());
  ASSERT_TRUE(client_->Txn({}, {Op::Delete(prefix_ + "a")}, {}, Soon()).ok());
  ASSERT_TRUE(client_->Txn({}, {Op::Put(prefix_ + "c", "3"), Op::Delete(prefix_ + "b")}, {}, Soon()).ok());
  ASSERT_TRUE(Put(*client_, "/elsewhere/" + prefix_, "not watched").ok());
  ASSERT_TRUE(Put(*client_, prefix_ + "a", "4").ok());
  ASSERT_TRUE(WaitFor("six events", [&] { return watched().size() >= 6; }, std::chrono::seconds(60)));
  watch.reset();

  const std::vector<WatchEvent> events = watched();
  ASSERT_EQ(events.size(), 6u);
  struct Want {
    WatchEvent::Type type;
    std::string key;
    std::string value;
  };
  const std::vector<Want> want = {
      {WatchEvent::Type::kPut, "a", "1"},    {WatchEvent::Type::kPut, "b", "2"},
      {WatchEvent::Type::kDelete, "a", ""},  {WatchEvent::Type::kPut, "c", "3"},
      {WatchEvent::Type::kDelete, "b", ""},  {WatchEvent::Type::kPut, "a", "4"},
  };
  int64_t last = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const WatchEvent& e = events[i];
    EXPECT_EQ(e.type, want[i].type) << i;
    EXPECT_EQ(e.kv.key, prefix_ + want[i].key) << i;
    EXPECT_EQ(e.kv.value, want[i].value) << i;
    EXPECT_GE(e.kv.mod_revision, last) << i;
    last = e.kv.mod_revision;
  }
  // The txn's put and delete share one revision.
  EXPECT_EQ(events[3].kv.mod_revision, events[4].kv.mod_revision);
  EXPECT_TRUE(seen.errors().empty());
}

TEST_F(EtcdSingleTest, WatchFromARevisionReplaysHistory) {
  StatusOr<TxnResult> first = Put(*client_, prefix_ + "k", "1");
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE(Put(*client_, prefix_ + "k", "2").ok());
  ASSERT_TRUE(client_->Txn({}, {Op::Delete(prefix_ + "k")}, {}, Soon()).ok());
  Collector seen;
  auto watch = seen.Watch(*client_, prefix_, first->revision + 1);
  ASSERT_TRUE(WaitFor("the replay", [&] { return seen.event_count() >= 2; }, std::chrono::seconds(60)));
  watch.reset();
  const std::vector<WatchEvent> events = seen.events();
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].type, WatchEvent::Type::kPut);
  EXPECT_EQ(events[0].kv.value, "2");
  EXPECT_EQ(events[1].type, WatchEvent::Type::kDelete);
}

TEST_F(EtcdSingleTest, WatchOfCompactedHistoryFailsWithTheCompactRevision) {
  StatusOr<TxnResult> first = Put(*client_, prefix_ + "k", "1");
  ASSERT_TRUE(first.ok()) << first.status();
  StatusOr<TxnResult> last = Put(*client_, prefix_ + "k", "2");
  ASSERT_TRUE(last.ok()) << last.status();
  ASSERT_TRUE(client_->Compact(last->revision, Soon()).ok());
  EXPECT_EQ(client_->Compact(first->revision, Soon()).code(), StatusCode::kOutOfRange);

  Collector seen;
  auto watch = seen.Watch(*client_, prefix_, first->revision);
  ASSERT_TRUE(WaitFor("the compaction error", [&] { return !seen.errors().empty(); }, std::chrono::seconds(60)));
  watch.reset();
  const std::vector<Status> errors = seen.errors();
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0].code(), StatusCode::kFailedPrecondition) << errors[0];
  EXPECT_NE(errors[0].message().find("compacted"), std::string::npos) << errors[0];
  EXPECT_NE(errors[0].message().find("compact revision " + std::to_string(last->revision)), std::string::npos)
      << errors[0];
  EXPECT_EQ(seen.event_count(), 0u);
}

TEST_F(EtcdSingleTest, FailsOverFromADeadEndpoint) {
  DeadPort dead;
  std::unique_ptr<EtcdClient> client = NewClient({dead.endpoint(), etcd_->endpoint(0)});
  ASSERT_NE(client, nullptr);
  // A write first: the dead endpoint never connected, so nothing was sent
  // there and the write may go on to the next.
  StatusOr<TxnResult> put = Put(*client, prefix_ + "k", "v");
  ASSERT_TRUE(put.ok()) << put.status();
  StatusOr<RangeResult> got = client->Get(prefix_ + "k", Soon());
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->kvs.size(), 1u);
  StatusOr<LeaseGrant> lease = client->GrantLease(5, Soon());
  ASSERT_TRUE(lease.ok()) << lease.status();
  EXPECT_TRUE(client->KeepAliveOnce(lease->id, Soon()).ok());
  EXPECT_TRUE(client->RevokeLease(lease->id, Soon()).ok());
  Collector seen;
  auto watch = seen.Watch(*client, prefix_, put->revision);
  EXPECT_TRUE(WaitFor("the watch over the live endpoint", [&] { return seen.event_count() >= 1; },
                      std::chrono::seconds(60)));
}

TEST_F(EtcdSingleTest, EveryEndpointDeadNamesThemAll) {
  DeadPort a;
  DeadPort b;
  std::unique_ptr<EtcdClient> client = NewClient({a.endpoint(), b.endpoint()});
  ASSERT_NE(client, nullptr);
  StatusOr<RangeResult> got = client->Get("k", Soon(seconds(2)));
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), StatusCode::kUnavailable) << got.status();
  EXPECT_NE(got.status().message().find(a.endpoint()), std::string::npos) << got.status();
  EXPECT_NE(got.status().message().find(b.endpoint()), std::string::npos) << got.status();
  // Nothing was ever sent: a write's outcome is known (not applied).
  StatusOr<TxnResult> put = client->Txn({}, {Op::Put("k", "v")}, {}, Soon(seconds(2)));
  ASSERT_FALSE(put.ok());
  EXPECT_EQ(put.status().code(), StatusCode::kUnavailable) << put.status();
  EXPECT_EQ(put.status().reason(), Reason::kNone) << put.status();
  const std::vector<EndpointStatus> statuses = client->EndpointStatuses(Soon(seconds(2)));
  ASSERT_EQ(statuses.size(), 2u);
  EXPECT_FALSE(statuses[0].health.ok());
  EXPECT_FALSE(statuses[1].health.ok());
}

TEST_F(EtcdSingleTest, ConcurrentCompareAndSwapIncrementsAddUp) {
  const std::string key = prefix_ + "counter";
  ASSERT_TRUE(Put(*client_, key, "0").ok());
  constexpr int kThreads = 4;
  constexpr int kIncrements = 10;
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < kIncrements; ++i) {
        while (true) {
          StatusOr<RangeResult> now = client_->Get(key, Soon());
          if (!now.ok() || now->kvs.size() != 1) {
            ++failures;
            return;
          }
          const KeyValue& kv = now->kvs[0];
          const Compare unchanged{key, Compare::Target::kModRevision, Compare::Result::kEqual, kv.mod_revision, ""};
          StatusOr<TxnResult> swap =
              client_->Txn({unchanged}, {Op::Put(key, std::to_string(std::stoi(kv.value) + 1))}, {}, Soon());
          if (!swap.ok()) {
            ++failures;
            return;
          }
          if (swap->succeeded) break;
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  StatusOr<RangeResult> final_value = client_->Get(key, Soon());
  ASSERT_TRUE(final_value.ok()) << final_value.status();
  ASSERT_EQ(final_value->kvs.size(), 1u);
  EXPECT_EQ(final_value->kvs[0].value, std::to_string(kThreads * kIncrements));
}

TEST_F(EtcdSingleTest, EndpointStatusesReportTheVersion) {
  const std::vector<EndpointStatus> statuses = client_->EndpointStatuses(Soon());
  ASSERT_EQ(statuses.size(), 1u);
  ASSERT_TRUE(statuses[0].health.ok()) << statuses[0].health;
  EXPECT_EQ(statuses[0].endpoint, etcd_->endpoint(0));
  EXPECT_EQ(statuses[0].version.rfind("3.", 0), 0u) << statuses[0].version;
  EXPECT_NE(statuses[0].member_id, 0u);
  EXPECT_EQ(statuses[0].leader_id, statuses[0].member_id);
  EXPECT_GT(statuses[0].raft_index, 0);
  EXPECT_GT(statuses[0].revision, 0);
}

// ---- Three members --------------------------------------------------------

class EtcdClusterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    StatusOr<std::unique_ptr<EtcdCluster>> cluster = EtcdCluster::Start(3);
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    etcd_ = std::move(cluster).value();
    client_ = NewClient(etcd_->endpoints());
    ASSERT_NE(client_, nullptr);
  }

  // Each status in one line, for a failure's message.
  static std::string Describe(const std::vector<EndpointStatus>& statuses) {
    std::string out;
    for (const EndpointStatus& s : statuses) {
      out += " [" + s.endpoint + ": " +
             (s.health.ok() ? "member " + std::to_string(s.member_id) + ", leader " + std::to_string(s.leader_id)
                            : s.health.ToString()) +
             "]";
    }
    return out;
  }

  // Asks every member's status until `done` holds for the answers (up to
  // 60 s), leaving the last answers in *statuses. Right after the start,
  // and more so on a loaded machine, a member may answer with an error or
  // before it has heard from the leader elected at the start: one round of
  // statuses is not enough.
  ::testing::AssertionResult StatusesUntil(std::string_view what,
                                           const std::function<bool(const std::vector<EndpointStatus>&)>& done,
                                           std::vector<EndpointStatus>* statuses) {
    ::testing::AssertionResult held = WaitFor(
        what,
        [&] {
          *statuses = client_->EndpointStatuses(Soon(seconds(5)));
          return done(*statuses);
        },
        std::chrono::seconds(60), std::chrono::milliseconds(200));
    if (!held) held << "; the last statuses:" << Describe(*statuses);
    return held;
  }

  // A member that is not the leader (so stopping it needs no election).
  int Follower() {
    int follower = -1;
    std::vector<EndpointStatus> statuses;
    const ::testing::AssertionResult found = StatusesUntil(
        "a member that answers as the follower of a known leader",
        [&](const std::vector<EndpointStatus>& answers) {
          for (int i = 0; i < static_cast<int>(answers.size()); ++i) {
            const EndpointStatus& s = answers[i];
            if (s.health.ok() && s.leader_id != 0 && s.member_id != s.leader_id) {
              follower = i;
              return true;
            }
          }
          return false;
        },
        &statuses);
    if (!found) {
      ADD_FAILURE() << found.message();
      return 0;
    }
    return follower;
  }

  std::unique_ptr<EtcdCluster> etcd_;
  std::unique_ptr<EtcdClient> client_;
};

TEST_F(EtcdClusterTest, EndpointStatusesAgreeOnOneLeader) {
  std::vector<EndpointStatus> statuses;
  ASSERT_TRUE(StatusesUntil(
      "every member to answer with the same known leader",
      [](const std::vector<EndpointStatus>& answers) {
        for (const EndpointStatus& s : answers) {
          if (!s.health.ok() || s.leader_id == 0 || s.leader_id != answers[0].leader_id) return false;
        }
        return !answers.empty();
      },
      &statuses));
  ASSERT_EQ(statuses.size(), 3u);
  std::vector<uint64_t> members;
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(statuses[i].health.ok()) << statuses[i].health;
    EXPECT_EQ(statuses[i].endpoint, etcd_->endpoint(i));
    EXPECT_EQ(statuses[i].version.rfind("3.", 0), 0u) << statuses[i].version;
    EXPECT_EQ(statuses[i].leader_id, statuses[0].leader_id);
    members.push_back(statuses[i].member_id);
  }
  EXPECT_NE(members[0], members[1]);
  EXPECT_NE(members[1], members[2]);
  EXPECT_NE(members[0], members[2]);

  etcd_->Kill(2);
  const std::vector<EndpointStatus> after = client_->EndpointStatuses(Soon(seconds(5)));
  ASSERT_EQ(after.size(), 3u);
  EXPECT_FALSE(after[2].health.ok());
  EXPECT_NE(after[2].health.message().find(etcd_->endpoint(2)), std::string::npos) << after[2].health;
}

TEST_F(EtcdClusterTest, ServesWithOneMemberStopped) {
  // The first endpoint stopped (its leadership, if it led, moves on): a
  // fresh client starts there, and its calls time out and go on to the
  // others.
  etcd_->Stop(0);
  std::unique_ptr<EtcdClient> client = NewClient(etcd_->endpoints());
  ASSERT_NE(client, nullptr);
  // A linearizable read succeeds once the others have a leader; until then
  // a write could be proposed to a stopped leader and its outcome be
  // unknown, which is not what this test is about.
  StatusOr<RangeResult> got = client->Get("/stopped/k", Soon(seconds(60)));
  ASSERT_TRUE(got.ok()) << got.status();
  StatusOr<TxnResult> put = Put(*client, "/stopped/k", "v");
  ASSERT_TRUE(put.ok()) << put.status();
  StatusOr<LeaseGrant> lease = client->GrantLease(10, Soon());
  ASSERT_TRUE(lease.ok()) << lease.status();
  StatusOr<int64_t> left = client->KeepAliveOnce(lease->id, Soon());
  ASSERT_TRUE(left.ok()) << left.status();
  const std::vector<EndpointStatus> statuses = client->EndpointStatuses(Soon(seconds(3)));
  EXPECT_FALSE(statuses[0].health.ok());
  EXPECT_TRUE(statuses[1].health.ok()) << statuses[1].health;
  EXPECT_TRUE(statuses[2].health.ok()) << statuses[2].health;
  // Alone, the stopped member fails the call by its deadline, named.
  StatusOr<RangeResult> alone = NewClient({etcd_->endpoint(0)})->Get("/stopped/k", Soon(seconds(3)));
  ASSERT_FALSE(alone.ok());
  EXPECT_EQ(alone.status().code(), StatusCode::kUnavailable) << alone.status();
  EXPECT_NE(alone.status().message().find(etcd_->endpoint(0)), std::string::npos) << alone.status();
  etcd_->Continue(0);
  StatusOr<RangeResult> back = NewClient({etcd_->endpoint(0)})->Get("/stopped/k", Soon(seconds(60)));
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_EQ(back->kvs.size(), 1u);
  EXPECT_EQ(back->kvs[0].value, "v");
}

TEST_F(EtcdClusterTest, WatchResumesAcrossAMemberRestartWithoutLosingEvents) {
  const int member = Follower();
  std::vector<std::string> others;
  for (int i = 0; i < etcd_->size(); ++i) {
    if (i != member) others.push_back(etcd_->endpoint(i));
  }
  std::unique_ptr<EtcdClient> watcher = NewClient({etcd_->endpoint(member)});
  std::unique_ptr<EtcdClient> writer = NewClient(others);
  ASSERT_NE(watcher, nullptr);
  ASSERT_NE(writer, nullptr);
  StatusOr<RangeResult> start = writer->Get("/resume/", Soon());
  ASSERT_TRUE(start.ok()) << start.status();

  Collector seen;
  auto watch = seen.Watch(*watcher, "/resume/", start->revision + 1);
  int written = 0;
  auto write = [&](int n) {
    for (int i = 0; i < n; ++i, ++written) {
      StatusOr<TxnResult> put = Put(*writer, "/resume/" + std::to_string(100 + written), std::to_string(written));
      ASSERT_TRUE(put.ok()) << put.status();
    }
  };
  write(5);
  ASSERT_TRUE(WaitFor("the first events", [&] { return seen.event_count() >= 5; }, std::chrono::seconds(60)));
  etcd_->Kill(member);
  write(5);  // while the watch's member is down
  ASSERT_TRUE(etcd_->Restart(member).ok()) << etcd_->LogTail(member);
  write(5);
  ASSERT_TRUE(WaitFor("every event", [&] { return seen.event_count() >= 15; }, std::chrono::seconds(60)));
  watch.reset();

  const std::vector<WatchEvent> events = seen.events();
  ASSERT_EQ(events.size(), 15u);
  for (int i = 0; i < 15; ++i) {
    EXPECT_EQ(events[i].type, WatchEvent::Type::kPut);
    EXPECT_EQ(events[i].kv.key, "/resume/" + std::to_string(100 + i));
    EXPECT_EQ(events[i].kv.value, std::to_string(i));
    if (i > 0) {
      EXPECT_GT(events[i].kv.mod_revision, events[i - 1].kv.mod_revision);
    }
  }
  EXPECT_TRUE(seen.errors().empty());
}

}  // namespace
}  // namespace rkv::etcd
