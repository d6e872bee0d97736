// Lease renewals on a KeepLease stream (client/lease_stream.h,
// ControlClient::RenewLease): after one RenewLease finds the leader, the
// renewals go over one stream; a stream the coordinator ends ("not the
// leader") or that goes silent costs one unary renewal and a new stream,
// never a failed renewal. Against a fake coordinator that counts both.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "client/control_client.h"
#include "client/lease_stream.h"
#include "proto/coordinator_set.h"
#include "proto/grpc_server.h"
#include "proto/rkv.grpc.pb.h"

namespace rkv::client {
namespace {

using std::chrono::milliseconds;

constexpr char kToken[] = "lease-stream-test-token";
constexpr uint64_t kVersion = 7;
constexpr uint32_t kLeaseMs = 3000;
// Bounds a hang; never reached when renewals work.
constexpr auto kDeadline = std::chrono::seconds(20);

// Answers RenewLease and KeepLease with a lease on kVersion, counting each.
// end_next_streams: that many of the next stream messages end their
// stream instead ("not the leader", naming itself, as a coordinator that
// just lost and regained the lead would not; enough for the client);
// silent: KeepLease reads requests and never answers them.
class FakeCoordinator final : public v1::Coordinator::Service {
 public:
  std::atomic<int> unary{0};
  std::atomic<int> streamed{0};
  std::atomic<int> streams{0};
  std::atomic<int> end_next_streams{0};
  std::atomic<bool> silent{false};

  grpc::Status RenewLease(grpc::ServerContext*, const v1::RenewLeaseRequest* request,
                          v1::RenewLeaseResponse* out) override {
    unary.fetch_add(1);
    Fill(*request, out);
    return grpc::Status::OK;
  }

  grpc::Status KeepLease(grpc::ServerContext* context,
                         grpc::ServerReaderWriter<v1::RenewLeaseResponse, v1::RenewLeaseRequest>* stream) override {
    streams.fetch_add(1);
    v1::RenewLeaseRequest request;
    while (stream->Read(&request)) {
      if (silent.load()) {
        while (!context->IsCancelled()) std::this_thread::sleep_for(milliseconds(5));
        return grpc::Status::CANCELLED;
      }
      if (end_next_streams.load() > 0) {
        end_next_streams.fetch_sub(1);
        return grpc::Status(grpc::StatusCode::UNAVAILABLE, "not the leader; no leader elected yet (test)");
      }
      streamed.fetch_add(1);
      v1::RenewLeaseResponse out;
      Fill(request, &out);
      if (!stream->Write(out)) break;
    }
    return grpc::Status::OK;
  }

 private:
  static void Fill(const v1::RenewLeaseRequest& request, v1::RenewLeaseResponse* out) {
    out->set_map_version(kVersion);
    out->set_lease_ms(kLeaseMs);
    if (request.map_version() == kVersion) out->add_excluded_servers("x");
  }
};

class LeaseStreamTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto started = control::StartGrpcServer("127.0.0.1:0", &fake_, "fake coordinator");
    ASSERT_TRUE(started.ok()) << started.status();
    grpc_ = std::move(started).value();
    auto set = control::CoordinatorSet::Create(grpc_.address, kToken);
    ASSERT_TRUE(set.ok()) << set.status();
    control_ = std::make_unique<ControlClient>(std::move(set).value(), kToken, &holder_);
  }
  void TearDown() override {
    fake_.silent.store(false);
    control_.reset();
    if (grpc_.server) grpc_.server->Shutdown(std::chrono::system_clock::now());
  }

  // One renewal for kVersion that must succeed.
  void RenewOk() {
    StatusOr<v1::RenewLeaseResponse> r = control_->RenewLease(kVersion, Clock::now() + kDeadline);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->map_version(), kVersion);
    EXPECT_EQ(r->lease_ms(), kLeaseMs);
    ASSERT_EQ(r->excluded_servers_size(), 1) << "the answer is to this request";
  }

  FakeCoordinator fake_;
  control::StartedGrpcServer grpc_;
  MapHolder holder_;
  std::unique_ptr<ControlClient> control_;
};

