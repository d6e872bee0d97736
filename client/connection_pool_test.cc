#include "client/connection_pool.h"

#include <gtest/gtest.h>

#include <chrono>

#include "common/transport/factory.h"

namespace rkv::client {
namespace {

TEST(ConnectionPoolTest, KnowsItsIncarnationAndTransport) {
  auto transport = transport::CreateTransport(transport::Kind::kTcp, transport::Options{});
  ASSERT_TRUE(transport.ok()) << transport.status();
  ConnectionPool pool(transport->get(), "127.0.0.1:1", 7, 3);
  EXPECT_EQ(pool.transport(), transport->get());
  EXPECT_EQ(pool.kind(), transport::Kind::kTcp);
  EXPECT_EQ(pool.address(), "127.0.0.1:1");
  EXPECT_EQ(pool.map_epoch(), 7u);
  EXPECT_EQ(pool.size(), 3u);
}

TEST(ConnectionPoolTest, AFailedConnectIsReportedAndTriedAgainByTheNextCall) {
  auto transport = transport::CreateTransport(transport::Kind::kTcp, transport::Options{});
  ASSERT_TRUE(transport.ok()) << transport.status();
  // Nothing listens on port 1.
  ConnectionPool pool(transport->get(), "127.0.0.1:1", 0, 2);
  const protocol::ClientConnectParams request{};
  for (size_t slot : {ConnectionPool::kAnySlot, size_t{0}, size_t{1}}) {
    SlotLease lease(pool, slot);
    bool fresh = true;
    const Status s = lease.EnsureConnected(request, Clock::now() + std::chrono::seconds(10), &fresh);
    EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s;
    EXPECT_FALSE(fresh);
  }
}

TEST(ConnectionPoolTest, NoTimeLeftIsDeadlineExceeded) {
  auto transport = transport::CreateTransport(transport::Kind::kTcp, transport::Options{});
  ASSERT_TRUE(transport.ok()) << transport.status();
  ConnectionPool pool(transport->get(), "127.0.0.1:1", 0, 1);
  SlotLease lease(pool);
  bool fresh = true;
  const Status s = lease.EnsureConnected(protocol::ClientConnectParams{}, Clock::now(), &fresh);
  EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded) << s;
  EXPECT_FALSE(fresh);
}

}  // namespace
}  // namespace rkv::client
