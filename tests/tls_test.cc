// TLS on the control plane across processes: a coordinator and servers
// with --tls_cert, --tls_key and --tls_ca, clients and kvctl with the CA
// (TestClusterOptions::tls); clients without the CA, or with another one,
// refused with an error that says TLS; certificates and the CA rotated by
// replacing the files under a running load without a failed call; the
// flags checked at start (docs/design.md §10).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/create_channel.h>
#include <gtest/gtest.h>

#include "proto/auth.h"
#include "proto/rkv.grpc.pb.h"
#include "proto/tls.h"
#include "rkv/admin.h"
#include "rkv/client.h"
#include "tests/run_command.h"
#include "tests/temp_dir.h"
#include "tests/test_cluster.h"
#include "tests/test_pki.h"

#if !defined(RKV_KVCTL_BIN) || !defined(RKV_SERVER_BIN) || !defined(RKV_COORDINATOR_BIN)
#error "RKV_KVCTL_BIN, RKV_SERVER_BIN and RKV_COORDINATOR_BIN must name the programs"
#endif

namespace rkv::testing {
namespace {

bool Contains(std::string_view text, std::string_view part) { return text.find(part) != std::string_view::npos; }

class TlsClusterTest : public TestClusterTest {
 protected:
  TestClusterOptions Options() const {
    TestClusterOptions o;
    o.servers = 3;
    o.shards = 64;
    o.replicas = 2;
    o.heartbeat_timeout_ms = SlowCpuMs(2000);
    o.tls = true;
    return o;
  }

  // Options() with a failover within about a second: fewer shards, quick
  // heartbeats and short leases.
  TestClusterOptions QuickFailoverOptions() const {
    TestClusterOptions o = Options();
    o.shards = 32;
    o.heartbeat_interval_ms = 100;
    o.heartbeat_timeout_ms = SlowCpuMs(1000);
    o.lease_ms = 400;
    return o;
  }

  // Runs kvctl against the cluster with exactly `flags` for TLS.
  CommandResult KvctlWith(const std::vector<std::string>& tls_flags, const std::vector<std::string>& args) {
    std::vector<std::string> argv = {RKV_KVCTL_BIN, "--coordinator=" + cluster().coordinator_address(),
                                     "--token_file=" + cluster().token_file(), "--transport=" + TestTransport(),
                                     "--timeout=5000"};
    argv.insert(argv.end(), tls_flags.begin(), tls_flags.end());
    argv.insert(argv.end(), args.begin(), args.end());
    return RunCommand(argv);
  }

  // One Health call to the Admin service at `address` over a TLS channel
  // with `files`: OK when it connected and answered.
  Status AdminHealth(const std::string& address, const control::TlsFiles& files) {
    auto credentials = control::MakeChannelCredentials(files);
    if (!credentials.ok()) return credentials.status();
    auto stub = v1::Admin::NewStub(grpc::CreateChannel(address, *credentials));
    grpc::ClientContext context;
    control::AttachToken(&context, cluster().token());
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    v1::HealthResponse response;
    const grpc::Status s = stub->Health(&context, v1::HealthRequest(), &response);
    return s.ok() ? Status::Ok() : Status(static_cast<StatusCode>(s.error_code()), s.error_message());
  }

  // One GetClusterMap from coordinator 0 over a TLS channel with `files`.
  Status CoordinatorMap(const control::TlsFiles& files) {
    auto credentials = control::MakeChannelCredentials(files);
    if (!credentials.ok()) return credentials.status();
    auto stub = v1::Coordinator::NewStub(grpc::CreateChannel(cluster().coordinator(0).address(), *credentials));
    grpc::ClientContext context;
    control::AttachToken(&context, cluster().token());
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    v1::ClusterMap map;
    const grpc::Status s = stub->GetClusterMap(&context, v1::GetClusterMapRequest(), &map);
    return s.ok() ? Status::Ok() : Status(static_cast<StatusCode>(s.error_code()), s.error_message());
  }

