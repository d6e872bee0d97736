// A daemon that blocks its signals after start-up code (which may start
// threads): cmake/check_daemon_signals.py must refuse it. Never compiled.
#include <signal.h>

#include "common/daemon_signals.h"

int main() {
  int ready = 1;  // stands for flag parsing, a gRPC channel, RocksDB...
  const sigset_t signals = rkv::BlockDaemonSignals({SIGTERM, SIGINT, SIGHUP});
  int signal_number = 0;
  sigwait(&signals, &signal_number);
  return ready - 1;
}
