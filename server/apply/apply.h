// The PUT / DELETE apply path: turns one RequestMsg and the record it names
// in a connection's staging ring into a durable write, a published slot and
// a ReplyMsg.
//
// One class, the Applier, with four jobs over one table, each in a file of
// its own (as RocksDB splits DBImpl): they share the Store, Table and Heap
// under table_mu_, the version reservations and the counters, too much to give
// each its own class.
//   client writes with the replay cache    apply_client.cc: Apply, the
//                                          writes_gate_ and key_stripes_, the
//                                          route and lease checks;
//                                          apply_batch.cc: ApplyBatch, a
//                                          round's writes forwarded together
//   primary replication                    apply_replicate.cc: the versions
//                                          of client PUTs, the forward to the
//                                          backups
//   backup install                         apply_backup.cc: ApplyReplica
//   catch-up and verifying digests         apply_catchup.cc (ListShards,
//                                          the fetcher's installs),
//                                          apply_digest.cc (DigestShards,
//                                          ListShard)
//   a client's lookup (tcp GETs)           apply_locate.cc: Locate
// What they share (validation, the local write and publish of a PUT,
// replies, counters) is apply.cc. This comment holds the contract of all
// four and the lock order, once.
//
// Validation (before any lock; a failure is an error reply, never a crash):
//   - the message is exactly sizeof(RequestMsg), op is known, reserved is 0,
//     flags only kRequestResent and only on a client op; a condition is
//     known and only on a client PUT, and expected_version is non-zero
//     exactly when the condition is kVersionIs;
//   - ring_offset is 64-byte aligned and [ring_offset, ring_offset + length)
//     lies inside the ring;
//   - length is at least a block header and at most the block of the
//     largest allowed record;
//   - the record is copied out of the ring first (the client may keep
//     writing its ring: what is checked must be what is stored), then
//     DecodeRecord must accept exactly those bytes, with
//     RecordBytes <= length <= BlockBytes and version 0 (a replica op's
//     record: a non-zero version);
//   - key 1..max_key_bytes, value <= max_value_bytes;
//   - DELETE carries the tombstone flag and an empty value, PUT no tombstone.
// Bad framing is INVALID_ARGUMENT; a record whose checksum fails is DATA_LOSS.
//
// Apply (a client write holds writes_gate_, shared, and its key's stripe:
// writes of different keys run in parallel, those of one key one at a time;
// the store, table and heap under table_mu_; see Thread safety):
//   PUT:    version = a reserved one: above the store's high-water mark
//           and above every version reserved before (see Replication);
//           store.Put (durable per --durability); table.Upsert (publishes
//           the slot: the linearization point); reply. If the table or
//           heap refuses after the store write, the store write is undone
//           (the previous value restored, or the key deleted) so store
//           and table agree, and the reply is RESOURCE_EXHAUSTED. When
//           the heap is full only because of quarantined blocks, the apply
//           waits (holding table_mu_: every writer waits, which is
//           the back-pressure) until the oldest one is reusable — at most
//           one grace period — and retries once.
//   DELETE: NOT_FOUND if the table lacks the key; else store.Delete, then
//           table.Delete; the reply carries the deleted version.
// Acknowledged therefore means durable per --durability, and the slot is
// published only after the durable write.
//
// Replays (server/apply/request_cache.h; why each case is safe:
// docs/design.md §5.6): before applying, the request's (client id, request
// id) is looked up in the request cache under cache_mu_. A request
// answered before gets its original reply again and changes nothing (it
// is not forwarded again); one whose reply the cache had
// to forget is refused with ABORTED (never applied a second time); one whose
// twin (the same client and request id, e.g. the original of a retry) is
// being applied right now waits until the twin is done and is then looked
// up again; any other is marked in flight, applied without cache_mu_,
// and its reply remembered (and the mark cleared, waking the twins) in one
// step under cache_mu_. Requests refused by validation are not remembered (a
// retry of one is validated, and refused, again), nor are those refused by
// replication before anything was published locally (no route, a failed
// backup the coordinator could not be told of, or an expired lease): a
// retry of one (also one that waited for it) is applied afresh.
//
// Replication (docs/design.md §5.7, which argues each step), with a
// ReplicationPolicy:
//   Primary (Apply, a client's kPut / kDelete): route = RouteWrite(key) (an
//     error is the reply, nothing written); the version as above (a DELETE
//     of an absent key stays a local NOT_FOUND); the record, with that
//     version, is forwarded to every backup of the route (Forwarder, in
//     parallel, bounded by its timeout); each backup that fails is reported
//     (ReportFailedBackup): an error from that fails the write with
//     UNAVAILABLE (Reason::kOutcomeUnknown) and nothing is published locally;
//     then, just before the local durable write, CheckLease(): an expired
//     lease makes the reply UNAVAILABLE (Reason::kOutcomeUnknown),
//     nothing published locally and the reply not remembered (the backups
//     may hold the write: an unacknowledged write that may appear later);
//     else the local durable write, publish and reply as above. A write
//     with no backup to forward to, and the NOT_FOUND of a DELETE, are
//     checked the same way. With a valid lease the current map must still
//     route the key here, with no backup the write's route lacked (else
//     UNAVAILABLE, Reason::kOutcomeUnknown, naming the newer map).
//     Versions are reserved under table_mu_: each PUT's is above the
//     store's high-water mark and above every version reserved before it
//     (reserved_version_), so writes in flight together never share one,
//     and a PUT forwarded and then failed leaves its version used: later
//     PUTs get higher ones. Writes of one key are serialized by
//     the key's stripe, held from the route to the reply, so a key's versions
//     rise in the order its writes are published and forwarded (a DELETE
//     forwards the version it deletes, which no other client write of the
//     key can change meanwhile); writes of other keys forward at the same
//     time (the Forwarder takes concurrent calls). table_mu_ is taken
//     only around the local steps, never while forwarding.
//   Backup (ApplyReplica, a peer's kReplicatePut / kReplicateDelete):
//     validated like a client's record except that the version must be
//     non-zero; AcceptReplica(sender, key, the request's map version)
//     must allow it (else its error is the reply); then, under
//     table_mu_, a PUT is installed (durable write with the carried
//     version, which raises the store's high-water mark to at least it, and
//     publish) only when its version is newer than the key's, and a DELETE
//     deletes the key only when the key's version is at most the carried
//     one. A stale or repeated forward is acknowledged OK without a change,
//     so resends and reordering are harmless. The reply carries the version
//     the key now has (0: absent).
//   A client connection that sends a replica op, and a peer connection that
//   sends a client op, get PERMISSION_DENIED.
//
// Thread safety: Apply, ApplyReplica and the accessors are thread-safe;
// Apply may run on several threads at once (the server's client pollers).
// Locks, in the order they are taken (gate_turnstile_, taken and let go
// just before writes_gate_, is described there):
//   cache_mu_      the request cache and the in-flight marks; held briefly
//                  and alone (never with another of these), never while
//                  applying;
//   writes_gate_   shared by every client write for its whole apply (route,
//                  version, forward, publish); exclusive for ListShards'
//                  cut, so that no client write is in flight at it. New
//                  writes queue behind a waiting snapshot (gate_turnstile_),
//                  so a stream of writes cannot starve it;
//   key_stripes_   the key's stripe, key_stripes_[hash of the key %
//                  kKeyStripes], held for a client write's whole apply: two
//                  writes of one key (or of two keys that share a stripe)
//                  never overlap; a group of ApplyBatch holds the stripes
//                  of its writes (distinct), taken in ascending order;
//   table_mu_      the Store, Table and Heap (which nobody else may use
//                  while the Applier exists), the reserved version and the
//                  catch-up tombstones; held for local steps only, never
//                  while forwarding.
// Replica installs and the fetcher's calls take table_mu_ alone. (The server
// closes the Store only once no Apply can run; snapshot() does not use it.)
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "common/mutex.h"
#include "common/protocol.h"
#include "common/status.h"
#include "server/table/heap.h"
#include "server/replication/replication.h"
#include "server/replication/replicator.h"
#include "server/apply/request_cache.h"
#include "server/store/store.h"
#include "server/table/table.h"

