// rkv-renewal-bench: how many lease renewals one coordinator answers, and
// how fast, as the number of clients grows (docs/design.md §8.8, "What
// renewals cost").
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
// --mode says how a renewal travels:
//  - stream (the default): each simulated client holds one
//    Coordinator.KeepLease stream, as librkv's clients do, and each renewal
//    is one request on it. The streams are opened (each with one renewal
//    that is not counted) before the warm-up, and cancelled at the end of
//    the step. A stream has one Read outstanding at all times and at most
//    one Write (gRPC allows no more): a renewal due while the previous
//    Write is in flight waits for it. Answers come in order, so each
//    client keeps the intended times of its unanswered renewals in a FIFO;
//    one answered more than lease_ms after its intended time counts as an
//    error (DEADLINE_EXCEEDED, as a unary call's deadline would). A stream
//    that breaks fails its unanswered renewals with its gRPC code and is
//    reopened at the client's next renewal.
//  - unary: each renewal is one Coordinator.RenewLease call, with a
//    deadline of lease_ms.
//
// The renewals go out over --channels channels (each its own TCP
// connection), with completions reaped by --cq_threads threads, one
// completion queue each (client i's stream on channel i % channels and
// queue i % cq_threads); --send_threads threads (default: 2 in stream mode,
// 1 in unary mode) send on schedule, each for every send_threads-th
// client. Each step runs --warmup_s, then counts the renewals intended in
// the next --duration_s, then waits for the ones still unanswered (at most
// lease_ms; in stream mode those still unanswered then count as
// DEADLINE_EXCEEDED).
//
// Debian's libgrpc is built without NDEBUG: every completion searches its
// queue's outstanding operations linearly (cq_check_tag), and in stream
// mode every stream has a Read outstanding, so a completion costs time in
// proportion to the streams on its queue (on both sides: the coordinator's
// callback queue too). More --cq_threads shorten the client's search.
//
// Output: one line per step on stdout, and with --csv a CSV file of the
// same (a header, then one row per step): clients, offered/s, answered/s
// (renewals answered OK per second of the counted window), p50/p99/max
// latency in ms, errors, the sender's p99 lag behind its schedule in ms,
// and, with --coordinator_pid, the coordinator's CPU time per renewal in
// microseconds and its CPU use in cores over the window.
//
// Exit status: 0 when every step ran, 1 when the coordinator could not be
// reached (or, in stream mode, its streams could not be opened), 2 for bad
// flags.
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

#include "common/mutex.h"
#include "common/program_help.h"
#include "common/status.h"
#include "common/token.h"
#include "proto/auth.h"
#include "proto/rkv.grpc.pb.h"

DEFINE_string(coordinator, "", "HOST:PORT of the coordinator (the leader) to renew against (required)");
DEFINE_string(token_file, "", "file holding the cluster's token (required)");
DEFINE_string(mode, "stream",
              "how renewals travel: stream (one KeepLease stream per client, a message per renewal, as librkv's "
              "clients renew) or unary (one RenewLease call per renewal) (default stream)");
DEFINE_string(clients, "100,1000,5000,10000,20000", "simulated clients per step, comma-separated (default 100,1000,5000,10000,20000)");
DEFINE_uint32(duration_s, 10, "seconds counted per step, after the warm-up (default 10)");
DEFINE_uint32(warmup_s, 2, "seconds run before counting, per step (default 2)");
DEFINE_uint32(lease_ms, 0, "the lease the schedule assumes, ms; 0: the coordinator's, from a first renewal (default 0)");
DEFINE_uint32(channels, 4, "gRPC channels (TCP connections) the renewals are spread over (default 4)");
DEFINE_uint32(cq_threads, 1, "threads reaping completions, one completion queue each (default 1)");
DEFINE_uint32(send_threads, 0,
              "threads sending renewals on schedule, each for every send_threads-th client; 0: 2 in stream mode, 1 in "
              "unary mode (default 0)");
DEFINE_string(csv, "", "CSV file to write the steps to (default: none)");
DEFINE_int32(coordinator_pid, 0, "the coordinator's process id, to report its CPU time per renewal (default 0: not reported)");
DEFINE_uint64(seed, 1, "seed of the clients' phases (default 1)");

