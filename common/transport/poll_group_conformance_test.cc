// PollGroup's contract (common/transport/transport.h), tested once for
// every transport that $RKV_TRANSPORTS names (transports_under_test.h):
// the server side of every connection is a group member, served by the
// test thread through Wait and Poll alone; the client side is made of
// ordinary connections, driven from other threads. Every transport has
// poll groups: one that cannot make one fails every test of its instance.
//
// No test asserts how long anything takes: kWait and kServeLimit only bound
// how long a broken transport can hang a test.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/transport/transport.h"
#include "common/transport/transport_test_util.h"
#include "common/transport/transports_under_test.h"

namespace rkv::transport {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using testing::BaseName;
using testing::Buffer;
using testing::kWait;
using testing::MakeBuffer;
using testing::MakeTransport;
using testing::NamePart;
using testing::PollOne;
using testing::TransportsUnderTest;

// Bounds a whole serving loop (many connections' traffic), as kWait bounds
// one wait.
constexpr auto kServeLimit = std::chrono::seconds(120);
// Each connection's slot in the server's buffers.
constexpr uint32_t kSlot = 64;

// The threads of this process now.
size_t ThreadCount() {
  size_t n = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator("/proc/self/task")) ++n;
  return n;
}

// `base` scaled by $RKV_TEST_SCALE (a positive float; 1 when unset).
int Scaled(int base) {
  const char* env = std::getenv("RKV_TEST_SCALE");
  if (env == nullptr) return base;
  const double scale = std::atof(env);
  if (scale <= 0) return base;
  return std::max(1, static_cast<int>(base * scale));
}

// The message client `i` sends, and the server's reply to it.
std::string Ping(int i) { return "ping " + std::to_string(i); }
std::string Pong(int i) { return "pong " + std::to_string(i); }

std::string Text(const uint8_t* p, size_t n) { return std::string(reinterpret_cast<const char*>(p), n); }

class PollGroupTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    const std::string name = GetParam();
    StatusOr<std::unique_ptr<Transport>> server = MakeTransport(name, Options{});
    ASSERT_TRUE(server.ok()) << name << ": " << server.status();
    server_ = std::move(*server);
    StatusOr<std::unique_ptr<PollGroup>> group = server_->NewPollGroup();
    ASSERT_TRUE(group.ok()) << name << ": " << group.status();
    group_ = std::move(*group);
    StatusOr<std::unique_ptr<Transport>> client = MakeTransport(name, Options{});
    ASSERT_TRUE(client.ok()) << name << ": " << client.status();
    client_ = std::move(*client);
    if (BaseName(name) == "verbs") {
      const char* addr = std::getenv("RKV_RDMA_ADDR");
      ASSERT_NE(addr, nullptr) << "the verbs instance needs $RKV_RDMA_ADDR, an address of the RDMA device";
      host_ = addr;
    } else {
      host_ = "127.0.0.1";
    }
    StatusOr<std::unique_ptr<Listener>> listener = server_->Listen(host_ + ":0");
    ASSERT_TRUE(listener.ok()) << listener.status();
    listener_ = std::move(*listener);
  }

  // Server memory for `n` connections: a table the clients READ, a slot
  // each that its client WRITEs, a receive slot and a reply slot each.
  void MakeServerMemory(int n) {
    table_ = MakeBuffer(*server_, n * kSlot, kRemoteRead);
    for (size_t i = 0; i < table_.bytes.size(); ++i) table_.bytes[i] = static_cast<uint8_t>(i * 7 + i / kSlot);
    written_ = MakeBuffer(*server_, n * kSlot, kLocalWrite | kRemoteWrite);
    received_ = MakeBuffer(*server_, n * kSlot, kLocalWrite);
    replies_ = MakeBuffer(*server_, n * kSlot, 0);
    for (int i = 0; i < n; ++i) {
      const std::string pong = Pong(i);
      std::memcpy(replies_.bytes.data() + i * kSlot, pong.data(), pong.size());
    }
  }

  // Connects `n` clients (index i sends i as its private data) and accepts
  // each into `groups[i % groups.size()]` (chosen from that data), posting
  // its receive (wr_id i) first. Fills clients_[i] and servers_[i] (appended after those that
  // are there).
  void ConnectMany(int n, const std::vector<PollGroup*>& groups) {
    const int first = static_cast<int>(clients_.size());
    clients_.resize(first + n);
    servers_.resize(first + n);
    const int connectors = std::min(n, 4);
    std::vector<std::thread> threads;
    for (int t = 0; t < connectors; ++t) {
      threads.emplace_back([&, t] {
        for (int i = first + t; i < first + n; i += connectors) {
          const uint32_t index = static_cast<uint32_t>(i);
          uint8_t hello[4];
          std::memcpy(hello, &index, sizeof index);
          StatusOr<std::unique_ptr<Connection>> c = client_->Connect(listener_->address(), hello, kWait);
          if (!c.ok()) {
            ADD_FAILURE() << "client " << i << ": " << c.status();
            return;
          }
          clients_[i] = std::move(*c);
        }
      });
    }
    // Accepts on this thread; a failure stops accepting (the connectors
    // then time out) and is reported after they are joined.
    const auto index_of = [](std::span<const uint8_t> data) -> StatusOr<uint32_t> {
      uint32_t index = 0;
      if (data.size() < sizeof index) return Internal("no index in the private data");
      std::memcpy(&index, data.data(), sizeof index);
      return index;
    };
    const auto choose = [&](std::span<const uint8_t> data) -> PollGroup* {
      const StatusOr<uint32_t> index = index_of(data);
      return index.ok() ? groups[*index % groups.size()] : nullptr;
    };
    const auto accept_one = [&]() -> Status {
      RKV_ASSIGN_OR_RETURN(std::unique_ptr<Connection> c, listener_->Next(100ms, choose));
      if (c == nullptr) return Status::Ok();
      RKV_ASSIGN_OR_RETURN(const uint32_t index, index_of(c->peer_private_data()));
      if (index >= servers_.size()) return Internal("index out of range: " + std::to_string(index));
      PollGroup* const group = groups[index % groups.size()];
      RKV_RETURN_IF_ERROR(c->PostRecv(received_.At(index * kSlot, kSlot), index));
      RKV_RETURN_IF_ERROR(c->Accept({}));
      server_index_[c.get()] = static_cast<int>(index);
      group_of_[c.get()] = group;
      servers_[index] = std::move(c);
      return Status::Ok();
    };
    const auto deadline = Clock::now() + kServeLimit;
    Status accepting;
    for (int accepted = 0; accepted < n && accepting.ok() && Clock::now() < deadline;) {
      const size_t before = server_index_.size();
      accepting = accept_one();
      if (server_index_.size() > before) ++accepted;
    }
    EXPECT_TRUE(accepting.ok()) << accepting;
    for (std::thread& t : threads) t.join();
    for (int i = first; i < first + n; ++i) {
      ASSERT_NE(clients_[i], nullptr) << "client " << i;
      ASSERT_NE(servers_[i], nullptr) << "server side of " << i;
    }
  }

  // Client i's traffic, from the calling thread: a WRITE of its slot and a
  // SEND after it (which the server answers), and a READ of its table
  // slot; checks what came back.
  struct ClientMemory {
    Buffer out;  // [0, kSlot): WRITE source, [kSlot, 2 kSlot): the SEND
    Buffer in;   // [0, kSlot): the reply, [kSlot, 2 kSlot): the READ
  };
  ClientMemory MakeClientMemory(int i) {
    ClientMemory m{MakeBuffer(*client_, 2 * kSlot, 0), MakeBuffer(*client_, 2 * kSlot, kLocalWrite)};
    for (uint32_t b = 0; b < kSlot; ++b) m.out.bytes[b] = static_cast<uint8_t>(i + b);
    const std::string ping = Ping(i);
    std::memcpy(m.out.bytes.data() + kSlot, ping.data(), ping.size());
    return m;
  }
  void PostClientTraffic(int i, ClientMemory& m) {
    Connection& c = *clients_[i];
    ASSERT_TRUE(c.PostRecv(m.in.At(0, kSlot), 1000).ok());
    const std::string ping = Ping(i);
    ASSERT_TRUE(c.PostWriteSend(m.out.At(0, kSlot), written_.Remote(i * kSlot),
                                m.out.At(kSlot, static_cast<uint32_t>(ping.size())), 2000)
                    .ok());
    const ReadOp read{m.in.At(kSlot, kSlot), table_.Remote(i * kSlot), 3000, true};
    ASSERT_TRUE(c.PostReads({&read, 1}).ok());
  }
  void CheckClientTraffic(int i, ClientMemory& m) {
    Connection& c = *clients_[i];
    bool replied = false, sent = false, read = false;
    for (int k = 0; k < 3; ++k) {
      const Completion done = PollOne(c);
      ASSERT_TRUE(done.status.ok()) << "client " << i << ": " << done.status;
      if (done.op == OpType::kRecv) {
        replied = true;
        EXPECT_EQ(Text(m.in.bytes.data(), done.byte_len), Pong(i));
      } else if (done.op == OpType::kSend) {
        sent = true;
      } else if (done.op == OpType::kRead) {
        read = true;
        EXPECT_EQ(std::memcmp(m.in.bytes.data() + kSlot, table_.bytes.data() + i * kSlot, kSlot), 0)
            << "client " << i;
      }
    }
    EXPECT_TRUE(replied && sent && read) << "client " << i;
  }

  // Serves `groups` on this thread until `done()` (checked between waits):
  // every completion of a reported member goes to `handle`, and a member
  // is only ever reported by the group it was accepted into.
  void Serve(const std::vector<PollGroup*>& groups, const std::function<bool()>& done,
             const std::function<void(int, const Completion&)>& handle) {
    const auto deadline = Clock::now() + kServeLimit;
    Connection* ready[16];
    Completion out[8];
    while (!done()) {
      ASSERT_LT(Clock::now(), deadline) << "serving did not finish";
      for (PollGroup* g : groups) {
        StatusOr<size_t> n = g->Wait(ready, groups.size() > 1 ? 1ms : 100ms);
        ASSERT_TRUE(n.ok()) << n.status();
        for (size_t r = 0; r < *n; ++r) {
          ASSERT_TRUE(server_index_.contains(ready[r])) << "reported a connection that is no member";
          EXPECT_EQ(group_of_[ready[r]], g) << "reported by a group it was not handed to";
          StatusOr<size_t> got = ready[r]->Poll(out, 0us);
          ASSERT_TRUE(got.ok()) << got.status();
          for (size_t k = 0; k < *got; ++k) handle(server_index_[ready[r]], out[k]);
        }
      }
    }
  }

  // The server's part of every client's traffic: checks the SEND and the
  // WRITE before it, and replies. Returns a handler for Serve that counts
  // finished connections (reply sent) in `*replied`.
  std::function<void(int, const Completion&)> Replier(std::atomic<int>* replied) {
    return [this, replied](int i, const Completion& c) {
      ASSERT_TRUE(c.status.ok()) << "server side of " << i << ": " << c.status;
      if (c.op == OpType::kRecv) {
        EXPECT_EQ(c.wr_id, static_cast<uint64_t>(i));
        EXPECT_EQ(Text(received_.bytes.data() + i * kSlot, c.byte_len), Ping(i));
        for (uint32_t b = 0; b < kSlot; ++b) {
          ASSERT_EQ(written_.bytes[i * kSlot + b], static_cast<uint8_t>(i + b)) << "the WRITE before SEND " << i;
        }
        const Status posted =
            servers_[i]->PostSend(replies_.At(i * kSlot, static_cast<uint32_t>(Pong(i).size())), 100 + i);
        ASSERT_TRUE(posted.ok()) << posted;
      } else if (c.op == OpType::kSend) {
        EXPECT_EQ(c.wr_id, static_cast<uint64_t>(100 + i));
        replied->fetch_add(1);
      }
    };
  }

  // Runs every client's traffic (on a thread of their own) while this
  // thread serves `groups`.
  void RoundTrips(int first, int n, const std::vector<PollGroup*>& groups) {
    std::atomic<int> replied{0};
    std::atomic<bool> clients_done{false};
    std::thread clients([&] {
      std::vector<ClientMemory> memory;
      memory.reserve(n);
      for (int i = first; i < first + n; ++i) {
        memory.push_back(MakeClientMemory(i));
        PostClientTraffic(i, memory.back());
      }
      for (int i = first; i < first + n; ++i) CheckClientTraffic(i, memory[i - first]);
      clients_done.store(true);
    });
    Serve(groups, [&] { return clients_done.load() && replied.load() == n; }, Replier(&replied));
    if (HasFailure()) {
      // Unblocks the client thread's polls.
      for (auto& s : servers_) {
        if (s != nullptr) s->Disconnect();
      }
    }
    clients.join();
  }

  std::string host_;
  std::unique_ptr<Transport> server_;
  std::unique_ptr<Transport> client_;
  std::unique_ptr<Listener> listener_;
  // Declared before the connections: members are destroyed first.
  std::unique_ptr<PollGroup> group_;
  std::unique_ptr<PollGroup> second_group_;
  Buffer table_, written_, received_, replies_;
  std::map<Connection*, int> server_index_;
  std::map<Connection*, PollGroup*> group_of_;
  std::vector<std::unique_ptr<Connection>> clients_;
  std::vector<std::unique_ptr<Connection>> servers_;
};

