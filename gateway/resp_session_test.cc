// RESP sessions executing on a real rkv-server (started once for the
// suite): each command's replies as redis-server gives them, pipelines and
// batches, back-pressure inside Serve, AUTH, expiry, CAS increments from
// several threads. Sessions are driven through Serve, without sockets.
#include "gateway/resp_session.h"

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "gateway/rkv_round.h"
#include "rkv/client.h"
#include "tests/gateway_process.h"
#include "gateway/resp_test_util.h"

namespace rkv::gateway {
namespace {

using ::rkv::testing::GatewayBackend;

using testing::Multibulk;

class RespSessionTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    backend_ = new GatewayBackend("gateway-token");
    rkv::Status started = backend_->Start();
    ASSERT_TRUE(started.ok()) << started;
  }
  static void TearDownTestSuite() {
    delete backend_;
    backend_ = nullptr;
  }

  static std::unique_ptr<rkv::Client> NewClient() { return backend_->NewClient(); }

  void SetUp() override {
    client_ = NewClient();
    ASSERT_NE(client_, nullptr);
    options_.limits.max_key_bytes = client_->max_key_bytes();
    options_.limits.max_value_bytes = client_->max_value_bytes();
    options_.shared = &shared_;
    session_ = NewRespSession(client_.get(), options_);
    // A key prefix of its own per test: the server is shared.
    prefix_ = std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()) + ":";
  }

  std::string K(const std::string& name) const { return prefix_ + name; }

  // Serves `in` whole (the way the loop does: what is not consumed stays),
  // returns the replies.
  std::string Run(Session& session, const std::string& in, bool* closed = nullptr) {
    std::string out;
    size_t pos = 0;
    bool close = false;
    while (pos < in.size() && !close) {
      ServeResult r = session.Serve(std::string_view(in).substr(pos), &out, size_t{1} << 30);
      pos += r.consumed;
      close = r.close;
      if (r.consumed == 0 && !close) break;
    }
    if (closed != nullptr) *closed = close;
    return out;
  }
  std::string Cmd(const std::vector<std::string>& args) { return Run(*session_, Multibulk(args)); }
  // TTL of `key` lies in [low, high] (seconds go by on a loaded machine).
  void ExpectTtlWithin(const std::string& key, int64_t low, int64_t high) {
    std::string reply = Cmd({"TTL", key});
    ASSERT_EQ(reply[0], ':') << reply;
    int64_t ttl = std::stoll(reply.substr(1));
    EXPECT_GE(ttl, low) << key;
    EXPECT_LE(ttl, high) << key;
  }

  static inline GatewayBackend* backend_ = nullptr;
  std::unique_ptr<rkv::Client> client_;
  RespShared shared_;
  RespOptions options_;
  std::unique_ptr<Session> session_;
  std::string prefix_;
};