namespace rkv::server {

struct ApplyLimits {
  uint32_t max_key_bytes = 1024;
  uint32_t max_value_bytes = 1024 * 1024;
};

// How an Applier replicates: both null (standalone: no forwarding, and
// every replica op refused), or both set.
struct ApplyReplication {
  ReplicationPolicy* policy = nullptr;  // must outlive the Applier
  Forwarder* forwarder = nullptr;       // must outlive the Applier
};

class Applier {
 public:
  // How long a replicated write whose lease expired while its backups were
  // being waited for waits for the next grant before it is answered
  // "outcome unknown" (ReplicationPolicy::AwaitLease). Long enough to span
  // a change of the leading coordinator (docs/design.md §8.8: about the
  // election TTL, 2 s, plus etcd's expiry granularity, less the lease the
  // server still held), so that a write caught by one is acknowledged.
  static constexpr std::chrono::milliseconds kLeaseRenewalWait{3000};
  // How much of its lease a client write must find left when it is routed,
  // and when it has waited for its backups, before the final check under
  // table_mu_ (ReplicationPolicy::CheckLeaseWithMargin; at most a tenth of
  // the grant). A write that found the lease valid there but expired at the
  // final check would end "outcome unknown"; one refused at the route is
  // resent by its client, and one that waits gets a renewed lease. The HA
  // suite's frozen leader caught a write that way under ASan (the lease ran
  // out within a millisecond of AwaitLease's answer).
  static constexpr std::chrono::milliseconds kLeaseMargin{100};

