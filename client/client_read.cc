// The read path of Client (client_impl.h): GET and MultiGet, from the
// shard's primary or, with ReadFrom::kAnyReplica, from a replica taken in
// turn (NextReadTurn) with the primary as the fallback (docs/design.md
// §4.3).
#include <algorithm>
#include <cstdint>
#include <map>
#include <random>
#include <utility>
#include <vector>

#include <glog/logging.h>

#include "client/client_impl.h"
#include "common/clock.h"

namespace rkv {

using client::ConnectionPool;
using client::Deadline;
using client::RoutingTable;
using client::ServerConnection;
using std::to_string;

namespace {

// The calling thread's next turn among a shard's replicas (ReadFrom::
// kAnyReplica). A counter per thread rather than one per client: no cache
// line is written by every read of every thread, and a thread's
// consecutive reads still rotate over all the shard's replicas, so even one
// thread spreads its reads evenly. Each thread starts at a random turn, so
// that many threads that each read a little do not all start on the
// primary.
uint64_t NextReadTurn() {
  thread_local uint64_t turn = (uint64_t{std::random_device{}()} << 32) | std::random_device{}();
  return turn++;
}

// CallOptions::read_from names one of the enumerators.
Status CheckReadFrom(ReadFrom from) {
  if (from == ReadFrom::kPrimary || from == ReadFrom::kAnyReplica) [[likely]] return Status::Ok();
  return InvalidArgument("CallOptions.read_from is " + to_string(static_cast<int>(from)) +
                         ", expected ReadFrom::kPrimary or ReadFrom::kAnyReplica");
}

// MultiGetInto's buffers do not overlap (two values cannot share memory).
Status CheckDisjoint(std::span<const std::span<std::byte>> outs) {
  std::vector<std::pair<uintptr_t, size_t>> ranges;  // (first byte, size) of each non-empty buffer
  ranges.reserve(outs.size());
  for (const std::span<std::byte> out : outs) {
    if (!out.empty()) ranges.emplace_back(reinterpret_cast<uintptr_t>(out.data()), out.size());
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i) {
    if (ranges[i - 1].first + ranges[i - 1].second > ranges[i].first) {
      return InvalidArgument("MultiGetInto: two of the buffers overlap");
    }
  }
  return Status::Ok();
}

}  // namespace

Status Client::Get(std::string_view key, std::string* value, uint64_t* version,
                   const CallOptions& call) {
  return impl_->GetOne(key, value, version, nullptr, call);
}

Status Client::Impl::GetOne(std::string_view key, std::string* value, uint64_t* version, int64_t* expires_at_ms,
                            const CallOptions& call) {
  if (value == nullptr) return InvalidArgument("Get: no string to put the value in (value is null)");
  value->clear();
  auto routes = Routing();
  RKV_RETURN_IF_ERROR(CheckKey(routes->table(), key));
  RKV_RETURN_IF_ERROR(CheckReadFrom(call.read_from));
  const Deadline deadline = DeadlineOf(call);
  client::LookupResult result;
  result.value.swap(*value);  // the lookup copies the value into the caller's memory
  const uint64_t key_hash = ShardHash(key);  // routes, and names the key in the location cache
  const size_t reader = Impl::ReadIndexOf(routes->table(), key_hash, call.read_from,
                                          call.read_from == ReadFrom::kPrimary ? 0 : NextReadTurn());
  Status s = WithServer(
      std::move(routes), reader, deadline,
      [&](ServerConnection& conn) {
        return conn.Lookup(std::span<const std::string_view>(&key, 1),
                           std::span<client::LookupResult>(&result, 1), deadline,
                           std::span<const uint64_t>(&key_hash, 1));
      },
      ConnectionPool::kAnySlot, std::span<const std::string_view>(&key, 1));
  result.value.swap(*value);
  if (!s.ok() || !result.status.ok()) [[unlikely]] {
    value->clear();
    return s.ok() ? std::move(result.status) : s;
  }
  if (version != nullptr) *version = result.version;
  if (expires_at_ms != nullptr) *expires_at_ms = result.expires_at_ms;
  return Status::Ok();
}

StatusOr<VersionedValue> Client::GetVersioned(std::string_view key, const CallOptions& call) {
  VersionedValue v;
  RKV_RETURN_IF_ERROR(impl_->GetOne(key, &v.value, &v.version, &v.expires_at_unix_ms, call));
  return v;
}

int64_t Client::NowUnixMs() { return UnixNowMs(); }

StatusOr<std::string> Client::Get(std::string_view key, const CallOptions& call) {
  std::string value;
  RKV_RETURN_IF_ERROR(Get(key, &value, nullptr, call));
  return value;
}

void Client::Impl::LookupMany(std::span<const std::string_view> keys, std::span<client::LookupResult> results,
                              std::span<Status> group_status, std::span<IntoTarget> targets,
                              const CallOptions& call) {
  const Deadline deadline = DeadlineOf(call);
  const auto routes = Routing();
  const RoutingTable& table = routes->table();
  const Status read_from = CheckReadFrom(call.read_from);
  for (size_t i = 0; i < keys.size(); ++i) {
    Status s = read_from.ok() ? CheckKey(table, keys[i]) : read_from;
    if (!s.ok()) {
      results[i].done = true;
      results[i].status = std::move(s);
    }
  }
  // Group the keys by the server read and their owner (one table for
  // all), run each group on the server read, results land back at the
  // keys' positions. A group's keys share an owner, so that a retry (on the
  // owner) is one call. With kAnyReplica, one turn for the call: each
  // shard's keys go to one replica.
  const uint64_t turn = call.read_from == ReadFrom::kPrimary ? 0 : NextReadTurn();
  // Each key hashed once: its route, and its name in the location cache.
  std::vector<uint64_t> hashes(keys.size());
  // (server read, owner) -> key positions
  std::map<std::pair<size_t, size_t>, std::vector<size_t>> groups;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (results[i].done) continue;
    hashes[i] = ShardHash(keys[i]);
    groups[{ReadIndexOf(table, hashes[i], call.read_from, turn), table.OwnerIndexOfHash(hashes[i])}].push_back(i);
  }
  for (const auto& [servers, group_positions] : groups) {
    const size_t server = servers.first;
    // A structured binding cannot be captured by a lambda before C++20's
    // rules that clang 14 lacks: a reference of its own.
    const std::vector<size_t>& positions = group_positions;
    std::vector<std::string_view> views;
    std::vector<uint64_t> view_hashes;
    std::vector<client::LookupResult> group(positions.size());
    views.reserve(positions.size());
    view_hashes.reserve(positions.size());
    for (size_t j = 0; j < positions.size(); ++j) {
      views.push_back(keys[positions[j]]);
      view_hashes.push_back(hashes[positions[j]]);
      if (!targets.empty()) group[j].into = &targets[positions[j]].target;
    }
    const Status s = WithServer(
        routes, server, deadline,
        [&](ServerConnection& conn) {
          if (!targets.empty()) {
            for (size_t p : positions) AimAt(targets[p], conn);
          }
          return conn.Lookup(views, group, deadline, view_hashes);
        },
        ConnectionPool::kAnySlot, views);
    for (size_t j = 0; j < positions.size(); ++j) {
      results[positions[j]] = std::move(group[j]);
      group_status[positions[j]] = s;
    }
  }
}

