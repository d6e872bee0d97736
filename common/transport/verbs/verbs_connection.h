// One RC connection of the verbs transport (both sides) and its registered
// memory. Internal to common/transport/verbs/; users see the Connection and
// MemoryRegion interfaces of common/transport/transport.h.
//
// The class is implemented in two files: verbs_connection_setup.cc
// (creation, handshake, private memory, Disconnect, teardown and rdma_cm
// events) and verbs_connection_datapath.cc (posts, send queue accounting,
// completions and Poll). The send queue steps that both use are inline at
// the end of this header.
//
// Connection setup. The QP is created with ibv_create_qp and is never
// attached to the cm_id ("user-managed" QP): the transport moves it through
// INIT, RTR and RTS itself, with the attributes rdma_init_qp_attr computes
// from the rdma_cm route and handshake. That lets it
//   - clamp path_mtu to the port's active_mtu and the read depths to the
//     device limits,
//   - apply Options::gid_index (>= 0) as the source GID index of the RTR
//     address vector on both sides (-1 keeps the GID rdma_cm resolved for
//     the address, a RoCE v2 IPv4-mapped GID for an IPv4 address), and
//   - on the server, reach RTS and bind the connection's memory windows
//     before rdma_accept sends the reply, so a client can never write into
//     its ring before the window is valid.
// The active side therefore sees RDMA_CM_EVENT_CONNECT_RESPONSE (not
// ESTABLISHED), moves its QP to RTR/RTS and completes with rdma_establish.
// The passive side's Accept returns once rdma_accept has sent the reply; it
// does not wait for the client's RTU, so a client that vanishes
// mid-handshake never holds the server's accept loop. The CM reports such a
// client later (CONNECT_ERROR or UNREACHABLE, after its REP retries) and the
// connection's next Poll that finds nothing ready reports it broken.
//
// Connection parameters: retry_count 7 (transport retries before
// IBV_WC_RETRY_EXC_ERR, the most the CM carries) and rnr_retry_count 7,
// which means "retry forever" on RNR NAKs: a server keeps receives posted,
// so a SEND that finds none waits for one instead of failing the QP (the
// transport contract). responder_resources / initiator_depth are the
// device's max_qp_rd_atom / max_qp_init_rd_atom (capped at 255, the CM's
// field size) and the server answers with the minimum of both sides'.
//
// Private memory (RegisterPrivate). An MR belongs to the whole PD, which
// every connection of a transport shares, so an MR with REMOTE_WRITE could
// be written by any peer that learns (or guesses: rxe rkeys carry 8 random
// bits) its rkey. When the device supports type 2 memory windows, the
// memory is registered with LOCAL_WRITE | MW_BIND only and a type 2 window,
// bound on this connection's QP, carries the remote rights: its rkey is
// valid on this QP alone. Otherwise the region is a plain MR with the
// remote rights (the weaker fallback); the transport logs which it uses.
//
// Send queue accounting. Every send WR gets a sequence number as its wr_id;
// a completion for sequence s retires every WR up to s (an RC send queue
// completes in order). At most `send_depth` WRs are outstanding, and a post
// whose last WR would leave `signal_interval` (= send_depth / 2) or more
// unsignaled WRs with no signaled WR after them is signaled internally (its
// success completion is swallowed), so a full send queue always holds a
// signaled WR whose completion frees room. The send CQ holds send_depth
// entries and the receive CQ recv_depth (a poll group's CQs hold the sum
// over its members): every outstanding WR can complete (in error,
// unsignaled ones too) without overflowing a CQ.
//
// Closing. A disconnect (the peer's DISCONNECTED event, this side's
// Disconnect, a handshake that never completed, device removal) moves the
// QP to the error state, which flushes every outstanding WR. The flushed
// WRs, and Poll once nothing is left, then report why the connection
// closed (UNAVAILABLE "peer A closed the connection", "connection to A
// closed locally", ...) rather than the device's "Work Request Flushed
// Error". A WR that failed for a reason of its own keeps the device's
// status, and when such a failure came first the flushes keep theirs too
// (the QP was already in error: they are that failure's, not the close's).
//
// Waiting (Poll). Poll first busy-polls both CQs (ibv_poll_cq reads
// memory the device shares with the process: no system call), for up to
// the connection's spin window, yielding the CPU every few rounds; only
// then does it read the connection's rdma_cm events (a system call), arm
// the CQs and sleep on the completion and cm channels. The window adapts
// per connection, between 0 and ConnectionConfig::max_spin: a wait that
// ended within max_spin but after the window doubles it (from at least
// kMinSpinWindow), a wait that outlasted max_spin halves it (below
// kMinSpinWindow: no spinning). A busy connection thus answers from the
// spin, and an idle one (a server worker between clients) sleeps at once.
// Completions wait in a ring that only grows (so the steady state
// allocates nothing per operation); posting makes no system call beyond
// the device's own doorbell.
//
// Poll groups (verbs_poll_group.h). Everything above is a standalone
// connection's: every client connection, and a server connection that
// Listener::Next handed out without a group. A connection that Next created
// for a group has no CQs or completion channel of its own: its QP completes
// into the group's send and receive CQs, and it keeps only its cm event
// channel (which the group watches). From its Accept the group's Wait polls
// those CQs and feeds each work completion to its member's OnSendCompletion
// / OnRecvCompletion, so the member's completion ring fills as a standalone
// connection's does; the member's Poll never waits and never touches the
// CQs except through the group (PollGroupCore::Drain): it returns its ring,
// or its broken status. The paths that wait inside a post (WaitForSendRoom)
// drain and sleep through the group too; PostReadsAndWait skips its look at
// the send CQ (another member's completion may be first there) and waits
// through Poll. Accept's memory window binds run on the accept thread while
// the group's thread polls: their completions are set aside for it by
// whichever thread polls them (PollGroupCore::BeginSetup).
//
// Thread safety: as the Connection interface says (one caller at a time);
// a group member's calls after Accept, and its destruction, happen on its
// group's thread (PollGroup in transport.h).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/transport/transport.h"
#include "common/transport/verbs/verbs_resources.h"

