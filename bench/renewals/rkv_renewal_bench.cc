// rkv-renewal-bench: how many lease renewals (Coordinator.RenewLease) one
// coordinator answers, and how fast, as the number of clients grows
// (docs/design.md §8.8, "What renewals cost").
//
// It simulates N clients against --coordinator for each N of --clients.
// Every simulated client renews every lease_ms / 3 on its own schedule: its
// first renewal at a random phase in [0, lease_ms / 3), then one every
// lease_ms / 3, whatever became of the previous one (an open-loop arrival
// schedule: N clients offer N * 3000 / lease_ms renewals per second). A
// renewal's latency is counted from its *intended* send time, so a load
// generator or a coordinator that falls behind shows as latency instead of
// quietly sending less (no coordinated omission).
//
// The renewals go out as asynchronous gRPC calls over --channels channels
// (each its own TCP connection), one completion queue per --cq_threads
// thread; one thread sends on schedule. Each step runs --warmup_s, then
// counts the renewals intended in the next --duration_s, then waits for
// the ones still in flight (their deadline: lease_ms).
//
// Output: one line per step on stdout, and with --csv a CSV file of the
// same (a header, then one row per step): clients, offered/s, answered/s
// (renewals answered OK per second of the counted window), p50/p99/max
// latency in ms, errors, the sender's p99 lag behind its schedule in ms,
// and, with --coordinator_pid, the coordinator's CPU time per renewal in
// microseconds and its CPU use in cores over the window.
//
// Exit status: 0 when every step ran, 1 when the coordinator could not be
// reached, 2 for bad flags.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gflags/gflags.h>
#include <glog/logging.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/support/channel_arguments.h>

#include "common/token.h"
#include "proto/auth.h"
#include "proto/rkv.grpc.pb.h"

DEFINE_string(coordinator, "", "HOST:PORT of the coordinator (the leader) to renew against (required)");
DEFINE_string(token_file, "", "file holding the cluster's token (required)");
DEFINE_string(clients, "100,1000,5000,10000,20000", "simulated clients per step, comma-separated (default 100,1000,5000,10000,20000)");
DEFINE_uint32(duration_s, 10, "seconds counted per step, after the warm-up (default 10)");
DEFINE_uint32(warmup_s, 2, "seconds run before counting, per step (default 2)");
DEFINE_uint32(lease_ms, 0, "the lease the schedule assumes, ms; 0: the coordinator's, from a first renewal (default 0)");
DEFINE_uint32(channels, 4, "gRPC channels (TCP connections) the renewals are spread over (default 4)");
DEFINE_uint32(cq_threads, 1, "threads reaping completions, one completion queue each (default 1)");
DEFINE_string(csv, "", "CSV file to write the steps to (default: none)");
DEFINE_int32(coordinator_pid, 0, "the coordinator's process id, to report its CPU time per renewal (default 0: not reported)");
DEFINE_uint64(seed, 1, "seed of the clients' phases (default 1)");

namespace rkv::bench {
namespace {

using Clock = std::chrono::steady_clock;

// One renewal in flight. Owned by its completion queue's tag until reaped.
struct Renewal {
  grpc::ClientContext context;
  v1::RenewLeaseResponse response;
  grpc::Status status;
  std::unique_ptr<grpc::ClientAsyncResponseReader<v1::RenewLeaseResponse>> reader;
  Clock::time_point intended;
  bool counted = false;  // intended within the counted window
};

// What one completion thread saw (merged at the end of a step).
struct Tally {
  std::vector<uint32_t> latency_us;  // of the counted renewals answered OK
  uint64_t ok = 0;
  std::map<int, uint64_t> errors;  // by gRPC code
};

struct StepResult {
  uint32_t clients = 0;
  double offered_per_s = 0;
  double answered_per_s = 0;
  double p50_ms = 0, p99_ms = 0, max_ms = 0;
  uint64_t errors = 0;
  std::string error_codes;
  double lag_p99_ms = 0;
  double cpu_us_per_renewal = -1;  // -1: not measured
  double cpu_cores = -1;
};

double Percentile(std::vector<uint32_t>& v, double q) {
  if (v.empty()) return 0;
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())));
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(i), v.end());
  return v[i] / 1000.0;
}

