// Certificates for TLS tests, made with the openssl command (as
// deploy/cluster.sh --tls makes them): a CA, and leaf certificates it
// signs for 127.0.0.1 and localhost (SANs IP:127.0.0.1, DNS:localhost),
// good for both TLS server and client use. EC P-256 keys, quick to make.
//
// Thread safety: none needed; each function runs openssl to completion.
#pragma once

#include <string>

#include "rkv/status.h"

namespace rkv::testing {

// PEM file paths of a CA.
struct TestCa {
  std::string cert;
  std::string key;
};

// PEM file paths of a leaf certificate and its key.
struct TestCert {
  std::string cert;
  std::string key;
};

// Makes a CA named `name` in `dir`: <dir>/<name>-ca.crt and -ca.key. An
// error naming the openssl command and its output when one fails.
StatusOr<TestCa> MakeTestCa(const std::string& dir, const std::string& name);

// Makes a key <dir>/<name>.key and a certificate <dir>/<name>.crt for it,
// signed by `ca`, with subject CN=<name>.
StatusOr<TestCert> MakeTestCert(const TestCa& ca, const std::string& dir, const std::string& name);

// Signs a new certificate for the existing key `key` (another serial, the
// same subject CN=<name>) and writes it to `cert_out` by a rename, so a
// process watching `cert_out` never reads it half written.
Status ReissueTestCert(const TestCa& ca, const std::string& key, const std::string& name,
                       const std::string& cert_out);

// Writes `contents` to `path` through a temporary file and a rename.
Status ReplaceFile(const std::string& path, const std::string& contents);

// The contents of a file ("" with a test failure when it cannot be read).
std::string ReadTestFile(const std::string& path);

}  // namespace rkv::testing
