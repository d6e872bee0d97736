// librkv: the C++ client of an rkv server or of an rkv cluster.
//
// GET reads the server's hash index and value heap with one-sided reads (no
// server CPU); PUT and DELETE write a record into this connection's staging
// ring on the server and send a request that names it; the server applies
// it and replies. See the project's design notes for the protocol.
//
// Example:
//   rkv::ClientOptions options;
//   options.server = "10.0.0.5:7700";
//   options.token = token;
//   auto client = rkv::Client::Connect(options);
//   if (!client.ok()) return client.status();
//   auto version = (*client)->Put("user:42", "alice");
//   auto value = (*client)->Get("user:42");   // "alice"
//
// Errors are rkv::Status values with gRPC's canonical codes:
//   NOT_FOUND          Get/Delete of a key that is absent.
//   INVALID_ARGUMENT   a key outside 1..max_key_bytes() bytes or a value over
//                      max_value_bytes() bytes (checked before anything is
//                      sent), or bad ClientOptions or CallOptions.
//   PERMISSION_DENIED  the server refused the connection: a wrong token or
//                      an incompatible version (the message says which).
//   RESOURCE_EXHAUSTED the server refused the connection because it has no
//                      connection slot left ("too many connections"), or
//                      refused a write (e.g. its table or heap is full).
//   UNAVAILABLE        the server could not be reached (or stayed down)
//                      within the call's deadline; for a PUT or DELETE whose
//                      request was sent, or whose server restarted before
//                      the reply came, the message says its outcome is
//                      unknown (see Retries).
//   ABORTED            a resent PUT or DELETE the server could no longer
//                      check for a replay: not applied by the resend, but
//                      the first attempt's outcome is unknown
//                      (Reason::kOutcomeUnknown).
//   DEADLINE_EXCEEDED  the server is reachable but the call could not
//                      complete in time (the message says what kept failing).
//   DATA_LOSS          the server's table is corrupt (a slot pointing
//                      outside the heap, seen repeatedly).
//   others             as returned by the server.
//
// Cluster mode (ClientOptions::coordinator set): Connect fetches the
// cluster map from the coordinator and a background thread keeps it
// current (WatchClusterMap; while the coordinator is down, calls keep
// using the cached map). A key goes to the server owning shard
// ShardOf(key, shard_count); each server gets its own connection pool,
// opened on first use. A call that finds its server DOWN in the map,
// cannot reach it, or meets a server epoch other than the map's refetches
// the map (at most every 100 ms) and retries with backoff within its
// deadline, so a restarted server (new epoch, new address) is picked up
// without any action of the caller. Errors of such calls are prefixed
// "server ID (epoch E, HOST:PORT): ".
//
// Retries: a call that meets a broken connection reconnects (the server may
// have restarted under a new epoch) and retries within its deadline. A PUT
// or DELETE is resent with the same request id (ids are unique per Client,
// whose id is random) and the server answers a request it has already
// applied with its original reply, so a PUT or DELETE that returns OK was
// applied exactly once and its result is that application's (a resent
// DELETE reports OK, not NOT_FOUND; a resent PUT returns its own version
// and never overwrites a newer PUT). A request is resent only to the server
// incarnation (epoch) it was sent to: a restarted server does not know what
// it applied, so the call returns UNAVAILABLE saying the outcome is unknown.
// The server remembers the last 256 replies of each of its 1024 most
// recently active clients; a retry beyond that is refused with ABORTED (or,
// for a client forgotten as least recently active, applied again). A call
// that fails with UNAVAILABLE or DEADLINE_EXCEEDED after sending its request
// may or may not have been applied (the message says so). GETs only read.
//
// Thread safety: a Client is thread-safe. Concurrent calls share a pool of
// ClientOptions::connections connections; each call takes a free one (or
// waits for one), so up to that many calls run in parallel.
//
// The cluster's administration (its members, a server's counters, shard
// checksums and listings, draining a server) is rkv/admin.h's ClusterAdmin,
// which works through a Client's coordinator connection.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "rkv/status.h"

