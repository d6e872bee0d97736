// The memcached sessions on a real rkv-server: what each command does to
// the keys and what it answers, driven through Session::Serve as the event
// loop drives it (no sockets).
#include "gateway/memcache_session.h"

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "gateway/memcache_item.h"
#include "rkv/client.h"
#include "tests/gateway_process.h"

namespace rkv::gateway {
namespace {

using rkv::testing::GatewayBackend;

constexpr size_t kNoLimit = size_t{1} << 40;

// What a connection would have received and whether it was closed.
struct Conversation {
  std::string out;
  bool closed = false;
};

// Plays the event loop: appends `in` (delivered `chunk` bytes at a time; 0:
// all at once) and calls Serve until it wants more input, writing the
// output away whenever it reaches `out_limit`.
Conversation Talk(Session& session, std::string_view in, size_t chunk = 0, size_t out_limit = kNoLimit) {
  Conversation c;
  std::string buffer;
  std::string pending;
  size_t delivered = 0;
  while (true) {
    const ServeResult r = session.Serve(buffer, &pending, out_limit);
    buffer.erase(0, r.consumed);
    if (r.close) {
      c.out += pending;
      c.closed = true;
      return c;
    }
    if (pending.size() >= out_limit) {  // the socket drains the output
      c.out += pending;
      pending.clear();
      continue;
    }
    if (delivered == in.size()) break;
    const size_t n = chunk == 0 ? in.size() : std::min(chunk, in.size() - delivered);
    buffer.append(in.substr(delivered, n));
    delivered += n;
  }
  c.out += pending;
  return c;
}

class MemcacheSessionTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    backend_ = new GatewayBackend("memcache-token");
    const Status s = backend_->Start();
    ASSERT_TRUE(s.ok()) << s;
    client_ = backend_->NewClient(/*connections=*/2).release();
  }
  static void TearDownTestSuite() {
    delete client_;
    delete backend_;
    client_ = nullptr;
    backend_ = nullptr;
  }

  void SetUp() override {
    ASSERT_NE(client_, nullptr);
    // Each test its own key prefix: the server is shared by the suite.
    prefix_ = std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()) + ":";
  }

  std::unique_ptr<Session> NewSession(bool allow_flush = false, MemcacheShared* shared = nullptr) {
    MemcacheOptions options;
    options.limits.max_key_bytes = client_->max_key_bytes();
    options.limits.max_value_bytes = client_->max_value_bytes();
    options.allow_flush = allow_flush;
    options.shared = shared != nullptr ? shared : &shared_;
    return NewMemcacheSession(client_, options);
  }

  // One conversation on a new session; returns what it answered.
  std::string Say(std::string_view in) {
    auto session = NewSession();
    return Talk(*session, in).out;
  }

  std::string K(std::string_view name) const { return prefix_ + std::string(name); }

  static inline GatewayBackend* backend_ = nullptr;
  static inline Client* client_ = nullptr;
  MemcacheShared shared_;
  std::string prefix_;
};

TEST_F(MemcacheSessionTest, SetGetKeepsFlagsAndBinaryData) {
  const std::string k = K("a");
  const std::string data("x\r\ny\0z", 6);
  EXPECT_EQ(Say("set " + k + " 4294967295 0 6\r\n" + data + "\r\nget " + k + "\r\n"),
            "STORED\r\nVALUE " + k + " 4294967295 6\r\n" + data + "\r\nEND\r\n");
  EXPECT_EQ(Say("get " + K("missing") + " " + k + "\r\n"), "VALUE " + k + " 4294967295 6\r\n" + data + "\r\nEND\r\n");
  // gets: the cas unique is rkv's version.
  auto v = client_->GetVersioned(k);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(Say("gets " + k + "\r\n"),
            "VALUE " + k + " 4294967295 6 " + std::to_string(v->version) + "\r\n" + data + "\r\nEND\r\n");
  // The stored value is the item encoding.
  auto item = DecodeItem(v->value);
  ASSERT_TRUE(item.has_value());
  EXPECT_EQ(item->flags, 4294967295u);
  EXPECT_EQ(item->data, data);
}

