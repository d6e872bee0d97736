// Metric families and their rendering in the Prometheus text exposition
// format, version 0.0.4: what a scrape of GET /metrics returns
// (common/metrics/metrics_endpoint.h). Knows nothing of HTTP, of the server
// or of the coordinator: a process builds its families from the counters it
// already keeps, at scrape time, and renders them here.
//
// The text of one family:
//
//   # HELP rkv_server_operations_total Writes applied since start.
//   # TYPE rkv_server_operations_total counter
//   rkv_server_operations_total{op="put"} 42
//   rkv_server_operations_total{op="delete"} 3
//
// A histogram's series are cumulative: name_bucket{le="B"} counts the
// observations at or below B, up to le="+Inf" (all of them), then name_sum
// and name_count.
//
// Thread safety: plain values and pure functions; safe from any thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace rkv::metrics {

enum class MetricType { kCounter, kGauge, kHistogram };

struct Label {
  std::string name;   // [a-zA-Z_][a-zA-Z0-9_]*, not starting with "__"
  std::string value;  // any UTF-8; escaped when rendered
};

// One series of a counter or a gauge.
struct Sample {
  std::vector<Label> labels;
  double value = 0;
};

// One series of a histogram.
// Invariants: upper_bounds ascending, finite and distinct;
// bucket_counts.size() == upper_bounds.size() + 1, bucket_counts[i] being
// the observations in (upper_bounds[i-1], upper_bounds[i]] and the last
// those above every bound (not cumulative: the renderer accumulates them,
// so a process may keep one atomic counter per bucket).
struct HistogramSample {
  std::vector<Label> labels;
  std::vector<double> upper_bounds;
  std::vector<uint64_t> bucket_counts;
  double sum = 0;
};

// One metric family: a name, its help line, its type and its series
// (`samples` for counters and gauges, `histograms` for histograms; the
// other stays empty). A family without series renders its HELP and TYPE
// lines only.
struct MetricFamily {
  std::string name;  // [a-zA-Z_:][a-zA-Z0-9_:]*
  std::string help;  // one line for people; escaped when rendered
  MetricType type = MetricType::kGauge;
  std::vector<Sample> samples;
  std::vector<HistogramSample> histograms;
};

// The content type of what Render returns, as GET /metrics answers it.
inline constexpr char kContentType[] = "text/plain; version=0.0.4; charset=utf-8";

// True for a metric name of the format: [a-zA-Z_:][a-zA-Z0-9_:]*.
bool IsValidMetricName(std::string_view name);
// True for a label name: [a-zA-Z_][a-zA-Z0-9_]*, not starting with "__"
// (reserved for Prometheus's own labels).
bool IsValidLabelName(std::string_view name);

// A label value as it goes between the quotes: backslash, double quote
// and line feed escaped as \\, \" and \n.
std::string EscapeLabelValue(std::string_view value);
// A HELP text: backslash and line feed escaped as \\ and \n.
std::string EscapeHelp(std::string_view help);
// A sample value: integers (below 2^53) in plain digits, other finite
// values in their shortest round-trip form, and NaN, +Inf, -Inf.
std::string FormatValue(double value);

// The exposition text of `families`, in their order, each series in its
// order. INVALID_ARGUMENT, naming the family, for an invalid metric or
// label name, two families of one name, a label named twice in a series,
// series of the other kind than the family's type, a histogram whose
// bounds or counts break HistogramSample's invariants, or a label "le"
// on a histogram (the renderer adds it).
StatusOr<std::string> Render(const std::vector<MetricFamily>& families);

}  // namespace rkv::metrics
