// ServerConnection: one data-plane connection of a client to a server, with
// everything the protocol needs on the client side: the validated accept
// data and table header, one registered local buffer, the staging-ring
// bookkeeping and request credits.
//
// Local buffer (one region, kLocalWrite), in this order:
//   bucket area   kMaxBatchKeys neighbourhoods: landing area of
//                 neighbourhood READs (and of the table header READ at
//                 connect time);
//   block area    max(largest block, kMinBlockArea): landing area of block
//                 READs, packed at 64-byte offsets;
//   staging area  a mirror of the part of the staging ring this connection
//                 uses (StagingBytes): each PUT/DELETE record is built at
//                 its ring offset and WRITTEN from there, so a record's
//                 local bytes stay untouched until the ring space is free;
//   send area     kSendSlots RequestMsgs, one per request in flight;
//   recv area     kMaxMessageBytes per posted receive.
// On a transport whose target serves one-sided operations on its CPU
// (Transport::one_sided_uses_target_cpu: tcp) a second region, kLocalWrite
// | kRemoteWrite: kMaxBatchKeys landing slots, where the server WRITEs the
// blocks of the keys a Lookup asks it for (AskServer; docs/design.md §4.1).
//
// Failure: any transport error, error completion, malformed or unexpected
// reply, or a deadline that expires while operations are in flight marks
// the connection broken (and disconnects it). A broken connection fails
// every later call with the status that broke it; the owner reconnects.
//
// The class is defined in three files: server_connection.cc (Open, the
// buffer layout, completion dispatch), server_connection_get.cc (Lookup:
// the one-sided READs of a GET) and server_connection_put.cc (Write and
// WriteBatch: the staging-ring WRITEs, the request SENDs and the replies).
//
// Thread safety: none. The owner serializes all calls (the client keeps
// each connection in a pool slot under that slot's mutex).
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "client/location_cache.h"
#include "client/staging_ring.h"
#include "common/hash.h"
#include "common/layout.h"
#include "common/protocol.h"
#include "common/record.h"
#include "common/status.h"
#include "common/transport/transport.h"

namespace rkv::client {

using Clock = std::chrono::steady_clock;
using Deadline = Clock::time_point;

// Keys per pipelined lookup batch: one neighbourhood READ each, in one list.
inline constexpr size_t kMaxBatchKeys = 64;
// READs per posted list (bounded by the send queue depth).
inline constexpr size_t kMaxReadsPerList = 2 * kMaxBatchKeys;
// The block area holds at least this much, so that small blocks of a whole
// batch are fetched with one list.
inline constexpr size_t kMinBlockArea = 256 * 1024;
// Receives posted per connection, at most (and so outstanding requests).
inline constexpr uint32_t kMaxPostedRecvs = 64;
// Consecutive rounds that see a slot pointing outside the heap before a
// GET reports DATA_LOSS.
inline constexpr int kCorruptRounds = 3;

// The outcome of one key's lookup. `done` is false until the key has an
// answer: OK (value and version valid), NOT_FOUND, DEADLINE_EXCEEDED (what
// kept failing is in the message) or DATA_LOSS.
//
// A GetInto names its caller's memory in `into`: the value goes there
// instead of `value`, and value_size is its size. With `into->mr` (that
// memory registered with this connection's transport) a block READ
// scatters the block's header and key into the connection's buffer and
// its value straight into the caller's memory, where the checksum is
// checked (`in_place`); without, the value is copied there once from the
// connection's buffer. A value larger than into->capacity is
// RESOURCE_EXHAUSTED with value_size the size needed; the memory's
// contents are then unspecified.
struct ValueTarget {
  uint8_t* data = nullptr;
  size_t capacity = 0;
  const transport::MemoryRegion* mr = nullptr;  // null: not registered
  size_t mr_offset = 0;                         // of `data` in mr
};

struct LookupResult {
  bool done = false;
  Status status;
  std::string value;
  uint64_t version = 0;
  int64_t expires_at_ms = 0;  // of the record found (0: none); an expired one is NOT_FOUND
  const ValueTarget* into = nullptr;  // set by the caller, or null
  size_t value_size = 0;              // with `into`
  bool in_place = false;              // with `into`: no copy was made
};

// The server's verdict on a PUT or DELETE.
struct WriteResult {
  Status status;         // as the server replied
  uint64_t version = 0;  // the new (PUT) or deleted (DELETE) version
};

// One PUT or DELETE of a WriteBatch.
struct WriteOp {
  protocol::Op op = protocol::Op::kPut;
  std::string_view key;
  std::string_view value;  // empty for a DELETE
  uint64_t request_id = 0;
  bool resent = false;  // this request id was posted to this server incarnation before
  // A PUT's precondition (protocol::Condition) and, for kVersionIs, the
  // version it names; kNone and 0 otherwise.
  protocol::Condition condition = protocol::Condition::kNone;
  uint64_t expected_version = 0;
  int64_t expires_at_ms = 0;  // a PUT's expiry (layout::BlockHeader); 0 otherwise
  // A lookup's (protocol::Op::kGet, the GET path's own; WriteBatch takes
  // PUTs and DELETEs only): the landing slot its block is WRITTEN to.
  uint32_t landing_slot = 0;
};

// What became of one WriteOp of a WriteBatch.
struct WriteOutcome {
  bool sent = false;     // posted: the server may have seen (and applied) it
  bool replied = false;  // `result` holds the server's reply
  WriteResult result;
  uint64_t block = 0;    // the reply's slot word of the written block (0: none)
};

class ServerConnection {
 public:
  // Connects to `address` as the client `request` names (a hello, the
  // server's challenge, the proof: protocol::ConnectAsClient), validates
  // the accept data, registers and lays out the local buffer, posts
  // receives, READs and checks the table header. Errors as
  // ConnectAsClient (a refused proof: PERMISSION_DENIED with the server's
  // reason, e.g. "invalid token"), or those of ParseAcceptData /
  // CheckTableHeader with the address prepended.
  static StatusOr<std::unique_ptr<ServerConnection>> Open(
      transport::Transport& transport, const std::string& address,
      const protocol::ClientConnectParams& request, Deadline deadline);

