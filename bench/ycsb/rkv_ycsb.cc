// rkv-ycsb: a YCSB-style load generator for rkv and, with the same code
// path, for memcached and Redis as baselines.
//
// A run has two phases:
//   load  every record ("user" + 12 digits, --value_bytes bytes) is PUT
//         once, split over the threads; not timed.
//   run   --operations operations (or --duration_s seconds, whichever ends
//         first), each a GET or a PUT of a record picked by
//         --key_distribution, in the mix --workload names (YCSB's core
//         workloads: a = 50% read / 50% update, b = 95/5, c = 100% read;
//         plus get = 100% GET and put = 100% PUT).
// Every thread has its own connection (its own rkv::Client with one
// connection, memcached_st or redisContext). Every operation's latency goes
// into a log-linear histogram (bench/ycsb/histogram.h). Every error is
// counted: failed calls, and GETs whose value is missing or not
// --value_bytes long. A run with any error says so on stderr and exits 1.
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
// Output: a summary on stdout and, with --output, one line appended per run:
//   target workload value_bytes threads ops ops_per_s get_p50_us get_p99_us
//   put_p50_us put_p99_us errors batch batch_p50_us batch_p99_us
// ("-" where a run had no operation of that kind, and for the batch
// percentiles of --batch=1; target is --label when set). A header line
// starting with '#' is written when the file is empty.
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
#include <random>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "bench/ycsb/histogram.h"
#include "common/clock.h"
#include "bench/ycsb/key_chooser.h"
#include "bench/ycsb/kv_target.h"
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
DEFINE_uint64(location_cache_bytes, uint64_t{32} << 20,
              "rkv: bytes of each client's location cache, 0 = off (default 33554432)");
DEFINE_int32(timeout_ms, 5000, "per-call deadline and connect timeout in milliseconds (default 5000)");
DEFINE_string(workload, "get",
              "get (100% GET) | put (100% PUT) | a (50% GET, 50% PUT) | b (95/5) | c (100% GET) "
              "(default get)");
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
DEFINE_string(key_distribution, "uniform",
              "uniform | zipfian (YCSB's scrambled zipfian, constant 0.99; YCSB's core workloads use "
              "it) (default uniform)");
DEFINE_uint64(seed, 1, "random seed; thread i uses seed + i (default 1)");
DEFINE_int32(batch, 1,
             "operations per batch, 1..64: each thread issues its GETs as one MultiGet and its PUTs as one "
             "MultiPut per batch (rkv; Redis pipelines them; memcached: 1 only) (default 1)");
DEFINE_string(output, "", "file to append one result line to (default: none)");
DEFINE_string(label, "", "first column of the --output line (default: --target)");

namespace rkv::bench {
namespace {

using Clock = std::chrono::steady_clock;

constexpr uint64_t kMaxValueBytes = uint64_t{64} << 20;
constexpr int kMaxThreads = 256;
constexpr int kMaxBatch = 64;
constexpr size_t kMaxTokenBytes = 4096;
// Values are slices of a per-thread random pool at a rotating offset, so
// consecutive PUTs do not store identical bytes.
constexpr size_t kValueSlack = 64;
// Error messages kept per thread to show what went wrong.
constexpr size_t kErrorSamples = 3;

struct Workload {
  std::string_view name;
  double read_fraction;
  std::string_view description;
};

constexpr Workload kWorkloads[] = {
    {"get", 1.0, "100% GET"},
    {"put", 0.0, "100% PUT"},
    {"a", 0.5, "YCSB A: 50% GET, 50% PUT"},
    {"b", 0.95, "YCSB B: 95% GET, 5% PUT"},
    {"c", 1.0, "YCSB C: 100% GET"},
};

struct Config {
  TargetOptions target;
  Workload workload;
  KeyDistribution distribution = KeyDistribution::kUniform;
  uint64_t records = 0;
  bool load = true;
  bool warm_reads = false;
  uint64_t operations = 0;  // 0: no cap
  double duration_s = 0;    // 0: no cap
  uint64_t value_bytes = 0;
  int threads = 1;
  int batch = 1;
  uint64_t seed = 1;
};

// Every error of one thread, by kind.
struct Errors {
  uint64_t load_failed = 0;
  uint64_t get_failed = 0;
  uint64_t get_not_found = 0;
  uint64_t get_wrong_length = 0;
  uint64_t put_failed = 0;
  std::vector<std::string> samples;

