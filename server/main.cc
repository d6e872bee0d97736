// rkv-server: serves one hash table over a transport, with RocksDB as its
// durable copy. See server/server.h.
//
// With --coordinator the server also joins the cluster (server/membership.h)
// and serves the Admin service; the Join runs on its own thread, so the
// data plane serves clients whether or not the coordinator is reachable.
// It then follows the cluster map, from which its replication policy
// (server/replication/map_policy.h) reads this server's role in each shard: until a map
// assigns the shards and lists this incarnation, writes are refused with
// UNAVAILABLE.
//
// Stdout: "rkv-server listening on HOST:PORT (transport T, epoch E, K keys)"
// once the data plane listens, then, when the server has an identity
// (--coordinator or --admin_listen), "rkv-server id ID admin HOST:PORT"
// ("admin none" without the Admin service).
//
// With --metrics_listen it serves GET /metrics in the Prometheus text
// format (server/server_metrics.h) and logs "metrics on
// http://HOST:PORT/metrics" at INFO once it listens.
//
// SIGHUP re-reads --client_credentials_file (docs/design.md §10): a good
// file is put in force at once (logged at INFO with the names added and
// removed), a bad one is logged at ERROR and changes nothing.
//
// Exit codes: 0 after SIGTERM/SIGINT and a clean shutdown (which first
// leaves the cluster); 1 when the server cannot start (data directory,
// memory, transport, listen, Admin service, metrics endpoint) or the
// coordinator refuses it for good (wrong token, cluster full); 2 for a bad
// flag.

#include <atomic>
#include <csignal>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <system_error>
#include <thread>

#include <gflags/gflags.h>
#include <glog/logging.h>
#include <pthread.h>
#include <sys/resource.h>
#include <unistd.h>

#include "common/layout.h"
#include "common/metrics/metrics_endpoint.h"
#include "common/mutex.h"
#include "common/net_address.h"
#include "common/client_credentials.h"
#include "common/daemon_signals.h"
#include "common/program_help.h"
#include "common/token.h"
#include "common/transport/factory.h"
#include "common/transport/transport.h"
#include "proto/tls.h"
#include "server/admin_service.h"
#include "server/replication/catchup.h"
#include "server/replication/map_policy.h"
#include "server/membership.h"
#include "server/options.h"
#include "server/replication/replica_service.h"
#include "server/server.h"
#include "server/server_metrics.h"

DEFINE_string(listen, "127.0.0.1:7700", "HOST:PORT to listen on; port 0 picks a free port (default 127.0.0.1:7700)");
DEFINE_string(data_dir, "", "directory of the RocksDB durable copy, created if missing (required)");
DEFINE_string(memory, "256M", "heap region size in bytes; suffixes K, M, G, T (default 256M)");
DEFINE_uint64(max_keys, 1048576, "number of keys the table is sized for (default 1048576)");
DEFINE_string(durability, "wal", "none (survives a clean shutdown only; RocksDB is written by a background thread, "
              "off the request path) | wal (survives a process crash) | sync (survives power loss) (default wal)");
DEFINE_string(write_back_bytes, "", "--durability=none only: acknowledged writes held in memory before a PUT waits "
              "for RocksDB (bytes of keys and values, and one key per KiB), at most what a process crash loses; the writer "
              "starts at half; 64K..1G, suffixes K, M, G (default 64M)");
DEFINE_string(poll, "adaptive", "how the polling threads wait for requests: adaptive (spin while requests "
              "come, sleep when idle) | busy (never sleep: lowest latency, one CPU per polling thread, also "
              "when idle) (default adaptive)");
DEFINE_uint32(threads, 0, "polling threads serving the data plane's connections, 1..256; in a cluster one of them "
                          "serves the other servers' replication connections (two threads when this is 1) "
                          "(default 0: one per CPU this process may run on)");
DEFINE_uint32(max_value_bytes, 1048576, "largest value in bytes (default 1048576; at most 4063232)");
DEFINE_uint32(max_key_bytes, 1024, "largest key in bytes (default 1024; at most 65535)");
DEFINE_string(token_file, "", "file holding the token clients must present, a client credential named \"token\" "
                              "that only a restart changes (required)");
DEFINE_string(client_credentials_file, "",
              "file of more client credentials, valid beside --token_file's: one \"NAME TOKEN\" a line (NAME: 1 "
              "to 64 of [A-Za-z0-9._-], shown in logs and metrics), # comments; re-read on SIGHUP (a removed "
              "credential's connections are closed; a bad file changes nothing) (default: none)");
DEFINE_string(cluster_token_file, "", "file holding the cluster credential the servers of a cluster present to "
                                      "each other (replication connections and the Replica service) and to the "
                                      "coordinator (every call); every server of the cluster and every "
                                      "rkv-coordinator (its --cluster_token_file) must be given the same one and no "
                                      "client may hold it (default: none; the client token then serves both, with "
                                      "a warning)");
