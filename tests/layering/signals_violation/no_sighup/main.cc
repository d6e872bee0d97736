// A daemon that blocks SIGTERM and SIGINT first but leaves SIGHUP at its
// default action: cmake/check_daemon_signals.py must refuse it. Never
// compiled.
#include <signal.h>

#include "common/daemon_signals.h"

int main() {
  // The block comes first, as it must.
  const sigset_t signals = rkv::BlockDaemonSignals({SIGTERM, SIGINT});
  int signal_number = 0;
  sigwait(&signals, &signal_number);
  return 0;
}