namespace rkv::transport::verbs {

class PollGroupCore;

// The smallest send queue the accounting above accepts: a WRITE+SEND pair
// must fit with room to spare under the signal interval.
inline constexpr uint32_t kWrsPerWriteSend = 2;
inline constexpr uint32_t kMinSendDepth = 16;
inline constexpr uint32_t kMinRecvDepth = 4;
// The largest max_spin (the adaptive window itself: spin_window.h).
inline constexpr std::chrono::microseconds kMaxSpinLimit{1'000'000};
static_assert(kMinSendDepth / 2 >= 2 * kWrsPerWriteSend,
              "the signal interval must hold at least two WRITE+SEND pairs");
// The default send queue holds the longest PostWriteSends list; a smaller
// one (Options::max_send_wr, or a device limit) refuses longer lists.
static_assert(kDefaultMaxSendWr >= kWrsPerWriteSend * kMaxWriteSendsPerPost,
              "the default send queue must hold a whole PostWriteSends list");

// What every connection of one transport shares.
struct ConnectionConfig {
  std::shared_ptr<ProtectionDomain> pd;
  bool use_memory_windows = false;
  int gid_index = -1;
  uint32_t send_depth = 0;  // clamped to device limits, >= kMinSendDepth
  uint32_t recv_depth = 0;  // clamped to device limits, >= kMinRecvDepth
  uint32_t max_inline_wish = 0;
  uint8_t responder_resources = 0;  // min(max_qp_rd_atom, 255)
  uint8_t initiator_depth = 0;      // min(max_qp_init_rd_atom, 255)
  ibv_mtu active_mtu = IBV_MTU_1024;
  // Options::poll_spin_us: the upper bound of each connection's spin window.
  std::chrono::microseconds max_spin{0};
  // The listener's: Options::listen_backlog and max_refusals_per_source.
  uint32_t listen_backlog = 128;
  uint32_t max_refusals_per_source = 0;
};

// A registered region (shared or connection-private).
class VerbsRegion final : public MemoryRegion {
 public:
  // `rkey`: the MR's, or the memory window's for a private region.
  VerbsRegion(std::shared_ptr<MemoryRegistration> mr, uint8_t* data, size_t size, uint32_t rkey)
      : MemoryRegion(data, size, mr->get()->lkey, rkey), mr_(std::move(mr)) {}
  const std::shared_ptr<MemoryRegistration>& registration() const { return mr_; }

