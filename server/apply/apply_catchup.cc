// The catch-up half of the Applier (server/apply/apply.h, "Catch-up"): the
// primary's snapshot of a shard and the fetcher's installs, deletes and
// tombstones. See docs/design.md, "Catch-up".
#include <algorithm>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include <glog/logging.h>

#include "common/hash.h"
#include "common/record.h"
#include "server/apply/apply.h"
#include "server/apply/for_each_record.h"

namespace rkv::server {

namespace {

// Membership of `shards` by shard index, after checking each is below
// shard_count.
StatusOr<std::vector<bool>> ShardSet(const std::vector<uint32_t>& shards, uint32_t shard_count) {
  if (shard_count == 0) return InvalidArgument("shard_count is 0");
  std::vector<bool> in(shard_count, false);
  for (uint32_t shard : shards) {
    if (shard >= shard_count) {
      return InvalidArgument("shard " + std::to_string(shard) + " is not below shard_count " +
                             std::to_string(shard_count));
    }
    in[shard] = true;
  }
  return in;
}

}  // namespace

Status Applier::ListShards(const std::vector<uint32_t>& shards, uint32_t shard_count,
                           const std::function<Status()>& check, std::vector<ShardRecord>* out,
                           uint64_t* snapshot_version) {
  out->clear();
  if (shards.empty()) return InvalidArgument("no shard to list");
  RKV_ASSIGN_OR_RETURN(const std::vector<bool> in, ShardSet(shards, shard_count));
  {
    // The cut. No client write is in flight while writes_gate_ is held
    // exclusively: each one either published before this point (the
    // listing below has it, or a later version of its key) or routes after
    // it, by a map that still lists the fetcher (`check` saw it there) and
    // so forwards to it. The turnstile keeps new writes out while the gate
    // drains.
    MutexLock turnstile(gate_turnstile_);
    WriterLock gate(writes_gate_);
    RKV_RETURN_IF_ERROR(check());
    MutexLock lock(table_mu_);
    // Every version reserved so far belongs to a write that published (at
    // or below the store's mark) or failed; none is in flight. Writes after
    // the cut reserve versions above it, so the fetcher's DeleteUnlisted
    // (keys at or below it that were not listed) never removes one of them.
    *snapshot_version = std::max(store_->version_high_water(), reserved_version_);
  }
  // The listing, from the table, which holds every published record (what
  // GETs read): one pass over memory for all the shards. table_mu_ keeps
  // every slot still during the pass, so each key present is seen once.
  MutexLock lock(table_mu_);
  ForEachRecord(*table_, [&](const Table::Record& rec) {
    if (!in[ShardOf(rec.key, shard_count)]) return;
    out->push_back(ShardRecord{std::string(rec.key), rec.version, false, {}});
  });
  return Status::Ok();
}

std::vector<Applier::ShardRecord> Applier::ReadKeys(const std::vector<std::string>& keys) const {
  std::vector<ShardRecord> found;
  MutexLock lock(table_mu_);
  for (const std::string& key : keys) {
    const std::optional<Table::Entry> e = table_->Lookup(key);
    if (!e) continue;
    const Table::Record rec = table_->RecordAt(e->slot);
    found.push_back(ShardRecord{std::string(rec.key), rec.version, true, std::string(rec.value), rec.expires_at_ms});
  }
  return found;
}

void Applier::BeginSync(uint32_t shard, uint32_t shard_count) {
  MutexLock lock(table_mu_);
  sync_shard_count_ = shard_count;
  sync_tombstones_[shard].clear();
}

void Applier::EndSync(uint32_t shard) {
  MutexLock lock(table_mu_);
  sync_tombstones_.erase(shard);
}

void Applier::NoteSyncDelete(std::string_view key, uint64_t version) {
  if (sync_tombstones_.empty() || sync_shard_count_ == 0) return;
  const auto it = sync_tombstones_.find(ShardOf(key, sync_shard_count_));
  if (it == sync_tombstones_.end()) return;
  uint64_t& deleted = it->second[std::string(key)];
  deleted = std::max(deleted, version);
}

std::vector<uint64_t> Applier::ShardHighWaters(const std::vector<uint32_t>& shards, uint32_t shard_count) const {
  std::vector<uint64_t> high(shards.size(), 0);
  if (shard_count == 0 || shards.empty()) return high;
  // Shard -> its place in `shards` (+1; 0: not asked for).
  std::vector<size_t> place(shard_count, 0);
  for (size_t i = 0; i < shards.size(); ++i) {
    if (shards[i] < shard_count) place[shards[i]] = i + 1;
  }
  MutexLock lock(table_mu_);
  ForEachRecord(*table_, [&](const Table::Record& rec) {
    const size_t at = place[ShardOf(rec.key, shard_count)];
    if (at != 0) high[at - 1] = std::max(high[at - 1], rec.version);
  });
  return high;
}

uint64_t Applier::HeldVersion(std::string_view key) const {
  MutexLock lock(table_mu_);
  const std::optional<Table::Entry> e = table_->Lookup(key);
  return e ? e->version : 0;
}

namespace {

// What InstallFetched and InstallFetchedBatch check of a fetched record
// before anything is installed: what no write could have made.
Status CheckFetched(const Applier::ShardRecord& record, const ApplyLimits& limits) {
  if (record.key.empty() || record.key.size() > limits.max_key_bytes) {
    return InvalidArgument("fetched record has a key of " + std::to_string(record.key.size()) + " bytes (1.." +
                           std::to_string(limits.max_key_bytes) + " allowed)");
  }
  const auto where = [&] { return "fetched record of key '" + PrintableKey(record.key) + "'"; };
  if (record.version == 0) return InvalidArgument(where() + " carries version 0");
  if (!record.has_value) return InvalidArgument(where() + " carries no value");
  if (record.expires_at_ms < 0) return InvalidArgument(where() + " carries a negative expiry");
  if (record.value.size() > limits.max_value_bytes) {
    return InvalidArgument(where() + " has a value of " + std::to_string(record.value.size()) +
                           " bytes, above max_value_bytes " + std::to_string(limits.max_value_bytes));
  }
  return Status::Ok();
}

}  // namespace

bool Applier::DeletedDuringSync(std::string_view key, uint64_t version) const {
  if (sync_shard_count_ == 0) return false;
  const auto shard = sync_tombstones_.find(ShardOf(key, sync_shard_count_));
  if (shard == sync_tombstones_.end()) return false;
  const auto deleted = shard->second.find(std::string(key));
  return deleted != shard->second.end() && version <= deleted->second;
}

StatusOr<Applier::FetchedOutcome> Applier::InstallFetched(const ShardRecord& record) {
  RKV_RETURN_IF_ERROR(CheckFetched(record, limits_));
  MutexLock lock(table_mu_);
  if (DeletedDuringSync(record.key, record.version)) return FetchedOutcome::kDeletedMeanwhile;
  const std::optional<Table::Entry> current = table_->Lookup(record.key);
  if (current && current->version >= record.version) return FetchedOutcome::kNotNewer;
  RKV_RETURN_IF_ERROR(PrepareSlot(record.key));
  const protocol::ReplyMsg reply = InstallPut(0, record.key, record.value, record.version, record.expires_at_ms);
  if (reply.status_code != static_cast<int32_t>(StatusCode::kOk)) {
    return Status(static_cast<StatusCode>(reply.status_code), reply.message)
        .WithContext("fetched record of key '" + PrintableKey(record.key) + "'");
  }
  return FetchedOutcome::kInstalled;
}

StatusOr<size_t> Applier::InstallFetchedBatch(std::span<const ShardRecord> records) {
  std::unordered_set<std::string_view> keys;
  keys.reserve(records.size());
  for (const ShardRecord& record : records) {
    RKV_RETURN_IF_ERROR(CheckFetched(record, limits_));
    if (!keys.insert(record.key).second) {
      return InvalidArgument("fetched record of key '" + PrintableKey(record.key) + "' listed twice in one chunk");
    }
  }
  MutexLock lock(table_mu_);
  // The records the replica rule installs: newer than the key's version
  // and than its tombstone.
  std::vector<Store::PutItem> items;
  items.reserve(records.size());
  for (const ShardRecord& record : records) {
    if (DeletedDuringSync(record.key, record.version)) continue;
    const std::optional<Table::Entry> current = table_->Lookup(record.key);
    if (current && current->version >= record.version) continue;
    items.push_back(Store::PutItem{record.key, record.value, record.version, record.expires_at_ms});
  }
  size_t written = 0;
  const Status durable = store_->PutMany(items, &written);
  // The table takes each record written; one it cannot take (no slot, no
  // heap) is taken back out of the store with every record after it.
  for (size_t i = 0; i < written; ++i) {
    const Store::PutItem& item = items[i];
    Status placed = PrepareSlot(item.key);
    if (placed.ok()) placed = Publish(item.key, item.value, item.version, item.expires_at_ms).status();
    if (!placed.ok()) {
      for (size_t j = i; j < written; ++j) {
        if (Status undo = UndoDurable(items[j].key); !undo.ok()) {
          LOG(ERROR) << "fetched record of key '" << PrintableKey(items[j].key) << "' not installed (" << placed
                     << ") and its durable write could not be undone: " << undo
                     << "; the store holds a value the table does not";
          return Internal("fetched record of key '" + PrintableKey(items[j].key) + "' not installed (" +
                          placed.message() + ") and its durable write could not be undone");
        }
      }
      return placed.WithContext("fetched record of key '" + PrintableKey(item.key) + "'");
    }
    puts_.fetch_add(1, std::memory_order_relaxed);
  }
  if (!durable.ok()) return durable.WithContext("durable write of fetched records");
  return written;
}

StatusOr<uint64_t> Applier::DeleteUnlisted(const std::vector<uint32_t>& shards, uint32_t shard_count,
                                           uint64_t snapshot_version, const std::unordered_set<std::string>& listed) {
  RKV_ASSIGN_OR_RETURN(const std::vector<bool> in, ShardSet(shards, shard_count));
  MutexLock lock(table_mu_);
  std::vector<std::string> gone;
  // The table holds every record this server published: a pass over
  // memory, not over the whole store on disk, for each shard.
  ForEachRecord(*table_, [&](const Table::Record& rec) {
    if (rec.version <= snapshot_version && in[ShardOf(rec.key, shard_count)] &&
        listed.count(std::string(rec.key)) == 0) {
      gone.emplace_back(rec.key);
    }
  });
  for (const std::string& key : gone) {
    if (Status s = store_->Delete(key); !s.ok()) return s.WithContext("durable delete of a key gone from the primary");
    if (table_->Lookup(key)) (void)table_->Delete(key, Heap::Clock::now());
    deletes_.fetch_add(1, std::memory_order_relaxed);
  }
  return static_cast<uint64_t>(gone.size());
}

}  // namespace rkv::server