namespace rkv::bench {
namespace {

using Clock = std::chrono::steady_clock;

enum class Mode { kStream, kUnary };

// How long the streams of a step may take to open (each to answer its
// first renewal) before the step is given up.
constexpr std::chrono::seconds kOpenTimeout{60};

// One renewal in flight. Owned by its completion queue's tag until reaped.
struct Renewal {
  grpc::ClientContext context;
  v1::RenewLeaseResponse response;
  grpc::Status status;
  std::unique_ptr<grpc::ClientAsyncResponseReader<v1::RenewLeaseResponse>> reader;
  Clock::time_point intended;
  bool counted = false;  // intended within the counted window
};

// The intended send times of one stream's unanswered renewals, oldest
// first: answers come in order, so the front is the one answered next. A
// ring that grows (doubling) only when a stream falls further behind than
// ever before, so that a renewal allocates nothing.
class IntendedFifo {
 public:
  IntendedFifo() : ring_(4) {}

  bool empty() const { return size_ == 0; }
  size_t size() const { return size_; }

  void Push(Clock::time_point t) {
    if (size_ == ring_.size()) Grow();
    ring_[(head_ + size_) & (ring_.size() - 1)] = t;
    ++size_;
  }

  Clock::time_point Pop() {
    const Clock::time_point t = ring_[head_];
    head_ = (head_ + 1) & (ring_.size() - 1);
    --size_;
    return t;
  }

 private:
  void Grow() {
    std::vector<Clock::time_point> bigger(ring_.size() * 2);
    for (size_t i = 0; i < size_; ++i) bigger[i] = ring_[(head_ + i) & (ring_.size() - 1)];
    ring_.swap(bigger);
    head_ = 0;
  }

  std::vector<Clock::time_point> ring_;  // a power of two long
  size_t head_ = 0;
  size_t size_ = 0;
};

// One simulated client's KeepLease stream. The sender thread (a renewal is
// due) and its completion queue's thread (an operation completed) both
// act on it, under mu.
//
// A call's life: Open starts it, with a Read outstanding; each renewal is
// pushed on `unanswered` and written, or, while a Write (or the start) is
// in flight, counted in `unwritten` and written when that completes. A
// failed start, read or write marks the call broken; once none of them is
// in flight, Finish asks for its status (gRPC allows Finish only when no
// Read is outstanding), and its completion fails the renewals still
// unanswered with that status and drops the call. The client's next
// renewal opens a new one.
struct KeepStream {
  enum class Op : uint8_t { kStart, kRead, kWrite, kFinish };
  // A completion queue tag: which stream, which operation.
  struct Tag {
    KeepStream* stream;
    Op op;
  };

  KeepStream(v1::Coordinator::Stub* stub_in, grpc::CompletionQueue* cq_in) : stub(stub_in), cq(cq_in) {}

  v1::Coordinator::Stub* const stub;
  grpc::CompletionQueue* const cq;
  Tag start_tag{this, Op::kStart};
  Tag read_tag{this, Op::kRead};
  Tag write_tag{this, Op::kWrite};
  Tag finish_tag{this, Op::kFinish};

