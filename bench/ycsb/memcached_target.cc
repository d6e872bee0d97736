// The memcached baseline: libmemcached's text protocol (binary protocol off:
// it is deprecated in memcached) with TCP_NODELAY, memcached_set and
// memcached_get, one memcached_st per benchmark thread; a read-modify-write
// is gets then cas. No batched path: rkv-ycsb refuses --batch > 1 for it.
#include <libmemcached/memcached.h>

#include <cstdlib>
#include <string>

#include "bench/ycsb/kv_target.h"

namespace rkv::bench {
namespace {

// Owns one memcached_st.
class MemcachedHandle {
 public:
  MemcachedHandle() : memc_(memcached_create(nullptr)) {}
  ~MemcachedHandle() {
    if (memc_ != nullptr) memcached_free(memc_);
  }
  MemcachedHandle(const MemcachedHandle&) = delete;
  MemcachedHandle& operator=(const MemcachedHandle&) = delete;

  memcached_st* get() const { return memc_; }

 private:
  memcached_st* memc_;
};

Status MemcachedError(const char* call, memcached_st* memc, memcached_return_t rc) {
  const StatusCode code = rc == MEMCACHED_NOTFOUND ? StatusCode::kNotFound
                          : rc == MEMCACHED_TIMEOUT ? StatusCode::kDeadlineExceeded
                                                    : StatusCode::kUnavailable;
  std::string message = std::string(call) + ": " + memcached_strerror(memc, rc);
  const char* last = memcached_last_error_message(memc);
  if (last != nullptr && *last != '\0' && message.find(last) == std::string::npos) {
    message += std::string(" (") + last + ")";
  }
  return Status(code, std::move(message));
}

class MemcachedTarget final : public KvTarget {
 public:
  MemcachedTarget() = default;
  // The result belongs to handle_'s memcached_st: freed here, before the
  // members (handle_ among them) are destroyed.
  ~MemcachedTarget() override {
    if (result_ready_) memcached_result_free(&result_);
  }
  MemcachedTarget(const MemcachedTarget&) = delete;
  MemcachedTarget& operator=(const MemcachedTarget&) = delete;

  Status Init(const TargetOptions& options) {
    memcached_st* memc = handle_.get();
    if (memc == nullptr) return Internal("memcached_create failed");
    // Not heap-allocated by libmemcached (whose fetch would free such a
    // result when the reply ends): ours, reused by every gets.
    if (memcached_result_create(memc, &result_) == nullptr) return Internal("memcached_result_create failed");
    result_ready_ = true;
    std::string host;
    int port = 0;
    if (Status s = SplitHostPort(options.server, &host, &port); !s.ok()) return s;
    struct Setting {
      memcached_behavior_t behavior;
      uint64_t value;
    };
    const uint64_t timeout_ms = static_cast<uint64_t>(options.timeout_ms);
    const Setting settings[] = {
        {MEMCACHED_BEHAVIOR_BINARY_PROTOCOL, 0},
        {MEMCACHED_BEHAVIOR_TCP_NODELAY, 1},
        {MEMCACHED_BEHAVIOR_CONNECT_TIMEOUT, timeout_ms},
        {MEMCACHED_BEHAVIOR_POLL_TIMEOUT, timeout_ms},
    };
    for (const Setting& setting : settings) {
      memcached_return_t rc = memcached_behavior_set(memc, setting.behavior, setting.value);
      if (rc != MEMCACHED_SUCCESS) return MemcachedError("memcached_behavior_set", memc, rc);
    }
    memcached_return_t rc = memcached_server_add(memc, host.c_str(), static_cast<in_port_t>(port));
    if (rc != MEMCACHED_SUCCESS) return MemcachedError("memcached_server_add", memc, rc);
    // libmemcached connects lazily: ask for the version so that an
    // unreachable server fails here rather than in the first timed call.
    rc = memcached_version(memc);
    if (rc != MEMCACHED_SUCCESS) return MemcachedError("memcached_version", memc, rc);
    return Status::Ok();
  }