TEST_F(LeaseStreamTest, AfterOneRenewLeaseEveryRenewalGoesOverOneStream) {
  for (int i = 0; i < 6; ++i) ASSERT_NO_FATAL_FAILURE(RenewOk());
  EXPECT_EQ(fake_.unary.load(), 1) << "the first renewal finds the leader";
  EXPECT_EQ(fake_.streamed.load(), 5);
  EXPECT_EQ(fake_.streams.load(), 1);
}

TEST_F(LeaseStreamTest, AStreamTheCoordinatorEndsCostsOneUnaryRenewalAndANewStream) {
  ASSERT_NO_FATAL_FAILURE(RenewOk());
  ASSERT_NO_FATAL_FAILURE(RenewOk());
  fake_.end_next_streams.store(1);
  // The stream ends with UNAVAILABLE; the same renewal is answered by
  // RenewLease, and a new stream carries the next ones.
  ASSERT_NO_FATAL_FAILURE(RenewOk());
  EXPECT_EQ(fake_.unary.load(), 2);
  ASSERT_NO_FATAL_FAILURE(RenewOk());
  ASSERT_NO_FATAL_FAILURE(RenewOk());
  EXPECT_EQ(fake_.unary.load(), 2);
  EXPECT_EQ(fake_.streamed.load(), 3);
  EXPECT_EQ(fake_.streams.load(), 2);
}

TEST_F(LeaseStreamTest, ASilentStreamLeavesTimeForAUnaryRenewal) {
  ASSERT_NO_FATAL_FAILURE(RenewOk());
  fake_.silent.store(true);
  // Half the time left goes to the stream, the rest to RenewLease.
  StatusOr<v1::RenewLeaseResponse> r = control_->RenewLease(kVersion, Clock::now() + std::chrono::seconds(4));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(fake_.unary.load(), 2);
}

TEST_F(LeaseStreamTest, ADeadlineOnTheStreamAloneIsDeadlineExceeded) {
  ASSERT_NO_FATAL_FAILURE(RenewOk());
  auto set = control::CoordinatorSet::Create(grpc_.address, kToken);
  ASSERT_TRUE(set.ok()) << set.status();
  StatusOr<control::CoordinatorSet::Target> target = (*set)->TargetOf(grpc_.address);
  ASSERT_TRUE(target.ok()) << target.status();
  LeaseStream stream(**set, *target);
  v1::RenewLeaseRequest request;
  request.set_map_version(kVersion);
  StatusOr<v1::RenewLeaseResponse> first = stream.Renew(request, Clock::now() + kDeadline);
  ASSERT_TRUE(first.ok()) << first.status();
  fake_.silent.store(true);
  StatusOr<v1::RenewLeaseResponse> second = stream.Renew(request, Clock::now() + milliseconds(200));
  EXPECT_EQ(second.status().code(), StatusCode::kDeadlineExceeded) << second.status();
  EXPECT_TRUE(stream.broken());
  EXPECT_EQ(stream.Renew(request, Clock::now() + kDeadline).status().code(), StatusCode::kUnavailable);
}

TEST_F(LeaseStreamTest, AStreamToNoCoordinatorBreaksUnavailableNamingIt) {
  auto set = control::CoordinatorSet::Create("127.0.0.1:1", kToken);
  ASSERT_TRUE(set.ok()) << set.status();
  StatusOr<control::CoordinatorSet::Target> target = (*set)->TargetOf("127.0.0.1:1");
  ASSERT_TRUE(target.ok()) << target.status();
  LeaseStream stream(**set, *target);
  StatusOr<v1::RenewLeaseResponse> r = stream.Renew(v1::RenewLeaseRequest(), Clock::now() + kDeadline);
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable) << r.status();
  EXPECT_NE(r.status().message().find("coordinator 127.0.0.1:1: KeepLease"), std::string::npos) << r.status();
}

}  // namespace
}  // namespace rkv::client