DEFINE_string(server_credentials_file, "",
              "file of per-server credentials, in place of --cluster_token_file: one \"NAME TOKEN\" a line, # "
              "comments, the same file on every server and on rkv-coordinator (its --server_credentials_file). "
              "This server presents the credential --server_credential_name names wherever it would present the "
              "cluster credential (coordinator calls, replication connections, catch-up fetches) and accepts any "
              "credential of the file from peers; the coordinator binds this server's id to that name, so it "
              "cannot act as another server (default: none)");
DEFINE_string(server_credential_name, "",
              "with --server_credentials_file: the NAME of this server's own credential in it (required with the "
              "file)");
DEFINE_string(operator_token_file, "",
              "file holding the operator credential (the coordinator's --operator_token_file): with it, only that "
              "credential may call the Admin service's replica verification and listings (kvctl verify), the "
              "client token gets PERMISSION_DENIED; it must differ from the other two (default: none; the client "
              "token then serves them)");
DEFINE_string(transport, "auto", "auto | tcp | verbs; auto picks verbs when an RDMA port is active (default auto)");
DEFINE_int32(gid_index, -1, "verbs: RoCE GID index, -1 picks one (default -1)");
DEFINE_string(ring_bytes, "4M", "staging ring per connection in bytes, >= 2x the largest block; suffixes K, M, G (default 4M)");
DEFINE_uint32(max_connections, 1024, "most client connections at once, at most 4096; more are refused. Each costs "
                                     "its staging ring (--ring_bytes), 8 KiB of messages and on tcp up to ~5 MiB of "
                                     "responses in flight: 1024 * (4M + 5M) = 9 GiB at worst (default 1024)");
DEFINE_uint32(handshake_timeout_ms, 5000, "tcp: a socket that has not completed connection setup in this many "
                                          "milliseconds is closed (default 5000)");
DEFINE_uint32(frame_timeout_ms, 30000, "tcp: a connection that leaves a frame incomplete, or reads none of the "
                                       "responses waiting for it, for this many milliseconds is closed (default 30000)");
DEFINE_uint32(idle_timeout_s, 600, "tcp: a connection that sends nothing for this many seconds is closed (clients "
                                   "reconnect by themselves); 0: never (default 600)");
DEFINE_uint32(probe_idle_ms, 10000, "a data-plane connection the server heard nothing from for this many "
                                    "milliseconds gets a probe (a zero-length READ the peer's transport answers); "
                                    "0: no probes (default 10000)");
DEFINE_uint32(probe_timeout_ms, 10000, "a connection whose probe fails or is not answered within this many "
                                       "milliseconds is released as dead (default 10000)");
DEFINE_uint32(max_refusals_per_source, 1000, "refused connection requests one source address may cause in a "
                                             "second before its further requests are refused without being "
                                             "checked until the second ends; 0: no limit (default 1000)");
DEFINE_uint32(listen_backlog, 128, "verbs: connection requests rdma_cm holds for the listener, 1..4096 "
                                   "(default 128)");
DEFINE_uint32(grace_period_ms, 100, "heap quarantine in milliseconds before a replaced block is reused; "
                                    "clients' GET lease is half of it (default 100)");

DEFINE_uint32(replication_timeout_ms, 1000, "how long a primary waits for a backup to acknowledge a forwarded "
              "write before it reports the backup to the coordinator, which takes it out of the shard's "
              "replica set, 1..60000 (default 1000)");
DEFINE_uint32(catchup_rate_mb_per_s, 16, "megabytes (10^6 bytes) of keys and values a server catching up on shards "
              "fetches per second from their primaries, all streams together, so that their clients keep their "
              "latency; 0 for no limit, at most 100000 (default 16)");
DEFINE_string(coordinator, "", "HOST:PORT of rkv-coordinator to join, or a comma-separated list of the "
              "cluster's coordinators (A,B,C: the server joins the leader and follows it when it changes); "
              "empty runs standalone (default empty)");
DEFINE_string(admin_listen, "", "HOST:PORT of the Admin gRPC service, port 0 picks a free one; default: none when "
                                "standalone, the --listen host with port 0 with --coordinator");
DEFINE_string(advertise_address, "", "HOST:PORT clients should use for the data plane (default: the address "
                                     "listened on; required with --coordinator when --listen is 0.0.0.0 or ::)");
DEFINE_string(zone, "", "failure domain of this server (rack, host, power feed): printable ASCII, at most 64 "
              "bytes; a shard's replicas go to distinct zones when there are enough; fixed for the life of the "
              "server id (default: none)");
DEFINE_string(metrics_listen, "", "HOST:PORT of GET /metrics (Prometheus text format, for scraping); port 0 picks a "
              "free one, logged as \"metrics on http://HOST:PORT/metrics\" (default empty: no metrics endpoint)");
