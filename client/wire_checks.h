// Validation of everything a server sends a client before the client acts
// on it: the accept private data, the table header it READs, the slot
// words of the neighbourhoods it READs, and reply messages. A server is trusted to be rkv, not to be bug-free or current:
// every check fails with a Status that names the field, never a crash.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "common/layout.h"
#include "common/protocol.h"
#include "common/status.h"

namespace rkv::client {

// Upper bound this client accepts for AcceptData::request_credits.
inline constexpr uint32_t kMaxRequestCredits = 4096;

// Parses the accept private data (which a transport may pad beyond
// sizeof(AcceptData)) and checks it: magic, protocol and layout versions,
// limits within the layout's ceilings, a non-zero grace period, an index
// region of a power-of-two number of buckets, a heap of whole blocks, and a
// staging ring of whole blocks that holds at least one block of the largest
// record. FAILED_PRECONDITION for a version mismatch, INVALID_ARGUMENT for
// anything else.
StatusOr<protocol::AcceptData> ParseAcceptData(std::span<const uint8_t> data);

// Bytes of the block holding the largest record the server accepts.
uint64_t MaxBlockBytes(const protocol::AcceptData& accept);

// Checks the table header READ from the index region against the accept
// data: magic, layout version, bucket count consistent with its log2 and
// with the index region's length, heap size equal to the heap region's
// length. UNAVAILABLE when only the epoch differs (the server restarted
// between accept and read: reconnecting fixes it), INVALID_ARGUMENT or
// FAILED_PRECONDITION otherwise.
Status CheckTableHeader(const layout::TableHeader& header, const protocol::AcceptData& accept);

// Parses a reply message of `data.size()` received bytes: exact size, a
// known status code, a known reason (none on success), zero reserved
// bytes, a NUL-terminated message.
StatusOr<protocol::ReplyMsg> ParseReply(std::span<const uint8_t> data);

// The Status a parsed reply stands for: OK, or its code and message with
// its typed reason and map version (what the client decides on,
// client/refusal.h).
Status ReplyStatus(const protocol::ReplyMsg& reply);

// Whether the block a slot word names is one the client may READ: a
// non-zero length no larger than `max_block` (MaxBlockBytes), lying wholly
// inside a heap of `heap_length` bytes. A slot that fails this is corrupt.
constexpr bool SlotBlockInHeap(uint64_t slot, uint64_t max_block, uint64_t heap_length) {
  const uint64_t offset = layout::SlotBlockOffset(slot);
  const uint64_t bytes = layout::SlotBlockBytes(slot);
  return bytes != 0 && bytes <= max_block && offset <= heap_length && bytes <= heap_length - offset;
}

// Calls fn(slot) for every used slot word among words[0, count) (count a
// multiple of 4) whose fingerprint is `fingerprint`, in slot order: the
// words as READ from a server, any bytes at all. Slot by slot; the
// reference for ForEachFingerprintMatch.
template <typename Fn>
inline void ForEachFingerprintMatchPortable(const uint8_t* words, size_t count, uint16_t fingerprint, Fn&& fn) {
  for (size_t s = 0; s < count; ++s) {
    uint64_t slot;
    std::memcpy(&slot, words + s * sizeof(uint64_t), sizeof(slot));
    if (slot != layout::kEmptySlot && layout::SlotFingerprint(slot) == fingerprint) fn(slot);
  }
}

// Same calls as ForEachFingerprintMatchPortable. A neighbourhood has 64
// slots and usually one match: with SSE2 (every x86-64) four slots are
// compared per step (29 ns for 64 slots on this host, 75 ns slot by slot;
// under QEMU TCG, which emulates SSE2 with helper calls, 0.7 us against
// 0.3 us: the native figure decides).
template <typename Fn>
[[gnu::always_inline]] inline void ForEachFingerprintMatch(const uint8_t* words, size_t count, uint16_t fingerprint,
                                                           Fn&& fn) {
#if defined(__SSE2__)
  static_assert(layout::kFingerprintShift == 48, "the fingerprint is the top 16-bit lane of a slot word");
  const __m128i want = _mm_set1_epi16(static_cast<short>(fingerprint));
  for (size_t s = 0; s < count; s += 4) {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(words + s * sizeof(uint64_t)));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(words + (s + 2) * sizeof(uint64_t)));
    // One bit per byte; bit 7 of each 8-byte half is its fingerprint lane.
    const uint32_t hits = (static_cast<uint32_t>(_mm_movemask_epi8(_mm_cmpeq_epi16(a, want))) |
                           static_cast<uint32_t>(_mm_movemask_epi8(_mm_cmpeq_epi16(b, want))) << 16) &
                          0x80808080u;
    if (hits == 0) continue;
    for (size_t k = 0; k < 4; ++k) {
      if (hits & (0x80u << (8 * k))) {
        uint64_t slot;
        std::memcpy(&slot, words + (s + k) * sizeof(uint64_t), sizeof(slot));
        if (slot != layout::kEmptySlot) fn(slot);
      }
    }
  }
#else
  ForEachFingerprintMatchPortable(words, count, fingerprint, fn);
#endif
}

}  // namespace rkv::client
