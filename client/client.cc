// Client: the public API over a pool of ServerConnections.
#include "rkv/client.h"

#include <glog/logging.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>
#include <random>
#include <thread>

#include "client/server_connection.h"
#include "common/protocol.h"
#include "common/token.h"
#include "common/transport/transport.h"

namespace rkv {

using client::Clock;
using client::Deadline;
using client::ServerConnection;
using std::to_string;

namespace {

constexpr int kMaxConnections = 64;

// Connect errors worth retrying within the deadline: the server is down,
// restarting, or was between accept and epoch publication.
bool RetryableConnectError(const Status& s) {
  return s.code() == StatusCode::kUnavailable || s.code() == StatusCode::kDeadlineExceeded ||
         s.code() == StatusCode::kAborted;
}

}  // namespace

class Client::Impl {
 public:
  Impl(const ClientOptions& options, std::unique_ptr<transport::Transport> transport,
       std::string transport_reason)
      : options_(options),
        transport_(std::move(transport)),
        transport_reason_(std::move(transport_reason)) {
    std::memset(&request_, 0, sizeof(request_));
    request_.magic = protocol::kConnectMagic;
    request_.protocol_version = protocol::kProtocolVersion;
    request_.layout_version = layout::kLayoutVersion;
    std::random_device rd;
    request_.client_id = (uint64_t{rd()} << 32) | rd();
    const Sha256Digest digest = TokenDigest(options.token);
    static_assert(sizeof(request_.token_digest) == std::tuple_size_v<Sha256Digest>);
    std::memcpy(request_.token_digest, digest.data(), digest.size());
    for (int i = 0; i < options.connections; ++i) pool_.push_back(std::make_unique<Slot>());
  }

  // Opens every pool connection.
  Status ConnectAll() {
    const Deadline deadline = Clock::now() + options_.timeout;
    for (auto& slot : pool_) {
      std::lock_guard<std::mutex> lock(slot->mu);
      RKV_RETURN_IF_ERROR(EnsureConnected(*slot, deadline));
    }
    return Status::Ok();
  }

  Deadline DeadlineOf(const CallOptions& call) const {
    return Clock::now() + (call.timeout.count() > 0 ? call.timeout : options_.timeout);
  }

  Status CheckKey(std::string_view key) const {
    const uint32_t max = max_key_bytes_.load(std::memory_order_relaxed);
    if (key.empty() || key.size() > max) {
      return InvalidArgument("key of " + to_string(key.size()) + " bytes: keys must be 1.." +
                             to_string(max) + " bytes (the server's max_key_bytes)");
    }
    return Status::Ok();
  }
  Status CheckValue(std::string_view value) const {
    const uint32_t max = max_value_bytes_.load(std::memory_order_relaxed);
    if (value.size() > max) {
      return InvalidArgument("value of " + to_string(value.size()) + " bytes: values must be 0.." +
                             to_string(max) + " bytes (the server's max_value_bytes)");
    }
    return Status::Ok();
  }

  // Runs `fn(connection)` on a pool connection, reconnecting and retrying
  // while the connection breaks, until `deadline`. `fn` returns a Status;
  // a non-OK one with the connection still intact is final.
  template <typename Fn>
  Status WithConnection(Deadline deadline, Fn&& fn) {
    Slot& slot = Acquire();
    std::unique_lock<std::mutex> lock(slot.mu, std::adopt_lock);
    std::chrono::milliseconds backoff(1);
    while (true) {
      // Retries connecting until the deadline itself.
      RKV_RETURN_IF_ERROR(EnsureConnected(slot, deadline));
      const Status s = fn(*slot.conn);
      if (s.ok() || !slot.conn->broken()) return s;
      VLOG(1) << "rkv: connection to " << options_.server << " broke: " << s;
      const auto now = Clock::now();
      if (now >= deadline) {
        if (s.code() == StatusCode::kDeadlineExceeded) return s;
        return Unavailable("connection to " + options_.server +
                           " broke and the deadline passed: " + s.ToString());
      }
      std::this_thread::sleep_for(std::min<Clock::duration>(backoff, deadline - now));
      backoff = std::min(backoff * 2, std::chrono::milliseconds(50));
    }
  }

