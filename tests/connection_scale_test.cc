// One rkv-server holding many connections at once, every one of them
// served: 1,000 over tcp on the host, 200 over verbs in the SoftRoCE guest. Each connection PUTs its own
// keys and reads them back with one-sided READs, from several client
// threads at once; the server, started with --threads=2, must not grow a
// thread per connection: its thread count with every connection open stays
// within a few of its count with one (the pollers are fixed; what else runs
// — RocksDB, gRPC, the accept thread — does not depend on connections).
//
// The client side speaks the data-plane protocol through the client
// library's internal connection class, one per connection, so that a
// thousand connections cost the test process a few hundred MiB rather than
// a thousand clients.
#include <sys/resource.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "client/server_connection.h"
#include "common/connect_proof.h"
#include "common/layout.h"
#include "common/protocol.h"
#include "common/token.h"
#include "common/transport/factory.h"
#include "common/transport/transport.h"
#include "tests/server_process.h"

namespace rkv::testing {
namespace {

using namespace std::chrono_literals;
using client::LookupResult;
using client::ServerConnection;

constexpr char kToken[] = "connection-scale-token";
constexpr int kServerThreads = 2;
constexpr int kClientThreads = 4;
constexpr int kRounds = 2;
// Bounds a hang, never a timing expectation.
constexpr auto kDeadline = 120s;
// Threads the server may start for reasons of its own while the
// connections open (a RocksDB flush, a gRPC worker): not per connection.
constexpr int kThreadSlack = 8;

// 200 on verbs (the SoftRoCE guest); 1,000 on tcp, scaled down by
// $RKV_TEST_SCALE below 1 (the sanitizer builds run 250);
// $RKV_TEST_CONNECTIONS, when set, instead (the verbs benchmark runs 1,000).
int Connections() {
  if (const char* n = std::getenv("RKV_TEST_CONNECTIONS")) {
    const int wanted = std::atoi(n);
    EXPECT_GE(wanted, 1) << "RKV_TEST_CONNECTIONS=" << n << " is not a positive count";
    return std::max(1, wanted);
  }
  if (TestTransport() == "verbs") return 200;
  return std::max(20, static_cast<int>(1000 * std::min(1.0, TestScale()) + 0.5));
}

// The process's resident memory in KiB (VmRSS), for the report.
long ResidentKiB(pid_t pid) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::atol(line.c_str() + 6);
  }
  return -1;
}

int ThreadsOf(pid_t pid) {
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/task")) {
    (void)e;
    ++n;
  }
  return n;
}

// Every connection needs a socket (tcp) or a cm and a completion channel
// (verbs) here: more than the usual soft limit of 1024 descriptors.
void RaiseFileLimit(int connections) {
  rlimit r{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &r), 0);
  r.rlim_cur = r.rlim_max;
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &r), 0);
  ASSERT_GE(r.rlim_cur, static_cast<rlim_t>(2 * connections + 256))
      << "the hard limit on open files is too low for this test";
}

protocol::ClientConnectParams Request(uint64_t client_id) { return protocol::MakeClientParams(client_id, kToken); }

std::string KeyOf(int connection, int round) {
  return "conn-" + std::to_string(connection) + "-" + std::to_string(round);
}
std::string ValueOf(int connection, int round) {
  return std::string(100 + connection % 200, static_cast<char>('a' + (connection + round) % 26));
}

