// GET /metrics of the real processes (--metrics_listen): rkv-coordinator's
// and rkv-server's answers pass `promtool check metrics` (the format and
// Prometheus's naming lint) and hold the series dashboards read, whose
// values follow the cluster (a PUT raises the server's put counter); a bad
// --metrics_listen, or one whose port is taken, stops either process at
// start with a clear error.
//
// promtool (Debian's prometheus package) must be on PATH: without it the
// test is skipped with the reason, and fails where every test must run
// (RKV_NO_SKIP=1). The test writes the metric names both processes export,
// one a line, to RKV_METRICS_NAMES_FILE, which the dashboard check
// (tests/check_dashboard_metrics.py) reads.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <httplib.h>

#include "rkv/client.h"
#include "tests/run_command.h"
#include "tests/temp_dir.h"
#include "tests/test_cluster.h"
#include "tests/wait_for.h"

namespace rkv::testing {
// A named namespace: unity builds merge this file with others of its target.
namespace metrics_suite {

constexpr char kMetricsLine[] = "metrics on http://";

// The program's path when it is on PATH, else "".
std::string FindOnPath(const std::string& program) {
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path != nullptr ? path : "");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    const std::filesystem::path candidate = std::filesystem::path(dir.empty() ? "." : dir) / program;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate.string();
  }
  return "";
}

bool MustNotSkip() {
  const char* v = std::getenv("RKV_NO_SKIP");
  return v != nullptr && std::string(v) == "1";
}

// "HOST:PORT" of the last "metrics on http://HOST:PORT/metrics" line of a
// process's log; "" when it has none yet.
std::string MetricsAddressIn(const std::string& log) {
  const size_t at = log.rfind(kMetricsLine);
  if (at == std::string::npos) return "";
  const size_t start = at + sizeof(kMetricsLine) - 1;
  const size_t end = log.find("/metrics", start);
  return end == std::string::npos ? "" : log.substr(start, end - start);
}

// The body of GET /metrics at `address`, or a failure.
::testing::AssertionResult Scrape(const std::string& address, std::string* body) {
  // "HOST:PORT", or "[V6]:PORT": what http:// takes.
  httplib::Client client("http://" + address);
  const httplib::Result res = client.Get("/metrics");
  if (!res) return ::testing::AssertionFailure() << "GET " << address << "/metrics: " << httplib::to_string(res.error());
  if (res->status != 200) return ::testing::AssertionFailure() << "GET /metrics answered " << res->status;
  if (!res->get_header_value("Content-Type").starts_with("text/plain; version=0.0.4")) {
    return ::testing::AssertionFailure() << "Content-Type " << res->get_header_value("Content-Type");
  }
  *body = res->body;
  return ::testing::AssertionSuccess();
}

// The value of the series `series` (name and labels exactly as rendered)
// in `body`; -1 when absent.
double ValueOf(const std::string& body, const std::string& series) {
  std::stringstream lines(body);
  for (std::string line; std::getline(lines, line);) {
    if (line.starts_with(series + " ")) return std::stod(line.substr(series.size() + 1));
  }
  return -1;
}

// The names of the families in `body` (its TYPE lines).
std::set<std::string> FamiliesIn(const std::string& body) {
  std::set<std::string> names;
  std::stringstream lines(body);
  for (std::string line; std::getline(lines, line);) {
    if (!line.starts_with("# TYPE ")) continue;
    std::stringstream words(line.substr(7));
    std::string name;
    words >> name;
    names.insert(name);
  }
  return names;
}

// `promtool check metrics` on `body`: passes when it exits 0 and reports
// nothing (no format error, no lint complaint).
::testing::AssertionResult PromtoolAccepts(const std::string& promtool, const std::string& body) {
  const CommandResult r = RunCommand({promtool, "check", "metrics"}, body);
  if (r.exit_code != 0 || !r.out.empty() || !r.err.empty()) {
    return ::testing::AssertionFailure() << "promtool check metrics exited " << r.exit_code << ":\n"
                                         << r.out << r.err << "\non:\n" << body;
  }
  return ::testing::AssertionSuccess();
}

// A TCP socket listening on 127.0.0.1 at a port the system picked: a port
// in use for as long as the object lives.
class HeldPort {
 public:
  HeldPort() : fd_(::socket(AF_INET, SOCK_STREAM, 0)) {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    if (fd_ < 0 || ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || ::listen(fd_, 1) != 0 ||
        ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      ADD_FAILURE() << "cannot hold a port: " << std::strerror(errno);
      return;
    }
    address_ = "127.0.0.1:" + std::to_string(ntohs(addr.sin_port));
  }
  ~HeldPort() {
    if (fd_ >= 0) ::close(fd_);
  }
  HeldPort(const HeldPort&) = delete;
  HeldPort& operator=(const HeldPort&) = delete;
  const std::string& address() const { return address_; }

