// rkv-coordinator: membership, shard assignment, replica sets, leases, failover and the cluster map, with
// its state in RocksDB (--data_dir: the only coordinator) or in etcd (--etcd: one of several, one of which
// leads; coordinator/etcd_coordinator.h). See coordinator/coordinator_state.h.
//
// With --metrics_listen it serves GET /metrics in the Prometheus text format
// (CoordinatorServer::Metrics) and logs "metrics on http://HOST:PORT/metrics"
// at INFO once it listens.
//
// SIGHUP re-reads --client_credentials_file (docs/design.md §10): a good
// file is put in force for every call that starts after it (logged at
// INFO with the names added and removed), a bad one is logged at ERROR and
// changes nothing.
//
// Exit codes: 0 after SIGTERM/SIGINT and a clean shutdown; 1 when it
// cannot start (data dir, etcd, token or credentials file, listen address,
// metrics address); 2 for a bad flag.

#include <csignal>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <gflags/gflags.h>
#include <glog/logging.h>
#include <pthread.h>
#include <sys/stat.h>

#include "common/client_credentials.h"
#include "common/daemon_signals.h"
#include "common/metrics/metrics_endpoint.h"
#include "common/program_help.h"
#include "common/token.h"
#include "proto/tls.h"
#include "proto/validation.h"
#include "coordinator/coordinator_service.h"
#include "coordinator/coordinator_state.h"
#include "coordinator/etcd_coordinator.h"
#include "coordinator/state_store.h"
#include "coordinator/state_transfer.h"

DEFINE_string(listen, "127.0.0.1:7600", "HOST:PORT to serve gRPC on; port 0 picks a free port (default 127.0.0.1:7600)");
DEFINE_string(data_dir, "",
              "directory of the coordinator's RocksDB state, created if missing (this or --etcd is required; a "
              "coordinator with a data dir is the cluster's only one)");
DEFINE_string(etcd, "",
              "HOST:PORT[,HOST:PORT...] of an etcd v3 cluster (3.4 or later) that keeps the cluster's state; any "
              "number of coordinators share it, one leads and the others stand by (instead of --data_dir)");
DEFINE_string(etcd_prefix, "/rkv/default/",
              "with --etcd: the key prefix of this cluster's state, starting and ending with '/' (default "
              "/rkv/default/)");
DEFINE_string(advertise, "",
              "with --etcd: HOST:PORT at which servers and clients reach this coordinator, published when it "
              "leads (default: the address --listen bound)");
DEFINE_uint32(election_ttl_s, 2,
              "with --etcd: the leader's etcd lease in seconds, 1..60; a leader that dies is replaced within "
              "about this long (default 2, etcd's minimum with its default timing)");
DEFINE_uint32(etcd_wait_s, 30, "with --etcd: seconds to wait for etcd to answer at start-up (default 30)");
DEFINE_string(export_state, "",
              "write the cluster state held in --data_dir or --etcd to this file and exit (to move it into the "
              "other kind of store with --import_state); stop every coordinator of the cluster first");
DEFINE_string(import_state, "",
              "read a file written by --export_state into --data_dir or --etcd, which must hold no cluster yet, "
              "and exit; --shards, --servers and --replicas must match the state's");
DEFINE_string(token_file, "", "file holding the client token: a client credential named \"token\" that only a "
                              "restart changes, the one the coordinator presents to the servers' Admin service, and "
                              "the servers' when there is neither --cluster_token_file nor --server_credentials_file "
                              "(required)");
DEFINE_string(client_credentials_file, "",
              "file of more client credentials, valid beside --token_file's for the map, leases and status: one "
              "\"NAME TOKEN\" a line (NAME: 1 to 64 of [A-Za-z0-9._-], shown in the log of refused calls), # "
              "comments; re-read on SIGHUP (a bad file changes nothing) (default: none)");
DEFINE_string(cluster_token_file, "",
              "file holding the cluster credential, the one given to every rkv-server of the cluster with its "
              "--cluster_token_file (one credential shared by all servers: it binds no identity, so any server "
              "can act as another; --server_credentials_file does): with it, only that credential may Join, "
              "Heartbeat, Leave, ReportReplicaFailure and ReportCaughtUp (a client token gets PERMISSION_DENIED), "
              "and both are accepted for the map, leases, status and ReportUnresponsive (default: none; the "
              "client token then serves every role, so any client can act as a server on the control plane, "
              "with a warning)");
