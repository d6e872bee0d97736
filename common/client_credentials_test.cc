#include "common/client_credentials.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

namespace rkv {
namespace {

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir != nullptr ? dir : "/tmp") + "/rkv_client_credentials_test_" + std::to_string(::getpid()) +
         "_" + name;
}

void Write(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
}

TEST(ClientCredentialsTest, ParsesNamesTokensCommentsAndBlankLines) {
  auto parsed = ClientCredentials::Parse(
      "# the analytics team\n\nalice  secret-a\n  bob\tsecret-b  \r\n# retired: carol x\nsvc.batch_1-x s3\n", "f");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ASSERT_EQ(parsed->size(), 3u);
  EXPECT_EQ(parsed->credentials()[0].name, "alice");
  EXPECT_EQ(parsed->credentials()[1].name, "bob");
  EXPECT_EQ(parsed->credentials()[2].name, "svc.batch_1-x");
  EXPECT_TRUE(parsed->Holds("secret-b"));
  EXPECT_FALSE(parsed->Holds("secret"));
  const Sha256Digest d = TokenDigest("secret-a");
  const auto match = parsed->Find(d.data());
  ASSERT_TRUE(match.has_value());
  EXPECT_EQ(match->name, "alice");
  EXPECT_FALSE(match->revoked);
  const Sha256Digest unknown = TokenDigest("nobody");
  EXPECT_FALSE(parsed->Find(unknown.data()).has_value());
  EXPECT_TRUE(parsed->Contains("alice", d));
  EXPECT_FALSE(parsed->Contains("bob", d));
}

void ExpectRefused(std::string_view text, const std::string& expected) {
  auto parsed = ClientCredentials::Parse(text, "creds");
  ASSERT_FALSE(parsed.ok()) << text;
  EXPECT_EQ(parsed.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(parsed.status().message().find(expected), std::string::npos) << parsed.status();
}

TEST(ClientCredentialsTest, RefusesBadLinesWithTheirLineNumber) {
  ExpectRefused("alice a\nbob\n", "creds:2: expected NAME TOKEN");
  ExpectRefused("alice a\n\nbob two words\n", "creds:3:");
  ExpectRefused("al/ice a\n", "creds:1: credential name \"al/ice\"");
  ExpectRefused(std::string(65, 'n') + " a\n", "creds:1: credential name");
  ExpectRefused("alice a\x01" "b\n", "creds:1:");
  ExpectRefused("alice " + std::string(kMaxTokenFileBytes + 1, 't') + "\n", "longer than");
  EXPECT_TRUE(ClientCredentials::Parse(std::string(64, 'n') + " " + std::string(kMaxTokenFileBytes, 't'), "c").ok());
}

TEST(ClientCredentialsTest, RefusesDuplicatesNamingTheFirstLine) {
  ExpectRefused("alice a\n# x\nalice b\n", "creds:3: credential name alice is given twice (first on line 1)");
  ExpectRefused("alice a\nbob b\ncarol a\n", "creds:3: credential carol has the token of credential alice "
                                             "(first on line 1)");
}

TEST(ClientCredentialsTest, RefusesAnEmptySetAndTooMany) {
  ExpectRefused("", "creds: holds no credential");
  ExpectRefused("# only a comment\n\n", "holds no credential");
  std::string many;
  for (size_t i = 0; i <= ClientCredentials::kMaxCredentials; ++i) {
    many += "c" + std::to_string(i) + " t" + std::to_string(i) + "\n";
  }
  ExpectRefused(many, "more than 1024 credentials");
}

TEST(ClientCredentialsTest, ReadFileIsBoundedAndRefusesDirectoriesAndMissingFiles) {
  const std::string path = TempPath("ok");
  Write(path, "alice a\n");
  auto ok = ClientCredentials::ReadFile(path);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->size(), 1u);

  auto zero = ClientCredentials::ReadFile("/dev/zero");
  ASSERT_FALSE(zero.ok());
  EXPECT_NE(zero.status().message().find("holds more than"), std::string::npos) << zero.status();
  auto dir = ClientCredentials::ReadFile("/");
  ASSERT_FALSE(dir.ok());
  EXPECT_NE(dir.status().message().find("is a directory"), std::string::npos) << dir.status();
  auto missing = ClientCredentials::ReadFile(path + ".missing");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound) << missing.status();
  std::remove(path.c_str());
}

