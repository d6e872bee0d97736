#include "coordinator/leadership.h"

#include <algorithm>
#include <utility>
#include <vector>

#include <glog/logging.h>

#include "coordinator/etcd_state_store.h"

namespace rkv::coordinator {

namespace {

using std::chrono::milliseconds;
using std::chrono::steady_clock;

// How long one etcd call of the campaign may take.
constexpr milliseconds kCallTimeout{1000};
// How soon a failed keepalive is tried again.
constexpr milliseconds kKeepAliveRetry{100};

}  // namespace

Leadership::Leadership(etcd::EtcdClient* etcd, LeadershipOptions options, OnElected on_elected, OnDeposed on_deposed,
                       StillValid still_valid)
    : etcd_(etcd),
      options_(std::move(options)),
      on_elected_(std::move(on_elected)),
      on_deposed_(std::move(on_deposed)),
      still_valid_(std::move(still_valid)) {
  thread_ = std::thread([this] { Run(); });
}

Leadership::~Leadership() { Stop(); }

Leadership::TimePoint Leadership::ValidUntil(TimePoint sent, int64_t ttl_s) {
  return sent + milliseconds(ttl_s * 990) - milliseconds(50);
}

bool Leadership::Leading() const {
  MutexLock lock(mu_);
  return leading_ && steady_clock::now() < valid_until_;
}

Status Leadership::CheckLeading(std::string* leader) const {
  MutexLock lock(mu_);
  leader->clear();
  if (leading_) {
    if (steady_clock::now() < valid_until_) return Status::Ok();
    return Unavailable("not the leader: this coordinator's leadership lapsed (its etcd lease was not renewed in "
                       "time: " + why_ + ")");
  }
  if (!leader_.empty() && leader_ != options_.advertise) {
    *leader = leader_;
    return Unavailable("not the leader; the leader is " + leader_);
  }
  return Unavailable("not the leader; no leader elected yet (" + why_ + ")");
}

std::string Leadership::LeaderAddress() const {
  MutexLock lock(mu_);
  return leader_;
}

void Leadership::Nudge() {
  MutexLock lock(mu_);
  nudged_ = true;
  cv_.NotifyAll();
}

void Leadership::Stop() {
  {
    MutexLock lock(mu_);
    if (stopping_ && !thread_.joinable()) return;
    stopping_ = true;
    cv_.NotifyAll();
  }
  if (thread_.joinable()) thread_.join();
}

bool Leadership::Sleep(milliseconds d) {
  const auto until = steady_clock::now() + d;
  MutexLock lock(mu_);
  while (!stopping_ && !nudged_) {
    if (!cv_.WaitUntil(mu_, until)) break;
  }
  nudged_ = false;
  return !stopping_;
}

void Leadership::SetWhy(const std::string& why) {
  MutexLock lock(mu_);
  why_ = why;
}

void Leadership::Run() {
  for (;;) {
    {
      MutexLock lock(mu_);
      if (stopping_) break;
    }
    auto won = Campaign();
    if (!won.ok()) {
      SetWhy("etcd unreachable: " + won.status().ToString());
      LOG_EVERY_N(WARNING, 20) << "cannot campaign for the coordinators' leadership: " << won.status();
    } else if (*won) {
      continue;  // Lead returned: the leadership ended; campaign again
    }
    if (!Sleep(kStandbyPoll)) break;
  }
  if (lease_id_ != 0) {
    // A standby's lease holds no key; a leader's was revoked by Lead.
    (void)etcd_->RevokeLease(lease_id_, steady_clock::now() + kCallTimeout);
    lease_id_ = 0;
  }
}

StatusOr<bool> Leadership::Campaign() {
  // A lease to campaign with, alive for at least a third of its TTL more.
  const TimePoint now = steady_clock::now();
  if (lease_id_ != 0 && now + milliseconds(options_.ttl_s * 1000 / 3) >= lease_valid_until_) {
    auto kept = etcd_->KeepAliveOnce(lease_id_, now + kCallTimeout);
    if (kept.ok() && *kept > 0) {
      lease_valid_until_ = ValidUntil(now, *kept);
    } else {
      lease_id_ = 0;  // expired (NOT_FOUND), or unknown: take a new one
    }
  }
  if (lease_id_ == 0 || steady_clock::now() >= lease_valid_until_) {
    const TimePoint sent = steady_clock::now();
    RKV_ASSIGN_OR_RETURN(etcd::LeaseGrant grant, etcd_->GrantLease(options_.ttl_s, sent + kCallTimeout));
    lease_id_ = grant.id;
    lease_valid_until_ = ValidUntil(sent, grant.ttl_s);
  }
  const std::string key = EtcdLeaderKey(options_.prefix);
  std::vector<etcd::Compare> compares(1);
  compares[0].key = key;
  compares[0].target = etcd::Compare::Target::kCreateRevision;
  compares[0].result = etcd::Compare::Result::kEqual;
  compares[0].number = 0;
  RKV_ASSIGN_OR_RETURN(etcd::TxnResult result,
                       etcd_->Txn(compares, {etcd::Op::Put(key, options_.advertise, lease_id_)}, {etcd::Op::Get(key)},
                                  steady_clock::now() + kCallTimeout));
  if (result.succeeded) {
    Lead(result.revision);
    return true;
  }
  std::string leader;
  if (result.gets.size() == 1 && result.gets[0].kvs.size() == 1) {
    const etcd::KeyValue& kv = result.gets[0].kvs[0];
    if (kv.lease == lease_id_) {
      // This coordinator's own key from a leadership it gave up while the
      // lease lived on: end it, so that an election starts from nothing.
      (void)etcd_->RevokeLease(lease_id_, steady_clock::now() + kCallTimeout);
      lease_id_ = 0;
    } else {
      leader = kv.value;
    }
  }
  MutexLock lock(mu_);
  leader_ = leader;
  why_ = leader.empty() ? "the leader key is empty; an election is under way" : "another coordinator leads";
  return false;
}

StatusOr<Leadership::TimePoint> Leadership::KeepAlive(TimePoint valid_until) {
  const TimePoint sent = steady_clock::now();
  const TimePoint deadline = std::min(valid_until, sent + kCallTimeout);
  RKV_ASSIGN_OR_RETURN(int64_t ttl_left, etcd_->KeepAliveOnce(lease_id_, deadline));
  if (ttl_left <= 0) return NotFound("the election lease " + std::to_string(lease_id_) + " has expired");
  return ValidUntil(sent, ttl_left);
}

void Leadership::Lead(int64_t create_revision) {
  const TimePoint valid = lease_valid_until_;
  std::string why;
  Status elected = steady_clock::now() < valid ? on_elected_(create_revision)
                                               : Unavailable("the election lease ran out before the leadership began");
  if (elected.ok()) {
    {
      MutexLock lock(mu_);
      leading_ = true;
      valid_until_ = valid;
      leader_ = options_.advertise;
      why_ = "this coordinator leads";
    }
    LOG(INFO) << "this coordinator (" << options_.advertise << ") leads the cluster under " << options_.prefix
              << " (leader key revision " << create_revision << ", election lease " << options_.ttl_s << " s)";
    TimePoint current = valid;
    milliseconds wait(options_.ttl_s * 1000 / 3);
    for (;;) {
      if (!Sleep(wait)) {
        why = "stopping";
        break;
      }
      if (!still_valid_()) {
        why = "a commit found the leadership gone, or its outcome could not be learned";
        break;
      }
      auto next = KeepAlive(current);
      if (next.ok()) {
        current = *next;
        lease_valid_until_ = current;
        MutexLock lock(mu_);
        valid_until_ = current;
        wait = milliseconds(options_.ttl_s * 1000 / 3);
        continue;
      }
      if (next.status().code() == StatusCode::kNotFound || steady_clock::now() >= current) {
        why = "the election lease was not renewed in time: " + next.status().ToString();
        break;
      }
      wait = kKeepAliveRetry;
    }
    {
      MutexLock lock(mu_);
      leading_ = false;
      leader_.clear();
      why_ = why;
    }
    LOG(WARNING) << "this coordinator (" << options_.advertise << ") no longer leads: " << why;
  } else {
    why = elected.ToString();
    LOG(ERROR) << "elected leader, but cannot take the state over: " << elected << "; giving the leadership up";
    SetWhy("the elected coordinator could not take the state over: " + why);
  }
  on_deposed_();
  // Revoking deletes the leader key at once: the next election needs no
  // wait for the lease to expire.
  (void)etcd_->RevokeLease(lease_id_, steady_clock::now() + kCallTimeout);
  lease_id_ = 0;
}

}  // namespace rkv::coordinator