DEFINE_string(tls_cert, "", "PEM certificate chain this server presents on the control plane (its Admin and "
              "Replica services, and to coordinators and other servers); with --tls_key and --tls_ca, all three "
              "or none; files re-read every 5 s for rotation (default empty: plain gRPC)");
DEFINE_string(tls_key, "", "PEM private key of --tls_cert (default empty: plain gRPC)");
DEFINE_string(tls_ca, "", "PEM CA bundle that coordinators', servers' and clients' certificates are verified "
              "against (default empty: plain gRPC)");
DEFINE_bool(data_plane_tls, false, "tcp transport: TLS on the data plane too, with --tls_cert and --tls_key "
            "(presented to clients) and --tls_ca (other servers' certificates verified against it when this server "
            "forwards writes or catches up): only TLS connections are taken, and clients need their "
            "--data_plane_tls with the CA; the verbs transport has no encryption (default false: plain tcp)");

namespace {

// The Join with the coordinator, run on its own thread so that neither the
// data plane nor the signal wait depend on the coordinator. A fatal refusal
// is kept for the main thread, which polls failed().
class JoinThread {
 public:
  explicit JoinThread(rkv::server::Membership* membership)
      : membership_(membership), thread_([this] { Run(); }) {}
  ~JoinThread() { Stop(); }
  JoinThread(const JoinThread&) = delete;
  JoinThread& operator=(const JoinThread&) = delete;

  bool failed() const { return failed_.load(std::memory_order_acquire); }
  // The refusal; meaningful once failed() is true.
  rkv::Status error() const EXCLUDES(mu_) {
    rkv::MutexLock lock(mu_);
    return error_;
  }
  // Aborts a Join still retrying, then sends Leave if joined (via
  // Membership::Stop), and joins the thread. Idempotent.
  void Stop() {
    membership_->Stop();
    if (thread_.joinable()) thread_.join();
  }

 private:
  void Run() EXCLUDES(mu_) {
    rkv::Status s = membership_->Start();
    if (s.ok() || s.code() == rkv::StatusCode::kCancelled) return;
    {
      rkv::MutexLock lock(mu_);
      error_ = std::move(s);
    }
    // Release: error_ is written before failed() reads true.
    failed_.store(true, std::memory_order_release);
  }

  rkv::server::Membership* const membership_;
  mutable rkv::Mutex mu_;
  rkv::Status error_ GUARDED_BY(mu_);
  std::atomic<bool> failed_{false};
  std::thread thread_;  // last: starts after the members it uses
};

// Each connection holds a socket and an eventfd (tcp) or a few verbs
// descriptors, and a socket in setup holds one more: raises the soft limit
// on open files to the hard one, and warns when even that is short of what
// `max_connections` needs.
void RaiseFileLimit(uint32_t max_connections) {
  rlimit lim{};
  if (::getrlimit(RLIMIT_NOFILE, &lim) != 0) return;
  if (lim.rlim_cur < lim.rlim_max) {
    lim.rlim_cur = lim.rlim_max;
    if (::setrlimit(RLIMIT_NOFILE, &lim) != 0) PLOG(WARNING) << "setrlimit(RLIMIT_NOFILE)";
    (void)::getrlimit(RLIMIT_NOFILE, &lim);
  }
  const uint64_t wanted = 4ULL * max_connections + 1024;
  if (lim.rlim_cur != RLIM_INFINITY && lim.rlim_cur < wanted) {
    LOG(WARNING) << "the open file limit " << lim.rlim_cur << " is below the ~" << wanted
                 << " that --max_connections " << max_connections << " needs; raise it (ulimit -n)";
  }
}

int BadFlag(const std::string& message) {
  std::cerr << "rkv-server: " << message << "\n";
  return 2;
}

// What Admin's ShardChecksums and ListShard read: the server's table and
// the map the membership follows, once `*source` is set (never without a
// coordinator). `*source` must outlive the Admin service.
rkv::server::AdminShards AdminShardsOf(const rkv::server::Server* srv,
                                       const std::atomic<const rkv::server::MapSource*>* source,
                                       const std::string& server_id) {
  rkv::server::AdminShards shards;
  shards.server_id = server_id;
  shards.applier = srv->applier();
  shards.map = [source]() -> std::shared_ptr<const rkv::v1::ClusterMap> {
    // Acquire: the membership is fully built before it is published.
    const rkv::server::MapSource* s = source->load(std::memory_order_acquire);
    return s != nullptr ? s->map() : nullptr;
  };
  return shards;
}

// SIGHUP: re-reads the client credentials; logs what changed at INFO, or
// at ERROR why the file was refused (the credentials in force stay).
void ReloadClientCredentials(rkv::LiveClientCredentials& live, const std::string& token, const std::string& path,
                             const std::vector<std::string>& other_roles, const rkv::ClientCredentials& servers) {
  if (path.empty()) {
    LOG(INFO) << "SIGHUP: no --client_credentials_file, nothing to reload";
    return;
  }
  const auto change = live.Reload(token, path, other_roles, &servers);
  if (!change.ok()) {
    LOG(ERROR) << "SIGHUP: --client_credentials_file " << path << " refused, the client credentials in force stay: "
               << change.status();
    return;
  }
  LOG(INFO) << "SIGHUP: client credentials reloaded from " << path << ": " << rkv::DescribeChange(*change);
}

}  // namespace

