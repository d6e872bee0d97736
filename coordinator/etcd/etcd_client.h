// An etcd v3 client: the coordinator keeps its state in etcd and elects its
// leader there (coordinator/etcd_state_store.h). It speaks etcd's own gRPC
// API (etcdserverpb, from Debian's golang-etcd-server-dev) and needs no
// other etcd library.
//
// Endpoints and failover. The client holds one gRPC channel per endpoint,
// made on first use. Each call first tries the endpoint that last answered,
// and moves on to the next when an attempt cannot reach etcd (UNAVAILABLE,
// which includes etcd's "no leader" and "leader changed" refusals, or the
// attempt's own timeout, Options::attempt_timeout), until the call's
// deadline; after a round in which every endpoint failed it backs off
// briefly. Every request carries etcd's require-leader mark, so a member
// cut off from its cluster refuses at once instead of waiting.
//
// Reads and writes. A call that only reads (Get, GetPrefix, a Txn of kGet
// ops only, KeepAliveOnce, EndpointStatuses, a watch) is retried freely. A
// write (a Txn with a put or delete, GrantLease, RevokeLease, Compact) is
// sent to another endpoint only when the first cannot have applied it: the
// attempt never got a connection (nothing was sent), or etcd refused it
// before proposing it (no leader, too many requests). Any other failure
// after the request may have left (a broken connection, etcd's "request
// timed out", the deadline) returns UNAVAILABLE, or DEADLINE_EXCEEDED when
// the call's deadline passed, with Reason::kOutcomeUnknown and a message
// saying that the outcome is unknown: the caller re-reads (a Txn guarded by
// a Compare is safe to send again once it has). Two exceptions apply the
// same rule to effects that do no harm twice: a GrantLease that is sent
// again may leave an extra lease that expires after its TTL, and
// RevokeLease of a lease already gone answers NOT_FOUND.
//
// Errors. Each error names the endpoint it came from: "etcd HOST:PORT:
// <what>", with etcd's gRPC code (INVALID_ARGUMENT for a request etcd
// refuses as malformed or too large, NOT_FOUND for an unknown lease,
// OUT_OF_RANGE for a compacted revision, UNAVAILABLE for a member without a
// leader). When no endpoint answered before the deadline, the message
// names every endpoint with its last error.
//
// Thread safety: every method may be called from any thread at once. A
// Watch's callbacks run on its own thread, one at a time.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"

namespace rkv::etcd {

namespace internal {
class Channels;  // etcd_call.h
}  // namespace internal

using Deadline = std::chrono::steady_clock::time_point;

struct KeyValue {
  std::string key;
  std::string value;
  int64_t create_revision = 0;
  int64_t mod_revision = 0;
  int64_t version = 0;
  int64_t lease = 0;
};

struct RangeResult {
  std::vector<KeyValue> kvs;
  int64_t revision = 0;  // the store's revision (response header)
};

// One condition of a Txn. A key that does not exist has create_revision,
// mod_revision and version 0 (so "create_revision == 0" means "absent").
struct Compare {
  enum class Target { kCreateRevision, kModRevision, kVersion, kValue };
  enum class Result { kEqual, kNotEqual, kGreater, kLess };
  std::string key;
  Target target = Target::kCreateRevision;
  Result result = Result::kEqual;
  int64_t number = 0;  // for the revision/version targets
  std::string value;   // for kValue
};

struct Op {
  enum class Kind { kPut, kDelete, kGet };
  Kind kind = Kind::kPut;
  std::string key;
  std::string value;
  int64_t lease = 0;
  bool prefix = false;  // kDelete/kGet: every key starting with `key`
  static Op Put(std::string key, std::string value, int64_t lease = 0);
  static Op Delete(std::string key, bool prefix = false);
  static Op Get(std::string key, bool prefix = false);
};

struct TxnResult {
  bool succeeded = false;
  int64_t revision = 0;
  std::vector<RangeResult> gets;  // one per kGet op of the branch taken, in order
};

struct LeaseGrant {
  int64_t id = 0;
  int64_t ttl_s = 0;
};

struct EndpointStatus {
  std::string endpoint;
  Status health;  // OK when the endpoint answered; the rest is then filled in
  std::string version;
  uint64_t member_id = 0;
  uint64_t leader_id = 0;  // 0 when the member knows no leader
  int64_t raft_index = 0;
  int64_t revision = 0;
};

struct WatchEvent {
  enum class Type { kPut, kDelete };
  Type type;
  KeyValue kv;  // a delete's kv holds the key and the deleting revision (mod_revision)
};

class EtcdClient {
 public:
  struct Options {
    // The longest one attempt on one endpoint may take before the call
    // moves to the next (a stopped or partitioned member answers nothing).
    // A read's attempt also takes at most an even share of the time the
    // call has left for the endpoints not yet tried in its round.
    std::chrono::milliseconds attempt_timeout{2000};
  };

