#include "proto/auth.h"

#include <grpcpp/test/server_context_test_spouse.h>
#include <gtest/gtest.h>

namespace rkv::control {
namespace {

// SHA-256("rkv-token-v1" "secret"), computed independently.
constexpr char kSecretDigest[] = "adee65e914909443173dfcdd38f35c406807081519b1f89405f00c73d660c898";

TEST(AuthTest, DigestHexIsLowercaseSha256OfPrefixedToken) {
  EXPECT_EQ(TokenDigestHex("secret"), kSecretDigest);
  EXPECT_EQ(TokenDigestHex("secret").size(), kTokenDigestHexChars);
  EXPECT_NE(TokenDigestHex("secret2"), kSecretDigest);
}

TEST(AuthTest, CheckTokenAcceptsOnlyTheExactDigest) {
  {
    grpc::ServerContext ctx;
    grpc::testing::ServerContextTestSpouse spouse(&ctx);
    spouse.AddClientMetadata(kTokenMetadataKey, kSecretDigest);
    EXPECT_TRUE(CheckToken(&ctx, kSecretDigest).ok());
  }
  {
    grpc::ServerContext ctx;  // no metadata at all
    const grpc::Status s = CheckToken(&ctx, kSecretDigest);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED);
    EXPECT_EQ(s.error_message(), "missing or invalid token");
  }
  {
    grpc::ServerContext ctx;  // the raw token instead of its digest
    grpc::testing::ServerContextTestSpouse spouse(&ctx);
    spouse.AddClientMetadata(kTokenMetadataKey, "secret");
    EXPECT_EQ(CheckToken(&ctx, kSecretDigest).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  }
  {
    grpc::ServerContext ctx;  // one character off
    grpc::testing::ServerContextTestSpouse spouse(&ctx);
    std::string wrong = kSecretDigest;
    wrong.back() = '9';
    spouse.AddClientMetadata(kTokenMetadataKey, wrong);
    EXPECT_EQ(CheckToken(&ctx, kSecretDigest).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  }
  {
    grpc::ServerContext ctx;  // two entries, one right: ambiguous, refused
    grpc::testing::ServerContextTestSpouse spouse(&ctx);
    spouse.AddClientMetadata(kTokenMetadataKey, kSecretDigest);
    spouse.AddClientMetadata(kTokenMetadataKey, TokenDigestHex("other"));
    EXPECT_EQ(CheckToken(&ctx, kSecretDigest).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  }
  {
    grpc::ServerContext ctx;  // an empty expectation never matches
    grpc::testing::ServerContextTestSpouse spouse(&ctx);
    spouse.AddClientMetadata(kTokenMetadataKey, "");
    EXPECT_EQ(CheckToken(&ctx, "").error_code(), grpc::StatusCode::UNAUTHENTICATED);
  }
}

}  // namespace
}  // namespace rkv::control
