#include "client/wire_checks.h"

#include <cstring>
#include <string>

namespace rkv::client {
namespace {

using std::to_string;

// addr + length must not wrap around the address space.
bool Overflows(const protocol::RegionDescriptor& r) { return r.addr + r.length < r.addr; }

bool IsPowerOfTwo(uint64_t v) { return v != 0 && (v & (v - 1)) == 0; }

}  // namespace

uint64_t MaxBlockBytes(const protocol::AcceptData& accept) {
  return layout::BlockBytes(accept.max_key_bytes, accept.max_value_bytes);
}

StatusOr<protocol::AcceptData> ParseAcceptData(std::span<const uint8_t> data) {
  if (data.size() < sizeof(protocol::AcceptData)) {
    return InvalidArgument("accept data of " + to_string(data.size()) + " bytes, expected at least " +
                           to_string(sizeof(protocol::AcceptData)));
  }
  protocol::AcceptData a;
  std::memcpy(&a, data.data(), sizeof(a));
  if (a.magic != protocol::kAcceptMagic) {
    return InvalidArgument("accept data has bad magic " + to_string(a.magic));
  }
  if (a.protocol_version != protocol::kProtocolVersion) {
    return FailedPrecondition("server speaks protocol version " + to_string(a.protocol_version) +
                              ", this client " + to_string(protocol::kProtocolVersion));
  }
  if (a.layout_version != layout::kLayoutVersion) {
    return FailedPrecondition("server uses layout version " + to_string(a.layout_version) +
                              ", this client " + to_string(layout::kLayoutVersion));
  }
  if (a.request_credits == 0 || a.request_credits > kMaxRequestCredits) {
    return InvalidArgument("accept data has request_credits " + to_string(a.request_credits) +
                           ", expected 1.." + to_string(kMaxRequestCredits));
  }
  if (a.max_key_bytes == 0 || a.max_key_bytes > layout::kMaxKeyBytesLimit) {
    return InvalidArgument("accept data has max_key_bytes " + to_string(a.max_key_bytes) +
                           ", expected 1.." + to_string(layout::kMaxKeyBytesLimit));
  }
  if (a.max_value_bytes > layout::kMaxValueBytesLimit) {
    return InvalidArgument("accept data has max_value_bytes " + to_string(a.max_value_bytes) +
                           ", over the layout's " + to_string(layout::kMaxValueBytesLimit));
  }
  if (a.grace_period_us < 2) {
    return InvalidArgument("accept data has grace_period_us " + to_string(a.grace_period_us) +
                           ": a GET lease (half of it) would be zero");
  }
  // Index: header + a power-of-two number of whole buckets.
  if (Overflows(a.index) || a.index.length < layout::IndexBytes(1) ||
      (a.index.length - layout::kIndexHeaderBytes) % sizeof(layout::Bucket) != 0 ||
      !IsPowerOfTwo((a.index.length - layout::kIndexHeaderBytes) / sizeof(layout::Bucket))) {
    return InvalidArgument("accept data has an index region of " + to_string(a.index.length) +
                           " bytes: not a table header plus a power-of-two number of buckets");
  }
  if (Overflows(a.heap) || a.heap.length == 0 || a.heap.length % layout::kBlockAlign != 0 ||
      a.heap.length > layout::kMaxHeapBytes) {
    return InvalidArgument("accept data has a heap region of " + to_string(a.heap.length) +
                           " bytes: not a whole number of 64-byte blocks up to " +
                           to_string(layout::kMaxHeapBytes));
  }
  const uint64_t max_block = MaxBlockBytes(a);
  if (Overflows(a.ring) || a.ring.length % layout::kBlockAlign != 0 || a.ring.length < max_block) {
    return InvalidArgument("accept data has a staging ring of " + to_string(a.ring.length) +
                           " bytes: not a whole number of 64-byte blocks holding the largest record (" +
                           to_string(max_block) + " bytes)");
  }
  return a;
}

Status CheckTableHeader(const layout::TableHeader& h, const protocol::AcceptData& a) {
  if (h.magic != layout::kTableMagic) {
    return InvalidArgument("index region does not start with a table header (bad magic)");
  }
  if (h.layout_version != layout::kLayoutVersion) {
    return FailedPrecondition("table has layout version " + to_string(h.layout_version) +
                              ", this client " + to_string(layout::kLayoutVersion));
  }
  if (h.bucket_count_log2 > 48 || h.bucket_count != (uint64_t{1} << h.bucket_count_log2)) {
    return InvalidArgument("table header has bucket_count " + to_string(h.bucket_count) +
                           " and bucket_count_log2 " + to_string(h.bucket_count_log2) +
                           ", which disagree");
  }
  if (layout::IndexBytes(h.bucket_count) != a.index.length) {
    return InvalidArgument("table header has " + to_string(h.bucket_count) +
                           " buckets but the index region is " + to_string(a.index.length) +
                           " bytes");
  }
  if (h.heap_size != a.heap.length) {
    return InvalidArgument("table header has heap_size " + to_string(h.heap_size) +
                           " but the heap region is " + to_string(a.heap.length) + " bytes");
  }
  if (h.epoch != a.epoch) {
    return Unavailable("table header has epoch " + to_string(h.epoch) + " but the server accepted in epoch " +
                       to_string(a.epoch) + " (restarted?)");
  }
  return Status::Ok();
}

StatusOr<protocol::ReplyMsg> ParseReply(std::span<const uint8_t> data) {
  if (data.size() != sizeof(protocol::ReplyMsg)) {
    return InvalidArgument("reply of " + to_string(data.size()) + " bytes, expected " +
                           to_string(sizeof(protocol::ReplyMsg)));
  }
  protocol::ReplyMsg r;
  std::memcpy(&r, data.data(), sizeof(r));
  if (!IsValidStatusCode(r.status_code)) {
    return InvalidArgument("reply has unknown status code " + to_string(r.status_code));
  }
  if (!IsValidReason(r.reason)) return InvalidArgument("reply has unknown reason " + to_string(r.reason));
  if (r.status_code == 0 && r.reason != 0) {
    return InvalidArgument("OK reply carries reason " + std::string(ReasonName(static_cast<Reason>(r.reason))));
  }
  if (r.reserved != 0) return InvalidArgument("reply reserved byte is not zero");
  if (std::memchr(r.message, '\0', sizeof(r.message)) == nullptr) {
    return InvalidArgument("reply message is not NUL-terminated");
  }
  return r;
}

Status ReplyStatus(const protocol::ReplyMsg& reply) {
  if (reply.status_code == 0) return Status::Ok();
  return Status(static_cast<StatusCode>(reply.status_code), std::string(reply.message),
                static_cast<Reason>(reply.reason), reply.map_version);
}

}  // namespace rkv::client