namespace rkv {

struct ClientOptions {
  // "HOST:PORT" of the server's data-plane listener ("[v6]:PORT" too).
  // Ignored (must be empty or left at this default) when `coordinator` is
  // set.
  std::string server = "127.0.0.1:7700";
  // "HOST:PORT" of the rkv-coordinator, or a comma-separated list of the
  // cluster's coordinators ("A:7600,B:7600,C:7600"; one leads, and the
  // client finds and follows it): cluster mode. Exactly one of server /
  // coordinator is used; setting coordinator together with a server other
  // than the default is INVALID_ARGUMENT, and so is a malformed list entry.
  std::string coordinator;
  // The shared secret; only a digest of it is sent. Must not be empty.
  std::string token;
  // "auto" (verbs when an RDMA device has an active port, else tcp; in
  // cluster mode: each server's transport as the map announces it), "tcp"
  // or "verbs" (in cluster mode FAILED_PRECONDITION for a server that
  // speaks the other one).
  std::string transport = "auto";
  // Default deadline of Connect and of every call (> 0).
  std::chrono::milliseconds timeout{5000};
  // Connection pool size, 1..64: the number of calls that can run at once
  // (per server in cluster mode).
  int connections = 1;
  // Bytes of the location cache: per key and server, where the key's block
  // was when a GET last found it, so that the next GET of the key costs one
  // READ instead of two, when the block proves still current (otherwise
  // the GET takes the ordinary path; results are the same either way).
  // Shared by all connections; LocationCacheStats shows its use. 0 turns
  // it off; otherwise kMinLocationCacheBytes..kMaxLocationCacheBytes.
  uint64_t location_cache_bytes = uint64_t{32} << 20;
  // TLS on the control plane (cluster mode: the coordinators and the
  // servers' Admin services; the data plane only with data_plane_tls,
  // docs/design.md §10). PEM file paths; all empty: plain gRPC.
  // tls_ca_file, the CA bundle the coordinators' and servers' certificates
  // are verified against, turns TLS on; tls_cert_file and tls_key_file,
  // both or neither, are a client certificate and its key for a cluster
  // that checks clients' certificates (mutual TLS). The files are read at
  // Connect (a missing, unreadable or malformed one is INVALID_ARGUMENT
  // naming the field and the file) and watched for replacement every few
  // seconds (rotation without a restart). Setting them without
  // `coordinator` or data_plane_tls is INVALID_ARGUMENT.
  std::string tls_ca_file;
  std::string tls_cert_file;
  std::string tls_key_file;
  // TLS on the data plane too (the tcp transport; servers started with
  // --data_plane_tls): each connection to a server speaks TLS 1.3 and the
  // server's certificate must chain to tls_ca_file (required) and name the
  // address dialled. A server that takes TLS refuses a client without it
  // (PERMISSION_DENIED saying so); a server of the verbs transport is
  // FAILED_PRECONDITION: RDMA has no encryption.
  bool data_plane_tls = false;
};

inline constexpr uint64_t kMinLocationCacheBytes = uint64_t{64} << 10;
inline constexpr uint64_t kMaxLocationCacheBytes = uint64_t{64} << 30;

// Client::LocationCacheStats.
struct LocationCacheStatsInfo {
  bool enabled = false;
  uint64_t entries = 0;
  uint64_t bytes = 0;           // what the entries are charged (keys + per-entry overhead)
  uint64_t capacity_bytes = 0;  // ClientOptions::location_cache_bytes
  uint64_t hits = 0;       // GETs of a key answered by one READ of its cached block
  uint64_t misses = 0;     // GETs of a key with no usable entry
  uint64_t fallbacks = 0;  // cached READs not proven current: the ordinary path answered
  uint64_t evictions = 0;
};

// A precondition on a PUT (Client::Put): the key must be absent, or hold
// exactly a given version (the one GetVersioned returned, or a PUT). The
// key's primary checks it inside the write, under the lock that orders the
// key's writes, so a conditional PUT is a compare-and-set: linearizable,
// replicated like any write, and retried like any write (a resend of one
// that was applied gets its original reply). When the key is not as asked,
// Put returns FAILED_PRECONDITION with Reason::kConditionFailed and the
// key's version in the message, and nothing is written.
struct PutCondition {
  enum class Kind : uint8_t { kNone, kAbsent, kVersionIs };
  Kind kind = Kind::kNone;
  uint64_t version = 0;  // kVersionIs: the version the key must have (>= 1)

