#include "client/lease_keeper.h"

#include <glog/logging.h>

#include <algorithm>
#include <map>

#include "client/control_client.h"
#include "proto/auth.h"
#include "proto/coordinator_set.h"

namespace rkv::client {
namespace {

// The longest lease a coordinator may grant (its --lease_ms bound).
constexpr uint32_t kMaxLeaseMs = 60000;
// The margin every lease loses: it covers clock rates that differ by up to
// 1% between holder and coordinator, and the time between reading the
// clock and the request leaving.
constexpr std::chrono::milliseconds kLeaseMargin{10};

// The end of a lease of `lease_ms` granted for a request sent at `sent`:
// sent + lease_ms * 0.99 - 10 ms.
Clock::time_point LeaseEnd(Clock::time_point sent, uint32_t lease_ms) {
  return sent + std::chrono::microseconds(uint64_t{lease_ms} * 990) - kLeaseMargin;
}

// Unavailable when `lease` excludes `server_id`.
Status Excluding(const Lease& lease, std::string_view server_id) {
  const auto& ex = lease.excluded_servers;
  if (std::find(ex.begin(), ex.end(), server_id) == ex.end()) [[likely]] return Status::Ok();
  return Unavailable("server " + std::string(server_id) + " is being failed over (the lease on cluster map version " +
                     std::to_string(lease.map_version) + " excludes it)");
}

}  // namespace

LeaseKeeper::LeaseKeeper(RenewFn renew, FetchFn fetch, VersionFn version)
    : renew_(std::move(renew)), fetch_(std::move(fetch)), version_(std::move(version)) {}

LeaseKeeper::~LeaseKeeper() {
  {
    MutexLock lock(mu_);
    stopping_ = true;
  }
  cv_.NotifyAll();
  if (thread_.joinable()) thread_.join();
}

void LeaseKeeper::Start() {
  MutexLock lock(mu_);
  if (thread_.joinable() || stopping_) return;
  thread_ = std::thread([this] { Loop(); });
}

Status LeaseKeeper::Check(uint64_t map_version, std::string_view server_id, Deadline deadline) {
  // At most one renewal per Check (its own or the one in flight): the
  // caller retries with backoff and a map refetch (WithServer).
  for (int round = 0;; ++round) {
    uint64_t seen_round = 0;
    {
      MutexLock lock(mu_);
      if (disabled_) return Status::Ok();
      if (lease_.map_version != 0 && Clock::now() < lease_.until) [[likely]] {
        if (lease_.map_version == map_version) [[likely]] return Excluding(lease_, server_id);
        if (lease_.map_version > map_version) {
          return Unavailable("cluster map version " + std::to_string(map_version) +
                             " is older than the leased version " + std::to_string(lease_.map_version));
        }
      }
      if (round > 0) {
        return Unavailable("no lease on cluster map version " + std::to_string(map_version) +
                           (last_error_.ok() ? std::string(": the coordinator granted one for another version")
                                             : ": coordinator unreachable (" + last_error_.ToString() + ")"));
      }
      ++stats_.lease_waits;
      seen_round = renewal_round_;
    }
    const Status s = RenewAfter(seen_round, deadline);
    if (s.code() == StatusCode::kDeadlineExceeded) {
      return Unavailable("no lease on cluster map version " + std::to_string(map_version) +
                         ": coordinator unreachable (" + s.ToString() + ")");
    }
  }
}

Status LeaseKeeper::Renew(Deadline deadline) { return RenewAfter(std::nullopt, deadline); }

Status LeaseKeeper::RenewAfter(std::optional<uint64_t> seen_round, Deadline deadline) {
  {
    MutexLock lock(mu_);
    if (seen_round && renewal_round_ != *seen_round) return last_error_;
    if (renewing_) {
      // Shares the renewal in flight: its outcome is this call's.
      const uint64_t round = renewal_round_;
      while (renewal_round_ == round) {
        if (!cv_.WaitUntil(mu_, deadline) && renewal_round_ == round) {
          // The renewal before it says why the coordinator may be slow.
          return DeadlineExceeded(
              "the lease renewal in flight did not end before the deadline" +
              (last_error_.ok() ? std::string() : "; the one before it failed: " + last_error_.ToString()));
        }
      }
      return last_error_;
    }
    renewing_ = true;
  }
  const Status s = RenewUnlocked(deadline);
  {
    MutexLock lock(mu_);
    renewing_ = false;
    ++renewal_round_;
    last_error_ = s;
  }
  cv_.NotifyAll();
  if (!s.ok()) VLOG(1) << "rkv: lease renewal failed: " << s;
  return s;
}

Status LeaseKeeper::RenewUnlocked(Deadline deadline) {
  for (int i = 0; i < kMaxMapChanges; ++i) {
    const uint64_t version = version_();
    // The lease counts from here: before the request leaves, so that any
    // delay on the way or in the answer only shortens it.
    const Clock::time_point sent = Clock::now();
    StatusOr<v1::RenewLeaseResponse> r = renew_(version, deadline);
    if (!r.ok() && r.status().code() != StatusCode::kUnimplemented) return r.status();
    if (!r.ok() || r->lease_ms() == 0) {
      // An older coordinator (no RenewLease) or one run without leases.
      MutexLock lock(mu_);
      disabled_ = true;
      lease_ = Lease{};
      if (!logged_disabled_) {
        logged_disabled_ = true;
        LOG(INFO) << "rkv: the coordinator grants no leases ("
                  << (r.ok() ? std::string("lease_ms 0") : r.status().ToString())
                  << "); calls use the cluster map without them";
      }
      return Status::Ok();
    }
    if (r->lease_ms() > kMaxLeaseMs) {
      return InvalidArgument("the coordinator granted a lease of " + std::to_string(r->lease_ms()) +
                             " ms, over the most a coordinator grants (" + std::to_string(kMaxLeaseMs) + " ms)");
    }
    if (r->map_version() != version) {
      // No lease on a stale map: take the coordinator's, then renew for it.
      RKV_RETURN_IF_ERROR(fetch_(deadline));
      continue;
    }
    Lease lease;
    lease.map_version = version;
    lease.until = LeaseEnd(sent, r->lease_ms());
    lease.excluded_servers.assign(r->excluded_servers().begin(), r->excluded_servers().end());
    MutexLock lock(mu_);
    if (disabled_) LOG(INFO) << "rkv: the coordinator grants leases now (" << r->lease_ms() << " ms)";
    disabled_ = false;
    lease_ms_ = r->lease_ms();
    ++stats_.renewals;
    // A renewal that was sent earlier never replaces a newer map's lease.
    if (lease.map_version >= lease_.map_version) lease_ = std::move(lease);
    return Status::Ok();
  }
  return Unavailable("the cluster map changed " + std::to_string(kMaxMapChanges) +
                     " times while renewing the lease");
}

void LeaseKeeper::Loop() {
  while (true) {
    {
      MutexLock lock(mu_);
      if (stopping_) return;
    }
    const Status s = Renew(Clock::now() + kProbeInterval);
    MutexLock lock(mu_);
    std::chrono::milliseconds wait = kRetryInterval;
    if (disabled_) {
      wait = kProbeInterval;
    } else if (s.ok()) {
      wait = std::max(std::chrono::milliseconds(lease_ms_ / 3), std::chrono::milliseconds(1));
    }
    const auto until = Clock::now() + wait;
    while (!stopping_ && cv_.WaitUntil(mu_, until)) {
    }
    if (stopping_) return;
  }
}

Lease LeaseKeeper::Current() const {
  MutexLock lock(mu_);
  return lease_;
}

Status LeaseKeeper::CheckNotExcluded(std::string_view server_id) const {
  MutexLock lock(mu_);
  return Excluding(lease_, server_id);
}

bool LeaseKeeper::disabled() const {
  MutexLock lock(mu_);
  return disabled_;
}

LeaseStats LeaseKeeper::stats() const {
  MutexLock lock(mu_);
  return stats_;
}

// One process's lease for (coordinators, token): the keeper and what its
// renewals use. Destroyed when its last LeaseShare leaves.
//
// Thread safety: members is guarded by mu; the rest is set at creation.
// Lock order: mu, then a member's MapHolder lock (Current,
// InstallIfNewer); nothing takes mu while holding a MapHolder's.
struct SharedLease {
  // The newest map version among the members and the maps this lease
  // fetched: what the next renewal is for.
  uint64_t NewestVersion() const EXCLUDES(mu) {
    const auto own = holder.Current();
    uint64_t newest = own != nullptr ? own->version() : 0;
    MutexLock lock(mu);
    for (const MapHolder* m : members) {
      const auto table = m->Current();
      if (table != nullptr) newest = std::max(newest, table->version());
    }
    return newest;
  }

