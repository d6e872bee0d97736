// FaultConnection: one connection of a FaultTransport (fault_transport.h,
// which says what each fault does). Internal to common/transport/fault/.
//
// It forwards every call to the inner connection and keeps just enough
// bookkeeping to carry faults out when their operation completes:
//   - pending_reads_: one entry per posted signaled READ, in post order,
//     with the effects (corruptions, delay) of the READs it covers (itself
//     and the unsignaled READs posted since the previous signaled one).
//     READs complete in post order, so a successful READ completion
//     belongs to the front entry.
//   - pending_sends_: one entry per posted signaled SEND, in post order, with its
//     delay and the corrupted copies it (or its WRITE) was sent from, freed
//     when it completes.
//   - posted_recvs_: the receive buffers, in post order; messages fill
//     them in that order, so a receive completion belongs to the front one.
// An error completion puts the connection in the error state, where only
// flushes follow: the READ and SEND bookkeeping is dropped then.
//
// Completions leave through ready_ (reported by the next Poll, oldest
// first) or held_ (delayed: moved to ready_ when due).
//
// Thread safety: as Connection (one caller at a time); the injector is
// thread-safe on its own.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "common/transport/fault/fault_injector.h"
#include "common/transport/fault/fault_spec.h"
#include "common/transport/transport.h"

namespace rkv::transport::fault {

class FaultPollGroup;

class FaultConnection final : public Connection {
 public:
  using Clock = std::chrono::steady_clock;

  // `peer_data`: what peer_private_data() returns instead of the inner
  // connection's (a corrupted copy), when set. `accept_fault`: server side,
  // the rule that hits this connection's Accept, when one does. `group`:
  // server side, the poll group it joins at Accept (fault_poll_group.h),
  // or null.
  FaultConnection(std::unique_ptr<Connection> inner, std::shared_ptr<Transport> inner_transport,
                  std::shared_ptr<FaultInjector> faults, std::optional<std::vector<uint8_t>> peer_data,
                  std::optional<FaultRule> accept_fault, FaultPollGroup* group = nullptr);
  ~FaultConnection() override;

  Connection& inner() const { return *inner_; }

  std::span<const uint8_t> peer_private_data() const override;
  std::string peer_address() const override;
  StatusOr<MemoryRegion*> RegisterPrivate(void* addr, size_t length, uint32_t access) override;
  Status Accept(std::span<const uint8_t> reply) override;
  void Reject(const Rejection& why) override;
  Status PostReads(std::span<const ReadOp> ops) override;
  Status PostReadsAndWait(std::span<const ReadOp> ops, std::chrono::microseconds timeout,
                          std::vector<Completion>* others) override;
  Status PostWriteSend(LocalBuf write_src, RemoteBuf write_dst, LocalBuf send, uint64_t wr_id) override;
  // Each pair meets the WRITE and SEND rules as PostWriteSend's does; a
  // list no rule can touch goes to the inner transport as one post, else
  // its pairs are posted one at a time, in order, and the pairs after an
  // injected failure complete flushed.
  Status PostWriteSends(std::span<const WriteSendOp> ops) override;
  Status PostSend(LocalBuf send, uint64_t wr_id) override;
  // Passes through (no rule applies to a probe); its completion is a
  // signaled READ's, so it takes over the effects of the unsignaled READs
  // before it.
  Status PostProbe(uint64_t wr_id) override;
  Status PostRecv(LocalBuf buf, uint64_t wr_id) override;
  StatusOr<size_t> Poll(std::span<Completion> out, std::chrono::microseconds timeout) override;
  void Disconnect() override;

 private:
  friend class FaultPollGroup;

