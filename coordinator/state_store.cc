#include "coordinator/state_store.h"

#include <filesystem>
#include <system_error>

#include <rocksdb/db.h>
#include <rocksdb/options.h>
#include <rocksdb/write_batch.h>

namespace rkv::coordinator {
namespace {

constexpr char kMetaKey[] = "meta";
constexpr char kServerPrefix[] = "server/";

Status FromRocks(const rocksdb::Status& s, const std::string& context) {
  if (s.ok()) return Status::Ok();
  if (s.IsIOError() && s.ToString().find("lock") != std::string::npos) {
    return FailedPrecondition(context + ": " + s.ToString() + " (is another rkv-coordinator using it?)");
  }
  if (s.IsCorruption()) return DataLoss(context + ": " + s.ToString());
  if (s.IsNoSpace()) return ResourceExhausted(context + ": " + s.ToString());
  return Internal(context + ": " + s.ToString());
}

}  // namespace

class RocksDbStateStore final : public StateStore {
 public:
  RocksDbStateStore(std::unique_ptr<rocksdb::DB> db, std::string dir) : db_(std::move(db)), dir_(std::move(dir)) {}

  StatusOr<Snapshot> Load() override {
    Snapshot snap;
    std::string value;
    rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), kMetaKey, &value);
    if (s.ok()) {
      v1::store::StoredMeta meta;
      if (!meta.ParseFromString(value)) return DataLoss("meta record in " + dir_ + " does not parse");
      snap.meta = std::move(meta);
    } else if (!s.IsNotFound()) {
      return FromRocks(s, "reading meta from " + dir_);
    }
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
    for (it->Seek(kServerPrefix); it->Valid() && it->key().starts_with(kServerPrefix); it->Next()) {
      v1::store::StoredServer server;
      if (!server.ParseFromArray(it->value().data(), static_cast<int>(it->value().size()))) {
        return DataLoss("record " + it->key().ToString() + " in " + dir_ + " does not parse");
      }
      if (it->key().ToString() != kServerPrefix + server.info().server_id()) {
        return DataLoss("record " + it->key().ToString() + " in " + dir_ + " holds server '" +
                        server.info().server_id() + "'");
      }
      snap.servers.push_back(std::move(server));
    }
    RKV_RETURN_IF_ERROR(FromRocks(it->status(), "scanning servers in " + dir_));
    return snap;
  }

  Status Commit(const v1::store::StoredMeta& meta, const std::vector<v1::store::StoredServer>& servers,
                const std::vector<std::string>& removed) override {
    rocksdb::WriteBatch batch;
    RKV_RETURN_IF_ERROR(FromRocks(batch.Put(kMetaKey, meta.SerializeAsString()), "batch"));
    for (const auto& server : servers) {
      RKV_RETURN_IF_ERROR(
          FromRocks(batch.Put(kServerPrefix + server.info().server_id(), server.SerializeAsString()), "batch"));
    }
    for (const std::string& id : removed) RKV_RETURN_IF_ERROR(FromRocks(batch.Delete(kServerPrefix + id), "batch"));
    rocksdb::WriteOptions wo;
    wo.sync = true;
    return FromRocks(db_->Write(wo, &batch), "writing the coordinator state in " + dir_);
  }

 private:
  std::unique_ptr<rocksdb::DB> db_;
  const std::string dir_;
};

StatusOr<std::unique_ptr<StateStore>> OpenRocksDbStateStore(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return PosixError("create_directories(" + dir + ")", ec.value());
  rocksdb::Options options;
  options.create_if_missing = true;
  options.keep_log_file_num = 4;
  rocksdb::DB* raw = nullptr;
  RKV_RETURN_IF_ERROR(FromRocks(rocksdb::DB::Open(options, dir, &raw), "opening RocksDB in " + dir));
  return std::unique_ptr<StateStore>(new RocksDbStateStore(std::unique_ptr<rocksdb::DB>(raw), dir));
}

}  // namespace rkv::coordinator
