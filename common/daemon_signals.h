// The signals a daemon's main thread takes with sigwait/sigtimedwait, and
// blocking them for every thread of the process.
#pragma once

#include <pthread.h>
#include <signal.h>

#include <initializer_list>

namespace rkv {

// Blocks `signals` in the calling thread and returns them as a set for
// sigwait. Call it first thing in main, before anything can start a
// thread: a thread inherits its creator's mask, and gRPC starts threads of
// its own the first time anything of it is used (a credential, a channel),
// RocksDB its pools. The kernel gives a process-directed signal to a thread
// that does not block it, so with one such thread a signal that arrives
// while the main thread is not inside sigwait (it is reloading, say) takes
// its default action there: for SIGHUP and SIGTERM the process ends at
// once, with no line in its log.
inline sigset_t BlockDaemonSignals(std::initializer_list<int> signals) {
  sigset_t set;
  sigemptyset(&set);
  for (int s : signals) sigaddset(&set, s);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  return set;
}

}  // namespace rkv
