// The Applier's batches (server/apply/apply.h, ApplyBatch): the client
// writes one polling round received, applied in groups of different keys
// whose forwards go out together (Forwarder::ForwardMany), so that a
// primary pays one round trip to each backup per group, not one per write.
// Each write takes the steps Apply gives it (apply_client.cc: the replay
// cache, the gate, its key's stripe, Stage, the forward, FinishWrite); a
// group only interleaves them. docs/design.md §5.7, "Forwards in groups".
#include <algorithm>
#include <bitset>
#include <span>
#include <utility>
#include <vector>

#include "common/thread_annotations.h"
#include "server/apply/apply.h"

namespace rkv::server {

struct Applier::GroupItem {
  BatchWrite* write = nullptr;
  Request req;
  std::vector<uint8_t> copy;  // the record's bytes, which req's views point into
  size_t stripe = 0;
  enum class State {
    kNew,
    kDone,           // answered by the replay cache
    kTwinElsewhere,  // its twin is being applied by another thread: applied alone after the group
    kApplying,       // marked in flight by the group
  } state = State::kNew;
  bool remember = true;
  Staged staging;
  std::vector<uint8_t> record;  // its forward's record (EncodeForward)
  Status replicated;

  std::pair<uint64_t, uint64_t> name() const { return {write->client_id, req.request_id}; }
};

namespace {

// The key stripes of a group, taken in ascending order (every thread that
// holds several takes them so; one that holds one is ordered trivially)
// and let go together. Outside the lock analysis, which cannot follow a
// number of locks known at run time.
void LockStripes(std::span<Mutex> stripes, const std::vector<size_t>& which) NO_THREAD_SAFETY_ANALYSIS {
  for (size_t s : which) stripes[s].Lock();
}
void UnlockStripes(std::span<Mutex> stripes, const std::vector<size_t>& which) NO_THREAD_SAFETY_ANALYSIS {
  for (size_t s : which) stripes[s].Unlock();
}

}  // namespace

void Applier::ApplyBatch(std::span<BatchWrite> writes) {
  if (replication_.policy == nullptr || writes.size() < 2) {
    // Nothing to forward (standalone), or nothing to group.
    for (BatchWrite& w : writes) w.reply = Apply(w.client_id, w.msg, w.ring);
    return;
  }
  // Never resized: the requests' views point into the items' copies.
  std::vector<GroupItem> items(writes.size());
  std::bitset<kKeyStripes> stripes;
  size_t group_begin = 0;
  size_t n = 0;
  for (BatchWrite& w : writes) {
    GroupItem& item = items[n];
    item.req = Request{};
    if (std::optional<protocol::ReplyMsg> refused = Validate(w.msg, w.ring, /*from_peer=*/false, &item.req,
                                                             &item.copy)) {
      w.reply = *refused;
      continue;  // item n is used by the next write
    }
    item.write = &w;
    item.stripe = KeyStripe(item.req.key);
    const std::span<GroupItem> group(items.data() + group_begin, n - group_begin);
    const bool twin =
        std::any_of(group.begin(), group.end(), [&](const GroupItem& g) { return g.name() == item.name(); });
    if (stripes.test(item.stripe) || twin) {
      // A write of a key in the group (or of one sharing its stripe), or a
      // resend of one in it: after the group, in its order.
      ApplyGroup(group);
      group_begin = n;
      stripes.reset();
    }
    stripes.set(item.stripe);
    ++n;
  }
  ApplyGroup(std::span(items.data() + group_begin, n - group_begin));
}

void Applier::ApplyGroup(std::span<GroupItem> group) {
  if (group.empty()) return;
  if (group.size() == 1) {
    GroupItem& g = group.front();
    g.write->reply = ApplyOnce(g.write->client_id, g.req, &g.remember);
    return;
  }
  // The replay cache, as ApplyOnce asks it, except that a write whose twin
  // is in flight on another thread is not waited for here: this group's
  // marks would be held meanwhile, and that thread's group may be waiting
  // for one of them.
  bool any_applying = false;
  {
    MutexLock lock(cache_mu_);
    for (GroupItem& g : group) {
      if (std::optional<protocol::ReplyMsg> cached = CachedReply(g.write->client_id, g.req)) {
        g.write->reply = *cached;
        g.state = GroupItem::State::kDone;
      } else if (in_flight_.count(g.name()) != 0) {
        g.state = GroupItem::State::kTwinElsewhere;  // counted by its ApplyOnce
        continue;
      } else {
        in_flight_.insert(g.name());
        g.state = GroupItem::State::kApplying;
        any_applying = true;
      }
      if (g.req.resent) resent_.fetch_add(1, std::memory_order_relaxed);
    }
  }
  if (any_applying) {
    {
      // As ApplyWrite: behind a waiting snapshot, then the gate shared and
      // every key's stripe for the whole group.
      MutexLock turnstile(gate_turnstile_);
    }
    ReaderLock gate(writes_gate_);
    std::vector<size_t> held;
    for (const GroupItem& g : group) {
      if (g.state == GroupItem::State::kApplying) held.push_back(g.stripe);
    }
    std::sort(held.begin(), held.end());  // distinct: a group has one write per stripe
    LockStripes(key_stripes_, held);
    std::vector<Forwarder::Item> forwards;
    std::vector<GroupItem*> forwarded;
    for (GroupItem& g : group) {
      if (g.state != GroupItem::State::kApplying) continue;
      if (std::optional<protocol::ReplyMsg> done = Stage(g.req, &g.remember, &g.staging)) {
        g.write->reply = *done;
        continue;
      }
      const size_t record_bytes = EncodeForward(g.req, g.staging, &g.record);
      forwards.push_back(Forwarder::Item{&g.staging.route->backups, g.staging.route->map_version, ForwardOp(g.req),
                                         std::span<const uint8_t>(g.record.data(), record_bytes)});
      forwarded.push_back(&g);
    }
    if (!forwards.empty()) {
      const std::vector<std::vector<Status>> acks = replication_.forwarder->ForwardMany(forwards);
      // A backup that failed several of the group's writes is reported
      // once: one report takes it out of all their shards.
      std::vector<std::pair<std::string, uint64_t>> reported;
      for (size_t i = 0; i < forwarded.size(); ++i) {
        GroupItem& g = *forwarded[i];
        g.replicated =
            SettleForward(*g.staging.route, i < acks.size() ? acks[i] : std::vector<Status>{}, &reported);
      }
      // In the group's order, each under the checks a lone write passes.
      for (GroupItem* g : forwarded) g->write->reply = FinishWrite(g->req, g->staging, g->replicated, &g->remember);
    }
    UnlockStripes(key_stripes_, held);
  }
  if (any_applying) {
    {
      MutexLock lock(cache_mu_);
      for (GroupItem& g : group) {
        if (g.state != GroupItem::State::kApplying) continue;
        if (g.remember) cache_.Insert(g.write->client_id, g.write->reply);
        in_flight_.erase(g.name());
      }
    }
    cache_done_.NotifyAll();
  }
  // With this group's marks cleared: each waits for its twin as Apply does.
  for (GroupItem& g : group) {
    if (g.state == GroupItem::State::kTwinElsewhere) {
      g.write->reply = ApplyOnce(g.write->client_id, g.req, &g.remember);
    }
  }
}

}  // namespace rkv::server
