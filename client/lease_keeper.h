// LeaseKeeper: a cluster client's lease on its cluster map (docs/design.md
// §8.4). A lease says "the map of version V may be used for every server
// but the excluded ones until `until`", where `until` is counted from the
// moment the RenewLease request was SENT (send time + lease_ms * 0.99 -
// 10 ms, client steady clock), so that a delayed answer only shortens it.
// The coordinator fences a failed primary by excluding it from every lease
// it grants, and moves its shards only once every lease that covered it has
// expired; a client therefore never reads a server's memory or sends it a
// write without a valid lease that covers it (Check).
//
// A coordinator that answers lease_ms 0, or does not know RenewLease
// (UNIMPLEMENTED: older than leases), grants none: the keeper then lets
// every call through, as before leases, and logs so once.
//
// Thread safety: every method is thread-safe. One renewal runs at a time;
// callers that need one while it runs wait for its outcome. The destructor
// stops the background thread (Start) and joins it, after the renewal it
// may be running (bounded by kProbeInterval); it must not run while a Check
// is in progress.
//
// LeaseShare: the clients of one process that reach the same coordinators
// with the same token share one LeaseKeeper (docs/design.md §8.8, "What
// renewals cost"), so that a process renews once per lease_ms / 3 however
// many Clients it holds, not once each. A lease is a fact about the
// coordinator's map version and the process's clock, not about the client
// that asked, so every client whose map has the leased version may use it.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "client/cluster_map.h"
#include "client/server_connection.h"
#include "common/mutex.h"
#include "common/status.h"
#include "common/thread_annotations.h"
#include "proto/rkv.pb.h"
#include "proto/tls.h"

namespace rkv::client {

// What a lease grants (Check's view of it).
struct Lease {
  uint64_t map_version = 0;
  Clock::time_point until{};  // valid while Clock::now() < until
  std::vector<std::string> excluded_servers;
};

// Counters of a keeper (relaxed snapshots).
struct LeaseStats {
  uint64_t renewals = 0;     // RenewLease answers that granted a lease
  uint64_t lease_waits = 0;  // Checks that found no usable lease and waited for a renewal
};

class LeaseKeeper {
 public:
  // Sends one RenewLease for `map_version`; the answer or the RPC's error.
  using RenewFn = std::function<StatusOr<v1::RenewLeaseResponse>(uint64_t map_version, Deadline deadline)>;
  // Fetches and installs the map (at least as new as the coordinator's).
  using FetchFn = std::function<Status(Deadline deadline)>;
  // The version of the client's current map (0: none).
  using VersionFn = std::function<uint64_t()>;

  // How often a renewal may follow a failed one (background thread).
  static constexpr std::chrono::milliseconds kRetryInterval{100};
  // How often a keeper without leases asks again whether the coordinator
  // grants them now.
  static constexpr std::chrono::milliseconds kProbeInterval{1000};
  // Renewals of one Renew that may find the map moved on before giving up.
  static constexpr int kMaxMapChanges = 3;

  LeaseKeeper(RenewFn renew, FetchFn fetch, VersionFn version);
  ~LeaseKeeper();
  LeaseKeeper(const LeaseKeeper&) = delete;
  LeaseKeeper& operator=(const LeaseKeeper&) = delete;

  // Starts the background thread, which renews every lease_ms / 3 (every
  // kRetryInterval after a failure), so that calls normally find a valid
  // lease. Once.
  void Start() EXCLUDES(mu_);

  // Whether a call routed by map version `map_version` may use server
  // `server_id` now: OK when the keeper holds a valid lease on that version
  // that does not exclude it, or when the coordinator grants no leases.
  // Otherwise renews (or waits for the renewal in flight) until `deadline`,
  // then answers UNAVAILABLE: "server X is being failed over (...)", "no
  // lease on cluster map version V: coordinator unreachable (...)", or
  // "cluster map version V is older than the leased version W" (the call
  // routes by a stale map: the caller takes the newest and retries).
  Status Check(uint64_t map_version, std::string_view server_id, Deadline deadline) EXCLUDES(mu_);

