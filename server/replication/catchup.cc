#include "server/replication/catchup.h"

#include <algorithm>
#include <unordered_map>
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
  return Applier::ShardRecord{r.key(), r.version(), r.has_value(), r.value(), r.expires_at_ms()};
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
    for (grpc::ClientContext* ctx : in_flight_) ctx->TryCancel();
  }
  stop_cv_.NotifyAll();
  if (thread_.joinable()) thread_.join();
}

bool CatchUp::stopping() const {
  MutexLock lock(mu_);
  return stopping_;
}

bool CatchUp::Track(grpc::ClientContext* ctx) {
  MutexLock lock(mu_);
  if (stopping_) return false;
  in_flight_.insert(ctx);
  return true;
}

void CatchUp::Untrack(grpc::ClientContext* ctx) {
  MutexLock lock(mu_);
  in_flight_.erase(ctx);
}

void CatchUp::Pace(size_t bytes) {
  bytes_fetched_.fetch_add(bytes, std::memory_order_relaxed);
  if (options_.rate_bytes_per_s == 0 || bytes == 0) return;
  std::chrono::steady_clock::time_point until;
  {
    // Each byte takes 1/rate of the line; the line may run kPaceBurst
    // behind now (an idle fetcher starts with that much credit).
    MutexLock lock(pace_mu_);
    const auto now = std::chrono::steady_clock::now();
    const auto cost = std::chrono::nanoseconds(
        static_cast<int64_t>(static_cast<double>(bytes) * 1e9 / static_cast<double>(options_.rate_bytes_per_s)));
    pace_next_ = std::max(pace_next_, now - kPaceBurst) + cost;
    until = pace_next_;
  }
  MutexLock lock(mu_);
  (void)stop_cv_.WaitUntil(mu_, until, [&] {
    mu_.AssertHeld();
    return stopping_;
  });
}