std::vector<StatusOr<std::string>> Client::MultiGet(std::span<const std::string> keys,
                                                    const CallOptions& call) {
  const std::vector<std::string_view> views(keys.begin(), keys.end());
  return MultiGet(std::span<const std::string_view>(views), call);
}

std::vector<StatusOr<std::string>> Client::MultiGet(std::span<const std::string_view> keys,
                                                    const CallOptions& call) {
  std::vector<client::LookupResult> results(keys.size());
  std::vector<Status> group_status(keys.size());  // per key: its group's call status
  impl_->LookupMany(keys, results, group_status, {}, call);
  std::vector<StatusOr<std::string>> out;
  out.reserve(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    client::LookupResult& r = results[i];
    if (!r.done) {
      out.emplace_back(group_status[i].ok() ? Internal("key left unresolved") : group_status[i]);
    } else if (!r.status.ok()) {
      out.emplace_back(std::move(r.status));
    } else {
      out.emplace_back(std::move(r.value));
    }
  }
  return out;
}

// ---- GETs into the caller's memory.

Client::Impl::IntoTarget Client::Impl::TargetOf(std::span<std::byte> out) const {
  IntoTarget t;
  t.target.data = reinterpret_cast<uint8_t*>(out.data());
  t.target.capacity = out.size();
  t.registration = buffers_.Find(out);
  return t;
}