// User + system CPU time of process `pid` so far, in seconds; -1 when it
// cannot be read.
double ProcessCpuSeconds(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t end_of_name = stat.rfind(')');
  if (end_of_name == std::string::npos) return -1;
  std::istringstream fields(stat.substr(end_of_name + 2));
  std::string field;
  double ticks = 0;
  // utime and stime are the 12th and 13th fields after the name.
  for (int i = 1; i <= 13 && fields >> field; ++i) {
    if (i >= 12) ticks += std::stod(field);
  }
  return ticks / static_cast<double>(sysconf(_SC_CLK_TCK));
}

class Bench {
 public:
  Bench(std::string digest_hex, std::vector<std::unique_ptr<v1::Coordinator::Stub>> stubs, int cq_threads)
      : digest_hex_(std::move(digest_hex)), stubs_(std::move(stubs)), cqs_(static_cast<size_t>(cq_threads)) {
    for (auto& cq : cqs_) cq = std::make_unique<grpc::CompletionQueue>();
  }

  // One synchronous renewal, to learn lease_ms (and that the coordinator
  // answers).
  grpc::Status Probe(v1::RenewLeaseResponse* response) {
    grpc::ClientContext context;
    control::AttachTokenDigest(&context, digest_hex_);
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    context.set_wait_for_ready(true);
    return stubs_[0]->RenewLease(&context, v1::RenewLeaseRequest(), response);
  }