  Mutex mu;
  std::unique_ptr<grpc::ClientContext> context GUARDED_BY(mu);
  // Null between calls (before the first, after one broke and finished).
  std::unique_ptr<grpc::ClientAsyncReaderWriter<v1::RenewLeaseRequest, v1::RenewLeaseResponse>> call GUARDED_BY(mu);
  v1::RenewLeaseResponse response GUARDED_BY(mu);
  grpc::Status end GUARDED_BY(mu);
  IntendedFifo unanswered GUARDED_BY(mu);
  uint32_t unwritten GUARDED_BY(mu) = 0;  // the newest of `unanswered` not written yet
  bool starting GUARDED_BY(mu) = false;
  bool reading GUARDED_BY(mu) = false;
  bool writing GUARDED_BY(mu) = false;
  bool finishing GUARDED_BY(mu) = false;
  bool broken GUARDED_BY(mu) = false;
  bool answered GUARDED_BY(mu) = false;  // this call has answered a renewal
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

// When each client renews within a step.
struct Schedule {
  Clock::duration period{};
  // Each client's phase within the period, sorted: client i renews at
  // start + cycle * period + phases[i].
  std::vector<Clock::duration> phases;
  Clock::time_point start, count_from, count_until;
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

// Sends the renewals of clients first, first + stride, ... on schedule,
// calling send(client, intended, counted) for each, and records in
// *lag_us how late each counted one went out. With cpu_before, samples the
// coordinator's CPU time there when the counted window opens.
template <typename Send>
void SendOnSchedule(const Schedule& schedule, size_t first, size_t stride, std::vector<uint32_t>* lag_us,
                    double* cpu_before, Send&& send) {
  bool cpu_started = false;
  for (uint64_t cycle = 0;; ++cycle) {
    const Clock::time_point base = schedule.start + schedule.period * cycle;
    if (base >= schedule.count_until) break;
    for (size_t i = first; i < schedule.phases.size(); i += stride) {
      const Clock::time_point intended = base + schedule.phases[i];
      if (intended >= schedule.count_until) break;
      Clock::time_point now = Clock::now();
      if (now < intended) {
        std::this_thread::sleep_until(intended);
        now = Clock::now();
      }
      const bool counted = intended >= schedule.count_from;
      if (counted && !cpu_started) {
        cpu_started = true;
        if (cpu_before != nullptr && FLAGS_coordinator_pid > 0) *cpu_before = ProcessCpuSeconds(FLAGS_coordinator_pid);
      }
      if (counted) {
        lag_us->push_back(
            static_cast<uint32_t>(std::chrono::duration_cast<std::chrono::microseconds>(now - intended).count()));
      }
      send(i, intended, counted);
    }
  }
}

class Bench {
 public:
  Bench(Mode mode, std::string digest_hex, std::vector<std::unique_ptr<v1::Coordinator::Stub>> stubs,
        int cq_threads, int send_threads)
      : mode_(mode),
        digest_hex_(std::move(digest_hex)),
        stubs_(std::move(stubs)),
        cqs_(static_cast<size_t>(cq_threads)),
        send_threads_(send_threads) {
    for (auto& cq : cqs_) cq = std::make_unique<grpc::CompletionQueue>();
  }

  // One synchronous renewal, to learn lease_ms (and that the coordinator
  // answers): a RenewLease call in unary mode, one renewal on a KeepLease
  // stream in stream mode.
  grpc::Status Probe(v1::RenewLeaseResponse* response) {
    grpc::ClientContext context;
    control::AttachTokenDigest(&context, digest_hex_);
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    context.set_wait_for_ready(true);
    if (mode_ == Mode::kUnary) return stubs_[0]->RenewLease(&context, v1::RenewLeaseRequest(), response);
    auto stream = stubs_[0]->KeepLease(&context);
    if (stream->Write(v1::RenewLeaseRequest()) && stream->Read(response)) {
      stream->WritesDone();
      // The coordinator ends the stream OK once the client is done; any
      // other end would be a bug worth knowing of.
      return stream->Finish();
    }
    // The call ended (UNIMPLEMENTED from a coordinator without KeepLease,
    // UNAUTHENTICATED, ...): its status says why.
    return stream->Finish();
  }

