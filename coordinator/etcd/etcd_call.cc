#include "coordinator/etcd/etcd_call.h"

#include <algorithm>
#include <array>
#include <climits>
#include <thread>
#include <utility>

#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/support/channel_arguments.h>

#include "common/clock.h"

namespace rkv::etcd::internal {
namespace {

// etcd's require-leader metadata (its rpctypes.MetadataRequireLeaderKey):
// a member that knows no leader refuses the request with "no leader" before
// doing anything, and ends a watch stream when it loses its leader.
constexpr char kRequireLeaderKey[] = "hasleader";
constexpr char kRequireLeaderValue[] = "true";

// etcd's refusals that come before a request is proposed to raft, so a
// write refused with one was not applied and may go to another member.
// etcd spells its typed errors only as gRPC messages (its own Go client
// tells them apart by the same strings, rpctypes.ErrorDesc): this table is
// the one place that reads them.
constexpr std::array<std::string_view, 4> kNotAppliedRefusals = {
    "etcdserver: no leader",
    "etcdserver: not leader",
    "etcdserver: too many requests",
    "etcdserver: not capable",
};

// Between two rounds in which every endpoint failed (an election takes
// about a second with etcd's default timing).
constexpr std::chrono::milliseconds kFirstRoundBackoff{50};
constexpr std::chrono::milliseconds kMaxRoundBackoff{500};

bool IsNotAppliedRefusal(const grpc::Status& status) {
  const std::string& message = status.error_message();
  return std::find(kNotAppliedRefusals.begin(), kNotAppliedRefusals.end(), message) != kNotAppliedRefusals.end();
}

// What the failover loop does after a failed attempt.
enum class Next {
  kReturn,     // the answer is final (etcd refused the request itself)
  kTryNext,    // nothing was applied, or the call only reads: try another endpoint
  kAmbiguous,  // a write may have been applied: report the outcome unknown
};

Next Classify(const grpc::Status& status, CallKind kind) {
  switch (status.error_code()) {
    case grpc::StatusCode::UNAVAILABLE:
    case grpc::StatusCode::DEADLINE_EXCEEDED:
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
    case grpc::StatusCode::CANCELLED:
      break;
    default:
      return Next::kReturn;
  }
  if (IsNotAppliedRefusal(status)) return Next::kTryNext;
  // RESOURCE_EXHAUSTED but "too many requests" is gRPC's own (a message
  // over a size limit): final.
  if (status.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) return Next::kReturn;
  return kind == CallKind::kRead ? Next::kTryNext : Next::kAmbiguous;
}

const char* StateName(grpc_connectivity_state state) {
  switch (state) {
    case GRPC_CHANNEL_IDLE: return "idle";
    case GRPC_CHANNEL_CONNECTING: return "connecting";
    case GRPC_CHANNEL_READY: return "ready";
    case GRPC_CHANNEL_TRANSIENT_FAILURE: return "connection failed";
    case GRPC_CHANNEL_SHUTDOWN: return "shut down";
  }
  return "unknown state";
}

std::string Describe(const grpc::Status& status) {
  std::string out(StatusCodeName(static_cast<StatusCode>(status.error_code())));
  if (!status.error_message().empty()) out += ": " + status.error_message();
  return out;
}

}  // namespace

Channels::Channels(std::vector<std::string> endpoints, EtcdClient::Options options)
    : endpoints_(std::move(endpoints)), options_(options), channels_(endpoints_.size()) {}

std::shared_ptr<grpc::Channel> Channels::Get(size_t i) {
  MutexLock lock(mu_);
  if (channels_[i] == nullptr) {
    grpc::ChannelArguments args;
    // Responses hold whole prefixes (the coordinator's state): no limit
    // below etcd's own.
    args.SetInt(GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH, INT_MAX);
    // A member that comes back is reconnected within a second, not after
    // gRPC's default backoff of up to two minutes.
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
    args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
    // A watch on a member that stopped answering (frozen, cut off) is seen
    // dead within 15 s. etcd refuses pings more often than every 5 s
    // (--grpc-keepalive-min-time) and pings without a call in flight.
    args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 10000);
    args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 5000);
    args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 0);
    // This client's connections are its own, so that failover and
    // keepalive of two clients never interfere.
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    channels_[i] = grpc::CreateCustomChannel(endpoints_[i], grpc::InsecureChannelCredentials(), args);
  }
  return channels_[i];
}

size_t Channels::preferred() const {
  MutexLock lock(mu_);
  return preferred_;
}

void Channels::Prefer(size_t i) {
  MutexLock lock(mu_);
  preferred_ = i;
}

void Channels::Demote(size_t i) {
  MutexLock lock(mu_);
  if (preferred_ == i) preferred_ = (i + 1) % endpoints_.size();
}

void Channels::Replace(size_t i, const std::shared_ptr<grpc::Channel>& failed) {
  MutexLock lock(mu_);
  if (channels_[i] == failed) channels_[i] = nullptr;
}

