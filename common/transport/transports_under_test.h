// The transports a parameterized transport suite runs against, named by
// $RKV_TRANSPORTS (comma-separated; default "tcp,fault(tcp),tls"): "tcp",
// "verbs", "tls" (tcp with TLS on both sides: Options::tls with a test CA
// and a certificate for 127.0.0.1, made once per process), or
// "fault(KIND)", a FaultTransport with no fault set around KIND. Shared by the suites that test transport.h's promises for every
// transport (transport_conformance_test.cc, poll_group_conformance_test.cc).
// Test code only.
#pragma once

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "common/transport/factory.h"
#include "common/transport/fault/fault_transport.h"
#include "common/transport/transport.h"
#include "common/transport/verbs/verbs_transport.h"
#include "tests/test_pki.h"

namespace rkv::transport::testing {

inline std::string Trimmed(std::string s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  size_t i = 0;
  while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
  return s.substr(i);
}

// The transports under test: $RKV_TRANSPORTS, or tcp alone and wrapped.
inline std::vector<std::string> TransportsUnderTest() {
  std::vector<std::string> names;
  if (const char* env = std::getenv("RKV_TRANSPORTS")) {
    std::string list = env;
    size_t start = 0;
    while (start <= list.size()) {
      const size_t comma = std::min(list.find(',', start), list.size());
      const std::string name = Trimmed(list.substr(start, comma - start));
      if (!name.empty()) names.push_back(name);
      start = comma + 1;
    }
  }
  if (names.empty()) names = {"tcp", "fault(tcp)", "tls"};
  return names;
}

// A test name part: "fault(tcp)" -> "fault_tcp".
inline std::string NamePart(const std::string& name) {
  std::string out;
  for (char c : name) {
    const bool alnum = std::isalnum(static_cast<unsigned char>(c)) != 0;
    if (alnum) {
      out.push_back(c);
    } else if (!out.empty() && out.back() != '_') {
      out.push_back('_');
    }
  }
  while (!out.empty() && out.back() == '_') out.pop_back();
  return out.empty() ? "unnamed" : out;
}

// "fault(tcp)" -> "tcp"; anything else -> "".
inline std::string WrappedName(const std::string& name) {
  if (name.size() > 7 && name.rfind("fault(", 0) == 0 && name.back() == ')') return name.substr(6, name.size() - 7);
  return "";
}

// The PEM files of the "tls" instance, made on first use in a temporary
// folder that is removed when the process exits.
inline StatusOr<TcpTlsFiles> TestTlsFiles() {
  struct Made {
    std::string dir;
    StatusOr<TcpTlsFiles> files = Internal("not made");
    ~Made() {
      std::error_code ec;
      if (!dir.empty()) std::filesystem::remove_all(dir, ec);
    }
  };
  static Made made;
  static const bool ready = [] {
    std::string tmpl = (std::filesystem::temp_directory_path() / "rkv-tls-XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr) {
      made.files = Internal("mkdtemp failed for the test certificates");
      return false;
    }
    made.dir = tmpl;
    StatusOr<rkv::testing::TestCa> ca = rkv::testing::MakeTestCa(made.dir, "transport");
    if (!ca.ok()) {
      made.files = ca.status();
      return false;
    }
    StatusOr<rkv::testing::TestCert> cert = rkv::testing::MakeTestCert(*ca, made.dir, "server");
    if (!cert.ok()) {
      made.files = cert.status();
      return false;
    }
    made.files = TcpTlsFiles{cert->cert, cert->key, ca->cert};
    return true;
  }();
  (void)ready;
  return made.files;
}

// The transport that `name` stands for.
inline StatusOr<std::unique_ptr<Transport>> MakeTransport(const std::string& name, const Options& options) {
  if (const std::string inner = WrappedName(name); !inner.empty()) {
    RKV_ASSIGN_OR_RETURN(std::unique_ptr<Transport> wrapped, MakeTransport(inner, options));
    return std::unique_ptr<Transport>(std::make_unique<fault::FaultTransport>(std::move(wrapped)));
  }
  if (name == "tcp") return CreateTransport(Kind::kTcp, options);
  if (name == "tls") {
    Options with_tls = options;
    RKV_ASSIGN_OR_RETURN(with_tls.tls, TestTlsFiles());
    return CreateTransport(Kind::kTcp, with_tls);
  }
  if (name == "verbs") {
    if (!VerbsDeviceAvailable()) {
      return Unavailable(
          "no RDMA device with an active port on this machine: the verbs instance needs one (run it in "
          "the SoftRoCE guest: tests/verbs_suite.sh)");
    }
    return CreateTransport(Kind::kVerbs, options);
  }
  return InvalidArgument("unknown transport '" + name +
                         "' in $RKV_TRANSPORTS: expected tcp, tls, verbs or fault(KIND)");
}

// The innermost transport's kind name: "fault(verbs)" -> "verbs", "tls" ->
// "tcp".
inline std::string BaseName(const std::string& name) {
  const std::string inner = WrappedName(name);
  if (inner.empty()) return name == "tls" ? "tcp" : name;
  return BaseName(inner);
}

}  // namespace rkv::transport::testing
