#include "gateway/resp_parser.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "gateway/resp_reply.h"

namespace rkv::gateway {
namespace {

using Kind = RespParse::Kind;

std::string Multibulk(const std::vector<std::string>& args) {
  std::string s = "*" + std::to_string(args.size()) + "\r\n";
  for (const auto& a : args) s += "$" + std::to_string(a.size()) + "\r\n" + a + "\r\n";
  return s;
}

// Parses every request of `in` from the front; the commands, or the first
// error as a one-element vector "error: TEXT".
std::vector<std::vector<std::string>> ParseAll(const RespParser& parser, std::string_view in, bool* complete) {
  std::vector<std::vector<std::string>> commands;
  size_t pos = 0;
  *complete = true;
  while (pos < in.size()) {
    RespParse r = parser.Parse(in.substr(pos));
    if (r.kind == Kind::kIncomplete) {
      *complete = false;
      break;
    }
    if (r.kind == Kind::kError) {
      commands.push_back({"error: " + r.error});
      break;
    }
    EXPECT_GT(r.consumed, 0u);
    pos += r.consumed;
    if (r.kind == Kind::kCommand) commands.push_back(r.args);
  }
  return commands;
}

TEST(RespParserTest, MultibulkCommand) {
  RespParser parser;
  std::string in = Multibulk({"SET", "key", std::string("a\0b\r\nc", 6)});
  RespParse r = parser.Parse(in);
  ASSERT_EQ(r.kind, Kind::kCommand);
  EXPECT_EQ(r.consumed, in.size());
  ASSERT_EQ(r.args.size(), 3u);
  EXPECT_EQ(r.args[0], "SET");
  EXPECT_EQ(r.args[2], std::string("a\0b\r\nc", 6));
}

TEST(RespParserTest, InlineCommandsAsRedisSplitsThem) {
  RespParser parser;
  RespParse r = parser.Parse("SET  k \"a b\\x41\\n\" 'it\\'s'\r\n");
  ASSERT_EQ(r.kind, Kind::kCommand);
  EXPECT_EQ(r.args, (std::vector<std::string>{"SET", "k", "a bA\n", "it's"}));
  r = parser.Parse("PING\n");
  ASSERT_EQ(r.kind, Kind::kCommand);
  EXPECT_EQ(r.consumed, 5u);
  EXPECT_EQ(r.args, (std::vector<std::string>{"PING"}));
  // Nothing after a NUL byte counts, as in Redis's C-string split.
  r = parser.Parse(std::string("GET a\0 b\r\n", 10));
  ASSERT_EQ(r.kind, Kind::kCommand);
  EXPECT_EQ(r.args, (std::vector<std::string>{"GET", "a"}));
}

TEST(RespParserTest, EmptyRequestsAreSkipped) {
  RespParser parser;
  for (std::string in : {"\r\n", "   \n", "*0\r\n", "*-1\r\n"}) {
    RespParse r = parser.Parse(in);
    EXPECT_EQ(r.kind, Kind::kSkip) << in;
    EXPECT_EQ(r.consumed, in.size()) << in;
  }
}

TEST(RespParserTest, EveryErrorHasRedisText) {
  RespParser parser;
  struct Case {
    std::string in;
    std::string error;
  } cases[] = {
      {"*abc\r\n", "ERR Protocol error: invalid multibulk length"},
      {"*+1\r\n", "ERR Protocol error: invalid multibulk length"},
      {"*01\r\n", "ERR Protocol error: invalid multibulk length"},
      {"*1048577\r\n", "ERR Protocol error: invalid multibulk length"},
      {"*99999999999999999999\r\n", "ERR Protocol error: invalid multibulk length"},
      {"*1\r\n:3\r\n", "ERR Protocol error: expected '$', got ':'"},
      {"*1\r\n$-1\r\n", "ERR Protocol error: invalid bulk length"},
      {"*1\r\n$x\r\n", "ERR Protocol error: invalid bulk length"},
      {"*1\r\n$536870913\r\n", "ERR Protocol error: invalid bulk length"},
      {"SET \"a\r\n", "ERR Protocol error: unbalanced quotes in request"},
      {"SET \"a\"b\r\n", "ERR Protocol error: unbalanced quotes in request"},
      {"SET 'a\r\n", "ERR Protocol error: unbalanced quotes in request"},
      {"*" + std::string(70000, '1'), "ERR Protocol error: too big mbulk count string"},
      {"*1\r\n$" + std::string(70000, '1'), "ERR Protocol error: too big bulk count string"},
      {std::string(70000, 'a'), "ERR Protocol error: too big inline request"},
      {std::string(70000, 'a') + "\n", "ERR Protocol error: too big inline request"},
  };
  for (const Case& c : cases) {
    RespParse r = parser.Parse(c.in);
    EXPECT_EQ(r.kind, Kind::kError) << c.in.substr(0, 40);
    EXPECT_EQ(r.error, c.error) << c.in.substr(0, 40);
  }
}

TEST(RespParserTest, UnauthenticatedBoundsAreRedis) {
  RespParser parser;
  RespParse r = parser.Parse("*11\r\n", /*authenticated=*/false);
  EXPECT_EQ(r.error, "ERR Protocol error: unauthenticated multibulk length");
  r = parser.Parse("*1\r\n$16385\r\n", false);
  EXPECT_EQ(r.error, "ERR Protocol error: unauthenticated bulk length");
  r = parser.Parse("*11\r\n", true);
  EXPECT_EQ(r.kind, Kind::kIncomplete);
}

TEST(RespParserTest, OversizedBulkAndRequestAreRefusedBeforeTheyArrive) {
  RespLimits limits;
  limits.max_bulk_bytes = 1000;
  limits.max_request_bytes = 1500;
  RespParser parser(limits);
  EXPECT_EQ(parser.Parse("*1\r\n$1001\r\n").error, "ERR Protocol error: invalid bulk length");
  // Two bulks each within the bulk limit, together over the request's.
  RespParse r = parser.Parse("*2\r\n$900\r\n" + std::string(900, 'x') + "\r\n$900\r\n");
  EXPECT_EQ(r.kind, Kind::kError);
  EXPECT_EQ(r.error, "ERR Protocol error: request too large (over 1500 bytes)");
}

TEST(RespParserTest, UnterminatedLinesWaitWithAHint) {
  RespParser parser;
  for (std::string in : {"*", "*2", "*2\r", "*2\r\n$3", "*2\r\n$3\r\nGET", "*2\r\n$3\r\nGET\r\n", "GET k", "GET k\r"}) {
    RespParse r = parser.Parse(in);
    EXPECT_EQ(r.kind, Kind::kIncomplete) << in;
    EXPECT_GT(r.needed, in.size()) << in;
  }
  // A bulk whose header arrived: the hint is the whole bulk.
  RespParse r = parser.Parse("*1\r\n$100\r\nabc");
  EXPECT_EQ(r.kind, Kind::kIncomplete);
  EXPECT_EQ(r.needed, std::string("*1\r\n$100\r\n").size() + 102);
  // Many arguments still to come: each takes at least "$0\r\n\r\n", so
  // the parser is not asked again for every few bytes of them.
  r = parser.Parse("*1000\r\n$1\r\na\r\n");
  EXPECT_EQ(r.kind, Kind::kIncomplete);
  EXPECT_EQ(r.needed, 14u + 999u * 6u);
}

TEST(RespParserTest, SplitAtEveryByteBoundaryParsesTheSame) {
  RespParser parser;
  std::string in = Multibulk({"SET", "k", "v\r\nv"}) + "PING\r\n" + Multibulk({"GET", "k"}) + "*0\r\n" +
                   "ECHO \"x y\"\n" + Multibulk({"MSET", "a", "", "b", std::string(300, 'z')});
  bool complete = false;
  auto whole = ParseAll(parser, in, &complete);
  ASSERT_TRUE(complete);
  ASSERT_EQ(whole.size(), 5u);
  for (size_t cut = 0; cut <= in.size(); ++cut) {
    // What a loop does: parse the first part, keep the rest, append.
    std::string buffer = in.substr(0, cut);
    std::vector<std::vector<std::string>> got;
    size_t pos = 0;
    auto drain = [&] {
      while (pos < buffer.size()) {
        RespParse r = parser.Parse(std::string_view(buffer).substr(pos));
        if (r.kind == Kind::kIncomplete) break;
        ASSERT_NE(r.kind, Kind::kError) << "cut " << cut;
        pos += r.consumed;
        if (r.kind == Kind::kCommand) got.push_back(r.args);
      }
    };
    drain();
    buffer += in.substr(cut);
    drain();
    EXPECT_EQ(pos, in.size()) << "cut " << cut;
    EXPECT_EQ(got, whole) << "cut " << cut;
  }
}

TEST(RespParserTest, TenThousandPipelinedCommands) {
  RespParser parser;
  std::string in;
  for (int i = 0; i < 10000; ++i) {
    in += i % 2 == 0 ? Multibulk({"SET", "key:" + std::to_string(i), std::to_string(i)}) : "GET key:" + std::to_string(i - 1) + "\r\n";
  }
  bool complete = false;
  auto commands = ParseAll(parser, in, &complete);
  EXPECT_TRUE(complete);
  ASSERT_EQ(commands.size(), 10000u);
  EXPECT_EQ(commands[9998], (std::vector<std::string>{"SET", "key:9998", "9998"}));
  EXPECT_EQ(commands[9999], (std::vector<std::string>{"GET", "key:9998"}));
}

TEST(RespParserTest, RedisIntegers) {
  EXPECT_EQ(ParseRedisInteger("0"), 0);
  EXPECT_EQ(ParseRedisInteger("-12"), -12);
  EXPECT_EQ(ParseRedisInteger("9223372036854775807"), INT64_MAX);
  EXPECT_EQ(ParseRedisInteger("-9223372036854775808"), INT64_MIN);
  for (std::string bad : {"", "-", "+1", "01", "-0", " 1", "1 ", "9223372036854775808", "1.5", "abc"}) {
    EXPECT_FALSE(ParseRedisInteger(bad).has_value()) << bad;
  }
}

TEST(RespReplyTest, RepliesAreFramedAndErrorsStayOnOneLine) {
  std::string out;
  AppendSimple(&out, "OK");
  AppendError(&out, "ERR bad\r\nthing");
  AppendInteger(&out, -5);
  AppendBulk(&out, std::string("a\0b", 3));
  AppendNull(&out);
  AppendArrayHeader(&out, 2);
  EXPECT_EQ(out, std::string("+OK\r\n-ERR bad  thing\r\n:-5\r\n$3\r\na\0b\r\n$-1\r\n*2\r\n", 45));
}

}  // namespace
}  // namespace rkv::gateway
