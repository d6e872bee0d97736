// The verbs transport's poll groups against a real RDMA device (shared
// CQs: dispatch, growth, disconnects, teardown, Wake); part of the
// verbs_transport_test binary, which needs a device (see
// verbs_transport_test.cc). What PollGroup promises of every transport is
// tested in ../poll_group_conformance_test.cc.
#include "common/transport/verbs/verbs_poll_group.h"

#include <gtest/gtest.h>
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <future>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/mutex.h"
#include "common/transport/verbs/verbs_connection.h"
#include "common/transport/verbs/verbs_test_fixture.h"

namespace rkv::transport {
namespace {

using namespace std::chrono_literals;
using namespace verbs_testing;

// ---------------------------------------------------------------------------
// Poll groups: accepted connections whose QPs complete into their group's
// CQs, served by one thread through Wait and Poll only (the member's Poll
// never waits). Clients are ordinary connections.

// $RKV_TEST_SCALE (a positive float; 1 when unset): the guest suite runs
// 0.1, which shrinks the rounds of work but not the connection count.
double TestScale() {
  const char* text = std::getenv("RKV_TEST_SCALE");
  if (text == nullptr) return 1.0;
  const double scale = std::strtod(text, nullptr);
  return scale > 0 ? scale : 1.0;
}

constexpr size_t kMemberRing = 1024;
constexpr size_t kMemberWrite = 256;
constexpr size_t kMemberReceives = 2;
constexpr size_t kSlot = 64;
constexpr uint64_t kReplyWrId = 1000;

// The server side of one member: a private ring its client WRITEs into and
// private message slots (kMemberReceives receives, then the reply).
struct Member {
  std::unique_ptr<Connection> conn;
  std::vector<uint8_t> ring = std::vector<uint8_t>(kMemberRing, 0);
  std::vector<uint8_t> msgs = std::vector<uint8_t>((kMemberReceives + 1) * kSlot, 0);
  MemoryRegion* msgs_mr = nullptr;
  uint64_t first_wr_id = 0;  // receive slot i has wr_id first_wr_id + i
  uint64_t requests = 0;
};

// Registers the member's private memory, posts its receives (wr_ids
// `first_wr_id` + slot) and fills the descriptor; the caller Accepts.
Status SetUpMember(Member& m, const MemoryRegion& heap_mr, Descriptor* d, uint64_t first_wr_id = 0) {
  RKV_ASSIGN_OR_RETURN(MemoryRegion * ring_mr,
                       m.conn->RegisterPrivate(m.ring.data(), m.ring.size(), kRemoteWrite | kLocalWrite));
  RKV_ASSIGN_OR_RETURN(m.msgs_mr, m.conn->RegisterPrivate(m.msgs.data(), m.msgs.size(), kLocalWrite));
  m.first_wr_id = first_wr_id;
  for (size_t i = 0; i < kMemberReceives; ++i) {
    RKV_RETURN_IF_ERROR(m.conn->PostRecv({m.msgs_mr, i * kSlot, kSlot}, first_wr_id + i));
  }
  d->heap_addr = heap_mr.remote_addr();
  d->heap_rkey = heap_mr.rkey();
  d->heap_len = static_cast<uint32_t>(heap_mr.size());
  d->ring_addr = ring_mr->remote_addr();
  d->ring_rkey = ring_mr->rkey();
  d->ring_len = static_cast<uint32_t>(kMemberRing);
  return Status::Ok();
}

// What the member's Poll returns, served: each request is answered (token
// + 1, the hash of the ring's first kMemberWrite bytes) and its receive
// posted again. Never waits. Returns the first failed completion's status.
Status ServeMember(Member& m, std::vector<Completion>* seen = nullptr) {
  Completion buf[16];
  RKV_ASSIGN_OR_RETURN(const size_t n, m.conn->Poll(buf, 0us));
  for (size_t i = 0; i < n; ++i) {
    const Completion& c = buf[i];
    if (seen != nullptr) seen->push_back(c);
    if (!c.status.ok()) return c.status;
    if (c.op != OpType::kRecv) continue;
    const uint64_t slot = c.wr_id - m.first_wr_id;
    if (slot >= kMemberReceives || c.byte_len != sizeof(ChurnMessage)) {
      return Internal("unexpected receive " + std::to_string(c.wr_id) + " of " + std::to_string(c.byte_len));
    }
    ChurnMessage msg;
    std::memcpy(&msg, m.msgs.data() + slot * kSlot, sizeof msg);
    msg.token += 1;
    msg.ring_hash = Fnv1a(m.ring.data(), kMemberWrite);
    std::memcpy(m.msgs.data() + kMemberReceives * kSlot, &msg, sizeof msg);
    ++m.requests;
    RKV_RETURN_IF_ERROR(m.conn->PostSend({m.msgs_mr, kMemberReceives * kSlot, sizeof msg}, kReplyWrId));
    RKV_RETURN_IF_ERROR(m.conn->PostRecv({m.msgs_mr, slot * kSlot, kSlot}, c.wr_id));
  }
  return Status::Ok();
}

// A client's side of one member.
struct GroupClient {
  std::unique_ptr<Connection> conn;
  std::vector<uint8_t> local = std::vector<uint8_t>(4096, 0);
  std::unique_ptr<MemoryRegion> mr;
  Descriptor d{};
};

// Posts one request: a WRITE of kMemberWrite bytes into the member's ring
// and a SEND of the token, with a receive for the answer. Returns the
// bytes written, for CheckRequest.
void PostRequest(GroupClient& c, uint64_t token) {
  const MemoryRegion* m = c.mr.get();
  // [0, 64) request, [64, 128) answer, [1024, 2048) READ, [2048, ..) WRITE.
  ASSERT_TRUE(c.conn->PostRecv({m, 64, 64}, 10).ok());
  for (size_t i = 0; i < kMemberWrite; ++i) c.local[2048 + i] = static_cast<uint8_t>(token * 131 + i);
  const ChurnMessage msg{token, 0};
  std::memcpy(c.local.data(), &msg, sizeof msg);
  const Status posted = c.conn->PostWriteSend({m, 2048, static_cast<uint32_t>(kMemberWrite)},
                                              {c.d.ring_addr, c.d.ring_rkey}, {m, 0, sizeof msg}, 11);
  ASSERT_TRUE(posted.ok()) << posted;
}

// Waits (client Poll) for the request's SEND and its answer, and checks
// that the server saw the WRITE before the SEND.
void FinishRequest(GroupClient& c, uint64_t token) {
  auto done = PollFor(*c.conn, 2);
  ASSERT_EQ(done.size(), 2u);
  for (const Completion& e : done) ASSERT_TRUE(e.status.ok()) << e.status;
  ChurnMessage answer;
  std::memcpy(&answer, c.local.data() + 64, sizeof answer);
  EXPECT_EQ(answer.token, token + 1);
  EXPECT_EQ(answer.ring_hash, Fnv1a(c.local.data() + 2048, kMemberWrite)) << "token " << token;
}

// A one-sided READ of the server's heap (the member's CPU sees nothing).
void ReadHeap(GroupClient& c, const std::vector<uint8_t>& heap, uint64_t token) {
  const size_t offset = (token * 4099) % (heap.size() - 1024);
  ReadOp op;
  op.local = {c.mr.get(), 1024, 1024};
  op.remote = {c.d.heap_addr + offset, c.d.heap_rkey};
  op.wr_id = 12;
  op.signaled = true;
  std::vector<Completion> others;
  const Status read = c.conn->PostReadsAndWait({&op, 1}, std::chrono::duration_cast<std::chrono::microseconds>(kPollLimit), &others);
  ASSERT_TRUE(read.ok()) << read;
  EXPECT_TRUE(others.empty());
  EXPECT_EQ(std::memcmp(c.local.data() + 1024, heap.data() + offset, 1024), 0) << "token " << token;
}

// A chooser that places every request in `group`.
Listener::GroupChooser InGroup(PollGroup* group) {
  return [group](std::span<const uint8_t>) { return group; };
}

verbs::PollGroupCore& CoreOf(PollGroup& group) {
  auto* verbs_group = dynamic_cast<verbs::VerbsPollGroup*>(&group);
  EXPECT_NE(verbs_group, nullptr);
  return *verbs_group->core();
}

class VerbsPollGroupTest : public VerbsTransportTest {
 protected:
  // A server transport with these options (and the heap and listener on it).
  void UseServer(const Options& options) {
    listener_.reset();
    heap_mr_.reset();
    auto server = CreateVerbsTransport(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(server).value();
    auto heap_mr = server_->Register(heap_.data(), heap_.size(), kRemoteRead);
    ASSERT_TRUE(heap_mr.ok()) << heap_mr.status();
    heap_mr_ = std::move(heap_mr).value();
    auto listener = server_->Listen(host_ + ":0");
    ASSERT_TRUE(listener.ok()) << listener.status();
    listener_ = std::move(listener).value();
  }

  std::unique_ptr<PollGroup> NewGroup() {
    auto group = server_->NewPollGroup();
    EXPECT_TRUE(group.ok()) << group.status();
    return group.ok() ? std::move(group).value() : nullptr;
  }

  // One client connected to a member of `group` (set up as SetUpMember
  // does, receives from `first_wr_id`); the accept runs on a thread of its
  // own while this one connects.
  void Join(PollGroup& group, Member* member, GroupClient* client, uint64_t first_wr_id = 0) {
    auto server = std::async(std::launch::async, [&]() -> Status {
      auto next = listener_->Next(kNextTimeout, InGroup(&group));
      if (!next.ok()) return next.status();
      if (*next == nullptr) return DeadlineExceeded("no connection request arrived");
      member->conn = std::move(next).value();
      Descriptor d{};
      RKV_RETURN_IF_ERROR(SetUpMember(*member, *heap_mr_, &d, first_wr_id));
      return member->conn->Accept(Bytes(&d, sizeof d));
    });
    auto conn = client_->Connect(listener_->address(), {}, kConnectTimeout);
    const Status accepted = server.get();
    ASSERT_TRUE(conn.ok()) << conn.status();
    ASSERT_TRUE(accepted.ok()) << accepted;
    client->conn = std::move(conn).value();
    client->mr = ClientRegion(client->local);
    client->d = ParseDescriptor(*client->conn);
  }

  // Waits on `group` (test thread) until `done` says so, serving every
  // reported member through its Poll; a member not in `members` or a
  // failed Poll fails the test.
  void Serve(PollGroup& group, std::vector<Member*> members, const std::function<bool()>& done) {
    const auto limit = std::chrono::steady_clock::now() + kPollLimit;
    Connection* ready[8];
    while (!done()) {
      ASSERT_LT(std::chrono::steady_clock::now(), limit) << "the group never reported what was expected";
      auto n = group.Wait(ready, 10ms);
      ASSERT_TRUE(n.ok()) << n.status();
      for (size_t i = 0; i < *n; ++i) {
        auto it = std::find_if(members.begin(), members.end(), [&](Member* m) { return m->conn.get() == ready[i]; });
        ASSERT_NE(it, members.end()) << "Wait reported a connection that is not a member";
        const Status served = ServeMember(**it);
        ASSERT_TRUE(served.ok()) << served;
      }
    }
  }
};

// The scale the design is for, in miniature: two groups share 200
// connections, and the test thread alone serves both through Wait + Poll
// while four client threads run SEND round trips (each after a WRITE into
// the member's private ring, a memory window where the device has them)
// and one-sided READs of the server's heap. Members join (Accept, with its
// window binds) on an accept thread while the groups are being waited on.
TEST_F(VerbsPollGroupTest, TwoHundredConnectionsInTwoGroupsAreServedByOneThread) {
  constexpr size_t kConnections = 200;
  constexpr size_t kClientThreads = 4;
  const auto rounds = static_cast<size_t>(std::max(2.0, std::round(10 * TestScale())));
  // Every QP has a CQ share in the server's groups and two fds in the client.
  rlimit files{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &files), 0);
  files.rlim_cur = files.rlim_max;
  setrlimit(RLIMIT_NOFILE, &files);
  Options options;
  // Small queues: 100 members of a group fit rxe's 32767-entry CQs.
  options.max_send_wr = 32;
  options.max_recv_wr = 8;
  UseServer(options);
  ASSERT_FALSE(HasFailure());
  std::unique_ptr<PollGroup> groups[2] = {NewGroup(), NewGroup()};
  ASSERT_TRUE(groups[0] && groups[1]);