TEST_F(MemcacheSessionTest, AddReplaceAppendPrepend) {
  const std::string k = K("k");
  EXPECT_EQ(Say("replace " + k + " 0 0 1\r\nx\r\n"), "NOT_STORED\r\n");
  EXPECT_EQ(Say("append " + k + " 0 0 1\r\nx\r\n"), "NOT_STORED\r\n");
  EXPECT_EQ(Say("prepend " + k + " 0 0 1\r\nx\r\n"), "NOT_STORED\r\n");
  EXPECT_EQ(Say("add " + k + " 5 0 1\r\nx\r\n"), "STORED\r\n");
  EXPECT_EQ(Say("add " + k + " 0 0 1\r\ny\r\n"), "NOT_STORED\r\n");
  // append/prepend keep the flags (5), whatever the command says.
  EXPECT_EQ(Say("append " + k + " 9 0 2\r\nzz\r\nprepend " + k + " 9 0 2\r\nqq\r\nget " + k + "\r\n"),
            "STORED\r\nSTORED\r\nVALUE " + k + " 5 5\r\nqqxzz\r\nEND\r\n");
  EXPECT_EQ(Say("replace " + k + " 7 0 3\r\nnew\r\nget " + k + "\r\n"),
            "STORED\r\nVALUE " + k + " 7 3\r\nnew\r\nEND\r\n");
}

TEST_F(MemcacheSessionTest, Cas) {
  const std::string k = K("c");
  EXPECT_EQ(Say("cas " + k + " 0 0 1 1\r\nx\r\n"), "NOT_FOUND\r\n");
  EXPECT_EQ(Say("set " + k + " 0 0 1\r\nx\r\n"), "STORED\r\n");
  auto v = client_->GetVersioned(k);
  ASSERT_TRUE(v.ok());
  const std::string unique = std::to_string(v->version);
  EXPECT_EQ(Say("cas " + k + " 0 0 1 " + std::to_string(v->version + 1) + "\r\ny\r\n"), "EXISTS\r\n");
  EXPECT_EQ(Say("cas " + k + " 3 0 1 " + unique + "\r\ny\r\n"), "STORED\r\n");
  EXPECT_EQ(Say("cas " + k + " 3 0 1 " + unique + "\r\nz\r\n"), "EXISTS\r\n");
  EXPECT_EQ(Say("get " + k + "\r\n"), "VALUE " + k + " 3 1\r\ny\r\nEND\r\n");
  EXPECT_EQ(Say("cas " + k + " 3 0 1 0 noreply\r\nz\r\n"), "");
}

TEST_F(MemcacheSessionTest, IncrDecr) {
  const std::string k = K("n");
  EXPECT_EQ(Say("incr " + k + " 1\r\ndecr " + k + " 1\r\n"), "NOT_FOUND\r\nNOT_FOUND\r\n");
  EXPECT_EQ(Say("set " + k + " 7 0 4\r\n1000\r\ndecr " + k + " 1\r\nget " + k + "\r\n"),
            "STORED\r\n999\r\nVALUE " + k + " 7 4\r\n999 \r\nEND\r\n");
  EXPECT_EQ(Say("decr " + k + " 5000\r\nincr " + k + " 18446744073709551615\r\nincr " + k + " 1\r\n"),
            "0\r\n18446744073709551615\r\n0\r\n");
  EXPECT_EQ(Say("set " + k + " 0 0 2\r\n99\r\nincr " + k + " 1\r\nincr " + k + " 1 noreply\r\nget " + k + "\r\n"),
            "STORED\r\n100\r\nVALUE " + k + " 0 3\r\n101\r\nEND\r\n");
  EXPECT_EQ(Say("set " + k + " 0 0 3\r\nabc\r\nincr " + k + " 1\r\n"),
            "STORED\r\nCLIENT_ERROR cannot increment or decrement non-numeric value\r\n");
  EXPECT_EQ(Say("incr " + k + " x\r\n"), "CLIENT_ERROR invalid numeric delta argument\r\n");
}

TEST_F(MemcacheSessionTest, ConcurrentIncrementsLoseNothing) {
  const std::string k = K("counter");
  ASSERT_EQ(Say("set " + k + " 0 0 1\r\n0\r\n"), "STORED\r\n");
  constexpr int kThreads = 3;
  constexpr int kEach = 50;
  std::vector<std::thread> threads;
  std::string line;
  for (int i = 0; i < kEach; ++i) line += "incr " + k + " 1 noreply\r\n";
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      auto session = NewSession();
      Talk(*session, line);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(Say("get " + k + "\r\n"), "VALUE " + k + " 0 3\r\n150\r\nEND\r\n");
}