  std::vector<std::string> AdminAddresses(Client& client) {
    std::vector<std::string> out;
    auto members = ClusterAdmin(client).Members();
    EXPECT_TRUE(members.ok()) << members.status();
    if (members.ok()) {
      for (const MemberInfo& m : *members) out.push_back(m.admin_address);
    }
    return out;
  }
};

TEST_F(TlsClusterTest, ClusterWorksWithTlsAndKvctlWithTheCa) {
  ASSERT_NO_FATAL_FAILURE(StartCluster(Options()));
  auto client = cluster().ClusterClient();
  ASSERT_NE(client, nullptr);
  for (int i = 0; i < 50; ++i) {
    const std::string key = "tls-key-" + std::to_string(i);
    ASSERT_TRUE(client->Put(key, "value-" + std::to_string(i)).ok());
  }
  for (int i = 0; i < 50; ++i) {
    auto got = client->Get("tls-key-" + std::to_string(i));
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(*got, "value-" + std::to_string(i));
  }
  // kvctl with --tls_ca (TestCluster::Kvctl adds it): the map from the
  // coordinator, and verify, which asks every server's Admin service.
  CommandResult r = cluster().Kvctl({"members"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  size_t up = 0;
  for (size_t at = r.out.find(" UP "); at != std::string::npos; at = r.out.find(" UP ", at + 1)) ++up;
  EXPECT_EQ(up, 3u) << r.out;
  r = cluster().Kvctl({"verify"});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  // With a client certificate too (mutual TLS).
  const TestCert mine = cluster().TlsCert("client");
  r = KvctlWith({"--tls_ca=" + cluster().tls_ca_bundle(), "--tls_cert=" + mine.cert, "--tls_key=" + mine.key},
                {"get", "tls-key-7"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "value-7");
  // No process served plain gRPC: none warned.
  for (int i = 0; i < cluster().server_count(); ++i) {
    EXPECT_FALSE(Contains(cluster().server(i).Log(), "without TLS")) << cluster().server(i).Log();
  }
}

TEST_F(TlsClusterTest, AClientWithoutTheCaOrWithAnotherCaFailsSayingTls) {
  ASSERT_NO_FATAL_FAILURE(StartCluster(Options()));
  // librkv without the CA: plain gRPC to a TLS coordinator.
  ClientOptions plain = cluster().ClusterClientOptions(TestClientOptions(std::chrono::milliseconds(3000)));
  plain.tls_ca_file.clear();
  auto c = Client::Connect(plain);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kUnavailable) << c.status();
  EXPECT_TRUE(Contains(c.status().message(), "TLS required?")) << c.status();
  EXPECT_TRUE(Contains(c.status().message(), "tls_ca")) << c.status();

  // Another CA: the coordinator's certificate does not verify.
  auto wrong = MakeTestCa(cluster().dir(), "wrong");
  ASSERT_TRUE(wrong.ok()) << wrong.status();
  ClientOptions other = cluster().ClusterClientOptions(TestClientOptions(std::chrono::milliseconds(3000)));
  other.tls_ca_file = wrong->cert;
  c = Client::Connect(other);
  ASSERT_FALSE(c.ok());
  EXPECT_TRUE(Contains(c.status().message(), "TLS handshake failed?")) << c.status();

  // A file that is not there: named at Connect, before any call.
  ClientOptions missing = cluster().ClusterClientOptions();
  missing.tls_ca_file = cluster().dir() + "/absent.pem";
  c = Client::Connect(missing);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument) << c.status();
  EXPECT_TRUE(Contains(c.status().message(), "ClientOptions.tls_ca_file")) << c.status();
  EXPECT_TRUE(Contains(c.status().message(), "absent.pem")) << c.status();

  // kvctl the same.
  CommandResult r = KvctlWith({}, {"members"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(Contains(r.err, "TLS required?")) << r.err;
  r = KvctlWith({"--tls_ca=" + wrong->cert}, {"members"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(Contains(r.err, "TLS handshake failed?")) << r.err;
  r = KvctlWith({"--tls_cert=" + cluster().TlsCert("client").cert}, {"members"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(Contains(r.err, "tls_ca")) << r.err;

  // The servers' Admin service refuses a client certificate of another CA.
  auto client = cluster().ClusterClient();
  ASSERT_NE(client, nullptr);
  auto stranger = MakeTestCert(*wrong, cluster().dir(), "stranger");
  ASSERT_TRUE(stranger.ok()) << stranger.status();
  for (const std::string& admin : AdminAddresses(*client)) {
    EXPECT_TRUE(AdminHealth(admin, {"", "", cluster().tls_ca_bundle()}).ok()) << admin;
    EXPECT_FALSE(AdminHealth(admin, {stranger->cert, stranger->key, cluster().tls_ca_bundle()}).ok()) << admin;
  }
}

// Rotation by replacing files, as docs/design.md §10 tells an operator:
// first a CA bundle holding the old and the new CA everywhere, then new
// certificates signed by the new CA (the same keys), each file replaced
// by a rename. A load of PUTs and GETs runs throughout on one client; not
// one call may fail. The end state is checked with the new CA alone.
TEST_F(TlsClusterTest, CertificatesRotateUnderLoadWithoutAFailedCall) {
  ASSERT_NO_FATAL_FAILURE(StartCluster(Options()));
  auto client = cluster().ClusterClient();
  ASSERT_NE(client, nullptr);
  const std::vector<std::string> admins = AdminAddresses(*client);
  ASSERT_EQ(admins.size(), 3u);

  std::atomic<bool> stop{false};
  std::atomic<uint64_t> done{0};
  std::atomic<uint64_t> failed{0};
  std::string first_failure;
  std::thread load([&] {
    for (uint64_t i = 0; !stop.load(); ++i) {
      const std::string key = "rotate-" + std::to_string(i % 500);
      const std::string value = "v" + std::to_string(i);
      Status s = client->Put(key, value).status();
      if (s.ok()) {
        auto got = client->Get(key);
        s = !got.ok() ? got.status() : (*got == value ? Status::Ok() : Status(StatusCode::kInternal, "got " + *got));
      }
      if (!s.ok() && failed.fetch_add(1) == 0) first_failure = s.ToString();
      done.fetch_add(1);
    }
  });
  // An assertion that returns early still stops and joins the load.
  struct StopLoad {
    std::atomic<bool>& stop;
    std::thread& load;
    ~StopLoad() {
      stop = true;
      if (load.joinable()) load.join();
    }
  } stop_load{stop, load};
  const auto ops_pass = [&](uint64_t more) {
    const uint64_t until = done.load() + more;
    return WaitFor("the load to make progress", [&] { return done.load() >= until || failed.load() > 0; });
  };
  ASSERT_TRUE(ops_pass(20));

  // 1. The bundle: old CA + new CA.
  auto fresh = MakeTestCa(cluster().dir() + "/tls", "rkv-test-next");
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  const std::string old_ca = ReadTestFile(cluster().tls_ca().cert);
  const std::string new_ca = ReadTestFile(fresh->cert);
  ASSERT_TRUE(ReplaceFile(cluster().tls_ca_bundle(), old_ca + new_ca).ok());
  // Every process verifies with the bundle once a certificate of the new
  // CA gets through to it (the server side of each; the client sides
  // reload on the same period).
  auto probe = MakeTestCert(*fresh, cluster().dir() + "/tls", "probe");
  ASSERT_TRUE(probe.ok()) << probe.status();
  const control::TlsFiles with_new_cert{probe->cert, probe->key, cluster().tls_ca_bundle()};
  ASSERT_TRUE(WaitFor("the coordinator to accept the new CA", [&] { return CoordinatorMap(with_new_cert).ok(); }));
  for (const std::string& admin : admins) {
    ASSERT_TRUE(WaitFor("server " + admin + " to accept the new CA",
                        [&] { return AdminHealth(admin, with_new_cert).ok(); }));
  }
  // The channels' own reload (client side) runs on the same period.
  std::this_thread::sleep_for(2 * control::kTlsRefreshInterval);
  ASSERT_TRUE(ops_pass(20));

  // 2. Every process's certificate reissued by the new CA, same key.
  ASSERT_TRUE(
      ReissueTestCert(*fresh, cluster().TlsCert("coordinator0").key, "coordinator0", cluster().TlsCert("coordinator0").cert)
          .ok());
  for (int i = 0; i < cluster().server_count(); ++i) {
    const std::string name = "server" + std::to_string(i);
    const TestCert cert = cluster().TlsCert(name);
    ASSERT_TRUE(ReissueTestCert(*fresh, cert.key, name, cert.cert).ok());
  }
  // Proof: a client trusting only the new CA gets through to each.
  const control::TlsFiles new_only{"", "", fresh->cert};
  ASSERT_TRUE(WaitFor("the coordinator to present the new certificate",
                      [&] { return CoordinatorMap(new_only).ok(); }));
  for (const std::string& admin : admins) {
    ASSERT_TRUE(WaitFor("server " + admin + " to present the new certificate",
                        [&] { return AdminHealth(admin, new_only).ok(); }));
  }
  ASSERT_TRUE(ops_pass(20));
  stop = true;
  load.join();
  EXPECT_EQ(failed.load(), 0u) << "first failure: " << first_failure;
  EXPECT_GE(done.load(), 60u);

  // A new client and kvctl with the new CA alone; the old CA no longer
  // verifies the coordinator.
  ClientOptions o = cluster().ClusterClientOptions();
  o.tls_ca_file = fresh->cert;
  auto renewed = Client::Connect(o);
  ASSERT_TRUE(renewed.ok()) << renewed.status();
  EXPECT_TRUE((*renewed)->Put("after-rotation", "yes").ok());
  CommandResult r = KvctlWith({"--tls_ca=" + fresh->cert}, {"verify"});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_FALSE(CoordinatorMap({"", "", cluster().tls_ca().cert}).ok());
}

// A catch-up over TLS: the server that takes over a killed server's
// copies fetches them from the primaries' Replica services, presenting its
// certificate (mutual TLS), and every shard ends with two copies that
// agree. The copies move 1.5 s after the kill is noticed, not after the
// coordinator's default 30 s (--replace_after_ms).
TEST_F(TlsClusterTest, ACatchUpRunsOverMutualTls) {
  TestClusterOptions o = QuickFailoverOptions();
  o.coordinator_flags.push_back("--replace_after_ms=" + std::to_string(SlowCpuMs(1500)));
  ASSERT_NO_FATAL_FAILURE(StartCluster(o));
  auto client = cluster().ClusterClient();
  ASSERT_NE(client, nullptr);
  const std::string victim = cluster().IdOf(*client, 0);
  ASSERT_FALSE(victim.empty());
  for (int i = 0; i < 200; ++i) {
    ASSERT_TRUE(client->Put("caught-" + std::to_string(i), "v" + std::to_string(i)).ok());
  }
  cluster().server(0).Kill9();
  ASSERT_TRUE(cluster().WaitForMap(*client, [&](const ClusterInfo& c) {
    std::map<std::string, std::string> state;
    for (const MemberInfo& m : c.members) state[m.server_id] = m.state;
    for (const ShardInfo& shard : c.shards) {
      if (shard.replicas.size() != 2 || !shard.syncing.empty()) return false;
      for (const std::string& r : shard.replicas) {
        if (r == victim || state[r] != "UP") return false;
      }
    }
    return true;
  }));
  for (int i = 0; i < 200; ++i) {
    auto got = client->Get("caught-" + std::to_string(i));
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(*got, "v" + std::to_string(i));
  }
  const CommandResult r = cluster().Kvctl({"verify"});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  for (int i = 1; i < 3; ++i) {
    EXPECT_FALSE(Contains(cluster().server(i).Log(), "needs a server's certificate")) << cluster().server(i).Log();
  }
}

// --data_plane_tls: every data-plane connection (clients', kvctl's, and a
// primary's forwards to its backups) runs over TLS; a client without it is
// refused saying so; the writes the backups took over TLS survive the
// primary's kill -9.
TEST_F(TlsClusterTest, TheDataPlaneRunsOverTlsThroughAFailover) {
  TestClusterOptions o = QuickFailoverOptions();
  o.data_plane_tls = true;
  ASSERT_NO_FATAL_FAILURE(StartCluster(o));
  auto client = cluster().ClusterClient();
  ASSERT_NE(client, nullptr);
  const std::string victim = cluster().IdOf(*client, 0);
  ASSERT_FALSE(victim.empty());
  for (int i = 0; i < 200; ++i) {
    ASSERT_TRUE(client->Put("sealed-" + std::to_string(i), "v" + std::to_string(i)).ok());
  }
  CommandResult r = cluster().Kvctl({"get", "sealed-7"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "v7");
  for (int i = 0; i < cluster().server_count(); ++i) {
    EXPECT_TRUE(Contains(cluster().server(i).Log(), "data plane: TLS 1.3")) << cluster().server(i).Log();
  }

  // A client of one server without TLS on its data plane.
  ClientOptions plain = cluster().DirectClientOptions(1);
  plain.data_plane_tls = false;
  plain.tls_ca_file.clear();
  auto refused = Client::Connect(plain);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kPermissionDenied) << refused.status();
  EXPECT_TRUE(Contains(refused.status().message(), "takes TLS only")) << refused.status();

  cluster().server(0).Kill9();
  ASSERT_TRUE(cluster().WaitForMap(*client, [&](const ClusterInfo& c) {
    for (const ShardInfo& shard : c.shards) {
      if (shard.replicas.empty() || shard.replicas[0] == victim) return false;
    }
    return true;
  }));
  for (int i = 0; i < 200; ++i) {
    auto got = client->Get("sealed-" + std::to_string(i));
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(*got, "v" + std::to_string(i));
  }
}

// With TLS, the servers' calls need a server's certificate too: the
// cluster credential over a channel with the CA alone is refused at the
// coordinator (Heartbeat) and at a server's Replica service (FetchKeys),
// and accepted with a certificate of the CA.
TEST_F(TlsClusterTest, AServerCallWithoutACertificateIsRefused) {
  ASSERT_NO_FATAL_FAILURE(StartCluster(Options()));
  auto client = cluster().ClusterClient();
  ASSERT_NE(client, nullptr);
  auto members = ClusterAdmin(*client).Members();
  ASSERT_TRUE(members.ok()) << members.status();
  ASSERT_FALSE(members->empty());
  const MemberInfo& member = members->front();
  const auto heartbeat = [&](const control::TlsFiles& files) -> Status {
    auto credentials = control::MakeChannelCredentials(files);
    if (!credentials.ok()) return credentials.status();
    auto stub = v1::Coordinator::NewStub(grpc::CreateChannel(cluster().coordinator(0).address(), *credentials));
    grpc::ClientContext context;
    control::AttachToken(&context, cluster().cluster_token());
    context.set_deadline(std::chrono::system_clock::now() + kCallTimeout);
    v1::HeartbeatRequest request;
    request.set_server_id(member.server_id);
    request.set_epoch(member.epoch);
    v1::HeartbeatResponse response;
    const grpc::Status s = stub->Heartbeat(&context, request, &response);
    return s.ok() ? Status::Ok() : Status(static_cast<StatusCode>(s.error_code()), s.error_message());
  };
  Status s = heartbeat({"", "", cluster().tls_ca_bundle()});
  EXPECT_EQ(s.code(), StatusCode::kPermissionDenied) << s;
  EXPECT_TRUE(Contains(s.message(), "Heartbeat needs a server's certificate (mutual TLS)")) << s;
  const TestCert server_cert = cluster().TlsCert("server0");
  s = heartbeat({server_cert.cert, server_cert.key, cluster().tls_ca_bundle()});
  EXPECT_TRUE(s.ok()) << s;

  const auto fetch_keys = [&](const control::TlsFiles& files) -> Status {
    auto credentials = control::MakeChannelCredentials(files);
    if (!credentials.ok()) return credentials.status();
    auto stub = v1::Replica::NewStub(grpc::CreateChannel(member.admin_address, *credentials));
    grpc::ClientContext context;
    control::AttachToken(&context, cluster().cluster_token());
    context.set_deadline(std::chrono::system_clock::now() + kCallTimeout);
    v1::FetchKeysResponse response;
    const grpc::Status s = stub->FetchKeys(&context, v1::FetchKeysRequest(), &response);
    return s.ok() ? Status::Ok() : Status(static_cast<StatusCode>(s.error_code()), s.error_message());
  };
  s = fetch_keys({"", "", cluster().tls_ca_bundle()});
  EXPECT_EQ(s.code(), StatusCode::kPermissionDenied) << s;
  EXPECT_TRUE(Contains(s.message(), "needs a server's certificate (mutual TLS)")) << s;
  // With a certificate the credential check passes and the request itself
  // is judged (an empty FetchKeys is not a sync in progress).
  s = fetch_keys({server_cert.cert, server_cert.key, cluster().tls_ca_bundle()});
  EXPECT_FALSE(Contains(s.message(), "certificate")) << s;
}

// Every program checks its TLS flags at start, naming the flag and the
// file; nothing listens or crashes.
TEST(TlsFlagsTest, ProgramsCheckTheirTlsFlags) {
  TempDir dir;
  auto ca = MakeTestCa(dir.path(), "flags");
  ASSERT_TRUE(ca.ok()) << ca.status();
  auto cert = MakeTestCert(*ca, dir.path(), "node");
  ASSERT_TRUE(cert.ok()) << cert.status();
  WriteFile(dir.path() + "/token", "flags-token\n");
  WriteFile(dir.path() + "/garbage.pem", "garbage\n");
  const std::string token = "--token_file=" + dir.path() + "/token";

  CommandResult r = RunCommand({RKV_COORDINATOR_BIN, token, "--data_dir=" + dir.path() + "/c", "--listen=127.0.0.1:0",
                                "--tls_cert=" + cert->cert});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_TRUE(Contains(r.err, "--tls_key is missing")) << r.err;
  r = RunCommand({RKV_COORDINATOR_BIN, token, "--data_dir=" + dir.path() + "/c", "--listen=127.0.0.1:0",
                  "--tls_cert=" + cert->cert, "--tls_key=" + cert->key, "--tls_ca=" + dir.path() + "/garbage.pem"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_TRUE(Contains(r.err, "--tls_ca '" + dir.path() + "/garbage.pem' holds no PEM certificate")) << r.err;

  r = RunCommand({RKV_SERVER_BIN, token, "--data_dir=" + dir.path() + "/s", "--listen=127.0.0.1:0",
                  "--coordinator=127.0.0.1:1", "--tls_cert=" + cert->cert, "--tls_key=" + ca->key,
                  "--tls_ca=" + ca->cert});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_TRUE(Contains(r.err, "is not the key of the certificate in --tls_cert")) << r.err;
  r = RunCommand({RKV_SERVER_BIN, token, "--data_dir=" + dir.path() + "/s", "--listen=127.0.0.1:0",
                  "--tls_cert=" + cert->cert, "--tls_key=" + cert->key, "--tls_ca=" + ca->cert});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_TRUE(Contains(r.err, "pass --coordinator or --admin_listen")) << r.err;

  r = RunCommand({RKV_KVCTL_BIN, token, "--server=127.0.0.1:1", "--tls_ca=" + ca->cert, "get", "k"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(Contains(r.err, "need --coordinator")) << r.err;
  r = RunCommand({RKV_KVCTL_BIN, token, "--coordinator=127.0.0.1:1", "--tls_ca=" + dir.path() + "/absent.pem",
                  "members"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(Contains(r.err, "--tls_ca")) << r.err;
  EXPECT_TRUE(Contains(r.err, "absent.pem")) << r.err;
}

// A coordinator serving plain gRPC on every interface warns once that it
// does so without TLS; with TLS, or on loopback, it does not.
TEST(TlsFlagsTest, PlainGrpcOnAnOpenAddressWarnsOnce) {
  TempDir dir;
  auto ca = MakeTestCa(dir.path(), "warn");
  ASSERT_TRUE(ca.ok()) << ca.status();
  auto cert = MakeTestCert(*ca, dir.path(), "node");
  ASSERT_TRUE(cert.ok()) << cert.status();
  WriteFile(dir.path() + "/token", "warn-token\n");
  const auto log_of = [&](const std::string& name, std::vector<std::string> flags) {
    ServerProcess p(dir.path() + "/" + name, dir.path() + "/token", std::move(flags),
                    ServerProcess::Role::kCoordinator);
    const Status started = p.Start();
    EXPECT_TRUE(started.ok()) << started;
    std::string log = p.Log();
    p.Terminate();
    return log;
  };
  const std::string open = log_of("open", {"--listen=0.0.0.0:0"});
  const size_t first = open.find("without TLS");
  EXPECT_NE(first, std::string::npos) << open;
  EXPECT_EQ(open.find("without TLS", first + 1), std::string::npos) << open;
  EXPECT_EQ(log_of("loopback", {}).find("without TLS"), std::string::npos);
  const std::string tls = log_of("tls", {"--listen=0.0.0.0:0", "--tls_cert=" + cert->cert, "--tls_key=" + cert->key,
                                         "--tls_ca=" + ca->cert});
  EXPECT_EQ(tls.find("without TLS"), std::string::npos) << tls;
}

}  // namespace
}  // namespace rkv::testing
