#include "coordinator/etcd_state_store.h"

#include <utility>

#include "proto/validation.h"

namespace rkv::coordinator {

using control::Printable;

namespace {

constexpr char kFormatName[] = "format";
constexpr char kMetaName[] = "meta";
constexpr char kServerDir[] = "server/";
constexpr char kLeaderName[] = "leader";

}  // namespace

std::string EtcdFormatKey(const std::string& prefix) { return prefix + kFormatName; }
std::string EtcdMetaKey(const std::string& prefix) { return prefix + kMetaName; }
std::string EtcdServerKey(const std::string& prefix, const std::string& server_id) {
  return prefix + kServerDir + server_id;
}
std::string EtcdLeaderKey(const std::string& prefix) { return prefix + kLeaderName; }

Status ValidateEtcdPrefix(const std::string& prefix) {
  if (prefix.size() < 2 || prefix.front() != '/' || prefix.back() != '/') {
    return InvalidArgument("--etcd_prefix '" + Printable(prefix) + "' must start and end with '/' (e.g. /rkv/prod/)");
  }
  if (prefix.size() > 256) return InvalidArgument("--etcd_prefix is longer than 256 bytes");
  for (char c : prefix) {
    if (c <= 0x20 || c >= 0x7f) {
      return InvalidArgument("--etcd_prefix '" + Printable(prefix) + "' holds a space or a non-printable byte");
    }
  }
  return Status::Ok();
}

EtcdStateStore::EtcdStateStore(etcd::EtcdClient* etcd, std::string prefix, std::chrono::milliseconds call_timeout)
    : etcd_(etcd), prefix_(std::move(prefix)), call_timeout_(call_timeout) {}

StatusOr<StateStore::Snapshot> EtcdStateStore::Load() {
  RKV_ASSIGN_OR_RETURN(etcd::RangeResult range,
                       etcd_->GetPrefix(prefix_, std::chrono::steady_clock::now() + call_timeout_));
  Snapshot snap;
  bool format_seen = false;
  for (etcd::KeyValue& kv : range.kvs) {
    const std::string name = kv.key.substr(prefix_.size());
    if (name == kFormatName) {
      if (kv.value != kEtcdStateFormat) {
        return FailedPrecondition("etcd prefix " + prefix_ + " holds state of layout '" + Printable(kv.value) +
                                  "', not '" + kEtcdStateFormat +
                                  "' (another program's, or a newer rkv's); nothing was changed");
      }
      format_seen = true;
    } else if (name == kMetaName) {
      v1::store::StoredMeta meta;
      if (!meta.ParseFromString(kv.value)) return DataLoss("etcd key " + kv.key + " does not parse");
      snap.meta = std::move(meta);
    } else if (name.starts_with(kServerDir)) {
      v1::store::StoredServer server;
      if (!server.ParseFromString(kv.value)) return DataLoss("etcd key " + kv.key + " does not parse");
      if (name.substr(sizeof(kServerDir) - 1) != server.info().server_id()) {
        return DataLoss("etcd key " + Printable(kv.key) + " holds server '" + Printable(server.info().server_id()) +
                        "'");
      }
      snap.servers.push_back(std::move(server));
    } else if (name != kLeaderName) {
      return FailedPrecondition("etcd prefix " + prefix_ + " holds key '" + Printable(kv.key) +
                                "', which rkv-coordinator does not write: is the prefix another cluster's or "
                                "program's? Nothing was changed");
    }
  }
  if (!format_seen && (snap.meta.has_value() || !snap.servers.empty())) {
    return FailedPrecondition("etcd prefix " + prefix_ + " holds cluster records but no format key '" +
                              EtcdFormatKey(prefix_) + "'; nothing was changed");
  }
  MutexLock lock(mu_);
  revision_ = range.revision;
  return snap;
}

Status EtcdStateStore::Commit(const v1::store::StoredMeta& meta, const std::vector<v1::store::StoredServer>& servers,
                              const std::vector<std::string>& removed) {
  int64_t leader_revision;
  bool import_only;
  {
    MutexLock lock(mu_);
    leader_revision = leader_create_revision_;
    import_only = import_only_;
  }
  std::vector<etcd::Compare> compares;
  const auto absent = [&](const std::string& key, int64_t revision) {
    etcd::Compare& c = compares.emplace_back();
    c.key = key;
    c.target = etcd::Compare::Target::kCreateRevision;
    c.result = etcd::Compare::Result::kEqual;
    c.number = revision;
  };
  if (import_only) {
    absent(EtcdFormatKey(prefix_), 0);
    absent(EtcdMetaKey(prefix_), 0);
  } else if (leader_revision == 0) {
    return Unavailable("not the leader: this coordinator commits nothing");
  } else {
    absent(EtcdLeaderKey(prefix_), leader_revision);  // the key is the one this leader created
  }
  std::vector<etcd::Op> ops;
  ops.reserve(servers.size() + removed.size() + 2);
  ops.push_back(etcd::Op::Put(EtcdFormatKey(prefix_), kEtcdStateFormat));
  v1::store::StoredMeta stamped = meta;
  stamped.set_leader_revision(leader_revision);
  ops.push_back(etcd::Op::Put(EtcdMetaKey(prefix_), stamped.SerializeAsString()));
  for (const auto& server : servers) {
    ops.push_back(etcd::Op::Put(EtcdServerKey(prefix_, server.info().server_id()), server.SerializeAsString()));
  }
  for (const std::string& id : removed) ops.push_back(etcd::Op::Delete(EtcdServerKey(prefix_, id)));
  auto txn = etcd_->Txn(compares, ops, {}, std::chrono::steady_clock::now() + call_timeout_);
  if (!txn.ok()) return ResolveUnknownCommit(meta.map_version(), leader_revision, txn.status());
  const etcd::TxnResult& result = *txn;
  if (!result.succeeded && import_only) {
    return FailedPrecondition("etcd prefix " + prefix_ + " came to hold a cluster meanwhile: nothing was imported");
  }
  if (!result.succeeded) {
    MutexLock lock(mu_);
    if (leader_create_revision_ == leader_revision) leader_create_revision_ = 0;
    return Unavailable("not the leader any more: the leader key " + EtcdLeaderKey(prefix_) +
                       " is no longer this coordinator's; map version " + std::to_string(meta.map_version()) +
                       " was not committed");
  }
  MutexLock lock(mu_);
  revision_ = result.revision;
  return Status::Ok();
}

Status EtcdStateStore::ResolveUnknownCommit(uint64_t version, int64_t leader_revision, const Status& error) {
  // Only the leader writes meta, and its versions only grow: the meta key
  // holds `version` exactly when the transaction was applied. Read it as
  // long as the leadership may last; a store that cannot tell gives the
  // leadership up, so that the next leader reloads whatever etcd holds.
  const auto give_up = std::chrono::steady_clock::now() + 2 * call_timeout_;
  Status last = error;
  while (std::chrono::steady_clock::now() < give_up) {
    auto read = etcd_->Get(EtcdMetaKey(prefix_), give_up);
    if (!read.ok()) {
      last = read.status();
      continue;
    }
    v1::store::StoredMeta stored;
    if (read->kvs.size() == 1 && stored.ParseFromString(read->kvs[0].value) && stored.map_version() == version) {
      MutexLock lock(mu_);
      revision_ = read->kvs[0].mod_revision;
      return Status::Ok();
    }
    return Unavailable("committing map version " + std::to_string(version) + " failed: " + error.ToString());
  }
  {
    MutexLock lock(mu_);
    if (leader_create_revision_ == leader_revision) leader_create_revision_ = 0;
    unresolved_ = true;
  }
  return Unavailable("committing map version " + std::to_string(version) + " has an unknown outcome (" +
                     error.ToString() + "; then " + last.ToString() + "): this coordinator stops leading");
}

bool EtcdStateStore::TakeUnresolved() {
  MutexLock lock(mu_);
  return std::exchange(unresolved_, false);
}

void EtcdStateStore::SetImportOnly() {
  MutexLock lock(mu_);
  import_only_ = true;
}

void EtcdStateStore::SetLeadership(int64_t leader_create_revision) {
  MutexLock lock(mu_);
  leader_create_revision_ = leader_create_revision;
}

bool EtcdStateStore::Leads() const {
  MutexLock lock(mu_);
  return leader_create_revision_ != 0;
}

int64_t EtcdStateStore::revision() const {
  MutexLock lock(mu_);
  return revision_;
}

}  // namespace rkv::coordinator
