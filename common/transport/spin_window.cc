// MachineOversubscribed (spin_window.h).
#include "common/transport/spin_window.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

namespace rkv::transport {
namespace {

std::atomic<int64_t> g_next_sample_ns{0};
std::atomic<int64_t> g_oversubscribed_until_ns{0};
// Samples in a row that saw more runnable threads than CPUs.
std::atomic<int> g_over_streak{0};
constexpr int kOversubscribedStreak = 3;

int OnlineCpus() {
  static const int cpus = [] {
    const long n = ::sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? static_cast<int>(n) : 1;
  }();
  return cpus;
}

// The running count of /proc/loadavg, or -1 when it cannot be read or
// parsed (then nothing changes).
int RunnableThreads() {
  int fd;
  do {
    fd = ::open("/proc/loadavg", O_RDONLY | O_CLOEXEC);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) return -1;
  char buf[128];
  ssize_t n;
  do {
    n = ::read(fd, buf, sizeof(buf));
  } while (n < 0 && errno == EINTR);
  ::close(fd);
  if (n <= 0) return -1;
  return ParseLoadavgRunning(std::string_view(buf, static_cast<size_t>(n)));
}

}  // namespace

int ParseLoadavgRunning(std::string_view text) {
  // "0.29 1.16 2.37 2/345 12345\n": the fourth field, before its '/'.
  size_t at = 0;
  for (int field = 0; field < 3; ++field) {
    at = text.find(' ', at);
    if (at == std::string_view::npos) return -1;
    ++at;
  }
  int running = 0;
  size_t digits = 0;
  for (; at < text.size() && text[at] >= '0' && text[at] <= '9'; ++at, ++digits) {
    if (running > 100'000'000) return -1;
    running = running * 10 + (text[at] - '0');
  }
  if (digits == 0 || at >= text.size() || text[at] != '/') return -1;
  return running;
}

bool MachineOversubscribed(std::chrono::steady_clock::time_point now) {
  const int64_t t = SteadyNanos(now);
  int64_t next = g_next_sample_ns.load(std::memory_order_relaxed);
  if (t >= next && g_next_sample_ns.compare_exchange_strong(next, t + kOversubscriptionSample.count(),
                                                             std::memory_order_relaxed)) {
    // Only a streak counts: a thread that runs for a moment (a timer, a
    // log flush) beside two spinners on two CPUs is no reason to sleep.
    if (RunnableThreads() <= OnlineCpus()) {
      g_over_streak.store(0, std::memory_order_relaxed);
    } else if (g_over_streak.fetch_add(1, std::memory_order_relaxed) + 1 >= kOversubscribedStreak) {
      g_oversubscribed_until_ns.store(t + kSpinCooldown.count(), std::memory_order_relaxed);
    }
  }
  return t < g_oversubscribed_until_ns.load(std::memory_order_relaxed);
}

}  // namespace rkv::transport
