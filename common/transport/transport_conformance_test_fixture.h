// The transport contract, tested once for every transport: each test checks
// a promise of common/transport/transport.h, against each transport that
// $RKV_TRANSPORTS names (comma-separated; default "tcp,fault(tcp)"):
//   tcp          the tcp transport, on 127.0.0.1;
//   verbs        the verbs transport, on $RKV_RDMA_ADDR (an address of an
//                RDMA device: tests/verbs_suite.sh runs it in the SoftRoCE
//                guest);
//   fault(KIND)  a FaultTransport (fault/fault_transport.h) with no fault
//                set, around KIND: the wrapper must change nothing.
// A transport that cannot be made here (verbs without a device or without
// $RKV_RDMA_ADDR, a name that is none of these) fails every test of its
// instance; it is never skipped.
//
// What only one transport does (tcp's framing and limits, verbs' devices,
// GIDs, memory windows and CM) is tested beside it, in tcp/ and verbs/.
//
// Server and client are two transports in one process (two protection
// domains for verbs), as two processes would be. The client's send queue is
// small (16 work requests), so that the tests wrap it. No test asserts how
// long anything takes: kWait only bounds how long a broken transport can
// hang a test.
//
// The suite is one binary built from several files, by concern: this
// header holds the fixture all of them share;
// transport_conformance_test.cc the transports, listeners and handshake
// (and the instantiation of TransportTest over the transports);
// transport_conformance_datapath_test.cc the data path;
// transport_conformance_errors_test.cc the error state and access rights.
// Test code only.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <future>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "common/transport/fault/fault_transport.h"
#include "common/transport/transport.h"
#include "common/transport/transport_test_util.h"
#include "common/transport/transports_under_test.h"
#include "common/transport/verbs/verbs_connection.h"

namespace rkv::transport {

inline constexpr uint32_t kClientSendDepth = 16;

inline std::vector<uint8_t> Bytes(std::string_view s) { return std::vector<uint8_t>(s.begin(), s.end()); }

inline bool StartsWith(std::span<const uint8_t> data, std::span<const uint8_t> prefix) {
  return data.size() >= prefix.size() && std::equal(prefix.begin(), prefix.end(), data.begin());
}

// Whether a connection-private region of `server_side` is closed to other
// connections. It always is, but on a verbs device without type 2 memory
// windows, where private regions are plain MRs (the weaker fallback that
// verbs/verbs_connection.h documents).
inline bool PrivateRegionsAreEnforced(Connection& server_side) {
  Connection* c = &server_side;
  while (Connection* inner = fault::WrappedConnection(*c)) c = inner;
  const auto* verbs_connection = dynamic_cast<const verbs::VerbsConnection*>(c);
  return verbs_connection == nullptr || verbs_connection->uses_memory_windows();
}

// A connection-private region (server side, before Accept).
struct Private {
  std::vector<uint8_t> bytes;
  MemoryRegion* mr = nullptr;
  RemoteBuf Remote(size_t offset = 0) const { return RemoteBuf{mr->remote_addr() + offset, mr->rkey()}; }
  void Register(Connection& c, uint32_t access) {
    StatusOr<MemoryRegion*> r = c.RegisterPrivate(bytes.data(), bytes.size(), access);
    ASSERT_TRUE(r.ok()) << r.status();
    mr = *r;
  }
};

// ------------------------------------------------------------------ fixture

class ConformanceTest : public ::testing::Test {
 protected:
  // Makes server and client transports of `name` and a listener.
  void Start(const std::string& name) {
    name_ = name;
    StatusOr<std::unique_ptr<Transport>> server = testing::MakeTransport(name, Options{});
    ASSERT_TRUE(server.ok()) << name << ": " << server.status();
    server_ = std::move(*server);
    StatusOr<std::unique_ptr<Transport>> client = testing::MakeTransport(name, ClientOptions());
    ASSERT_TRUE(client.ok()) << name << ": " << client.status();
    client_ = std::move(*client);
    if (testing::BaseName(name) == "verbs") {
      const char* addr = std::getenv("RKV_RDMA_ADDR");
      ASSERT_NE(addr, nullptr) << "the verbs instance needs $RKV_RDMA_ADDR, an address of the RDMA device";
      host_ = addr;
      kind_ = Kind::kVerbs;
    } else {
      host_ = "127.0.0.1";
      kind_ = Kind::kTcp;
    }
    StatusOr<std::unique_ptr<Listener>> listener = server_->Listen(host_ + ":0");
    ASSERT_TRUE(listener.ok()) << listener.status();
    listener_ = std::move(*listener);
  }

  static Options ClientOptions() {
    Options options;
    options.max_send_wr = kClientSendDepth;
    return options;
  }

  std::unique_ptr<Connection> NextPending() { return testing::NextPending(*listener_); }

  struct Pair {
    std::unique_ptr<Connection> server;
    std::unique_ptr<Connection> client;
  };

  // Connects a client of `client` (client_ when null) and accepts it;
  // `setup` runs on the pending server side before Accept (private
  // memory, receives).
  Pair ConnectPair(const std::function<void(Connection&)>& setup = {}, std::span<const uint8_t> hello = {},
                   std::span<const uint8_t> reply = {}, Transport* client = nullptr) {
    Transport& from = client != nullptr ? *client : *client_;
    Pair pair;
    auto connecting = std::async(std::launch::async, [&] { return from.Connect(listener_->address(), hello, testing::kWait); });
    pair.server = NextPending();
    if (pair.server != nullptr) {
      if (setup) setup(*pair.server);
      const Status accepted = pair.server->Accept(reply);
      EXPECT_TRUE(accepted.ok()) << accepted;
    }
    StatusOr<std::unique_ptr<Connection>> connected = connecting.get();
    EXPECT_TRUE(connected.ok()) << connected.status();
    if (connected.ok()) pair.client = std::move(*connected);
    return pair;
  }

  // Starts a Connect that the test answers (or not) itself.
  std::future<StatusOr<std::unique_ptr<Connection>>> ConnectAsync(std::vector<uint8_t> hello = {}) {
    return std::async(std::launch::async, [this, hello = std::move(hello)] {
      return client_->Connect(listener_->address(), hello, testing::kWait);
    });
  }

  std::string name_;
  Kind kind_ = Kind::kTcp;
  std::string host_;
  std::unique_ptr<Transport> server_;
  std::unique_ptr<Transport> client_;
  std::unique_ptr<Listener> listener_;
};

class TransportTest : public ConformanceTest, public ::testing::WithParamInterface<std::string> {
 protected:
  void SetUp() override { Start(GetParam()); }
};

}  // namespace rkv::transport
