// Access rights seen from outside: a client that speaks the data-plane
// protocol by hand, over the transport under test, tries to write the
// server's index and heap. Those regions are REMOTE_READ only: the WRITE
// fails with a remote access error, nothing changes, and the server goes on
// serving other clients.
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "common/connect_handshake.h"
#include "common/layout.h"
#include "common/protocol.h"
#include "common/token.h"
#include "common/transport/factory.h"
#include "common/transport/transport.h"
#include "tests/run_command.h"
#include "tests/server_process.h"

namespace rkv::testing {
namespace {

using transport::Completion;
using transport::LocalBuf;
using transport::RemoteBuf;

class RemoteAccessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    token_file_ = dir_.path() + "/token";
    WriteFile(token_file_, "access-token\n");
    server_ = std::make_unique<ServerProcess>(dir_.path() + "/data", token_file_);
    ASSERT_TRUE(server_->Start().ok()) << server_->Log();
    auto kind = transport::ResolveKind(TestTransport(), nullptr);
    ASSERT_TRUE(kind.ok());
    auto t = transport::CreateTransport(*kind, transport::Options{});
    ASSERT_TRUE(t.ok()) << t.status();
    transport_ = std::move(t).value();
    buffer_.assign(1 << 16, 0);
    auto mr = transport_->Register(buffer_.data(), buffer_.size(), transport::kLocalWrite);
    ASSERT_TRUE(mr.ok()) << mr.status();
    mr_ = std::move(mr).value();
  }

  // Connects with the right token and returns the server's AcceptData.
  std::unique_ptr<transport::Connection> ConnectRaw(protocol::AcceptData* accept) {
    auto conn = protocol::ConnectAsClient(*transport_, server_->address(),
                                          protocol::MakeClientParams(std::random_device{}(), "access-token"),
                                          std::chrono::milliseconds(30000));
    EXPECT_TRUE(conn.ok()) << conn.status();
    if (!conn.ok()) return nullptr;
    const auto data = (*conn)->peer_private_data();
    EXPECT_GE(data.size(), sizeof(protocol::AcceptData));
    std::memcpy(accept, data.data(), sizeof(*accept));
    EXPECT_EQ(accept->magic, protocol::kAcceptMagic);
    return std::move(conn).value();
  }

  // Polls until a completion arrives or the connection reports an error.
  std::vector<Completion> Drain(transport::Connection& conn) {
    std::vector<Completion> all;
    for (int i = 0; i < 100; ++i) {
      Completion c[8];
      auto n = conn.Poll(c, std::chrono::milliseconds(300));
      if (!n.ok()) break;
      all.insert(all.end(), c, c + *n);
      if (!all.empty() && *n == 0) break;
    }
    return all;
  }

  // Reads `len` bytes of a remote region into buffer_ at `offset`.
  Status Read(transport::Connection& conn, const protocol::RegionDescriptor& region, uint64_t at,
              uint32_t len, size_t offset) {
    transport::ReadOp op;
    op.local = LocalBuf{mr_.get(), offset, len};
    op.remote = RemoteBuf{region.addr + at, region.rkey};
    op.wr_id = 42;
    op.signaled = true;
    RKV_RETURN_IF_ERROR(conn.PostReads(std::span<const transport::ReadOp>(&op, 1)));
    for (const Completion& c : Drain(conn)) {
      if (c.wr_id == 42) return c.status;
    }
    return DeadlineExceeded("no completion for the READ");
  }

  TempDir dir_;
  std::string token_file_;
  std::unique_ptr<ServerProcess> server_;
  std::unique_ptr<transport::Transport> transport_;
  std::vector<uint8_t> buffer_;
  std::unique_ptr<transport::MemoryRegion> mr_;
};

