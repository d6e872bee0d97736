// The transport interface: moves bytes between registered memory regions of
// two processes with RDMA semantics, and knows nothing of keys or tables.
//
// Two implementations: `verbs` (librdmacm + ibverbs; the product) and `tcp`
// (a software emulation for machines without an RDMA device). Both enforce
// the same access rights: a remote READ of memory not registered with
// kRemoteRead, a remote WRITE into memory not registered with kRemoteWrite
// (or registered for another connection), or any access outside a region's
// bounds fails the requester's work request with a REMOTE_ACCESS error and
// changes nothing at the target.
//
// Model (that of an RC queue pair):
//   - Operations on one Connection execute in the order posted. A WRITE
//     posted before a SEND is visible in the target's memory before the
//     target sees the SEND's receive completion.
//   - Unsignaled operations produce no completion on success; a failed
//     operation always produces an error completion and the connection then
//     fails every later operation (as a QP in the error state does).
//   - A SEND consumes one receive buffer posted by the peer with PostRecv,
//     in order. A SEND that arrives with no receive posted waits for one
//     (verbs retries on RNR; tcp queues it).
//
// Thread safety: Transport and MemoryRegion are thread-safe. A Connection's
// Post* and Poll may be called from one thread at a time (callers serialize);
// a Connection may be destroyed only when no call on it is in progress.
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "common/transport/rejection.h"

namespace rkv::transport {

enum Access : uint32_t {
  kLocalWrite = 1u << 0,
  kRemoteRead = 1u << 1,
  kRemoteWrite = 1u << 2,
};

// The most private data each step of connection setup carries: the limits
// of rdma_connect and rdma_accept on IB/RoCE, which tcp enforces too. A
// rejection's limit is kMaxRejectionBytes (rejection.h).
inline constexpr size_t kMaxConnectPrivateData = 56;
inline constexpr size_t kMaxAcceptPrivateData = 196;

enum class Kind { kTcp, kVerbs };
const char* KindName(Kind kind);

// Registered memory. The memory itself is owned by the caller and must
// outlive the region.
// The accessors are plain reads (no virtual call): the data path checks
// and uses a region's bounds and keys on every work request.
class MemoryRegion {
 public:
  virtual ~MemoryRegion() = default;
  MemoryRegion(const MemoryRegion&) = delete;
  MemoryRegion& operator=(const MemoryRegion&) = delete;

  uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  uint32_t lkey() const { return lkey_; }
  uint32_t rkey() const { return rkey_; }
  // The address a peer names to access byte 0 of this region.
  uint64_t remote_addr() const { return reinterpret_cast<uint64_t>(data_); }

 protected:
  MemoryRegion(uint8_t* data, size_t size, uint32_t lkey, uint32_t rkey)
      : data_(data), size_(size), lkey_(lkey), rkey_(rkey) {}

