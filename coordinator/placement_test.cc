#include "coordinator/placement.h"

#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

namespace rkv::coordinator {
namespace {

// A shard's roles written as tokens: "p0 b1 b2 s3 h1" is primary 0,
// backups 1 and 2 (in that order), syncing server 3, handover from 1.
// "-" is a shard with no primary.
ShardRoles ParseRoles(const std::string& text) {
  ShardRoles r;
  std::istringstream in(text);
  std::string token;
  while (in >> token) {
    if (token == "-") continue;
    const size_t i = std::stoul(token.substr(1));
    switch (token[0]) {
      case 'p': r.primary = i; break;
      case 'b': r.backups.push_back(i); break;
      case 's': r.syncing.push_back(i); break;
      case 'h': r.handover_from = i; break;
      default: ADD_FAILURE() << "bad token " << token;
    }
  }
  return r;
}

std::string Format(const ShardRoles& r) {
  std::string out;
  const auto add = [&](char c, size_t i) { out += (out.empty() ? "" : " ") + std::string(1, c) + std::to_string(i); };
  if (r.primary != kNone) add('p', r.primary);
  for (size_t i : r.backups) add('b', i);
  for (size_t i : r.syncing) add('s', i);
  if (r.handover_from != kNone) add('h', r.handover_from);
  return out.empty() ? "-" : out;
}

std::vector<ShardRoles> ParseMap(const std::vector<std::string>& shards) {
  std::vector<ShardRoles> roles;
  for (const std::string& s : shards) roles.push_back(ParseRoles(s));
  return roles;
}

std::vector<std::string> FormatMap(const std::vector<ShardRoles>& roles) {
  std::vector<std::string> out;
  for (const ShardRoles& r : roles) out.push_back(Format(r));
  return out;
}

// A server written as "zone" or "zone:flag:flag", flags down, draining,
// reported, replace (DOWN for replace_after).
PlacementServer ParseServer(const std::string& text) {
  PlacementServer s;
  std::istringstream in(text);
  std::string part;
  std::getline(in, s.zone, ':');
  while (std::getline(in, part, ':')) {
    if (part == "down") {
      s.up = false;
    } else if (part == "draining") {
      s.draining = true;
    } else if (part == "reported") {
      s.reported = true;
    } else if (part == "replace") {
      s.replace = true;
    } else {
      ADD_FAILURE() << "bad flag " << part;
    }
  }
  return s;
}

// The counters and lists of a plan that are not zero or empty, e.g.
// "added=1 trimmed=2 begun=0,3 replaced=s2:1".
std::string Summary(const RebalancePlan& p) {
  std::string out;
  const auto count = [&](const char* name, int v) {
    if (v != 0) out += (out.empty() ? "" : " ") + std::string(name) + "=" + std::to_string(v);
  };
  const auto list = [&](const char* name, const std::vector<uint32_t>& v) {
    if (v.empty()) return;
    out += (out.empty() ? "" : " ") + std::string(name) + "=";
    for (size_t k = 0; k < v.size(); ++k) out += (k > 0 ? "," : "") + std::to_string(v[k]);
  };
  count("ended", p.handovers_ended);
  count("trimmed", p.trimmed);
  count("drain_handovers", p.drain_handovers);
  count("added", p.added);
  count("moves", p.moves);
  count("balance_handovers", p.balance_handovers);
  list("ended_shards", p.ended);
  list("begun", p.begun);
  for (size_t i = 0; i < p.replaced.size(); ++i) {
    if (p.replaced[i] != 0) {
      out += (out.empty() ? "" : " ") + std::string("replaced=s") + std::to_string(i) + ":" +
             std::to_string(p.replaced[i]);
    }
  }
  return out;
}

// ---- Initial assignment and zone spreading.

struct AssignCase {
  const char* name;
  std::vector<std::string> zones;  // one per server, join order
  uint32_t shards;
  uint32_t replicas;
  std::vector<std::string> expected;
};

TEST(AssignShardsTest, Table) {
  const std::vector<AssignCase> cases = {
      {"one replica is the round-robin primary alone", {"", "", ""}, 3, 1, {"p0", "p1", "p2"}},
      {"without zones backups follow join order and spread evenly",
       {"", "", ""},
       6,
       2,
       {"p0 b1", "p1 b2", "p2 b0", "p0 b1", "p1 b2", "p2 b0"}},
      {"a backup goes to another zone before a nearer server",
       {"a", "a", "b", "b"},
       4,
       2,
       {"p0 b2", "p1 b3", "p2 b0", "p3 b1"}},
      {"three zones for three replicas; then the lightest; listed after the primary",
       {"a", "a", "b", "c"},
       4,
       3,
       {"p0 b2 b3", "p1 b2 b3", "p2 b3 b0", "p3 b1 b2"}},
      {"every server holds every shard when R = N", {"x", "", "x"}, 3, 3, {"p0 b1 b2", "p1 b2 b0", "p2 b0 b1"}},
  };
  for (const AssignCase& c : cases) {
    SCOPED_TRACE(c.name);
    EXPECT_EQ(FormatMap(AssignShards(c.zones, c.shards, c.replicas)), c.expected);
  }
}

TEST(ZoneNumbersTest, NumbersZonesByFirstAppearance) {
  uint32_t count = 0;
  EXPECT_EQ(ZoneNumbers({"b", "", "b", "a", ""}, &count), (std::vector<uint32_t>{0, 1, 0, 2, 1}));
  EXPECT_EQ(count, 3u);
  EXPECT_TRUE(ZoneNumbers({}, &count).empty());
  EXPECT_EQ(count, 0u);
}

TEST(PlaceBackupsTest, PrefersNewZonesThenLightServersThenJoinOrder) {
  std::vector<uint32_t> load(5, 0);
  // Primary 0 in zone 0; servers 1, 2 in zone 0, 3, 4 in zone 1: one backup
  // in zone 1 first (3, the nearest), then one in the least used zone.
  const std::vector<uint32_t> zones = {0, 0, 0, 1, 1};
  EXPECT_EQ(PlaceBackups(zones, 2, 0, 2, &load), (std::vector<size_t>{1, 3}));
  EXPECT_EQ(load, (std::vector<uint32_t>{0, 1, 0, 1, 0}));
  // Load breaks ties: 2 and 4 are now lighter than 1 and 3.
  EXPECT_EQ(PlaceBackups(zones, 2, 0, 2, &load), (std::vector<size_t>{2, 4}));
  // One zone: join order after the primary, listed in that order.
  std::vector<uint32_t> none(3, 0);
  EXPECT_EQ(PlaceBackups({0, 0, 0}, 1, 2, 2, &none), (std::vector<size_t>{0, 1}));
}

// ---- Promotion choice.

struct PromoteCase {
  const char* name;
  std::vector<bool> up;
  std::vector<std::string> shards;
  std::vector<size_t> ripe;
  std::vector<std::string> new_primary;  // per shard: "s<i>", or "-" when unchanged
  int promoted;
};

TEST(PlanPromotionsTest, Table) {
  const std::vector<PromoteCase> cases = {
      {"the first UP backup in list order among equals", {false, true, true}, {"p0 b1 b2", "p0 b2 b1"}, {0},
       {"s1", "s2"}, 2},
      {"the shards spread over the backups",
       {false, true, true},
       {"p0 b1 b2", "p0 b1 b2", "p0 b1 b2", "p0 b1 b2"},
       {0},
       {"s1", "s2", "s1", "s2"},
       4},
      {"the backup leading fewer shards first", {false, true, true}, {"p0 b1 b2", "p1 b2", "p1 b2"}, {0},
       {"s2", "-", "-"}, 1},
      {"DOWN backups are skipped", {false, false, true}, {"p0 b1 b2"}, {0}, {"s2"}, 1},
      {"no UP backup: the shard stays its own", {false, false, true}, {"p0 b1"}, {0}, {"-"}, 0},
      {"a syncing server is never promoted", {false, true, true}, {"p0 s1", "p0 b2 s1"}, {0}, {"-", "s2"}, 1},
      {"only shards of ripe servers move",
       {false, false, true, true},
       {"p0 b2", "p1 b3", "p2 b0"},
       {1},
       {"-", "s3", "-"},
       1},
  };
  for (const PromoteCase& c : cases) {
    SCOPED_TRACE(c.name);
    const PromotionPlan plan = PlanPromotions(ParseMap(c.shards), c.up, c.ripe);
    std::vector<std::string> got;
    for (size_t p : plan.new_primary) got.push_back(p == kNone ? "-" : "s" + std::to_string(p));
    EXPECT_EQ(got, c.new_primary);
    EXPECT_EQ(plan.promoted, c.promoted);
    int moved = 0, kept = 0;
    for (size_t x : c.ripe) {
      moved += plan.moved[x];
      kept += plan.kept[x];
    }
    EXPECT_EQ(moved, c.promoted);
    int owned = 0;
    for (const std::string& s : c.shards) {
      for (size_t x : c.ripe) owned += ParseRoles(s).primary == x ? 1 : 0;
    }
    EXPECT_EQ(moved + kept, owned);
  }
}

// ---- Rebalance: re-replication, joins, drains, balance.

struct RebalanceCase {
  const char* name;
  std::vector<std::string> servers;  // ParseServer, join order
  std::vector<std::string> shards;   // ParseRoles, one per shard
  uint32_t replicas;
  std::vector<std::string> expected;  // the new roles
  std::string summary;                // Summary of the plan
  std::vector<uint32_t> handover_done = {};  // shards whose handover may end
  uint32_t max_syncing = kMaxSyncingPerServer;
  uint32_t max_moves = kMaxMovesPerPass;
};

TEST(PlanRebalanceTest, Table) {
  const std::vector<RebalanceCase> cases = {
      {"a fresh placement is left alone",
       {"", "", ""},
       {"p0 b1", "p1 b2", "p2 b0", "p0 b1", "p1 b2", "p2 b0"},
       2,
       {"p0 b1", "p1 b2", "p2 b0", "p0 b1", "p1 b2", "p2 b0"},
       ""},
      {"a joined server syncs a backup role of the most loaded server",
       {"", "", "", ""},
       {"p0 b1", "p1 b2", "p2 b0", "p0 b1", "p1 b2", "p2 b0"},
       2,
       {"p0 b1 s3", "p1 b2", "p2 b0", "p0 b1", "p1 b2", "p2 b0"},
       "moves=1"},
      {"once it caught up, the most loaded backup above R leaves",
       {"", "", "", ""},
       {"p0 b1 b3", "p1 b2", "p2 b0", "p0 b1", "p1 b2", "p2 b0"},
       2,
       {"p0 b3", "p1 b2", "p2 b0", "p0 b1", "p1 b2", "p2 b0"},
       "trimmed=1"},
      {"a balance move never costs the shard its zone spread",
       {"a", "b", "a"},
       {"p0 b1", "p1 b0", "p0 b1", "p1 b0"},
       2,
       {"p0 b1", "p1 b0 s2", "p0 b1", "p1 b0"},
       "moves=1"},
      {"moves per pass are bounded (two without the bound)",
       {"", "", "", ""},
       {"p0 b1", "p1 b0", "p0 b1", "p1 b0"},
       2,
       {"p0 b1 s2", "p1 b0 s3", "p0 b1", "p1 b0"},
       "moves=2"},
      {"moves per pass are bounded (one with a bound of one)",
       {"", "", "", ""},
       {"p0 b1", "p1 b0", "p0 b1", "p1 b0"},
       2,
       {"p0 b1 s2", "p1 b0", "p0 b1", "p1 b0"},
       "moves=1",
       {},
       kMaxSyncingPerServer,
       1},
      {"a server DOWN for replace_after is replaced by the least loaded",
       {"", "", ":down:replace", ""},
       {"p0 b2", "p1 b2", "p3 b1"},
       2,
       {"p0 s3", "p1 s0", "p3 b1"},
       "added=2 replaced=s2:2"},
      {"a server to replace keeps the backup role of a shard it hands over",
       {":down:replace", "", ""},
       {"p1 b0 h0", "p2 b0"},
       2,
       {"p1 b0 h0", "p2 s1"},
       "added=1 replaced=s0:1"},
      {"a DOWN server not yet to replace keeps its roles",
       {"", "", ":down", ""},
       {"p0 b2", "p1 b2", "p3 b1"},
       2,
       {"p0 b2", "p1 b2", "p3 b1"},
       ""},
      {"re-replication prefers a new zone over a lighter server",
       {"a", "b", "c:down:replace", "c", "a"},
       {"p0 b2", "p1 b3", "p3 b1"},
       2,
       {"p0 s1", "p1 b3", "p3 b1"},
       "added=1 replaced=s2:1"},
      {"a server reported failing takes no new role",
       {"", ":reported", ":down:replace", ""},
       {"p0 b2", "p3 b1"},
       2,
       {"p0 s3", "p3 b1"},
       "added=1 replaced=s2:1"},
      {"a server catches up on at most max_syncing shards at once",
       {"", "", ":down:replace"},
       {"p0 b2", "p0 b2"},
       2,
       {"p0 s1", "p0"},
       "added=1 replaced=s2:2",
       {},
       1},
      {"a surplus backup leaves: the one whose zone another member shares",
       {"a", "b", "a"},
       {"p0 b1 b2", "p2 b1"},
       2,
       {"p0 b1", "p2 b1"},
       "trimmed=1"},
      {"a surplus backup leaves: between equals, the last joined",
       {"", "", ""},
       {"p0 b1 b2"},
       2,
       {"p0 b1"},
       "trimmed=1"},
      {"a surplus backup leaves: a DOWN one first",
       {"", ":down", ""},
       {"p0 b1 b2"},
       2,
       {"p0 b2"},
       "trimmed=1"},
      {"drain: the primary hands over, the shard it backs up gets a syncing server",
       {":draining", "", ""},
       {"p0 b1", "p1 b2", "p2 b0"},
       2,
       {"p1 b0 h0", "p1 b2", "p2 b0 s1"},
       "drain_handovers=1 added=1 begun=0"},
      {"drain: the backup with the fewest primaries takes over",
       {":draining", "", "", ""},
       {"p0 b1 b2", "p1 b2 b3"},
       3,
       {"p2 b1 b0 h0", "p1 b2 b3"},
       "drain_handovers=1 begun=0"},
      {"drain: between backups with as many primaries, the first listed takes over",
       {":draining", "", "", ""},
       {"p0 b1 b2", "p1 b2 b3", "p2 b3 b0"},
       3,
       {"p1 b2 b0 h0", "p1 b2 b3", "p2 b3 b0 s1"},
       "drain_handovers=1 added=1 begun=0"},
      {"drain: a handover ends after its wait, a replaced draining backup leaves",
       {":draining", "", ""},
       {"p1 b0 h0", "p1 b2", "p2 b0 b1"},
       2,
       {"p1 b0 s2", "p1 b2", "p2 b1"},
       "ended=1 trimmed=1 added=1 ended_shards=0",
       {0}},
      {"drain: a draining backup leaves when no other server could replace it",
       {"", ":draining"},
       {"p0 b1"},
       2,
       {"p0"},
       "trimmed=1"},
      {"drain: a draining server leaves its syncing roles",
       {"", ":draining", ""},
       {"p0 b2 s1"},
       3,
       {"p0 b2"},
       "trimmed=1"},
      {"a handover still waiting changes nothing",
       {"", "", ""},
       {"p1 b0 h0", "p1 b2", "p2 b0"},
       2,
       {"p1 b0 h0", "p1 b2", "p2 b0"},
       ""},
      {"primaries balance toward their backups, the widest gap first",
       {"", "", ""},
       {"p0 b1", "p0 b1", "p0 b2", "p1 b0"},
       2,
       {"p0 b1", "p0 b1", "p2 b0 h0", "p1 b0"},
       "balance_handovers=1 begun=2"},
      {"primaries balance: between equal gaps, the first shard",
       {"", "", ""},
       {"p0 b1", "p0 b1", "p0 b2"},
       2,
       {"p1 b0 h0", "p0 b1", "p2 b0 h0"},
       "balance_handovers=2 begun=0,2"},
  };
  for (const RebalanceCase& c : cases) {
    SCOPED_TRACE(c.name);
    RebalanceInput input;
    for (const std::string& s : c.servers) input.servers.push_back(ParseServer(s));
    input.roles = ParseMap(c.shards);
    input.handover_done.assign(c.shards.size(), false);
    for (uint32_t shard : c.handover_done) input.handover_done[shard] = true;
    input.replicas = c.replicas;
    input.max_syncing_per_server = c.max_syncing;
    input.max_moves_per_pass = c.max_moves;
    const RebalancePlan plan = PlanRebalance(input);
    EXPECT_EQ(FormatMap(plan.roles), c.expected);
    EXPECT_EQ(Summary(plan), c.summary);
    // Nothing changed exactly when the plan counts no change.
    EXPECT_EQ(plan.Total() == 0, plan.roles == input.roles);
  }
}

}  // namespace
}  // namespace rkv::coordinator
