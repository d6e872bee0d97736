// Starts and stops a real rkv-server (or rkv-coordinator) process for
// cross-process tests.
//
// The suite runs over the transport named by $RKV_TEST_TRANSPORT (tcp when
// unset) and listens on $RKV_TEST_HOST (127.0.0.1 when unset; the SoftRoCE
// guest sets the rxe0 address), port 0, reading the real address from the
// server's "listening on" line.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

#include "rkv/status.h"
#include "tests/temp_dir.h"

namespace rkv::testing {

std::string TestTransport();  // "tcp" or "verbs"
std::string TestHost();
// A scale factor for loads: 1 on the host, smaller in the emulated guest
// ($RKV_TEST_SCALE, a positive float).
double TestScale();
// A timeout of `ms` on a fast CPU, for a CPU that $RKV_TEST_SCALE says is
// slow: ms / TestScale(), at most 4 * ms, never below ms. For the failure
// detectors a suite runs with (heartbeat, replication timeouts), where a
// step that takes longer on a slow CPU must not read as a failure.
int SlowCpuMs(int ms);
// How many rounds a suite runs: $`env` when set (a positive integer; any
// other text fails the calling test and counts as `minimum`), else
// max(minimum, round(n * TestScale())). Lets a sanitizer build run fewer.
int SuiteCount(const char* env, int n, int minimum);

// Writes `contents` to `path` (mode 0600).
void WriteFile(const std::string& path, const std::string& contents);
// The whole of the file at `path` ("" when it cannot be read).
std::string ReadWholeFile(const std::string& path);

// Starts the program at `argv[0]` (a path) with `argv` as a child process,
// its stdout to `out_path` (truncated) and its stderr appended to
// `err_path`, and returns its pid, which the caller reaps. Safe from a
// process with threads: the child makes no allocation before execv. The
// one launch of the suites' processes (ServerProcess, GatewayProcess).
StatusOr<pid_t> SpawnProcess(std::vector<std::string> argv, const std::string& out_path,
                             const std::string& err_path);

class ServerProcess {
 public:
  // kSharedCoordinator: a coordinator whose state is in etcd (its flags
  // name it): no --data_dir; `data_dir` only names its log files.
  enum class Role { kServer, kCoordinator, kSharedCoordinator };
  // `data_dir` and `token_file` must exist for as long as the server runs.
  ServerProcess(std::string data_dir, std::string token_file, std::vector<std::string> extra_flags = {},
                Role role = Role::kServer);
  ~ServerProcess();  // SIGKILLs a server still running
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  // Starts the server and waits (up to `timeout`) for its listening line.
  // The first start listens on port 0; a restart reuses the port it got.
  Status Start(std::chrono::seconds timeout = std::chrono::seconds(120));
  // SIGKILL, then reap.
  void Kill9();
  // SIGTERM; returns the exit status (waitpid form) once it exited.
  int Terminate();
  // SIGSTOP: the process stays alive and keeps its sockets and memory (on
  // verbs its NIC still serves one-sided reads) but runs nothing until
  // Continue. Returns once every thread has stopped (the signal stops them
  // asynchronously; at most 10 s). Kill9 and the destructor work on a
  // stopped process.
  void Freeze();
  // SIGCONT after Freeze.
  void Continue();
  // Kill9 (when running), then Start on the same data dir and port.
  Status Restart(std::chrono::seconds timeout = std::chrono::seconds(120));
  // Removes the data dir (a lost disk); the process must not be running.
  void Wipe();
  const std::string& data_dir() const { return data_dir_; }
  bool running() const { return pid_ > 0; }
  // The process id while running, else -1.
  pid_t pid() const { return pid_; }
  // "HOST:PORT".
  const std::string& address() const { return address_; }
  // What the server wrote to stderr (its log), for failure messages.
  std::string Log() const;

 private:
  std::string data_dir_;
  std::string token_file_;
  std::vector<std::string> extra_flags_;
  Role role_;
  std::string log_path_;
  std::string address_;
  pid_t pid_ = -1;
};

}  // namespace rkv::testing
