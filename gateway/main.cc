// rkv-gateway: serves Redis (RESP2) and memcached text-protocol clients on
// an rkv server or cluster, through one librkv Client (docs/design.md, the
// gateway's section).
//
// Exit codes: 0 after SIGTERM/SIGINT and a clean shutdown; 1 when it
// cannot start (a listen address taken, rkv unreachable, a refused token:
// the message says which); 2 for bad flags.
#include <gflags/gflags.h>
#include <glog/logging.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/daemon_signals.h"
#include "common/program_help.h"
#include "common/token.h"
#include "gateway/event_loop.h"
#include "gateway/listener.h"
#include "gateway/resp_session.h"
#include "gateway/rkv_round.h"
#include "rkv/client.h"
#ifdef RKV_GATEWAY_MEMCACHE
#include "gateway/memcache_session.h"
#endif

// The protocols.
DEFINE_string(redis_listen, "127.0.0.1:6380",
              "HOST:PORT for Redis (RESP2) clients (default 127.0.0.1:6380, beside a redis-server's 6379; "
              "empty: none)");
DEFINE_string(memcached_listen, "127.0.0.1:11212",
              "HOST:PORT for memcached text-protocol clients (default 127.0.0.1:11212, beside a memcached's "
              "11211; empty: none)");
DEFINE_bool(allow_flush, false,
            "memcached: allow flush_all, which hides every item the memcached side wrote before it, on every "
            "gateway of the cluster (default false: refused)");
DEFINE_string(requirepass, "",
              "Redis: clients must AUTH with this password before any other command (redis-server's "
              "requirepass; default empty: no AUTH needed unless --auth_with_token)");
DEFINE_bool(auth_with_token, false,
            "Redis: clients must AUTH with the rkv token of --token_file (or --requirepass's password when "
            "set) before any other command (default false)");

// The event loop.
DEFINE_int32(threads, 0,
             "event-loop threads, 1..1024; each has its own rkv client and executes its connections' rkv "
             "calls (default 0: one per CPU)");
DEFINE_int64(loop_spin_us, 1000,
             "how long a loop thread with nothing to do busy-polls its connections before it sleeps in "
             "epoll_wait, in microseconds, 0..1000000; the window adapts below this bound as rkv's transports' "
             "waits do (it shrinks to nothing when requests stop coming, so an idle gateway burns no CPU) and is "
             "skipped while the machine has more runnable threads than CPUs; 0 never spins (default 1000)");
DEFINE_uint64(max_clients, 10000,
              "most client connections at once, all protocols together; one more is answered the protocol's "
              "error and closed, 1..1000000 (default 10000)");
DEFINE_uint64(output_limit_bytes, 1 << 20,
              "unsent reply bytes at which a connection is no longer read until its client reads (default "
              "1048576)");
DEFINE_uint64(max_request_bytes, 64 << 20,
              "largest Redis request, framing included; raised to rkv's max value size + 1 MiB when smaller "
              "(default 67108864)");
DEFINE_uint64(max_batch, 32,
              "Redis: most consecutive pipelined GETs (plain SETs) executed as one MultiGet (MultiPut), 1..4096 "
              "(default 32)");
DEFINE_uint64(round_keys, 1024,
              "Redis: most GETs (and most plain SETs) of all a loop thread's connections executed as one "
              "MultiGet (MultiPut) per pass of the loop over its ready connections, 0..1000000; 0: each "
              "connection's run is its own rkv call (default 1024)");

// rkv, as kvctl names them.
DEFINE_string(server, "127.0.0.1:7700", "HOST:PORT of the rkv server's data plane (default 127.0.0.1:7700)");
DEFINE_string(coordinator, "",
              "HOST:PORT of the rkv-coordinator, or a comma-separated list of the cluster's coordinators: "
              "cluster mode (instead of --server)");
DEFINE_string(token_file, "", "file holding the access token (required)");
DEFINE_string(tls_ca, "", "cluster mode: PEM CA bundle the coordinators' and servers' certificates are verified "
              "against; turns TLS on for the control plane (default empty: plain gRPC)");
DEFINE_string(tls_cert, "", "cluster mode: PEM client certificate, with --tls_key and --tls_ca, for a cluster that "
              "checks clients' certificates (default empty: none)");
DEFINE_string(tls_key, "", "cluster mode: PEM private key of --tls_cert (default empty: none)");
DEFINE_bool(data_plane_tls, false, "TLS on rkv's data plane too (tcp; servers started with --data_plane_tls): "
            "server certificates verified against --tls_ca, which it needs (default false)");
DEFINE_string(transport, "auto", "data-plane transport: auto, tcp or verbs (default auto)");
DEFINE_int32(timeout, 5000,
             "deadline of connecting to rkv and of every rkv call, in milliseconds (default 5000)");