  ~ServerConnection();
  ServerConnection(const ServerConnection&) = delete;
  ServerConnection& operator=(const ServerConnection&) = delete;

  bool broken() const { return broken_; }
  // The transport this connection was opened on (memory a caller wants
  // READs to land in is registered with it).
  transport::Transport& transport() const { return *transport_; }
  const protocol::AcceptData& accept() const { return accept_; }
  // The address this connection was opened to.
  const std::string& address() const { return address_; }
  // The server's table header as READ at connect time (checked against
  // the accept data).
  const layout::TableHeader& table_header() const { return table_header_; }

  // A frozen server answers nothing, and a wait for it would last the
  // whole call's deadline even after the cluster failed it over. With a
  // check set, a wait for replies asks it every poll round (at most every
  // 50 ms) once it has waited kAbandonCheckAfter, and breaks the connection
  // with the check's error when it is not OK (WithServer's check: the
  // client's lease excludes the server, docs/design.md §8.8); a READ is
  // waited for the same way (in slices once it has waited
  // kAbandonCheckAfter), and at most kReadLimit, then the connection is
  // broken (a GET is simply resent, through the map of that time).
  // The check is given how long the wait has lasted (it may report the
  // server as unresponsive, UnresponsiveReporter); a READ that timed out
  // calls it once with its wait before it breaks the connection.
  static constexpr std::chrono::milliseconds kAbandonCheckAfter{100};
  static constexpr std::chrono::milliseconds kReadLimit{2000};
  using AbandonCheck = std::function<Status(Clock::duration waited)>;
  void set_abandon_check(AbandonCheck check) { abandon_check_ = std::move(check); }

  // From now on Lookup uses `cache` (which must outlive the connection)
  // for this server, named there by `server_tag` (LocationCache::ServerTag).
  void UseLocationCache(LocationCache* cache, uint32_t server_tag) {
    cache_ = cache;
    cache_server_ = server_tag;
  }

  // Looks up every key whose result is not done yet (keys.size() ==
  // results.size()). A key with a location cache entry first gets one READ
  // of the remembered block, accepted only if it proves current
  // (docs/design.md §4.4). On tcp the others are asked of the server: one
  // lookup request each, whose reply carries the key's block, accepted
  // by the same checks as a READ's (AskServer; absent: NOT_FOUND at
  // once); a key whose result has registered memory (`into->mr`) keeps
  // its in-place READ. The keys left, and every key whose answer was not
  // accepted, get one READ of the key's neighbourhood, then one READ of
  // each block whose slot fingerprint matches; a miss is confirmed by one
  // more neighbourhood READ (server_connection_get.cc). What that finds
  // refreshes the cache. Torn, reused or leased-out reads are retried with
  // backoff until `deadline`; afterwards every such result is done.
  // Returns non-OK only when the connection broke: results already done
  // stay valid, the others stay not done. `key_hashes` is empty or holds
  // ShardHash(keys[i]) at i (the hash the client routed by, which the
  // location cache reuses); when empty, keys are hashed here if a cache is
  // used.
  Status Lookup(std::span<const std::string_view> keys, std::span<LookupResult> results,
                Deadline deadline, std::span<const uint64_t> key_hashes = {});

