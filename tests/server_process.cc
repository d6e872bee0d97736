#include "tests/server_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>

#include "common/status.h"

#if !defined(RKV_SERVER_BIN) || !defined(RKV_COORDINATOR_BIN)
#error "RKV_SERVER_BIN and RKV_COORDINATOR_BIN must name the binaries"
#endif

namespace rkv::testing {

std::string TestTransport() {
  const char* t = std::getenv("RKV_TEST_TRANSPORT");
  return t && *t ? t : "tcp";
}

std::string TestHost() {
  const char* h = std::getenv("RKV_TEST_HOST");
  return h && *h ? h : "127.0.0.1";
}

double TestScale() {
  const char* s = std::getenv("RKV_TEST_SCALE");
  if (!s || !*s) return 1.0;
  const double v = std::atof(s);
  return v > 0 ? v : 1.0;
}

int SlowCpuMs(int ms) {
  const double stretch = std::clamp(1.0 / TestScale(), 1.0, 4.0);
  return static_cast<int>(std::lround(ms * stretch));
}

int SuiteCount(const char* env, int n, int minimum) {
  const char* s = std::getenv(env);
  if (s == nullptr || *s == '\0') {
    return std::max(minimum, static_cast<int>(std::lround(n * TestScale())));
  }
  char* end = nullptr;
  errno = 0;
  const long v = std::strtol(s, &end, 10);
  if (errno != 0 || *end != '\0' || v <= 0 || v > 1'000'000) {
    ADD_FAILURE() << "$" << env << "=\"" << s << "\": expected a positive integer (at most 1000000)";
    return minimum;
  }
  return static_cast<int>(v);
}

void WriteFile(const std::string& path, const std::string& contents) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << contents;
  out.close();
  ::chmod(path.c_str(), 0600);
}

std::string ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

StatusOr<pid_t> SpawnProcess(std::vector<std::string> argv, const std::string& out_path,
                             const std::string& err_path) {
  const int out_fd = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (out_fd < 0) return Internal("open " + out_path + ": " + std::strerror(errno));
  const int err_fd = open(err_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (err_fd < 0) {
    close(out_fd);
    return Internal("open " + err_path + ": " + std::strerror(errno));
  }
  // Everything the child needs is made before fork(): this process has
  // threads (clients, lease renewal), and the child of a threaded process
  // may only make async-signal-safe calls until execv. An allocation there
  // can hang forever on a malloc lock another thread held at the fork.
  std::vector<char*> args;
  for (auto& a : argv) args.push_back(a.data());
  args.push_back(nullptr);
  const pid_t pid = fork();
  if (pid < 0) {
    close(out_fd);
    close(err_fd);
    return Internal(std::string("fork: ") + std::strerror(errno));
  }
  if (pid == 0) {
    dup2(out_fd, STDOUT_FILENO);  // dup2 clears O_CLOEXEC on the copy
    dup2(err_fd, STDERR_FILENO);
    execv(args[0], args.data());
    _exit(127);
  }
  close(out_fd);
  close(err_fd);
  return pid;
}

ServerProcess::ServerProcess(std::string data_dir, std::string token_file,
                             std::vector<std::string> extra_flags, Role role)
    : data_dir_(std::move(data_dir)),
      token_file_(std::move(token_file)),
      extra_flags_(std::move(extra_flags)),
      role_(role),
      log_path_(data_dir_ + ".log") {}

ServerProcess::~ServerProcess() {
  if (pid_ > 0) Kill9();
}

Status ServerProcess::Start(std::chrono::seconds timeout) {
  if (pid_ > 0) return FailedPrecondition("server already running");
  const std::string listen = address_.empty() ? TestHost() + ":0" : address_;
  std::vector<std::string> args = {
      role_ == Role::kServer ? RKV_SERVER_BIN : RKV_COORDINATOR_BIN,
      "--listen=" + listen,
      "--token_file=" + token_file_,
  };
  if (role_ != Role::kSharedCoordinator) args.push_back("--data_dir=" + data_dir_);
  if (role_ == Role::kServer) args.push_back("--transport=" + TestTransport());
  args.insert(args.end(), extra_flags_.begin(), extra_flags_.end());

  // stdout goes to a file (a pipe closed after start-up would kill the
  // server with SIGPIPE on its next line); start-up is read from there.
  const std::string out_path = data_dir_ + ".out";
  StatusOr<pid_t> spawned = SpawnProcess(args, out_path, log_path_);
  if (!spawned.ok()) return spawned.status();
  pid_ = *spawned;

  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    const std::string seen = ReadWholeFile(out_path);
    const size_t at = seen.find("listening on ");
    if (at != std::string::npos) {
      const size_t start = at + 13;
      const size_t end = seen.find_first_of(" \n", start);
      if (end != std::string::npos) {
        address_ = seen.substr(start, end - start);
        return Status::Ok();
      }
    }
    int wstatus = 0;
    if (waitpid(pid_, &wstatus, WNOHANG) == pid_) {
      pid_ = -1;
      return Unavailable(args[0] + " exited during start-up; log:\n" + Log());
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  Kill9();
  return DeadlineExceeded(args[0] + " did not report listening; log:\n" + Log());
}

void ServerProcess::Kill9() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGKILL);
  int wstatus = 0;
  waitpid(pid_, &wstatus, 0);
  pid_ = -1;
}

int ServerProcess::Terminate() {
  if (pid_ <= 0) return -1;
  ::kill(pid_, SIGTERM);
  int wstatus = 0;
  waitpid(pid_, &wstatus, 0);
  pid_ = -1;
  return wstatus;
}

namespace {

// Whether every thread of `pid` is stopped (state T), or the process is
// gone. SIGSTOP stops a process asynchronously: kill() returns before its
// threads stop, and a thread running on another CPU answers a request or
// two meanwhile.
bool AllThreadsStopped(pid_t pid) {
  const std::filesystem::path tasks = "/proc/" + std::to_string(pid) + "/task";
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(tasks, ec)) {
    std::ifstream stat(entry.path() / "stat");
    std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
    const size_t close = text.rfind(')');
    if (close == std::string::npos) continue;  // the thread ended meanwhile
    if (close + 2 >= text.size() || (text[close + 2] != 'T' && text[close + 2] != 't')) return false;
  }
  return true;  // stopped, or gone (ec)
}

}  // namespace

void ServerProcess::Freeze() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGSTOP);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!AllThreadsStopped(pid_) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

void ServerProcess::Continue() {
  if (pid_ > 0) ::kill(pid_, SIGCONT);
}

Status ServerProcess::Restart(std::chrono::seconds timeout) {
  Kill9();
  return Start(timeout);
}

void ServerProcess::Wipe() {
  if (pid_ > 0) {
    ADD_FAILURE() << "Wipe of " << data_dir_ << " while its process runs";
    return;
  }
  std::error_code ec;
  std::filesystem::remove_all(data_dir_, ec);
  if (ec) ADD_FAILURE() << "remove " << data_dir_ << ": " << ec.message();
}

std::string ServerProcess::Log() const {
  std::string s = ReadWholeFile(log_path_);
  if (s.size() > 8000) s = "..." + s.substr(s.size() - 8000);
  return s;
}

}  // namespace rkv::testing