 private:
  std::shared_ptr<MemoryRegistration> mr_;
};

// Maps transport::Access bits to IBV_ACCESS_* (kRemoteWrite implies
// LOCAL_WRITE, which verbs requires with REMOTE_WRITE).
int IbvAccess(uint32_t access);

class VerbsConnection final : public Connection {
 public:
  // Server side: takes the cm_id of a CONNECT_REQUEST (its event already
  // acked), moves it to a channel of its own and creates the QP: on the
  // CQs of `group` when not null (the connection joins it at Accept), else
  // on CQs of its own. On failure the request is rejected;
  // RESOURCE_EXHAUSTED when the group's CQs cannot hold one more QP.
  static StatusOr<std::unique_ptr<VerbsConnection>> CreatePassive(
      const ConnectionConfig& config, std::shared_ptr<PollGroupCore> group, CmId id,
      std::vector<uint8_t> peer_private_data, uint8_t peer_responder_resources,
      uint8_t peer_initiator_depth);
  // Client side: the whole active handshake; a server's Rejection goes to
  // `*rejected` when not null (Transport::Connect).
  static StatusOr<std::unique_ptr<VerbsConnection>> Connect(const ConnectionConfig& config,
                                                            const std::string& address,
                                                            std::span<const uint8_t> private_data,
                                                            std::chrono::milliseconds timeout, Rejection* rejected);

  ~VerbsConnection() override;

  std::span<const uint8_t> peer_private_data() const override { return peer_private_data_; }
  std::string peer_address() const override { return peer_address_; }
  StatusOr<MemoryRegion*> RegisterPrivate(void* addr, size_t length, uint32_t access) override;
  Status Accept(std::span<const uint8_t> reply) override;
  void Reject(const Rejection& why) override;
  Status PostReads(std::span<const ReadOp> ops) override;
  // Looks at the send CQ right after the post: a READ that completed by
  // then (on rxe the whole loopback READ runs inside the post) is taken
  // from there, without the pending queue; anything else, or nothing yet,
  // goes the usual way (Poll).
  Status PostReadsAndWait(std::span<const ReadOp> ops, std::chrono::microseconds timeout,
                          std::vector<Completion>* others) override;
  Status PostWriteSend(LocalBuf write_src, RemoteBuf write_dst, LocalBuf send,
                       uint64_t wr_id) override;
  // One ibv_post_send of the 2 x ops.size() WRs (which must fit the send
  // queue: INVALID_ARGUMENT beyond its depth).
  Status PostWriteSends(std::span<const WriteSendOp> ops) override;
  Status PostSend(LocalBuf send, uint64_t wr_id) override;
  // A signaled zero-length RDMA READ (transport.h); a peer whose QP is gone
  // answers nothing, and the retries (retry_count 7) end it in error.
  Status PostProbe(uint64_t wr_id) override;
  Status PostRecv(LocalBuf buf, uint64_t wr_id) override;
  StatusOr<size_t> Poll(std::span<Completion> out, std::chrono::microseconds timeout) override;
  void Disconnect() override;

  // For tests and logs.
  bool uses_memory_windows() const { return config_.use_memory_windows; }
  bool in_poll_group() const { return group_ != nullptr; }
  uint32_t max_inline_data() const { return max_inline_; }

 private:
  // kPending: a server connection before Accept/Reject. kClosed: nothing
  // to answer (setup failed, handshake lost, or a client not yet connected).
  enum class State { kPending, kConnected, kRejected, kClosed };

  struct SendEntry {
    uint64_t user_wr_id = 0;
    OpType op = OpType::kRead;
    bool report_success = false;  // the caller asked for a completion
    bool internal = false;        // a memory window bind: never reported
  };
  struct PendingBind {
    size_t window;  // index into windows_
    std::shared_ptr<MemoryRegistration> mr;
    uint8_t* addr;
    size_t length;
    int access;
    uint32_t rkey;
  };

  // The group feeds a member's completions to OnSendCompletion /
  // OnRecvCompletion and reads its readiness (verbs_poll_group.h).
  friend class PollGroupCore;
  // Tests: a queue pair that vanishes (verbs_connection_test_peer.h).
  friend class VerbsConnectionTestPeer;

  VerbsConnection(const ConnectionConfig& config, CmId id);

  Status CreateQueues();
  Status ModifyQp(ibv_qp_state state, const char* what);
  Status BindWindows(Clock::time_point deadline);

