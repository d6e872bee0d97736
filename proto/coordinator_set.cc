#include "proto/coordinator_set.h"

#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/support/channel_arguments.h>

#include <algorithm>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "proto/auth.h"
#include "proto/grpc_status.h"
#include "proto/validation.h"

namespace rkv::control {
namespace {


std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

const char* StateName(grpc_connectivity_state state) {
  switch (state) {
    case GRPC_CHANNEL_IDLE:
      return "IDLE";
    case GRPC_CHANNEL_CONNECTING:
      return "CONNECTING";
    case GRPC_CHANNEL_READY:
      return "READY";
    case GRPC_CHANNEL_TRANSIENT_FAILURE:
      return "TRANSIENT_FAILURE";
    case GRPC_CHANNEL_SHUTDOWN:
      return "SHUTDOWN";
  }
  return "UNKNOWN";
}

// The end of an attempt that starts now with `left` coordinators (this one
// included) still to try before `deadline`.
CoordinatorSet::Deadline AttemptDeadline(CoordinatorSet::Deadline deadline, size_t left) {
  if (left <= 1) return deadline;
  const auto now = CoordinatorSet::Clock::now();
  const auto share = std::clamp<CoordinatorSet::Clock::duration>(
      (deadline - now) / static_cast<int64_t>(left), CoordinatorSet::kMinAttempt, CoordinatorSet::kMaxAttempt);
  return std::min(deadline, now + share);
}

// True when `channel`'s connection is gone after a call failed on it. A
// failed write closes the transport at once, but the channel may report
// READY a moment longer: give it kBrokenSettle to leave READY.
bool ConnectionBroke(grpc::Channel& channel) {
  constexpr std::chrono::milliseconds kBrokenSettle{20};
  if (channel.GetState(/*try_to_connect=*/false) != GRPC_CHANNEL_READY) return true;
  channel.WaitForStateChange(GRPC_CHANNEL_READY, std::chrono::system_clock::now() + kBrokenSettle);
  return channel.GetState(/*try_to_connect=*/false) != GRPC_CHANNEL_READY;
}

int64_t Ms(CoordinatorSet::Clock::duration d) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(d).count();
}

}  // namespace

std::shared_ptr<grpc::Channel> MakeControlChannel(const std::string& address,
                                                 const std::shared_ptr<grpc::ChannelCredentials>& credentials) {
  grpc::ChannelArguments args;
  // Reconnect quickly once a restarted peer is back (gRPC's default
  // backoff grows to minutes).
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  // GRPC_ARG_MIN_RECONNECT_BACKOFF_MS stays at its default: gRPC uses it as
  // the least time one connection attempt (TCP + HTTP/2 handshake) is given,
  // so a small value makes connects fail spuriously on a loaded host.
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  return grpc::CreateCustomChannel(address, credentials != nullptr ? credentials : grpc::InsecureChannelCredentials(),
                                   args);
}