  // `replies`: what the request cache remembers (request_cache.h).
  Applier(Store* store, Table* table, Heap* heap, ApplyLimits limits, RequestCacheLimits replies = {},
          ApplyReplication replication = {});

  Applier(const Applier&) = delete;
  Applier& operator=(const Applier&) = delete;

  // Validates and applies the request in `msg` (the bytes received) whose
  // record lies in `ring` (the connection's staging ring), sent by the
  // client that identified itself as `client_id` in its handshake; a
  // replayed request gets its original reply (see Replays above). Always
  // returns a reply with credits = 1 and the request id (0 if the message
  // is too short to hold one).
  protocol::ReplyMsg Apply(uint64_t client_id, std::span<const uint8_t> msg, std::span<const uint8_t> ring)
      EXCLUDES(cache_mu_, writes_gate_, table_mu_);

  // One client write of a batch: Apply's arguments, and its reply.
  struct BatchWrite {
    uint64_t client_id = 0;
    std::span<const uint8_t> msg;
    std::span<const uint8_t> ring;
    protocol::ReplyMsg reply{};  // set by ApplyBatch
  };
  // Applies each write as Apply would and sets its reply; what one thread's
  // polling round received from its client connections, in arrival order.
  // Writes of one key (of one stripe) are applied in their order, one
  // after the other. With replication, consecutive writes of different
  // stripes are applied as a group: each is staged (route, condition,
  // version), all are forwarded together (Forwarder::ForwardMany, one round
  // trip per backup for the group), then each is finished (lease, publish)
  // in order. A write of a stripe already in the group, or the twin of one
  // in it, starts the next group; a write whose twin another thread is
  // applying is applied alone once its group is done (it waits for its
  // twin). Standalone (no policy), the writes are applied one by one.
  // docs/design.md §5.7.
  void ApplyBatch(std::span<BatchWrite> writes) EXCLUDES(cache_mu_, writes_gate_, table_mu_);

  // A client connection of `client_id` opened (after its accept) / closed:
  // the request cache never forgets a client with a connection open
  // (server/apply/request_cache.h). Every ClientConnected is matched by one
  // ClientDisconnected.
  void ClientConnected(uint64_t client_id) EXCLUDES(cache_mu_);
  void ClientDisconnected(uint64_t client_id) EXCLUDES(cache_mu_);

  // Where a lookup's block goes: the heap block [heap_offset, +bytes) is
  // to be WRITTEN to the client's landing slot {landing_addr,
  // landing_rkey}, chained before the reply; bytes 0: reply only (absent,
  // refused, or a block over the slot).
  struct Located {
    uint64_t heap_offset = 0;
    uint64_t bytes = 0;
    uint64_t landing_addr = 0;
    uint32_t landing_rkey = 0;
  };
  // A client's lookup (protocol::Op::kGet; docs/design.md §4.1): the
  // request and its key record in `ring` are checked (as under Validation,
  // with a record of a key and nothing else, and every write field 0: an
  // error reply otherwise, nothing looked up), then the key is looked up
  // under table_mu_, expired records included (the reader decides by its
  // clock). OK with the record's version and its slot word in
  // ReplyMsg::block, or NOT_FOUND; *located names the block to WRITE.
  // Never cached, never forwarded; counted in Snapshot::lookups.
  protocol::ReplyMsg Locate(std::span<const uint8_t> msg, std::span<const uint8_t> ring, Located* located)
      EXCLUDES(table_mu_);

  // As Apply, for a request on a replication connection from the server
  // `sender_id` (resolved at the handshake): only replica ops, installed as
  // described under Replication above; never cached.
  protocol::ReplyMsg ApplyReplica(std::string_view sender_id, std::span<const uint8_t> msg,
                                  std::span<const uint8_t> ring) EXCLUDES(cache_mu_, writes_gate_, table_mu_);