 private:
  int fd_;
  std::string address_;
};

class MetricsTest : public TestClusterTest {};

TEST_F(MetricsTest, CoordinatorAndServerPassPromtoolAndFollowTheCluster) {
  const std::string promtool = FindOnPath("promtool");
  if (promtool.empty()) {
    const std::string why = "promtool is not on PATH (Debian: apt-get install prometheus)";
    if (MustNotSkip()) FAIL() << why << ", and RKV_NO_SKIP=1 says every test must run here";
    GTEST_SKIP() << why;
  }
  TestClusterOptions options;
  options.servers = 1;
  options.coordinator_flags = {"--metrics_listen=" + TestHost() + ":0"};
  options.server_flags = {"--metrics_listen=" + TestHost() + ":0"};
  ASSERT_NO_FATAL_FAILURE(StartCluster(options));
  std::string coordinator_metrics;
  std::string server_metrics;
  ASSERT_TRUE(WaitFor("the coordinator's metrics line", [&] {
    coordinator_metrics = MetricsAddressIn(cluster().coordinator().Log());
    return !coordinator_metrics.empty();
  }));
  ASSERT_TRUE(WaitFor("the server's metrics line", [&] {
    server_metrics = MetricsAddressIn(cluster().server(0).Log());
    return !server_metrics.empty();
  }));
  auto client = cluster().ClusterClient();
  ASSERT_NE(client, nullptr);

  std::string coordinator_body;
  ASSERT_TRUE(Scrape(coordinator_metrics, &coordinator_body));
  EXPECT_TRUE(PromtoolAccepts(promtool, coordinator_body));
  EXPECT_GE(ValueOf(coordinator_body, "rkv_coordinator_map_version"), 1) << coordinator_body;
  EXPECT_EQ(ValueOf(coordinator_body, "rkv_coordinator_members{state=\"up\"}"), 1) << coordinator_body;
  EXPECT_EQ(ValueOf(coordinator_body, "rkv_coordinator_members{state=\"down\"}"), 0) << coordinator_body;
  EXPECT_EQ(ValueOf(coordinator_body, "rkv_coordinator_role{role=\"single\"}"), 1) << coordinator_body;
  EXPECT_EQ(ValueOf(coordinator_body, "rkv_coordinator_shards"), options.shards) << coordinator_body;
  EXPECT_EQ(ValueOf(coordinator_body, "rkv_coordinator_shards_assigned"), options.shards) << coordinator_body;

  std::string before;
  ASSERT_TRUE(Scrape(server_metrics, &before));
  EXPECT_TRUE(PromtoolAccepts(promtool, before));
  const std::string puts = "rkv_server_operations_total{op=\"put\"}";
  const double puts_before = ValueOf(before, puts);
  ASSERT_GE(puts_before, 0) << before;
  EXPECT_GE(ValueOf(before, "rkv_server_map_version"), 1) << before;
  EXPECT_GE(ValueOf(before, "rkv_server_epoch"), 1) << before;
  EXPECT_NE(before.find("rkv_server_info{server_id=\"" + cluster().IdOf(*client, 0) + "\",transport=\"" +
                        TestTransport() + "\"} 1\n"),
            std::string::npos)
      << before;

  const auto put = client->Put("metrics-key", "metrics-value");
  ASSERT_TRUE(put.ok()) << put.status();
  // A conditional PUT refused by the server: one error reply of its code.
  const auto refused = client->Put("metrics-key", "other", PutCondition::Absent());
  ASSERT_EQ(refused.status().code(), StatusCode::kFailedPrecondition) << refused.status();
  std::string after;
  ASSERT_TRUE(Scrape(server_metrics, &after));
  EXPECT_TRUE(PromtoolAccepts(promtool, after));
  EXPECT_GE(ValueOf(after, puts), puts_before + 1) << after;
  EXPECT_GE(ValueOf(after, "rkv_server_keys"), 1) << after;
  EXPECT_GT(ValueOf(after, "rkv_server_heap_used_bytes"), 0) << after;
  const std::string precondition = "rkv_server_error_replies_total{code=\"FAILED_PRECONDITION\"}";
  EXPECT_GE(ValueOf(after, precondition), ValueOf(before, precondition) + 1) << after;
  EXPECT_GT(ValueOf(after, "rkv_server_store_wal_written_bytes_total"), 0) << after;
  // The PUT's apply was timed: one more observation of a client's write.
  EXPECT_GE(ValueOf(after, "rkv_server_apply_seconds_count{from=\"client\"}"),
            ValueOf(before, "rkv_server_apply_seconds_count{from=\"client\"}") + 1)
      << after;

  // A client with a wrong token is refused, and the refusal counted.
  ClientOptions wrong = cluster().ClusterClientOptions();
  wrong.token = "not-the-cluster-token";
  wrong.timeout = std::chrono::seconds(10);
  EXPECT_FALSE(Client::Connect(wrong).ok());

  // The client's map lease was renewed here; nothing failed over.
  ASSERT_TRUE(Scrape(coordinator_metrics, &coordinator_body));
  EXPECT_GE(ValueOf(coordinator_body, "rkv_coordinator_refused_calls_total{code=\"unauthenticated\"}"), 1)
      << coordinator_body;
  EXPECT_EQ(ValueOf(coordinator_body, "rkv_coordinator_refused_calls_total{code=\"permission_denied\"}"), 0)
      << coordinator_body;
  EXPECT_NE(cluster().coordinator().Log().find("refused (UNAUTHENTICATED)"), std::string::npos);
  EXPECT_TRUE(PromtoolAccepts(promtool, coordinator_body));
  EXPECT_GE(ValueOf(coordinator_body, "rkv_coordinator_lease_renewals_total{outcome=\"granted\"}"), 1)
      << coordinator_body;
  EXPECT_EQ(ValueOf(coordinator_body, "rkv_coordinator_lease_renewals_total{outcome=\"refused\"}"), 0)
      << coordinator_body;
  EXPECT_EQ(ValueOf(coordinator_body, "rkv_coordinator_failovers_total"), 0) << coordinator_body;

  // The names both export, for the dashboard check.
  std::set<std::string> names = FamiliesIn(coordinator_body);
  names.merge(FamiliesIn(after));
  std::ofstream out(RKV_METRICS_NAMES_FILE, std::ios::trunc);
  for (const std::string& name : names) out << name << "\n";
  EXPECT_TRUE(out.good()) << "writing " << RKV_METRICS_NAMES_FILE;
}