DEFINE_int32(connections, 1,
             "rkv connections of each loop thread's client (per server in cluster mode), 1..64 (default 1: a "
             "thread makes one rkv call at a time)");
DEFINE_uint64(location_cache_bytes, uint64_t{32} << 20,
              "bytes of the location cache of each loop thread's client (a GET of a key read before costs one "
              "READ); 0 turns it off (default 33554432)");

DECLARE_bool(help);

namespace {

constexpr int kExitCannotStart = 1;
constexpr int kExitBadFlag = 2;

constexpr char kUsage[] =
    "serves Redis and memcached clients on an rkv server or cluster.\n"
    "\n"
    "  rkv-gateway --token_file=FILE [--server=HOST:PORT | --coordinator=HOST:PORT[,...]]\n"
    "              [--redis_listen=HOST:PORT] [--memcached_listen=HOST:PORT] ...\n"
    "\n"
    "Redis clients connect to --redis_listen (default 127.0.0.1:6380), memcached clients to\n"
    "--memcached_listen (default 127.0.0.1:11212); an empty address turns a protocol off. On start it\n"
    "prints one line per protocol, 'rkv-gateway PROTOCOL listening on HOST:PORT'. SIGTERM or SIGINT\n"
    "stops it; SIGHUP is logged and changes nothing (flags are read at start). KEYS, SCAN and\n"
    "FLUSHALL are refused (rkv has no keyspace listing); DBSIZE and INFO's key count are approximate\n"
    "(cluster mode only).\n"
    "\n"
    "Exit status: 0 after SIGTERM/SIGINT, 1 when it cannot start, 2 for bad flags. --helpshort lists\n"
    "rkv-gateway's own flags alone.";

int BadFlag(const std::string& message) {
  std::cerr << "rkv-gateway: " << message << " (rkv-gateway --help lists the flags)\n";
  return kExitBadFlag;
}

int CannotStart(const std::string& message) {
  std::cerr << "rkv-gateway: " << message << "\n";
  return kExitCannotStart;
}

}  // namespace

