// The server's apply path (server/apply/apply.h): request messages a client
// SENDs and the staging-ring bytes it WRITEs, applied to a real Store
// (RocksDB in a scratch directory, durability none), Table and Heap that
// live for the whole run, so requests meet the state earlier ones left.
//
// Input: a flags byte, a count byte (1..8 requests), then per request a
// length byte (0..56) and that many message bytes; the rest is the ring,
// exactly its size (ASan sees any read past it). With flag bit 0 the
// harness reseals the checksum of the record each well-sized message
// names, so the fuzzer gets past the checksum to the checks behind it.
// With flag bit 1 the messages arrive on a replication connection
// (Applier::ApplyReplica) instead of a client's; otherwise, with flag bit 2,
// the client's messages are applied together, as a polling round's
// (Applier::ApplyBatch: in groups forwarded at once). The Applier replicates:
// its policy routes every client write to one backup and accepts every
// replica, and its forwarder acknowledges every forward it checks.
//
// Properties: every reply is well formed (credits 1, a valid status code,
// a NUL-terminated message); an OK PUT leaves the record's key with the
// reply's version in both the table and the store, an OK DELETE leaves it
// in neither. Each whole message gets a fresh request id from the harness.
// A forwarded record decodes, carries a non-zero version and the op's
// tombstone flag. An OK replica PUT leaves the key in table and store with
// the reply's version, at least the record's (the store's high-water mark
// too); an OK replica DELETE leaves the key absent (reply version 0) or
// newer than the record's. Applied together, each key's last OK write
// decides what the key holds (as above), and an OK PUT of a key gets a
// higher version than the OK writes of it before in the batch. A client's
// message whose op is a lookup (applied one by one) goes to
// Applier::Locate: OK only for a whole message naming a key record in the
// ring whose key the table holds, at the reply's version and slot word,
// the block to land named only when it fits the slot; NOT_FOUND only when
// the table lacks the key; a lookup changes neither table nor store.
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/protocol.h"
#include "common/record.h"
#include "fuzz/fuzz_input.h"
#include "server/apply/apply.h"
#include "server/table/heap.h"
#include "server/replication/replication.h"
#include "server/replication/replicator.h"
#include "server/store/store.h"
#include "server/table/table.h"

