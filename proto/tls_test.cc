// TLS configuration: which files a server and a client role need, what a
// bad file is told as, and a TLS control-plane call (a plain client and a
// client with another CA refused with a message that says TLS).
#include "proto/tls.h"

#include <filesystem>

#include <gtest/gtest.h>

#include "proto/coordinator_set.h"
#include "proto/grpc_server.h"
#include "proto/rkv.grpc.pb.h"
#include "tests/temp_dir.h"
#include "tests/test_pki.h"

namespace rkv::control {
namespace {

using ::rkv::testing::MakeTestCa;
using ::rkv::testing::MakeTestCert;
using ::rkv::testing::ReadTestFile;
using ::rkv::testing::ReplaceFile;
using ::rkv::testing::TempDir;
using ::rkv::testing::TestCa;
using ::rkv::testing::TestCert;

class TlsFilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto ca = MakeTestCa(dir_.path(), "test");
    ASSERT_TRUE(ca.ok()) << ca.status();
    ca_ = *ca;
    auto cert = MakeTestCert(ca_, dir_.path(), "node");
    ASSERT_TRUE(cert.ok()) << cert.status();
    cert_ = *cert;
    auto other = MakeTestCert(ca_, dir_.path(), "other");
    ASSERT_TRUE(other.ok()) << other.status();
    other_ = *other;
  }
  TlsFiles Good() const { return TlsFiles{cert_.cert, cert_.key, ca_.cert}; }
  std::string Path(const std::string& name) const { return dir_.path() + "/" + name; }
  std::string Write(const std::string& name, const std::string& contents) const {
    EXPECT_TRUE(ReplaceFile(Path(name), contents).ok());
    return Path(name);
  }

  TempDir dir_;
  TestCa ca_;
  TestCert cert_;
  TestCert other_;
};

void ExpectInvalid(const Status& s, const std::vector<std::string>& parts) {
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s;
  for (const std::string& part : parts) EXPECT_NE(s.message().find(part), std::string::npos) << s << " / " << part;
}

TEST_F(TlsFilesTest, NoFilesIsPlainGrpc) {
  EXPECT_TRUE(CheckServerTlsFiles({}).ok());
  EXPECT_TRUE(CheckClientTlsFiles({}).ok());
  EXPECT_NE(*MakeServerCredentials({}), nullptr);
  EXPECT_NE(*MakeChannelCredentials({}), nullptr);
}

TEST_F(TlsFilesTest, GoodFilesPass) {
  EXPECT_TRUE(CheckServerTlsFiles(Good()).ok()) << CheckServerTlsFiles(Good());
  EXPECT_TRUE(CheckClientTlsFiles(Good()).ok());
  EXPECT_TRUE(CheckClientTlsFiles(TlsFiles{"", "", ca_.cert}).ok());
  auto server = MakeServerCredentials(Good());
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_NE(*server, nullptr);
  auto channel = MakeChannelCredentials(TlsFiles{"", "", ca_.cert});
  ASSERT_TRUE(channel.ok()) << channel.status();
  EXPECT_NE(*channel, nullptr);
}

TEST_F(TlsFilesTest, ServerNeedsAllThreeNamingTheMissingFlag) {
  TlsFiles f = Good();
  f.ca.clear();
  ExpectInvalid(CheckServerTlsFiles(f), {"--tls_ca is missing", "--tls_cert, --tls_key and --tls_ca"});
  f = Good();
  f.key.clear();
  ExpectInvalid(CheckServerTlsFiles(f), {"--tls_key is missing"});
  f = Good();
  f.cert.clear();
  ExpectInvalid(CheckServerTlsFiles(f), {"--tls_cert is missing"});
  ExpectInvalid(MakeServerCredentials(TlsFiles{"", "", ca_.cert}).status(), {"--tls_cert is missing"});
  // CA alone is a server error, not a client one.
  ExpectInvalid(CheckServerTlsFiles(TlsFiles{"", "", ca_.cert}), {"--tls_cert is missing"});
}

TEST_F(TlsFilesTest, ClientNeedsTheCaAndCertWithKey) {
  ExpectInvalid(CheckClientTlsFiles(TlsFiles{cert_.cert, cert_.key, ""}), {"--tls_ca is missing"});
  ExpectInvalid(CheckClientTlsFiles(TlsFiles{cert_.cert, "", ca_.cert}), {"--tls_key is missing"});
  ExpectInvalid(CheckClientTlsFiles(TlsFiles{"", cert_.key, ca_.cert}), {"--tls_cert is missing"});
  ExpectInvalid(MakeChannelCredentials(TlsFiles{cert_.cert, "", ca_.cert}).status(), {"--tls_key is missing"});
  // librkv names its fields.
  ExpectInvalid(CheckClientTlsFiles(TlsFiles{"", "", Path("absent.pem")}, ClientOptionsTlsNames()),
                {"ClientOptions.tls_ca_file", "absent.pem", "No such file"});
}

TEST_F(TlsFilesTest, MissingOrUnreadableFilesAreNamed) {
  TlsFiles f = Good();
  f.ca = Path("absent-ca.pem");
  ExpectInvalid(CheckServerTlsFiles(f), {"--tls_ca", "absent-ca.pem", "cannot read it", "No such file"});
  f = Good();
  f.cert = dir_.path();
  ExpectInvalid(CheckServerTlsFiles(f), {"--tls_cert", "is not a regular file"});
  f = Good();
  f.key = Write("empty.key", "");
  ExpectInvalid(CheckServerTlsFiles(f), {"--tls_key", "empty.key", "is empty"});
  f = Good();
  f.ca = Write("huge.pem", std::string(kMaxTlsFileBytes + 1, 'x'));
  ExpectInvalid(CheckServerTlsFiles(f), {"--tls_ca", "huge.pem", "bytes"});
  if (::geteuid() != 0) {  // root reads any file
    f = Good();
    f.key = Write("locked.key", ReadTestFile(cert_.key));
    std::filesystem::permissions(f.key, std::filesystem::perms::none);
    ExpectInvalid(CheckServerTlsFiles(f), {"--tls_key", "locked.key", "Permission denied"});
  }
}

