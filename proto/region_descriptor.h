// The one conversion between a region descriptor as the data plane carries
// it (protocol::RegionDescriptor, common/protocol.h: what a server
// registered, as a client addresses it) and as the control plane carries it
// (the message rkv.v1.RegionDescriptor in a JoinRequest or ServerInfo).
//
// Thread safety: pure functions.
#pragma once

#include <string_view>

#include "common/protocol.h"
#include "common/status.h"

namespace rkv::v1 {
class RegionDescriptor;
}  // namespace rkv::v1

namespace rkv::control {

// Every field copied; the descriptor's reserved word has no counterpart in
// the message.
v1::RegionDescriptor ToProto(const protocol::RegionDescriptor& region);

// The descriptor in `region` once ValidateRegion (proto/validation.h)
// accepts it; INVALID_ARGUMENT naming `field` otherwise. The reserved word
// is 0.
StatusOr<protocol::RegionDescriptor> FromProto(const v1::RegionDescriptor& region,
                                               std::string_view field = "region");

}  // namespace rkv::control
