// rkv-read-lat: latency of one-sided READs through rkv's own transport, from
// a client connection to a running rkv-server. It splits a GET's time: a
// cold GET is two dependent READs (neighbourhood, then block) plus the
// client's own work, so GET p50 - 2 x this READ's p50 is what the GET
// protocol costs on top of the transport, and this READ's p50 - the raw
// device's READ p50 (perftest's ib_read_lat) is what the transport costs.
//
// It connects as a client does (token digest in the connect data), then
// --iterations times posts one signaled READ of --bytes bytes from the start
// of the server's index region and waits until it completes, the way a GET
// waits for its READs (Connection::PostReadsAndWait), like ib_read_lat. Nothing is written; the server's CPU serves nothing.
//
// Output: a summary on stderr and, with --output, one line appended:
//   label bytes iterations p50_us p99_us
// (a '#' header line when the file is empty).
#include <gflags/gflags.h>
#include <glog/logging.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "bench/ycsb/histogram.h"
#include "client/wire_checks.h"
#include "common/connect_handshake.h"
#include "common/layout.h"
#include "common/program_help.h"
#include "common/protocol.h"
#include "common/token.h"
#include "common/transport/factory.h"
#include "common/transport/transport.h"
#include "rkv/status.h"

DEFINE_string(server, "127.0.0.1:7700", "HOST:PORT of the rkv-server (default 127.0.0.1:7700)");
DEFINE_string(token_file, "", "file holding the server's token (required)");
DEFINE_string(transport, "auto", "auto | tcp | verbs (default auto)");
DEFINE_uint32(bytes, 1024, "bytes per READ, 1..65536 and at most the index region (default 1024)");
DEFINE_uint32(iterations, 1000, "READs timed, 1..10000000 (default 1000)");
DEFINE_uint32(warmup, 100, "READs done first and not timed (default 100)");
DEFINE_string(label, "rkv-read", "first column of the --output line (default rkv-read)");
DEFINE_string(output, "", "file to append one result line to (default: none)");

namespace rkv {
namespace {

using Clock = std::chrono::steady_clock;

int Fail(const Status& s) {
  std::cerr << "rkv-read-lat: " << s << "\n";
  return 2;
}

int Run() {
  if (FLAGS_token_file.empty()) return Fail(InvalidArgument("--token_file is required"));
  if (FLAGS_bytes == 0 || FLAGS_bytes > 65536) {
    return Fail(InvalidArgument("--bytes " + std::to_string(FLAGS_bytes) + " is outside 1..65536"));
  }
  if (FLAGS_iterations == 0 || FLAGS_iterations > 10'000'000) {
    return Fail(InvalidArgument("--iterations " + std::to_string(FLAGS_iterations) + " is outside 1..10000000"));
  }
  auto token = ReadTokenFile(FLAGS_token_file);
  if (!token.ok()) return Fail(token.status());
  std::string why;
  auto kind = transport::ResolveKind(FLAGS_transport, &why);
  if (!kind.ok()) return Fail(kind.status());
  auto transport = transport::CreateTransport(*kind, transport::Options{});
  if (!transport.ok()) return Fail(transport.status());

  auto conn = protocol::ConnectAsClient(**transport, FLAGS_server,
                                        protocol::MakeClientParams(std::random_device{}(), *token),
                                        std::chrono::seconds(10));
  if (!conn.ok()) return Fail(conn.status());
  auto accept = client::ParseAcceptData((*conn)->peer_private_data());
  if (!accept.ok()) return Fail(accept.status());
  if (FLAGS_bytes > accept->index.length) {
    return Fail(InvalidArgument("--bytes " + std::to_string(FLAGS_bytes) + " is over the " +
                                std::to_string(accept->index.length) + "-byte index region"));
  }

  void* buffer = std::aligned_alloc(4096, 65536);
  if (buffer == nullptr) return Fail(ResourceExhausted("cannot allocate the local buffer"));
  auto mr = (*transport)->Register(buffer, 65536, transport::kLocalWrite);
  if (!mr.ok()) return Fail(mr.status());

  transport::ReadOp op;
  op.local = {mr->get(), 0, FLAGS_bytes};
  op.remote = {accept->index.addr, accept->index.rkey};
  op.signaled = true;
  bench::Histogram hist;
  // Posted and waited for as a GET does (PostReadsAndWait); nothing else
  // is in flight, so no other completion can come.
  std::vector<transport::Completion> others;
  for (uint64_t i = 0; i < uint64_t{FLAGS_warmup} + FLAGS_iterations; ++i) {
    op.wr_id = i + 1;
    const Clock::time_point start = Clock::now();
    if (Status s = (*conn)->PostReadsAndWait(std::span(&op, 1), std::chrono::seconds(10), &others); !s.ok()) {
      return Fail(s);
    }
    if (!others.empty()) return Fail(Internal("unexpected completion (wr_id " + std::to_string(others[0].wr_id) + ")"));
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start).count();
    if (i >= FLAGS_warmup) hist.Record(static_cast<uint64_t>(ns));
  }
  (*conn)->Disconnect();

  const double p50 = static_cast<double>(hist.Percentile(50)) / 1000.0;
  const double p99 = static_cast<double>(hist.Percentile(99)) / 1000.0;
  std::fprintf(stderr, "rkv-read-lat: %s, %u-byte READs: p50 %.1f us, p99 %.1f us over %u\n",
               transport::KindName(*kind), FLAGS_bytes, p50, p99, FLAGS_iterations);
  if (!FLAGS_output.empty()) {
    std::ofstream out(FLAGS_output, std::ios::app);
    if (out.tellp() == 0) out << "# label bytes iterations p50_us p99_us\n";
    char line[256];
    std::snprintf(line, sizeof(line), "%s %u %u %.1f %.1f\n", FLAGS_label.c_str(), FLAGS_bytes,
                  FLAGS_iterations, p50, p99);
    out << line;
    if (!out) return Fail(Internal("cannot write " + FLAGS_output));
  }
  std::free(buffer);
  return 0;
}

}  // namespace
}  // namespace rkv

int main(int argc, char** argv) {
  gflags::SetUsageMessage(
      "READ latency through rkv's transport to a running rkv-server (splits a GET's time)\n"
      "usage: rkv-read-lat --server=HOST:PORT --token_file=FILE [--bytes=1024] [--iterations=1000]");
  rkv::ParseProgramFlags(&argc, &argv, __FILE__);
  google::InitGoogleLogging(argv[0]);
  if (argc > 1) {
    std::cerr << "rkv-read-lat: unexpected argument '" << argv[1] << "' (see --help)\n";
    return 2;
  }
  return rkv::Run();
}
