// A program may link librkv beside rkv's own static libraries (a tool, a
// gateway or a test that uses both the public client and the control-plane
// code). librkv keeps its copies of those libraries hidden, and the
// generated protobuf code is one shared library, so both halves work in one
// process: with the protobuf code inside librkv this program would abort at
// start-up, when the second copy of proto/rkv.proto registered itself.
#include <gtest/gtest.h>

#include <chrono>

#include "proto/rkv.pb.h"
#include "proto/validation.h"
#include "rkv/client.h"

namespace rkv {
namespace {

TEST(LinkBothTest, TheClientLibraryAndTheControlPlaneCodeShareAProcess) {
  v1::RegionDescriptor region;
  region.set_addr(4096);
  region.set_length(8192);
  region.set_rkey(7);
  EXPECT_TRUE(control::ValidateRegion("index", region).ok());
  region.set_length(0);
  EXPECT_FALSE(control::ValidateRegion("index", region).ok());

  // The public client in the same process: nothing listens on this port, so
  // connecting fails cleanly rather than crashing.
  ClientOptions options;
  options.server = "127.0.0.1:1";
  options.transport = "tcp";
  options.token = "a-token-that-is-long-enough-0123456789";
  options.timeout = std::chrono::milliseconds(300);
  auto client = Client::Connect(options);
  EXPECT_FALSE(client.ok());
}

}  // namespace
}  // namespace rkv
