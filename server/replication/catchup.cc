#include "server/replication/catchup.h"

#include <algorithm>
#include <unordered_set>
#include <utility>
#include <vector>

#include <glog/logging.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>

#include "common/hash.h"
#include "proto/auth.h"
#include "proto/grpc_status.h"
#include "proto/rkv.grpc.pb.h"
#include "proto/validation.h"

namespace rkv::server {
namespace {

constexpr std::chrono::milliseconds kMapPoll{200};

std::chrono::system_clock::time_point DeadlineIn(std::chrono::milliseconds d) {
  return std::chrono::system_clock::now() + std::max(d, std::chrono::milliseconds(1));
}

Applier::ShardRecord FromProto(const v1::ShardRecord& r) {
  return Applier::ShardRecord{r.key(), r.version(), r.has_value(), r.value()};
}

// The shards whose syncing_ids list this server, when `map` lists it at
// `epoch`; ascending.
std::vector<uint32_t> SyncingShards(const v1::ClusterMap& map, const std::string& self, uint64_t epoch) {
  std::vector<uint32_t> shards;
  const bool listed = std::any_of(map.servers().begin(), map.servers().end(), [&](const v1::ServerInfo& s) {
    return s.server_id() == self && s.epoch() == epoch;
  });
  if (!listed) return shards;
  for (int s = 0; s < map.shard_replicas_size(); ++s) {
    const auto& ids = map.shard_replicas(s).syncing_ids();
    if (std::find(ids.begin(), ids.end(), self) != ids.end()) shards.push_back(static_cast<uint32_t>(s));
  }
  return shards;
}

const v1::ServerInfo* FindServer(const v1::ClusterMap& map, std::string_view id) {
  for (const v1::ServerInfo& s : map.servers()) {
    if (s.server_id() == id) return &s;
  }
  return nullptr;
}

}  // namespace

StatusOr<std::unique_ptr<CatchUp>> CatchUp::Create(MapSource* source, Applier* applier, CaughtUpReporter report,
                                                   CatchUpOptions options) {
  if (source == nullptr || applier == nullptr || !report) {
    return InvalidArgument("catch-up needs a map source, an applier and a reporter");
  }
  if (options.token.empty()) return InvalidArgument("the token is empty");
  return std::unique_ptr<CatchUp>(new CatchUp(source, applier, std::move(report), std::move(options)));
}

CatchUp::CatchUp(MapSource* source, Applier* applier, CaughtUpReporter report, CatchUpOptions options)
    : source_(source),
      applier_(applier),
      report_(std::move(report)),
      options_(std::move(options)),
      digest_hex_(control::TokenDigestHex(options_.token)) {}

CatchUp::~CatchUp() { Stop(); }

void CatchUp::Start() { thread_ = std::thread([this] { Loop(); }); }

void CatchUp::Stop() {
  {
    MutexLock lock(mu_);
    stopping_ = true;
    if (in_flight_ != nullptr) in_flight_->TryCancel();
  }
  if (thread_.joinable()) thread_.join();
}

bool CatchUp::stopping() const {
  MutexLock lock(mu_);
  return stopping_;
}

bool CatchUp::Track(grpc::ClientContext* ctx) {
  MutexLock lock(mu_);
  if (stopping_) return false;
  in_flight_ = ctx;
  return true;
}

void CatchUp::Untrack() {
  MutexLock lock(mu_);
  in_flight_ = nullptr;
}

CatchUp::Stats CatchUp::stats() const {
  Stats s;
  s.records_listed = records_listed_.load(std::memory_order_relaxed);
  s.values_fetched = values_fetched_.load(std::memory_order_relaxed);
  s.syncing_shards = syncing_shards_.load(std::memory_order_relaxed);
  s.syncs_completed = syncs_completed_.load(std::memory_order_relaxed);
  s.sync_failures = sync_failures_.load(std::memory_order_relaxed);
  return s;
}

void CatchUp::Loop() {
  struct Retry {
    std::chrono::steady_clock::time_point at{};
    std::chrono::milliseconds backoff{0};
  };
  struct Reported {
    std::string primary_id;
    uint64_t map_version = 0;  // the coordinator's answer: a map that moved this server
  };
  std::map<uint32_t, Retry> retries;
  std::map<uint32_t, Reported> reported;
  // Synced, not reported yet (a batch), and when the first of them synced.
  std::vector<v1::CaughtUpShard> batch;
  std::chrono::steady_clock::time_point batch_since{};

  const auto fail = [&](uint32_t shard, const std::string& primary_id, const Status& st,
                        std::chrono::steady_clock::time_point* wake) {
    sync_failures_.fetch_add(1, std::memory_order_relaxed);
    Retry& retry = retries[shard];
    retry.backoff = retry.backoff.count() == 0 ? std::max(options_.initial_backoff, std::chrono::milliseconds(1))
                                               : std::min(retry.backoff * 2, options_.max_backoff);
    retry.at = std::chrono::steady_clock::now() + retry.backoff;
    *wake = std::min(*wake, retry.at);
    LOG(WARNING) << "catching up on shard " << shard << " from " << primary_id << " failed (retrying in "
                 << retry.backoff.count() << " ms): " << st;
  };
  // Reports the batch in one call. Caught up means durable per the store's
  // durability (with group commit the fetched records still wait for their
  // fsync): one SyncWrites for the whole batch first.
  const auto flush = [&](std::chrono::steady_clock::time_point* wake) {
    if (batch.empty()) return;
    Status st = applier_->SyncWrites();
    StatusOr<v1::ReportCaughtUpResponse> answer = Unavailable("not reported");
    if (st.ok()) {
      answer = report_(batch);
      if (!answer.ok()) {
        st = answer.status().WithContext("reporting " + std::to_string(batch.size()) + " shard(s) caught up");
      }
    }
    for (const v1::CaughtUpShard& c : batch) {
      if (!st.ok()) {
        fail(c.shard(), c.primary_id(), st, wake);
        continue;
      }
      const auto& refused = answer->refused_shards();
      if (std::find(refused.begin(), refused.end(), c.shard()) != refused.end()) {
        // The primary changed, this server is no longer syncing, or it
        // was taken out and added back since the fetch: tried again (after
        // the backoff) only while a map lists it as syncing.
        fail(c.shard(), c.primary_id(),
             FailedPrecondition("the coordinator did not move shard " + std::to_string(c.shard()) +
                                " (map version " + std::to_string(answer->map_version()) + ")"),
             wake);
        continue;
      }
      syncs_completed_.fetch_add(1, std::memory_order_relaxed);
      reported[c.shard()] = Reported{c.primary_id(), answer->map_version()};
      retries.erase(c.shard());
    }
    if (st.ok()) {
      LOG(INFO) << "caught up on " << batch.size() << " shard(s) (the first " << batch.front().shard() << " from "
                << batch.front().primary_id() << "); map version " << answer->map_version()
                << " makes this server a replica of those not refused (" << answer->refused_shards_size()
                << " refused)";
    }
    batch.clear();
  };

  while (!stopping()) {
    const std::shared_ptr<const v1::ClusterMap> map = source_->map();
    std::vector<uint32_t> mine;
    if (map != nullptr) mine = SyncingShards(*map, source_->server_id(), source_->epoch());
    syncing_shards_.store(static_cast<uint32_t>(mine.size()), std::memory_order_relaxed);
    const auto is_mine = [&](uint32_t s) { return std::binary_search(mine.begin(), mine.end(), s); };
    // A report accepted is done once a map no longer lists this server as
    // syncing; one still listed by a map at least as new as the answer
    // (taken out and added again meanwhile) syncs again.
    for (auto it = reported.begin(); it != reported.end();) {
      const bool again = is_mine(it->first) && map->version() >= it->second.map_version;
      it = (!is_mine(it->first) || again) ? reported.erase(it) : std::next(it);
    }
    for (auto it = retries.begin(); it != retries.end();) it = is_mine(it->first) ? std::next(it) : retries.erase(it);

    auto wake = std::chrono::steady_clock::now() + kMapPoll;
    for (uint32_t shard : mine) {
      if (stopping()) break;
      if (reported.count(shard) != 0) continue;
      const bool batched = std::any_of(batch.begin(), batch.end(),
                                       [shard](const v1::CaughtUpShard& c) { return c.shard() == shard; });
      if (batched) continue;
      Retry& retry = retries[shard];
      const auto now = std::chrono::steady_clock::now();
      if (retry.at > now) {
        wake = std::min(wake, retry.at);
        continue;
      }
      const std::string& primary_id = map->shard_replicas(static_cast<int>(shard)).server_ids(0);
      const v1::ServerInfo* primary = FindServer(*map, primary_id);
      const Status st = primary == nullptr ? Internal("the map does not list the primary " + primary_id)
                                           : Sync(*map, shard, *primary);
      if (stopping()) break;
      if (!st.ok()) {
        fail(shard, primary_id, st, &wake);
        continue;
      }
      if (batch.empty()) batch_since = std::chrono::steady_clock::now();
      v1::CaughtUpShard& c = batch.emplace_back();
      c.set_shard(shard);
      c.set_primary_id(primary_id);
      c.set_sync_map_version(map->version());
      if (batch.size() >= kReportBatch || std::chrono::steady_clock::now() - batch_since >= kReportDelay) {
        flush(&wake);
      }
    }
    // Nothing else is due in this pass: what is synced goes now.
    if (!stopping()) flush(&wake);
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(wake - std::chrono::steady_clock::now());
    const auto wait = std::clamp(left, std::chrono::milliseconds(1), kMapPoll);
    const uint64_t held = map != nullptr ? map->version() : 0;
    if (source_->WaitForVersion(held + 1, wait).code() == StatusCode::kCancelled) {
      std::this_thread::sleep_for(wait);  // the source is stopping: only Stop ends this loop
    }
  }
  syncing_shards_.store(0, std::memory_order_relaxed);
}

Status CatchUp::Sync(const v1::ClusterMap& map, uint32_t shard, const v1::ServerInfo& primary) {
  const uint32_t count = map.shard_count();
  const std::string from = "shard " + std::to_string(shard) + " from " + primary.server_id() + " at " +
                           primary.admin_address();
  if (primary.admin_address().empty()) return FailedPrecondition("the primary announces no Admin address");
  applier_->BeginSync(shard, count);
  struct EndSync {
    Applier* applier;
    uint32_t shard;
    ~EndSync() { applier->EndSync(shard); }
  } end{applier_, shard};
  StatusOr<uint64_t> since = applier_->ShardHighWater(shard, count);
  if (!since.ok()) return since.status().WithContext("reading the versions held of shard " + std::to_string(shard));

  const std::shared_ptr<grpc::Channel> channel =
      grpc::CreateChannel(primary.admin_address(), grpc::InsecureChannelCredentials());
  const std::unique_ptr<v1::Replica::Stub> stub = v1::Replica::NewStub(channel);
  v1::FetchShardRequest req;
  req.set_server_id(source_->server_id());
  req.set_epoch(source_->epoch());
  req.set_shard(shard);
  req.set_map_version(map.version());
  req.set_since_version(*since);

  std::unordered_set<std::string> listed;
  std::vector<std::string> holes;
  uint64_t highest_listed = 0;
  uint64_t snapshot_version = 0;
  bool done = false;
  Status bad;
  // A record is checked before anything of it is installed; a bad one
  // ends the attempt.
  const auto take = [&](const v1::ShardRecord& r) -> Status {
    records_listed_.fetch_add(1, std::memory_order_relaxed);
    if (r.key().empty()) return InvalidArgument("a record with an empty key");
    const std::string where = "record of key '" + control::Printable(r.key()) + "'";
    if (r.version() == 0) return InvalidArgument(where + " carries version 0");
    if (ShardOf(r.key(), count) != shard) return InvalidArgument(where + " is not of shard " + std::to_string(shard));
    if (!r.has_value() && !r.value().empty()) return InvalidArgument(where + " carries a value but has_value unset");
    highest_listed = std::max(highest_listed, r.version());
    listed.insert(r.key());
    if (r.has_value()) {
      StatusOr<Applier::FetchedOutcome> out = applier_->InstallFetched(FromProto(r));
      if (!out.ok()) return out.status();
      if (*out == Applier::FetchedOutcome::kInstalled) values_fetched_.fetch_add(1, std::memory_order_relaxed);
      return Status::Ok();
    }
    if (r.version() > *since) {
      return InvalidArgument(where + " at version " + std::to_string(r.version()) + " comes without its value (" +
                             "values above " + std::to_string(*since) + " were asked for)");
    }
    if (applier_->HeldVersion(r.key()) < r.version()) holes.push_back(r.key());
    return Status::Ok();
  };
  {
    grpc::ClientContext ctx;
    control::AttachTokenDigest(&ctx, digest_hex_);
    ctx.set_deadline(DeadlineIn(options_.fetch_timeout));
    if (!Track(&ctx)) return Status(StatusCode::kCancelled, "stopping");
    std::unique_ptr<grpc::ClientReader<v1::ShardChunk>> reader = stub->FetchShard(&ctx, req);
    v1::ShardChunk chunk;
    while (bad.ok() && reader->Read(&chunk)) {
      if (done) {
        bad = InvalidArgument("a chunk after the done chunk");
        break;
      }
      for (const v1::ShardRecord& r : chunk.records()) {
        if (bad = take(r); !bad.ok()) break;
      }
      if (chunk.done()) {
        done = true;
        snapshot_version = chunk.snapshot_version();
      }
    }
    if (!bad.ok()) ctx.TryCancel();
    const grpc::Status finished = reader->Finish();
    Untrack();
    if (!bad.ok()) return bad.WithContext("fetching " + from);
    if (!finished.ok()) return control::FromGrpc(finished).WithContext("fetching " + from);
  }
  if (!done) return DataLoss("the stream of " + from + " ended without its done chunk");
  if (highest_listed > snapshot_version) {
    return InvalidArgument("fetching " + from + ": a record at version " + std::to_string(highest_listed) +
                           " is above the snapshot version " + std::to_string(snapshot_version));
  }

  // Holes: writes missed at versions <= since.
  for (size_t first = 0; first < holes.size(); first += kFetchKeysBatch) {
    const size_t last = std::min(holes.size(), first + kFetchKeysBatch);
    v1::FetchKeysRequest keys;
    keys.set_server_id(source_->server_id());
    keys.set_epoch(source_->epoch());
    keys.set_shard(shard);
    std::unordered_set<std::string> asked;
    for (size_t i = first; i < last; ++i) {
      keys.add_keys(holes[i]);
      asked.insert(holes[i]);
    }
    grpc::ClientContext ctx;
    control::AttachTokenDigest(&ctx, digest_hex_);
    ctx.set_deadline(DeadlineIn(options_.keys_timeout));
    if (!Track(&ctx)) return Status(StatusCode::kCancelled, "stopping");
    v1::FetchKeysResponse got;
    const grpc::Status answered = stub->FetchKeys(&ctx, keys, &got);
    Untrack();
    if (!answered.ok()) return control::FromGrpc(answered).WithContext("fetching missed keys of " + from);
    for (const v1::ShardRecord& r : got.records()) {
      if (asked.count(r.key()) == 0) {
        return InvalidArgument("fetching missed keys of " + from + ": key '" + control::Printable(r.key()) +
                               "' was not asked for");
      }
      // Absent keys were deleted since the snapshot (the delete was
      // forwarded here); a newer version than listed is a write since
      // (forwarded too): the replica rule sorts both out.
      StatusOr<Applier::FetchedOutcome> out = applier_->InstallFetched(FromProto(r));
      if (!out.ok()) return out.status().WithContext("fetching missed keys of " + from);
      if (*out == Applier::FetchedOutcome::kInstalled) values_fetched_.fetch_add(1, std::memory_order_relaxed);
    }
  }

  // The sync counts only if this server stayed a syncing member of the
  // shard under this primary (as far as this server saw): otherwise writes
  // of a map that left it out may be missing.
  const std::shared_ptr<const v1::ClusterMap> now = source_->map();
  const std::vector<uint32_t> still =
      now != nullptr ? SyncingShards(*now, source_->server_id(), source_->epoch()) : std::vector<uint32_t>{};
  if (now == nullptr || now->shard_count() != count || !std::binary_search(still.begin(), still.end(), shard) ||
      now->shard_replicas(static_cast<int>(shard)).server_ids(0) != primary.server_id()) {
    return FailedPrecondition("map version " + std::to_string(now != nullptr ? now->version() : 0) +
                              " no longer lists this server as syncing " + from);
  }
  StatusOr<uint64_t> deleted = applier_->DeleteUnlisted(shard, count, snapshot_version, listed);
  if (!deleted.ok()) return deleted.status().WithContext("deleting keys gone from " + from);
  LOG(INFO) << "fetched " << from << ": " << listed.size() << " records listed (values above " << *since
            << "), " << holes.size() << " missed, " << *deleted << " deleted while away; snapshot version "
            << snapshot_version;
  return Status::Ok();
}

}  // namespace rkv::server