  // Sends one PUT (value) or DELETE (empty value, tombstone) as request
  // `request_id` and waits for its reply. The caller numbers requests
  // uniquely per client id across all its connections, and resends a
  // request whose reply was lost with the same id (common/protocol.h).
  // Sizes must have been checked against the accept data's limits. Non-OK
  // only when the connection broke. *sent (when not null) says whether the
  // request was posted: if not, the server never saw it; if so and the
  // result is non-OK, it may or may not have been applied. `resent`: the
  // request was posted to this server incarnation before (sent as
  // protocol::kRequestResent, which the server's replay check needs).
  StatusOr<WriteResult> Write(protocol::Op op, std::string_view key, std::string_view value,
                              uint64_t request_id, Deadline deadline, bool* sent = nullptr, bool resent = false);
  // The same for one WriteOp (its condition included); `key_hash` as
  // WriteBatch's.
  StatusOr<WriteResult> Write(const WriteOp& op, Deadline deadline, bool* sent = nullptr,
                              std::span<const uint64_t> key_hash = {});

  // Sends every op of `ops` (request ids as for Write, all distinct) with
  // many in flight: as many records as the staging ring, the request
  // credits and the send slots allow are WRITTEN and their requests SENT
  // in one posted list (one doorbell), the next ones as replies free room.
  // Replies come in order; each lands in the outcome at its op's index
  // (outcomes.size() == ops.size()). Returns OK once every op has a reply
  // and every SEND has completed (outcomes[i].result is then the server's
  // verdict: an error reply does not stop the others). INVALID_ARGUMENT, with nothing sent and the
  // connection intact, for an op over this connection's limits (empty or
  // too long key, too long value, a DELETE with a value). Any other non-OK
  // means the connection broke: an op with `replied` has its answer; one
  // `sent` without a reply may or may not have been applied (resend it
  // with the same request id); one not `sent` was never seen by the
  // server. The ops' keys leave the location cache (if any) first;
  // `key_hashes` as Lookup's.
  Status WriteBatch(std::span<const WriteOp> ops, std::span<WriteOutcome> outcomes, Deadline deadline,
                    std::span<const uint64_t> key_hashes = {});

 private:
  struct FreeDeleter {
    void operator()(uint8_t* p) const { std::free(p); }
  };

  // Receive completions carry this bit plus the receive buffer's index;
  // READ and SEND wr_ids come from a counter that never reaches it.
  static constexpr uint64_t kRecvTag = uint64_t{1} << 63;
  static constexpr size_t kNeighborhoodBytes = layout::kNeighborhoodBuckets * sizeof(layout::Bucket);
  static constexpr size_t kBucketAreaBytes = kMaxBatchKeys * kNeighborhoodBytes;

