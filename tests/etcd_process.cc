#include "tests/etcd_process.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <thread>

#include "coordinator/etcd/etcd_client.h"

#ifndef RKV_ETCD_BIN
#error "RKV_ETCD_BIN (the etcd binary) must be defined by the build"
#endif

namespace rkv::testing {
namespace {

// `count` distinct free TCP ports on 127.0.0.1: each bound to port 0 and
// read back, all held until every one is chosen, then released for etcd.
StatusOr<std::vector<int>> FreeLoopbackPorts(int count) {
  std::vector<int> fds;
  std::vector<int> ports;
  Status status;
  for (int i = 0; i < count && status.ok(); ++i) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      status = Internal(std::string("socket: ") + std::strerror(errno));
      break;
    }
    fds.push_back(fd);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;
    socklen_t len = sizeof(addr);
    if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      status = Internal(std::string("bind 127.0.0.1:0: ") + std::strerror(errno));
      break;
    }
    ports.push_back(ntohs(addr.sin_port));
  }
  for (int fd : fds) ::close(fd);
  if (!status.ok()) return status;
  return ports;
}

}  // namespace

StatusOr<std::unique_ptr<EtcdCluster>> EtcdCluster::Start(int members, std::chrono::seconds timeout) {
  if (members < 1) return InvalidArgument("an etcd cluster needs at least one member");
  std::unique_ptr<EtcdCluster> cluster(new EtcdCluster());
  StatusOr<std::vector<int>> ports = FreeLoopbackPorts(2 * members);
  if (!ports.ok()) return ports.status();
  cluster->cluster_token_ = "rkv-test-" + std::to_string(::getpid()) + "-" +
                            std::filesystem::path(cluster->dir_.path()).filename().string();
  for (int i = 0; i < members; ++i) {
    Member m;
    m.name = "m" + std::to_string(i);
    m.client = "127.0.0.1:" + std::to_string((*ports)[2 * i]);
    m.peer = "127.0.0.1:" + std::to_string((*ports)[2 * i + 1]);
    m.data_dir = cluster->dir_.path() + "/" + m.name + ".etcd";
    m.log_path = cluster->dir_.path() + "/" + m.name + ".log";
    if (!cluster->initial_cluster_.empty()) cluster->initial_cluster_ += ",";
    cluster->initial_cluster_ += m.name + "=http://" + m.peer;
    cluster->members_.push_back(std::move(m));
  }
  std::vector<int> all;
  for (int i = 0; i < members; ++i) {
    Status spawned = cluster->Spawn(i);
    if (!spawned.ok()) return spawned;
    all.push_back(i);
  }
  Status serving = cluster->WaitServing(all, timeout);
  if (!serving.ok()) return serving;
  return cluster;
}

EtcdCluster::~EtcdCluster() {
  for (int i = 0; i < size(); ++i) Kill(i);
}

std::vector<std::string> EtcdCluster::endpoints() const {
  std::vector<std::string> out;
  for (const Member& m : members_) out.push_back(m.client);
  return out;
}

Status EtcdCluster::Spawn(int i) {
  Member& m = members_[i];
  std::vector<std::string> args = {
      RKV_ETCD_BIN,
      "--name=" + m.name,
      "--data-dir=" + m.data_dir,
      "--listen-client-urls=http://" + m.client,
      "--advertise-client-urls=http://" + m.client,
      "--listen-peer-urls=http://" + m.peer,
      "--initial-advertise-peer-urls=http://" + m.peer,
      "--initial-cluster=" + initial_cluster_,
      "--initial-cluster-state=new",  // ignored once the data dir holds a member
      "--initial-cluster-token=" + cluster_token_,
      "--max-txn-ops=10000",
      "--max-request-bytes=16777216",
      "--logger=zap",
      "--log-outputs=stderr",
  };
  const int log_fd = ::open(m.log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log_fd < 0) return Internal("open " + m.log_path + ": " + std::strerror(errno));
  // Everything the child needs is made before fork(): the child of a
  // threaded process may only make async-signal-safe calls until execv.
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(log_fd);
    return Internal(std::string("fork: ") + std::strerror(errno));
  }
  if (pid == 0) {
    // Dies with the test, even one that crashes before its destructors.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);
    ::dup2(log_fd, STDOUT_FILENO);  // dup2 clears O_CLOEXEC on the copies
    ::dup2(log_fd, STDERR_FILENO);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  ::close(log_fd);
  m.pid = pid;
  return Status::Ok();
}

Status EtcdCluster::WaitServing(const std::vector<int>& which, std::chrono::seconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (int i : which) {
    Member& m = members_[i];
    StatusOr<std::unique_ptr<etcd::EtcdClient>> client = etcd::EtcdClient::Create({m.client});
    if (!client.ok()) return client.status();
    Status last = Unavailable("not asked yet");
    while (true) {
      int wstatus = 0;
      if (::waitpid(m.pid, &wstatus, WNOHANG) == m.pid) {
        m.pid = -1;
        return Unavailable("etcd member " + m.name + " (" + m.client + ") exited during start-up; its log:\n" +
                           LogTail(i));
      }
      const auto now = std::chrono::steady_clock::now();
      if (now >= deadline) {
        return DeadlineExceeded("etcd member " + m.name + " (" + m.client + ") did not answer within " +
                                std::to_string(timeout.count()) + " s (last: " + last.ToString() + "); its log:\n" +
                                LogTail(i));
      }
      StatusOr<etcd::RangeResult> read =
          (*client)->Get("rkv-test-etcd-probe", std::min(deadline, now + std::chrono::seconds(2)));
      if (read.ok()) break;
      last = read.status();
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  return Status::Ok();
}

void EtcdCluster::Stop(int i) {
  if (members_[i].pid > 0) ::kill(members_[i].pid, SIGSTOP);
}

void EtcdCluster::Continue(int i) {
  if (members_[i].pid > 0) ::kill(members_[i].pid, SIGCONT);
}

void EtcdCluster::Kill(int i) {
  Member& m = members_[i];
  if (m.pid <= 0) return;
  ::kill(m.pid, SIGKILL);  // a stopped process dies of SIGKILL too
  int wstatus = 0;
  ::waitpid(m.pid, &wstatus, 0);
  m.pid = -1;
}

Status EtcdCluster::Restart(int i, std::chrono::seconds timeout) {
  Kill(i);
  Status spawned = Spawn(i);
  if (!spawned.ok()) return spawned;
  return WaitServing({i}, timeout);
}

std::string EtcdCluster::LogTail(int i, int lines) const {
  std::ifstream in(members_[i].log_path);
  std::deque<std::string> tail;
  std::string line;
  while (std::getline(in, line)) {
    tail.push_back("    | " + line);
    if (static_cast<int>(tail.size()) > lines) tail.pop_front();
  }
  std::string out;
  for (const std::string& l : tail) out += l + "\n";
  return out;
}

}  // namespace rkv::testing
