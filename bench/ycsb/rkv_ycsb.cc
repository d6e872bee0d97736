// rkv-ycsb: a YCSB-style load generator for rkv and, with the same code
// path, for memcached and Redis as baselines.
//
// A run has two phases:
//   load  every record ("user" + 12 digits, --value_bytes bytes) is PUT
//         once, split over the threads; not timed.
//   run   --operations operations (or --duration_s seconds, whichever ends
//         first) in the mix --workload names (bench/ycsb/workload.h: YCSB's
//         core workloads a, b, c, d and f, e refused, plus get = 100% GET
//         and put = 100% PUT), on records --key_distribution picks
//         (uniform, zipfian or latest: bench/ycsb/key_chooser.h).
// Every thread has its own connection (its own rkv::Client with one
// connection, memcached_st or redisContext) and runs its share of the
// operations (bench/ycsb/op_runner.h): closed loop by default, open loop
// with --target_ops_per_s (each thread its share of the rate on a fixed
// schedule, latency from each operation's due time). Every operation's
// latency goes into a log-linear histogram per kind of operation
// (bench/ycsb/histogram.h). Every error is counted: failed calls, and GETs
// whose value is missing or not --value_bytes long. A run with any error
// says so on stderr and exits 1; bad flags exit 2. A read-modify-write
// (workload f) is a compare-and-set loop on every store
// (KvTarget::ReadModifyWrite): a conflict, another write of the key
// between its GET and its PUT, is no error; it is retried, within the
// operation's latency, and counted in the report.
//
// With --batch=N each thread issues its operations N at a time: the GETs
// of a batch as one MultiGet, its PUTs as one MultiPut (a mixed batch makes
// both calls, GETs first). The rkv target uses rkv::Client::MultiGet /
// MultiPut, Redis pipelines the batch's commands (one WAIT after its SETs
// with --redis_wait_replicas); memcached has no batched path here and
// refuses --batch > 1. Latency is then recorded twice: per operation (the
// time of the call that carried it, so every operation of one MultiGet
// gets that call's time) and per batch (from the first call's start to the
// last call's end).
//
// Output (bench/ycsb/report.h): with --output_format=text (the default) a
// summary on stdout and, with --output, one line appended per run:
//   target workload value_bytes threads ops ops_per_s get_p50_us get_p99_us
//   put_p50_us put_p99_us errors batch batch_p50_us batch_p99_us
// ("-" where a run had no operation of that kind, and for the batch
// percentiles of --batch=1; target is --label when set). A header line
// starting with '#' is written when the file is empty. With json or csv the
// result goes to stdout (and --output) in that format, and the summary to
// stderr. Runs longer than 3 s print a progress line on stderr every second
// (--progress).
#include <gflags/gflags.h>
#include <glog/logging.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <latch>
#include <memory>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "bench/ycsb/histogram.h"
#include "bench/ycsb/insert_counter.h"
#include "bench/ycsb/key_chooser.h"
#include "bench/ycsb/kv_target.h"
#include "bench/ycsb/op_runner.h"
#include "bench/ycsb/progress.h"
#include "bench/ycsb/report.h"
#include "bench/ycsb/run_clock.h"
#include "bench/ycsb/workload.h"
#include "common/program_help.h"
#include "rkv/status.h"

DEFINE_string(target, "rkv", "store to drive: rkv | memcached | redis (default rkv)");
DEFINE_string(server, "127.0.0.1:7700", "HOST:PORT of the store (default 127.0.0.1:7700)");
DEFINE_string(coordinator, "",
              "rkv: HOST:PORT of an rkv-coordinator, or a comma-separated list of the cluster's "
              "coordinators (A,B,C: the client finds the leader); runs the client in cluster mode and "
              "--server is ignored (default: none, one server)");
DEFINE_string(read_from, "primary",
              "rkv with --coordinator: which replica a GET reads: primary (linearizable) or any (the "
              "shard's primary or a backup in turn, spreading reads; may return a value not yet "
              "acknowledged, or one up to about a lease old: see rkv::ReadFrom) (default primary)");