namespace rkv::server {
namespace {

struct FreeDeleter {
  void operator()(uint8_t* p) const { std::free(p); }
};
using Buffer = std::unique_ptr<uint8_t, FreeDeleter>;

Buffer AlignedZeroed(size_t n) {
  Buffer b(static_cast<uint8_t*>(std::aligned_alloc(64, n)));
  std::memset(b.get(), 0, n);
  return b;
}

constexpr uint32_t kBucketCountLog2 = 6;
constexpr uint64_t kHeapBytes = 256 << 10;
// Every request comes from one client (its ids are fresh per request).
constexpr uint64_t kClientId = 0xF022;

// Every client write goes to one backup; every replica is accepted.
class FuzzPolicy final : public ReplicationPolicy {
 public:
  StatusOr<WriteRoute> RouteWrite(std::string_view) override {
    return WriteRoute{1, 0, {ReplicaPeer{"s-fuzz-backup", 1, "127.0.0.1:1"}}};
  }
  Status ReportFailedBackup(uint32_t, const ReplicaPeer&, std::string_view) override { return Status::Ok(); }
  std::optional<std::string> FindPeer(uint64_t, uint64_t) override { return "s-fuzz-primary"; }
  Status AcceptReplica(std::string_view, std::string_view, uint64_t) override { return Status::Ok(); }
  Status CheckLease() override { return Status::Ok(); }
};

// Checks what the apply path forwards, and acknowledges it.
class CheckingForwarder final : public Forwarder {
 public:
  std::vector<Status> Forward(const std::vector<ReplicaPeer>& backups, uint64_t, protocol::Op op,
                              std::span<const uint8_t> record) override {
    RKV_FUZZ_CHECK(op == protocol::Op::kReplicatePut || op == protocol::Op::kReplicateDelete);
    const auto r = DecodeRecord(record);
    RKV_FUZZ_CHECK(r.ok() && r->version != 0);
    RKV_FUZZ_CHECK(((r->flags & layout::kBlockFlagTombstone) != 0) == (op == protocol::Op::kReplicateDelete));
    return std::vector<Status>(backups.size());
  }
};

struct World {
  std::filesystem::path dir;
  std::unique_ptr<Store> store;
  Buffer index;
  Buffer heap_memory;
  std::unique_ptr<Heap> heap;
  std::unique_ptr<Table> table;
  FuzzPolicy policy;
  CheckingForwarder forwarder;
  std::unique_ptr<Applier> applier;
};

World* g_world = nullptr;

// At exit the scratch directory goes; the store stays open (it is never
// closed: RocksDB's own statics may be gone by then).
void RemoveDir() {
  std::error_code ec;
  std::filesystem::remove_all(g_world->dir, ec);
}

World& TheWorld() {
  if (g_world != nullptr) return *g_world;
  g_world = new World;
  World& w = *g_world;
  const char* tmp = std::getenv("TMPDIR");
  std::string templ = std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/rkv_apply_fuzz_XXXXXX";
  RKV_FUZZ_CHECK(::mkdtemp(templ.data()) != nullptr);
  w.dir = templ;
  std::atexit(RemoveDir);
  auto store = Store::Open(w.dir.string(), Durability::kNone);
  RKV_FUZZ_CHECK(store.ok());
  w.store = std::move(store).value();
  const size_t index_bytes = layout::IndexBytes(uint64_t{1} << kBucketCountLog2);
  w.index = AlignedZeroed(index_bytes);
  w.heap_memory = AlignedZeroed(kHeapBytes);
  // A short grace period: a full heap waits for at most one of them.
  w.heap = std::make_unique<Heap>(kHeapBytes, std::chrono::milliseconds(1));
  w.table = std::make_unique<Table>(std::span<uint8_t>(w.index.get(), index_bytes),
                                    std::span<uint8_t>(w.heap_memory.get(), kHeapBytes), w.heap.get());
  RKV_FUZZ_CHECK(w.table->Init(kBucketCountLog2, w.store->epoch(), 42).ok());
  w.applier = std::make_unique<Applier>(w.store.get(), w.table.get(), w.heap.get(), ApplyLimits{64, 4096},
                                        RequestCacheLimits{}, ApplyReplication{&w.policy, &w.forwarder});
  return w;
}

void CheckReply(const protocol::ReplyMsg& r) {
  RKV_FUZZ_CHECK(r.credits == 1);
  RKV_FUZZ_CHECK(IsValidStatusCode(r.status_code));
  RKV_FUZZ_CHECK(IsValidReason(r.reason));
  RKV_FUZZ_CHECK(r.status_code != 0 || r.reason == 0);
  RKV_FUZZ_CHECK(r.reserved == 0);
  RKV_FUZZ_CHECK(std::memchr(r.message, '\0', sizeof(r.message)) != nullptr);
}

// What an OK reply to `req` (whole, its record in `ring`) leaves in the
// table and the store (see Properties).
void CheckApplied(World& w, const protocol::RequestMsg& req, std::span<const uint8_t> ring,
                  const protocol::ReplyMsg& reply, bool replica) {
  const auto record = DecodeRecord(ring.subspan(req.ring_offset, req.length));
  RKV_FUZZ_CHECK(record.ok());
  const auto table_entry = w.table->Lookup(record->key);
  const auto stored = w.store->Get(record->key);
  RKV_FUZZ_CHECK(stored.ok());
  if (replica) {
    RKV_FUZZ_CHECK(record->version != 0);
    if (req.op == static_cast<uint8_t>(protocol::Op::kReplicatePut)) {
      RKV_FUZZ_CHECK(reply.version >= record->version);
      RKV_FUZZ_CHECK(table_entry.has_value() && table_entry->version == reply.version);
      RKV_FUZZ_CHECK(stored->has_value() && (*stored)->version == reply.version);
      RKV_FUZZ_CHECK(w.store->version_high_water() >= record->version);
    } else {
      RKV_FUZZ_CHECK(req.op == static_cast<uint8_t>(protocol::Op::kReplicateDelete));
      if (reply.version == 0) {
        RKV_FUZZ_CHECK(!table_entry.has_value() && !stored->has_value());
      } else {
        RKV_FUZZ_CHECK(reply.version > record->version);
        RKV_FUZZ_CHECK(table_entry.has_value() && table_entry->version == reply.version);
      }
    }
  } else if (req.op == static_cast<uint8_t>(protocol::Op::kPut)) {
    RKV_FUZZ_CHECK(reply.version > 0);
    RKV_FUZZ_CHECK(table_entry.has_value() && table_entry->version == reply.version);
    RKV_FUZZ_CHECK(stored->has_value() && (*stored)->version == reply.version &&
                   (*stored)->value == record->value);
  } else {
    RKV_FUZZ_CHECK(req.op == static_cast<uint8_t>(protocol::Op::kDelete));
    RKV_FUZZ_CHECK(!table_entry.has_value());
    RKV_FUZZ_CHECK(!stored->has_value());
  }
}

// What a lookup's reply (OK or NOT_FOUND, to `req`, whole, its record in
// `ring`) says of the table, and the block it has written (see
// Properties).
void CheckLocated(World& w, const protocol::RequestMsg& req, std::span<const uint8_t> ring,
                  const protocol::ReplyMsg& reply, const Applier::Located& located) {
  const auto record = DecodeRecord(ring.subspan(req.ring_offset, req.length));
  RKV_FUZZ_CHECK(record.ok() && !record->key.empty() && record->value.empty());
  const auto entry = w.table->Lookup(record->key);
  if (reply.status_code == static_cast<int32_t>(StatusCode::kNotFound)) {
    RKV_FUZZ_CHECK(!entry.has_value());
    RKV_FUZZ_CHECK(located.bytes == 0 && reply.block == 0);
    return;
  }
  RKV_FUZZ_CHECK(entry.has_value() && entry->version == reply.version && entry->slot == reply.block);
  if (located.bytes == 0) {
    RKV_FUZZ_CHECK(req.landing_bytes == 0 || layout::SlotBlockBytes(reply.block) > req.landing_bytes);
    return;
  }
  RKV_FUZZ_CHECK(located.bytes == layout::SlotBlockBytes(reply.block) && located.bytes <= req.landing_bytes);
  RKV_FUZZ_CHECK(located.heap_offset == layout::SlotBlockOffset(reply.block));
  RKV_FUZZ_CHECK(located.landing_addr == req.landing_addr && located.landing_rkey == req.landing_rkey);
  RKV_FUZZ_CHECK(located.heap_offset + located.bytes <= kHeapBytes);
  const auto block =
      DecodeHeapBlock(std::span<const uint8_t>(w.heap_memory.get() + located.heap_offset, located.bytes));
  RKV_FUZZ_CHECK(block.ok() && block->key == record->key && block->version == reply.version);
}

}  // namespace
}  // namespace rkv::server

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace rkv;
  using namespace rkv::server;
  World& w = TheWorld();
  fuzz::FuzzInput in(data, size);
  const uint8_t flags = in.Take<uint8_t>();
  const size_t count = in.Take<uint8_t>() % 8 + 1;
  std::vector<std::vector<uint8_t>> msgs;
  for (size_t i = 0; i < count; ++i) {
    const std::span<const uint8_t> m = in.Bytes(in.Take<uint8_t>() % (sizeof(protocol::RequestMsg) + 1));
    msgs.emplace_back(m.begin(), m.end());
  }
  const std::span<const uint8_t> rest = in.Rest();
  std::vector<uint8_t> ring(rest.begin(), rest.end());

  static uint64_t next_request_id = 1;
  const bool replica = (flags & 2) != 0;
  const bool together = !replica && (flags & 4) != 0;
  std::vector<protocol::RequestMsg> reqs(msgs.size());
  std::vector<bool> in_ring(msgs.size());
  // A reply well formed and naming its request; whether it is OK (then the
  // message was whole and named a valid record in the ring).
  const auto check_reply = [&](size_t k, const protocol::ReplyMsg& reply) {
    CheckReply(reply);
    uint64_t sent_id = 0;
    if (msgs[k].size() >= offsetof(protocol::RequestMsg, request_id) + sizeof(sent_id)) {
      std::memcpy(&sent_id, msgs[k].data() + offsetof(protocol::RequestMsg, request_id), sizeof(sent_id));
    }
    RKV_FUZZ_CHECK(reply.request_id == sent_id);
    if (reply.status_code != 0) return false;
    RKV_FUZZ_CHECK(in_ring[k]);
    return true;
  };
  for (size_t k = 0; k < msgs.size(); ++k) {
    std::vector<uint8_t>& msg = msgs[k];
    protocol::RequestMsg& req = reqs[k];
    const bool whole = msg.size() == sizeof(req);
    if (whole) {
      // A fresh id: a replayed id may be answered from a cache of earlier
      // replies, and this harness checks each reply against the state.
      const uint64_t id = next_request_id++;
      std::memcpy(msg.data() + offsetof(protocol::RequestMsg, request_id), &id, sizeof(id));
      std::memcpy(&req, msg.data(), sizeof(req));
    }
    in_ring[k] = whole && req.ring_offset <= ring.size() && req.length <= ring.size() - req.ring_offset;
    if ((flags & 1) != 0 && in_ring[k] && req.length >= layout::kBlockHeaderBytes) {
      layout::BlockHeader h;
      std::memcpy(&h, ring.data() + req.ring_offset, sizeof(h));
      if (layout::RecordBytes(h.key_length, h.value_length) <= req.length) {
        ResealRecord(std::span<uint8_t>(ring).subspan(req.ring_offset, req.length));
      }
    }
    if (together) continue;  // applied below, once all are ready
    if (!replica && !msg.empty() && msg[0] == static_cast<uint8_t>(protocol::Op::kGet)) {
      const uint64_t puts = w.applier->snapshot().puts;
      Applier::Located located;
      const protocol::ReplyMsg reply = w.applier->Locate(msg, ring, &located);
      const bool found = check_reply(k, reply);
      RKV_FUZZ_CHECK(w.applier->snapshot().puts == puts);
      if (found || reply.status_code == static_cast<int32_t>(StatusCode::kNotFound)) {
        RKV_FUZZ_CHECK(in_ring[k]);
        CheckLocated(w, req, ring, reply, located);
      } else {
        RKV_FUZZ_CHECK(located.bytes == 0);
      }
      continue;
    }
    const protocol::ReplyMsg reply =
        replica ? w.applier->ApplyReplica("s-fuzz-primary", msg, ring) : w.applier->Apply(kClientId, msg, ring);
    if (check_reply(k, reply)) CheckApplied(w, req, ring, reply, replica);
  }
  if (together) {
    std::vector<Applier::BatchWrite> batch;
    for (const std::vector<uint8_t>& msg : msgs) batch.push_back(Applier::BatchWrite{kClientId, msg, ring, {}});
    w.applier->ApplyBatch(batch);
    // Each key's OK writes in batch order: a PUT's version above the ones
    // before it; the last decides what the key holds.
    std::map<std::string, size_t> last_ok;
    std::map<std::string, uint64_t> version_before;
    for (size_t k = 0; k < batch.size(); ++k) {
      const protocol::ReplyMsg& reply = batch[k].reply;
      if (!check_reply(k, reply)) continue;
      const auto record = DecodeRecord(std::span<const uint8_t>(ring).subspan(reqs[k].ring_offset, reqs[k].length));
      RKV_FUZZ_CHECK(record.ok());
      const std::string key(record->key);
      if (reqs[k].op == static_cast<uint8_t>(protocol::Op::kPut)) {
        const auto before = version_before.find(key);
        RKV_FUZZ_CHECK(before == version_before.end() || reply.version > before->second);
      }
      version_before[key] = reply.version;
      last_ok[key] = k;
    }
    for (const auto& [key, k] : last_ok) CheckApplied(w, reqs[k], ring, batch[k].reply, /*replica=*/false);
  }
  return 0;
}