  Mutex mu;
  std::unordered_map<Connection*, Member*> by_connection;  // guarded by mu
  std::vector<std::unique_ptr<Member>> members(kConnections);
  for (auto& m : members) m = std::make_unique<Member>();
  std::atomic<size_t> accepted{0};
  std::thread acceptor([&] {
    for (size_t i = 0; i < kConnections; ++i) {
      auto next = listener_->Next(kNextTimeout, InGroup(groups[i % 2].get()));
      ASSERT_TRUE(next.ok()) << next.status();
      ASSERT_NE(*next, nullptr) << "connection request " << i << " never arrived";
      Member& m = *members[i];
      m.conn = std::move(next).value();
      {
        // Known before Accept: the group may report it as soon as it joined.
        MutexLock lock(mu);
        by_connection[m.conn.get()] = &m;
      }
      Descriptor d{};
      const Status set_up = SetUpMember(m, *heap_mr_, &d);
      ASSERT_TRUE(set_up.ok()) << set_up;
      const Status ok = m.conn->Accept(Bytes(&d, sizeof d));
      ASSERT_TRUE(ok.ok()) << ok;
      accepted.fetch_add(1, std::memory_order_relaxed);
    }
  });

  std::vector<std::vector<GroupClient>> clients(kClientThreads);
  std::atomic<size_t> clients_done{0};
  std::vector<std::thread> client_threads;
  for (size_t t = 0; t < kClientThreads; ++t) {
    client_threads.emplace_back([&, t] {
      // Counted on every way out, so that the server loop below ends.
      struct Done {
        std::atomic<size_t>& count;
        ~Done() { count.fetch_add(1, std::memory_order_release); }
      } done{clients_done};
      std::vector<GroupClient>& mine = clients[t];
      mine.resize(kConnections / kClientThreads);
      for (GroupClient& c : mine) {
        auto conn = client_->Connect(listener_->address(), {}, kConnectTimeout);
        ASSERT_TRUE(conn.ok()) << conn.status();
        c.conn = std::move(conn).value();
        c.mr = ClientRegion(c.local);
        ASSERT_NE(c.mr, nullptr);
        c.d = ParseDescriptor(*c.conn);
      }
      for (size_t round = 0; round < rounds; ++round) {
        // Every connection of this thread has a request in flight at once.
        for (size_t i = 0; i < mine.size(); ++i) {
          PostRequest(mine[i], (t * 1000 + i) * 100 + round);
          if (HasFatalFailure()) return;
        }
        for (size_t i = 0; i < mine.size(); ++i) {
          FinishRequest(mine[i], (t * 1000 + i) * 100 + round);
          ReadHeap(mine[i], heap_, (t * 1000 + i) * 100 + round);
          if (HasFatalFailure()) return;
        }
      }
    });
  }