  // Renews now (or waits for the renewal in flight) until `deadline`.
  // OK when a lease was granted or the coordinator grants none.
  Status Renew(Deadline deadline) EXCLUDES(mu_);

  // The current lease (tests, reporting); map_version 0 when none was
  // granted yet.
  Lease Current() const EXCLUDES(mu_);
  // UNAVAILABLE ("being failed over") when the current lease excludes
  // `server_id`, whatever its version and validity; OK otherwise. Never
  // waits on the coordinator (a wait on that server asks it every poll).
  Status CheckNotExcluded(std::string_view server_id) const EXCLUDES(mu_);
  // Whether the coordinator said it grants no leases.
  bool disabled() const EXCLUDES(mu_);
  LeaseStats stats() const EXCLUDES(mu_);

 private:
  // Renew, unless a renewal ended since round `seen_round` (then its
  // outcome is the answer): callers that found no lease at the same time
  // share one renewal.
  Status RenewAfter(std::optional<uint64_t> seen_round, Deadline deadline) EXCLUDES(mu_);
  // One renewal, run by the single renewer without mu_.
  Status RenewUnlocked(Deadline deadline) EXCLUDES(mu_);
  void Loop() EXCLUDES(mu_);

  const RenewFn renew_;
  const FetchFn fetch_;
  const VersionFn version_;

  mutable Mutex mu_;
  CondVar cv_;  // signalled when a renewal ends and when stopping_ is set
  Lease lease_ GUARDED_BY(mu_);
  bool disabled_ GUARDED_BY(mu_) = false;
  bool logged_disabled_ GUARDED_BY(mu_) = false;
  bool renewing_ GUARDED_BY(mu_) = false;  // a renewal is in flight
  uint64_t renewal_round_ GUARDED_BY(mu_) = 0;  // raised when a renewal ends
  Status last_error_ GUARDED_BY(mu_);           // of the last failed renewal
  uint32_t lease_ms_ GUARDED_BY(mu_) = 0;       // the last granted length
  bool stopping_ GUARDED_BY(mu_) = false;
  LeaseStats stats_ GUARDED_BY(mu_);
  // Started by Start (under mu_), joined by the destructor once stopping_
  // is set.
  std::thread thread_;
};

struct SharedLease;  // lease_keeper.cc

// A client's part in its process's lease for (coordinators, token): the
// shared keeper renews for the newest map version of every member, and
// installs a map it had to fetch (the coordinator's version was newer)
// into every member's MapHolder as well as its own.
//
// Thread safety: every method is thread-safe. The destructor leaves the
// lease: once it returns the keeper no longer touches the member's
// holder. The last share to leave stops the keeper (~LeaseKeeper).
class LeaseShare {
 public:
  // Joins `holder` (the client's map; it must outlive the share) to the
  // lease of `coordinators` (a list ParseCoordinatorList accepts) and
  // `token`, making it, with its own channels to the coordinators
  // (control::CoordinatorSet) and its background thread started, when
  // this process holds none. The first renewal is the caller's (Renew or
  // Check). INVALID_ARGUMENT for a malformed list. The channels use TLS
  // with `tls` (ClientOptions' files); clients with other files do not
  // share a lease.
  static StatusOr<std::unique_ptr<LeaseShare>> Join(std::string_view coordinators, std::string_view token,
                                                    MapHolder* holder, const control::TlsFiles& tls = {});

  ~LeaseShare();
  LeaseShare(const LeaseShare&) = delete;
  LeaseShare& operator=(const LeaseShare&) = delete;

  // LeaseKeeper::Check, Renew and Current of the shared keeper.
  Status Check(uint64_t map_version, std::string_view server_id, Deadline deadline);
  Status Renew(Deadline deadline);
  Lease Current() const;
  // LeaseKeeper::CheckNotExcluded of the shared keeper.
  Status CheckNotExcluded(std::string_view server_id) const;
  // The shared keeper (tests, reporting).
  LeaseKeeper& keeper() const;
  // How many shares this share's lease has now (tests).
  size_t members() const;

 private:
  LeaseShare(std::shared_ptr<SharedLease> lease, MapHolder* holder);

  const std::shared_ptr<SharedLease> lease_;
  MapHolder* const holder_;
};

}  // namespace rkv::client
