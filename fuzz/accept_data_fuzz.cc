// The accept private data a client receives from a server (rdmacm's
// ACCEPT, or the tcp transport's ACCEPT frame): client/wire_checks.h
// ParseAcceptData, on any bytes.
//
// Properties: accepted data describes regions the client can use without
// further checks: no region wraps the address space, the index is a table
// header and a power-of-two number of buckets, the heap is whole blocks
// within the layout's limit, the ring holds the largest block, and the
// limits and credits are within this client's bounds.
#include <cstddef>
#include <cstdint>

#include "client/wire_checks.h"
#include "fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace rkv;
  const StatusOr<protocol::AcceptData> parsed = client::ParseAcceptData(std::span<const uint8_t>(data, size));
  if (!parsed.ok()) {
    const StatusCode code = parsed.status().code();
    RKV_FUZZ_CHECK(code == StatusCode::kInvalidArgument || code == StatusCode::kFailedPrecondition);
    return 0;
  }
  const protocol::AcceptData& a = *parsed;
  RKV_FUZZ_CHECK(size >= sizeof(protocol::AcceptData));
  for (const protocol::RegionDescriptor& r : {a.index, a.heap, a.ring}) RKV_FUZZ_CHECK(r.addr + r.length >= r.addr);
  RKV_FUZZ_CHECK(a.request_credits >= 1 && a.request_credits <= client::kMaxRequestCredits);
  RKV_FUZZ_CHECK(a.max_key_bytes >= 1 && a.max_key_bytes <= layout::kMaxKeyBytesLimit);
  RKV_FUZZ_CHECK(a.max_value_bytes <= layout::kMaxValueBytesLimit);
  RKV_FUZZ_CHECK(a.grace_period_us / 2 > 0);
  const uint64_t buckets = (a.index.length - layout::kIndexHeaderBytes) / sizeof(layout::Bucket);
  RKV_FUZZ_CHECK(buckets > 0 && (buckets & (buckets - 1)) == 0);
  RKV_FUZZ_CHECK(layout::IndexBytes(buckets) == a.index.length);
  RKV_FUZZ_CHECK(a.heap.length > 0 && a.heap.length % layout::kBlockAlign == 0 &&
                 a.heap.length <= layout::kMaxHeapBytes);
  const uint64_t max_block = client::MaxBlockBytes(a);
  RKV_FUZZ_CHECK(max_block <= layout::kMaxBlockBytes);
  RKV_FUZZ_CHECK(a.ring.length >= max_block && a.ring.length % layout::kBlockAlign == 0);
  return 0;
}