TEST_F(RemoteAccessTest, WritesToIndexAndHeapAreRefusedAndChangeNothing) {
  // Something in the table to protect.
  auto put = RunCommand({RKV_KVCTL_BIN, "--server=" + server_->address(), "--token_file=" + token_file_,
                         "--transport=" + TestTransport(), "--timeout=30000", "put", "guarded", "value"});
  ASSERT_EQ(put.exit_code, 0) << put.err;

  for (const bool heap : {true, false}) {
    protocol::AcceptData accept{};
    auto conn = ConnectRaw(&accept);
    ASSERT_NE(conn, nullptr);
    const protocol::RegionDescriptor target = heap ? accept.heap : accept.index;
    // Keep a copy of the first 4 KiB of the region.
    ASSERT_TRUE(Read(*conn, target, 0, 4096, 8192).ok());
    const std::vector<uint8_t> before(buffer_.begin() + 8192, buffer_.begin() + 8192 + 4096);

    std::memset(buffer_.data(), 0x5A, 4096);
    protocol::RequestMsg msg{};
    msg.op = static_cast<uint8_t>(protocol::Op::kPut);
    msg.length = 64;
    msg.request_id = 1;
    std::memcpy(buffer_.data() + 4096, &msg, sizeof(msg));
    ASSERT_TRUE(conn->PostWriteSend(LocalBuf{mr_.get(), 0, 4096}, RemoteBuf{target.addr, target.rkey},
                                    LocalBuf{mr_.get(), 4096, sizeof(msg)}, 7)
                    .ok());
    bool denied = false;
    const std::vector<Completion> done = Drain(*conn);
    std::string seen;
    for (const Completion& c : done) seen += c.status.ToString() + "; ";
    for (const Completion& c : done) {
      EXPECT_FALSE(c.status.ok()) << "a completion of the forbidden WRITE succeeded: " << seen;
      if (c.status.code() == StatusCode::kPermissionDenied) denied = true;
    }
    EXPECT_TRUE(denied) << (heap ? "heap" : "index") << ": no remote access error; completions: " << seen;
    conn.reset();

    // Unchanged, as a fresh connection reads it.
    protocol::AcceptData again{};
    auto reader = ConnectRaw(&again);
    ASSERT_NE(reader, nullptr);
    const protocol::RegionDescriptor same = heap ? again.heap : again.index;
    ASSERT_TRUE(Read(*reader, same, 0, 4096, 8192).ok());
    EXPECT_TRUE(std::equal(before.begin(), before.end(), buffer_.begin() + 8192))
        << (heap ? "heap" : "index") << " changed";
  }

  // The server still serves everyone.
  auto get = RunCommand({RKV_KVCTL_BIN, "--server=" + server_->address(), "--token_file=" + token_file_,
                         "--transport=" + TestTransport(), "--timeout=30000", "get", "guarded"});
  ASSERT_EQ(get.exit_code, 0) << get.err << server_->Log();
  EXPECT_EQ(get.out, "value");
}

TEST_F(RemoteAccessTest, AnotherClientsRingIsNotWritable) {
  protocol::AcceptData a{}, b{};
  auto first = ConnectRaw(&a);
  auto second = ConnectRaw(&b);
  ASSERT_NE(first, nullptr);
  ASSERT_NE(second, nullptr);
  // The second connection aims at the first one's staging ring.
  protocol::RequestMsg msg{};
  std::memcpy(buffer_.data() + 4096, &msg, sizeof(msg));
  ASSERT_TRUE(second->PostWriteSend(LocalBuf{mr_.get(), 0, 64}, RemoteBuf{a.ring.addr, a.ring.rkey},
                                    LocalBuf{mr_.get(), 4096, sizeof(msg)}, 9)
                  .ok());
  bool denied = false;
  for (const Completion& c : Drain(*second)) {
    if (c.status.code() == StatusCode::kPermissionDenied) denied = true;
  }
  EXPECT_TRUE(denied);
  // The first connection's own view of the table is intact.
  EXPECT_TRUE(Read(*first, a.index, 0, sizeof(layout::TableHeader), 8192).ok());
  layout::TableHeader h;
  std::memcpy(&h, buffer_.data() + 8192, sizeof(h));
  EXPECT_EQ(h.magic, layout::kTableMagic);
  EXPECT_EQ(h.epoch, a.epoch);
}

}  // namespace
}  // namespace rkv::testing
