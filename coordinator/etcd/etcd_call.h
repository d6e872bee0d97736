// What every EtcdClient call and watch shares (internal to rkv_etcd): the
// channels to the endpoints, the failover loop of one call, and the
// conversions of etcd's answers. The rules it implements are stated once,
// in etcd_client.h.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <etcd/mvcc/mvccpb/kv.pb.h>
#include <grpcpp/channel.h>
#include <grpcpp/client_context.h>
#include <grpcpp/support/status.h>

#include "common/mutex.h"
#include "common/status.h"
#include "coordinator/etcd/etcd_client.h"

namespace rkv::etcd::internal {

// The endpoints, one lazily made channel each, and which one to try first.
//
// Thread safety: every method may be called from any thread.
// Invariants: channels_.size() == endpoints_.size(); preferred_ < that size.
class Channels {
 public:
  Channels(std::vector<std::string> endpoints, EtcdClient::Options options);

  const std::vector<std::string>& endpoints() const { return endpoints_; }
  size_t size() const { return endpoints_.size(); }
  const EtcdClient::Options& options() const { return options_; }

  // The channel of endpoint `i` once it is connected, or null (with why in
  // `*why`) when its connection failed or is still being made at
  // `deadline`: then no request went out on it. A channel whose connection
  // failed is replaced, so that the next call starts a fresh connection
  // (gRPC keeps a failed channel in its failure state until a request
  // makes it try again, and this client sends none to an unconnected one).
  std::shared_ptr<grpc::Channel> Connected(size_t i, Deadline deadline, std::string* why) EXCLUDES(mu_);
  // The endpoint to try first: the one that last answered.
  size_t preferred() const EXCLUDES(mu_);
  // Endpoint `i` answered: try it first from now on.
  void Prefer(size_t i) EXCLUDES(mu_);
  // Endpoint `i` failed: when it is the one tried first, the next one is.
  void Demote(size_t i) EXCLUDES(mu_);

 private:
  // The channel of endpoint `i`, made on first use.
  std::shared_ptr<grpc::Channel> Get(size_t i) EXCLUDES(mu_);
  // Drops `failed` as endpoint `i`'s channel (unless already replaced).
  void Replace(size_t i, const std::shared_ptr<grpc::Channel>& failed) EXCLUDES(mu_);

  const std::vector<std::string> endpoints_;
  const EtcdClient::Options options_;
  mutable Mutex mu_;
  std::vector<std::shared_ptr<grpc::Channel>> channels_ GUARDED_BY(mu_);
  size_t preferred_ GUARDED_BY(mu_) = 0;
};

// Whether a call may have changed etcd's state, which decides what may be
// sent again after a failure (etcd_client.h, "Reads and writes").
enum class CallKind { kRead, kWrite };

// One attempt of a call on one endpoint: sends the request on `channel`
// with `context` (its deadline and metadata already set) and keeps the
// answer; returns gRPC's status of the exchange.
using Attempt = std::function<grpc::Status(const std::shared_ptr<grpc::Channel>& channel,
                                           grpc::ClientContext& context)>;

// Runs `attempt` on the endpoints, the preferred one first, until one
// answers, the answer is final, or `deadline` passes (etcd_client.h states
// the rules). `what` names the call in messages ("Txn"). Returns OK when
// an attempt succeeded; its endpoint's index goes to `*answered_by` when
// not null. Otherwise the error, in the form etcd_client.h gives.
Status CallWithFailover(Channels& channels, std::string_view what, CallKind kind, Deadline deadline,
                        const Attempt& attempt, size_t* answered_by = nullptr);

// Sets `context`'s deadline and, unless told not to, etcd's require-leader
// mark (a member that knows no leader then refuses at once).
void PrepareContext(grpc::ClientContext& context, Deadline deadline, bool require_leader = true);
// Sets etcd's require-leader mark alone (a watch stream has no deadline;
// etcd ends it when its member loses the leader).
void RequireLeader(grpc::ClientContext& context);

// "etcd HOST:PORT: <message>" with gRPC's code.
Status EndpointError(const std::string& endpoint, const grpc::Status& status);
Status EndpointError(const std::string& endpoint, StatusCode code, std::string_view what);

// The key of a range over every key starting with `prefix` ("\0" for the
// empty prefix: etcd's "every key").
std::string PrefixKey(const std::string& prefix);

KeyValue FromProto(const mvccpb::KeyValue& kv);

}  // namespace rkv::etcd::internal
