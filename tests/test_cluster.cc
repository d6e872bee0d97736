#include "tests/test_cluster.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <mutex>
#include <utility>

#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>

#include "coordinator/etcd/etcd_client.h"
#include "proto/auth.h"
#include "proto/coordinator_store.pb.h"
#include "proto/rkv.grpc.pb.h"
#include "proto/tls.h"
#include "rkv/admin.h"

#if !defined(RKV_KVCTL_BIN)
#error "RKV_KVCTL_BIN must name kvctl"
#endif

namespace rkv::testing {
namespace {

// Entries of the per-server credentials file: more than any suite starts.
constexpr int kServerCredentials = 16;

}  // namespace

int Scaled(int n, int minimum) { return std::max(minimum, static_cast<int>(std::lround(n * TestScale()))); }

TestCluster::TestCluster(TestClusterOptions options)
    : options_(std::move(options)),
      token_file_(dir_.path() + "/token"),
      cluster_token_file_(dir_.path() + "/cluster_token"),
      server_credentials_file_(dir_.path() + "/server_credentials") {
  WriteFile(token_file_, options_.token + "\n");
  if (!options_.cluster_token.empty()) WriteFile(cluster_token_file_, options_.cluster_token + "\n");
  std::string credentials = "# NAME TOKEN: one credential per server\n";
  for (int i = 0; i < kServerCredentials; ++i) {
    credentials += "server" + std::to_string(i) + " " + ServerCredential(i) + "\n";
  }
  WriteFile(server_credentials_file_, credentials);
  if (options_.tls) {
    std::filesystem::create_directories(dir_.path() + "/tls");
    auto ca = MakeTestCa(dir_.path() + "/tls", "rkv-test");
    EXPECT_TRUE(ca.ok()) << "the test CA: " << ca.status();
    if (ca.ok()) tls_ca_ = *ca;
    EXPECT_TRUE(ReplaceFile(tls_ca_bundle(), ReadTestFile(tls_ca_.cert)).ok());
  }
}

TestCert TestCluster::TlsCert(const std::string& name) const {
  const std::string dir = dir_.path() + "/tls";
  TestCert cert{dir + "/" + name + ".crt", dir + "/" + name + ".key"};
  if (std::filesystem::exists(cert.cert)) return cert;
  auto made = MakeTestCert(tls_ca_, dir, name);
  EXPECT_TRUE(made.ok()) << "the certificate of " << name << ": " << made.status();
  return cert;
}

std::vector<std::string> TestCluster::TlsFlags(const std::string& name) const {
  if (!options_.tls) return {};
  const TestCert cert = TlsCert(name);
  return {"--tls_cert=" + cert.cert, "--tls_key=" + cert.key, "--tls_ca=" + tls_ca_bundle()};
}

std::string ServerCredential(int i) { return "rkv-test-server-credential-" + std::to_string(i); }

Status TestCluster::CoordinatorHeartbeat(const std::string& token, const std::string& server_id,
                                         uint64_t epoch) const {
  if (coordinators_.empty() || coordinators_[0] == nullptr || coordinators_[0]->address().empty()) {
    return FailedPrecondition("no coordinator started");
  }
  auto credentials = control::MakeChannelCredentials(
      options_.tls ? control::TlsFiles{"", "", tls_ca_bundle()} : control::TlsFiles{});
  if (!credentials.ok()) return credentials.status();
  auto stub = v1::Coordinator::NewStub(grpc::CreateChannel(coordinators_[0]->address(), *credentials));
  grpc::ClientContext context;
  control::AttachToken(&context, token);
  context.set_deadline(std::chrono::system_clock::now() + kCallTimeout);
  v1::HeartbeatRequest request;
  request.set_server_id(server_id);
  request.set_epoch(epoch);
  v1::HeartbeatResponse response;
  const grpc::Status s = stub->Heartbeat(&context, request, &response);
  if (s.ok()) return Status::Ok();
  return Status(static_cast<StatusCode>(s.error_code()), s.error_message());
}

TestCluster::~TestCluster() = default;  // each ServerProcess SIGKILLs its process

Status TestCluster::Start() {
  if (options_.coordinator && options_.etcd_members > 0 && etcd_ == nullptr) {
    auto etcd = EtcdCluster::Start(options_.etcd_members);
    if (!etcd.ok()) return Status(etcd.status().code(), "etcd: " + std::string(etcd.status().message()));
    etcd_ = std::move(etcd).value();
  }
  if (options_.coordinator) {
    const int n = options_.etcd_members > 0 ? std::max(1, options_.coordinators) : 1;
    for (int i = 0; i < n; ++i) {
      const Status c = coordinator(i).Start();
      if (!c.ok()) return Status(c.code(), "coordinator " + std::to_string(i) + ": " + std::string(c.message()));
    }
  }
  for (int i = server_count(); i < options_.servers; ++i) AddServer();
  for (int i = 0; i < server_count(); ++i) {
    const Status s = server(i).Start();
    if (!s.ok()) return Status(s.code(), "server " + std::to_string(i) + ": " + std::string(s.message()));
  }
  return Status::Ok();
}

std::unique_ptr<ServerProcess> TestCluster::MakeCoordinator(int i) const {
  const TestClusterOptions& o = options_;
  std::vector<std::string> flags = {"--servers=" + std::to_string(o.servers)};
  if (etcd_ != nullptr) {
    flags.push_back("--etcd=" + EtcdEndpoints());
    flags.push_back("--etcd_prefix=/rkv-test/");
  }
  if (o.shards > 0) flags.push_back("--shards=" + std::to_string(o.shards));
  if (o.replicas > 0) flags.push_back("--replicas=" + std::to_string(o.replicas));
  if (o.heartbeat_interval_ms > 0) {
    flags.push_back("--heartbeat_interval_ms=" + std::to_string(o.heartbeat_interval_ms));
  }
  if (o.heartbeat_timeout_ms > 0) {
    flags.push_back("--heartbeat_timeout_ms=" + std::to_string(o.heartbeat_timeout_ms));
  }
  if (o.lease_ms > 0) flags.push_back("--lease_ms=" + std::to_string(o.lease_ms));
  // The servers' credential, so that only they act as servers.
  if (o.per_server_credentials) {
    flags.push_back("--server_credentials_file=" + server_credentials_file_);
  } else if (!o.cluster_token.empty()) {
    flags.push_back("--cluster_token_file=" + cluster_token_file_);
  }
  for (std::string& f : TlsFlags("coordinator" + std::to_string(i))) flags.push_back(std::move(f));
  flags.insert(flags.end(), o.coordinator_flags.begin(), o.coordinator_flags.end());
  if (etcd_ == nullptr) {
    return std::make_unique<ServerProcess>(dir() + "/coordinator", token_file_, std::move(flags),
                                           ServerProcess::Role::kCoordinator);
  }
  return std::make_unique<ServerProcess>(dir() + "/coordinator" + std::to_string(i), token_file_, std::move(flags),
                                         ServerProcess::Role::kSharedCoordinator);
}

std::string TestCluster::EtcdEndpoints() const {
  std::string list;
  for (const std::string& e : etcd_->endpoints()) list += (list.empty() ? "" : ",") + e;
  return list;
}

ServerProcess& TestCluster::coordinator() { return coordinator(0); }

ServerProcess& TestCluster::coordinator(int i) {
  if (coordinators_.size() <= static_cast<size_t>(i)) coordinators_.resize(static_cast<size_t>(i) + 1);
  auto& c = coordinators_[static_cast<size_t>(i)];
  if (c == nullptr) c = MakeCoordinator(i);
  return *c;
}

ServerProcess& TestCluster::RemakeCoordinator() {
  ServerProcess& old = coordinator(0);
  if (old.running()) {
    ADD_FAILURE() << "the coordinator is remade while it runs";
    old.Kill9();
  }
  coordinators_[0] = MakeCoordinator(0);
  return *coordinators_[0];
}

std::string TestCluster::coordinator_address() const {
  std::string list;
  for (const auto& c : coordinators_) {
    if (c != nullptr && !c->address().empty()) list += (list.empty() ? "" : ",") + c->address();
  }
  return list;
}

std::string TestCluster::LeaderAddress() const {
  if (etcd_ == nullptr) return "";
  const CommandResult r = RunCommand({"/usr/bin/env", "ETCDCTL_API=3", "etcdctl", "--endpoints=" + EtcdEndpoints(),
                                      "--command-timeout=5s", "get", "/rkv-test/leader", "--print-value-only"});
  std::string out = r.out;
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  return out;
}

int TestCluster::LeaderIndex() const {
  const std::string leader = LeaderAddress();
  if (leader.empty()) return -1;
  for (size_t i = 0; i < coordinators_.size(); ++i) {
    if (coordinators_[i] != nullptr && coordinators_[i]->address() == leader) return static_cast<int>(i);
  }
  return -1;
}

std::string TestCluster::ServerDir(int i) const { return dir() + "/server" + std::to_string(i); }

std::vector<std::string> TestCluster::ServerFlags(int i) const {
  const TestClusterOptions& o = options_;
  std::vector<std::string> flags;
  if (o.coordinator) flags.push_back("--coordinator=" + coordinator_address());
  if (o.coordinator && o.per_server_credentials) {
    flags.push_back("--server_credentials_file=" + server_credentials_file_);
    flags.push_back("--server_credential_name=server" + std::to_string(i));
  } else if (o.coordinator && !o.cluster_token.empty()) {
    flags.push_back("--cluster_token_file=" + cluster_token_file_);
  }
  flags.push_back("--memory=" + std::to_string(o.server_memory));
  flags.push_back("--max_keys=" + std::to_string(o.max_keys));
  if (!o.durability.empty()) flags.push_back("--durability=" + o.durability);
  if (!o.zone_prefix.empty()) flags.push_back("--zone=" + o.zone_prefix + std::to_string(i));
  // TLS on the control plane needs it served: the Admin service (which a
  // server in a cluster has anyway).
  for (std::string& f : TlsFlags("server" + std::to_string(i))) flags.push_back(std::move(f));
  if (options_.tls && options_.data_plane_tls) flags.push_back("--data_plane_tls");
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
  if (options_.tls) c.tls_ca_file = tls_ca_bundle();
  c.data_plane_tls = options_.tls && options_.data_plane_tls;
  return c;
}

ClientOptions TestCluster::DirectClientOptions(int i, const TestClientOptions& o) const {
  ClientOptions c;
  c.server = servers_.at(static_cast<size_t>(i))->address();
  c.token = o.token.empty() ? options_.token : o.token;
  c.transport = TestTransport();
  c.timeout = o.timeout;
  c.connections = o.connections;
  if (options_.tls && options_.data_plane_tls) {
    c.tls_ca_file = tls_ca_bundle();
    c.data_plane_tls = true;
  }
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
  if (options_.tls) argv.push_back("--tls_ca=" + tls_ca_bundle());
  if (options_.tls && options_.data_plane_tls) argv.push_back("--data_plane_tls");
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

::testing::AssertionResult TestCluster::CheckLeaderHistory() const {
  using SteadyClock = std::chrono::steady_clock;
  if (etcd_ == nullptr) return ::testing::AssertionFailure() << "the cluster has no etcd";
  auto client = etcd::EtcdClient::Create(etcd_->endpoints());
  if (!client.ok()) return ::testing::AssertionFailure() << client.status();
  auto now = (*client)->Get("/rkv-test/meta", SteadyClock::now() + std::chrono::seconds(10));
  if (!now.ok()) return ::testing::AssertionFailure() << now.status();
  const int64_t last = now->revision;
  std::mutex mu;
  std::vector<etcd::WatchEvent> events;
  Status error = Status::Ok();
  auto watch = (*client)->WatchPrefix(
      "/rkv-test/", 1,
      [&](const std::vector<etcd::WatchEvent>& batch, int64_t) {
        std::lock_guard<std::mutex> lock(mu);
        events.insert(events.end(), batch.begin(), batch.end());
      },
      [&](const Status& s) {
        std::lock_guard<std::mutex> lock(mu);
        error = s;
      });
  const bool read = WaitFor(
      "etcd's history",
      [&] {
        std::lock_guard<std::mutex> lock(mu);
        return !error.ok() || (!events.empty() && events.back().kv.mod_revision >= last);
      },
      std::chrono::seconds(30), std::chrono::milliseconds(20));
  watch.reset();
  if (!error.ok()) return ::testing::AssertionFailure() << "watching etcd's history: " << error;
  if (!read) return ::testing::AssertionFailure() << "etcd's history up to revision " << last << " did not arrive";
  int64_t leader_revision = 0;  // the leader key's create revision; 0 while absent
  uint64_t version = 0;
  int versions = 0;
  int leaderships = 0;
  for (const etcd::WatchEvent& e : events) {
    if (e.kv.key == "/rkv-test/leader") {
      if (e.type == etcd::WatchEvent::Type::kPut) {
        if (e.kv.create_revision != leader_revision) ++leaderships;
        leader_revision = e.kv.create_revision;
      } else {
        leader_revision = 0;
      }
      continue;
    }
    if (e.kv.key != "/rkv-test/meta" || e.type != etcd::WatchEvent::Type::kPut) continue;
    v1::store::StoredMeta meta;
    if (!meta.ParseFromString(e.kv.value)) {
      return ::testing::AssertionFailure() << "the meta record at revision " << e.kv.mod_revision << " does not parse";
    }
    if (leader_revision == 0 || meta.leader_revision() != leader_revision) {
      return ::testing::AssertionFailure()
             << "map version " << meta.map_version() << " at revision " << e.kv.mod_revision
             << " was committed under leader key revision " << meta.leader_revision() << ", while the key "
             << (leader_revision == 0 ? std::string("did not exist") : "had revision " + std::to_string(leader_revision));
    }
    if (meta.map_version() != version + 1) {
      return ::testing::AssertionFailure() << "map version " << meta.map_version() << " at revision "
                                           << e.kv.mod_revision << " follows version " << version;
    }
    version = meta.map_version();
    ++versions;
  }
  std::printf("cluster: etcd history: %d map versions under %d leaderships, revisions 1..%lld\n", versions,
              leaderships, static_cast<long long>(last));
  std::fflush(stdout);
  if (versions == 0) return ::testing::AssertionFailure() << "etcd's history holds no map version";
  return ::testing::AssertionSuccess();
}

std::string TestCluster::Logs() const {
  std::string out;
  for (size_t i = 0; i < coordinators_.size(); ++i) {
    if (coordinators_[i] == nullptr) continue;
    out += "coordinator " + std::to_string(i) + " log:\n" + coordinators_[i]->Log() + "\n";
  }
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