  // `endpoints`: "HOST:PORT" each (validated: INVALID_ARGUMENT naming the
  // bad one; at least one); no network I/O here.
  static StatusOr<std::unique_ptr<EtcdClient>> Create(std::vector<std::string> endpoints);
  static StatusOr<std::unique_ptr<EtcdClient>> Create(std::vector<std::string> endpoints, const Options& options);
  ~EtcdClient();
  EtcdClient(const EtcdClient&) = delete;
  EtcdClient& operator=(const EtcdClient&) = delete;

  const std::vector<std::string>& endpoints() const;

  // Linearizable reads. `kvs` is empty when nothing matches (not an error).
  StatusOr<RangeResult> Get(const std::string& key, Deadline deadline);
  StatusOr<RangeResult> GetPrefix(const std::string& prefix, Deadline deadline);  // sorted by key

  // If every compare holds, runs `success`, else `failure`, atomically.
  // `revision` is the store's revision after the txn. INVALID_ARGUMENT
  // (from etcd) when a branch puts or deletes the same key twice.
  StatusOr<TxnResult> Txn(const std::vector<Compare>& compares, const std::vector<Op>& success,
                          const std::vector<Op>& failure, Deadline deadline);

  // A new lease of about `ttl_s` seconds (etcd may raise it to its minimum,
  // about 2 s with default timing: the granted TTL is returned).
  StatusOr<LeaseGrant> GrantLease(int64_t ttl_s, Deadline deadline);
  // One keepalive round trip; the TTL left, in seconds; NOT_FOUND when the
  // lease has expired or was revoked.
  StatusOr<int64_t> KeepAliveOnce(int64_t lease_id, Deadline deadline);
  // Revokes the lease and deletes every key attached to it. NOT_FOUND when
  // the lease has expired or was revoked already.
  Status RevokeLease(int64_t lease_id, Deadline deadline);

  // Compacts the store's history up to `revision`: watches from before it
  // then fail with FAILED_PRECONDITION "compacted". OUT_OF_RANGE when the
  // store is compacted past `revision` already. A write (see above).
  Status Compact(int64_t revision, Deadline deadline);

  // Maintenance.Status of every endpoint, in the order of endpoints(),
  // asked at once (each answered or with its error in health). A member
  // that answers with alarms raised (e.g. NOSPACE) has them in health as
  // FAILED_PRECONDITION, its other fields filled in. Asked without the
  // require-leader mark: a member without a leader answers, leader_id 0.
  std::vector<EndpointStatus> EndpointStatuses(Deadline deadline);

  // Watches every key under `prefix` from `start_revision` (0: from now) on
  // a thread of its own until the returned object is destroyed (its
  // destructor cancels the stream and joins). `on_events` gets each batch
  // with the revision of the response header; `on_error` gets a stream
  // failure that the watch cannot hide: FAILED_PRECONDITION "compacted"
  // (with the compact revision in the message; the watch then ends: the
  // caller re-reads and watches again). Lost connections are retried
  // transparently with backoff (100 ms doubling to 1 s), resuming from the
  // last revision seen + 1, so no event is missed or repeated.
  //
  // Other errors that end the watch (after on_error): OUT_OF_RANGE when
  // `start_revision` is past the store's revision, INTERNAL when etcd sends
  // what it must not (an event outside the prefix, revisions going back),
  // and any refusal that trying again cannot cure (INVALID_ARGUMENT,
  // PERMISSION_DENIED, ...). After on_error neither callback runs again.
  // The callbacks must not destroy the Watch (its destructor joins their
  // thread). The Watch may outlive this client.
  class Watch {
   public:
    virtual ~Watch() = default;
  };
  std::unique_ptr<Watch> WatchPrefix(const std::string& prefix, int64_t start_revision,
                                     std::function<void(const std::vector<WatchEvent>&, int64_t revision)> on_events,
                                     std::function<void(const Status&)> on_error);

 private:
  explicit EtcdClient(std::shared_ptr<internal::Channels> channels);

  // Shared with every Watch this client started, which may outlive it.
  const std::shared_ptr<internal::Channels> channels_;
};

// The smallest key greater than every key starting with prefix (etcd's
// range_end for a prefix): the prefix with its last byte below 0xff
// incremented and what follows dropped; "\0" (every key) when there is none.
std::string PrefixEnd(const std::string& prefix);

}  // namespace rkv::etcd
