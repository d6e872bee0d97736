// The Round of rkv-gateway's loop threads (gateway/session.h): the GETs and
// plain writes that the sessions of one thread deferred during one pass of
// the loop over its ready connections, executed as one MultiGet and one
// MultiPut on the thread's rkv::Client. Many connections' pipelines then
// cost the thread one rkv batch instead of one each: fewer round trips
// to rkv, and fewer sleeps and wake-ups of the loop thread waiting for them
// (docs/design.md, the gateway's section, has the measurements).
//
// The GETs run before the writes. Both are requests of different
// connections whose replies nobody has seen yet, so either order is one
// Redis could have served; a connection's own order is kept by its session,
// which defers only a run of one kind and serves what follows it after the
// run's replies.
//
// Thread safety: used by one loop thread only (its sessions and the loop).
// Invariants: results hold the items of the last Execute, at the
// positions AddGet and AddPut returned for them; the queues hold the
// items of the next one (generation()).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "gateway/session.h"
#include "rkv/status.h"

namespace rkv {
class Client;
}

namespace rkv::gateway {

class RkvRound final : public Round {
 public:
  // Most GETs, and most writes, one Execute runs.
  static constexpr size_t kDefaultMaxItems = 1024;
  // Most bytes of values queued for one Execute: bounds what a round
  // holds beyond the connections' own buffers when values are large.
  static constexpr size_t kMaxValueBytes = size_t{64} << 20;

  // `client` must outlive the round. `max_items` >= 1.
  explicit RkvRound(rkv::Client* client, size_t max_items = kDefaultMaxItems);

  // The generation the next Execute runs: what a session keeps, with the
  // positions of its items, to collect their results.
  uint64_t generation() const { return generation_; }
  // True when the last Execute ran `generation` (its results are there
  // until the next Execute).
  bool executed(uint64_t generation) const { return executed_ == generation; }

  // Whether `n` more GETs (writes, of `value_bytes` in all) fit the next
  // Execute.
  bool HasGetRoom(size_t n) const { return get_keys_.size() + n <= max_items_; }
  bool HasPutRoom(size_t n, size_t value_bytes) const {
    return put_keys_.size() + n <= max_items_ && put_value_bytes_ + value_bytes <= kMaxValueBytes;
  }
  // Queue one GET (one unconditional write without expiry) for the next
  // Execute; returns its position among the results of its kind.
  size_t AddGet(std::string key);
  size_t AddPut(std::string key, std::string value);

  // After Execute: what Client::Get (Put) would have returned for the item
  // at `position`.
  const rkv::StatusOr<std::string>& get_result(size_t position) const { return get_results_[position]; }
  const rkv::StatusOr<uint64_t>& put_result(size_t position) const { return put_results_[position]; }

  bool pending() const override { return !get_keys_.empty() || !put_keys_.empty(); }
  void Execute() override;

  // Totals since construction, for INFO: Executes that ran an rkv call,
  // and the items they ran.
  uint64_t batches() const { return batches_; }
  uint64_t items() const { return items_; }

 private:
  rkv::Client* const client_;
  const size_t max_items_;
  uint64_t generation_ = 1;
  uint64_t executed_ = 0;
  std::vector<std::string> get_keys_;
  std::vector<std::string> put_keys_;
  std::vector<std::string> put_values_;
  size_t put_value_bytes_ = 0;
  std::vector<rkv::StatusOr<std::string>> get_results_;
  std::vector<rkv::StatusOr<uint64_t>> put_results_;
  uint64_t batches_ = 0;
  uint64_t items_ = 0;
};

}  // namespace rkv::gateway