// A bad --metrics_listen is a bad flag (exit status 2) naming the flag;
// a port in use stops the process at start (exit status 1), saying so.
class MetricsFlagsTest : public ::testing::Test {
 protected:
  MetricsFlagsTest() {
    WriteFile(dir_.path() + "/token", "rkv-metrics-flags-token\n");
  }

  CommandResult Coordinator(const std::string& metrics_listen) const {
    return RunCommand({RKV_COORDINATOR_BIN, "--data_dir=" + dir_.path() + "/coordinator",
                       "--token_file=" + dir_.path() + "/token", "--listen=127.0.0.1:0", "--servers=1",
                       "--metrics_listen=" + metrics_listen},
                      "", kStartLimit);
  }
  CommandResult Server(const std::string& metrics_listen) const {
    return RunCommand({RKV_SERVER_BIN, "--data_dir=" + dir_.path() + "/server", "--token_file=" + dir_.path() + "/token",
                       "--listen=127.0.0.1:0", "--transport=tcp", "--memory=16M", "--max_keys=1024",
                       "--metrics_listen=" + metrics_listen},
                      "", kStartLimit);
  }

  // Bounds a hang only: a process refusing its flags exits at once.
  static constexpr std::chrono::seconds kStartLimit{60};
  TempDir dir_;
};

TEST_F(MetricsFlagsTest, CoordinatorRefusesABadMetricsListen) {
  for (const char* bad : {"9100", "127.0.0.1:", "127.0.0.1:65536", "127.0.0.1:x", "bad host:9100"}) {
    const CommandResult r = Coordinator(bad);
    EXPECT_EQ(r.exit_code, 2) << bad << ": " << r.err;
    EXPECT_NE(r.err.find("rkv-coordinator: --metrics_listen: "), std::string::npos) << bad << ": " << r.err;
  }
  HeldPort held;
  ASSERT_FALSE(held.address().empty());
  const CommandResult r = Coordinator(held.address());
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("--metrics_listen: cannot listen on " + held.address()), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("Address already in use"), std::string::npos) << r.err;
}

TEST_F(MetricsFlagsTest, ServerRefusesABadMetricsListen) {
  for (const char* bad : {"9100", "127.0.0.1:", "127.0.0.1:65536", "127.0.0.1:x"}) {
    const CommandResult r = Server(bad);
    EXPECT_EQ(r.exit_code, 2) << bad << ": " << r.err;
    EXPECT_NE(r.err.find("rkv-server: --metrics_listen: "), std::string::npos) << bad << ": " << r.err;
  }
  HeldPort held;
  ASSERT_FALSE(held.address().empty());
  const CommandResult r = Server(held.address());
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("rkv-server: --metrics_listen: cannot listen on " + held.address()), std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("Address already in use"), std::string::npos) << r.err;
}

}  // namespace metrics_suite
}  // namespace rkv::testing
