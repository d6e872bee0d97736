// The rkv target: either one rkv::Client that the benchmark's threads share,
// with one connection per thread (ShareRkvClient), or a Client of each
// thread's own with a single connection; --threads is the number of
// connections either way, as for the baselines.
#include <algorithm>
#include <chrono>
#include <cstddef>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "bench/ycsb/kv_target.h"
#include "rkv/client.h"

namespace rkv::bench {
namespace {

class RkvTarget final : public KvTarget {
 public:
  RkvTarget(std::shared_ptr<Client> client, bool read_any_replica) : client_(std::move(client)) {
    if (read_any_replica) get_options_.read_from = ReadFrom::kAnyReplica;
  }

  // --get_into: `slots` slots of the largest value each, registered.
  Status UseGetInto(int slots) {
    slot_bytes_ = client_->max_value_bytes();
    memory_.assign(slot_bytes_ * static_cast<size_t>(slots), std::byte{0});
    StatusOr<BufferHandle> handle = client_->RegisterBuffer(memory_);
    if (!handle.ok()) return handle.status().WithContext("--get_into");
    get_into_ = true;
    return Status::Ok();
  }

  Status Put(std::string_view key, std::string_view value) override {
    StatusOr<uint64_t> version = client_->Put(key, value);
    return version.ok() ? Status::Ok() : version.status();
  }

  // Into one string per target (one per benchmark thread), as a caller
  // that reads many values would: no allocation per GET.
  // With --get_into, into the registered buffer (the READ lands there).
  StatusOr<size_t> Get(std::string_view key) override {
    if (get_into_) return client_->GetInto(key, memory_, get_options_);
    if (Status s = client_->Get(key, &value_, nullptr, get_options_); !s.ok()) return s;
    return value_.size();
  }

  // A GET with the value's version (into value_, or with --get_into into
  // the registered buffer), then Put with PutCondition::VersionIs(that
  // version); FAILED_PRECONDITION with Reason::kConditionFailed is a
  // conflict. The read goes to the key's primary even with
  // --read_from=any: the primary checks the condition, and a backup's
  // older version would only fail it.
  ReadModifyWriteResult ReadModifyWrite(std::string_view key, std::string_view value) override {
    return RetryConflicts(key, [&]() -> ReadModifyWriteTry {
      ReadModifyWriteTry t;
      uint64_t version = 0;
      if (get_into_) {
        GetIntoResult got;
        if (Status s = client_->GetInto(key, memory_, &got); !s.ok()) {
          t.read = std::move(s);
          return t;
        }
        t.read = got.value_bytes;
        version = got.version;
      } else {
        if (Status s = client_->Get(key, &value_, &version); !s.ok()) {
          t.read = std::move(s);
          return t;
        }
        t.read = value_.size();
      }
      StatusOr<uint64_t> put = client_->Put(key, value, PutCondition::VersionIs(version));
      if (put.ok()) return t;
      t.conflict = put.status().code() == StatusCode::kFailedPrecondition &&
                   put.status().reason() == Reason::kConditionFailed;
      t.write = put.status();
      return t;
    });
  }

  bool SupportsBatch() const override { return true; }

  std::vector<StatusOr<size_t>> MultiGet(std::span<const std::string> keys) override {
    if (get_into_) return MultiGetInto(keys);
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

  std::vector<StatusOr<size_t>> MultiGetInto(std::span<const std::string> keys) {
    outs_.clear();
    const size_t slots = memory_.size() / slot_bytes_;
    for (size_t i = 0; i < keys.size(); ++i) {
      // More keys than slots (not with --batch as given): the tail shares
      // the last slot, and MultiGetInto refuses the overlap.
      outs_.push_back(std::span<std::byte>(memory_).subspan(std::min(i, slots - 1) * slot_bytes_, slot_bytes_));
    }
    results_.resize(keys.size());
    const std::vector<Status> got = client_->MultiGetInto(keys, outs_, results_, get_options_);
    std::vector<StatusOr<size_t>> out;
    out.reserve(got.size());
    for (size_t i = 0; i < got.size(); ++i) {
      if (got[i].ok()) {
        out.emplace_back(results_[i].value_bytes);
      } else {
        out.emplace_back(got[i]);
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
           (get_options_.read_from == ReadFrom::kAnyReplica ? "; GETs read any replica" : "") +
           (get_into_ ? "; GETs into a registered buffer" : "");
  }

  void AddCacheCounts(uint64_t* hits, uint64_t* fallbacks, uint64_t* misses) const override {
    const LocationCacheStatsInfo s = client_->LocationCacheStats();
    *hits += s.hits;
    *fallbacks += s.fallbacks;
    *misses += s.misses;
  }

 private:
  const std::shared_ptr<Client> client_;
  std::string value_;
  bool get_into_ = false;
  size_t slot_bytes_ = 0;
  std::vector<std::byte> memory_;  // --get_into: registered with the client
  std::vector<std::span<std::byte>> outs_;
  std::vector<GetIntoResult> results_;
  std::vector<KeyValueView> items_;
  CallOptions get_options_;
};

StatusOr<std::shared_ptr<Client>> ConnectRkv(const TargetOptions& options, int connections) {
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
  client_options.connections = connections;
  client_options.location_cache_bytes = options.location_cache_bytes;
  client_options.data_plane_tls = options.data_plane_tls;
  client_options.tls_ca_file = options.tls_ca_file;
  StatusOr<std::unique_ptr<Client>> client = Client::Connect(client_options);
  if (!client.ok()) {
    return client.status().WithContext(options.coordinator.empty() ? "rkv connect to " + options.server
                                                                   : "rkv connect to coordinator " + options.coordinator);
  }
  return std::shared_ptr<Client>(std::move(*client));
}

}  // namespace

Status ShareRkvClient(TargetOptions* options, int connections) {
  StatusOr<std::shared_ptr<Client>> client = ConnectRkv(*options, connections);
  if (!client.ok()) return client.status();
  options->rkv_client = std::move(*client);
  return Status::Ok();
}

StatusOr<std::unique_ptr<KvTarget>> OpenRkvTarget(const TargetOptions& options) {
  std::shared_ptr<Client> client = options.rkv_client;
  if (client == nullptr) {
    StatusOr<std::shared_ptr<Client>> own = ConnectRkv(options, 1);
    if (!own.ok()) return own.status();
    client = std::move(*own);
  }
  auto target = std::make_unique<RkvTarget>(std::move(client), options.read_any_replica);
  if (options.get_into) {
    if (Status s = target->UseGetInto(std::max(options.batch, 1)); !s.ok()) return s;
  }
  return std::unique_ptr<KvTarget>(std::move(target));
}

}  // namespace rkv::bench