  // Per-lookup scratch, sized once in Init and reused by every Lookup so
  // that the GET path allocates nothing (a result's value string aside).
  struct KeyState {
    Neighborhood nb;
    bool confirming = false;          // the last round missed cleanly
    Clock::time_point first_posted;  // of that round's READ
    int attempts = 0;
    int corrupt_rounds = 0;
    std::string last_failure;  // written only when a round fails
  };
  // What one round saw for one key.
  struct Outcome {
    bool found = false;
    bool lease_expired = false;
    bool unreadable = false;  // a candidate block failed to decode
    bool corrupt = false;     // a candidate slot points outside the heap
    uint64_t version = 0;     // of the newest match (its value is in the result)
    int64_t expires_at_ms = 0;  // of the newest match
    uint64_t heap_offset = 0;  // of the newest match's block
    uint64_t bytes = 0;        // of the newest match's block
    bool superseded = false;   // the newest match's block carried the mark
    std::string why;           // written only on a failure
    // With the result's `into`: one candidate READ of this round was
    // scattered into it (`direct_posted`); the newest match is that one
    // (`in_place`), or is held in the result's string to be copied there
    // (`held`), or was copied there (neither); value_size is its size.
    bool direct_posted = false;
    bool in_place = false;
    bool held = false;
    size_t value_size = 0;
  };
  // A key with a location cache entry (ReadCachedBlocks).
  struct CachedRead {
    size_t key_index = 0;  // into Lookup's keys
    CachedLocation location;
    size_t local_offset = 0;
    uint32_t direct_bytes = 0;  // > 0: scattered into the result's `into` (ScatterInto)
  };
  struct Candidate {
    size_t t = 0;  // index into todo_
    uint64_t heap_offset = 0;
    uint64_t bytes = 0;
    size_t local_offset = 0;
    uint32_t direct_bytes = 0;  // as CachedRead's
  };
  // A block READ into the connection's buffer at `local_offset` (`bytes`
  // reserved there), or, when `into` is registered and the block is longer
  // than the header and `key_bytes`, scattered: header and key there, then
  // up to into->capacity bytes into the caller's memory, the rest (padding,
  // or a value too large) back in the buffer. Returns the bytes that go to
  // the caller's memory (0: none).
  uint32_t SetUpBlockRead(transport::ReadOp& op, size_t local_offset, uint64_t heap_offset, uint64_t bytes,
                          const ValueTarget* into, size_t key_bytes);
  // The block of a scattered READ (SetUpBlockRead), checked in place.
  StatusOr<ScatteredRecord> DecodeScattered(size_t local_offset, uint64_t bytes, const ValueTarget& into,
                                            uint32_t direct_bytes, size_t key_bytes) const;
  // Whether the scattered block of `cr` answered `r`.
  bool AcceptCachedScattered(std::string_view key, LookupResult& r, const CachedRead& cr, bool in_lease);
  void ConsiderScattered(std::string_view key, LookupResult& r, const Candidate& cand, Outcome& o);
  // Copies `value` into `r.into` when it fits; sets r.value_size.
  static void CopyInto(LookupResult& r, std::string_view value);
  // r.into's final answer from r.value_size: RESOURCE_EXHAUSTED when over
  // its capacity.
  static void SettleInto(LookupResult& r);
  // Answers `r` with a record proven current (the value into `r.into` when
  // set), then SettleExpiry.
  static void SettleFound(LookupResult& r, const RecordView& record);
  // A found record's last step: its expiry, and NOT_FOUND when this
  // client's clock has reached it (docs/design.md §5.11).
  static void SettleExpiry(LookupResult& r, int64_t expires_at_ms);

  // The time left before `deadline` as seen at `now`; zero once it passed.
  static std::chrono::microseconds Left(Deadline deadline, Clock::time_point now) {
    return now >= deadline ? std::chrono::microseconds(0)
                           : std::chrono::duration_cast<std::chrono::microseconds>(deadline - now);
  }

  // ---- Setup and shared plumbing (server_connection.cc).
  ServerConnection(std::unique_ptr<transport::Connection> conn, const protocol::AcceptData& accept,
                   std::string address);
  // Lays out and registers the buffer, posts the receives, READs and
  // checks the table header.
  Status Init(transport::Transport& transport, Deadline deadline);
  // Polls once, up to `wait`, and dispatches the completions.
  Status PollOnce(std::chrono::microseconds wait);
  // Accounts for one completion (receives: HandleReceive); a failed one
  // breaks the connection.
  void HandleCompletion(const transport::Completion& c);
  Status MarkBroken(Status why);
  uint64_t NextWrId() { return next_wr_id_++; }