 private:
  uint8_t* const data_;
  const size_t size_;
  const uint32_t lkey_;
  const uint32_t rkey_;
};

// A span of a local registered region.
struct LocalBuf {
  const MemoryRegion* mr = nullptr;
  size_t offset = 0;
  uint32_t length = 0;
};

struct RemoteBuf {
  uint64_t addr = 0;
  uint32_t rkey = 0;
};

enum class OpType : uint8_t { kRead, kWrite, kSend, kRecv };

struct Completion {
  uint64_t wr_id = 0;
  OpType op = OpType::kRead;
  // OK, or the failure: UNAVAILABLE for a broken connection (peer gone),
  // PERMISSION_DENIED for a remote access error (bad rkey, rights or
  // bounds), INTERNAL for anything else.
  Status status;
  uint32_t byte_len = 0;  // bytes received, for kRecv
};

// One WRITE+SEND pair of PostWriteSends: an unsignaled WRITE of
// `write_src` to `write_dst`, then a SEND of `send` with wr_id `wr_id`,
// signaled when `signaled` says so. (A failed pair completes in error
// either way.)
struct WriteSendOp {
  LocalBuf write_src;
  RemoteBuf write_dst;
  LocalBuf send;
  uint64_t wr_id = 0;
  bool signaled = true;
};

// The most local pieces one READ may scatter into: a verbs work request's
// scatter list (every device rkv runs on allows many more; the queue pair
// is created with this many).
inline constexpr size_t kMaxReadPieces = 3;

struct ReadOp {
  LocalBuf local;   // destination; its region needs kLocalWrite
  RemoteBuf remote;
  uint64_t wr_id = 0;
  bool signaled = false;
  // Further destinations, after `local` in order: the READ reads the sum
  // of the pieces' lengths from `remote` and scatters it over `local`,
  // more[0] and more[1] (each in any region with kLocalWrite). The list
  // ends at the first piece of length 0. A client READs a block's header
  // into its own memory and the value into its caller's this way.
  std::array<LocalBuf, kMaxReadPieces - 1> more{};
};

// The bytes `op` reads: the sum of its pieces' lengths, or nullopt when
// that sum does not fit a READ's 32-bit length.
inline std::optional<uint32_t> ReadLength(const ReadOp& op) {
  uint64_t total = op.local.length;
  for (const LocalBuf& piece : op.more) {
    if (piece.length == 0) break;
    total += piece.length;
  }
  if (total > UINT32_MAX) return std::nullopt;
  return static_cast<uint32_t>(total);
}

// The most pairs one PostWriteSends may post: a client's whole batch
// (kMaxBatchKeys in client/server_connection.h) fits in one list.
inline constexpr size_t kMaxWriteSendsPerPost = 64;

class Connection {
 public:
  virtual ~Connection() = default;

  // The peer's private data: for a server, what the client sent with
  // Connect; for a client, what the server sent with Accept.
  virtual std::span<const uint8_t> peer_private_data() const = 0;
  // "HOST:PORT" of the peer, for logs.
  virtual std::string peer_address() const = 0;

  // Server side, before Accept: registers memory that only this
  // connection's peer may access remotely. The region lives as long as the
  // connection. Not for use after Accept.
  virtual StatusOr<MemoryRegion*> RegisterPrivate(void* addr, size_t length, uint32_t access) = 0;
  // Server side: completes the handshake, sending `reply`
  // (<= kMaxAcceptPrivateData bytes; more is INVALID_ARGUMENT) to
  // the peer, whose Connect returns. Receives should be posted before.
  virtual Status Accept(std::span<const uint8_t> reply) = 0;
  // Server side: refuses the connection with `why` (its text is cut to
  // kRejectionTextBytes - 1). The peer's Connect fails with UNAVAILABLE
  // when why.code is UNAVAILABLE (transient: worth retrying), else with
  // PERMISSION_DENIED, and carries why.text in its message. The connection
  // is unusable after this.
  virtual void Reject(const Rejection& why) = 0;

  // Posts READs as one linked list (one doorbell). Only ops with
  // `signaled` produce a completion on success.
  virtual Status PostReads(std::span<const ReadOp> ops) = 0;
  // Posts `ops` as PostReads does, the last one signaled, and waits up to
  // `timeout` for that last READ to complete (the READs of one list
  // complete in order, so then all have). Completions of other work that
  // arrive meanwhile are appended to `*others`, as Poll would have returned
  // them. Returns the last READ's completion status: OK once it completed
  // well, its error otherwise; DEADLINE_EXCEEDED when it did not complete
  // within `timeout` (the connection should then be given up: its
  // completion may still come). The default posts and Polls; a transport
  // may take a shorter way to the same result.
  virtual Status PostReadsAndWait(std::span<const ReadOp> ops, std::chrono::microseconds timeout,
                                  std::vector<Completion>* others);
  // Posts an unsignaled WRITE of `write_src` to `write_dst` followed by a
  // signaled SEND of `send` with wr_id `wr_id`, linked in one doorbell.
  virtual Status PostWriteSend(LocalBuf write_src, RemoteBuf write_dst, LocalBuf send,
                               uint64_t wr_id) = 0;
  // Posts the pairs of `ops` as one linked list (one doorbell on verbs),
  // in order, with the ordering of single pairs: each WRITE is visible at
  // the target before the peer sees any SEND posted after it. A SEND's
  // local buffer may be reused once a completion of it or of a later
  // signaled operation of this connection arrives. At most
  // kMaxWriteSendsPerPost pairs, and no more than the send queue holds
  // (Options::max_send_wr / 2; more is INVALID_ARGUMENT or
  // RESOURCE_EXHAUSTED, nothing posted). An empty list posts nothing.
  // PostWriteSend is the list of one signaled pair.
  virtual Status PostWriteSends(std::span<const WriteSendOp> ops) = 0;
  // Posts a signaled SEND.
  virtual Status PostSend(LocalBuf send, uint64_t wr_id) = 0;
  // Posts a receive buffer (its region needs kLocalWrite).
  virtual Status PostRecv(LocalBuf buf, uint64_t wr_id) = 0;

