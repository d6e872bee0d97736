#include "tests/gateway_process.h"

#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <fstream>
#include <utility>

#include "tests/wait_for.h"

#ifndef RKV_GATEWAY_BIN
#error "RKV_GATEWAY_BIN must name the rkv-gateway binary"
#endif

namespace rkv::testing {

std::vector<std::string> GatewayFlags(std::string backend, const std::string& token_file,
                                      const std::vector<std::string>& extra) {
  std::vector<std::string> flags = {std::move(backend),         "--token_file=" + token_file,
                                    "--transport=" + TestTransport(), "--timeout=30000",
                                    "--redis_listen=127.0.0.1:0", "--memcached_listen=",
                                    "--threads=2"};
  flags.insert(flags.end(), extra.begin(), extra.end());
  return flags;
}

GatewayBackend::GatewayBackend(std::string token)
    : token_(std::move(token)),
      token_file_(dir_.path() + "/token"),
      server_(dir_.path() + "/data", token_file_, {"--memory=268435456"}) {
  WriteFile(token_file_, token_ + "\n");
}

Status GatewayBackend::Start() { return server_.Start(); }

std::unique_ptr<rkv::Client> GatewayBackend::NewClient(int connections) const {
  rkv::ClientOptions o;
  o.server = address();
  o.token = token_;
  o.transport = TestTransport();
  o.timeout = std::chrono::milliseconds(30000);
  o.connections = connections;
  auto c = rkv::Client::Connect(o);
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? std::move(c).value() : nullptr;
}

GatewayProcess::GatewayProcess(std::string dir, std::vector<std::string> flags)
    : dir_(std::move(dir)), flags_(std::move(flags)) {}

GatewayProcess::~GatewayProcess() {
  if (pid_ > 0) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
}

::testing::AssertionResult GatewayProcess::Start(bool wait_listening) {
  std::vector<std::string> argv = {RKV_GATEWAY_BIN};
  argv.insert(argv.end(), flags_.begin(), flags_.end());
  const std::string out_path = dir_ + "/gateway.out";
  StatusOr<pid_t> spawned = SpawnProcess(std::move(argv), out_path, dir_ + "/gateway.err");
  if (!spawned.ok()) return ::testing::AssertionFailure() << spawned.status();
  pid_ = *spawned;
  if (!wait_listening) return ::testing::AssertionSuccess();
  const std::string prefix = "rkv-gateway redis listening on ";
  std::string exited;
  ::testing::AssertionResult listening = WaitFor("the gateway's listening line", [&] {
    const std::string out = ReadWholeFile(out_path);
    const size_t at = out.find(prefix);
    const size_t end = at == std::string::npos ? at : out.find('\n', at);
    if (end != std::string::npos) {
      address_ = out.substr(at + prefix.size(), end - at - prefix.size());
      return true;
    }
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      exited = "the gateway exited: " + Log();
      return true;
    }
    return false;
  });
  if (!exited.empty()) return ::testing::AssertionFailure() << exited;
  if (!listening) return listening << "\n" << Log();
  return listening;
}

int GatewayProcess::Wait() {
  int status = 0;
  waitpid(pid_, &status, 0);
  pid_ = -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

void GatewayProcess::Signal(int sig) { kill(pid_, sig); }

long GatewayProcess::RssKiB() const {
  std::ifstream status("/proc/" + std::to_string(pid_) + "/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  }
  return -1;
}

uint16_t GatewayProcess::port() const {
  return static_cast<uint16_t>(std::stoi(address_.substr(address_.rfind(':') + 1)));
}

std::string GatewayProcess::Log() const { return ReadWholeFile(dir_ + "/gateway.err"); }

}  // namespace rkv::testing
