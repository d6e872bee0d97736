#include "bench/leader_failover/probes.h"

#include <algorithm>
#include <thread>
#include <utility>

#include <grpcpp/client_context.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>

#include "proto/auth.h"
#include "proto/rkv.grpc.pb.h"

namespace rkv::bench {

StatusOr<std::unique_ptr<FailoverProbes>> FailoverProbes::Create(const std::vector<std::string>& endpoints,
                                                                 const std::string& prefix,
                                                                 const std::string& token) {
  auto etcd = etcd::EtcdClient::Create(endpoints);
  if (!etcd.ok()) return etcd.status();
  std::unique_ptr<FailoverProbes> p(new FailoverProbes());
  p->prefix_ = prefix;
  p->token_ = token;
  p->etcd_ = std::move(etcd).value();
  const std::string meta = prefix + "meta";
  FailoverProbes* self = p.get();
  p->watch_ = p->etcd_->WatchPrefix(
      prefix, 0,
      [self, meta](const std::vector<etcd::WatchEvent>& events, int64_t) {
        const auto now = Clock::now();
        MutexLock lock(self->mu_);
        for (const etcd::WatchEvent& e : events) {
          if (e.type == etcd::WatchEvent::Type::kPut && e.kv.key == meta) {
            self->commits_.push_back({e.kv.mod_revision, now});
          }
        }
      },
      [self](const Status& s) {
        MutexLock lock(self->mu_);
        self->watch_error_ = s.ToString();
      });
  return p;
}

StatusOr<etcd::KeyValue> FailoverProbes::ReadLeader(std::chrono::milliseconds timeout) {
  auto r = etcd_->Get(prefix_ + "leader", Clock::now() + timeout);
  if (!r.ok()) return r.status();
  if (r->kvs.empty()) return etcd::KeyValue{};
  return r->kvs.front();
}

StatusOr<FailoverProbes::Seen> FailoverProbes::WaitForLeaderOtherThan(const std::string& old_address,
                                                                      std::chrono::milliseconds poll,
                                                                      std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  Status last = Status::Ok();
  while (Clock::now() < deadline) {
    const auto next = Clock::now() + poll;
    auto key = ReadLeader(std::chrono::milliseconds(1000));
    const auto at = Clock::now();
    if (key.ok() && !key->value.empty() && key->value != old_address) return Seen{*key, at};
    if (!key.ok()) last = key.status();
    std::this_thread::sleep_until(next);
  }
  return DeadlineExceeded("no coordinator other than " + old_address + " led within " +
                          std::to_string(timeout.count()) + " ms" + (last.ok() ? "" : "; last read: " + last.ToString()));
}

StatusOr<FailoverProbes::Answer> FailoverProbes::WaitForRenewLease(const std::vector<std::string>& candidates,
                                                                   std::chrono::milliseconds poll,
                                                                   std::chrono::milliseconds timeout) {
  std::vector<std::unique_ptr<v1::Coordinator::Stub>> stubs;
  for (const std::string& address : candidates) {
    stubs.push_back(v1::Coordinator::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials())));
  }
  const auto call_timeout = std::max(std::chrono::milliseconds(100), poll * 20);
  const auto deadline = Clock::now() + timeout;
  std::string last;
  while (Clock::now() < deadline) {
    const auto next = Clock::now() + poll;
    for (size_t i = 0; i < stubs.size(); ++i) {
      grpc::ClientContext context;
      context.set_deadline(std::chrono::system_clock::now() + call_timeout);
      control::AttachToken(&context, token_);
      v1::RenewLeaseRequest request;
      request.set_map_version(0);
      v1::RenewLeaseResponse response;
      const grpc::Status s = stubs[i]->RenewLease(&context, request, &response);
      if (s.ok()) return Answer{i, Clock::now()};
      last = candidates[i] + ": " + s.error_message();
    }
    std::this_thread::sleep_until(next);
  }
  return DeadlineExceeded("no coordinator answered RenewLease within " + std::to_string(timeout.count()) +
                          " ms; last refusal: " + last);
}

std::optional<Clock::time_point> FailoverProbes::FirstCommitAfter(int64_t revision) const {
  MutexLock lock(mu_);
  for (const Commit& c : commits_) {
    if (c.revision > revision) return c.seen;
  }
  return std::nullopt;
}

std::string FailoverProbes::watch_error() const {
  MutexLock lock(mu_);
  return watch_error_;
}

}  // namespace rkv::bench