std::shared_ptr<grpc::Channel> Channels::Connected(size_t i, Deadline deadline, std::string* why) {
  std::shared_ptr<grpc::Channel> channel = Get(i);
  grpc_connectivity_state state = channel->GetState(/*try_to_connect=*/true);
  while (state != GRPC_CHANNEL_READY) {
    if (state == GRPC_CHANNEL_TRANSIENT_FAILURE || state == GRPC_CHANNEL_SHUTDOWN) {
      Replace(i, channel);
      *why = std::string("not connected (") + StateName(state) + ")";
      return nullptr;
    }
    if (std::chrono::steady_clock::now() >= deadline ||
        !channel->WaitForStateChange(state, SystemDeadline(deadline))) {
      *why = std::string("not connected before the attempt's deadline (") + StateName(state) + ")";
      return nullptr;
    }
    state = channel->GetState(/*try_to_connect=*/true);
  }
  return channel;
}

void PrepareContext(grpc::ClientContext& context, Deadline deadline, bool require_leader) {
  context.set_deadline(SystemDeadline(deadline));
  if (require_leader) RequireLeader(context);
}

void RequireLeader(grpc::ClientContext& context) { context.AddMetadata(kRequireLeaderKey, kRequireLeaderValue); }

Status EndpointError(const std::string& endpoint, StatusCode code, std::string_view what) {
  return Status(code, "etcd " + endpoint + ": " + std::string(what));
}

Status EndpointError(const std::string& endpoint, const grpc::Status& status) {
  const auto code = static_cast<StatusCode>(status.error_code());
  return EndpointError(endpoint, IsValidStatusCode(static_cast<int32_t>(code)) ? code : StatusCode::kUnknown,
                       status.error_message());
}

Status CallWithFailover(Channels& channels, std::string_view what, CallKind kind, Deadline deadline,
                        const Attempt& attempt, size_t* answered_by) {
  const size_t n = channels.size();
  std::vector<std::string> last_error(n, "not tried before the deadline");
  bool tried = false;
  std::chrono::milliseconds backoff = kFirstRoundBackoff;
  while (std::chrono::steady_clock::now() < deadline) {
    const size_t first = channels.preferred();
    for (size_t k = 0; k < n; ++k) {
      const size_t i = (first + k) % n;
      const std::string& endpoint = channels.endpoints()[i];
      const auto now = std::chrono::steady_clock::now();
      if (now >= deadline) break;
      Deadline attempt_deadline = std::min(deadline, now + channels.options().attempt_timeout);
      // A read goes on to the next endpoint when this one fails: one that
      // does not answer at all (a frozen member) takes at most an even
      // share of what is left for this round, so that the others are
      // still tried within the call (a keepalive of the election lease
      // must reach a live member before the lease runs out).
      if (kind == CallKind::kRead && k + 1 < n) {
        attempt_deadline = std::min(attempt_deadline, now + (deadline - now) / static_cast<int>(n - k));
      }
      tried = true;
      std::shared_ptr<grpc::Channel> channel = channels.Connected(i, attempt_deadline, &last_error[i]);
      if (channel == nullptr) {
        channels.Demote(i);
        continue;
      }
      grpc::ClientContext context;
      PrepareContext(context, attempt_deadline);
      const grpc::Status status = attempt(channel, context);
      if (status.ok()) {
        channels.Prefer(i);
        if (answered_by != nullptr) *answered_by = i;
        return Status::Ok();
      }
      switch (Classify(status, kind)) {
        case Next::kReturn:
          channels.Prefer(i);  // etcd answered, with a refusal of its own
          return EndpointError(endpoint, status);
        case Next::kTryNext:
          last_error[i] = Describe(status);
          channels.Demote(i);
          continue;
        case Next::kAmbiguous: {
          channels.Demote(i);
          const bool expired = std::chrono::steady_clock::now() >= deadline;
          return Status(expired ? StatusCode::kDeadlineExceeded : StatusCode::kUnavailable,
                        "etcd " + endpoint + ": " + Describe(status) + "; the " + std::string(what) +
                            " was sent and its outcome is unknown (it may or may not have been applied)",
                        Reason::kOutcomeUnknown);
        }
      }
    }
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) break;
    std::this_thread::sleep_for(std::min<Deadline::duration>(backoff, deadline - now));
    backoff = std::min(backoff * 2, kMaxRoundBackoff);
  }
  const StatusCode code = tried ? StatusCode::kUnavailable : StatusCode::kDeadlineExceeded;
  if (n == 1) {
    return EndpointError(channels.endpoints()[0], code, std::string(what) + ": " + last_error[0]);
  }
  std::string message = "etcd: " + std::string(what) + ": every endpoint failed before the deadline (";
  for (size_t i = 0; i < n; ++i) {
    if (i > 0) message += "; ";
    message += channels.endpoints()[i] + ": " + last_error[i];
  }
  message += ")";
  return Status(code, std::move(message));
}

std::string PrefixKey(const std::string& prefix) { return prefix.empty() ? std::string(1, '\0') : prefix; }

KeyValue FromProto(const mvccpb::KeyValue& kv) {
  KeyValue out;
  out.key = kv.key();
  out.value = kv.value();
  out.create_revision = kv.create_revision();
  out.mod_revision = kv.mod_revision();
  out.version = kv.version();
  out.lease = kv.lease();
  return out;
}

}  // namespace rkv::etcd::internal
