#include "common/transport/fault/fault_connection.h"

#include "common/transport/fault/fault_poll_group.h"

#include <algorithm>
#include <iterator>
#include <thread>
#include <utility>

namespace rkv::transport::fault {
namespace {

using std::chrono::microseconds;

// The bytes of `buf` that `rule` flips: [at, at + bytes) clamped to
// `length` (the buffer's, or the message's) bytes.
std::span<uint8_t> FlipRange(uint8_t* data, size_t length, const FaultRule& rule) {
  const size_t at = std::min(rule.corrupt_at, length);
  return {data + at, std::min(rule.corrupt_bytes, length - at)};
}

void FlipBytes(std::span<uint8_t> bytes) {
  for (uint8_t& b : bytes) b ^= 0xff;
}

bool Valid(const LocalBuf& buf) {
  return buf.mr != nullptr && buf.offset <= buf.mr->size() && buf.length <= buf.mr->size() - buf.offset;
}

std::string Numbered(const char* op, uint64_t index) { return std::string(op) + " #" + std::to_string(index); }

}  // namespace

FaultConnection::FaultConnection(std::unique_ptr<Connection> inner, std::shared_ptr<Transport> inner_transport,
                                 std::shared_ptr<FaultInjector> faults, std::optional<std::vector<uint8_t>> peer_data,
                                 std::optional<FaultRule> accept_fault, FaultPollGroup* group)
    : inner_transport_(std::move(inner_transport)),
      faults_(std::move(faults)),
      inner_(std::move(inner)),
      peer_data_(std::move(peer_data)),
      accept_fault_(std::move(accept_fault)),
      group_(group) {}

FaultConnection::~FaultConnection() {
  // Out of the group before the inner connection goes.
  if (joined_) group_->Leave(inner_.get(), this);
}

std::span<const uint8_t> FaultConnection::peer_private_data() const {
  if (peer_data_) return *peer_data_;
  return inner_->peer_private_data();
}

std::string FaultConnection::peer_address() const { return inner_->peer_address(); }

StatusOr<MemoryRegion*> FaultConnection::RegisterPrivate(void* addr, size_t length, uint32_t access) {
  return inner_->RegisterPrivate(addr, length, access);
}

Status FaultConnection::Accept(std::span<const uint8_t> reply) {
  // An oversized reply is the caller's error whatever the fault: the inner
  // connection says so and stays pending.
  if (!accept_fault_ || reply.size() > kMaxAcceptPrivateData) return AcceptInner(reply);
  const FaultRule rule = *accept_fault_;
  accept_fault_.reset();
  switch (rule.action) {
    case FaultAction::kDelay:
      std::this_thread::sleep_for(rule.delay);
      break;
    case FaultAction::kDrop:
      // The inner connection stays pending (its peer waits for a reply
      // that never comes) until this one is destroyed.
      silent_ = true;
      return Status::Ok();
    case FaultAction::kFail:
      inner_->Reject({StatusCode::kUnavailable, "injected failure of the handshake"});
      failed_ = true;
      error_ = Unavailable("accept " + inner_->peer_address() + ": injected failure of the handshake");
      inner_error_ = error_;  // a rejected connection has nothing to poll
      return error_;
    case FaultAction::kCorrupt:
      break;  // carried out when the request was handed out
  }
  return AcceptInner(reply);
}

Status FaultConnection::AcceptInner(std::span<const uint8_t> reply) {
  // Joins before the inner Accept: the inner group may report the inner
  // connection as soon as it is accepted.
  if (group_ != nullptr) {
    group_->Join(inner_.get(), this);
    joined_ = true;
  }
  Status s = inner_->Accept(reply);
  if (!s.ok() && joined_) {
    group_->Leave(inner_.get(), this);
    joined_ = false;
  }
  return s;
}

void FaultConnection::Reject(const Rejection& why) { inner_->Reject(why); }

void FaultConnection::Fail(const std::string& what) {
  if (failed_) return;
  failed_ = true;
  error_ = Unavailable("connection to " + inner_->peer_address() + " failed: injected failure of " + what);
  // Flushes every outstanding work request and tells the peer.
  inner_->Disconnect();
}

void FaultConnection::InjectFailure(OpType op, uint64_t wr_id, const std::string& what) {
  ready_.push_back(Completion{wr_id, op, Unavailable("injected failure of " + what), 0});
  if (joined_) group_->NoteBacklog(this);
  Fail(what);
}

void FaultConnection::Flush(OpType op, uint64_t wr_id) {
  ready_.push_back(Completion{wr_id, op, Unavailable("flushed: an earlier work request failed"), 0});
  if (joined_) group_->NoteBacklog(this);
}

StatusOr<LocalBuf> FaultConnection::CorruptedCopy(LocalBuf src, const FaultRule& rule,
                                                  std::vector<std::unique_ptr<Scratch>>* keep) {
  if (!Valid(src) || src.length == 0) return src;
  auto scratch = std::make_unique<Scratch>();
  const uint8_t* data = src.mr->data() + src.offset;
  scratch->bytes.assign(data, data + src.length);
  FlipBytes(FlipRange(scratch->bytes.data(), scratch->bytes.size(), rule));
  RKV_ASSIGN_OR_RETURN(scratch->mr, inner_transport_->Register(scratch->bytes.data(), scratch->bytes.size(), 0));
  const LocalBuf copy{scratch->mr.get(), 0, src.length};
  keep->push_back(std::move(scratch));
  return copy;
}

void FaultConnection::TrackReads(std::span<const ReadOp> ops, std::vector<ReadEffects> effects) {
  for (size_t i = 0; i < ops.size(); ++i) {
    if (i < effects.size()) {
      ReadEffects& e = effects[i];
      read_carry_.flips.insert(read_carry_.flips.end(), e.flips.begin(), e.flips.end());
      read_carry_.delay = std::max(read_carry_.delay, e.delay);
    }
    if (ops[i].signaled) {
      pending_reads_.push_back(std::move(read_carry_));
      read_carry_ = ReadEffects{};
    }
  }
}

Status FaultConnection::PostReads(std::span<const ReadOp> ops) {
  RKV_RETURN_IF_ERROR(CheckUsable());
  if (silent_ || ops.empty()) return Status::Ok();
  if (faults_->PassThrough(FaultOp::kRead, ops.size())) {
    RKV_RETURN_IF_ERROR(inner_->PostReads(ops));
    TrackReads(ops, {});
    return Status::Ok();
  }
  post_.clear();
  std::vector<ReadEffects> effects;
  for (size_t i = 0; i < ops.size(); ++i) {
    FaultPoint point;
    const std::optional<FaultRule> rule = faults_->Next(FaultOp::kRead, point);
    if (rule && rule->action == FaultAction::kDrop) continue;
    if (rule && rule->action == FaultAction::kFail) {
      // The READs before it go; it fails; the ones after it are flushed.
      if (!post_.empty()) {
        RKV_RETURN_IF_ERROR(inner_->PostReads(post_));
        TrackReads(post_, std::move(effects));
      }
      InjectFailure(OpType::kRead, ops[i].wr_id, Numbered("READ", point.index));
      for (size_t j = i + 1; j < ops.size(); ++j) Flush(OpType::kRead, ops[j].wr_id);
      return Status::Ok();
    }
    ReadEffects& e = effects.emplace_back();
    if (rule && rule->action == FaultAction::kCorrupt && Valid(ops[i].local)) {
      const std::span<uint8_t> range =
          FlipRange(ops[i].local.mr->data() + ops[i].local.offset, ops[i].local.length, *rule);
      if (!range.empty()) e.flips.push_back(Flip{range.data(), range.size()});
    }
    if (rule && rule->action == FaultAction::kDelay) e.delay = rule->delay;
    post_.push_back(ops[i]);
  }
  if (post_.empty()) return Status::Ok();
  RKV_RETURN_IF_ERROR(inner_->PostReads(post_));
  TrackReads(post_, std::move(effects));
  return Status::Ok();
}

Status FaultConnection::PostReadsAndWait(std::span<const ReadOp> ops, microseconds timeout,
                                         std::vector<Completion>* others) {
  RKV_RETURN_IF_ERROR(CheckReadsToWaitFor(ops));
  // Nothing to carry out: the inner connection's own way (verbs takes a
  // shorter one), and what it hands back passes through Take as Poll's
  // completions would.
  if (!failed_ && !silent_ && inner_error_.ok() && ready_.empty() && held_.empty() && read_carry_.empty() &&
      faults_->PassThrough(FaultOp::kRead, ops.size())) {
    const size_t before = others->size();
    Status status = inner_->PostReadsAndWait(ops, timeout, others);
    if (others->size() > before) {
      std::vector<Completion> got(std::make_move_iterator(others->begin() + static_cast<ptrdiff_t>(before)),
                                  std::make_move_iterator(others->end()));
      others->resize(before);
      for (Completion& c : got) Take(std::move(c));
      while (!ready_.empty()) {
        others->push_back(std::move(ready_.front()));
        ready_.pop_front();
      }
    }
    return status;
  }
  // Posts through PostReads and waits through Poll, faults and all.
  return Connection::PostReadsAndWait(ops, timeout, others);
}

Status FaultConnection::PostWriteSend(LocalBuf write_src, RemoteBuf write_dst, LocalBuf send, uint64_t wr_id) {
  const WriteSendOp op{write_src, write_dst, send, wr_id, /*signaled=*/true};
  return PostWriteSends(std::span<const WriteSendOp>(&op, 1));
}

Status FaultConnection::PostWriteSends(std::span<const WriteSendOp> ops) {
  RKV_RETURN_IF_ERROR(CheckUsable());
  if (silent_ || ops.empty()) return Status::Ok();
  if (ops.size() > kMaxWriteSendsPerPost) return inner_->PostWriteSends(ops);  // its error
  const bool writes_pass = faults_->PassThrough(FaultOp::kWrite, ops.size());
  const bool sends_pass = faults_->PassThrough(FaultOp::kSend, ops.size());
  if (writes_pass && sends_pass) {
    // No rule can touch the list: one post, as the caller asked.
    RKV_RETURN_IF_ERROR(inner_->PostWriteSends(ops));
    for (const WriteSendOp& op : ops) {
      if (op.signaled) pending_sends_.push_back(PendingSend{});
    }
    return Status::Ok();
  }
  // Each pair meets its own rules and is posted on its own, in order.
  for (size_t i = 0; i < ops.size(); ++i) {
    if (failed_) {
      // An injected failure earlier in the list: the rest are flushed.
      Flush(OpType::kSend, ops[i].wr_id);
      continue;
    }
    RKV_RETURN_IF_ERROR(PostPair(ops[i], writes_pass, sends_pass));
  }
  return Status::Ok();
}

Status FaultConnection::PostPair(WriteSendOp op, bool write_passed, bool send_passed) {
  FaultPoint write_point;
  FaultPoint send_point;
  std::optional<FaultRule> write_rule;
  std::optional<FaultRule> send_rule;
  if (!write_passed) write_rule = faults_->Next(FaultOp::kWrite, write_point);
  if (!send_passed) send_rule = faults_->Next(FaultOp::kSend, send_point);
  const auto is = [](const std::optional<FaultRule>& rule, FaultAction action) {
    return rule && rule->action == action;
  };
  if (is(write_rule, FaultAction::kFail)) {
    InjectFailure(OpType::kWrite, op.wr_id, Numbered("WRITE", write_point.index));
    Flush(OpType::kSend, op.wr_id);
    return Status::Ok();
  }
  if (is(send_rule, FaultAction::kFail)) {
    InjectFailure(OpType::kSend, op.wr_id, Numbered("SEND", send_point.index));
    return Status::Ok();
  }
  if (is(send_rule, FaultAction::kDrop)) return Status::Ok();
  PendingSend pending;
  if (is(send_rule, FaultAction::kDelay)) pending.delay = send_rule->delay;
  if (is(write_rule, FaultAction::kCorrupt)) {
    RKV_ASSIGN_OR_RETURN(op.write_src, CorruptedCopy(op.write_src, *write_rule, &pending.scratch));
  }
  if (is(send_rule, FaultAction::kCorrupt)) {
    RKV_ASSIGN_OR_RETURN(op.send, CorruptedCopy(op.send, *send_rule, &pending.scratch));
  }
  // A SEND posted alone (its WRITE dropped) is signaled; the completion
  // of one the caller did not ask to be signaled is swallowed.
  const bool write_dropped = is(write_rule, FaultAction::kDrop);
  if (write_dropped && !op.signaled) pending.swallow = true;
  const Status posted = write_dropped ? inner_->PostSend(op.send, op.wr_id)
                                      : inner_->PostWriteSends(std::span<const WriteSendOp>(&op, 1));
  if (!posted.ok() || (!op.signaled && !pending.swallow)) {
    // No completion will free them: kept until the end (a failed post may
    // also have left work behind).
    for (auto& s : pending.scratch) retired_scratch_.push_back(std::move(s));
    return posted;
  }
  pending_sends_.push_back(std::move(pending));
  return Status::Ok();
}

Status FaultConnection::PostProbe(uint64_t wr_id) {
  RKV_RETURN_IF_ERROR(CheckUsable());
  if (silent_) return Status::Ok();
  RKV_RETURN_IF_ERROR(inner_->PostProbe(wr_id));
  pending_reads_.push_back(std::move(read_carry_));
  read_carry_ = ReadEffects{};
  return Status::Ok();
}

Status FaultConnection::PostSend(LocalBuf send, uint64_t wr_id) {
  RKV_RETURN_IF_ERROR(CheckUsable());
  if (silent_) return Status::Ok();
  FaultPoint point;
  std::optional<FaultRule> rule;
  if (!faults_->PassThrough(FaultOp::kSend, 1)) rule = faults_->Next(FaultOp::kSend, point);
  PendingSend pending;
  if (rule) {
    switch (rule->action) {
      case FaultAction::kFail:
        InjectFailure(OpType::kSend, wr_id, Numbered("SEND", point.index));
        return Status::Ok();
      case FaultAction::kDrop:
        return Status::Ok();
      case FaultAction::kDelay:
        pending.delay = rule->delay;
        break;
      case FaultAction::kCorrupt:
        RKV_ASSIGN_OR_RETURN(send, CorruptedCopy(send, *rule, &pending.scratch));
        break;
    }
  }
  const Status posted = inner_->PostSend(send, wr_id);
  if (!posted.ok()) {
    for (auto& s : pending.scratch) retired_scratch_.push_back(std::move(s));
    return posted;
  }
  pending_sends_.push_back(std::move(pending));
  return Status::Ok();
}

Status FaultConnection::PostRecv(LocalBuf buf, uint64_t wr_id) {
  RKV_RETURN_IF_ERROR(CheckUsable());
  if (silent_) return Status::Ok();
  RKV_RETURN_IF_ERROR(inner_->PostRecv(buf, wr_id));
  posted_recvs_.push_back(buf);
  return Status::Ok();
}

void FaultConnection::ForgetPending() {
  pending_reads_.clear();
  read_carry_ = ReadEffects{};
  for (PendingSend& p : pending_sends_) {
    for (auto& s : p.scratch) retired_scratch_.push_back(std::move(s));
  }
  pending_sends_.clear();
}

void FaultConnection::Take(Completion c) {
  switch (c.op) {
    case OpType::kRead:
      if (!c.status.ok()) {
        ForgetPending();
        break;
      }
      if (!pending_reads_.empty()) {
        const ReadEffects effects = std::move(pending_reads_.front());
        pending_reads_.pop_front();
        for (const Flip& f : effects.flips) FlipBytes({f.at, f.bytes});
        if (effects.delay.count() > 0) {
          held_.push_back(Held{Clock::now() + effects.delay, std::move(c)});
          return;
        }
      }
      break;
    case OpType::kSend:
      if (!c.status.ok()) {
        ForgetPending();
        break;
      }
      if (!pending_sends_.empty()) {
        // Its copies are freed here: the SEND (and its WRITE) are done.
        const PendingSend done = std::move(pending_sends_.front());
        pending_sends_.pop_front();
        if (done.swallow) return;
        if (done.delay.count() > 0) {
          held_.push_back(Held{Clock::now() + done.delay, std::move(c)});
          return;
        }
      }
      break;
    case OpType::kWrite:
      if (!c.status.ok()) ForgetPending();
      break;
    case OpType::kRecv: {
      if (posted_recvs_.empty()) break;
      const LocalBuf buf = posted_recvs_.front();
      posted_recvs_.pop_front();
      if (!c.status.ok()) break;
      FaultPoint point;
      if (Valid(buf)) point.buffer = {buf.mr->data() + buf.offset, buf.length};
      point.byte_len = c.byte_len;
      const std::optional<FaultRule> rule = faults_->Next(FaultOp::kRecv, point);
      c.byte_len = static_cast<uint32_t>(std::min<size_t>(point.byte_len, point.buffer.size()));
      if (!rule) break;
      switch (rule->action) {
        case FaultAction::kDrop:
          return;
        case FaultAction::kDelay:
          held_.push_back(Held{Clock::now() + rule->delay, std::move(c)});
          return;
        case FaultAction::kCorrupt:
          FlipBytes(FlipRange(point.buffer.data(), c.byte_len, *rule));
          break;
        case FaultAction::kFail:
          c.status = Unavailable("injected failure of " + Numbered("RECV", point.index));
          c.byte_len = 0;
          Fail(Numbered("RECV", point.index));
          break;
      }
      break;
    }
  }
  ready_.push_back(std::move(c));
}

void FaultConnection::ReleaseDue(Clock::time_point now) {
  if (held_.empty()) return;
  // Oldest due first; equal dues keep their order.
  std::stable_sort(held_.begin(), held_.end(), [](const Held& a, const Held& b) { return a.due < b.due; });
  size_t n = 0;
  while (n < held_.size() && held_[n].due <= now) {
    ready_.push_back(std::move(held_[n].completion));
    ++n;
  }
  held_.erase(held_.begin(), held_.begin() + static_cast<ptrdiff_t>(n));
}

size_t FaultConnection::TakeReady(std::span<Completion> out) {
  size_t n = 0;
  while (n < out.size() && !ready_.empty()) {
    out[n++] = std::move(ready_.front());
    ready_.pop_front();
  }
  return n;
}

FaultConnection::Clock::time_point FaultConnection::NextDue() const {
  if (!ready_.empty()) return Clock::time_point::min();
  Clock::time_point due = Clock::time_point::max();
  for (const Held& h : held_) due = std::min(due, h.due);
  return due;
}

StatusOr<size_t> FaultConnection::Poll(std::span<Completion> out, microseconds timeout) {
  if (!joined_) return PollFor(out, timeout);
  // A group member's Poll never waits; what it leaves behind (ready, or
  // held until due) the group must report later.
  StatusOr<size_t> n = PollFor(out, microseconds(0));
  if (!ready_.empty() || !held_.empty()) group_->NoteBacklog(this);
  return n;
}

StatusOr<size_t> FaultConnection::PollFor(std::span<Completion> out, microseconds timeout) {
  if (out.empty()) return size_t{0};
  const Clock::time_point deadline = Clock::now() + timeout;
  while (true) {
    ReleaseDue(Clock::now());
    if (!ready_.empty()) return TakeReady(out);
    if (silent_) {
      // Nothing will ever complete.
      std::this_thread::sleep_until(deadline);
      return size_t{0};
    }
    // Waits for the inner connection, up to the deadline or until the
    // first held completion is due.
    Clock::time_point until = deadline;
    for (const Held& h : held_) until = std::min(until, h.due);
    const Clock::time_point now = Clock::now();
    if (inner_error_.ok()) {
      const microseconds wait =
          until > now ? std::chrono::ceil<microseconds>(until - now) : microseconds(0);
      poll_buf_.resize(out.size());
      StatusOr<size_t> n = inner_->Poll(poll_buf_, wait);
      if (!n.ok()) {
        inner_error_ = failed_ ? error_ : n.status();
      } else {
        for (size_t i = 0; i < *n; ++i) Take(std::move(poll_buf_[i]));
      }
    } else if (held_.empty()) {
      return inner_error_;
    } else {
      std::this_thread::sleep_until(until);
    }
    ReleaseDue(Clock::now());
    if (!ready_.empty()) return TakeReady(out);
    if (Clock::now() >= deadline) {
      if (!inner_error_.ok() && held_.empty()) return inner_error_;
      return size_t{0};
    }
  }
}

void FaultConnection::Disconnect() {
  inner_->Disconnect();
  if (silent_) {
    // The handshake never completed: there is nothing to flush or poll.
    silent_ = false;
    failed_ = true;
    error_ = Unavailable("connection to " + inner_->peer_address() + " was disconnected");
    inner_error_ = error_;
  }
}

}  // namespace rkv::transport::fault
