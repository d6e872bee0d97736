#include "proto/region_descriptor.h"

#include <gtest/gtest.h>

#include "proto/rkv.pb.h"

namespace rkv::control {
namespace {

TEST(RegionDescriptorTest, RoundTripsEveryField) {
  protocol::RegionDescriptor d{};
  d.addr = 0x7f0012345000;
  d.length = 1 << 20;
  d.rkey = 0xdeadbeef;
  const v1::RegionDescriptor m = ToProto(d);
  EXPECT_EQ(m.addr(), d.addr);
  EXPECT_EQ(m.length(), d.length);
  EXPECT_EQ(m.rkey(), d.rkey);
  StatusOr<protocol::RegionDescriptor> back = FromProto(m);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->addr, d.addr);
  EXPECT_EQ(back->length, d.length);
  EXPECT_EQ(back->rkey, d.rkey);
  EXPECT_EQ(back->reserved, 0u);
}

TEST(RegionDescriptorTest, FromProtoRefusesWhatValidationRefuses) {
  v1::RegionDescriptor empty;
  empty.set_addr(0x1000);
  StatusOr<protocol::RegionDescriptor> refused = FromProto(empty, "heap");
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("heap.length"), std::string::npos) << refused.status();

  v1::RegionDescriptor wraps;
  wraps.set_addr(~uint64_t{0} - 10);
  wraps.set_length(64);
  EXPECT_EQ(FromProto(wraps).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace rkv::control