  struct Snapshot {
    uint64_t puts = 0;            // PUTs applied (a client's, or installed replicas)
    uint64_t deletes = 0;         // DELETEs applied (likewise)
    uint64_t replays = 0;         // requests answered with a remembered reply
    uint64_t resent = 0;          // client requests marked protocol::kRequestResent
    uint64_t request_errors = 0;  // replies other than OK and NOT_FOUND
    uint64_t keys = 0;
    uint64_t forwarded_writes = 0;  // client writes forwarded to at least one backup
    uint64_t backup_failures = 0;   // backups that did not acknowledge a forward
    uint64_t replica_writes = 0;    // forwarded writes this server installed as a backup
    uint64_t replica_stale = 0;     // forwarded writes acknowledged without a change (not newer)
    uint64_t replica_refused = 0;   // forwarded writes refused (validation or policy)
    uint64_t lease_refusals = 0;    // client writes refused because the lease had expired
    uint64_t conditions_failed = 0;  // conditional PUTs whose condition did not hold
    uint64_t expired_reclaimed = 0;  // expired records removed (ReclaimExpired that removed one)
    uint64_t lookups = 0;            // client lookups answered (Locate past its checks)
    Heap::Stats heap;
  };
  Snapshot snapshot() const EXCLUDES(table_mu_);

  // The store's SyncWrites (server/store/store.h, "Group commit"): makes every
  // write applied so far durable. Without the mutexes; any thread.
  Status SyncWrites() const { return syncer_->SyncWrites(); }

  // The largest block a valid request may name.
  uint64_t max_block_bytes() const;

