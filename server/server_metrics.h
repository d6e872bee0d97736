// What rkv-server's GET /metrics answers (--metrics_listen): the counters
// of its Admin Stats (ServerCounters, server/admin_service.h), each under a
// Prometheus name, with the server's identity, map version and table size
// beside them. A scrape reads what Admin Stats reads, in the same way:
// relaxed loads of the apply path's atomic counters, and the key count and
// heap usage under Applier::table_mu_ for a moment, as `kvctl stats` does;
// nothing is added to the data path.
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/latency_histogram.h"
#include "common/metrics/exposition.h"
#include "server/admin_service.h"

namespace rkv::server {

// How one Admin Stats counter is exported: the family, its type and help,
// and the label that tells its series from the family's others (empty:
// the family has this one series).
struct CounterMetric {
  std::string_view counter;  // AdminCounter::name
  std::string_view family;
  metrics::MetricType type;
  std::string_view help;
  std::string_view label_name;
  std::string_view label_value;
  // The counter's value times this is the metric's (a counter in
  // microseconds exported in seconds, the base unit).
  double scale = 1;
};

// Every Admin Stats counter's export, one entry per counter name that
// ServerCounters returns (a test holds the two lists together).
const std::vector<CounterMetric>& CounterMetrics();

// What the metrics show besides the counters.
struct ServerMetricsInfo {
  std::string server_id;  // "" for a standalone server without an identity
  std::string transport;  // "tcp" or "verbs"
  uint64_t epoch = 0;
  uint64_t map_version = 0;  // the cluster map it follows; 0 for none (yet)
  uint64_t table_slots = 0;  // slots of the index: buckets * kSlotsPerBucket
  // Server::apply_latency(): clients' writes and forwarded writes.
  LatencyHistogram::Counts client_apply;
  LatencyHistogram::Counts replica_apply;
  // ServerStats::connections_by_credential: client connections accepted,
  // by credential name (bounded by Server::kMaxCredentialSeries).
  std::vector<std::pair<std::string, uint64_t>> connections_by_credential;
};

// A LatencyHistogram's counts as one series of a histogram in seconds.
metrics::HistogramSample LatencySample(const LatencyHistogram::Counts& counts, std::vector<metrics::Label> labels);

// The families of one scrape: each counter of `counters` under its
// CounterMetrics entry (a counter without one, under rkv_server_<name>
// as a gauge with its Admin help), then rkv_server_info, _epoch,
// _map_version, _table_slots, _table_fill_ratio, the histogram
// rkv_server_apply_seconds{from="client"|"replica"} and
// rkv_server_client_connections_accepted_total{credential="NAME"}.
std::vector<metrics::MetricFamily> ServerMetricFamilies(const std::vector<AdminCounter>& counters,
                                                        const ServerMetricsInfo& info);

}  // namespace rkv::server
