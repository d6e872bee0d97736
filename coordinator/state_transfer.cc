#include "coordinator/state_transfer.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <memory>
#include <utility>
#include <vector>

#include "proto/coordinator_store.pb.h"

namespace rkv::coordinator {

namespace {

// The largest state file read (a cluster of the most servers, each with
// every shard, is far below it).
constexpr size_t kMaxStateFileBytes = size_t{256} << 20;

// A store holding one snapshot and taking no commit: what ImportState
// checks a file's state with, through CoordinatorState::Open.
class SnapshotStore final : public StateStore {
 public:
  explicit SnapshotStore(Snapshot snap) : snap_(std::move(snap)) {}
  StatusOr<Snapshot> Load() override { return snap_; }
  Status Commit(const v1::store::StoredMeta&, const std::vector<v1::store::StoredServer>&,
                const std::vector<std::string>&) override {
    return FailedPrecondition("a state being imported is not changed");
  }

 private:
  Snapshot snap_;
};

Status WriteWhole(const std::string& path, const std::string& bytes) {
  const std::string tmp = path + ".tmp";
  const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return PosixError("open(" + tmp + ")", errno);
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      close(fd);
      return PosixError("write(" + tmp + ")", err);
    }
    done += static_cast<size_t>(n);
  }
  if (fsync(fd) != 0) {
    const int err = errno;
    close(fd);
    return PosixError("fsync(" + tmp + ")", err);
  }
  if (close(fd) != 0) return PosixError("close(" + tmp + ")", errno);
  if (std::rename(tmp.c_str(), path.c_str()) != 0) return PosixError("rename(" + tmp + ", " + path + ")", errno);
  return Status::Ok();
}

}  // namespace

StatusOr<TransferSummary> ExportState(StateStore& from, const std::string& path) {
  RKV_ASSIGN_OR_RETURN(StateStore::Snapshot snap, from.Load());
  if (!snap.meta.has_value()) return FailedPrecondition("the store holds no cluster yet: nothing to export");
  v1::store::StoredState state;
  *state.mutable_meta() = *snap.meta;
  state.mutable_meta()->clear_leader_revision();
  for (auto& server : snap.servers) *state.add_servers() = std::move(server);
  RKV_RETURN_IF_ERROR(WriteWhole(path, state.SerializeAsString()));
  return TransferSummary{state.meta().map_version(), static_cast<size_t>(state.servers_size())};
}

StatusOr<TransferSummary> ImportState(const CoordinatorConfig& config, const std::string& path, StateStore& to) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return PosixError("open(" + path + ")", errno);
  std::string bytes;
  char buffer[1 << 16];
  while (in.read(buffer, sizeof(buffer)) || in.gcount() > 0) {
    bytes.append(buffer, static_cast<size_t>(in.gcount()));
    if (bytes.size() > kMaxStateFileBytes) {
      return InvalidArgument(path + " is larger than " + std::to_string(kMaxStateFileBytes >> 20) +
                             " MiB: not a state file");
    }
  }
  v1::store::StoredState state;
  if (!state.ParseFromString(bytes) || !state.has_meta()) {
    return DataLoss(path + " is not a state file written by rkv-coordinator --export_state");
  }
  StateStore::Snapshot snap;
  snap.meta = state.meta();
  snap.meta->clear_leader_revision();
  snap.servers.assign(state.servers().begin(), state.servers().end());
  // The same checks as a coordinator opening a store with this content.
  auto checked = CoordinatorState::Open(config, std::make_unique<SnapshotStore>(snap));
  if (!checked.ok()) return checked.status().WithContext(path);

  RKV_ASSIGN_OR_RETURN(StateStore::Snapshot existing, to.Load());
  if (existing.meta.has_value() || !existing.servers.empty()) {
    return FailedPrecondition("the target already holds a cluster (map version " +
                              std::to_string(existing.meta.has_value() ? existing.meta->map_version() : 0) +
                              "): nothing was imported");
  }
  RKV_RETURN_IF_ERROR(to.Commit(*snap.meta, snap.servers, /*removed=*/{}));
  return TransferSummary{snap.meta->map_version(), snap.servers.size()};
}

}  // namespace rkv::coordinator
