#include "tests/test_cluster.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <utility>

#include "rkv/admin.h"

#if !defined(RKV_KVCTL_BIN)
#error "RKV_KVCTL_BIN must name kvctl"
#endif

namespace rkv::testing {

int Scaled(int n, int minimum) { return std::max(minimum, static_cast<int>(std::lround(n * TestScale()))); }

TestCluster::TestCluster(TestClusterOptions options)
    : options_(std::move(options)), token_file_(dir_.path() + "/token"), cluster_token_file_(dir_.path() + "/cluster_token") {
  WriteFile(token_file_, options_.token + "\n");
  if (!options_.cluster_token.empty()) WriteFile(cluster_token_file_, options_.cluster_token + "\n");
}

TestCluster::~TestCluster() = default;  // each ServerProcess SIGKILLs its process

Status TestCluster::Start() {
  if (options_.coordinator) {
    const Status c = coordinator().Start();
    if (!c.ok()) return Status(c.code(), "coordinator: " + std::string(c.message()));
  }
  for (int i = server_count(); i < options_.servers; ++i) AddServer();
  for (int i = 0; i < server_count(); ++i) {
    const Status s = server(i).Start();
    if (!s.ok()) return Status(s.code(), "server " + std::to_string(i) + ": " + std::string(s.message()));
  }
  return Status::Ok();
}

std::unique_ptr<ServerProcess> TestCluster::MakeCoordinator() const {
  const TestClusterOptions& o = options_;
  std::vector<std::string> flags = {"--servers=" + std::to_string(o.servers)};
  if (o.shards > 0) flags.push_back("--shards=" + std::to_string(o.shards));
  if (o.replicas > 0) flags.push_back("--replicas=" + std::to_string(o.replicas));
  if (o.heartbeat_interval_ms > 0) {
    flags.push_back("--heartbeat_interval_ms=" + std::to_string(o.heartbeat_interval_ms));
  }
  if (o.heartbeat_timeout_ms > 0) {
    flags.push_back("--heartbeat_timeout_ms=" + std::to_string(o.heartbeat_timeout_ms));
  }
  if (o.lease_ms > 0) flags.push_back("--lease_ms=" + std::to_string(o.lease_ms));
  flags.insert(flags.end(), o.coordinator_flags.begin(), o.coordinator_flags.end());
  return std::make_unique<ServerProcess>(dir() + "/coordinator", token_file_, std::move(flags),
                                         ServerProcess::Role::kCoordinator);
}

ServerProcess& TestCluster::coordinator() {
  if (coordinator_ == nullptr) coordinator_ = MakeCoordinator();
  return *coordinator_;
}

ServerProcess& TestCluster::RemakeCoordinator() {
  if (coordinator_ != nullptr && coordinator_->running()) {
    ADD_FAILURE() << "the coordinator is remade while it runs";
    coordinator_->Kill9();
  }
  coordinator_ = MakeCoordinator();
  return *coordinator_;
}

std::string TestCluster::coordinator_address() const {
  return coordinator_ != nullptr ? coordinator_->address() : "";
}

std::string TestCluster::ServerDir(int i) const { return dir() + "/server" + std::to_string(i); }

std::vector<std::string> TestCluster::ServerFlags(int i) const {
  const TestClusterOptions& o = options_;
  std::vector<std::string> flags;
  if (o.coordinator) flags.push_back("--coordinator=" + coordinator_address());
  if (o.coordinator && !o.cluster_token.empty()) flags.push_back("--cluster_token_file=" + cluster_token_file_);
  flags.push_back("--memory=" + std::to_string(o.server_memory));
  flags.push_back("--max_keys=" + std::to_string(o.max_keys));
  if (!o.durability.empty()) flags.push_back("--durability=" + o.durability);
  if (!o.zone_prefix.empty()) flags.push_back("--zone=" + o.zone_prefix + std::to_string(i));
  flags.insert(flags.end(), o.server_flags.begin(), o.server_flags.end());
  return flags;
}

int TestCluster::AddServer() {
  const int i = server_count();
  if (options_.coordinator && coordinator_address().empty()) {
    ADD_FAILURE() << "server " << i << " is added before the coordinator has an address";
  }
  servers_.push_back(std::make_unique<ServerProcess>(ServerDir(i), token_file_, ServerFlags(i)));
  return i;
}

ClientOptions TestCluster::ClusterClientOptions(const TestClientOptions& o) const {
  ClientOptions c;
  c.server.clear();
  c.coordinator = coordinator_address();
  c.token = o.token.empty() ? options_.token : o.token;
  c.transport = TestTransport();
  c.timeout = o.timeout;
  c.connections = o.connections;
  return c;
}

ClientOptions TestCluster::DirectClientOptions(int i, const TestClientOptions& o) const {
  ClientOptions c;
  c.server = servers_.at(static_cast<size_t>(i))->address();
  c.token = o.token.empty() ? options_.token : o.token;
  c.transport = TestTransport();
  c.timeout = o.timeout;
  c.connections = o.connections;
  return c;
}

std::unique_ptr<Client> TestCluster::ClusterClient(const TestClientOptions& o) {
  auto c = Client::Connect(ClusterClientOptions(o));
  EXPECT_TRUE(c.ok()) << "cluster client: " << c.status();
  return c.ok() ? std::move(c).value() : nullptr;
}

std::unique_ptr<Client> TestCluster::DirectClient(int i, const TestClientOptions& o) {
  auto c = Client::Connect(DirectClientOptions(i, o));
  EXPECT_TRUE(c.ok()) << "client of server " << i << ": " << c.status();
  return c.ok() ? std::move(c).value() : nullptr;
}

CommandResult TestCluster::Kvctl(const std::vector<std::string>& args, const std::string& token_file) const {
  std::vector<std::string> argv = {RKV_KVCTL_BIN, "--coordinator=" + coordinator_address(),
                                   "--token_file=" + (token_file.empty() ? token_file_ : token_file),
                                   "--transport=" + TestTransport(),
                                   "--timeout=" + std::to_string(kCallTimeout.count())};
  argv.insert(argv.end(), args.begin(), args.end());
  return RunCommand(argv);
}

std::string TestCluster::IdOf(Client& client, int i) const {
  const Status refreshed = client.RefreshClusterMap();
  EXPECT_TRUE(refreshed.ok()) << refreshed;
  auto members = ClusterAdmin(client).Members();
  EXPECT_TRUE(members.ok()) << members.status();
  if (!members.ok()) return "";
  const std::string& address = servers_.at(static_cast<size_t>(i))->address();
  for (const MemberInfo& m : *members) {
    if (m.data_address == address) return m.server_id;
  }
  ADD_FAILURE() << "no member has the address of server " << i << " (" << address << ")";
  return "";
}

::testing::AssertionResult TestCluster::WaitForMap(Client& client,
                                                   const std::function<bool(const ClusterInfo&)>& done,
                                                   ClusterInfo* last) const {
  // Each poll asks the coordinator: at most ten times a second.
  return WaitFor(
      "the cluster map",
      [&] {
        if (!client.RefreshClusterMap().ok()) return false;
        auto cluster = client.Cluster();
        if (!cluster.ok()) return false;
        if (last != nullptr) *last = *cluster;
        return done(*cluster);
      },
      kConditionDeadline, std::chrono::milliseconds(100));
}

std::string TestCluster::Logs() const {
  std::string out;
  if (coordinator_ != nullptr) out += "coordinator log:\n" + coordinator_->Log();
  for (size_t i = 0; i < servers_.size(); ++i) {
    out += "\nserver " + std::to_string(i) + " log:\n" + servers_[i]->Log();
  }
  return out;
}

void TestClusterTest::StartCluster(TestClusterOptions options) {
  cluster_ = std::make_unique<TestCluster>(std::move(options));
  const Status s = cluster_->Start();
  ASSERT_TRUE(s.ok()) << s;
}

void TestClusterTest::TearDown() {
  if (cluster_ != nullptr && HasFailure()) {
    std::printf("[ cluster ] the test failed; the processes' logs:\n%s\n", cluster_->Logs().c_str());
    std::fflush(stdout);
  }
  // The processes stop with the fixture, after the derived fixture's
  // members (its clients) are gone.
}

}  // namespace rkv::testing
