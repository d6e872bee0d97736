#include "common/record.h"

#include <algorithm>
#include <cstring>
#include <string>

// Inlined: the checksum runs on every GET, and a call into the shared
// library costs more than the hash of a small record under emulation.
#define XXH_INLINE_ALL
#include <xxhash.h>

namespace rkv {

uint64_t BlockChecksum(const uint8_t* record, uint64_t record_bytes) {
  return XXH64(record + layout::kBlockChecksumBytes, record_bytes - layout::kBlockChecksumBytes, 0);
}

uint64_t EncodeRecord(std::span<uint8_t> out, std::string_view key, std::string_view value,
                      uint64_t version, uint16_t flags, int64_t expires_at_ms) {
  const uint64_t block = layout::BlockBytes(key.size(), value.size());
  layout::BlockHeader h{};
  h.key_length = static_cast<uint16_t>(key.size());
  h.flags = flags;
  h.value_length = static_cast<uint32_t>(value.size());
  h.version = version;
  h.expires_at_ms = expires_at_ms;
  uint8_t* p = out.data();
  std::memcpy(p, &h, sizeof(h));
  if (!key.empty()) std::memcpy(p + sizeof(h), key.data(), key.size());
  if (!value.empty()) std::memcpy(p + sizeof(h) + key.size(), value.data(), value.size());
  const uint64_t used = layout::RecordBytes(key.size(), value.size());
  std::memset(p + used, 0, block - used);
  ResealRecord(out.first(block));
  return block;
}

void ResealRecord(std::span<uint8_t> block) {
  layout::BlockHeader h;
  std::memcpy(&h, block.data(), sizeof(h));
  const uint64_t used = layout::RecordBytes(h.key_length, h.value_length);
  const uint64_t checksum = BlockChecksum(block.data(), used);
  std::memcpy(block.data(), &checksum, sizeof(checksum));
}

namespace {

enum class Forms { kValidOnly, kValidOrSuperseded };

StatusOr<RecordView> Decode(std::span<const uint8_t> in, Forms forms) {
  if (in.size() < layout::kBlockHeaderBytes) {
    return InvalidArgument("record of " + std::to_string(in.size()) + " bytes is shorter than its header");
  }
  layout::BlockHeader h;
  std::memcpy(&h, in.data(), sizeof(h));
  if (h.key_length == 0) return InvalidArgument("record has an empty key");
  if ((h.flags & ~layout::kBlockFlagsKnown) != 0) {
    return InvalidArgument("record has unknown flags " + std::to_string(h.flags));
  }
  if (h.expires_at_ms < 0) return InvalidArgument("record has a negative expiry");
  const uint64_t used = layout::RecordBytes(h.key_length, h.value_length);
  if (used > in.size()) {
    return InvalidArgument("record claims " + std::to_string(used) + " bytes but only " +
                           std::to_string(in.size()) + " are present");
  }
  const uint64_t checksum = BlockChecksum(in.data(), used);
  bool superseded = false;
  if (checksum != h.checksum) {
    if (h.checksum != layout::SupersededChecksum(checksum)) return DataLoss("record checksum mismatch");
    if (forms == Forms::kValidOnly) return DataLoss("record carries a superseded heap block's checksum");
    superseded = true;
  }
  RecordView v;
  const char* base = reinterpret_cast<const char*>(in.data());
  v.key = std::string_view(base + layout::kBlockHeaderBytes, h.key_length);
  v.value = std::string_view(base + layout::kBlockHeaderBytes + h.key_length, h.value_length);
  v.version = h.version;
  v.flags = h.flags;
  v.expires_at_ms = h.expires_at_ms;
  v.superseded = superseded;
  return v;
}

}  // namespace

StatusOr<RecordView> DecodeRecord(std::span<const uint8_t> in) { return Decode(in, Forms::kValidOnly); }

StatusOr<RecordView> DecodeHeapBlock(std::span<const uint8_t> in) {
  return Decode(in, Forms::kValidOrSuperseded);
}

StatusOr<ScatteredRecord> DecodeScatteredHeapBlock(std::span<const std::span<const uint8_t>> pieces) {
  if (pieces.empty() || pieces[0].size() < layout::kBlockHeaderBytes) {
    return InvalidArgument("scattered record's first piece is shorter than its header");
  }
  layout::BlockHeader h;
  std::memcpy(&h, pieces[0].data(), sizeof(h));
  if (h.key_length == 0) return InvalidArgument("record has an empty key");
  if ((h.flags & ~layout::kBlockFlagsKnown) != 0) {
    return InvalidArgument("record has unknown flags " + std::to_string(h.flags));
  }
  if (h.expires_at_ms < 0) return InvalidArgument("record has a negative expiry");
  uint64_t total = 0;
  for (const std::span<const uint8_t> piece : pieces) total += piece.size();
  const uint64_t used = layout::RecordBytes(h.key_length, h.value_length);
  if (used > total) {
    return InvalidArgument("record claims " + std::to_string(used) + " bytes but only " + std::to_string(total) +
                           " are present");
  }
  // XXH64 of bytes [kBlockChecksumBytes, used) of the concatenation, fed
  // piece by piece: the same value BlockChecksum computes over one span.
  XXH64_state_t state;
  XXH64_reset(&state, 0);
  uint64_t at = 0;  // offset of the piece's first byte in the block
  for (const std::span<const uint8_t> piece : pieces) {
    const uint64_t begin = std::max<uint64_t>(at, layout::kBlockChecksumBytes);
    const uint64_t end = std::min<uint64_t>(at + piece.size(), used);
    if (begin < end) XXH64_update(&state, piece.data() + (begin - at), end - begin);
    at += piece.size();
    if (at >= used) break;
  }
  const uint64_t checksum = XXH64_digest(&state);
  ScatteredRecord r;
  if (checksum != h.checksum) {
    if (h.checksum != layout::SupersededChecksum(checksum)) return DataLoss("record checksum mismatch");
    r.superseded = true;
  }
  r.version = h.version;
  r.flags = h.flags;
  r.expires_at_ms = h.expires_at_ms;
  r.key_length = h.key_length;
  r.value_length = h.value_length;
  return r;
}

}  // namespace rkv
