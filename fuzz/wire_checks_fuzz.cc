// What a client checks before it trusts what it READs or receives from a
// server (client/wire_checks.h): the table header READ from the index
// region, against the accept data; and reply messages.
//
// Input: a selector byte. Selector even: the rest is a reply message
// (ParseReply). Selector odd: the rest is XORed over a valid AcceptData
// followed by a valid TableHeader (all-zero bytes give the valid pair, so
// the fuzzer starts from data that passes and flips fields from there);
// then 8 bytes of a key's table hash.
//
// Properties: an accepted reply has a known status code and a terminated
// message; for an accepted accept-data/header pair, every neighbourhood a
// key may have (common/hash.h NeighborhoodOf) lies inside the index region,
// so the client's neighbourhood READ never leaves it.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "client/wire_checks.h"
#include "common/hash.h"
#include "fuzz/fuzz_input.h"

namespace {

using namespace rkv;

constexpr uint32_t kLog2 = 10;

protocol::AcceptData ValidAccept() {
  protocol::AcceptData a{};
  a.magic = protocol::kAcceptMagic;
  a.protocol_version = protocol::kProtocolVersion;
  a.layout_version = layout::kLayoutVersion;
  a.epoch = 7;
  a.index = {0x10000, layout::IndexBytes(uint64_t{1} << kLog2), 11, 0};
  a.heap = {0x200000, 1 << 20, 12, 0};
  a.request_credits = 16;
  a.max_key_bytes = 1024;
  a.max_value_bytes = 64 << 10;
  a.ring = {0x900000, 256 << 10, 13, 0};
  a.grace_period_us = 100000;
  return a;
}

layout::TableHeader ValidHeader(const protocol::AcceptData& a) {
  layout::TableHeader h{};
  h.magic = layout::kTableMagic;
  h.layout_version = layout::kLayoutVersion;
  h.bucket_count_log2 = kLog2;
  h.epoch = a.epoch;
  h.bucket_count = uint64_t{1} << kLog2;
  h.hash_seed = 42;
  h.heap_size = a.heap.length;
  return h;
}

template <typename T>
void XorInto(T* v, fuzz::FuzzInput& in) {
  const std::span<const uint8_t> b = in.Bytes(sizeof(T));
  auto* p = reinterpret_cast<uint8_t*>(v);
  for (size_t i = 0; i < b.size(); ++i) p[i] ^= b[i];
}

void CheckReply(std::span<const uint8_t> bytes) {
  const StatusOr<protocol::ReplyMsg> r = client::ParseReply(bytes);
  if (!r.ok()) {
    RKV_FUZZ_CHECK(r.status().code() == StatusCode::kInvalidArgument);
    return;
  }
  RKV_FUZZ_CHECK(bytes.size() == sizeof(protocol::ReplyMsg));
  RKV_FUZZ_CHECK(IsValidStatusCode(r->status_code));
  RKV_FUZZ_CHECK(std::strlen(r->message) < sizeof(r->message));
}

void CheckHeader(fuzz::FuzzInput& in) {
  protocol::AcceptData a = ValidAccept();
  XorInto(&a, in);
  layout::TableHeader h = ValidHeader(ValidAccept());
  XorInto(&h, in);
  const uint64_t hash = in.Take<uint64_t>();

  std::vector<uint8_t> accept_bytes(sizeof(a));
  std::memcpy(accept_bytes.data(), &a, sizeof(a));
  const StatusOr<protocol::AcceptData> parsed = client::ParseAcceptData(accept_bytes);
  if (!parsed.ok()) return;
  const Status s = client::CheckTableHeader(h, *parsed);
  if (!s.ok()) {
    const StatusCode code = s.code();
    RKV_FUZZ_CHECK(code == StatusCode::kInvalidArgument || code == StatusCode::kFailedPrecondition ||
                   code == StatusCode::kUnavailable);
    return;
  }
  RKV_FUZZ_CHECK(h.bucket_count == uint64_t{1} << h.bucket_count_log2);
  RKV_FUZZ_CHECK(h.heap_size == parsed->heap.length && h.epoch == parsed->epoch);
  const Neighborhood nb = NeighborhoodOf(hash, h.bucket_count_log2);
  RKV_FUZZ_CHECK(nb.count >= 1 && nb.count <= layout::kNeighborhoodBuckets);
  RKV_FUZZ_CHECK(nb.first + nb.count <= h.bucket_count);
  RKV_FUZZ_CHECK(layout::BucketOffset(nb.first) + nb.count * sizeof(layout::Bucket) <= parsed->index.length);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::FuzzInput in(data, size);
  if (in.Take<uint8_t>() % 2 == 0) {
    CheckReply(in.Rest());
  } else {
    CheckHeader(in);
  }
  return 0;
}