  // The data path's checks and bookkeeping: the common case is a few
  // inline comparisons (every call and return a GET runs costs it time,
  // and under emulation slows the kernel's READ path that follows: see
  // bench/results/README.md); what fails goes to the cold functions below.
  Status CheckSendable() const;
  Status CheckLocal(const LocalBuf& buf, const char* what) const;
  // Waits (bounded) until `n` more send WRs fit.
  Status ReserveSend(uint32_t n);
  // Gives send_wrs_[index] (filled in by the caller) its sequence number,
  // records `entry` and decides whether it is signaled.
  void AddSend(uint32_t index, const SendEntry& entry, bool want_signal, bool last);
  // Fills send_wrs_[index] with a SEND of `send` (inline when it fits),
  // signaled when asked; `last`: it ends the chain.
  void AddSendOf(uint32_t index, LocalBuf send, uint64_t wr_id, bool signaled, bool last);
  // Fills send_wrs_[index] with an unsignaled WRITE of `src` to `dst`.
  void AddWriteOf(uint32_t index, LocalBuf src, RemoteBuf dst, uint64_t wr_id);
  // Posts send_wrs_[0, count) linked, with one doorbell.
  Status PostSendChain(uint32_t count, const char* what);
  // PostReads, inlined into PostReadsAndWait.
  Status PostReadList(std::span<const ReadOp> ops);
  [[gnu::cold, gnu::noinline]] Status NotSendable() const;
  [[gnu::cold, gnu::noinline]] static Status BadLocal(const LocalBuf& buf, const char* what);
  // A scattered READ's further pieces (ReadOp::more) and its total length.
  [[gnu::cold, gnu::noinline]] Status CheckScatter(const ReadOp& op) const;
  [[gnu::cold, gnu::noinline]] Status WaitForSendRoom(uint32_t n);
  [[gnu::cold, gnu::noinline]] Status PostFailed(uint32_t count, const ibv_send_wr* bad, int ret, const char* what);

  // Polls both CQs once, turning completions into pending_ entries and
  // retiring send WRs. Returns how many work completions were read. Not
  // for a member of a poll group (its CQs are the group's).
  StatusOr<int> DrainCqs();
  // DrainCqs, or for a member the group's Drain (which feeds every member).
  StatusOr<int> DrainCompletions();
  // BindWindows' look for completions: for a member in setup (on the
  // accept thread), only its own, taken through the group.
  StatusOr<int> DrainSetupCompletions();
  // A member's Poll: what its ring holds (after a drain of the group's
  // CQs), or its broken status. Never waits. (Its cm events are read by the
  // group's Wait; here only when reading them there failed.)
  StatusOr<size_t> PollMember(std::span<Completion> out);
  // For the group: Poll would return completions or an error.
  bool GroupReady() const;
  void OnSendCompletion(const ibv_wc& wc);
  void OnRecvCompletion(const ibv_wc& wc);
  // Reads every queued cm event of this connection (non-blocking).
  Status HandleCmEvents();
  // Arms both CQs, re-polls, and blocks on the completion and cm channels
  // until something is ready or `deadline` (a member: the group's CQs and
  // channel, and its own cm channel).
  Status WaitEvents(Clock::time_point deadline);
  // Busy-polls the CQs until a completion is pending or `until`.
  Status Spin(Clock::time_point until);
  // Adapts spin_window_ to a wait of `waited` (see the header comment).
  void AdaptSpin(Clock::duration waited);
  // The completion ring (pending_): append, and move up to out.size()
  // entries out from the front.
  void PushPending(Completion c);
  size_t TakePending(std::span<Completion> out);
  // Moves the QP to the error state, which flushes every outstanding WR.
  void MoveQpToError();
  // MoveQpToError for a connection that is closing: `why` (UNAVAILABLE)
  // becomes close_status_ unless a WR failed before or a cause is already
  // recorded (see "Closing" above).
  void CloseQp(Status why);
  bool Broken() const;
  Status BrokenStatus() const;
  uint32_t SendOutstanding() const { return static_cast<uint32_t>(next_seq_ - retired_seq_); }

