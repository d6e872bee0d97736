// What the coordinator's cluster map shows after a server's failure, read
// by polling it (GetClusterMap through Client::RefreshClusterMap) from the
// bench's own client: when the victim was marked DOWN, when its shards had
// new primaries, when it was UP again, when every shard had R UP replicas
// again, and every server the map showed DOWN (the victim or not). Also
// the coordinator's probe counters (GetCoordinatorStatus), read around a
// window.
//
// Thread safety: Watch runs on one thread of its own; it only reads the
// map through `monitor` (a thread-safe rkv::Client) and `stop`.
// ReadProbeCounts touches only its arguments.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>

#include "bench/failover/key_load.h"
#include "rkv/client.h"

namespace rkv::bench {

// Every shard has exactly `replicas` replicas, each UP in the map, none
// catching up and no handover under way.
bool FullyReplicated(const ClusterInfo& map, uint32_t replicas);

// The primary (replicas[0]) of each shard, "" when it has none.
std::string PrimaryOf(const ClusterInfo& map, uint32_t shard);

struct WatchSpec {
  Clock::time_point event;
  std::string victim;             // server id
  std::set<uint32_t> shards;      // the victim's primary shards before the event
  uint32_t replicas = 0;          // R
  std::chrono::milliseconds poll{20};
  // Watch at least until `keep_until`, then until the map is fully
  // replicated (again, when it fell below), or until `give_up`.
  Clock::time_point keep_until;
  Clock::time_point give_up;
};

// Times from the event, each the first poll at which it held.
struct MapTimeline {
  std::optional<std::chrono::microseconds> down;      // the victim DOWN
  std::optional<std::chrono::microseconds> promoted;  // none of `shards` has the victim as primary; each an UP one
  std::optional<std::chrono::microseconds> back_up;   // the victim UP again, after it was DOWN
  std::optional<std::chrono::microseconds> degraded;    // not FullyReplicated
  std::optional<std::chrono::microseconds> replicated;  // FullyReplicated again, after `degraded`
  // Every server (by id) the map showed DOWN, with the first poll at which
  // it did (the victim included). A DOWN shorter than a poll can pass
  // unseen; the map versions and the probe counters still show it.
  std::map<std::string, std::chrono::microseconds> downs;
  bool healthy_at_end = false;                          // the last poll's map was FullyReplicated
  uint64_t last_version = 0;
  long polls = 0;
  long failed_polls = 0;
  std::string last_error;  // of a failed poll
};

MapTimeline Watch(Client& monitor, const WatchSpec& spec, const std::atomic<bool>& stop);

// The coordinator's probes of suspected servers since it started
// (CoordinatorStatus.probes, probes_refuted, probes_confirmed; docs/design.md
// §8.8, "Suspicion and probes"): sent, refuted (answered by a live server,
// or overtaken by its heartbeat), confirmed (ending in a DOWN).
struct ProbeCounts {
  uint64_t probes = 0;
  uint64_t refuted = 0;
  uint64_t confirmed = 0;
};
// `after` - `before`, field by field (0 where a counter went back: a
// restarted coordinator).
ProbeCounts operator-(const ProbeCounts& after, const ProbeCounts& before);

// GetCoordinatorStatus of the coordinator at `address` ("HOST:PORT", tcp
// without TLS, as the test cluster runs it) with `token` attached, on a
// fresh channel, within `timeout`.
StatusOr<ProbeCounts> ReadProbeCounts(const std::string& address, const std::string& token,
                                      std::chrono::milliseconds timeout);

}  // namespace rkv::bench