TEST_F(MemcacheSessionTest, Delete) {
  const std::string k = K("d");
  EXPECT_EQ(Say("set " + k + " 0 0 1\r\nx\r\ndelete " + k + "\r\ndelete " + k + "\r\nget " + k + "\r\n"),
            "STORED\r\nDELETED\r\nNOT_FOUND\r\nEND\r\n");
  EXPECT_EQ(Say("set " + k + " 0 0 1 noreply\r\nx\r\ndelete " + k + " noreply\r\nget " + k + "\r\n"), "END\r\n");
}

TEST_F(MemcacheSessionTest, ExpiryTouchGat) {
  const std::string k = K("e");
  // A negative exptime stores an item that is already gone.
  EXPECT_EQ(Say("set " + k + " 0 -1 1\r\nx\r\nget " + k + "\r\n"), "STORED\r\nEND\r\n");
  // A relative exptime becomes rkv's expiry.
  EXPECT_EQ(Say("set " + k + " 0 1000 1\r\nx\r\n"), "STORED\r\n");
  auto v = client_->GetVersioned(k);
  ASSERT_TRUE(v.ok());
  const int64_t now = Client::NowUnixMs();
  EXPECT_GT(v->expires_at_unix_ms, now + 900'000);
  EXPECT_LE(v->expires_at_unix_ms, now + 1'000'000);
  // touch and gat keep the value and set the expiry (0: none).
  EXPECT_EQ(Say("touch " + k + " 0\r\n"), "TOUCHED\r\n");
  v = client_->GetVersioned(k);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->expires_at_unix_ms, kNoExpiry);
  EXPECT_EQ(Say("touch " + K("none") + " 10\r\n"), "NOT_FOUND\r\n");
  EXPECT_EQ(Say("gat 2000 " + k + " " + K("none") + "\r\n"), "VALUE " + k + " 0 1\r\nx\r\nEND\r\n");
  v = client_->GetVersioned(k);
  ASSERT_TRUE(v.ok());
  EXPECT_GT(v->expires_at_unix_ms, Client::NowUnixMs() + 1'000'000);
  // gats answers the version its touch wrote (the next cas needs it).
  const std::string gats = Say("gats 0 " + k + "\r\n");
  v = client_->GetVersioned(k);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(gats, "VALUE " + k + " 0 1 " + std::to_string(v->version) + "\r\nx\r\nEND\r\n");
  // gat with a negative exptime answers the value, then it is gone.
  EXPECT_EQ(Say("gat -1 " + k + "\r\nget " + k + "\r\n"), "VALUE " + k + " 0 1\r\nx\r\nEND\r\nEND\r\n");
  EXPECT_EQ(Say("set " + k + " 0 0 1\r\nx\r\ntouch " + k + " -1\r\nget " + k + "\r\n"),
            "STORED\r\nTOUCHED\r\nEND\r\n");
}

TEST_F(MemcacheSessionTest, TooLargeIsRefusedAndSwallowed) {
  const std::string k = K("big");
  const size_t max = client_->max_value_bytes() - kItemHeaderBytes;
  const std::string fits(max, 'f');
  EXPECT_EQ(Say("set " + k + " 0 0 " + std::to_string(max) + "\r\n" + fits + "\r\n"), "STORED\r\n");
  const std::string big(max + 1, 'y');
  // The block is swallowed, even delivered in pieces; a failed set removes
  // the old item (memcached's rule), a failed add does not.
  auto session = NewSession();
  EXPECT_EQ(Talk(*session, "add " + k + " 0 0 " + std::to_string(max + 1) + "\r\n" + big + "\r\nget " + k + "\r\n", 4096)
                .out.substr(0, 80),
            ("SERVER_ERROR object too large for cache\r\nVALUE " + k + " 0 " + std::to_string(max) + "\r\nfff")
                .substr(0, 80));
  EXPECT_EQ(Talk(*session, "set " + k + " 0 0 " + std::to_string(max + 1) + "\r\n" + big + "\r\nget " + k + "\r\n", 4096)
                .out,
            "SERVER_ERROR object too large for cache\r\nEND\r\n");
  // A block announced as 2 GB is swallowed as it comes, not buffered.
  auto s2 = NewSession();
  std::string out;
  ServeResult r = s2->Serve("set " + k + " 0 0 2000000000 noreply\r\n", &out, kNoLimit);
  EXPECT_EQ(out, "");
  const std::string chunk(1 << 20, 'z');
  r = s2->Serve(chunk, &out, kNoLimit);
  EXPECT_EQ(r.consumed, chunk.size());
  // append beyond the limit: NOT_STORED, as memcached answers it.
  EXPECT_EQ(Say("set " + k + " 0 0 " + std::to_string(max) + "\r\n" + fits + "\r\nappend " + k + " 0 0 1\r\nx\r\n"),
            "STORED\r\nNOT_STORED\r\n");
}