  ConnectionConfig config_;
  // Server side only: the poll group whose CQs the QP completes into.
  std::shared_ptr<PollGroupCore> group_;
  bool group_reserved_ = false;      // counted in the group's CQ capacity
  bool group_joined_ = false;        // in the group's member map
  // Set and read on the group's thread (with the group's lock held when
  // the group touches them).
  bool group_listed_ = false;        // in the group's ready list
  bool group_cm_readable_ = false;   // the group failed to read the cm channel
  std::shared_ptr<EventChannel> channel_;  // this connection's own cm channel
  CmId id_;
  std::shared_ptr<CompletionChannel> comp_channel_;
  std::shared_ptr<CompletionQueue> send_cq_;
  std::shared_ptr<CompletionQueue> recv_cq_;
  QueuePair qp_;
  std::vector<std::unique_ptr<VerbsRegion>> private_regions_;
  std::vector<MemoryWindow> windows_;
  std::vector<PendingBind> pending_binds_;

  State state_ = State::kPending;
  std::vector<uint8_t> peer_private_data_;
  std::string peer_address_;
  uint8_t responder_resources_ = 0;  // what this side grants as responder
  uint8_t initiator_depth_ = 0;      // RDMA READs this side may have in flight
  uint32_t max_inline_ = 0;
  uint32_t send_depth_ = 0;
  uint32_t recv_depth_ = 0;
  uint32_t signal_interval_ = 0;

  std::vector<SendEntry> send_ring_;  // a power of two >= send_depth_, indexed by sequence & (size - 1)
  std::vector<ibv_send_wr> send_wrs_;
  std::vector<ibv_sge> send_sges_;  // kMaxReadPieces per work request
  uint64_t next_seq_ = 0;         // sequence number of the next send WR
  uint64_t retired_seq_ = 0;      // every send WR below this is retired
  uint32_t unsignaled_run_ = 0;   // unsignaled WRs since the last signaled
  uint32_t recv_outstanding_ = 0;
  // Completions not yet returned by Poll: a ring of pending_.size() slots
  // holding pending_count_ entries from pending_head_. It doubles when
  // full (posting without polling can queue more than the queue depths).
  std::vector<Completion> pending_;
  size_t pending_head_ = 0;
  size_t pending_count_ = 0;
  Clock::duration spin_window_{0};  // current adaptive window, <= max_spin

  bool failed_ = false;              // a WR completed in error
  bool remote_disconnected_ = false; // DISCONNECTED (or device removal) seen
  bool local_disconnected_ = false;  // Disconnect() called
  bool disconnect_sent_ = false;     // rdma_disconnect called
  bool qp_in_error_ = false;
  // Why the connection closed (see "Closing" above): what flushed WRs and
  // BrokenStatus report. OK while open, and after a WR failed first.
  Status close_status_;
  Status bind_status_;
};

// The send ring's per-post steps. Every post of the data path runs them,
// and so does BindWindows (setup): they are defined here so that both
// verbs_connection_datapath.cc and verbs_connection_setup.cc inline them;
// only the cold paths (WaitForSendRoom, PostFailed) are calls.

inline Status VerbsConnection::ReserveSend(uint32_t n) {
  // The common case (room) reads no clock.
  if (n <= send_depth_ && send_depth_ - SendOutstanding() >= n) [[likely]] return Status::Ok();
  return WaitForSendRoom(n);
}

inline void VerbsConnection::AddSend(uint32_t index, const SendEntry& entry, bool want_signal,
                                     bool last) {
  ibv_send_wr& wr = send_wrs_[index];
  // The last WR of a post is signaled when the unsignaled run would
  // otherwise reach the signal interval (see "Send queue accounting" above).
  const bool signaled = want_signal || (last && unsignaled_run_ + 1 >= signal_interval_);
  const uint64_t seq = next_seq_++;
  send_ring_[seq & (send_ring_.size() - 1)] = entry;
  wr.wr_id = seq;
  if (signaled) {
    wr.send_flags |= IBV_SEND_SIGNALED;
    unsignaled_run_ = 0;
  } else {
    ++unsignaled_run_;
  }
}

inline Status VerbsConnection::PostSendChain(uint32_t count, const char* what) {
  for (uint32_t i = 0; i + 1 < count; ++i) send_wrs_[i].next = &send_wrs_[i + 1];
  send_wrs_[count - 1].next = nullptr;
  ibv_send_wr* bad = nullptr;
  if (const int ret = ibv_post_send(qp_.get(), send_wrs_.data(), &bad); ret != 0) [[unlikely]] {
    return PostFailed(count, bad, ret, what);
  }
  return Status::Ok();
}

}  // namespace rkv::transport::verbs
