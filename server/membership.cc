#include "server/membership.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <system_error>

#include <glog/logging.h>

#include "proto/auth.h"
#include "proto/coordinator_set.h"
#include "proto/grpc_status.h"
#include "proto/region_descriptor.h"
#include "proto/rkv.grpc.pb.h"
#include "proto/validation.h"

namespace rkv::server {
namespace {

constexpr char kServerIdFile[] = "server_id";
constexpr auto kLeaveTimeout = std::chrono::seconds(2);
// ReportReplicaFailureRequest.reason: printable, at most 200 bytes
// (Printable appends "..." to what it cuts).
constexpr size_t kMaxReasonBytes = 200 - 3;

// A deadline `d` from now.
control::CoordinatorSet::Deadline DeadlineIn(std::chrono::steady_clock::duration d) {
  return std::chrono::steady_clock::now() + d;
}

Status WriteFileDurably(const std::string& dir, const std::string& name, const std::string& content) {
  const std::string tmp = dir + "/" + name + ".tmp";
  const std::string path = dir + "/" + name;
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return PosixError("open(" + tmp + ")", errno);
  size_t done = 0;
  while (done < content.size()) {
    const ssize_t n = ::write(fd, content.data() + done, content.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      return PosixError("write(" + tmp + ")", err);
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) {
    const int err = errno;
    ::close(fd);
    return PosixError("fsync(" + tmp + ")", err);
  }
  if (::close(fd) != 0) return PosixError("close(" + tmp + ")", errno);
  if (::rename(tmp.c_str(), path.c_str()) != 0) return PosixError("rename(" + tmp + ", " + path + ")", errno);
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) return PosixError("open(" + dir + ")", errno);
  const int rc = ::fsync(dfd);
  const int err = errno;
  ::close(dfd);
  if (rc != 0) return PosixError("fsync(" + dir + ")", err);
  return Status::Ok();
}

// Errors worth retrying: the coordinator is unreachable, overloaded,
// restarting or failed to write its state. Everything else is an answer.
bool IsRetryable(StatusCode code) {
  switch (code) {
    case StatusCode::kUnavailable:
    case StatusCode::kDeadlineExceeded:
    case StatusCode::kResourceExhausted:
    case StatusCode::kAborted:
    case StatusCode::kInternal:
    case StatusCode::kUnknown:
    case StatusCode::kCancelled:
      return true;
    default:
      return false;
  }
}

v1::JoinRequest ToJoinRequest(const JoinInfo& j) {
  v1::JoinRequest r;
  r.set_server_id(j.server_id);
  r.set_epoch(j.epoch);
  r.set_data_address(j.data_address);
  r.set_admin_address(j.admin_address);
  r.set_transport(j.transport);
  *r.mutable_index() = control::ToProto(j.index);
  *r.mutable_heap() = control::ToProto(j.heap);
  *r.mutable_table() = control::ToProto(j.table);
  r.set_zone(j.zone);
  return r;
}

}  // namespace

StatusOr<ServerIdentity> ServerIdentity::LoadOrCreate(const std::string& data_dir) {
  if (data_dir.empty()) return InvalidArgument("no data dir for the server id");
  std::error_code ec;
  std::filesystem::create_directories(data_dir, ec);
  if (ec) return PosixError("create_directories(" + data_dir + ")", ec.value());
  const std::string path = data_dir + "/" + kServerIdFile;
  if (std::filesystem::exists(path, ec)) {
    std::ifstream in(path, std::ios::binary);
    if (!in) return PosixError("open(" + path + ")", errno);
    std::string id((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (in.bad()) return PosixError("read(" + path + ")", errno);
    while (!id.empty() && (id.back() == '\n' || id.back() == '\r' || id.back() == ' ' || id.back() == '\t')) {
      id.pop_back();
    }
    if (Status s = control::ValidateServerId(id); !s.ok()) {
      return DataLoss(path + " does not hold a valid server id: " + s.message());
    }
    return ServerIdentity{std::move(id)};
  }
  if (ec) return PosixError("stat(" + path + ")", ec.value());
  std::random_device random;
  char id[16];
  std::snprintf(id, sizeof(id), "s-%08x", static_cast<unsigned>(random()));
  RKV_RETURN_IF_ERROR(WriteFileDurably(data_dir, kServerIdFile, std::string(id) + "\n"));
  LOG(INFO) << "new server id " << id << " (kept in " << path << ")";
  return ServerIdentity{id};
}

Status CheckReplicaLists(const v1::ClusterMap& map) {
  if (map.replication_factor() > control::kMaxExpectedServers) {
    return InvalidArgument("replication_factor " + std::to_string(map.replication_factor()) + " is above " +
                           std::to_string(control::kMaxExpectedServers));
  }
  if (map.shard_replicas().empty()) return Status::Ok();
  if (map.shard_owner().empty()) return InvalidArgument("shard_replicas is set but shard_owner is empty");
  if (static_cast<uint64_t>(map.shard_replicas_size()) != map.shard_count()) {
    return InvalidArgument("shard_replicas has " + std::to_string(map.shard_replicas_size()) +
                           " entries, not shard_count " + std::to_string(map.shard_count()));
  }
  std::set<std::string_view> listed;
  for (const v1::ServerInfo& s : map.servers()) listed.insert(s.server_id());
  // Replicas and servers catching up together: R, plus up to R roles in
  // flight (a move lists the receiving server before the donor leaves).
  const size_t most = control::MaxShardMembers(map.replication_factor());
  for (int shard = 0; shard < map.shard_replicas_size(); ++shard) {
    const v1::ShardReplicas& entry = map.shard_replicas(shard);
    const auto& ids = entry.server_ids();
    const std::string where = "shard_replicas[" + std::to_string(shard) + "]";
    if (ids.empty()) return InvalidArgument(where + " is empty");
    const size_t members = static_cast<size_t>(ids.size()) + static_cast<size_t>(entry.syncing_ids_size());
    if (members > most) {
      return InvalidArgument(where + " has " + std::to_string(members) +
                             " servers (replicas and syncing), more than twice replication_factor " +
                             std::to_string(most / 2));
    }
    if (ids[0] != map.shard_owner(shard)) {
      return InvalidArgument(where + " starts with '" + control::Printable(ids[0]) + "', not shard_owner '" +
                             control::Printable(map.shard_owner(shard)) + "'");
    }
    std::set<std::string_view> seen;
    const auto check = [&](const std::string& id) {
      if (listed.count(id) == 0) {
        return InvalidArgument(where + " names '" + control::Printable(id) + "', which is not a listed server");
      }
      if (!seen.insert(id).second) return InvalidArgument(where + " names '" + control::Printable(id) + "' twice");
      return Status::Ok();
    };
    for (const std::string& id : ids) RKV_RETURN_IF_ERROR(check(id));
    for (const std::string& id : entry.syncing_ids()) RKV_RETURN_IF_ERROR(check(id));
    if (!entry.handover_from().empty() &&
        std::find(ids.begin() + 1, ids.end(), entry.handover_from()) == ids.end()) {
      return InvalidArgument(where + " hands over from '" + control::Printable(entry.handover_from()) +
                             "', which is not one of its backups");
    }
  }
  return Status::Ok();
}

struct Membership::Rpc {
  // Null when options_.coordinator_address is not a valid list (`invalid`
  // says why): every call then fails with that error.
  std::unique_ptr<control::CoordinatorSet> coordinators;
  Status invalid;
  v1::JoinRequest join;
};

Membership::Membership(MembershipOptions options) : options_(std::move(options)), rpc_(std::make_unique<Rpc>()) {
  auto coordinators = control::CoordinatorSet::Create(options_.coordinator_address, options_.token, options_.tls);
  if (coordinators.ok()) {
    rpc_->coordinators = std::move(coordinators).value();
  } else {
    rpc_->invalid = coordinators.status().WithContext("coordinator address");
  }
  rpc_->join = ToJoinRequest(options_.self);
}

Membership::~Membership() { Stop(); }

Status Membership::JoinOnce() {
  RKV_RETURN_IF_ERROR(rpc_->invalid);
  v1::JoinResponse resp;
  // Before the first attempt: a lease counted from here is never longer
  // than one counted from the attempt that was answered.
  const auto sent = std::chrono::steady_clock::now();
  RKV_RETURN_IF_ERROR(rpc_->coordinators->CallLeader(
      "Join", DeadlineIn(options_.rpc_timeout), [&](v1::Coordinator::Stub& stub, grpc::ClientContext* ctx) {
        return stub.Join(ctx, rpc_->join, &resp);
      }));
  NoteLeader();
  Grant(sent, resp.lease_ms(), resp.map_version());
  MutexLock lock(mu_);
  joined_ = true;
  // The watch may already have installed a newer map than this answer.
  if (resp.map_version() >= map_version_) {
    map_version_ = resp.map_version();
    shards_.assign(resp.shards().begin(), resp.shards().end());
  }
  // The coordinator's interval, bounded so that a bad answer can neither
  // spin this thread nor silence it past the timeout.
  heartbeat_interval_ = std::chrono::milliseconds(std::clamp<uint32_t>(resp.heartbeat_interval_ms(), 10, 60'000));
  return Status::Ok();
}

void Membership::Grant(std::chrono::steady_clock::time_point sent, uint32_t lease_ms, uint64_t map_version) {
  const ServerLease granted = LeaseFrom(sent, lease_ms, map_version);
  MutexLock lock(mu_);
  if (!granted.enabled && lease_.enabled) {
    LOG(INFO) << "the coordinator grants no leases: writes are acknowledged without one";
  }
  // Grants come one at a time from one thread (Start's Join, then the
  // heartbeat thread), so this one was sent after the one it replaces.
  lease_ = granted;
  lease_ms_ = granted.enabled ? lease_ms : 0;
}

ServerLease Membership::lease() const {
  MutexLock lock(mu_);
  return lease_;
}

Status Membership::FetchMap(std::chrono::milliseconds timeout) {
  RKV_RETURN_IF_ERROR(rpc_->invalid);
  v1::ClusterMap map;
  RKV_RETURN_IF_ERROR(rpc_->coordinators->CallAny(
      "GetClusterMap", DeadlineIn(timeout), [&](v1::Coordinator::Stub& stub, grpc::ClientContext* ctx) {
        return stub.GetClusterMap(ctx, v1::GetClusterMapRequest(), &map);
      }));
  return InstallMap(map, "GetClusterMap").status();
}

StatusOr<bool> Membership::InstallMap(const v1::ClusterMap& map, std::string_view from) {
  const std::string context = "cluster map from the coordinator (" + std::string(from) + ")";
  RKV_RETURN_IF_ERROR(control::ValidateClusterMap(map).WithContext(context));
  RKV_RETURN_IF_ERROR(CheckReplicaLists(map).WithContext(context));
  std::vector<uint32_t> mine;
  for (const v1::ServerInfo& s : map.servers()) {
    if (s.server_id() == options_.self.server_id) mine.assign(s.shards().begin(), s.shards().end());
  }
  auto installed = std::make_shared<const v1::ClusterMap>(map);
  {
    MutexLock lock(mu_);
    if (map_ != nullptr && map.version() <= map_->version()) return false;
    if (mine.size() != shards_.size()) {
      LOG(INFO) << "server " << options_.self.server_id << " owns " << mine.size() << " of " << map.shard_count()
                << " shards (map version " << map.version() << ")";
    }
    shards_ = std::move(mine);
    map_version_ = std::max(map_version_, map.version());
    map_ = std::move(installed);
  }
  map_cv_.NotifyAll();
  VLOG(1) << "server " << options_.self.server_id << " installed map version " << map.version() << " (" << from
          << ")";
  return true;
}

Status Membership::HeartbeatOnce() {
  v1::HeartbeatRequest req;
  req.set_server_id(options_.self.server_id);
  req.set_epoch(options_.self.epoch);
  if (options_.stats) {
    const MembershipStats stats = options_.stats();
    req.set_keys(stats.keys);
    req.set_heap_bytes_used(stats.heap_bytes_used);
  }
  RKV_RETURN_IF_ERROR(rpc_->invalid);
  v1::HeartbeatResponse resp;
  const auto sent = std::chrono::steady_clock::now();
  RKV_RETURN_IF_ERROR(rpc_->coordinators->CallLeader(
      "Heartbeat", DeadlineIn(options_.rpc_timeout), [&](v1::Coordinator::Stub& stub, grpc::ClientContext* ctx) {
        return stub.Heartbeat(ctx, req, &resp);
      }));
  NoteLeader();
  Grant(sent, resp.lease_ms(), resp.map_version());
  // A version this server has not installed: the watch stream is behind
  // (or broken); the fetch thread brings it if the stream does not.
  bool wanted = false;
  {
    MutexLock lock(mu_);
    if (resp.map_version() > fetch_wanted_) fetch_wanted_ = resp.map_version();
    wanted = FetchWantedLocked();
  }
  if (wanted) fetch_cv_.NotifyAll();
  return Status::Ok();
}

bool Membership::FetchWantedLocked() const {
  return fetch_wanted_ > (map_ != nullptr ? map_->version() : 0);
}

void Membership::FetchLoop() {
  for (;;) {
    std::chrono::milliseconds grace;
    {
      MutexLock lock(mu_);
      fetch_cv_.Wait(mu_, [&] {
        mu_.AssertHeld();
        return stopping_ || FetchWantedLocked();
      });
      if (stopping_) return;
      grace = heartbeat_interval_;
      // The stream normally brings the map within moments of the change;
      // a write that waits for it (MapPolicy::CheckLease) waits at most
      // this grace plus one fetch.
      map_cv_.WaitFor(mu_, std::min(grace, kFetchGrace), [&] {
        mu_.AssertHeld();
        return stopping_ || !FetchWantedLocked();
      });
      if (stopping_) return;
      if (!FetchWantedLocked()) continue;
    }
    if (const Status s = FetchMap(options_.rpc_timeout); !s.ok()) {
      VLOG(1) << "fetching the cluster map failed (" << s << "); trying again in " << grace.count() << " ms";
      if (!SleepFor(grace)) return;
    }
  }
}

namespace {

// A heartbeat's failure, in the few words a write refused for an expired
// lease can carry to its client (ServerLease::why_not_renewed).
std::string WhyNotRenewed(const Status& s) {
  const std::string& m = s.message();
  if (m.find("no leader elected yet") != std::string::npos) {
    return m.find("etcd unreachable") != std::string::npos ? "no coordinator leader (etcd unreachable)"
                                                           : "no coordinator leader";
  }
  if (m.find("not the leader") != std::string::npos) return "no coordinator leader reachable";
  return "coordinator unreachable";
}

}  // namespace

void Membership::NoteReachable(bool reachable, const Status& why) {
  MutexLock lock(mu_);
  connected_ = reachable;
  lease_.why_not_renewed = reachable ? std::string() : WhyNotRenewed(why);
  if (reachable && reported_down_) {
    LOG(INFO) << "coordinator " << leader_ << " is reachable again";
    reported_down_ = false;
  } else if (!reachable && !reported_down_) {
    LOG(WARNING) << "no leading coordinator reachable at " << options_.coordinator_address << " (" << why
                 << "); serving on, retrying quietly";
    reported_down_ = true;
  }
}

void Membership::NoteLeader() {
  std::string leader = rpc_->coordinators->leader();
  MutexLock lock(mu_);
  if (leader == leader_) return;
  if (!leader_.empty()) LOG(INFO) << "the leading coordinator is now " << leader << " (was " << leader_ << ")";
  leader_ = std::move(leader);
}

bool Membership::SleepFor(std::chrono::milliseconds d) {
  const auto deadline = std::chrono::steady_clock::now() + d;
  MutexLock lock(mu_);
  while (!stopping_) {
    if (!stop_cv_.WaitUntil(mu_, deadline)) break;
  }
  return !stopping_;
}

Status Membership::Start() {
  RKV_RETURN_IF_ERROR(rpc_->invalid);
  if (options_.token.empty()) return InvalidArgument("the token is empty");
  RKV_RETURN_IF_ERROR(control::ValidateJoinRequest(rpc_->join).WithContext("join request"));
  std::chrono::milliseconds backoff = std::max(options_.initial_backoff, std::chrono::milliseconds(1));
  for (;;) {
    {
      MutexLock lock(mu_);
      if (stopping_) return Status(StatusCode::kCancelled, "stopped before joining the coordinator");
    }
    const Status s = JoinOnce();
    if (s.ok()) break;
    if (!IsRetryable(s.code())) {
      return s.WithContext("joining the cluster");
    }
    NoteReachable(false, s);
    if (!SleepFor(backoff)) return Status(StatusCode::kCancelled, "stopped before joining the coordinator");
    backoff = std::min(backoff * 2, std::max(options_.max_backoff, std::chrono::milliseconds(1)));
  }
  NoteReachable(true, Status::Ok());
  {
    MutexLock lock(mu_);
    LOG(INFO) << "server " << options_.self.server_id << " (epoch " << options_.self.epoch << ", "
              << options_.self.data_address << ") joined the coordinator at " << leader_
              << ": map version " << map_version_ << ", " << shards_.size() << " shards";
  }
  // Under stop_mu_ so that a concurrent Stop either sees the thread and
  // joins it, or has already run and leaves none behind.
  MutexLock guard(stop_mu_);
  if (stopped_) {
    SendLeave();  // Stop ran before this Join completed, so it sent none
    return Status(StatusCode::kCancelled, "stopped while joining the coordinator");
  }
  heartbeat_thread_ = std::thread([this] { HeartbeatLoop(); });
  watch_thread_ = std::thread([this] { WatchLoop(); });
  fetch_thread_ = std::thread([this] { FetchLoop(); });
  return Status::Ok();
}

void Membership::HeartbeatLoop() {
  bool refused_logged = false;
  auto last_sent = std::chrono::steady_clock::now();
  for (;;) {
    std::chrono::milliseconds interval;
    {
      MutexLock lock(mu_);
      interval = heartbeat_interval_;
      // Each heartbeat renews the lease from its send time: sent every
      // lease / 3 at least, a lease outlives two slow answers in a row.
      if (lease_ms_ > 0) interval = std::min(interval, std::chrono::milliseconds(std::max<uint32_t>(lease_ms_ / 3, 10)));
    }
    // Counted from the last send, not from its answer: a slow answer does
    // not stretch the period.
    const auto since = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() -
                                                                              last_sent);
    if (!SleepFor(std::max(interval - since, std::chrono::milliseconds(5)))) return;
    last_sent = std::chrono::steady_clock::now();
    Status s = HeartbeatOnce();
    if (s.code() == StatusCode::kNotFound || s.code() == StatusCode::kFailedPrecondition) {
      LOG(WARNING) << "coordinator refused a heartbeat (" << s << "); joining again";
      s = JoinOnce();
      if (s.ok()) {
        LOG(INFO) << "server " << options_.self.server_id << " (epoch " << options_.self.epoch << ") joined again";
      }
    }
    if (s.ok()) {
      refused_logged = false;
      NoteReachable(true, s);
    } else if (IsRetryable(s.code())) {
      NoteReachable(false, s);
    } else {
      // An answer, not an outage (e.g. a newer epoch of this server id took
      // over, or the token changed): keep trying, log once.
      {
        MutexLock lock(mu_);
        connected_ = false;
      }
      if (!refused_logged) LOG(ERROR) << "coordinator refuses this server: " << s << "; retrying";
      refused_logged = true;
    }
  }
}

void Membership::WatchLoop() {
  const auto min_backoff = std::max(options_.initial_backoff, std::chrono::milliseconds(1));
  const auto max_backoff = std::max(options_.max_backoff, min_backoff);
  std::chrono::milliseconds backoff = min_backoff;
  control::CoordinatorSet& coordinators = *rpc_->coordinators;
  for (;;) {
    {
      MutexLock lock(mu_);
      if (stopping_) return;
    }
    // Any coordinator serves the map. Waiting for a connection drives it,
    // so a coordinator that comes back is used at once; the wait is
    // bounded so that Stop is not held up.
    const auto connect_until = std::chrono::steady_clock::now() + std::min(max_backoff, kWatchConnectWait);
    StatusOr<control::CoordinatorSet::Target> target = coordinators.ConnectAny(connect_until);
    if (!target.ok()) {
      VLOG(2) << "map watch: " << target.status();
      // ConnectAny waits until connect_until; this only keeps a failure
      // that came sooner from spinning.
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(connect_until -
                                                                             std::chrono::steady_clock::now());
      if (!SleepFor(std::max(left, std::chrono::milliseconds(0)))) return;
      continue;
    }
    grpc::ClientContext ctx;
    coordinators.AttachToken(&ctx);
    v1::WatchClusterMapRequest req;
    {
      MutexLock lock(mu_);
      if (stopping_) return;
      watch_context_ = &ctx;
      req.set_known_version(map_ != nullptr ? map_->version() : 0);
    }
    const auto opened = std::chrono::steady_clock::now();
    std::unique_ptr<grpc::ClientReader<v1::ClusterMap>> reader = target->stub->WatchClusterMap(&ctx, req);
    v1::ClusterMap map;
    bool got_any = false;
    while (reader->Read(&map)) {
      got_any = true;
      coordinators.NoteAnswered(target->index);
      const StatusOr<bool> installed = InstallMap(map, "WatchClusterMap from " + target->address);
      if (!installed.ok()) LOG(WARNING) << "ignoring a map: " << installed.status();
    }
    const Status end = control::FromGrpc(reader->Finish());
    {
      MutexLock lock(mu_);
      watch_context_ = nullptr;
      if (stopping_) return;
    }
    // The next stream starts with another coordinator, if there is one.
    coordinators.NoteBroken(target->index);
    // A stream that lived (it brought maps, or stayed open) broke because
    // its coordinator went away: reopen soon, elsewhere or once it is back.
    if (got_any || std::chrono::steady_clock::now() - opened >= max_backoff) backoff = min_backoff;
    VLOG(1) << "map watch on coordinator " << target->address << " ended (" << end << "); reopening in "
            << backoff.count() << " ms";
    if (!SleepFor(backoff)) return;
    backoff = std::min(backoff * 2, max_backoff);
  }
}

void Membership::Stop() {
  MutexLock guard(stop_mu_);
  if (stopped_) return;
  stopped_ = true;
  bool joined = false;
  {
    MutexLock lock(mu_);
    stopping_ = true;
    joined = joined_;
    if (watch_context_ != nullptr) watch_context_->TryCancel();
  }
  stop_cv_.NotifyAll();
  map_cv_.NotifyAll();
  fetch_cv_.NotifyAll();
  if (heartbeat_thread_.joinable()) heartbeat_thread_.join();
  if (watch_thread_.joinable()) watch_thread_.join();
  if (fetch_thread_.joinable()) fetch_thread_.join();
  if (joined) SendLeave();
}

void Membership::SendLeave() {
  v1::LeaveRequest req;
  req.set_server_id(options_.self.server_id);
  req.set_epoch(options_.self.epoch);
  v1::LeaveResponse resp;
  const Status s = rpc_->coordinators->CallLeader(
      "Leave", DeadlineIn(kLeaveTimeout),
      [&](v1::Coordinator::Stub& stub, grpc::ClientContext* ctx) { return stub.Leave(ctx, req, &resp); });
  if (s.ok()) {
    LOG(INFO) << "server " << options_.self.server_id << " left the cluster";
  } else {
    LOG(WARNING) << "Leave failed (" << s << "); the coordinator will mark this server DOWN on its own";
  }
  MutexLock lock(mu_);
  connected_ = false;
}

uint64_t Membership::map_version() const {
  MutexLock lock(mu_);
  return map_version_;
}

std::vector<uint32_t> Membership::shards() const {
  MutexLock lock(mu_);
  return shards_;
}

bool Membership::connected() const {
  MutexLock lock(mu_);
  return connected_;
}

std::shared_ptr<const v1::ClusterMap> Membership::map() const {
  MutexLock lock(mu_);
  return map_;
}

Status Membership::WaitForVersion(uint64_t version, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  MutexLock lock(mu_);
  map_cv_.WaitUntil(mu_, deadline, [&] {
    mu_.AssertHeld();
    return stopping_ || (map_ != nullptr && map_->version() >= version);
  });
  if (map_ != nullptr && map_->version() >= version) return Status::Ok();
  if (stopping_) return Status(StatusCode::kCancelled, "stopping: no newer map will come");
  return DeadlineExceeded("map version " + std::to_string(version) + " not learned within " +
                          std::to_string(timeout.count()) + " ms (this server has version " +
                          std::to_string(map_ != nullptr ? map_->version() : 0) + ")");
}

Status Membership::RefreshNow(std::chrono::milliseconds timeout) {
  {
    MutexLock lock(mu_);
    if (stopping_) return Status(StatusCode::kCancelled, "stopping: the map is no longer refreshed");
  }
  return FetchMap(timeout).WithContext("refreshing the map");
}

template <typename Response, typename Call>
StatusOr<Response> Membership::CallWithRetry(const std::string& what, std::chrono::milliseconds timeout,
                                             Call call) {
  RKV_RETURN_IF_ERROR(rpc_->invalid);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::chrono::milliseconds backoff = std::max(options_.initial_backoff, std::chrono::milliseconds(1));
  for (;;) {
    {
      MutexLock lock(mu_);
      if (stopping_) return Status(StatusCode::kCancelled, "stopping").WithContext(what);
    }
    Response resp;
    const Status s = rpc_->coordinators->CallLeader(
        what, deadline, [&](v1::Coordinator::Stub& stub, grpc::ClientContext* ctx) { return call(stub, ctx, &resp); });
    if (s.ok()) return resp;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    // The error names the coordinators and the call already.
    if (s.code() != StatusCode::kUnavailable || left <= std::chrono::milliseconds(0)) return s;
    if (!SleepFor(std::min(backoff, left))) return Status(StatusCode::kCancelled, "stopping").WithContext(what);
    backoff = std::min(backoff * 2, std::max(options_.max_backoff, std::chrono::milliseconds(1)));
    if (std::chrono::steady_clock::now() >= deadline) {
      return DeadlineExceeded("no coordinator answered as the leader for " + std::to_string(timeout.count()) +
                              " ms (last: " + s.ToString() + ")")
          .WithContext(what);
    }
  }
}

StatusOr<uint64_t> Membership::ReportReplicaFailure(std::string_view backup_id, const std::vector<uint32_t>& shards,
                                                    std::string_view reason, std::chrono::milliseconds timeout) {
  RKV_RETURN_IF_ERROR(control::ValidateServerId(backup_id).WithContext("backup id"));
  if (shards.empty()) return InvalidArgument("no shards to take backup " + std::string(backup_id) + " out of");
  v1::ReportReplicaFailureRequest req;
  req.set_server_id(options_.self.server_id);
  req.set_epoch(options_.self.epoch);
  req.set_backup_id(std::string(backup_id));
  for (uint32_t s : shards) req.add_shards(s);
  req.set_reason(control::Printable(reason, kMaxReasonBytes));
  StatusOr<v1::ReportReplicaFailureResponse> resp = CallWithRetry<v1::ReportReplicaFailureResponse>(
      "ReportReplicaFailure of backup " + std::string(backup_id), timeout,
      [&](v1::Coordinator::Stub& stub, grpc::ClientContext* ctx, v1::ReportReplicaFailureResponse* out) {
        return stub.ReportReplicaFailure(ctx, req, out);
      });
  if (!resp.ok()) return resp.status();
  LOG(WARNING) << "server " << options_.self.server_id << " reported backup " << backup_id << " of "
               << shards.size() << " shard(s) as failed (" << req.reason() << "); map version "
               << resp->map_version() << " no longer has it";
  return resp->map_version();
}

StatusOr<v1::ReportCaughtUpResponse> Membership::ReportCaughtUp(uint32_t shard, std::string_view primary_id,
                                                                uint64_t sync_map_version,
                                                                std::chrono::milliseconds timeout) {
  v1::CaughtUpShard caught_up;
  caught_up.set_shard(shard);
  caught_up.set_primary_id(std::string(primary_id));
  caught_up.set_sync_map_version(sync_map_version);
  return ReportCaughtUp(std::vector<v1::CaughtUpShard>{caught_up}, timeout);
}

StatusOr<v1::ReportCaughtUpResponse> Membership::ReportCaughtUp(const std::vector<v1::CaughtUpShard>& shards,
                                                                std::chrono::milliseconds timeout) {
  if (shards.empty()) return InvalidArgument("ReportCaughtUp of no shard");
  v1::ReportCaughtUpRequest req;
  req.set_server_id(options_.self.server_id);
  req.set_epoch(options_.self.epoch);
  for (const v1::CaughtUpShard& s : shards) {
    RKV_RETURN_IF_ERROR(control::ValidateServerId(s.primary_id()).WithContext("primary id"));
    *req.add_shards() = s;
  }
  const std::string what =
      shards.size() == 1 ? "ReportCaughtUp of shard " + std::to_string(shards[0].shard()) + " (from " +
                               shards[0].primary_id() + ")"
                         : "ReportCaughtUp of " + std::to_string(shards.size()) + " shards (the first " +
                               std::to_string(shards[0].shard()) + ")";
  return CallWithRetry<v1::ReportCaughtUpResponse>(
      what, timeout,
      [&](v1::Coordinator::Stub& stub, grpc::ClientContext* ctx, v1::ReportCaughtUpResponse* out) {
        return stub.ReportCaughtUp(ctx, req, out);
      });
}

}  // namespace rkv::server