std::string TestName(const ::testing::TestParamInfo<std::string>& info) { return NamePart(info.param); }

INSTANTIATE_TEST_SUITE_P(Transports, PollGroupTest, ::testing::ValuesIn(TransportsUnderTest()), TestName);

TEST_P(PollGroupTest, ManyConnectionsAreServedThroughWaitAndPollAlone) {
  constexpr int kConnections = 64;
  MakeServerMemory(kConnections);
  ConnectMany(kConnections, {group_.get()});
  ASSERT_FALSE(HasFatalFailure());
  EXPECT_EQ(group_->size(), static_cast<size_t>(kConnections));
  RoundTrips(0, kConnections, {group_.get()});
}

TEST_P(PollGroupTest, AMemberIsReportedAgainWhileItHoldsCompletions) {
  MakeServerMemory(1);
  ConnectMany(1, {group_.get()});
  ASSERT_FALSE(HasFatalFailure());
  // Two more receives, so that three SENDs complete at the server.
  ASSERT_TRUE(servers_[0]->PostRecv(received_.At(0, kSlot), 0).ok());
  ASSERT_TRUE(servers_[0]->PostRecv(received_.At(0, kSlot), 0).ok());
  Buffer msg = MakeBuffer(*client_, 8, 0, 'x');
  std::atomic<bool> acked{false};
  std::thread client([&] {
    // One at a time: the second SEND is served while the member already
    // holds the first one's completion (its Waits return at once).
    for (int k = 0; k < 3; ++k) {
      ASSERT_TRUE(clients_[0]->PostSend(msg.At(0, 8), k).ok());
      ASSERT_TRUE(PollOne(*clients_[0]).status.ok());
    }
    acked.store(true);
  });
  // The acknowledgements come once the server took the SENDs, which it
  // does only in Wait; nothing is polled meanwhile.
  Connection* ready[4];
  const auto deadline = Clock::now() + kWait;
  while (!acked.load() && Clock::now() < deadline) ASSERT_TRUE(group_->Wait(ready, 10ms).ok());
  client.join();
  ASSERT_TRUE(acked.load());
  for (int k = 0; k < 3; ++k) {
    StatusOr<size_t> n = group_->Wait(ready, kWait);
    ASSERT_TRUE(n.ok()) << n.status();
    ASSERT_EQ(*n, 1u) << "round " << k << ": a member holding completions is reported";
    EXPECT_EQ(ready[0], servers_[0].get());
    // Reported again by the next Wait: nothing was polled in between.
    n = group_->Wait(ready, kWait);
    ASSERT_TRUE(n.ok() && *n == 1u && ready[0] == servers_[0].get()) << "round " << k;
    Completion one[1];
    StatusOr<size_t> got = ready[0]->Poll(one, kWait);
    ASSERT_TRUE(got.ok()) << got.status();
    ASSERT_EQ(*got, 1u);
    EXPECT_EQ(one[0].op, OpType::kRecv);
  }
  // Polled empty: no longer reported.
  StatusOr<size_t> n = group_->Wait(ready, 20ms);
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(*n, 0u);
}

