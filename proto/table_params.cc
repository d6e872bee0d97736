#include "proto/table_params.h"

#include "proto/rkv.pb.h"
#include "proto/validation.h"

namespace rkv::control {

v1::TableParams ToProto(const TableParams& table) {
  v1::TableParams m;
  m.set_bucket_count_log2(table.bucket_count_log2);
  m.set_hash_seed(table.hash_seed);
  m.set_heap_size(table.heap_size);
  m.set_max_key_bytes(table.max_key_bytes);
  m.set_max_value_bytes(table.max_value_bytes);
  m.set_grace_period_us(table.grace_period_us);
  return m;
}

StatusOr<TableParams> FromProto(const v1::TableParams& table) {
  RKV_RETURN_IF_ERROR(ValidateTableParams(table));
  TableParams t;
  t.bucket_count_log2 = table.bucket_count_log2();
  t.hash_seed = table.hash_seed();
  t.heap_size = table.heap_size();
  t.max_key_bytes = table.max_key_bytes();
  t.max_value_bytes = table.max_value_bytes();
  t.grace_period_us = table.grace_period_us();
  return t;
}

}  // namespace rkv::control