TEST_F(MemcacheSessionTest, ValuesNotWrittenAsItemsReadAsAbsent) {
  const std::string k = K("foreign");
  ASSERT_TRUE(client_->Put(k, "plain value").ok());
  EXPECT_EQ(Say("get " + k + "\r\nincr " + k + " 1\r\nreplace " + k + " 0 0 1\r\nx\r\ndelete " + k + "\r\n"),
            "END\r\nNOT_FOUND\r\nNOT_STORED\r\nNOT_FOUND\r\n");
  // add takes the key, as it would an absent one.
  EXPECT_EQ(Say("add " + k + " 0 0 1\r\nx\r\nget " + k + "\r\n"), "STORED\r\nVALUE " + k + " 0 1\r\nx\r\nEND\r\n");
}

TEST_F(MemcacheSessionTest, FlushAll) {
  const std::string a = K("a");
  const std::string b = K("b");
  EXPECT_EQ(Say("flush_all\r\n"), "SERVER_ERROR flush_all is disabled (start rkv-gateway with --allow_flush)\r\n");
  auto session = NewSession(/*allow_flush=*/true);
  EXPECT_EQ(Talk(*session, "set " + a + " 0 0 1\r\nx\r\nset " + b + " 0 0 1\r\ny\r\nflush_all\r\nget " + a + " " + b +
                               "\r\nset " + b + " 0 0 1\r\nz\r\nget " + a + " " + b + "\r\nadd " + a +
                               " 0 0 1\r\nw\r\nincr " + a + " 1\r\n")
                .out,
            "STORED\r\nSTORED\r\nOK\r\nEND\r\nSTORED\r\nVALUE " + b + " 0 1\r\nz\r\nEND\r\nSTORED\r\n"
            "CLIENT_ERROR cannot increment or decrement non-numeric value\r\n");
  // Another gateway (its own shared state) sees the flush once it reads
  // the flush time again (at most a second later).
  EXPECT_EQ(Talk(*session, "set " + a + " 0 0 1\r\nq\r\n").out, "STORED\r\n");
  MemcacheShared other;
  auto remote = NewSession(/*allow_flush=*/false, &other);
  EXPECT_EQ(Talk(*remote, "get " + a + "\r\n").out, "VALUE " + a + " 0 1\r\nq\r\nEND\r\n");
  EXPECT_EQ(Talk(*session, "flush_all noreply\r\n").out, "");
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  std::string seen;
  while (std::chrono::steady_clock::now() < deadline) {
    seen = Talk(*remote, "get " + a + "\r\n").out;
    if (seen == "END\r\n") break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_EQ(seen, "END\r\n");
  // A delayed flush leaves the items until its time.
  EXPECT_EQ(Talk(*session, "set " + a + " 0 0 1\r\nx\r\nflush_all 3600\r\nget " + a + "\r\n").out,
            "STORED\r\nOK\r\nVALUE " + a + " 0 1\r\nx\r\nEND\r\n");
}

TEST_F(MemcacheSessionTest, BackPressureSplitsALongMultiGet) {
  std::string sets;
  std::string get = "get";
  const std::string value(1000, 'v');
  for (int i = 0; i < 300; ++i) {
    const std::string k = K("k" + std::to_string(i));
    sets += "set " + k + " " + std::to_string(i) + " 0 1000 noreply\r\n" + value + "\r\n";
    get += " " + k;
  }
  get += "\r\n";
  ASSERT_EQ(Say(sets), "");
  const std::string whole = Say(get + get);
  EXPECT_EQ(whole.size(), 2 * (300 * (1000 + 2) + 5 + [&] {
                            size_t n = 0;
                            for (int i = 0; i < 300; ++i) {
                              n += ("VALUE " + K("k" + std::to_string(i)) + " " + std::to_string(i) + " 1000\r\n")
                                       .size();
                            }
                            return n;
                          }()));
  // With a 4 KiB output limit Serve stops between batches and between
  // requests; the answer is the same.
  auto session = NewSession();
  std::string out;
  const std::string in = get + get;
  ServeResult r = session->Serve(in, &out, 4096);
  EXPECT_EQ(r.consumed, 0u);
  EXPECT_GE(out.size(), 4096u);
  EXPECT_LT(out.size(), whole.size() / 2);
  // The loop calls again with the same input once it wrote the output.
  std::string rest = out;
  std::string_view left = in;
  while (!left.empty()) {
    out.clear();
    r = session->Serve(left, &out, 4096);
    left.remove_prefix(r.consumed);
    rest += out;
    ASSERT_FALSE(r.close);
  }
  EXPECT_EQ(rest, whole);
  auto fresh = NewSession();
  EXPECT_EQ(Talk(*fresh, in, 0, 4096).out, whole);
}

TEST_F(MemcacheSessionTest, PipelineSplitAtEveryByteAnswersTheSame) {
  const std::string k = K("p");
  const std::string in = "set " + k + " 1 0 3\r\nabc\r\nget " + k + "\r\nappend " + k + " 0 0 2\r\nde\r\nincr " + k +
                         " 1\r\ndelete " + k + "\r\nbogus\r\nset " + k + " 0 0 1\r\nxx\r\nversion\r\n";
  const std::string whole = Say(in);
  EXPECT_EQ(whole,
            "STORED\r\nVALUE " + k + " 1 3\r\nabc\r\nEND\r\nSTORED\r\n"
            "CLIENT_ERROR cannot increment or decrement non-numeric value\r\nDELETED\r\nERROR\r\n"
            "CLIENT_ERROR bad data chunk\r\nERROR\r\nVERSION 1.6.18 rkv-gateway " +
                std::string(whole.substr(whole.rfind(' ') + 1)));
  for (size_t chunk = 1; chunk < 8; ++chunk) {
    auto session = NewSession();
    EXPECT_EQ(Talk(*session, in, chunk).out, whole) << chunk;
  }
}

TEST_F(MemcacheSessionTest, QuitAndLongLinesClose) {
  auto session = NewSession();
  Conversation c = Talk(*session, "version\r\nquit\r\nversion\r\n");
  EXPECT_TRUE(c.closed);
  EXPECT_EQ(c.out.substr(0, 8), "VERSION ");
  EXPECT_EQ(c.out.find("\r\n"), c.out.size() - 2);
  auto s2 = NewSession();
  c = Talk(*s2, std::string(3000, 'x'));
  EXPECT_TRUE(c.closed);
  EXPECT_EQ(c.out, "");
}

TEST_F(MemcacheSessionTest, StatsVersionVerbosity) {
  MemcacheShared shared;
  auto session = NewSession(false, &shared);
  const std::string k = K("s");
  Talk(*session, "set " + k + " 0 0 1\r\nx\r\nget " + k + " " + K("none") + "\r\n");
  const std::string stats = Talk(*session, "stats\r\n").out;
  EXPECT_NE(stats.find("STAT pid "), std::string::npos);
  EXPECT_NE(stats.find("STAT cmd_get 2\r\n"), std::string::npos) << stats;
  EXPECT_NE(stats.find("STAT get_hits 1\r\n"), std::string::npos) << stats;
  EXPECT_NE(stats.find("STAT get_misses 1\r\n"), std::string::npos) << stats;
  EXPECT_NE(stats.find("STAT cmd_set 1\r\n"), std::string::npos) << stats;
  EXPECT_NE(stats.find("STAT curr_connections 1\r\n"), std::string::npos) << stats;
  EXPECT_EQ(stats.substr(stats.size() - 5), "END\r\n");
  EXPECT_EQ(Talk(*session, "stats reset\r\nstats noreply\r\nverbosity 1\r\nverbosity 1 noreply\r\n").out,
            "RESET\r\nERROR\r\nOK\r\n");
  EXPECT_NE(Talk(*session, "stats\r\n").out.find("STAT cmd_get 0\r\n"), std::string::npos);
}

}  // namespace
}  // namespace rkv::gateway