// A round's replies, held (HoldSends) and released together: each member's
// peer receives every one of them, in the order they were posted, and the
// server gets each send's completion, whatever the transport does with the
// hold.
TEST_P(PollGroupTest, SendsHeldForARoundReachEachPeerInOrder) {
  constexpr int kMembers = 3;
  constexpr int kSends = 5;
  MakeServerMemory(kMembers);
  ConnectMany(kMembers, {group_.get()});
  ASSERT_FALSE(HasFatalFailure());
  Buffer held = MakeBuffer(*server_, kMembers * kSends * kSlot, 0);
  for (int i = 0; i < kMembers; ++i) {
    for (int k = 0; k < kSends; ++k) {
      const std::string text = "held " + std::to_string(i) + "/" + std::to_string(k);
      std::memcpy(held.bytes.data() + (i * kSends + k) * kSlot, text.data(), text.size());
    }
  }
  std::vector<Buffer> inboxes;
  for (int i = 0; i < kMembers; ++i) {
    inboxes.push_back(MakeBuffer(*client_, kSends * kSlot, kLocalWrite));
    for (int k = 0; k < kSends; ++k) {
      ASSERT_TRUE(clients_[i]->PostRecv(inboxes[i].At(k * kSlot, kSlot), static_cast<uint64_t>(k)).ok());
    }
  }
  // The group's thread (this one, outside Wait) posts the round.
  group_->HoldSends();
  for (int k = 0; k < kSends; ++k) {
    for (int i = 0; i < kMembers; ++i) {
      const std::string text = "held " + std::to_string(i) + "/" + std::to_string(k);
      ASSERT_TRUE(servers_[i]
                      ->PostSend(held.At((i * kSends + k) * kSlot, static_cast<uint32_t>(text.size())),
                                 static_cast<uint64_t>(100 + k))
                      .ok());
    }
  }
  group_->ReleaseSends();
  std::atomic<int> clients_done{0};
  std::vector<std::thread> readers;
  for (int i = 0; i < kMembers; ++i) {
    readers.emplace_back([&, i] {
      for (int k = 0; k < kSends; ++k) {
        const Completion c = PollOne(*clients_[i]);
        ASSERT_TRUE(c.status.ok()) << c.status;
        ASSERT_EQ(c.wr_id, static_cast<uint64_t>(k)) << "member " << i << ": out of order";
        const std::string text = "held " + std::to_string(i) + "/" + std::to_string(k);
        EXPECT_EQ(Text(inboxes[i].bytes.data() + k * kSlot, c.byte_len), text);
      }
      clients_done.fetch_add(1);
    });
  }
  // The sends' completions, through Wait and Poll alone.
  std::map<Connection*, int> completed;
  int total = 0;
  Connection* ready[kMembers];
  Completion out[8];
  const auto deadline = Clock::now() + kWait;
  while ((total < kMembers * kSends || clients_done.load() < kMembers) && Clock::now() < deadline) {
    StatusOr<size_t> n = group_->Wait(ready, 10ms);
    ASSERT_TRUE(n.ok()) << n.status();
    for (size_t r = 0; r < *n; ++r) {
      StatusOr<size_t> got = ready[r]->Poll(out, 0us);
      ASSERT_TRUE(got.ok()) << got.status();
      for (size_t j = 0; j < *got; ++j) {
        ASSERT_TRUE(out[j].status.ok()) << out[j].status;
        ASSERT_EQ(out[j].op, OpType::kSend);
        EXPECT_EQ(out[j].wr_id, static_cast<uint64_t>(100 + completed[ready[r]])) << "completions in order";
        ++completed[ready[r]];
        ++total;
      }
    }
  }
  for (std::thread& t : readers) t.join();
  EXPECT_EQ(total, kMembers * kSends);
  EXPECT_EQ(clients_done.load(), kMembers);
}

