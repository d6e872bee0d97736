// The one temp dir of rkv's tests: a fresh directory under gtest's temp
// dir ($TEST_TMPDIR, else /tmp), removed with everything in it by the
// destructor, unless $RKV_KEEP_TEST_DIRS is 1 (then it is kept and its path
// printed: the whole logs and data of a failed cross-process test, where the
// failure message shows only each log's tail). Header-only, for the
// cross-process suites (tests/test_cluster.h) and unit tests alike.
#pragma once

#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
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
    if (const char* keep = std::getenv("RKV_KEEP_TEST_DIRS"); keep != nullptr && std::string(keep) == "1") {
      std::printf("[ temp dir ] kept %s (RKV_KEEP_TEST_DIRS=1)\n", path_.c_str());
      return;
    }
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