  // Waits up to `timeout` for completions; fills `out` from the front and
  // returns how many (0 on timeout). A non-OK return means the connection
  // is unusable (e.g. UNAVAILABLE: peer disconnected and nothing is left
  // to report).
  virtual StatusOr<size_t> Poll(std::span<Completion> out, std::chrono::microseconds timeout) = 0;

  // Sends or receives a disconnect; later posts fail. Idempotent.
  virtual void Disconnect() = 0;

  // Posts a probe: a signaled READ of zero bytes with no address and no
  // rkey, which the peer's responder answers without touching memory or a
  // receive (IB C9-88: a zero-length RDMA operation checks no R_Key; on
  // tcp the peer's reader answers it the same way), so the peer's
  // application never sees it. Its completion (op kRead, byte_len 0, wr_id
  // `wr_id`) comes once the peer's side answered: OK while the peer is
  // there; an error completion (UNAVAILABLE) when it is gone (on verbs the
  // queue pair's retries ran out: a peer whose queue pair was destroyed
  // without a disconnect answers nothing). A caller that sees no
  // completion within its own bound should give the connection up.
  // Accepted connections only. UNIMPLEMENTED where a transport has no
  // probe (the default).
  virtual Status PostProbe(uint64_t wr_id);

  // After PostReadsAndWait answered DEADLINE_EXCEEDED, waits up to
  // `timeout` more for the same last READ (`wr_id`), with the same answers:
  // a caller may wait in slices and look at something else between them
  // (the client's abandon check). Through Poll, on every transport.
  Status WaitMoreForRead(uint64_t wr_id, std::chrono::microseconds timeout, std::vector<Completion>* others) {
    return WaitForRead(wr_id, timeout, others);
  }

 protected:
  // PostReadsAndWait's argument check: a non-empty list, the last signaled.
  static Status CheckReadsToWaitFor(std::span<const ReadOp> ops) {
    if (!ops.empty() && ops.back().signaled) [[likely]] return Status::Ok();
    return BadReadsToWaitFor(ops);
  }
  [[gnu::cold, gnu::noinline]] static Status BadReadsToWaitFor(std::span<const ReadOp> ops);
  // The wait of PostReadsAndWait, for the READ with `wr_id`, once posted.
  Status WaitForRead(uint64_t wr_id, std::chrono::microseconds timeout, std::vector<Completion>* others);
};

// A set of accepted connections whose completions one thread collects: a
// server's polling thread owns one group and serves every member from it,
// so a server runs a fixed number of threads whatever its connection count
// (docs/design.md, "Connection scale").
//
// A connection joins a group when Listener::Next hands it out with that
// group, and its completions belong to the group from its Accept until it
// is destroyed. On verbs every member's queue pair completes into the
// group's completion queue; on tcp the thread in Wait reads every member's
// socket (serving the peer's READs and WRITEs there, as a NIC would), so
// no member has a thread of its own.
//
// Threads: Wait, and every call on a member other than the setup before
// Accept, run on one thread at a time, the group's (its polling thread).
// A member is destroyed on that thread, or when no Wait runs. Wake may be
// called from any thread.
class PollGroup {
 public:
  virtual ~PollGroup() = default;
  PollGroup(const PollGroup&) = delete;
  PollGroup& operator=(const PollGroup&) = delete;