TEST(ClientCredentialsTest, LoadCombinesTheTokenFileAndRefusesOtherRoles) {
  const std::string path = TempPath("load");
  Write(path, "alice a\nbob b\n");
  auto both = LoadClientCredentials("main-token", path, {"cluster", ""});
  ASSERT_TRUE(both.ok()) << both.status();
  ASSERT_EQ(both->size(), 3u);
  EXPECT_EQ(both->credentials()[0].name, "token");
  auto only_file = LoadClientCredentials("", path, {});
  ASSERT_TRUE(only_file.ok()) << only_file.status();
  EXPECT_EQ(only_file->size(), 2u);

  auto same_token = LoadClientCredentials("a", path, {});
  ASSERT_FALSE(same_token.ok());
  EXPECT_NE(same_token.status().message().find("credential alice holds --token_file's token"), std::string::npos)
      << same_token.status();
  Write(path, "token t\n");
  auto named_token = LoadClientCredentials("main-token", path, {});
  ASSERT_FALSE(named_token.ok());
  EXPECT_NE(named_token.status().message().find("--token_file's credential"), std::string::npos);
  Write(path, "alice cluster\n");
  auto cluster = LoadClientCredentials("main-token", path, {"cluster"});
  ASSERT_FALSE(cluster.ok());
  EXPECT_NE(cluster.status().message().find("client credential alice is the cluster or the operator credential"),
            std::string::npos)
      << cluster.status();
  EXPECT_FALSE(LoadClientCredentials("", "", {}).ok());
  std::remove(path.c_str());
}

TEST(ClientCredentialsTest, ReplaceReportsTheChangeAndRemembersRevokedNames) {
  auto first = ClientCredentials::Parse("alice a\nbob b\ncarol c\n", "1");
  ASSERT_TRUE(first.ok());
  LiveClientCredentials live(*first);
  EXPECT_EQ(live.generation(), 0u);
  // bob removed, carol's token changed, dave added.
  auto second = ClientCredentials::Parse("alice a\ncarol c2\ndave d\n", "2");
  ASSERT_TRUE(second.ok());
  const ClientCredentials::Change change = live.Replace(*second);
  EXPECT_EQ(live.generation(), 1u);
  EXPECT_EQ(change.added, (std::vector<std::string>{"carol", "dave"}));
  EXPECT_EQ(change.removed, (std::vector<std::string>{"bob", "carol"}));

  const auto now = live.current();
  const Sha256Digest bob = TokenDigest("b");
  const auto revoked = now->Find(bob.data());
  ASSERT_TRUE(revoked.has_value());
  EXPECT_EQ(revoked->name, "bob");
  EXPECT_TRUE(revoked->revoked);
  EXPECT_FALSE(now->Contains("bob", bob));
  EXPECT_FALSE(now->Contains("carol", TokenDigest("c")));
  EXPECT_TRUE(now->Contains("carol", TokenDigest("c2")));

  // Given back, bob is valid again and no longer revoked.
  auto third = ClientCredentials::Parse("alice a\nbob b\n", "3");
  ASSERT_TRUE(third.ok());
  live.Replace(*third);
  const auto back = live.current()->Find(bob.data());
  ASSERT_TRUE(back.has_value());
  EXPECT_FALSE(back->revoked);
  const Sha256Digest dave = TokenDigest("d");
  ASSERT_TRUE(live.current()->Find(dave.data()).has_value());
  EXPECT_TRUE(live.current()->Find(dave.data())->revoked);
}

TEST(ClientCredentialsTest, ParseGivesTheTokenOfTheOwnNameOnly) {
  std::string own;
  auto set = ClientCredentials::Parse("# servers\nsrv-a token-a\nsrv-b token-b\n", "servers", "srv-b", &own);
  ASSERT_TRUE(set.ok()) << set.status();
  EXPECT_EQ(own, "token-b");
  EXPECT_EQ(set->size(), 2u);
  const auto missing = ClientCredentials::Parse("srv-a token-a\n", "servers", "srv-c", &own);
  EXPECT_EQ(missing.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(missing.status().message(), "servers: holds no credential named \"srv-c\"");
}

TEST(ClientCredentialsTest, AClientCredentialMayNotBeAServers) {
  auto servers = ClientCredentials::Parse("srv-a token-a\n", "servers");
  ASSERT_TRUE(servers.ok()) << servers.status();
  const auto refused = LoadClientCredentials("token-a", "", {}, &*servers);
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(refused.status().message(),
            "client credential token is server credential srv-a: a server's credential must be one no client holds");
  EXPECT_TRUE(LoadClientCredentials("client", "", {}, &*servers).ok());
}

}  // namespace
}  // namespace rkv
