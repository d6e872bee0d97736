#include "server/server_metrics.h"

#include <map>
#include <utility>

namespace rkv::server {

using metrics::MetricFamily;
using metrics::MetricType;

const std::vector<CounterMetric>& CounterMetrics() {
  constexpr MetricType kCounter = MetricType::kCounter;
  constexpr MetricType kGauge = MetricType::kGauge;
  // The entries of one family are adjacent; the first gives its help.
  static const std::vector<CounterMetric> kMetrics = {
      {"keys", "rkv_server_keys", kGauge, "Records in the table.", "", ""},
      {"puts", "rkv_server_operations_total", kCounter,
       "Client writes applied since start, by operation (GETs are one-sided reads the server does not see).", "op",
       "put"},
      {"deletes", "rkv_server_operations_total", kCounter, "", "op", "delete"},
      {"request_errors", "rkv_server_request_errors_total", kCounter,
       "Error replies since start (NOT_FOUND excluded).", "", ""},
      {"gets_served_by_cpu", "rkv_server_cpu_gets_total", kCounter,
       "GET lookups the server CPU answered: tcp clients' keys not in their location cache (0 on verbs, "
       "where GETs are one-sided reads).",
       "", ""},
      {"connections", "rkv_server_connections", kGauge, "Data-plane connections open now.", "", ""},
      {"connections_accepted", "rkv_server_connections_accepted_total", kCounter,
       "Data-plane connections accepted since start.", "", ""},
      {"connections_rejected", "rkv_server_connections_rejected_total", kCounter,
       "Data-plane connections refused since start.", "", ""},
      {"connections_probing", "rkv_server_connections_probing", kGauge,
       "Data-plane connections open now with a probe in flight (silent for --probe_idle_ms).", "", ""},
      {"connections_released_dead", "rkv_server_connections_released_dead_total", kCounter,
       "Data-plane connections released because a probe failed or went unanswered (peer gone).", "", ""},
      {"connect_requests_screened_out", "rkv_server_connect_requests_refused_total", kCounter,
       "Connection requests the listener refused before anything was made for them, by why: screened out (the "
       "connect checks; hellos answered with a challenge included) or source_limited (the source address was over "
       "--max_refusals_per_source, refused unchecked).",
       "why", "screened_out"},
      {"connect_requests_source_limited", "rkv_server_connect_requests_refused_total", kCounter, "", "why",
       "source_limited"},
      {"auth_failures", "rkv_server_auth_failures_total", kCounter,
       "Failed authentications since start: data-plane connections and Admin calls refused for their credential "
       "(none, unknown or revoked).",
       "", ""},
      {"polling_threads", "rkv_server_polling_threads", kGauge,
       "Data-plane polling threads (fixed, whatever the connections).", "", ""},
      {"bytes_per_connection", "rkv_server_connection_cost_bytes", kGauge,
       "Server memory one connection costs, beside the transport's.", "", ""},
      {"heap_bytes", "rkv_server_heap_size_bytes", kGauge, "Size of the heap region.", "", ""},
      {"heap_bytes_used", "rkv_server_heap_used_bytes", kGauge, "Heap bytes holding records.", "", ""},
      {"heap_bytes_quarantined", "rkv_server_heap_quarantined_bytes", kGauge,
       "Heap bytes freed but not yet reusable (grace period).", "", ""},
      {"store_unwritten_writes", "rkv_server_store_unwritten_writes", kGauge,
       "With --durability=none: acknowledged writes not yet in RocksDB (a crash loses them).", "", ""},
      {"store_unwritten_bytes", "rkv_server_store_unwritten_bytes", kGauge,
       "With --durability=none: bytes of the acknowledged writes not yet in RocksDB.", "", ""},
      {"store_write_stall_micros", "rkv_server_store_write_stall_seconds_total", kCounter,
       "Time RocksDB delayed or stopped writes (write stalls: too many memtables or level-0 files).", "", "", 1e-6},
      {"store_wal_bytes", "rkv_server_store_wal_written_bytes_total", kCounter,
       "Bytes RocksDB appended to its write-ahead log.", "", ""},
      {"forwarded_writes", "rkv_server_replication_forwarded_writes_total", kCounter,
       "Writes forwarded to backups as a primary.", "", ""},
      {"backup_failures", "rkv_server_replication_backup_failures_total", kCounter,
       "Backups that did not acknowledge a forwarded write.", "", ""},
      {"replica_writes", "rkv_server_replica_writes_total", kCounter,
       "Forwarded writes received as a backup, by outcome: installed, stale (acknowledged without a change, not "
       "newer) or refused (validation or policy).",
       "outcome", "installed"},
      {"replica_stale", "rkv_server_replica_writes_total", kCounter, "", "outcome", "stale"},
      {"replica_refused", "rkv_server_replica_writes_total", kCounter, "", "outcome", "refused"},
      {"conditions_failed", "rkv_server_conditions_failed_total", kCounter,
       "Conditional PUTs refused because the key was not as the condition asked (nothing written).", "", ""},
      {"expired_reclaimed", "rkv_server_expired_reclaimed_total", kCounter,
       "Expired records this server removed as their key's primary (the deletes replicate to the backups).", "",
       ""},
      {"lease_refusals", "rkv_server_lease_refusals_total", kCounter,
       "Client writes refused because the lease had expired.", "", ""},
      {"syncing_shards", "rkv_server_catchup_syncing_shards", kGauge, "Shards this server is catching up on now.", "",
       ""},
      {"catchup_records_listed", "rkv_server_catchup_records_listed_total", kCounter,
       "Catch-up: records received in FetchShard streams.", "", ""},
      {"catchup_values_fetched", "rkv_server_catchup_values_fetched_total", kCounter,
       "Catch-up: values received and installed.", "", ""},
      {"catchup_bytes_fetched", "rkv_server_catchup_fetched_bytes_total", kCounter,
       "Catch-up: bytes of keys and values received (what --catchup_rate_mb_per_s paces).", "", ""},
      {"catchup_syncs_completed", "rkv_server_catchup_syncs_completed_total", kCounter,
       "Catch-up: syncs reported caught up and accepted.", "", ""},
      {"catchup_sync_failures", "rkv_server_catchup_sync_failures_total", kCounter,
       "Catch-up: sync attempts abandoned (then retried).", "", ""},
      {"catchup_records_served", "rkv_server_catchup_records_served_total", kCounter,
       "Catch-up: records this server sent as a primary.", "", ""},
  };
  // One series a status code, after the rest.
  static const std::vector<CounterMetric> kWithCodes = [] {
    std::vector<CounterMetric> all = kMetrics;
    for (const ErrorReplyCounter& e : ErrorReplyCounters()) {
      all.push_back({e.counter, "rkv_server_error_replies_total", MetricType::kCounter,
                     all.back().family == "rkv_server_error_replies_total"
                         ? ""
                         : "Replies other than OK sent since start (clients' and forwarded writes), by status code.",
                     "code", e.code_name});
    }
    return all;
  }();
  return kWithCodes;
}

std::vector<MetricFamily> ServerMetricFamilies(const std::vector<AdminCounter>& counters,
                                               const ServerMetricsInfo& info) {
  std::map<std::string_view, const CounterMetric*> by_counter;
  std::map<std::string_view, std::string_view> help_of;  // family -> its first entry's help
  for (const CounterMetric& m : CounterMetrics()) {
    by_counter.emplace(m.counter, &m);
    help_of.emplace(m.family, m.help);
  }
  std::vector<MetricFamily> out;
  // The index in `out` of each family made so far.
  std::map<std::string, size_t> family_at;
  const auto family = [&](const std::string& name, MetricType type, std::string_view help) -> MetricFamily& {
    auto [it, added] = family_at.emplace(name, out.size());
    if (added) out.push_back({name, std::string(help), type, {}, {}});
    return out[it->second];
  };
  // In CounterMetrics' order, so that a family's series stay together
  // whatever order ServerCounters keeps.
  std::map<std::string_view, uint64_t> values;
  for (const AdminCounter& c : counters) values.emplace(c.name, c.value);
  for (const CounterMetric& m : CounterMetrics()) {
    const auto v = values.find(m.counter);
    if (v == values.end()) continue;
    MetricFamily& f = family(std::string(m.family), m.type, help_of[m.family]);
    metrics::Sample s;
    if (!m.label_name.empty()) s.labels.push_back({std::string(m.label_name), std::string(m.label_value)});
    s.value = static_cast<double>(v->second) * m.scale;
    f.samples.push_back(std::move(s));
  }
  for (const AdminCounter& c : counters) {
    if (by_counter.contains(c.name)) continue;
    family("rkv_server_" + std::string(c.name), MetricType::kGauge, c.help)
        .samples.push_back({{}, static_cast<double>(c.value)});
  }

  family("rkv_server_info", MetricType::kGauge, "Always 1: the server's id (empty when it has none) and transport.")
      .samples.push_back({{{"server_id", info.server_id}, {"transport", info.transport}}, 1});
  family("rkv_server_epoch", MetricType::kGauge, "The epoch of this incarnation (changes on every restart).")
      .samples.push_back({{}, static_cast<double>(info.epoch)});
  family("rkv_server_map_version", MetricType::kGauge,
         "Version of the cluster map the server follows (0: none, standalone or not yet received).")
      .samples.push_back({{}, static_cast<double>(info.map_version)});
  family("rkv_server_table_slots", MetricType::kGauge, "Slots of the table's index (buckets times slots per bucket).")
      .samples.push_back({{}, static_cast<double>(info.table_slots)});
  const auto keys = values.find("keys");
  const double fill = info.table_slots == 0 || keys == values.end()
                          ? 0
                          : static_cast<double>(keys->second) / static_cast<double>(info.table_slots);
  family("rkv_server_table_fill_ratio", MetricType::kGauge, "Records in the table divided by its index slots.")
      .samples.push_back({{}, fill});
  MetricFamily& apply = family("rkv_server_apply_seconds", MetricType::kHistogram,
                               "Time from the start of a write's apply to its reply, the group commit's sync "
                               "included, by where the write came from (a client, or a primary forwarding it).");
  apply.histograms.push_back(LatencySample(info.client_apply, {{"from", "client"}}));
  apply.histograms.push_back(LatencySample(info.replica_apply, {{"from", "replica"}}));
  MetricFamily& by_credential =
      family("rkv_server_client_connections_accepted_total", MetricType::kCounter,
             "Client connections accepted since start, by the name of the client credential they presented "
             "(--token_file's is \"token\"; names from --client_credentials_file).");
  for (const auto& [name, count] : info.connections_by_credential) {
    by_credential.samples.push_back({{{"credential", name}}, static_cast<double>(count)});
  }
  return out;
}

metrics::HistogramSample LatencySample(const LatencyHistogram::Counts& counts, std::vector<metrics::Label> labels) {
  metrics::HistogramSample h;
  h.labels = std::move(labels);
  for (const uint64_t us : LatencyHistogram::kUpperBoundsUs) h.upper_bounds.push_back(static_cast<double>(us) / 1e6);
  h.bucket_counts.assign(counts.buckets.begin(), counts.buckets.end());
  h.sum = static_cast<double>(counts.sum_ns) / 1e9;
  return h;
}

}  // namespace rkv::server
