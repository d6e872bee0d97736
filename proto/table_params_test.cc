#include "proto/table_params.h"

#include <gtest/gtest.h>

#include "proto/rkv.pb.h"
#include "proto/validation.h"

namespace rkv::control {
namespace {

TableParams Good() {
  TableParams t;
  t.bucket_count_log2 = 12;
  t.hash_seed = 0x0123456789abcdef;
  t.heap_size = 1 << 20;
  t.max_key_bytes = 1024;
  t.max_value_bytes = 4096;
  t.grace_period_us = 100'000;
  return t;
}

TEST(TableParamsTest, RoundTripsEveryField) {
  const TableParams t = Good();
  const v1::TableParams m = ToProto(t);
  EXPECT_EQ(m.bucket_count_log2(), t.bucket_count_log2);
  EXPECT_EQ(m.hash_seed(), t.hash_seed);
  EXPECT_EQ(m.heap_size(), t.heap_size);
  EXPECT_EQ(m.max_key_bytes(), t.max_key_bytes);
  EXPECT_EQ(m.max_value_bytes(), t.max_value_bytes);
  EXPECT_EQ(m.grace_period_us(), t.grace_period_us);
  StatusOr<TableParams> back = FromProto(m);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->bucket_count_log2, t.bucket_count_log2);
  EXPECT_EQ(back->hash_seed, t.hash_seed);
  EXPECT_EQ(back->heap_size, t.heap_size);
  EXPECT_EQ(back->max_key_bytes, t.max_key_bytes);
  EXPECT_EQ(back->max_value_bytes, t.max_value_bytes);
  EXPECT_EQ(back->grace_period_us, t.grace_period_us);
}

TEST(TableParamsTest, FromProtoRefusesWhatValidationRefuses) {
  v1::TableParams m = ToProto(Good());
  m.set_heap_size(1000);  // not a multiple of 64
  StatusOr<TableParams> refused = FromProto(m);
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("table.heap_size"), std::string::npos) << refused.status();

  m = ToProto(Good());
  m.set_bucket_count_log2(kMaxBucketCountLog2 + 1);
  EXPECT_EQ(FromProto(m).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace rkv::control
