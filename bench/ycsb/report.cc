#include "bench/ycsb/report.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>

namespace rkv::bench {
namespace {

// The percentiles every report gives, and their json / csv names.
struct Quantile {
  double p;
  std::string_view name;
};
constexpr Quantile kQuantiles[] = {{50, "p50_us"}, {90, "p90_us"}, {99, "p99_us"}, {99.9, "p99_9_us"}};

std::string JsonString(std::string_view s) {
  std::string out = "\"";
  for (const char ch : s) {
    const unsigned char c = static_cast<unsigned char>(ch);
    if (ch == '"' || ch == '\\') {
      out += '\\';
      out += ch;
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", c);
      out += buf;
    } else {
      out += ch;
    }
  }
  return out + "\"";
}

std::string Number(double v, const char* format = "%.6g") {
  char buf[64];
  std::snprintf(buf, sizeof(buf), format, v);
  return buf;
}

// A csv field: quoted when it holds a separator, a quote or a newline.
std::string CsvField(std::string_view s) {
  if (s.find_first_of(",\"\n") == std::string_view::npos) return std::string(s);
  std::string out = "\"";
  for (const char ch : s) {
    if (ch == '"') out += '"';
    out += ch;
  }
  return out + "\"";
}

// "p50_us p99_us" for the --output line, or "- -".
std::string OutputPercentiles(const Histogram& h) {
  if (h.count() == 0) return "- -";
  return Micros(h.Percentile(50)) + " " + Micros(h.Percentile(99));
}

}  // namespace

StatusOr<OutputFormat> ParseOutputFormat(std::string_view name) {
  if (name == "text") return OutputFormat::kText;
  if (name == "json") return OutputFormat::kJson;
  if (name == "csv") return OutputFormat::kCsv;
  return InvalidArgument("unknown output format '" + std::string(name) + "' (want text, json or csv)");
}

double RunFigures::OpsPerSecond() const { return static_cast<double>(result.ops) / std::max(run_s, 1e-9); }

std::vector<OpType> ReportedOps(const RunParameters& params, const ThreadResult& result) {
  std::vector<OpType> ops;
  for (OpType op : kAllOpTypes) {
    const bool wanted = op == OpType::kBatch ? params.batch > 1 : params.workload.Has(op);
    if (wanted || result.Of(op).count() > 0) ops.push_back(op);
  }
  return ops;
}

std::string Micros(uint64_t nanos) { return Number(static_cast<double>(nanos) / 1000.0, "%.1f"); }

std::string TextLatencyLine(OpType op, const Histogram& h) {
  if (h.count() == 0) return "";
  char line[256];
  std::snprintf(line, sizeof(line),
                "  %-6s %10" PRIu64 " ok   mean %8.1f  p50 %8s  p90 %8s  p99 %8s  p99.9 %8s  max %8s  (us)",
                std::string(OpLabel(op)).c_str(), h.count(), h.Mean() / 1000.0, Micros(h.Percentile(50)).c_str(),
                Micros(h.Percentile(90)).c_str(), Micros(h.Percentile(99)).c_str(),
                Micros(h.Percentile(99.9)).c_str(), Micros(h.max()).c_str());
  return line;
}

std::string TextConflictsLine(const RunParameters& params, const ThreadResult& result) {
  if (!params.workload.Has(OpType::kReadModifyWrite) && result.rmw_conflicts == 0) return "";
  return "  read-modify-write conflicts retried: " + std::to_string(result.rmw_conflicts);
}

std::string_view OutputLineHeader() {
  return "# target workload value_bytes threads ops ops_per_s get_p50_us get_p99_us "
         "put_p50_us put_p99_us errors batch batch_p50_us batch_p99_us";
}

std::string OutputLine(const RunParameters& params, const RunFigures& figures) {
  const ThreadResult& r = figures.result;
  return params.label + " " + std::string(params.workload.name) + " " + std::to_string(params.value_bytes) + " " +
         std::to_string(params.threads) + " " + std::to_string(r.ops) + " " +
         Number(figures.OpsPerSecond(), "%.0f") + " " + OutputPercentiles(r.Of(OpType::kRead)) + " " +
         OutputPercentiles(r.Of(OpType::kUpdate)) + " " + std::to_string(r.errors.Total()) + " " +
         std::to_string(params.batch) + " " +
         (params.batch > 1 ? OutputPercentiles(r.Of(OpType::kBatch)) : std::string("- -"));
}

std::string JsonReport(const RunParameters& params, const RunFigures& figures) {
  const ThreadResult& r = figures.result;
  std::string out = "{";
  out += "\"label\":" + JsonString(params.label);
  out += ",\"target\":" + JsonString(params.target);
  out += ",\"server\":" + JsonString(params.server);
  out += ",\"workload\":" + JsonString(params.workload.name);
  out += ",\"key_distribution\":" + JsonString(KeyDistributionName(params.distribution));
  out += ",\"records\":" + std::to_string(params.records);
  out += ",\"operations\":" + std::to_string(params.operations);
  out += ",\"duration_s\":" + Number(params.duration_s);
  out += ",\"value_bytes\":" + std::to_string(params.value_bytes);
  out += ",\"threads\":" + std::to_string(params.threads);
  out += ",\"batch\":" + std::to_string(params.batch);
  out += ",\"target_ops_per_s\":" + Number(params.target_ops_per_s, "%.0f");
  out += ",\"seed\":" + std::to_string(params.seed);
  out += ",\"run_s\":" + Number(figures.run_s, "%.3f");
  out += ",\"ops\":" + std::to_string(r.ops);
  out += ",\"ops_per_s\":" + Number(figures.OpsPerSecond(), "%.0f");
  out += ",\"unsent\":" + std::to_string(r.unsent);
  out += ",\"errors\":" + std::to_string(r.errors.Total());
  out += ",\"rmw_conflicts\":" + std::to_string(r.rmw_conflicts);
  out += ",\"latency\":{";
  bool first = true;
  for (OpType op : ReportedOps(params, r)) {
    const Histogram& h = r.Of(op);
    if (!first) out += ",";
    first = false;
    out += JsonString(OpName(op)) + ":{\"count\":" + std::to_string(h.count());
    out += ",\"mean_us\":" + Number(h.Mean() / 1000.0, "%.1f");
    for (const Quantile& q : kQuantiles) {
      out += ",\"" + std::string(q.name) + "\":" + Micros(h.Percentile(q.p));
    }
    out += ",\"max_us\":" + Micros(h.max()) + "}";
  }
  out += "}}";
  return out;
}

std::string CsvHeader() {
  std::string header =
      "label,target,workload,key_distribution,value_bytes,threads,batch,target_ops_per_s,run_s,ops,ops_per_s,"
      "errors,rmw_conflicts,op,count,mean_us";
  for (const Quantile& q : kQuantiles) header += "," + std::string(q.name);
  return header + ",max_us\n";
}

std::string CsvRows(const RunParameters& params, const RunFigures& figures) {
  const ThreadResult& r = figures.result;
  const std::string common = CsvField(params.label) + "," + CsvField(params.target) + "," +
                             CsvField(params.workload.name) + "," +
                             std::string(KeyDistributionName(params.distribution)) + "," +
                             std::to_string(params.value_bytes) + "," + std::to_string(params.threads) + "," +
                             std::to_string(params.batch) + "," + Number(params.target_ops_per_s, "%.0f") + "," +
                             Number(figures.run_s, "%.3f") + "," + std::to_string(r.ops) + "," +
                             Number(figures.OpsPerSecond(), "%.0f") + "," + std::to_string(r.errors.Total()) +
                             "," + std::to_string(r.rmw_conflicts);
  std::string rows;
  for (OpType op : ReportedOps(params, r)) {
    const Histogram& h = r.Of(op);
    rows += common + "," + std::string(OpName(op)) + "," + std::to_string(h.count()) + "," +
            Number(h.Mean() / 1000.0, "%.1f");
    for (const Quantile& q : kQuantiles) rows += "," + Micros(h.Percentile(q.p));
    rows += "," + Micros(h.max()) + "\n";
  }
  return rows;
}

}  // namespace rkv::bench