TEST_F(TlsFilesTest, BadPemIsNamed) {
  TlsFiles f = Good();
  f.ca = Write("text.pem", "not a certificate\n");
  ExpectInvalid(CheckServerTlsFiles(f), {"--tls_ca", "text.pem", "holds no PEM certificate"});
  f = Good();
  f.cert = Write("broken.crt",
                 "-----BEGIN CERTIFICATE-----\nMIIBbroken0000000000000000000000\n-----END CERTIFICATE-----\n");
  ExpectInvalid(CheckServerTlsFiles(f), {"--tls_cert", "broken.crt", "does not parse"});
  f = Good();
  f.key = cert_.cert;  // a certificate where the key belongs
  ExpectInvalid(CheckServerTlsFiles(f), {"--tls_key", "no usable PEM private key"});
  f = Good();
  f.cert = cert_.key;  // a key where the certificate belongs
  ExpectInvalid(CheckServerTlsFiles(f), {"--tls_cert", "holds no PEM certificate"});
  f = Good();
  f.key = other_.key;  // another certificate's key
  ExpectInvalid(CheckServerTlsFiles(f), {"--tls_key", "is not the key of the certificate in --tls_cert"});
  // The same checks stop a server before it listens.
  v1::Coordinator::Service service;
  ExpectInvalid(StartGrpcServer("127.0.0.1:0", {&service}, "", f).status(), {"is not the key"});
}

TEST(TlsHostsTest, Loopback) {
  EXPECT_TRUE(IsLoopbackHost("127.0.0.1"));
  EXPECT_TRUE(IsLoopbackHost("127.3.2.1"));
  EXPECT_TRUE(IsLoopbackHost("::1"));
  EXPECT_TRUE(IsLoopbackHost("localhost"));
  EXPECT_FALSE(IsLoopbackHost("0.0.0.0"));
  EXPECT_FALSE(IsLoopbackHost("::"));
  EXPECT_FALSE(IsLoopbackHost("10.0.0.1"));
  EXPECT_FALSE(IsLoopbackHost("1270.0.0.1"));
}

// A call through CoordinatorSet to a coordinator serving TLS: answered
// (UNIMPLEMENTED from the bare service) with the CA, with or without a
// client certificate; a plain client and a client of another CA are not
// connected, and the error says TLS.
TEST_F(TlsFilesTest, ControlPlaneCallsNeedTheCa) {
  v1::Coordinator::Service service;  // every method UNIMPLEMENTED
  auto started = StartGrpcServer("127.0.0.1:0", {&service}, "tls test: ", Good());
  ASSERT_TRUE(started.ok()) << started.status();
  const auto call = [&](const TlsFiles& tls, std::chrono::seconds patience) -> Status {
    auto set = CoordinatorSet::Create(started->address, "token", tls);
    if (!set.ok()) return set.status();
    v1::ClusterMap map;
    return (*set)->CallAny("GetClusterMap", CoordinatorSet::Clock::now() + patience,
                           [&](v1::Coordinator::Stub& stub, grpc::ClientContext* context) {
                             return stub.GetClusterMap(context, v1::GetClusterMapRequest(), &map);
                           });
  };
  Status s = call(TlsFiles{"", "", ca_.cert}, std::chrono::seconds(60));
  EXPECT_EQ(s.code(), StatusCode::kUnimplemented) << s;
  s = call(TlsFiles{other_.cert, other_.key, ca_.cert}, std::chrono::seconds(60));
  EXPECT_EQ(s.code(), StatusCode::kUnimplemented) << s;

  s = call(TlsFiles{}, std::chrono::seconds(3));
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s;
  EXPECT_NE(s.message().find("TLS required?"), std::string::npos) << s;
  EXPECT_NE(s.message().find("--tls_ca"), std::string::npos) << s;

  auto wrong = MakeTestCa(dir_.path(), "wrong");
  ASSERT_TRUE(wrong.ok()) << wrong.status();
  s = call(TlsFiles{"", "", wrong->cert}, std::chrono::seconds(3));
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s;
  EXPECT_NE(s.message().find("TLS handshake failed?"), std::string::npos) << s;

  // A client certificate of another CA is refused by the server.
  auto stranger = MakeTestCert(*wrong, dir_.path(), "stranger");
  ASSERT_TRUE(stranger.ok()) << stranger.status();
  s = call(TlsFiles{stranger->cert, stranger->key, ca_.cert}, std::chrono::seconds(3));
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s;
  EXPECT_NE(s.message().find("TLS handshake failed?"), std::string::npos) << s;
  started->server->Shutdown(std::chrono::system_clock::now());
}

// Nothing listening: no TLS hint (the peer is simply down).
TEST(TlsHintTest, NoHintWhenNothingListens) {
  v1::Coordinator::Service service;
  auto started = StartGrpcServer("127.0.0.1:0", std::vector<grpc::Service*>{&service}, "");
  ASSERT_TRUE(started.ok()) << started.status();
  const std::string address = started->address;
  started->server->Shutdown(std::chrono::system_clock::now());
  started->server.reset();
  EXPECT_EQ(ConnectFailureHint(address, false), "");
  EXPECT_EQ(ConnectFailureHint("not an address", true), "");
}

}  // namespace
}  // namespace rkv::control
