#include "coordinator/etcd_coordinator.h"

#include <utility>

#include <glog/logging.h>

namespace rkv::coordinator {

namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using std::chrono::steady_clock;

// How soon a failed standby reload is tried again.
constexpr milliseconds kReloadRetry{500};

std::string Join(const std::vector<std::string>& parts) {
  std::string out;
  for (const std::string& p : parts) out += (out.empty() ? "" : ",") + p;
  return out;
}

}  // namespace

StatusOr<std::unique_ptr<EtcdCoordinator>> EtcdCoordinator::Open(const CoordinatorConfig& config,
                                                                  EtcdCoordinatorOptions options) {
  RKV_RETURN_IF_ERROR(ValidateEtcdPrefix(options.prefix));
  if (options.election_ttl_s < 1 || options.election_ttl_s > 60) {
    return InvalidArgument("--election_ttl_s " + std::to_string(options.election_ttl_s) + " is outside [1, 60]");
  }
  std::unique_ptr<EtcdCoordinator> c(new EtcdCoordinator());
  RKV_ASSIGN_OR_RETURN(c->etcd_, etcd::EtcdClient::Create(options.endpoints));
  const std::string endpoints = Join(options.endpoints);
  c->options_ = std::move(options);

  // The first load doubles as the wait for etcd: UNAVAILABLE and
  // DEADLINE_EXCEEDED are waited out, any other error is final.
  const auto start = steady_clock::now();
  const auto give_up = start + c->options_.connect_wait;
  auto next_progress = start + seconds(5);
  for (;;) {
    auto store = std::make_unique<EtcdStateStore>(c->etcd_.get(), c->options_.prefix);
    EtcdStateStore* raw = store.get();
    auto state = CoordinatorState::Open(config, std::move(store));
    if (state.ok()) {
      c->store_ = raw;
      c->owned_state_ = std::move(state).value();
      c->state_ = c->owned_state_.get();
      break;
    }
    const StatusCode code = state.status().code();
    if (code != StatusCode::kUnavailable && code != StatusCode::kDeadlineExceeded) {
      return state.status().WithContext("etcd " + endpoints + " prefix " + c->options_.prefix);
    }
    const auto now = steady_clock::now();
    if (now >= give_up) {
      return Unavailable("etcd at " + endpoints + " did not answer within " +
                         std::to_string(c->options_.connect_wait.count()) + " s (--etcd_wait_s): " +
                         state.status().ToString());
    }
    if (now >= next_progress) {
      next_progress = now + seconds(5);
      LOG(WARNING) << "waiting for etcd at " << endpoints << " ("
                   << std::chrono::duration_cast<seconds>(now - start).count() << " s of "
                   << c->options_.connect_wait.count() << "): " << state.status();
    }
    std::this_thread::sleep_for(milliseconds(250));
  }
  LOG(INFO) << "following the cluster state in etcd " << endpoints << " under " << c->options_.prefix
            << " at revision " << c->store_->revision();
  c->reload_thread_ = std::thread([p = c.get()] { p->ReloadLoop(); });
  return c;
}

EtcdCoordinator::~EtcdCoordinator() { Stop(); }

std::unique_ptr<CoordinatorState> EtcdCoordinator::TakeState() { return std::move(owned_state_); }

void EtcdCoordinator::StartCampaign(const std::string& advertise) {
  advertise_ = advertise;
  LeadershipOptions lo;
  lo.prefix = options_.prefix;
  lo.advertise = advertise;
  lo.ttl_s = options_.election_ttl_s;
  leadership_ = std::make_unique<Leadership>(
      etcd_.get(), std::move(lo), [this](int64_t revision) { return OnElected(revision); },
      [this] { OnDeposed(); }, [this] { return !store_->TakeUnresolved() && store_->Leads(); });
  leadership_ptr_.store(leadership_.get(), std::memory_order_release);
  StartWatch();
}

Status EtcdCoordinator::CheckLeading(std::string* leader) const {
  const Leadership* leadership = leadership_ptr_.load(std::memory_order_acquire);
  if (leadership == nullptr) {
    leader->clear();
    return Unavailable("not the leader; no leader elected yet (this coordinator is starting)");
  }
  return leadership->CheckLeading(leader);
}

