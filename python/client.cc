#include "python/client.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "python/buffer_view.h"
#include "python/bytes_arg.h"
#include "python/errors.h"
#include "rkv/admin.h"

namespace py = pybind11;

namespace rkv::python {
namespace {

// kvctl reads a token file the same way: at most this many bytes, trailing
// whitespace stripped, not empty.
constexpr size_t kMaxTokenFileBytes = 4096;
// rkv::ClientOptions::connections' bounds.
constexpr int kMaxConnections = 64;
// Longest timeout accepted, in seconds (a day): far beyond any deadline a
// call needs, and short of overflowing milliseconds.
constexpr double kMaxTimeoutS = 86400.0;

std::string TypeName(py::handle object) {
  return py::str(py::type::handle_of(object).attr("__name__"));
}

// `coordinators` as rkv::ClientOptions::coordinator wants it: a comma
// string, or a list or tuple of "HOST:PORT".
std::string CoordinatorList(const py::object& coordinators) {
  std::vector<std::string> entries;
  if (py::isinstance<py::str>(coordinators)) {
    std::string list = coordinators.cast<std::string>();
    size_t start = 0;
    while (true) {
      const size_t comma = list.find(',', start);
      entries.push_back(list.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
  } else if (py::isinstance<py::list>(coordinators) || py::isinstance<py::tuple>(coordinators)) {
    for (py::handle entry : coordinators) {
      if (!py::isinstance<py::str>(entry)) {
        throw py::value_error("coordinators: each entry must be a str \"HOST:PORT\", not " + TypeName(entry));
      }
      entries.push_back(entry.cast<std::string>());
    }
  } else {
    throw py::value_error("coordinators must be a list of \"HOST:PORT\" or a comma-separated str, not " +
                          TypeName(coordinators));
  }
  if (entries.empty()) throw py::value_error("coordinators must name at least one coordinator");
  std::string joined;
  for (const std::string& e : entries) {
    if (e.empty() || e.find(',') != std::string::npos) {
      throw py::value_error("coordinators: empty entry in \"" + py::str(coordinators).cast<std::string>() + "\"");
    }
    if (!joined.empty()) joined += ',';
    joined += e;
  }
  return joined;
}

std::string TokenFromFile(const py::object& token_file) {
  py::object file = py::module_::import("builtins").attr("open")(token_file, "rb");
  py::object data;
  try {
    data = file.attr("read")(kMaxTokenFileBytes + 1);
  } catch (...) {
    file.attr("close")();
    throw;
  }
  file.attr("close")();
  std::string token = data.cast<std::string>();
  const std::string path = py::str(token_file);
  if (token.size() > kMaxTokenFileBytes) {
    throw py::value_error("token file " + path + " holds more than " + std::to_string(kMaxTokenFileBytes) +
                          " bytes");
  }
  while (!token.empty() && (token.back() == '\n' || token.back() == '\r' || token.back() == ' ' ||
                            token.back() == '\t')) {
    token.pop_back();
  }
  if (token.empty()) throw py::value_error("token file " + path + " is empty");
  return token;
}

std::vector<std::string> KeyList(const py::iterable& keys) {
  std::vector<std::string> out;
  for (py::handle key : keys) out.emplace_back(BytesArg(key, "key").view());
  return out;
}

[[noreturn]] void ThrowItem(const char* call, size_t index, const Status& status) {
  ThrowStatus(status.WithContext(std::string(call) + " item " + std::to_string(index)));
}

py::dict MemberDict(const MemberInfo& m) {
  py::dict d;
  d["server_id"] = m.server_id;
  d["epoch"] = m.epoch;
  d["state"] = m.state;
  d["data_address"] = m.data_address;
  d["admin_address"] = m.admin_address;
  d["transport"] = m.transport;
  d["shards"] = m.shards;
  d["backup_shards"] = m.backup_shards;
  d["syncing_shards"] = m.syncing_shards;
  d["keys"] = m.keys;
  d["heap_bytes_used"] = m.heap_bytes_used;
  d["heap_bytes"] = m.heap_bytes;
  d["zone"] = m.zone;
  d["draining"] = m.draining;
  d["down_since_unix_ms"] = m.down_since_unix_ms;
  return d;
}

}  // namespace

PyClient::PyClient(const py::object& server, const py::object& coordinators, const py::object& token,
                   const py::object& token_file, const std::string& transport, double timeout_s,
                   int connections, const py::object& tls_ca, const py::object& tls_cert,
                   const py::object& tls_key, bool data_plane_tls) {
  ClientOptions options;
  const auto path_arg = [](const py::object& value, const char* name) -> std::string {
    if (value.is_none()) return {};
    if (!py::isinstance<py::str>(value)) {
      throw py::value_error(std::string(name) + " must be a str path, not " + TypeName(value));
    }
    std::string path = value.cast<std::string>();
    if (path.empty()) throw py::value_error(std::string(name) + " must not be empty");
    return path;
  };
  options.tls_ca_file = path_arg(tls_ca, "tls_ca");
  options.tls_cert_file = path_arg(tls_cert, "tls_cert");
  options.tls_key_file = path_arg(tls_key, "tls_key");
  options.data_plane_tls = data_plane_tls;
  if (server.is_none() == coordinators.is_none()) {
    throw py::value_error("give exactly one of server (\"HOST:PORT\") and coordinators");
  }
  if (!server.is_none()) {
    if (!py::isinstance<py::str>(server)) throw py::value_error("server must be a str \"HOST:PORT\", not " + TypeName(server));
    options.server = server.cast<std::string>();
    if (options.server.empty()) throw py::value_error("server must not be empty");
  } else {
    options.server.clear();
    options.coordinator = CoordinatorList(coordinators);
  }

  if (token.is_none() == token_file.is_none()) throw py::value_error("give exactly one of token and token_file");
  if (!token.is_none()) {
    if (!py::isinstance<py::str>(token) && !py::isinstance<py::bytes>(token)) {
      throw py::value_error("token must be a str or bytes, not " + TypeName(token));
    }
    options.token = std::string(BytesArg(token, "token").view());
    if (options.token.empty()) throw py::value_error("token must not be empty");
  } else {
    options.token = TokenFromFile(token_file);
  }

  if (transport != "auto" && transport != "tcp" && transport != "verbs") {
    throw py::value_error("transport must be \"auto\", \"tcp\" or \"verbs\", not \"" + transport + "\"");
  }
  options.transport = transport;
  if (!std::isfinite(timeout_s) || timeout_s <= 0 || timeout_s > kMaxTimeoutS) {
    throw py::value_error("timeout must be a number of seconds > 0 and at most " +
                          std::to_string(static_cast<int>(kMaxTimeoutS)));
  }
  // Rounded up, so that a positive timeout never becomes 0 ms.
  options.timeout = std::chrono::milliseconds(static_cast<int64_t>(std::ceil(timeout_s * 1000.0)));
  if (connections < 1 || connections > kMaxConnections) {
    throw py::value_error("connections must be 1.." + std::to_string(kMaxConnections) + ", not " +
                          std::to_string(connections));
  }
  options.connections = connections;

  StatusOr<std::unique_ptr<Client>> connected = Status();
  {
    py::gil_scoped_release release;
    connected = Client::Connect(options);
  }
  if (!connected.ok()) ThrowStatus(connected.status());
  client_ = std::move(*connected);
}

PyClient::~PyClient() { EndRegistrations(); }

std::shared_ptr<Client> PyClient::Acquire() const {
  if (client_ == nullptr) ThrowStatus(FailedPrecondition("the rkv.Client is closed"));
  return client_;
}

py::bytes PyClient::Get(py::handle key) {
  const BytesArg k(key, "key");
  const StatusOr<std::string> got = WithoutGil([&](Client& client) { return client.Get(k.view()); });
  if (!got.ok()) ThrowStatus(got.status());
  return py::bytes(*got);
}

std::optional<double> PyClient::Ttl(py::handle key) {
  const BytesArg k(key, "key");
  const StatusOr<VersionedValue> got = WithoutGil([&](Client& client) { return client.GetVersioned(k.view()); });
  if (!got.ok()) ThrowStatus(got.status());
  if (got->expires_at_unix_ms == kNoExpiry) return std::nullopt;
  return std::max<int64_t>(0, got->expires_at_unix_ms - Client::NowUnixMs()) / 1000.0;
}

py::tuple PyClient::GetVersioned(py::handle key) {
  const BytesArg k(key, "key");
  const StatusOr<VersionedValue> got = WithoutGil([&](Client& client) { return client.GetVersioned(k.view()); });
  if (!got.ok()) ThrowStatus(got.status());
  return py::make_tuple(py::bytes(got->value), got->version);
}

uint64_t PyClient::Put(py::handle key, py::handle value, std::optional<uint64_t> if_version, bool if_absent,
                       std::optional<double> ttl) {
  if (if_version && if_absent) throw py::value_error("give if_version or if_absent, not both");
  if (if_version && *if_version == 0) throw py::value_error("if_version must be a version (>= 1)");
  // Ten years bounds a deadline far inside int64 milliseconds.
  constexpr double kMaxTtlSeconds = 10.0 * 366 * 24 * 3600;
  if (ttl && !(*ttl > 0 && *ttl <= kMaxTtlSeconds)) {
    throw py::value_error("ttl must be seconds, more than 0 and at most ten years");
  }
  PutOptions options;
  if (if_absent) options.condition = PutCondition::Absent();
  if (if_version) options.condition = PutCondition::VersionIs(*if_version);
  if (ttl) options.expires_at_unix_ms = Client::NowUnixMs() + static_cast<int64_t>(std::ceil(*ttl * 1000));
  const BytesArg k(key, "key");
  const BytesArg v(value, "value");
  const StatusOr<uint64_t> version =
      WithoutGil([&](Client& client) { return client.Put(k.view(), v.view(), options); });
  if (!version.ok()) ThrowStatus(version.status());
  return *version;
}

void PyClient::Delete(py::handle key, std::optional<uint64_t> if_version) {
  const BytesArg k(key, "key");
  if (if_version && *if_version == 0) throw py::value_error("if_version must be a version (>= 1)");
  const Status status = WithoutGil([&](Client& client) {
    return if_version ? client.DeleteIfVersion(k.view(), *if_version) : client.Delete(k.view());
  });
  if (!status.ok()) ThrowStatus(status);
}

py::list PyClient::MultiGet(const py::iterable& keys) {
  const std::vector<std::string> k = KeyList(keys);
  const std::vector<StatusOr<std::string>> got = WithoutGil([&](Client& client) { return client.MultiGet(k); });
  py::list out;
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i].ok()) {
      out.append(py::bytes(*got[i]));
    } else if (got[i].status().code() == StatusCode::kNotFound) {
      out.append(py::none());
    } else {
      ThrowItem("multi_get", i, got[i].status());
    }
  }
  return out;
}