TEST(ConnectionScaleTest, OneServerServesEveryConnectionWithAFixedSetOfThreads) {
  const int connections = Connections();
  ASSERT_NO_FATAL_FAILURE(RaiseFileLimit(connections));
  TempDir dir;
  const std::string token_file = dir.path() + "/token";
  WriteFile(token_file, kToken);
  std::filesystem::create_directories(dir.path() + "/data");
  ServerProcess server(dir.path() + "/data", token_file,
                       {"--threads=" + std::to_string(kServerThreads), "--ring_bytes=64K", "--max_value_bytes=4096",
                        "--max_connections=" + std::to_string(connections + 16), "--memory=64M",
                        "--durability=none"});
  ASSERT_TRUE(server.Start().ok()) << server.Log();

  transport::Options topts;
  StatusOr<std::unique_ptr<transport::Transport>> made =
      transport::CreateTransport(TestTransport() == "verbs" ? transport::Kind::kVerbs : transport::Kind::kTcp, topts);
  ASSERT_TRUE(made.ok()) << made.status();
  transport::Transport& t = **made;

  const auto deadline = [] { return client::Clock::now() + kDeadline; };
  std::vector<std::unique_ptr<ServerConnection>> conns;
  conns.reserve(connections);
  {
    StatusOr<std::unique_ptr<ServerConnection>> c =
        ServerConnection::Open(t, server.address(), Request(1), deadline());
    ASSERT_TRUE(c.ok()) << c.status() << "\n" << server.Log();
    conns.push_back(std::move(*c));
  }
  const int threads_with_one = ThreadsOf(server.pid());
  const long rss_with_one = ResidentKiB(server.pid());
  for (int i = 1; i < connections; ++i) {
    StatusOr<std::unique_ptr<ServerConnection>> c =
        ServerConnection::Open(t, server.address(), Request(1 + i), deadline());
    ASSERT_TRUE(c.ok()) << "connection " << i << ": " << c.status();
    conns.push_back(std::move(*c));
  }

  // Every connection writes and reads, several client threads at once, so
  // that the server's pollers serve many connections together.
  std::atomic<int> failures{0};
  std::vector<std::string> first_failure(kClientThreads);
  std::vector<std::thread> clients;
  for (int ct = 0; ct < kClientThreads; ++ct) {
    clients.emplace_back([&, ct] {
      const auto fail = [&](const std::string& what) {
        if (failures.fetch_add(1) == 0 || first_failure[ct].empty()) first_failure[ct] = what;
      };
      for (int round = 0; round < kRounds; ++round) {
        for (int i = ct; i < connections; i += kClientThreads) {
          ServerConnection& c = *conns[i];
          const std::string key = KeyOf(i, round);
          const std::string value = ValueOf(i, round);
          StatusOr<client::WriteResult> w =
              c.Write(protocol::Op::kPut, key, value, /*request_id=*/1 + round, deadline());
          if (!w.ok() || !w->status.ok()) {
            fail("PUT on connection " + std::to_string(i) + ": " + (w.ok() ? w->status : w.status()).ToString());
            continue;
          }
          const std::string_view keys[] = {key};
          LookupResult results[1];
          if (Status s = c.Lookup(keys, results, deadline()); !s.ok() || !results[0].done ||
                                                               !results[0].status.ok() ||
                                                               results[0].value != value) {
            fail("GET on connection " + std::to_string(i) + ": " +
                 (s.ok() ? results[0].status.ToString() : s.ToString()));
          }
        }
      }
    });
  }
  for (auto& th : clients) th.join();
  for (const std::string& f : first_failure) EXPECT_TRUE(f.empty()) << f;
  EXPECT_EQ(failures.load(), 0);

  const int threads_with_all = ThreadsOf(server.pid());
  const long rss_with_all = ResidentKiB(server.pid());
  EXPECT_LE(threads_with_all, threads_with_one + kThreadSlack)
      << "the server has " << threads_with_all << " threads with " << connections << " connections open and "
      << threads_with_one << " with one";
  // Every connection is still open and usable: one more round trip each.
  for (int i = 0; i < connections; ++i) {
    ASSERT_FALSE(conns[i]->broken()) << "connection " << i;
    const std::string key = KeyOf(i, 0);
    const std::string_view keys[] = {key};
    LookupResult results[1];
    ASSERT_TRUE(conns[i]->Lookup(keys, results, deadline()).ok()) << "connection " << i;
    ASSERT_TRUE(results[0].done && results[0].status.ok()) << "connection " << i << ": " << results[0].status;
    EXPECT_EQ(results[0].value, ValueOf(i, 0)) << "connection " << i;
  }
  std::printf("connection-scale: %d connections over %s, --threads=%d: server threads %d with one connection, %d "
              "with all; resident memory %ld KiB with one, %ld KiB with all (%.1f KiB per connection)\n",
              connections, TestTransport().c_str(), kServerThreads, threads_with_one, threads_with_all, rss_with_one,
              rss_with_all, static_cast<double>(rss_with_all - rss_with_one) / std::max(1, connections - 1));
  conns.clear();
  EXPECT_EQ(server.Terminate(), 0) << server.Log();
}

}  // namespace
}  // namespace rkv::testing