CatchUp::Stats CatchUp::stats() const {
  Stats s;
  s.records_listed = records_listed_.load(std::memory_order_relaxed);
  s.values_fetched = values_fetched_.load(std::memory_order_relaxed);
  s.bytes_fetched = bytes_fetched_.load(std::memory_order_relaxed);
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
  // Reports `batch` (at most kReportBatch) in one call. Caught up means
  // durable per the store's durability (with group commit the fetched
  // records still wait for their fsync): one SyncWrites first.
  const auto report = [&](const std::vector<v1::CaughtUpShard>& batch, std::chrono::steady_clock::time_point* wake) {
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

    // The shards due now, grouped by primary, kMaxShardsPerFetch at most
    // per group.
    auto wake = std::chrono::steady_clock::now() + kMapPoll;
    struct Group {
      std::string primary_id;
      std::vector<uint32_t> shards;
      Status status;
      std::vector<uint32_t> dropped;
    };
    std::vector<Group> groups;
    {
      std::map<std::string, std::vector<uint32_t>> by_primary;
      const auto now = std::chrono::steady_clock::now();
      for (uint32_t shard : mine) {
        if (reported.count(shard) != 0) continue;
        const auto retry = retries.find(shard);
        if (retry != retries.end() && retry->second.at > now) {
          wake = std::min(wake, retry->second.at);
          continue;
        }
        by_primary[map->shard_replicas(static_cast<int>(shard)).server_ids(0)].push_back(shard);
      }
      for (auto& [primary_id, shards] : by_primary) {
        for (size_t first = 0; first < shards.size(); first += kMaxShardsPerFetch) {
          const size_t last = std::min(shards.size(), first + kMaxShardsPerFetch);
          groups.push_back(Group{primary_id, std::vector<uint32_t>(shards.begin() + first, shards.begin() + last),
                                 Status::Ok(), {}});
        }
      }
    }
    // Up to kParallelFetches groups at once, each on its own thread.
    for (size_t first = 0; first < groups.size() && !stopping(); first += kParallelFetches) {
      const size_t last = std::min(groups.size(), first + kParallelFetches);
      const auto run = [&](Group& g) {
        const v1::ServerInfo* primary = FindServer(*map, g.primary_id);
        g.status = primary == nullptr ? Internal("the map does not list the primary " + g.primary_id)
                                      : Sync(*map, g.shards, *primary, &g.dropped);
      };
      std::vector<std::thread> threads;
      for (size_t i = first + 1; i < last; ++i) threads.emplace_back([&, i] { run(groups[i]); });
      run(groups[first]);
      for (std::thread& t : threads) t.join();
    }
    if (stopping()) break;
    std::vector<v1::CaughtUpShard> batch;
    for (const Group& g : groups) {
      for (uint32_t shard : g.shards) {
        if (!g.status.ok()) {
          fail(shard, g.primary_id, g.status, &wake);
          continue;
        }
        if (std::binary_search(g.dropped.begin(), g.dropped.end(), shard)) {
          fail(shard, g.primary_id,
               FailedPrecondition("a newer map no longer lists this server as syncing it from " + g.primary_id),
               &wake);
          continue;
        }
        v1::CaughtUpShard& c = batch.emplace_back();
        c.set_shard(shard);
        c.set_primary_id(g.primary_id);
        c.set_sync_map_version(map->version());
      }
    }
    for (size_t first = 0; first < batch.size() && !stopping(); first += kReportBatch) {
      const size_t last = std::min(batch.size(), first + kReportBatch);
      report(std::vector<v1::CaughtUpShard>(batch.begin() + first, batch.begin() + last), &wake);
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(wake - std::chrono::steady_clock::now());
    const auto wait = std::clamp(left, std::chrono::milliseconds(1), kMapPoll);
    const uint64_t held = map != nullptr ? map->version() : 0;
    if (source_->WaitForVersion(held + 1, wait).code() == StatusCode::kCancelled) {
      std::this_thread::sleep_for(wait);  // the source is stopping: only Stop ends this loop
    }
  }
  syncing_shards_.store(0, std::memory_order_relaxed);
}

Status CatchUp::Sync(const v1::ClusterMap& map, const std::vector<uint32_t>& shards, const v1::ServerInfo& primary,
                     std::vector<uint32_t>* dropped) {
  dropped->clear();
  const uint32_t count = map.shard_count();
  const std::string from = std::to_string(shards.size()) + " shard(s) (the first " + std::to_string(shards.front()) +
                           ") from " + primary.server_id() + " at " + primary.admin_address();
  if (primary.admin_address().empty()) return FailedPrecondition("the primary announces no Admin address");
  for (uint32_t shard : shards) applier_->BeginSync(shard, count);
  struct EndSync {
    Applier* applier;
    const std::vector<uint32_t>& shards;
    ~EndSync() {
      for (uint32_t shard : shards) applier->EndSync(shard);
    }
  } end{applier_, shards};
  // Shard -> its since (the highest version held in it).
  std::unordered_map<uint32_t, uint64_t> since;
  {
    const std::vector<uint64_t> high = applier_->ShardHighWaters(shards, count);
    for (size_t i = 0; i < shards.size(); ++i) since[shards[i]] = high[i];
  }

  const std::shared_ptr<grpc::Channel> channel =
      grpc::CreateChannel(primary.admin_address(), options_.credentials != nullptr ? options_.credentials
                                                                                   : grpc::InsecureChannelCredentials());
  const std::unique_ptr<v1::Replica::Stub> stub = v1::Replica::NewStub(channel);
  v1::FetchShardRequest req;
  req.set_server_id(source_->server_id());
  req.set_epoch(source_->epoch());
  req.set_map_version(map.version());
  for (uint32_t shard : shards) {
    v1::ShardSince* s = req.add_shards();
    s->set_shard(shard);
    s->set_since_version(since[shard]);
  }

  std::unordered_set<std::string> listed;
  std::map<uint32_t, std::vector<std::string>> holes;
  size_t hole_count = 0;
  uint64_t snapshot_version = 0;
  bool done = false;
  Status bad;
  // A record is checked before anything of it is installed; a bad one
  // ends the attempt. Records with values wait in `batch`, installed a
  // chunk at a time (one durable write each: Applier::InstallFetchedBatch).
  std::vector<Applier::ShardRecord> batch;
  const auto install = [&]() -> Status {
    if (batch.empty()) return Status::Ok();
    StatusOr<size_t> installed = applier_->InstallFetchedBatch(batch);
    batch.clear();
    if (!installed.ok()) return installed.status();
    values_fetched_.fetch_add(*installed, std::memory_order_relaxed);
    return Status::Ok();
  };
  const auto take = [&](const v1::ShardRecord& r) -> Status {
    records_listed_.fetch_add(1, std::memory_order_relaxed);
    if (r.key().empty()) return InvalidArgument("a record with an empty key");
    // Built only for an error: this runs for every record streamed.
    const auto where = [&] { return "record of key '" + control::Printable(r.key()) + "'"; };
    if (r.version() == 0) return InvalidArgument(where() + " carries version 0");
    const uint32_t shard = ShardOf(r.key(), count);
    const auto held = since.find(shard);
    if (held == since.end()) {
      return InvalidArgument(where() + " is of shard " + std::to_string(shard) + ", not asked for");
    }
    if (!r.has_value() && !r.value().empty()) return InvalidArgument(where() + " carries a value but has_value unset");
    if (r.expires_at_ms() < 0 || (!r.has_value() && r.expires_at_ms() != 0)) {
      return InvalidArgument(where() + " carries the expiry " + std::to_string(r.expires_at_ms()) +
                             (r.has_value() ? "" : " without a value"));
    }
    if (!listed.insert(r.key()).second) return InvalidArgument(where() + " is listed twice");
    if (r.has_value()) {
      batch.push_back(FromProto(r));
      return Status::Ok();
    }
    if (r.version() > held->second) {
      return InvalidArgument(where() + " at version " + std::to_string(r.version()) + " comes without its value (" +
                             "values above " + std::to_string(held->second) + " were asked for)");
    }
    if (applier_->HeldVersion(r.key()) < r.version()) {
      holes[shard].push_back(r.key());
      ++hole_count;
    }
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
      size_t bytes = 0;
      for (const v1::ShardRecord& r : chunk.records()) {
        if (bad = take(r); !bad.ok()) break;
        bytes += r.key().size() + r.value().size();
      }
      if (bad.ok()) bad = install();
      if (chunk.done()) {
        done = true;
        snapshot_version = chunk.snapshot_version();
      }
      Pace(bytes);
    }
    if (!bad.ok()) ctx.TryCancel();
    const grpc::Status finished = reader->Finish();
    Untrack(&ctx);
    if (!bad.ok()) return bad.WithContext("fetching " + from);
    if (!finished.ok()) return control::FromGrpc(finished).WithContext("fetching " + from);
  }
  if (!done) return DataLoss("the stream of " + from + " ended without its done chunk");

  // Holes: writes missed at versions <= since.
  for (const auto& [shard, keys_of_shard] : holes) {
    for (size_t first = 0; first < keys_of_shard.size(); first += kFetchKeysBatch) {
      const size_t last = std::min(keys_of_shard.size(), first + kFetchKeysBatch);
      v1::FetchKeysRequest keys;
      keys.set_server_id(source_->server_id());
      keys.set_epoch(source_->epoch());
      keys.set_shard(shard);
      std::unordered_set<std::string> asked;
      for (size_t i = first; i < last; ++i) {
        keys.add_keys(keys_of_shard[i]);
        asked.insert(keys_of_shard[i]);
      }
      grpc::ClientContext ctx;
      control::AttachTokenDigest(&ctx, digest_hex_);
      ctx.set_deadline(DeadlineIn(options_.keys_timeout));
      if (!Track(&ctx)) return Status(StatusCode::kCancelled, "stopping");
      v1::FetchKeysResponse got;
      const grpc::Status answered = stub->FetchKeys(&ctx, keys, &got);
      Untrack(&ctx);
      if (!answered.ok()) return control::FromGrpc(answered).WithContext("fetching missed keys of " + from);
      size_t bytes = 0;
      for (const v1::ShardRecord& r : got.records()) {
        if (asked.count(r.key()) == 0) {
          return InvalidArgument("fetching missed keys of " + from + ": key '" + control::Printable(r.key()) +
                                 "' was not asked for");
        }
        // Absent keys were deleted since the snapshot (the delete was
        // forwarded here); a newer version than listed is a write since
        // (forwarded too): the replica rule sorts both out.
        batch.push_back(FromProto(r));
        bytes += r.key().size() + r.value().size();
      }
      if (Status st = install(); !st.ok()) return st.WithContext("fetching missed keys of " + from);
      Pace(bytes);
    }
  }

  // A shard's sync counts only if this server stayed a syncing member of
  // it under this primary (as far as this server saw): otherwise writes
  // of a map that left it out may be missing.
  const std::shared_ptr<const v1::ClusterMap> now = source_->map();
  if (now == nullptr || now->shard_count() != count) {
    return FailedPrecondition("map version " + std::to_string(now != nullptr ? now->version() : 0) +
                              " changed the shard count while fetching " + from);
  }
  const std::vector<uint32_t> still = SyncingShards(*now, source_->server_id(), source_->epoch());
  std::vector<uint32_t> kept;
  for (uint32_t shard : shards) {
    if (std::binary_search(still.begin(), still.end(), shard) &&
        now->shard_replicas(static_cast<int>(shard)).server_ids(0) == primary.server_id()) {
      kept.push_back(shard);
    } else {
      dropped->push_back(shard);
    }
  }
  if (kept.empty()) return Status::Ok();
  StatusOr<uint64_t> deleted = applier_->DeleteUnlisted(kept, count, snapshot_version, listed);
  if (!deleted.ok()) return deleted.status().WithContext("deleting keys gone from " + from);
  LOG(INFO) << "fetched " << from << ": " << listed.size() << " records listed, " << hole_count << " missed, "
            << *deleted << " deleted while away; cut at version " << snapshot_version << "; "
            << dropped->size() << " no longer syncing";
  return Status::Ok();
}

}  // namespace rkv::server
