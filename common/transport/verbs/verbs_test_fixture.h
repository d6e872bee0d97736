// What the verbs transport's test files share (verbs_transport_test.cc and
// verbs_poll_group_test.cc, one binary): the accept data the test server
// announces, polling helpers, and the fixture of a server and a client
// transport on the device at $RKV_RDMA_ADDR. Test code only.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <future>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "common/transport/factory.h"
#include "common/transport/transport.h"
#include "common/transport/verbs/verbs_transport.h"

namespace rkv::transport::verbs_testing {

// What a client sends after its WRITE, and what the server answers (the
// churn and the poll group tests).
struct ChurnMessage {
  uint64_t token;
  uint64_t ring_hash;  // reply: FNV-1a of the first bytes the client wrote
};

inline uint64_t Fnv1a(const uint8_t* p, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

// Safety limits only (a hung test fails instead of hanging); no test
// asserts on how long anything takes.
inline constexpr auto kConnectTimeout = std::chrono::seconds(60);
inline constexpr auto kNextTimeout = std::chrono::seconds(60);
inline constexpr auto kPollLimit = std::chrono::seconds(60);

// What the test server announces in its accept private data.
struct Descriptor {
  uint64_t heap_addr;
  uint32_t heap_rkey;
  uint32_t heap_len;
  uint64_t ring_addr;
  uint32_t ring_rkey;
  uint32_t ring_len;
};
static_assert(sizeof(Descriptor) <= kMaxAcceptPrivateData);

inline std::span<const uint8_t> Bytes(const void* p, size_t n) {
  return {static_cast<const uint8_t*>(p), n};
}

inline Descriptor ParseDescriptor(const Connection& c) {
  Descriptor d{};
  const auto data = c.peer_private_data();
  EXPECT_GE(data.size(), sizeof d);
  if (data.size() >= sizeof d) std::memcpy(&d, data.data(), sizeof d);
  return d;
}

// Polls until `n` completions arrived (or the safety limit); a failed Poll
// fails the test.
inline std::vector<Completion> PollFor(Connection& c, size_t n) {
  std::vector<Completion> got;
  Completion buf[16];
  const auto limit = std::chrono::steady_clock::now() + kPollLimit;
  while (got.size() < n && std::chrono::steady_clock::now() < limit) {
    auto r = c.Poll(std::span<Completion>(buf, std::min<size_t>(16, n - got.size())), std::chrono::milliseconds(100));
    if (!r.ok()) {
      ADD_FAILURE() << "Poll failed: " << r.status();
      break;
    }
    for (size_t i = 0; i < *r; ++i) got.push_back(buf[i]);
  }
  EXPECT_EQ(got.size(), n) << "completions missing";
  return got;
}

// Polls until Poll itself fails; returns that status and every completion
// seen before.
inline Status PollUntilBroken(Connection& c, std::vector<Completion>* seen) {
  Completion buf[16];
  const auto limit = std::chrono::steady_clock::now() + kPollLimit;
  while (std::chrono::steady_clock::now() < limit) {
    auto r = c.Poll(buf, std::chrono::milliseconds(100));
    if (!r.ok()) return r.status();
    for (size_t i = 0; i < *r; ++i) seen->push_back(buf[i]);
  }
  return DeadlineExceeded("the connection never reported a failure");
}

class VerbsTransportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(VerbsDeviceAvailable())
        << "no RDMA device with an active port on this machine; this test needs one "
           "(run it inside the SoftRoCE guest: deploy/softroce/run-in-guest.sh -- "
           "build/release/common/transport/verbs_transport_test)";
    const char* addr = std::getenv("RKV_RDMA_ADDR");
    ASSERT_NE(addr, nullptr) << "set RKV_RDMA_ADDR to an IP address of the RDMA device";
    host_ = addr;
    auto server = CreateVerbsTransport(Options{});
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(server).value();
    Options client_options;
    // A small send queue, so that the tests wrap it many times.
    client_options.max_send_wr = 16;
    auto client = CreateVerbsTransport(client_options);
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = std::move(client).value();
    auto listener = server_->Listen(host_ + ":0");
    ASSERT_TRUE(listener.ok()) << listener.status();
    listener_ = std::move(listener).value();

    heap_.resize(64 * 1024);
    for (size_t i = 0; i < heap_.size(); ++i) heap_[i] = static_cast<uint8_t>(i * 7 + i / 256);
    auto heap_mr = server_->Register(heap_.data(), heap_.size(), kRemoteRead);
    ASSERT_TRUE(heap_mr.ok()) << heap_mr.status();
    heap_mr_ = std::move(heap_mr).value();
  }

  // The server side of one handshake: Next, `setup` (may register private
  // memory, post receives and fill the reply), Accept. Runs on its own
  // thread while the caller connects.
  using Setup = std::function<void(Connection&, Descriptor*)>;

  struct Pair {
    std::unique_ptr<Connection> server;
    std::unique_ptr<Connection> client;
  };

  Pair Connect(const Setup& setup = nullptr) {
    auto server = std::async(std::launch::async, [&]() -> StatusOr<std::unique_ptr<Connection>> {
      auto next = listener_->Next(kNextTimeout);
      if (!next.ok()) return next.status();
      if (*next == nullptr) return DeadlineExceeded("no connection request arrived");
      std::unique_ptr<Connection> conn = std::move(next).value();
      Descriptor d{};
      d.heap_addr = heap_mr_->remote_addr();
      d.heap_rkey = heap_mr_->rkey();
      d.heap_len = static_cast<uint32_t>(heap_mr_->size());
      if (setup) setup(*conn, &d);
      RKV_RETURN_IF_ERROR(conn->Accept(Bytes(&d, sizeof d)));
      return conn;
    });
    auto client = client_->Connect(listener_->address(), {}, kConnectTimeout);
    auto accepted = server.get();
    Pair pair;
    EXPECT_TRUE(client.ok()) << client.status();
    EXPECT_TRUE(accepted.ok()) << accepted.status();
    if (client.ok()) pair.client = std::move(client).value();
    if (accepted.ok()) pair.server = std::move(accepted).value();
    return pair;
  }

  std::unique_ptr<MemoryRegion> ClientRegion(std::vector<uint8_t>& buf, uint32_t access = kLocalWrite) {
    auto mr = client_->Register(buf.data(), buf.size(), access);
    EXPECT_TRUE(mr.ok()) << mr.status();
    return mr.ok() ? std::move(mr).value() : nullptr;
  }

  std::string host_;
  std::unique_ptr<Transport> server_;
  std::unique_ptr<Transport> client_;
  std::unique_ptr<Listener> listener_;
  std::vector<uint8_t> heap_;
  std::unique_ptr<MemoryRegion> heap_mr_;
};

}  // namespace rkv::transport::verbs_testing
