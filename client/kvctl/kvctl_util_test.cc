#include "client/kvctl/kvctl_util.h"

#include <gtest/gtest.h>

namespace rkv::kvctl {
namespace {

TEST(ParseInvocationTest, ParsesEachCommand) {
  auto get = ParseInvocation({"get", "k"}, false);
  ASSERT_TRUE(get.ok()) << get.status();
  EXPECT_EQ(get->command, Command::kGet);
  EXPECT_EQ(get->key, "k");

  auto put = ParseInvocation({"put", "k", "v"}, false);
  ASSERT_TRUE(put.ok()) << put.status();
  EXPECT_EQ(put->command, Command::kPut);
  EXPECT_TRUE(put->has_value_arg);
  EXPECT_EQ(put->value_arg, "v");

  auto put_stdin = ParseInvocation({"put", "k"}, false);
  ASSERT_TRUE(put_stdin.ok());
  EXPECT_FALSE(put_stdin->has_value_arg);

  auto del = ParseInvocation({"del", "k"}, false);
  ASSERT_TRUE(del.ok());
  EXPECT_EQ(del->command, Command::kDel);
}

TEST(ParseInvocationTest, RejectsBadCommandLines) {
  EXPECT_FALSE(ParseInvocation({}, false).ok());
  EXPECT_FALSE(ParseInvocation({"frob", "k"}, false).ok());
  EXPECT_FALSE(ParseInvocation({"get"}, false).ok());
  EXPECT_FALSE(ParseInvocation({"get", "k", "extra"}, false).ok());
  EXPECT_FALSE(ParseInvocation({"del", "k", "extra"}, false).ok());
  EXPECT_FALSE(ParseInvocation({"put", "k", "v", "extra"}, false).ok());
}

TEST(ParseInvocationTest, DecodesHexKeys) {
  auto inv = ParseInvocation({"get", "00ff41"}, true);
  ASSERT_TRUE(inv.ok()) << inv.status();
  EXPECT_EQ(inv->key, std::string("\x00\xff" "A", 3));
  EXPECT_FALSE(ParseInvocation({"get", "0g"}, true).ok());
  EXPECT_FALSE(ParseInvocation({"get", "abc"}, true).ok());
}

TEST(ChooseValueSourceTest, PicksTheSource) {
  Invocation inv;
  inv.command = Command::kPut;
  inv.has_value_arg = true;
  inv.value_arg = "v";
  EXPECT_EQ(ChooseValueSource(inv, false, true).value(), ValueSource::kArgument);
  EXPECT_FALSE(ChooseValueSource(inv, true, true).ok());

  inv.value_arg = "-";
  EXPECT_EQ(ChooseValueSource(inv, false, true).value(), ValueSource::kStdin);
  EXPECT_FALSE(ChooseValueSource(inv, true, false).ok());

  inv.has_value_arg = false;
  EXPECT_EQ(ChooseValueSource(inv, true, true).value(), ValueSource::kFile);
  EXPECT_EQ(ChooseValueSource(inv, false, false).value(), ValueSource::kStdin);
  EXPECT_FALSE(ChooseValueSource(inv, false, true).ok());  // terminal, no value
}

TEST(Utf8Test, ValidatesSequences) {
  EXPECT_TRUE(IsValidUtf8(""));
  EXPECT_TRUE(IsValidUtf8("plain ascii"));
  EXPECT_TRUE(IsValidUtf8("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"));
  EXPECT_FALSE(IsValidUtf8("\xff"));
  EXPECT_FALSE(IsValidUtf8("\xc3"));              // truncated
  EXPECT_FALSE(IsValidUtf8("\xe2\x82"));          // truncated
  EXPECT_FALSE(IsValidUtf8("\xc0\xaf"));          // overlong '/'
  EXPECT_FALSE(IsValidUtf8("\xed\xa0\x80"));      // surrogate
  EXPECT_FALSE(IsValidUtf8("\xf4\x90\x80\x80"));  // over U+10FFFF
  EXPECT_FALSE(IsValidUtf8("a\x80"));             // stray continuation
}

TEST(JsonTest, EscapesStrings) {
  EXPECT_EQ(JsonQuote("a\"b\\c"), "\"a\\\"b\\\\c\"");
  EXPECT_EQ(JsonQuote("\n\t\r\b\f"), "\"\\n\\t\\r\\b\\f\"");
  EXPECT_EQ(JsonQuote(std::string("\x00\x1f\x7f", 3)), "\"\\u0000\\u001f\\u007f\"");
  EXPECT_EQ(JsonQuote("caf\xc3\xa9"), "\"caf\xc3\xa9\"");
}

TEST(JsonTest, Base64) {
  EXPECT_EQ(Base64Encode(""), "");
  EXPECT_EQ(Base64Encode("f"), "Zg==");
  EXPECT_EQ(Base64Encode("fo"), "Zm8=");
  EXPECT_EQ(Base64Encode("foo"), "Zm9v");
  EXPECT_EQ(Base64Encode("foobar"), "Zm9vYmFy");
  EXPECT_EQ(Base64Encode(std::string("\xff\x00\xfe", 3)), "/wD+");
}

TEST(JsonTest, FormatsCommandOutput) {
  EXPECT_EQ(FormatGetJson("k", "v\"1", 3), "{\"key\":\"k\",\"value\":\"v\\\"1\",\"version\":3}\n");
  EXPECT_EQ(FormatGetJson("k", std::string("\xff\x00", 2), 4),
            "{\"key\":\"k\",\"value_base64\":\"/wA=\",\"version\":4}\n");
  EXPECT_EQ(FormatPutJson("\xff", 9), "{\"key_base64\":\"/w==\",\"version\":9}\n");
  EXPECT_EQ(FormatDelJson("k"), "{\"key\":\"k\",\"deleted\":true}\n");
}

}  // namespace
}  // namespace rkv::kvctl
