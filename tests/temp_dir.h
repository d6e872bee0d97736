// The one temp dir of rkv's tests: a fresh directory under gtest's temp
// dir ($TEST_TMPDIR, else /tmp), removed with everything in it by the
// destructor. Header-only, for the cross-process suites
// (tests/test_cluster.h) and unit tests alike.
#pragma once

#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <system_error>

#include <gtest/gtest.h>

namespace rkv::testing {

class TempDir {
 public:
  TempDir() {
    std::string base = ::testing::TempDir();
    if (base.empty()) base = "/tmp/";
    if (base.back() != '/') base += '/';
    std::string pattern = base + "rkv-test-" + std::to_string(::getpid()) + "-XXXXXX";
    if (::mkdtemp(pattern.data()) == nullptr) {
      ADD_FAILURE() << "mkdtemp " << pattern << " failed";
      std::filesystem::create_directories(pattern);
    }
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace rkv::testing