void EtcdCoordinator::FillStatus(std::chrono::steady_clock::time_point deadline,
                                 v1::CoordinatorStatus* status) const {
  if (leadership_ptr_.load(std::memory_order_acquire) != nullptr) status->set_address(advertise_);
  status->set_state_revision(store_->revision());
  status->set_etcd_prefix(options_.prefix);
  const std::vector<etcd::EndpointStatus> endpoints = etcd_->EndpointStatuses(deadline);
  for (const etcd::EndpointStatus& e : endpoints) {
    v1::EtcdEndpointHealth* h = status->add_etcd();
    h->set_endpoint(e.endpoint);
    h->set_healthy(e.health.ok());
    if (e.health.ok()) {
      h->set_version(e.version);
      h->set_is_leader(e.member_id != 0 && e.member_id == e.leader_id);
    } else {
      h->set_error(e.health.ToString());
    }
  }
}

void EtcdCoordinator::StartWatch() {
  const int64_t from = store_->revision() + 1;
  const std::string leader_key = EtcdLeaderKey(options_.prefix);
  auto watch = etcd_->WatchPrefix(
      options_.prefix, from,
      [this, leader_key](const std::vector<etcd::WatchEvent>& events, int64_t) {
        bool state_changed = false;
        bool leader_changed = false;
        for (const etcd::WatchEvent& e : events) (e.kv.key == leader_key ? leader_changed : state_changed) = true;
        Leadership* leadership = leadership_ptr_.load(std::memory_order_acquire);
        if (leader_changed && leadership != nullptr) leadership->Nudge();
        if (state_changed) RequestReload();
      },
      [this](const Status& error) {
        LOG(WARNING) << "the watch of " << options_.prefix << " ended: " << error << "; reloading and watching again";
        MutexLock lock(mu_);
        rewatch_wanted_ = true;
        reload_wanted_ = true;
        cv_.NotifyAll();
      });
  MutexLock lock(mu_);
  watch_ = std::move(watch);
}

void EtcdCoordinator::RequestReload() {
  MutexLock lock(mu_);
  reload_wanted_ = true;
  cv_.NotifyAll();
}

void EtcdCoordinator::ReloadLoop() {
  for (;;) {
    bool rewatch = false;
    {
      MutexLock lock(mu_);
      while (!stopping_ && !reload_wanted_) cv_.Wait(mu_);
      if (stopping_) return;
      reload_wanted_ = false;
      rewatch = std::exchange(rewatch_wanted_, false);
    }
    if (rewatch) {
      std::unique_ptr<etcd::EtcdClient::Watch> old;
      {
        MutexLock lock(mu_);
        old = std::move(watch_);
      }
      old.reset();  // joins the old watch's thread, outside mu_
    }
    Status reloaded = Status::Ok();
    {
      MutexLock reload_lock(reload_mu_);
      bool leading;
      {
        MutexLock lock(mu_);
        leading = leading_;
      }
      // A leader's state is its own commits: it is never reloaded.
      if (!leading) reloaded = state_->Reload(/*quiet=*/true);
    }
    if (rewatch) StartWatch();
    if (!reloaded.ok()) {
      LOG_EVERY_N(ERROR, 10) << "cannot reload the cluster state from etcd: " << reloaded << "; retrying";
      std::this_thread::sleep_for(kReloadRetry);
      RequestReload();
    }
  }
}

Status EtcdCoordinator::OnElected(int64_t create_revision) {
  MutexLock reload_lock(reload_mu_);
  store_->SetLeadership(create_revision);
  // Everything an earlier leader committed is in etcd now (its commits
  // after this key's creation fail): take it over as a restart would.
  if (Status s = state_->Reload(/*quiet=*/false); !s.ok()) {
    store_->SetLeadership(0);
    return s;
  }
  MutexLock lock(mu_);
  leading_ = true;
  return Status::Ok();
}

void EtcdCoordinator::OnDeposed() {
  {
    MutexLock reload_lock(reload_mu_);
    store_->SetLeadership(0);
    MutexLock lock(mu_);
    leading_ = false;
  }
  RequestReload();
}

void EtcdCoordinator::Stop() {
  if (Leadership* leadership = leadership_ptr_.load(std::memory_order_acquire)) leadership->Stop();
  std::unique_ptr<etcd::EtcdClient::Watch> watch;
  {
    MutexLock lock(mu_);
    stopping_ = true;
    watch = std::move(watch_);
    cv_.NotifyAll();
  }
  watch.reset();
  if (reload_thread_.joinable()) reload_thread_.join();
}

}  // namespace rkv::coordinator