  // ---- Catch-up (docs/design.md, "Catch-up"; server/replication/catchup.h) ----
  // One record of a shard as catch-up moves it.
  struct ShardRecord {
    std::string key;
    uint64_t version = 0;
    bool has_value = false;
    std::string value;
    int64_t expires_at_ms = 0;  // with the value: the record's expiry (0: none)
  };
  // Primary: the cut of `shards` for catch-up (keys k with ShardOf(k,
  // shard_count) among them). First, holding writes_gate_ exclusively (it
  // waits for the client writes in flight to end, and holds no table lock),
  // `check` runs (the caller verifies there that the fetcher is syncing
  // every shard; its error is returned and nothing is read) and
  // *snapshot_version is set: the highest version this server had reserved
  // or installed. Every client write after the cut is above it and routed
  // by a map at least as new as the one `check` saw (so forwarded to the
  // fetcher). Then, with the gate let go, one pass over the table under
  // table_mu_ lists every record of the shards with its version and no
  // value (ReadKeys reads the values after): client writes wait for one
  // pass over the index, whatever the number of shards. A key written after
  // the cut is listed at its newer version, or not at all when deleted;
  // either was forwarded too. INVALID_ARGUMENT for no shard or one not
  // below shard_count.
  Status ListShards(const std::vector<uint32_t>& shards, uint32_t shard_count, const std::function<Status()>& check,
                    std::vector<ShardRecord>* out, uint64_t* snapshot_version)
      EXCLUDES(gate_turnstile_, writes_gate_, table_mu_);
  // Primary: the records of `keys` with their values; absent keys left out.
  std::vector<ShardRecord> ReadKeys(const std::vector<std::string>& keys) const EXCLUDES(table_mu_);
  // Fetcher: from BeginSync to EndSync of `shard`, every forwarded DELETE
  // of a key of the shard leaves a tombstone (key -> the deleted version,
  // the highest one if several), and InstallFetched refuses records at or
  // below it: a snapshot taken before the delete must not bring the key
  // back. `shard_count` is the map's (the same for every shard synced).
  void BeginSync(uint32_t shard, uint32_t shard_count) EXCLUDES(table_mu_);
  void EndSync(uint32_t shard) EXCLUDES(table_mu_);
  // Fetcher: the highest version held among the keys of each of `shards`
  // (0: none), in one pass; the same order as `shards`.
  std::vector<uint64_t> ShardHighWaters(const std::vector<uint32_t>& shards, uint32_t shard_count) const
      EXCLUDES(table_mu_);
  // Fetcher: the version held for `key` (0: absent).
  uint64_t HeldVersion(std::string_view key) const EXCLUDES(table_mu_);
  enum class FetchedOutcome { kInstalled, kNotNewer, kDeletedMeanwhile };
  // Fetcher: installs a record fetched from the primary by the replica
  // rule (only when its version is above the key's and above its
  // tombstone). INVALID_ARGUMENT for a record no write could have made (key
  // not 1..max_key_bytes, value above max_value_bytes, version 0, no value):
  // nothing installed; the durable write's error likewise.
  StatusOr<FetchedOutcome> InstallFetched(const ShardRecord& record) EXCLUDES(table_mu_);
  // Fetcher: InstallFetched for a chunk of records at once, under one hold
  // of table_mu_ and with one durable write (Store::PutMany) for those the
  // replica rule installs: a catch-up costs one WAL append per chunk, not
  // per record. Every record is checked as InstallFetched checks it, and a
  // key listed twice is INVALID_ARGUMENT, before anything is installed.
  // The number installed; on an error (the durable write's, a full table
  // or heap) the records installed before it stay, and store and table
  // agree on every key.
  StatusOr<size_t> InstallFetchedBatch(std::span<const ShardRecord> records) EXCLUDES(table_mu_);
  // Fetcher, after a complete stream: deletes every key of `shards` held
  // at a version at or below `snapshot_version` that is not in `listed`
  // (deleted on the primary while this server was away), in one pass. The
  // number deleted, or the first durable delete's error.
  StatusOr<uint64_t> DeleteUnlisted(const std::vector<uint32_t>& shards, uint32_t shard_count,
                                    uint64_t snapshot_version,
                                    const std::unordered_set<std::string>& listed) EXCLUDES(table_mu_);
  // ---- Verifying replicas (server/apply/apply_digest.cc): what Admin's
  // ShardChecksums and ListShard read. Each reads the table's records
  // (every published slot) under table_mu_, so writes wait for the
  // length of one pass over the index: what it returns is one consistent
  // state of the shards, as of one instant between two writes.
  struct ShardDigest {
    uint32_t shard = 0;
    uint64_t keys = 0;
    uint64_t checksum = 0;     // sum mod 2^64 of RecordChecksum over the shard's records
    uint64_t max_version = 0;  // 0 for an empty shard
  };
  // The digest of each shard in `shards`, in that order (a shard listed
  // twice is digested twice), shards being ShardOf(key, shard_count). Every
  // entry must be below shard_count, and shard_count above 0 (the caller
  // validates). One pass over the table for all of them.
  std::vector<ShardDigest> DigestShards(uint32_t shard_count, std::span<const uint32_t> shards) const
      EXCLUDES(table_mu_);
  struct ShardListing {
    std::vector<std::pair<std::string, uint64_t>> records;  // (key, version), in table order
    uint64_t snapshot_version = 0;  // the store's version high-water mark at the same instant
  };
  // The keys and versions of shard `shard` (< shard_count): a copy, taken
  // in one pass under table_mu_, so its memory is the shard's keys.
  ShardListing ListShard(uint32_t shard_count, uint32_t shard) const EXCLUDES(table_mu_);
  // One record's share of a shard checksum: XXH64, seed 0, of key ||
  // version as 8 little-endian bytes || value.
  static uint64_t RecordChecksum(std::string_view key, uint64_t version, std::string_view value,
                                 int64_t expires_at_ms = 0);

  // ---- Expiry (server/apply/apply_expiry.cc; docs/design.md §5.11) ----
  // A key whose record has expired, with the record's version.
  struct ExpiredKey {
    std::string key;
    uint64_t version = 0;
  };
  // The records of buckets [*cursor, *cursor + max_buckets) expired at
  // `now_ms` (Unix ms); *cursor moves past them, back to 0 after the last
  // bucket. table_mu_ is held for that slice only, so writes wait for at
  // most one slice, never for a pass over the table.
  std::vector<ExpiredKey> ExpiredKeys(uint64_t* cursor, uint64_t max_buckets, int64_t now_ms) const
      EXCLUDES(table_mu_);
  // Removes an expired record of `key` at `version` as a client's DELETE
  // conditional on that version would (the route, the lease, the forward
  // to the backups: a backup never reclaims on its own, so replicas stay
  // alike), under the key's stripe. Only the key's primary removes it
  // (elsewhere the route's refusal is returned); FAILED_PRECONDITION when
  // the key was written meanwhile, nothing removed. Not cached: a reclaim
  // is never resent.
  Status ReclaimExpired(std::string_view key, uint64_t version) EXCLUDES(cache_mu_, writes_gate_, table_mu_);
  // Records with an expiry in the table (Table::expiring): 0 lets the
  // reclaimer sleep.
  uint64_t expiring_records() const EXCLUDES(table_mu_);

