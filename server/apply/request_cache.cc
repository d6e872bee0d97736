#include "server/apply/request_cache.h"

#include <algorithm>

namespace rkv::server {

RequestCache::RequestCache(RequestCacheLimits limits)
    : limits_{std::max<size_t>(limits.max_clients, 1), std::max<size_t>(limits.requests_per_client, 1)} {}

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

RequestCache::Verdict RequestCache::Check(uint64_t client_id, uint64_t request_id, protocol::ReplyMsg* reply) {
  const Client* c = Touch(client_id);
  if (c == nullptr) return Verdict::kNew;
  // Ids mostly grow: a request above every remembered one is new without a
  // scan (and forgotten ids were remembered once, so they are below too).
  if (request_id > c->max_id) return Verdict::kNew;
  const auto it = std::find(c->ids.begin(), c->ids.end(), request_id);
  if (it != c->ids.end()) {
    *reply = c->replies[static_cast<size_t>(it - c->ids.begin())];
    return Verdict::kReplay;
  }
  return request_id <= c->forgotten ? Verdict::kForgotten : Verdict::kNew;
}

void RequestCache::Insert(uint64_t client_id, const protocol::ReplyMsg& reply) {
  Client* c = Touch(client_id);
  if (c == nullptr) {
    if (lru_.size() >= limits_.max_clients) {
      replies_ -= lru_.back().ids.size();
      index_.erase(lru_.back().client_id);
      lru_.pop_back();
    }
    lru_.emplace_front();
    c = &lru_.front();
    c->client_id = client_id;
    index_.emplace(client_id, lru_.begin());
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
