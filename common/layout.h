// The rkv memory layout: the contract between a server and its clients.
//
// A server exposes two RDMA regions, both REMOTE_READ only:
//
//   index region: TableHeader (64 B) followed by bucket_count Buckets.
//   heap region:  heap_size bytes of 64-byte aligned Blocks.
//
// Clients read these with one-sided READs and must interpret every byte the
// way this header says; nothing else in rkv defines a memory format. Any
// change to a struct or to the slot encoding bumps kLayoutVersion, and a
// client refuses a table whose header carries another version.
//
// Thread safety / invariants (server side, see server/table/table.h):
//   - Slots are written only by the server, one aligned 8-byte store each,
//     with release order, after the block they point to is complete.
//   - A replace rewrites the key's slot word (old block -> new block) in one
//     store, never delete-then-insert. A live key's slot moves only when
//     the server relocates it within its neighbourhood to make room
//     (server/table/table.h): the new slot is published before the old one is
//     cleared, a key moves at most once per grace period, and a client
//     confirms a miss with a second READ (docs/design.md, "Writing the
//     table").
//   - A block referenced by a slot is immutable until the slot stops
//     referencing it and its grace period (quarantine) has passed.
#pragma once

#include <cstddef>
#include <cstdint>

namespace rkv::layout {

inline constexpr uint64_t kTableMagic = 0x454C4241'54564B52ULL;  // "RKVTABLE"
inline constexpr uint32_t kLayoutVersion = 6;  // 2: neighbourhoods; 3: of 8 buckets;
                                               // 4: XXH64 block checksum;
                                               // 5: superseded checksum form;
                                               // 6: a block carries its expiry

inline constexpr size_t kCacheLine = 64;
inline constexpr size_t kSlotsPerBucket = 8;
inline constexpr size_t kBlockAlign = 64;
// Neighbourhood: a key lives in one of kNeighborhoodBuckets consecutive
// buckets from its home bucket (common/hash.h, NeighborhoodOf), so a client
// fetches every place it can be with ONE READ of 512 bytes, a single packet
// at any RoCE path MTU (two random candidate buckets, the first design,
// cost two READs and two request/response packet pairs per GET).
// Why 8: a READ's cost grows with its bytes (copied and checksummed at both
// ends), and fewer buckets bound the load a table reaches before it refuses
// an insert: 16 buckets (1 KiB) ~0.96, 8 ~0.92, 4 ~0.84 (table_test's
// LoadFactor tests; the design asks >= 0.85). 8 is the smallest that meets
// it.
inline constexpr size_t kNeighborhoodBuckets = 8;

// First 64 bytes of the index region. Written once when the table is
// created (and the epoch once per server start); read by clients to check
// that they talk to the table and epoch they expect.
struct TableHeader {
  uint64_t magic;              // kTableMagic
  uint32_t layout_version;     // kLayoutVersion
  uint32_t bucket_count_log2;  // bucket_count == 1 << bucket_count_log2
  uint64_t epoch;              // server epoch; a restart changes it
  uint64_t bucket_count;
  uint64_t hash_seed;          // XXH3 seed for bucket choice, per table
  uint64_t heap_size;          // bytes in the heap region
  uint64_t reserved[2];
};
static_assert(sizeof(TableHeader) == kCacheLine);

// One bucket: a cache line of kSlotsPerBucket slot words.
struct alignas(kCacheLine) Bucket {
  uint64_t slots[kSlotsPerBucket];
};
static_assert(sizeof(Bucket) == kCacheLine);
static_assert(alignof(Bucket) == kCacheLine);

inline constexpr size_t kIndexHeaderBytes = sizeof(TableHeader);

// Byte offset of bucket `b` inside the index region.
constexpr uint64_t BucketOffset(uint64_t b) {
  return kIndexHeaderBytes + b * sizeof(Bucket);
}
// Bytes of an index region holding `bucket_count` buckets.
constexpr uint64_t IndexBytes(uint64_t bucket_count) {
  return kIndexHeaderBytes + bucket_count * sizeof(Bucket);
}

// ---------------------------------------------------------------------------
// Slot word (64 bits). 0 means empty.
//
//   bits 63..48  fingerprint: bits 63..48 of the key's table hash (16 bits)
//   bits 47..16  block offset in the heap, in 64-byte units (32 bits:
//                heaps up to 256 GiB)
//   bits 15..0   block length, in 64-byte units (1..65535: blocks up to
//                4 MiB - 64 B). Never 0 in a used slot, so a used slot is
//                never the empty word whatever its fingerprint and offset.
//
// The length lets a client fetch a whole block with one READ.
// ---------------------------------------------------------------------------
inline constexpr uint64_t kEmptySlot = 0;
inline constexpr int kFingerprintShift = 48;
inline constexpr int kOffsetShift = 16;
inline constexpr uint64_t kOffsetUnitsMax = 0xFFFF'FFFFULL;
inline constexpr uint64_t kLengthUnitsMax = 0xFFFFULL;
inline constexpr uint64_t kMaxBlockBytes = kLengthUnitsMax * kBlockAlign;
inline constexpr uint64_t kMaxHeapBytes = (kOffsetUnitsMax + 1) * kBlockAlign;

constexpr uint16_t FingerprintOf(uint64_t table_hash) {
  return static_cast<uint16_t>(table_hash >> kFingerprintShift);
}
constexpr uint16_t SlotFingerprint(uint64_t slot) {
  return static_cast<uint16_t>(slot >> kFingerprintShift);
}
constexpr uint64_t SlotBlockOffset(uint64_t slot) {
  return ((slot >> kOffsetShift) & kOffsetUnitsMax) * kBlockAlign;
}
constexpr uint64_t SlotBlockBytes(uint64_t slot) {
  return (slot & kLengthUnitsMax) * kBlockAlign;
}
// Encodes a slot. `offset` and `bytes` must be multiples of kBlockAlign,
// bytes in [kBlockAlign, kMaxBlockBytes], offset < kMaxHeapBytes.
constexpr uint64_t MakeSlot(uint16_t fingerprint, uint64_t offset, uint64_t bytes) {
  return (static_cast<uint64_t>(fingerprint) << kFingerprintShift) |
         ((offset / kBlockAlign) << kOffsetShift) | (bytes / kBlockAlign);
}
static_assert(SlotBlockOffset(MakeSlot(0xABCD, 64 * 12345, 128)) == 64 * 12345);
static_assert(SlotBlockBytes(MakeSlot(0xABCD, 64 * 12345, 128)) == 128);
static_assert(SlotFingerprint(MakeSlot(0xABCD, 0, 64)) == 0xABCD);
static_assert(MakeSlot(0, 0, 64) != kEmptySlot);

// ---------------------------------------------------------------------------
// Block: a record in the heap (and, in the same format, in a client's
// staging ring). 64-byte aligned; BlockHeader, then key bytes, then value
// bytes, then zero padding up to the block length.
// ---------------------------------------------------------------------------
inline constexpr uint16_t kBlockFlagTombstone = 0x1;  // staging ring only: DELETE
inline constexpr uint16_t kBlockFlagsKnown = kBlockFlagTombstone;

//
// The checksum is what tells a client that the bytes of a block it READ
// belong to one record: a READ can race with the block's reuse, and RDMA
// gives no order among the bytes of one READ, so only a check over all of
// them will do. XXH64 rather than CRC32C (layout 3): a 64-bit check lets a
// torn or reused block through with odds of 2^-64 instead of 2^-32, costs
// the same on x86 with SSE4.2 (~90 ns for a 1 KiB record), and is ~8x
// cheaper where crc32 is not a fast instruction (0.4 us vs 3.1 us per
// 1 KiB GET under QEMU TCG, where the verbs path is tested). It is not a
// MAC: a client that can WRITE its staging ring is trusted with its bytes.
//
// Superseded form (heap only). Before the server publishes the slot word
// that stops naming a block (a replace or a delete; not a relocation move,
// which keeps the block), it overwrites the block's checksum word with its
// bitwise complement in one aligned 8-byte store. Every other byte stays as
// it was until the block is reused. A reader that fetched the block through
// a slot accepts either form (the slot read is its linearization point); a
// reader that fetched it from a remembered location (the client's location
// cache) accepts only the valid form: seeing it means the block had not
// been superseded when its checksum word was read. A staging-ring record
// never carries the superseded form (DecodeRecord refuses it).
struct BlockHeader {
  uint64_t checksum;      // XXH64, seed 0, of bytes [8, 32 + key_length + value_length);
                          // its complement once superseded (above)
  uint16_t key_length;    // 1..65535 (server limit is lower)
  uint16_t flags;         // kBlockFlag*; unknown bits are rejected
  uint32_t value_length;  // bytes of value
  uint64_t version;       // per-key version, monotonically increasing;
                          // 0 in a staging-ring record (the server assigns)
  int64_t expires_at_ms;  // Unix time in milliseconds from which the record
                          // reads as absent (docs/design.md §5.11); 0:
                          // never; never negative. A DELETE carries 0.
};
static_assert(sizeof(BlockHeader) == 32);
static_assert(offsetof(BlockHeader, key_length) == 8);
static_assert(offsetof(BlockHeader, value_length) == 12);
static_assert(offsetof(BlockHeader, version) == 16);
static_assert(offsetof(BlockHeader, expires_at_ms) == 24);
inline constexpr size_t kBlockChecksumBytes = sizeof(BlockHeader::checksum);
static_assert(offsetof(BlockHeader, checksum) == 0);

// The checksum word of a superseded block whose valid checksum is `checksum`.
// Its own inverse; differs from `checksum` in every bit, so a word torn
// between the two forms is neither.
constexpr uint64_t SupersededChecksum(uint64_t checksum) { return ~checksum; }

inline constexpr size_t kBlockHeaderBytes = sizeof(BlockHeader);

// Bytes the header, key and value occupy (unpadded).
constexpr uint64_t RecordBytes(uint64_t key_length, uint64_t value_length) {
  return kBlockHeaderBytes + key_length + value_length;
}
// Block length: RecordBytes rounded up to kBlockAlign.
constexpr uint64_t BlockBytes(uint64_t key_length, uint64_t value_length) {
  return (RecordBytes(key_length, value_length) + kBlockAlign - 1) / kBlockAlign * kBlockAlign;
}

// Hard ceilings the server's flags may lower but never exceed: the block of
// the largest record must fit in one slot's length field.
inline constexpr uint64_t kMaxKeyBytesLimit = 0xFFFF;
inline constexpr uint64_t kMaxValueBytesLimit = 4ULL * 1024 * 1024 - 128 * 1024;
static_assert(BlockBytes(kMaxKeyBytesLimit, kMaxValueBytesLimit) <= kMaxBlockBytes);

}  // namespace rkv::layout
