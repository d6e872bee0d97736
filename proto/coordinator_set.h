// CoordinatorSet: how every control-plane caller (librkv's ControlClient,
// a server's Membership, and through librkv kvctl and rkv-ycsb) reaches
// the coordinators of one cluster (docs/design.md §8.1).
//
// Any number of coordinators may serve one cluster; one of them leads.
// Every coordinator answers GetClusterMap and WatchClusterMap (a standby's
// map may lag by a moment; versions only grow and callers install only
// newer maps). Every other call is the leader's: a coordinator that is not
// the leader answers UNAVAILABLE "not the leader; ..." with the trailing
// metadata kLeaderMetadataKey = the leader's "HOST:PORT" when it knows one.
// A single coordinator without an election always leads.
//
// The set keeps one channel per coordinator, remembers the leader it last
// reached and the coordinator that last answered, and runs one unary call:
//
//  - CallLeader: the remembered leader first, then the others in list
//    order. UNAVAILABLE carrying kLeaderMetadataKey moves to that
//    coordinator at once (at most kMaxRedirects times per call; an address
//    not in the list is added to the set); UNAVAILABLE without it, or
//    DEADLINE_EXCEEDED, moves to the next coordinator. Any other answer
//    (OK or an error) is the leader's and ends the call.
//  - CallAny: the same without redirects, starting with the coordinator
//    that answered last (map reads: any coordinator will do).
//
// Each coordinator in turn gets a share of the time left before the
// caller's deadline (kMinAttempt..kMaxAttempt; the last one all of it,
// unless it is not connected and the set has others: then kMaxAttempt at
// most, so that a redirect by a standby's stale view to a leader that died
// does not spend the caller's time, who retries), and each attempt waits
// for its channel to connect within its share (wait_for_ready). A coordinator that did not answer is tried last by the
// next call, so a dead one costs one share once, not on every call. Waiting is what makes a returning coordinator usable
// at once: a caller whose attempts failed fast never drove the channel,
// and gRPC then noticed the completed connection only when its backup
// poller ran, every 5 s (docs/design.md §8.4).
//
// A call whose connection broke under it (UNAVAILABLE from the transport,
// the channel no longer READY: the coordinator went away after the call was
// sent) is sent once more to the same coordinator within its share, which
// waits for the channel's next connection.
//
// Errors: the last coordinator's error, with the coordinator and the call
// named ("coordinator HOST:PORT: Join: ..."), and "(also tried A: ...; B:
// ...)" for the others tried. An attempt that ran out of time without a
// connection is UNAVAILABLE "not connected within N ms (connection STATE)",
// followed by ConnectFailureHint's TLS hint when the coordinator's port
// takes TCP connections (a plain client at a TLS coordinator, a CA that
// does not verify its certificate).
//
// Thread safety: every method is thread-safe; calls run concurrently.
//
// Invariants: entries are never removed, so an index stays valid for the
// life of the set; the first addresses().size() entries are the list, in
// its order; learned leaders follow, at most kMaxLearned of them.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <grpcpp/channel.h>
#include <grpcpp/client_context.h>
#include <grpcpp/support/status.h>

#include "common/mutex.h"
#include "common/status.h"
#include "common/thread_annotations.h"
#include "proto/rkv.grpc.pb.h"
#include "proto/tls.h"

namespace rkv::control {

// The trailing metadata key in which a coordinator that is not the leader
// names the leader ("HOST:PORT").
inline constexpr char kLeaderMetadataKey[] = "rkv-leader";

// The most coordinators one list may name.
inline constexpr size_t kMaxCoordinators = 16;

// A channel to a control-plane peer (a coordinator, a server's Admin
// service): reconnects within 100 ms..1 s of a peer's return. Plain gRPC
// when `credentials` is null, else those (MakeChannelCredentials,
// proto/tls.h).
std::shared_ptr<grpc::Channel> MakeControlChannel(
    const std::string& address, const std::shared_ptr<grpc::ChannelCredentials>& credentials = nullptr);

// Parses a comma-separated list of coordinators ("A", "A,B,C"; blanks
// around an entry are ignored). Each entry is checked by ValidateHostPort
// (port 0 refused); a repeated entry is dropped. INVALID_ARGUMENT naming
// the bad entry and its position, for an empty list or entry, or more than
// kMaxCoordinators entries.
StatusOr<std::vector<std::string>> ParseCoordinatorList(std::string_view list);

class CoordinatorSet {
 public:
  using Clock = std::chrono::steady_clock;
  using Deadline = Clock::time_point;
  // One attempt: runs the RPC on `stub` with `context`, which carries the
  // token digest, the attempt's deadline and wait_for_ready. The call's
  // response is the caller's (captured); a later attempt overwrites it.
  using Call = std::function<grpc::Status(v1::Coordinator::Stub& stub, grpc::ClientContext* context)>;

  // Redirects one call follows.
  static constexpr int kMaxRedirects = 3;
  // The least and the most time an attempt gets while other coordinators
  // remain to be tried.
  static constexpr std::chrono::milliseconds kMinAttempt{250};
  static constexpr std::chrono::milliseconds kMaxAttempt{1000};
  // Leaders learned from redirects that are not in the list.
  static constexpr size_t kMaxLearned = 16;

