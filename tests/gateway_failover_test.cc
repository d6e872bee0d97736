// rkv-gateway over a replicated cluster whose primary is killed: Redis
// clients incrementing one counter with INCR (a compare-and-set loop in
// the gateway, docs/design.md §8.14) lose no acknowledged increment and
// gain none beyond those whose outcome they could not learn.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "rkv/client.h"
#include "tests/gateway_process.h"
#include "tests/test_cluster.h"
#include "tests/wait_for.h"

namespace rkv::testing {
namespace {

// One Redis connection speaking RESP2, blocking.
class Redis {
 public:
  explicit Redis(uint16_t port) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
      close(fd_);
      fd_ = -1;
    }
  }
  ~Redis() {
    if (fd_ >= 0) close(fd_);
  }
  bool ok() const { return fd_ >= 0; }

  // Sends one command; returns its reply's first line without "\r\n" (":5",
  // "-ERR ...", "$3" for a bulk string, whose data then follows in
  // *bulk), or "" when the connection failed.
  std::string Call(const std::vector<std::string>& command, std::string* bulk = nullptr) {
    std::string out = "*" + std::to_string(command.size()) + "\r\n";
    for (const std::string& c : command) out += "$" + std::to_string(c.size()) + "\r\n" + c + "\r\n";
    for (size_t sent = 0; sent < out.size();) {
      const ssize_t n = send(fd_, out.data() + sent, out.size() - sent, MSG_NOSIGNAL);
      if (n <= 0) return "";
      sent += static_cast<size_t>(n);
    }
    std::string line = ReadLine();
    if (!line.empty() && line[0] == '$' && bulk != nullptr) {
      const long n = std::stol(line.substr(1));
      if (n >= 0) {
        while (buffered_.size() < static_cast<size_t>(n) + 2 && Fill()) {
        }
        *bulk = buffered_.substr(0, static_cast<size_t>(n));
        buffered_.erase(0, std::min(buffered_.size(), static_cast<size_t>(n) + 2));
      }
    }
    return line;
  }

 private:
  bool Fill() {
    char buf[4096];
    const ssize_t n = recv(fd_, buf, sizeof(buf), 0);
    if (n <= 0) return false;
    buffered_.append(buf, static_cast<size_t>(n));
    return true;
  }
  std::string ReadLine() {
    for (;;) {
      const size_t end = buffered_.find("\r\n");
      if (end != std::string::npos) {
        std::string line = buffered_.substr(0, end);
        buffered_.erase(0, end + 2);
        return line;
      }
      if (!Fill()) return "";
    }
  }
  int fd_ = -1;
  std::string buffered_;
};

class GatewayFailoverTest : public TestClusterTest {};

// Three Redis connections INCR one counter while the primary of its shard
// is killed with kill -9 (R = 3): afterwards the counter is at least the
// increments acknowledged and at most those plus the ones that failed
// (whose outcome the clients could not learn).
TEST_F(GatewayFailoverTest, IncrementsThroughTheGatewaySurviveAPrimaryKill) {
  TestClusterOptions o;
  o.servers = 3;
  o.shards = 32;
  o.replicas = 3;
  o.heartbeat_interval_ms = 100;
  o.heartbeat_timeout_ms = 600;
  o.lease_ms = 400;
  ASSERT_NO_FATAL_FAILURE(StartCluster(o));
  auto probe = cluster().ClusterClient();
  ASSERT_NE(probe, nullptr);
  // The counter's shard has server 0 as its primary.
  auto map = probe->Cluster();
  ASSERT_TRUE(map.ok()) << map.status();
  const std::string victim = cluster().IdOf(*probe, 0);
  std::string counter;
  for (int i = 0; counter.empty() && i < 10000; ++i) {
    const std::string key = "counter-" + std::to_string(i);
    auto shard = probe->ShardOfKey(key);
    ASSERT_TRUE(shard.ok());
    if (map->shards[*shard].replicas.at(0) == victim) counter = key;
  }
  ASSERT_FALSE(counter.empty());

  GatewayProcess gateway(cluster().dir(),
                         GatewayFlags("--coordinator=" + cluster().coordinator_address(), cluster().token_file()));
  ASSERT_TRUE(gateway.Start());

  constexpr int kClients = 3;
  std::atomic<bool> stop{false};
  std::atomic<int> acknowledged{0};
  std::atomic<int> failed{0};
  std::atomic<int> calls{0};
  std::vector<std::string> errors(kClients);
  std::vector<std::thread> clients;
  for (int c = 0; c < kClients; ++c) {
    clients.emplace_back([&, c] {
      Redis redis(gateway.port());
      if (!redis.ok()) {
        errors[c] = "cannot connect";
        return;
      }
      while (!stop.load()) {
        const std::string reply = redis.Call({"INCR", counter});
        calls.fetch_add(1);
        if (!reply.empty() && reply[0] == ':') {
          acknowledged.fetch_add(1);
        } else {
          failed.fetch_add(1);
          errors[c] = reply;
          if (reply.empty()) return;  // the connection is gone: nothing more to learn
        }
      }
    });
  }
  const auto progress = [&](int at_least) {
    return WaitFor("increments", [&] { return acknowledged.load() >= at_least; });
  };
  const bool before = progress(50);
  cluster().server(0).Kill9();
  const int at_kill = acknowledged.load();
  const bool after = progress(at_kill + 50);
  stop.store(true);
  for (std::thread& t : clients) t.join();
  ASSERT_TRUE(before) << gateway.Log();
  ASSERT_TRUE(after) << "no increments after the kill; last errors: " << errors[0] << " | " << errors[1] << " | "
                     << errors[2] << "\n"
                     << gateway.Log();

  Redis reader(gateway.port());
  ASSERT_TRUE(reader.ok());
  std::string value;
  ASSERT_EQ(reader.Call({"GET", counter}, &value).substr(0, 1), "$");
  const long final_value = std::stol(value);
  EXPECT_GE(final_value, acknowledged.load()) << failed.load() << " failed of " << calls.load();
  EXPECT_LE(final_value, acknowledged.load() + failed.load()) << failed.load() << " failed of " << calls.load();
  // The library reads the same value.
  auto got = probe->Get(counter);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, value);
}

}  // namespace
}  // namespace rkv::testing