py::list PyClient::MultiPut(const py::object& items) {
  std::vector<BytesArg> args;
  const py::object pairs = py::isinstance<py::dict>(items) ? py::object(items.attr("items")()) : items;
  for (py::handle pair : pairs) {
    if (!py::isinstance<py::sequence>(pair) || py::len(pair) != 2) {
      throw py::value_error("multi_put: each item must be a (key, value) pair, not " + TypeName(pair));
    }
    const py::sequence kv = py::reinterpret_borrow<py::sequence>(pair);
    args.emplace_back(kv[0], "key");
    args.emplace_back(kv[1], "value");
  }
  std::vector<KeyValueView> views;
  views.reserve(args.size() / 2);
  for (size_t i = 0; i < args.size(); i += 2) views.push_back({args[i].view(), args[i + 1].view()});
  const std::vector<StatusOr<uint64_t>> versions =
      WithoutGil([&](Client& client) { return client.MultiPut(views); });
  py::list out;
  for (size_t i = 0; i < versions.size(); ++i) {
    if (!versions[i].ok()) ThrowItem("multi_put", i, versions[i].status());
    out.append(*versions[i]);
  }
  return out;
}

py::list PyClient::MultiDelete(const py::iterable& keys) {
  const std::vector<std::string> k = KeyList(keys);
  const std::vector<Status> results = WithoutGil([&](Client& client) { return client.MultiDelete(k); });
  py::list out;
  for (size_t i = 0; i < results.size(); ++i) {
    if (results[i].ok()) {
      out.append(true);
    } else if (results[i].code() == StatusCode::kNotFound) {
      out.append(false);
    } else {
      ThrowItem("multi_delete", i, results[i]);
    }
  }
  return out;
}