  // Parses `list` (ParseCoordinatorList) and makes one channel per
  // coordinator; every call carries the digest of `token`. The channels
  // use TLS with `tls` (MakeChannelCredentials: INVALID_ARGUMENT naming
  // the file by `names` when one is bad), plain gRPC when it is empty.
  static StatusOr<std::unique_ptr<CoordinatorSet>> Create(std::string_view list, std::string_view token,
                                                          const TlsFiles& tls = {}, const TlsFileNames& names = {});

  ~CoordinatorSet();
  CoordinatorSet(const CoordinatorSet&) = delete;
  CoordinatorSet& operator=(const CoordinatorSet&) = delete;

  // The list's addresses, in order.
  const std::vector<std::string>& addresses() const { return addresses_; }
  // The credentials of the set's channels, for other channels to the
  // same cluster (a server's Admin service).
  const std::shared_ptr<grpc::ChannelCredentials>& credentials() const { return credentials_; }
  // Whether they are TLS.
  bool tls() const { return tls_; }
  // The list as given to Create, normalized ("A,B,C"), for messages.
  const std::string& list() const { return list_; }
  // The address of the coordinator last reached as the leader (initially
  // the list's first).
  std::string leader() const EXCLUDES(mu_);
  // The address of the coordinator that answered last (map reads).
  std::string last_answered() const EXCLUDES(mu_);

  // Runs `call` against the leader (see the file comment). `what` names
  // the call in errors ("Join"). When `answered_by` is not null it gets
  // the address of the coordinator whose answer is returned (OK or not).
  Status CallLeader(std::string_view what, Deadline deadline, const Call& call, std::string* answered_by = nullptr)
      EXCLUDES(mu_);
  // Runs `call` against any coordinator (see the file comment).
  Status CallAny(std::string_view what, Deadline deadline, const Call& call, std::string* answered_by = nullptr)
      EXCLUDES(mu_);

  // Runs `call` once on every coordinator of the list, all at once, each
  // with the whole time left before `deadline`; returns each one's status
  // in list order ("coordinator HOST:PORT: WHAT: ..." on errors). For
  // questions put to each coordinator (GetCoordinatorStatus); `call` gets
  // the coordinator's index in the list and must be safe to run
  // concurrently for different indices.
  using IndexedCall =
      std::function<grpc::Status(size_t index, v1::Coordinator::Stub& stub, grpc::ClientContext* context)>;
  std::vector<Status> CallEach(std::string_view what, Deadline deadline, const IndexedCall& call) EXCLUDES(mu_);

  // A coordinator to open a stream on (WatchClusterMap).
  struct Target {
    size_t index = 0;
    std::string address;
    v1::Coordinator::Stub* stub = nullptr;  // owned by the set
  };
  // The coordinator at `address`: one of the list, a learned leader, or
  // one added now (a leader named by a call's answer). NOT_FOUND when the
  // set has no room for another learned leader.
  StatusOr<Target> TargetOf(const std::string& address) EXCLUDES(mu_);
  // A coordinator whose channel is connected: one already connected,
  // preferring the one that answered last; else each in turn (that one
  // first) waits for its connection within a share of the time left, as
  // calls do. UNAVAILABLE naming the coordinators when none connected
  // before `deadline`. Does not return before `deadline` otherwise.
  StatusOr<Target> ConnectAny(Deadline deadline) EXCLUDES(mu_);
  // For streams: the coordinator at `index` answered (map reads prefer
  // it), or its stream broke (they start with the next one).
  void NoteAnswered(size_t index) EXCLUDES(mu_);
  void NoteBroken(size_t index) EXCLUDES(mu_);

  // Adds the token digest to `context` (a stream's).
  void AttachToken(grpc::ClientContext* context) const;

 private:
  struct Entry;

  CoordinatorSet(std::vector<std::string> addresses, std::string_view token,
                 std::shared_ptr<grpc::ChannelCredentials> credentials, bool tls);

  Status Run(std::string_view what, Deadline deadline, const Call& call, bool leader_only,
             std::string* answered_by) EXCLUDES(mu_);
  Entry* At(size_t index) const EXCLUDES(mu_);
  // The order of one pass: `first`, then every other entry in order,
  // those whose last connection attempt failed last.
  std::vector<size_t> Order(size_t first) EXCLUDES(mu_);
  // Until the first channels' connection attempts ended (or kSettle
  // passed since Create), waits for them; then returns at once.
  void Settle() EXCLUDES(mu_);
  // How long the first call may wait for the connection attempts that
  // Create began.
  static constexpr std::chrono::milliseconds kSettle{200};
  // The index of `address`, adding it (a learned leader) if there is
  // room; npos when there is none.
  size_t IndexOf(const std::string& address) EXCLUDES(mu_);
  size_t NextLocked(size_t index) const REQUIRES(mu_);

  const std::vector<std::string> addresses_;
  const std::string list_;
  const std::string digest_hex_;
  const std::shared_ptr<grpc::ChannelCredentials> credentials_;
  const bool tls_;

  mutable Mutex mu_;
  // Append-only (see Invariants); an Entry never moves.
  std::vector<std::unique_ptr<Entry>> entries_ GUARDED_BY(mu_);
  size_t leader_ GUARDED_BY(mu_) = 0;
  size_t answered_ GUARDED_BY(mu_) = 0;
  // Until when the first call waits for the connection attempts Create
  // began (Settle); the epoch once it has.
  Deadline settle_until_ GUARDED_BY(mu_){};
};

}  // namespace rkv::control
