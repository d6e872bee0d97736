// Test support for the catch-up tests: the cluster map as the test hands
// it out (MapBoard), and each server's MapSource reading it (BoardSource),
// in place of a coordinator. A test that expects no replica failure report
// checks BoardSource::reports() at its end.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "proto/rkv.pb.h"
#include "common/status.h"
#include "server/replication/map_source.h"

namespace rkv::server::testing {

// The map every server of a test follows. Thread-safe.
class MapBoard {
 public:
  std::shared_ptr<const v1::ClusterMap> map() const {
    std::lock_guard lock(mu_);
    return map_;
  }
  void Install(v1::ClusterMap m) {
    {
      std::lock_guard lock(mu_);
      map_ = std::make_shared<const v1::ClusterMap>(std::move(m));
    }
    cv_.notify_all();
  }
  Status WaitForVersion(uint64_t version, std::chrono::milliseconds timeout) {
    std::unique_lock lock(mu_);
    if (cv_.wait_for(lock, timeout, [&] { return map_ != nullptr && map_->version() >= version; })) {
      return Status::Ok();
    }
    return DeadlineExceeded("map version " + std::to_string(version) + " not learned");
  }

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::shared_ptr<const v1::ClusterMap> map_;
};

// One server's view of a MapBoard: no lease, nothing to refresh, and a
// replica failure report refused (and counted: no coordinator takes it).
class BoardSource final : public MapSource {
 public:
  BoardSource(std::string id, uint64_t epoch, MapBoard* board) : id_(std::move(id)), epoch_(epoch), board_(board) {}
  const std::string& server_id() const override { return id_; }
  uint64_t epoch() const override { return epoch_; }
  std::shared_ptr<const v1::ClusterMap> map() const override { return board_->map(); }
  Status WaitForVersion(uint64_t version, std::chrono::milliseconds timeout) override {
    return board_->WaitForVersion(version, timeout);
  }
  Status RefreshNow(std::chrono::milliseconds) override { return Status::Ok(); }
  StatusOr<uint64_t> ReportReplicaFailure(std::string_view backup, const std::vector<uint32_t>&, std::string_view why,
                                          std::chrono::milliseconds) override {
    reports_.fetch_add(1);
    return Internal("unexpected report of " + std::string(backup) + ": " + std::string(why));
  }
  ServerLease lease() const override {
    return ServerLease{.enabled = false, .until = {}, .map_version = 0, .why_not_renewed = {}};
  }

  // The replica failure reports refused so far.
  int reports() const { return reports_.load(); }

 private:
  const std::string id_;
  const uint64_t epoch_;
  MapBoard* const board_;
  std::atomic<int> reports_{0};
};

}  // namespace rkv::server::testing
