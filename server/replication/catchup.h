// The fetcher side of catch-up (docs/design.md, "Catch-up"): a server that
// the map lists in a shard's syncing_ids fetches the shard from its primary
// while the primary forwards every new write of it (server/replication/map_policy.h),
// then reports that it caught up.
//
// A background thread follows the map (MapSource). The shards whose
// syncing_ids list this server (the map listing it at its own epoch) are
// grouped by primary, up to kMaxShardsPerFetch per group, and each group
// is fetched in one stream, the groups of up to kParallelFetches primaries
// at once (each on a thread of its own):
//   1. BeginSync of each shard: forwarded deletes of it leave tombstones.
//   2. since = for each shard, the highest version held among its keys (0:
//      none), all in one pass over the table.
//   3. FetchShard(shards with their since, map version) from the primary's
//      Admin address. Each record with a value is installed by the replica
//      rule (Applier::InstallFetched: newer version wins, never at or below
//      a tombstone). A record without a value whose version is above the
//      version held is a hole (a write missed at a version <= since); the
//      holes are fetched with FetchKeys, kFetchKeysBatch at a time per
//      shard, and installed the same way. The streams are paced to
//      rate_bytes_per_s (keys and values, all streams together), so that
//      the primaries' client operations keep their latency.
//   4. After the `done` chunk: every key of the shards held at a version at
//      or below snapshot_version (the primary's cut) and not listed is
//      deleted (deleted on the primary while this server was away), in one
//      pass. A shard the map no longer lists this server as syncing from
//      that primary is left out of it and of the report.
//   5. EndSync drops the tombstones; the shards wait to be reported.
// The shards caught up in one pass of the loop are reported together, one
// ReportCaughtUp for up to kReportBatch of them (each with its primary and
// the map version fetched under, after one SyncWrites), so that the
// coordinator moves them in one map version. Until its report is accepted
// a shard stays syncing and keeps getting the primary's forwards, so the
// wait loses nothing.
// Any error (a record that fails validation, the primary refusing or
// unreachable, a stream without its `done` chunk) abandons that attempt
// for every shard of the group: nothing is reported, and each is tried
// again from step 1 after a backoff (initial_backoff, doubling up to
// max_backoff), for as long as the map lists this server as syncing it; so
// is a shard the coordinator refused to move (primary changed, no longer
// syncing, or taken out and added back since the fetch), against the
// primary the map then names.
//
// Thread safety: Start and Stop from one thread; stats() from any.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/security/credentials.h>

#include "common/mutex.h"
#include "common/status.h"
#include "proto/rkv.pb.h"
#include "server/apply/apply.h"
#include "server/replication/map_source.h"

namespace grpc {
class ClientContext;
}  // namespace grpc

namespace rkv::server {

// Tells the coordinator that this server caught up on each of `shards`
// (each: the shard, the primary fetched from, the map version fetched
// under), in one call (Membership::ReportCaughtUp; a fake in tests).
using CaughtUpReporter =
    std::function<StatusOr<v1::ReportCaughtUpResponse>(const std::vector<v1::CaughtUpShard>& shards)>;

struct CatchUpOptions {
  std::string token;  // the cluster's token (its digest is sent)
  // The longest one FetchShard stream may take, and one FetchKeys call.
  std::chrono::milliseconds fetch_timeout{std::chrono::minutes(10)};
  std::chrono::milliseconds keys_timeout{std::chrono::seconds(10)};
  // Between failed attempts of one shard, doubling.
  std::chrono::milliseconds initial_backoff{100};
  std::chrono::milliseconds max_backoff{5000};
  // Bytes of keys and values fetched per second, all streams together;
  // 0: no limit (rkv-server --catchup_rate_mb_per_s).
  uint64_t rate_bytes_per_s = 0;
  // The credentials of the channels to primaries' Replica services
  // (control::MakeChannelCredentials); null: plain gRPC.
  std::shared_ptr<grpc::ChannelCredentials> credentials;
};

class CatchUp {
 public:
  static constexpr int kFetchKeysBatch = 1024;
  static constexpr size_t kMaxShardsPerFetch = 256;
  static constexpr size_t kParallelFetches = 4;
  static constexpr size_t kReportBatch = 1024;
  // The pacing allows this much ahead of the rate (a burst).
  static constexpr std::chrono::milliseconds kPaceBurst{100};

  // `source` and `applier` must outlive the CatchUp (and the applier be
  // used until Stop returns). INVALID_ARGUMENT when one is missing or the
  // token is empty.
  static StatusOr<std::unique_ptr<CatchUp>> Create(MapSource* source, Applier* applier, CaughtUpReporter report,
                                                   CatchUpOptions options);
  ~CatchUp();  // Stop()
  CatchUp(const CatchUp&) = delete;
  CatchUp& operator=(const CatchUp&) = delete;

  // Starts the thread. Call once.
  void Start();
  // Cancels a fetch in flight and joins the thread. Idempotent.
  void Stop() EXCLUDES(mu_);

  struct Stats {
    uint64_t records_listed = 0;  // records received in FetchShard streams
    uint64_t values_fetched = 0;  // values received (snapshot or FetchKeys) and installed
    uint64_t bytes_fetched = 0;   // bytes of keys and values received
    uint32_t syncing_shards = 0;  // shards the current map lists this server as syncing
    uint64_t syncs_completed = 0;  // syncs reported caught up and accepted
    uint64_t sync_failures = 0;    // attempts abandoned (then retried)
  };
  Stats stats() const;

 private:
  CatchUp(MapSource* source, Applier* applier, CaughtUpReporter report, CatchUpOptions options);

  void Loop() EXCLUDES(mu_);
  // One attempt at `shards` (distinct, ascending, all with `primary` as
  // `map` lists them): steps 1-5 above. The whole group's error, or OK
  // with *dropped holding the shards the map no longer lists this server
  // as syncing from `primary` (not caught up; the others are).
  Status Sync(const v1::ClusterMap& map, const std::vector<uint32_t>& shards, const v1::ServerInfo& primary,
              std::vector<uint32_t>* dropped) EXCLUDES(mu_);
  // Registers `ctx` as a call Stop cancels; false when stopping.
  bool Track(grpc::ClientContext* ctx) EXCLUDES(mu_);
  void Untrack(grpc::ClientContext* ctx) EXCLUDES(mu_);
  // Waits as long as rate_bytes_per_s asks after `bytes` more were
  // fetched (less when stopping).
  void Pace(size_t bytes) EXCLUDES(mu_, pace_mu_);
  bool stopping() const EXCLUDES(mu_);

  MapSource* const source_;
  Applier* const applier_;
  const CaughtUpReporter report_;
  const CatchUpOptions options_;
  const std::string digest_hex_;

  mutable Mutex mu_;
  bool stopping_ GUARDED_BY(mu_) = false;
  CondVar stop_cv_;  // signalled by Stop (Pace waits on it)
  std::set<grpc::ClientContext*> in_flight_ GUARDED_BY(mu_);
  Mutex pace_mu_;
  std::chrono::steady_clock::time_point pace_next_ GUARDED_BY(pace_mu_){};
  std::thread thread_;

  std::atomic<uint64_t> records_listed_{0};
  std::atomic<uint64_t> values_fetched_{0};
  std::atomic<uint64_t> bytes_fetched_{0};
  std::atomic<uint32_t> syncing_shards_{0};
  std::atomic<uint64_t> syncs_completed_{0};
  std::atomic<uint64_t> sync_failures_{0};
};

}  // namespace rkv::server