TEST_F(RespSessionTest, ConnectionCommandsAnswerAsRedis) {
  EXPECT_EQ(Cmd({"PING"}), "+PONG\r\n");
  EXPECT_EQ(Cmd({"ping", "hi"}), "$2\r\nhi\r\n");
  EXPECT_EQ(Cmd({"ECHO", "x y"}), "$3\r\nx y\r\n");
  EXPECT_EQ(Cmd({"SELECT", "0"}), "+OK\r\n");
  EXPECT_EQ(Cmd({"SELECT", "1"}), "-ERR DB index is out of range\r\n");
  EXPECT_EQ(Cmd({"SELECT", "x"}), "-ERR value is not an integer or out of range\r\n");
  EXPECT_EQ(Cmd({"HELLO", "3"}), "-NOPROTO unsupported protocol version\r\n");
  EXPECT_EQ(Cmd({"HELLO", "x"}), "-ERR Protocol version is not an integer or out of range\r\n");
  EXPECT_EQ(Cmd({"HELLO", "2"}).substr(0, 4), "*14\r");
  EXPECT_EQ(Cmd({"CLIENT", "SETNAME", "worker-1"}), "+OK\r\n");
  EXPECT_EQ(Cmd({"CLIENT", "GETNAME"}), "$8\r\nworker-1\r\n");
  EXPECT_EQ(Cmd({"CLIENT", "SETNAME", "a b"}),
            "-ERR Client names cannot contain spaces, newlines or special characters.\r\n");
  EXPECT_EQ(Cmd({"CLIENT", "NOPE"}), "-ERR unknown subcommand 'NOPE'. Try CLIENT HELP.\r\n");
  EXPECT_EQ(Cmd({"CLIENT", "ID"})[0], ':');
  EXPECT_EQ(Cmd({"COMMAND", "DOCS"}), "*0\r\n");
  EXPECT_EQ(Cmd({"COMMAND", "COUNT"})[0], ':');
  EXPECT_EQ(Cmd({"COMMAND", "INFO", "get"}).substr(0, 20), "*1\r\n*10\r\n$3\r\nget\r\n:2");
  EXPECT_EQ(Cmd({"LPUSH", "a", "b"}), "-ERR unknown command 'LPUSH', with args beginning with: 'a' 'b' \r\n");
  EXPECT_EQ(Cmd({"GET"}), "-ERR wrong number of arguments for 'get' command\r\n");
  EXPECT_EQ(Cmd({"SET", "k"}), "-ERR wrong number of arguments for 'set' command\r\n");
  EXPECT_EQ(Cmd({"MSET", "a", "1", "b"}), "-ERR wrong number of arguments for 'mset' command\r\n");
  EXPECT_EQ(Cmd({"KEYS", "*"}).substr(0, 70),
            "-ERR rkv-gateway does not support keyspace scans (KEYS/SCAN): rkv's ke");
  EXPECT_EQ(Cmd({"AUTH", "x"}),
            "-ERR AUTH <password> called without any password configured for the default user. Are you sure "
            "your configuration is correct?\r\n");
  std::string info = Cmd({"INFO"});
  EXPECT_NE(info.find("redis_version:"), std::string::npos);
  EXPECT_NE(info.find("loading:0"), std::string::npos);
  bool closed = false;
  EXPECT_EQ(Run(*session_, "QUIT\r\nPING\r\n", &closed), "+OK\r\n");
  EXPECT_TRUE(closed);
}

TEST_F(RespSessionTest, SetAndItsOptions) {
  EXPECT_EQ(Cmd({"SET", K("a"), "1"}), "+OK\r\n");
  EXPECT_EQ(Cmd({"GET", K("a")}), "$1\r\n1\r\n");
  EXPECT_EQ(Cmd({"GET", K("none")}), "$-1\r\n");
  EXPECT_EQ(Cmd({"SET", K("a"), "2", "NX"}), "$-1\r\n");
  EXPECT_EQ(Cmd({"SET", K("b"), "2", "XX"}), "$-1\r\n");
  EXPECT_EQ(Cmd({"SET", K("b"), "2", "NX"}), "+OK\r\n");
  EXPECT_EQ(Cmd({"SET", K("b"), "3", "XX", "GET"}), "$1\r\n2\r\n");
  EXPECT_EQ(Cmd({"SET", K("c"), "1", "GET"}), "$-1\r\n");
  EXPECT_EQ(Cmd({"SET", K("b"), "4", "NX", "GET"}), "$1\r\n3\r\n");
  EXPECT_EQ(Cmd({"GET", K("b")}), "$1\r\n3\r\n");
  EXPECT_EQ(Cmd({"SET", K("a"), "1", "NX", "XX"}), "-ERR syntax error\r\n");
  EXPECT_EQ(Cmd({"SET", K("a"), "1", "EX", "10", "PX", "100"}), "-ERR syntax error\r\n");
  EXPECT_EQ(Cmd({"SET", K("a"), "1", "EX"}), "-ERR syntax error\r\n");
  EXPECT_EQ(Cmd({"SET", K("a"), "1", "KEEPTTL", "EX", "5"}), "-ERR syntax error\r\n");
  EXPECT_EQ(Cmd({"SET", K("a"), "1", "EX", "x"}), "-ERR value is not an integer or out of range\r\n");
  EXPECT_EQ(Cmd({"SET", K("a"), "1", "EX", "0"}), "-ERR invalid expire time in 'set' command\r\n");
  EXPECT_EQ(Cmd({"SET", K("a"), "1", "EX", "-5"}), "-ERR invalid expire time in 'set' command\r\n");
  EXPECT_EQ(Cmd({"SET", K("a"), "1", "EX", "9223372036854775807"}), "-ERR invalid expire time in 'set' command\r\n");
  EXPECT_EQ(Cmd({"GETSET", K("a"), "9"}), "$1\r\n1\r\n");
  EXPECT_EQ(Cmd({"SETNX", K("a"), "x"}), ":0\r\n");
  EXPECT_EQ(Cmd({"SETNX", K("d"), "x"}), ":1\r\n");
  // A key of rkv's own: kvctl and librkv read what SET wrote.
  auto read = client_->Get(K("d"));
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read, "x");
}

