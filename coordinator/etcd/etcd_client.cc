// EtcdClient's unary calls: reads, transactions, leases, compaction and the
// members' status. The failover loop is etcd_call.cc's, the watch
// etcd_watch.cc's.
#include "coordinator/etcd/etcd_client.h"

#include <cstdint>
#include <string>
#include <string_view>
#include <thread>
#include <utility>

#include <etcd/etcdserver/etcdserverpb/rpc.grpc.pb.h>
#include <grpcpp/client_context.h>

#include "common/net_address.h"
#include "coordinator/etcd/etcd_call.h"

namespace rkv::etcd {
namespace {

using internal::CallKind;
using internal::CallWithFailover;
using internal::EndpointError;
using internal::PrefixKey;

// What a range asked for, to check what came back against.
struct RangeAsked {
  std::string key;
  bool prefix = false;
};

// Checks a range's answer against what was asked (keys in the range, in
// order, nothing left out) and converts it. INTERNAL names the endpoint.
StatusOr<RangeResult> ToRangeResult(const std::string& endpoint, const RangeAsked& asked,
                                    const etcdserverpb::RangeResponse& response, int64_t revision) {
  if (response.more()) return EndpointError(endpoint, StatusCode::kInternal, "a range without a limit came back partial");
  if (!asked.prefix && response.kvs_size() > 1) {
    return EndpointError(endpoint, StatusCode::kInternal,
                         "a single key's range came back with " + std::to_string(response.kvs_size()) + " keys");
  }
  RangeResult out;
  out.revision = revision;
  out.kvs.reserve(response.kvs_size());
  for (const mvccpb::KeyValue& kv : response.kvs()) {
    const bool in_range = asked.prefix ? std::string_view(kv.key()).starts_with(asked.key) : kv.key() == asked.key;
    if (!in_range) {
      return EndpointError(endpoint, StatusCode::kInternal, "a range over \"" + asked.key + "\" returned key \"" +
                                                                kv.key() + "\"");
    }
    if (!out.kvs.empty() && !(out.kvs.back().key < kv.key())) {
      return EndpointError(endpoint, StatusCode::kInternal, "a range's keys came back out of order");
    }
    if (kv.create_revision() <= 0 || kv.mod_revision() < kv.create_revision() || kv.mod_revision() > revision ||
        kv.version() <= 0) {
      return EndpointError(endpoint, StatusCode::kInternal, "key \"" + kv.key() + "\" came back with revisions " +
                                                                std::to_string(kv.create_revision()) + "/" +
                                                                std::to_string(kv.mod_revision()) + " at store revision " +
                                                                std::to_string(revision));
    }
    out.kvs.push_back(internal::FromProto(kv));
  }
  return out;
}

void FillRange(const RangeAsked& asked, etcdserverpb::RangeRequest* request) {
  if (asked.prefix) {
    request->set_key(PrefixKey(asked.key));
    request->set_range_end(PrefixEnd(asked.key));
    request->set_sort_order(etcdserverpb::RangeRequest::ASCEND);
    request->set_sort_target(etcdserverpb::RangeRequest::KEY);
  } else {
    request->set_key(asked.key);
  }
  request->set_serializable(false);  // linearizable
}

void ToProto(const Op& op, etcdserverpb::RequestOp* out) {
  switch (op.kind) {
    case Op::Kind::kPut: {
      etcdserverpb::PutRequest* put = out->mutable_request_put();
      put->set_key(op.key);
      put->set_value(op.value);
      put->set_lease(op.lease);
      return;
    }
    case Op::Kind::kDelete: {
      etcdserverpb::DeleteRangeRequest* del = out->mutable_request_delete_range();
      if (op.prefix) {
        del->set_key(PrefixKey(op.key));
        del->set_range_end(PrefixEnd(op.key));
      } else {
        del->set_key(op.key);
      }
      return;
    }
    case Op::Kind::kGet:
      FillRange(RangeAsked{op.key, op.prefix}, out->mutable_request_range());
      return;
  }
}

void ToProto(const Compare& compare, etcdserverpb::Compare* out) {
  out->set_key(compare.key);
  switch (compare.target) {
    case Compare::Target::kCreateRevision:
      out->set_target(etcdserverpb::Compare::CREATE);
      out->set_create_revision(compare.number);
      break;
    case Compare::Target::kModRevision:
      out->set_target(etcdserverpb::Compare::MOD);
      out->set_mod_revision(compare.number);
      break;
    case Compare::Target::kVersion:
      out->set_target(etcdserverpb::Compare::VERSION);
      out->set_version(compare.number);
      break;
    case Compare::Target::kValue:
      out->set_target(etcdserverpb::Compare::VALUE);
      out->set_value(compare.value);
      break;
  }
  switch (compare.result) {
    case Compare::Result::kEqual: out->set_result(etcdserverpb::Compare::EQUAL); break;
    case Compare::Result::kNotEqual: out->set_result(etcdserverpb::Compare::NOT_EQUAL); break;
    case Compare::Result::kGreater: out->set_result(etcdserverpb::Compare::GREATER); break;
    case Compare::Result::kLess: out->set_result(etcdserverpb::Compare::LESS); break;
  }
}

bool Writes(const std::vector<Op>& ops) {
  for (const Op& op : ops) {
    if (op.kind != Op::Kind::kGet) return true;
  }
  return false;
}

// Checks a txn's answer against the branch it took and collects its gets.
StatusOr<TxnResult> ToTxnResult(const std::string& endpoint, const etcdserverpb::TxnResponse& response,
                                const std::vector<Op>& success, const std::vector<Op>& failure) {
  if (!response.has_header() || response.header().revision() <= 0) {
    return EndpointError(endpoint, StatusCode::kInternal, "a Txn answer without the store's revision");
  }
  const std::vector<Op>& branch = response.succeeded() ? success : failure;
  if (static_cast<size_t>(response.responses_size()) != branch.size()) {
    return EndpointError(endpoint, StatusCode::kInternal,
                         "a Txn answer with " + std::to_string(response.responses_size()) + " results for " +
                             std::to_string(branch.size()) + " ops");
  }
  TxnResult out;
  out.succeeded = response.succeeded();
  out.revision = response.header().revision();
  for (size_t i = 0; i < branch.size(); ++i) {
    const etcdserverpb::ResponseOp& result = response.responses(static_cast<int>(i));
    const Op& op = branch[i];
    etcdserverpb::ResponseOp::ResponseCase expected = etcdserverpb::ResponseOp::kResponsePut;
    if (op.kind == Op::Kind::kDelete) expected = etcdserverpb::ResponseOp::kResponseDeleteRange;
    if (op.kind == Op::Kind::kGet) expected = etcdserverpb::ResponseOp::kResponseRange;
    if (result.response_case() != expected) {
      return EndpointError(endpoint, StatusCode::kInternal,
                           "a Txn answer's result " + std::to_string(i) + " is not of its op's kind");
    }
    if (op.kind == Op::Kind::kGet) {
      StatusOr<RangeResult> range =
          ToRangeResult(endpoint, RangeAsked{op.key, op.prefix}, result.response_range(), out.revision);
      if (!range.ok()) return range.status();
      out.gets.push_back(std::move(range).value());
    }
  }
  return out;
}

}  // namespace

Op Op::Put(std::string key, std::string value, int64_t lease) {
  Op op;
  op.kind = Kind::kPut;
  op.key = std::move(key);
  op.value = std::move(value);
  op.lease = lease;
  return op;
}

Op Op::Delete(std::string key, bool prefix) {
  Op op;
  op.kind = Kind::kDelete;
  op.key = std::move(key);
  op.prefix = prefix;
  return op;
}

Op Op::Get(std::string key, bool prefix) {
  Op op;
  op.kind = Kind::kGet;
  op.key = std::move(key);
  op.prefix = prefix;
  return op;
}

std::string PrefixEnd(const std::string& prefix) {
  std::string end = prefix;
  while (!end.empty()) {
    auto& last = reinterpret_cast<unsigned char&>(end.back());
    if (last < 0xff) {
      ++last;
      return end;
    }
    end.pop_back();
  }
  return std::string(1, '\0');
}

StatusOr<std::unique_ptr<EtcdClient>> EtcdClient::Create(std::vector<std::string> endpoints) {
  return Create(std::move(endpoints), Options());
}

StatusOr<std::unique_ptr<EtcdClient>> EtcdClient::Create(std::vector<std::string> endpoints,
                                                         const Options& options) {
  if (endpoints.empty()) return InvalidArgument("etcd: no endpoint given");
  for (const std::string& endpoint : endpoints) {
    std::string host;
    uint16_t port = 0;
    Status parsed = ParseHostPort(endpoint, &host, &port);
    if (!parsed.ok()) return InvalidArgument("etcd endpoint \"" + endpoint + "\": " + parsed.message());
    if (host.empty()) return InvalidArgument("etcd endpoint \"" + endpoint + "\": no host");
    if (port == 0) return InvalidArgument("etcd endpoint \"" + endpoint + "\": port 0");
  }
  if (options.attempt_timeout <= std::chrono::milliseconds::zero()) {
    return InvalidArgument("etcd: attempt_timeout must be positive");
  }
  return std::unique_ptr<EtcdClient>(
      new EtcdClient(std::make_shared<internal::Channels>(std::move(endpoints), options)));
}

EtcdClient::EtcdClient(std::shared_ptr<internal::Channels> channels) : channels_(std::move(channels)) {}

EtcdClient::~EtcdClient() = default;

const std::vector<std::string>& EtcdClient::endpoints() const { return channels_->endpoints(); }

StatusOr<RangeResult> EtcdClient::Get(const std::string& key, Deadline deadline) {
  std::vector<Op> get = {Op::Get(key)};
  StatusOr<TxnResult> txn = Txn({}, get, {}, deadline);
  if (!txn.ok()) return txn.status();
  return std::move(txn->gets[0]);
}

StatusOr<RangeResult> EtcdClient::GetPrefix(const std::string& prefix, Deadline deadline) {
  const RangeAsked asked{prefix, /*prefix=*/true};
  etcdserverpb::RangeRequest request;
  FillRange(asked, &request);
  etcdserverpb::RangeResponse response;
  size_t answered_by = 0;
  RKV_RETURN_IF_ERROR(CallWithFailover(
      *channels_, "Range", CallKind::kRead, deadline,
      [&](const std::shared_ptr<grpc::Channel>& channel, grpc::ClientContext& context) {
        response.Clear();
        return etcdserverpb::KV::NewStub(channel)->Range(&context, request, &response);
      },
      &answered_by));
  const std::string& endpoint = endpoints()[answered_by];
  if (!response.has_header() || response.header().revision() <= 0) {
    return EndpointError(endpoint, StatusCode::kInternal, "a Range answer without the store's revision");
  }
  return ToRangeResult(endpoint, asked, response, response.header().revision());
}

StatusOr<TxnResult> EtcdClient::Txn(const std::vector<Compare>& compares, const std::vector<Op>& success,
                                    const std::vector<Op>& failure, Deadline deadline) {
  etcdserverpb::TxnRequest request;
  for (const Compare& compare : compares) ToProto(compare, request.add_compare());
  for (const Op& op : success) ToProto(op, request.add_success());
  for (const Op& op : failure) ToProto(op, request.add_failure());
  const CallKind kind = Writes(success) || Writes(failure) ? CallKind::kWrite : CallKind::kRead;
  etcdserverpb::TxnResponse response;
  size_t answered_by = 0;
  RKV_RETURN_IF_ERROR(CallWithFailover(
      *channels_, "Txn", kind, deadline,
      [&](const std::shared_ptr<grpc::Channel>& channel, grpc::ClientContext& context) {
        response.Clear();
        return etcdserverpb::KV::NewStub(channel)->Txn(&context, request, &response);
      },
      &answered_by));
  return ToTxnResult(endpoints()[answered_by], response, success, failure);
}

StatusOr<LeaseGrant> EtcdClient::GrantLease(int64_t ttl_s, Deadline deadline) {
  if (ttl_s <= 0) return InvalidArgument("etcd: a lease's TTL must be positive, not " + std::to_string(ttl_s));
  etcdserverpb::LeaseGrantRequest request;
  request.set_ttl(ttl_s);
  etcdserverpb::LeaseGrantResponse response;
  size_t answered_by = 0;
  // Sent again like a read: a grant whose answer was lost leaves a lease
  // nobody keeps alive, which expires after its TTL (etcd_client.h).
  RKV_RETURN_IF_ERROR(CallWithFailover(
      *channels_, "LeaseGrant", CallKind::kRead, deadline,
      [&](const std::shared_ptr<grpc::Channel>& channel, grpc::ClientContext& context) {
        response.Clear();
        return etcdserverpb::Lease::NewStub(channel)->LeaseGrant(&context, request, &response);
      },
      &answered_by));
  const std::string& endpoint = endpoints()[answered_by];
  if (!response.error().empty()) return EndpointError(endpoint, StatusCode::kUnavailable, response.error());
  if (response.id() == 0 || response.ttl() <= 0) {
    return EndpointError(endpoint, StatusCode::kInternal,
                         "LeaseGrant answered lease " + std::to_string(response.id()) + " with TTL " +
                             std::to_string(response.ttl()));
  }
  return LeaseGrant{response.id(), response.ttl()};
}

StatusOr<int64_t> EtcdClient::KeepAliveOnce(int64_t lease_id, Deadline deadline) {
  etcdserverpb::LeaseKeepAliveRequest request;
  request.set_id(lease_id);
  etcdserverpb::LeaseKeepAliveResponse response;
  size_t answered_by = 0;
  // A keepalive only extends what exists: sent again freely. One stream
  // per call, closed after its one answer.
  RKV_RETURN_IF_ERROR(CallWithFailover(
      *channels_, "LeaseKeepAlive", CallKind::kRead, deadline,
      [&](const std::shared_ptr<grpc::Channel>& channel, grpc::ClientContext& context) {
        response.Clear();
        auto stream = etcdserverpb::Lease::NewStub(channel)->LeaseKeepAlive(&context);
        const bool written = stream->Write(request) && stream->WritesDone();
        const bool answered = written && stream->Read(&response);
        grpc::Status status = stream->Finish();
        if (status.ok() && !answered) {
          return grpc::Status(grpc::StatusCode::UNAVAILABLE, "the keepalive stream ended without an answer");
        }
        return status;
      },
      &answered_by));
  const std::string& endpoint = endpoints()[answered_by];
  if (response.id() != lease_id) {
    return EndpointError(endpoint, StatusCode::kInternal,
                         "a keepalive of lease " + std::to_string(lease_id) + " answered for lease " +
                             std::to_string(response.id()));
  }
  if (response.ttl() <= 0) {
    return EndpointError(endpoint, StatusCode::kNotFound,
                         "lease " + std::to_string(lease_id) + " has expired or was revoked");
  }
  return response.ttl();
}

Status EtcdClient::RevokeLease(int64_t lease_id, Deadline deadline) {
  etcdserverpb::LeaseRevokeRequest request;
  request.set_id(lease_id);
  etcdserverpb::LeaseRevokeResponse response;
  // Sent again like a read: a second revoke of a lease the first one
  // removed answers NOT_FOUND, which is also the truth (etcd_client.h).
  return CallWithFailover(*channels_, "LeaseRevoke", CallKind::kRead, deadline,
                          [&](const std::shared_ptr<grpc::Channel>& channel, grpc::ClientContext& context) {
                            response.Clear();
                            return etcdserverpb::Lease::NewStub(channel)->LeaseRevoke(&context, request, &response);
                          });
}

Status EtcdClient::Compact(int64_t revision, Deadline deadline) {
  if (revision <= 0) return InvalidArgument("etcd: compact revision must be positive, not " + std::to_string(revision));
  etcdserverpb::CompactionRequest request;
  request.set_revision(revision);
  etcdserverpb::CompactionResponse response;
  return CallWithFailover(*channels_, "Compact", CallKind::kWrite, deadline,
                          [&](const std::shared_ptr<grpc::Channel>& channel, grpc::ClientContext& context) {
                            response.Clear();
                            return etcdserverpb::KV::NewStub(channel)->Compact(&context, request, &response);
                          });
}

std::vector<EndpointStatus> EtcdClient::EndpointStatuses(Deadline deadline) {
  std::vector<EndpointStatus> out(endpoints().size());
  auto ask = [&](size_t i) {
    EndpointStatus& status = out[i];
    status.endpoint = endpoints()[i];
    std::string why;
    std::shared_ptr<grpc::Channel> channel = channels_->Connected(i, deadline, &why);
    if (channel == nullptr) {
      status.health = EndpointError(status.endpoint, StatusCode::kUnavailable, why);
      return;
    }
    // Without etcd's require-leader mark: a member that knows no leader is
    // what this call is asked to show.
    grpc::ClientContext context;
    internal::PrepareContext(context, deadline, /*require_leader=*/false);
    etcdserverpb::StatusResponse response;
    const grpc::Status rpc =
        etcdserverpb::Maintenance::NewStub(channel)->Status(&context, etcdserverpb::StatusRequest(), &response);
    if (!rpc.ok()) {
      status.health = EndpointError(status.endpoint, rpc);
      return;
    }
    status.version = response.version();
    status.member_id = response.header().member_id();
    status.leader_id = response.leader();
    status.raft_index = static_cast<int64_t>(response.raftindex());
    status.revision = response.header().revision();
    if (response.errors_size() > 0) {
      std::string errors;
      for (const std::string& error : response.errors()) errors += (errors.empty() ? "" : "; ") + error;
      status.health = EndpointError(status.endpoint, StatusCode::kFailedPrecondition, errors);
    } else if (status.version.empty() || status.member_id == 0) {
      status.health = EndpointError(status.endpoint, StatusCode::kInternal, "Status answered without version or member id");
    }
  };
  std::vector<std::thread> threads;
  threads.reserve(out.size());
  for (size_t i = 0; i < out.size(); ++i) threads.emplace_back(ask, i);
  for (std::thread& thread : threads) thread.join();
  return out;
}

}  // namespace rkv::etcd