  // The test thread is both groups' polling thread.
  const auto limit = std::chrono::steady_clock::now() + 240s;
  Connection* ready[32];
  size_t group_turn = 0;
  while (clients_done.load(std::memory_order_acquire) < kClientThreads) {
    if (std::chrono::steady_clock::now() >= limit) {
      ADD_FAILURE() << "the clients did not finish";
      break;
    }
    PollGroup& group = *groups[group_turn++ % 2];
    auto n = group.Wait(ready, 1ms);
    ASSERT_TRUE(n.ok()) << n.status();
    for (size_t i = 0; i < *n; ++i) {
      Member* m = nullptr;
      {
        MutexLock lock(mu);
        auto it = by_connection.find(ready[i]);
        if (it != by_connection.end()) m = it->second;
      }
      ASSERT_NE(m, nullptr) << "Wait reported a connection that is not a member";
      const Status served = ServeMember(*m);
      ASSERT_TRUE(served.ok()) << served;
    }
  }
  for (auto& t : client_threads) t.join();
  if (HasFailure()) listener_->Shutdown();
  acceptor.join();
  ASSERT_FALSE(HasFailure());
  EXPECT_EQ(accepted.load(), kConnections);
  EXPECT_EQ(groups[0]->size(), kConnections / 2);
  EXPECT_EQ(groups[1]->size(), kConnections / 2);
  for (const auto& m : members) {
    EXPECT_EQ(m->requests, rounds);
    EXPECT_TRUE(dynamic_cast<verbs::VerbsConnection&>(*m->conn).in_poll_group());
  }
  // Members go on their group's thread (this one), before the clients.
  members.clear();
  EXPECT_EQ(groups[0]->size(), 0u);
  EXPECT_EQ(groups[1]->size(), 0u);
}

TEST_F(VerbsPollGroupTest, APeerDisconnectReportsTheMemberAndItsPollFailsUnavailable) {
  std::unique_ptr<PollGroup> group = NewGroup();
  ASSERT_NE(group, nullptr);
  Member gone, staying;
  GroupClient gone_client, staying_client;
  Join(*group, &gone, &gone_client);
  Join(*group, &staying, &staying_client);
  ASSERT_FALSE(HasFailure());
  EXPECT_EQ(group->size(), 2u);

  gone_client.conn->Disconnect();
  // Only the member whose peer left has anything to report: its cm event,
  // then maybe flushed receives, then its Poll's error.
  Status broken;
  std::vector<Completion> flushed;
  const auto limit = std::chrono::steady_clock::now() + kPollLimit;
  while (broken.ok()) {
    ASSERT_LT(std::chrono::steady_clock::now(), limit) << "the disconnect was never reported";
    Connection* ready[4];
    auto n = group->Wait(ready, 10ms);
    ASSERT_TRUE(n.ok()) << n.status();
    for (size_t i = 0; i < *n; ++i) {
      ASSERT_EQ(ready[i], gone.conn.get()) << "a member with nothing to report was reported";
      broken = ServeMember(gone, &flushed);
    }
  }
  EXPECT_EQ(broken.code(), StatusCode::kUnavailable) << broken;
  for (const Completion& c : flushed) EXPECT_EQ(c.status.code(), StatusCode::kUnavailable) << c.status;
  // Level-triggered: reported while it is not destroyed; then never again.
  Connection* ready[4];
  auto n = group->Wait(ready, 10ms);
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_TRUE(std::find(ready, ready + *n, gone.conn.get()) != ready + *n);
  gone.conn.reset();
  EXPECT_EQ(group->size(), 1u);

  // The other member is unaffected.
  PostRequest(staying_client, 7);
  Serve(*group, {&staying}, [&] { return staying.requests == 1; });
  FinishRequest(staying_client, 7);
}

// Level-triggered: a member whose Poll left completions in its ring is
// reported by the next Wait without anything new arriving.
TEST_F(VerbsPollGroupTest, AMemberNotPolledEmptyIsReportedAgain) {
  std::unique_ptr<PollGroup> group = NewGroup();
  ASSERT_NE(group, nullptr);
  Member member;
  GroupClient client;
  Join(*group, &member, &client);
  ASSERT_FALSE(HasFailure());
  std::vector<uint8_t> request(64, 0x33);
  auto request_mr = ClientRegion(request);
  // Both receives completed at the server once both SENDs completed here.
  ASSERT_TRUE(client.conn->PostSend({request_mr.get(), 0, 16}, 1).ok());
  ASSERT_TRUE(client.conn->PostSend({request_mr.get(), 0, 16}, 2).ok());
  ASSERT_EQ(PollFor(*client.conn, 2).size(), 2u);

  Connection* ready[4];
  auto n = group->Wait(ready, std::chrono::duration_cast<std::chrono::microseconds>(kPollLimit));
  ASSERT_TRUE(n.ok()) << n.status();
  ASSERT_EQ(*n, 1u);
  ASSERT_EQ(ready[0], member.conn.get());
  for (uint64_t slot = 0; slot < 2; ++slot) {
    if (slot > 0) {
      // Nothing new arrived: the member is still ready.
      n = group->Wait(ready, std::chrono::duration_cast<std::chrono::microseconds>(kPollLimit));
      ASSERT_TRUE(n.ok()) << n.status();
      ASSERT_EQ(*n, 1u);
      ASSERT_EQ(ready[0], member.conn.get());
    }
    Completion one[1];
    auto got = member.conn->Poll(one, 0us);
    ASSERT_TRUE(got.ok()) << got.status();
    ASSERT_EQ(*got, 1u);
    EXPECT_EQ(one[0].op, OpType::kRecv);
    EXPECT_EQ(one[0].wr_id, slot);
    EXPECT_EQ(one[0].byte_len, 16u);
  }
  // Polled empty: no longer reported.
  n = group->Wait(ready, 10ms);
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(*n, 0u);
}

// A member's own waits inside its posts go through the group's CQs: a
// PostReadsAndWait of its peer's memory, and more SENDs than its send queue
// holds (each post waits for room while the group feeds the member).
TEST_F(VerbsPollGroupTest, AMembersReadsAndFullSendQueueWaitThroughTheGroup) {
  Options options;
  options.max_send_wr = 16;
  UseServer(options);
  ASSERT_FALSE(HasFailure());
  std::unique_ptr<PollGroup> group = NewGroup();
  ASSERT_NE(group, nullptr);
  Member member;
  GroupClient client;
  Join(*group, &member, &client);
  ASSERT_FALSE(HasFailure());

  std::vector<uint8_t> exposed(4096);
  for (size_t i = 0; i < exposed.size(); ++i) exposed[i] = static_cast<uint8_t>(i * 13 + 1);
  auto exposed_mr = ClientRegion(exposed, kRemoteRead);
  ASSERT_NE(exposed_mr, nullptr);
  std::vector<uint8_t> landing(4096, 0);
  auto landing_mr = server_->Register(landing.data(), landing.size(), kLocalWrite);
  ASSERT_TRUE(landing_mr.ok()) << landing_mr.status();
  ReadOp op;
  op.local = {landing_mr->get(), 0, 4096};
  op.remote = {exposed_mr->remote_addr(), exposed_mr->rkey()};
  op.wr_id = 77;
  op.signaled = true;
  std::vector<Completion> others;
  const Status read =
      member.conn->PostReadsAndWait({&op, 1}, std::chrono::duration_cast<std::chrono::microseconds>(kPollLimit), &others);
  ASSERT_TRUE(read.ok()) << read;
  EXPECT_TRUE(others.empty());
  EXPECT_EQ(landing, exposed);

  constexpr uint64_t kSends = 40;  // the member's send queue holds 16
  std::vector<uint8_t> inbox(kSends * 16, 0);
  auto inbox_mr = ClientRegion(inbox);
  for (uint64_t i = 0; i < kSends; ++i) {
    ASSERT_TRUE(client.conn->PostRecv({inbox_mr.get(), i * 16, 16}, 500 + i).ok());
  }
  for (uint64_t i = 0; i < kSends; ++i) {
    const Status sent = member.conn->PostSend({landing_mr->get(), i * 16, 16}, 300 + i);
    ASSERT_TRUE(sent.ok()) << "SEND " << i << ": " << sent;
  }
  // Every SEND's completion, in order, through Wait + Poll.
  std::vector<Completion> done;
  const auto limit = std::chrono::steady_clock::now() + kPollLimit;
  while (done.size() < kSends) {
    ASSERT_LT(std::chrono::steady_clock::now(), limit) << done.size() << " of " << kSends << " SENDs completed";
    Connection* ready[4];
    auto n = group->Wait(ready, 10ms);
    ASSERT_TRUE(n.ok()) << n.status();
    for (size_t i = 0; i < *n; ++i) {
      ASSERT_EQ(ready[i], member.conn.get());
      Completion buf[16];
      auto got = member.conn->Poll(buf, 0us);
      ASSERT_TRUE(got.ok()) << got.status();
      done.insert(done.end(), buf, buf + *got);
    }
  }
  for (uint64_t i = 0; i < kSends; ++i) {
    EXPECT_TRUE(done[i].status.ok()) << done[i].status;
    EXPECT_EQ(done[i].op, OpType::kSend);
    EXPECT_EQ(done[i].wr_id, 300 + i);
  }
  auto received = PollFor(*client.conn, kSends);
  ASSERT_EQ(received.size(), kSends);
  EXPECT_EQ(std::memcmp(inbox.data(), exposed.data(), inbox.size()), 0);
}

// A destroyed member's completions (received, and flushed) may still sit in
// the group's CQs: they must reach no other member, and the member must
// never be reported again.
TEST_F(VerbsPollGroupTest, ADestroyedMembersCompletionsNeverReachOtherMembers) {
  std::unique_ptr<PollGroup> group = NewGroup();
  ASSERT_NE(group, nullptr);
  Member dead, alive;
  GroupClient dead_client, alive_client;
  constexpr uint64_t kDeadWrIds = 100;
  constexpr uint64_t kAliveWrIds = 200;
  Join(*group, &dead, &dead_client, kDeadWrIds);
  Join(*group, &alive, &alive_client, kAliveWrIds);
  ASSERT_FALSE(HasFailure());

  // Two SENDs the dead member's QP receives (their completion at the client
  // means the receives completed at the server), never polled; then the
  // member disconnects (flushing anything else it had) and is destroyed.
  std::vector<uint8_t> request(64, 0x5a);
  auto request_mr = ClientRegion(request);
  ASSERT_TRUE(dead_client.conn->PostSend({request_mr.get(), 0, sizeof(ChurnMessage)}, 1).ok());
  ASSERT_TRUE(dead_client.conn->PostSend({request_mr.get(), 0, sizeof(ChurnMessage)}, 2).ok());
  EXPECT_EQ(PollFor(*dead_client.conn, 2).size(), 2u);
  const Connection* dead_address = dead.conn.get();
  dead.conn->Disconnect();
  dead.conn.reset();
  EXPECT_EQ(group->size(), 1u);

  PostRequest(alive_client, 9);
  std::vector<Completion> seen;
  Connection* ready[4];
  const auto limit = std::chrono::steady_clock::now() + kPollLimit;
  while (alive.requests == 0) {
    ASSERT_LT(std::chrono::steady_clock::now(), limit) << "the living member was never served";
    auto n = group->Wait(ready, 10ms);
    ASSERT_TRUE(n.ok()) << n.status();
    for (size_t i = 0; i < *n; ++i) {
      ASSERT_NE(ready[i], dead_address) << "a destroyed member was reported";
      ASSERT_EQ(ready[i], alive.conn.get());
      const Status served = ServeMember(alive, &seen);
      ASSERT_TRUE(served.ok()) << served;
    }
  }
  FinishRequest(alive_client, 9);
  // A few more Waits: nothing of the dead member surfaces.
  for (int i = 0; i < 20; ++i) {
    auto n = group->Wait(ready, 5ms);
    ASSERT_TRUE(n.ok()) << n.status();
    for (size_t j = 0; j < *n; ++j) {
      ASSERT_EQ(ready[j], alive.conn.get());
      const Status served = ServeMember(alive, &seen);
      ASSERT_TRUE(served.ok()) << served;
    }
  }
  for (const Completion& c : seen) {
    EXPECT_TRUE(c.status.ok()) << c.status;
    if (c.op == OpType::kRecv) {
      EXPECT_GE(c.wr_id, kAliveWrIds) << "a completion of the destroyed member reached another";
      EXPECT_LT(c.wr_id, kAliveWrIds + kMemberReceives);
    } else {
      EXPECT_EQ(c.wr_id, kReplyWrId);
    }
  }
}

TEST_F(VerbsPollGroupTest, TheCompletionQueuesGrowAsMembersJoin) {
  Options options;
  options.max_send_wr = 16;
  options.max_recv_wr = 16;
  UseServer(options);
  ASSERT_FALSE(HasFailure());
  std::unique_ptr<PollGroup> group = NewGroup();
  ASSERT_NE(group, nullptr);
  verbs::PollGroupCore& core = CoreOf(*group);
  const uint32_t initial = core.send_capacity();
  // More members than the first CQs hold.
  const size_t count = initial / 16 + 2;
  std::vector<Member> members(count);
  std::vector<GroupClient> clients(count);
  for (size_t i = 0; i < count; ++i) {
    Join(*group, &members[i], &clients[i]);
    ASSERT_FALSE(HasFailure()) << "member " << i;
  }
  EXPECT_GT(core.send_capacity(), initial);
  EXPECT_GE(core.send_capacity(), count * 16);
  EXPECT_GE(core.recv_capacity(), count * 16);
  EXPECT_EQ(group->size(), count);
  std::vector<Member*> all;
  for (Member& m : members) all.push_back(&m);
  for (size_t i = 0; i < count; ++i) PostRequest(clients[i], 50 + i);
  Serve(*group, all, [&] {
    return std::all_of(members.begin(), members.end(), [](const Member& m) { return m.requests == 1; });
  });
  for (size_t i = 0; i < count; ++i) FinishRequest(clients[i], 50 + i);
}

// A member whose queues the device's largest CQ cannot add is refused with
// RESOURCE_EXHAUSTED (its client: UNAVAILABLE, worth retrying); the members
// already in the group go on.
TEST_F(VerbsPollGroupTest, AMemberTheCompletionQueuesCannotHoldIsRefused) {
  int max_cqe = 0;
  {
    int count = 0;
    ibv_device** list = ibv_get_device_list(&count);
    ASSERT_NE(list, nullptr);
    ibv_context* context = ibv_open_device(list[0]);
    ASSERT_NE(context, nullptr);
    ibv_device_attr attr{};
    ASSERT_EQ(ibv_query_device(context, &attr), 0);
    max_cqe = attr.max_cqe;
    ibv_close_device(context);
    ibv_free_device_list(list);
  }
  Options options;
  // One member fits the largest CQ, two do not.
  options.max_send_wr = static_cast<uint32_t>(max_cqe / 2 + 1);
  options.max_recv_wr = 16;
  UseServer(options);
  ASSERT_FALSE(HasFailure());
  std::unique_ptr<PollGroup> group = NewGroup();
  ASSERT_NE(group, nullptr);
  Member first;
  GroupClient first_client;
  Join(*group, &first, &first_client);
  ASSERT_FALSE(HasFailure());

  auto refused = std::async(std::launch::async, [&] { return listener_->Next(kNextTimeout, InGroup(group.get())); });
  auto conn = client_->Connect(listener_->address(), {}, kConnectTimeout);
  EXPECT_EQ(conn.status().code(), StatusCode::kUnavailable) << conn.status();
  auto next = refused.get();
  EXPECT_EQ(next.status().code(), StatusCode::kResourceExhausted) << next.status();
  EXPECT_EQ(group->size(), 1u);

  PostRequest(first_client, 3);
  Serve(*group, {&first}, [&] { return first.requests == 1; });
  FinishRequest(first_client, 3);
}

TEST_F(VerbsPollGroupTest, WakeEndsAWait) {
  std::unique_ptr<PollGroup> group = NewGroup();
  ASSERT_NE(group, nullptr);
  Member member;
  GroupClient client;
  Join(*group, &member, &client);
  ASSERT_FALSE(HasFailure());
  Connection* ready[4];
  // Before the Wait: the next one returns at once.
  group->Wake();
  auto n = group->Wait(ready, std::chrono::duration_cast<std::chrono::microseconds>(kPollLimit));
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(*n, 0u);
  // During the Wait (a long one: the hang guard below is shorter).
  std::promise<void> started;
  auto waiting = std::async(std::launch::async, [&] {
    started.set_value();
    return group->Wait(ready, std::chrono::duration_cast<std::chrono::microseconds>(kPollLimit * 10));
  });
  started.get_future().wait();
  group->Wake();
  ASSERT_EQ(waiting.wait_for(kPollLimit), std::future_status::ready) << "Wake did not end the Wait";
  auto woken = waiting.get();
  ASSERT_TRUE(woken.ok()) << woken.status();
  EXPECT_EQ(*woken, 0u);
}

}  // namespace
}  // namespace rkv::transport