  // ---- The GET path (server_connection_get.cc).
  // READs the table header (the first bytes of the index region) into
  // table_header_.
  Status ReadTableHeader(Deadline deadline);
  // Posts `ops` (the last one signaled, wr_ids filled in here) and waits
  // for the signaled completion. `now` is a clock reading taken just
  // before the call (saves reading the clock again for the first wait).
  Status PostReadsAndWait(std::span<transport::ReadOp> ops, Deadline deadline,
                          Clock::time_point now, std::string_view what);
  // PostReadsAndWait's uncommon end: a failure, or completions of other
  // work that arrived meanwhile.
  // The rest of a READ wait with an abandon check, after its first slice
  // (`waited`) timed out: slices of at most 50 ms up to `wait`, the check
  // asked before each; then as AfterReads.
  [[gnu::cold, gnu::noinline]] Status ReadsInSlices(uint64_t wr_id, std::chrono::microseconds waited,
                                                    std::chrono::microseconds wait, std::string_view what);
  // `waited`: how long the READs were waited for (for the abandon check).
  [[gnu::cold, gnu::noinline]] Status AfterReads(Status s, std::string_view what, std::chrono::microseconds waited);
  // Step 0b, on tcp: asks the server for the keys of `batch` without
  // registered memory (server_connection_put.cc); Answer settles each
  // reply.
  Status AskServer(std::span<const std::string_view> keys, std::span<LookupResult> results,
                   std::span<const size_t> batch, Deadline deadline);
  // Whether lookup `i` of AskServer's last batch answered `r`: NOT_FOUND,
  // or a landed block that proves current (the checksum, the key, the
  // reply's version; `in_lease`: the reply came within the lease of the
  // post); otherwise the READs answer it.
  bool Answer(std::string_view key, uint64_t key_hash, LookupResult& r, size_t i, bool in_lease);
  // Step 0 with a location cache: READs the remembered block of every key
  // of `batch` that has an entry, all in one list when the block area holds
  // them; a block that proves current (valid checksum form, the key, the
  // entry's version, read within the lease) answers its key.
  Status ReadCachedBlocks(std::span<const std::string_view> keys, std::span<LookupResult> results,
                          std::span<const size_t> batch, Deadline deadline);
  // One batch of at most kMaxBatchKeys keys, in rounds of the steps below
  // (each inlined into LookupBatch: named to be read, not called apart).
  Status LookupBatch(std::span<const std::string_view> keys, std::span<LookupResult> results,
                     std::span<const size_t> batch, Deadline deadline);
  // Resets the per-key state of `batch` and puts every key on todo_.
  void StartBatch(std::span<const std::string_view> keys, std::span<const size_t> batch);
  // Step 1: every todo_ key's neighbourhood, one READ each, in one list.
  // *posted: when the list was posted (the lease starts there);
  // *read_done: when it completed, read only when a key of the round
  // confirms a miss (*posted otherwise).
  Status ReadNeighborhoods(Deadline deadline, Clock::time_point* posted, Clock::time_point* read_done);
  // Step 2: candidates_ = the slots whose fingerprint matches their key's;
  // a slot naming a block outside the heap marks its key's outcome corrupt.
  void FindCandidates();
  // Step 3: READs the candidates' blocks (as many per list as the block
  // area holds); each key's newest match goes into outcome_ (version) and
  // its result (value).
  Status ReadCandidates(std::span<const std::string_view> keys, std::span<LookupResult> results,
                        std::span<const size_t> batch, Clock::time_point posted, Deadline deadline);
  // Step 4: answers each todo_ key or keeps it (in todo_ afterwards) for
  // another round. Returns whether a kept key failed its round (the next
  // round then waits for the backoff).
  // Found keys refresh their location cache entry, absent ones drop it.
  bool SettleRound(std::span<const std::string_view> keys, std::span<LookupResult> results,
                   std::span<const size_t> batch, Clock::time_point posted, Clock::time_point read_done);
  // Every todo_ key is done: DEADLINE_EXCEEDED with its last failure.
  [[gnu::cold, gnu::noinline]] void GiveUp(std::span<LookupResult> results, std::span<const size_t> batch);
  // Marks `o` corrupt: `slot` names a block outside the heap.
  [[gnu::cold, gnu::noinline]] void MarkCorrupt(Outcome& o, uint64_t slot) const;

  // ---- The PUT/DELETE path (server_connection_put.cc).
  // Requests posted and not yet retired, in send order.
  struct InFlight {
    uint64_t request_id = 0;
    uint64_t send_wr = 0;     // its SEND's wr_id
    uint32_t send_slot = 0;   // its RequestMsg in the send area
    size_t item = 0;          // its index in the running WriteBatch
    bool replied = false;
  };
  // Request messages in flight at most: every credit, plus as many whose
  // reply came while their SEND's completion has not yet.
  static constexpr uint32_t kSendSlots = 2 * kMaxPostedRecvs;
  static constexpr size_t kSendSlotBytes = 64;
  static_assert(sizeof(protocol::RequestMsg) <= kSendSlotBytes);
  // The part of the server's staging ring a connection uses (the local
  // staging area mirrors it): its first max(this, two of the largest
  // blocks) bytes, or all of a smaller ring.
  static constexpr uint64_t kMaxStagingBytes = 1 << 20;
  static uint64_t StagingBytes(const protocol::AcceptData& accept);

