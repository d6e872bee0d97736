// Encoding and checking of one block (common/layout.h): used by the client
// to build staging-ring records and to check blocks it READs, and by the
// server to check staging-ring records and write heap blocks.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "common/layout.h"
#include "common/status.h"

namespace rkv {

struct RecordView {
  std::string_view key;
  std::string_view value;
  uint64_t version = 0;
  uint16_t flags = 0;
  int64_t expires_at_ms = 0;  // layout::BlockHeader::expires_at_ms
  // DecodeHeapBlock only: the checksum word held the superseded form
  // (common/layout.h): the block was no longer its key's current block
  // when that word was read.
  bool superseded = false;
};

// Writes header, key, value and zero padding into `out`, which must hold at
// least layout::BlockBytes(key.size(), value.size()) bytes; computes the
// checksum. `expires_at_ms`: layout::BlockHeader::expires_at_ms.
// Returns the block length. Caller checks the sizes against its limits.
uint64_t EncodeRecord(std::span<uint8_t> out, std::string_view key, std::string_view value,
                      uint64_t version, uint16_t flags, int64_t expires_at_ms = 0);

// Whether a record with `expires_at_ms` (layout::BlockHeader) reads as
// absent at `now_ms` (Unix milliseconds by the reader's clock).
constexpr bool Expired(int64_t expires_at_ms, int64_t now_ms) {
  return expires_at_ms != 0 && expires_at_ms <= now_ms;
}

// Parses and verifies the record at the start of `in` (bytes that came from
// another machine: nothing is trusted). Checks that the header fits, that
// key and value fit inside `in`, that key_length > 0, that no unknown flag
// is set, that the expiry is not negative, and the checksum. The views point into `in`.
// DATA_LOSS when the checksum does not hold (a torn or reused block, or a
// heap block's superseded form, which no staging-ring record may carry),
// INVALID_ARGUMENT for any other malformation.
StatusOr<RecordView> DecodeRecord(std::span<const uint8_t> in);

// As DecodeRecord, for a block READ from a server's heap: also accepts the
// superseded checksum form (common/layout.h) and says which form it saw in
// RecordView::superseded. A torn word (neither form) is DATA_LOSS.
StatusOr<RecordView> DecodeHeapBlock(std::span<const uint8_t> in);

// What DecodeScatteredHeapBlock read of a block: its header's fields, and
// which checksum form it carried.
struct ScatteredRecord {
  uint64_t version = 0;
  uint16_t flags = 0;
  int64_t expires_at_ms = 0;
  uint16_t key_length = 0;
  uint32_t value_length = 0;
  bool superseded = false;
};

// As DecodeHeapBlock, for a block READ in pieces (a client's GET straight
// into its caller's memory, transport::ReadOp::more): the block is the
// concatenation of `pieces`, and the header must lie wholly in the first.
// The same checks and errors as DecodeHeapBlock; the checksum is computed
// across the pieces, in place. The caller finds key and value in the
// pieces from key_length and value_length.
StatusOr<ScatteredRecord> DecodeScatteredHeapBlock(std::span<const std::span<const uint8_t>> pieces);

// Recomputes the checksum of an encoded block in place (after the version
// field was changed).
void ResealRecord(std::span<uint8_t> block);

// The checksum (layout::BlockHeader::checksum) of the record whose header,
// key and value are the first `record_bytes` (>= kBlockHeaderBytes) bytes
// at `record`.
uint64_t BlockChecksum(const uint8_t* record, uint64_t record_bytes);

}  // namespace rkv