TEST_F(RespSessionTest, KeysAndValuesBeyondRkvsLimitsWriteNothing) {
  std::string long_key(client_->max_key_bytes() + 1, 'k');
  EXPECT_EQ(Cmd({"SET", long_key, "v"}).substr(0, 12), "-ERR key of ");
  EXPECT_EQ(Cmd({"GET", long_key}).substr(0, 12), "-ERR key of ");
  EXPECT_EQ(Cmd({"SET", "", "v"}).substr(0, 38), "-ERR rkv does not store the empty key ");
  std::string big(client_->max_value_bytes() + 1, 'v');
  EXPECT_EQ(Cmd({"SET", K("big"), big}).substr(0, 14), "-ERR value of ");
  EXPECT_EQ(Cmd({"GET", K("big")}), "$-1\r\n");
  EXPECT_EQ(Cmd({"APPEND", K("big"), big}).substr(0, 45), "-ERR string exceeds maximum allowed size (rkv");
  EXPECT_EQ(Cmd({"SETRANGE", K("big"), std::to_string(client_->max_value_bytes()), "x"}).substr(0, 41),
            "-ERR string exceeds maximum allowed size ");
  EXPECT_EQ(Cmd({"EXISTS", K("big")}), ":0\r\n");
}

TEST_F(RespSessionTest, CountersAsRedis) {
  EXPECT_EQ(Cmd({"INCR", K("n")}), ":1\r\n");
  EXPECT_EQ(Cmd({"INCRBY", K("n"), "41"}), ":42\r\n");
  EXPECT_EQ(Cmd({"DECR", K("n")}), ":41\r\n");
  EXPECT_EQ(Cmd({"DECRBY", K("n"), "50"}), ":-9\r\n");
  EXPECT_EQ(Cmd({"INCRBY", K("n"), "x"}), "-ERR value is not an integer or out of range\r\n");
  EXPECT_EQ(Cmd({"SET", K("s"), "abc"}), "+OK\r\n");
  EXPECT_EQ(Cmd({"INCR", K("s")}), "-ERR value is not an integer or out of range\r\n");
  EXPECT_EQ(Cmd({"SET", K("max"), "9223372036854775807"}), "+OK\r\n");
  EXPECT_EQ(Cmd({"INCR", K("max")}), "-ERR increment or decrement would overflow\r\n");
  EXPECT_EQ(Cmd({"DECRBY", K("n"), "-9223372036854775808"}), "-ERR decrement would overflow\r\n");
  EXPECT_EQ(Cmd({"SET", K("f"), "10.50"}), "+OK\r\n");
  EXPECT_EQ(Cmd({"INCRBYFLOAT", K("f"), "0.1"}), "$4\r\n10.6\r\n");
  EXPECT_EQ(Cmd({"INCRBYFLOAT", K("f"), "-5.6"}), "$1\r\n5\r\n");
  EXPECT_EQ(Cmd({"INCRBYFLOAT", K("f"), "5.0e3"}), "$4\r\n5005\r\n");
  EXPECT_EQ(Cmd({"INCRBYFLOAT", K("f"), "x"}), "-ERR value is not a valid float\r\n");
  EXPECT_EQ(Cmd({"INCRBYFLOAT", K("s"), "1"}), "-ERR value is not a valid float\r\n");
}