TEST_P(PollGroupTest, WaitTimesOutEmptyWithNoTraffic) {
  Connection* ready[4];
  StatusOr<size_t> n = group_->Wait(ready, 20ms);
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(*n, 0u) << "no members";
  MakeServerMemory(2);
  ConnectMany(2, {group_.get()});
  ASSERT_FALSE(HasFatalFailure());
  for (int k = 0; k < 3; ++k) {
    n = group_->Wait(ready, 20ms);
    ASSERT_TRUE(n.ok()) << n.status();
    EXPECT_EQ(*n, 0u) << "idle members";
  }
  // A Poll of an idle member returns nothing, at once.
  Completion out[4];
  StatusOr<size_t> got = servers_[0]->Poll(out, kWait);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, 0u);
  EXPECT_EQ(group_->size(), 2u);
}

TEST_P(PollGroupTest, WakeEndsAWaitFromAnotherThread) {
  MakeServerMemory(1);
  ConnectMany(1, {group_.get()});
  ASSERT_FALSE(HasFatalFailure());
  Connection* ready[4];
  std::atomic<bool> returned{false};
  std::thread waker([&] {
    // Wakes until the Wait returned: a Wake before the Wait began is
    // spent by that Wait. The sleep paces the Wakes; it waits for nothing.
    while (!returned.load()) {
      group_->Wake();
      std::this_thread::sleep_for(5ms);
    }
  });
  StatusOr<size_t> n = group_->Wait(ready, std::chrono::hours(1));
  returned.store(true);
  waker.join();
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(*n, 0u);
  // A Wake with no Wait running ends the next one.
  group_->Wake();
  n = group_->Wait(ready, std::chrono::hours(1));
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(*n, 0u);
}

