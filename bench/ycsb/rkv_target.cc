// The rkv target: one rkv::Client with a single connection per benchmark
// thread, so --threads is also the number of connections, as for the
// baselines.
#include <utility>
#include <vector>

#include "bench/ycsb/kv_target.h"
#include "rkv/client.h"

namespace rkv::bench {
namespace {

class RkvTarget final : public KvTarget {
 public:
  RkvTarget(std::unique_ptr<Client> client, bool read_any_replica) : client_(std::move(client)) {
    if (read_any_replica) get_options_.read_from = ReadFrom::kAnyReplica;
  }

  Status Put(std::string_view key, std::string_view value) override {
    StatusOr<uint64_t> version = client_->Put(key, value);
    return version.ok() ? Status::Ok() : version.status();
  }

  // Into one string per target (one per benchmark thread), as a caller
  // that reads many values would: no allocation per GET.
  StatusOr<size_t> Get(std::string_view key) override {
    if (Status s = client_->Get(key, &value_, nullptr, get_options_); !s.ok()) return s;
    return value_.size();
  }

  bool SupportsBatch() const override { return true; }

  std::vector<StatusOr<size_t>> MultiGet(std::span<const std::string> keys) override {
    std::vector<StatusOr<std::string>> values = client_->MultiGet(keys, get_options_);
    std::vector<StatusOr<size_t>> out;
    out.reserve(values.size());
    for (StatusOr<std::string>& v : values) {
      if (v.ok()) {
        out.emplace_back(v->size());
      } else {
        out.emplace_back(v.status());
      }
    }
    return out;
  }

  std::vector<Status> MultiPut(std::span<const std::string> keys, std::span<const std::string_view> values) override {
    items_.clear();
    for (size_t i = 0; i < keys.size(); ++i) items_.push_back(KeyValueView{keys[i], values[i]});
    std::vector<StatusOr<uint64_t>> versions = client_->MultiPut(items_);
    std::vector<Status> out;
    out.reserve(versions.size());
    for (StatusOr<uint64_t>& v : versions) out.push_back(v.ok() ? Status::Ok() : v.status());
    return out;
  }

  std::string Description() const override {
    const std::string reason = client_->transport_reason();
    return "rkv " + (reason.empty() ? "transport " + client_->transport_name() : reason) +
           (get_options_.read_from == ReadFrom::kAnyReplica ? "; GETs read any replica" : "");
  }

  void AddCacheCounts(uint64_t* hits, uint64_t* fallbacks, uint64_t* misses) const override {
    const LocationCacheStatsInfo s = client_->LocationCacheStats();
    *hits += s.hits;
    *fallbacks += s.fallbacks;
    *misses += s.misses;
  }

 private:
  std::unique_ptr<Client> client_;
  std::string value_;
  std::vector<KeyValueView> items_;
  CallOptions get_options_;
};

}  // namespace

StatusOr<std::unique_ptr<KvTarget>> OpenRkvTarget(const TargetOptions& options) {
  ClientOptions client_options;
  if (options.coordinator.empty()) {
    client_options.server = options.server;
  } else {
    client_options.server.clear();
    client_options.coordinator = options.coordinator;
  }
  client_options.token = options.token;
  client_options.transport = options.transport;
  client_options.timeout = std::chrono::milliseconds(options.timeout_ms);
  client_options.connections = 1;
  client_options.location_cache_bytes = options.location_cache_bytes;
  StatusOr<std::unique_ptr<Client>> client = Client::Connect(client_options);
  if (!client.ok()) {
    return client.status().WithContext(options.coordinator.empty() ? "rkv connect to " + options.server
                                                                   : "rkv connect to coordinator " + options.coordinator);
  }
  return std::unique_ptr<KvTarget>(std::make_unique<RkvTarget>(std::move(*client), options.read_any_replica));
}

}  // namespace rkv::bench