  // A copy of data to send, corrupted, registered with the inner
  // transport. The registration goes before the bytes it covers.
  struct Scratch {
    std::vector<uint8_t> bytes;
    std::unique_ptr<MemoryRegion> mr;
  };
  // Bytes to flip in a READ's destination.
  struct Flip {
    uint8_t* at = nullptr;
    size_t bytes = 0;
  };
  struct ReadEffects {
    std::vector<Flip> flips;
    std::chrono::microseconds delay{0};
    bool empty() const { return flips.empty() && delay.count() == 0; }
  };
  struct PendingSend {
    std::chrono::microseconds delay{0};
    bool swallow = false;  // an unsignaled SEND posted signaled: not reported
    std::vector<std::unique_ptr<Scratch>> scratch;
  };
  struct Held {
    Clock::time_point due;
    Completion completion;
  };

  // OK, or why no work may be posted (the error state).
  Status CheckUsable() const { return failed_ ? error_ : Status::Ok(); }
  // Enters the error state (once): disconnects the inner connection.
  void Fail(const std::string& what);
  // Reports `op` (wr_id) as failed by injection and enters the error state.
  void InjectFailure(OpType op, uint64_t wr_id, const std::string& what);
  // Reports `op` (wr_id) as flushed.
  void Flush(OpType op, uint64_t wr_id);
  // A registered copy of `src` with `rule`'s bytes flipped, kept in
  // `*keep`; `src` itself when there is nothing to copy (an empty or
  // invalid buffer, which the inner transport then judges).
  StatusOr<LocalBuf> CorruptedCopy(LocalBuf src, const FaultRule& rule,
                                   std::vector<std::unique_ptr<Scratch>>* keep);
  // Records posted READs: their effects, one entry per signaled READ.
  void TrackReads(std::span<const ReadOp> ops, std::vector<ReadEffects> effects);
  // Takes one completion from the inner connection: carries out its
  // faults and queues it in ready_ or held_ (or swallows it).
  void Take(Completion c);
  // Drops the READ and SEND bookkeeping (the connection failed).
  void ForgetPending();
  // One pair of PostWriteSends under its rules (none for a kind whose
  // rules `*_passed` the whole list).
  Status PostPair(WriteSendOp op, bool write_passed, bool send_passed);
  // Moves the held completions that are due by `now` to ready_.
  void ReleaseDue(Clock::time_point now);
  size_t TakeReady(std::span<Completion> out);
  // The inner Accept, joining the group around it.
  Status AcceptInner(std::span<const uint8_t> reply);
  // Poll's work: waits up to `timeout` for the inner connection and the
  // held completions (a group member's Poll passes 0).
  StatusOr<size_t> PollFor(std::span<Completion> out, std::chrono::microseconds timeout);
  // When the first completion this connection holds is due: now or
  // earlier for a ready one, max() for none.
  Clock::time_point NextDue() const;

  // Declaration order is teardown order, reversed: the inner connection
  // (a queue pair) goes before the registrations of the copies it may
  // still be sending from, and those before the inner transport.
  std::shared_ptr<Transport> inner_transport_;
  std::shared_ptr<FaultInjector> faults_;
  std::vector<std::unique_ptr<Scratch>> retired_scratch_;
  std::deque<PendingSend> pending_sends_;
  std::unique_ptr<Connection> inner_;

  std::optional<std::vector<uint8_t>> peer_data_;
  std::optional<FaultRule> accept_fault_;

  std::deque<ReadEffects> pending_reads_;
  ReadEffects read_carry_;  // effects of unsignaled READs not yet covered
  std::deque<LocalBuf> posted_recvs_;
  std::deque<Completion> ready_;
  std::vector<Held> held_;
  std::vector<Completion> poll_buf_;
  std::vector<ReadOp> post_;

  // An ACCEPT drop: the handshake never completes, nothing ever does.
  bool silent_ = false;
  bool failed_ = false;
  Status error_;
  // Set once the inner connection's Poll failed: it is not polled again.
  Status inner_error_;

  // Group membership (the group's thread, but for `group_` and `joined_`).
  FaultPollGroup* const group_;
  bool joined_ = false;       // Accept joined the group
  bool in_backlog_ = false;   // listed in the group's backlog
  uint64_t reported_round_ = 0;
};

}  // namespace rkv::transport::fault