DEFINE_string(server_credentials_file, "",
              "file of per-server credentials, in place of --cluster_token_file: one \"NAME TOKEN\" a line (NAME: "
              "the server's name for the operator, 1 to 64 of [A-Za-z0-9._-]), # comments; each rkv-server gets "
              "the same file and --server_credential_name. Each credential serves the servers' role and binds "
              "identity: a server id is bound (in the cluster state) to the credential it first joined with, "
              "and a Join, Heartbeat, Leave or report for it with another credential gets PERMISSION_DENIED; "
              "read at start only (default: none)");
DEFINE_string(operator_token_file, "",
              "file holding the operator credential: with it, only that credential may Drain and Forget servers "
              "(kvctl drain and forget with --token_file naming it; the client token and the cluster credential "
              "get PERMISSION_DENIED), and it is also accepted for the map, leases and status; it must differ "
              "from both (default: none; the client token then drains and forgets, with a warning)");
DEFINE_uint32(shards, 1024, "number of shards, 1..65536; fixed for the life of the data dir (default 1024)");
DEFINE_uint32(servers, 3,
              "cluster size N: shards are assigned when the N-th server joins; a server with a new id joining "
              "later adds one to N (kept in the data dir) and gets a fair share of roles; kvctl forget of a "
              "server gone for good takes one off, never below --servers (default 3)");
DEFINE_uint32(replicas, 3,
              "copies of each shard R, 1..5 and at most --servers (a primary and R-1 backups, on distinct zones "
              "when there are enough); fixed for the life of the data dir (default 3, or --servers when fewer)");
DEFINE_uint32(heartbeat_interval_ms, 500, "milliseconds between a server's heartbeats (default 500)");
DEFINE_uint32(heartbeat_timeout_ms, 3000, "milliseconds without a heartbeat before a server is DOWN (default 3000)");
DEFINE_uint32(lease_ms, 1000,
              "lease granted to servers (per heartbeat) and clients (per RenewLease), 100..60000 and at most "
              "--heartbeat_timeout_ms; a DOWN primary's shards move to a backup lease_ms * 1.01 + 50 ms after it "
              "is fenced (default 1000)");
DEFINE_uint32(replace_after_ms, 30000,
              "milliseconds a server may stay DOWN before its backup and syncing roles go to other servers, which "
              "catch up from each shard's primary; 0 = never (a server is replaced only by a drain); at most "
              "604800000 (7 days); counted from when this coordinator saw it go DOWN or started (default 30000)");
DEFINE_uint32(suspect_after_ms, 0,
              "milliseconds of heartbeat silence after which a server is probed (its admin Health) and, when it "
              "does not answer within --probe_timeout_ms and no heartbeat comes meanwhile, marked DOWN before "
              "--heartbeat_timeout_ms; above the period servers heartbeat at (the shorter of "
              "--heartbeat_interval_ms and --lease_ms / 3) and below --heartbeat_timeout_ms; 0 = never (default: "
              "twice that period + 50 ms, 716 with the other defaults)");
DEFINE_string(metrics_listen, "", "HOST:PORT of GET /metrics (Prometheus text format, for scraping); port 0 picks a "
              "free one, logged as \"metrics on http://HOST:PORT/metrics\" (default empty: no metrics endpoint)");
DEFINE_uint32(probe_timeout_ms, 400, "milliseconds a probe of a suspected server waits for its answer, 10..10000 "
              "(default 400)");
DEFINE_string(tls_cert, "", "PEM certificate chain the coordinator presents (to clients and servers, and to "
              "servers' Admin services when it probes them); with --tls_key and --tls_ca, all three or none; files "
              "re-read every 5 s for rotation (default empty: plain gRPC)");
DEFINE_string(tls_key, "", "PEM private key of --tls_cert (default empty: plain gRPC)");
DEFINE_string(tls_ca, "", "PEM CA bundle that servers' and clients' certificates are verified against (default "
              "empty: plain gRPC)");