DEFINE_int32(redis_wait_replicas, 0,
             "redis: after every SET, WAIT until this many replicas acknowledged it, 0..16; a SET not "
             "acknowledged by them within --timeout_ms counts as a failed PUT (default 0: no WAIT)");
DEFINE_string(token_file, "", "rkv: file holding the server's token (required for rkv)");
DEFINE_string(transport, "auto", "rkv: auto | tcp | verbs (default auto)");
DEFINE_string(tls_ca, "", "rkv: PEM CA bundle of the servers' certificates, for --data_plane_tls (default empty)");
DEFINE_bool(data_plane_tls, false, "rkv: TLS on the tcp data plane (servers started with --data_plane_tls); needs "
            "--tls_ca (default false)");
DEFINE_uint64(location_cache_bytes, uint64_t{32} << 20,
              "rkv: bytes of each client's location cache, 0 = off (default 33554432)");
DEFINE_bool(get_into, false,
            "rkv: GETs read into one registered buffer per thread (Client::GetInto: the READ puts the value "
            "there, no copy) instead of into a string (default false)");
DEFINE_string(rkv_client, "shared",
              "rkv: shared = the threads share one rkv::Client with one connection per thread (its location "
              "cache too), as an application's threads share its Client; per_thread = a Client of each "
              "thread's own (default shared)");
DEFINE_int32(timeout_ms, 5000, "per-call deadline and connect timeout in milliseconds (default 5000)");
DEFINE_string(workload, "get",
              "get (100% GET) | put (100% PUT) | YCSB's a (50% read, 50% update) | b (95/5) | c (100% "
              "read) | d (95% read, 5% insert; latest keys by default) | f (50% read, 50% "
              "read-modify-write: a GET then a compare-and-set PUT, retried on conflict); e (scans) is refused; "
              "a read is a GET, an update or an insert a PUT (default get)");
DEFINE_uint64(records, 10000, "records loaded before the timed phase (default 10000)");
DEFINE_bool(load, true,
            "load the --records first; --noload reuses what an earlier run with the same --records "
            "and --value_bytes loaded (GETs of missing records count as errors) (default true)");
DEFINE_bool(warm_reads, false,
            "before the timed phase, GET every record once, untimed (rkv: fills the location cache, so "
            "that the timed GETs are cache hits; a failed one counts as a load error) (default false)");
DEFINE_uint64(operations, 100000, "operations in the timed phase, all threads together; 0 = no cap, "
                                  "then --duration_s must be set (default 100000)");
DEFINE_double(duration_s, 0, "also stop the timed phase after this many seconds; 0 = no cap (default 0)");
DEFINE_uint64(value_bytes, 1024, "bytes per value (default 1024)");
DEFINE_int32(threads, 1, "client threads, each with its own connection, 1..256 (default 1)");
DEFINE_string(key_distribution, "",
              "uniform | zipfian (YCSB's scrambled zipfian, constant 0.99) | latest (YCSB's skewed "
              "latest: zipfian over recency, following the run's inserts) (default: latest for "
              "--workload=d, uniform otherwise)");
DEFINE_uint64(seed, 1, "random seed; each thread's draws derive from it and the thread's index (default 1)");
DEFINE_int32(batch, 1,
             "operations per batch, 1..64: each thread issues its GETs as one MultiGet and its PUTs as one "
             "MultiPut per batch (rkv; Redis pipelines them; memcached: 1 only; workloads get, put, a, b "
             "and c only; closed loop only) (default 1)");
DEFINE_double(target_ops_per_s, 0,
              "open loop: operations per second, all threads together, each thread its equal share on a "
              "fixed schedule; latency counts from each operation's scheduled time, so a stall shows in "
              "the latency of every operation due during it; with --duration_s, operations due before "
              "its end are still sent for up to 1 s after it; 0 = closed loop (default 0)");
DEFINE_bool(progress, true,
            "print a progress line on stderr every second from the 3rd second of the timed phase "
            "(operations, ops/s and p99 of the last second, p99 so far) (default true)");