py::list PyClient::Members() {
  const StatusOr<ClusterInfo> cluster = WithoutGil([&](Client& client) { return client.Cluster(); });
  if (!cluster.ok()) ThrowStatus(cluster.status());
  py::list out;
  for (const MemberInfo& m : cluster->members) out.append(MemberDict(m));
  return out;
}

py::dict PyClient::Stats() {
  std::shared_ptr<Client> client = Acquire();
  ClientCounters counters;
  bool cluster_mode = false;
  uint64_t map_version = 0;
  uint32_t max_key_bytes = 0;
  uint32_t max_value_bytes = 0;
  uint64_t server_epoch = 0;
  std::string transport;
  std::string transport_reason;
  std::vector<std::string> server_ids;
  std::vector<StatusOr<ServerStatsInfo>> server_stats;
  {
    py::gil_scoped_release release;
    counters = client->Counters();
    cluster_mode = client->cluster_mode();
    map_version = client->cluster_map_version();
    max_key_bytes = client->max_key_bytes();
    max_value_bytes = client->max_value_bytes();
    server_epoch = client->server_epoch();
    transport = client->transport_name();
    transport_reason = client->transport_reason();
    if (cluster_mode) {
      // Each server's counters from its Admin service; one that does not
      // answer is listed with its error rather than failing the call.
      ClusterAdmin admin(*client);
      StatusOr<std::vector<MemberInfo>> members = admin.Members();
      if (members.ok()) {
        for (const MemberInfo& m : *members) {
          server_ids.push_back(m.server_id);
          server_stats.push_back(admin.ServerStats(m.server_id));
        }
      }
    }
    client.reset();
  }
  const LocationCacheStatsInfo& cache = counters.location_cache;
  py::dict location_cache;
  location_cache["enabled"] = cache.enabled;
  location_cache["entries"] = cache.entries;
  location_cache["bytes"] = cache.bytes;
  location_cache["capacity_bytes"] = cache.capacity_bytes;
  location_cache["hits"] = cache.hits;
  location_cache["misses"] = cache.misses;
  location_cache["fallbacks"] = cache.fallbacks;
  location_cache["evictions"] = cache.evictions;

  py::dict out;
  out["location_cache"] = location_cache;
  out["retries"] = counters.retries;
  out["get_into_in_place"] = counters.get_into_in_place;
  out["get_into_copied"] = counters.get_into_copied;
  py::dict attempts;
  for (const auto& [server, n] : counters.attempts_by_server) attempts[py::str(server)] = n;
  out["attempts_by_server"] = attempts;
  out["cluster_mode"] = cluster_mode;
  out["cluster_map_version"] = map_version;
  out["max_key_bytes"] = max_key_bytes;
  out["max_value_bytes"] = max_value_bytes;
  out["server_epoch"] = server_epoch;
  out["transport"] = transport;
  out["transport_reason"] = transport_reason;
  if (cluster_mode) {
    py::dict servers;
    for (size_t i = 0; i < server_ids.size(); ++i) {
      py::dict entry;
      if (server_stats[i].ok()) {
        entry["epoch"] = server_stats[i]->epoch;
        py::dict counters;
        for (const StatCounter& c : server_stats[i]->counters) counters[py::str(c.name)] = c.value;
        entry["counters"] = counters;
      } else {
        entry["error"] = server_stats[i].status().ToString();
      }
      servers[py::str(server_ids[i])] = entry;
    }
    out["servers"] = servers;
  }
  return out;
}

