// The read path of Client (client_impl.h): GET and MultiGet, from the
// shard's primary or, with ReadFrom::kAnyReplica, from a replica taken in
// turn (NextReadTurn) with the primary as the fallback (docs/design.md
// §4.3).
#include <map>
#include <random>
#include <utility>
#include <vector>

#include "client/client_impl.h"

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

}  // namespace

Status Client::Get(std::string_view key, std::string* value, uint64_t* version,
                   const CallOptions& call) {
  if (value == nullptr) return InvalidArgument("Get: no string to put the value in (value is null)");
  value->clear();
  auto routes = impl_->Routing();
  RKV_RETURN_IF_ERROR(impl_->CheckKey(routes->table(), key));
  RKV_RETURN_IF_ERROR(CheckReadFrom(call.read_from));
  const Deadline deadline = impl_->DeadlineOf(call);
  client::LookupResult result;
  result.value.swap(*value);  // the lookup copies the value into the caller's memory
  const size_t reader = Impl::ReadIndexOf(routes->table(), key, call.read_from,
                                          call.read_from == ReadFrom::kPrimary ? 0 : NextReadTurn());
  Status s = impl_->WithServer(
      std::move(routes), reader, deadline,
      [&](ServerConnection& conn) {
        return conn.Lookup(std::span<const std::string_view>(&key, 1),
                           std::span<client::LookupResult>(&result, 1), deadline);
      },
      ConnectionPool::kAnySlot, std::span<const std::string_view>(&key, 1));
  result.value.swap(*value);
  if (!s.ok() || !result.status.ok()) [[unlikely]] {
    value->clear();
    return s.ok() ? std::move(result.status) : s;
  }
  if (version != nullptr) *version = result.version;
  return Status::Ok();
}

StatusOr<VersionedValue> Client::GetVersioned(std::string_view key, const CallOptions& call) {
  VersionedValue v;
  RKV_RETURN_IF_ERROR(Get(key, &v.value, &v.version, call));
  return v;
}

StatusOr<std::string> Client::Get(std::string_view key, const CallOptions& call) {
  std::string value;
  RKV_RETURN_IF_ERROR(Get(key, &value, nullptr, call));
  return value;
}

std::vector<StatusOr<std::string>> Client::MultiGet(std::span<const std::string> keys,
                                                    const CallOptions& call) {
  const Deadline deadline = impl_->DeadlineOf(call);
  const auto routes = impl_->Routing();
  const RoutingTable& table = routes->table();
  std::vector<client::LookupResult> results(keys.size());
  std::vector<Status> group_status(keys.size());  // per key: its group's call status
  const Status read_from = CheckReadFrom(call.read_from);
  for (size_t i = 0; i < keys.size(); ++i) {
    Status s = read_from.ok() ? impl_->CheckKey(table, keys[i]) : read_from;
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
  // (server read, owner) -> key positions
  std::map<std::pair<size_t, size_t>, std::vector<size_t>> groups;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (results[i].done) continue;
    groups[{Impl::ReadIndexOf(table, keys[i], call.read_from, turn), table.OwnerIndexOf(keys[i])}].push_back(i);
  }
  for (const auto& [servers, positions] : groups) {
    const size_t server = servers.first;
    std::vector<std::string_view> views;
    std::vector<client::LookupResult> group(positions.size());
    views.reserve(positions.size());
    for (size_t p : positions) views.push_back(keys[p]);
    const Status s = impl_->WithServer(
        routes, server, deadline, [&](ServerConnection& conn) { return conn.Lookup(views, group, deadline); },
        ConnectionPool::kAnySlot, views);
    for (size_t j = 0; j < positions.size(); ++j) {
      results[positions[j]] = std::move(group[j]);
      group_status[positions[j]] = s;
    }
  }
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

}  // namespace rkv
