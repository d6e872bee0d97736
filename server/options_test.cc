#include "server/options.h"

#include <gtest/gtest.h>

#include "common/layout.h"

namespace rkv::server {
namespace {

ServerOptions Valid() {
  ServerOptions o;
  o.data_dir = "/nonexistent/but/not/checked/here";
  o.token = "secret";
  return o;
}

TEST(OptionsTest, DefaultsWithRequiredFieldsAreValid) {
  Status s = ValidateOptions(Valid());
  EXPECT_TRUE(s.ok()) << s;
}

TEST(OptionsTest, EveryBadValueIsRejectedNamingItsFlag) {
  struct Case {
    const char* flag;
    void (*mutate)(ServerOptions&);
  };
  const Case cases[] = {
      {"--listen", [](ServerOptions& o) { o.listen = "no-port"; }},
      {"--listen", [](ServerOptions& o) { o.listen = "host:99999"; }},
      {"--data_dir", [](ServerOptions& o) { o.data_dir.clear(); }},
      {"--token_file", [](ServerOptions& o) { o.token.clear(); }},
      {"--max_key_bytes", [](ServerOptions& o) { o.max_key_bytes = 0; }},
      {"--max_key_bytes", [](ServerOptions& o) { o.max_key_bytes = 70000; }},
      {"--max_value_bytes", [](ServerOptions& o) { o.max_value_bytes = layout::kMaxValueBytesLimit + 1; }},
      {"--memory", [](ServerOptions& o) { o.memory_bytes = 4096; }},
      {"--memory", [](ServerOptions& o) { o.memory_bytes = layout::kMaxHeapBytes + 64; }},
      {"--max_keys", [](ServerOptions& o) { o.max_keys = 0; }},
      {"--ring_bytes", [](ServerOptions& o) { o.ring_bytes = 1000; }},
      {"--ring_bytes", [](ServerOptions& o) { o.ring_bytes = 2 * 1024 * 1024; }},  // < 2x ~1 MiB block
      {"--max_connections", [](ServerOptions& o) { o.max_connections = 0; }},
      {"--grace_period_ms", [](ServerOptions& o) { o.grace_period_ms = 1; }},
      {"--grace_period_ms", [](ServerOptions& o) { o.grace_period_ms = 3'600'000; }},
  };
  for (const Case& c : cases) {
    ServerOptions o = Valid();
    c.mutate(o);
    Status s = ValidateOptions(o);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << c.flag;
    EXPECT_NE(s.message().find(c.flag), std::string::npos) << s;
    EXPECT_EQ(s.message().find('\n'), std::string::npos) << "one line: " << s;
  }
}

TEST(OptionsTest, RingMustHoldTwoLargestBlocks) {
  ServerOptions o = Valid();
  o.max_value_bytes = layout::kMaxValueBytesLimit;
  EXPECT_FALSE(ValidateOptions(o).ok());  // default 4 MiB ring is too small
  o.ring_bytes = 2 * MaxBlockBytes(o);
  EXPECT_TRUE(ValidateOptions(o).ok());
}

TEST(OptionsTest, ParsesByteSizes) {
  EXPECT_EQ(*ParseByteSize("4096"), 4096u);
  EXPECT_EQ(*ParseByteSize("64K"), 64u << 10);
  EXPECT_EQ(*ParseByteSize("256M"), 256u << 20);
  EXPECT_EQ(*ParseByteSize("256mib"), 256u << 20);
  EXPECT_EQ(*ParseByteSize("1G"), uint64_t{1} << 30);
  EXPECT_EQ(*ParseByteSize("2GB"), uint64_t{2} << 30);
  EXPECT_EQ(*ParseByteSize("1T"), uint64_t{1} << 40);
  for (const char* bad : {"", "M", "-1", "12X", "1.5G", "1GG", "99999999999999999999", "20000000T", " 1"}) {
    EXPECT_EQ(ParseByteSize(bad).status().code(), StatusCode::kInvalidArgument) << bad;
  }
}

}  // namespace
}  // namespace rkv::server
