// rkv-restart-bench: how fast a server rebuilds its table from RocksDB at
// start (design.md §6), with the server's own code (Store, Table, Heap,
// RebuildTable), without a transport.
//
// It fills a fresh store with --keys records (--key_bytes-byte keys in a
// pseudo-random order, --value_bytes-byte values) through Store::Put, closes
// it, then --runs times: opens the store, maps an index and heap sized as
// rkv-server sizes them (--max_keys, --memory), and times RebuildTable. The
// report (--out, default bench/results/restart-<UTC time>.txt) gives each
// run and the median: keys, seconds, keys/s; the machine; the command.
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gflags/gflags.h>
#include <glog/logging.h>

#include "common/hash.h"
#include "common/layout.h"
#include "common/program_help.h"
#include "server/table/heap.h"
#include "server/table/mapped_memory.h"
#include "server/table/rebuild.h"
#include "server/store/store.h"
#include "server/table/table.h"

DEFINE_uint64(keys, 1000000, "records in the store (default 1,000,000)");
DEFINE_uint32(key_bytes, 16, "bytes per key, at least 8 (default 16)");
DEFINE_uint32(value_bytes, 100, "bytes per value (default 100)");
DEFINE_uint32(runs, 5, "timed rebuilds (default 5)");
DEFINE_uint64(max_keys, 1ULL << 20, "table sizing, as rkv-server's --max_keys (default 1,048,576)");
DEFINE_uint64(memory, 256ULL << 20, "heap bytes, as rkv-server's --memory (default 256 MiB)");
DEFINE_string(dir, "", "where the store is created (default: a new directory under /tmp, removed at exit)");
DEFINE_bool(reuse, false, "time the store already in --dir (filled by an earlier run with the same key flags) instead of filling a new one");
DEFINE_string(out, "", "the report (default bench/results/restart-<UTC time>.txt)");

namespace rkv::server {
namespace {

std::string Key(uint64_t i) {
  // Keys in an order unrelated to i (RocksDB returns them sorted), unique
  // because the first 8 bytes are a bijection of i.
  std::string key(FLAGS_key_bytes, 'k');
  const uint64_t h = i * 0x9E3779B97F4A7C15ULL;
  for (int b = 0; b < 8; ++b) key[b] = static_cast<char>(h >> (56 - 8 * b));
  return key;
}

std::string Value(uint64_t i) {
  std::string v(FLAGS_value_bytes, '\0');
  for (size_t j = 0; j < v.size(); ++j) v[j] = static_cast<char>('a' + (i + j) % 26);
  return v;
}

Status Fill(const std::string& dir) {
  RKV_ASSIGN_OR_RETURN(std::unique_ptr<Store> store, Store::Open(dir, Durability::kNone));
  for (uint64_t i = 0; i < FLAGS_keys; ++i) {
    RKV_RETURN_IF_ERROR(store->Put(Key(i), Value(i), store->NextVersion()));
  }
  return Status::Ok();  // ~Store flushes
}

struct Run {
  uint64_t keys;
  double seconds;
};

StatusOr<Run> TimeRebuild(const std::string& dir) {
  RKV_ASSIGN_OR_RETURN(std::unique_ptr<Store> store, Store::Open(dir, Durability::kWal));
  RKV_ASSIGN_OR_RETURN(const uint32_t log2, Table::BucketCountLog2ForKeys(FLAGS_max_keys));
  const uint64_t index_bytes = layout::IndexBytes(uint64_t{1} << log2);
  const uint64_t heap_bytes = FLAGS_memory / layout::kBlockAlign * layout::kBlockAlign;
  RKV_ASSIGN_OR_RETURN(MappedMemory index, MappedMemory::Allocate(index_bytes));
  RKV_ASSIGN_OR_RETURN(MappedMemory heap_memory, MappedMemory::Allocate(heap_bytes));
  Heap heap(heap_bytes, std::chrono::milliseconds(100));
  Table table(index.span(), heap_memory.span(), &heap);
  RKV_RETURN_IF_ERROR(table.Init(log2, store->epoch(), 0x5EED));
  const auto start = std::chrono::steady_clock::now();
  RKV_ASSIGN_OR_RETURN(const uint64_t keys,
                       RebuildTable(*store, table, RebuildLimits{FLAGS_key_bytes, FLAGS_value_bytes}));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (keys != FLAGS_keys) return Internal("rebuilt " + std::to_string(keys) + " keys, expected " +
                                          std::to_string(FLAGS_keys));
  // Spot-check the result: every 1000th key is found with its value.
  for (uint64_t i = 0; i < FLAGS_keys; i += 1000) {
    const std::optional<Table::Entry> e = table.Lookup(Key(i));
    if (!e || table.RecordAt(e->slot).value != Value(i)) {
      return Internal("key " + std::to_string(i) + " is missing or wrong after the rebuild");
    }
  }
  return Run{keys, seconds};
}

std::string Machine() {
  std::ostringstream out;
  utsname u{};
  if (uname(&u) == 0) out << u.nodename << ", Linux " << u.release << " " << u.machine;
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line);) {
    if (line.rfind("model name", 0) == 0) {
      out << ", " << line.substr(line.find(':') + 2);
      break;
    }
  }
  out << ", " << std::thread::hardware_concurrency() << " CPUs";
  return out.str();
}

