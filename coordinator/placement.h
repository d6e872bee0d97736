// Placement: which server holds which role of each shard. Pure functions
// over plain data (maps in, maps and moves out): no locks, no storage, no
// clocks, no protobuf. CoordinatorState (coordinator_state.h) owns the
// state, the store and the time; it turns its records into these inputs,
// calls a planner, and commits what it returns. So another coordinator
// (another store, another election) places shards exactly the same way.
//
// Servers are numbered by join order (0 .. n-1); a shard's roles name
// them by that index. Every function is deterministic: equal inputs give
// equal outputs, choices and order included (ties go to the first in join
// order, as each function says).
//
// Thread safety: no shared state; any thread may call any function.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace rkv::coordinator {

// No server (a shard without a primary, or without a handover).
inline constexpr size_t kNone = ~size_t{0};

// At most this many shards a server catches up on at once: Rebalance adds
// no syncing role to a server that has as many.
inline constexpr uint32_t kMaxSyncingPerServer = 256;

// At most this many rebalancing moves (a syncing role added to move a
// backup role, or a handover to balance primaries) a Rebalance starts.
inline constexpr uint32_t kMaxMovesPerPass = 32;

// The roles of one shard, as indices into the server list.
//
// Invariants (the coordinator keeps them; the planners rely on them): the
// primary, backups and syncing servers are distinct; handover_from, when
// set, is one of the backups (the old primary).
struct ShardRoles {
  size_t primary = kNone;
  std::vector<size_t> backups;  // join order starting after the primary
  std::vector<size_t> syncing;  // join order starting after the primary
  size_t handover_from = kNone;

  friend bool operator==(const ShardRoles&, const ShardRoles&) = default;
};

// Numbers zones in order of first appearance (equal names, equal
// numbers; "" is a zone like any other). Returns one number per entry of
// `zones`; *zone_count (when not null) is how many distinct zones there are.
std::vector<uint32_t> ZoneNumbers(const std::vector<std::string>& zones, uint32_t* zone_count = nullptr);

// The placement of one shard's backups, given its primary: `count` further
// distinct servers among `zones.size()` (servers in join order; zones[i] is
// server i's zone as a number below zone_count, ZoneNumbers). Each pick
// takes, among the servers not yet chosen, the one whose zone holds the
// fewest of the shard's replicas so far, then the one holding the fewest
// backups so far (`backup_load`, indexed like `zones`, incremented for
// each pick), then the first in join order after the primary. So the
// replicas cover min(R, zones) distinct zones, and backups spread evenly.
// Returns the picks in join order starting after the primary. Requires
// count < zones.size() and primary < zones.size(). O(count * zones.size()).
std::vector<size_t> PlaceBackups(const std::vector<uint32_t>& zones, uint32_t zone_count, size_t primary,
                                 size_t count, std::vector<uint32_t>* backup_load);

// The first assignment of a cluster of zones.size() servers (join order):
// shard s gets primary s mod N and replicas - 1 backups by PlaceBackups,
// shard by shard in ascending order (each shard's picks weigh the backups
// placed for the shards before it). No syncing server, no handover.
// Requires 1 <= replicas <= zones.size().
std::vector<ShardRoles> AssignShards(const std::vector<std::string>& zones, uint32_t shard_count,
                                     uint32_t replicas);

// Failover: for each shard whose primary is in `ripe` (fenced servers
// whose leases have all ended), the UP backup that leads the fewest shards
// (counting this plan's promotions, shard by shard in order; the first in
// list order among equals) becomes its new primary; a shard with no UP
// backup stays its primary's. A syncing server is never chosen.
struct PromotionPlan {
  std::vector<size_t> new_primary;  // per shard: the promoted backup, or kNone (unchanged)
  std::vector<int> moved;           // per server: its shards that got a new primary
  std::vector<int> kept;            // per server: its shards that stay its own (no UP backup)
  int promoted = 0;                 // sum of moved
};
// `up` has one entry per server. The caller makes each promoted shard's
// new primary its only replica (see CoordinatorState::PromoteFenced).
PromotionPlan PlanPromotions(const std::vector<ShardRoles>& roles, const std::vector<bool>& up,
                             const std::vector<size_t>& ripe);

// What Rebalance knows of one server.
struct PlacementServer {
  std::string zone;
  bool up = true;
  bool draining = false;
  // Reported failing by a primary lately: takes no new role.
  bool reported = false;
  // DOWN for replace_after: loses its backup and syncing roles.
  bool replace = false;
};

struct RebalanceInput {
  std::vector<ShardRoles> roles;          // per shard
  std::vector<PlacementServer> servers;   // join order
  // Per shard: its handover (if any) began FenceWait ago or more, so
  // every lease of the old map has ended and it may end.
  std::vector<bool> handover_done;
  uint32_t replicas = 1;  // R
  uint32_t max_syncing_per_server = kMaxSyncingPerServer;
  uint32_t max_moves_per_pass = kMaxMovesPerPass;
};

struct RebalancePlan {
  std::vector<ShardRoles> roles;         // the new roles of every shard
  std::vector<uint32_t> ended;           // shards whose handover ends, ascending
  std::vector<uint32_t> begun;           // shards whose handover begins, in the order begun
  std::vector<int> replaced;             // per server: roles taken as it is DOWN for replace_after
  int handovers_ended = 0;
  int trimmed = 0;           // roles of draining or surplus servers removed
  int drain_handovers = 0;   // handovers from draining primaries
  int added = 0;             // syncing roles added to shards below R
  int moves = 0;             // backup roles moving for balance (as syncing roles)
  int balance_handovers = 0; // primaries moving for balance
  // Roles changed in all (the sum of the above).
  int Total() const;
};

// One pass of re-replication and rebalancing, in this order:
//   1. ends each handover that is done (handover_done);
//   2. takes each server to `replace` out of every backup and syncing
//      role (not of a shard it hands over);
//   3. takes draining servers out of syncing roles;
//   4. for each shard without a handover: removes a draining backup once
//      the shard has R replicas UP and not draining (or at least one
//      and no syncing server, and no server could be added); then,
//      above R replicas, removes backups: DOWN first, then one whose
//      zone another member shares, then the one with the most backup
//      and syncing roles, then the last joined;
//   5. hands each shard of an UP draining primary, with no syncing
//      server, over to its UP non-draining backup with the fewest
//      primaries;
//   6. adds syncing servers to each shard with an UP primary, no
//      handover and fewer than R non-draining replicas + syncing
//      servers: UP, not draining, not reported, holding fewer than
//      max_syncing_per_server syncing roles, fewest of the shard's
//      members in its zone, then fewest roles, then first joined;
//   7. when no shard has a syncing server, a handover or more than R
//      replicas, and nothing above changed: up to max_moves_per_pass
//      moves of a backup role from a server with at least 2 more backup
//      and syncing roles than the least loaded one to it (added as
//      syncing, never at the cost of the shard's zone spread), or else
//      handovers of primaries from a server with at least 2 more
//      primaries than one of its backups.
// A handover makes the backup the primary and keeps the old primary as a
// backup (appended) and as handover_from. Requires input.roles to name
// only servers below input.servers.size(), and handover_done to have one
// entry per shard.
RebalancePlan PlanRebalance(const RebalanceInput& input);

}  // namespace rkv::coordinator
