#include "gateway/memcache_parser.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace rkv::gateway {
namespace {

ParserLimits Limits() { return ParserLimits{}; }

ParseResult Parse(std::string_view in, const ParserLimits& limits = Limits()) {
  return ParseMemcacheRequest(in, limits);
}

// Parses a request that must be complete and valid.
MemcacheRequest ParseOk(std::string_view in) {
  ParseResult r = Parse(in);
  EXPECT_EQ(r.kind, ParseKind::kRequest) << in;
  EXPECT_EQ(r.consumed, in.size()) << in;
  return r.request;
}

// Parses a request the parser refuses; returns the reply.
std::string ParseError(std::string_view in, size_t consumed) {
  ParseResult r = Parse(in);
  EXPECT_EQ(r.kind, ParseKind::kError) << in;
  EXPECT_EQ(r.consumed, consumed) << in;
  return std::string(r.reply);
}

TEST(MemcacheParserTest, StorageCommands) {
  struct Case {
    std::string name;
    MemcacheCommand command;
  };
  for (const Case& c : std::vector<Case>{{"set", MemcacheCommand::kSet},
                                         {"add", MemcacheCommand::kAdd},
                                         {"replace", MemcacheCommand::kReplace},
                                         {"append", MemcacheCommand::kAppend},
                                         {"prepend", MemcacheCommand::kPrepend}}) {
    const std::string in = c.name + " k 42 100 5\r\nhello\r\n";
    const MemcacheRequest r = ParseOk(in);
    EXPECT_EQ(r.command, c.command);
    EXPECT_TRUE(IsStorageCommand(r.command));
    EXPECT_EQ(r.key, "k");
    EXPECT_EQ(r.flags, 42u);
    EXPECT_EQ(r.exptime, 100);
    EXPECT_EQ(r.data, "hello");
    EXPECT_FALSE(r.noreply);
    EXPECT_TRUE(ParseOk(c.name + " k 0 0 0 noreply\r\n\r\n").noreply);
  }
  const MemcacheRequest cas = ParseOk("cas k 1 2 3 12345678901234567890\r\nabc\r\n");
  EXPECT_EQ(cas.command, MemcacheCommand::kCas);
  EXPECT_EQ(cas.cas_unique, 12345678901234567890u);
  EXPECT_EQ(cas.data, "abc");
  EXPECT_TRUE(ParseOk("cas k 1 2 3 7 noreply\r\nabc\r\n").noreply);
}

TEST(MemcacheParserTest, StorageFieldsAsMemcachedReadsThem) {
  // Flags: 32 bits kept of a larger value, '+' accepted; negative exptime.
  EXPECT_EQ(ParseOk("set k 4294967295 0 1\r\nx\r\n").flags, 4294967295u);
  EXPECT_EQ(ParseOk("set k 4294967296 0 1\r\nx\r\n").flags, 0u);
  EXPECT_EQ(ParseOk("set k +5 0 1\r\nx\r\n").flags, 5u);
  EXPECT_EQ(ParseOk("set k 0 -1 1\r\nx\r\n").exptime, -1);
  EXPECT_EQ(ParseOk("set k 0 0 01\r\nx\r\n").data, "x");
  // Spaces: runs, leading and trailing ones count for nothing.
  EXPECT_EQ(ParseOk("  set   k  0 0 1 \r\nx\r\n").key, "k");
  // A line may end in a bare "\n"; the block must end in "\r\n".
  EXPECT_EQ(ParseOk("set k 0 0 1\nx\r\n").data, "x");
  // A last word other than noreply is ignored, as memcached does.
  EXPECT_FALSE(ParseOk("set k 0 0 1 foo\r\nx\r\n").noreply);
  // Binary data, "\r\n" inside included.
  const std::string binary("set k 0 0 6\r\n\r\n\0\xff\r\n\r\n", 21);
  EXPECT_EQ(ParseOk(binary).data, std::string_view("\r\n\0\xff\r\n", 6));
}

TEST(MemcacheParserTest, StorageErrors) {
  const std::string line = "set k x 0 3\r\n";
  EXPECT_EQ(ParseError(line + "abc\r\n", line.size()), kReplyBadFormat);
  EXPECT_EQ(ParseError("set k 0 x 3\r\nabc\r\n", 13), kReplyBadFormat);
  EXPECT_EQ(ParseError("set k 0 0 x\r\nabc\r\n", 13), kReplyBadFormat);
  EXPECT_EQ(ParseError("set k -1 0 1\r\nx\r\n", 14), kReplyBadFormat);
  EXPECT_EQ(ParseError("set k 0 0 -1\r\n", 14), kReplyBadFormat);
  EXPECT_EQ(ParseError("set k 0 0 2147483646\r\n", 22), kReplyBadFormat);
  EXPECT_EQ(ParseError("cas k 0 0 1 x\r\nx\r\n", 15), kReplyBadFormat);
  EXPECT_EQ(ParseError("cas k 0 0 1 -1\r\nx\r\n", 16), kReplyBadFormat);
  // The wrong number of words: ERROR, the block left to be parsed next.
  EXPECT_EQ(ParseError("set k 0 0\r\n", 11), kReplyError);
  EXPECT_EQ(ParseError("cas k 0 0 1\r\nx\r\n", 13), kReplyError);
  EXPECT_EQ(ParseError("set k 0 0 1 noreply extra\r\nx\r\n", 27), kReplyError);
  EXPECT_EQ(ParseError("cas k 0 0 1 9 noreply extra\r\nx\r\n", 29), kReplyError);
  // noreply silences the command's errors.
  EXPECT_EQ(ParseError("set k x 0 3 noreply\r\nabc\r\n", 21), "");
  // Key limits and control characters.
  const std::string long_key(251, 'k');
  EXPECT_EQ(ParseError("set " + long_key + " 0 0 1\r\nx\r\n", 4 + 251 + 8), kReplyBadFormat);
  ParseOk("set " + std::string(250, 'k') + " 0 0 1\r\nx\r\n");
  EXPECT_EQ(ParseError("set a\x01" "b 0 0 1\r\nx\r\n", 15), kReplyBadFormat);
  EXPECT_EQ(ParseError("set a\x7f" "b 0 0 1\r\nx\r\n", 15), kReplyBadFormat);
  EXPECT_EQ(ParseError(std::string("set a\0b 0 0 1\r\nx\r\n", 19), 15), kReplyBadFormat);
  ParserLimits small;
  small.max_key_bytes = 10;
  EXPECT_EQ(Parse("set kkkkkkkkkkk 0 0 1\r\nx\r\n", small).kind, ParseKind::kError);
  EXPECT_EQ(Parse("set kkkkkkkkkk 0 0 1\r\nx\r\n", small).kind, ParseKind::kRequest);
}

TEST(MemcacheParserTest, BadDataChunkConsumesTheAnnouncedBytes) {
  // memcached reads bytes + 2 and checks their last two: the rest is the
  // next request.
  EXPECT_EQ(ParseError("set k 0 0 3\r\nabcd\r\n", 13 + 5), kReplyBadChunk);
  EXPECT_EQ(ParseError("set k 0 0 3\r\nab\r\n\r\n", 13 + 5), kReplyBadChunk);
  EXPECT_EQ(ParseError("set k 0 0 1\r\nx\n\r\n", 13 + 3), kReplyBadChunk);
  EXPECT_EQ(ParseError("set k 0 0 3 noreply\r\nabcd\r\n", 21 + 5), "");
  // What is left ("\n") is then an empty line: ERROR.
  EXPECT_EQ(ParseError("\n", 1), kReplyError);
}

TEST(MemcacheParserTest, TooLargeIsSwallowed) {
  ParserLimits limits;
  limits.max_data_bytes = 100;
  ParseResult r = Parse("set k 0 0 101\r\n", limits);
  EXPECT_EQ(r.kind, ParseKind::kTooLarge);
  EXPECT_EQ(r.consumed, 15u);
  EXPECT_EQ(r.swallow, 103u);
  EXPECT_EQ(r.reply, kReplyTooLarge);
  EXPECT_EQ(r.request.command, MemcacheCommand::kSet);
  EXPECT_EQ(r.request.key, "k");
  r = Parse("add k 0 0 2000000000 noreply\r\n", limits);
  EXPECT_EQ(r.kind, ParseKind::kTooLarge);
  EXPECT_EQ(r.swallow, 2000000002u);
  EXPECT_EQ(r.reply, "");
  EXPECT_EQ(Parse("set k 0 0 100\r\n", limits).kind, ParseKind::kIncomplete);
}

TEST(MemcacheParserTest, Retrieval) {
  MemcacheRequest r = ParseOk("get a\r\n");
  EXPECT_EQ(r.command, MemcacheCommand::kGet);
  EXPECT_EQ(r.keys, (std::vector<std::string_view>{"a"}));
  r = ParseOk("gets a b  a\r\n");
  EXPECT_EQ(r.command, MemcacheCommand::kGets);
  EXPECT_EQ(r.keys, (std::vector<std::string_view>{"a", "b", "a"}));
  r = ParseOk("gat 100 a b\r\n");
  EXPECT_EQ(r.command, MemcacheCommand::kGat);
  EXPECT_EQ(r.exptime, 100);
  EXPECT_EQ(r.keys, (std::vector<std::string_view>{"a", "b"}));
  r = ParseOk("gats -1 a\r\n");
  EXPECT_EQ(r.command, MemcacheCommand::kGats);
  EXPECT_EQ(r.exptime, -1);
  EXPECT_TRUE(ParseOk("gat 100\r\n").keys.empty());  // memcached answers END
  // A tab is not a separator but a control character in the key.
  EXPECT_EQ(ParseError("get a\tb\r\n", 9), kReplyBadFormat);
  EXPECT_EQ(ParseError("get\r\n", 5), kReplyError);
  EXPECT_EQ(ParseError("gets \r\n", 7), kReplyError);
  EXPECT_EQ(ParseError("gat\r\n", 5), kReplyError);
  EXPECT_EQ(ParseError("gat x a\r\n", 9), kReplyBadExptime);
  EXPECT_EQ(ParseError("get a " + std::string(251, 'k') + " b\r\n", 6 + 251 + 4), kReplyBadFormat);
  EXPECT_EQ(ParseError("get a\r\r\n", 8), kReplyBadFormat) << "a CR inside the key";
  // 3,000 keys on one line (longer than 2048 bytes).
  std::string many = "get";
  for (int i = 0; i < 3000; ++i) many += " k" + std::to_string(i);
  many += "\r\n";
  r = ParseOk(many);
  ASSERT_EQ(r.keys.size(), 3000u);
  EXPECT_EQ(r.keys[2999], "k2999");
}

TEST(MemcacheParserTest, DeleteIncrTouch) {
  MemcacheRequest r = ParseOk("delete k\r\n");
  EXPECT_EQ(r.command, MemcacheCommand::kDelete);
  EXPECT_EQ(r.key, "k");
  EXPECT_FALSE(r.noreply);
  EXPECT_TRUE(ParseOk("delete k noreply\r\n").noreply);
  EXPECT_FALSE(ParseOk("delete k 0\r\n").noreply);
  EXPECT_TRUE(ParseOk("delete k 0 noreply\r\n").noreply);
  EXPECT_EQ(ParseError("delete k 5\r\n", 12), kReplyDeleteUsage);
  EXPECT_EQ(ParseError("delete k 5 noreply\r\n", 20), "");
  EXPECT_EQ(ParseError("delete\r\n", 8), kReplyError);
  EXPECT_EQ(ParseError("delete a b c d\r\n", 16), kReplyError);
  EXPECT_EQ(ParseError("delete " + std::string(251, 'k') + "\r\n", 7 + 251 + 2), kReplyBadFormat);

  r = ParseOk("incr k 18446744073709551615\r\n");
  EXPECT_EQ(r.command, MemcacheCommand::kIncr);
  EXPECT_EQ(r.delta, 18446744073709551615u);
  r = ParseOk("decr k +3 noreply\r\n");
  EXPECT_EQ(r.command, MemcacheCommand::kDecr);
  EXPECT_EQ(r.delta, 3u);
  EXPECT_TRUE(r.noreply);
  EXPECT_FALSE(ParseOk("incr k 1 2\r\n").noreply);
  EXPECT_EQ(ParseError("incr k x\r\n", 10), kReplyBadDelta);
  EXPECT_EQ(ParseError("incr k -1\r\n", 11), kReplyBadDelta);
  EXPECT_EQ(ParseError("incr k 18446744073709551616\r\n", 29), kReplyBadDelta);
  EXPECT_EQ(ParseError("incr k x noreply\r\n", 18), "");
  EXPECT_EQ(ParseError("incr k\r\n", 8), kReplyError);
  EXPECT_EQ(ParseError("decr k 1 2 3\r\n", 14), kReplyError);

  r = ParseOk("touch k 10\r\n");
  EXPECT_EQ(r.command, MemcacheCommand::kTouch);
  EXPECT_EQ(r.exptime, 10);
  EXPECT_TRUE(ParseOk("touch k -1 noreply\r\n").noreply);
  EXPECT_EQ(ParseError("touch k x\r\n", 11), kReplyBadExptime);
  EXPECT_EQ(ParseError("touch k\r\n", 9), kReplyError);
}

TEST(MemcacheParserTest, OtherCommands) {
  EXPECT_EQ(ParseOk("version\r\n").command, MemcacheCommand::kVersion);
  EXPECT_EQ(ParseOk("version x\n").command, MemcacheCommand::kVersion);
  EXPECT_EQ(ParseOk("quit\r\n").command, MemcacheCommand::kQuit);
  EXPECT_EQ(ParseOk("quit x\r\n").command, MemcacheCommand::kQuit);
  MemcacheRequest r = ParseOk("stats\r\n");
  EXPECT_EQ(r.command, MemcacheCommand::kStats);
  EXPECT_EQ(r.stats_arg, "");
  EXPECT_EQ(ParseOk("stats reset\r\n").stats_arg, "reset");
  r = ParseOk("verbosity 1\r\n");
  EXPECT_EQ(r.command, MemcacheCommand::kVerbosity);
  EXPECT_EQ(r.verbosity, 1u);
  EXPECT_TRUE(ParseOk("verbosity 1 noreply\r\n").noreply);
  EXPECT_EQ(ParseError("verbosity\r\n", 11), kReplyError);
  EXPECT_EQ(ParseError("verbosity x\r\n", 13), kReplyBadFormat);
  EXPECT_EQ(ParseError("verbosity 1 2 3\r\n", 17), kReplyError);

  r = ParseOk("flush_all\r\n");
  EXPECT_EQ(r.command, MemcacheCommand::kFlushAll);
  EXPECT_FALSE(r.has_delay);
  r = ParseOk("flush_all noreply\r\n");
  EXPECT_FALSE(r.has_delay);
  EXPECT_TRUE(r.noreply);
  r = ParseOk("flush_all 10 noreply\r\n");
  EXPECT_TRUE(r.has_delay);
  EXPECT_EQ(r.delay, 10);
  EXPECT_TRUE(r.noreply);
  r = ParseOk("flush_all 1 2\r\n");
  EXPECT_EQ(r.delay, 1);
  EXPECT_FALSE(r.noreply);
  EXPECT_EQ(ParseOk("flush_all -1\r\n").delay, -1);
  EXPECT_EQ(ParseError("flush_all x\r\n", 13), kReplyBadExptime);
  EXPECT_EQ(ParseError("flush_all 1 2 3\r\n", 17), kReplyError);
}

TEST(MemcacheParserTest, UnknownCommands) {
  for (std::string_view line : {"foo\r\n", "GET a\r\n", "\r\n", "\n", "\r\r\n", "mg a v\r\n", " \r\n"}) {
    EXPECT_EQ(ParseError(line, line.size()), kReplyError) << line;
  }
}

TEST(MemcacheParserTest, IncompleteInput) {
  for (std::string_view in : {"", "get a", "get a\r", "set k 0 0 3\r\n", "set k 0 0 3\r\nabc", "set k 0 0 3\r\nabc\r",
                              "set k 0 0 3"}) {
    EXPECT_EQ(Parse(in).kind, ParseKind::kIncomplete) << in;
  }
}

TEST(MemcacheParserTest, LongLinesCloseAsMemcachedDoes) {
  // A partial line over 2048 bytes: closed, unless a multi-get.
  EXPECT_EQ(Parse(std::string(2048, 'x')).kind, ParseKind::kIncomplete);
  EXPECT_EQ(Parse(std::string(2049, 'x')).kind, ParseKind::kClose);
  EXPECT_EQ(Parse("set k 0 0 1 " + std::string(2100, 'x')).kind, ParseKind::kClose);
  EXPECT_EQ(Parse("get " + std::string(5000, 'k')).kind, ParseKind::kIncomplete);
  EXPECT_EQ(Parse("gets " + std::string(5000, 'k')).kind, ParseKind::kIncomplete);
  EXPECT_EQ(Parse(std::string(100, ' ') + "get " + std::string(5000, 'k')).kind, ParseKind::kIncomplete);
  EXPECT_EQ(Parse(std::string(101, ' ') + "get " + std::string(5000, 'k')).kind, ParseKind::kClose);
  // A whole line over 2048 bytes is closed too.
  EXPECT_EQ(Parse(std::string(3000, 'x') + "\r\n").kind, ParseKind::kClose);
  // A multi-get line beyond the gateway's cap.
  EXPECT_EQ(Parse("get " + std::string(kMaxRetrievalLineBytes, 'k')).kind, ParseKind::kClose);
  std::string capped = "get";
  while (capped.size() < kMaxRetrievalLineBytes + 10) capped += " k";
  EXPECT_EQ(Parse(capped + "\r\n").kind, ParseKind::kClose);
}

// A pipeline of every command, parsed whole and split at every byte.
std::string Pipeline() {
  return std::string("set a 1 0 3\r\nabc\r\n") + "add b 2 0 0 noreply\r\n\r\n" + "replace a 3 10 2\r\nxy\r\n" +
         "append a 0 0 1\r\nz\r\n" + "prepend a 0 0 1\r\nw\r\n" + "cas a 0 0 2 77\r\n\r\n\r\n" + "get a b\r\n" +
         "gets a\r\n" + "gat 5 a\r\n" + "gats 5 a b\r\n" + "delete a\r\n" + "incr n 5\r\n" + "decr n 2 noreply\r\n" +
         "touch a 1\r\n" + "version\r\n" + "stats\r\n" + "verbosity 1\r\n" + "flush_all 0\r\n" + "bogus\r\n" +
         "set k 0 0 1\r\nxx\r\n" + "quit\r\n";
}

struct Parsed {
  std::vector<ParseKind> kinds;
  std::vector<MemcacheCommand> commands;
  std::vector<std::string> summary;  // the fields that matter, as text
};

// Feeds `in` to the parser as a loop would, delivering `chunk` bytes more
// at a time (0: all at once).
Parsed ParseAll(std::string_view in, size_t first_chunk) {
  Parsed p;
  std::string buffer;
  size_t delivered = 0;
  auto deliver = [&](size_t n) {
    n = std::min(n, in.size() - delivered);
    buffer.append(in.substr(delivered, n));
    delivered += n;
  };
  deliver(first_chunk == 0 ? in.size() : first_chunk);
  while (true) {
    ParseResult r = ParseMemcacheRequest(buffer, ParserLimits{});
    if (r.kind == ParseKind::kIncomplete) {
      if (delivered == in.size()) break;
      deliver(in.size());
      continue;
    }
    EXPECT_NE(r.kind, ParseKind::kClose);
    EXPECT_NE(r.kind, ParseKind::kTooLarge);
    if (r.kind == ParseKind::kClose || r.kind == ParseKind::kTooLarge) break;
    p.kinds.push_back(r.kind);
    std::string s = std::string(r.reply) + "|" + std::string(r.request.key) + "|" + std::string(r.request.data) + "|";
    for (auto k : r.request.keys) s += std::string(k) + ",";
    s += "|" + std::to_string(r.request.flags) + "|" + std::to_string(r.request.exptime) + "|" +
         std::to_string(r.request.noreply);
    p.summary.push_back(s);
    p.commands.push_back(r.request.command);
    buffer.erase(0, r.consumed);
  }
  EXPECT_TRUE(buffer.empty());
  return p;
}

TEST(MemcacheParserTest, PipelineSplitAtEveryByte) {
  const std::string in = Pipeline();
  const Parsed whole = ParseAll(in, 0);
  // 22: the bad chunk ("xx\r" for 1 byte) leaves its "\n", an empty line.
  ASSERT_EQ(whole.kinds.size(), 22u);
  for (size_t split = 1; split < in.size(); ++split) {
    const Parsed part = ParseAll(in, split);
    ASSERT_EQ(part.summary, whole.summary) << "split at " << split;
  }
}

TEST(MemcacheParserTest, TenThousandPipelinedCommands) {
  std::string in;
  for (int i = 0; i < 10000; ++i) {
    const std::string v = std::to_string(i);
    switch (i % 4) {
      case 0:
        in += "set key" + v + " " + v + " 0 " + std::to_string(v.size()) + "\r\n" + v + "\r\n";
        break;
      case 1:
        in += "get key" + v + " other\r\n";
        break;
      case 2:
        in += "incr key" + v + " 1 noreply\r\n";
        break;
      default:
        in += "delete key" + v + "\r\n";
        break;
    }
  }
  std::string_view rest = in;
  int count = 0;
  while (!rest.empty()) {
    ParseResult r = ParseMemcacheRequest(rest, ParserLimits{});
    ASSERT_EQ(r.kind, ParseKind::kRequest) << count;
    const std::string v = std::to_string(count);
    if (count % 4 == 0) {
      EXPECT_EQ(r.request.data, v);
      EXPECT_EQ(r.request.flags, static_cast<uint32_t>(count));
    }
    rest.remove_prefix(r.consumed);
    ++count;
  }
  EXPECT_EQ(count, 10000);
}

TEST(MemcacheParserTest, Numbers) {
  uint64_t u = 0;
  EXPECT_TRUE(ParseMemcacheU64("0", &u));
  EXPECT_TRUE(ParseMemcacheU64("+18446744073709551615", &u));
  EXPECT_EQ(u, 18446744073709551615u);
  EXPECT_FALSE(ParseMemcacheU64("18446744073709551616", &u));
  EXPECT_FALSE(ParseMemcacheU64("", &u));
  EXPECT_FALSE(ParseMemcacheU64("+", &u));
  EXPECT_FALSE(ParseMemcacheU64("-1", &u));
  EXPECT_FALSE(ParseMemcacheU64("1x", &u));
  uint32_t u32 = 0;
  EXPECT_TRUE(ParseMemcacheU32("4294967295", &u32));
  EXPECT_FALSE(ParseMemcacheU32("4294967296", &u32));
  int64_t i = 0;
  EXPECT_TRUE(ParseMemcacheI64("-9223372036854775808", &i));
  EXPECT_EQ(i, INT64_MIN);
  EXPECT_TRUE(ParseMemcacheI64("9223372036854775807", &i));
  EXPECT_FALSE(ParseMemcacheI64("9223372036854775808", &i));
  EXPECT_FALSE(ParseMemcacheI64("-9223372036854775809", &i));
  EXPECT_FALSE(ParseMemcacheI64("--1", &i));
  EXPECT_FALSE(ParseMemcacheI64("+-1", &i));
  EXPECT_FALSE(ParseMemcacheI64("-", &i));
}

}  // namespace
}  // namespace rkv::gateway
