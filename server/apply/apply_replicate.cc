// The Applier's second job (server/apply/apply.h, "Replication",
// Primary): the versions of client PUTs, and the forward of each client
// write to its route's backups, with the failed ones reported to the
// coordinator. Called by the client path (apply_client.cc) with the writes
// gate shared and the key's stripe held.
#include <algorithm>
#include <limits>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <glog/logging.h>

#include "common/record.h"
#include "server/apply/apply.h"

namespace rkv::server {

uint64_t Applier::ReserveVersion() {
  // The store's mark rises only when a write lands, so writes in flight
  // together would read the same NextVersion: reserved_version_ keeps
  // them apart, and above every version forwarded for a write that failed
  // (the backups may hold it, and would take a later write of the key
  // with the same version for a stale resend).
  // 0 when none is left: the store's mark or a reservation is at the top of
  // the space (NextVersion and the increment would wrap).
  constexpr uint64_t kTop = std::numeric_limits<uint64_t>::max();
  if (store_->version_high_water() == kTop || reserved_version_ == kTop) return 0;
  reserved_version_ = std::max(store_->NextVersion(), reserved_version_ + 1);
  return reserved_version_;
}

size_t Applier::EncodeForward(const Request& req, const Staged& staged, std::vector<uint8_t>* record) {
  const bool del = req.op == protocol::Op::kDelete;
  const std::string_view value = del ? std::string_view() : req.value;
  record->assign(layout::BlockBytes(req.key.size(), value.size()), 0);
  return EncodeRecord(*record, req.key, value, staged.version, del ? layout::kBlockFlagTombstone : 0,
                      del ? 0 : req.expires_at_ms);
}

Status Applier::Replicate(const Request& req, const Staged& staged) {
  thread_local std::vector<uint8_t> record;
  const size_t bytes = EncodeForward(req, staged, &record);
  const std::vector<Status> acks = replication_.forwarder->Forward(
      staged.route->backups, staged.route->map_version, ForwardOp(req), std::span(record.data(), bytes));
  return SettleForward(*staged.route, acks);
}

Status Applier::SettleForward(const WriteRoute& route, const std::vector<Status>& acks,
                              std::vector<std::pair<std::string, uint64_t>>* reported) {
  forwarded_.fetch_add(1, std::memory_order_relaxed);
  for (size_t i = 0; i < route.backups.size(); ++i) {
    const Status& ack = i < acks.size() ? acks[i] : Internal("the forwarder gave no answer for this backup");
    if (ack.ok()) continue;
    backup_failures_.fetch_add(1, std::memory_order_relaxed);
    const ReplicaPeer& backup = route.backups[i];
    LOG(WARNING) << "backup " << backup.server_id << " (epoch " << backup.epoch << ", " << backup.data_address
                 << ") of shard " << route.shard << " did not acknowledge a write: " << ack;
    const std::pair<std::string, uint64_t> incarnation{backup.server_id, backup.epoch};
    if (reported != nullptr && std::find(reported->begin(), reported->end(), incarnation) != reported->end()) {
      // Reported for an earlier write of the group: that report took it out
      // of every shard this server leads that listed it, this one included.
      continue;
    }
    if (Status told = replication_.policy->ReportFailedBackup(route.shard, backup, ack.ToString()); !told.ok()) {
      LOG(ERROR) << "backup " << backup.server_id << " of shard " << route.shard
                 << " failed and the coordinator could not be told: " << told;
      return Status(StatusCode::kUnavailable,
                    "outcome unknown: backup " + backup.server_id +
                        " failed and the coordinator could not be told (" + told.message() + ")",
                    Reason::kOutcomeUnknown, route.map_version);
    }
    if (reported != nullptr) reported->push_back(incarnation);
  }
  return Status::Ok();
}

}  // namespace rkv::server
