#include "server/admin_service.h"

#include <gtest/gtest.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>

#include <atomic>

#include "proto/auth.h"
#include "proto/rkv.grpc.pb.h"

namespace rkv::server {
namespace {

constexpr char kToken[] = "admin-test-token";

TEST(AdminServiceTest, ServesHealthAndStatsOnlyWithTheToken) {
  std::atomic<uint64_t> puts{5};
  auto admin = AdminServer::Start("127.0.0.1:0", kToken, [&] {
    AdminStats s;
    s.server_id = "s-0000abcd";
    s.epoch = 12;
    s.serving = true;
    s.keys = 3;
    s.puts = puts.load();
    s.deletes = 2;
    s.request_errors = 1;
    s.connections = 4;
    s.heap_bytes = 1 << 20;
    s.heap_bytes_used = 640;
    s.heap_bytes_quarantined = 128;
    return s;
  });
  ASSERT_TRUE(admin.ok()) << admin.status();
  auto stub = v1::Admin::NewStub(grpc::CreateChannel((*admin)->address(), grpc::InsecureChannelCredentials()));
  auto ctx = [](const std::string& token) {
    auto c = std::make_unique<grpc::ClientContext>();
    if (!token.empty()) control::AttachToken(c.get(), token);
    c->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
    return c;
  };

  for (const std::string token : {"", "not-the-token"}) {
    v1::HealthResponse health;
    EXPECT_EQ(stub->Health(ctx(token).get(), v1::HealthRequest(), &health).error_code(),
              grpc::StatusCode::UNAUTHENTICATED);
    v1::StatsResponse stats;
    EXPECT_EQ(stub->Stats(ctx(token).get(), v1::StatsRequest(), &stats).error_code(),
              grpc::StatusCode::UNAUTHENTICATED);
    EXPECT_EQ(stats.server_id(), "");
  }

  v1::HealthResponse health;
  ASSERT_TRUE(stub->Health(ctx(kToken).get(), v1::HealthRequest(), &health).ok());
  EXPECT_EQ(health.server_id(), "s-0000abcd");
  EXPECT_EQ(health.epoch(), 12u);
  EXPECT_TRUE(health.serving());

  puts = 6;  // read at call time
  v1::StatsResponse stats;
  ASSERT_TRUE(stub->Stats(ctx(kToken).get(), v1::StatsRequest(), &stats).ok());
  EXPECT_EQ(stats.puts(), 6u);
  EXPECT_EQ(stats.keys(), 3u);
  EXPECT_EQ(stats.deletes(), 2u);
  EXPECT_EQ(stats.request_errors(), 1u);
  EXPECT_EQ(stats.connections(), 4u);
  EXPECT_EQ(stats.gets_served_by_cpu(), 0u);
  EXPECT_EQ(stats.heap_bytes(), 1u << 20);
  EXPECT_EQ(stats.heap_bytes_used(), 640u);
  EXPECT_EQ(stats.heap_bytes_quarantined(), 128u);

  (*admin)->Shutdown();
  (*admin)->Shutdown();  // idempotent
}

TEST(AdminServiceTest, BadStartArgumentsAreRefused) {
  auto stats = [] { return AdminStats(); };
  EXPECT_EQ(AdminServer::Start("nowhere", kToken, stats).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(AdminServer::Start("127.0.0.1:0", "", stats).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(AdminServer::Start("127.0.0.1:0", kToken, nullptr).status().code(), StatusCode::kInvalidArgument);
  auto first = AdminServer::Start("127.0.0.1:0", kToken, stats);
  ASSERT_TRUE(first.ok()) << first.status();
  // The same port twice cannot be bound.
  EXPECT_EQ(AdminServer::Start((*first)->address(), kToken, stats).status().code(), StatusCode::kUnavailable);
}

}  // namespace
}  // namespace rkv::server