TEST_F(RespSessionTest, StringsAsRedis) {
  EXPECT_EQ(Cmd({"APPEND", K("s"), "Hello"}), ":5\r\n");
  EXPECT_EQ(Cmd({"APPEND", K("s"), " World"}), ":11\r\n");
  EXPECT_EQ(Cmd({"STRLEN", K("s")}), ":11\r\n");
  EXPECT_EQ(Cmd({"STRLEN", K("none")}), ":0\r\n");
  EXPECT_EQ(Cmd({"GETRANGE", K("s"), "0", "4"}), "$5\r\nHello\r\n");
  EXPECT_EQ(Cmd({"GETRANGE", K("s"), "-5", "-1"}), "$5\r\nWorld\r\n");
  EXPECT_EQ(Cmd({"GETRANGE", K("s"), "5", "1"}), "$0\r\n\r\n");
  EXPECT_EQ(Cmd({"GETRANGE", K("s"), "0", "100"}), "$11\r\nHello World\r\n");
  EXPECT_EQ(Cmd({"SETRANGE", K("s"), "6", "Redis"}), ":11\r\n");
  EXPECT_EQ(Cmd({"GET", K("s")}), "$11\r\nHello Redis\r\n");
  EXPECT_EQ(Cmd({"SETRANGE", K("z"), "3", "x"}), ":4\r\n");
  EXPECT_EQ(Cmd({"GET", K("z")}), std::string("$4\r\n\0\0\0x\r\n", 10));
  EXPECT_EQ(Cmd({"SETRANGE", K("empty"), "3", ""}), ":0\r\n");
  EXPECT_EQ(Cmd({"EXISTS", K("empty")}), ":0\r\n");
  EXPECT_EQ(Cmd({"SETRANGE", K("s"), "-1", "x"}), "-ERR offset is out of range\r\n");
  EXPECT_EQ(Cmd({"MSET", K("a"), "1", K("b"), "2"}), "+OK\r\n");
  EXPECT_EQ(Cmd({"MGET", K("a"), K("none"), K("b")}), "*3\r\n$1\r\n1\r\n$-1\r\n$1\r\n2\r\n");
  EXPECT_EQ(Cmd({"MSETNX", K("a"), "x", K("c"), "3"}), ":0\r\n");
  EXPECT_EQ(Cmd({"EXISTS", K("c")}), ":0\r\n");
  EXPECT_EQ(Cmd({"MSETNX", K("c"), "3", K("d"), "4"}), ":1\r\n");
  EXPECT_EQ(Cmd({"EXISTS", K("a"), K("a"), K("none"), K("d")}), ":3\r\n");
  EXPECT_EQ(Cmd({"DEL", K("a"), K("b"), K("none")}), ":2\r\n");
  EXPECT_EQ(Cmd({"UNLINK", K("c")}), ":1\r\n");
  EXPECT_EQ(Cmd({"MGET", K("a"), K("c"), K("d")}), "*3\r\n$-1\r\n$-1\r\n$1\r\n4\r\n");
}

