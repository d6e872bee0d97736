// A client's verification of a neighbourhood and the blocks it names
// (client/wire_checks.h, as client/server_connection_get.cc uses it): slot
// words READ from a server's index and block bytes READ from its heap,
// both any bytes at all.
//
// Input: max_key_bytes (u16) and max_value_bytes (u32) as the accept data
// gives them, the key's fingerprint (u16), 64 slot words (one
// neighbourhood), then the heap: the rest of the input, exactly its size.
//
// Properties: the SSE2 scan and the portable one report the same slots in
// the same order, each used and with the fingerprint; a slot that passes
// SlotBlockInHeap names a block inside the heap (ASan sees any read past
// it while the block is decoded) no larger than the largest block.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "client/wire_checks.h"
#include "common/layout.h"
#include "common/record.h"
#include "fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace rkv;
  constexpr size_t kSlots = layout::kNeighborhoodBuckets * layout::kSlotsPerBucket;
  fuzz::FuzzInput in(data, size);
  protocol::AcceptData accept{};
  accept.max_key_bytes = 1 + in.Take<uint16_t>() % layout::kMaxKeyBytesLimit;
  accept.max_value_bytes = static_cast<uint32_t>(in.Take<uint32_t>() % (layout::kMaxValueBytesLimit + 1));
  const uint64_t max_block = client::MaxBlockBytes(accept);
  const uint16_t fingerprint = in.Take<uint16_t>();
  std::vector<uint8_t> words(kSlots * sizeof(uint64_t), 0);
  const std::span<const uint8_t> w = in.Bytes(words.size());
  std::copy(w.begin(), w.end(), words.begin());
  const std::span<const uint8_t> rest = in.Rest();
  const std::vector<uint8_t> heap(rest.begin(), rest.end());

  std::vector<uint64_t> fast;
  std::vector<uint64_t> portable;
  client::ForEachFingerprintMatch(words.data(), kSlots, fingerprint, [&](uint64_t slot) { fast.push_back(slot); });
  client::ForEachFingerprintMatchPortable(words.data(), kSlots, fingerprint,
                                          [&](uint64_t slot) { portable.push_back(slot); });
  RKV_FUZZ_CHECK(fast == portable);

  for (const uint64_t slot : fast) {
    RKV_FUZZ_CHECK(slot != layout::kEmptySlot && layout::SlotFingerprint(slot) == fingerprint);
    if (!client::SlotBlockInHeap(slot, max_block, heap.size())) continue;
    const uint64_t offset = layout::SlotBlockOffset(slot);
    const uint64_t bytes = layout::SlotBlockBytes(slot);
    RKV_FUZZ_CHECK(bytes > 0 && bytes <= max_block);
    RKV_FUZZ_CHECK(offset + bytes <= heap.size());
    const auto record = DecodeRecord(std::span<const uint8_t>(heap.data() + offset, bytes));
    if (record.ok()) {
      RKV_FUZZ_CHECK(record->key.data() + record->key.size() + record->value.size() <=
                     reinterpret_cast<const char*>(heap.data() + offset + bytes));
    }
  }
  return 0;
}
