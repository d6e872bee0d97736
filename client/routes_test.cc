#include "client/routes.h"

#include <gtest/gtest.h>

#include <memory>

#include "common/transport/factory.h"

namespace rkv::client {
namespace {

TEST(RoutesTest, AttachesOnePoolPerServerOnce) {
  auto transport = transport::CreateTransport(transport::Kind::kTcp, transport::Options{});
  ASSERT_TRUE(transport.ok()) << transport.status();
  const auto table = RoutingTable::ForServer("127.0.0.1:1", "tcp");
  Routes routes(table, 3);
  EXPECT_EQ(&routes.table(), table.get());
  EXPECT_EQ(routes.generation(), 3u);
  EXPECT_EQ(routes.pool(0), nullptr);

  auto first = std::make_shared<ConnectionPool>(transport->get(), "127.0.0.1:1", 0, 2);
  auto second = std::make_shared<ConnectionPool>(transport->get(), "127.0.0.1:1", 0, 2);
  EXPECT_EQ(routes.Attach(0, first), first.get());
  // A second attach (a call that raced the first) gets the pool in place.
  EXPECT_EQ(routes.Attach(0, second), first.get());
  EXPECT_EQ(routes.pool(0), first.get());
  // The routes keep their pool alive.
  const ConnectionPool* attached = first.get();
  first.reset();
  EXPECT_EQ(routes.pool(0), attached);
  EXPECT_EQ(routes.pool(0)->address(), "127.0.0.1:1");
  EXPECT_EQ(routes.pool(0)->size(), 2u);
}

}  // namespace
}  // namespace rkv::client