TEST_P(PollGroupTest, APeerThatLeavesMakesItsMemberReportedAndFailing) {
  MakeServerMemory(2);
  ConnectMany(2, {group_.get()});
  ASSERT_FALSE(HasFatalFailure());
  clients_[1].reset();
  Connection* ready[4];
  Completion out[4];
  Status failed;
  const auto deadline = Clock::now() + kWait;
  while (failed.ok() && Clock::now() < deadline) {
    StatusOr<size_t> n = group_->Wait(ready, 100ms);
    ASSERT_TRUE(n.ok()) << n.status();
    for (size_t r = 0; r < *n; ++r) {
      ASSERT_EQ(ready[r], servers_[1].get()) << "only the member whose peer left";
      StatusOr<size_t> got = ready[r]->Poll(out, 0us);
      // Its posted receive is flushed first, then the failure shows.
      if (got.ok()) {
        for (size_t k = 0; k < *got; ++k) EXPECT_FALSE(out[k].status.ok());
      } else {
        failed = got.status();
      }
    }
  }
  EXPECT_EQ(failed.code(), StatusCode::kUnavailable) << failed;
  // Still a member until destroyed; the other one is untouched.
  EXPECT_EQ(group_->size(), 2u);
  StatusOr<size_t> got = servers_[0]->Poll(out, 0us);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, 0u);
}

