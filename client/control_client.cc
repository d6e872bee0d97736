#include "client/control_client.h"

#include <glog/logging.h>

#include <algorithm>

#include "common/clock.h"
#include "proto/auth.h"
#include "proto/coordinator_set.h"
#include "proto/grpc_status.h"
#include "proto/validation.h"

namespace rkv::client {
ControlClient::ControlClient(std::unique_ptr<control::CoordinatorSet> coordinators, const std::string& token,
                             MapHolder* holder)
    : coordinators_(std::move(coordinators)), digest_hex_(control::TokenDigestHex(token)), holder_(holder) {}

ControlClient::~ControlClient() {
  {
    MutexLock lock(watch_mu_);
    stopping_ = true;
    if (watch_context_ != nullptr) watch_context_->TryCancel();
  }
  watch_cv_.NotifyAll();
  if (watch_thread_.joinable()) watch_thread_.join();
}

StatusOr<std::shared_ptr<const RoutingTable>> ControlClient::Fetch(Deadline deadline) {
  v1::ClusterMap map;
  std::string from;
  RKV_RETURN_IF_ERROR(coordinators_->CallAny(
      "GetClusterMap", deadline,
      [&](v1::Coordinator::Stub& stub, grpc::ClientContext* context) {
        return stub.GetClusterMap(context, v1::GetClusterMapRequest(), &map);
      },
      &from));
  auto table = RoutingTable::Build(map);
  if (!table.ok()) return table.status().WithContext("coordinator " + from);
  if (holder_->InstallIfNewer(*table)) {
    VLOG(1) << "rkv: installed cluster map version " << (*table)->version() << " (fetched from " << from << ")";
  }
  return table;
}

bool ControlClient::MaybeRefetch(Deadline deadline) {
  if (!refetch_mu_.TryLock()) return false;  // another call is refetching
  const bool installed = RefetchLocked(deadline);
  refetch_mu_.Unlock();
  return installed;
}

bool ControlClient::RefetchLocked(Deadline deadline) {
  const auto now = Clock::now();
  if (last_refetch_ != Clock::time_point{} && now - last_refetch_ < kMinRefetchInterval) return false;
  last_refetch_ = now;
  const auto before = holder_->Current();
  // Bounded so that a slow or dead coordinator leaves the call at least
  // half of its remaining time for the data plane.
  const Deadline fetch_deadline =
      std::min(now + (deadline - now) / 2, now + std::chrono::milliseconds(500));
  if (fetch_deadline <= now) return false;
  auto t = Fetch(fetch_deadline);
  if (!t.ok()) {
    VLOG(1) << "rkv: map refetch failed (the cached map stays in use): " << t.status();
    return false;
  }
  const auto after = holder_->Current();
  return after != before;
}

void ControlClient::StartWatch() {
  MutexLock lock(watch_mu_);
  if (watch_thread_.joinable() || stopping_) return;
  watch_thread_ = std::thread([this] { WatchLoop(); });
}

void ControlClient::WatchLoop() {
  std::chrono::milliseconds backoff = kWatchBackoffMin;
  // Waits until `until`, or until the destructor sets stopping_; false
  // when stopping.
  const auto wait = [this](Clock::time_point until) {
    MutexLock lock(watch_mu_);
    while (!stopping_ && watch_cv_.WaitUntil(watch_mu_, until)) {
    }
    return !stopping_;
  };
  while (true) {
    {
      MutexLock lock(watch_mu_);
      if (stopping_) return;
    }
    // A coordinator that is connected, any of them (every one serves the
    // map). Waiting for the connection drives it, so a coordinator that
    // comes back is used at once.
    const auto connect_until = Clock::now() + kWatchConnectWait;
    StatusOr<control::CoordinatorSet::Target> target = coordinators_->ConnectAny(connect_until);
    if (!target.ok()) {
      VLOG(2) << "rkv: map watch: " << target.status();
      if (!wait(connect_until)) return;
      continue;
    }
    grpc::ClientContext context;
    control::AttachTokenDigest(&context, digest_hex_);
    {
      MutexLock lock(watch_mu_);
      if (stopping_) return;
      watch_context_ = &context;
    }
    v1::WatchClusterMapRequest request;
    const auto current = holder_->Current();
    request.set_known_version(current ? current->version() : 0);
    const auto opened = Clock::now();
    std::unique_ptr<grpc::ClientReader<v1::ClusterMap>> reader = target->stub->WatchClusterMap(&context, request);
    v1::ClusterMap map;
    bool got_any = false;
    while (reader->Read(&map)) {
      got_any = true;
      coordinators_->NoteAnswered(target->index);
      auto table = RoutingTable::Build(map);
      if (!table.ok()) {
        LOG(WARNING) << "rkv: coordinator " << target->address << " sent an unusable map: " << table.status();
        continue;
      }
      if (holder_->InstallIfNewer(*table)) {
        VLOG(1) << "rkv: installed cluster map version " << (*table)->version() << " (watch of "
                << target->address << ")";
      }
    }
    const grpc::Status end = reader->Finish();
    {
      MutexLock lock(watch_mu_);
      watch_context_ = nullptr;
      if (stopping_) return;
    }
    // The next stream starts elsewhere when there is another coordinator.
    coordinators_->NoteBroken(target->index);
    if (got_any || Clock::now() - opened >= kWatchBackoffMax) backoff = kWatchBackoffMin;
    VLOG(1) << "rkv: watch of coordinator " << target->address << " ended: " << control::FromGrpc(end)
            << "; reconnecting in " << backoff.count() << " ms";
    if (!wait(Clock::now() + backoff)) return;
    backoff = std::min(backoff * 2, kWatchBackoffMax);
  }
}

StatusOr<v1::RenewLeaseResponse> ControlClient::RenewLease(uint64_t map_version, Deadline deadline) {
  v1::RenewLeaseRequest request;
  request.set_map_version(map_version);
  MutexLock lock(lease_mu_);
  if (lease_stream_ != nullptr) {
    const Clock::time_point now = Clock::now();
    const Deadline wait = std::min(deadline, now + std::max<Clock::duration>((deadline - now) / 2, kMinStreamWait));
    StatusOr<v1::RenewLeaseResponse> answer = lease_stream_->Renew(request, wait);
    if (answer.ok()) return answer;
    // Whatever ended the stream (a leader change, a restart, a silent
    // coordinator), RenewLease below finds the leader.
    VLOG(1) << "rkv: lease stream ended: " << answer.status();
    if (answer.status().code() == StatusCode::kUnimplemented) streams_unsupported_ = true;
    lease_stream_.reset();
  }
  v1::RenewLeaseResponse response;
  std::string leader;
  RKV_RETURN_IF_ERROR(coordinators_->CallLeader(
      "RenewLease", deadline,
      [&](v1::Coordinator::Stub& stub, grpc::ClientContext* context) {
        return stub.RenewLease(context, request, &response);
      },
      &leader));
  if (!streams_unsupported_ && !leader.empty()) OpenLeaseStream(leader);
  return response;
}

void ControlClient::OpenLeaseStream(const std::string& address) {
  StatusOr<control::CoordinatorSet::Target> target = coordinators_->TargetOf(address);
  if (!target.ok()) {
    VLOG(1) << "rkv: no lease stream: " << target.status();
    return;
  }
  lease_stream_ = std::make_unique<LeaseStream>(*coordinators_, *target);
}

StatusOr<v1::StatsResponse> ControlClient::Stats(const std::string& admin_address, Deadline deadline) {
  auto stub = v1::Admin::NewStub(control::MakeControlChannel(admin_address, coordinators_->credentials()));
  grpc::ClientContext context;
  control::AttachTokenDigest(&context, digest_hex_);
  context.set_deadline(SystemDeadline(deadline, std::chrono::milliseconds(1)));
  v1::StatsResponse response;
  const grpc::Status rpc = stub->Stats(&context, v1::StatsRequest(), &response);
  if (!rpc.ok()) return control::FromGrpc(rpc).WithContext("admin " + admin_address + ": Stats");
  return response;
}

namespace {

// A context carrying the token digest and `deadline`.
void Prepare(grpc::ClientContext* context, const std::string& digest_hex, Deadline deadline) {
  control::AttachTokenDigest(context, digest_hex);
  context->set_deadline(SystemDeadline(deadline, std::chrono::milliseconds(1)));
}

}  // namespace

StatusOr<v1::ShardChecksumsResponse> ControlClient::ShardChecksums(const std::string& admin_address,
                                                                   const std::vector<uint32_t>& shards,
                                                                   Deadline deadline) {
  auto stub = v1::Admin::NewStub(control::MakeControlChannel(admin_address, coordinators_->credentials()));
  grpc::ClientContext context;
  Prepare(&context, digest_hex_, deadline);
  v1::ShardChecksumsRequest request;
  for (const uint32_t shard : shards) request.add_shards(shard);
  v1::ShardChecksumsResponse response;
  const grpc::Status rpc = stub->ShardChecksums(&context, request, &response);
  if (!rpc.ok()) return control::FromGrpc(rpc).WithContext("admin " + admin_address + ": ShardChecksums");
  return response;
}

StatusOr<v1::ShardChunk> ControlClient::ListShard(const std::string& admin_address, uint32_t shard,
                                                  Deadline deadline) {
  auto stub = v1::Admin::NewStub(control::MakeControlChannel(admin_address, coordinators_->credentials()));
  grpc::ClientContext context;
  Prepare(&context, digest_hex_, deadline);
  v1::ListShardRequest request;
  request.set_shard(shard);
  std::unique_ptr<grpc::ClientReader<v1::ShardChunk>> reader = stub->ListShard(&context, request);
  v1::ShardChunk all;
  v1::ShardChunk chunk;
  while (!all.done() && reader->Read(&chunk)) {
    for (v1::ShardRecord& r : *chunk.mutable_records()) *all.add_records() = std::move(r);
    if (chunk.done()) {
      all.set_done(true);
      all.set_snapshot_version(chunk.snapshot_version());
    }
  }
  if (all.done()) context.TryCancel();  // nothing may follow the done chunk
  const grpc::Status end = reader->Finish();
  if (!all.done()) {
    const Status s = end.ok() ? Unavailable("the stream ended before its last chunk") : control::FromGrpc(end);
    return s.WithContext("admin " + admin_address + ": ListShard");
  }
  return all;
}

StatusOr<v1::DrainResponse> ControlClient::Drain(const std::string& server_id, Deadline deadline) {
  v1::DrainRequest request;
  request.set_server_id(server_id);
  v1::DrainResponse response;
  RKV_RETURN_IF_ERROR(coordinators_->CallLeader(
      "Drain " + control::Printable(server_id), deadline,
      [&](v1::Coordinator::Stub& stub, grpc::ClientContext* context) {
        return stub.Drain(context, request, &response);
      }));
  return response;
}

StatusOr<v1::ReportUnresponsiveResponse> ControlClient::ReportUnresponsive(
    const v1::ReportUnresponsiveRequest& request, Deadline deadline) {
  v1::ReportUnresponsiveResponse response;
  RKV_RETURN_IF_ERROR(coordinators_->CallLeader(
      "ReportUnresponsive " + control::Printable(request.server_id()), deadline,
      [&](v1::Coordinator::Stub& stub, grpc::ClientContext* context) {
        return stub.ReportUnresponsive(context, request, &response);
      }));
  return response;
}

StatusOr<v1::ForgetResponse> ControlClient::Forget(const std::string& server_id, Deadline deadline) {
  v1::ForgetRequest request;
  request.set_server_id(server_id);
  v1::ForgetResponse response;
  RKV_RETURN_IF_ERROR(coordinators_->CallLeader(
      "Forget " + control::Printable(server_id), deadline,
      [&](v1::Coordinator::Stub& stub, grpc::ClientContext* context) {
        return stub.Forget(context, request, &response);
      }));
  return response;
}

std::vector<StatusOr<v1::CoordinatorStatus>> ControlClient::CoordinatorStatuses(Deadline deadline) {
  const size_t n = coordinators_->addresses().size();
  std::vector<v1::CoordinatorStatus> answers(n);
  const std::vector<Status> results = coordinators_->CallEach(
      "GetCoordinatorStatus", deadline, [&](size_t i, v1::Coordinator::Stub& stub, grpc::ClientContext* context) {
        return stub.GetCoordinatorStatus(context, v1::CoordinatorStatusRequest(), &answers[i]);
      });
  std::vector<StatusOr<v1::CoordinatorStatus>> out;
  out.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    if (results[i].ok()) {
      out.emplace_back(std::move(answers[i]));
    } else {
      out.emplace_back(results[i]);
    }
  }
  return out;
}

const std::vector<std::string>& ControlClient::coordinator_addresses() const { return coordinators_->addresses(); }

}  // namespace rkv::client
