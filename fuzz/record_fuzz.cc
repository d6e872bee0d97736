// DecodeRecord (common/record.h): a block as a client READs it from a
// server's heap or a server finds it in a client's staging ring.
//
// Properties: an accepted record's key and value lie inside the input, the
// key is not empty, no unknown flag is set, the expiry is not negative; encoding the decoded fields
// again reproduces the input's record bytes exactly (the checksum covers
// every byte after itself, so nothing else can decode). DecodeHeapBlock
// accepts what DecodeRecord accepts, as not superseded, and beyond that
// only the superseded form, which DecodeRecord refuses.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "common/layout.h"
#include "common/record.h"
#include "fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> in(data, size);
  const rkv::StatusOr<rkv::RecordView> r = rkv::DecodeRecord(in);
  const rkv::StatusOr<rkv::RecordView> heap = rkv::DecodeHeapBlock(in);
  RKV_FUZZ_CHECK(!r.ok() || (heap.ok() && !heap->superseded));
  if (heap.ok() && heap->superseded) {
    RKV_FUZZ_CHECK(!r.ok() && r.status().code() == rkv::StatusCode::kDataLoss);
    uint64_t checksum;
    std::memcpy(&checksum, data, sizeof(checksum));
    RKV_FUZZ_CHECK(rkv::layout::SupersededChecksum(checksum) ==
                   rkv::BlockChecksum(data, rkv::layout::RecordBytes(heap->key.size(), heap->value.size())));
  }
  if (!r.ok()) {
    const rkv::StatusCode code = r.status().code();
    RKV_FUZZ_CHECK(code == rkv::StatusCode::kInvalidArgument || code == rkv::StatusCode::kDataLoss);
    return 0;
  }
  const auto* begin = reinterpret_cast<const char*>(data);
  RKV_FUZZ_CHECK(!r->key.empty());
  RKV_FUZZ_CHECK(r->key.data() == begin + rkv::layout::kBlockHeaderBytes);
  RKV_FUZZ_CHECK(r->value.data() == r->key.data() + r->key.size());
  RKV_FUZZ_CHECK(r->value.data() + r->value.size() <= begin + size);
  RKV_FUZZ_CHECK((r->flags & ~rkv::layout::kBlockFlagsKnown) == 0);
  RKV_FUZZ_CHECK(r->expires_at_ms >= 0);

  const uint64_t used = rkv::layout::RecordBytes(r->key.size(), r->value.size());
  std::vector<uint8_t> again(rkv::layout::BlockBytes(r->key.size(), r->value.size()));
  const uint64_t block = rkv::EncodeRecord(again, r->key, r->value, r->version, r->flags, r->expires_at_ms);
  RKV_FUZZ_CHECK(block == again.size() && used <= block);
  RKV_FUZZ_CHECK(std::memcmp(again.data(), data, used) == 0);
  const rkv::StatusOr<rkv::RecordView> back = rkv::DecodeRecord(again);
  RKV_FUZZ_CHECK(back.ok() && back->key == r->key && back->value == r->value && back->version == r->version &&
                 back->flags == r->flags && back->expires_at_ms == r->expires_at_ms);
  return 0;
}