int main(int argc, char** argv) {
  // SIGTERM, SIGINT and SIGHUP are taken by sigtimedwait below, by the
  // main thread alone.
  const sigset_t signals = rkv::BlockDaemonSignals({SIGTERM, SIGINT, SIGHUP});
  FLAGS_logtostderr = true;
  gflags::SetUsageMessage("rkv-server --data_dir=DIR --token_file=FILE [--listen=HOST:PORT] ...");
  rkv::ParseProgramFlags(&argc, &argv, __FILE__);
  google::InitGoogleLogging(argv[0]);
  if (argc > 1) return BadFlag(std::string("unexpected argument '") + argv[1] + "'");

  using rkv::server::ParseByteSize;
  rkv::server::ServerOptions o;
  o.listen = FLAGS_listen;
  o.data_dir = FLAGS_data_dir;
  o.max_keys = FLAGS_max_keys;
  o.max_value_bytes = FLAGS_max_value_bytes;
  o.max_key_bytes = FLAGS_max_key_bytes;
  o.max_connections = FLAGS_max_connections;
  if (FLAGS_threads != 0) o.threads = FLAGS_threads;
  o.grace_period_ms = FLAGS_grace_period_ms;
  o.handshake_timeout_ms = FLAGS_handshake_timeout_ms;
  o.frame_timeout_ms = FLAGS_frame_timeout_ms;
  o.idle_timeout_s = FLAGS_idle_timeout_s;
  o.probe_idle_ms = FLAGS_probe_idle_ms;
  o.probe_timeout_ms = FLAGS_probe_timeout_ms;
  o.max_refusals_per_source = FLAGS_max_refusals_per_source;
  o.listen_backlog = FLAGS_listen_backlog;
  o.replication_timeout_ms = FLAGS_replication_timeout_ms;
  o.catchup_rate_mb_per_s = FLAGS_catchup_rate_mb_per_s;
  {
    auto memory = ParseByteSize(FLAGS_memory);
    if (!memory.ok()) return BadFlag("--memory: " + memory.status().message());
    o.memory_bytes = *memory;
    auto ring = ParseByteSize(FLAGS_ring_bytes);
    if (!ring.ok()) return BadFlag("--ring_bytes: " + ring.status().message());
    o.ring_bytes = *ring;
    if (!FLAGS_write_back_bytes.empty()) {
      auto write_back = ParseByteSize(FLAGS_write_back_bytes);
      if (!write_back.ok()) return BadFlag("--write_back_bytes: " + write_back.status().message());
      if (*write_back == 0) return BadFlag("--write_back_bytes: must be at least 64K");
      o.write_back_bytes = *write_back;
    }
    auto durability = rkv::server::ParseDurability(FLAGS_durability);
    if (!durability.ok()) return BadFlag("--durability: " + durability.status().message());
    o.durability = *durability;
    auto poll = rkv::server::ParsePollMode(FLAGS_poll);
    if (!poll.ok()) return BadFlag("--poll: " + poll.status().message());
    o.poll = *poll;
  }
  if (FLAGS_data_dir.empty()) return BadFlag("--data_dir is required");
  if (FLAGS_token_file.empty()) return BadFlag("--token_file is required");
  if (FLAGS_gid_index < -1) return BadFlag("--gid_index must be -1 or a GID table index");
  std::string why;
  auto kind = rkv::transport::ResolveKind(FLAGS_transport, &why);
  if (!kind.ok()) return BadFlag("--transport: " + kind.status().message());
  auto token = rkv::ReadTokenFile(FLAGS_token_file);
  if (!token.ok()) return BadFlag("--token_file: " + token.status().ToString());
  o.token = *token;
  o.token.shrink_to_fit();
  if (!FLAGS_cluster_token_file.empty()) {
    auto cluster_token = rkv::ReadTokenFile(FLAGS_cluster_token_file);
    if (!cluster_token.ok()) return BadFlag("--cluster_token_file: " + cluster_token.status().ToString());
    if (*cluster_token == o.token) {
      return BadFlag("--cluster_token_file holds the client token: the cluster credential must be one no client "
                     "holds");
    }
    o.cluster_token = *cluster_token;
    o.cluster_token.shrink_to_fit();
  }
  if (!FLAGS_server_credentials_file.empty()) {
    if (!FLAGS_cluster_token_file.empty()) {
      return BadFlag("--server_credentials_file and --cluster_token_file are two ways to give the servers' "
                     "credential: give one");
    }
    if (FLAGS_server_credential_name.empty()) {
      return BadFlag("--server_credentials_file needs --server_credential_name: the NAME of this server's own "
                     "credential in the file");
    }
    auto read = rkv::ClientCredentials::ReadFile(FLAGS_server_credentials_file, FLAGS_server_credential_name,
                                                 &o.cluster_token);
    if (!read.ok()) return BadFlag("--server_credentials_file: " + read.status().message());
    o.server_credentials = std::move(read).value();
    o.server_credential_name = FLAGS_server_credential_name;
  } else if (!FLAGS_server_credential_name.empty()) {
    return BadFlag("--server_credential_name needs --server_credentials_file");
  }
  std::string operator_token;
  if (!FLAGS_operator_token_file.empty()) {
    auto read = rkv::ReadTokenFile(FLAGS_operator_token_file);
    if (!read.ok()) return BadFlag("--operator_token_file: " + read.status().ToString());
    if (*read == o.token || *read == o.cluster_token || o.server_credentials.Holds(*read)) {
      return BadFlag("--operator_token_file holds the client token, the cluster credential or a server "
                     "credential: the operator credential must be one of its own");
    }
    operator_token = std::move(read).value();
  }
  // The client credentials: --token_file's, named "token", and the file's;
  // SIGHUP re-reads the file (below).
  const std::vector<std::string> other_roles = {o.cluster_token, operator_token};
  auto loaded =
      rkv::LoadClientCredentials(o.token, FLAGS_client_credentials_file, other_roles, &o.server_credentials);
  if (!loaded.ok()) return BadFlag("--client_credentials_file: " + loaded.status().message());
  auto client_credentials = std::make_shared<rkv::LiveClientCredentials>(std::move(loaded).value());
  if (rkv::Status s = rkv::server::ValidateOptions(o); !s.ok()) return BadFlag(s.message());
  rkv::server::ControlOptions control;
  control.coordinator = FLAGS_coordinator;
  control.admin_listen = FLAGS_admin_listen;
  control.advertise_address = FLAGS_advertise_address;
  control.zone = FLAGS_zone;
  control.metrics_listen = FLAGS_metrics_listen;
  if (rkv::Status s = rkv::server::ValidateControlOptions(control, o.listen); !s.ok()) return BadFlag(s.message());
  const std::string admin_listen = rkv::server::EffectiveAdminListen(control, o.listen);
  // TLS on the control plane: the Admin and Replica services, and this
  // server's calls to the coordinators and to primaries' Replica services.
  const rkv::control::TlsFiles tls{FLAGS_tls_cert, FLAGS_tls_key, FLAGS_tls_ca};
  if (rkv::Status s = rkv::control::CheckServerTlsFiles(tls); !s.ok()) return BadFlag(s.message());
  if (FLAGS_data_plane_tls) {
    if (tls.empty()) return BadFlag("--data_plane_tls needs --tls_cert, --tls_key and --tls_ca");
    if (*kind != rkv::transport::Kind::kTcp) {
      return BadFlag("--data_plane_tls needs --transport=tcp: RDMA has no encryption (docs/design.md §10: a "
                     "separate network, IPsec or MACsec)");
    }
  }
  if (!tls.empty() && admin_listen.empty() && !FLAGS_data_plane_tls) {
    return BadFlag("--tls_cert, --tls_key and --tls_ca secure the control plane, which a server alone does not "
                   "serve: pass --coordinator or --admin_listen, or --data_plane_tls for the data plane");
  }
  auto tls_channels = rkv::control::MakeChannelCredentials(tls);
  if (!tls_channels.ok()) return BadFlag(tls_channels.status().message());

  // The data directory: created if missing, and it must be a writable
  // directory.
  std::error_code ec;
  std::filesystem::create_directories(o.data_dir, ec);
  if (ec || !std::filesystem::is_directory(o.data_dir) || ::access(o.data_dir.c_str(), W_OK | X_OK) != 0) {
    std::cerr << "rkv-server: --data_dir " << o.data_dir << " is not a usable directory"
              << (ec ? ": " + ec.message() : std::string()) << "\n";
    return 1;
  }

  LOG(INFO) << why;
  rkv::transport::Options topts;
  topts.gid_index = FLAGS_gid_index;
  topts.poll_spin_us = rkv::server::PollSpinUs(o.poll);
  topts.handshake_timeout = std::chrono::milliseconds(o.handshake_timeout_ms);
  topts.frame_timeout = std::chrono::milliseconds(o.frame_timeout_ms);
  topts.idle_timeout = std::chrono::seconds(o.idle_timeout_s);
  topts.max_refusals_per_source = o.max_refusals_per_source;
  topts.listen_backlog = o.listen_backlog;
  if (FLAGS_data_plane_tls) topts.tls = {FLAGS_tls_cert, FLAGS_tls_key, FLAGS_tls_ca};
  // Queue depths for what this process posts: a client connection holds at
  // most request_credits receives and as many replies (each signaled), a
  // replication connection one request and one receive. Small queues keep a
  // poll group's completion queues small (docs/design.md §7.7: on rxe, whose
  // completion queues hold 32767 entries, a group holds 511 connections at
  // the default 32 credits, where the transport's default depths allow 127).
  topts.max_send_wr = rkv::server::ServerSendDepth(o);
  topts.max_recv_wr = rkv::server::ServerRecvDepth(o);
  RaiseFileLimit(o.max_connections);
  auto transport = rkv::transport::CreateTransport(*kind, topts);
  if (!transport.ok()) {
    std::cerr << "rkv-server: creating the " << rkv::transport::KindName(*kind)
              << " transport failed: " << transport.status() << "\n";
    return 1;
  }
  // The policy exists before the data plane, which keeps a pointer to it;
  // the membership it reads is attached once the server has an identity.
  std::optional<rkv::server::MapPolicy> policy;
  if (!control.coordinator.empty()) policy.emplace();
  if (!o.server_credential_name.empty()) {
    LOG(INFO) << "server credential " << o.server_credential_name << " (one of " << o.server_credentials.size()
              << " in " << FLAGS_server_credentials_file << ", each accepted from peers)";
  }
  if (!control.coordinator.empty() && o.cluster_token.empty()) {
    LOG(WARNING) << "no --cluster_token_file: the client token is also the cluster credential, so any client can "
                    "open a replication connection and forge a primary's writes; give the servers a credential "
                    "of their own (docs/design.md §10)";
  }
  // The server's id: its backups know it by it (replication handshake), and
  // the control plane announces it.
  std::string server_id;
  if (!control.coordinator.empty() || !admin_listen.empty()) {
    auto identity = rkv::server::ServerIdentity::LoadOrCreate(o.data_dir);
    if (!identity.ok()) {
      std::cerr << "rkv-server: loading the server id in " << o.data_dir << " failed: " << identity.status() << "\n";
      return 1;
    }
    server_id = identity->server_id;
  }
  // Standalone: no policy, every write is this server's alone.
  auto server = rkv::server::Server::Start(o, transport->get(), policy ? &*policy : nullptr,
                                           policy ? std::string_view(server_id) : std::string_view(),
                                           client_credentials);
  if (!server.ok()) {
    std::cerr << "rkv-server: " << server.status() << "\n";
    return 1;
  }
  rkv::server::Server* const srv = server->get();
  std::cout << "rkv-server listening on " << srv->address() << " (transport "
            << rkv::transport::KindName(*kind) << ", epoch " << srv->epoch() << ", "
            << srv->keys_at_start() << " keys)" << std::endl;
  if (FLAGS_data_plane_tls) {
    LOG(INFO) << "data plane: TLS 1.3 on tcp (certificate " << FLAGS_tls_cert << ")";
  } else if (*kind == rkv::transport::Kind::kTcp) {
    std::string data_host;
    uint16_t data_port = 0;
    if (rkv::ParseHostPort(srv->address(), &data_host, &data_port).ok() &&
        !rkv::control::IsLoopbackHost(data_host)) {
      LOG(WARNING) << "data plane on " << srv->address()
                   << " over tcp without TLS: values and keys cross the network in the clear (pass "
                      "--data_plane_tls with --tls_cert, --tls_key and --tls_ca; docs/design.md §10)";
    }
  }

  // Whatever fails below stops the data plane cleanly before exiting.
  const auto fail = [&](const std::string& message) {
    std::cerr << "rkv-server: " << message << std::endl;
    srv->Shutdown();
    return 1;
  };

  // The control plane: identity, Admin service, membership.
  // Catch-up (docs/design.md, "Catch-up"): in a cluster, the Replica
  // service beside Admin serves this server's shards to servers catching
  // up on them, and the fetcher catches this server up on its own.
  std::unique_ptr<rkv::server::ReplicaService> replica_service;
  std::unique_ptr<rkv::server::CatchUp> catch_up;
  if (!control.coordinator.empty() && !admin_listen.empty()) {
    auto created = rkv::server::ReplicaService::Create(rkv::server::PeerCredentials(o), srv->applier(),
                                                       o.max_key_bytes);
    if (!created.ok()) return fail("creating the Replica service failed: " + created.status().ToString());
    replica_service = std::move(*created);
    if (!tls.empty()) replica_service->RequirePeerCertificate();
  }
  // Where the Admin service and the metrics read the fetcher's counters:
  // null until the fetcher runs (it starts once the membership exists).
  auto catch_up_counters = std::make_shared<std::atomic<rkv::server::CatchUp*>>(nullptr);
  // The Admin service's refusals, once it runs.
  auto admin_counters = std::make_shared<std::atomic<const rkv::server::AdminServer*>>(nullptr);
  // The counters of Admin Stats and GET /metrics, read when asked.
  const auto read_counters = [srv, catch_up_counters, admin_counters, replica = replica_service.get()] {
    rkv::server::CounterSources sources;
    sources.server = srv->Stats();
    sources.heap_bytes = srv->heap_bytes();
    if (const rkv::server::CatchUp* c = catch_up_counters->load(std::memory_order_acquire)) {
      sources.catch_up = c->stats();
    }
    if (replica != nullptr) sources.catchup_records_served = replica->records_served();
    if (const rkv::server::AdminServer* a = admin_counters->load(std::memory_order_acquire)) {
      sources.admin_auth_failures = a->auth_failures();
    }
    return rkv::server::ServerCounters(sources);
  };
  // The Admin service reads the membership's map once it exists.
  std::atomic<const rkv::server::MapSource*> map_source{nullptr};
  std::unique_ptr<rkv::server::AdminServer> admin;
  std::string admin_address;
  std::string data_address;
  if (!control.coordinator.empty() || !admin_listen.empty()) {
    auto advertised = rkv::server::AdvertisedAddress(srv->address(), control.advertise_address, "");
    if (!advertised.ok() && !control.coordinator.empty()) {
      return fail("no data address to announce: " + advertised.status().ToString() +
                  " (pass --advertise_address=HOST:PORT)");
    }
    if (advertised.ok()) data_address = *advertised;
  }
  if (!admin_listen.empty()) {
    const uint64_t epoch = srv->epoch();
    std::vector<grpc::Service*> also;
    if (replica_service) also.push_back(replica_service.get());
    auto started = rkv::server::AdminServer::Start(admin_listen, client_credentials, [read_counters, server_id, epoch] {
      rkv::server::AdminStats a;
      a.server_id = server_id;
      a.epoch = epoch;
      a.serving = true;  // the data plane listens for as long as the Admin service runs
      a.counters = read_counters();
      return a;
    }, AdminShardsOf(srv, &map_source, server_id), also, operator_token, tls);
    if (!started.ok()) return fail("starting the Admin service on " + admin_listen + " failed: " + started.status().ToString());
    admin = std::move(*started);
    admin_counters->store(admin.get(), std::memory_order_release);
    // A wildcard admin host is announced with the data address's host.
    std::string data_host;
    uint16_t data_port = 0;
    if (!data_address.empty()) (void)rkv::ParseHostPort(data_address, &data_host, &data_port);
    auto advertised = rkv::server::AdvertisedAddress(admin->address(), "", data_host);
    admin_address = advertised.ok() ? *advertised : admin->address();
    if (!advertised.ok() && !control.coordinator.empty()) {
      admin->Shutdown();
      return fail("no Admin address to announce: " + advertised.status().ToString() +
                  " (pass --admin_listen=HOST:PORT)");
    }
  }
  // GET /metrics: the Admin counters and the map version, read per scrape.
  std::unique_ptr<rkv::metrics::MetricsEndpoint> metrics;
  if (!control.metrics_listen.empty()) {
    rkv::server::ServerMetricsInfo info;
    info.server_id = server_id;
    info.transport = rkv::transport::KindName(*kind);
    info.epoch = srv->epoch();
    info.table_slots = (uint64_t{1} << srv->bucket_count_log2()) * rkv::layout::kSlotsPerBucket;
    auto started = rkv::metrics::MetricsEndpoint::Start(control.metrics_listen, [read_counters, info, &map_source,
                                                                                 srv] {
      rkv::server::ServerMetricsInfo now = info;
      const rkv::server::Server::ApplyLatency latency = srv->apply_latency();
      now.client_apply = latency.client;
      now.replica_apply = latency.replica;
      now.connections_by_credential = srv->Stats().connections_by_credential;
      // Acquire: the membership is fully built before it is published.
      if (const rkv::server::MapSource* s = map_source.load(std::memory_order_acquire)) {
        if (const auto map = s->map()) now.map_version = map->version();
      }
      return rkv::server::ServerMetricFamilies(read_counters(), now);
    });
    if (!started.ok()) {
      if (admin) admin->Shutdown();
      return fail("--metrics_listen: " + started.status().message());
    }
    metrics = std::move(*started);
    LOG(INFO) << "metrics on http://" << metrics->address() << "/metrics";
  }
  if (!server_id.empty()) {
    std::cout << "rkv-server id " << server_id << " admin " << (admin ? admin_address : std::string("none"))
              << std::endl;
  }

  std::unique_ptr<rkv::server::Membership> membership;
  std::optional<JoinThread> join;
  if (!control.coordinator.empty()) {
    rkv::server::MembershipOptions m;
    m.coordinator_address = control.coordinator;
    // The servers' role on the control plane (Join, Heartbeat, Leave, the
    // reports) takes the cluster credential when the coordinator has one;
    // the map and leases take it too (docs/design.md §10).
    m.token = rkv::server::ClusterToken(o);
    m.tls = tls;
    m.self.server_id = server_id;
    m.self.epoch = srv->epoch();
    m.self.data_address = data_address;
    m.self.admin_address = admin_address;
    m.self.transport = rkv::transport::KindName(*kind);
    m.self.zone = control.zone;
    m.self.index = srv->index_region();
    m.self.heap = srv->heap_region();
    m.self.table.bucket_count_log2 = srv->bucket_count_log2();
    m.self.table.hash_seed = srv->hash_seed();
    m.self.table.heap_size = srv->heap_bytes();
    m.self.table.max_key_bytes = o.max_key_bytes;
    m.self.table.max_value_bytes = o.max_value_bytes;
    m.self.table.grace_period_us = uint64_t{o.grace_period_ms} * 1000;
    m.stats = [srv] {
      const rkv::server::ServerStats st = srv->Stats();
      return rkv::server::MembershipStats{st.keys, st.heap_bytes_used};
    };
    membership = std::make_unique<rkv::server::Membership>(std::move(m));
    policy->Attach(membership.get());
    map_source.store(membership.get(), std::memory_order_release);
    if (replica_service) {
      replica_service->Attach(membership.get());
      rkv::server::Membership* const mem = membership.get();
      rkv::server::CatchUpOptions c;
      c.token = rkv::server::ClusterToken(o);
      c.rate_bytes_per_s = uint64_t{o.catchup_rate_mb_per_s} * 1'000'000;
      c.credentials = *tls_channels;
      auto created = rkv::server::CatchUp::Create(
          mem, srv->applier(),
          [mem](const std::vector<rkv::v1::CaughtUpShard>& shards) {
            return mem->ReportCaughtUp(shards, std::chrono::seconds(5));
          },
          std::move(c));
      if (!created.ok()) {
        if (metrics) metrics->Stop();
        admin->Shutdown();
        return fail("starting catch-up failed: " + created.status().ToString());
      }
      catch_up = std::move(*created);
      catch_up->Start();
      catch_up_counters->store(catch_up.get(), std::memory_order_release);
    }
    join.emplace(membership.get());
  }

  // Wait for SIGTERM/SIGINT, or for the coordinator to refuse this server;
  // SIGHUP re-reads the client credentials (the data plane and the Admin
  // service read the set in force per request; the pollers close the
  // connections of a removed credential).
  int sig = 0;
  const timespec poll{0, 200'000'000};
  for (;;) {
    sig = sigtimedwait(&signals, nullptr, &poll);
    if (sig == SIGHUP) {
      ReloadClientCredentials(*client_credentials, o.token, FLAGS_client_credentials_file, other_roles,
                              o.server_credentials);
      continue;
    }
    if (sig > 0) break;
    if (join && join->failed()) break;
  }
  int rc = 0;
  if (sig > 0) {
    LOG(INFO) << "received signal " << sig << ", shutting down";
  } else {
    const rkv::Status why = join->error();
    std::cerr << "rkv-server: the coordinator (" << control.coordinator << ") refused this server: " << why;
    // The likely cause of a refused credential at start: the coordinator
    // was not given the same cluster credential (or this server none).
    if (why.code() == rkv::StatusCode::kUnauthenticated && !o.server_credential_name.empty()) {
      std::cerr << " (this server presents credential " << o.server_credential_name
                << " of its --server_credentials_file; give rkv-coordinator the same file with its "
                   "--server_credentials_file)";
    } else if (why.code() == rkv::StatusCode::kPermissionDenied && !o.server_credential_name.empty()) {
      std::cerr << " (this server's id, kept in its --data_dir, is bound to another server credential: give it "
                   "that one)";
    } else if (why.code() == rkv::StatusCode::kUnauthenticated && !o.cluster_token.empty()) {
      std::cerr << " (this server presents its --cluster_token_file; give rkv-coordinator the same file with "
                   "its --cluster_token_file)";
    } else if (why.code() == rkv::StatusCode::kPermissionDenied) {
      std::cerr << " (give this server the coordinator's --cluster_token_file)";
    }
    std::cerr << std::endl;
    rc = 1;
  }
  // The metrics endpoint first: it reads everything below. Then leave, so
  // that the coordinator marks this server DOWN before its data plane goes
  // away; then the Admin service, then the data plane. The
  // stopped membership outlives the data plane, whose policy still reads
  // its last map (and gets CANCELLED from anything that would reach the
  // coordinator).
  if (metrics) metrics->Stop();
  if (join) join->Stop();
  join.reset();
  // The fetcher uses the apply path: it stops before the data plane (and
  // is destroyed after the Admin service, which reads its counters).
  if (catch_up) catch_up->Stop();
  if (admin) admin->Shutdown();
  admin.reset();
  srv->Shutdown();
  server.value().reset();
  membership.reset();
  return rc;
}