  Status Put(std::string_view key, std::string_view value) override {
    memcached_return_t rc = memcached_set(handle_.get(), key.data(), key.size(), value.data(),
                                          value.size(), /*expiration=*/0, /*flags=*/0);
    if (rc != MEMCACHED_SUCCESS) return MemcachedError("memcached_set", handle_.get(), rc);
    return Status::Ok();
  }

  StatusOr<size_t> Get(std::string_view key) override {
    size_t length = 0;
    uint32_t flags = 0;
    memcached_return_t rc = MEMCACHED_SUCCESS;
    char* value = memcached_get(handle_.get(), key.data(), key.size(), &length, &flags, &rc);
    std::free(value);  // malloc'ed by libmemcached; null when absent
    if (rc != MEMCACHED_SUCCESS) return MemcachedError("memcached_get", handle_.get(), rc);
    return length;
  }

  // gets (memcached_mget with MEMCACHED_BEHAVIOR_SUPPORT_CAS) returns the
  // value with its cas id; memcached_cas stores only if the item still has
  // that id, and MEMCACHED_DATA_EXISTS (EXISTS) is a conflict. The
  // behavior is on for the gets only, so that Get stays a plain get.
  ReadModifyWriteResult ReadModifyWrite(std::string_view key, std::string_view value) override {
    memcached_st* memc = handle_.get();
    return RetryConflicts(key, [&]() -> ReadModifyWriteTry {
      ReadModifyWriteTry t;
      uint64_t cas = 0;
      StatusOr<size_t> read = Gets(key, &cas);
      if (!read.ok()) {
        t.read = std::move(read);
        return t;
      }
      t.read = *read;
      const memcached_return_t rc = memcached_cas(memc, key.data(), key.size(), value.data(), value.size(),
                                                  /*expiration=*/0, /*flags=*/0, cas);
      if (rc == MEMCACHED_DATA_EXISTS) {
        t.conflict = true;
        t.write = FailedPrecondition("memcached_cas: the item changed since the gets");
      } else if (rc != MEMCACHED_SUCCESS) {
        t.write = MemcachedError("memcached_cas", memc, rc);
      }
      return t;
    });
  }

 private:
  // One key's gets: its value's length, and its cas id in *cas.
  StatusOr<size_t> Gets(std::string_view key, uint64_t* cas) {
    memcached_st* memc = handle_.get();
    const char* keys[] = {key.data()};
    const size_t lengths[] = {key.size()};
    memcached_return_t rc = memcached_behavior_set(memc, MEMCACHED_BEHAVIOR_SUPPORT_CAS, 1);
    if (rc == MEMCACHED_SUCCESS) rc = memcached_mget(memc, keys, lengths, 1);
    const memcached_return_t off = memcached_behavior_set(memc, MEMCACHED_BEHAVIOR_SUPPORT_CAS, 0);
    if (rc != MEMCACHED_SUCCESS) return MemcachedError("memcached_mget (gets)", memc, rc);
    if (off != MEMCACHED_SUCCESS) return MemcachedError("memcached_behavior_set", memc, off);
    if (memcached_fetch_result(memc, &result_, &rc) == nullptr) {
      // No item: the reply was END alone (NOTFOUND).
      return MemcachedError("memcached_fetch_result (gets)", memc, rc == MEMCACHED_END ? MEMCACHED_NOTFOUND : rc);
    }
    const size_t length = memcached_result_length(&result_);
    *cas = memcached_result_cas(&result_);
    // Read the reply's END, so that the connection has no reply pending.
    while (memcached_fetch_result(memc, &result_, &rc) != nullptr) {
    }
    if (rc != MEMCACHED_END && rc != MEMCACHED_SUCCESS) {
      return MemcachedError("memcached_fetch_result (gets)", memc, rc);
    }
    return length;
  }

  MemcachedHandle handle_;
  memcached_result_st result_{};
  bool result_ready_ = false;
};

}  // namespace

StatusOr<std::unique_ptr<KvTarget>> OpenMemcachedTarget(const TargetOptions& options) {
  auto target = std::make_unique<MemcachedTarget>();
  if (Status s = target->Init(options); !s.ok()) {
    return s.WithContext("memcached connect to " + options.server);
  }
  return std::unique_ptr<KvTarget>(std::move(target));
}

}  // namespace rkv::bench