 private:
  // A request that passed validation; the views point into a buffer of
  // the calling thread.
  struct Request {
    uint64_t request_id = 0;
    protocol::Op op = protocol::Op::kPut;
    std::string_view key;
    std::string_view value;
    uint64_t version = 0;
    uint64_t map_version = 0;  // replica ops: the primary's map version (>= 1)
    bool resent = false;       // client ops: protocol::kRequestResent
    // Client PUTs: the precondition (kNone for every other op) and, for
    // kVersionIs, the version it names.
    protocol::Condition condition = protocol::Condition::kNone;
    uint64_t expected_version = 0;
    int64_t expires_at_ms = 0;  // PUTs: the record's expiry (0: none)
    // The primary's reclaim of an expired record (ReclaimExpired): a
    // DELETE whose version condition sees expired records (a client's
    // sees them as absent).
    bool reclaim = false;
  };
  // ---- Shared by the jobs (apply.cc) ----
  // Copies a request message of exactly sizeof(RequestMsg) bytes into
  // *req; otherwise the INVALID_ARGUMENT reply (its request id read when
  // the message is long enough to hold one).
  std::optional<protocol::ReplyMsg> ReadRequest(std::span<const uint8_t> msg, protocol::RequestMsg* req);
  // Checks the message and its record (see Validation; `from_peer` selects
  // which ops and versions are allowed). The error reply, or nullopt with
  // *out filled.
  // The record is copied into *copy (a buffer of the calling thread when
  // null), which *out's views then point into.
  std::optional<protocol::ReplyMsg> Validate(std::span<const uint8_t> msg, std::span<const uint8_t> ring,
                                             bool from_peer, Request* out, std::vector<uint8_t>* copy = nullptr);
  // The durable write and publish of a PUT with `version` (a client's, a
  // backup's, a fetched record's).
  protocol::ReplyMsg InstallPut(uint64_t request_id, std::string_view key, std::string_view value,
                                uint64_t version, int64_t expires_at_ms) REQUIRES(table_mu_);
  protocol::ReplyMsg Error(uint64_t request_id, const Status& status);
  // Publishes a record already written to the store in the table (waiting
  // once for quarantined heap blocks when the heap is full).
  StatusOr<Table::Entry> Publish(std::string_view key, std::string_view value, uint64_t version,
                                 int64_t expires_at_ms) REQUIRES(table_mu_);
  // The key's entry as a client's write sees it: nullopt when absent or
  // expired by this server's clock (unless `with_expired`).
  std::optional<Table::Entry> LiveEntry(std::string_view key, bool with_expired) const REQUIRES(table_mu_);
  // Makes room for `key` in the table (Table::PrepareInsert); the refusal
  // every write path gives when its neighbourhood has no slot.
  Status PrepareSlot(std::string_view key) REQUIRES(table_mu_);
  // Puts back in the store what the table publishes for `key` (or deletes
  // it): the undo of a durable write the table could not take.
  Status UndoDurable(std::string_view key) REQUIRES(table_mu_);
  // Whether a delete forwarded during the sync of the key's shard is at or
  // above `version` (a fetched record must not bring the key back).
  bool DeletedDuringSync(std::string_view key, uint64_t version) const REQUIRES(table_mu_);