  // The checks of WriteBatch that leave the connection intact.
  Status CheckWriteOps(std::span<const WriteOp> ops) const;
  // Sends `ops` (PUTs, DELETEs or lookups, checked) and waits for every
  // reply and SEND completion; WriteBatch's outcomes and errors.
  Status RunBatch(std::span<const WriteOp> ops, std::span<WriteOutcome> outcomes, Deadline deadline);
  // Builds and posts, as one list, as many of ops[*next, ...) as fit now
  // (advancing *next). Non-OK only when the connection broke.
  Status PostWrites(std::span<const WriteOp> ops, size_t* next);
  // Frees the ring space and send slot of every oldest request that was
  // replied to and whose SEND completed (its local bytes are then no
  // longer read by the transport).
  void Retire();
  // Polls until done() or the deadline (which breaks the connection: work
  // is in flight). `now` as for PostReadsAndWait.
  template <typename Done>
  Status WaitFor(Done done, Deadline deadline, Clock::time_point now, std::string_view what);
  // A reply in receive buffer `index`: checks it answers the oldest
  // request not yet answered, records it in the running batch's outcome,
  // returns its credits and re-posts the buffer.
  void HandleReceive(uint64_t index, uint32_t byte_len);

  // Declaration order is teardown order, reversed: the connection (queue
  // pair) goes first, then the registration, then the memory it covered.
  std::unique_ptr<uint8_t, FreeDeleter> buffer_;
  std::unique_ptr<transport::MemoryRegion> mr_;
  // tcp: the landing slots (null elsewhere), landing_slot_bytes_ each.
  std::unique_ptr<uint8_t, FreeDeleter> landing_;
  std::unique_ptr<transport::MemoryRegion> landing_mr_;
  size_t landing_slot_bytes_ = 0;
  transport::Transport* transport_ = nullptr;  // set by Init
  std::unique_ptr<transport::Connection> conn_;

  const std::string address_;
  const protocol::AcceptData accept_;
  layout::TableHeader table_header_{};
  const std::chrono::microseconds lease_;
  const uint64_t max_block_;

  // Offsets into buffer_.
  size_t block_area_offset_ = 0;
  size_t block_area_bytes_ = 0;
  size_t staging_offset_ = 0;
  size_t send_offset_ = 0;
  size_t recv_offset_ = 0;
  uint32_t posted_recvs_ = 0;

  // PUT/DELETE state. Invariants: in_flight_ holds one entry per live
  // ring allocation, in the same (FIFO) order; the entries before
  // awaiting_reply_ were replied to, none after it was.
  StagingRing ring_;
  uint32_t credits_ = 0;
  uint32_t max_credits_ = 0;
  std::deque<InFlight> in_flight_;
  size_t awaiting_reply_ = 0;
  std::vector<uint32_t> free_send_slots_;
  std::vector<transport::WriteSendOp> write_ops_;  // one posted list
  std::span<WriteOutcome> batch_;  // the running WriteBatch's outcomes
  size_t batch_replied_ = 0;
  uint64_t progress_ = 0;  // replies and retirements seen: what a wait waits for

  // The client's location cache (null: none) and this server's tag in it.
  LocationCache* cache_ = nullptr;
  uint32_t cache_server_ = 0;
  // With a cache, during a Lookup: ShardHash of each of its keys (the
  // caller's, or own_key_hashes_).
  std::span<const uint64_t> key_hashes_;
  std::vector<uint64_t> own_key_hashes_;

  // AskServer's batch: its lookups, their replies, the key of each (an
  // index into Lookup's keys), and the request ids, one counter per
  // connection (the server remembers no lookup).
  std::vector<WriteOp> lookups_;
  std::vector<WriteOutcome> looked_up_;
  std::vector<size_t> asked_;
  uint64_t next_lookup_id_ = 1;

  // GET scratch (see KeyState).
  std::vector<size_t> pending_;
  std::vector<CachedRead> cached_;
  std::vector<KeyState> key_state_;
  std::vector<size_t> todo_;
  std::vector<size_t> next_todo_;
  std::vector<Outcome> outcome_;
  std::vector<Candidate> candidates_;
  std::vector<transport::ReadOp> ops_;
  // Completions of one Poll; small: a GET waits for one signaled READ.
  std::array<transport::Completion, 8> completions_;
  // Completions other than the READ that PostReadsAndWait waited for.
  std::vector<transport::Completion> others_;

  uint64_t next_wr_id_ = 1;
  uint64_t completed_send_wr_ = 0;  // highest SEND completed

  bool broken_ = false;
  Status broken_status_;
  AbandonCheck abandon_check_;  // see set_abandon_check
};

}  // namespace rkv::client
