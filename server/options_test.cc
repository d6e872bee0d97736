#include "server/options.h"

#include <gtest/gtest.h>

#include "common/layout.h"
#include "common/transport/transport.h"

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

TEST(OptionsTest, ThreadsDefaultToTheCores) {
  EXPECT_GE(ServerOptions{}.threads, 1u);
  EXPECT_LE(ServerOptions{}.threads, kMaxThreads);
  EXPECT_EQ(ServerOptions{}.threads, DefaultThreads());
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
      {"--write_back_bytes", [](ServerOptions& o) { o.write_back_bytes = 1 << 20; }},  // durability wal
      {"--write_back_bytes",
       [](ServerOptions& o) {
         o.durability = Durability::kNone;
         o.write_back_bytes = kMinWriteBackBytes - 1;
       }},
      {"--write_back_bytes",
       [](ServerOptions& o) {
         o.durability = Durability::kNone;
         o.write_back_bytes = kMaxWriteBackBytes + 1;
       }},
      {"--max_connections", [](ServerOptions& o) { o.max_connections = 0; }},
      {"--threads", [](ServerOptions& o) { o.threads = 0; }},
      {"--threads", [](ServerOptions& o) { o.threads = kMaxThreads + 1; }},
      {"--grace_period_ms", [](ServerOptions& o) { o.grace_period_ms = 1; }},
      {"--grace_period_ms", [](ServerOptions& o) { o.grace_period_ms = 3'600'000; }},
      {"--handshake_timeout_ms", [](ServerOptions& o) { o.handshake_timeout_ms = 0; }},
      {"--handshake_timeout_ms", [](ServerOptions& o) { o.handshake_timeout_ms = kMaxTimeoutMs + 1; }},
      {"--frame_timeout_ms", [](ServerOptions& o) { o.frame_timeout_ms = 10; }},
      {"--idle_timeout_s", [](ServerOptions& o) { o.idle_timeout_s = kMaxIdleTimeoutS + 1; }},
      {"--idle_timeout_s", [](ServerOptions& o) { o.idle_timeout_s = 1; }},  // below the 30 s frame limit
      {"--probe_idle_ms", [](ServerOptions& o) { o.probe_idle_ms = 10; }},
      {"--probe_timeout_ms", [](ServerOptions& o) { o.probe_timeout_ms = 0; }},
      {"--probe_timeout_ms", [](ServerOptions& o) { o.probe_timeout_ms = kMaxTimeoutMs + 1; }},
      {"--listen_backlog", [](ServerOptions& o) { o.listen_backlog = 0; }},
      {"--listen_backlog", [](ServerOptions& o) { o.listen_backlog = transport::kMaxListenBacklog + 1; }},
      {"--catchup_rate_mb_per_s", [](ServerOptions& o) { o.catchup_rate_mb_per_s = kMaxCatchupRateMbPerS + 1; }},
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

TEST(OptionsTest, WriteBackLimitsDefaultTo64MiBAndOneKeyPerKiB) {
  ServerOptions o = Valid();
  EXPECT_EQ(WriteBackBytes(o), 64ULL << 20);
  EXPECT_EQ(WriteBackKeys(o), 65536u);
  o.durability = Durability::kNone;
  o.write_back_bytes = 1ULL << 30;
  EXPECT_TRUE(ValidateOptions(o).ok());
  EXPECT_EQ(WriteBackKeys(o), 1u << 20);
  o.write_back_bytes = kMinWriteBackBytes;
  EXPECT_TRUE(ValidateOptions(o).ok());
  EXPECT_EQ(WriteBackKeys(o), 64u);
}

TEST(OptionsTest, RingMustHoldTwoLargestBlocks) {
  ServerOptions o = Valid();
  o.max_value_bytes = layout::kMaxValueBytesLimit;
  EXPECT_FALSE(ValidateOptions(o).ok());  // default 4 MiB ring is too small
  o.ring_bytes = 2 * MaxBlockBytes(o);
  EXPECT_TRUE(ValidateOptions(o).ok());
}

TEST(OptionsTest, PollModes) {
  EXPECT_EQ(ServerOptions{}.poll, PollMode::kAdaptive);
  EXPECT_EQ(*ParsePollMode("adaptive"), PollMode::kAdaptive);
  EXPECT_EQ(*ParsePollMode("busy"), PollMode::kBusy);
  for (const char* bad : {"", "spin", "Busy", "busy "}) {
    const StatusOr<PollMode> parsed = ParsePollMode(bad);
    ASSERT_FALSE(parsed.ok()) << bad;
    EXPECT_EQ(parsed.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(parsed.status().message().find("expected adaptive or busy"), std::string::npos);
  }
  EXPECT_STREQ(PollModeName(PollMode::kBusy), "busy");
  EXPECT_STREQ(PollModeName(PollMode::kAdaptive), "adaptive");
  // Adaptive is the transport's own default; busy its largest bound, above
  // the worker's Poll timeout (so a connection's window never shrinks).
  EXPECT_EQ(PollSpinUs(PollMode::kAdaptive), transport::Options{}.poll_spin_us);
  EXPECT_EQ(PollSpinUs(PollMode::kBusy), 1'000'000);
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

TEST(ControlOptionsTest, StandaloneNeedsNothing) {
  EXPECT_TRUE(ValidateControlOptions(ControlOptions{}, "127.0.0.1:7700").ok());
  EXPECT_TRUE(ValidateControlOptions(ControlOptions{}, "0.0.0.0:7700").ok());
  EXPECT_EQ(EffectiveAdminListen(ControlOptions{}, "127.0.0.1:7700"), "");
}

TEST(ControlOptionsTest, BadValuesAreRejectedNamingTheirFlag) {
  struct Case {
    const char* flag;
    ControlOptions c;
    const char* listen;
  };
  const Case cases[] = {
      {"--coordinator", {"no-port", "", "", ""}, "127.0.0.1:7700"},
      {"--coordinator", {"127.0.0.1:0", "", "", ""}, "127.0.0.1:7700"},
      {"--coordinator", {"0.0.0.0:7600", "", "", ""}, "127.0.0.1:7700"},
      {"--coordinator", {"host:70000", "", "", ""}, "127.0.0.1:7700"},
      {"--coordinator", {"127.0.0.1:7600,,127.0.0.1:7601", "", "", ""}, "127.0.0.1:7700"},
      {"--coordinator", {"127.0.0.1:7600,0.0.0.0:7601", "", "", ""}, "127.0.0.1:7700"},
      {"--coordinator", {"127.0.0.1:7600,", "", "", ""}, "127.0.0.1:7700"},
      {"--admin_listen", {"", "nohostport", "", ""}, "127.0.0.1:7700"},
      {"--admin_listen", {"", "127.0.0.1:7700", "", ""}, "127.0.0.1:7700"},
      {"--advertise_address", {"", "", "10.0.0.1", ""}, "127.0.0.1:7700"},
      {"--advertise_address", {"", "", "10.0.0.1:0", ""}, "127.0.0.1:7700"},
      {"--advertise_address", {"127.0.0.1:7600", "", "0.0.0.0:7700", ""}, "0.0.0.0:7700"},
      {"--advertise_address", {"127.0.0.1:7600", "", "", ""}, "0.0.0.0:7700"},
      {"--advertise_address", {"127.0.0.1:7600", "", "", ""}, "[::]:7700"},
  };
  for (const Case& c : cases) {
    const Status s = ValidateControlOptions(c.c, c.listen);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << c.flag << " " << c.c.coordinator << "|"
                                                      << c.c.admin_listen << "|" << c.c.advertise_address;
    EXPECT_NE(s.message().find(c.flag), std::string::npos) << s;
  }
}

TEST(ControlOptionsTest, MetricsListenIsAHostPortOfItsOwn) {
  ControlOptions c;
  for (const char* good : {"127.0.0.1:9100", "0.0.0.0:0", "[::1]:9100", "127.0.0.1:0"}) {
    c.metrics_listen = good;
    EXPECT_TRUE(ValidateControlOptions(c, "127.0.0.1:7700").ok()) << good;
  }
  c.admin_listen = "127.0.0.1:7800";
  for (const char* bad : {"9100", "127.0.0.1:", "127.0.0.1:65536", "host:x", "127.0.0.1:7700", "127.0.0.1:7800"}) {
    c.metrics_listen = bad;
    const Status s = ValidateControlOptions(c, "127.0.0.1:7700");
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_TRUE(s.message().starts_with("--metrics_listen")) << s;
  }
}

TEST(ControlOptionsTest, CoordinatorIsOneAddressOrAList) {
  EXPECT_TRUE(ValidateControlOptions(ControlOptions{"127.0.0.1:7600", "", "", ""}, "127.0.0.1:7700").ok());
  EXPECT_TRUE(
      ValidateControlOptions(ControlOptions{"10.0.0.1:7600, 10.0.0.2:7600,c.example:7600", "", "", ""}, "127.0.0.1:7700")
          .ok());
  const Status s =
      ValidateControlOptions(ControlOptions{"10.0.0.1:7600,10.0.0.2", "", "", ""}, "127.0.0.1:7700");
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("--coordinator entry 2 '10.0.0.2'"), std::string::npos) << s;
}

TEST(ControlOptionsTest, ZonesArePrintableAsciiOfAtMost64Bytes) {
  ControlOptions c{"127.0.0.1:7600", "", "", "eu-west-1a rack 7"};
  EXPECT_TRUE(ValidateControlOptions(c, "127.0.0.1:7700").ok());
  c.zone = std::string(kMaxZoneBytes, 'z');
  EXPECT_TRUE(ValidateControlOptions(c, "127.0.0.1:7700").ok());
  for (const std::string& bad : {std::string(kMaxZoneBytes + 1, 'z'), std::string("tab\there"),
                                 std::string("caf\xc3\xa9")}) {
    const Status s = ValidateControlOptions(ControlOptions{"127.0.0.1:7600", "", "", bad}, "127.0.0.1:7700");
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(s.message().find("--zone"), std::string::npos) << s;
  }
}

TEST(ControlOptionsTest, WildcardListenIsFineWithAnAdvertisedAddress) {
  ControlOptions c{"127.0.0.1:7600", "", "10.1.2.3:7700", ""};
  EXPECT_TRUE(ValidateControlOptions(c, "0.0.0.0:7700").ok());
  EXPECT_TRUE(ValidateControlOptions(c, "[::]:7700").ok());
}

TEST(ControlOptionsTest, AdminListenDefaultsToTheDataHostWithACoordinator) {
  ControlOptions c{"127.0.0.1:7600", "", "", ""};
  EXPECT_EQ(EffectiveAdminListen(c, "127.0.0.1:7701"), "127.0.0.1:0");
  EXPECT_EQ(EffectiveAdminListen(c, "[::1]:7701"), "[::1]:0");
  c.admin_listen = "127.0.0.1:9000";
  EXPECT_EQ(EffectiveAdminListen(c, "127.0.0.1:7701"), "127.0.0.1:9000");
  // Standalone with an explicit --admin_listen serves Admin too.
  EXPECT_EQ(EffectiveAdminListen(ControlOptions{"", "127.0.0.1:0", "", ""}, "127.0.0.1:7701"), "127.0.0.1:0");
}

TEST(ControlOptionsTest, AdvertisedAddressNeverAnnouncesAWildcard) {
  EXPECT_EQ(*AdvertisedAddress("127.0.0.1:7701", "", ""), "127.0.0.1:7701");
  EXPECT_EQ(*AdvertisedAddress("0.0.0.0:7701", "10.0.0.5:7701", ""), "10.0.0.5:7701");
  EXPECT_EQ(*AdvertisedAddress("0.0.0.0:40123", "", "10.0.0.5"), "10.0.0.5:40123");
  EXPECT_EQ(*AdvertisedAddress("[::]:40123", "", "fd00::5"), "[fd00::5]:40123");
  EXPECT_FALSE(AdvertisedAddress("0.0.0.0:7701", "", "").ok());
  EXPECT_FALSE(AdvertisedAddress("0.0.0.0:7701", "", "0.0.0.0").ok());
  EXPECT_FALSE(AdvertisedAddress("127.0.0.1:0", "", "").ok());
  EXPECT_FALSE(AdvertisedAddress("garbage", "", "").ok());
}

TEST(OptionsTest, PerServerCredentialsNameThisServersOwn) {
  auto servers = ClientCredentials::Parse("srv-a token-a\nsrv-b token-b\n", "servers");
  ASSERT_TRUE(servers.ok()) << servers.status();
  ServerOptions o = Valid();
  o.server_credentials = *servers;
  o.server_credential_name = "srv-a";
  o.cluster_token = "token-a";
  EXPECT_TRUE(ValidateOptions(o).ok()) << ValidateOptions(o);
  // Peers are accepted with any server's credential.
  EXPECT_TRUE(PeerCredentials(o).Holds("token-b"));
  EXPECT_FALSE(PeerCredentials(o).Holds("secret"));

  ServerOptions unnamed = o;
  unnamed.server_credential_name.clear();
  EXPECT_NE(ValidateOptions(unnamed).message().find("needs --server_credential_name"), std::string::npos);
  ServerOptions wrong = o;
  wrong.cluster_token = "token-b";  // not srv-a's
  EXPECT_EQ(ValidateOptions(wrong).message(),
            "--server_credential_name srv-a is not a credential of --server_credentials_file");
  ServerOptions client = o;
  client.token = "token-b";
  EXPECT_NE(ValidateOptions(client).message().find("holds the client token"), std::string::npos);
  ServerOptions no_file = Valid();
  no_file.server_credential_name = "srv-a";
  EXPECT_EQ(ValidateOptions(no_file).message(), "--server_credential_name needs --server_credentials_file");
  // Without them, the cluster credential alone is a peer's.
  ServerOptions shared = Valid();
  shared.cluster_token = "cluster";
  EXPECT_TRUE(PeerCredentials(shared).Holds("cluster"));
  EXPECT_EQ(PeerCredentials(shared).size(), 1u);
}

}  // namespace
}  // namespace rkv::server
