// The adaptive spin window that every transport's waits share (a
// connection's Poll, a poll group's Wait; docs/design.md §7.3): before it
// sleeps, a wait busy-polls for up to its window, and the window adapts to
// the waits it sees, between 0 and the transport's poll_spin_us bound.
#pragma once

#include <algorithm>
#include <chrono>

namespace rkv::transport {

// The smallest non-zero window.
inline constexpr std::chrono::nanoseconds kMinSpinWindow = std::chrono::microseconds(10);

// The window after a wait of `waited` that outlasted the spin: a wait that
// ended within `max_spin` (but after the window) doubles it, from at least
// kMinSpinWindow, since spinning a little longer would have caught it; one
// that outlasted `max_spin` halves it, to nothing below kMinSpinWindow, so
// an idle waiter stops spinning. A wait within the window, or a zero bound,
// leaves it as it is.
inline std::chrono::nanoseconds NextSpinWindow(std::chrono::nanoseconds window, std::chrono::nanoseconds waited,
                                               std::chrono::nanoseconds max_spin) {
  if (max_spin <= std::chrono::nanoseconds::zero() || waited <= window) return window;
  if (waited <= max_spin) return std::min(max_spin, std::max(2 * window, kMinSpinWindow));
  window /= 2;
  return window < kMinSpinWindow ? std::chrono::nanoseconds::zero() : window;
}

}  // namespace rkv::transport
