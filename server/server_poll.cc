// Server's polling threads (server/server.h, "Polling threads"): each
// waits on its group, serves the connections it reports (Serve), applies
// the round's client writes together and answers its lookups after them,
// then commits the round and replies (SendReplies); and the sweeps of
// silent and revoked connections.
#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <string>
#include <vector>

#include <glog/logging.h>

#include "common/protocol.h"
#include "common/transport/transport.h"
#include "server/server.h"
#include "server/server_served.h"

namespace rkv::server {
namespace {

using serving::kPollTimeout;
using serving::kProbeTag;
using serving::kReadyPerWait;
using serving::kSendTag;
using serving::ReceiveBuf;
using serving::ReceiveOffset;
using serving::ReplyOffset;
using transport::Completion;
using transport::LocalBuf;
using transport::OpType;

}  // namespace

void Server::PollLoop(Poller* p) {
  const uint32_t credits = options_.request_credits;
  std::vector<Completion> completions(2 * size_t{credits});
  std::vector<transport::Connection*> ready(kReadyPerWait);
  std::vector<std::unique_ptr<Served>> arrived;
  std::vector<transport::Connection*> arrived_keys;
  Round round;
  while (!stopping_.load(std::memory_order_acquire)) {
    StatusOr<size_t> n = p->group->Wait(ready, kPollTimeout);
    p->round_now = std::chrono::steady_clock::now();
    if (!n.ok()) {
      // The group failed and so did every connection in it: close them.
      // Connections that arrive later are closed by their first Poll.
      LOG(ERROR) << "a polling thread's group failed: " << n.status();
      for (auto& [conn, s] : p->served) Close(*s, n.status());
      p->load.fetch_sub(p->served.size(), std::memory_order_relaxed);
      p->served.clear();
      std::this_thread::sleep_for(kPollTimeout);
      continue;
    }
    {
      MutexLock lock(p->inbox_mu);
      arrived.swap(p->inbox);
    }
    for (auto& s : arrived) {
      transport::Connection* key = s->conn.get();
      arrived_keys.push_back(key);
      p->served.emplace(key, std::move(s));
    }
    arrived.clear();
    // After a reload every connection is checked against the set in force;
    // otherwise only those just taken, which the accept thread may have
    // checked against the set before (the generation is read first: a
    // reload after this read is seen by the next round).
    if (const uint64_t generation = client_credentials_->generation(); generation != p->credentials_checked) {
      p->credentials_checked = generation;
      CloseRevoked(p, nullptr);
    } else if (!arrived_keys.empty()) {
      CloseRevoked(p, &arrived_keys);
    }
    arrived_keys.clear();
    // One round: apply what every reported connection has, then commit
    // the round (one fsync with --durability=sync) and reply.
    for (size_t i = 0; i < *n; ++i) {
      const auto it = p->served.find(ready[i]);
      if (it == p->served.end()) continue;  // not yet taken from the inbox
      const size_t owed_before = round.owed.size();
      const size_t writes_before = round.writes.size();
      const size_t lookups_before = round.lookups.size();
      if (!Serve(*it->second, completions, &round, p->round_now)) {
        // Nothing of it is answered: its replies have nowhere to go.
        round.owed.resize(owed_before);
        round.writes.resize(writes_before);
        round.writes_owed.resize(writes_before);
        round.lookups.resize(lookups_before);
        Forget(p, ready[i]);
      }
    }
    AnswerRound(&round);
    if (!round.owed.empty()) SendReplies(p, &round.owed);
    if (options_.probe_idle_ms != 0 && p->round_now >= p->next_probe_sweep) {
      ProbeSilent(p, p->round_now);
      // A sweep every quarter of the shorter limit, at most every second.
      const uint32_t shorter = std::min(options_.probe_idle_ms, options_.probe_timeout_ms);
      p->next_probe_sweep =
          p->round_now + std::chrono::milliseconds(std::clamp<uint32_t>(shorter / 4, 10, 1000));
    }
  }
  {
    MutexLock lock(p->inbox_mu);
    for (auto& s : p->inbox) p->served.emplace(s->conn.get(), std::move(s));
    p->inbox.clear();
  }
  for (auto& [conn, s] : p->served) Close(*s, Status::Ok());
  p->load.store(0, std::memory_order_relaxed);
  p->served.clear();
}

void Server::AnswerRound(Round* round) {
  const uint32_t credits = options_.request_credits;
  const auto reply_to = [&](size_t owed, const protocol::ReplyMsg& reply) {
    const OwedReply& o = round->owed[owed];
    std::memcpy(o.served->messages.data() + ReplyOffset(credits, o.reply), &reply, sizeof(reply));
  };
  if (!round->writes.empty()) {
    // The round's client writes, in arrival order per connection: a
    // primary forwards those of different keys together.
    applier_->ApplyBatch(round->writes);
    for (size_t i = 0; i < round->writes.size(); ++i) reply_to(round->writes_owed[i], round->writes[i].reply);
    round->writes.clear();
    round->writes_owed.clear();
  }
  // After the writes: a lookup pipelined behind a write of its key on one
  // connection finds that write.
  for (const Round::Lookup& l : round->lookups) {
    reply_to(l.owed, applier_->Locate(l.msg, l.ring, &round->owed[l.owed].write));
  }
  round->lookups.clear();
}

bool Server::Serve(Served& s, std::span<Completion> completions, Round* round,
                   std::chrono::steady_clock::time_point now) {
  transport::Connection& conn = *s.conn;
  const uint32_t credits = options_.request_credits;
  const std::span<const uint8_t> ring(s.ring.data(), s.ring.size());
  StatusOr<size_t> n = conn.Poll(completions, std::chrono::microseconds(0));
  if (!n.ok()) {
    Close(s, n.status());
    return false;
  }
  if (*n > 0) s.last_heard = now;
  Status ended;
  for (size_t i = 0; i < *n && ended.ok(); ++i) {
    const Completion& c = completions[i];
    if (!c.status.ok()) {
      ended = c.status;
    } else if (c.op == OpType::kRead && c.wr_id == kProbeTag && s.probing) {
      // The peer answered: it is there.
      s.probing = false;
      connections_probing_.fetch_sub(1, std::memory_order_relaxed);
    } else if (c.op == OpType::kRecv && c.wr_id < credits && s.pending_count < credits) {
      s.pending[(s.pending_head + s.pending_count) % credits] =
          Served::Received{static_cast<uint32_t>(c.wr_id), c.byte_len};
      ++s.pending_count;
    } else if (c.op == OpType::kSend && (c.wr_id & ~(kSendTag - 1)) == kSendTag &&
               (c.wr_id & (kSendTag - 1)) < credits) {
      s.free_replies.push_back(static_cast<uint32_t>(c.wr_id & (kSendTag - 1)));
    } else {
      ended = Internal("unexpected completion (wr_id " + std::to_string(c.wr_id) + ")");
    }
  }
  if (!ended.ok()) {
    // An error while a probe was out: the probe's failure, or what it
    // found (the peer gone) reported first by an earlier request.
    Close(s, ended, /*dead=*/s.probing);
    return false;
  }
  // Requests are applied in arrival order; one waits only for a free
  // reply buffer (a send completion), never for another connection.
  while (s.pending_count > 0 && !s.free_replies.empty()) {
    const auto [buf, len] = s.pending[s.pending_head];
    s.pending_head = (s.pending_head + 1) % credits;
    --s.pending_count;
    const size_t msg_len = std::min<size_t>(len, protocol::kMaxMessageBytes);
    const std::span<const uint8_t> msg(s.messages.data() + ReceiveOffset(buf), msg_len);
    const auto start = std::chrono::steady_clock::now();
    const uint32_t r = s.free_replies.back();
    s.free_replies.pop_back();
    const bool lookup = s.peer_id.empty() && !msg.empty() && msg[0] == static_cast<uint8_t>(protocol::Op::kGet);
    if (lookup) {
      // Answered after the round's writes (AnswerRound).
      round->lookups.push_back(Round::Lookup{msg, ring, round->owed.size()});
    } else if (s.peer_id.empty()) {
      // Applied with the round's other client writes, its reply written
      // into buffer r then (AnswerRound).
      round->writes.push_back(Applier::BatchWrite{s.client_id, msg, ring, {}});
      round->writes_owed.push_back(round->owed.size());
    } else {
      const protocol::ReplyMsg reply = applier_->ApplyReplica(s.peer_id, msg, ring);
      std::memcpy(s.messages.data() + ReplyOffset(credits, r), &reply, sizeof(reply));
    }
    round->owed.push_back(OwedReply{&s, buf, r, start, lookup});
  }
  return true;
}

void Server::SendReplies(Poller* p, std::vector<OwedReply>* owed) {
  const uint32_t credits = options_.request_credits;
  // Acknowledged means durable: with group commit, the round's writes
  // (and whatever else was written meanwhile) are synced here, once.
  const Status synced = store_->SyncWrites();
  if (!synced.ok()) LOG(ERROR) << "group commit: " << synced;
  // One clock read for the round: its replies are posted next, together,
  // and held by the group so that each connection's replies leave in one
  // write (PollGroup::HoldSends; nothing below blocks).
  const auto answered = std::chrono::steady_clock::now();
  std::vector<Served*> broken;
  p->group->HoldSends();
  for (const OwedReply& o : *owed) {
    Served& s = *o.served;
    if (!s.broken.ok()) continue;
    const size_t reply_offset = ReplyOffset(credits, o.reply);
    uint8_t* const reply_bytes = s.messages.data() + reply_offset;
    if (!synced.ok() && !o.lookup) {
      protocol::ReplyMsg reply;
      std::memcpy(&reply, reply_bytes, sizeof(reply));
      if (reply.status_code == static_cast<int32_t>(StatusCode::kOk)) {
        // Applied and visible, but not known to be durable.
        reply = MakeReply(reply.request_id, StatusCode::kUnavailable, 0,
                          "written but not synced (outcome unknown): " + synced.message(), Reason::kOutcomeUnknown);
        std::memcpy(reply_bytes, &reply, sizeof(reply));
      }
    }
    // Counted before the reply goes out: a client that reads the counters
    // once it has its reply finds the reply counted.
    // Writes only: a lookup applies nothing.
    if (!o.lookup) (s.peer_id.empty() ? client_apply_latency_ : replica_apply_latency_).Record(answered - o.start);
    int32_t code = 0;
    std::memcpy(&code, reply_bytes + offsetof(protocol::ReplyMsg, status_code), sizeof(code));
    if (code != 0 && static_cast<uint32_t>(code) < kStatusCodeCount) [[unlikely]] {
      error_replies_[static_cast<size_t>(code)].fetch_add(1, std::memory_order_relaxed);
    }
    // Re-post the receive before replying: the reply returns the credit,
    // and the client may send its next request as soon as it sees it.
    Status st = s.conn->PostRecv(ReceiveBuf(s.messages_mr, o.buf), o.buf);
    const LocalBuf reply{s.messages_mr, reply_offset, sizeof(protocol::ReplyMsg)};
    if (st.ok() && o.write.bytes == 0) {
      st = s.conn->PostSend(reply, kSendTag | o.reply);
    } else if (st.ok()) {
      // A found lookup: its block, then the reply, in one chain; the
      // client checks the block as it checks a READ's (§4.1).
      st = s.conn->PostWriteSend(LocalBuf{heap_mr_.get(), o.write.heap_offset, static_cast<uint32_t>(o.write.bytes)},
                                 transport::RemoteBuf{o.write.landing_addr, o.write.landing_rkey}, reply,
                                 kSendTag | o.reply);
    }
    if (!st.ok()) {
      s.broken = st;
      broken.push_back(&s);
      continue;
    }
  }
  p->group->ReleaseSends();
  owed->clear();
  for (Served* s : broken) {
    transport::Connection* key = s->conn.get();
    Close(*s, s->broken);
    Forget(p, key);
  }
}

void Server::CloseRevoked(Poller* p, const std::vector<transport::Connection*>* only) {
  const std::shared_ptr<const ClientCredentials> now = client_credentials_->current();
  std::vector<transport::Connection*> revoked;
  const auto check = [&](transport::Connection* conn, const Served& s) {
    if (s.peer_id.empty() && !now->Contains(s.credential, s.credential_digest)) revoked.push_back(conn);
  };
  if (only == nullptr) {
    for (auto& [conn, s] : p->served) check(conn, *s);
  } else {
    for (transport::Connection* conn : *only) check(conn, *p->served.at(conn));
  }
  for (transport::Connection* conn : revoked) {
    Served& s = *p->served.at(conn);
    Close(s, Unauthenticated("client credential " + s.credential + " was revoked"));
    Forget(p, conn);
  }
}

void Server::Forget(Poller* p, transport::Connection* conn) {
  if (p->served.erase(conn) > 0) p->load.fetch_sub(1, std::memory_order_relaxed);
}

void Server::ProbeSilent(Poller* p, std::chrono::steady_clock::time_point now) {
  const auto idle = std::chrono::milliseconds(options_.probe_idle_ms);
  const auto timeout = std::chrono::milliseconds(options_.probe_timeout_ms);
  std::vector<transport::Connection*> dead;
  for (auto& [conn, served] : p->served) {
    Served& s = *served;
    if (s.probing) {
      if (now - s.probe_sent >= timeout) dead.push_back(conn);
      continue;
    }
    if (!s.can_probe || now - s.last_heard < idle) continue;
    const Status posted = s.conn->PostProbe(kProbeTag);
    if (posted.code() == StatusCode::kUnimplemented) {
      s.can_probe = false;  // the transport's own limits bound its peers
      continue;
    }
    if (!posted.ok()) {
      s.broken = posted;
      dead.push_back(conn);
      continue;
    }
    s.probing = true;
    s.probe_sent = now;
    connections_probing_.fetch_add(1, std::memory_order_relaxed);
  }
  for (transport::Connection* conn : dead) {
    Served& s = *p->served.at(conn);
    const Status why = s.broken.ok() ? DeadlineExceeded("the peer answered no probe within " +
                                                        std::to_string(options_.probe_timeout_ms) + " ms (after " +
                                                        std::to_string(options_.probe_idle_ms) + " ms of silence)")
                                     : s.broken;
    Close(s, why, /*dead=*/true);
    Forget(p, conn);
  }
}

void Server::Close(Served& s, const Status& why, bool dead) {
  if (s.probing) {
    s.probing = false;
    connections_probing_.fetch_sub(1, std::memory_order_relaxed);
  }
  if (dead) connections_released_dead_.fetch_add(1, std::memory_order_relaxed);
  if (why.ok()) {
    LOG(INFO) << "disconnecting client " << std::hex << s.client_id << std::dec << " from " << s.peer
              << " (server shutting down)";
  } else {
    LOG(INFO) << "connection of client " << std::hex << s.client_id << std::dec << " from " << s.peer
              << (s.credential.empty() ? "" : " (credential " + s.credential + ")") << " closed: " << why;
  }
  s.conn->Disconnect();
  s.conn.reset();
  connections_open_.fetch_sub(1, std::memory_order_relaxed);
}

}  // namespace rkv::server