DEFINE_string(output_format, "text",
              "text | json | csv: the format of the result on stdout and of what --output appends (text: "
              "the summary, and the one-line format bench/run-verbs.sh reads; json: one object, as bench/compare "
              "reads it; csv: a header "
              "and one row per kind of operation); with json or csv the summary goes to stderr "
              "(default text)");
DEFINE_string(output, "", "file to append the result to, in --output_format (default: none)");
DEFINE_string(label, "", "first column of the --output line, label of the json and csv results (default: --target)");

namespace rkv::bench {
namespace {

using Clock = std::chrono::steady_clock;

constexpr uint64_t kMaxValueBytes = uint64_t{64} << 20;
constexpr int kMaxThreads = 256;
constexpr int kMaxBatch = 64;
constexpr size_t kMaxTokenBytes = 4096;
constexpr double kMaxTargetOpsPerS = 1e9;

struct Config {
  TargetOptions target;
  Workload workload;
  KeyDistribution distribution = KeyDistribution::kUniform;
  uint64_t records = 0;
  bool load = true;
  bool warm_reads = false;
  bool shared_rkv_client = false;  // --rkv_client=shared with --target=rkv
  uint64_t operations = 0;  // 0: no cap
  double duration_s = 0;    // 0: no cap
  uint64_t value_bytes = 0;
  int threads = 1;
  int batch = 1;
  uint64_t seed = 1;
  double target_ops_per_s = 0;  // 0: closed loop
  bool progress = true;
  OutputFormat format = OutputFormat::kText;
};

StatusOr<std::string> ReadToken(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return InvalidArgument("cannot open token file '" + path + "'");
  std::ostringstream contents;
  contents << in.rdbuf();
  if (in.bad()) return InvalidArgument("cannot read token file '" + path + "'");
  std::string token = contents.str();
  while (!token.empty() && std::isspace(static_cast<unsigned char>(token.back()))) token.pop_back();
  if (token.empty()) return InvalidArgument("token file '" + path + "' is empty");
  if (token.size() > kMaxTokenBytes) {
    return InvalidArgument("token file '" + path + "' holds more than 4096 bytes");
  }
  return token;
}

StatusOr<Config> ConfigFromFlags() {
  Config c;
  c.target.kind = FLAGS_target;
  if (c.target.kind != "rkv" && c.target.kind != "memcached" && c.target.kind != "redis") {
    return InvalidArgument("--target must be rkv, memcached or redis");
  }
  c.target.server = FLAGS_server;
  if (!FLAGS_coordinator.empty()) {
    if (c.target.kind != "rkv") return InvalidArgument("--coordinator applies to --target=rkv only");
    std::string host;
    int port = 0;
    // Each entry of the list (librkv checks the list in full at connect).
    std::string_view rest = FLAGS_coordinator;
    for (int position = 1;; ++position) {
      const size_t comma = rest.find(',');
      std::string_view entry = rest.substr(0, comma);
      while (!entry.empty() && entry.front() == ' ') entry.remove_prefix(1);
      while (!entry.empty() && entry.back() == ' ') entry.remove_suffix(1);
      if (Status s = SplitHostPort(entry, &host, &port); !s.ok()) {
        return s.WithContext("--coordinator entry " + std::to_string(position));
      }
      if (comma == std::string_view::npos) break;
      rest.remove_prefix(comma + 1);
    }
    c.target.coordinator = FLAGS_coordinator;
  }
  if (FLAGS_read_from == "any") {
    if (c.target.kind != "rkv" || c.target.coordinator.empty()) {
      return InvalidArgument("--read_from=any applies to --target=rkv with --coordinator only");
    }
    c.target.read_any_replica = true;
  } else if (FLAGS_read_from != "primary") {
    return InvalidArgument("--read_from must be primary or any");
  }
  if (FLAGS_redis_wait_replicas != 0) {
    if (c.target.kind != "redis") return InvalidArgument("--redis_wait_replicas applies to --target=redis only");
    if (FLAGS_redis_wait_replicas < 0 || FLAGS_redis_wait_replicas > 16) {
      return InvalidArgument("--redis_wait_replicas must be in 0..16");
    }
    c.target.redis_wait_replicas = FLAGS_redis_wait_replicas;
  }
  {
    std::string host;
    int port = 0;
    if (Status s = SplitHostPort(c.target.server, &host, &port); !s.ok()) {
      return s.WithContext("--server");
    }
  }
  if (FLAGS_timeout_ms < 1) return InvalidArgument("--timeout_ms must be >= 1");
  c.target.timeout_ms = FLAGS_timeout_ms;
  c.target.location_cache_bytes = FLAGS_location_cache_bytes;
  if (FLAGS_get_into && c.target.kind != "rkv") return InvalidArgument("--get_into applies to --target=rkv only");
  c.target.get_into = FLAGS_get_into;
  c.target.transport = FLAGS_transport;
  if ((FLAGS_data_plane_tls || !FLAGS_tls_ca.empty()) && c.target.kind != "rkv") {
    return InvalidArgument("--data_plane_tls and --tls_ca apply to --target=rkv only");
  }
  if (FLAGS_data_plane_tls && FLAGS_tls_ca.empty()) return InvalidArgument("--data_plane_tls needs --tls_ca");
  c.target.data_plane_tls = FLAGS_data_plane_tls;
  c.target.tls_ca_file = FLAGS_tls_ca;
  if (c.target.kind == "rkv") {
    if (FLAGS_token_file.empty()) return InvalidArgument("--token_file is required with --target=rkv");
    StatusOr<std::string> token = ReadToken(FLAGS_token_file);
    if (!token.ok()) return token.status().WithContext("--token_file");
    c.target.token = std::move(*token);
  }
  StatusOr<Workload> workload = FindWorkload(FLAGS_workload);
  if (!workload.ok()) return workload.status().WithContext("--workload");
  c.workload = *workload;
  if (FLAGS_key_distribution.empty()) {
    c.distribution = c.workload.default_distribution.value_or(KeyDistribution::kUniform);
  } else {
    StatusOr<KeyDistribution> distribution = ParseKeyDistribution(FLAGS_key_distribution);
    if (!distribution.ok()) return distribution.status().WithContext("--key_distribution");
    c.distribution = *distribution;
  }
  if (FLAGS_records < 1 || FLAGS_records > 1'000'000'000'000ULL) {
    return InvalidArgument("--records must be in 1..10^12");
  }
  c.records = FLAGS_records;
  c.load = FLAGS_load;
  c.warm_reads = FLAGS_warm_reads;
  if (FLAGS_rkv_client != "shared" && FLAGS_rkv_client != "per_thread") {
    return InvalidArgument("--rkv_client must be shared or per_thread, not '" + FLAGS_rkv_client + "'");
  }
  c.shared_rkv_client = c.target.kind == "rkv" && FLAGS_rkv_client == "shared";
  if (!(FLAGS_duration_s >= 0) || FLAGS_duration_s > 1e7) {
    return InvalidArgument("--duration_s must be in 0..10^7");
  }
  c.duration_s = FLAGS_duration_s;
  c.operations = FLAGS_operations;
  if (c.operations == 0 && c.duration_s == 0) {
    return InvalidArgument("--operations=0 needs --duration_s > 0 (the timed phase needs a cap)");
  }
  if (FLAGS_value_bytes < 1 || FLAGS_value_bytes > kMaxValueBytes) {
    return InvalidArgument("--value_bytes must be in 1..67108864");
  }
  c.value_bytes = FLAGS_value_bytes;
  if (FLAGS_threads < 1 || FLAGS_threads > kMaxThreads) {
    return InvalidArgument("--threads must be in 1..256");
  }
  c.threads = FLAGS_threads;
  if (FLAGS_batch < 1 || FLAGS_batch > kMaxBatch) return InvalidArgument("--batch must be in 1..64");
  if (FLAGS_batch > 1 && c.target.kind == "memcached") {
    return InvalidArgument(
        "--batch > 1 is not supported for --target=memcached: libmemcached has no pipelined SET with a reply "
        "per key, and timing single calls in a loop would not be a batch");
  }
  c.batch = FLAGS_batch;
  c.target.batch = FLAGS_batch;
  if (c.batch > 1 && (c.workload.Has(OpType::kInsert) || c.workload.Has(OpType::kReadModifyWrite))) {
    return InvalidArgument("--batch > 1 runs reads and updates only: workloads get, put, a, b and c");
  }
  c.seed = FLAGS_seed;
  if (!(FLAGS_target_ops_per_s >= 0) || FLAGS_target_ops_per_s > kMaxTargetOpsPerS) {
    return InvalidArgument("--target_ops_per_s must be in 0..10^9");
  }
  c.target_ops_per_s = FLAGS_target_ops_per_s;
  if (c.target_ops_per_s > 0 && c.batch > 1) {
    return InvalidArgument("--target_ops_per_s (open loop) runs one operation at a time: use --batch=1");
  }
  c.progress = FLAGS_progress;
  StatusOr<OutputFormat> format = ParseOutputFormat(FLAGS_output_format);
  if (!format.ok()) return format.status().WithContext("--output_format");
  c.format = *format;
  return c;
}


// Share `total` of thread `t` out of `threads`.
uint64_t ShareOf(uint64_t total, int threads, int t) {
  const uint64_t n = static_cast<uint64_t>(threads);
  return total / n + (static_cast<uint64_t>(t) < total % n ? 1 : 0);
}

// Load phase of thread t: PUT records t, t + threads, t + 2*threads, ...
void LoadRecords(const Config& c, int t, KvTarget& target, const std::string& pool, Errors& errors) {
  for (uint64_t i = static_cast<uint64_t>(t); i < c.records; i += static_cast<uint64_t>(c.threads)) {
    Status s = target.Put(RecordKey(i), ValueFor(pool, i, c.value_bytes));
    if (!s.ok()) {
      ++errors.load_failed;
      errors.Sample("load PUT " + RecordKey(i) + ": " + s.ToString());
    }
  }
}

// Untimed GETs of thread t's share of the records (--warm_reads).
void WarmRecords(const Config& c, int t, KvTarget& target, Errors& errors) {
  for (uint64_t i = static_cast<uint64_t>(t); i < c.records; i += static_cast<uint64_t>(c.threads)) {
    StatusOr<size_t> got = target.Get(RecordKey(i));
    if (!got.ok()) {
      ++errors.load_failed;
      errors.Sample("warm-up GET " + RecordKey(i) + ": " + got.status().ToString());
    }
  }
}

// Appends the run's result to --output in the configured format; the text
// and csv headers only when the file is empty.
Status AppendOutput(const std::string& path, OutputFormat format, const RunParameters& params,
                    const RunFigures& figures) {
  bool empty = true;
  {
    std::ifstream existing(path, std::ios::binary | std::ios::ate);
    if (existing) empty = existing.tellg() <= 0;
  }
  std::ofstream out(path, std::ios::app);
  if (!out) return InvalidArgument("cannot open --output file '" + path + "'");
  switch (format) {
    case OutputFormat::kText:
      if (empty) out << OutputLineHeader() << "\n";
      out << OutputLine(params, figures) << "\n";
      break;
    case OutputFormat::kJson:
      out << JsonReport(params, figures) << "\n";
      break;
    case OutputFormat::kCsv:
      if (empty) out << CsvHeader();
      out << CsvRows(params, figures);
      break;
  }
  out.flush();
  if (!out) return Internal("writing --output file '" + path + "' failed");
  return Status::Ok();
}

int Run(const Config& c) {
  // The human-readable lines: on stdout for text, on stderr when stdout
  // carries json or csv.
  std::FILE* info = c.format == OutputFormat::kText ? stdout : stderr;
  std::fprintf(info,
               "rkv-ycsb: target %s at %s, workload %s (%s), %s keys, %" PRIu64 " records of %" PRIu64
               " bytes, %d thread(s), batches of %d\n",
               c.target.kind.c_str(),
               c.target.coordinator.empty() ? c.target.server.c_str()
                                            : ("coordinator " + c.target.coordinator).c_str(),
               std::string(c.workload.name).c_str(), std::string(c.workload.description).c_str(),
               std::string(KeyDistributionName(c.distribution)).c_str(), c.records, c.value_bytes, c.threads,
               c.batch);
  if (c.target_ops_per_s > 0) {
    std::fprintf(info,
                 "  open loop: %.0f ops/s in all (%.1f per thread), latency from each operation's scheduled "
                 "time\n",
                 c.target_ops_per_s, c.target_ops_per_s / c.threads);
  }
  std::fflush(info);

  // Connect every thread's target (connects run in parallel: rkv's may take
  // a while), after the Client they share if they share one.
  TargetOptions target_options = c.target;
  if (c.shared_rkv_client) {
    if (Status s = ShareRkvClient(&target_options, c.threads); !s.ok()) {
      std::fprintf(stderr, "rkv-ycsb: ERROR: %s\n", s.ToString().c_str());
      return 1;
    }
  }
  std::vector<std::unique_ptr<KvTarget>> targets(static_cast<size_t>(c.threads));
  std::vector<Status> connect_status(static_cast<size_t>(c.threads));
  {
    std::vector<std::thread> threads;
    for (int t = 0; t < c.threads; ++t) {
      threads.emplace_back([&target_options, &targets, &connect_status, t] {
        StatusOr<std::unique_ptr<KvTarget>> target = OpenTarget(target_options);
        if (target.ok()) {
          targets[static_cast<size_t>(t)] = std::move(*target);
        } else {
          connect_status[static_cast<size_t>(t)] = target.status();
        }
      });
    }
    for (std::thread& thread : threads) thread.join();
  }
  for (const Status& s : connect_status) {
    if (!s.ok()) {
      std::fprintf(stderr, "rkv-ycsb: ERROR: %s\n", s.ToString().c_str());
      return 1;
    }
  }
  if (std::string d = targets[0]->Description(); !d.empty()) std::fprintf(info, "  %s\n", d.c_str());
  if (c.batch > 1 && !targets[0]->SupportsBatch()) {
    std::fprintf(stderr, "rkv-ycsb: ERROR: --target=%s has no batched path: use --batch=1\n", c.target.kind.c_str());
    return 1;
  }

  std::vector<std::string> pools;
  for (int t = 0; t < c.threads; ++t) {
    std::mt19937_64 rng(c.seed * 1000003ULL + static_cast<uint64_t>(t));
    pools.push_back(RandomPool(c.value_bytes + kValueSlack, rng));
  }

  // Load phase.
  std::vector<ThreadResult> results(static_cast<size_t>(c.threads));
  if (c.load) {
    const Clock::time_point load_start = Clock::now();
    std::vector<std::thread> threads;
    for (int t = 0; t < c.threads; ++t) {
      threads.emplace_back([&, t] {
        const size_t i = static_cast<size_t>(t);
        LoadRecords(c, t, *targets[i], pools[i], results[i].errors);
      });
    }
    for (std::thread& thread : threads) thread.join();
    const double load_s = std::chrono::duration<double>(Clock::now() - load_start).count();
    uint64_t load_errors = 0;
    for (const ThreadResult& r : results) load_errors += r.errors.load_failed;
    std::fprintf(info, "  load: %" PRIu64 " PUTs in %.2f s (%.0f ops/s), %" PRIu64 " failed\n", c.records,
                 load_s, static_cast<double>(c.records) / std::max(load_s, 1e-9), load_errors);
  } else {
    std::fprintf(info, "  load: skipped (--noload: the %" PRIu64 " records of an earlier run)\n", c.records);
  }
  if (c.warm_reads) {
    const Clock::time_point warm_start = Clock::now();
    std::vector<std::thread> threads;
    for (int t = 0; t < c.threads; ++t) {
      threads.emplace_back([&, t] {
        const size_t i = static_cast<size_t>(t);
        WarmRecords(c, t, *targets[i], results[i].errors);
      });
    }
    for (std::thread& thread : threads) thread.join();
    std::fprintf(info, "  warm-up: %" PRIu64 " GETs in %.2f s, untimed\n", c.records,
                 std::chrono::duration<double>(Clock::now() - warm_start).count());
  }
  std::fflush(info);

  // Timed phase: every thread is created and waiting before the clock
  // starts.
  InsertCounter inserts(c.records);
  const KeyChooser chooser(c.distribution, c.records, &inserts);
  SteadyRunClock clock;
  std::vector<LiveCounters> live(static_cast<size_t>(c.threads));
  ProgressReporter progress(live, stderr);
  std::latch ready(c.threads);
  std::latch go(1);
  Clock::time_point run_start;
  {
    std::vector<std::thread> threads;
    for (int t = 0; t < c.threads; ++t) {
      threads.emplace_back([&, t] {
        const size_t i = static_cast<size_t>(t);
        ready.count_down();
        go.wait();
        // The latch's release/acquire makes run_start visible here.
        RunSettings s;
        s.workload = c.workload;
        s.value_bytes = c.value_bytes;
        s.budget = c.operations == 0 ? UINT64_MAX : ShareOf(c.operations, c.threads, t);
        s.batch = c.batch;
        s.start = run_start;
        if (c.duration_s > 0) {
          s.deadline = run_start + std::chrono::duration_cast<Clock::duration>(
                                       std::chrono::duration<double>(c.duration_s));
        }
        s.ops_per_s = c.target_ops_per_s / c.threads;
        s.phase = static_cast<double>(t) / c.threads;
        s.seed = c.seed + static_cast<uint64_t>(t) * 0x9e3779b97f4a7c15ULL + 1;
        s.value_offset = static_cast<uint64_t>(t);
        RunThread(s, *targets[i], pools[i], chooser, &inserts, clock, &live[i], results[i]);
      });
    }
    ready.wait();
    run_start = Clock::now();
    if (c.progress) progress.Start();
    go.count_down();
    for (std::thread& thread : threads) thread.join();
    progress.Stop();
  }
  RunFigures figures;
  figures.run_s = std::chrono::duration<double>(Clock::now() - run_start).count();
  uint64_t cache_hits = 0;
  uint64_t cache_fallbacks = 0;
  uint64_t cache_misses = 0;
  if (c.shared_rkv_client) {
    targets[0]->AddCacheCounts(&cache_hits, &cache_fallbacks, &cache_misses);  // the one Client's
  } else {
    for (const auto& t : targets) t->AddCacheCounts(&cache_hits, &cache_fallbacks, &cache_misses);
  }
  targets.clear();

  for (const ThreadResult& r : results) figures.result.Merge(r);
  const ThreadResult& all = figures.result;
  RunParameters params;
  params.label = FLAGS_label.empty() ? c.target.kind : FLAGS_label;
  params.target = c.target.kind;
  params.server = c.target.coordinator.empty() ? c.target.server : c.target.coordinator;
  params.workload = c.workload;
  params.distribution = c.distribution;
  params.records = c.records;
  params.operations = c.operations;
  params.duration_s = c.duration_s;
  params.value_bytes = c.value_bytes;
  params.threads = c.threads;
  params.batch = c.batch;
  params.target_ops_per_s = c.target_ops_per_s;
  params.seed = c.seed;

  const double ops_per_s = figures.OpsPerSecond();
  std::fprintf(info, "  run:  %" PRIu64 " ops in %.2f s = %.0f ops/s\n", all.ops, figures.run_s, ops_per_s);
  if (c.batch > 1) {
    std::fprintf(info, "  per operation (the latency of the MultiGet or MultiPut call that carried it):\n");
  }
  for (OpType op : ReportedOps(params, all)) {
    if (op == OpType::kBatch) continue;
    if (std::string line = TextLatencyLine(op, all.Of(op)); !line.empty()) std::fprintf(info, "%s\n", line.c_str());
  }
  if (c.batch > 1) {
    std::fprintf(info, "  per batch of up to %d operations (%" PRIu64 " batches, %.0f keys/s):\n", c.batch,
                 all.Of(OpType::kBatch).count(), ops_per_s);
    const std::string line = TextLatencyLine(OpType::kBatch, all.Of(OpType::kBatch));
    if (!line.empty()) std::fprintf(info, "%s\n", line.c_str());
  }
  if (std::string line = TextConflictsLine(params, all); !line.empty()) std::fprintf(info, "%s\n", line.c_str());
  if (all.unsent > 0) {
    std::fprintf(info,
                 "  behind schedule: %" PRIu64 " operations due before the end were never sent (the store "
                 "did not keep up with %.0f ops/s); their latency is not in the figures\n",
                 all.unsent, c.target_ops_per_s);
  }
  if (const uint64_t lookups = cache_hits + cache_fallbacks + cache_misses; lookups > 0) {
    // Load and run together: the client lives through both.
    std::fprintf(info,
                 "  location cache: hit rate %.1f%% (%" PRIu64 " hits, %" PRIu64 " fallbacks, %" PRIu64
                 " misses)\n",
                 100.0 * static_cast<double>(cache_hits) / static_cast<double>(lookups), cache_hits,
                 cache_fallbacks, cache_misses);
  }
  const Errors& errors = all.errors;
  const uint64_t total_errors = errors.Total();
  if (total_errors == 0) {
    std::fprintf(info, "  errors: none\n");
  } else {
    std::fprintf(info, "  errors: %" PRIu64 " *** THIS RUN HAD ERRORS: its figures are not valid ***\n",
                 total_errors);
  }
  std::fflush(info);
  if (c.format == OutputFormat::kJson) {
    std::printf("%s\n", JsonReport(params, figures).c_str());
  } else if (c.format == OutputFormat::kCsv) {
    std::printf("%s%s", CsvHeader().c_str(), CsvRows(params, figures).c_str());
  }
  std::fflush(stdout);

  int rc = 0;
  if (total_errors != 0) {
    std::fprintf(stderr,
                 "rkv-ycsb: *** %" PRIu64 " ERRORS *** load PUT failed %" PRIu64 ", GET failed %" PRIu64
                 ", GET not found %" PRIu64 ", GET wrong length %" PRIu64 ", PUT failed %" PRIu64
                 ", insert failed %" PRIu64 "\n",
                 total_errors, errors.load_failed, errors.get_failed, errors.get_not_found,
                 errors.get_wrong_length, errors.put_failed, errors.insert_failed);
    for (const std::string& s : errors.samples) std::fprintf(stderr, "rkv-ycsb:   e.g. %s\n", s.c_str());
    rc = 1;
  }

  if (!FLAGS_output.empty()) {
    if (Status s = AppendOutput(FLAGS_output, c.format, params, figures); !s.ok()) {
      std::fprintf(stderr, "rkv-ycsb: ERROR: %s\n", s.ToString().c_str());
      rc = 1;
    }
  }
  return rc;
}

}  // namespace
}  // namespace rkv::bench