  ClientOptions options_;
  std::unique_ptr<transport::Transport> transport_;
  std::string transport_reason_;
  std::atomic<uint32_t> max_key_bytes_{0};
  std::atomic<uint32_t> max_value_bytes_{0};
  std::atomic<uint64_t> epoch_{0};

 private:
  struct Slot {
    std::mutex mu;
    std::unique_ptr<ServerConnection> conn;  // guarded by mu
  };

  // Returns a slot whose mutex the caller now holds: a free one if any,
  // else waits for one chosen round-robin.
  Slot& Acquire() {
    const size_t start = next_slot_.fetch_add(1, std::memory_order_relaxed);
    for (size_t i = 0; i < pool_.size(); ++i) {
      Slot& s = *pool_[(start + i) % pool_.size()];
      if (s.mu.try_lock()) return s;
    }
    Slot& s = *pool_[start % pool_.size()];
    s.mu.lock();
    return s;
  }

  // Makes slot.conn a live connection (a new one when it is missing or
  // broken), retrying while the server is unreachable. Requires slot.mu.
  // UNAVAILABLE when the deadline passes first.
  Status EnsureConnected(Slot& slot, Deadline deadline) {
    if (slot.conn && !slot.conn->broken()) return Status::Ok();
    slot.conn.reset();
    std::chrono::milliseconds backoff(1);
    while (true) {
      auto c = ServerConnection::Open(*transport_, options_.server, request_, deadline);
      if (c.ok()) {
        slot.conn = std::move(*c);
        const protocol::AcceptData& a = slot.conn->accept();
        // Relaxed: the limits are independent values, read only to check
        // sizes; a stale value is rechecked by the server.
        max_key_bytes_.store(a.max_key_bytes, std::memory_order_relaxed);
        max_value_bytes_.store(a.max_value_bytes, std::memory_order_relaxed);
        epoch_.store(a.epoch, std::memory_order_relaxed);
        VLOG(1) << "rkv: connected to " << options_.server << " epoch " << a.epoch << " ("
                << transport::KindName(transport_->kind()) << ")";
        return Status::Ok();
      }
      if (!RetryableConnectError(c.status())) return c.status();
      const auto now = Clock::now();
      if (now + backoff >= deadline) {
        return Unavailable("cannot connect to " + options_.server + " within the deadline; last error: " +
                           c.status().ToString());
      }
      std::this_thread::sleep_for(backoff);
      backoff = std::min(backoff * 2, std::chrono::milliseconds(200));
    }
  }

