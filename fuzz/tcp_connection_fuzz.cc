// The tcp transport's connection reader (common/transport/tcp/
// tcp_connection_reader.cc): an established TcpConnection over one end of
// a socketpair, fed the fuzzer's bytes as the peer's frames from the other
// end, then EOF. Only the transport's own interface is used: the
// connection, its registry and the frame format.
//
// Before feeding, the connection posts work of its own (per the first
// input byte: READs, a SEND, receives), so the peer's responses have
// requests to answer. The peer's rkeys and addresses are mapped onto the
// regions this harness registered (rkey mod 4: 0 keeps the raw value, 1 a
// read/write region, 2 a read-only region, 3 the local buffer; the address
// becomes an offset into the region, possibly past its end), so READs and
// WRITEs reach registered memory as often as they are refused.
//
// Properties: no crash, no read or write outside registered memory (ASan);
// the connection ends after EOF (Poll returns an error) rather than hang;
// every completion answers a work request posted here, each at most once,
// and an unsignaled one only with an error.
#include <fcntl.h>
#include <glog/logging.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <set>
#include <vector>

#include "common/transport/tcp/byte_buffer.h"
#include "common/transport/tcp/region_registry.h"
#include "common/transport/tcp/socket_io.h"
#include "common/transport/tcp/tcp_connection.h"
#include "common/transport/tcp/tcp_frame.h"
#include "fuzz/fuzz_input.h"

namespace rkv::transport::tcp {
namespace {

constexpr size_t kRegionBytes = 4096;

struct Regions {
  std::shared_ptr<Registry> registry = std::make_shared<Registry>();
  std::vector<uint8_t> rw = std::vector<uint8_t>(kRegionBytes);
  std::vector<uint8_t> ro = std::vector<uint8_t>(kRegionBytes);
  std::vector<uint8_t> local = std::vector<uint8_t>(kRegionBytes);
  std::unique_ptr<MemoryRegion> rw_mr;
  std::unique_ptr<MemoryRegion> ro_mr;
  std::unique_ptr<MemoryRegion> local_mr;

  Regions() {
    rw_mr = std::move(RegisterRegion(registry, rw.data(), rw.size(), kRemoteRead | kRemoteWrite | kLocalWrite, 0))
                .value();
    ro_mr = std::move(RegisterRegion(registry, ro.data(), ro.size(), kRemoteRead, 0)).value();
    local_mr = std::move(RegisterRegion(registry, local.data(), local.size(), kLocalWrite, 0)).value();
  }
};

Regions& TheRegions() {
  static Regions* r = new Regions;
  return *r;
}

// The input after its first byte, with READ and WRITE targets mapped onto
// the registered regions.
std::vector<uint8_t> PeerStream(std::span<const uint8_t> in, const Regions& regions) {
  std::vector<uint8_t> out(in.begin(), in.end());
  size_t pos = 0;
  while (out.size() - pos >= kHeaderBytes) {
    FrameHeader h;
    std::memcpy(&h, out.data() + pos, kHeaderBytes);
    const auto type = static_cast<FrameType>(h.type);
    if (type == FrameType::kReadReq || type == FrameType::kWrite) {
      const MemoryRegion* mr = nullptr;
      switch (h.rkey % 4) {
        case 1: mr = regions.rw_mr.get(); break;
        case 2: mr = regions.ro_mr.get(); break;
        case 3: mr = regions.local_mr.get(); break;
        default: break;
      }
      if (mr != nullptr) {
        h.addr = mr->remote_addr() + h.addr % (2 * kRegionBytes);
        h.rkey = mr->rkey();
        std::memcpy(out.data() + pos, &h, kHeaderBytes);
      }
    }
    // Payloads of READ_REQ frames (which may not have one) are skipped as
    // the receiver would skip them, had it accepted the header.
    pos += kHeaderBytes + std::min<size_t>(h.payload_len, out.size() - pos - kHeaderBytes);
  }
  return out;
}

void Run(std::span<const uint8_t> data) {
  // The connection logs every protocol violation: most inputs are one.
  FLAGS_minloglevel = google::GLOG_FATAL;
  Regions& regions = TheRegions();
  fuzz::FuzzInput in(data.data(), data.size());
  const uint8_t work = in.Take<uint8_t>();
  const std::vector<uint8_t> stream = PeerStream(in.Rest(), regions);

  int fds[2];
  RKV_FUZZ_CHECK(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds) == 0);
  RKV_FUZZ_CHECK(::fcntl(fds[0], F_SETFL, ::fcntl(fds[0], F_GETFL) | O_NONBLOCK) == 0);
  UniqueFd peer(fds[1]);
  StatusOr<UniqueFd> wake = MakeEventFd();
  RKV_FUZZ_CHECK(wake.ok());
  Options options;
  options.max_send_wr = 8;
  options.max_recv_wr = 8;
  auto conn = std::make_unique<TcpConnection>(regions.registry, options, UniqueFd(fds[0]), std::move(*wake),
                                              std::vector<uint8_t>{}, ByteBuffer{}, /*established=*/true);
  conn->Start();

