// Helpers shared by the control-plane tests: temp dirs, a fake clock, an
// in-memory StateStore that can be told to fail, and valid join requests.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <grpcpp/client_context.h>

#include "common/layout.h"
#include "common/mutex.h"
#include "proto/auth.h"
#include "proto/rkv.pb.h"
#include "coordinator/coordinator_state.h"
#include "coordinator/state_store.h"
#include "tests/temp_dir.h"

namespace rkv::coordinator::testing {

// A call's context that presents `token` ("" for none), with a deadline
// `deadline` from now.
inline std::unique_ptr<grpc::ClientContext> CallContext(const std::string& token,
                                                        std::chrono::seconds deadline = std::chrono::seconds(20)) {
  auto ctx = std::make_unique<grpc::ClientContext>();
  if (!token.empty()) control::AttachToken(ctx.get(), token);
  ctx->set_deadline(std::chrono::system_clock::now() + deadline);
  return ctx;
}

// The tests' one temp dir.
using rkv::testing::TempDir;

// A loopback TCP address that was free a moment ago (nobody listens on
// it): a probe of it is refused at once, as a killed server's would be.
inline std::string ClosedAddress() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  const bool ok = fd >= 0 && bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
                  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0;
  if (fd >= 0) close(fd);
  return ok ? "127.0.0.1:" + std::to_string(ntohs(a.sin_port)) : "127.0.0.1:1";
}

// A steady clock that moves only when told to.
class FakeClock {
 public:
  std::chrono::steady_clock::time_point Now() const EXCLUDES(mu_) {
    MutexLock lock(mu_);
    return now_;
  }
  void Advance(std::chrono::milliseconds d) EXCLUDES(mu_) {
    MutexLock lock(mu_);
    now_ += d;
  }
  Clock AsClock() {
    return [this] { return Now(); };
  }
  // A wall clock that moves with it: as many milliseconds after the Unix
  // epoch as Now() is after the steady clock's (3,600,000 at first).
  WallClock AsWallClock() {
    return [this] {
      return std::chrono::system_clock::time_point(
          std::chrono::duration_cast<std::chrono::system_clock::duration>(Now().time_since_epoch()));
    };
  }

 private:
  mutable Mutex mu_;
  std::chrono::steady_clock::time_point now_ GUARDED_BY(mu_) =
      std::chrono::steady_clock::time_point(std::chrono::hours(1));
};

// The records of a MemoryStore, kept apart from it so that a test can
// "reopen" the same store, fail its commits or edit what it holds.
class MemoryStoreData {
 public:
  StatusOr<StateStore::Snapshot> Load() const EXCLUDES(mu_) {
    MutexLock lock(mu_);
    StateStore::Snapshot snap;
    snap.meta = meta_;
    for (const auto& [id, s] : servers_) snap.servers.push_back(s);
    return snap;
  }
  Status Commit(const v1::store::StoredMeta& meta, const std::vector<v1::store::StoredServer>& servers,
                const std::vector<std::string>& removed) EXCLUDES(mu_) {
    MutexLock lock(mu_);
    if (fail_) return Internal("injected commit failure");
    meta_ = meta;
    for (const auto& s : servers) servers_[s.info().server_id()] = s;
    for (const std::string& id : removed) servers_.erase(id);
    ++commits_;
    return Status::Ok();
  }

  // Commits fail with INTERNAL while `fail` is set.
  void SetFailing(bool fail) EXCLUDES(mu_) {
    MutexLock lock(mu_);
    fail_ = fail;
  }
  // Commits that succeeded.
  int commits() const EXCLUDES(mu_) {
    MutexLock lock(mu_);
    return commits_;
  }
  // Changes the stored record of `server_id` (a new one if absent).
  void EditServer(const std::string& server_id, const std::function<void(v1::store::StoredServer&)>& edit)
      EXCLUDES(mu_) {
    MutexLock lock(mu_);
    edit(servers_[server_id]);
  }
  // Changes the stored meta record (which must exist).
  void EditMeta(const std::function<void(v1::store::StoredMeta&)>& edit) EXCLUDES(mu_) {
    MutexLock lock(mu_);
    edit(*meta_);
  }

 private:
  mutable Mutex mu_;
  std::optional<v1::store::StoredMeta> meta_ GUARDED_BY(mu_);
  std::map<std::string, v1::store::StoredServer> servers_ GUARDED_BY(mu_);
  bool fail_ GUARDED_BY(mu_) = false;
  int commits_ GUARDED_BY(mu_) = 0;
};

class MemoryStore final : public StateStore {
 public:
  explicit MemoryStore(std::shared_ptr<MemoryStoreData> data) : data_(std::move(data)) {}
  StatusOr<Snapshot> Load() override { return data_->Load(); }
  Status Commit(const v1::store::StoredMeta& meta, const std::vector<v1::store::StoredServer>& servers,
                const std::vector<std::string>& removed) override {
    return data_->Commit(meta, servers, removed);
  }

 private:
  std::shared_ptr<MemoryStoreData> data_;
};

// A valid JoinRequest; `seed` varies the addresses and regions.
inline v1::JoinRequest MakeJoin(const std::string& id, uint64_t epoch, uint32_t seed = 0,
                                const std::string& zone = "") {
  v1::JoinRequest r;
  r.set_zone(zone);
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