TEST_F(RespSessionTest, ExpiryAsRedis) {
  EXPECT_EQ(Cmd({"TTL", K("none")}), ":-2\r\n");
  EXPECT_EQ(Cmd({"SET", K("k"), "v"}), "+OK\r\n");
  EXPECT_EQ(Cmd({"TTL", K("k")}), ":-1\r\n");
  EXPECT_EQ(Cmd({"EXPIRE", K("k"), "100"}), ":1\r\n");
  ExpectTtlWithin(K("k"), 90, 100);
  std::string pttl = Cmd({"PTTL", K("k")});
  int64_t ms = std::stoll(pttl.substr(1));
  EXPECT_GT(ms, 90000);
  EXPECT_LE(ms, 100000);
  // Read-modify-writes keep the TTL; a plain SET drops it; KEEPTTL keeps.
  EXPECT_EQ(Cmd({"APPEND", K("k"), "w"}), ":2\r\n");
  ExpectTtlWithin(K("k"), 90, 100);
  EXPECT_EQ(Cmd({"SET", K("k"), "v", "KEEPTTL"}), "+OK\r\n");
  ExpectTtlWithin(K("k"), 90, 100);
  EXPECT_EQ(Cmd({"EXPIRE", K("k"), "50", "GT"}), ":0\r\n");
  EXPECT_EQ(Cmd({"EXPIRE", K("k"), "50", "LT"}), ":1\r\n");
  EXPECT_EQ(Cmd({"EXPIRE", K("k"), "500", "NX"}), ":0\r\n");
  EXPECT_EQ(Cmd({"EXPIRE", K("k"), "500", "XX"}), ":1\r\n");
  EXPECT_EQ(Cmd({"EXPIRE", K("k"), "5", "NX", "XX"}),
            "-ERR NX and XX, GT or LT options at the same time are not compatible\r\n");
  EXPECT_EQ(Cmd({"EXPIRE", K("k"), "5", "GT", "LT"}), "-ERR GT and LT options at the same time are not compatible\r\n");
  EXPECT_EQ(Cmd({"EXPIRE", K("k"), "5", "FOO"}), "-ERR Unsupported option FOO\r\n");
  EXPECT_EQ(Cmd({"PERSIST", K("k")}), ":1\r\n");
  EXPECT_EQ(Cmd({"PERSIST", K("k")}), ":0\r\n");
  EXPECT_EQ(Cmd({"TTL", K("k")}), ":-1\r\n");
  EXPECT_EQ(Cmd({"SET", K("k"), "v", "EX", "100"}), "+OK\r\n");
  EXPECT_EQ(Cmd({"SET", K("k"), "v"}), "+OK\r\n");
  EXPECT_EQ(Cmd({"TTL", K("k")}), ":-1\r\n");
  EXPECT_EQ(Cmd({"EXPIREAT", K("k"), std::to_string(rkv::Client::NowUnixMs() / 1000 + 1000)}), ":1\r\n");
  EXPECT_EQ(Cmd({"SETEX", K("e"), "100", "v"}), "+OK\r\n");
  ExpectTtlWithin(K("e"), 90, 100);
  EXPECT_EQ(Cmd({"SETEX", K("e"), "0", "v"}), "-ERR invalid expire time in 'setex' command\r\n");
  EXPECT_EQ(Cmd({"PSETEX", K("e"), "-1", "v"}), "-ERR invalid expire time in 'psetex' command\r\n");
  EXPECT_EQ(Cmd({"EXPIRE", K("none"), "10"}), ":0\r\n");
  // A deadline already past removes the key, as Redis does.
  EXPECT_EQ(Cmd({"EXPIRE", K("k"), "-1"}), ":1\r\n");
  EXPECT_EQ(Cmd({"GET", K("k")}), "$-1\r\n");
  EXPECT_EQ(Cmd({"TTL", K("k")}), ":-2\r\n");
  // A key with a short PX reads as absent once its time came.
  EXPECT_EQ(Cmd({"SET", K("short"), "v", "PX", "50"}), "+OK\r\n");
  std::string got;
  for (int i = 0; i < 3000 && got != "$-1\r\n"; ++i) {
    got = Cmd({"GET", K("short")});
    if (got != "$-1\r\n") std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(got, "$-1\r\n");
  EXPECT_EQ(Cmd({"TTL", K("short")}), ":-2\r\n");
}

TEST_F(RespSessionTest, PipelinesAreBatchedInOrderWhateverTheSplit) {
  // GETs and SETs in runs, between other commands and a key set twice.
  std::string in;
  std::string expected;
  for (int i = 0; i < 40; ++i) {
    in += Multibulk({"SET", K(std::to_string(i % 7)), "v" + std::to_string(i)});
    expected += "+OK\r\n";
  }
  for (int i = 0; i < 7; ++i) {
    in += Multibulk({"GET", K(std::to_string(i))});
    int last = 39 - ((39 - i) % 7);
    expected += "$" + std::to_string(("v" + std::to_string(last)).size()) + "\r\nv" + std::to_string(last) + "\r\n";
  }
  in += "PING\r\n";
  expected += "+PONG\r\n";
  in += Multibulk({"GET", K("none")}) + Multibulk({"INCR", K("0")}) + Multibulk({"GET", K("6")});
  expected += "$-1\r\n-ERR value is not an integer or out of range\r\n$3\r\nv34\r\n";
  EXPECT_EQ(Run(*session_, in), expected);
  // Split at a few places, as the loop would hand it over.
  for (size_t cut : {size_t{1}, size_t{17}, in.size() / 2, in.size() - 3}) {
    std::string out;
    std::string buffer = in.substr(0, cut);
    ServeResult r = session_->Serve(buffer, &out, size_t{1} << 30);
    buffer = buffer.substr(r.consumed) + in.substr(cut);
    r = session_->Serve(buffer, &out, size_t{1} << 30);
    EXPECT_EQ(r.consumed, buffer.size()) << "cut " << cut;
    EXPECT_EQ(out, expected) << "cut " << cut;
  }
}

TEST_F(RespSessionTest, ServeStopsAtTheOutputLimit) {
  std::string value(10000, 'x');
  ASSERT_EQ(Cmd({"SET", K("v"), value}), "+OK\r\n");
  std::string in;
  for (int i = 0; i < 100; ++i) in += Multibulk({"GET", K("v")});
  std::string out;
  ServeResult r = session_->Serve(in, &out, 50000);
  EXPECT_LT(r.consumed, in.size());
  EXPECT_GE(out.size(), 50000u);
  // At most one batch past the limit.
  EXPECT_LE(out.size(), 50000u + options_.max_batch * 10020u);
}

TEST_F(RespSessionTest, ProtocolErrorsReplyAndClose) {
  bool closed = false;
  EXPECT_EQ(Run(*session_, "PING\r\n*1\r\n$-5\r\nPING\r\n", &closed),
            "+PONG\r\n-ERR Protocol error: invalid bulk length\r\n");
  EXPECT_TRUE(closed);
  auto other = NewRespSession(client_.get(), options_);
  EXPECT_EQ(Run(*other, "SET \"a\r\n", &closed), "-ERR Protocol error: unbalanced quotes in request\r\n");
  EXPECT_TRUE(closed);
}

TEST_F(RespSessionTest, AuthIsRequiredWhenConfigured) {
  RespOptions options = options_;
  options.requirepass = "sesame";
  options.token = "gateway-token";
  auto session = NewRespSession(client_.get(), options);
  EXPECT_EQ(Run(*session, Multibulk({"GET", K("a")})), "-NOAUTH Authentication required.\r\n");
  EXPECT_EQ(Run(*session, Multibulk({"NOPE"})), "-ERR unknown command 'NOPE', with args beginning with: \r\n");
  EXPECT_EQ(Run(*session, Multibulk({"AUTH", "wrong"})),
            "-WRONGPASS invalid username-password pair or user is disabled.\r\n");
  EXPECT_EQ(Run(*session, Multibulk({"HELLO", "2"})).substr(0, 7), "-NOAUTH");
  EXPECT_EQ(Run(*session, Multibulk({"AUTH", "sesame"})), "+OK\r\n");
  EXPECT_EQ(Run(*session, Multibulk({"GET", K("a")})), "$-1\r\n");
  // The rkv token works too, as the default user's password.
  auto by_token = NewRespSession(client_.get(), options);
  EXPECT_EQ(Run(*by_token, Multibulk({"HELLO", "2", "AUTH", "default", "gateway-token"})).substr(0, 4), "*14\r");
  EXPECT_EQ(Run(*by_token, Multibulk({"PING"})), "+PONG\r\n");
  // Before AUTH, Redis's small bounds on a request.
  bool closed = false;
  auto early = NewRespSession(client_.get(), options);
  EXPECT_EQ(Run(*early, "*20\r\n", &closed), "-ERR Protocol error: unauthenticated multibulk length\r\n");
  EXPECT_TRUE(closed);
}

// Drives sessions that share a round as the event loop does: a pass
// serves every session, then the round runs; passes repeat until no
// session consumes or waits. Returns each session's replies.
std::vector<std::string> RunWithRound(std::vector<std::unique_ptr<Session>>& sessions, RkvRound& round,
                                      const std::vector<std::string>& inputs, int* passes = nullptr) {
  std::vector<std::string> outs(sessions.size());
  std::vector<size_t> pos(sessions.size(), 0);
  int n = 0;
  while (true) {
    bool progress = false;
    for (size_t i = 0; i < sessions.size(); ++i) {
      if (sessions[i] == nullptr) continue;
      ServeResult r = sessions[i]->Serve(std::string_view(inputs[i]).substr(pos[i]), &outs[i], size_t{1} << 30);
      pos[i] += r.consumed;
      progress = progress || r.consumed > 0;
    }
    ++n;
    if (round.pending()) {
      round.Execute();
      continue;
    }
    if (!progress) break;
  }
  if (passes != nullptr) *passes = n;
  return outs;
}

TEST_F(RespSessionTest, ARoundServesTheRunsOfManySessionsAsOneBatchInEachSessionsOrder) {
  RkvRound round(client_.get());
  std::vector<std::unique_ptr<Session>> sessions;
  for (int i = 0; i < 3; ++i) sessions.push_back(NewRespSession(client_.get(), options_, &round));
  // Session 0 writes and reads back its own keys around commands that end
  // a run; session 1 reads, session 2 writes, all in the same passes.
  std::vector<std::string> inputs(3);
  std::vector<std::string> expected(3);
  inputs[0] = Multibulk({"SET", K("a"), "1"}) + Multibulk({"SET", K("b"), "2"}) + Multibulk({"GET", K("a")}) +
              Multibulk({"PING"}) + Multibulk({"GET", K("b")}) + Multibulk({"SET", K("a"), "3"}) +
              Multibulk({"SET", K("a"), "4"}) + Multibulk({"GET", K("a")}) + Multibulk({"INCR", K("a")}) +
              Multibulk({"GET", K("a")});
  expected[0] = "+OK\r\n+OK\r\n$1\r\n1\r\n+PONG\r\n$1\r\n2\r\n+OK\r\n+OK\r\n$1\r\n4\r\n:5\r\n$1\r\n5\r\n";
  for (int i = 0; i < 40; ++i) {
    inputs[1] += Multibulk({"GET", K("absent" + std::to_string(i))});
    expected[1] += "$-1\r\n";
    inputs[2] += Multibulk({"SET", K("w" + std::to_string(i)), std::string(100, static_cast<char>('a' + i % 26))});
    expected[2] += "+OK\r\n";
  }
  // A protocol error after a run: the run's replies, then the error.
  inputs[1] += "*1\r\n$-5\r\n";
  expected[1] += "-ERR Protocol error: invalid bulk length\r\n";
  EXPECT_EQ(RunWithRound(sessions, round, inputs), expected);
  // Both kinds in one Execute: each run a batch, the runs of all sessions
  // together (40 GETs of session 1 with session 0's first GET).
  EXPECT_LT(round.batches(), 20u);
  EXPECT_EQ(round.items(), 2u + 1u + 1u + 2u + 1u + 1u + 40u + 40u);
  for (int i = 0; i < 40; i += 13) {
    EXPECT_EQ(Cmd({"GET", K("w" + std::to_string(i))}), "$100\r\n" + std::string(100, static_cast<char>('a' + i % 26)) + "\r\n");
  }
}

TEST_F(RespSessionTest, ADeferredSessionWaitsForItsRoundAndMayGoAwayBeforeIt) {
  RkvRound round(client_.get());
  auto session = NewRespSession(client_.get(), options_, &round);
  std::string in = Multibulk({"SET", K("k"), "v"}) + Multibulk({"GET", K("k")});
  std::string out;
  ServeResult r = session->Serve(in, &out, 1 << 20);
  EXPECT_TRUE(r.deferred);
  EXPECT_EQ(r.consumed, Multibulk({"SET", K("k"), "v"}).size());
  EXPECT_EQ(out, "");
  // Not run yet: nothing is consumed or answered.
  r = session->Serve(std::string_view(in).substr(r.consumed), &out, 1 << 20);
  EXPECT_TRUE(r.deferred);
  EXPECT_EQ(r.consumed, 0u);
  EXPECT_EQ(out, "");
  round.Execute();
  r = session->Serve(std::string_view(in).substr(Multibulk({"SET", K("k"), "v"}).size()), &out, 1 << 20);
  EXPECT_TRUE(r.deferred);  // the GET, now deferred in turn
  EXPECT_EQ(out, "+OK\r\n");
  // The session goes away with its GET queued: the round owns the key.
  session.reset();
  round.Execute();
  ASSERT_EQ(round.items(), 2u);
  ASSERT_TRUE(round.get_result(0).ok());
  EXPECT_EQ(*round.get_result(0), "v");
  // A run larger than the round's room is executed by the session itself.
  RkvRound small(client_.get(), 2);
  auto other = NewRespSession(client_.get(), options_, &small);
  std::string three = Multibulk({"GET", K("k")}) + Multibulk({"GET", K("k")}) + Multibulk({"GET", K("k")});
  out.clear();
  r = other->Serve(three, &out, 1 << 20);
  EXPECT_FALSE(r.deferred);
  EXPECT_EQ(r.consumed, three.size());
  EXPECT_EQ(out, "$1\r\nv\r\n$1\r\nv\r\n$1\r\nv\r\n");
  EXPECT_FALSE(small.pending());
}

TEST_F(RespSessionTest, ConcurrentIncrementsFromManySessionsLoseNone) {
  constexpr int kThreads = 4;
  constexpr int kEach = 200;
  std::vector<std::thread> threads;
  std::vector<std::string> failures(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      auto client = NewClient();
      if (client == nullptr) return;
      auto session = NewRespSession(client.get(), options_);
      for (int i = 0; i < kEach; ++i) {
        std::string out;
        std::string in = Multibulk({"INCR", K("counter")});
        session->Serve(in, &out, 1 << 20);
        if (out.empty() || out[0] != ':') failures[t] = out;
      }
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& f : failures) EXPECT_EQ(f, "");
  EXPECT_EQ(Cmd({"GET", K("counter")}), "$3\r\n800\r\n");
}

}  // namespace
}  // namespace rkv::gateway