  // ---- Client writes and the replay cache (apply_client.cc) ----
  // Looks the request up in the cache (waiting while its twin is in
  // flight), applies it when it is new and remembers its reply.
  protocol::ReplyMsg ApplyOnce(uint64_t client_id, const Request& req, bool* remember)
      EXCLUDES(cache_mu_, writes_gate_, table_mu_);
  // One write of ApplyBatch's current group (apply_batch.cc).
  struct GroupItem;
  // Applies a group of validated client writes of distinct stripes and
  // names (see ApplyBatch).
  void ApplyGroup(std::span<GroupItem> group) EXCLUDES(cache_mu_, writes_gate_, table_mu_);
  // What the request cache says of a client request: its remembered reply
  // (a replay, counted), the ABORTED refusal of one too old to check, or
  // nullopt when it is new (it may still be in flight on another thread).
  std::optional<protocol::ReplyMsg> CachedReply(uint64_t client_id, const Request& req) REQUIRES(cache_mu_);
  // Applies a client write under writes_gate_ and the key's stripe.
  protocol::ReplyMsg ApplyWrite(const Request& req, bool* remember) EXCLUDES(cache_mu_, writes_gate_, table_mu_);
  // A client write between its steps before the forward and those after
  // it (Stage, then Replicate or a batch's ForwardMany, then FinishWrite).
  struct Staged {
    std::optional<WriteRoute> route;  // the route whose backups it is forwarded to
    uint64_t version = 0;             // the version forwarded: a PUT's reserved one, a DELETE's deleted one
  };
  // With writes_gate_ (shared) and the key's stripe held, the steps of a
  // client PUT or DELETE before its forward: the route and lease, the
  // condition, the slot and version under table_mu_. Returns the reply
  // when the write is done (applied locally, nothing to forward, or
  // refused); else nullopt with *staged set: the write is to be forwarded
  // to staged->route's backups, then finished by FinishWrite.
  std::optional<protocol::ReplyMsg> Stage(const Request& req, bool* remember, Staged* staged)
      REQUIRES_SHARED(writes_gate_) EXCLUDES(table_mu_);
  std::optional<protocol::ReplyMsg> StagePut(const Request& req, bool* remember, Staged* staged)
      REQUIRES_SHARED(writes_gate_) EXCLUDES(table_mu_);
  std::optional<protocol::ReplyMsg> StageDelete(const Request& req, bool* remember, Staged* staged)
      REQUIRES_SHARED(writes_gate_) EXCLUDES(table_mu_);
  // The steps after the forward of a staged write, whose outcome (the
  // settled acknowledgements, SettleForward) is `replicated`: the error
  // reply if it failed; else, under a valid lease and an unchanged route,
  // the local durable write and publish (or delete) and its reply.
  protocol::ReplyMsg FinishWrite(const Request& req, const Staged& staged, const Status& replicated, bool* remember)
      REQUIRES_SHARED(writes_gate_) EXCLUDES(table_mu_);
  // A client PUT's condition against the key's record in the table:
  // nullopt when it holds (or there is none), else the FAILED_PRECONDITION
  // reply (Reason::kConditionFailed, its version the key's: 0 when absent).
  // An expired record counts as absent but for a reclaim (Request::reclaim).
  std::optional<protocol::ReplyMsg> CheckCondition(const Request& req) REQUIRES(table_mu_);
  // With a policy, before a client write of `key` writes or forwards
  // anything: sets *route and returns nullopt when RouteWrite routes it
  // here and CheckLease allows it; else the refusal, not to be remembered:
  // RouteWrite's error, or (no lease, counted) FAILED_PRECONDITION with
  // Reason::kNoLease and the route's map version (nothing applied), which
  // the client resends. Without a policy: nullopt, *route left empty.
  std::optional<protocol::ReplyMsg> RouteClientWrite(uint64_t request_id, std::string_view key,
                                                     std::optional<WriteRoute>* route, bool* remember);
  // With a policy, just before a client write of `key` routed by `route`
  // is published: nullopt while CheckLease allows acknowledging it and the
  // current map still routes the key here with no backup `route` lacked;
  // else the UNAVAILABLE reply with Reason::kOutcomeUnknown (the lease
  // expired, counted, or the map changed mid-write), not to be remembered.
  std::optional<protocol::ReplyMsg> RefuseWithoutLease(uint64_t request_id, std::string_view key,
                                                       const WriteRoute& route, bool* remember) REQUIRES(table_mu_);
  // The durable delete and unpublish of a DELETE; NOT_FOUND if absent.
  protocol::ReplyMsg DeleteLocal(uint64_t request_id, std::string_view key) REQUIRES(table_mu_);

  // ---- Primary replication (apply_replicate.cc) ----
  // A version for a client PUT: above the store's high-water mark and every
  // version reserved before; recorded as reserved. 0 when the version space
  // is exhausted (the PUT is then refused RESOURCE_EXHAUSTED).
  uint64_t ReserveVersion() REQUIRES(table_mu_);
  // The replica op that forwards a client write.
  static protocol::Op ForwardOp(const Request& req) {
    return req.op == protocol::Op::kDelete ? protocol::Op::kReplicateDelete : protocol::Op::kReplicatePut;
  }
  // Encodes the record a staged write forwards (its key, value and expiry
  // with the staged version; a DELETE's tombstone) into *record; its size.
  static size_t EncodeForward(const Request& req, const Staged& staged, std::vector<uint8_t>* record);
  // Forwards a staged write to its route's backups and settles their
  // acknowledgements (SettleForward).
  Status Replicate(const Request& req, const Staged& staged) REQUIRES_SHARED(writes_gate_) EXCLUDES(table_mu_);
  // Counts a forward and reports each backup of `route` whose entry in
  // `acks` (one per backup, in order) is an error: OK when the write may go
  // on locally, UNAVAILABLE (Reason::kOutcomeUnknown) when a failed backup
  // could not be reported. `reported` (a group's): the backup incarnations
  // (id, epoch) reported already, not reported again (ReportFailedBackup
  // takes one out of every shard this server leads that lists it), and
  // added to once reported.
  Status SettleForward(const WriteRoute& route, const std::vector<Status>& acks,
                       std::vector<std::pair<std::string, uint64_t>>* reported = nullptr) EXCLUDES(table_mu_);

