// Helpers shared by the control-plane tests: temp dirs, a fake clock, an
// in-memory StateStore that can be told to fail, and valid join requests.
#pragma once

#include <stdlib.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <system_error>

#include "common/layout.h"
#include "proto/rkv.pb.h"
#include "server/coordinator/coordinator_state.h"
#include "server/coordinator/state_store.h"

namespace rkv::coordinator::testing {

// A fresh directory under the system temp dir, removed on destruction.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "rkv-coord-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) std::abort();
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// A steady clock that moves only when told to.
class FakeClock {
 public:
  std::chrono::steady_clock::time_point Now() const {
    std::lock_guard<std::mutex> lock(mu_);
    return now_;
  }
  void Advance(std::chrono::milliseconds d) {
    std::lock_guard<std::mutex> lock(mu_);
    now_ += d;
  }
  Clock AsClock() {
    return [this] { return Now(); };
  }

 private:
  mutable std::mutex mu_;
  std::chrono::steady_clock::time_point now_{std::chrono::hours(1)};
};

// Records in memory; commits fail while `fail` is set. The records live in
// a shared object so that a test can "reopen" the same store.
struct MemoryStoreData {
  std::mutex mu;
  std::optional<v1::store::StoredMeta> meta;
  std::map<std::string, v1::store::StoredServer> servers;
  bool fail = false;
  int commits = 0;
};

class MemoryStore final : public StateStore {
 public:
  explicit MemoryStore(std::shared_ptr<MemoryStoreData> data) : data_(std::move(data)) {}
  StatusOr<Snapshot> Load() override {
    std::lock_guard<std::mutex> lock(data_->mu);
    Snapshot snap;
    snap.meta = data_->meta;
    for (const auto& [id, s] : data_->servers) snap.servers.push_back(s);
    return snap;
  }
  Status Commit(const v1::store::StoredMeta& meta, const std::vector<v1::store::StoredServer>& servers) override {
    std::lock_guard<std::mutex> lock(data_->mu);
    if (data_->fail) return Internal("injected commit failure");
    data_->meta = meta;
    for (const auto& s : servers) data_->servers[s.info().server_id()] = s;
    ++data_->commits;
    return Status::Ok();
  }

 private:
  std::shared_ptr<MemoryStoreData> data_;
};

// A valid JoinRequest; `seed` varies the addresses and regions.
inline v1::JoinRequest MakeJoin(const std::string& id, uint64_t epoch, uint32_t seed = 0) {
  v1::JoinRequest r;
  r.set_server_id(id);
  r.set_epoch(epoch);
  r.set_data_address("127.0.0.1:" + std::to_string(7700 + seed));
  r.set_admin_address("127.0.0.1:" + std::to_string(8700 + seed));
  r.set_transport("tcp");
  v1::TableParams* t = r.mutable_table();
  t->set_bucket_count_log2(4);
  t->set_hash_seed(1234 + seed);
  t->set_heap_size(1 << 20);
  t->set_max_key_bytes(1024);
  t->set_max_value_bytes(4096);
  t->set_grace_period_us(100'000);
  r.mutable_index()->set_addr(0x100000 + 0x1000 * uint64_t{seed});
  r.mutable_index()->set_length(layout::IndexBytes(16));
  r.mutable_index()->set_rkey(10 + seed);
  r.mutable_heap()->set_addr(0x40000000 + 0x1000 * uint64_t{seed});
  r.mutable_heap()->set_length(1 << 20);
  r.mutable_heap()->set_rkey(20 + seed);
  return r;
}

}  // namespace rkv::coordinator::testing