  StepResult Run(uint32_t clients, std::chrono::milliseconds lease, std::chrono::seconds warmup,
                 std::chrono::seconds duration, uint64_t seed) {
    const auto period = std::chrono::duration_cast<Clock::duration>(lease) / 3;
    // Each client's phase within the period, sorted: the schedule is the
    // phases in order, cycle after cycle.
    std::mt19937_64 rng(seed + clients);
    std::uniform_int_distribution<int64_t> phase_of(0, period.count() - 1);
    std::vector<Clock::duration> phases(clients);
    for (auto& p : phases) p = Clock::duration(phase_of(rng));
    std::sort(phases.begin(), phases.end());

    std::vector<Tally> tallies(cqs_.size());
    std::vector<std::thread> reapers;
    for (size_t i = 0; i < cqs_.size(); ++i) {
      reapers.emplace_back([this, i, &tallies] { Reap(*cqs_[i], tallies[i]); });
    }

    const Clock::time_point start = Clock::now() + std::chrono::milliseconds(50);
    const Clock::time_point count_from = start + warmup;
    const Clock::time_point count_until = count_from + duration;
    double cpu_before = -1;
    bool cpu_started = false;
    std::vector<uint32_t> lag_us;
    lag_us.reserve(static_cast<size_t>(clients) * 3 * (duration.count() + 1));
    uint64_t sent = 0;
    for (uint64_t cycle = 0;; ++cycle) {
      const Clock::time_point base = start + period * cycle;
      if (base >= count_until) break;
      for (size_t i = 0; i < phases.size(); ++i) {
        const Clock::time_point intended = base + phases[i];
        if (intended >= count_until) break;
        Clock::time_point now = Clock::now();
        if (now < intended) {
          std::this_thread::sleep_until(intended);
          now = Clock::now();
        }
        const bool counted = intended >= count_from;
        if (counted && !cpu_started) {
          cpu_started = true;
          if (FLAGS_coordinator_pid > 0) cpu_before = ProcessCpuSeconds(FLAGS_coordinator_pid);
        }
        if (counted) {
          lag_us.push_back(static_cast<uint32_t>(
              std::chrono::duration_cast<std::chrono::microseconds>(now - intended).count()));
        }
        Send(sent++, i, intended, counted, lease);
      }
    }
    // Sending ended at count_until (or later when behind); CPU time is
    // measured up to then, over the counted window.
    const Clock::time_point send_end = Clock::now();
    double cpu_after = -1;
    if (FLAGS_coordinator_pid > 0) cpu_after = ProcessCpuSeconds(FLAGS_coordinator_pid);
    // Wait for the renewals in flight: each ends by its deadline.
    while (in_flight_.load(std::memory_order_acquire) != 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    for (auto& cq : cqs_) cq->Shutdown();
    for (auto& t : reapers) t.join();
    for (auto& cq : cqs_) cq = std::make_unique<grpc::CompletionQueue>();

    StepResult r;
    r.clients = clients;
    const double seconds = std::chrono::duration<double>(duration).count();
    r.offered_per_s = static_cast<double>(clients) / std::chrono::duration<double>(period).count();
    std::vector<uint32_t> all;
    std::map<int, uint64_t> errors;
    uint64_t ok = 0;
    for (Tally& t : tallies) {
      all.insert(all.end(), t.latency_us.begin(), t.latency_us.end());
      ok += t.ok;
      for (const auto& [code, n] : t.errors) errors[code] += n;
    }
    r.answered_per_s = static_cast<double>(ok) / seconds;
    r.p50_ms = Percentile(all, 0.50);
    r.p99_ms = Percentile(all, 0.99);
    r.max_ms = all.empty() ? 0 : *std::max_element(all.begin(), all.end()) / 1000.0;
    for (const auto& [code, n] : errors) {
      r.errors += n;
      r.error_codes += (r.error_codes.empty() ? "" : " ") + std::to_string(code) + ":" + std::to_string(n);
    }
    r.lag_p99_ms = Percentile(lag_us, 0.99);
    if (cpu_before >= 0 && cpu_after >= 0 && ok > 0) {
      const double window = std::chrono::duration<double>(send_end - count_from).count();
      r.cpu_us_per_renewal = (cpu_after - cpu_before) * 1e6 / static_cast<double>(ok);
      r.cpu_cores = (cpu_after - cpu_before) / window;
    }
    return r;
  }

 private:
  void Send(uint64_t n, size_t client, Clock::time_point intended, bool counted, std::chrono::milliseconds lease) {
    auto* r = new Renewal();
    r->intended = intended;
    r->counted = counted;
    control::AttachTokenDigest(&r->context, digest_hex_);
    // A renewal answered after a lease is of no use to its client.
    r->context.set_deadline(std::chrono::system_clock::now() + lease);
    v1::RenewLeaseRequest request;
    request.set_map_version(0);
    v1::Coordinator::Stub& stub = *stubs_[client % stubs_.size()];
    grpc::CompletionQueue* cq = cqs_[n % cqs_.size()].get();
    in_flight_.fetch_add(1, std::memory_order_relaxed);
    r->reader = stub.PrepareAsyncRenewLease(&r->context, request, cq);
    r->reader->StartCall();
    r->reader->Finish(&r->response, &r->status, r);
  }

  void Reap(grpc::CompletionQueue& cq, Tally& tally) {
    void* tag = nullptr;
    bool ok = false;
    while (cq.Next(&tag, &ok)) {
      std::unique_ptr<Renewal> r(static_cast<Renewal*>(tag));
      const auto done = Clock::now();
      if (r->counted) {
        if (r->status.ok()) {
          ++tally.ok;
          tally.latency_us.push_back(static_cast<uint32_t>(
              std::chrono::duration_cast<std::chrono::microseconds>(done - r->intended).count()));
        } else {
          ++tally.errors[r->status.error_code()];
        }
      }
      in_flight_.fetch_sub(1, std::memory_order_release);
    }
  }

  const std::string digest_hex_;
  std::vector<std::unique_ptr<v1::Coordinator::Stub>> stubs_;
  std::vector<std::unique_ptr<grpc::CompletionQueue>> cqs_;
  std::atomic<uint64_t> in_flight_{0};
};

std::vector<uint32_t> ParseCounts(const std::string& list) {
  std::vector<uint32_t> out;
  std::stringstream in(list);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (item.empty() || item.find_first_not_of("0123456789") != std::string::npos || item.size() > 7) return {};
    const uint32_t n = static_cast<uint32_t>(std::stoul(item));
    if (n == 0) return {};
    out.push_back(n);
  }
  return out;
}