int main(int argc, char** argv) {
  gflags::SetUsageMessage(
      "rkv-ycsb --target=rkv|memcached|redis --server=HOST:PORT [--token_file=FILE] "
      "[--workload=get|put|a|b|c|d|f] [--key_distribution=uniform|zipfian|latest] [--value_bytes=N] "
      "[--threads=N] [--batch=N] [--target_ops_per_s=N] [--output_format=text|json|csv] ...");
  // librkv logs through glog: warnings and errors to stderr, its
  // per-connection INFO lines only with --minloglevel=0.
  FLAGS_logtostderr = true;
  FLAGS_minloglevel = google::GLOG_WARNING;
  rkv::ParseProgramFlags(&argc, &argv, __FILE__);
  google::InitGoogleLogging(argv[0]);
  if (argc > 1) {
    std::fprintf(stderr, "rkv-ycsb: unexpected argument '%s'\n", argv[1]);
    return 2;
  }
  if (!FLAGS_label.empty() && FLAGS_label.find_first_of(" \t\n") != std::string::npos) {
    std::fprintf(stderr, "rkv-ycsb: --label must not contain whitespace\n");
    return 2;
  }
  rkv::StatusOr<rkv::bench::Config> config = rkv::bench::ConfigFromFlags();
  if (!config.ok()) {
    std::fprintf(stderr, "rkv-ycsb: %s\n", config.status().message().c_str());
    return 2;
  }
  return rkv::bench::Run(*config);
}