  // Waits up to `timeout` until some members have completions that Poll
  // would return, or are broken (Poll would report the error), and writes
  // them to `ready` (at most ready.size(), each once); returns how many,
  // 0 on timeout or after Wake. Level-triggered: a member reported and
  // not polled empty is reported again by the next Wait. Busy-polls first
  // within an adaptive window below Options::poll_spin_us, as
  // Connection::Poll does, then sleeps. A member's Poll never waits: it
  // returns what the group collected (its timeout is ignored), and its
  // PostReadsAndWait may be refused with FAILED_PRECONDITION (tcp, whose
  // group thread reads the response; verbs waits through the group). An error
  // means the group itself failed (every member is then broken).
  virtual StatusOr<size_t> Wait(std::span<Connection*> ready, std::chrono::microseconds timeout) = 0;
  // Makes the Wait in progress, or else the next one, return at once.
  virtual void Wake() = 0;
  // Accepted members now.
  virtual size_t size() const = 0;
  // A round's sends, together: between HoldSends and ReleaseSends, both
  // on the group's thread with nothing blocking between them, the sends
  // that thread posts on members may be held and go out at ReleaseSends,
  // in order (tcp: one write per member for all its held frames instead
  // of one per send; their completions come as usual). No post fails for
  // being held. The default sends each at once (verbs rings one doorbell
  // per post either way).
  virtual void HoldSends() {}
  virtual void ReleaseSends() {}

 protected:
  PollGroup() = default;
};

// What a listener has done with the connection requests it saw (since it
// was created; Listener::counters).
struct ListenerCounters {
  // Refused by the caller's Screen before anything was created for them
  // (no connection, queue pair, completion queue or buffer).
  uint64_t screened_out = 0;
  // Refused unscreened because their source address had more than
  // Options::max_refusals_per_source refusals within the second.
  uint64_t source_limited = 0;
  // Connections created and handed out by Next (pending, then accepted or
  // rejected by the caller).
  uint64_t created = 0;
};

// Accepts connection requests on one address.
//
// The accept path is bounded: requests wait in a bounded backlog
// (Options::listen_backlog on verbs, the tcp listener's sockets in setup),
// a Screen refuses a request from its private data before anything is
// created for it, and a source address whose requests were refused more
// than Options::max_refusals_per_source times within the current second
// (less those of its requests the screen let on: a client's hello and
// proof leave its count as it was) gets its further requests refused
// (UNAVAILABLE, retry later) without being screened until the second
// ends, so one source's flood costs the listener one counter update per
// request and cannot starve the others.
class Listener {
 public:
  virtual ~Listener() = default;
  // "HOST:PORT" actually bound (the port is filled in when 0 was asked).
  virtual std::string address() const = 0;
  // Waits up to `timeout` for the next connection request; returns nullptr
  // on timeout. The returned connection is pending: inspect its
  // peer_private_data, register private memory, post receives, then Accept
  // or Reject it.
  StatusOr<std::unique_ptr<Connection>> Next(std::chrono::milliseconds timeout) {
    return Next(timeout, Screen(), GroupChooser());
  }
  // Next, for a connection that, once accepted, is a member of the group
  // `choose` returns for the request's private data (one of this
  // transport's groups, from NewPollGroup; null, or an empty `choose`: no
  // group). The group is chosen before the connection exists (on verbs its
  // queue pair is created on the group's completion queue), from data the
  // peer sent and nothing has checked yet: it places the connection, it
  // must not trust it.
  using GroupChooser = std::function<PollGroup*(std::span<const uint8_t> peer_private_data)>;
  StatusOr<std::unique_ptr<Connection>> Next(std::chrono::milliseconds timeout, const GroupChooser& choose) {
    return Next(timeout, Screen(), choose);
  }
  // The caller's check of a request, run by the listener on Next's thread
  // before anything is created for the request: `peer_private_data` as the
  // peer sent it (padded on verbs), `peer_address` "HOST:PORT" for logs.
  // nullopt lets the request on (to `choose`, then Next returns it); a
  // Rejection refuses it with that Rejection (code, text and detail reach
  // the peer's Connect as Connection::Reject's do), creates nothing, counts
  // it in ListenerCounters::screened_out and against its source address,
  // and Next goes on waiting.
  using Screen = std::function<std::optional<Rejection>(std::span<const uint8_t> peer_private_data,
                                                        const std::string& peer_address)>;
  // Next, with each request screened by `screen` (empty: none) before it
  // is placed by `choose`. The default, for a listener that cannot screen
  // before it creates a connection, creates it and then screens it,
  // rejecting it when screened out (counted nowhere).
  virtual StatusOr<std::unique_ptr<Connection>> Next(std::chrono::milliseconds timeout, const Screen& screen,
                                                     const GroupChooser& choose);
  // The listener's counts; zero where a listener keeps none (the default).
  virtual ListenerCounters counters() const { return {}; }
  // Wakes a thread blocked in Next, which returns CANCELLED. Later calls
  // also return CANCELLED.
  virtual void Shutdown() = 0;