  static PutCondition Absent() { return {Kind::kAbsent, 0}; }
  static PutCondition VersionIs(uint64_t v) { return {Kind::kVersionIs, v}; }
};

// Expiry (docs/design.md §5.11). A key written with an expiry reads as
// absent (NOT_FOUND, on every path: the one-sided GET checks the deadline
// stored in the block) once the reader's clock has reached it, and a
// condition finds it absent once the primary's clock has; the servers
// reclaim expired records in the background. The deadline is an absolute
// Unix time in milliseconds (CLOCK_REALTIME), kept with the record across
// restarts, failovers and catch-up; so clocks must agree to within the
// precision an application needs (a reader whose clock is ahead by d sees
// a key expire d early). kNoExpiry: the key never expires.
inline constexpr int64_t kNoExpiry = 0;

// A PUT's options (Client::Put): its precondition and its expiry.
struct PutOptions {
  PutCondition condition{};
  // Unix time in milliseconds from which the key reads as absent (a time
  // already past stores a record that reads as absent at once);
  // kNoExpiry: never. Negative: INVALID_ARGUMENT.
  int64_t expires_at_unix_ms = kNoExpiry;
};

// What a client has done since Connect (Client::Counters): its location
// cache, how often its calls tried again, and its attempts per server.
struct ClientCounters {
  LocationCacheStatsInfo location_cache;
  // Attempts after a call's first: a broken connection, a refusal that
  // lets the call resend, a server no longer primary or not covered by the
  // lease (see Retries). Zero while every call succeeds at once.
  uint64_t retries = 0;
  // Per server (cluster mode: its id; a client of one server: its
  // address), the attempts made on its current incarnation's connections:
  // a server that restarted under a new epoch starts again from 0. Only
  // servers this client has reached are listed.
  std::map<std::string, uint64_t> attempts_by_server;
  // GetInto and MultiGetInto values, by how they reached the caller's
  // memory: put there by the READ itself (a registered buffer), or copied
  // there from the client's own buffer (an unregistered one, or a block
  // that needed a second look). Other calls count in neither.
  uint64_t get_into_in_place = 0;
  uint64_t get_into_copied = 0;
};

// Caller memory registered for GetInto (Client::RegisterBuffer).
struct BufferHandle {
  uint64_t id = 0;
};

// What GetInto wrote.
struct GetIntoResult {
  // The value's size; on RESOURCE_EXHAUSTED, the size the buffer needs.
  size_t value_bytes = 0;
  uint64_t version = 0;
  // The READ put the value in the buffer (no copy): the buffer is
  // registered and the transport could scatter into it.
  bool in_place = false;
};

// Which replica of a key's shard a GET or MultiGet reads (cluster mode;
// a client of one server reads that server either way).
enum class ReadFrom {
  // The shard's primary: linearizable (see Client::Get).
  kPrimary,
  // Any replica the cached map lists for the shard (its primary or a
  // backup, never a server still catching up on it), chosen to spread
  // reads; weaker guarantees, spelt out at Client::Get.
  kAnyReplica,
};

struct CallOptions {
  // Deadline of this call; 0 means ClientOptions::timeout.
  std::chrono::milliseconds timeout{0};
  // GET and MultiGet only (writes always go to the primary).
  ReadFrom read_from = ReadFrom::kPrimary;
};

// A value with the version the server assigned to it.
struct VersionedValue {
  std::string value;
  uint64_t version = 0;
  // The key's expiry (PutOptions::expires_at_unix_ms): kNoExpiry or a Unix
  // time in milliseconds still ahead of the reader's clock when read.
  int64_t expires_at_unix_ms = kNoExpiry;
};

// One write of a MultiPut: views of the caller's bytes, read during the
// call only.
struct KeyValueView {
  std::string_view key;
  std::string_view value;
  // MultiPut: this item is stored only if the condition holds (as Put with
  // a PutCondition); the default, none, always stores.
  PutCondition condition{};
  // The item's expiry, as PutOptions::expires_at_unix_ms.
  int64_t expires_at_unix_ms = kNoExpiry;
};

// One server of the cluster, as the client's cached map lists it. keys and
// heap_bytes_used are the server's last heartbeat (informational).
struct MemberInfo {
  std::string server_id;
  uint64_t epoch = 0;
  std::string state;  // "UP" or "DOWN"
  std::string data_address;
  std::string admin_address;
  std::string transport;  // "tcp" or "verbs"
  uint32_t shards = 0;    // shards owned (it is their primary)
  uint64_t keys = 0;
  uint64_t heap_bytes_used = 0;
  uint64_t heap_bytes = 0;
  std::string zone;            // failure domain; empty when unlabelled
  uint32_t backup_shards = 0;  // shards it holds as a backup
  uint32_t syncing_shards = 0; // shards it is catching up on (not yet a replica)
  bool draining = false;       // being drained (ClusterAdmin::Drain): its roles move away
  // A DOWN server: when a coordinator marked it DOWN, in milliseconds since
  // the Unix epoch on that coordinator's wall clock (`kvctl members` shows
  // how long ago). 0 while UP, and when the coordinator did not record it
  // (one older than this field).
  uint64_t down_since_unix_ms = 0;
};

// The servers holding one shard: its primary (which serves every call for
// the shard's keys) first, then its backups.
struct ShardInfo {
  uint32_t shard = 0;
  std::vector<std::string> replicas;  // server ids, primary first
  // Servers catching up on the shard: they receive its writes but are
  // neither read nor counted as replicas until they caught up.
  std::vector<std::string> syncing;
  // Non-empty while the primary role passes from this server (a backup
  // now) to replicas[0]: the shard's writes are refused, and retried by
  // the client, until the handover completes.
  std::string handover_from;
};

// One version of the cluster map as the client caches it.
struct ClusterInfo {
  uint64_t map_version = 0;
  // R, the copies each shard is meant to have; a shard holds fewer while a
  // failed backup is out of its replica set.
  uint32_t replication_factor = 0;
  std::vector<MemberInfo> members;  // in join order
  std::vector<ShardInfo> shards;    // shards[s].shard == s
};

class ClusterAdmin;     // rkv/admin.h
class ClientTestPeer;   // tests only; not part of librkv's API

class RKV_EXPORT Client {
 public:
  // Single server: connects every pool connection (retrying within
  // options.timeout while the server is unreachable) and checks the
  // server's table. Errors: INVALID_ARGUMENT for bad options,
  // PERMISSION_DENIED when the server refused the connection (token,
  // version, connection limit: the message says which), FAILED_PRECONDITION
  // for a server that accepted but speaks another protocol or layout
  // version, INVALID_ARGUMENT for malformed accept data or table header,
  // UNAVAILABLE when the server stayed unreachable.
  // Cluster: fetches a complete cluster map (retrying within
  // options.timeout while the coordinator is unreachable or the cluster
  // is still incomplete) and starts following it; servers are connected
  // on first use. Errors: INVALID_ARGUMENT for bad options or a malformed
  // map, UNAUTHENTICATED for a refused token, UNAVAILABLE for an
  // unreachable coordinator or "cluster has K of N servers".
  static StatusOr<std::unique_ptr<Client>> Connect(const ClientOptions& options);

  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // The value of `key`; NOT_FOUND when absent.
  //
  // With ReadFrom::kPrimary (the default) the read is linearizable: it
  // returns the value of the newest acknowledged write of `key`, or of a
  // write not yet acknowledged whose PUT or DELETE was in flight during the
  // call, never an older one.
  //
  // With ReadFrom::kAnyReplica (cluster mode) the call reads one replica
  // of the key's shard as the client's cached map lists it: the primary
  // or a backup that the map marks UP, taken in turn by the calling
  // thread, under a lease on that map that covers the server, with the
  // same one-sided READs and checks as a read of the primary. Should that
  // attempt fail (the server unreachable, restarted, DOWN, not covered by
  // the lease), the call retries on the key's primary in the newest map,
  // as a kPrimary call does. A backup read guarantees:
  //   - a value that some PUT of `key` wrote, checked end to end like a
  //     primary's (checksum, key, version), or NOT_FOUND when the replica
  //     holds none;
  //   - every write this client (or anyone) had acknowledged before the
  //     call began, unless the backup was taken out of the shard's replica
  //     set meanwhile (a backup that failed to acknowledge a write, or
  //     dropped at a failover) and the cached map still lists it: the
  //     client keeps reading it until its lease on that map ends, so such
  //     a read may miss writes acknowledged up to about one lease
  //     (the coordinator's --lease_ms) before it.
  // It does not guarantee:
  //   - that the value was acknowledged: a backup installs a forwarded
  //     write before the primary publishes and acknowledges it, and the
  //     primary may then fail (lease expired, another backup failed and
  //     the coordinator could not be told, a full table): such a value may
  //     never be acknowledged, and a later read of the primary may not
  //     show it (likewise NOT_FOUND for a DELETE not acknowledged);
  //   - monotonic reads: two calls may read different replicas, the
  //     second older than the first, even from one thread;
  //   - linearizability, nor reading one's own writes in the case above.
  // MultiGet with kAnyReplica reads each shard's keys from one replica.
  // Reads spread over the replicas only where the map lists backups (R > 1).
  StatusOr<std::string> Get(std::string_view key, const CallOptions& call = {});
  // Same, with the value's version.
  StatusOr<VersionedValue> GetVersioned(std::string_view key, const CallOptions& call = {});
  // Same, into `*value`, whose memory is reused: a caller that gets many
  // values into one string allocates only when a value outgrows it. On OK
  // `*value` is the value (and `*version` its version, when not null); on
  // any error `*value` is empty.
  Status Get(std::string_view key, std::string* value, uint64_t* version = nullptr,
             const CallOptions& call = {});
  // ---- GETs into the caller's memory.
  //
  // Registers `memory` so that GetInto and MultiGetInto READ values
  // straight into it: on verbs the RDMA READ scatters the block's header
  // and key into the client's buffer and its value into `memory`, where
  // the checksum is checked in place, so no byte of the value is copied
  // (tcp's emulated READ writes it there likewise). The memory is
  // registered with the client's transports (ibv_reg_mr on verbs: it is
  // pinned until UnregisterBuffer); it must stay valid until
  // UnregisterBuffer returns, and no other call may write it while a
  // GetInto into it runs. INVALID_ARGUMENT for empty memory,
  // ALREADY_EXISTS when it overlaps a registered buffer, the transport's
  // error when it cannot be registered (e.g. RLIMIT_MEMLOCK).
  //
  // Device memory (GPUDirect RDMA): the same call works for memory a NIC
  // can reach through ibv_reg_mr (with nvidia-peermem loaded), except that
  // the checksum is computed by the CPU over the value in place: the
  // memory must be readable by the CPU (a host-mapped BAR, e.g. through
  // gdrcopy). Memory the CPU cannot read is not supported.
  StatusOr<BufferHandle> RegisterBuffer(std::span<std::byte> memory);
  // Deregisters the buffer; once it returns, no READ of this client
  // writes the memory. Waits for no call: a GetInto into the buffer that
  // is still running keeps it registered until it returns. NOT_FOUND for
  // an unknown handle.
  Status UnregisterBuffer(BufferHandle handle);
  // Get, into `out`: on OK the value is out[0, result->value_bytes) and
  // *result says how it got there. `out` may be any memory: inside a
  // registered buffer the READ lands there (result->in_place; only the
  // block's padding or a too-large value's end fall back into the
  // client's buffer), elsewhere the value is copied once from the client's
  // buffer. RESOURCE_EXHAUSTED when the value is larger than `out`, with
  // result->value_bytes the size needed. Bytes of `out` past the value may
  // be overwritten too (with up to 63 bytes of the block's padding), and
  // on any error the contents of `out` are unspecified. `result` must not
  // be null.
  Status GetInto(std::string_view key, std::span<std::byte> out, GetIntoResult* result,
                 const CallOptions& call = {});
  // Same; returns the value's size.
  StatusOr<size_t> GetInto(std::string_view key, std::span<std::byte> out, const CallOptions& call = {});
  // MultiGet into one buffer per key (outs.size() and results.size() equal
  // keys.size()): one status per key, each as GetInto would return it,
  // with results[i] filled likewise. The buffers must not overlap.
  std::vector<Status> MultiGetInto(std::span<const std::string> keys, std::span<const std::span<std::byte>> outs,
                                   std::span<GetIntoResult> results, const CallOptions& call = {});

