#include "server/apply/request_cache.h"

#include <algorithm>
#include <iterator>

namespace rkv::server {

RequestCache::RequestCache(RequestCacheLimits limits)
    : limits_{std::max<size_t>(limits.max_clients, 1), std::max<size_t>(limits.requests_per_client, 1),
              std::max<size_t>(limits.max_evicted, 1)} {}

size_t RequestCache::MaxMemoryBytes(RequestCacheLimits limits) {
  return std::max<size_t>(limits.max_clients, 1) * std::max<size_t>(limits.requests_per_client, 1) *
         kBytesPerReply;
}

RequestCache::Client* RequestCache::Touch(uint64_t client_id) {
  const auto it = index_.find(client_id);
  if (it == index_.end()) return nullptr;
  if (it->second != lru_.begin()) lru_.splice(lru_.begin(), lru_, it->second);
  return &*it->second;
}

bool RequestCache::MayHaveBeenForgotten(uint64_t client_id) const {
  return evicted_dropped_ || evicted_.count(client_id) > 0;
}

RequestCache::Verdict RequestCache::Check(uint64_t client_id, uint64_t request_id, bool resent,
                                          protocol::ReplyMsg* reply) {
  const Client* c = Touch(client_id);
  if (c == nullptr) return resent && MayHaveBeenForgotten(client_id) ? Verdict::kForgotten : Verdict::kNew;
  // Ids mostly grow: a request above every remembered one is not among
  // them without a scan (and forgotten ids were remembered once, so they
  // are below too).
  if (request_id <= c->max_id) {
    const auto it = std::find(c->ids.begin(), c->ids.end(), request_id);
    if (it != c->ids.end()) {
      *reply = c->replies[static_cast<size_t>(it - c->ids.begin())];
      return Verdict::kReplay;
    }
    // Not remembered, at or below an id the bound forgot: a resend may
    // have been applied under that forgotten reply. A first attempt
    // (not resent) never reached this incarnation, so it cannot have been
    // applied: however many later requests overtook it (a client's calls
    // on several connections, a slow one behind requests_per_client
    // others), it is new.
    if (request_id <= c->forgotten && resent) return Verdict::kForgotten;
  }
  // A resend this entry does not know may have been applied under the
  // client's entry that was forgotten.
  return resent && c->reborn ? Verdict::kForgotten : Verdict::kNew;
}

void RequestCache::Pin(uint64_t client_id) {
  if (++pins_[client_id] == 1 && index_.count(client_id) > 0) ++pinned_remembered_;
}

void RequestCache::Unpin(uint64_t client_id) {
  const auto it = pins_.find(client_id);
  if (it == pins_.end()) return;
  if (--it->second > 0) return;
  pins_.erase(it);
  if (index_.count(client_id) > 0) {
    --pinned_remembered_;
    EvictIfFull();
  }
}

void RequestCache::EvictIfFull() {
  if (lru_.size() - pinned_remembered_ <= limits_.max_clients) return;
  // The least recently active client without a connection.
  auto victim = lru_.end();
  for (auto it = lru_.rbegin(); it != lru_.rend(); ++it) {
    if (pins_.count(it->client_id) == 0) {
      victim = std::prev(it.base());
      break;
    }
  }
  if (victim == lru_.end()) return;  // unreachable: more unpinned clients than the bound
  const uint64_t id = victim->client_id;
  replies_ -= victim->ids.size();
  index_.erase(id);
  lru_.erase(victim);
  ++evictions_;
  if (evicted_.insert(id).second) {
    evicted_order_.push_back(id);
    if (evicted_order_.size() > limits_.max_evicted) {
      evicted_.erase(evicted_order_.front());
      evicted_order_.pop_front();
      evicted_dropped_ = true;
    }
  }
}

void RequestCache::Insert(uint64_t client_id, const protocol::ReplyMsg& reply) {
  Client* c = Touch(client_id);
  if (c == nullptr) {
    lru_.emplace_front();
    c = &lru_.front();
    c->client_id = client_id;
    c->reborn = MayHaveBeenForgotten(client_id);
    index_.emplace(client_id, lru_.begin());
    if (pins_.count(client_id) > 0) {
      ++pinned_remembered_;
    } else {
      EvictIfFull();  // never this one: it is the most recently active
    }
  }
  if (c->ids.size() < limits_.requests_per_client) {
    if (c->ids.size() == c->ids.capacity()) {
      // Grow by doubling, but never past the bound.
      const size_t cap = std::min(std::max<size_t>(2 * c->ids.capacity(), 8), limits_.requests_per_client);
      c->ids.reserve(cap);
      c->replies.reserve(cap);
    }
    c->ids.push_back(reply.request_id);
    c->replies.push_back(reply);
    ++replies_;
  } else {
    // Full: the oldest inserted reply makes room.
    c->forgotten = std::max(c->forgotten, c->ids[c->next]);
    c->ids[c->next] = reply.request_id;
    c->replies[c->next] = reply;
    c->next = (c->next + 1) % c->ids.size();
  }
  c->max_id = std::max(c->max_id, reply.request_id);
}

}  // namespace rkv::server