  protocol::ConnectRequestData request_;
  std::vector<std::unique_ptr<Slot>> pool_;
  std::atomic<size_t> next_slot_{0};
};

StatusOr<std::unique_ptr<Client>> Client::Connect(const ClientOptions& options) {
  if (options.token.empty()) return InvalidArgument("ClientOptions.token is empty");
  if (options.connections < 1 || options.connections > kMaxConnections) {
    return InvalidArgument("ClientOptions.connections is " + to_string(options.connections) +
                           ", expected 1.." + to_string(kMaxConnections));
  }
  if (options.timeout.count() <= 0) return InvalidArgument("ClientOptions.timeout must be positive");
  std::string host;
  uint16_t port = 0;
  RKV_RETURN_IF_ERROR(transport::ParseHostPort(options.server, &host, &port));
  if (port == 0) return InvalidArgument("server address '" + options.server + "' has port 0");
  std::string why;
  RKV_ASSIGN_OR_RETURN(const transport::Kind kind, transport::ResolveKind(options.transport, &why));
  VLOG(1) << "rkv: " << why;
  RKV_ASSIGN_OR_RETURN(std::unique_ptr<transport::Transport> t,
                       transport::CreateTransport(kind, transport::Options{}));
  auto impl = std::make_unique<Impl>(options, std::move(t), std::move(why));
  RKV_RETURN_IF_ERROR(impl->ConnectAll());
  return std::unique_ptr<Client>(new Client(std::move(impl)));
}

Client::Client(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Client::~Client() = default;

StatusOr<VersionedValue> Client::GetVersioned(std::string_view key, const CallOptions& call) {
  RKV_RETURN_IF_ERROR(impl_->CheckKey(key));
  const Deadline deadline = impl_->DeadlineOf(call);
  client::LookupResult result;
  const Status s = impl_->WithConnection(deadline, [&](ServerConnection& conn) {
    return conn.Lookup(std::span<const std::string_view>(&key, 1),
                       std::span<client::LookupResult>(&result, 1), deadline);
  });
  if (!s.ok()) return s;
  if (!result.status.ok()) return result.status;
  return VersionedValue{std::move(result.value), result.version};
}

StatusOr<std::string> Client::Get(std::string_view key, const CallOptions& call) {
  auto v = GetVersioned(key, call);
  if (!v.ok()) return v.status();
  return std::move(v->value);
}

StatusOr<uint64_t> Client::Put(std::string_view key, std::string_view value,
                               const CallOptions& call) {
  RKV_RETURN_IF_ERROR(impl_->CheckKey(key));
  RKV_RETURN_IF_ERROR(impl_->CheckValue(value));
  const Deadline deadline = impl_->DeadlineOf(call);
  client::ApplyResult result;
  const Status s = impl_->WithConnection(deadline, [&](ServerConnection& conn) -> Status {
    // The limits may differ on a restarted server; the check above used the
    // newest connection's, this one uses this connection's.
    if (key.size() > conn.accept().max_key_bytes || value.size() > conn.accept().max_value_bytes) {
      return InvalidArgument("key of " + to_string(key.size()) + " bytes or value of " +
                             to_string(value.size()) + " bytes over the server's limits (" +
                             to_string(conn.accept().max_key_bytes) + ", " +
                             to_string(conn.accept().max_value_bytes) + ")");
    }
    auto r = conn.Apply(protocol::Op::kPut, key, value, deadline);
    if (!r.ok()) return r.status();
    result = std::move(*r);
    return Status::Ok();
  });
  if (!s.ok()) return s;
  if (!result.status.ok()) return result.status;
  return result.version;
}

Status Client::Delete(std::string_view key, const CallOptions& call) {
  RKV_RETURN_IF_ERROR(impl_->CheckKey(key));
  const Deadline deadline = impl_->DeadlineOf(call);
  client::ApplyResult result;
  RKV_RETURN_IF_ERROR(impl_->WithConnection(deadline, [&](ServerConnection& conn) -> Status {
    if (key.size() > conn.accept().max_key_bytes) {
      return InvalidArgument("key of " + to_string(key.size()) + " bytes: over the server's max_key_bytes " +
                             to_string(conn.accept().max_key_bytes));
    }
    auto r = conn.Apply(protocol::Op::kDelete, key, {}, deadline);
    if (!r.ok()) return r.status();
    result = std::move(*r);
    return Status::Ok();
  }));
  return result.status;
}

std::vector<StatusOr<std::string>> Client::MultiGet(std::span<const std::string> keys,
                                                    const CallOptions& call) {
  const Deadline deadline = impl_->DeadlineOf(call);
  std::vector<client::LookupResult> results(keys.size());
  std::vector<std::string_view> views(keys.begin(), keys.end());
  for (size_t i = 0; i < keys.size(); ++i) {
    Status s = impl_->CheckKey(keys[i]);
    if (!s.ok()) {
      results[i].done = true;
      results[i].status = std::move(s);
    }
  }
  const Status s = impl_->WithConnection(deadline, [&](ServerConnection& conn) {
    return conn.Lookup(views, results, deadline);
  });
  std::vector<StatusOr<std::string>> out;
  out.reserve(keys.size());
  for (auto& r : results) {
    if (!r.done) {
      out.emplace_back(s.ok() ? Internal("key left unresolved") : s);
    } else if (!r.status.ok()) {
      out.emplace_back(std::move(r.status));
    } else {
      out.emplace_back(std::move(r.value));
    }
  }
  return out;
}

uint32_t Client::max_key_bytes() const { return impl_->max_key_bytes_.load(std::memory_order_relaxed); }
uint32_t Client::max_value_bytes() const {
  return impl_->max_value_bytes_.load(std::memory_order_relaxed);
}
uint64_t Client::server_epoch() const { return impl_->epoch_.load(std::memory_order_relaxed); }
std::string Client::transport_name() const { return transport::KindName(impl_->transport_->kind()); }
std::string Client::transport_reason() const { return impl_->transport_reason_; }

}  // namespace rkv
