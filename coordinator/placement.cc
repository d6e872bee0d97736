#include "coordinator/placement.h"

#include <algorithm>
#include <cstddef>
#include <tuple>
#include <unordered_map>

namespace rkv::coordinator {

std::vector<uint32_t> ZoneNumbers(const std::vector<std::string>& zones, uint32_t* zone_count) {
  std::unordered_map<std::string, uint32_t> ids;
  std::vector<uint32_t> numbers;
  numbers.reserve(zones.size());
  for (const std::string& zone : zones) {
    numbers.push_back(ids.emplace(zone, static_cast<uint32_t>(ids.size())).first->second);
  }
  if (zone_count != nullptr) *zone_count = static_cast<uint32_t>(ids.size());
  return numbers;
}

std::vector<size_t> PlaceBackups(const std::vector<uint32_t>& zones, uint32_t zone_count, size_t primary,
                                 size_t count, std::vector<uint32_t>* backup_load) {
  const size_t n = zones.size();
  std::vector<uint32_t> in_zone(zone_count, 0);  // the shard's replicas per zone so far
  ++in_zone[zones[primary]];
  std::vector<bool> chosen(n, false);
  chosen[primary] = true;
  std::vector<size_t> picks;
  picks.reserve(count);
  for (size_t k = 0; k < count; ++k) {
    size_t best = n;
    std::tuple<uint32_t, uint32_t, size_t> best_key;
    for (size_t d = 1; d < n; ++d) {
      const size_t i = (primary + d) % n;
      if (chosen[i]) continue;
      const std::tuple<uint32_t, uint32_t, size_t> key(in_zone[zones[i]], (*backup_load)[i], d);
      if (best == n || key < best_key) {
        best = i;
        best_key = key;
      }
    }
    if (best == n) break;  // fewer servers than asked for; ValidateConfig prevents it
    chosen[best] = true;
    ++in_zone[zones[best]];
    ++(*backup_load)[best];
    picks.push_back(best);
  }
  const auto after_primary = [&](size_t i) { return (i + n - primary) % n; };
  std::sort(picks.begin(), picks.end(), [&](size_t a, size_t b) { return after_primary(a) < after_primary(b); });
  return picks;
}

std::vector<ShardRoles> AssignShards(const std::vector<std::string>& zones, uint32_t shard_count,
                                     uint32_t replicas) {
  uint32_t zone_count = 0;
  const std::vector<uint32_t> numbers = ZoneNumbers(zones, &zone_count);
  std::vector<uint32_t> load(zones.size(), 0);
  std::vector<ShardRoles> roles(shard_count);
  for (uint32_t shard = 0; shard < shard_count; ++shard) {
    ShardRoles& r = roles[shard];
    r.primary = shard % zones.size();
    r.backups = PlaceBackups(numbers, zone_count, r.primary, replicas - 1, &load);
  }
  return roles;
}

PromotionPlan PlanPromotions(const std::vector<ShardRoles>& roles, const std::vector<bool>& up,
                             const std::vector<size_t>& ripe) {
  const size_t n = up.size();
  PromotionPlan plan;
  plan.new_primary.assign(roles.size(), kNone);
  plan.moved.assign(n, 0);
  plan.kept.assign(n, 0);
  // Primaries per server, promotions of this plan included: the failed
  // server's shards spread over its backups, so that no rebalancing
  // handover has to move them again right after (each would stop the
  // shard's writes while it runs).
  std::vector<size_t> primaries(n, 0);
  for (const ShardRoles& r : roles) {
    if (r.primary < n) ++primaries[r.primary];
  }
  for (size_t x : ripe) {
    for (uint32_t shard = 0; shard < roles.size(); ++shard) {
      const ShardRoles& r = roles[shard];
      if (r.primary != x) continue;
      // Every UP backup holds every acknowledged write: the one leading
      // the fewest shards, the first in list order among equals.
      size_t chosen = kNone;
      for (size_t b : r.backups) {
        if (up[b] && (chosen == kNone || primaries[b] < primaries[chosen])) chosen = b;
      }
      plan.new_primary[shard] = chosen;
      if (chosen == kNone) {
        ++plan.kept[x];
      } else {
        ++primaries[chosen];
        --primaries[x];
        ++plan.moved[x];
        ++plan.promoted;
      }
    }
  }
  return plan;
}

int RebalancePlan::Total() const {
  int replaced_total = 0;
  for (int r : replaced) replaced_total += r;
  return added + moves + balance_handovers + drain_handovers + handovers_ended + trimmed + replaced_total;
}

RebalancePlan PlanRebalance(const RebalanceInput& input) {
  const size_t n = input.servers.size();
  const size_t r_target = input.replicas;
  RebalancePlan plan;
  std::vector<ShardRoles>& roles = plan.roles;
  roles = input.roles;
  plan.replaced.assign(n, 0);
  std::vector<int>& replaced = plan.replaced;

  const auto up = [&](size_t i) { return input.servers[i].up; };
  const auto draining = [&](size_t i) { return input.servers[i].draining; };
  const auto eligible = [&](size_t i) { return up(i) && !draining(i); };
  // May take a new role: eligible and not reported failing lately.
  const auto receiver = [&](size_t i) { return eligible(i) && !input.servers[i].reported; };
  // Roles of every kind (placement of new syncing roles), and backup +
  // syncing roles alone (balance: primaries balance apart, so that a
  // fresh placement, even within one in each, is left alone).
  std::vector<size_t> load(n, 0), backup_load(n, 0), primaries(n, 0), syncing_count(n, 0);
  for (const ShardRoles& r : roles) {
    if (r.primary != kNone) {
      ++load[r.primary];
      ++primaries[r.primary];
    }
    for (size_t i : r.backups) {
      ++load[i];
      ++backup_load[i];
    }
    for (size_t i : r.syncing) {
      ++load[i];
      ++backup_load[i];
      ++syncing_count[i];
    }
  }
  std::vector<std::string> zone_names;
  zone_names.reserve(n);
  for (const PlacementServer& s : input.servers) zone_names.push_back(s.zone);
  const std::vector<uint32_t> zone = ZoneNumbers(zone_names);

  const auto erase = [](std::vector<size_t>* v, size_t i) {
    const auto it = std::find(v->begin(), v->end(), i);
    if (it == v->end()) return false;
    v->erase(it);
    return true;
  };
  const auto is_member = [](const ShardRoles& r, size_t i) {
    return r.primary == i || std::find(r.backups.begin(), r.backups.end(), i) != r.backups.end() ||
           std::find(r.syncing.begin(), r.syncing.end(), i) != r.syncing.end();
  };
  // Members of the shard in `z`, `except` left out.
  const auto in_zone = [&](const ShardRoles& r, uint32_t z, size_t except) {
    size_t count = 0;
    const auto add = [&](size_t i) { count += (i != kNone && i != except && zone[i] == z) ? 1 : 0; };
    add(r.primary);
    for (size_t i : r.backups) add(i);
    for (size_t i : r.syncing) add(i);
    return count;
  };
  const auto hand_over = [&](ShardRoles& r, size_t to) {
    erase(&r.backups, to);
    --backup_load[to];
    ++backup_load[r.primary];
    r.backups.push_back(r.primary);
    r.handover_from = r.primary;
    --primaries[r.primary];
    ++primaries[to];
    r.primary = to;
  };

  // 1. Handovers whose every old lease has expired.
  for (uint32_t shard = 0; shard < roles.size(); ++shard) {
    ShardRoles& r = roles[shard];
    if (r.handover_from == kNone || !input.handover_done[shard]) continue;
    r.handover_from = kNone;
    plan.ended.push_back(shard);
    ++plan.handovers_ended;
  }
  // 2. Servers DOWN for replace_after lose their backup and syncing roles.
  for (size_t i = 0; i < n; ++i) {
    if (up(i) || !input.servers[i].replace) continue;
    for (ShardRoles& r : roles) {
      if (r.handover_from != i && erase(&r.backups, i)) ++replaced[i];
      if (erase(&r.syncing, i)) ++replaced[i];
    }
    load[i] -= static_cast<size_t>(replaced[i]);
    backup_load[i] -= static_cast<size_t>(replaced[i]);
  }
  // 3. A draining server takes no new role: its syncing roles end.
  for (ShardRoles& r : roles) {
    for (size_t k = r.syncing.size(); k-- > 0;) {
      const size_t i = r.syncing[k];
      if (!draining(i)) continue;
      r.syncing.erase(r.syncing.begin() + static_cast<std::ptrdiff_t>(k));
      --load[i];
      --backup_load[i];
      ++plan.trimmed;
    }
  }
  // 4. Backups no longer needed: draining ones once replaced, then the most
  // loaded above R.
  for (ShardRoles& r : roles) {
    if (r.handover_from != kNone || r.primary == kNone) continue;
    size_t settled = eligible(r.primary) ? 1 : 0;  // replicas UP and not draining
    for (size_t i : r.backups) settled += eligible(i) ? 1 : 0;
    int candidate = -1;  // a server could join the shard (1) or not (0); -1: not looked at yet
    const auto could_grow = [&] {
      if (candidate < 0) {
        candidate = 0;
        for (size_t j = 0; j < n && candidate == 0; ++j) candidate = eligible(j) && !is_member(r, j) ? 1 : 0;
      }
      return candidate == 1;
    };
    for (size_t k = r.backups.size(); k-- > 0;) {
      const size_t i = r.backups[k];
      if (!draining(i)) continue;
      if (settled >= r_target || (r.syncing.empty() && settled >= 1 && !could_grow())) {
        r.backups.erase(r.backups.begin() + static_cast<std::ptrdiff_t>(k));
        --load[i];
        --backup_load[i];
        ++plan.trimmed;
      }
    }
    while (r.backups.size() + 1 > r_target) {
      // DOWN first, then one whose zone keeps another member, then the
      // most loaded, then the last joined.
      const auto key = [&](size_t i) {
        return std::make_tuple(up(i) ? 0 : 1, in_zone(r, zone[i], i) > 0 ? 1 : 0, backup_load[i], i);
      };
      auto worst = r.backups.begin();
      for (auto it = r.backups.begin(); it != r.backups.end(); ++it) {
        if (key(*it) > key(*worst)) worst = it;
      }
      --load[*worst];
      --backup_load[*worst];
      r.backups.erase(worst);
      ++plan.trimmed;
    }
  }
  // 5. A draining primary hands its shard over to a caught-up backup.
  for (uint32_t shard = 0; shard < roles.size(); ++shard) {
    ShardRoles& r = roles[shard];
    if (r.primary == kNone || !up(r.primary) || !draining(r.primary) || r.handover_from != kNone ||
        !r.syncing.empty()) {
      continue;
    }
    size_t to = kNone;
    for (size_t i : r.backups) {
      if (eligible(i) && (to == kNone || primaries[i] < primaries[to])) to = i;
    }
    if (to == kNone) continue;
    hand_over(r, to);
    plan.begun.push_back(shard);
    ++plan.drain_handovers;
  }
  // 6. Shards below R get syncing servers.
  for (ShardRoles& r : roles) {
    if (r.primary == kNone || !up(r.primary) || r.handover_from != kNone) continue;
    size_t members = draining(r.primary) ? 0 : 1;
    for (size_t i : r.backups) members += draining(i) ? 0 : 1;
    for (size_t i : r.syncing) members += draining(i) ? 0 : 1;
    while (members < r_target) {
      size_t best = kNone;
      std::tuple<size_t, size_t, size_t> best_key;
      for (size_t j = 0; j < n; ++j) {
        if (!receiver(j) || syncing_count[j] >= input.max_syncing_per_server || is_member(r, j)) continue;
        const std::tuple<size_t, size_t, size_t> key(in_zone(r, zone[j], kNone), load[j], j);
        if (best == kNone || key < best_key) {
          best = j;
          best_key = key;
        }
      }
      if (best == kNone) break;
      r.syncing.push_back(best);
      ++load[best];
      ++backup_load[best];
      ++syncing_count[best];
      ++members;
      ++plan.added;
    }
  }
  // 7. Balance, once every earlier move has finished.
  bool settled = plan.handovers_ended + plan.trimmed + plan.drain_handovers + plan.added == 0;
  for (const ShardRoles& r : roles) {
    settled = settled && r.syncing.empty() && r.handover_from == kNone && r.backups.size() + 1 <= r_target;
  }
  std::vector<size_t> receivers;
  for (size_t i = 0; i < n; ++i) {
    if (receiver(i)) receivers.push_back(i);
  }
  if (settled && receivers.size() >= 2) {
    // Backup roles, from a server with at least two more roles than the
    // least loaded one to it; the donor leaves once it has caught up (4).
    for (uint32_t m = 0; m < input.max_moves_per_pass; ++m) {
      size_t u = receivers[0];
      for (size_t i : receivers) {
        if (backup_load[i] < backup_load[u]) u = i;
      }
      if (syncing_count[u] >= input.max_syncing_per_server) break;
      ShardRoles* best = nullptr;  // the shard whose backup with the most roles is the donor
      size_t best_donor = kNone;
      for (ShardRoles& r : roles) {
        if (r.primary == kNone || !up(r.primary) || !r.syncing.empty() || is_member(r, u)) continue;
        for (size_t d : r.backups) {
          // Never at the cost of the shard's zone spread.
          if (!eligible(d) || backup_load[d] < backup_load[u] + 2 || in_zone(r, zone[u], d) > in_zone(r, zone[d], d)) {
            continue;
          }
          if (best == nullptr || backup_load[d] > backup_load[best_donor]) {
            best = &r;
            best_donor = d;
          }
        }
      }
      if (best == nullptr) break;
      best->syncing.push_back(u);
      ++load[u];
      ++backup_load[u];
      --load[best_donor];  // as it will be once it leaves
      --backup_load[best_donor];
      ++syncing_count[u];
      ++plan.moves;
    }
    // Primaries, from a server with at least two more than one of its
    // backups to that backup, when no backup role moves.
    for (uint32_t m = 0; plan.moves == 0 && m < input.max_moves_per_pass; ++m) {
      uint32_t best_shard = 0;
      size_t best_to = kNone, best_gap = 1;
      for (uint32_t shard = 0; shard < roles.size(); ++shard) {
        const ShardRoles& r = roles[shard];
        if (r.primary == kNone || !eligible(r.primary) || r.handover_from != kNone) continue;
        for (size_t b : r.backups) {
          if (!eligible(b) || primaries[r.primary] < primaries[b] + 2) continue;
          const size_t gap = primaries[r.primary] - primaries[b];
          if (gap > best_gap) {
            best_gap = gap;
            best_shard = shard;
            best_to = b;
          }
        }
      }
      if (best_to == kNone) break;
      hand_over(roles[best_shard], best_to);
      plan.begun.push_back(best_shard);
      ++plan.balance_handovers;
    }
  }
  return plan;
}

}  // namespace rkv::coordinator