std::string UtcNow(const char* format) {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[64];
  std::strftime(buf, sizeof(buf), format, &tm);
  return buf;
}

int Main(const std::string& command) {
  if (FLAGS_key_bytes < 8 || FLAGS_key_bytes > 1024 || FLAGS_keys == 0 || FLAGS_runs == 0) {
    std::cerr << "need --key_bytes in 8..1024, --keys > 0, --runs > 0\n";
    return 2;
  }
  const std::string started = UtcNow("%Y-%m-%dT%H%MZ");
  std::string dir = FLAGS_dir;
  const bool own_dir = dir.empty();
  if (own_dir) dir = "/tmp/rkv-restart-bench-" + std::to_string(getpid());
  if (FLAGS_reuse && own_dir) {
    std::cerr << "--reuse needs --dir\n";
    return 2;
  }
  const auto fill_start = std::chrono::steady_clock::now();
  if (!FLAGS_reuse) {
    std::filesystem::remove_all(dir);
    if (Status s = Fill(dir); !s.ok()) {
      std::cerr << "filling the store: " << s << "\n";
      return 1;
    }
  }
  const double fill_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - fill_start).count();

  std::vector<Run> runs;
  for (uint32_t r = 0; r < FLAGS_runs; ++r) {
    StatusOr<Run> run = TimeRebuild(dir);
    if (!run.ok()) {
      std::cerr << "rebuild " << r << ": " << run.status() << "\n";
      return 1;
    }
    std::cerr << "run " << r << ": " << run->keys << " keys in " << run->seconds << " s\n";
    runs.push_back(*run);
  }
  if (own_dir) std::filesystem::remove_all(dir);

  std::vector<double> seconds;
  for (const Run& r : runs) seconds.push_back(r.seconds);
  std::sort(seconds.begin(), seconds.end());
  const double median = seconds[seconds.size() / 2];

  std::ostringstream report;
  char line[160];
  report << "# rkv restart: table rebuild from RocksDB\n\n";
  report << "command: " << command << "\n";
  report << "started: " << started << " (UTC)\n";
  report << "machine: " << Machine() << "\n";
  report << "store:   " << FLAGS_keys << " keys of " << FLAGS_key_bytes << " bytes, values of "
         << FLAGS_value_bytes << " bytes, "
         << (FLAGS_reuse ? std::string("filled by an earlier run") : "filled in " + std::to_string(fill_seconds) + " s")
         << "\n";
  report << "table:   --max_keys=" << FLAGS_max_keys << " --memory=" << FLAGS_memory << "\n\n";
  report << "run  keys       seconds  keys/s\n";
  for (size_t i = 0; i < runs.size(); ++i) {
    std::snprintf(line, sizeof(line), "%-4zu %-10llu %-8.3f %.0f\n", i, static_cast<unsigned long long>(runs[i].keys),
                  runs[i].seconds, static_cast<double>(runs[i].keys) / runs[i].seconds);
    report << line;
  }
  std::snprintf(line, sizeof(line), "\nmedian: %llu keys in %.3f s = %.0f keys/s\n",
                static_cast<unsigned long long>(FLAGS_keys), median, static_cast<double>(FLAGS_keys) / median);
  report << line;

  std::cout << report.str();
  const std::string out = FLAGS_out.empty() ? "bench/results/restart-" + started + ".txt" : FLAGS_out;
  std::ofstream file(out);
  file << report.str();
  if (!file) {
    std::cerr << "cannot write " << out << "\n";
    return 1;
  }
  std::cerr << "report: " << out << "\n";
  return 0;
}

}  // namespace
}  // namespace rkv::server

int main(int argc, char** argv) {
  std::string command;
  for (int i = 0; i < argc; ++i) command += (i ? " " : "") + std::string(argv[i]);
  gflags::SetUsageMessage("times the table rebuild from RocksDB at server start");
  rkv::ParseProgramFlags(&argc, &argv, __FILE__);
  FLAGS_logtostderr = true;
  google::InitGoogleLogging(argv[0]);
  return rkv::server::Main(command);
}
