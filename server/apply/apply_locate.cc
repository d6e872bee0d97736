// The Applier's lookup (server/apply/apply.h, "Lookups"; docs/design.md
// §4.1): a client's kGet, checked like a write's request and record, then
// the key looked up under table_mu_. The caller WRITEs the block it names
// into the client's landing slot, chained before the reply.
#include <string>
#include <vector>

#include "common/layout.h"
#include "common/record.h"
#include "server/apply/apply.h"

namespace rkv::server {

protocol::ReplyMsg Applier::Locate(std::span<const uint8_t> msg, std::span<const uint8_t> ring, Located* located) {
  *located = Located{};
  protocol::RequestMsg req{};
  if (std::optional<protocol::ReplyMsg> refused = ReadRequest(msg, &req)) return *refused;
  const uint64_t request_id = req.request_id;
  if (req.op != static_cast<uint8_t>(protocol::Op::kGet)) {
    return Error(request_id, InvalidArgument("op " + std::to_string(req.op) + " is not a lookup"));
  }
  if (req.flags != 0 || req.condition != 0 || req.reserved != 0 || req.map_version != 0 ||
      req.expected_version != 0) {
    return Error(request_id, InvalidArgument("a lookup carries flags, a condition, a map version or an expected "
                                             "version (all must be 0)"));
  }
  if (req.landing_bytes != 0 && req.landing_bytes < layout::kBlockHeaderBytes) {
    return Error(request_id, InvalidArgument("landing slot of " + std::to_string(req.landing_bytes) +
                                             " bytes is smaller than a block header"));
  }
  if (req.ring_offset % layout::kBlockAlign != 0 || req.ring_offset > ring.size() ||
      req.length > ring.size() - req.ring_offset) {
    return Error(request_id, InvalidArgument("record [" + std::to_string(req.ring_offset) + ", +" +
                                             std::to_string(req.length) + ") is not 64-byte aligned inside the " +
                                             std::to_string(ring.size()) + "-byte ring"));
  }
  if (req.length < layout::kBlockHeaderBytes ||
      req.length > layout::BlockBytes(limits_.max_key_bytes, /*value_bytes=*/0)) {
    return Error(request_id, InvalidArgument("lookup record length " + std::to_string(req.length) +
                                             " is outside [" + std::to_string(layout::kBlockHeaderBytes) + ", " +
                                             std::to_string(layout::BlockBytes(limits_.max_key_bytes, 0)) + "]"));
  }
  // Copied first, as a write's record is: the client may keep writing its
  // ring, and the key looked up must be the key checked.
  thread_local std::vector<uint8_t> copy;
  copy.assign(ring.begin() + static_cast<ptrdiff_t>(req.ring_offset),
              ring.begin() + static_cast<ptrdiff_t>(req.ring_offset + req.length));
  StatusOr<RecordView> rec = DecodeRecord(copy);
  if (!rec.ok()) {
    return Error(request_id, rec.status().WithContext("lookup record at ring offset " +
                                                      std::to_string(req.ring_offset)));
  }
  if (rec->key.empty() || rec->key.size() > limits_.max_key_bytes || !rec->value.empty() || rec->version != 0 ||
      rec->flags != 0 || rec->expires_at_ms != 0 || req.length > layout::BlockBytes(rec->key.size(), 0)) {
    return Error(request_id, InvalidArgument("a lookup record holds a key of 1.." +
                                             std::to_string(limits_.max_key_bytes) +
                                             " bytes and nothing else (no value, version, flags or expiry)"));
  }
  std::optional<Table::Entry> e;
  {
    MutexLock lock(table_mu_);
    // Expired records too: the reader decides by its clock, as a READ's
    // reader does (docs/design.md §5.11).
    e = LiveEntry(rec->key, /*with_expired=*/true);
  }
  lookups_.fetch_add(1, std::memory_order_relaxed);
  if (!e) return MakeReply(request_id, StatusCode::kNotFound, 0, "key not found");
  protocol::ReplyMsg reply = MakeReply(request_id, StatusCode::kOk, e->version, "");
  reply.block = e->slot;
  const uint64_t bytes = layout::SlotBlockBytes(e->slot);
  if (req.landing_bytes != 0 && bytes <= req.landing_bytes) {
    *located = Located{layout::SlotBlockOffset(e->slot), bytes, req.landing_addr, req.landing_rkey};
  }
  return reply;
}

}  // namespace rkv::server
