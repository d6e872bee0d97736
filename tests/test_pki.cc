#include "tests/test_pki.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <vector>

#include <gtest/gtest.h>

#include "tests/run_command.h"

namespace rkv::testing {
namespace {

constexpr char kOpenssl[] = "openssl";

Status Run(const std::vector<std::string>& argv) {
  std::vector<std::string> full = {"/usr/bin/env", kOpenssl};
  full.insert(full.end(), argv.begin(), argv.end());
  const CommandResult r = RunCommand(full);
  if (r.exit_code == 0) return Status::Ok();
  std::string line = "openssl";
  for (const std::string& a : argv) line += " " + a;
  return Status(StatusCode::kInternal,
                line + " exited " + std::to_string(r.exit_code) + ": " + r.err + r.out);
}

Status Write(const std::string& path, const std::string& contents) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << contents;
  out.close();
  if (!out) return Status(StatusCode::kInternal, "cannot write " + path);
  return Status::Ok();
}

std::string RandomSerial() {
  std::random_device rd;
  std::mt19937_64 gen((uint64_t{rd()} << 32) | rd());
  return std::to_string(gen() >> 2);
}

}  // namespace

Status ReplaceFile(const std::string& path, const std::string& contents) {
  const std::string temp = path + ".new";
  if (Status s = Write(temp, contents); !s.ok()) return s;
  std::error_code ec;
  std::filesystem::rename(temp, path, ec);
  if (ec) return Status(StatusCode::kInternal, "rename " + temp + " -> " + path + ": " + ec.message());
  return Status::Ok();
}

std::string ReadTestFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    ADD_FAILURE() << "cannot read " << path;
    return "";
  }
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

StatusOr<TestCa> MakeTestCa(const std::string& dir, const std::string& name) {
  TestCa ca{dir + "/" + name + "-ca.crt", dir + "/" + name + "-ca.key"};
  if (Status s = Run({"req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                      "-keyout", ca.key, "-out", ca.cert, "-days", "3650", "-subj", "/CN=" + name + " CA",
                      "-addext", "basicConstraints=critical,CA:TRUE", "-addext",
                      "keyUsage=critical,keyCertSign,cRLSign"});
      !s.ok()) {
    return s;
  }
  return ca;
}

Status ReissueTestCert(const TestCa& ca, const std::string& key, const std::string& name,
                       const std::string& cert_out) {
  const std::string csr = cert_out + ".csr";
  const std::string ext = cert_out + ".ext";
  const std::string temp = cert_out + ".new";
  if (Status s = Write(ext,
                       "subjectAltName=IP:127.0.0.1,DNS:localhost\n"
                       "basicConstraints=CA:FALSE\n"
                       "keyUsage=critical,digitalSignature,keyEncipherment\n"
                       "extendedKeyUsage=serverAuth,clientAuth\n");
      !s.ok()) {
    return s;
  }
  if (Status s = Run({"req", "-new", "-key", key, "-subj", "/CN=" + name, "-out", csr}); !s.ok()) return s;
  if (Status s = Run({"x509", "-req", "-in", csr, "-CA", ca.cert, "-CAkey", ca.key, "-set_serial", RandomSerial(),
                      "-days", "3650", "-extfile", ext, "-out", temp});
      !s.ok()) {
    return s;
  }
  std::error_code ec;
  std::filesystem::rename(temp, cert_out, ec);
  if (ec) return Status(StatusCode::kInternal, "rename " + temp + " -> " + cert_out + ": " + ec.message());
  return Status::Ok();
}

StatusOr<TestCert> MakeTestCert(const TestCa& ca, const std::string& dir, const std::string& name) {
  TestCert c{dir + "/" + name + ".crt", dir + "/" + name + ".key"};
  if (Status s = Run({"genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", c.key});
      !s.ok()) {
    return s;
  }
  if (Status s = ReissueTestCert(ca, c.key, name, c.cert); !s.ok()) return s;
  return c;
}

}  // namespace rkv::testing
