// rkv-ycsb's final figures in the formats --output_format names.
//
//   text  the summary on stdout (one line per kind of operation: count,
//         mean, p50, p90, p99, p99.9, max; for a workload with
//         read-modify-writes, the conflicts they retried) and, with
//         --output, one line
//         appended per run in the format bench/run-verbs.sh reads
//         (OutputLine; unchanged since the first release: GET and PUT
//         columns only; bench/compare reads json).
//   json  one object: the run's parameters, its totals (rmw_conflicts
//         among them, 0 without read-modify-writes) and, under "latency",
//         every kind of operation's figures. With --output, appended as
//         one line (JSON Lines).
//   csv   a header, then one row per kind of operation, each with the
//         run's totals (rmw_conflicts among them). With --output, the
//         header only when the file is empty.
// Latencies are in microseconds, from bench/ycsb/histogram.h (within
// 1/256 of a recorded value; max exact).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "bench/ycsb/op_runner.h"
#include "bench/ycsb/workload.h"
#include "rkv/status.h"

namespace rkv::bench {

enum class OutputFormat { kText, kJson, kCsv };

// "text", "json" or "csv"; INVALID_ARGUMENT otherwise.
StatusOr<OutputFormat> ParseOutputFormat(std::string_view name);

// What a report says about the run besides its figures.
struct RunParameters {
  std::string label;  // --label, or the target's kind
  std::string target;
  std::string server;  // --server, or the coordinator list
  Workload workload;
  KeyDistribution distribution = KeyDistribution::kUniform;
  uint64_t records = 0;
  uint64_t operations = 0;
  double duration_s = 0;
  uint64_t value_bytes = 0;
  int threads = 1;
  int batch = 1;
  double target_ops_per_s = 0;
  uint64_t seed = 1;
};

// A run's merged result and its length.
struct RunFigures {
  ThreadResult result;
  double run_s = 0;

  double OpsPerSecond() const;
};

// The kinds of operation a report lists: those of the workload, the
// batches with --batch > 1, and any other that has figures.
std::vector<OpType> ReportedOps(const RunParameters& params, const ThreadResult& result);

// Nanoseconds as microseconds with one decimal ("12.3").
std::string Micros(uint64_t nanos);

// The text summary's line for one kind ("" when it has no figures):
//   "  GET       1234 ok   mean ...  p50 ...  p90 ...  p99 ...  p99.9 ...  max ...  (us)"
std::string TextLatencyLine(OpType op, const Histogram& h);

// The text summary's line for the conflicts read-modify-writes retried
// ("" when the workload has none and none were met):
//   "  read-modify-write conflicts retried: 12"
std::string TextConflictsLine(const RunParameters& params, const ThreadResult& result);

// The --output line of the text format (no newline) and its header.
std::string OutputLine(const RunParameters& params, const RunFigures& figures);
std::string_view OutputLineHeader();

// The json object (no newline).
std::string JsonReport(const RunParameters& params, const RunFigures& figures);

// The csv header and rows (each line ending in a newline).
std::string CsvHeader();
std::string CsvRows(const RunParameters& params, const RunFigures& figures);

}  // namespace rkv::bench