  // Stores `value` under `key`; returns the key's new version (versions of
  // a key grow monotonically). Acknowledged means durable per the server's
  // durability setting.
  StatusOr<uint64_t> Put(std::string_view key, std::string_view value,
                         const CallOptions& call = {});
  // Put only if `condition` holds (PutCondition); PutCondition{} is Put.
  StatusOr<uint64_t> Put(std::string_view key, std::string_view value, const PutCondition& condition,
                         const CallOptions& call = {});
  // Put with a condition and an expiry (PutOptions).
  StatusOr<uint64_t> Put(std::string_view key, std::string_view value, const PutOptions& options,
                         const CallOptions& call = {});
  // Gives `key` the expiry `expires_at_unix_ms` (kNoExpiry: none, as
  // Redis's PERSIST), keeping its value: GetVersioned and a Put conditional
  // on the version read, again while another write slips between them, so
  // a concurrent write is never undone. Returns the key's new version
  // (changing the expiry is a write). A deadline the client's clock has
  // already reached removes the key (DeleteIfVersion) and returns 0.
  // NOT_FOUND when the key is absent or expired; otherwise Put's errors.
  StatusOr<uint64_t> SetExpiry(std::string_view key, int64_t expires_at_unix_ms, const CallOptions& call = {});
  // This client's clock as expiry reads it: Unix time in milliseconds.
  static int64_t NowUnixMs();
  // Removes `key`; NOT_FOUND when it was absent.
  Status Delete(std::string_view key, const CallOptions& call = {});
  // Removes `key` only if its version is `version` (>= 1; a
  // compare-and-delete, checked by the key's primary as a conditional
  // Put's condition is): FAILED_PRECONDITION with Reason::kConditionFailed,
  // nothing removed, when the key is at another version or absent (the
  // message names its version). Retried like Delete.
  Status DeleteIfVersion(std::string_view key, uint64_t version, const CallOptions& call = {});
  // Gets many keys with pipelined reads: one result per key, in order,
  // each as Get would return it (call.read_from included: kAnyReplica reads
  // all keys of one shard from the same replica). All keys share one
  // deadline.
  std::vector<StatusOr<std::string>> MultiGet(std::span<const std::string> keys,
                                              const CallOptions& call = {});
  // The same for views of the caller's keys, read during the call only: a
  // caller whose keys lie in buffers of its own builds no string per key.
  std::vector<StatusOr<std::string>> MultiGet(std::span<const std::string_view> keys,
                                              const CallOptions& call = {});
  // Stores many pairs with many requests in flight per connection: one
  // result per item, in order, each as Put would return it (the new
  // version, or that item's error). All items share one deadline. An item
  // whose key or value is out of bounds fails alone with INVALID_ARGUMENT;
  // the others proceed. The items of one server (cluster mode: of the
  // shards it is the primary of) go out as one batch over one connection
  // (a WRITE and a SEND per item, many items per doorbell) and are applied
  // in the order given, so two items of one key leave the later one's
  // value. Retries and their guarantee are Put's, per item (see Retries):
  // an item whose reply was lost is resent, with its request id, to the
  // same server incarnation only; otherwise its error says the outcome is
  // unknown. Should a failover move the keys of one batch to several
  // servers during the call, its unanswered items are grouped again by
  // the newest map and sent on, within the deadline. An item with a
  // KeyValueView::condition is a compare-and-set checked by the key's
  // primary when it applies that item, in the batch's order (an earlier
  // item of the same key in the batch counts): FAILED_PRECONDITION for
  // that item alone when it does not hold.
  std::vector<StatusOr<uint64_t>> MultiPut(std::span<const KeyValueView> items, const CallOptions& call = {});
  // Removes many keys likewise: one result per key, in order, each as
  // Delete would return it (NOT_FOUND for an absent key).
  std::vector<Status> MultiDelete(std::span<const std::string> keys, const CallOptions& call = {});

