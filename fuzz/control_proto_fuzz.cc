// Control-plane messages a coordinator, server or client trusts once
// validated (proto/validation.h, proto/region_descriptor.h,
// proto/table_params.h): the bytes of a protobuf message as gRPC delivers
// them, parsed, validated and converted.
//
// Input: a selector byte, then the serialized message:
//   0 JoinRequest, 1 HeartbeatRequest, 2 LeaveRequest, 3 TableParams,
//   4 RegionDescriptor.
//
// Properties: the conversions accept exactly what validation accepts and
// keep every field; an accepted join request's regions hold its table; an
// accepted server id is 1..64 characters of [A-Za-z0-9._-] starting with a
// letter or digit; Printable output is printable and bounded.
#include <cstddef>
#include <cstdint>
#include <string>

#include "common/layout.h"
#include "fuzz/fuzz_input.h"
#include "fuzz/quiet_protobuf.h"
#include "proto/region_descriptor.h"
#include "proto/rkv.pb.h"
#include "proto/table_params.h"
#include "proto/validation.h"

namespace {

using namespace rkv;

bool IdChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
         c == '-';
}

void CheckServerId(const std::string& id) {
  const Status s = control::ValidateServerId(id);
  bool expected = !id.empty() && id.size() <= control::kMaxServerIdBytes && id[0] != '.' && id[0] != '_' &&
                  id[0] != '-';
  for (const char c : id) expected = expected && IdChar(c);
  RKV_FUZZ_CHECK(s.ok() == expected);
  const std::string p = control::Printable(id);
  RKV_FUZZ_CHECK(p.size() <= 80 + 3);
  for (const char c : p) RKV_FUZZ_CHECK(c >= 0x20 && c < 0x7f);
}

// FromProto accepts what Validate accepts, and keeps every field.
void CheckRegion(const v1::RegionDescriptor& r) {
  const Status valid = control::ValidateRegion("region", r);
  const StatusOr<protocol::RegionDescriptor> d = control::FromProto(r);
  RKV_FUZZ_CHECK(valid.ok() == d.ok());
  if (!d.ok()) return;
  RKV_FUZZ_CHECK(d->addr == r.addr() && d->length == r.length() && d->rkey == r.rkey() && d->reserved == 0);
  RKV_FUZZ_CHECK(d->length > 0 && d->addr + d->length >= d->addr);
  const v1::RegionDescriptor back = control::ToProto(*d);
  RKV_FUZZ_CHECK(back.addr() == r.addr() && back.length() == r.length() && back.rkey() == r.rkey());
}

void CheckTable(const v1::TableParams& t) {
  const Status valid = control::ValidateTableParams(t);
  const StatusOr<control::TableParams> p = control::FromProto(t);
  RKV_FUZZ_CHECK(valid.ok() == p.ok());
  if (!p.ok()) return;
  RKV_FUZZ_CHECK(p->bucket_count_log2 <= control::kMaxBucketCountLog2);
  RKV_FUZZ_CHECK(p->heap_size > 0 && p->heap_size % 64 == 0 && p->heap_size <= layout::kMaxHeapBytes);
  RKV_FUZZ_CHECK(p->max_key_bytes >= 1 && p->max_key_bytes <= 65535);
  RKV_FUZZ_CHECK(p->max_value_bytes <= layout::kMaxValueBytesLimit);
  RKV_FUZZ_CHECK(p->grace_period_us >= 1 && p->grace_period_us <= control::kMaxGracePeriodUs);
  const v1::TableParams back = control::ToProto(*p);
  RKV_FUZZ_CHECK(back.SerializeAsString() == [&] {
    v1::TableParams known = t;
    known.DiscardUnknownFields();
    return known.SerializeAsString();
  }());
}

void CheckJoin(const v1::JoinRequest& r) {
  CheckServerId(r.server_id());
  CheckRegion(r.index());
  CheckRegion(r.heap());
  CheckTable(r.table());
  const Status s = control::ValidateJoinRequest(r);
  if (!s.ok()) {
    RKV_FUZZ_CHECK(s.code() == StatusCode::kInvalidArgument);
    return;
  }
  RKV_FUZZ_CHECK(control::ValidateServerId(r.server_id()).ok());
  RKV_FUZZ_CHECK(control::ValidateServerAndEpoch(r.server_id(), r.epoch()).ok());
  RKV_FUZZ_CHECK(control::ValidateHostPort(r.data_address()).ok());
  RKV_FUZZ_CHECK(control::ValidateTransportName(r.transport()).ok());
  RKV_FUZZ_CHECK(control::FromProto(r.index()).ok() && control::FromProto(r.heap()).ok());
  const StatusOr<control::TableParams> t = control::FromProto(r.table());
  RKV_FUZZ_CHECK(t.ok());
  RKV_FUZZ_CHECK(r.index().length() >= layout::IndexBytes(uint64_t{1} << t->bucket_count_log2));
  RKV_FUZZ_CHECK(r.heap().length() >= t->heap_size);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  rkv::fuzz::QuietProtobuf();
  fuzz::FuzzInput in(data, size);
  const uint8_t selector = in.Take<uint8_t>();
  const std::span<const uint8_t> bytes = in.Rest();
  const auto parse = [&](google::protobuf::MessageLite& m) {
    return m.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()));
  };
  switch (selector % 5) {
    case 0: {
      v1::JoinRequest r;
      if (parse(r)) CheckJoin(r);
      break;
    }
    case 1: {
      v1::HeartbeatRequest r;
      if (!parse(r)) break;
      CheckServerId(r.server_id());
      const Status s = control::ValidateServerAndEpoch(r.server_id(), r.epoch());
      RKV_FUZZ_CHECK(s.ok() == (control::ValidateServerId(r.server_id()).ok() && r.epoch() != 0));
      break;
    }
    case 2: {
      v1::LeaveRequest r;
      if (!parse(r)) break;
      const Status s = control::ValidateServerAndEpoch(r.server_id(), r.epoch());
      RKV_FUZZ_CHECK(s.ok() == (control::ValidateServerId(r.server_id()).ok() && r.epoch() != 0));
      break;
    }
    case 3: {
      v1::TableParams t;
      if (parse(t)) CheckTable(t);
      break;
    }
    default: {
      v1::RegionDescriptor r;
      if (parse(r)) CheckRegion(r);
      break;
    }
  }
  return 0;
}
