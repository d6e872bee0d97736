// rkv-server: serves one hash table over a transport, with RocksDB as its
// durable copy. See server/server.h.
//
// Exit codes: 0 after SIGTERM/SIGINT and a clean shutdown; 1 when the
// server cannot start (data directory, memory, transport, listen); 2 for a
// bad flag.

#include <csignal>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <string>
#include <system_error>

#include <gflags/gflags.h>
#include <glog/logging.h>
#include <pthread.h>
#include <unistd.h>

#include "common/layout.h"
#include "common/token.h"
#include "common/transport/transport.h"
#include "server/options.h"
#include "server/server.h"

DEFINE_string(listen, "127.0.0.1:7700", "HOST:PORT to listen on; port 0 picks a free port (default 127.0.0.1:7700)");
DEFINE_string(data_dir, "", "directory of the RocksDB durable copy, created if missing (required)");
DEFINE_string(memory, "256M", "heap region size in bytes; suffixes K, M, G, T (default 256M)");
DEFINE_uint64(max_keys, 1048576, "number of keys the table is sized for (default 1048576)");
DEFINE_string(durability, "wal", "none | wal (survives a process crash) | sync (survives power loss) (default wal)");
DEFINE_uint32(max_value_bytes, 1048576, "largest value in bytes (default 1048576; at most 4128768)");
DEFINE_uint32(max_key_bytes, 1024, "largest key in bytes (default 1024; at most 65535)");
DEFINE_string(token_file, "", "file holding the token clients must present (required)");
DEFINE_string(transport, "auto", "auto | tcp | verbs; auto picks verbs when an RDMA port is active (default auto)");
DEFINE_int32(gid_index, -1, "verbs: RoCE GID index, -1 picks one (default -1)");
DEFINE_string(ring_bytes, "4M", "staging ring per connection in bytes, >= 2x the largest block; suffixes K, M, G (default 4M)");
DEFINE_uint32(max_connections, 64, "most client connections at once; more are refused (default 64)");
DEFINE_uint32(grace_period_ms, 100, "heap quarantine in milliseconds before a replaced block is reused; "
                                    "clients' GET lease is half of it (default 100)");

namespace {

int BadFlag(const std::string& message) {
  std::cerr << "rkv-server: " << message << "\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  FLAGS_logtostderr = true;
  gflags::SetUsageMessage("rkv-server --data_dir=DIR --token_file=FILE [--listen=HOST:PORT] ...");
  gflags::ParseCommandLineFlags(&argc, &argv, true);
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
  o.grace_period_ms = FLAGS_grace_period_ms;
  {
    auto memory = ParseByteSize(FLAGS_memory);
    if (!memory.ok()) return BadFlag("--memory: " + memory.status().message());
    o.memory_bytes = *memory;
    auto ring = ParseByteSize(FLAGS_ring_bytes);
    if (!ring.ok()) return BadFlag("--ring_bytes: " + ring.status().message());
    o.ring_bytes = *ring;
    auto durability = rkv::server::ParseDurability(FLAGS_durability);
    if (!durability.ok()) return BadFlag("--durability: " + durability.status().message());
    o.durability = *durability;
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
  if (rkv::Status s = rkv::server::ValidateOptions(o); !s.ok()) return BadFlag(s.message());

  // The data directory: created if missing, and it must be a writable
  // directory.
  std::error_code ec;
  std::filesystem::create_directories(o.data_dir, ec);
  if (ec || !std::filesystem::is_directory(o.data_dir) || ::access(o.data_dir.c_str(), W_OK | X_OK) != 0) {
    std::cerr << "rkv-server: --data_dir " << o.data_dir << " is not a usable directory"
              << (ec ? ": " + ec.message() : std::string()) << "\n";
    return 1;
  }

  // SIGTERM and SIGINT are taken by sigwait below: block them before any
  // thread starts so that every thread inherits the mask.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  LOG(INFO) << why;
  rkv::transport::Options topts;
  topts.gid_index = FLAGS_gid_index;
  auto transport = rkv::transport::CreateTransport(*kind, topts);
  if (!transport.ok()) {
    std::cerr << "rkv-server: creating the " << rkv::transport::KindName(*kind)
              << " transport failed: " << transport.status() << "\n";
    return 1;
  }
  auto server = rkv::server::Server::Start(o, transport->get());
  if (!server.ok()) {
    std::cerr << "rkv-server: " << server.status() << "\n";
    return 1;
  }
  std::cout << "rkv-server listening on " << (*server)->address() << " (transport "
            << rkv::transport::KindName(*kind) << ", epoch " << (*server)->epoch() << ", "
            << (*server)->keys_at_start() << " keys)" << std::endl;

  int sig = 0;
  sigwait(&signals, &sig);
  LOG(INFO) << "received signal " << sig << ", shutting down";
  (*server)->Shutdown();
  server.value().reset();
  return 0;
}