int Main() {
  if (FLAGS_coordinator.empty()) {
    std::cerr << "rkv-renewal-bench: --coordinator is required\n";
    return 2;
  }
  if (FLAGS_token_file.empty()) {
    std::cerr << "rkv-renewal-bench: --token_file is required\n";
    return 2;
  }
  const std::vector<uint32_t> counts = ParseCounts(FLAGS_clients);
  if (counts.empty()) {
    std::cerr << "rkv-renewal-bench: --clients must list positive counts below 10,000,000 ('" << FLAGS_clients
              << "')\n";
    return 2;
  }
  if (FLAGS_channels < 1 || FLAGS_channels > 256 || FLAGS_cq_threads < 1 || FLAGS_cq_threads > 64 ||
      FLAGS_duration_s < 1) {
    std::cerr << "rkv-renewal-bench: --channels must be 1..256, --cq_threads 1..64, --duration_s at least 1\n";
    return 2;
  }
  auto token = ReadTokenFile(FLAGS_token_file);
  if (!token.ok()) {
    std::cerr << "rkv-renewal-bench: --token_file: " << token.status() << "\n";
    return 2;
  }
  std::vector<std::unique_ptr<v1::Coordinator::Stub>> stubs;
  for (uint32_t i = 0; i < FLAGS_channels; ++i) {
    grpc::ChannelArguments args;
    // A channel argument of its own makes each channel open its own
    // connection (channels with equal arguments share one).
    args.SetInt("rkv.bench.channel", static_cast<int>(i));
    stubs.push_back(v1::Coordinator::NewStub(
        grpc::CreateCustomChannel(FLAGS_coordinator, grpc::InsecureChannelCredentials(), args)));
  }
  Bench bench(control::TokenDigestHex(*token), std::move(stubs), static_cast<int>(FLAGS_cq_threads));
  v1::RenewLeaseResponse first;
  if (const grpc::Status s = bench.Probe(&first); !s.ok()) {
    std::cerr << "rkv-renewal-bench: coordinator " << FLAGS_coordinator << ": RenewLease: " << s.error_message()
              << " (code " << s.error_code() << ")\n";
    return 1;
  }
  const uint32_t lease_ms = FLAGS_lease_ms != 0 ? FLAGS_lease_ms : first.lease_ms();
  if (lease_ms < 3) {
    std::cerr << "rkv-renewal-bench: the coordinator grants no leases (lease_ms " << first.lease_ms()
              << "); give --lease_ms\n";
    return 1;
  }
  std::cout << "lease_ms " << lease_ms << " (renewals every " << lease_ms / 3 << " ms per client), target p99 < "
            << lease_ms / 10 << " ms\n";
  std::unique_ptr<std::ofstream> csv;
  if (!FLAGS_csv.empty()) {
    csv = std::make_unique<std::ofstream>(FLAGS_csv);
    *csv << "clients,offered_per_s,answered_per_s,p50_ms,p99_ms,max_ms,errors,error_codes,send_lag_p99_ms,"
            "coordinator_cpu_us_per_renewal,coordinator_cpu_cores\n";
  }
  char line[512];
  std::snprintf(line, sizeof(line), "%8s %10s %11s %8s %8s %8s %7s %9s %9s %6s", "clients", "offered/s",
                "answered/s", "p50_ms", "p99_ms", "max_ms", "errors", "lag99_ms", "cpu_us/r", "cores");
  std::cout << line << std::endl;
  for (const uint32_t n : counts) {
    const StepResult r = bench.Run(n, std::chrono::milliseconds(lease_ms), std::chrono::seconds(FLAGS_warmup_s),
                                   std::chrono::seconds(FLAGS_duration_s), FLAGS_seed);
    std::snprintf(line, sizeof(line), "%8u %10.0f %11.0f %8.2f %8.2f %8.2f %7llu %9.2f %9.1f %6.2f", r.clients,
                  r.offered_per_s, r.answered_per_s, r.p50_ms, r.p99_ms, r.max_ms,
                  static_cast<unsigned long long>(r.errors), r.lag_p99_ms, r.cpu_us_per_renewal, r.cpu_cores);
    std::cout << line << (r.errors != 0 ? "  codes " + r.error_codes : std::string()) << std::endl;
    if (csv) {
      std::snprintf(line, sizeof(line), "%u,%.0f,%.0f,%.3f,%.3f,%.3f,%llu,%s,%.3f,%.1f,%.2f\n", r.clients,
                    r.offered_per_s, r.answered_per_s, r.p50_ms, r.p99_ms, r.max_ms,
                    static_cast<unsigned long long>(r.errors), r.error_codes.c_str(), r.lag_p99_ms,
                    r.cpu_us_per_renewal, r.cpu_cores);
      *csv << line << std::flush;
    }
  }
  return 0;
}

}  // namespace
}  // namespace rkv::bench

int main(int argc, char** argv) {
  gflags::SetUsageMessage(
      "rkv-renewal-bench --coordinator=HOST:PORT --token_file=FILE [--clients=N,N,...] [--duration_s=S] "
      "[--csv=FILE] [--coordinator_pid=PID]");
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  google::InitGoogleLogging(argv[0]);
  return rkv::bench::Main();
}