  uint64_t Total() const {
    return load_failed + get_failed + get_not_found + get_wrong_length + put_failed;
  }
  void Sample(std::string message) {
    if (samples.size() < kErrorSamples) samples.push_back(std::move(message));
  }
  void Merge(const Errors& other) {
    load_failed += other.load_failed;
    get_failed += other.get_failed;
    get_not_found += other.get_not_found;
    get_wrong_length += other.get_wrong_length;
    put_failed += other.put_failed;
    for (const std::string& s : other.samples) Sample(s);
  }
};

// What one thread did in the timed phase. Histograms in nanoseconds.
struct ThreadResult {
  Histogram get_ns;    // per GET (with --batch: its MultiGet's time)
  Histogram put_ns;    // per PUT (with --batch: its MultiPut's time)
  Histogram batch_ns;  // per batch (--batch > 1 only)
  uint64_t ops = 0;
  Errors errors;
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
  c.target.transport = FLAGS_transport;
  if (c.target.kind == "rkv") {
    if (FLAGS_token_file.empty()) return InvalidArgument("--token_file is required with --target=rkv");
    StatusOr<std::string> token = ReadToken(FLAGS_token_file);
    if (!token.ok()) return token.status().WithContext("--token_file");
    c.target.token = std::move(*token);
  }
  bool found = false;
  for (const Workload& w : kWorkloads) {
    if (w.name == FLAGS_workload) {
      c.workload = w;
      found = true;
    }
  }
  if (!found) return InvalidArgument("--workload must be get, put, a, b or c");
  StatusOr<KeyDistribution> distribution = ParseKeyDistribution(FLAGS_key_distribution);
  if (!distribution.ok()) return distribution.status().WithContext("--key_distribution");
  c.distribution = *distribution;
  if (FLAGS_records < 1 || FLAGS_records > 1'000'000'000'000ULL) {
    return InvalidArgument("--records must be in 1..10^12");
  }
  c.records = FLAGS_records;
  c.load = FLAGS_load;
  c.warm_reads = FLAGS_warm_reads;
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
  c.seed = FLAGS_seed;
  return c;
}

std::string RandomPool(size_t bytes, std::mt19937_64& rng) {
  static constexpr std::string_view kAlphabet =
      "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  std::string pool(bytes, '\0');
  std::uniform_int_distribution<size_t> pick(0, kAlphabet.size() - 1);
  for (char& ch : pool) ch = kAlphabet[pick(rng)];
  return pool;
}

std::string_view ValueFor(const std::string& pool, uint64_t n, uint64_t value_bytes) {
  return std::string_view(pool).substr(n % kValueSlack, value_bytes);
}

uint64_t NanosSince(Clock::time_point start, Clock::time_point end) {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(end - start).count());
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

// Timed phase of thread t.
void RunOperations(const Config& c, int t, KvTarget& target, const std::string& pool,
                   const KeyChooser& chooser, Clock::time_point deadline, bool has_deadline,
                   ThreadResult& result) {
  std::mt19937_64 rng(c.seed + static_cast<uint64_t>(t) * 0x9e3779b97f4a7c15ULL + 1);
  std::uniform_real_distribution<double> coin(0.0, 1.0);
  const uint64_t budget = c.operations == 0 ? UINT64_MAX : ShareOf(c.operations, c.threads, t);
  // Keys and GET-or-PUT draws are made kDrawBatch operations ahead, so the
  // operations run back to back, as perftest posts its work requests: no
  // key formatting between two of them. (Under emulation the code run
  // between two operations slows the next one measurably.) The draws are
  // the same, in the same order, as one operation at a time.
  constexpr uint64_t kDrawBatch = 256;
  std::vector<std::string> keys(kDrawBatch);
  std::vector<bool> gets(kDrawBatch);
  for (uint64_t n = 0; n < budget; ++n) {
    if (n % kDrawBatch == 0) {
      const uint64_t ahead = std::min(kDrawBatch, budget - n);
      for (uint64_t k = 0; k < ahead; ++k) {
        keys[k] = RecordKey(chooser.Next(rng));
        gets[k] = c.workload.read_fraction >= 1.0 ||
                  (c.workload.read_fraction > 0.0 && coin(rng) < c.workload.read_fraction);
      }
    }
    const std::string& key = keys[n % kDrawBatch];
    const bool is_get = gets[n % kDrawBatch];
    Clock::time_point end;
    if (is_get) {
      const Clock::time_point start = SteadyNow();
      StatusOr<size_t> length = target.Get(key);
      end = SteadyNow();
      if (!length.ok()) {
        if (length.status().code() == StatusCode::kNotFound) {
          ++result.errors.get_not_found;
        } else {
          ++result.errors.get_failed;
        }
        result.errors.Sample("GET " + key + ": " + length.status().ToString());
      } else {
        result.get_ns.Record(NanosSince(start, end));
        if (*length != c.value_bytes) {
          ++result.errors.get_wrong_length;
          result.errors.Sample("GET " + key + ": value of " + std::to_string(*length) +
                               " bytes, want " + std::to_string(c.value_bytes));
        }
      }
    } else {
      const std::string_view value = ValueFor(pool, n + static_cast<uint64_t>(t), c.value_bytes);
      const Clock::time_point start = SteadyNow();
      Status s = target.Put(key, value);
      end = SteadyNow();
      if (!s.ok()) {
        ++result.errors.put_failed;
        result.errors.Sample("PUT " + key + ": " + s.ToString());
      } else {
        result.put_ns.Record(NanosSince(start, end));
      }
    }
    ++result.ops;
    if (has_deadline && end >= deadline) break;
  }
}

// Timed phase of thread t with --batch > 1: the same draws as
// RunOperations, c.batch at a time.
void RunBatches(const Config& c, int t, KvTarget& target, const std::string& pool, const KeyChooser& chooser,
                Clock::time_point deadline, bool has_deadline, ThreadResult& result) {
  std::mt19937_64 rng(c.seed + static_cast<uint64_t>(t) * 0x9e3779b97f4a7c15ULL + 1);
  std::uniform_real_distribution<double> coin(0.0, 1.0);
  const uint64_t budget = c.operations == 0 ? UINT64_MAX : ShareOf(c.operations, c.threads, t);
  std::vector<std::string> get_keys;
  std::vector<std::string> put_keys;
  std::vector<std::string_view> put_values;
  for (uint64_t n = 0; n < budget;) {
    const uint64_t size = std::min<uint64_t>(static_cast<uint64_t>(c.batch), budget - n);
    get_keys.clear();
    put_keys.clear();
    put_values.clear();
    for (uint64_t k = 0; k < size; ++k) {
      std::string key = RecordKey(chooser.Next(rng));
      const bool is_get = c.workload.read_fraction >= 1.0 ||
                          (c.workload.read_fraction > 0.0 && coin(rng) < c.workload.read_fraction);
      if (is_get) {
        get_keys.push_back(std::move(key));
      } else {
        put_keys.push_back(std::move(key));
        put_values.push_back(ValueFor(pool, n + k + static_cast<uint64_t>(t), c.value_bytes));
      }
    }
    const Clock::time_point start = SteadyNow();
    Clock::time_point end = start;
    if (!get_keys.empty()) {
      const std::vector<StatusOr<size_t>> lengths = target.MultiGet(get_keys);
      end = SteadyNow();
      for (size_t i = 0; i < get_keys.size(); ++i) {
        const StatusOr<size_t>& length = lengths[i];
        if (!length.ok()) {
          if (length.status().code() == StatusCode::kNotFound) {
            ++result.errors.get_not_found;
          } else {
            ++result.errors.get_failed;
          }
          result.errors.Sample("GET " + get_keys[i] + ": " + length.status().ToString());
          continue;
        }
        result.get_ns.Record(NanosSince(start, end));
        if (*length != c.value_bytes) {
          ++result.errors.get_wrong_length;
          result.errors.Sample("GET " + get_keys[i] + ": value of " + std::to_string(*length) + " bytes, want " +
                               std::to_string(c.value_bytes));
        }
      }
    }
    if (!put_keys.empty()) {
      const Clock::time_point put_start = end;
      const std::vector<Status> put = target.MultiPut(put_keys, put_values);
      end = SteadyNow();
      for (size_t i = 0; i < put_keys.size(); ++i) {
        if (!put[i].ok()) {
          ++result.errors.put_failed;
          result.errors.Sample("PUT " + put_keys[i] + ": " + put[i].ToString());
        } else {
          result.put_ns.Record(NanosSince(put_start, end));
        }
      }
    }
    result.batch_ns.Record(NanosSince(start, end));
    result.ops += size;
    n += size;
    if (has_deadline && end >= deadline) break;
  }
}

std::string Micros(uint64_t nanos) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f", static_cast<double>(nanos) / 1000.0);
  return buf;
}

// "p50_us p99_us" for the --output line, or "- -".
std::string OutputPercentiles(const Histogram& h) {
  if (h.count() == 0) return "- -";
  return Micros(h.Percentile(50)) + " " + Micros(h.Percentile(99));
}

void PrintLatency(const char* op, const Histogram& h) {
  if (h.count() == 0) return;
  std::printf("  %-5s %10" PRIu64 " ok   mean %8.1f  p50 %8s  p90 %8s  p99 %8s  p99.9 %8s  max %8s  (us)\n",
              op, h.count(), h.Mean() / 1000.0, Micros(h.Percentile(50)).c_str(),
              Micros(h.Percentile(90)).c_str(), Micros(h.Percentile(99)).c_str(),
              Micros(h.Percentile(99.9)).c_str(), Micros(h.max()).c_str());
}

Status AppendOutputLine(const std::string& path, const std::string& line) {
  bool empty = true;
  {
    std::ifstream existing(path, std::ios::binary | std::ios::ate);
    if (existing) empty = existing.tellg() <= 0;
  }
  std::ofstream out(path, std::ios::app);
  if (!out) return InvalidArgument("cannot open --output file '" + path + "'");
  if (empty) {
    out << "# target workload value_bytes threads ops ops_per_s get_p50_us get_p99_us "
           "put_p50_us put_p99_us errors batch batch_p50_us batch_p99_us\n";
  }
  out << line << "\n";
  out.flush();
  if (!out) return Internal("writing --output file '" + path + "' failed");
  return Status::Ok();
}

int Run(const Config& c) {
  std::printf("rkv-ycsb: target %s at %s, workload %s (%s), %s keys, %" PRIu64
              " records of %" PRIu64 " bytes, %d thread(s), batches of %d\n",
              c.target.kind.c_str(),
              c.target.coordinator.empty() ? c.target.server.c_str()
                                           : ("coordinator " + c.target.coordinator).c_str(),
              std::string(c.workload.name).c_str(),
              std::string(c.workload.description).c_str(),
              c.distribution == KeyDistribution::kZipfian ? "zipfian" : "uniform", c.records,
              c.value_bytes, c.threads, c.batch);
  std::fflush(stdout);

  // Connect every thread's target (connects run in parallel: rkv's may take
  // a while).
  std::vector<std::unique_ptr<KvTarget>> targets(static_cast<size_t>(c.threads));
  std::vector<Status> connect_status(static_cast<size_t>(c.threads));
  {
    std::vector<std::thread> threads;
    for (int t = 0; t < c.threads; ++t) {
      threads.emplace_back([&c, &targets, &connect_status, t] {
        StatusOr<std::unique_ptr<KvTarget>> target = OpenTarget(c.target);
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
  if (std::string d = targets[0]->Description(); !d.empty()) std::printf("  %s\n", d.c_str());
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
    std::printf("  load: %" PRIu64 " PUTs in %.2f s (%.0f ops/s), %" PRIu64 " failed\n", c.records,
                load_s, static_cast<double>(c.records) / std::max(load_s, 1e-9), load_errors);
  } else {
    std::printf("  load: skipped (--noload: the %" PRIu64 " records of an earlier run)\n", c.records);
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
    std::printf("  warm-up: %" PRIu64 " GETs in %.2f s, untimed\n", c.records,
                std::chrono::duration<double>(Clock::now() - warm_start).count());
  }
  std::fflush(stdout);

  // Timed phase: every thread is created and waiting before the clock
  // starts.
  const KeyChooser chooser(c.distribution, c.records);
  const bool has_deadline = c.duration_s > 0;
  std::latch ready(c.threads);
  std::latch go(1);
  Clock::time_point run_start;
  Clock::time_point deadline;
  {
    std::vector<std::thread> threads;
    for (int t = 0; t < c.threads; ++t) {
      threads.emplace_back([&, t] {
        const size_t i = static_cast<size_t>(t);
        ready.count_down();
        go.wait();
        if (c.batch > 1) {
          RunBatches(c, t, *targets[i], pools[i], chooser, deadline, has_deadline, results[i]);
        } else {
          RunOperations(c, t, *targets[i], pools[i], chooser, deadline, has_deadline, results[i]);
        }
      });
    }
    ready.wait();
    run_start = Clock::now();
    deadline = run_start + std::chrono::duration_cast<Clock::duration>(
                               std::chrono::duration<double>(c.duration_s));
    // The latch's release/acquire makes run_start and deadline visible to
    // the threads.
    go.count_down();
    for (std::thread& thread : threads) thread.join();
  }
  const double run_s = std::chrono::duration<double>(Clock::now() - run_start).count();
  uint64_t cache_hits = 0;
  uint64_t cache_fallbacks = 0;
  uint64_t cache_misses = 0;
  for (const auto& t : targets) t->AddCacheCounts(&cache_hits, &cache_fallbacks, &cache_misses);
  targets.clear();

  Histogram get_ns;
  Histogram put_ns;
  Histogram batch_ns;
  Errors errors;
  uint64_t ops = 0;
  for (const ThreadResult& r : results) {
    get_ns.Merge(r.get_ns);
    put_ns.Merge(r.put_ns);
    batch_ns.Merge(r.batch_ns);
    errors.Merge(r.errors);
    ops += r.ops;
  }
  const double ops_per_s = static_cast<double>(ops) / std::max(run_s, 1e-9);
  std::printf("  run:  %" PRIu64 " ops in %.2f s = %.0f ops/s\n", ops, run_s, ops_per_s);
  if (c.batch > 1) {
    std::printf("  per operation (the latency of the MultiGet or MultiPut call that carried it):\n");
  }
  PrintLatency("GET", get_ns);
  PrintLatency("PUT", put_ns);
  if (c.batch > 1) {
    std::printf("  per batch of up to %d operations (%" PRIu64 " batches, %.0f keys/s):\n", c.batch,
                batch_ns.count(), ops_per_s);
    PrintLatency("BATCH", batch_ns);
  }
  if (const uint64_t lookups = cache_hits + cache_fallbacks + cache_misses; lookups > 0) {
    // Load and run together: the client lives through both.
    std::printf("  location cache: hit rate %.1f%% (%" PRIu64 " hits, %" PRIu64 " fallbacks, %" PRIu64
                " misses)\n",
                100.0 * static_cast<double>(cache_hits) / static_cast<double>(lookups), cache_hits,
                cache_fallbacks, cache_misses);
  }
  const uint64_t total_errors = errors.Total();
  if (total_errors == 0) {
    std::printf("  errors: none\n");
  } else {
    std::printf("  errors: %" PRIu64 " *** THIS RUN HAD ERRORS: its figures are not valid ***\n", total_errors);
  }
  std::fflush(stdout);

  int rc = 0;
  if (total_errors != 0) {
    std::fprintf(stderr,
                 "rkv-ycsb: *** %" PRIu64 " ERRORS *** load PUT failed %" PRIu64 ", GET failed %" PRIu64
                 ", GET not found %" PRIu64 ", GET wrong length %" PRIu64 ", PUT failed %" PRIu64 "\n",
                 total_errors, errors.load_failed, errors.get_failed, errors.get_not_found,
                 errors.get_wrong_length, errors.put_failed);
    for (const std::string& s : errors.samples) std::fprintf(stderr, "rkv-ycsb:   e.g. %s\n", s.c_str());
    rc = 1;
  }

  if (!FLAGS_output.empty()) {
    char rate[32];
    std::snprintf(rate, sizeof(rate), "%.0f", ops_per_s);
    const std::string line = (FLAGS_label.empty() ? c.target.kind : FLAGS_label) + " " +
                             std::string(c.workload.name) + " " + std::to_string(c.value_bytes) + " " +
                             std::to_string(c.threads) + " " + std::to_string(ops) + " " + rate + " " +
                             OutputPercentiles(get_ns) + " " + OutputPercentiles(put_ns) + " " +
                             std::to_string(total_errors) + " " + std::to_string(c.batch) + " " +
                             (c.batch > 1 ? OutputPercentiles(batch_ns) : std::string("- -"));
    if (Status s = AppendOutputLine(FLAGS_output, line); !s.ok()) {
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
      "[--workload=get|put|a|b|c] [--value_bytes=N] [--threads=N] [--batch=N] ...");
  // librkv logs through glog: warnings and errors to stderr, its
  // per-connection INFO lines only with --minloglevel=0.
  FLAGS_logtostderr = true;
  FLAGS_minloglevel = google::GLOG_WARNING;
  gflags::ParseCommandLineFlags(&argc, &argv, true);
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
