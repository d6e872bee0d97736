// rkv-gateway and the rkv-server behind it, as processes, for the
// gateway's tests (gateway/*_session_test.cc, gateway_process_test.cc,
// tests/gateway_failover_test.cc):
//   - GatewayBackend: the one rkv-server of a suite, in a temp dir of its
//     own with a token file, 256 MiB of memory, on the suite's transport;
//     its clients and the flags of a gateway in front of it;
//   - GatewayProcess: rkv-gateway as a child process (SpawnProcess), its
//     stdout and stderr in files, its Redis address read from its
//     "listening" line.
//
// Thread safety: none; one test thread drives each.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "rkv/client.h"
#include "rkv/status.h"
#include "tests/server_process.h"
#include "tests/temp_dir.h"

namespace rkv::testing {

// The flags the tests run rkv-gateway with: `backend` (--server=ADDRESS
// or --coordinator=ADDRESS), the token file, the suite's transport, a 30 s
// timeout, Redis clients on 127.0.0.1 at a free port, no memcached
// listener, two threads; then `extra` (a later flag overrides an earlier
// one).
std::vector<std::string> GatewayFlags(std::string backend, const std::string& token_file,
                                      const std::vector<std::string>& extra = {});

class GatewayBackend {
 public:
  explicit GatewayBackend(std::string token);
  GatewayBackend(const GatewayBackend&) = delete;
  GatewayBackend& operator=(const GatewayBackend&) = delete;

  // Starts the server (ServerProcess::Start).
  Status Start();
  // "HOST:PORT" once started.
  const std::string& address() const { return server_.address(); }
  const std::string& token() const { return token_; }
  const std::string& token_file() const { return token_file_; }

  // A client of the server (the token, the suite's transport, a 30 s
  // timeout, `connections` connections); null, and the test failed, when
  // it cannot connect.
  std::unique_ptr<rkv::Client> NewClient(int connections = 1) const;
  // GatewayFlags for a gateway on this server.
  std::vector<std::string> Flags(const std::vector<std::string>& extra = {}) const {
    return GatewayFlags("--server=" + address(), token_file_, extra);
  }

 private:
  TempDir dir_;
  std::string token_;
  std::string token_file_;
  ServerProcess server_;
};

class GatewayProcess {
 public:
  // `dir` (for its output files) must exist while it runs.
  GatewayProcess(std::string dir, std::vector<std::string> flags);
  ~GatewayProcess();  // SIGKILLs a gateway still running
  GatewayProcess(const GatewayProcess&) = delete;
  GatewayProcess& operator=(const GatewayProcess&) = delete;

  // Starts it; with `wait_listening`, waits (kConditionDeadline) for its
  // "rkv-gateway redis listening on ADDRESS" line. A failure says why,
  // with its log when it exited.
  ::testing::AssertionResult Start(bool wait_listening = true);
  // Waits for the exit; returns the exit code (or 128 + the signal).
  int Wait();
  void Signal(int sig);
  // Resident memory in KiB (VmRSS), -1 when unknown.
  long RssKiB() const;

  // The Redis listener's "HOST:PORT" and port, once Start waited for it.
  const std::string& address() const { return address_; }
  uint16_t port() const;
  // What it wrote to stderr (its log), for failure messages.
  std::string Log() const;

 private:
  std::string dir_;
  std::vector<std::string> flags_;
  std::string address_;
  pid_t pid_ = -1;
};

}  // namespace rkv::testing
