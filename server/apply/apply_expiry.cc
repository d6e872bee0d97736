// The Applier's reclaim of expired records (server/apply/apply.h,
// "Expiry"; docs/design.md §5.11): a slice of the index at a time, and
// each record removed as a DELETE of its version by the key's primary,
// forwarded to its backups like any client write.
#include <glog/logging.h>

#include "common/record.h"
#include "server/apply/apply.h"
#include "server/apply/for_each_record.h"

namespace rkv::server {

std::vector<Applier::ExpiredKey> Applier::ExpiredKeys(uint64_t* cursor, uint64_t max_buckets, int64_t now_ms) const {
  std::vector<ExpiredKey> expired;
  MutexLock lock(table_mu_);
  const uint64_t buckets = table_->bucket_count();
  if (*cursor >= buckets) *cursor = 0;
  ForEachRecordIn(*table_, *cursor, max_buckets, [&](const Table::Record& rec) {
    if (Expired(rec.expires_at_ms, now_ms)) expired.push_back(ExpiredKey{std::string(rec.key), rec.version});
  });
  *cursor = max_buckets >= buckets - *cursor ? 0 : *cursor + max_buckets;
  return expired;
}

uint64_t Applier::expiring_records() const {
  MutexLock lock(table_mu_);
  return table_->expiring();
}

Status Applier::ReclaimExpired(std::string_view key, uint64_t version) {
  Request req;
  req.op = protocol::Op::kDelete;
  req.key = key;
  req.condition = protocol::Condition::kVersionIs;
  req.expected_version = version;
  req.reclaim = true;
  bool remember = false;  // a reclaim is never in the request cache
  const protocol::ReplyMsg reply = ApplyWrite(req, &remember);
  if (reply.status_code == static_cast<int32_t>(StatusCode::kOk)) {
    expired_reclaimed_.fetch_add(1, std::memory_order_relaxed);
    return Status::Ok();
  }
  const std::string_view message(reply.message, strnlen(reply.message, sizeof(reply.message)));
  return Status(static_cast<StatusCode>(reply.status_code), std::string(message),
                static_cast<Reason>(reply.reason), reply.map_version);
}

}  // namespace rkv::server