 protected:
  // The two-argument Next of a listener that does not override the
  // three-argument one.
  virtual StatusOr<std::unique_ptr<Connection>> NextUnscreened(std::chrono::milliseconds timeout,
                                                               const GroupChooser& choose);
};

inline constexpr uint32_t kMaxListenBacklog = 4096;

// Options::max_send_wr's default: room for the longest PostWriteSends
// list (two work requests a pair) twice over.
inline constexpr uint32_t kDefaultMaxSendWr = 256;
static_assert(kDefaultMaxSendWr >= 2 * 2 * kMaxWriteSendsPerPost);

// tcp only: the PEM files of TLS on the data plane (tcp/tls_session.h,
// docs/design.md §10). All empty: plain tcp.
struct TcpTlsFiles {
  // This side's certificate chain (leaf first) and its private key, both
  // or neither: with them, a listener takes TLS connections only.
  std::string cert_file;
  std::string key_file;
  // The CA bundle servers' certificates are verified against: with it,
  // Connect speaks TLS and the server's certificate must name the host
  // dialled.
  std::string ca_file;

  bool empty() const { return cert_file.empty() && key_file.empty() && ca_file.empty(); }
};

struct Options {
  // verbs only: RoCE GID index; -1 picks one (RoCE v2 IPv4-mapped) per port.
  int gid_index = -1;
  // verbs only: device name, e.g. "rxe0" or "mlx5_0"; empty resolves the
  // address through rdma_cm.
  std::string device;
  // Queue depths per connection; the implementation may raise them to what
  // it needs and clamps them to device limits.
  uint32_t max_send_wr = kDefaultMaxSendWr;
  uint32_t max_recv_wr = 256;
  // The longest a Connection's Poll busy-polls (no system call) before it
  // sleeps, in microseconds; 0 never spins, at most 1000000. verbs polls
  // its completion queues, then sleeps on the completion channel; tcp
  // watches for its reader thread's completions, then sleeps on a
  // condition variable (the spin saves the reader's wake-up of the
  // poller), and a tcp PollGroup's Wait polls its members' sockets with
  // epoll_wait and no timeout, then sleeps in epoll_wait. The same limit
  // bounds PollGroup::Wait's spin.
  // Each connection adapts below this limit: it keeps spinning while its
  // completions arrive within the limit, and spins less (down to not at
  // all) after waits that outlast it, so an idle connection costs no CPU.
  // A spinning Poll yields the CPU between rounds, so other runnable
  // threads (e.g. the peer on a loopback device) still get to run.
  int poll_spin_us = 1000;