  // The location cache's size and use since Connect (per key looked up by
  // Get or MultiGet: hits + misses + fallbacks). All zero, enabled false,
  // when ClientOptions::location_cache_bytes is 0. Thread-safe.
  LocationCacheStatsInfo LocationCacheStats() const;
  // The client's counters (ClientCounters): relaxed reads of atomic
  // counters, and the pools' list under a mutex for a moment. Thread-safe.
  ClientCounters Counters() const;

  // The server's limits, as announced when the newest connection was made
  // (cluster mode: the smallest over the servers of the cached map).
  uint32_t max_key_bytes() const;
  uint32_t max_value_bytes() const;
  // The epoch of the server incarnation of the newest connection.
  uint64_t server_epoch() const;
  // "tcp" or "verbs", and a sentence saying why that one was picked.
  std::string transport_name() const;
  std::string transport_reason() const;

  // ---- Cluster mode: the map this client routes by. In single-server
  // mode these report 0 / false or fail with FAILED_PRECONDITION. All are
  // thread-safe.

  bool cluster_mode() const;
  // Version of the cached cluster map.
  uint64_t cluster_map_version() const;
  // The cached map's servers and every shard's replica set, all from one
  // map version.
  StatusOr<ClusterInfo> Cluster() const;
  // The shard `key` belongs to (the same in every map version: the shard
  // count is fixed for the life of a cluster). INVALID_ARGUMENT, as from
  // Get and Put, for a key no server takes (empty, or over max_key_bytes()).
  StatusOr<uint32_t> ShardOfKey(std::string_view key) const;
  // Fetches the map from the coordinator now and installs it when newer
  // (the watch thread does this by itself; for callers that must not wait
  // for it). The coordinator's error when it cannot be reached.
  Status RefreshClusterMap(const CallOptions& call = {});

 private:
  friend class ClusterAdmin;
  friend class ClientTestPeer;
  class Impl;
  explicit Client(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace rkv
