#include "proto/region_descriptor.h"

#include "proto/rkv.pb.h"
#include "proto/validation.h"

namespace rkv::control {

v1::RegionDescriptor ToProto(const protocol::RegionDescriptor& region) {
  v1::RegionDescriptor m;
  m.set_addr(region.addr);
  m.set_length(region.length);
  m.set_rkey(region.rkey);
  return m;
}

StatusOr<protocol::RegionDescriptor> FromProto(const v1::RegionDescriptor& region, std::string_view field) {
  RKV_RETURN_IF_ERROR(ValidateRegion(field, region));
  protocol::RegionDescriptor d{};
  d.addr = region.addr();
  d.length = region.length();
  d.rkey = region.rkey();
  return d;
}

}  // namespace rkv::control