  // tcp only: the limits a listener puts on the peers it accepts (the
  // verbs path has rdma_cm's own setup timeouts, and its server CPU sees
  // no READ or WRITE; docs/design.md, "Failure model and security").
  //
  // A socket that has not sent its whole CONNECT frame this long after it
  // was accepted is closed.
  std::chrono::milliseconds handshake_timeout{5000};
  // Sockets in setup at once, in all and from one source address. A new
  // socket beyond either limit evicts the oldest one in setup from its own
  // address (else the oldest of the address with the most), so sockets
  // that never speak cannot keep a client out.
  uint32_t max_pending_handshakes = 1024;
  uint32_t max_handshakes_per_source = 32;
  // Both transports: the refusals (screened out) one source address may
  // cause within a second, less its requests the screen let on, before its
  // further requests are refused unscreened until that second ends
  // (Listener); 0: no limit. A client's connect (a hello refused with a
  // challenge, then its proof let on) leaves the count as it was.
  uint32_t max_refusals_per_source = 1000;
  // verbs only: rdma_listen's backlog, the connection requests rdma_cm
  // holds for the listener before it refuses more (1..kMaxListenBacklog).
  uint32_t listen_backlog = 128;
  // An accepted connection is closed when its peer sends no frame at all
  // for idle_timeout, when a frame it started is not whole within
  // frame_timeout, or when it reads none of the responses waiting for it
  // for frame_timeout. Zero: no limit.
  std::chrono::milliseconds idle_timeout{0};
  std::chrono::milliseconds frame_timeout{0};
  // tcp only: TLS on the data plane; empty: plain tcp. CreateTransport
  // reads the files (INVALID_ARGUMENT naming a bad one) and looks at them
  // again for a rotation every few seconds. The verbs transport refuses
  // them: RDMA has no encryption (docs/design.md §10).
  TcpTlsFiles tls;
};

class Transport {
 public:
  virtual ~Transport() = default;
  virtual Kind kind() const = 0;
  // Whether the target's own threads serve a peer's READs and WRITEs (the
  // tcp emulation) rather than its NIC (verbs). A client then asks a server
  // for what would take it more than one READ (docs/design.md §4.1): the
  // server's CPU works for every READ anyway.
  virtual bool one_sided_uses_target_cpu() const = 0;

  // Registers memory that every connection of this transport may use
  // locally, and remotely with the rights in `access`.
  virtual StatusOr<std::unique_ptr<MemoryRegion>> Register(void* addr, size_t length,
                                                           uint32_t access) = 0;
  // A new, empty poll group for the connections of this transport's
  // listeners.
  virtual StatusOr<std::unique_ptr<PollGroup>> NewPollGroup() = 0;
  // Listens on "HOST:PORT" (port 0: any free port).
  virtual StatusOr<std::unique_ptr<Listener>> Listen(const std::string& address) = 0;
  // Connects to "HOST:PORT", sending `private_data`
  // (<= kMaxConnectPrivateData bytes); returns
  // once the server accepted. UNAVAILABLE when nothing listens,
  // DEADLINE_EXCEEDED on timeout, PERMISSION_DENIED when the server
  // rejected the request (with the server's reason; UNAVAILABLE or
  // RESOURCE_EXHAUSTED when it said so: RejectedStatus). When the server
  // refused with a Rejection (Connection::Reject) and `rejected` is not
  // null, `*rejected` gets it as decoded (code, text, detail): what a
  // caller that answers a refusal (a challenge) reads, never the status
  // text. `*rejected` is left as it was on every other outcome.
  virtual StatusOr<std::unique_ptr<Connection>> Connect(const std::string& address,
                                                        std::span<const uint8_t> private_data,
                                                        std::chrono::milliseconds timeout, Rejection* rejected) = 0;
  // The same, for a caller that needs no more than the status.
  StatusOr<std::unique_ptr<Connection>> Connect(const std::string& address, std::span<const uint8_t> private_data,
                                                std::chrono::milliseconds timeout) {
    return Connect(address, private_data, timeout, nullptr);
  }
};

}  // namespace rkv::transport