  // Work of our own: wr_ids 1.. in posting order. An unsignaled READ
  // completes only when it fails (flushed when the connection breaks).
  std::set<uint64_t> posted;
  std::set<uint64_t> unsignaled;
  uint64_t wr_id = 0;
  const MemoryRegion* local = regions.local_mr.get();
  const uint32_t reads = work & 3;
  if (reads > 0) {
    std::vector<ReadOp> ops(reads);
    for (uint32_t i = 0; i < reads; ++i) {
      ops[i].local = {local, i * 64, 16u * (i + 1)};
      ops[i].remote = {0x1000 * (i + 1), 7};
      ops[i].wr_id = ++wr_id;
      ops[i].signaled = (work & 4) != 0 || i + 1 == reads;
      posted.insert(wr_id);
      if (!ops[i].signaled) unsignaled.insert(wr_id);
    }
    RKV_FUZZ_CHECK(conn->PostReads(ops).ok());
  }
  if ((work & 8) != 0) {
    RKV_FUZZ_CHECK(conn->PostSend({local, 1024, 8}, ++wr_id).ok());
    posted.insert(wr_id);
  }
  const uint32_t recvs = (work >> 4) & 3;
  for (uint32_t i = 0; i < recvs; ++i) {
    RKV_FUZZ_CHECK(conn->PostRecv({local, 2048 + i * 256, 32u << i}, ++wr_id).ok());
    posted.insert(wr_id);
  }

  // The peer's bytes, then EOF. The connection may close first (a
  // protocol violation): then the rest is not needed.
  size_t sent = 0;
  while (sent < stream.size()) {
    const ssize_t n = ::send(peer.get(), stream.data() + sent, stream.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) break;
    sent += static_cast<size_t>(n);
  }
  ::shutdown(peer.get(), SHUT_WR);

  std::set<uint64_t> completed;
  Completion c[16];
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  for (;;) {
    const StatusOr<size_t> n = conn->Poll(c, std::chrono::milliseconds(1));
    if (!n.ok()) break;
    for (size_t i = 0; i < *n; ++i) {
      RKV_FUZZ_CHECK(posted.count(c[i].wr_id) == 1);
      RKV_FUZZ_CHECK(completed.insert(c[i].wr_id).second);
      if (unsignaled.count(c[i].wr_id) == 1) RKV_FUZZ_CHECK(!c[i].status.ok());
    }
    // After EOF the connection must fail; 20 s only bounds a hang.
    RKV_FUZZ_CHECK(std::chrono::steady_clock::now() < give_up);
  }
  conn.reset();
}

}  // namespace
}  // namespace rkv::transport::tcp

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  rkv::transport::tcp::Run(std::span<const uint8_t>(data, size));
  return 0;
}