StatusOr<std::vector<std::string>> ParseCoordinatorList(std::string_view list) {
  const std::string whole = "coordinator list '" + Printable(list) + "'";
  if (Trim(list).empty()) return InvalidArgument("the coordinator list is empty");
  std::vector<std::string> out;
  std::set<std::string, std::less<>> seen;
  std::string_view rest = list;
  for (size_t position = 1;; ++position) {
    const size_t comma = rest.find(',');
    const std::string_view entry = Trim(rest.substr(0, comma));
    const std::string which = whole + ": entry " + std::to_string(position);
    if (entry.empty()) return InvalidArgument(which + " is empty");
    if (Status s = ValidateHostPort(entry); !s.ok()) return InvalidArgument(which + ": " + s.message());
    if (seen.insert(std::string(entry)).second) out.emplace_back(entry);
    if (out.size() > kMaxCoordinators) {
      return InvalidArgument(whole + " names more than " + std::to_string(kMaxCoordinators) + " coordinators");
    }
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  return out;
}

struct CoordinatorSet::Entry {
  Entry(std::string a, const std::shared_ptr<grpc::ChannelCredentials>& credentials)
      : address(std::move(a)), channel(MakeControlChannel(address, credentials)),
        stub(v1::Coordinator::NewStub(channel)) {}
  const std::string address;
  const std::shared_ptr<grpc::Channel> channel;
  const std::unique_ptr<v1::Coordinator::Stub> stub;
};

StatusOr<std::unique_ptr<CoordinatorSet>> CoordinatorSet::Create(std::string_view list, std::string_view token,
                                                                 const TlsFiles& tls, const TlsFileNames& names) {
  RKV_ASSIGN_OR_RETURN(std::vector<std::string> addresses, ParseCoordinatorList(list));
  RKV_ASSIGN_OR_RETURN(std::shared_ptr<grpc::ChannelCredentials> credentials, MakeChannelCredentials(tls, names));
  return std::unique_ptr<CoordinatorSet>(
      new CoordinatorSet(std::move(addresses), token, std::move(credentials), !tls.empty()));
}

namespace {

std::string Join(const std::vector<std::string>& addresses) {
  std::string out;
  for (const std::string& a : addresses) out += (out.empty() ? "" : ",") + a;
  return out;
}

}  // namespace

CoordinatorSet::CoordinatorSet(std::vector<std::string> addresses, std::string_view token,
                               std::shared_ptr<grpc::ChannelCredentials> credentials, bool tls)
    : addresses_(std::move(addresses)),
      list_(Join(addresses_)),
      digest_hex_(TokenDigestHex(token)),
      credentials_(std::move(credentials)),
      tls_(tls) {
  MutexLock lock(mu_);
  for (const std::string& a : addresses_) entries_.push_back(std::make_unique<Entry>(a, credentials_));
  // Every channel starts connecting now, and the first call waits a
  // moment (kSettle at most) for the attempts to end, so that it can tell a
  // coordinator that refused its connection from one that took it (Order).
  if (entries_.size() > 1) {
    for (const auto& e : entries_) (void)e->channel->GetState(/*try_to_connect=*/true);
    settle_until_ = Clock::now() + kSettle;
  }
}

void CoordinatorSet::Settle() {
  Deadline until;
  std::vector<grpc::Channel*> channels;
  {
    MutexLock lock(mu_);
    until = settle_until_;
    if (until == Deadline{} || Clock::now() >= until) return;
    for (const auto& e : entries_) channels.push_back(e->channel.get());
  }
  for (grpc::Channel* channel : channels) {
    for (;;) {
      const grpc_connectivity_state state = channel->GetState(/*try_to_connect=*/false);
      if (state != GRPC_CHANNEL_IDLE && state != GRPC_CHANNEL_CONNECTING) break;
      if (!channel->WaitForStateChange(state, SystemDeadline(until, std::chrono::milliseconds(1)))) break;
    }
  }
  MutexLock lock(mu_);
  settle_until_ = Deadline{};
}

CoordinatorSet::~CoordinatorSet() = default;

std::string CoordinatorSet::leader() const {
  MutexLock lock(mu_);
  return entries_[leader_]->address;
}

std::string CoordinatorSet::last_answered() const {
  MutexLock lock(mu_);
  return entries_[answered_]->address;
}

void CoordinatorSet::AttachToken(grpc::ClientContext* context) const { AttachTokenDigest(context, digest_hex_); }

CoordinatorSet::Entry* CoordinatorSet::At(size_t index) const {
  MutexLock lock(mu_);
  return entries_.at(index).get();
}

size_t CoordinatorSet::NextLocked(size_t index) const { return (index + 1) % entries_.size(); }

std::vector<size_t> CoordinatorSet::Order(size_t first) {
  Settle();
  MutexLock lock(mu_);
  std::vector<size_t> order;
  order.reserve(entries_.size());
  for (size_t i = 0; i < entries_.size(); ++i) order.push_back((first + i) % entries_.size());
  // Coordinators whose last connection attempt failed go last (in the
  // same order): a dead one does not cost every new process an attempt's
  // share while another is connected or connecting. When all of them
  // failed, each is still waited for in turn, which drives reconnection.
  std::vector<bool> failed(entries_.size());
  for (size_t i = 0; i < entries_.size(); ++i) {
    failed[i] = entries_[i]->channel->GetState(/*try_to_connect=*/false) == GRPC_CHANNEL_TRANSIENT_FAILURE;
  }
  std::stable_partition(order.begin(), order.end(), [&failed](size_t i) { return !failed[i]; });
  return order;
}

size_t CoordinatorSet::IndexOf(const std::string& address) {
  MutexLock lock(mu_);
  for (size_t i = 0; i < entries_.size(); ++i) {
    if (entries_[i]->address == address) return i;
  }
  if (entries_.size() >= addresses_.size() + kMaxLearned) return std::string::npos;
  entries_.push_back(std::make_unique<Entry>(address, credentials_));
  return entries_.size() - 1;
}

StatusOr<CoordinatorSet::Target> CoordinatorSet::TargetOf(const std::string& address) {
  const size_t index = IndexOf(address);
  if (index == std::string::npos) {
    return NotFound("coordinator " + address + " is not in the list, and no more learned leaders fit");
  }
  Entry* const entry = At(index);
  return Target{index, entry->address, entry->stub.get()};
}

void CoordinatorSet::NoteAnswered(size_t index) {
  MutexLock lock(mu_);
  if (index < entries_.size()) answered_ = index;
}

void CoordinatorSet::NoteBroken(size_t index) {
  MutexLock lock(mu_);
  if (index == answered_) answered_ = NextLocked(index);
}

Status CoordinatorSet::CallLeader(std::string_view what, Deadline deadline, const Call& call,
                                  std::string* answered_by) {
  return Run(what, deadline, call, /*leader_only=*/true, answered_by);
}

Status CoordinatorSet::CallAny(std::string_view what, Deadline deadline, const Call& call, std::string* answered_by) {
  return Run(what, deadline, call, /*leader_only=*/false, answered_by);
}

std::vector<Status> CoordinatorSet::CallEach(std::string_view what, Deadline deadline, const IndexedCall& call) {
  std::vector<Status> results(addresses_.size());
  std::vector<std::thread> threads;
  threads.reserve(addresses_.size());
  for (size_t i = 0; i < addresses_.size(); ++i) {
    threads.emplace_back([&, i] {
      Entry* const entry = At(i);
      grpc::ClientContext context;
      AttachTokenDigest(&context, digest_hex_);
      context.set_deadline(SystemDeadline(deadline, std::chrono::milliseconds(1)));
      context.set_wait_for_ready(true);
      const Status s = FromGrpc(call(i, *entry->stub, &context));
      results[i] = s.ok() ? s : s.WithContext("coordinator " + entry->address + ": " + std::string(what));
    });
  }
  for (std::thread& t : threads) t.join();
  return results;
}

Status CoordinatorSet::Run(std::string_view what, Deadline deadline, const Call& call, bool leader_only,
                           std::string* answered_by) {
  size_t first = 0;
  {
    MutexLock lock(mu_);
    first = leader_only ? leader_ : answered_;
  }
  const std::vector<size_t> order = Order(first);
  std::vector<size_t> tried;
  const auto was_tried = [&](size_t i) { return std::find(tried.begin(), tried.end(), i) != tried.end(); };
  std::vector<size_t> resent;
  const auto was_resent = [&](size_t i) { return std::find(resent.begin(), resent.end(), i) != resent.end(); };
  // "A: error" of each coordinator tried before the last one.
  std::vector<std::string> earlier;
  Status last;
  std::string last_address;
  size_t next = 0;
  size_t redirect = std::string::npos;
  int hops = 0;
  for (;;) {
    size_t index = redirect;
    redirect = std::string::npos;
    if (index == std::string::npos) {
      while (next < order.size() && was_tried(order[next])) ++next;
      if (next == order.size()) break;
      index = order[next++];
    }
    if (!tried.empty() && Clock::now() >= deadline) break;
    size_t left = 1;
    for (size_t k = next; k < order.size(); ++k) left += (order[k] != index && !was_tried(order[k])) ? 1 : 0;
    Entry* const entry = At(index);
    Deadline attempt_deadline = AttemptDeadline(deadline, left);
    // With several coordinators, one not connected gets at most kMaxAttempt
    // even as the last one left: a standby that still names a leader that
    // died sends the call there, and the caller, who retries, must keep
    // time to ask again once another leads.
    if (order.size() > 1 && entry->channel->GetState(/*try_to_connect=*/false) != GRPC_CHANNEL_READY) {
      attempt_deadline = std::min(attempt_deadline, Clock::now() + kMaxAttempt);
    }
    grpc::ClientContext context;
    AttachTokenDigest(&context, digest_hex_);
    context.set_deadline(SystemDeadline(attempt_deadline, std::chrono::milliseconds(1)));
    // Waiting for the connection drives it: see the file comment.
    context.set_wait_for_ready(true);
    const auto started = Clock::now();
    const grpc::Status rpc = call(*entry->stub, &context);
    tried.push_back(index);
    if (!last_address.empty()) earlier.push_back(last_address + ": " + last.ToString());
    last = FromGrpc(rpc);
    last_address = entry->address;
    const StatusCode code = last.code();
    if (code != StatusCode::kUnavailable && code != StatusCode::kDeadlineExceeded) {
      // An answer: from the leader, when only the leader answers these.
      MutexLock lock(mu_);
      answered_ = index;
      if (leader_only) leader_ = index;
      break;
    }
    if (code == StatusCode::kDeadlineExceeded) {
      const grpc_connectivity_state state = entry->channel->GetState(/*try_to_connect=*/false);
      if (state != GRPC_CHANNEL_READY) {
        std::string hint;
        if (state != GRPC_CHANNEL_IDLE) hint = ConnectFailureHint(entry->address, tls_);
        last = Unavailable("not connected within " + std::to_string(Ms(Clock::now() - started)) +
                           " ms (connection " + StateName(state) + ")" + (hint.empty() ? "" : "; " + hint));
      }
    }
    std::string leader_address;
    if (leader_only && code == StatusCode::kUnavailable) {
      const auto& trailers = context.GetServerTrailingMetadata();
      const auto it = trailers.find(kLeaderMetadataKey);
      if (it != trailers.end()) leader_address.assign(it->second.data(), it->second.size());
    }
    if (!leader_address.empty() && ValidateHostPort(leader_address).ok() && hops < kMaxRedirects) {
      const size_t target = IndexOf(leader_address);
      if (target != std::string::npos && target != index && !was_tried(target)) {
        ++hops;
        redirect = target;
        MutexLock lock(mu_);
        leader_ = target;
        continue;
      }
    }
    // The connection broke under the call (the coordinator went away after
    // the call was sent on it, "Broken pipe"): wait_for_ready covers only a
    // call not yet sent, so send it again, once, on the channel's next
    // connection within the time left.
    if (code == StatusCode::kUnavailable && leader_address.empty() && !was_resent(index) &&
        Clock::now() < attempt_deadline && ConnectionBroke(*entry->channel)) {
      resent.push_back(index);
      redirect = index;
      continue;
    }
    // No answer here: the next call starts with the next coordinator.
    MutexLock lock(mu_);
    if (leader_only && leader_ == index) leader_ = NextLocked(index);
    if (answered_ == index) answered_ = NextLocked(index);
  }
  if (answered_by != nullptr) *answered_by = last_address;
  if (last.ok()) return last;
  Status out = last.WithContext("coordinator " + last_address + ": " + std::string(what));
  if (!earlier.empty()) {
    std::string also;
    for (const std::string& e : earlier) also += (also.empty() ? "" : "; ") + e;
    out = Status(out.code(), std::string(out.message()) + " (also tried " + also + ")");
  }
  return out;
}

StatusOr<CoordinatorSet::Target> CoordinatorSet::ConnectAny(Deadline deadline) {
  size_t first = 0;
  {
    MutexLock lock(mu_);
    first = answered_;
  }
  const std::vector<size_t> order = Order(first);
  // One already connected needs no wait; asking every channel for its
  // state also starts the connection of an idle one.
  for (const size_t index : order) {
    Entry* const entry = At(index);
    if (entry->channel->GetState(/*try_to_connect=*/true) == GRPC_CHANNEL_READY) {
      return Target{index, entry->address, entry->stub.get()};
    }
  }
  std::string states;
  for (size_t k = 0; k < order.size(); ++k) {
    Entry* const entry = At(order[k]);
    // Waiting polls the channel, which completes its connection at once
    // when the coordinator is there.
    if (entry->channel->WaitForConnected(
            SystemDeadline(AttemptDeadline(deadline, order.size() - k), std::chrono::milliseconds(1)))) {
      return Target{order[k], entry->address, entry->stub.get()};
    }
    const grpc_connectivity_state state = entry->channel->GetState(/*try_to_connect=*/false);
    const std::string hint =
        state != GRPC_CHANNEL_IDLE ? ConnectFailureHint(entry->address, tls_) : std::string();
    states += std::string(states.empty() ? "" : ", ") + entry->address + " " + StateName(state) +
              (hint.empty() ? "" : " (" + hint + ")");
  }
  return Unavailable("no connection to a coordinator (" + states + ")");
}

}  // namespace rkv::control
