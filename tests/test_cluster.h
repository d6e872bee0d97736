// One test cluster for every cross-process suite (as RocksDB's DBTestBase
// is for its DB tests): an rkv-coordinator and N rkv-servers started as
// real processes from options, in one temp dir with one token; clients of
// each kind, kvctl, the processes' logs, one set of timeouts. A suite's
// fixture derives from TestClusterTest and starts the cluster it needs;
// a new kind of process (another coordinator, a gateway) is added here,
// not to a suite.
//
// Layout of the temp dir: token, coordinator/ (its data dir; with etcd,
// coordinator<i> names only coordinator i's logs), server<i>/ (server
// i's), each with <dir>.log (the process's stderr) and <dir>.out.
//
// Runs over the transport named by $RKV_TEST_TRANSPORT on $RKV_TEST_HOST
// (tests/server_process.h); loads scale with $RKV_TEST_SCALE (Scaled).
//
// Thread safety: a TestCluster is driven by the test's thread; the clients
// it makes are thread-safe (rkv::Client).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "rkv/client.h"
#include "rkv/status.h"
#include "tests/etcd_process.h"
#include "tests/run_command.h"
#include "tests/server_process.h"
#include "tests/test_pki.h"
#include "tests/wait_for.h"

namespace rkv::testing {

// The default deadline of a client's Connect and calls, and of kvctl's
// (--timeout): only bounds a hang; calls retry within it. A suite whose
// meaning needs calls to fail sooner (so that a failure leaves ambiguous
// writes, or a call caught by a kill gives up) passes its own.
inline constexpr std::chrono::milliseconds kCallTimeout{60000};

// max(minimum, round(n * TestScale())): a load's size on this machine.
int Scaled(int n, int minimum = 1);

struct TestClusterOptions {
  // Servers Start() starts (AddServer adds more later).
  int servers = 3;
  // Without a coordinator each server runs alone (no --coordinator).
  bool coordinator = true;
  // With etcd_members 0, one coordinator on a data dir; otherwise an etcd
  // of that many members on loopback (tests/etcd_process.h) and
  // `coordinators` coordinators sharing it (--etcd, prefix /rkv-test/),
  // one of which leads. Servers, clients and kvctl get every
  // coordinator's address.
  int etcd_members = 0;
  int coordinators = 1;
  // The coordinator's flags. 0 leaves a flag out (the coordinator's
  // default). --servers is `servers`.
  uint32_t shards = 64;
  int replicas = 0;
  int heartbeat_interval_ms = 200;
  int heartbeat_timeout_ms = 2000;
  int lease_ms = 0;
  std::vector<std::string> coordinator_flags;  // more, after those
  // Every server's flags. An empty durability or zone_prefix leaves the
  // flag out; server i's zone is zone_prefix + i.
  uint64_t server_memory = uint64_t{64} << 20;
  uint64_t max_keys = 65536;
  std::string durability;
  std::string zone_prefix;
  std::vector<std::string> server_flags;  // more, after those
  std::string token = "rkv-test-token";
  // The servers' cluster credential (--cluster_token_file of the servers and
  // the coordinators), which no client holds; empty: none, the client token
  // then serves both roles.
  std::string cluster_token = "rkv-test-cluster-credential";
  // Per-server credentials in place of the cluster credential: the
  // coordinator and every server get --server_credentials_file (names
  // server0..server15, tokens ServerCredential(i)), server i presents
  // server<i>'s (--server_credential_name), and the coordinator binds each
  // id to its server's credential.
  bool per_server_credentials = false;
  // TLS on the control plane: a CA and certificates made with openssl in
  // <dir>/tls/ (tests/test_pki.h): the coordinators and servers get
  // --tls_cert, --tls_key and --tls_ca (their own certificate, named
  // coordinator<i> and server<i>), clients ClientOptions::tls_ca_file and
  // kvctl --tls_ca (the CA alone: server-authenticated TLS). Every process
  // reads the CA from tls_ca_bundle(), which a test may replace.
  bool tls = false;
  // With tls, TLS on the data plane too (tcp): servers get --data_plane_tls,
  // clients ClientOptions::data_plane_tls, kvctl --data_plane_tls.
  bool data_plane_tls = false;
};

// The token of server i's credential with per_server_credentials.
std::string ServerCredential(int i);

// What a client of the cluster is made with (the rest from the cluster).
struct TestClientOptions {
  TestClientOptions() = default;
  explicit TestClientOptions(std::chrono::milliseconds t) : timeout(t) {}

  std::chrono::milliseconds timeout = kCallTimeout;
  int connections = 1;
  std::string token;  // empty: the cluster's
};

class TestCluster {
 public:
  // Writes the token file; starts nothing.
  explicit TestCluster(TestClusterOptions options = {});
  ~TestCluster();  // SIGKILLs every process still running
  TestCluster(const TestCluster&) = delete;
  TestCluster& operator=(const TestCluster&) = delete;

  // Starts the coordinator (when the options have one), then
  // options().servers servers, one after the other; the first error,
  // naming the process, with its log.
  Status Start();

  // The options the next process start uses: a test may change them
  // between starts (e.g. the coordinator's flags on its one data dir).
  TestClusterOptions& options() { return options_; }
  const std::string& dir() const { return dir_.path(); }
  const std::string& token() const { return options_.token; }
  const std::string& token_file() const { return token_file_; }
  const std::string& cluster_token() const { return options_.cluster_token; }

