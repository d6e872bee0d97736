#include "tests/run_command.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <string>

namespace rkv::testing {

CommandResult RunCommand(const std::vector<std::string>& argv, const std::string& input, std::chrono::seconds limit) {
  CommandResult result;
  int in_pipe[2], out_pipe[2], err_pipe[2];
  if (pipe2(in_pipe, O_CLOEXEC) || pipe2(out_pipe, O_CLOEXEC) || pipe2(err_pipe, O_CLOEXEC)) {
    result.err = "pipe2 failed";
    return result;
  }
  // The argument vector is made before fork(): the child of a threaded
  // process must not allocate before execv (it can hang on a malloc lock).
  std::vector<std::string> copy = argv;
  std::vector<char*> args;
  for (auto& a : copy) args.push_back(a.data());
  args.push_back(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(in_pipe[0], STDIN_FILENO);
    dup2(out_pipe[1], STDOUT_FILENO);
    dup2(err_pipe[1], STDERR_FILENO);
    execv(args[0], args.data());
    _exit(127);
  }
  if (pid < 0) {
    for (int fd : {in_pipe[0], in_pipe[1], out_pipe[0], out_pipe[1], err_pipe[0], err_pipe[1]}) close(fd);
    result.err = "fork failed";
    return result;
  }
  close(in_pipe[0]);
  close(out_pipe[1]);
  close(err_pipe[1]);
  signal(SIGPIPE, SIG_IGN);

  size_t written = 0;
  int in_fd = in_pipe[1];
  if (input.empty()) {
    close(in_fd);
    in_fd = -1;
  } else {
    fcntl(in_fd, F_SETFL, O_NONBLOCK);
  }
  bool out_open = true, err_open = true;
  const auto started = std::chrono::steady_clock::now();
  int killed_with = 0;  // the last signal sent at the limit
  while (out_open || err_open) {
    const auto running = std::chrono::steady_clock::now() - started;
    if (killed_with == 0 && running > limit) {
      // SIGABRT first: a program with a failure handler prints its stack.
      kill(pid, SIGABRT);
      killed_with = SIGABRT;
    } else if (killed_with == SIGABRT && running > limit + std::chrono::seconds(5)) {
      kill(pid, SIGKILL);
      killed_with = SIGKILL;
    } else if (killed_with == SIGKILL && running > limit + std::chrono::seconds(10)) {
      break;  // its output is held open by a process of its own: give up on it
    }
    pollfd fds[3];
    int n = 0;
    if (out_open) fds[n++] = {out_pipe[0], POLLIN, 0};
    if (err_open) fds[n++] = {err_pipe[0], POLLIN, 0};
    if (in_fd >= 0) fds[n++] = {in_fd, POLLOUT, 0};
    if (poll(fds, n, 1000) < 0 && errno != EINTR) break;
    for (int i = 0; i < n; ++i) {
      if (fds[i].revents == 0) continue;
      if (fds[i].fd == in_fd) {
        const ssize_t w = write(in_fd, input.data() + written, input.size() - written);
        if (w > 0) written += static_cast<size_t>(w);
        if (w < 0 && errno != EAGAIN) written = input.size();
        if (written == input.size()) {
          close(in_fd);
          in_fd = -1;
        }
        continue;
      }
      char buf[65536];
      const ssize_t r = read(fds[i].fd, buf, sizeof(buf));
      std::string& sink = fds[i].fd == out_pipe[0] ? result.out : result.err;
      if (r > 0) {
        sink.append(buf, static_cast<size_t>(r));
      } else if (r == 0 || errno != EINTR) {
        if (fds[i].fd == out_pipe[0]) out_open = false; else err_open = false;
      }
    }
  }
  if (in_fd >= 0) close(in_fd);
  close(out_pipe[0]);
  close(err_pipe[0]);
  int wstatus = 0;
  waitpid(pid, &wstatus, 0);
  if (WIFEXITED(wstatus)) result.exit_code = WEXITSTATUS(wstatus);
  if (killed_with != 0) {
    result.exit_code = -1;
    result.err += "\n[" + argv[0] + " still running after " + std::to_string(limit.count()) +
                  " s: killed with signal " + std::to_string(killed_with) + "]\n";
  }
  return result;
}

}  // namespace rkv::testing