size_t PyClient::GetInto(py::handle key, py::handle buffer) {
  const BytesArg k(key, "key");
  // Held until the call returned: a bytearray cannot be resized, nor its
  // memory freed, while the value is written there without the GIL.
  const BufferView into(buffer);
  GetIntoResult result;
  const Status status =
      WithoutGil([&](Client& client) { return client.GetInto(k.view(), into.bytes(), &result); });
  // RESOURCE_EXHAUSTED with a size over the buffer's is the value's; any
  // other (a server out of connection slots) is an ordinary error.
  if (status.code() == StatusCode::kResourceExhausted && result.value_bytes > into.size()) {
    ThrowBufferTooSmall(result.value_bytes, into.size());
  }
  if (!status.ok()) ThrowStatus(status);
  return result.value_bytes;
}

std::shared_ptr<PyRegisteredBuffer> PyClient::RegisterBuffer(py::handle buffer) {
  std::shared_ptr<Client> client = Acquire();
  auto registration = std::make_shared<PyRegisteredBuffer>(client, buffer);
  if (client_ == nullptr) {
    // Closed by another thread while the memory was being registered.
    (void)registration->End();
    {
      py::gil_scoped_release release;
      client.reset();
    }
    ThrowStatus(FailedPrecondition("the rkv.Client is closed"));
  }
  std::erase_if(registrations_, [](const std::weak_ptr<PyRegisteredBuffer>& r) { return r.expired(); });
  registrations_.push_back(registration);
  return registration;
}

void PyClient::EndRegistrations() {
  std::vector<std::weak_ptr<PyRegisteredBuffer>> registrations = std::move(registrations_);
  registrations_.clear();
  for (const std::weak_ptr<PyRegisteredBuffer>& weak : registrations) {
    // Its error (NOT_FOUND cannot happen: only the registration removes
    // its handle) does not stop the close.
    if (std::shared_ptr<PyRegisteredBuffer> r = weak.lock()) (void)r->End();
  }
}

void PyClient::Close() {
  EndRegistrations();
  std::shared_ptr<Client> client = std::move(client_);
  client_ = nullptr;
  py::gil_scoped_release release;
  // Joins the client's threads (unless a call in flight still holds it:
  // then that call frees it when it returns).
  client.reset();
}

}  // namespace rkv::python