TEST_P(PollGroupTest, AMemberDestroyedOnTheGroupThreadIsNeverReportedAgain) {
  MakeServerMemory(2);
  ConnectMany(2, {group_.get()});
  ASSERT_FALSE(HasFatalFailure());
  Buffer msg = MakeBuffer(*client_, 8, 0, 'x');
  // Member 0 gets a completion and is reported, then destroyed unpolled.
  ASSERT_TRUE(clients_[0]->PostSend(msg.At(0, 8), 1).ok());
  Connection* ready[4];
  Connection* const gone = servers_[0].get();
  bool reported = false;
  const auto deadline = Clock::now() + kWait;
  while (!reported && Clock::now() < deadline) {
    StatusOr<size_t> n = group_->Wait(ready, 100ms);
    ASSERT_TRUE(n.ok()) << n.status();
    reported = *n == 1 && ready[0] == gone;
  }
  ASSERT_TRUE(reported);
  servers_[0].reset();
  EXPECT_EQ(group_->size(), 1u);
  // Its peer keeps sending (into a closed connection) while member 1
  // takes a SEND: only member 1 is ever reported.
  clients_[0]->PostSend(msg.At(0, 8), 2).IgnoreError();
  ASSERT_TRUE(clients_[1]->PostSend(msg.At(0, 8), 3).ok());
  bool served = false;
  Completion out[4];
  while (!served && Clock::now() < deadline) {
    StatusOr<size_t> n = group_->Wait(ready, 100ms);
    ASSERT_TRUE(n.ok()) << n.status();
    for (size_t r = 0; r < *n; ++r) {
      ASSERT_EQ(ready[r], servers_[1].get());
      StatusOr<size_t> got = ready[r]->Poll(out, 0us);
      ASSERT_TRUE(got.ok()) << got.status();
      served = served || *got > 0;
    }
  }
  EXPECT_TRUE(served);
  for (int k = 0; k < 3; ++k) {
    StatusOr<size_t> n = group_->Wait(ready, 10ms);
    ASSERT_TRUE(n.ok()) << n.status();
    EXPECT_EQ(*n, 0u);
  }
}

TEST_P(PollGroupTest, TwoGroupsOnOneListenerServeTheConnectionsTheyWereHanded) {
  StatusOr<std::unique_ptr<PollGroup>> second = server_->NewPollGroup();
  ASSERT_TRUE(second.ok()) << second.status();
  second_group_ = std::move(*second);
  constexpr int kConnections = 8;
  MakeServerMemory(kConnections);
  // Serve checks that each member is reported by its own group only.
  ConnectMany(kConnections, {group_.get(), second_group_.get()});
  ASSERT_FALSE(HasFatalFailure());
  EXPECT_EQ(group_->size(), kConnections / 2u);
  EXPECT_EQ(second_group_->size(), kConnections / 2u);
  RoundTrips(0, kConnections, {group_.get(), second_group_.get()});
}

TEST_P(PollGroupTest, AThousandConnectionsNeedNoServerThreads) {
  int connections = Scaled(1000);
  // Each connection takes descriptors at both ends (a socket, and on tcp
  // an eventfd): raise the soft limit as far as allowed.
  rlimit limit{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &limit), 0);
  limit.rlim_cur = limit.rlim_max;
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &limit), 0);
  constexpr rlim_t kPerConnection = 4;
  constexpr rlim_t kSpare = 128;
  if (limit.rlim_cur != RLIM_INFINITY && limit.rlim_cur < kSpare + kPerConnection * connections) {
    const int fit = static_cast<int>((limit.rlim_cur - std::min(limit.rlim_cur, kSpare)) / kPerConnection);
    ASSERT_GT(fit, 0) << "too few descriptors allowed: " << limit.rlim_cur;
    GTEST_LOG_(INFO) << "RLIMIT_NOFILE " << limit.rlim_cur << " allows " << fit << " connections, not "
                     << connections;
    connections = fit;
  }
  MakeServerMemory(connections);
  const size_t threads_before = ThreadCount();
  ConnectMany(connections, {group_.get()});
  ASSERT_FALSE(HasFatalFailure());
  EXPECT_EQ(group_->size(), static_cast<size_t>(connections));
  // The client side of a connection may run a thread of its own (tcp's
  // reader); the server side adds none, whatever the count.
  constexpr size_t kSlack = 4;
  EXPECT_LE(ThreadCount(), threads_before + connections + kSlack);
  RoundTrips(0, connections, {group_.get()});
  EXPECT_LE(ThreadCount(), threads_before + connections + kSlack);
}

}  // namespace
}  // namespace rkv::transport