  // Sends one Heartbeat for `server_id` at `epoch` to coordinator 0,
  // presenting `token` (as a forger holding it would); the coordinator's
  // answer: OK, or its code and message.
  Status CoordinatorHeartbeat(const std::string& token, const std::string& server_id, uint64_t epoch) const;

  // The coordinator's process (made on first use: Start, Kill9, Terminate,
  // Freeze, Continue, Restart, Wipe, Log). Its flags are read from
  // options() when it is made, and again by RemakeCoordinator.
  ServerProcess& coordinator();
  // Makes the coordinator's process anew from options() (on the same data
  // dir); the old one must not be running.
  ServerProcess& RemakeCoordinator();
  // Coordinator i of options().coordinators (0 is coordinator()).
  ServerProcess& coordinator(int i);
  int coordinator_count() const { return static_cast<int>(coordinators_.size()); }
  // "HOST:PORT" of the coordinator, or with several the comma-separated
  // list of those started so far (what --coordinator takes); empty before
  // the first start.
  std::string coordinator_address() const;
  // The etcd under several coordinators (null without).
  EtcdCluster* etcd() const { return etcd_.get(); }
  // The address in the etcd leader key ("" when none, or without etcd),
  // read with etcdctl.
  std::string LeaderAddress() const;
  // The index of the coordinator that leads per the leader key; -1 when
  // none does.
  int LeaderIndex() const;
  // Reads etcd's whole history of the cluster's prefix and checks that
  // every map version was committed under the leader key that existed at
  // its revision (StoredMeta.leader_revision) and that versions rose one
  // at a time: never two leaders committing. Prints what it read.
  ::testing::AssertionResult CheckLeaderHistory() const;

  // Server process i (0-based, in the order they were added).
  ServerProcess& server(int i) { return *servers_.at(static_cast<size_t>(i)); }
  int server_count() const { return static_cast<int>(servers_.size()); }
  // Adds a server process (not started) with the options' flags; returns
  // its index. Needs the coordinator's address: start the coordinator first.
  int AddServer();
  std::string ServerDir(int i) const;

  // Options of a client of the whole cluster (through the coordinator) or
  // of server i alone, for a test that connects itself (e.g. to see a
  // Connect fail).
  ClientOptions ClusterClientOptions(const TestClientOptions& o = {}) const;
  ClientOptions DirectClientOptions(int i, const TestClientOptions& o = {}) const;
  // Connected clients; on failure the test fails (non-fatally: the caller
  // asserts the pointer) and nullptr is returned.
  std::unique_ptr<Client> ClusterClient(const TestClientOptions& o = {});
  // A client of server i alone: its GETs read that server's own table.
  std::unique_ptr<Client> DirectClient(int i, const TestClientOptions& o = {});

  // Runs kvctl against the coordinator with the cluster's token file (or
  // `token_file`), the test transport and --timeout=kCallTimeout, then
  // `args`.
  CommandResult Kvctl(const std::vector<std::string>& args, const std::string& token_file = "") const;

  // With options().tls: the CA (its own files, which sign), the CA bundle
  // every process verifies peers with (a copy of the CA's certificate at
  // first), and the certificate of `name` ("server0", "coordinator0",
  // "client": made on first use).
  const TestCa& tls_ca() const { return tls_ca_; }
  std::string tls_ca_bundle() const { return dir() + "/tls/ca-bundle.pem"; }
  TestCert TlsCert(const std::string& name) const;

  // The id server i joined with, from `client`'s map refreshed first
  // (matched by data address); empty, with a test failure, if none.
  std::string IdOf(Client& client, int i) const;
  // Waits until `done` holds for the coordinator's map as `client` reads
  // it (refreshed each time), up to kConditionDeadline; `last`, when not
  // null, gets the last map read.
  ::testing::AssertionResult WaitForMap(Client& client, const std::function<bool(const ClusterInfo&)>& done,
                                        ClusterInfo* last = nullptr) const;

  // Every process's log (the tail), for a failure message.
  std::string Logs() const;

 private:
  std::unique_ptr<ServerProcess> MakeCoordinator(int i) const;
  // The etcd members' client endpoints as --etcd takes them (etcd_ set).
  std::string EtcdEndpoints() const;
  std::vector<std::string> ServerFlags(int i) const;
  // --tls_cert, --tls_key and --tls_ca of the process `name` (none without
  // options().tls).
  std::vector<std::string> TlsFlags(const std::string& name) const;

  TestClusterOptions options_;
  TempDir dir_;
  std::string token_file_;
  std::string cluster_token_file_;
  std::string server_credentials_file_;
  TestCa tls_ca_;
  std::unique_ptr<EtcdCluster> etcd_;
  // coordinators_[0] is coordinator(); made on first use.
  std::vector<std::unique_ptr<ServerProcess>> coordinators_;
  std::vector<std::unique_ptr<ServerProcess>> servers_;
};

// The fixture base of the cross-process suites. A suite starts its cluster
// with StartCluster (in SetUp or in the test); when the test failed, the
// processes' logs are printed at its end (TearDown), so assertions need not
// carry them. The processes are killed when the fixture is destroyed, after
// a derived fixture's own members (its clients).
class TestClusterTest : public ::testing::Test {
 protected:
  // Starts a cluster with `options`; a fatal failure if it does not start
  // (callers in a test body wrap it in ASSERT_NO_FATAL_FAILURE).
  void StartCluster(TestClusterOptions options);
  void TearDown() override;

  TestCluster& cluster() { return *cluster_; }

  std::unique_ptr<TestCluster> cluster_;
};

}  // namespace rkv::testing