  // Runs one step; fails only when the streams of stream mode cannot be
  // opened.
  StatusOr<StepResult> Run(uint32_t clients, std::chrono::milliseconds lease, std::chrono::seconds warmup,
                           std::chrono::seconds duration, uint64_t seed) {
    Schedule schedule;
    schedule.period = std::chrono::duration_cast<Clock::duration>(lease) / 3;
    std::mt19937_64 rng(seed + clients);
    std::uniform_int_distribution<int64_t> phase_of(0, schedule.period.count() - 1);
    schedule.phases.resize(clients);
    for (auto& p : schedule.phases) p = Clock::duration(phase_of(rng));
    std::sort(schedule.phases.begin(), schedule.phases.end());
    lease_ = lease;
    // Nothing is counted until the schedule is known (the renewals that
    // open the streams are not).
    count_from_.store(Clock::time_point::max().time_since_epoch().count(), std::memory_order_relaxed);

    // One per completion thread, and the last for this thread (the
    // renewals a stream's teardown fails).
    std::vector<Tally> tallies(cqs_.size() + 1);
    std::vector<std::thread> reapers;
    for (size_t i = 0; i < cqs_.size(); ++i) {
      reapers.emplace_back([this, i, &tallies] {
        if (mode_ == Mode::kUnary) {
          Reap(*cqs_[i], tallies[i]);
        } else {
          ReapStreams(*cqs_[i], tallies[i]);
        }
      });
    }
    if (mode_ == Mode::kStream) {
      if (Status s = OpenStreams(clients); !s.ok()) {
        TearDownStreams(&tallies.back());
        StopReapers(reapers);
        return s;
      }
    }

    schedule.start = Clock::now() + std::chrono::milliseconds(50);
    schedule.count_from = schedule.start + warmup;
    schedule.count_until = schedule.count_from + duration;
    count_from_.store(schedule.count_from.time_since_epoch().count(), std::memory_order_relaxed);
    double cpu_before = -1;
    std::vector<std::vector<uint32_t>> lags(static_cast<size_t>(send_threads_));
    std::vector<std::thread> senders;
    for (size_t k = 0; k < lags.size(); ++k) {
      senders.emplace_back([this, k, &schedule, &lags, &cpu_before, clients, duration] {
        const size_t stride = lags.size();
        lags[k].reserve(static_cast<size_t>(clients) * 3 * static_cast<size_t>(duration.count() + 1) / stride + 1);
        double* cpu = k == 0 ? &cpu_before : nullptr;
        if (mode_ == Mode::kUnary) {
          uint64_t sent = k;
          SendOnSchedule(schedule, k, stride, &lags[k], cpu, [&](size_t client, Clock::time_point intended,
                                                                 bool counted) {
            Send(sent, client, intended, counted);
            sent += stride;
          });
        } else {
          SendOnSchedule(schedule, k, stride, &lags[k], cpu, [this](size_t client, Clock::time_point intended, bool) {
            Renew(*streams_[client], intended);
          });
        }
      });
    }
    for (auto& t : senders) t.join();
    // Sending ended at count_until (or later when behind); CPU time is
    // measured up to then, over the counted window.
    const Clock::time_point send_end = Clock::now();
    double cpu_after = -1;
    if (FLAGS_coordinator_pid > 0) cpu_after = ProcessCpuSeconds(FLAGS_coordinator_pid);
    if (mode_ == Mode::kUnary) {
      // Wait for the renewals in flight: each ends by its deadline.
      while (in_flight_.load(std::memory_order_acquire) != 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    } else {
      // Wait for the answers still due: each is due within a lease of its
      // intended time, the last of which was before count_until (later
      // ones count as errors anyway).
      const Clock::time_point until = schedule.count_until + lease;
      while (Clock::now() < until && Unanswered() != 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
      TearDownStreams(&tallies.back());
    }
    StopReapers(reapers);

    StepResult r;
    r.clients = clients;
    const double seconds = std::chrono::duration<double>(duration).count();
    r.offered_per_s = static_cast<double>(clients) / std::chrono::duration<double>(schedule.period).count();
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
    std::vector<uint32_t> lag_us;
    for (const auto& l : lags) lag_us.insert(lag_us.end(), l.begin(), l.end());
    r.lag_p99_ms = Percentile(lag_us, 0.99);
    if (cpu_before >= 0 && cpu_after >= 0 && ok > 0) {
      const double window = std::chrono::duration<double>(send_end - schedule.count_from).count();
      r.cpu_us_per_renewal = (cpu_after - cpu_before) * 1e6 / static_cast<double>(ok);
      r.cpu_cores = (cpu_after - cpu_before) / window;
    }
    return r;
  }

 private:
  // Unary mode: renewal number n, one RenewLease call.
  void Send(uint64_t n, size_t client, Clock::time_point intended, bool counted) {
    auto* r = new Renewal();
    r->intended = intended;
    r->counted = counted;
    control::AttachTokenDigest(&r->context, digest_hex_);
    // A renewal answered after a lease is of no use to its client.
    r->context.set_deadline(std::chrono::system_clock::now() + lease_);
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

  // Shuts the completion queues down once nothing is in flight, waits for
  // their threads, and makes fresh ones for the next step.
  void StopReapers(std::vector<std::thread>& reapers) {
    for (auto& cq : cqs_) cq->Shutdown();
    for (auto& t : reapers) t.join();
    for (auto& cq : cqs_) cq = std::make_unique<grpc::CompletionQueue>();
    streams_.clear();
  }

  bool Counted(Clock::time_point intended) const {
    return intended.time_since_epoch().count() >= count_from_.load(std::memory_order_relaxed);
  }

  // Stream mode: one stream per client, each opened by a first renewal
  // (not counted); OK once every stream has answered it.
  Status OpenStreams(uint32_t clients) {
    opened_.store(0, std::memory_order_relaxed);
    open_failures_.store(0, std::memory_order_relaxed);
    streams_.reserve(clients);
    for (uint32_t i = 0; i < clients; ++i) {
      streams_.push_back(
          std::make_unique<KeepStream>(stubs_[i % stubs_.size()].get(), cqs_[i % cqs_.size()].get()));
    }
    const Clock::time_point began = Clock::now();
    for (auto& s : streams_) {
      {
        MutexLock lock(s->mu);
        // A channel still reconnecting (after the previous step, or a
        // coordinator restart) is waited for here, within kOpenTimeout,
        // rather than failing the step; later calls fail fast, as unary
        // mode's do.
        Open(*s, /*wait_for_ready=*/true);
      }
      Renew(*s, began);
    }
    // Progress every second while it moves, every 10 s while it does not.
    Clock::time_point report_at = began + std::chrono::seconds(1);
    Clock::time_point reported_at = began;
    uint64_t reported = 0;
    for (;;) {
      const uint64_t opened = opened_.load(std::memory_order_relaxed);
      const Clock::time_point now = Clock::now();
      if (opened == clients) {
        if (now - began >= std::chrono::seconds(1)) {
          std::cerr << "rkv-renewal-bench: " << clients << " KeepLease streams open in "
                    << std::chrono::duration_cast<std::chrono::milliseconds>(now - began).count() << " ms\n";
        }
        return Status::Ok();
      }
      if (open_failures_.load(std::memory_order_relaxed) != 0) {
        grpc::Status first;
        {
          MutexLock lock(open_mu_);
          first = first_open_failure_;
        }
        if (first.error_code() == grpc::StatusCode::UNIMPLEMENTED) {
          return Unimplemented("the coordinator does not implement KeepLease; use --mode=unary");
        }
        const std::string why = first.ok() ? "the coordinator ended the stream" : first.error_message();
        return Unavailable("KeepLease: " + std::to_string(open_failures_.load(std::memory_order_relaxed)) + " of " +
                           std::to_string(clients) + " streams could not be opened, the first: " + why + " (code " +
                           std::to_string(first.error_code()) + ")");
      }
      if (now - began >= kOpenTimeout) {
        return DeadlineExceeded("KeepLease: only " + std::to_string(opened) + " of " + std::to_string(clients) +
                                " streams answered their first renewal within " +
                                std::to_string(kOpenTimeout.count()) + " s");
      }
      if (now >= report_at) {
        if (opened != reported || now - reported_at >= std::chrono::seconds(10)) {
          std::cerr << "rkv-renewal-bench: " << opened << " of " << clients << " KeepLease streams open\n";
          reported = opened;
          reported_at = now;
        }
        report_at += std::chrono::seconds(1);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }

  // Stream mode: a renewal of `s`'s client is due. Opens a call when the
  // client has none (the first renewal, or the first after one broke).
  void Renew(KeepStream& s, Clock::time_point intended) {
    MutexLock lock(s.mu);
    if (s.call == nullptr) Open(s);
    s.unanswered.Push(intended);
    ++s.unwritten;
    WriteNext(s);
  }

  // Writes the oldest unwritten renewal of `s`, unless a write is in
  // flight (its completion comes back here) or the call is broken (its end
  // fails the renewal).
  void WriteNext(KeepStream& s) REQUIRES(s.mu) {
    // StartCall sends the initial metadata with the same operation set as
    // Write: until it completes, it counts as the write in flight.
    if (s.unwritten == 0 || s.broken || s.starting || s.writing) return;
    --s.unwritten;
    // Every renewal asks the same (map_version 0): one request serves all.
    s.call->Write(request_, &s.write_tag);
    s.writing = true;
  }

  void Open(KeepStream& s, bool wait_for_ready = false) REQUIRES(s.mu) {
    s.context = std::make_unique<grpc::ClientContext>();
    control::AttachTokenDigest(s.context.get(), digest_hex_);
    s.context->set_wait_for_ready(wait_for_ready);
    s.call = s.stub->PrepareAsyncKeepLease(s.context.get(), s.cq);
    // A Read may follow StartCall before it completes (a Write may not:
    // WriteNext).
    s.call->StartCall(&s.start_tag);
    s.call->Read(&s.response, &s.read_tag);
    s.starting = s.reading = true;
    s.writing = s.finishing = s.broken = s.answered = false;
    s.unwritten = 0;
    open_calls_.fetch_add(1, std::memory_order_relaxed);
  }

  // Asks a broken call for its status once nothing else is in flight on
  // it.
  void MaybeFinish(KeepStream& s) REQUIRES(s.mu) {
    if (!s.broken || s.call == nullptr || s.starting || s.reading || s.writing || s.finishing) return;
    s.call->Finish(&s.end, &s.finish_tag);
    s.finishing = true;
  }

  void ReapStreams(grpc::CompletionQueue& cq, Tally& tally) {
    void* tag = nullptr;
    bool ok = false;
    while (cq.Next(&tag, &ok)) {
      const auto* t = static_cast<const KeepStream::Tag*>(tag);
      KeepStream& s = *t->stream;
      MutexLock lock(s.mu);
      switch (t->op) {
        case KeepStream::Op::kStart:
          s.starting = false;
          if (!ok) {
            s.broken = true;
          } else {
            WriteNext(s);
          }
          break;
        case KeepStream::Op::kRead:
          s.reading = false;
          if (!ok) {
            s.broken = true;
            break;
          }
          Answered(s, Clock::now(), tally);
          if (!s.broken) {
            s.call->Read(&s.response, &s.read_tag);
            s.reading = true;
          }
          break;
        case KeepStream::Op::kWrite:
          s.writing = false;
          if (!ok) {
            s.broken = true;
          } else {
            WriteNext(s);
          }
          break;
        case KeepStream::Op::kFinish:
          Finished(s, tally);
          break;
      }
      MaybeFinish(s);
    }
  }

  // An answer came on `s`: it answers the oldest unanswered renewal.
  void Answered(KeepStream& s, Clock::time_point now, Tally& tally) REQUIRES(s.mu) {
    if (!s.answered) {
      s.answered = true;
      opened_.fetch_add(1, std::memory_order_relaxed);
    }
    if (s.unanswered.empty()) {
      // A stream being torn down has given its renewals up already;
      // otherwise the coordinator answered more than it was asked.
      if (!s.broken) ++tally.errors[static_cast<int>(grpc::StatusCode::INTERNAL)];
      return;
    }
    const Clock::time_point intended = s.unanswered.Pop();
    if (!Counted(intended)) return;
    const auto latency = now - intended;
    if (latency > lease_) {
      // Of no use to its client, as a unary call past its deadline.
      ++tally.errors[static_cast<int>(grpc::StatusCode::DEADLINE_EXCEEDED)];
      return;
    }
    ++tally.ok;
    tally.latency_us.push_back(
        static_cast<uint32_t>(std::chrono::duration_cast<std::chrono::microseconds>(latency).count()));
  }

  // The broken call of `s` has ended with s.end: its unanswered renewals
  // fail with that code, and the client's next renewal opens a new call.
  void Finished(KeepStream& s, Tally& tally) REQUIRES(s.mu) {
    // A coordinator that ends a stream OK still leaves its renewals
    // unanswered (librkv reads that as UNAVAILABLE too).
    const int code = static_cast<int>(s.end.ok() ? grpc::StatusCode::UNAVAILABLE : s.end.error_code());
    while (!s.unanswered.empty()) {
      if (Counted(s.unanswered.Pop())) ++tally.errors[code];
    }
    if (!s.answered) {
      MutexLock lock(open_mu_);
      if (open_failures_.fetch_add(1, std::memory_order_relaxed) == 0) first_open_failure_ = s.end;
    }
    s.unwritten = 0;
    s.finishing = false;
    s.call.reset();
    s.context.reset();
    open_calls_.fetch_sub(1, std::memory_order_release);
  }

  // Renewals still unanswered on every stream.
  size_t Unanswered() {
    size_t n = 0;
    for (auto& s : streams_) {
      MutexLock lock(s->mu);
      n += s->unanswered.size();
    }
    return n;
  }

  // Ends the step's streams: the renewals still unanswered fail (with
  // DEADLINE_EXCEEDED: a lease has passed since the last was due), every
  // call is cancelled, and this returns once each has finished.
  void TearDownStreams(Tally* tally) {
    for (auto& s : streams_) {
      MutexLock lock(s->mu);
      while (!s->unanswered.empty()) {
        if (Counted(s->unanswered.Pop())) ++tally->errors[static_cast<int>(grpc::StatusCode::DEADLINE_EXCEEDED)];
      }
      s->unwritten = 0;
      if (s->call == nullptr) continue;
      s->broken = true;
      s->context->TryCancel();
      MaybeFinish(*s);
    }
    while (open_calls_.load(std::memory_order_acquire) != 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }

  const Mode mode_;
  const std::string digest_hex_;
  std::vector<std::unique_ptr<v1::Coordinator::Stub>> stubs_;
  std::vector<std::unique_ptr<grpc::CompletionQueue>> cqs_;
  const int send_threads_;
  std::chrono::milliseconds lease_{0};  // of the step running
  // Unary mode: calls in flight.
  std::atomic<uint64_t> in_flight_{0};

  // Stream mode: the step's streams, client i's at i.
  std::vector<std::unique_ptr<KeepStream>> streams_;
  const v1::RenewLeaseRequest request_;  // map_version 0, as in unary mode
  // The counted window's start (a Clock::time_point's count): renewals
  // intended before it are not counted.
  std::atomic<Clock::rep> count_from_{0};
  std::atomic<int64_t> open_calls_{0};       // calls started and not finished
  std::atomic<uint64_t> opened_{0};          // calls that answered their first renewal
  std::atomic<uint64_t> open_failures_{0};   // calls that finished before answering
  Mutex open_mu_;
  grpc::Status first_open_failure_ GUARDED_BY(open_mu_);
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
  Mode mode = Mode::kStream;
  if (FLAGS_mode == "unary") {
    mode = Mode::kUnary;
  } else if (FLAGS_mode != "stream") {
    std::cerr << "rkv-renewal-bench: --mode must be stream or unary ('" << FLAGS_mode << "')\n";
    return 2;
  }
  const std::vector<uint32_t> counts = ParseCounts(FLAGS_clients);
  if (counts.empty()) {
    std::cerr << "rkv-renewal-bench: --clients must list positive counts below 10,000,000 ('" << FLAGS_clients
              << "')\n";
    return 2;
  }
  if (FLAGS_channels < 1 || FLAGS_channels > 256 || FLAGS_cq_threads < 1 || FLAGS_cq_threads > 64 ||
      FLAGS_send_threads > 64 || FLAGS_duration_s < 1) {
    std::cerr << "rkv-renewal-bench: --channels must be 1..256, --cq_threads 1..64, --send_threads 0..64, "
                 "--duration_s at least 1\n";
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
  // Two senders keep up better than one near this machine's limit (2
  // cores, 45,000 to 60,000 renewals/s: a lag p99 of 10 to 30 ms instead
  // of 100 to 300 ms); unary mode keeps its one.
  const uint32_t send_threads = FLAGS_send_threads != 0 ? FLAGS_send_threads : (mode == Mode::kStream ? 2 : 1);
  Bench bench(mode, control::TokenDigestHex(*token), std::move(stubs), static_cast<int>(FLAGS_cq_threads),
              static_cast<int>(send_threads));
  v1::RenewLeaseResponse first;
  if (const grpc::Status s = bench.Probe(&first); !s.ok()) {
    if (mode == Mode::kStream && s.error_code() == grpc::StatusCode::UNIMPLEMENTED) {
      std::cerr << "rkv-renewal-bench: coordinator " << FLAGS_coordinator
                << ": the coordinator does not implement KeepLease; use --mode=unary\n";
      return 1;
    }
    std::cerr << "rkv-renewal-bench: coordinator " << FLAGS_coordinator << ": "
              << (mode == Mode::kStream ? "KeepLease" : "RenewLease") << ": " << s.error_message() << " (code "
              << s.error_code() << ")\n";
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
    const StatusOr<StepResult> step = bench.Run(n, std::chrono::milliseconds(lease_ms),
                                                std::chrono::seconds(FLAGS_warmup_s),
                                                std::chrono::seconds(FLAGS_duration_s), FLAGS_seed);
    if (!step.ok()) {
      std::cerr << "rkv-renewal-bench: coordinator " << FLAGS_coordinator << ": " << n
                << " clients: " << step.status().message() << "\n";
      return 1;
    }
    const StepResult& r = *step;
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
      "rkv-renewal-bench --coordinator=HOST:PORT --token_file=FILE [--mode=stream|unary] [--clients=N,N,...] "
      "[--duration_s=S] [--csv=FILE] [--coordinator_pid=PID]");
  rkv::ParseProgramFlags(&argc, &argv, __FILE__);
  google::InitGoogleLogging(argv[0]);
  return rkv::bench::Main();
}