namespace {

int BadFlag(const std::string& message) {
  std::cerr << "rkv-coordinator: " << message << "\n";
  return 2;
}

int CannotStart(const rkv::Status& status) {
  std::cerr << "rkv-coordinator: " << status << "\n";
  return 1;
}

// --export_state / --import_state: moves the state between a store and a
// file, then exits (0 on success, 1 when it cannot).
int TransferState(const rkv::coordinator::CoordinatorConfig& config, const std::vector<std::string>& etcd_endpoints) {
  std::unique_ptr<rkv::etcd::EtcdClient> etcd;
  std::unique_ptr<rkv::coordinator::StateStore> store;
  std::string where;
  if (!etcd_endpoints.empty()) {
    auto client = rkv::etcd::EtcdClient::Create(etcd_endpoints);
    if (!client.ok()) return CannotStart(client.status());
    etcd = std::move(client).value();
    auto etcd_store = std::make_unique<rkv::coordinator::EtcdStateStore>(etcd.get(), FLAGS_etcd_prefix);
    if (!FLAGS_import_state.empty()) etcd_store->SetImportOnly();
    store = std::move(etcd_store);
    where = "etcd " + FLAGS_etcd + " prefix " + FLAGS_etcd_prefix;
  } else {
    // Opening would create a missing data dir: an export names it instead
    // of leaving an empty store behind.
    struct stat st {};
    if (!FLAGS_export_state.empty() && ::stat(FLAGS_data_dir.c_str(), &st) != 0) {
      return CannotStart(rkv::PosixError("--data_dir " + FLAGS_data_dir + ": nothing to export", errno));
    }
    auto opened = rkv::coordinator::OpenRocksDbStateStore(FLAGS_data_dir);
    if (!opened.ok()) return CannotStart(opened.status());
    store = std::move(opened).value();
    where = "data dir " + FLAGS_data_dir;
  }
  if (!FLAGS_export_state.empty()) {
    auto done = rkv::coordinator::ExportState(*store, FLAGS_export_state);
    if (!done.ok()) return CannotStart(done.status().WithContext("exporting from " + where));
    std::cout << "exported map version " << done->map_version << " (" << done->servers << " servers) from " << where
              << " to " << FLAGS_export_state << std::endl;
    return 0;
  }
  auto done = rkv::coordinator::ImportState(config, FLAGS_import_state, *store);
  if (!done.ok()) return CannotStart(done.status().WithContext("importing into " + where));
  std::cout << "imported map version " << done->map_version << " (" << done->servers << " servers) from "
            << FLAGS_import_state << " into " << where << std::endl;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // SIGTERM, SIGINT and SIGHUP are taken by sigwait below, by the main
  // thread alone.
  const sigset_t signals = rkv::BlockDaemonSignals({SIGTERM, SIGINT, SIGHUP});
  FLAGS_logtostderr = true;
  gflags::SetUsageMessage("rkv-coordinator (--data_dir=DIR | --etcd=HOST:PORT,... [--etcd_prefix=/P/]) --token_file=FILE [--cluster_token_file=FILE | --server_credentials_file=FILE] [--operator_token_file=FILE] [--listen=HOST:PORT] [--servers=N] [--replicas=R] [--lease_ms=MS] [--replace_after_ms=MS] ...");
  rkv::ParseProgramFlags(&argc, &argv, __FILE__);
  google::InitGoogleLogging(argv[0]);
  if (argc > 1) return BadFlag(std::string("unexpected argument '") + argv[1] + "'");
  const bool use_etcd = !FLAGS_etcd.empty();
  if (FLAGS_data_dir.empty() && !use_etcd) return BadFlag("--data_dir or --etcd is required");
  if (!FLAGS_data_dir.empty() && use_etcd) {
    return BadFlag("--data_dir and --etcd are exclusive: the cluster's state lives in one of them (a data dir for "
                   "a single coordinator, etcd for several). To move it, stop the coordinators, then run "
                   "rkv-coordinator --data_dir=DIR --export_state=FILE and rkv-coordinator --etcd=ENDPOINTS "
                   "--import_state=FILE (or the reverse)");
  }
  if (!FLAGS_export_state.empty() && !FLAGS_import_state.empty()) {
    return BadFlag("--export_state and --import_state are exclusive");
  }
  if (!use_etcd) {
    for (const char* flag : {"etcd_prefix", "advertise", "election_ttl_s", "etcd_wait_s"}) {
      gflags::CommandLineFlagInfo info;
      if (gflags::GetCommandLineFlagInfo(flag, &info) && !info.is_default) {
        return BadFlag(std::string("--") + flag + " applies only with --etcd");
      }
    }
  }
  std::vector<std::string> etcd_endpoints;
  if (use_etcd) {
    std::stringstream list(FLAGS_etcd);
    for (std::string endpoint; std::getline(list, endpoint, ',');) {
      if (rkv::Status s = rkv::control::ValidateHostPort(endpoint, /*allow_port_zero=*/false); !s.ok()) {
        return BadFlag("--etcd: '" + endpoint + "': " + s.message());
      }
      etcd_endpoints.push_back(endpoint);
    }
    if (rkv::Status s = rkv::coordinator::ValidateEtcdPrefix(FLAGS_etcd_prefix); !s.ok()) return BadFlag(s.message());
    if (FLAGS_election_ttl_s < 1 || FLAGS_election_ttl_s > 60) {
      return BadFlag("--election_ttl_s " + std::to_string(FLAGS_election_ttl_s) + " is outside [1, 60]");
    }
    if (!FLAGS_advertise.empty()) {
      if (rkv::Status s = rkv::control::ValidateHostPort(FLAGS_advertise, /*allow_port_zero=*/false); !s.ok()) {
        return BadFlag("--advertise: " + s.message());
      }
    } else if (FLAGS_listen.starts_with("0.0.0.0:") || FLAGS_listen.starts_with("[::]:")) {
      return BadFlag("--advertise is required with --etcd when --listen binds every interface: servers and clients "
                     "need an address they can reach");
    }
  }
  const bool transfer = !FLAGS_export_state.empty() || !FLAGS_import_state.empty();
  if (FLAGS_token_file.empty() && !transfer) return BadFlag("--token_file is required");
  if (rkv::Status s = rkv::control::ValidateHostPort(FLAGS_listen, /*allow_port_zero=*/true); !s.ok()) {
    return BadFlag("--listen: " + s.message());
  }
  if (!FLAGS_metrics_listen.empty()) {
    if (rkv::Status s = rkv::control::ValidateHostPort(FLAGS_metrics_listen, /*allow_port_zero=*/true); !s.ok()) {
      return BadFlag("--metrics_listen: " + s.message());
    }
    if (FLAGS_metrics_listen == FLAGS_listen && !FLAGS_listen.ends_with(":0")) {
      return BadFlag("--metrics_listen " + FLAGS_metrics_listen + " is the same address as --listen");
    }
  }
  const rkv::control::TlsFiles tls{FLAGS_tls_cert, FLAGS_tls_key, FLAGS_tls_ca};
  if (rkv::Status s = rkv::control::CheckServerTlsFiles(tls); !s.ok()) return BadFlag(s.message());
  rkv::coordinator::CoordinatorConfig config;
  config.shard_count = FLAGS_shards;
  config.expected_servers = FLAGS_servers;
  // Not given: 3, or N when the cluster is smaller; given: exactly that.
  gflags::CommandLineFlagInfo replicas_flag;
  const bool replicas_given = gflags::GetCommandLineFlagInfo("replicas", &replicas_flag) && !replicas_flag.is_default;
  if (replicas_given && FLAGS_replicas == 0) return BadFlag("--replicas 0 is outside [1, 5]");
  config.replicas = replicas_given ? FLAGS_replicas : 0;
  config.heartbeat_interval = std::chrono::milliseconds(FLAGS_heartbeat_interval_ms);
  config.heartbeat_timeout = std::chrono::milliseconds(FLAGS_heartbeat_timeout_ms);
  config.lease = std::chrono::milliseconds(FLAGS_lease_ms);
  config.replace_after = std::chrono::milliseconds(FLAGS_replace_after_ms);
  config.probe_timeout = std::chrono::milliseconds(FLAGS_probe_timeout_ms);
  gflags::CommandLineFlagInfo suspect_flag;
  if (gflags::GetCommandLineFlagInfo("suspect_after_ms", &suspect_flag) && !suspect_flag.is_default) {
    config.suspect_after = std::chrono::milliseconds(FLAGS_suspect_after_ms);
  } else {
    // Two heartbeats missed; off when that reaches the timeout anyway.
    const auto automatic = 2 * rkv::coordinator::ServerHeartbeatPeriod(config) + std::chrono::milliseconds(50);
    config.suspect_after = automatic < config.heartbeat_timeout ? automatic : std::chrono::milliseconds(0);
  }
  if (rkv::Status s = rkv::coordinator::ValidateConfig(config); !s.ok()) return BadFlag(s.message());

  if (!FLAGS_export_state.empty() || !FLAGS_import_state.empty()) return TransferState(config, etcd_endpoints);

  auto token = rkv::ReadTokenFile(FLAGS_token_file);
  if (!token.ok()) return CannotStart(token.status().WithContext("--token_file"));
  std::string cluster_token;
  if (!FLAGS_cluster_token_file.empty()) {
    auto read = rkv::ReadTokenFile(FLAGS_cluster_token_file);
    if (!read.ok()) return CannotStart(read.status().WithContext("--cluster_token_file"));
    if (*read == *token) {
      return BadFlag("--cluster_token_file holds the client token: the cluster credential must be one no client "
                     "holds");
    }
    cluster_token = std::move(read).value();
  } else if (FLAGS_server_credentials_file.empty()) {
    LOG(WARNING) << "no --cluster_token_file: the client token also serves the servers' role, so any client can act "
                    "as a server on the control plane (Join, Heartbeat, Leave, ReportReplicaFailure, "
                    "ReportCaughtUp in a server's name); give the coordinator the servers' --cluster_token_file "
                    "(docs/design.md §10)";
  }

  std::string operator_token;
  if (!FLAGS_operator_token_file.empty()) {
    auto read = rkv::ReadTokenFile(FLAGS_operator_token_file);
    if (!read.ok()) return CannotStart(read.status().WithContext("--operator_token_file"));
    if (*read == *token || *read == cluster_token) {
      return BadFlag("--operator_token_file holds the client token or the cluster credential: the operator "
                     "credential must be one of its own");
    }
    operator_token = std::move(read).value();
  } else {
    LOG(WARNING) << "no --operator_token_file: any client can Drain and Forget servers; give the coordinator an "
                    "operator credential for kvctl drain and forget (docs/design.md §10)";
  }

  // The client credentials: --token_file's, named "token", and the file's;
  // SIGHUP re-reads the file (below).
  // The per-server credentials: the servers' role with identity bound
  // (coordinator_state.h, "Identity binding").
  std::shared_ptr<const rkv::ClientCredentials> server_credentials;
  if (!FLAGS_server_credentials_file.empty()) {
    if (!FLAGS_cluster_token_file.empty()) {
      return BadFlag("--server_credentials_file and --cluster_token_file are two ways to give the servers' role: "
                     "give one");
    }
    auto read = rkv::ClientCredentials::ReadFile(FLAGS_server_credentials_file);
    if (!read.ok()) return CannotStart(read.status().WithContext("--server_credentials_file"));
    for (const std::string* other : {&*token, &operator_token}) {
      if (!other->empty() && read->Holds(*other)) {
        return BadFlag("--server_credentials_file holds the client token or the operator credential: each server "
                       "credential must be one of its own");
      }
    }
    server_credentials = std::make_shared<const rkv::ClientCredentials>(std::move(read).value());
    LOG(INFO) << "servers' role: " << server_credentials->size() << " per-server credentials from "
              << FLAGS_server_credentials_file << " (server ids bound to them)";
  }

  const std::vector<std::string> other_roles = {cluster_token, operator_token};
  auto loaded =
      rkv::LoadClientCredentials(*token, FLAGS_client_credentials_file, other_roles, server_credentials.get());
  if (!loaded.ok()) return CannotStart(loaded.status().WithContext("--client_credentials_file"));
  auto client_credentials = std::make_shared<rkv::LiveClientCredentials>(std::move(loaded).value());

  std::unique_ptr<rkv::coordinator::EtcdCoordinator> shared;
  std::unique_ptr<rkv::coordinator::CoordinatorState> state;
  if (use_etcd) {
    rkv::coordinator::EtcdCoordinatorOptions options;
    options.endpoints = etcd_endpoints;
    options.prefix = FLAGS_etcd_prefix;
    options.election_ttl_s = FLAGS_election_ttl_s;
    options.connect_wait = std::chrono::seconds(FLAGS_etcd_wait_s);
    auto opened = rkv::coordinator::EtcdCoordinator::Open(config, std::move(options));
    if (!opened.ok()) return CannotStart(opened.status());
    shared = std::move(opened).value();
    state = shared->TakeState();
  } else {
    auto store = rkv::coordinator::OpenRocksDbStateStore(FLAGS_data_dir);
    if (!store.ok()) return CannotStart(store.status());
    auto opened = rkv::coordinator::CoordinatorState::Open(config, std::move(store).value());
    if (!opened.ok()) return CannotStart(opened.status());
    state = std::move(opened).value();
  }
  auto server = rkv::coordinator::CoordinatorServer::Start(FLAGS_listen, *token, std::move(state), shared.get(),
                                                           cluster_token, operator_token, client_credentials,
                                                           server_credentials, tls);
  if (!server.ok()) return CannotStart(server.status());
  if (shared != nullptr) shared->StartCampaign(FLAGS_advertise.empty() ? (*server)->address() : FLAGS_advertise);
  std::unique_ptr<rkv::metrics::MetricsEndpoint> metrics;
  if (!FLAGS_metrics_listen.empty()) {
    rkv::coordinator::CoordinatorServer* const coordinator = server->get();
    auto started = rkv::metrics::MetricsEndpoint::Start(FLAGS_metrics_listen, [coordinator] {
      return coordinator->Metrics();
    });
    if (!started.ok()) {
      if (shared != nullptr) shared->Stop();
      (*server)->Shutdown();
      return CannotStart(started.status().WithContext("--metrics_listen"));
    }
    metrics = std::move(started).value();
    LOG(INFO) << "metrics on http://" << metrics->address() << "/metrics";
  }

  std::cout << "rkv-coordinator listening on " << (*server)->address() << std::endl;  // flushed
  LOG(INFO) << "rkv-coordinator serving on " << (*server)->address() << ": " << config.expected_servers
            << " servers, " << config.shard_count << " shards, " << rkv::coordinator::EffectiveReplicas(config)
            << " replicas, heartbeat " << config.heartbeat_interval.count()
            << " ms, timeout " << config.heartbeat_timeout.count() << " ms, lease " << config.lease.count()
            << " ms, replace after " << config.replace_after.count() << " ms, suspect after "
            << config.suspect_after.count() << " ms (probe " << config.probe_timeout.count() << " ms)";

  // SIGHUP re-reads the client credentials: what changed is logged at
  // INFO, a bad file at ERROR (the credentials in force stay).
  int signal_number = 0;
  for (;;) {
    sigwait(&signals, &signal_number);
    if (signal_number != SIGHUP) break;
    if (FLAGS_client_credentials_file.empty()) {
      LOG(INFO) << "SIGHUP: no --client_credentials_file, nothing to reload";
      continue;
    }
    const auto change =
        client_credentials->Reload(*token, FLAGS_client_credentials_file, other_roles, server_credentials.get());
    if (!change.ok()) {
      LOG(ERROR) << "SIGHUP: --client_credentials_file " << FLAGS_client_credentials_file
                 << " refused, the client credentials in force stay: " << change.status();
    } else {
      LOG(INFO) << "SIGHUP: client credentials reloaded from " << FLAGS_client_credentials_file << ": "
                << rkv::DescribeChange(*change);
    }
  }
  LOG(INFO) << "signal " << signal_number << ": shutting down";
  // The metrics endpoint reads the server: it stops first. A leader then
  // resigns, so that a standby takes over at once.
  if (metrics) metrics->Stop();
  if (shared != nullptr) shared->Stop();
  (*server)->Shutdown();
  LOG(INFO) << "rkv-coordinator stopped";
  return 0;
}