  // Fetches the coordinator's map once and installs it into every member.
  Status FetchForAll(Deadline deadline) EXCLUDES(mu) {
    auto table = control->Fetch(deadline);
    if (!table.ok()) return table.status();
    MutexLock lock(mu);
    for (MapHolder* m : members) m->InstallIfNewer(*table);
    return Status::Ok();
  }

  std::string key;  // the registry's
  std::unique_ptr<ControlClient> control;  // its own channels; no watch
  MapHolder holder;  // the maps its fetches brought (control's)
  mutable Mutex mu;
  std::vector<MapHolder*> members GUARDED_BY(mu);
  // Declared last, so destroyed first: its thread uses everything above.
  std::unique_ptr<LeaseKeeper> keeper;
};

namespace {

// The process's leases by key, as weak references: a lease lives as long
// as its shares do, and an expired entry is dropped by the next Join.
struct Registry {
  Mutex mu;
  std::map<std::string, std::weak_ptr<SharedLease>> leases GUARDED_BY(mu);
};

Registry& TheRegistry() {
  static Registry* const registry = new Registry();  // never destroyed: shares may outlive static destruction
  return *registry;
}

}  // namespace

StatusOr<std::unique_ptr<LeaseShare>> LeaseShare::Join(std::string_view coordinators, std::string_view token,
                                                       MapHolder* holder, const control::TlsFiles& tls) {
  RKV_ASSIGN_OR_RETURN(const std::vector<std::string> list, control::ParseCoordinatorList(coordinators));
  // The normalized list and the token's digest: clients that list the same
  // coordinators in the same order with the same token share.
  std::string key;
  for (const std::string& address : list) key += address + ",";
  key += control::TokenDigestHex(token);
  // The TLS files too (NUL cannot be in a path).
  key += '\0' + tls.cert + '\0' + tls.key + '\0' + tls.ca;

  Registry& registry = TheRegistry();
  MutexLock lock(registry.mu);
  std::shared_ptr<SharedLease> lease = registry.leases[key].lock();
  if (lease == nullptr) {
    for (auto it = registry.leases.begin(); it != registry.leases.end();) {
      it = it->second.expired() ? registry.leases.erase(it) : std::next(it);
    }
    RKV_ASSIGN_OR_RETURN(std::unique_ptr<control::CoordinatorSet> set,
                         control::CoordinatorSet::Create(coordinators, token, tls,
                                                                         control::ClientOptionsTlsNames()));
    lease = std::make_shared<SharedLease>();
    lease->key = key;
    lease->control = std::make_unique<ControlClient>(std::move(set), std::string(token), &lease->holder);
    SharedLease* const l = lease.get();
    lease->keeper = std::make_unique<LeaseKeeper>(
        [l](uint64_t version, Deadline d) { return l->control->RenewLease(version, d); },
        [l](Deadline d) { return l->FetchForAll(d); }, [l] { return l->NewestVersion(); });
    registry.leases[key] = lease;
  }
  {
    MutexLock members_lock(lease->mu);
    lease->members.push_back(holder);
  }
  lease->keeper->Start();
  return std::unique_ptr<LeaseShare>(new LeaseShare(std::move(lease), holder));
}

LeaseShare::LeaseShare(std::shared_ptr<SharedLease> lease, MapHolder* holder)
    : lease_(std::move(lease)), holder_(holder) {}

LeaseShare::~LeaseShare() {
  MutexLock lock(lease_->mu);
  auto& m = lease_->members;
  m.erase(std::find(m.begin(), m.end(), holder_));
}

Status LeaseShare::Check(uint64_t map_version, std::string_view server_id, Deadline deadline) {
  return lease_->keeper->Check(map_version, server_id, deadline);
}

Status LeaseShare::Renew(Deadline deadline) { return lease_->keeper->Renew(deadline); }

Lease LeaseShare::Current() const { return lease_->keeper->Current(); }

Status LeaseShare::CheckNotExcluded(std::string_view server_id) const {
  return lease_->keeper->CheckNotExcluded(server_id);
}

LeaseKeeper& LeaseShare::keeper() const { return *lease_->keeper; }

size_t LeaseShare::members() const {
  MutexLock lock(lease_->mu);
  return lease_->members.size();
}

}  // namespace rkv::client
