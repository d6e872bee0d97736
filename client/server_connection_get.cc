// ServerConnection's GET path: Lookup and the one-sided READs it is made
// of. A key costs one READ of its neighbourhood and one READ of each block
// whose slot fingerprint matches (a miss: one more neighbourhood READ to
// confirm it), all posted as lists and waited for by one signaled READ.
// On tcp a key the location cache does not answer is asked of the server
// first (AskServer, server_connection_put.cc; its replies checked by
// Answer here): one request and one reply.
//
// The path was tuned by counting calls: the steps of LookupBatch are
// always inlined into it, the clock is read only where a reading is used,
// and everything uncommon (failures, corrupt slots, giving up) is out of
// line and marked cold.
#include "client/server_connection.h"

#include <algorithm>
#include <cstring>
#include <thread>

#include "client/wire_checks.h"
#include "common/clock.h"
#include "common/hash.h"
#include "common/record.h"

namespace rkv::client {
namespace {

using std::chrono::duration_cast;
using std::chrono::microseconds;
using std::to_string;

}  // namespace

Status ServerConnection::ReadTableHeader(Deadline deadline) {
  ops_.resize(1);
  ops_[0].local = {mr_.get(), 0, static_cast<uint32_t>(sizeof(layout::TableHeader))};
  ops_[0].remote = {accept_.index.addr, accept_.index.rkey};
  RKV_RETURN_IF_ERROR(PostReadsAndWait(ops_, deadline, Clock::now(), "the table header READ"));
  std::memcpy(&table_header_, buffer_.get(), sizeof(table_header_));
  return Status::Ok();
}

[[gnu::always_inline]] inline Status ServerConnection::PostReadsAndWait(std::span<transport::ReadOp> ops,
                                                                        Deadline deadline, Clock::time_point now,
                                                                        std::string_view what) {
  if (broken_) [[unlikely]] return broken_status_;
  for (auto& op : ops) {
    op.signaled = false;
    op.wr_id = NextWrId();
  }
  ops.back().signaled = true;
  others_.clear();
  microseconds wait = Left(deadline, now);
  if (abandon_check_) [[likely]] {
    wait = std::min<microseconds>(wait, kReadLimit);
    // The first slice: a READ that takes longer is waited for in slices
    // with the check between them (ReadsInSlices).
    const microseconds first = std::min<microseconds>(wait, kAbandonCheckAfter);
    Status s = conn_->PostReadsAndWait(ops, first, &others_);
    if (s.code() == StatusCode::kDeadlineExceeded && first < wait) [[unlikely]] {
      return ReadsInSlices(ops.back().wr_id, first, wait, what);
    }
    if (!s.ok() || !others_.empty()) [[unlikely]] return AfterReads(std::move(s), what, first);
    return Status::Ok();
  }
  Status s = conn_->PostReadsAndWait(ops, wait, &others_);
  if (!s.ok() || !others_.empty()) [[unlikely]] return AfterReads(std::move(s), what, wait);
  return Status::Ok();
}

Status ServerConnection::ReadsInSlices(uint64_t wr_id, microseconds waited, microseconds wait,
                                       std::string_view what) {
  Status s = DeadlineExceeded("READ " + to_string(wr_id) + " did not complete in time");
  while (s.code() == StatusCode::kDeadlineExceeded && waited < wait) {
    if (Status give_up = abandon_check_(waited); !give_up.ok()) {
      for (const transport::Completion& c : others_) HandleCompletion(c);
      if (broken_) return broken_status_;
      return MarkBroken(give_up.WithContext("gave up waiting for " + std::string(what) + " from " + address_));
    }
    const microseconds slice = std::min<microseconds>(wait - waited, microseconds(50'000));
    s = conn_->WaitMoreForRead(wr_id, slice, &others_);
    waited += slice;
  }
  return AfterReads(std::move(s), what, waited);
}

Status ServerConnection::AfterReads(Status s, std::string_view what, microseconds waited) {
  // Replies and SEND completions that came meanwhile: handled as Poll's.
  for (const transport::Completion& c : others_) HandleCompletion(c);
  if (broken_) return broken_status_;
  if (s.code() == StatusCode::kDeadlineExceeded) {
    // The check hears of the silence; the connection is given up either
    // way.
    if (abandon_check_) abandon_check_(waited).IgnoreError();
    return MarkBroken(DeadlineExceeded("timed out waiting for " + std::string(what) + " from " + address_));
  }
  if (!s.ok()) return MarkBroken(s.WithContext(std::string(what) + " on the connection to " + address_));
  return Status::Ok();
}

Status ServerConnection::Lookup(std::span<const std::string_view> keys,
                                std::span<LookupResult> results, Deadline deadline,
                                std::span<const uint64_t> key_hashes) {
  if (broken_) return broken_status_;
  if (cache_ != nullptr) {
    if (key_hashes.size() != keys.size()) [[unlikely]] {
      own_key_hashes_.resize(keys.size());
      for (size_t k = 0; k < keys.size(); ++k) own_key_hashes_[k] = ShardHash(keys[k]);
      key_hashes = own_key_hashes_;
    }
    key_hashes_ = key_hashes;
  }
  // Batches of at most kMaxBatchKeys not-done keys, gathered into the
  // reused pending_ list (no allocation).
  size_t i = 0;
  while (i < keys.size()) {
    pending_.clear();
    for (; i < keys.size() && pending_.size() < kMaxBatchKeys; ++i) {
      if (!results[i].done) pending_.push_back(i);
    }
    if (pending_.empty()) break;
    if (cache_ != nullptr) {
      RKV_RETURN_IF_ERROR(ReadCachedBlocks(keys, results, pending_, deadline));
      std::erase_if(pending_, [&](size_t k) { return results[k].done; });
      if (pending_.empty()) continue;
    }
    if (landing_mr_ != nullptr) {
      RKV_RETURN_IF_ERROR(AskServer(keys, results, pending_, deadline));
      std::erase_if(pending_, [&](size_t k) { return results[k].done; });
      if (pending_.empty()) continue;
    }
    RKV_RETURN_IF_ERROR(LookupBatch(keys, results, pending_, deadline));
  }
  return Status::Ok();
}

uint32_t ServerConnection::SetUpBlockRead(transport::ReadOp& op, size_t local_offset, uint64_t heap_offset,
                                          uint64_t bytes, const ValueTarget* into, size_t key_bytes) {
  op.remote = {accept_.heap.addr + heap_offset, accept_.heap.rkey};
  const uint64_t head = layout::kBlockHeaderBytes + key_bytes;
  if (into == nullptr || into->mr == nullptr || into->capacity == 0 || bytes <= head) [[likely]] {
    op.local = {mr_.get(), local_offset, static_cast<uint32_t>(bytes)};
    op.more[0].length = 0;
    return 0;
  }
  // Header and key land where the whole block would have; the value (and
  // what follows it in the block) in the caller's memory; what does not
  // fit there (padding, or a value too large) after the key again.
  const auto direct = static_cast<uint32_t>(std::min<uint64_t>(into->capacity, bytes - head));
  op.local = {mr_.get(), local_offset, static_cast<uint32_t>(head)};
  op.more[0] = {into->mr, into->mr_offset, direct};
  op.more[1] = {mr_.get(), local_offset + head, static_cast<uint32_t>(bytes - head - direct)};
  return direct;
}

StatusOr<ScatteredRecord> ServerConnection::DecodeScattered(size_t local_offset, uint64_t bytes,
                                                            const ValueTarget& into, uint32_t direct_bytes,
                                                            size_t key_bytes) const {
  const size_t head = layout::kBlockHeaderBytes + key_bytes;
  const std::span<const uint8_t> pieces[] = {
      std::span<const uint8_t>(buffer_.get() + local_offset, head),
      std::span<const uint8_t>(into.data, direct_bytes),
      std::span<const uint8_t>(buffer_.get() + local_offset + head, bytes - head - direct_bytes)};
  return DecodeScatteredHeapBlock(pieces);
}

void ServerConnection::CopyInto(LookupResult& r, std::string_view value) {
  r.value_size = value.size();
  r.in_place = false;
  if (value.size() <= r.into->capacity && !value.empty()) std::memcpy(r.into->data, value.data(), value.size());
}

void ServerConnection::SettleInto(LookupResult& r) {
  if (r.value_size <= r.into->capacity) [[likely]] return;
  r.status = ResourceExhausted("the value of " + to_string(r.value_size) + " bytes does not fit the " +
                               to_string(r.into->capacity) + "-byte buffer");
}

// Why a block accepted here is the key's current record (the full argument
// is docs/design.md §4.4): the block was published before the entry was
// made (a GET found it through a slot); the server marks a block
// superseded before any slot store that stops naming it, so the valid
// checksum form read at some instant t of the READ means the block was
// still the key's current one at t; and a block is reused only a grace
// period after it was superseded, while the READ completed within half of
// one from its post, so every other byte read is that record's too. Key
// and version are compared with the entry because the block may since
// have been reused, wholly, for another record.
Status ServerConnection::ReadCachedBlocks(std::span<const std::string_view> keys,
                                          std::span<LookupResult> results, std::span<const size_t> batch,
                                          Deadline deadline) {
  cached_.clear();
  for (const size_t k : batch) {
    std::optional<CachedLocation> location = cache_->Find(cache_server_, keys[k], key_hashes_[k], accept_.epoch);
    if (!location) continue;
    // Entries come from checked slot words of this incarnation; checked
    // again all the same, as nothing remote is trusted.
    if (location->bytes == 0 || location->bytes > max_block_ ||
        location->bytes > accept_.heap.length || location->heap_offset > accept_.heap.length - location->bytes)
        [[unlikely]] {
      cache_->Erase(cache_server_, keys[k], key_hashes_[k]);
      continue;
    }
    cached_.push_back(CachedRead{k, *location, 0});
  }
  // Counted here, noted once: the counters are shared by every thread.
  uint64_t hits = 0;
  uint64_t fallbacks = 0;
  for (size_t c = 0; c < cached_.size();) {
    ops_.clear();
    size_t used = 0;
    const size_t first = c;
    // max_block_ <= block_area_bytes_: every list takes at least one.
    while (c < cached_.size() && ops_.size() < kMaxReadsPerList &&
           used + cached_[c].location.bytes <= block_area_bytes_) {
      CachedRead& cr = cached_[c];
      cr.local_offset = block_area_offset_ + used;
      transport::ReadOp& op = ops_.emplace_back();
      cr.direct_bytes = SetUpBlockRead(op, cr.local_offset, cr.location.heap_offset, cr.location.bytes,
                                       results[cr.key_index].into, keys[cr.key_index].size());
      used += cr.location.bytes;
      ++c;
    }
    const Clock::time_point posted = SteadyNow();
    if (Status s = PostReadsAndWait(ops_, deadline, posted, "cached block READs"); !s.ok()) [[unlikely]] {
      cache_->NoteHits(hits);
      cache_->NoteFallbacks(fallbacks);
      return s;
    }
    const bool in_lease = SteadyNow() - posted < lease_;
    for (size_t i = first; i < c; ++i) {
      const CachedRead& cr = cached_[i];
      if (cr.direct_bytes > 0) {
        if (AcceptCachedScattered(keys[cr.key_index], results[cr.key_index], cr, in_lease)) {
          ++hits;
        } else {
          ++fallbacks;
        }
        continue;
      }
      auto record = DecodeHeapBlock(std::span<const uint8_t>(buffer_.get() + cr.local_offset, cr.location.bytes));
      if (!in_lease || !record.ok() || record->superseded || record->key != keys[cr.key_index] ||
          record->version != cr.location.version || (record->flags & layout::kBlockFlagTombstone) != 0) {
        // Not provably current: the ordinary path answers, and refreshes
        // or drops the entry.
        ++fallbacks;
        continue;
      }
      SettleFound(results[cr.key_index], *record);
      ++hits;
    }
  }
  cache_->NoteHits(hits);
  cache_->NoteFallbacks(fallbacks);
  return Status::Ok();
}

// Why a landed block accepted here is the key's record at an instant of
// the call: the server found it through the key's slot, after this
// lookup's post, and its transport copied it before the reply, which came
// within the lease of the post; a block is reused only a grace period
// (twice the lease) after it stopped being current, so every byte landed
// is that record's. Either checksum form is taken, as a block found
// through a slot (ReadCandidates); the key and version are compared with
// the reply's, as nothing remote is trusted.
bool ServerConnection::Answer(std::string_view key, uint64_t key_hash, LookupResult& r, size_t i, bool in_lease) {
  const WriteOutcome& o = looked_up_[i];
  if (!o.replied) [[unlikely]] return false;
  if (o.result.status.code() == StatusCode::kNotFound) {
    r.done = true;
    r.status = NotFound("key not found");
    r.value.clear();
    if (cache_ != nullptr) cache_->Erase(cache_server_, key, key_hash);
    return true;
  }
  const uint64_t bytes = layout::SlotBlockBytes(o.block);
  if (!o.result.status.ok() || !in_lease || bytes > landing_slot_bytes_ || bytes < layout::kBlockHeaderBytes ||
      !SlotBlockInHeap(o.block, max_block_, accept_.heap.length)) [[unlikely]] {
    return false;  // refused, late, or a block over the slot: READ
  }
  auto record = DecodeHeapBlock(std::span<const uint8_t>(landing_.get() + i * landing_slot_bytes_, bytes));
  if (!record.ok() || record->key != key || record->version != o.result.version ||
      (record->flags & layout::kBlockFlagTombstone) != 0) [[unlikely]] {
    return false;
  }
  SettleFound(r, *record);
  if (cache_ != nullptr) {
    if (record->superseded) {
      cache_->Erase(cache_server_, key, key_hash);
    } else {
      cache_->Insert(cache_server_, key, key_hash,
                     CachedLocation{accept_.epoch, layout::SlotBlockOffset(o.block), bytes, record->version});
    }
  }
  return true;
}

void ServerConnection::SettleFound(LookupResult& r, const RecordView& record) {
  r.done = true;
  r.status = Status::Ok();
  if (r.into == nullptr) [[likely]] {
    r.value.assign(record.value);
  } else {
    CopyInto(r, record.value);
    SettleInto(r);
  }
  r.version = record.version;
  SettleExpiry(r, record.expires_at_ms);
}

void ServerConnection::SettleExpiry(LookupResult& r, int64_t expires_at_ms) {
  r.expires_at_ms = expires_at_ms;
  if (expires_at_ms == 0 || !Expired(expires_at_ms, UnixNowMs())) [[likely]] {
    return;
  }
  r.status = NotFound("key not found");
  r.value.clear();
  r.version = 0;
  r.value_size = 0;
  r.in_place = false;
}

// ReadCachedBlocks' checks, for a block scattered into the result's
// memory: the same proof of currency, then the value's place.
bool ServerConnection::AcceptCachedScattered(std::string_view key, LookupResult& r, const CachedRead& cr,
                                             bool in_lease) {
  StatusOr<ScatteredRecord> record =
      DecodeScattered(cr.local_offset, cr.location.bytes, *r.into, cr.direct_bytes, key.size());
  if (!in_lease || !record.ok() || record->superseded || record->key_length != key.size() ||
      std::memcmp(buffer_.get() + cr.local_offset + layout::kBlockHeaderBytes, key.data(), key.size()) != 0 ||
      record->version != cr.location.version || (record->flags & layout::kBlockFlagTombstone) != 0) {
    return false;
  }
  r.done = true;
  r.status = Status::Ok();
  r.version = record->version;
  r.value_size = record->value_length;
  r.in_place = true;
  SettleInto(r);
  SettleExpiry(r, record->expires_at_ms);
  return true;
}

Status ServerConnection::LookupBatch(std::span<const std::string_view> keys,
                                     std::span<LookupResult> results,
                                     std::span<const size_t> batch, Deadline deadline) {
  StartBatch(keys, batch);
  microseconds backoff(20);
  while (!todo_.empty()) {
    Clock::time_point posted;
    Clock::time_point read_done;
    RKV_RETURN_IF_ERROR(ReadNeighborhoods(deadline, &posted, &read_done));
    FindCandidates();
    RKV_RETURN_IF_ERROR(ReadCandidates(keys, results, batch, posted, deadline));
    const bool failed = SettleRound(keys, results, batch, posted, read_done);
    if (todo_.empty()) break;
    if (!failed) continue;  // confirmations only: no reason to wait
    if (Left(deadline, Clock::now()) <= backoff) {
      GiveUp(results, batch);
      break;
    }
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, microseconds(5000));
  }
  return Status::Ok();
}

[[gnu::always_inline]] inline void ServerConnection::StartBatch(std::span<const std::string_view> keys,
                                                                std::span<const size_t> batch) {
  // batch.size() <= kMaxBatchKeys: key_state_ and outcome_ hold that many.
  for (size_t j = 0; j < batch.size(); ++j) {
    KeyState& ks = key_state_[j];
    ks.nb = NeighborhoodOf(TableHash(keys[batch[j]], table_header_.hash_seed), table_header_.bucket_count_log2);
    ks.attempts = 0;
    ks.corrupt_rounds = 0;
    ks.confirming = false;
    ks.last_failure.clear();
  }
  todo_.clear();
  for (size_t j = 0; j < batch.size(); ++j) todo_.push_back(j);
}

[[gnu::always_inline]] inline Status ServerConnection::ReadNeighborhoods(Deadline deadline,
                                                                         Clock::time_point* posted,
                                                                         Clock::time_point* read_done) {
  ops_.clear();
  bool confirming = false;
  for (size_t t = 0; t < todo_.size(); ++t) {
    const KeyState& ks = key_state_[todo_[t]];
    confirming |= ks.confirming;
    transport::ReadOp& op = ops_.emplace_back();
    op.local = {mr_.get(), t * kNeighborhoodBytes, static_cast<uint32_t>(ks.nb.count * sizeof(layout::Bucket))};
    op.remote = {accept_.index.addr + layout::BucketOffset(ks.nb.first), accept_.index.rkey};
  }
  *posted = SteadyNow();
  RKV_RETURN_IF_ERROR(PostReadsAndWait(ops_, deadline, *posted, "neighbourhood READs"));
  // Only a confirmation (see SettleRound) needs to know when its READ ended.
  *read_done = confirming ? SteadyNow() : *posted;
  return Status::Ok();
}

[[gnu::always_inline]] inline void ServerConnection::FindCandidates() {
  for (size_t t = 0; t < todo_.size(); ++t) {
    Outcome& o = outcome_[t];
    o.found = o.lease_expired = o.unreadable = o.corrupt = o.superseded = false;
    o.direct_posted = o.in_place = o.held = false;
    o.version = 0;
    o.expires_at_ms = 0;
  }
  candidates_.clear();
  for (size_t t = 0; t < todo_.size(); ++t) {
    const Neighborhood& nb = key_state_[todo_[t]].nb;
    const uint8_t* words = buffer_.get() + t * kNeighborhoodBytes;
    ForEachFingerprintMatch(words, nb.count * layout::kSlotsPerBucket, nb.fingerprint, [&](uint64_t slot) {
      if (!SlotBlockInHeap(slot, max_block_, accept_.heap.length)) [[unlikely]] {
        MarkCorrupt(outcome_[t], slot);
        return;
      }
      candidates_.push_back(Candidate{t, layout::SlotBlockOffset(slot), layout::SlotBlockBytes(slot)});
    });
  }
}

// A match's value goes straight into the key's result: a result that does
// not end up found is never marked done, so a stale value there is never
// reported.
[[gnu::always_inline]] inline Status ServerConnection::ReadCandidates(std::span<const std::string_view> keys,
                                                                      std::span<LookupResult> results,
                                                                      std::span<const size_t> batch,
                                                                      Clock::time_point posted, Deadline deadline) {
  for (size_t c = 0; c < candidates_.size();) {
    ops_.clear();
    size_t used = 0;
    const size_t first = c;
    while (c < candidates_.size() && ops_.size() < kMaxReadsPerList &&
           used + candidates_[c].bytes <= block_area_bytes_) {
      Candidate& cand = candidates_[c];
      cand.local_offset = block_area_offset_ + used;
      transport::ReadOp& op = ops_.emplace_back();
      // One candidate a key and round goes into the caller's memory: two
      // READs into the same memory would leave only one block there.
      const size_t key_index = batch[todo_[cand.t]];
      Outcome& o = outcome_[cand.t];
      cand.direct_bytes = SetUpBlockRead(op, cand.local_offset, cand.heap_offset, cand.bytes,
                                         o.direct_posted ? nullptr : results[key_index].into, keys[key_index].size());
      o.direct_posted |= cand.direct_bytes > 0;
      used += cand.bytes;
      ++c;
    }
    // The clock is read for the lease only: the wait's first round takes
    // its time left from the lease start (later rounds read the clock).
    RKV_RETURN_IF_ERROR(PostReadsAndWait(ops_, deadline, posted, "block READs"));
    const auto elapsed = SteadyNow() - posted;
    const bool in_lease = elapsed < lease_;
    for (size_t k = first; k < c; ++k) {
      const Candidate& cand = candidates_[k];
      Outcome& o = outcome_[cand.t];
      if (!in_lease) {
        // The block may have been freed and reused since the bucket READ.
        o.lease_expired = true;
        o.why = "reads took " + to_string(duration_cast<microseconds>(elapsed).count()) + " us, over the " +
                to_string(lease_.count()) + " us lease";
        continue;
      }
      const size_t key_index = batch[todo_[cand.t]];
      LookupResult& r = results[key_index];
      if (cand.direct_bytes > 0) {
        ConsiderScattered(keys[key_index], r, cand, o);
        continue;
      }
      // Either checksum form: a block found through a slot word is the
      // record current when that word was read, superseded since or not.
      auto record = DecodeHeapBlock(std::span<const uint8_t>(buffer_.get() + cand.local_offset, cand.bytes));
      if (!record.ok()) {
        o.unreadable = true;
        o.why = "block at heap offset " + to_string(cand.heap_offset) + ": " + record.status().ToString();
        continue;
      }
      if (record->key != keys[key_index]) continue;                      // fingerprint collision
      if ((record->flags & layout::kBlockFlagTombstone) != 0) continue;  // never live in a heap
      if (!o.found || record->version > o.version) {
        o.found = true;
        o.version = record->version;
        o.expires_at_ms = record->expires_at_ms;
        o.heap_offset = cand.heap_offset;
        o.bytes = cand.bytes;
        o.superseded = record->superseded;
        o.in_place = false;
        if (r.into == nullptr) [[likely]] {
          r.value.assign(record->value);
        } else if (r.into->mr != nullptr) {
          // A READ of this round may scatter into the caller's memory (in
          // this list or a later one): this value waits in the string
          // until the round settles.
          r.value.assign(record->value);
          o.held = true;
        } else {
          CopyInto(r, record->value);
          o.held = false;
        }
        o.value_size = record->value.size();
      }
    }
  }
  return Status::Ok();
}

// ReadCandidates' checks for the candidate scattered into the result's
// memory (its key in the connection's buffer, its value in place).
void ServerConnection::ConsiderScattered(std::string_view key, LookupResult& r, const Candidate& cand,
                                         Outcome& o) {
  StatusOr<ScatteredRecord> record = DecodeScattered(cand.local_offset, cand.bytes, *r.into, cand.direct_bytes,
                                                     key.size());
  if (!record.ok()) {
    o.unreadable = true;
    o.why = "block at heap offset " + to_string(cand.heap_offset) + ": " + record.status().ToString();
    return;
  }
  if (record->key_length != key.size() ||
      std::memcmp(buffer_.get() + cand.local_offset + layout::kBlockHeaderBytes, key.data(), key.size()) != 0) {
    return;  // fingerprint collision
  }
  if ((record->flags & layout::kBlockFlagTombstone) != 0) return;
  if (!o.found || record->version > o.version) {
    o.found = true;
    o.version = record->version;
    o.expires_at_ms = record->expires_at_ms;
    o.heap_offset = cand.heap_offset;
    o.bytes = cand.bytes;
    o.superseded = record->superseded;
    o.in_place = true;
    o.held = false;
    o.value_size = record->value_length;
  }
}

// A clean miss is confirmed by a second READ of the neighbourhood, posted
// after the first completed and done within the lease from the first one's
// post: one READ of a neighbourhood is not atomic, and a key the server
// moved between two of its buckets while it ran can be missed; the server
// does not move a key again within a grace period (server/table/table.h), so the
// second READ sees it.
[[gnu::always_inline]] inline bool ServerConnection::SettleRound(std::span<const std::string_view> keys,
                                                                 std::span<LookupResult> results,
                                                                 std::span<const size_t> batch,
                                                                 Clock::time_point posted,
                                                                 Clock::time_point read_done) {
  next_todo_.clear();
  bool failed = false;
  for (size_t t = 0; t < todo_.size(); ++t) {
    KeyState& ks = key_state_[todo_[t]];
    LookupResult& r = results[batch[todo_[t]]];
    Outcome& o = outcome_[t];
    if (o.found) {
      r.done = true;
      r.status = Status::Ok();
      r.version = o.version;
      if (r.into != nullptr) {
        if (o.held) CopyInto(r, r.value);
        r.value_size = o.value_size;
        r.in_place = o.in_place;
        SettleInto(r);
      }
      SettleExpiry(r, o.expires_at_ms);
      if (cache_ != nullptr) {
        // A superseded block is already not current: not worth a READ.
        const size_t k = batch[todo_[t]];
        if (o.superseded) {
          cache_->Erase(cache_server_, keys[k], key_hashes_[k]);
        } else {
          cache_->Insert(cache_server_, keys[k], key_hashes_[k],
                         CachedLocation{accept_.epoch, o.heap_offset, o.bytes, o.version});
        }
      }
      continue;
    }
    if (!o.lease_expired && !o.unreadable && !o.corrupt) {
      if (!ks.confirming) {
        ks.confirming = true;
        ks.first_posted = posted;
        next_todo_.push_back(todo_[t]);
        continue;
      }
      const auto elapsed = read_done - ks.first_posted;
      if (elapsed < lease_) {
        r.done = true;
        r.status = NotFound("key not found");
        r.value.clear();
        if (cache_ != nullptr) {
          const size_t k = batch[todo_[t]];
          cache_->Erase(cache_server_, keys[k], key_hashes_[k]);
        }
        continue;
      }
      o.lease_expired = true;
      o.why = "confirming a miss took " + to_string(duration_cast<microseconds>(elapsed).count()) +
              " us, over the " + to_string(lease_.count()) + " us lease";
    }
    ks.confirming = false;
    failed = true;
    ++ks.attempts;
    ks.last_failure.swap(o.why);
    ks.corrupt_rounds = o.corrupt ? ks.corrupt_rounds + 1 : 0;
    if (ks.corrupt_rounds >= kCorruptRounds) {
      r.done = true;
      r.status = DataLoss("corrupt table on " + address_ + ": " + ks.last_failure);
      r.value.clear();
      continue;
    }
    next_todo_.push_back(todo_[t]);
  }
  todo_.swap(next_todo_);
  return failed;
}

void ServerConnection::GiveUp(std::span<LookupResult> results, std::span<const size_t> batch) {
  for (size_t j : todo_) {
    LookupResult& r = results[batch[j]];
    r.done = true;
    r.status = DeadlineExceeded("GET gave up after " + to_string(key_state_[j].attempts) +
                                " attempts; last: " + key_state_[j].last_failure);
    r.value.clear();
  }
}

void ServerConnection::MarkCorrupt(Outcome& o, uint64_t slot) const {
  o.corrupt = true;
  o.why = "slot " + to_string(slot) + " names block [" + to_string(layout::SlotBlockOffset(slot)) + ", +" +
          to_string(layout::SlotBlockBytes(slot)) + ") outside the " + to_string(accept_.heap.length) +
          "-byte heap or over the largest block";
}

}  // namespace rkv::client