  // ---- Backup install (apply_backup.cc) ----
  // Installs a validated, accepted replica op by the replica rule.
  protocol::ReplyMsg InstallReplica(const Request& req) REQUIRES(table_mu_);

  // ---- Catch-up (apply_catchup.cc) ----
  // Records a forwarded delete of `key` at `version` when its shard is
  // being synced.
  void NoteSyncDelete(std::string_view key, uint64_t version) REQUIRES(table_mu_);

  // Lock order: see Thread safety in the file comment.
  //
  // The request cache and the requests being applied, by (client id,
  // request id): a request found here is not applied again until its twin
  // is done (cache_done_ is signalled whenever one is).
  Mutex cache_mu_;
  RequestCache cache_ GUARDED_BY(cache_mu_);
  std::set<std::pair<uint64_t, uint64_t>> in_flight_ GUARDED_BY(cache_mu_);
  CondVar cache_done_;
  // Taken briefly before writes_gate_ by every client write, and held by
  // ListShards while it waits for the gate: a waiting cut stops
  // new writes from entering (std::shared_mutex may prefer readers, and a
  // server under a steady write load always has one in flight).
  Mutex gate_turnstile_ ACQUIRED_BEFORE(writes_gate_);
  // Shared: a client write in flight (route to reply). Exclusive: no
  // client write is in flight (ListShards' cut).
  SharedMutex writes_gate_ ACQUIRED_BEFORE(table_mu_);
  // Serializes the client writes of one key (a key uses
  // key_stripes_[KeyStripe(key)]), taken after writes_gate_, before table_mu_.
  static constexpr size_t kKeyStripes = 256;
  static size_t KeyStripe(std::string_view key);
  std::array<Mutex, kKeyStripes> key_stripes_;
  // Guards the store, table and heap: held for a write's local steps only.
  mutable Mutex table_mu_;
  Store* const store_ PT_GUARDED_BY(table_mu_);
  Store* const syncer_;  // store_, for SyncWrites only (thread-safe there)
  Table* const table_ PT_GUARDED_BY(table_mu_);
  Heap* const heap_ PT_GUARDED_BY(table_mu_);
  // The highest version reserved for a client PUT (published, in flight,
  // or forwarded and then failed, which the backups may hold): later PUTs
  // get versions above it. In memory only: a restart relies on the store's
  // high-water mark alone.
  uint64_t reserved_version_ GUARDED_BY(table_mu_) = 0;
  // Catch-up: per shard being synced, the forwarded deletes of its keys
  // (key -> highest version deleted); see BeginSync.
  std::map<uint32_t, std::unordered_map<std::string, uint64_t>> sync_tombstones_ GUARDED_BY(table_mu_);
  uint32_t sync_shard_count_ GUARDED_BY(table_mu_) = 0;
  const ApplyLimits limits_;
  const ApplyReplication replication_;

  std::atomic<uint64_t> puts_{0};
  std::atomic<uint64_t> deletes_{0};
  std::atomic<uint64_t> replays_{0};
  std::atomic<uint64_t> resent_{0};
  std::atomic<uint64_t> errors_{0};
  std::atomic<uint64_t> forwarded_{0};
  std::atomic<uint64_t> backup_failures_{0};
  std::atomic<uint64_t> replica_writes_{0};
  std::atomic<uint64_t> replica_stale_{0};
  std::atomic<uint64_t> replica_refused_{0};
  std::atomic<uint64_t> lease_refusals_{0};
  std::atomic<uint64_t> conditions_failed_{0};
  std::atomic<uint64_t> expired_reclaimed_{0};
  std::atomic<uint64_t> lookups_{0};
};

// Fills a reply; `message` is cut to fit and NUL-terminated.
protocol::ReplyMsg MakeReply(uint64_t request_id, StatusCode code, uint64_t version, std::string_view message,
                             Reason reason = Reason::kNone, uint64_t map_version = 0);

}  // namespace rkv::server
