// Helpers for tests of transports (the conformance suite, each transport's
// own tests, the fault transport's): waiting for completions and
// connection requests, and registered buffers. Test code only.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "common/status.h"
#include "common/transport/transport.h"

namespace rkv::transport::testing {

// Bounds only how long a broken build may hang a test; never a threshold.
inline constexpr auto kWait = std::chrono::seconds(30);

// Waits for one completion; a failed Poll comes back as a completion with
// wr_id ~0 and Poll's status.
inline Completion PollOne(Connection& conn) {
  using Clock = std::chrono::steady_clock;
  Completion out[1];
  const auto deadline = Clock::now() + kWait;
  while (Clock::now() < deadline) {
    StatusOr<size_t> n = conn.Poll(out, std::chrono::milliseconds(100));
    if (!n.ok()) return Completion{~uint64_t{0}, OpType::kRead, n.status(), 0};
    if (*n == 1) return out[0];
  }
  ADD_FAILURE() << "no completion";
  return Completion{~uint64_t{0}, OpType::kRead, Internal("the test gave up waiting"), 0};
}

// Polls until Poll reports the connection unusable and returns that
// status; every completion reported before goes to `seen`. Each Poll may
// wait long: a transport reports the completions it flushes before the
// failure, and a short Poll could end before the last of them came.
inline Status PollUntilFailed(Connection& conn, std::vector<Completion>* seen) {
  using Clock = std::chrono::steady_clock;
  Completion out[8];
  const auto deadline = Clock::now() + kWait;
  while (Clock::now() < deadline) {
    StatusOr<size_t> n = conn.Poll(out, kWait);
    if (!n.ok()) return n.status();
    for (size_t i = 0; i < *n; ++i) seen->push_back(out[i]);
  }
  return Internal("the connection never failed");
}

// The next connection request on `listener` (nullptr, and a test failure,
// when none came).
inline std::unique_ptr<Connection> NextPending(Listener& listener) {
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + kWait;
  while (Clock::now() < deadline) {
    StatusOr<std::unique_ptr<Connection>> next = listener.Next(std::chrono::milliseconds(100));
    if (!next.ok()) {
      ADD_FAILURE() << next.status();
      return nullptr;
    }
    if (*next != nullptr) return std::move(*next);
  }
  ADD_FAILURE() << "no connection request";
  return nullptr;
}

// A registered buffer.
struct Buffer {
  std::vector<uint8_t> bytes;
  std::unique_ptr<MemoryRegion> mr;
  LocalBuf At(size_t offset, uint32_t length) const { return LocalBuf{mr.get(), offset, length}; }
  RemoteBuf Remote(size_t offset = 0) const { return RemoteBuf{mr->remote_addr() + offset, mr->rkey()}; }
};

// `size` bytes of `fill`, registered with `t` for `access`.
inline Buffer MakeBuffer(Transport& t, size_t size, uint32_t access, uint8_t fill = 0) {
  Buffer b;
  b.bytes.assign(size, fill);
  StatusOr<std::unique_ptr<MemoryRegion>> mr = t.Register(b.bytes.data(), b.bytes.size(), access);
  EXPECT_TRUE(mr.ok()) << mr.status();
  if (mr.ok()) b.mr = std::move(*mr);
  return b;
}

}  // namespace rkv::transport::testing