void Client::Impl::AimAt(IntoTarget& t, ServerConnection& conn) {
  t.target.mr = nullptr;
  if (!t.registration) return;
  StatusOr<const transport::MemoryRegion*> region = t.registration->RegionFor(conn.transport());
  if (!region.ok()) [[unlikely]] {
    LOG_FIRST_N(WARNING, 1) << "rkv: GetInto copies values: " << region.status();
    return;
  }
  t.target.mr = *region;
  t.target.mr_offset = static_cast<size_t>(t.target.data -
                                           reinterpret_cast<const uint8_t*>(t.registration->memory().data()));
}

StatusOr<BufferHandle> Client::RegisterBuffer(std::span<std::byte> memory) { return impl_->RegisterBuffer(memory); }

Status Client::UnregisterBuffer(BufferHandle handle) { return impl_->UnregisterBuffer(handle); }

Status Client::GetInto(std::string_view key, std::span<std::byte> out, GetIntoResult* result,
                       const CallOptions& call) {
  if (result == nullptr) return InvalidArgument("GetInto: no result to fill (result is null)");
  *result = GetIntoResult{};
  auto routes = impl_->Routing();
  RKV_RETURN_IF_ERROR(impl_->CheckKey(routes->table(), key));
  RKV_RETURN_IF_ERROR(CheckReadFrom(call.read_from));
  const Deadline deadline = impl_->DeadlineOf(call);
  Impl::IntoTarget target = impl_->TargetOf(out);
  client::LookupResult r;
  r.into = &target.target;
  const uint64_t key_hash = ShardHash(key);
  const size_t reader = Impl::ReadIndexOf(routes->table(), key_hash, call.read_from,
                                          call.read_from == ReadFrom::kPrimary ? 0 : NextReadTurn());
  const Status s = impl_->WithServer(
      std::move(routes), reader, deadline,
      [&](ServerConnection& conn) {
        Impl::AimAt(target, conn);
        return conn.Lookup(std::span<const std::string_view>(&key, 1), std::span<client::LookupResult>(&r, 1),
                           deadline, std::span<const uint64_t>(&key_hash, 1));
      },
      ConnectionPool::kAnySlot, std::span<const std::string_view>(&key, 1));
  if (!s.ok()) return s;
  return impl_->FinishGetInto(r, result);
}

StatusOr<size_t> Client::GetInto(std::string_view key, std::span<std::byte> out, const CallOptions& call) {
  GetIntoResult result;
  RKV_RETURN_IF_ERROR(GetInto(key, out, &result, call));
  return result.value_bytes;
}

std::vector<Status> Client::MultiGetInto(std::span<const std::string> keys, std::span<const std::span<std::byte>> outs,
                                         std::span<GetIntoResult> results, const CallOptions& call) {
  if (outs.size() != keys.size() || results.size() != keys.size()) {
    return std::vector<Status>(keys.size(), InvalidArgument("MultiGetInto: " + to_string(keys.size()) + " keys, " +
                                                            to_string(outs.size()) + " buffers and " +
                                                            to_string(results.size()) + " results"));
  }
  if (const Status overlap = CheckDisjoint(outs); !overlap.ok()) return std::vector<Status>(keys.size(), overlap);
  std::vector<Impl::IntoTarget> targets;
  targets.reserve(keys.size());
  for (const std::span<std::byte> out : outs) targets.push_back(impl_->TargetOf(out));
  std::vector<client::LookupResult> lookups(keys.size());
  std::vector<Status> group_status(keys.size());
  const std::vector<std::string_view> views(keys.begin(), keys.end());
  impl_->LookupMany(views, lookups, group_status, targets, call);
  std::vector<Status> out;
  out.reserve(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    results[i] = GetIntoResult{};
    if (!lookups[i].done) {
      out.push_back(group_status[i].ok() ? Internal("key left unresolved") : group_status[i]);
    } else {
      out.push_back(impl_->FinishGetInto(lookups[i], &results[i]));
    }
  }
  return out;
}

Status Client::Impl::FinishGetInto(client::LookupResult& r, GetIntoResult* result) {
  if (r.status.ok() || r.status.code() == StatusCode::kResourceExhausted) result->value_bytes = r.value_size;
  if (!r.status.ok()) return std::move(r.status);
  result->version = r.version;
  result->in_place = r.in_place;
  NoteGetInto(r.in_place);
  return Status::Ok();
}

}  // namespace rkv