int main(int argc, char** argv) {
  // SIGTERM, SIGINT and SIGHUP are taken by sigwait below, by the main
  // thread alone. SIGHUP has nothing to reload here (the flags and the
  // token file are read at start) and is logged, not obeyed: left at its
  // default action it ended the gateway and every client's connection
  // (a terminal's hang-up, a reload sent to every rkv unit).
  const sigset_t signals = rkv::BlockDaemonSignals({SIGTERM, SIGINT, SIGHUP});
  FLAGS_logtostderr = true;
  gflags::SetUsageMessage(kUsage);
  gflags::SetVersionString(RKV_VERSION);
  rkv::ParseProgramFlags(&argc, &argv, __FILE__);
  google::InitGoogleLogging(argv[0]);
  if (argc > 1) return BadFlag(std::string("unexpected argument '") + argv[1] + "'");

  if (FLAGS_token_file.empty()) return BadFlag("--token_file is required");
  if (FLAGS_redis_listen.empty() && FLAGS_memcached_listen.empty()) {
    return BadFlag("--redis_listen and --memcached_listen are both empty: nothing to serve");
  }
#ifndef RKV_GATEWAY_MEMCACHE
  if (!FLAGS_memcached_listen.empty()) {
    return BadFlag("--memcached_listen: this build has no memcached protocol; give --memcached_listen=");
  }
#endif
  int threads = FLAGS_threads;
  if (threads == 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  if (threads < 1 || threads > 1024) return BadFlag("--threads must be 0 (one per CPU) or 1..1024");
  if (FLAGS_loop_spin_us < 0 || FLAGS_loop_spin_us > 1000000) return BadFlag("--loop_spin_us must be 0..1000000");
  if (FLAGS_max_clients < 1 || FLAGS_max_clients > 1000000) return BadFlag("--max_clients must be 1..1000000");
  if (FLAGS_output_limit_bytes < 1024) return BadFlag("--output_limit_bytes must be at least 1024");
  if (FLAGS_max_batch < 1 || FLAGS_max_batch > 4096) return BadFlag("--max_batch must be 1..4096");
  if (FLAGS_round_keys > 1000000) return BadFlag("--round_keys must be 0..1000000");
  if (FLAGS_timeout <= 0) return BadFlag("--timeout must be a positive number of milliseconds");
  int connections = FLAGS_connections;
  if (connections < 1 || connections > 64) return BadFlag("--connections must be 1..64");
  if (!FLAGS_requirepass.empty() && FLAGS_requirepass.find_first_of("\r\n") != std::string::npos) {
    return BadFlag("--requirepass must not hold a line break");
  }
  if (!(FLAGS_tls_ca.empty() && FLAGS_tls_cert.empty() && FLAGS_tls_key.empty()) && FLAGS_coordinator.empty() &&
      !FLAGS_data_plane_tls) {
    return BadFlag("--tls_ca, --tls_cert and --tls_key secure the control plane: they need --coordinator, or "
                   "--data_plane_tls for a single server's data plane");
  }
  if (FLAGS_data_plane_tls && FLAGS_tls_ca.empty()) return BadFlag("--data_plane_tls needs --tls_ca");
  if (FLAGS_tls_cert.empty() != FLAGS_tls_key.empty()) return BadFlag("--tls_cert and --tls_key go together");
  if (!FLAGS_tls_cert.empty() && FLAGS_tls_ca.empty()) return BadFlag("--tls_cert needs --tls_ca");
  auto token = rkv::ReadTokenFile(FLAGS_token_file);
  if (!token.ok()) return BadFlag("--token_file: " + token.status().ToString());

  // Every client connection is a descriptor: the soft limit is raised
  // toward the hard one to hold --max_clients and rkv's own connections.
  rlimit nofile{};
  if (getrlimit(RLIMIT_NOFILE, &nofile) == 0) {
    const rlim_t want = static_cast<rlim_t>(FLAGS_max_clients) + 256 + 4 * static_cast<rlim_t>(threads);
    if (nofile.rlim_cur < want && nofile.rlim_cur != RLIM_INFINITY) {
      nofile.rlim_cur = nofile.rlim_max == RLIM_INFINITY ? want : std::min(want, nofile.rlim_max);
      setrlimit(RLIMIT_NOFILE, &nofile);
      getrlimit(RLIMIT_NOFILE, &nofile);
    }
    if (nofile.rlim_cur != RLIM_INFINITY && nofile.rlim_cur < want) {
      LOG(WARNING) << "the descriptor limit (" << nofile.rlim_cur << ", hard " << nofile.rlim_max
                   << ") is below --max_clients=" << FLAGS_max_clients << " plus the gateway's own: "
                   << "connections beyond it wait in the listen queue (raise ulimit -n or LimitNOFILE)";
    }
  }

  // A peer gone while a reply is sent is EPIPE, not a signal.
  signal(SIGPIPE, SIG_IGN);

  // Listen first: a taken port is reported before rkv is even asked.
  struct Bound {
    std::string protocol;
    std::string flag;
    int fd;
  };
  std::vector<Bound> bound;
  auto close_all = [&] {
    for (const Bound& b : bound) close(b.fd);
  };
  for (auto [protocol, flag, address] :
       {std::tuple{"redis", "--redis_listen", FLAGS_redis_listen},
        std::tuple{"memcached", "--memcached_listen", FLAGS_memcached_listen}}) {
    if (address.empty()) continue;
    auto fd = rkv::gateway::Listen(address);
    if (!fd.ok()) {
      close_all();
      return CannotStart(std::string(flag) + ": " + fd.status().message());
    }
    bound.push_back({protocol, flag, *fd});
  }

  rkv::ClientOptions options;
  if (!FLAGS_coordinator.empty()) {
    options.server.clear();
    options.coordinator = FLAGS_coordinator;
  } else {
    options.server = FLAGS_server;
  }
  options.token = *token;
  options.transport = FLAGS_transport;
  options.timeout = std::chrono::milliseconds(FLAGS_timeout);
  options.connections = connections;
  options.location_cache_bytes = FLAGS_location_cache_bytes;
  options.tls_ca_file = FLAGS_tls_ca;
  options.tls_cert_file = FLAGS_tls_cert;
  options.tls_key_file = FLAGS_tls_key;
  options.data_plane_tls = FLAGS_data_plane_tls;
  // One Client per loop thread: a thread executes its connections' calls
  // one at a time, so each Client sees one call at a time and its
  // requests reach rkv in the order they were numbered (docs/design.md,
  // the gateway's section, says why that matters for writes).
  std::vector<std::unique_ptr<rkv::Client>> clients;
  for (int i = 0; i < threads; ++i) {
    auto client = rkv::Client::Connect(options);
    if (!client.ok()) {
      close_all();
      return CannotStart("cannot connect to rkv (" +
                         (FLAGS_coordinator.empty() ? "--server=" + FLAGS_server : "--coordinator=" + FLAGS_coordinator) +
                         "): " + client.status().ToString());
    }
    clients.push_back(std::move(*client));
  }
  rkv::gateway::Limits limits;
  limits.max_key_bytes = clients[0]->max_key_bytes();
  limits.max_value_bytes = clients[0]->max_value_bytes();

  rkv::gateway::RespShared resp_shared;
  resp_shared.started_unix_s = static_cast<int64_t>(std::time(nullptr));
  rkv::gateway::RespOptions resp;
  resp.limits = limits;
  resp.requirepass = FLAGS_requirepass;
  if (FLAGS_auth_with_token) resp.token = *token;
  resp.max_batch = FLAGS_max_batch;
  resp.max_request_bytes = std::max<size_t>(FLAGS_max_request_bytes, limits.max_value_bytes + (size_t{1} << 20));
  resp.shared = &resp_shared;
#ifdef RKV_GATEWAY_MEMCACHE
  // Its sessions share the process-wide MemcacheShared (counters, flush
  // times): one memcached listener.
  rkv::gateway::MemcacheOptions memcache;
  memcache.limits = limits;
  memcache.allow_flush = FLAGS_allow_flush;
#endif

  std::vector<rkv::Client*> by_thread;
  for (const auto& client : clients) by_thread.push_back(client.get());
  // Each loop thread's round, on its client: the Redis sessions of a
  // thread defer their GET and SET runs to it, so that one MultiGet or
  // MultiPut serves all the connections of one pass of the loop.
  std::vector<std::unique_ptr<rkv::gateway::RkvRound>> rounds;
  std::vector<rkv::gateway::Round*> round_by_thread;
  std::vector<rkv::gateway::RkvRound*> rkv_round_by_thread;
  for (const auto& client : clients) {
    if (FLAGS_round_keys == 0) {
      rkv_round_by_thread.push_back(nullptr);
      continue;
    }
    rounds.push_back(std::make_unique<rkv::gateway::RkvRound>(client.get(), FLAGS_round_keys));
    round_by_thread.push_back(rounds.back().get());
    rkv_round_by_thread.push_back(rounds.back().get());
  }
  std::vector<rkv::gateway::ListenerSpec> listeners;
  for (const Bound& b : bound) {
    rkv::gateway::ListenerSpec spec;
    spec.protocol = b.protocol;
    spec.fd = b.fd;
    if (b.protocol == "redis") {
      resp_shared.tcp_port = rkv::gateway::BoundPort(b.fd);
      spec.make_session = [by_thread, rkv_round_by_thread, &resp](int thread) {
        const auto t = static_cast<size_t>(thread);
        return rkv::gateway::NewRespSession(by_thread[t], resp, rkv_round_by_thread[t]);
      };
      spec.refusal = "-ERR max number of clients reached\r\n";
    } else {
#ifdef RKV_GATEWAY_MEMCACHE
      spec.make_session = [by_thread, &memcache](int thread) {
        return rkv::gateway::NewMemcacheSession(by_thread[static_cast<size_t>(thread)], memcache);
      };
      spec.refusal = "SERVER_ERROR Too many open connections\r\n";
#endif
    }
    listeners.push_back(std::move(spec));
  }
  rkv::gateway::LoopOptions loop_options;
  loop_options.threads = threads;
  loop_options.max_clients = FLAGS_max_clients;
  loop_options.output_limit_bytes = FLAGS_output_limit_bytes;
  loop_options.rounds = round_by_thread;
  loop_options.spin_us = FLAGS_loop_spin_us;
  auto loop = rkv::gateway::EventLoop::Start(std::move(listeners), loop_options);
  if (!loop.ok()) {
    close_all();
    return CannotStart("cannot start the event loop: " + loop.status().ToString());
  }
  LOG(INFO) << "rkv-gateway " << RKV_VERSION << ": " << threads << " threads, rkv over "
            << clients[0]->transport_name() << " ("
            << (FLAGS_coordinator.empty() ? "server " + FLAGS_server : "cluster " + FLAGS_coordinator)
            << "), max key " << limits.max_key_bytes << " bytes, max value " << limits.max_value_bytes << " bytes";
  for (const Bound& b : bound) {
    std::printf("rkv-gateway %s listening on %s\n", b.protocol.c_str(), rkv::gateway::BoundAddress(b.fd).c_str());
  }
  std::fflush(stdout);

  int signal_number = 0;
  for (;;) {
    if (sigwait(&signals, &signal_number) != 0) continue;
    if (signal_number != SIGHUP) break;
    LOG(INFO) << "rkv-gateway: SIGHUP: nothing to reload (flags and --token_file are read at start; restart to "
                 "change them), still serving";
  }
  LOG(INFO) << "rkv-gateway: " << (signal_number == SIGINT ? "SIGINT" : "SIGTERM") << ", stopping";
  (*loop)->Stop();
  close_all();
  uint64_t round_batches = 0;
  uint64_t round_items = 0;
  for (const auto& round : rounds) {
    round_batches += round->batches();
    round_items += round->items();
  }
  LOG(INFO) << "rkv-gateway: " << round_items << " GETs and SETs in " << round_batches
            << " rkv batches of the loop threads' rounds";
  LOG(INFO) << "rkv-gateway: stopped (" << (*loop)->Stats().accepted << " connections served)";
  return 0;
}
